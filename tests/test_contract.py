"""The numerical contract of the four overloads against torch_fp8norm.reference, on every device."""
import itertools

import pytest
import torch

from torch_fp8norm import reference as R

from fp8norm_testing import DEVICES, DTYPES, LAYOUTS, Case, check_case, check_contract, make_inputs, out_buffers

# (M, H): every M in {0, 1, 3, 4, 5, 127, 1024} and every H in {128, 1152, 2048, 4096, 7168,
# 16384, 32768, 65536}; long rows with small M.
SHAPES = [
    (0, 128), (1, 128), (3, 1152), (4, 2048), (5, 4096), (127, 7168), (1024, 128),
    (1024, 1152), (1024, 2048), (1024, 4096), (5, 16384), (127, 16384), (3, 32768),
    (1, 65536), (4, 65536),
]
OPTIONS = [
    dict(fused=f, functional=fn, weight_fp32=wf, pad=p, ue8m0=u, layout=lay, normed_none=nn, norm_convention=nc)
    for f, fn, wf, p, u, lay, nn, nc in itertools.product(
        [True, False], [False, True], [False, True], [0, 128, 1], [False, True], LAYOUTS, [False, True],
        R.NORM_CONVENTIONS)
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
    # The kernels are instantiated per dtype, weight dtype, residual or not and aligned rows or
    # not: every combination at a decode size, in a grid of many rows and with long rows.
    for dtype in DTYPES:
        for weight_fp32, fused, pad in itertools.product([False, True], [True, False], [0, 1]):
            check_case(Case(device, dtype, m, h, fused=fused, weight_fp32=weight_fp32, pad=pad,
                            ue8m0=pad == 1, normed_none=weight_fp32 and not fused))


# Which row streams are padded (row stride H + 128) in test_row_strides_per_stream: none or all
# (one row stride for all four: one row offset in the CUDA row kernels when the call writes
# normed_out), or one of them (each stream's own stride).
PADDED_STREAMS = [(), ("input", "residual", "normed", "out"), ("input",), ("residual",), ("normed",), ("out",)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_row_strides_per_stream(device, dtype):
    # Every row stream with its own row stride: on CUDA in the row kernels at decode sizes and in
    # grids of many rows (2048 x 2048 whole warps, 2048 x 2176 with idle lanes), and in tile rows
    # (700 x 8192), with and without normed_out and a residual.
    shapes = [(5, 2048)] if device == "cpu" else [(1, 2048), (128, 4096), (2048, 2048), (2048, 2176), (700, 8192)]
    for (m, h), padded, fused, normed_none in itertools.product(shapes, PADDED_STREAMS, [True, False], [False, True]):
        if normed_none and padded == ("normed",):
            continue  # the same call as no padding
        check_case(Case(device, dtype, m, h, fused=fused, normed_none=normed_none,
                        pads={k: 128 for k in padded}))


# Shapes of the CUDA launch policy's families on a GPU of 132 SMs (tests/test_kernels.py forces
# every kernel; these run the policy's own choices): rows without a residual in tile rows of one
# warp, several to a CTA (2113 x 1024) and in four-vector row CTAs (4001 x 2048, a float32 weight
# 3001 x 4096); the block-scale L2 line policy in deep grids (16384 x 4096, 32768 x 2048, M a
# multiple of 32, column-major scales); clusters of 2 and 4 CTAs per row at any M for rows of
# more than 4096 vectors (H 65536 / 131072; 65664: 513 blocks, slices of 171, unaligned rows);
# slices of two tiles with the shared-memory stash (128 x 32768). Each with and without
# normed_out, a block_scale layout each.
POLICY_SHAPES = [
    (torch.bfloat16, 2113, 1024, False, False, 0), (torch.float16, 4001, 2048, False, False, 0),
    (torch.bfloat16, 3001, 4096, False, True, 0), (torch.bfloat16, 16384, 4096, True, False, 0),
    (torch.float16, 32768, 2048, True, False, 128), (torch.float32, 16384, 4096, True, False, 0),
    (torch.bfloat16, 300, 65536, True, False, 0), (torch.float32, 140, 32768, True, False, 128),
    (torch.float16, 133, 65664, True, False, 1), (torch.bfloat16, 70, 131072, True, False, 0),
    (torch.bfloat16, 128, 32768, True, True, 0),
]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype,m,h,fused,weight_fp32,pad", POLICY_SHAPES)
def test_policy_shapes(dtype, m, h, fused, weight_fp32, pad):
    for i, normed_none in enumerate([False, True]):
        check_case(Case("cuda", dtype, m, h, fused=fused, weight_fp32=weight_fp32, pad=pad,
                        normed_none=normed_none, ue8m0=bool((m + i) % 2), layout=LAYOUTS[(i + m) % len(LAYOUTS)]))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_huge_grid_sampled_rows():
    # bf16 16448 x 32768: every stream just over 1 GiB, where each CTA asks L2 for its second
    # tile at its start. The whole call must leave no poisoned byte in its outputs (finite
    # inputs); rows are independent in the contract, so 64 of them (the first and last four, 56 at
    # random) are checked against the reference.
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
