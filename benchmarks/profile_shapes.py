"""Calls the fused op a few times per shape, for a profiler (ncu / nsys) to look at.

    ncu -k regex:fused_add --cache-control none --clock-control none \
        python3 benchmarks/profile_shapes.py 1x2048 1x16384 2048x4096 16384x4096
Shapes are MxH (bf16). Each shape runs CALLS (default 3) times; with COPY=1 each shape also runs
a copy of the same bytes (torch.bitwise_or(src, 0, out=dst), the benchmark's copy kernel) as
often, to compare DRAM counters with it (ncu -k regex:"fused_add|elementwise"). SCALE=row: block
scales row-major (M, H / 128) instead of the DeepSeek-style column-major layout. NORMED=0: the op
without normed_out (7 bytes per element instead of 9).
"""
import os
import sys

import torch

import torch_fp8norm  # noqa: F401
from bench_fused_add_rmsnorm_fp8_block_quant import byte_count, column_major_scales, copy_buffers


def main(shapes):
    calls = int(os.environ.get("CALLS", "3"))
    op = torch.ops.fp8norm.fused_add_rmsnorm_fp8_block_quant.out
    for s in shapes:
        m, h = (int(v) for v in s.split("x"))
        x = torch.randn(m, h, device="cuda", dtype=torch.bfloat16)
        r = torch.randn(m, h, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(h, device="cuda", dtype=torch.bfloat16)
        out = torch.empty(m, h, dtype=torch.float8_e4m3fn, device="cuda")
        if os.environ.get("SCALE") == "row":  # row-major block scales (default: column-major)
            scale = torch.empty(m, h // 128, device="cuda")
        else:
            scale = column_major_scales(m, h, "cuda")
        normed = None if os.environ.get("NORMED") == "0" else torch.empty(m, h, dtype=torch.bfloat16, device="cuda")
        for _ in range(calls):
            op(x, r, w, 1e-6, False, out=out, block_scale=scale, normed_out=normed)
        if os.environ.get("COPY") == "1":
            src, dst = copy_buffers(byte_count(m, h, torch.bfloat16), "cuda")
            for _ in range(calls):
                torch.bitwise_or(src, 0, out=dst)
        torch.cuda.synchronize()
    print("profiled", shapes)


if __name__ == "__main__":
    main(sys.argv[1:])
