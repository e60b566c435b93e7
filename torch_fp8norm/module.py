"""A drop-in module: RMSNorm (with the residual add) followed by FP8 1x128 block quantization."""
from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from ._fake import _ACTIVATIONS, _name
from .ops import (EPS_NONE, BlockQuantized, _check_options, _float_eps, fused_add_rmsnorm_fp8_block_quant,
                  rmsnorm_fp8_block_quant)


# Torch's norms that subtract a mean (nn.modules.batchnorm._NormBase: the batch and instance norms).
_MEAN_SUBTRACTING = (nn.LayerNorm, nn.GroupNorm, nn.modules.batchnorm._NormBase)


class FusedAddRMSNormFP8(nn.Module):
    """``forward(x, residual=None)``: with a residual, ``residual += x`` (in place) and the
    RMSNorm of the new residual; without, the RMSNorm of x; either way times ``weight`` and
    quantized to FP8 in 1x128 blocks, in one memory pass. Returns a :class:`BlockQuantized`
    ``(out, block_scale, normed)``.

    For inference: the weight is a parameter that does not require grad (the ops have no
    backward). ``eps=None`` means ``torch.finfo(torch.float32).eps`` for every input dtype, as
    in ``torch.nn.RMSNorm`` (whose docstring says ``torch.finfo(x.dtype).eps``; its kernels use
    the eps of their float32 arithmetic). The options are those of
    :func:`fused_add_rmsnorm_fp8_block_quant`, and so are the errors: TypeError for an argument of
    the wrong type, RuntimeError for a value the ops refuse (a hidden size that is not a positive
    multiple of 128, an eps that is not finite and >= 0, an unknown option).
    """

    def __init__(self, hidden_size: int, eps: Optional[float] = 1e-6, *, scale_layout: str = "deepgemm",
                 scale_format: str = "fp32", normed: bool = True, device=None, dtype=None) -> None:
        super().__init__()
        op = type(self).__name__
        _check_options(scale_layout, scale_format, normed, op)
        if isinstance(hidden_size, bool) or not isinstance(hidden_size, int):
            raise TypeError(f"{op}: hidden_size must be an int, got {type(hidden_size).__name__}")
        if hidden_size <= 0 or hidden_size % 128 != 0:
            raise RuntimeError(f"{op}: the hidden size H must be a positive multiple of 128, got {hidden_size}")
        if eps is not None:
            eps = _float_eps(op, eps)
            if not (eps >= 0 and eps != float("inf")):  # NaN fails the first test
                raise RuntimeError(f"{op}: eps must be finite and >= 0, got {eps:g}")
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

        Raises ValueError where this module would silently compute something else: modules that
        are not RMS norms (e.g. a ``Linear``), norms that subtract the mean (``LayerNorm``,
        ``GroupNorm``, batch and instance norms) or add a bias, and any norm whose own forward, run
        on a small probe input (rows whose mean square is 1, or near eps, where eps decides the
        result) on the weight's device and dtype, differs from this module's ``normed`` by more
        than the roundings of the conventions explain: two units in the last place of the
        weight's dtype (``LlamaRMSNorm`` rounds ``x * rstd`` to the input dtype before multiplying
        by the weight, where this package rounds once; see the README's numerical contract). The
        probe needs the weight's values: on the meta device it is skipped."""
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
        if weight.dtype not in _ACTIVATIONS:
            raise ValueError(f"{name} has a {_name(weight.dtype)} weight; the ops take float16, bfloat16 or float32")
        eps = norm.eps if hasattr(norm, "eps") else norm.variance_epsilon
        module = cls(weight.shape[0], eps, device="meta", **options)
        module.weight = nn.Parameter(weight.detach(), requires_grad=False)
        if weight.device.type != "meta":
            _probe(norm, name, module)
        return module

    def forward(self, x: torch.Tensor, residual: Optional[torch.Tensor] = None) -> BlockQuantized:
        """With a residual: ``residual += x`` in place, then the RMSNorm of the new residual, times
        ``weight``, quantized to FP8 in 1x128 blocks (:func:`fused_add_rmsnorm_fp8_block_quant`);
        without: the same of ``x`` (:func:`rmsnorm_fp8_block_quant`). x and residual: (..., H).
        Returns ``BlockQuantized(out, block_scale, normed)`` in the module's scale layout and
        format (``normed`` None with ``normed=False``). Raises RuntimeError, before writing
        anything, where autograd would record the call (no backward)."""
        eps = EPS_NONE if self.eps is None else self.eps
        options = dict(scale_layout=self.scale_layout, scale_format=self.scale_format, normed=self.normed)
        if residual is None:
            return rmsnorm_fp8_block_quant(x, self.weight, eps, **options)
        return fused_add_rmsnorm_fp8_block_quant(x, residual, self.weight, eps, **options)

    def extra_repr(self) -> str:
        return (f"{self.hidden_size}, eps={self.eps}, scale_layout={self.scale_layout!r}, "
                f"scale_format={self.scale_format!r}, normed={self.normed}")


def _probe_rows(h: int, eps: float, dtype: torch.dtype, device) -> torch.Tensor:
    """Rows of H values of mean square 1, 1e-2 .. 1e-6, and eps / 16 .. 16 eps (where eps decides
    rstd), from a fixed seed, in `dtype` on `device`."""
    squares = [1.0, 1e-2, 1e-4, 1e-6] + [eps * 4.0 ** k for k in range(-2, 3) if eps > 0]
    x = torch.randn(len(squares), h, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    x *= (torch.tensor(squares, dtype=torch.float64) / x.square().mean(-1)).sqrt()[:, None]
    return x.to(dtype).to(device)


def _probe(norm: nn.Module, name: str, module: FusedAddRMSNormFP8) -> None:
    """Refuses (ValueError) a norm whose own forward differs from the module's normed values on a
    probe input by more than 2 units in the last place of the weight's dtype (two roundings to
    it, as Hugging Face's LlamaRMSNorm does, where the ops round once), plus 2^-16 relative for a
    float32 mean square and rsqrt."""
    w = module.weight
    eps = EPS_NONE if module.eps is None else module.eps
    x = _probe_rows(w.shape[0], eps, w.dtype, w.device)
    with torch.no_grad():
        theirs = norm(x)
        ours = rmsnorm_fp8_block_quant(x, w, eps).normed
    if not isinstance(theirs, torch.Tensor) or theirs.shape != ours.shape:
        raise ValueError(f"{name}'s forward did not return one tensor of its input's shape {tuple(x.shape)} "
                         "on a probe input; it cannot be replaced by FusedAddRMSNormFP8")
    a, b = ours.double(), theirs.double()
    diff = (a - b).abs()
    bad = ~(diff <= (2 * torch.finfo(w.dtype).eps + 2.0 ** -16) * torch.maximum(a.abs(), b.abs()))  # NaN: bad
    if bool(bad.any()):
        worst = torch.where(bad, diff.nan_to_num(float("inf")), 0).argmax()
        row, col = divmod(int(worst), w.shape[0])
        raise ValueError(
            f"{name} computes something other than x * rsqrt(mean(x**2) + eps) * weight with eps = {eps:g}: on a "
            f"probe input its forward differs from FusedAddRMSNormFP8's normed values by up to {float(diff.max()):.3g} "
            f"(row {row}, element {col}: {float(b.flatten()[worst]):.6g} against {float(a.flatten()[worst]):.6g}), "
            f"more than the roundings of {_name(w.dtype)} explain. Gemma-style norms (x * rstd * (1 + weight)) and "
            "an eps attribute that is not the eps the forward uses are two causes")
