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
