"""Every CUDA kernel of the launch policy (csrc/cuda/launch_policy.h), forced through the test
hook on the shapes that exercise it, against the whole contract: lanes past a row's end, rows
past M in the last CTA, several tiles with and without the shared-memory stash, uneven cluster
slices, the block-scale L2 line policy (many rows, column-major scales of whole 128-byte lines),
the L2 prefetch of later rows, unaligned rows, every op option. And which kernel the policy
takes for a few shapes on this GPU, and a run without programmatic dependent launch."""
import os
import subprocess
import sys

import pytest
import torch

from torch_fp8norm.reference import NORM_CONVENTIONS

from fp8norm_testing import LAYOUTS, Case, check_case, forced_kernel, kernel_image_arch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")

bf16, fp16, fp32 = torch.bfloat16, torch.float16, torch.float32

# kernel -> [(dtype, M, H, pad, extra Case options)]; pad 1: unaligned rows (tile kernels only).
CASES = {
    "row": [(bf16, 1, 2176, 0, {}), (bf16, 2041, 2176, 0, dict(layout="scaled_mm")), (fp16, 5, 1152, 128, {}),
            (fp32, 33, 1152, 0, dict(normed_none=True)), (bf16, 7, 896, 0, dict(fused=False, weight_fp32=True)),
            (bf16, 1, 2048, 0, {}), (bf16, 128, 8192, 0, dict(normed_none=True)), (fp32, 257, 1024, 0, {}),
            (bf16, 4096, 2048, 0, dict(layout="tma")), (fp16, 3, 4096, 128, dict(fused=False))],
    "row_narrow": [(bf16, 1, 1152, 0, {}), (bf16, 300, 1408, 0, dict(normed_none=True)),
                   (fp16, 64, 1920, 128, dict(fused=False, weight_fp32=True))],
    "row_four": [(bf16, 2047, 4096, 0, dict(layout="scaled_mm")), (bf16, 4096, 8192, 0, dict(layout="tma")),
                 (fp32, 1031, 4096, 128, dict(normed_none=True, layout="row_major")),
                 (bf16, 531, 16384, 0, dict(fused=False, weight_fp32=True)), (fp16, 3, 2048, 0, {})],
    "tile1": [(bf16, 5, 4096, 1, {}), (bf16, 1024, 128, 0, {}), (fp32, 2, 65536, 0, dict(normed_none=True)),
              (fp16, 9, 1152, 1, dict(fused=False)), (bf16, 3, 65536, 128, dict(weight_fp32=True))],
    "tile4": [(bf16, 2041, 2048, 0, dict(layout="tma")), (bf16, 4096, 8192, 0, dict(layout="tma")),
              (bf16, 3, 32768, 1, {}), (fp32, 130, 16384, 1, dict(normed_none=True)),
              (fp16, 1000, 1024, 0, dict(fused=False, layout="row_major")), (bf16, 2, 131072, 0, {})],
    "half_tile1": [(bf16, 5, 384, 0, {}), (fp16, 1001, 896, 1, dict(normed_none=True)), (bf16, 64, 640, 0, {})],
    "half_tile4": [(bf16, 2047, 1152, 0, dict(layout="tma")), (fp16, 3, 1152, 1, {}),
                   (bf16, 4099, 1408, 0, dict(fused=False, weight_fp32=True))],
    "cluster1": [(bf16, 1, 16384, 0, {}), (bf16, 3, 1408, 0, {}), (fp32, 5, 5120, 1, dict(normed_none=True)),
                 (fp16, 16, 8192, 128, dict(fused=False))],
    "cluster4": [(bf16, 133, 65536, 0, {}), (bf16, 16, 65536, 1, dict(normed_none=True)),
                 (fp32, 2, 32768, 128, dict(weight_fp32=True)), (bf16, 1, 1152, 0, {})],
}


def kernel_cases():
    for kernel, cases in CASES.items():
        for i, (dtype, m, h, pad, opts) in enumerate(cases):
            opts = {"ue8m0": i % 2 == 1, "layout": LAYOUTS[i % len(LAYOUTS)], **opts}
            for conv in NORM_CONVENTIONS:  # the float32 sum's kernels (vllm, flashinfer) too
                yield pytest.param(kernel, Case("cuda", dtype, m, h, pad=pad, norm_convention=conv, **opts),
                                   id=f"{kernel}-{str(dtype)[6:]}-{m}x{h}-pad{pad}-{conv}")


@pytest.mark.parametrize("kernel,case", list(kernel_cases()))
def test_forced_kernel(kernel, case):
    with forced_kernel(kernel):
        check_case(case)


def test_forced_kernel_that_cannot_run_raises():
    x = torch.randn(2, 256, device="cuda", dtype=bf16)[:, 1:129]  # rows not 16-byte aligned
    with forced_kernel("row"), pytest.raises(RuntimeError, match="cannot run this call"):
        torch.ops.fp8norm.rmsnorm_fp8_block_quant(x, torch.ones(128, device="cuda", dtype=bf16))


def _planned_kernel(m, h, dtype, fused=True, normed=True):
    p = torch.cuda.get_device_properties(0)
    es = torch.empty((), dtype=dtype).element_size()
    plan = torch.ops.fp8norm._launch_plan(m, h, es, fused, normed, True, False, normed, True, p.multi_processor_count,
                                          kernel_image_arch(), p.L2_cache_size, 227 << 10, True)
    return plan.split()[0].split("=")[1]


def test_policy_on_this_gpu():
    # The contract tests run whatever the policy picks; these shapes pin a few of its choices on
    # an H100 / H200 (132 SMs), so that the default launches cover each family.
    if torch.cuda.get_device_properties(0).multi_processor_count != 132:
        pytest.skip("shapes chosen for a GPU of 132 SMs")
    assert _planned_kernel(1, 2048, bf16) == "row"
    assert _planned_kernel(1, 1152, bf16) == "row_narrow"
    if kernel_image_arch() >= 90:
        assert _planned_kernel(1, 16384, bf16) == "cluster1"
    assert _planned_kernel(2048, 4096, bf16) == "row_four"
    assert _planned_kernel(16384, 8192, bf16) == "tile4"
    assert _planned_kernel(128, 512, bf16) == "tile1"


def test_kernel_image_arch():
    # The driver loads the cubin of this GPU's architecture, else JIT-compiles the newest PTX at
    # or below it: never code for a newer architecture, never below the build's oldest (sm_80).
    major, minor = torch.cuda.get_device_capability(0)
    assert 80 <= kernel_image_arch() <= 10 * major + minor


def test_without_pdl():
    # FP8NORM_PDL is read once per process: a fresh interpreter, a few cases of each family.
    code = """
import torch, sys
sys.path.insert(0, "tests")
from fp8norm_testing import Case, check_case
for m, h in [(1, 2048), (1, 16384), (2048, 4096), (16384, 2048), (3, 65536), (5, 1152)]:
    check_case(Case("cuda", torch.bfloat16, m, h))
print("ok")
"""
    env = dict(os.environ, FP8NORM_PDL="0")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    run = subprocess.run([sys.executable, "-c", code], env=env, cwd=root, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0 and "ok" in run.stdout, run.stdout + run.stderr
