"""The op's time by block_scale layout: is the column-major scale stores' cost (benchmarks/NOTES.md,
v27 item 4: 1.8-3.6% of the op) tied to the column stride's address pattern (DRAM pages, L2 slices:
v6's write-back locality hypothesis) or to column-major stores as such?

For each M x H (bf16), same run, with and then without normed_out: two passes over the layouts
(A B C D E A B C D E), µs per call and the % of a copy of the same bytes:
  col M          the ops' own layout: column-major, column stride round_up(M, 4) floats
  col M+32       column stride padded by 128 bytes (whole lines still: the v26 line policy on)
  col M+256      padded by 1 KiB
  col M+1056     padded by 4 KiB + 128 bytes
  row-major      stride (H/128, 1): a row's scales contiguous (no line policy)
Before timing, every layout's block scales are checked equal to the ops' layout's.

    python benchmarks/scale_layout_probe.py [MxH ...]          (CUDA; default 16384x4096 16384x16384)
    python benchmarks/scale_layout_probe.py --check [MxH ...]  (only the equality check; CPU works)
"""
from __future__ import annotations

import os
import sys

import torch

import torch_fp8norm
from bench_fused_add_rmsnorm_fp8_block_quant import copy_buffers, print_probe_rows, time_copies, time_cuda

PADS = (0, 32, 256, 1056)
REPS = 15


def layouts(m: int, nblocks: int, device):
    """(name, block_scale) for each layout, uninitialized."""
    stride = torch_fp8norm.block_scale_layout_strides(m)[1]
    out = []
    for pad in PADS:
        base = torch.empty(nblocks, stride + pad, dtype=torch.float32, device=device)
        out.append((f"col M+{pad}" if pad else "col M", base[:, :m].t()))
    out.append(("row-major", torch.empty(m, nblocks, dtype=torch.float32, device=device)))
    return out


def main(argv):
    check_only = "--check" in argv
    shapes = [a for a in argv if a != "--check"] or ["16384x4096", "16384x16384"]
    device = "cpu" if check_only and not torch.cuda.is_available() else "cuda"
    op = torch.ops.fp8norm.fused_add_rmsnorm_fp8_block_quant.out
    print("build:", os.path.dirname(torch_fp8norm.__file__), "device:", device)
    for shape in shapes:
        m, h = (int(v) for v in shape.split("x"))
        nb = h // 128
        x, normed = (torch.randn(m, h, device=device).to(torch.bfloat16) for _ in range(2))
        r0 = torch.randn(m, h, device=device).to(torch.bfloat16)
        r = r0.clone()
        w = (torch.randn(h, device=device) * 0.5 + 1).to(torch.bfloat16)
        out = torch.empty(m, h, dtype=torch.float8_e4m3fn, device=device)
        lays = layouts(m, nb, device)
        ref = None
        for name, scale in lays:  # the same inputs (residual restored) give the same scales
            r.copy_(r0)
            scale.fill_(float("nan"))
            op(x, r, w, 1e-6, False, out=out, block_scale=scale, normed_out=normed)
            if ref is None:
                ref = scale.clone()
            elif not torch.equal(scale, ref):
                raise SystemExit(f"{shape}: block scales in layout '{name}' differ from the ops' layout")
        print(f"M = {m}, H = {h}: block scales equal in all {len(lays)} layouts")
        if check_only:
            continue
        for normed_out, per_elem, tag in ((normed, 9, "with normed_out"), (None, 7, "without normed_out")):
            src, dst = copy_buffers(per_elem * m * h + 4 * m * nb + 2 * h, device)
            # The benchmark's copy, the faster of memcpy and kernel copy (the memcpy alone read
            # ~1.5x slow at 16384 x 4096 with normed_out in v28 / v29: "145% of copy").
            def copy_time():
                return min(time_copies(src, dst, time_cuda, 20, REPS))

            copy_us = copy_time()
            rows = []
            for p in (1, 2):
                for name, scale in lays:
                    t = time_cuda(lambda: op(x, r, w, 1e-6, False, out=out, block_scale=scale,
                                             normed_out=normed_out), 20, REPS)
                    rows.append((f"{name} (pass {p})", t))
            copy_us = min(copy_us, copy_time())  # again after the op's runs, the faster taken
            del src, dst
            print(tag)
            print_probe_rows(m, h, rows, copy_us)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main(sys.argv[1:])
