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

        Norms that subtract the mean (``LayerNorm``, ``GroupNorm``, batch and instance norms) or
        add a bias raise ValueError: this module would silently drop that part.

        The result follows this package's contract, which may round differently from `norm`'s own
        forward (e.g. ``LlamaRMSNorm`` rounds to the input dtype before multiplying by the weight;
        see the README's numerical contract)."""
        if isinstance(norm, _MEAN_SUBTRACTING):
            raise ValueError(f"{type(norm).__name__} subtracts the mean; only RMS norms (no mean subtraction) are supported")
        if isinstance(getattr(norm, "bias", None), torch.Tensor):
            raise ValueError(f"{type(norm).__name__} has a bias; only RMS norms without one are supported")
        if isinstance(norm, nn.RMSNorm) and len(norm.normalized_shape) != 1:
            raise ValueError(f"norm normalizes over {tuple(norm.normalized_shape)}; only one dimension (H,) is supported")
        weight = getattr(norm, "weight", None)
        if isinstance(norm, nn.RMSNorm) and weight is None:  # elementwise_affine=False
            weight = torch.ones(norm.normalized_shape)
        if not isinstance(weight, torch.Tensor) or weight.dim() != 1:
            raise ValueError(f"{type(norm).__name__} has no weight of shape (H,)")
        if hasattr(norm, "eps"):
            eps = norm.eps
        elif hasattr(norm, "variance_epsilon"):
            eps = norm.variance_epsilon
        else:
            raise ValueError(f"{type(norm).__name__} has neither an eps nor a variance_epsilon attribute")
        module = cls(weight.shape[0], eps, device="meta", **options)
        module.weight = nn.Parameter(weight.detach(), requires_grad=False)
        return module

    def forward(self, x: torch.Tensor, residual: Optional[torch.Tensor] = None) -> BlockQuantized:
        eps = torch.finfo(x.dtype).eps if self.eps is None else self.eps
        options = dict(scale_layout=self.scale_layout, scale_format=self.scale_format, normed=self.normed)
        if residual is None:
            return rmsnorm_fp8_block_quant(x, self.weight, eps, **options)
        return fused_add_rmsnorm_fp8_block_quant(x, residual, self.weight, eps, **options)

    def extra_repr(self) -> str:
        return (f"{self.hidden_size}, eps={self.eps}, scale_layout={self.scale_layout!r}, "
                f"scale_format={self.scale_format!r}, normed={self.normed}")
