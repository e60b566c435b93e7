"""The CUDA launch policy (csrc/cuda/launch_policy.cpp), a pure function, run on CPU over a grid
of problems and devices and compared with the checked-in tests/golden/launch_plans.txt: a change
of policy is a visible diff. After an intended change, regenerate the file with
    FP8NORM_UPDATE_GOLDEN=1 python -m pytest -q tests/test_launch_policy.py
and review the diff."""
import itertools
import os
import pathlib

import pytest
import torch

import torch_fp8norm  # noqa: F401  (registers torch.ops.fp8norm)

GOLDEN = pathlib.Path(__file__).parent / "golden" / "launch_plans.txt"
H200 = dict(sms=132, image_arch=90, l2_bytes=60 << 20, max_smem=227 << 10)
A100 = dict(sms=108, image_arch=80, l2_bytes=40 << 20, max_smem=163 << 10)
# An H200 running compute_80 PTX (a build without sm_90 code): no sm_90 feature in its plans.
H200_PTX80 = dict(H200, image_arch=80)

MS = [1, 3, 16, 128, 512, 2048, 4096, 16384]
HS = [128, 512, 1152, 1408, 2048, 2176, 4096, 5120, 7168, 8192, 16384, 32768, 65536]
OPS = [(True, True), (True, False), (False, True), (False, False)]  # (residual, normed)
ARGS = ("rows", "hidden", "elem_size", "residual", "normed", "aligned", "weight_fp32", "one_stride", "scale_lines",
        "sms", "image_arch", "l2_bytes", "max_smem", "pdl")  # fp8norm._launch_plan's, in order (then force
                                                             # and sum_f32, keyword arguments here)


def problems():
    """(label, kwargs of fp8norm._launch_plan) for the grid."""
    base = dict(aligned=True, weight_fp32=False, one_stride=True, scale_lines=True, pdl=True)
    for es, (res, normed), m, h in itertools.product([2, 4], OPS, MS, HS):
        yield "h200", dict(rows=m, hidden=h, elem_size=es, residual=res, normed=normed, **{**base, "one_stride": normed}, **H200)
    variants = [
        ("h200 unaligned", dict(base, aligned=False, one_stride=False), H200),
        ("h200 weight_fp32", dict(base, weight_fp32=True), H200),
        ("h200 row-major scales", dict(base, scale_lines=False), H200),
        ("h200 no pdl", dict(base, pdl=False), H200),
        ("a100", base, A100),
        ("h200 compute_80 image", base, H200_PTX80),
        ("h200 float32 sum", dict(base, sum_f32=True), H200),  # norm_convention vllm, flashinfer
    ]
    for (label, opts, dev), m, h in itertools.product(variants, MS, HS):
        yield label, dict(rows=m, hidden=h, elem_size=2, residual=True, normed=True, **opts, **dev)


def plan_line(label, kw):
    plan = torch.ops.fp8norm._launch_plan(*(kw[a] for a in ARGS), sum_f32=kw.get("sum_f32", False))
    op = ("fused" if kw["residual"] else "plain") + ("" if kw["normed"] else " no-normed")
    return f"{label} es={kw['elem_size']} {op} {kw['rows']}x{kw['hidden']}: {plan}", plan


def test_policy_matches_golden():
    lines = [plan_line(label, kw)[0] for label, kw in problems()]
    text = "\n".join(lines) + "\n"
    if os.environ.get("FP8NORM_UPDATE_GOLDEN") == "1":
        GOLDEN.write_text(text)
    want = GOLDEN.read_text().splitlines()
    diff = [f"- {w}\n+ {g}" for w, g in zip(want, lines) if w != g]
    assert len(want) == len(lines) and not diff, (
        f"the launch policy changed ({len(diff)} plans; lines {len(want)} -> {len(lines)}); if intended, "
        "regenerate tests/golden/launch_plans.txt (FP8NORM_UPDATE_GOLDEN=1) and review its diff:\n"
        + "\n".join(diff[:20]))


def test_every_plan_is_runnable():
    # The planned kernel passes the policy's own check for a forced kernel, and forcing it gives
    # the same plan: the policy never plans a kernel that cannot run the problem.
    for label, kw in problems():
        _, plan = plan_line(label, kw)
        kernel = plan.split()[0].split("=")[1]
        assert torch.ops.fp8norm._launch_plan(*(kw[a] for a in ARGS), kernel, kw.get("sum_f32", False)) == plan, (
            label, kw)


def test_plan_invariants():
    for label, kw in problems():
        _, plan = plan_line(label, kw)
        f = dict(kv.split("=") for kv in plan.split())
        threads, rows_per_cta, cluster = int(f["threads"]), int(f["rows_per_cta"]), int(f["cluster"])
        assert 1 <= threads * rows_per_cta <= 1024 and threads % 16 == 0, (label, kw, plan)
        assert 1 <= cluster <= 8 and int(f["smem"]) <= kw["max_smem"], (label, kw, plan)
        assert int(f["ctas"]) == -(-kw["rows"] // rows_per_cta) * cluster, (label, kw, plan)
        if f["kernel"].startswith("row"):
            assert kw["aligned"] and rows_per_cta == 1 and cluster == 1 and f["tiles"] == "1", (label, kw, plan)
        if kw["image_arch"] < 90:
            # No sm_90 instruction in the kernels: no cluster, PDL, L2 prefetch or eviction hint.
            assert cluster == 1 and f["pdl"] == "0" and f["prefetch_ctas"] == "0", (label, kw, plan)
            assert f["prefetch_tiles"] == "0" and f["scale_keep_rows"] == "0", (label, kw, plan)


def test_bad_arguments_and_forced_kernels():
    with pytest.raises(RuntimeError, match="multiple of 128"):
        torch.ops.fp8norm._launch_plan(1, 100, 2, True, True, True, False, False, False, 132, 90, 1 << 20, 1 << 17, True)
    with pytest.raises(RuntimeError, match="no kernel named"):
        torch.ops.fp8norm._launch_plan(1, 128, 2, True, True, True, False, False, False, 132, 90, 1 << 20, 1 << 17, True,
                                       "warp")
    with pytest.raises(RuntimeError, match="cannot run this call"):  # row kernels need aligned rows
        torch.ops.fp8norm._launch_plan(1, 128, 2, True, True, False, False, False, False, 132, 90, 1 << 20, 1 << 17,
                                       True, "row")
    with pytest.raises(RuntimeError, match="clusters need kernels built for sm_90"):  # a compute_80 image
        torch.ops.fp8norm._launch_plan(1, 8192, 2, True, True, True, False, False, False, 132, 80, 1 << 20, 1 << 17,
                                       True, "cluster1")
    if torch_fp8norm.has_cuda_kernels():  # the hook of CUDA launches, in the CUDA library
        with pytest.raises(RuntimeError, match="no kernel named"):
            torch.ops.fp8norm._force_kernel("nope")
