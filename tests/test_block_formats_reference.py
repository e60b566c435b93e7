"""The block formats' executable specification (torch_fp8norm.reference: MXFP8, MXFP4, NVFP4, the
128x4 scale swizzle) against the references the engines trust: torchao 0.18.0 (MX formats, e2m1,
to_blocked), an element-by-element float32 transcription of FlashInfer's NVFP4 quantizer without
fast math, and exact arithmetic for the UE8M0 rounding."""
import math

import numpy as np
import pytest
import torch

from torch_fp8norm import reference as R

mx_tensor = pytest.importorskip("torchao.prototype.mx_formats.mx_tensor")
from torchao.prototype.mx_formats.kernels import f32_to_f4_unpacked, unpack_uint4  # noqa: E402
from torchao.prototype.mx_formats.utils import to_blocked  # noqa: E402

MODES = {"rceil": mx_tensor.ScaleCalculationMode.RCEIL, "floor": mx_tensor.ScaleCalculationMode.FLOOR}
ELEMS = {"mxfp8": torch.float8_e4m3fn, "mxfp4": torch.float4_e2m1fn_x2}


def _bits(n: int, seed: int) -> torch.Tensor:
    """n float32 values of every kind: random bit patterns (subnormals, huge, inf, NaN), exact
    powers of two and their neighbours, normals of every binade."""
    g = torch.Generator().manual_seed(seed)
    raw = torch.randint(-2 ** 31, 2 ** 31, (n,), generator=g, dtype=torch.int64).to(torch.int32).view(torch.float32)
    pow2 = torch.ldexp(torch.ones(n), torch.randint(-149, 128, (n,), generator=g))
    nudge = torch.randint(-2, 3, (n,), generator=g, dtype=torch.int32)
    near = (pow2.view(torch.int32) + nudge).view(torch.float32)
    normal = torch.randn(n, generator=g) * torch.exp2(torch.randint(-30, 30, (n,), generator=g).float())
    return torch.cat([raw, near, normal])


def _blocks(rows: int, h: int, seed: int) -> torch.Tensor:
    """[rows, h] float32 rows of normed-like values, with blocks of zeros, of tiny and huge values,
    powers of two, inf and NaN among them."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, h, generator=g) * torch.exp2(torch.randint(-20, 20, (rows, 1), generator=g).float())
    blocks = x.view(rows, h // 16, 16)
    pick = torch.randint(0, 12, (rows, h // 16), generator=g)
    blocks[pick == 0] = 0.0
    blocks[pick == 1] *= 2.0 ** -130                                          # float32 subnormals
    blocks[pick == 2] *= 2.0 ** 100
    blocks[pick == 3] = torch.ldexp(torch.ones(16), torch.randint(-10, 10, (16,), generator=g))
    blocks[pick == 4, 3] = float("inf")
    blocks[pick == 5, 7] = float("nan")
    blocks[pick == 6, 0] = -0.0
    return x


def test_e2m1_codes_match_torchao():
    # Round to nearest even, saturating, a zero keeping its sign: torchao's f32_to_f4_unpacked on
    # every non-NaN float32 (torchao defines no NaN; ours gives 0x7), ties included.
    ties = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0, 7.0, 1e30])
    x = torch.cat([_bits(20000, 1), ties, -ties, torch.tensor([0.0, -0.0, float("inf"), -float("inf")])])
    x = x[~torch.isnan(x)]
    ours, theirs = R.e2m1_codes(x), f32_to_f4_unpacked(x)
    assert torch.equal(ours, theirs)
    assert R.e2m1_codes(torch.tensor([float("nan"), -float("nan")])).tolist() == [7, 7]
    assert R.e2m1_codes(ties).tolist() == [0, 2, 2, 4, 4, 6, 6, 7, 7, 7]
    assert torch.equal(R.e2m1_values(R.e2m1_codes(x)), R.e2m1_values(theirs))


def test_e2m1_packing_matches_torchao():
    codes = torch.randint(0, 16, (6, 64), dtype=torch.uint8)
    packed = R.pack_e2m1(codes)
    assert packed.dtype == torch.float4_e2m1fn_x2 and packed.shape == (6, 32)
    assert torch.equal(packed.view(torch.uint8) & 0xF, codes[:, 0::2])     # element 2j: the low nibble
    assert torch.equal(unpack_uint4(packed.view(torch.uint8)), codes)
    assert torch.equal(R.unpack_e2m1(packed), codes)


def test_e8m0_rceil_is_the_exact_power_of_two_ceiling():
    x = _bits(50000, 2).abs()
    got = R.e8m0_rceil(x)
    for v, b in zip(x.tolist(), got.tolist()):
        if math.isnan(v):
            assert b == 255
        elif v > 2.0 ** 127:
            assert b == 254                                           # satfinite: inf too
        elif v <= 2.0 ** -127:
            assert b == 0
        else:                                                         # 2^(b-128) < v <= 2^(b-127)
            assert 2.0 ** (b - 128) < v <= 2.0 ** (b - 127), (v, b)


@pytest.mark.parametrize("fmt", ["mxfp8", "mxfp4"])
def test_mx_floor_is_bit_exact_to_torchao(fmt):
    x = _blocks(64, 1024, 3)
    q, s = R.quantize_mx(x, fmt, "floor")
    ts, tq = mx_tensor.to_mx(x, ELEMS[fmt], 32, MODES["floor"])
    assert torch.equal(s.view(torch.uint8), ts.view(torch.uint8))
    ours, theirs = q.view(torch.uint8), tq.view(torch.uint8)
    if fmt == "mxfp8":
        nan = torch.isnan(q.float())                               # fp8 NaN 0x7F and 0xFF count as equal
        assert torch.equal(nan, torch.isnan(tq.float())) and torch.equal(ours[~nan], theirs[~nan])
    else:  # torchao has no e2m1 NaN; ours is 0x7: a NaN or inf element of a NaN block (inf / inf)
        ours, theirs = R.unpack_e2m1(q), unpack_uint4(theirs)
        nan = ~torch.isfinite(x) & (s.view(torch.uint8) == 255).repeat_interleave(32, -1)
        assert torch.equal(ours[~nan], theirs[~nan]) and bool((ours[nan] == 7).all())
    assert int((s.view(torch.uint8) == 255).sum()) > 0 and int((s.view(torch.uint8) == 0).sum()) > 0


@pytest.mark.parametrize("fmt", ["mxfp8", "mxfp4"])
def test_mx_rceil_matches_torchao_but_its_log2_exponents(fmt):
    # torchao's eager RCEIL takes ceil(log2(descale)) in float32, which rounds down for some descale
    # just above a power of two; ours is the exact ceiling (cvt.rp). Every other block is bit-exact.
    x = _blocks(64, 1024, 4)
    max_elem = R.FP8_MAX if fmt == "mxfp8" else R.E2M1_MAX       # first blocks: amax just above max_elem * 2^k
    top = torch.ldexp(torch.full((64,), max_elem), torch.randint(-20, 20, (64,)))
    x[:, 0] = (top.view(torch.int32) + torch.randint(0, 4, (64,), dtype=torch.int32)).view(torch.float32)
    x[:, 1:32] = x[:, 1:32].clamp(-1, 1) * top[:, None] / 2
    q, s = R.quantize_mx(x, fmt, "rceil")
    ts, tq = mx_tensor.to_mx(x, ELEMS[fmt], 32, MODES["rceil"])
    ours_s, theirs_s = s.view(torch.uint8).int(), ts.view(torch.uint8).int()
    differ = ours_s != theirs_s
    assert bool((ours_s[differ] == theirs_s[differ] + 1).all())      # torchao one binade low
    amax = x.view(64, -1, 32).abs().amax(-1)
    descale = amax / max_elem
    assert bool((torch.ldexp(torch.ones(()), theirs_s[differ] - 127) < descale[differ]).all())
    assert 0 < int(differ.sum()) < differ.numel() // 10
    same = (~differ).repeat_interleave(32, -1)
    if fmt == "mxfp8":
        ours, theirs = q.view(torch.uint8), tq.view(torch.uint8)
        nan = torch.isnan(q.float())
        assert torch.equal(nan, torch.isnan(tq.float()))
        keep = same & ~nan
    else:
        ours, theirs = R.unpack_e2m1(q), unpack_uint4(tq.view(torch.uint8))
        keep = same & (s.view(torch.uint8) != 255).repeat_interleave(32, -1)  # NaN blocks: all 0x7 here
        assert bool((ours[~keep & ~same.logical_not()] == 7).all())
    assert torch.equal(ours[keep], theirs[keep])


@pytest.mark.parametrize("m,ks", [(1, 1), (5, 3), (128, 4), (130, 90), (300, 228)])
def test_swizzle_is_torchao_to_blocked(m, ks):
    s = torch.randint(1, 256, (m, ks), dtype=torch.uint8)
    got = R.swizzle_128x4(s.view(torch.float8_e8m0fnu))
    assert got.dtype == torch.float8_e8m0fnu and got.shape == (-(-m // 128) * 128, -(-ks // 4) * 4)
    assert torch.equal(got.view(torch.uint8).flatten(), to_blocked(s))    # zero padding included
    assert torch.equal(R.unswizzle_128x4(got, m, ks).view(torch.uint8), s)
    # The documented byte address of scale (m, k).
    i, k = torch.randint(0, m, (50,)), torch.randint(0, ks, (50,))
    addr = (i // 128) * (-(-ks // 4)) * 512 + (k // 4) * 512 + (i % 32) * 16 + ((i // 32) % 4) * 4 + k % 4
    assert torch.equal(got.view(torch.uint8).flatten()[addr], s[i, k])


def _nvfp4_flashinfer(x: np.ndarray, gs: np.float32):
    """FlashInfer's cvt_warp_fp16_to_fp4 with DISABLE_FP4_QUANT_FAST_MATH, one block of 16 float32
    values at a time, in numpy float32 scalars (vmax by a NaN-propagating max, as our contract)."""
    f32 = np.float32
    codes, scales = [], []
    with np.errstate(all="ignore"):
        for block in x.reshape(-1, 16):
            vmax = f32(np.max(np.abs(block)))
            sf = f32(0) if vmax == 0 else f32(vmax * f32(gs * f32(1.0 / 6.0)))
            b = torch.tensor(float(sf)).clamp(-448, 448).to(torch.float8_e4m3fn)
            bf = f32(b.float().item())
            if vmax == 0:
                os = f32(0)
            else:
                os = f32(f32(1) / f32(bf * f32(f32(1) / gs)))
                os = os if not np.isnan(os) and os < np.finfo(f32).max else np.finfo(f32).max
            codes.append([f32(v * os) for v in block])
            scales.append(b.view(torch.uint8).item())
    return R.e2m1_codes(torch.tensor(np.array(codes, dtype=f32))).reshape(x.shape), scales


@pytest.mark.parametrize("gs", [None, 1.0, 1e-30, 0.0, float("inf")])
def test_nvfp4_is_flashinfers_formula(gs):
    x = _blocks(8, 512, 5)
    if gs is None:                                                   # the engines' encode scale
        gs = 448 * 6 / float(x[torch.isfinite(x)].abs().max())
    gst = torch.tensor(gs, dtype=torch.float32)
    q, s = R.quantize_nvfp4(x, gst)
    codes, scales = _nvfp4_flashinfer(x.numpy(), np.float32(gs))
    assert s.view(torch.uint8).flatten().tolist() == scales
    assert torch.equal(R.unpack_e2m1(q), codes)


@pytest.mark.parametrize("fmt", ["mxfp8", "mxfp4", "nvfp4"])
def test_dequantized_swizzled_scales_give_back_normed(fmt):
    # What a consumer does: undo the swizzle, decode codes x scales (x 1/gs), compare with the
    # values quantized. Error bound: half a code step at the scaled value (none saturate under
    # "rceil" and NVFP4's encode scale), in units of the block's scale.
    m, h = 200, 2880
    x = torch.randn(m, h, dtype=torch.bfloat16).float()
    gs = torch.tensor(448 * 6 / float(x.abs().max()))
    if fmt == "nvfp4":
        q, s = R.quantize_nvfp4(x, gs)
    else:
        q, s = R.quantize_mx(x, fmt, "rceil")
    blocked = R.swizzle_128x4(s)
    back = R.unswizzle_128x4(blocked, m, h // R.FORMAT_BLOCK[fmt])
    assert torch.equal(back.view(torch.uint8), s.view(torch.uint8))
    y = R.dequantize(q, back, fmt, gs)
    block = R.FORMAT_BLOCK[fmt]
    step = (s.float() / gs if fmt == "nvfp4" else s.float())[..., None]    # one unit of the element grid
    v = (x.view(m, -1, block) / step).abs()                                # the scaled magnitudes
    if fmt == "mxfp8":
        half = torch.where(v < 2 ** -6, 2.0 ** -10, torch.ldexp(torch.ones_like(v), torch.frexp(v)[1] - 5))
    else:
        half = torch.where(v < 2, 0.25, torch.where(v < 4, 0.5, 1.0))
    assert bool((v <= (R.FP8_MAX if fmt == "mxfp8" else R.E2M1_MAX) * 1.0625).all())
    # (1 + 2^-10: NVFP4 scales by 1 / (b / gs) rounded, so a value at a tie may round either way)
    assert bool(((y.view(m, -1, block) - x.view(m, -1, block)).abs() <= half * step * (1 + 2 ** -10)).all())


def _same_bytes(a, b) -> bool:
    return all(torch.equal(x.contiguous().view(torch.uint8), y.contiguous().view(torch.uint8)) for x, y in zip(a, b))


@pytest.mark.parametrize("fmt", R.FORMATS)
@pytest.mark.parametrize("conv", R.NORM_CONVENTIONS)
def test_fused_reference_composes_the_norm_and_the_format(fmt, conv):
    # The whole op's specification: the FP8 1x128 path's norm (every convention), then the format.
    h = 2816 if fmt == "fp8_1x128" else 2880                           # fp8_1x128: H a multiple of 128
    x, r = torch.randn(130, h, dtype=torch.bfloat16), torch.randn(130, h, dtype=torch.bfloat16)
    w = torch.rand(h, dtype=torch.bfloat16) + 0.5
    gs = torch.tensor(10.0) if fmt == "nvfp4" else None
    r1, r2 = r.clone(), r.clone()
    got = R.fused_add_rmsnorm_quant(x, r1, w, 1e-6, fmt, global_scale=gs, norm_convention=conv)
    if fmt == "fp8_1x128":
        assert _same_bytes(got, R.fused_add_rmsnorm_fp8_block_quant(x, r2, w, 1e-6, norm_convention=conv))
        return
    s, v = R.residual_sum(x, r2, conv)
    normed = R.rms_normalize(v, w, 1e-6, x.dtype, conv)
    row_out, row_scale = R.quantize(normed, fmt, "row", global_scale=gs)
    assert _same_bytes(got, (row_out, R.swizzle_128x4(row_scale), normed)) and torch.equal(r1, s)
    assert got[1].shape == (256, -(-h // R.FORMAT_BLOCK[fmt] // 4) * 4)
    if R.norms_rounded_sum(conv):  # the norm of the rounded sum: rmsnorm_quant of that sum is the same
        assert _same_bytes(R.rmsnorm_quant(s, w, 1e-6, fmt, global_scale=gs, norm_convention=conv), got)
