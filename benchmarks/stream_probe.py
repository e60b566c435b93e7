"""Does updating the residual in place cost time at large M, bytes being equal?

The op reads input and residual and writes residual (in place), normed and fp8: 9 bytes per bf16
element, the same as a copy of that many bytes, yet it keeps the L2 fabric busy ~10% longer than
the copy (benchmarks/NOTES.md, v6). This times two Triton kernels with exactly the op's streams
and no arithmetic beyond an add: `inplace` writes the sum back over the residual (the op's
pattern), `separate` writes it to a third buffer (same bytes), beside the benchmark's same-bytes
copy. `no normed` leaves out the bf16 normed stream (7 bytes per element, the op with
`normed_out=None`): its time over `inplace`'s is the streams' own share of that target (v23).
`+ scales (column-major)` / `(row-major)` add the op's block-scale stores: one float per 128
elements (their amax), at the DeepSeek-style column-major offset (block column x M + row, the
benchmark's layout) or row-major (row x H / 128 + block column), plain stores as the op's (v24:
do 1.4% more bytes in 4-byte stores cost the streams 3-7%, as they cost the op?).
Needs CUDA and Triton; not part of the test suite.

    python benchmarks/stream_probe.py [MxH ...]     (default 16384x4096 16384x2048)
    BLOCK=8192 WARPS=8 python benchmarks/stream_probe.py ...   (elements and warps per program;
                                                               default 2048 and 4)
    PROFILE=1 ncu -k regex:_streams ... python benchmarks/stream_probe.py 16384x4096   (each once)
"""
from __future__ import annotations

import os
import sys

import torch
import triton
import triton.language as tl

from bench_fused_add_rmsnorm_fp8_block_quant import byte_count, copy_buffers, print_probe_rows, time_cuda


@triton.jit
def _streams(x_ptr, r_ptr, r_out_ptr, n_ptr, o_ptr, sc_ptr, rows, blocks_per_row, BLOCK: tl.constexpr,
             NORMED: tl.constexpr = True, SCALES: tl.constexpr = 0):
    off = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + off, eviction_policy="evict_first")
    r = tl.load(r_ptr + off, eviction_policy="evict_first")
    s = x + r
    tl.store(r_out_ptr + off, s, eviction_policy="evict_first")
    if NORMED:
        tl.store(n_ptr + off, s, eviction_policy="evict_first")
    tl.store(o_ptr + off, s.to(tl.float8e4nv), eviction_policy="evict_first")
    if SCALES != 0:  # one float per 128-element block: 1 column-major (col x M + row), 2 row-major
        amax = tl.max(tl.abs(tl.reshape(s.to(tl.float32), (BLOCK // 128, 128))), axis=1)
        blk = tl.program_id(0).to(tl.int64) * (BLOCK // 128) + tl.arange(0, BLOCK // 128)
        if SCALES == 1:
            dst = (blk % blocks_per_row) * rows + blk // blocks_per_row
        else:
            dst = blk
        tl.store(sc_ptr + dst, amax)


def main(shapes):
    block, calls, replays = int(os.environ.get("BLOCK", "2048")), 2, 15
    warps = int(os.environ.get("WARPS", "4"))
    for shape in shapes:
        m, h = (int(v) for v in shape.split("x"))
        x, r, r2, n = (torch.randn(m, h, device="cuda").to(torch.bfloat16) for _ in range(4))
        o = torch.empty(m, h, dtype=torch.float8_e4m3fn, device="cuda")
        sc = torch.empty(m * (h // 128), device="cuda")  # block scales, either layout
        assert m * h % block == 0 and h % 128 == 0 and block % 128 == 0, \
            f"M x H must be a multiple of {block}, H and BLOCK of 128 (the kernel has no tail)"
        grid = (m * h // block,)

        def run(r_out, **kw):
            _streams[grid](x, r, r_out, n, o, sc, m, h // 128, BLOCK=block, num_warps=warps, **kw)

        if os.environ.get("PROFILE") == "1":  # each kernel once, for ncu -k regex:_streams
            run(r)
            run(r2)
            run(r, NORMED=False)
            run(r, SCALES=1)
            torch.cuda.synchronize()
            continue
        src, dst = copy_buffers(byte_count(m, h, torch.bfloat16), "cuda")
        rows = [("copy (same bytes)", time_cuda(lambda: torch.bitwise_or(src, 0, out=dst), calls, replays))]
        for name, r_out, kw in (("inplace", r, {}), ("separate", r2, {}), ("no normed", r, {"NORMED": False}),
                                ("inplace + scales (column-major)", r, {"SCALES": 1}),
                                ("inplace + scales (row-major)", r, {"SCALES": 2}),
                                ("no normed + scales (column-major)", r, {"NORMED": False, "SCALES": 1})):
            rows.append((name, time_cuda(lambda: run(r_out, **kw), calls, replays)))
        print_probe_rows(m, h, rows, copy_us=rows[0][1])


if __name__ == "__main__":
    main(sys.argv[1:] or ["16384x4096", "16384x2048"])
