"""Does the op's time at large M depend on where its five streams sit in memory?

The op reads input and residual and writes residual, normed and fp8 at the same row index in
each: when the buffers' base addresses agree in their low bits, the same row of every stream
may map to the same DRAM channels at the same time. This times the op (and the same-bytes copy)
with every buffer carved from one allocation at chosen offsets: stream i at a 2 MiB boundary
plus i * SKEW bytes, for a few SKEW values, beside separately allocated tensors (the benchmark's
case); and the block scales row-major (M, H / 128), or column-major with a padded column stride,
beside the benchmark's column-major layout.
Same timing as the benchmark (CUDA-graph replays).

    python benchmarks/placement_probe.py [MxH ...]     (default 16384x4096 16384x2048)
"""
from __future__ import annotations

import sys

import torch

import torch_fp8norm  # noqa: F401
from bench_fused_add_rmsnorm_fp8_block_quant import byte_count, column_major_scales, print_probe_rows, time_cuda

SKEWS = [0, 4352]
COL_PADS = [32, 1024]  # column-major block scales with the column stride M + pad (floats)
MIB2 = 2 << 20


def carve(sizes, skew):
    """Byte views of one allocation: view i starts at a 2 MiB boundary plus i * skew."""
    starts, at = [], 0
    for i, n in enumerate(sizes):
        at = (at + MIB2 - 1) // MIB2 * MIB2
        starts.append(at + i * skew)
        at = starts[-1] + n
    buf = torch.empty(at, dtype=torch.uint8, device="cuda")
    return [buf[s:s + n] for s, n in zip(starts, sizes)]


def main(shapes):
    op = torch.ops.fp8norm.fused_add_rmsnorm_fp8_block_quant.out
    calls, replays = 2, 15
    for s in shapes:
        m, h = (int(v) for v in s.split("x"))
        e, mh = 2, m * h
        gen = torch.Generator(device="cpu").manual_seed(m * 7919 + h)
        x0 = torch.randn(m, h, generator=gen).to(torch.bfloat16).cuda()
        r0 = torch.randn(m, h, generator=gen).to(torch.bfloat16).cuda()
        w = (torch.randn(h, generator=gen) * 0.5 + 1).to(torch.bfloat16).cuda()
        scale_col = column_major_scales(m, h, "cuda")
        scale_row = torch.empty(m, h // 128, device="cuda")
        n = byte_count(m, h, torch.bfloat16)
        rows = []

        def time_op(x, r, normed, out, scale=scale_col):
            x.copy_(x0)
            r.copy_(r0)
            return time_cuda(lambda: op(x, r, w, 1e-6, False, out=out, block_scale=scale, normed_out=normed),
                             calls, replays)

        x, r, normed = (torch.empty(m, h, dtype=torch.bfloat16, device="cuda") for _ in range(3))
        out = torch.empty(m, h, dtype=torch.float8_e4m3fn, device="cuda")
        rows.append(("separate", time_op(x, r, normed, out)))
        rows.append(("row-major scales", time_op(x, r, normed, out, scale_row)))
        for pad in COL_PADS:
            nb = h // 128
            padded = torch.empty((nb - 1) * (m + pad) + m, device="cuda").as_strided((m, nb), (1, m + pad))
            rows.append((f"column stride M + {pad}", time_op(x, r, normed, out, padded)))
        rows.append(("no normed", time_op(x, r, None, out)))
        rows.append(("no normed, row-major scales", time_op(x, r, None, out, scale_row)))
        del x, r, normed, out
        for skew in SKEWS:
            v = carve([mh * e] * 3 + [mh], skew)
            x, r, normed = (t.view(torch.bfloat16).view(m, h) for t in v[:3])
            out = v[3].view(torch.float8_e4m3fn).view(m, h)
            rows.append((f"skew {skew}", time_op(x, r, normed, out)))
            del v, x, r, normed, out
        for skew in SKEWS:  # the copy at the same placements
            src, dst = (t.view(torch.int32) for t in carve([n // 2 // 4 * 4] * 2, skew))
            src.fill_(7)
            rows.append((f"copy, skew {skew}", time_cuda(lambda: torch.bitwise_or(src, 0, out=dst), calls, replays)))
            del src, dst
        torch.cuda.empty_cache()
        print_probe_rows(m, h, rows)


if __name__ == "__main__":
    main(sys.argv[1:] or ["16384x4096", "16384x2048"])
