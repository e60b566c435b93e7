"""Block-scale stores with an L2 evict_last cache policy: does the gain hold when every call
writes a different block_scale, and do the evict_last lines left in L2 slow the kernels after?

Run it once per build that differs only in FP8NORM_SCALE_STORE (a build flag of commit 9eedded,
reverted after: benchmarks/NOTES.md, v7), same machine, same session; compare the builds' lines:
  one       the benchmark's case: every call writes the same block_scale.
  rotating  a CUDA graph of ROT calls, each writing its own block_scale (ROT x the scale bytes:
            128 MiB at 16384 x 4096, more than the L2).
  reuse W   a copy of W MiB into W MiB, 20 times in a graph (2 W MiB live in L2 after the first),
            µs per copy: alone (after the same graph), and right after the ROT rotating op
            calls. If evict_last lines stayed in L2 and crowded its other lines out, the copies
            after the op calls would be slower in the evict_last build than in the other.

    python benchmarks/scale_store_probe.py [MxH ...]     (default 16384x4096 16384x2048)
"""
from __future__ import annotations

import itertools
import os
import statistics
import sys

import torch

import torch_fp8norm  # noqa: F401
from bench_fused_add_rmsnorm_fp8_block_quant import column_major_scales, cuda_graph, print_probe_rows, time_cuda

ROT, COPIES, REPS = 64, 20, 15


def copy_time_after(before, copies):
    """Median µs per copy of the `copies` graph, replayed right after the `before` graph."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(REPS):
        before.replay()
        start.record()
        copies.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000.0 / COPIES)
    return statistics.median(times)


def main(shapes):
    op = torch.ops.fp8norm.fused_add_rmsnorm_fp8_block_quant.out
    print("build:", os.path.dirname(torch_fp8norm.__file__))
    for shape in shapes:
        m, h = (int(v) for v in shape.split("x"))
        x, r, normed = (torch.randn(m, h, device="cuda").to(torch.bfloat16) for _ in range(3))
        w = (torch.randn(h, device="cuda") * 0.5 + 1).to(torch.bfloat16)
        out = torch.empty(m, h, dtype=torch.float8_e4m3fn, device="cuda")
        scales = [column_major_scales(m, h, "cuda") for _ in range(ROT)]
        cycle = itertools.cycle(scales)

        def call(scale):
            op(x, r, w, 1e-6, False, out=out, block_scale=scale, normed_out=normed)

        rows = [("one", time_cuda(lambda: call(scales[0]), 2, REPS)),
                ("rotating", time_cuda(lambda: call(next(cycle)), ROT, REPS))]
        rotating = cuda_graph(lambda: call(next(cycle)), ROT)
        for mib in (8, 16):
            src = torch.randint(0, 2**31 - 1, ((mib << 20) // 4,), dtype=torch.int32, device="cuda")
            dst = torch.empty_like(src)
            copies = cuda_graph(lambda: dst.copy_(src), COPIES)
            rows.append((f"reuse {mib} MiB, alone", copy_time_after(copies, copies)))
            rows.append((f"reuse {mib} MiB, after op", copy_time_after(rotating, copies)))
        print_probe_rows(m, h, rows)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main(sys.argv[1:] or ["16384x4096", "16384x2048"])
