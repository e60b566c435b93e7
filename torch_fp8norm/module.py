"""A drop-in module: RMSNorm (with the residual add) followed by block quantization (FP8 1x128, MXFP8,
MXFP4 or NVFP4)."""
from __future__ import annotations

import warnings
from typing import Optional

import torch
from torch import nn

from ._fake import _ACTIVATIONS, _name, check_convention, parse_quant
from .ops import (EPS_NONE, BlockQuantized, _check_format_options, _check_options, _float_eps,
                  fused_add_rmsnorm_fp8_block_quant, fused_add_rmsnorm_quant, rmsnorm_fp8_block_quant, rmsnorm_quant)
from .reference import FORMAT_BLOCK, NORM_CONVENTIONS


# Torch's norms that subtract a mean (nn.modules.batchnorm._NormBase: the batch and instance norms).
_MEAN_SUBTRACTING = (nn.LayerNorm, nn.GroupNorm, nn.modules.batchnorm._NormBase)


class FusedAddRMSNormFP8(nn.Module):
    """``forward(x, residual=None)``: with a residual, ``residual += x`` (in place) and the
    RMSNorm of the new residual; without, the RMSNorm of x; either way times ``weight`` and
    quantized in blocks (``format``: FP8 1x128 by default, or MXFP8, MXFP4, NVFP4), in one memory pass.
    Returns a :class:`BlockQuantized` ``(out, block_scale, normed)``.

    For inference: the weight is a parameter that does not require grad (the ops have no
    backward). ``eps=None`` means ``torch.finfo(torch.float32).eps`` for every input dtype, as
    in ``torch.nn.RMSNorm`` (whose docstring says ``torch.finfo(x.dtype).eps``; its kernels use
    the eps of their float32 arithmetic). The options are those of
    :func:`fused_add_rmsnorm_quant` (:func:`fused_add_rmsnorm_fp8_block_quant` for fp8_1x128;
    None: the format's default, stored resolved), and so are the errors: TypeError for an argument
    of the wrong type, ValueError for an option that does not apply to the format, RuntimeError for
    a value the ops refuse (a hidden size that is not a positive multiple of the format's block, an
    eps that is not finite and >= 0, an unknown option). NVFP4's ``global_scale`` (the encode scale
    448 * 6 / amax, a float32 tensor of one element) is kept as a buffer of that name.
    """

    def __init__(self, hidden_size: int, eps: Optional[float] = 1e-6, *, format: str = "fp8_1x128",
                 scale_layout: Optional[str] = None, scale_format: Optional[str] = None,
                 scale_mode: Optional[str] = None, global_scale: Optional[torch.Tensor] = None, normed: bool = True,
                 norm_convention: str = "torch", device=None, dtype=None) -> None:
        super().__init__()
        op = type(self).__name__
        _check_format_options(op, format, scale_layout, scale_format, scale_mode, global_scale, normed,
                              norm_convention)
        if format == "fp8_1x128":
            scale_layout, scale_format = scale_layout or "deepgemm", scale_format or "fp32"
            _check_options(scale_layout, scale_format, normed, norm_convention, op)
        else:  # the ops' own checks (RuntimeError for an unknown value), the defaults resolved
            scale_layout = parse_quant(op, format, scale_layout, None, scale_mode, global_scale).layout
            check_convention(op, norm_convention)
            if format in ("mxfp8", "mxfp4"):
                scale_mode = scale_mode or "rceil"
        if isinstance(hidden_size, bool) or not isinstance(hidden_size, int):
            raise TypeError(f"{op}: hidden_size must be an int, got {type(hidden_size).__name__}")
        block = FORMAT_BLOCK[format]
        if hidden_size <= 0 or hidden_size % block != 0:
            raise RuntimeError(f"{op}: the hidden size H must be a positive multiple of {block}"
                               f"{'' if format == 'fp8_1x128' else f' (format {format!r})'}, got {hidden_size}")
        if eps is not None:
            eps = _float_eps(op, eps)
            if not (eps >= 0 and eps != float("inf")):  # NaN fails the first test
                raise RuntimeError(f"{op}: eps must be finite and >= 0, got {eps:g}")
        self.hidden_size = hidden_size
        self.eps = eps
        self.format = format
        self.scale_layout = scale_layout
        self.scale_format = scale_format
        self.scale_mode = scale_mode
        self.register_buffer("global_scale", global_scale)
        self.normed = normed
        self.norm_convention = norm_convention
        self.weight = nn.Parameter(torch.ones(hidden_size, device=device, dtype=dtype), requires_grad=False)

    @classmethod
    def from_rmsnorm(cls, norm: nn.Module, **options) -> "FusedAddRMSNormFP8":
        """The module for an RMSNorm: ``torch.nn.RMSNorm`` (one normalized dimension) or any
        module with a ``weight`` of shape (H,), an ``eps`` or ``variance_epsilon`` attribute and no
        bias that computes ``x * rsqrt(mean(x**2) + eps) * weight`` (e.g. Hugging Face's
        ``LlamaRMSNorm``, vLLM's ``RMSNorm``; not Gemma's, which multiplies by ``1 + weight``). The
        weight is shared, not copied. ``options``: those of the constructor (format, scale_layout,
        scale_format, scale_mode, global_scale, normed, norm_convention).

        The norm's own forward is run on a small probe input (rows whose mean square is 1, or near
        eps, where eps decides the result; on the weight's device, in its dtype, or in bfloat16
        for a float32 weight): with a residual argument too where the forward takes one and
        returns ``(normed, residual)``, as vLLM's does. The module gets the norm convention
        (README, "Norm conventions") under which this op's results equal the forward's up to the
        rounding of rstd (at most 2 units in the last place, in at most 1% of the probe's
        elements): ``"torch"`` for ``torch.nn.RMSNorm``, ``"hf"`` for ``LlamaRMSNorm`` and its
        Hugging Face cousins, ``"vllm"`` for vLLM's ``RMSNorm``. A ``norm_convention`` option
        forces one instead; the probe then allows the difference between conventions (two units
        in the last place of the weight's dtype).

        Raises ValueError where this module would silently compute something else: modules that
        are not RMS norms (e.g. a ``Linear``), norms that subtract the mean (``LayerNorm``,
        ``GroupNorm``, batch and instance norms) or add a bias, and any norm whose forward matches
        no convention on the probe. The probe needs the weight's values: on the meta device it is
        skipped (the convention is then "torch" unless given)."""
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
        forced = options.get("norm_convention")
        module = cls(weight.shape[0], eps, device="meta", **options)
        module.weight = nn.Parameter(weight.detach(), requires_grad=False)
        if weight.device.type != "meta":
            module.norm_convention = _probe(norm, name, module, forced)
        return module

    def forward(self, x: torch.Tensor, residual: Optional[torch.Tensor] = None) -> BlockQuantized:
        """With a residual: ``residual += x`` in place, then the RMSNorm of the new residual, times
        ``weight``, quantized in the module's format (:func:`fused_add_rmsnorm_quant`, or for
        fp8_1x128 :func:`fused_add_rmsnorm_fp8_block_quant`); without: the same of ``x``
        (:func:`rmsnorm_quant`, :func:`rmsnorm_fp8_block_quant`). x and residual: (..., H).
        Returns ``BlockQuantized(out, block_scale, normed)`` in the module's scale layout and
        format (``normed`` None with ``normed=False``). Raises RuntimeError, before writing
        anything, where autograd would record the call (no backward)."""
        return _forward(self, x, residual, self.norm_convention, self.normed)

    def extra_repr(self) -> str:
        fmt = "" if self.format == "fp8_1x128" else f"format={self.format!r}, "
        options = (f"scale_format={self.scale_format!r}" if self.format == "fp8_1x128"
                   else f"scale_mode={self.scale_mode!r}" if self.scale_mode else "global_scale")
        return (f"{self.hidden_size}, eps={self.eps}, {fmt}scale_layout={self.scale_layout!r}, {options}, "
                f"normed={self.normed}, norm_convention={self.norm_convention!r}")


def _forward(m: FusedAddRMSNormFP8, x: torch.Tensor, residual: Optional[torch.Tensor], norm_convention: str,
             normed: bool) -> BlockQuantized:
    """The module's call under a norm convention (forward's, or a candidate of from_rmsnorm's probe)."""
    eps = EPS_NONE if m.eps is None else m.eps
    if m.format == "fp8_1x128":
        options = dict(scale_layout=m.scale_layout, scale_format=m.scale_format, normed=normed,
                       norm_convention=norm_convention)
        if residual is None:
            return rmsnorm_fp8_block_quant(x, m.weight, eps, **options)
        return fused_add_rmsnorm_fp8_block_quant(x, residual, m.weight, eps, **options)
    options = dict(format=m.format, scale_layout=m.scale_layout, scale_mode=m.scale_mode,
                   global_scale=m.global_scale, normed=normed, norm_convention=norm_convention)
    if residual is None:
        return rmsnorm_quant(x, m.weight, eps, **options)
    return fused_add_rmsnorm_quant(x, residual, m.weight, eps, **options)


def _probe_rows(h: int, eps: float, dtype: torch.dtype, device, seed: int = 0) -> torch.Tensor:
    """Rows of H values of mean square 1, 1e-2 .. 1e-6, and eps / 16 .. 16 eps (where eps decides
    rstd), from a fixed seed, in `dtype` on `device`."""
    squares = [1.0, 1e-2, 1e-4, 1e-6] + [eps * 4.0 ** k for k in range(-2, 3) if eps > 0]
    x = torch.randn(len(squares), h, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    x *= (torch.tensor(squares, dtype=torch.float64) / x.square().mean(-1)).sqrt()[:, None]
    return x.to(dtype).to(device)


def _run_norm(norm: nn.Module, x: torch.Tensor, residual: Optional[torch.Tensor]):
    """The norm's forward on the probe: (normed,) or, with a residual, (normed, new residual) where
    it takes one and returns both; None where it does not."""
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # e.g. torch's: a float32 weight with bfloat16 input
            out = norm(x) if residual is None else norm(x.clone(), residual.clone())
    except (TypeError, RuntimeError):
        if residual is None:
            raise
        return None
    if residual is None:
        return (out,) if isinstance(out, torch.Tensor) and out.shape == x.shape else None
    ok = isinstance(out, tuple) and len(out) == 2 and all(isinstance(t, torch.Tensor) and t.shape == x.shape
                                                          for t in out)
    return out if ok else None


def _ulps(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """|a - b| in units in the last place of their 2-byte dtype (NaN anywhere: huge)."""
    def ordered(t):
        i = t.view(torch.int16).long()
        return torch.where(i < 0, -(i & 0x7FFF), i)

    d = (ordered(a) - ordered(b)).abs()
    return torch.where(torch.isnan(a) | torch.isnan(b), torch.full_like(d, 1 << 20), d)


def _probe(norm: nn.Module, name: str, module: FusedAddRMSNormFP8, forced: Optional[str]) -> str:
    """The convention under which the op's normed values (and new residual) equal the norm's own
    forward on a probe input; refuses (ValueError) a norm that matches none. Equal: for 2-byte
    dtypes at most 2 units in the last place in at most 1% of the elements (rstd rounded
    differently near a boundary; a float32 mean square and rsqrt are a few float32 ulps off
    the correctly rounded rstd of the ops); for float32 (where the conventions coincide) within
    2^-16 relative. A forced convention: within 2 units in the last place of the weight's dtype
    plus 2^-16 relative, the difference the conventions make."""
    w = module.weight
    eps = EPS_NONE if module.eps is None else module.eps
    dtype = torch.bfloat16 if w.dtype == torch.float32 else w.dtype
    x = _probe_rows(w.shape[0], eps, dtype, w.device)
    try:
        theirs = _run_norm(norm, x, None)
    except (TypeError, RuntimeError):  # a float32 norm that refuses bfloat16 input
        dtype = torch.float32
        x = x.float()
        theirs = _run_norm(norm, x, None)
    if theirs is None:
        raise ValueError(f"{name}'s forward did not return one tensor of its input's shape {tuple(x.shape)} "
                         "on a probe input; it cannot be replaced by FusedAddRMSNormFP8")
    r = _probe_rows(w.shape[0], eps, dtype, w.device, seed=1)
    with_residual = _run_norm(norm, x, r)
    if with_residual is not None:
        theirs = with_residual
    candidates = [forced] if forced else list(NORM_CONVENTIONS)
    worst = None
    for conv in candidates:
        with torch.no_grad():
            if with_residual is None:
                ours = (_forward(module, x, None, conv, True).normed,)
            else:
                rc = r.clone()
                ours = (_forward(module, x, rc, conv, True).normed, rc)
        diffs = [_compare(o, t.to(o.dtype), w.dtype, forced is not None) for o, t in zip(ours, theirs)]
        bad = next((d for d in diffs if d is not None), None)
        if bad is None:
            return conv
        if worst is None or bad[0] > worst[0]:
            worst = bad
    diff, row, col, want, got = worst
    raise ValueError(
        f"{name} computes something other than x * rsqrt(mean(x**2) + eps) * weight with eps = {eps:g}: on a "
        f"probe input its forward differs from FusedAddRMSNormFP8's normed values by up to {diff:.3g} "
        f"(row {row}, element {col}: {want:.6g} against {got:.6g}) under "
        f"{'norm_convention ' + repr(forced) if forced else 'every norm convention'}, more than the rounding of "
        f"rstd explains. Gemma-style norms (x * rstd * (1 + weight)) and an eps attribute that is not the eps the "
        "forward uses are two causes")


def _compare(ours: torch.Tensor, theirs: torch.Tensor, weight_dtype, loose: bool):
    """None where they agree (_probe's rule), else (largest difference, row, element, theirs, ours)."""
    a, b = ours.double(), theirs.double()
    diff = (a - b).abs()
    if loose or ours.dtype == torch.float32:
        eps = torch.finfo(weight_dtype).eps if loose else 0.0
        bad = ~(diff <= (2 * eps + 2.0 ** -16) * torch.maximum(a.abs(), b.abs()))  # NaN: bad
    else:
        u = _ulps(ours, theirs)
        bad = u > 2 if int((u != 0).sum()) * 100 <= u.numel() else u != 0
    if not bool(bad.any()):
        return None
    worst = torch.where(bad, diff.nan_to_num(float("inf")), 0).argmax()
    row, col = divmod(int(worst), ours.shape[-1])
    return float(diff.flatten()[worst]), row, col, float(b.flatten()[worst]), float(a.flatten()[worst])
