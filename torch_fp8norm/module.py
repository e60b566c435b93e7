"""A drop-in module: RMSNorm (with the residual add) followed by FP8 1x128 block quantization."""
from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from .ops import BlockQuantized, _check_options, fused_add_rmsnorm_fp8_block_quant, rmsnorm_fp8_block_quant


# Torch's norms that subtract a mean (nn.modules.batchnorm._NormBase: the batch and instance norms).
_MEAN_SUBTRACTING = (nn.LayerNorm, nn.GroupNorm, nn.modules.batchnorm._NormBase)


class FusedAddRMSNormFP8(nn.Module):
    """``forward(x, residual=None)``: with a residual, ``residual += x`` (in place) and the
    RMSNorm of the new residual; without, the RMSNorm of x; either way times ``weight`` and
    quantized to FP8 in 1x128 blocks, in one memory pass. Returns a :class:`BlockQuantized`
    ``(out, block_scale, normed)``.

    For inference: the weight is a parameter that does not require grad (the ops have no
    backward). ``eps=None`` means ``torch.finfo(x.dtype).eps`` at each call, as in
    ``torch.nn.RMSNorm``. The options are those of :func:`fused_add_rmsnorm_fp8_block_quant`.
    """

    def __init__(self, hidden_size: int, eps: Optional[float] = 1e-6, *, scale_layout: str = "deepgemm",
                 scale_format: str = "fp32", normed: bool = True, device=None, dtype=None) -> None:
        super().__init__()
        _check_options(scale_layout, scale_format)
        if hidden_size <= 0 or hidden_size % 128 != 0:
            raise ValueError(f"hidden_size must be a positive multiple of 128, got {hidden_size}")
        if eps is not None and not (eps >= 0 and eps != float("inf")):
            raise ValueError(f"eps must be finite and >= 0 (or None), got {eps}")
        self.hidden_size = hidden_size
        self.eps = eps
        self.scale_layout = scale_layout
        self.scale_format = scale_format
        self.normed = normed
        self.weight = nn.Parameter(torch.ones(hidden_size, device=device, dtype=dtype), requires_grad=False)

    @classmethod
    def from_rmsnorm(cls, norm: nn.Module, **options) -> "FusedAddRMSNormFP8":
        """The module for an RMSNorm: ``torch.nn.RMSNorm`` (one normalized dimension) or any
        module with a ``weight`` of shape (H,), an ``eps`` or ``variance_epsilon`` attribute and no
        bias that computes ``x * rsqrt(mean(x**2) + eps) * weight`` (e.g. Hugging Face's
        ``LlamaRMSNorm``; not Gemma's, which multiplies by ``1 + weight``). The weight is shared, not
        copied. ``options``: scale_layout, scale_format, normed.

        Modules that are not RMS norms (e.g. a ``Linear``), norms that subtract the mean
        (``LayerNorm``, ``GroupNorm``, batch and instance norms) or add a bias raise ValueError:
        this module would silently compute something else.

        The result follows this package's contract, which may round differently from `norm`'s own
        forward (e.g. ``LlamaRMSNorm`` rounds to the input dtype before multiplying by the weight;
        see the README's numerical contract)."""
        name = type(norm).__name__
        if isinstance(norm, _MEAN_SUBTRACTING):
            raise ValueError(f"{name} subtracts the mean; only RMS norms (no mean subtraction) are supported")
        if not isinstance(norm, nn.RMSNorm) and not hasattr(norm, "eps") and not hasattr(norm, "variance_epsilon"):
            raise ValueError(f"{name} is not an RMS norm: expected torch.nn.RMSNorm or a module with a weight of "
                             "shape (H,) and an eps or variance_epsilon attribute")
        if isinstance(getattr(norm, "bias", None), torch.Tensor):
            raise ValueError(f"{name} has a bias; only RMS norms without one are supported")
        if isinstance(norm, nn.RMSNorm) and len(norm.normalized_shape) != 1:
            raise ValueError(f"norm normalizes over {tuple(norm.normalized_shape)}; only one dimension (H,) is supported")
        weight = getattr(norm, "weight", None)
        if isinstance(norm, nn.RMSNorm) and weight is None:  # elementwise_affine=False
            weight = torch.ones(norm.normalized_shape)
        if not isinstance(weight, torch.Tensor) or weight.dim() != 1:
            raise ValueError(f"{name} has no weight of shape (H,)")
        eps = norm.eps if hasattr(norm, "eps") else norm.variance_epsilon
        module = cls(weight.shape[0], eps, device="meta", **options)
        module.weight = nn.Parameter(weight.detach(), requires_grad=False)
        return module

    def forward(self, x: torch.Tensor, residual: Optional[torch.Tensor] = None) -> BlockQuantized:
        """With a residual: ``residual += x`` in place, then the RMSNorm of the new residual, times
        ``weight``, quantized to FP8 in 1x128 blocks (:func:`fused_add_rmsnorm_fp8_block_quant`);
        without: the same of ``x`` (:func:`rmsnorm_fp8_block_quant`). x and residual: (..., H).
        Returns ``BlockQuantized(out, block_scale, normed)`` in the module's scale layout and
        format (``normed`` None with ``normed=False``). Raises RuntimeError, before writing
        anything, where autograd would record the call (no backward)."""
        eps = torch.finfo(x.dtype).eps if self.eps is None else self.eps
        options = dict(scale_layout=self.scale_layout, scale_format=self.scale_format, normed=self.normed)
        if residual is None:
            return rmsnorm_fp8_block_quant(x, self.weight, eps, **options)
        return fused_add_rmsnorm_fp8_block_quant(x, residual, self.weight, eps, **options)

    def extra_repr(self) -> str:
        return (f"{self.hidden_size}, eps={self.eps}, scale_layout={self.scale_layout!r}, "
                f"scale_format={self.scale_format!r}, normed={self.normed}")
