"""Documented Python wrappers over torch.ops.fp8norm.*.

The wrappers accept inputs of shape (..., H) and view them as [M, H]; the ops themselves take
2-D tensors. See the README for the full contract.
"""
from __future__ import annotations

from typing import Tuple

import torch

Tensor = torch.Tensor

# The functional overloads, resolved once (calling an overload packet resolves it on every call).
_FUSED = torch.ops.fp8norm.fused_add_rmsnorm_fp8_block_quant.default
_PLAIN = torch.ops.fp8norm.rmsnorm_fp8_block_quant.default


def has_cuda_kernels() -> bool:
    """Whether this build registered CUDA kernels for the fp8norm ops."""
    return torch._C._dispatch_has_kernel_for_dispatch_key(
        "fp8norm::fused_add_rmsnorm_fp8_block_quant.out", "CUDA")


def block_scale_layout_strides(m: int) -> Tuple[int, int]:
    """Strides of the block_scale the functional ops return for M rows: (1, round_up(M, 4)),
    column-major with a TMA-aligned column stride, as DeepGEMM-style block-scaled GEMMs want."""
    return (1, (m + 3) // 4 * 4)


def _rows(t: Tensor, name: str, writable: bool) -> Tensor:
    if t.dim() < 1:
        raise ValueError(f"{name} must have at least one dimension (..., H), got a scalar")
    if t.dim() == 2:
        return t
    try:
        return t.view(-1, t.shape[-1])
    except RuntimeError:
        if writable:
            raise ValueError(
                f"{name} of shape {tuple(t.shape)} and strides {t.stride()} cannot be viewed as "
                f"[M, H]; it is updated in place, so it must be viewable (make it contiguous)")
        return t.reshape(-1, t.shape[-1])


def _unflatten(lead, out: Tensor, block_scale: Tensor, normed: Tensor):
    if len(lead) == 1:
        return out, block_scale, normed
    return (out.view(*lead, out.shape[-1]), block_scale.view(*lead, block_scale.shape[-1]),
            normed.view(*lead, normed.shape[-1]))


def fused_add_rmsnorm_fp8_block_quant(
    input: Tensor,
    residual: Tensor,
    weight: Tensor,
    eps: float = 1e-6,
    scale_ue8m0: bool = False,
) -> Tuple[Tensor, Tensor, Tensor]:
    """``residual += input; normed = rmsnorm(residual) * weight; (out, block_scale) = fp8_quant_1x128(normed)``
    in one memory pass.

    Args:
        input: (..., H) float16, bfloat16 or float32; H a positive multiple of 128.
        residual: same shape and dtype as input; updated in place (rounded to the dtype).
        weight: (H,), input's dtype or float32.
        eps: added to the mean square before the reciprocal square root.
        scale_ue8m0: round each block scale up to a power of two (UE8M0 scales).

    Returns:
        (out, block_scale, normed): out (..., H) float8_e4m3fn; block_scale (..., H/128) float32
        (for 2-D inputs strided (1, round_up(M, 4)): column-major, TMA-aligned); normed (..., H)
        of input's dtype. out * block_scale (broadcast per 128 elements) approximates normed.
    """
    if input.dim() == 2 and residual.dim() == 2:  # the op's own form: nothing to view
        return _FUSED(input, residual, weight, eps, scale_ue8m0)
    lead = input.shape[:-1]
    out, scale, normed = _FUSED(
        _rows(input, "input", False), _rows(residual, "residual", True), weight, eps, scale_ue8m0)
    return _unflatten(lead, out, scale, normed)


def rmsnorm_fp8_block_quant(
    input: Tensor,
    weight: Tensor,
    eps: float = 1e-6,
    scale_ue8m0: bool = False,
) -> Tuple[Tensor, Tensor, Tensor]:
    """``normed = rmsnorm(input) * weight; (out, block_scale) = fp8_quant_1x128(normed)`` in one
    memory pass (a model's first layer: no residual). Arguments and results as for
    :func:`fused_add_rmsnorm_fp8_block_quant`."""
    if input.dim() == 2:  # the op's own form: nothing to view
        return _PLAIN(input, weight, eps, scale_ue8m0)
    lead = input.shape[:-1]
    out, scale, normed = _PLAIN(
        _rows(input, "input", False), weight, eps, scale_ue8m0)
    return _unflatten(lead, out, scale, normed)
