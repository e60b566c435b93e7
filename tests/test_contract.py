"""The numerical contract of the four overloads against torch_fp8norm.reference, on every device."""
import itertools

import pytest
import torch

from fp8norm_testing import DEVICES, DTYPES, LAYOUTS, Case, check_case, check_contract, make_inputs, out_buffers

# (M, H): every M in {0, 1, 3, 4, 5, 127, 1024} and every H in {128, 1152, 2048, 4096, 7168,
# 16384, 32768, 65536}; long rows with small M.
SHAPES = [
    (0, 128), (1, 128), (3, 1152), (4, 2048), (5, 4096), (127, 7168), (1024, 128),
    (1024, 1152), (1024, 2048), (1024, 4096), (5, 16384), (127, 16384), (3, 32768),
    (1, 65536), (4, 65536),
]
OPTIONS = [
    dict(fused=f, functional=fn, weight_fp32=wf, pad=p, ue8m0=u, layout=lay, normed_none=nn)
    for f, fn, wf, p, u, lay, nn in itertools.product(
        [True, False], [False, True], [False, True], [0, 128, 1], [False, True], LAYOUTS, [False, True])
    if not (fn and (nn or lay != "tma"))  # functional overloads take no outputs
]


def _grid():
    # Each (shape, dtype) gets a different combination of options (a stride coprime to their
    # count walks through all of them); test_every_option_combination covers the full product.
    i = 0
    for device in DEVICES:
        for (m, h), dtype in itertools.product(SHAPES, DTYPES):
            opts = OPTIONS[(i * 37) % len(OPTIONS)]
            i += 1
            yield pytest.param(Case(device, dtype, m, h, **opts),
                               id=f"{device}-{str(dtype)[6:]}-M{m}-H{h}-" + "-".join(
                                   f"{k}={v}" for k, v in opts.items()))


@pytest.mark.parametrize("case", list(_grid()))
def test_contract_grid(case):
    check_case(case)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_every_option_combination(device, dtype):
    for opts in OPTIONS:
        check_case(Case(device, dtype, 5, 384, **opts))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("fused", [True, False])
def test_repeated_calls_fresh_inputs(device, dtype, fused):
    # Different random data each time; nothing carries over between calls.
    for m, h in [(3, 256), (9, 1280), (2, 8192)]:
        for _ in range(3):
            check_case(Case(device, dtype, m, h, fused=fused, ue8m0=bool(m % 2)))


def _edge_values(dtype):
    fmax = torch.finfo(dtype).max
    tiny = torch.finfo(dtype).tiny

    def values(x, r):
        h = x.shape[1]
        x[0].zero_()                      # all-zero row (r zeroed below)
        x[1, 7] = float("nan")            # NaN in one row
        x[2, h - 1] = float("inf")        # +inf in one row
        x[3, 130] = -float("inf")
        x[4].fill_(fmax / 2)              # near the dtype's max (sum with residual may overflow)
        x[5].normal_().mul_(fmax / 16)
        x[6].normal_().mul_(tiny)         # tiny (subnormal range for 16-bit types)
        x[7, 0] = fmax / 1.5              # one huge value among normal ones
        x[8].fill_(1.0)                   # constant row: every fp8 value at the saturation edge
        # magnitudes spread over 2^-20..1: fp8 subnormals, ties and the normal/subnormal boundary
        mags = torch.exp2(-20 * torch.rand(h))
        x[9] = (mags * torch.sign(torch.randn(h))).to(x.dtype)
        if r is not None:
            r[0].zero_()
            r[4].fill_(fmax / 4)
            r[5].zero_()
            r[6].normal_().mul_(tiny)
            r[8].zero_()
            r[9].zero_()
    return values


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("ue8m0", [False, True])
def test_edge_values(device, dtype, fused, ue8m0):
    c = Case(device, dtype, 12, 1152, fused=fused, ue8m0=ue8m0)
    x, r, w, out, s, n = check_case(c, values=_edge_values(dtype))
    s = s.cpu()
    # A NaN makes its whole row NaN (the row's rstd is NaN). An inf makes rstd 0: its own block
    # is NaN (inf * 0), the row's other blocks are zeros. The other rows are unaffected.
    assert torch.isnan(s[1]).all(), s[1]
    nb = s.shape[1]
    for row, blk in ((2, nb - 1), (3, 1)):
        assert torch.isnan(s[row, blk]), s[row]
        others = torch.cat([s[row, :blk], s[row, blk + 1:]])
        assert torch.isfinite(others).all() and torch.all(out.cpu()[row].view(torch.uint8)[
            [i for i in range(s.shape[1] * 128) if i // 128 != blk]] & 0x7F == 0)
    finite_rows = [0, 6, 7, 8, 9, 10, 11]
    assert torch.isfinite(s[finite_rows]).all()
    assert torch.isfinite(n.cpu()[finite_rows].float()).all()
    # All-zero row: scale is the floor, values zero.
    assert torch.all(out.cpu()[0].view(torch.uint8) & 0x7F == 0)
    assert torch.all(s[0] == (2.0 ** -42 if ue8m0 else torch.tensor(1e-10) / 448))
    if not ue8m0:
        # Without ue8m0 the largest element of every block of an ordinary row lands on the fp8
        # saturation edge, +-448, whichever way amax / 448 rounded.
        q = out.cpu()[8:].float().abs().view(4, -1, 128).amax(-1)
        assert torch.all(q == 448), q


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("m,h", [(5, 2048), (600, 2048), (3, 16384)])
def test_every_kernel_variant(device, m, h):
    # The CUDA kernel is instantiated per (dtype, weight dtype, residual or not, aligned rows or
    # not, vectors per thread); the launch table picks vectors per thread from H and M (600 rows
    # exceed 4 x the SM count of any current GPU, 5 do not; 16384 takes 4 per thread at any M).
    for dtype in DTYPES:
        for weight_fp32, fused, pad in itertools.product([False, True], [True, False], [0, 1]):
            check_case(Case(device, dtype, m, h, fused=fused, weight_fp32=weight_fp32, pad=pad,
                            ue8m0=pad == 1, normed_none=weight_fp32 and not fused))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_narrow_vectors(dtype):
    # One-row CTAs of 2-byte rows of an odd number of half-warps (an odd number of 1x128 blocks)
    # take 8-byte vectors in whole warps by default (launch_config's rule): H = 1152 / 1408 / 1920
    # in CTAs of 288 / 352 / 480 threads, in grids of at most two rows per SM (of any GPU: 256 x
    # 1152 on one of 128 SMs or more), cache-hinted at decode sizes, plain at 256 x 1152; every
    # overload option. (tests/test_launch_switches.py checks which kernel runs.)
    for i, (m, h) in enumerate([(1, 1152), (128, 1408), (77, 1920), (256, 1152)]):
        for fused, weight_fp32, normed_none in itertools.product([True, False], [False, True], [False, True]):
            check_case(Case("cuda", dtype, m, h, fused=fused, weight_fp32=weight_fp32, normed_none=normed_none,
                            ue8m0=(i + fused) % 2 == 0, layout=LAYOUTS[i % len(LAYOUTS)]))


# Which row streams are padded (row stride H + 128) in test_row_strides_per_stream: none or all
# (one row stride for all four, a row offset shared by them in the CUDA kernel's one-vector rows
# when the call writes normed_out), or one of them (each stream's own stride).
PADDED_STREAMS = [(), ("input", "residual", "normed", "out"), ("input",), ("residual",), ("normed",), ("out",)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_row_strides_per_stream(device, dtype):
    # Every row stream with its own row stride: on CUDA at decode sizes (bf16 H = 2048 / 4096:
    # one-vector one-row CTAs of whole warps), in grids of many lean one-vector rows (2-byte types
    # with normed_out: 2048 x 2048 in the FULL kernel, whole warps in the plain-access band since
    # v60; 2048 x 2176, 272 vectors in 288 threads, with the `valid` predicate) and in 4-vector
    # rows (700 x 8192), with and without normed_out and a residual.
    shapes = [(5, 2048)] if device == "cpu" else [(1, 2048), (128, 4096), (2048, 2048), (2048, 2176), (700, 8192)]
    for (m, h), padded, fused, normed_none in itertools.product(shapes, PADDED_STREAMS, [True, False], [False, True]):
        if normed_none and padded == ("normed",):
            continue  # the same call as no padding
        check_case(Case(device, dtype, m, h, fused=fused, normed_none=normed_none,
                        pads={k: 128 for k in padded}))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype,m,h,weight_fp32", [(torch.bfloat16, 2113, 1024, False),
                                                   (torch.float32, 8191, 512, False),
                                                   (torch.float16, 4001, 2048, False),
                                                   (torch.float32, 4099, 1024, False),
                                                   (torch.bfloat16, 3001, 4096, True)])
def test_rows_without_residual(dtype, m, h, weight_fp32):
    # The op without a residual, where the fused op takes lean one-vector rows: in grids of more
    # than two waves of lean rows of a multiple of 128 vectors on any GPU of up to 132 SMs
    # (launch_config's rules), rows of one warp take 4-vector rows, several per CTA (bf16 H = 1024
    # 8 per CTA, the last CTA with one row; float32 H = 512), and rows of two warps or more, in
    # grids of more than one wave of them, lean one-row CTAs of four vectors per thread (float16
    # H = 2048 and float32 H = 1024 in 64 threads, bf16 H = 4096 with a float32 weight in 128),
    # each block scale computed in one lane of the block and shuffled to the others, a thread's
    # block scale stored once; with and without normed_out, a block_scale layout each.
    # (tests/test_launch_switches.py checks which kernel runs.)
    for i, normed_none in enumerate([False, True]):
        check_case(Case("cuda", dtype, m, h, fused=False, weight_fp32=weight_fp32, normed_none=normed_none,
                        ue8m0=normed_none, layout=LAYOUTS[(i + m) % len(LAYOUTS)]))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype,m,h", [(torch.bfloat16, 16384, 4096), (torch.float16, 32768, 2048),
                                       (torch.float32, 16384, 4096)])
def test_deep_grid(dtype, m, h):
    # Grids at least 12 times as deep as the SMs hold (any GPU of up to 160 SMs) take ~512
    # threads per CTA instead of ~256 when the op writes normed_out: 4, 8 and 2 rows per CTA
    # here, the last CTA full. The scale columns are whole 128-byte lines (M a multiple of 32):
    # the block-scale stores of all but the last two waves take the L2 line policy (evict_last,
    # then demoted). The float32 case also runs without normed_out (~256 threads per
    # CTA) and compares out and block_scale bitwise with the call that writes it.
    check_case(Case("cuda", dtype, m, h, pad=128 if dtype == torch.float16 else 0, ue8m0=dtype == torch.float32,
                    normed_none=dtype == torch.float32))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype,m,h", [(torch.bfloat16, 2041, 2048), (torch.float16, 500, 8192),
                                       (torch.float32, 520, 4096)])
def test_one_wave_near_full(dtype, m, h):
    # On a GPU of 132 SMs (H100 SXM, H200) ~256 threads per CTA would make one wave over 15/16
    # of the CTA slots: the table takes ~512 instead (8, 2 and 2 rows per CTA here; 2041 rows
    # leave the last CTA with one row and seven idle). The float16 case also runs without
    # normed_out (~256 threads per CTA), compared bitwise with the call that writes it.
    check_case(Case("cuda", dtype, m, h, pad=1 if dtype == torch.bfloat16 else 0, ue8m0=dtype == torch.float32,
                    normed_none=dtype == torch.float16, layout="row_major" if dtype == torch.float32 else "tma"))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype,m,h,fused,weight_fp32", [(torch.bfloat16, 1024, 2048, True, False),
                                                         (torch.float16, 700, 4096, False, True),
                                                         (torch.float32, 512, 2048, True, True)])
def test_call_that_fits_in_l2(dtype, m, h, fused, weight_fp32):
    # Calls whose buffers take 1.5 MiB .. 72% of L2 run plain (unhinted) accesses (v18, v19, v42): on a GPU
    # of 20 MiB of L2 or more, all three here (14, 14 and 13 MiB). The float16 case also runs
    # without normed_out (a smaller footprint), compared bitwise with the call that writes it.
    check_case(Case("cuda", dtype, m, h, fused=fused, weight_fp32=weight_fp32, ue8m0=dtype == torch.float16,
                    normed_none=dtype == torch.float16, layout="scaled_mm" if fused else "tma"))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype,m,h,pad", [(torch.bfloat16, 300, 65536, 0), (torch.float32, 140, 32768, 128),
                                           (torch.float16, 133, 65664, 1), (torch.bfloat16, 70, 131072, 0)])
def test_long_rows_over_a_cluster(dtype, m, h, pad):
    # Rows of more than 4096 vectors beyond the decode sizes are split over a cluster of the
    # fewest CTAs that bring a slice to at most 4096 vectors, two tiles each with a stash: 2 CTAs
    # per row here, 3 for H = 65664 (513 blocks: slices of 171 blocks, unaligned rows), 4 for 131072.
    # The float32 case also runs without normed_out.
    check_case(Case("cuda", dtype, m, h, pad=pad, ue8m0=dtype == torch.float16,
                    normed_none=dtype == torch.float32, layout="scaled_mm" if pad else "tma"))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype,m,h,pad", [(torch.bfloat16, 128, 32768, 0), (torch.float16, 100, 32768, 128),
                                           (torch.bfloat16, 64, 65536, 0), (torch.float32, 130, 16384, 1)])
def test_second_tile_prefetched(dtype, m, h, pad):
    # On a GPU of 132 SMs these are grids of at most one CTA per SM whose slices take two tiles:
    # each CTA asks L2 for its second tile at its start (one CTA per row, or for H = 65536 two
    # per row). The float32 rows are unaligned (pad 1): no prefetch there, the same launch.
    check_case(Case("cuda", dtype, m, h, pad=pad, ue8m0=dtype == torch.float16,
                    normed_none=dtype == torch.float32, layout="row_major" if pad else "tma"))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_huge_grid_sampled_rows():
    # bf16 16448 x 32768: every stream just over 1 GiB, where the launch table asks L2 for each
    # CTA's second tile at any grid depth (v17). The whole call must leave no poisoned byte in
    # its outputs (finite inputs); rows are independent in the contract, so 64 of them (the first
    # and last four, 56 at random) are checked against the reference on CPU.
    m, h = 16448, 32768
    if torch.cuda.get_device_properties(0).total_memory < 24 * 2**30:
        pytest.skip("needs 24 GiB of device memory")
    c = Case("cuda", torch.bfloat16, m, h)
    x, r, w = make_inputs(c, gen=torch.Generator("cuda").manual_seed(torch.randint(0, 2**31, ()).item()))
    r_before = r.clone()
    out, s, n = out_buffers(c)
    torch.ops.fp8norm.fused_add_rmsnorm_fp8_block_quant.out(
        x, r, w, c.eps, c.ue8m0, out=out, block_scale=s, normed_out=n)
    assert not ((out.view(torch.uint8) & 0x7F) == 0x7F).any(), "out: NaN or poison left"
    assert not s.isnan().any() and not n.isnan().any(), "block_scale / normed_out: NaN or poison left"
    idx = torch.cat([torch.arange(4), torch.randint(4, m - 4, (56,)), torch.arange(m - 4, m)]).cuda()
    check_contract(x[idx], r_before[idx], w, c.eps, c.ue8m0, r[idx],
                   out.view(torch.uint8)[idx].view(out.dtype), s[idx], n[idx])
