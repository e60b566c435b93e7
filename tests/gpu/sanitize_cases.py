"""The CUDA cases run under compute-sanitizer by tests/gpu/sanitize.sh (a plain script: pytest
itself is slow under the sanitizer). Each case is checked against the contract as in the tests.

Grid: odd H (128, 1152, 5120), long rows (32768, 65536), M in {1, 3, 5, 1024} (and 133 for the
long rows: a row split over a cluster beyond the decode sizes), strided (and unaligned) rows,
every block_scale layout, normed_out=None, scale_ue8m0, both ops, bf16 and float32, one
wave of rows that nearly fills the GPU (2041 x 2048, bf16; 2041 x 2176, rows with idle lanes), the op without a residual in 4-vector
rows of one warp (2113 x 1024, bf16) and in lean rows of four vectors per thread (2113 x 2048;
531 x 16384, 512 threads; 531 x 32768 without normed_out, 1024 threads), the fused op in lean rows of
four vectors per thread (2047 x 4096, bf16; 1031 x 4096 float32 without normed_out),
and lean rows two per CTA with the last CTA's second row past M (2047 x 1152, bf16). With the
default table every slice fits in shared memory; the path that re-reads a multi-tile slice from
global memory runs under sanitize.sh's memcheck setting FP8NORM_TUNE=threads=64,stash=0.
"""
import itertools
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from fp8norm_testing import LAYOUTS, Case, check_case  # noqa: E402


def cases(device="cuda"):
    opts = list(itertools.product([0, 128, 1], LAYOUTS, [False, True], [False, True], [True, False]))
    i = 0
    for dtype in (torch.bfloat16, torch.float32):
        for h in (128, 1152, 5120, 32768, 65536):
            for m in (1, 3, 5, 1024):
                if m == 1024 and h > 5120:
                    continue
                pad, layout, normed_none, ue8m0, fused = opts[(i * 7) % len(opts)]
                i += 1
                yield Case(device, dtype, m, h, fused=fused, pad=pad, layout=layout,
                           normed_none=normed_none, ue8m0=ue8m0)
        # Long rows beyond the decode sizes: a slice per CTA of a cluster (2 CTAs per row; 4 for
        # float32 H = 65536), except bfloat16 H = 32768 (4096 vectors: one CTA).
        for h in (32768, 65536):
            pad, layout, normed_none, ue8m0, fused = opts[(i * 7) % len(opts)]
            i += 1
            yield Case(device, dtype, 133, h, fused=fused, pad=pad, layout=layout,
                       normed_none=normed_none, ue8m0=ue8m0)
    # Many rows of 256 vectors: lean one-vector rows by default (the call's bytes in the
    # plain-access band); in 4-vector rows (FP8NORM_TUNE=lean=0, or vpt=4) one wave over 15/16
    # of the CTA slots on a GPU of 132 SMs: 8 rows per CTA, the last CTA with one row and seven idle.
    yield Case(device, torch.bfloat16, 2041, 2048, fused=True, layout="tma")
    # Many rows of 272 vectors in 288 threads (idle lanes): lean one-vector rows of the kernel with
    # the `valid` predicate, the one row offset of equal strides (v59). Since v60 the case above
    # takes the FULL kernel (whole warps in the plain-access band), so this one keeps the
    # predicate kernel of one-row CTAs under the default table.
    yield Case(device, torch.bfloat16, 2041, 2176, fused=True, layout="scaled_mm")
    # Rows of one warp at 4 vectors per thread (sanitize.sh's FP8NORM_TUNE=hints=0,vpt=4: the
    # plain kernels' __syncwarp row barrier; 2041 x 2048 there takes their named per-row
    # barriers), the last CTA partly idle.
    yield Case(device, torch.bfloat16, 1000, 1024, fused=False, layout="row_major")
    # The op without a residual in rows of 128 vectors over two waves of lean rows (launch_config's
    # rule, v51): 4-vector rows of one warp, 8 per CTA, the last CTA with one row and seven idle.
    yield Case(device, torch.bfloat16, 2113, 1024, fused=False, layout="tma")
    # ... and in rows of 256 vectors (two warps of four vectors per thread): lean one-row CTAs of
    # four vectors per thread, without normed_out (v52).
    yield Case(device, torch.bfloat16, 2113, 2048, fused=False, normed_none=True, layout="row_major")
    # ... and in rows of 2048 vectors (512 threads of four, two CTAs per SM: the lean four bound,
    # v55), two waves and three rows.
    yield Case(device, torch.bfloat16, 531, 16384, fused=False, layout="scaled_mm")
    # ... and, without normed_out, in rows of 4096 vectors (1024 threads, one CTA per SM, v56).
    yield Case(device, torch.bfloat16, 531, 32768, fused=False, normed_none=True, layout="tma")
    # The fused op in lean rows of four vectors per thread (rows of 128..256 threads, at most 2048
    # rows, v56): bf16 2047 x 4096 (128 threads, an odd M), float32 1031 x 4096 (256) strided.
    yield Case(device, torch.bfloat16, 2047, 4096, fused=True, layout="scaled_mm")
    yield Case(device, torch.float32, 1031, 4096, fused=True, pad=128, normed_none=True, layout="row_major")
    # Lean rows of 144 vectors (an odd number of half-warps), two per CTA, an odd M: the last
    # CTA's second row past M (with sanitize.sh's hints=1,demote=1,lean=512: the block-scale line
    # policy; with rowvec1=1,prefetch=1 the L2 prefetch of rows ahead).
    yield Case(device, torch.bfloat16, 2047, 1152, fused=True, layout="tma")


def main():
    device = sys.argv[1] if len(sys.argv) > 1 else "cuda"  # "cpu": a dry run of the cases
    n = 0
    for c in cases(device):
        check_case(c)
        n += 1
    if device == "cuda":
        torch.cuda.synchronize()
    print(f"sanitize_cases: {n} cases checked on {device}")


if __name__ == "__main__":
    main()
