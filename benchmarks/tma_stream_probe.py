"""Do Hopper's bulk tensor copies (TMA) move the op's streams faster than 16-byte accesses?

The op (and `stream_probe.py`'s Triton kernels, which move only its streams) load and store
through registers with 16-byte accesses and reach 93-97% of a same-bytes copy at large M
(benchmarks/NOTES.md, v6 / v23). This times the same streams (read input and residual, write the
sum back over the residual, to normed and as fp8: 9 bytes per bf16 element) moved by TMA:
Triton tensor descriptors (`TensorDescriptor`), one [BM, 256] tile per stream per program, or a
persistent grid looping over tiles with Triton's software pipelining. Beside them: the pointer
kernel of `stream_probe.py`, the benchmark's same-bytes copy, and a TMA copy of those bytes.
A measurement only (no block scales, no reduction); needs CUDA, Triton with tensor descriptors
and sm_90. Not part of the test suite.

    python benchmarks/tma_stream_probe.py [MxH ...]     (default 16384x4096 16384x16384 16384x2048)
"""
from __future__ import annotations

import sys

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from bench_fused_add_rmsnorm_fp8_block_quant import copy_buffers, print_probe_rows, time_copies, time_cuda
from stream_probe import _streams

BN = 256  # a TMA box holds at most 256 elements per dimension


@triton.jit
def _streams_tma(xd, rd, nd, od, BM: tl.constexpr, BN: tl.constexpr):
    m0 = tl.program_id(0) * BM
    n0 = tl.program_id(1) * BN
    s = xd.load([m0, n0]) + rd.load([m0, n0])
    rd.store([m0, n0], s)
    nd.store([m0, n0], s)
    od.store([m0, n0], s.to(tl.float8e4nv))


@triton.jit
def _streams_tma_persistent(xd, rd, nd, od, tiles_m, tiles_n, BM: tl.constexpr, BN: tl.constexpr,
                            STAGES: tl.constexpr):
    n_tiles = tiles_m * tiles_n
    for t in tl.range(tl.program_id(0), n_tiles, tl.num_programs(0), num_stages=STAGES):
        m0 = (t // tiles_n) * BM
        n0 = (t % tiles_n) * BN
        s = xd.load([m0, n0]) + rd.load([m0, n0])
        rd.store([m0, n0], s)
        nd.store([m0, n0], s)
        od.store([m0, n0], s.to(tl.float8e4nv))


@triton.jit
def _copy_tma(sd, dd, BM: tl.constexpr, BN: tl.constexpr):
    m0 = tl.program_id(0) * BM
    n0 = tl.program_id(1) * BN
    dd.store([m0, n0], sd.load([m0, n0]))


def main(shapes):
    calls, replays = 2, 15
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for shape in shapes:
        m, h = (int(v) for v in shape.split("x"))
        x, r, n = (torch.randn(m, h, device="cuda").to(torch.bfloat16) for _ in range(3))
        o = torch.empty(m, h, dtype=torch.float8_e4m3fn, device="cuda")
        sc = torch.empty(m * (h // 128), device="cuda")
        assert h % BN == 0 and m % 64 == 0, "H a multiple of 256, M of 64 (the kernels have no tail)"

        # Same results first: the TMA kernels against the pointer kernel (one call each from the
        # same residual), outputs poisoned.
        r0 = r.clone()
        rr = r0.clone()
        n.fill_(float("nan"))
        o.view(torch.uint8).fill_(0x7F)
        _streams[(m * h // 2048,)](x, rr, rr, n, o, sc, m, h // 128, BLOCK=2048, num_warps=4)
        want = (rr.clone(), n.clone(), o.view(torch.uint8).clone())

        def descs(bm, rr):
            return tuple(TensorDescriptor.from_tensor(t, [bm, BN]) for t in (x, rr, n, o))

        for bm in (8, 32):
            rr = r0.clone()
            n.fill_(float("nan"))
            o.view(torch.uint8).fill_(0x7F)
            _streams_tma[(m // bm, h // BN)](*descs(bm, rr), BM=bm, BN=BN, num_warps=4)
            got = (rr, n, o.view(torch.uint8))
            same = all(torch.equal(a, b) for a, b in zip(got, want))
            print(f"M = {m}, H = {h}: TMA BM={bm} {'same outputs as the pointer kernel' if same else 'DIFFERENT outputs'}")

        src, dst = copy_buffers(9 * m * h, "cuda")  # the streams' bytes
        # The benchmark's copy: the faster of memcpy and kernel copy.
        rows = [("copy (same bytes)", min(time_copies(src, dst, time_cuda, calls, replays)))]
        # The copy's bytes as a [rows, 256] bf16 matrix for the TMA copy (src / dst are int32 buffers).
        cm = src.numel() * 4 // (2 * BN) // 64 * 64
        s16 = src.view(torch.bfloat16)[: cm * BN].view(cm, BN)
        d16 = dst.view(torch.bfloat16)[: cm * BN].view(cm, BN)
        for bm in (32, 64):
            sd, dd = TensorDescriptor.from_tensor(s16, [bm, BN]), TensorDescriptor.from_tensor(d16, [bm, BN])
            rows.append((f"TMA copy, [{bm}, 256] boxes (same bytes)",
                         time_cuda(lambda: _copy_tma[(cm // bm, 1)](sd, dd, BM=bm, BN=BN, num_warps=4), calls, replays)))
        rows.append(("pointer streams (stream_probe inplace)",
                     time_cuda(lambda: _streams[(m * h // 2048,)](x, r, r, n, o, sc, m, h // 128, BLOCK=2048, num_warps=4),
                               calls, replays)))
        for bm, warps in ((8, 4), (16, 4), (32, 4), (32, 8)):
            d = descs(bm, r)
            rows.append((f"TMA streams [{bm}, 256], {warps} warps",
                         time_cuda(lambda: _streams_tma[(m // bm, h // BN)](*d, BM=bm, BN=BN, num_warps=warps), calls, replays)))
        for bm, stages, per_sm in ((16, 2, 4), (16, 3, 4), (32, 3, 2), (32, 4, 2)):
            d = descs(bm, r)
            grid = (sms * per_sm,)
            rows.append((f"TMA streams persistent [{bm}, 256], {stages} stages, {per_sm}/SM",
                         time_cuda(lambda: _streams_tma_persistent[grid](*d, m // bm, h // BN, BM=bm, BN=BN, STAGES=stages,
                                                                         num_warps=4), calls, replays)))
        print_probe_rows(m, h, rows, copy_us=rows[0][1])


if __name__ == "__main__":
    main(sys.argv[1:] or ["16384x4096", "16384x16384", "16384x2048"])
