"""Calls the fused op a few times per shape, for a profiler (ncu / nsys) to look at.

    ncu -k regex:fused_add --cache-control none --clock-control none \
        python3 benchmarks/profile_shapes.py 1x2048 1x16384 2048x4096 16384x4096
Shapes are MxH (bf16). Each shape runs CALLS (default 3) times.
"""
import os
import sys

import torch

import torch_fp8norm  # noqa: F401


def main(shapes):
    calls = int(os.environ.get("CALLS", "3"))
    op = torch.ops.fp8norm.fused_add_rmsnorm_fp8_block_quant.out
    for s in shapes:
        m, h = (int(v) for v in s.split("x"))
        x = torch.randn(m, h, device="cuda", dtype=torch.bfloat16)
        r = torch.randn(m, h, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(h, device="cuda", dtype=torch.bfloat16)
        out = torch.empty(m, h, dtype=torch.float8_e4m3fn, device="cuda")
        scale = torch.empty(h // 128, (m + 3) // 4 * 4, device="cuda").t()[:m]
        normed = torch.empty(m, h, dtype=torch.bfloat16, device="cuda")
        for _ in range(calls):
            op(x, r, w, 1e-6, False, out=out, block_scale=scale, normed_out=normed)
        torch.cuda.synchronize()
    print("profiled", shapes)


if __name__ == "__main__":
    main(sys.argv[1:])
