"""Does updating the residual in place cost time at large M, bytes being equal?

The op reads input and residual and writes residual (in place), normed and fp8: 9 bytes per bf16
element, the same as a copy of that many bytes, yet it keeps the L2 fabric busy ~10% longer than
the copy (benchmarks/NOTES.md, v6). This times two Triton kernels with exactly the op's streams
and no arithmetic beyond an add: `inplace` writes the sum back over the residual (the op's
pattern), `separate` writes it to a third buffer (same bytes), beside the benchmark's same-bytes
copy. `no normed` leaves out the bf16 normed stream (7 bytes per element, the op with
`normed_out=None`): its time over `inplace`'s is the streams' own share of that target (v23).
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
def _streams(x_ptr, r_ptr, r_out_ptr, n_ptr, o_ptr, BLOCK: tl.constexpr, NORMED: tl.constexpr = True):
    off = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + off, eviction_policy="evict_first")
    r = tl.load(r_ptr + off, eviction_policy="evict_first")
    s = x + r
    tl.store(r_out_ptr + off, s, eviction_policy="evict_first")
    if NORMED:
        tl.store(n_ptr + off, s, eviction_policy="evict_first")
    tl.store(o_ptr + off, s.to(tl.float8e4nv), eviction_policy="evict_first")


def main(shapes):
    block, calls, replays = int(os.environ.get("BLOCK", "2048")), 2, 15
    warps = int(os.environ.get("WARPS", "4"))
    for shape in shapes:
        m, h = (int(v) for v in shape.split("x"))
        x, r, r2, n = (torch.randn(m, h, device="cuda").to(torch.bfloat16) for _ in range(4))
        o = torch.empty(m, h, dtype=torch.float8_e4m3fn, device="cuda")
        assert m * h % block == 0, f"M x H must be a multiple of {block} (the kernel has no tail)"
        grid = (m * h // block,)
        if os.environ.get("PROFILE") == "1":  # each kernel once, for ncu -k regex:_streams
            _streams[grid](x, r, r, n, o, BLOCK=block, num_warps=warps)
            _streams[grid](x, r, r2, n, o, BLOCK=block, num_warps=warps)
            _streams[grid](x, r, r, n, o, BLOCK=block, NORMED=False, num_warps=warps)
            torch.cuda.synchronize()
            continue
        src, dst = copy_buffers(byte_count(m, h, torch.bfloat16), "cuda")
        rows = [
            ("copy (same bytes)", time_cuda(lambda: torch.bitwise_or(src, 0, out=dst), calls, replays)),
            ("inplace", time_cuda(lambda: _streams[grid](x, r, r, n, o, BLOCK=block, num_warps=warps), calls, replays)),
            ("separate", time_cuda(lambda: _streams[grid](x, r, r2, n, o, BLOCK=block, num_warps=warps), calls, replays)),
            ("no normed", time_cuda(lambda: _streams[grid](x, r, r, n, o, BLOCK=block, NORMED=False, num_warps=warps),
                                    calls, replays)),
        ]
        print_probe_rows(m, h, rows, copy_us=rows[0][1])


if __name__ == "__main__":
    main(sys.argv[1:] or ["16384x4096", "16384x2048"])
