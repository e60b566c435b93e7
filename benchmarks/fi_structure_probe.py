"""Our decode times against a kernel of FlashInfer's structure, timed in the same run.

The issue's decode targets compare our op with FlashInfer's times in `../shared/anchors/h200.md`,
measured in another run (FlashInfer is not installed on the GPU machine). This builds
`fi_structure_probe.cu` (FlashInfer's structure as read in benchmarks/NOTES.md v31: one row per
CTA, H / 8 threads, float sum of squares, no cache hints, release after the last store) and
variants that add our kernel's choices one at a time, then variants that move it toward the
op's lean kernel one difference in the code around the math at a time (the .cu file lists
them), checks their outputs against the op's, and times them beside the op and the
benchmark's same-bytes copy (CUDA-graph replays, `time_cuda`). PDL follows FP8NORM_PDL for the op and the probe alike.
A measurement only; needs CUDA (sm_90 for PDL), bf16, H a multiple of 128 up to 8192.

    FP8NORM_PDL=1 python benchmarks/fi_structure_probe.py [MxH ...] [--json F]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

import torch
from torch.utils.cpp_extension import load

from bench_fused_add_rmsnorm_fp8_block_quant import (byte_count, column_major_scales, copy_buffers,
                                                     time_copies, time_cuda)

VARIANTS = ["F", "F+exact", "+dsum", "+bfly", "+hint", "+wlate",  # fi_structure_probe.cu, kernel_of
            "B", "+early", "+args", "+strides", "+flags"]                 # ... toward the op (v34)
DEFAULT = ["1x2048", "1x4096", "1x7168", "1x8192", "16x8192", "128x2048", "128x4096", "128x7168",
           "128x8192"]


def build():
    here = os.path.dirname(os.path.abspath(__file__))
    return load(name="fi_structure_probe", sources=[os.path.join(here, "fi_structure_probe.cu")],
                extra_cuda_cflags=["-O3", "-gencode=arch=compute_90a,code=sm_90a"],
                build_directory=os.environ.get("FI_PROBE_BUILD") or None, verbose=False)


def check(ext, m, h, pdl):
    """Each variant's outputs against the op's, from the same residual, outputs poisoned: the new
    residual equal, normed and scales within one bf16 ulp (a float rstd may move a normed value
    and so an amax by one), fp8 bytes mostly equal (under 1%). Returns the share of fp8
    bytes that differ, per variant."""
    g = torch.Generator(device="cpu").manual_seed(m * 31 + h)
    x = torch.randn(m, h, generator=g).bfloat16().cuda()
    r0 = torch.randn(m, h, generator=g).bfloat16().cuda()
    w = (torch.randn(h, generator=g) * 0.5 + 1).bfloat16().cuda()
    op = torch.ops.fp8norm.fused_add_rmsnorm_fp8_block_quant.out
    r = r0.clone()
    out = torch.full((m, h), 7.0, device="cuda").to(torch.float8_e4m3fn)
    sc = column_major_scales(m, h, "cuda").fill_(float("nan"))
    nrm = torch.full((m, h), float("nan"), device="cuda").bfloat16()
    op(x, r, w, 1e-6, False, out=out, block_scale=sc, normed_out=nrm)
    diffs = {}
    for v, name in enumerate(VARIANTS):
        rr = r0.clone()
        n2 = torch.full_like(nrm, float("nan"))
        q2 = torch.full_like(out.view(torch.uint8), 0x7F).view(torch.float8_e4m3fn)
        s2 = torch.full((m * (h // 128),), float("nan"), device="cuda")
        ext.run(x, rr, w, n2, q2, s2, 1e-6, v, pdl)
        torch.cuda.synchronize()
        assert torch.equal(rr, r), f"{name}: residual"
        torch.testing.assert_close(n2.float(), nrm.float(), rtol=2 ** -7, atol=0, msg=f"{name}: normed")
        torch.testing.assert_close(s2.view(h // 128, m).t(), sc, rtol=2 ** -7, atol=0, msg=f"{name}: scale")
        diffs[name] = (q2.view(torch.uint8) != out.view(torch.uint8)).float().mean().item()
        assert diffs[name] < 0.01, f"{name}: {diffs[name]:.4f} of the fp8 bytes differ"
    return diffs


def time_shape(ext, m, h, pdl, passes=2, calls=20, replays=15):
    x, r, nrm = (torch.randn(m, h, device="cuda").bfloat16() for _ in range(3))
    w = (torch.randn(h, device="cuda") * 0.5 + 1).bfloat16()
    out = torch.empty(m, h, device="cuda", dtype=torch.float8_e4m3fn)
    sc = column_major_scales(m, h, "cuda")
    s2 = torch.empty(m * (h // 128), device="cuda")
    op = torch.ops.fp8norm.fused_add_rmsnorm_fp8_block_quant.out
    src, dst = copy_buffers(byte_count(m, h, torch.bfloat16), "cuda")
    fns = {"op": lambda: op(x, r, w, 1e-6, False, out=out, block_scale=sc, normed_out=nrm)}
    for v, name in enumerate(VARIANTS):
        fns[name] = lambda v=v: ext.run(x, r, w, nrm, out, s2, 1e-6, v, pdl)
    t = {k: [] for k in ["copy", *fns]}
    for p in range(passes):
        t["copy"].append(min(time_copies(src, dst, time_cuda, calls, replays)))
        order = list(fns) if p % 2 == 0 else list(reversed(fns))
        for k in order:
            t[k].append(time_cuda(fns[k], calls, replays))
    return {k: statistics.median(v) for k, v in t.items()}, t


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("shapes", nargs="*", default=DEFAULT)
    p.add_argument("--passes", type=int, default=2)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    pdl = os.environ.get("FP8NORM_PDL", "1") != "0"
    ext = build()
    recs = []
    cols = ["copy", "op", *VARIANTS]
    print(f"PDL {'on' if pdl else 'off'}; µs, median of {args.passes} passes; ratio = op / F")
    print("| M | H | " + " | ".join(cols) + " | op / F | fp8 bytes differing (F) |")
    print("|" + "---|" * (len(cols) + 4))
    for s in args.shapes:
        m, h = (int(v) for v in s.split("x"))
        diffs = check(ext, m, h, pdl)
        med, all_t = time_shape(ext, m, h, pdl, args.passes)
        recs.append(dict(M=m, H=h, pdl=pdl, us=med, passes=all_t, fp8_diff=diffs))
        print(f"| {m} | {h} | " + " | ".join(f"{med[c]:.3f}" for c in cols) +
              f" | {med['op'] / med['F']:.3f} | {diffs['F']:.5f} |")
        sys.stdout.flush()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(name="fi_structure_probe", pdl=pdl, variants=VARIANTS, records=recs), f, indent=1)


if __name__ == "__main__":
    main()
