"""Executable specification of the fp8norm ops, in plain PyTorch.

Every kernel in this package is tested against these functions. They are written for
clarity, not speed: each line is one step of the contract in the README.
"""
from __future__ import annotations

import torch

FP8_MAX = 448.0          # largest finite float8_e4m3fn value
BLOCK = 128              # elements per quantization block (1 x 128)
AMAX_FLOOR = 1e-10       # block amax is clamped to at least this

# Where the norm rounds (README, "Norm conventions"): the values the norm is computed from are the
# residual sum rounded to the dtype ("torch", "hf") or the float32 sum ("vllm", "flashinfer"; the
# residual written back is rounded either way); normed is x * rstd * weight rounded once ("torch",
# "flashinfer") or x * rstd rounded, times weight, rounded again ("hf", "vllm"). For float32
# inputs they coincide; without a residual "torch" and "flashinfer" coincide, and so do "hf" and
# "vllm".
NORM_CONVENTIONS = ("torch", "hf", "vllm", "flashinfer")


def norms_rounded_sum(norm_convention: str) -> bool:
    """Whether the norm is computed from the residual sum rounded to the dtype."""
    return norm_convention in ("torch", "hf")


def rounds_twice(norm_convention: str) -> bool:
    """Whether normed rounds x * rstd to the dtype before the weight multiplies it."""
    return norm_convention in ("hf", "vllm")


def ue8m0_round_up(scale: torch.Tensor) -> torch.Tensor:
    """Smallest power of two >= scale, exactly, from the float32 exponent bits.

    Positive finite scales with a non-zero mantissa move up one binade; powers of two,
    +inf and NaN are returned unchanged.
    """
    bits = scale.view(torch.int32)
    mantissa = bits & 0x007FFFFF
    up = (bits & 0x7F800000) + 0x00800000
    rounded = torch.where((mantissa != 0) & torch.isfinite(scale), up, bits)
    return rounded.view(torch.float32)


def quantize_fp8_block(normed: torch.Tensor, scale_ue8m0: bool = False):
    """1x128 block FP8 quantization of a [M, H] tensor of normed values.

    Returns (q [M, H] float8_e4m3fn, scale [M, H/128] float32, contiguous).
    """
    M, H = normed.shape
    g = normed.float().view(M, H // BLOCK, BLOCK)
    amax = g.abs().amax(-1).clamp_min(AMAX_FLOOR)       # NaN propagates
    # float32, correctly rounded (a tensor divisor: on CUDA, torch divides by a Python scalar by
    # multiplying with its reciprocal, which is not the same)
    scale = amax / torch.full_like(amax, FP8_MAX)
    if scale_ue8m0:
        scale = ue8m0_round_up(scale)
    q = (g / scale[..., None]).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return q.view(M, H), scale


def rms_normalize(x: torch.Tensor, weight: torch.Tensor, eps: float, dtype=None,
                  norm_convention: str = "torch", rstd=None) -> torch.Tensor:
    """RMSNorm of the rows of x times weight, as `dtype` (default x.dtype): x * rstd * weight in
    float32, rounded once, or with norm_convention "hf" or "vllm" x * rstd rounded to dtype, then
    times weight (float32 product) rounded again. rstd: the rows' 1 / sqrt(mean(x^2) + eps), by
    default computed here in float32."""
    dtype = dtype or x.dtype
    x = x.float()
    if rstd is None:
        rstd = torch.rsqrt(x.square().mean(-1, keepdim=True) + eps)
    if rounds_twice(norm_convention):
        return ((x * rstd).to(dtype).float() * weight.float()).to(dtype)
    return (x * rstd * weight.float()).to(dtype)


def residual_sum(input, residual, norm_convention: str = "torch"):
    """(new residual, the values the norm is computed from): the float32 sum rounded to input's
    dtype, and that or the float32 sum itself, by the convention."""
    total = input.float() + residual.float()
    s = total.to(input.dtype)
    return s, (s if norms_rounded_sum(norm_convention) else total)


def fused_add_rmsnorm_fp8_block_quant(input, residual, weight, eps=1e-6, scale_ue8m0=False,
                                      norm_convention="torch"):
    """residual += input (in place, rounded to the input dtype); normed = rmsnorm(residual) * weight
    (by norm_convention); (out, block_scale) = fp8 1x128 quantization of normed.

    Returns (out, block_scale, normed), like torch.ops.fp8norm.fused_add_rmsnorm_fp8_block_quant.
    """
    s, x = residual_sum(input, residual, norm_convention)
    residual.copy_(s)
    normed = rms_normalize(x, weight, eps, input.dtype, norm_convention)
    out, block_scale = quantize_fp8_block(normed, scale_ue8m0)
    return out, block_scale, normed


def rmsnorm_fp8_block_quant(input, weight, eps=1e-6, scale_ue8m0=False, norm_convention="torch"):
    """Same as fused_add_rmsnorm_fp8_block_quant without a residual: normed = rmsnorm(input) * weight."""
    normed = rms_normalize(input, weight, eps, input.dtype, norm_convention)
    out, block_scale = quantize_fp8_block(normed, scale_ue8m0)
    return out, block_scale, normed


# ---------------------------------------------------------------------------------------------
# The block formats beside FP8 1x128 (docs/design.md, "Block formats"). Each quantizes normed (the op's own
# values, rounded to input's dtype) taken exactly as float32; every step below is one float32
# operation, correctly rounded, so the kernels can reproduce it bit for bit.

FORMATS = ("fp8_1x128", "mxfp8", "mxfp4", "nvfp4")
FORMAT_BLOCK = {"fp8_1x128": 128, "mxfp8": 32, "mxfp4": 32, "nvfp4": 16}
SCALE_MODES = ("rceil", "floor")   # MX formats: how amax becomes the UE8M0 scale
E2M1_MAX = 6.0
E4M3_EMAX, E2M1_EMAX = 8, 2        # exponents of the elements' largest powers of two (OCP MX v1.0)
FLT_MAX = torch.finfo(torch.float32).max

# e2m1 magnitudes by code (bit 3 is the sign), and where |x| moves to the next code under round to
# nearest, ties to even code: ">" keeps a tie on the even code below it, ">=" moves it to the even
# code above (0.25 -> 0, 0.75 -> 1.0, 1.25 -> 1.0, 1.75 -> 2, 2.5 -> 2, 3.5 -> 4, 5 -> 4).
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
_E2M1_STEPS = ((0.25, False), (0.75, True), (1.25, False), (1.75, True), (2.5, False), (3.5, True), (5.0, False))


def e2m1_codes(x: torch.Tensor) -> torch.Tensor:
    """float32 -> e2m1 codes (uint8, 0..15): round to nearest even, saturating (inf -> +-6).
    A zero code keeps x's sign (-0 and negative values that round to zero give 0x8); NaN gives
    0x7 (+6): e2m1 has no NaN, and every block that holds one has a NaN scale (MX) or is defined
    by the NVFP4 rules below."""
    m = x.abs()
    code = torch.zeros(x.shape, dtype=torch.uint8, device=x.device)
    for bound, tie_up in _E2M1_STEPS:
        code += (m >= bound if tie_up else m > bound).to(torch.uint8)
    code |= torch.signbit(x).to(torch.uint8) << 3
    return torch.where(torch.isnan(x), 7, code).to(torch.uint8)


def e2m1_values(codes: torch.Tensor) -> torch.Tensor:
    """e2m1 codes (uint8) -> float32."""
    table = torch.tensor(E2M1_VALUES, device=codes.device)
    c = codes.long()
    return torch.where((c & 8) != 0, -table[c & 7], table[c & 7])


def pack_e2m1(codes: torch.Tensor) -> torch.Tensor:
    """[..., H] codes -> [..., H/2] float4_e2m1fn_x2: element 2j in the low nibble of byte j."""
    return (codes[..., 0::2] | (codes[..., 1::2] << 4)).view(torch.float4_e2m1fn_x2)


def unpack_e2m1(packed: torch.Tensor) -> torch.Tensor:
    """[..., H/2] float4_e2m1fn_x2 (or uint8) -> [..., H] codes (uint8)."""
    b = packed.view(torch.uint8)
    return torch.stack((b & 0xF, b >> 4), -1).flatten(-2)


def e8m0_rceil(descale: torch.Tensor) -> torch.Tensor:
    """float32 -> UE8M0 byte of the smallest power of two >= descale, from the bits, as
    ``cvt.rp.satfinite.ue8m0x2.f32``: <= 2^-127 (zero too) gives 0, > 2^127 and +inf 254, NaN 255."""
    bits = descale.view(torch.int32)
    e, m = (bits >> 23) & 0xFF, bits & 0x7FFFFF
    normal = (e + (m != 0).to(torch.int32)).clamp_max(254)           # e = 255 (inf): 254
    sub = (m > (1 << 22)).to(torch.int32)                             # e = 0: (2^-127, 2^-126) -> 1
    byte = torch.where(e == 0, sub, normal)
    return torch.where(torch.isnan(descale), 255, byte).to(torch.uint8)


def e8m0_floor(amax: torch.Tensor, emax: int) -> torch.Tensor:
    """float32 amax -> the OCP MX v1.0 UE8M0 byte: clamp(E(amax) - 127 - emax, -127, 128) + 127 from
    amax's biased exponent field E, 255 for NaN (torchao's FLOOR)."""
    e = (amax.view(torch.int32) >> 23) & 0xFF
    byte = (e - 127 - emax).clamp(-127, 128) + 127
    return torch.where(torch.isnan(amax), 255, byte).to(torch.uint8)


def e4m3_satfinite(x: torch.Tensor) -> torch.Tensor:
    """float32 -> float8_e4m3fn, round to nearest even, saturating to +-448 (NaN kept)."""
    return x.clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)


def _elements(x: torch.Tensor, elem: str) -> torch.Tensor:
    """Scaled float32 values -> element codes: float8_e4m3fn or (unpacked) e2m1 codes."""
    return e4m3_satfinite(x) if elem == "e4m3" else e2m1_codes(x)


def quantize_mx(normed: torch.Tensor, fmt: str = "mxfp8", scale_mode: str = "rceil"):
    """MXFP8 / MXFP4 (1x32 blocks, UE8M0 scales) of a [M, H] tensor, H a multiple of 32.

    Returns (out, scale): out [M, H] float8_e4m3fn (mxfp8) or [M, H/2] float4_e2m1fn_x2 (mxfp4);
    scale [M, H/32] float8_e8m0fnu, row-major. amax propagates NaN.
    - "rceil": byte = e8m0_rceil(amax / max_elem) (float32 division); codes of x * r with
      r = 2^(127 - byte), but 1 for byte 0, 2^-127 for 254 and NaN for 255 (TransformerEngine).
    - "floor": byte = e8m0_floor(amax, emax); codes of x / max(2^(byte - 127), 2^-126) (torchao's
      FLOOR, the OCP rule): byte 255 divides by inf.
    """
    elem = "e4m3" if fmt == "mxfp8" else "e2m1"
    max_elem, emax = (FP8_MAX, E4M3_EMAX) if elem == "e4m3" else (E2M1_MAX, E2M1_EMAX)
    M, H = normed.shape
    g = normed.float().view(M, H // 32, 32)
    amax = g.abs().amax(-1)
    if scale_mode == "rceil":
        byte = e8m0_rceil(amax / torch.full_like(amax, max_elem))
        b = byte.to(torch.int32)
        r = ((254 - b).clamp(1, 253) << 23).view(torch.float32)          # 2^(127 - b), b in 1..253
        r = torch.where(b == 0, 1.0, torch.where(b == 254, 2.0 ** -127, r))
        r = torch.where(b == 255, float("nan"), r)
        q = _elements(g * r[..., None], elem)
    else:
        byte = e8m0_floor(amax, emax)
        scale = (byte.to(torch.int32) << 23).view(torch.float32).clamp_min(2.0 ** -126)
        q = _elements(g / scale[..., None], elem)
    q = q.view(M, H) if elem == "e4m3" else pack_e2m1(q.view(M, H))
    return q, byte.view(torch.float8_e8m0fnu)


def quantize_nvfp4(normed: torch.Tensor, global_scale: torch.Tensor):
    """NVFP4 (1x16 blocks, float8_e4m3fn scales, a float32 encode scale gs = 448 * 6 / amax(tensor))
    of a [M, H] tensor, H a multiple of 16: FlashInfer's ``nvfp4_quantize`` without fast math
    (TransformerEngine's formula), all float32, correctly rounded:

        vmax = max |x_i|                 (NaN propagates)
        sf   = vmax != 0 ? vmax * (gs * fp32(1/6)) : 0
        b    = e4m3_satfinite(sf)        (the stored scale)
        os   = vmax != 0 ? fmin(1 / (float(b) * (1 / gs)), FLT_MAX) : 0     (fmin: NaN -> FLT_MAX)
        q_i  = e2m1_codes(x_i * os)

    Returns (out [M, H/2] float4_e2m1fn_x2, scale [M, H/16] float8_e4m3fn), row-major."""
    M, H = normed.shape
    g = normed.float().view(M, H // 16, 16)
    gs = global_scale.float().reshape(())
    vmax = g.abs().amax(-1)
    zero = vmax == 0
    sf = torch.where(zero, 0.0, vmax * (gs * torch.tensor(1 / 6, dtype=torch.float32)))
    b = e4m3_satfinite(sf)
    one = torch.ones_like(vmax)
    os = torch.fmin(one / (b.float() * (one / gs)), torch.full_like(vmax, FLT_MAX))
    os = torch.where(zero, 0.0, os)
    q = e2m1_codes(g * os[..., None])
    return pack_e2m1(q.view(M, H)), b


def swizzle_128x4(scale: torch.Tensor) -> torch.Tensor:
    """[M, Ks] scales -> the [round_up(M, 128), round_up(Ks, 4)] 128x4 layout of cuBLAS, CUTLASS and
    torch._scaled_mm (SWIZZLE_32_4_4): scale (m, k) at byte (m // 128) * ceil(Ks / 4) * 512 +
    (k // 4) * 512 + (m % 32) * 16 + ((m // 32) % 4) * 4 + k % 4; padding zero."""
    M, Ks = scale.shape
    Mp, Kp = -(-M // 128) * 128, -(-Ks // 4) * 4
    padded = torch.zeros((Mp, Kp), dtype=torch.uint8, device=scale.device)
    padded[:M, :Ks] = scale.view(torch.uint8)
    tiles = padded.view(Mp // 128, 4, 32, Kp // 4, 4).permute(0, 3, 2, 1, 4)  # [mt, kt, m%32, (m//32)%4, k%4]
    return tiles.reshape(Mp, Kp).view(scale.dtype)


def unswizzle_128x4(blocked: torch.Tensor, m: int, ks: int) -> torch.Tensor:
    """The inverse of swizzle_128x4: the [m, ks] scales (padding dropped)."""
    Mp, Kp = blocked.shape
    tiles = blocked.view(torch.uint8).reshape(Mp // 128, Kp // 4, 32, 4, 4).permute(0, 3, 2, 1, 4)
    return tiles.reshape(Mp, Kp)[:m, :ks].view(blocked.dtype)


def dequantize(out: torch.Tensor, scale: torch.Tensor, fmt: str, global_scale=None) -> torch.Tensor:
    """[M, H] float32 from a format's row-major codes and scales: codes x scales (x 1 / gs for
    NVFP4), as a GEMM consuming them computes its inputs."""
    if fmt == "fp8_1x128" or fmt == "mxfp8":
        v = out.float()
    else:
        v = e2m1_values(unpack_e2m1(out))
    M, H = v.shape
    s = scale.float()
    if fmt == "nvfp4":
        s = s / global_scale.float().reshape(())
    block = FORMAT_BLOCK[fmt]
    return (v.view(M, H // block, block) * s[..., None]).view(M, H)


def quantize(normed: torch.Tensor, format: str = "fp8_1x128", scale_layout: str = None, scale_mode: str = None,
             global_scale=None, scale_ue8m0: bool = False):
    """(out, block_scale) of [M, H] normed in any format. fp8_1x128: quantize_fp8_block (block_scale
    float32 [M, H/128], row-major; the ops' layouts are strides of it). The others: scale_layout
    "swizzled" (the default: swizzle_128x4) or "row"; MX scale_mode "rceil" (default) or "floor";
    NVFP4 needs global_scale."""
    if format == "fp8_1x128":
        return quantize_fp8_block(normed, scale_ue8m0)
    if format == "nvfp4":
        out, scale = quantize_nvfp4(normed, global_scale)
    else:
        out, scale = quantize_mx(normed, format, scale_mode or "rceil")
    return out, (scale if scale_layout == "row" else swizzle_128x4(scale))


def fused_add_rmsnorm_quant(input, residual, weight, eps=1e-6, format="fp8_1x128", scale_layout=None,
                            scale_mode=None, global_scale=None, norm_convention="torch"):
    """residual += input (in place, rounded to input's dtype); normed = rmsnorm(residual) * weight
    (by norm_convention); (out, block_scale) = quantize(normed, format, ...). Returns
    (out, block_scale, normed)."""
    s, x = residual_sum(input, residual, norm_convention)
    residual.copy_(s)
    normed = rms_normalize(x, weight, eps, input.dtype, norm_convention)
    return (*quantize(normed, format, scale_layout, scale_mode, global_scale), normed)


def rmsnorm_quant(input, weight, eps=1e-6, format="fp8_1x128", scale_layout=None, scale_mode=None,
                  global_scale=None, norm_convention="torch"):
    """fused_add_rmsnorm_quant without a residual: normed = rmsnorm(input) * weight."""
    normed = rms_normalize(input, weight, eps, input.dtype, norm_convention)
    return (*quantize(normed, format, scale_layout, scale_mode, global_scale), normed)
