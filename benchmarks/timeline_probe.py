"""Where one CTA's time goes inside a call (measurement only: needs a build with
FP8NORM_NVCC_FLAGS=-DFP8NORM_TIMELINE, whose results are NOT the contract's).

That build has thread 0 of CTA 0 read the SM clock (clock64) at the kernel's entry and after each
phase, each read placed after the phase's values exist, and write the cycles since entry over
the first block scales of row 0 (then the SM's ns for the whole span, from %globaltimer):
  wait     griddepcontrol.wait returned (the prologue before it included)
  pass1    the row's loads used: residual added, stored, squares summed (this thread's)
  warp     the warp's sum (shuffles)
  cta      the CTA's sum (shared memory, barrier, butterfly)
  rstd     rstd (after the cluster exchange, if any)
  pass2    normalized, quantized, every store issued
  then, in pass 2 (its last vector): the block's local amax (normalized, rounded to T), the amax
  over the block's lanes (shuffles), the scale and its reciprocal, the fp8 bytes
  ns       %globaltimer from entry to pass2
Each shape runs as the benchmark does (a CUDA graph of back-to-back calls); after each replay the
last call's stamps are read; the median over replays is printed, in cycles and in ns (by the
span's cycles per ns).

    python benchmarks/timeline_probe.py [MxH ...]       (FP8NORM_PDL=0: without PDL)
"""
from __future__ import annotations

import statistics
import sys

import torch

import torch_fp8norm  # noqa: F401
from bench_fused_add_rmsnorm_fp8_block_quant import column_major_scales, cuda_graph, time_cuda

PHASES = ["wait", "pass1", "warp", "cta", "rstd", "pass2", "amax_local", "amax_block", "rcp", "fp8", "ns"]


def main(shapes):
    op = torch.ops.fp8norm.fused_add_rmsnorm_fp8_block_quant.out
    calls, replays = 20, 30
    for s in shapes:
        m, h = (int(v) for v in s.split("x"))
        assert h // 128 >= len(PHASES), f"needs at least {len(PHASES)} blocks per row"
        gen = torch.Generator(device="cpu").manual_seed(m * 7919 + h)
        x = torch.randn(m, h, generator=gen).to(torch.bfloat16).cuda()
        r = torch.randn(m, h, generator=gen).to(torch.bfloat16).cuda()
        w = (torch.randn(h, generator=gen) * 0.5 + 1).to(torch.bfloat16).cuda()
        out = torch.empty(m, h, dtype=torch.float8_e4m3fn, device="cuda")
        scale = column_major_scales(m, h, "cuda")
        normed = torch.empty(m, h, dtype=torch.bfloat16, device="cuda")

        def fn():
            op(x, r, w, 1e-6, False, out=out, block_scale=scale, normed_out=normed)

        us = time_cuda(fn, calls, 15)
        g = cuda_graph(fn, calls)
        rows = []
        for _ in range(replays):
            g.replay()
            torch.cuda.synchronize()
            rows.append(scale[0, :len(PHASES)].tolist())
        med = [statistics.median(col) for col in zip(*rows)]
        per_ns = med[5] / med[-1] if med[-1] > 0 else float("nan")
        cells = "  ".join(f"{n} {c:6.0f} ({c / per_ns:5.0f} ns)" for n, c in zip(PHASES[:-1], med[:-1]))
        print(f"{m}x{h}: call {us:.2f} us; {cells}; span {med[-1]:.0f} ns, {per_ns:.2f} cycles/ns")
        sys.stdout.flush()


if __name__ == "__main__":
    main(sys.argv[1:] or ["1x2048", "1x8192", "128x2048", "128x8192", "128x16384"])
