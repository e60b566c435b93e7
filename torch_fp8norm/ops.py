"""Documented Python wrappers over torch.ops.fp8norm.*.

The wrappers accept inputs of shape (..., H) and view them as [M, H]; the ops themselves take
2-D tensors. They choose the block-scale layout and format and whether ``normed`` is written, and
return a :class:`BlockQuantized`. Unlike the raw ops they are autograd-safe: a call that autograd
would record raises before anything is written, and the residual they update gets its version
counter bumped, as torch's in-place ops do. See the README for the full contract.

Errors, one type per mistake whatever the entry point: an argument of the wrong Python type
(None for a tensor, a string for a bool) raises TypeError naming it; an argument value the ops
refuse (shape, dtype, device, strides, overlap, eps, hidden size, option name) raises
RuntimeError, the raw ops' own error, before anything is written.
"""
import numbers
from typing import NamedTuple, Optional, Tuple

import torch
from torch.compiler import is_compiling as _is_compiling
from torch.compiler import is_dynamo_compiling as _is_dynamo_compiling

from ._fake import FUSED_OP, PLAIN_OP, _list
from .reference import NORM_CONVENTIONS
from ._libraries import OPS

Tensor = torch.Tensor


def _direct(overload):
    """What ``overload(...)`` runs, less OpOverload.__call__'s Python frame: its C++ callable
    ``_op``, which goes through the dispatcher (modes, subclasses, fake tensors) just the same.
    Not while Dynamo traces (_is_dynamo_compiling): it cannot trace it. The overload itself where torch
    routes the call through Python instead (torch 2.14's PyObject dispatch, for ops defined in
    Python) or the private attribute is gone (tests/test_python_api.py pins it)."""
    op = getattr(overload, "_op", None)
    return overload if op is None or getattr(overload, "_pyobj_dispatcher", None) is not None else op


# The overloads, resolved once (calling an overload packet resolves it on every call), and their
# direct callables for eager calls.
_FUSED = torch.ops.fp8norm.fused_add_rmsnorm_fp8_block_quant.default
_FUSED_OUT = torch.ops.fp8norm.fused_add_rmsnorm_fp8_block_quant.out
_PLAIN = torch.ops.fp8norm.rmsnorm_fp8_block_quant.default
_PLAIN_OUT = torch.ops.fp8norm.rmsnorm_fp8_block_quant.out
_FUSED_DIRECT = _direct(_FUSED)
_PLAIN_DIRECT = _direct(_PLAIN)
_FUSED_OPS = (_FUSED, _FUSED_OUT, _FUSED_DIRECT, _direct(_FUSED_OUT))
_PLAIN_OPS = (_PLAIN, _PLAIN_OUT, _PLAIN_DIRECT, _direct(_PLAIN_OUT))

# The raw ops' Autograd kernel: torch's fallthrough. They record no history and bump no version
# counter, as an engine's kernels; cheaper than torch's default fallback, which would also hang
# a warning node on the functional ops' outputs (docs/design.md, "Autograd").
_AUTOGRAD = torch.library.Library("fp8norm", "IMPL")
for _name in OPS:
    _AUTOGRAD.impl(_name, torch.library.fallthrough_kernel, "Autograd")

_FUSED_DOC = """``residual += input`` (in place, rounded to input's dtype), ``normed = rmsnorm(residual) * weight``,
``(out, block_scale) = fp8_quant_1x128(normed)``, in one memory pass. For inference: no backward.
A raw op, as an engine's kernel: autograd does not record it (outputs do not require grad) and
the tensors it writes keep their version counters; the Python functions refuse grad and bump.

input, residual: [M, H] float16, bfloat16 or float32, H a positive multiple of 128; weight: [H],
input's dtype or float32. out: [M, H] float8_e4m3fn; block_scale: [M, H/128] float32 (amax / 448,
with scale_ue8m0 rounded up to a power of two); normed_out: [M, H] of input's dtype.

The default overload returns (out, block_scale, normed_out), block_scale with strides
(1, round_up(M, 4)). The .out overload writes its keyword arguments instead: any non-overlapping
block_scale strides, an int32 [M, ceil(H/512)] block_scale of packed UE8M0 exponents with
scale_ue8m0, normed_out=None to skip the normed values. norm_convention: None (``"torch"``),
``"hf"``, ``"vllm"`` or ``"flashinfer"``, where the norm rounds (README, "Norm conventions").
Contract and layouts: the README; the executable specification: torch_fp8norm.reference.
torch_fp8norm.fused_add_rmsnorm_fp8_block_quant is the documented Python function over both
overloads."""

_PLAIN_DOC = """``normed = rmsnorm(input) * weight``, ``(out, block_scale) = fp8_quant_1x128(normed)``,
in one memory pass (a model's first layer: no residual). Arguments, outputs and overloads as for
torch.ops.fp8norm.fused_add_rmsnorm_fp8_block_quant; torch_fp8norm.rmsnorm_fp8_block_quant is the
documented Python function over both overloads."""


def _document(packet, doc: str) -> None:
    """Gives the op (an OpOverloadPacket, cached by torch.ops) and each overload a docstring."""
    packet.__doc__ = doc
    for name in packet.overloads():
        overload = getattr(packet, name)
        overload.__doc__ = f"{overload._schema}\n\n{doc}"


_document(torch.ops.fp8norm.fused_add_rmsnorm_fp8_block_quant, _FUSED_DOC)
_document(torch.ops.fp8norm.rmsnorm_fp8_block_quant, _PLAIN_DOC)
_QUANT_DOC = """As fp8norm.{what}, for every block format: ``format`` ``"fp8_1x128"`` (default), ``"mxfp8"``,
``"mxfp4"`` or ``"nvfp4"``; ``scale_layout``, ``scale_format``, ``scale_mode`` None for the format's
default; ``global_scale`` (nvfp4 only, required) a float32 tensor of one element on input's device.
Outputs: out float8_e4m3fn [M, H] (fp8_1x128, mxfp8) or float4_e2m1fn_x2 [M, H/2]; block_scale as the
format and layout say (README, "Block formats"); normed_out [M, H]. A raw op, as the fp8 ops: no
autograd, RuntimeError for every value it refuses. torch_fp8norm.{function} is the documented Python
function; torch_fp8norm.reference.quantize the executable specification."""
_document(torch.ops.fp8norm.fused_add_rmsnorm_quant,
          _QUANT_DOC.format(what="fused_add_rmsnorm_fp8_block_quant", function="fused_add_rmsnorm_quant"))
_document(torch.ops.fp8norm.rmsnorm_quant,
          _QUANT_DOC.format(what="rmsnorm_fp8_block_quant", function="rmsnorm_quant"))

BLOCK = 128
SCALE_LAYOUTS = ("deepgemm", "scaled_mm", "row")
SCALE_FORMATS = ("fp32", "ue8m0", "ue8m0_packed")


class BlockQuantized(NamedTuple):
    """What the wrappers return.

    out: (..., H) float8_e4m3fn. block_scale: (..., H/128) float32, one scale per 1x128 block, in
    the chosen layout (``"ue8m0_packed"``: (..., ceil(H/512)) int32, four exponents per word).
    normed: (..., H) of input's dtype, or None with ``normed=False``. ``out * block_scale`` (each
    scale broadcast over its 128 elements) approximates ``normed``.
    """

    out: Tensor
    block_scale: Tensor
    normed: Optional[Tensor]


def block_scale_columns(h: int, scale_format: str = "fp32") -> int:
    """Columns of the block_scale of rows of H elements: H/128 scales, or with
    ``"ue8m0_packed"`` ceil(H/512) int32 words of four UE8M0 exponents."""
    return (h // BLOCK + 3) // 4 if scale_format == "ue8m0_packed" else h // BLOCK


def block_scale_strides(m: int, h: int, layout: str = "deepgemm", scale_format: str = "fp32") -> Tuple[int, int]:
    """Strides of the [M, block_scale_columns(H, scale_format)] block_scale of M rows of H
    elements in `layout`:

    - ``"deepgemm"`` (the functional ops' own): ``(1, round_up(M, 4))``, column-major with a
      TMA-aligned column stride, as DeepGEMM-style block-scaled GEMMs want;
    - ``"scaled_mm"``: ``(1, M)``, column-major, as ``torch._scaled_mm`` wants 1x128 scales;
    - ``"row"``: row-major (contiguous).
    """
    if layout == "deepgemm":
        return (1, (m + 3) // 4 * 4)
    if layout == "scaled_mm":
        return (1, max(m, 1))
    if layout == "row":
        return (block_scale_columns(h, scale_format), 1)
    _check_option("scale_layout", layout, SCALE_LAYOUTS, "torch_fp8norm.block_scale_strides")
    raise AssertionError(layout)  # unreachable: _check_option raised


def _check_options(scale_layout: str, scale_format: str, normed: bool, norm_convention: str, op: str) -> bool:
    """The ops' scale_ue8m0 for the options: RuntimeError for an unknown one, TypeError for one of
    the wrong type."""
    if (scale_layout not in SCALE_LAYOUTS or scale_format not in SCALE_FORMATS
            or (normed is not True and normed is not False) or norm_convention not in NORM_CONVENTIONS):
        _check_option("scale_layout", scale_layout, SCALE_LAYOUTS, op)
        _check_option("scale_format", scale_format, SCALE_FORMATS, op)
        _check_option("norm_convention", norm_convention, NORM_CONVENTIONS, op)
        raise TypeError(f"{op}: normed must be a bool, got {type(normed).__name__}") from None
    return scale_format != "fp32"


def _check_option(name: str, value, allowed: Tuple[str, ...], op: str) -> None:
    if value not in allowed:
        if not isinstance(value, str):
            raise TypeError(f"{op}: {name} must be a str, one of {allowed}, got {type(value).__name__}") from None
        raise RuntimeError(f"{op}: {name} must be one of {allowed}, got {value!r}")


def _check_types(op: str, input, residual, weight, eps, fused: bool) -> None:
    """TypeError naming the first argument of the wrong Python type, if any. Called only once a
    call has failed: the common path pays nothing for it (an exception handler)."""
    for name, t in (("input", input), ("residual", residual), ("weight", weight)):
        if (fused or name != "residual") and not isinstance(t, Tensor):
            raise TypeError(f"{op}: {name} must be a torch.Tensor, got {type(t).__name__}") from None
    _check_eps_type(op, eps)


def _inference_update_allowed(op: str) -> bool:
    """For an inference tensor residual: True inside inference mode; outside it, torch's in-place ops
    refuse to update one (it has no version counter), and so do these functions."""
    if _inference_mode():
        return True
    raise RuntimeError(f"{op}: residual is an inference tensor, updated in place: as for torch's in-place ops, "
                       "that is allowed only inside torch.inference_mode() (or pass residual.clone(), a normal "
                       "tensor)")


def _refuse_grad(op: str, input: Tensor, residual: Optional[Tensor], weight: Tensor) -> None:
    """Raises where autograd would record the call (grad mode on, checked by the caller): the ops
    have no backward, so a result that silently did not track grad would be wrong."""
    for name, t in (("input", input), ("residual", residual), ("weight", weight)):
        if t is not None and t.requires_grad:
            raise RuntimeError(
                f"{op}: {name} requires grad, but these ops have no backward (they are for inference). Call "
                f"them under torch.no_grad() or torch.inference_mode(), or pass {name}.detach()")


def _rows(op: str, t: Tensor, name: str, writable: bool) -> Tensor:
    dim = t.dim()
    if dim == 2:
        return t
    if dim < 1:
        raise RuntimeError(f"{op}: {name} must have at least one dimension (..., H), got a scalar")
    try:
        return t.view(-1, t.shape[-1])
    except RuntimeError:
        if writable:
            raise RuntimeError(
                f"{op}: {name} of shape {_list(t.shape)} and strides {_list(t.stride())} cannot be viewed as "
                f"[M, H]; it is updated in place, so it must be viewable (make it contiguous)") from None
        return t.reshape(-1, t.shape[-1])


def _outputs(x: Tensor, scale_layout: str, scale_format: str, normed: bool):
    """out, block_scale and normed (or None) for the [M, H] input x, block_scale in scale_layout."""
    m, h = x.shape
    out = torch.empty((m, h), dtype=torch.float8_e4m3fn, device=x.device)
    scale = torch.empty_strided((m, block_scale_columns(h, scale_format)),
                                block_scale_strides(m, h, scale_layout, scale_format),
                                dtype=torch.int32 if scale_format == "ue8m0_packed" else torch.float32,
                                device=x.device)
    return out, scale, (torch.empty((m, h), dtype=x.dtype, device=x.device) if normed else None)


def _result(lead, out: Tensor, scale: Tensor, normed: Optional[Tensor]) -> BlockQuantized:
    if len(lead) != 1:
        out, scale = out.view(*lead, out.shape[-1]), scale.view(*lead, scale.shape[-1])
        normed = None if normed is None else normed.view(*lead, normed.shape[-1])
    return BlockQuantized(out, scale, normed)


# The common call's host cost counts every lookup. _as_result(cls, t) is BlockQuantized._make(t)
# less its length check (the ops' schemas fix three returns).
_as_result = tuple.__new__
_is_grad_enabled = torch.is_grad_enabled
_inference_mode = torch.is_inference_mode_enabled
# After writing residual, its version counter is bumped, as by torch's in-place ops: not while
# torch.compile traces (the graph's own mutation does), nor for an inference tensor (it has none;
# _inference_update_allowed refuses one outside inference mode before anything is written), by
#   bump = not (residual.is_inference() and _inference_update_allowed(op))   in eager code.
try:  # what torch.autograd.graph.increment_version calls, less its isinstance test (a tuple of tensors)
    from torch._C import _increment_version as _bump_versions
except ImportError:  # pragma: no cover  (tests/test_python_api.py pins the private name)
    from torch.autograd.graph import increment_version as _bump_versions


# eps=None: what torch.nn.RMSNorm and F.rms_norm use for float16, bfloat16 and float32 inputs alike,
# the eps of their float32 arithmetic (their docstrings say torch.finfo(x.dtype).eps; the kernels
# take the eps of the opmath type).
EPS_NONE = torch.finfo(torch.float32).eps


def _check_eps_type(op: str, eps) -> None:
    """TypeError for an eps that the ops' float argument does not take either (None is EPS_NONE)."""
    if eps is not None and not isinstance(eps, (numbers.Real, Tensor)):
        raise TypeError(f"{op}: eps must be a float (or None: torch.finfo(torch.float32).eps, as in "
                        f"torch.nn.RMSNorm), got {type(eps).__name__}") from None


def _float_eps(op: str, eps) -> float:
    """eps as a float; None means EPS_NONE, as in torch.nn.RMSNorm."""
    _check_eps_type(op, eps)
    return EPS_NONE if eps is None else float(eps)


def _call(op: str, overloads, input: Tensor, residual: Optional[Tensor], weight: Tensor, eps,
          scale_layout: str, scale_format: str, normed: bool, norm_convention: str) -> BlockQuantized:
    """Either op (residual None: rmsnorm_*) for (..., H) inputs and any options: the functional
    overload where its outputs are what was asked for, else .out into outputs allocated here.
    overloads: _FUSED_OPS or _PLAIN_OPS."""
    ue8m0 = _check_options(scale_layout, scale_format, normed, norm_convention, op)
    if eps is None:
        eps = EPS_NONE
    if _is_grad_enabled():
        _refuse_grad(op, input, residual, weight)
    if residual is not None and residual.shape != input.shape:  # the ops see only the [M, H] views
        raise RuntimeError(f"{op}: residual must have the shape of input {_list(input.shape)}, "
                           f"got {_list(residual.shape)}")
    functional, out_op = overloads[:2] if _is_dynamo_compiling() else overloads[2:]
    bump = residual is not None and not (
        _is_compiling() or (residual.is_inference() and _inference_update_allowed(op)))
    lead, x = input.shape[:-1], _rows(op, input, "input", False)
    ins = (x, weight) if residual is None else (x, _rows(op, residual, "residual", True), weight)
    conv = None if norm_convention == "torch" else norm_convention  # None: the ops' default, no string
    if scale_layout == "deepgemm" and scale_format != "ue8m0_packed" and normed:
        result = _result(lead, *functional(*ins, eps, ue8m0, conv))
    else:
        out, scale, n = _outputs(x, scale_layout, scale_format, normed)
        out_op(*ins, eps, ue8m0, conv, out=out, block_scale=scale, normed_out=n)
        result = _result(lead, out, scale, n)
    if bump:
        _bump_versions((residual,))
    return result


def fused_add_rmsnorm_fp8_block_quant(
    input: Tensor,
    residual: Tensor,
    weight: Tensor,
    eps: Optional[float] = 1e-6,
    *,
    scale_layout: str = "deepgemm",
    scale_format: str = "fp32",
    normed: bool = True,
    norm_convention: str = "torch",
) -> BlockQuantized:
    """``residual += input; normed = rmsnorm(residual) * weight; (out, block_scale) = fp8_quant_1x128(normed)``
    in one memory pass.

    Args:
        input: (..., H) float16, bfloat16 or float32; H a positive multiple of 128.
        residual: same shape and dtype as input; updated in place (rounded to the dtype).
        weight: (H,), input's dtype or float32.
        eps: added to the mean square before the reciprocal square root; None means
            ``torch.finfo(torch.float32).eps`` for every input dtype, as in ``torch.nn.RMSNorm``.
        scale_layout: ``"deepgemm"`` (column-major, column stride round_up(M, 4); the default),
            ``"scaled_mm"`` (column-major, column stride M) or ``"row"`` (row-major); see
            :func:`block_scale_strides`. The layout of a 2-D call's [M, H/128] scales;
            with leading dimensions block_scale is a view of them.
        scale_format: ``"fp32"`` (amax / 448), ``"ue8m0"`` (that rounded up to a power of two,
            as float32) or ``"ue8m0_packed"`` (those powers of two as UE8M0 exponent bytes, four
            per int32: block_scale is int32 [..., ceil(H/512)], byte g % 4 of word g / 4 holding
            block g's biased exponent, padding bytes zero; DeepGEMM's sm_100 format).
        normed: write and return ``normed`` (a bool); False skips its stores (returned as None).
        norm_convention: where the norm rounds, as the model code it replaces does (README, "Norm
            conventions"): ``"torch"`` (``F.rms_norm`` of the rounded residual sum, one rounding;
            the default), ``"hf"`` (Hugging Face ``LlamaRMSNorm``: x * rstd rounded, then times
            weight), ``"vllm"`` (vLLM ``RMSNorm``: the norm of the float32 sum, two roundings) or
            ``"flashinfer"`` (FlashInfer ``fused_add_rmsnorm``: the float32 sum, one rounding).
            The same for float32 inputs.

    Returns:
        BlockQuantized(out, block_scale, normed).

    Raises TypeError for an argument of the wrong type, and RuntimeError for an argument value
    the op refuses, where autograd would record the call (grad mode on and input, residual or
    weight requiring grad: there is no backward) and for an inference tensor residual outside
    inference mode; all before writing anything. residual's version counter is bumped, as by
    torch's in-place ops (not for inference tensors, nor while torch.compile traces).
    """
    try:
        if (input.dim() == 2 and scale_layout == "deepgemm" and scale_format == "fp32" and normed is True
                and eps is not None and norm_convention == "torch"):
            # The functional op as is: the common call's host cost, kept to the checks it needs.
            if _is_grad_enabled() and (input.requires_grad or residual.requires_grad or weight.requires_grad):
                _refuse_grad(FUSED_OP, input, residual, weight)
            if _is_compiling():  # the graph holds the op and its mutation
                return _as_result(BlockQuantized, _FUSED(input, residual, weight, eps, False))
            bump = not (residual.is_inference() and _inference_update_allowed(FUSED_OP))
            result = _FUSED_DIRECT(input, residual, weight, eps, False)
            if bump:
                _bump_versions((residual,))
            return _as_result(BlockQuantized, result)
        return _call(FUSED_OP, _FUSED_OPS, input, residual, weight, eps, scale_layout, scale_format, normed,
                     norm_convention)
    except Exception:
        _check_types(FUSED_OP, input, residual, weight, eps, True)  # a TypeError where one is due
        raise


def rmsnorm_fp8_block_quant(
    input: Tensor,
    weight: Tensor,
    eps: Optional[float] = 1e-6,
    *,
    scale_layout: str = "deepgemm",
    scale_format: str = "fp32",
    normed: bool = True,
    norm_convention: str = "torch",
) -> BlockQuantized:
    """``normed = rmsnorm(input) * weight; (out, block_scale) = fp8_quant_1x128(normed)`` in one
    memory pass (a model's first layer: no residual). Arguments, results and errors as for
    :func:`fused_add_rmsnorm_fp8_block_quant`."""
    try:
        if (input.dim() == 2 and scale_layout == "deepgemm" and scale_format == "fp32" and normed is True
                and eps is not None and norm_convention == "torch"):
            if _is_grad_enabled() and (input.requires_grad or weight.requires_grad):
                _refuse_grad(PLAIN_OP, input, None, weight)
            plain = _PLAIN if _is_dynamo_compiling() else _PLAIN_DIRECT
            return _as_result(BlockQuantized, plain(input, weight, eps, False))  # the functional op as is
        return _call(PLAIN_OP, _PLAIN_OPS, input, None, weight, eps, scale_layout, scale_format, normed,
                     norm_convention)
    except Exception:
        _check_types(PLAIN_OP, input, None, weight, eps, False)
        raise


# ---- Every block format (README, "Block formats"): MXFP8, MXFP4 and NVFP4 beside FP8 1x128.
FORMATS = ("fp8_1x128", "mxfp8", "mxfp4", "nvfp4")
from ._fake import FUSED_QUANT_OP, PLAIN_QUANT_OP, _quant_outputs, parse_quant  # noqa: E402  (the ops as named)
_QUANT_OPS = {True: (torch.ops.fp8norm.fused_add_rmsnorm_quant.default, torch.ops.fp8norm.fused_add_rmsnorm_quant.out),
              False: (torch.ops.fp8norm.rmsnorm_quant.default, torch.ops.fp8norm.rmsnorm_quant.out)}


def _check_format_options(op: str, format, scale_layout, scale_format, scale_mode, global_scale, normed,
                          norm_convention) -> None:
    """TypeError for an option of the wrong type; ValueError for one that does not apply to the
    format (and for nvfp4 without global_scale, or another format with one). Unknown values are
    the ops' to refuse (RuntimeError, as for every value they refuse)."""
    for name, value in (("format", format), ("scale_layout", scale_layout), ("scale_format", scale_format),
                        ("scale_mode", scale_mode), ("norm_convention", norm_convention)):
        if not (isinstance(value, str) or (value is None and name not in ("format", "norm_convention"))):
            raise TypeError(f"{op}: {name} must be a str, got {type(value).__name__}")
    if normed is not True and normed is not False:
        raise TypeError(f"{op}: normed must be a bool, got {type(normed).__name__}")
    if global_scale is not None and not isinstance(global_scale, Tensor):
        raise TypeError(f"{op}: global_scale must be a torch.Tensor, got {type(global_scale).__name__}")
    if format not in FORMATS:
        return  # the op names the formats
    fp8_layout = scale_layout in SCALE_LAYOUTS
    if (scale_layout == "swizzled" and format == "fp8_1x128") or (fp8_layout and scale_layout != "row"
                                                                  and format != "fp8_1x128"):
        owner = "the MX and NV formats" if scale_layout == "swizzled" else "format 'fp8_1x128'"
        raise ValueError(f"{op}: scale_layout {scale_layout!r} applies to {owner} only, not to format {format!r}")
    if scale_format is not None and format != "fp8_1x128":
        raise ValueError(f"{op}: scale_format applies to format 'fp8_1x128' only; format {format!r} has its own "
                         f"scale dtype (got scale_format={scale_format!r})")
    if scale_mode is not None and format not in ("mxfp8", "mxfp4"):
        raise ValueError(f"{op}: scale_mode applies to the MX formats only ('mxfp8', 'mxfp4'), not to format "
                         f"{format!r} (got scale_mode={scale_mode!r})")
    if format == "nvfp4" and global_scale is None:
        raise ValueError(f"{op}: format 'nvfp4' needs global_scale, a float32 tensor of one element on input's "
                         "device: the encode scale 448 * 6 / amax of the tensor, as FlashInfer and vLLM take it")
    if format != "nvfp4" and global_scale is not None:
        raise ValueError(f"{op}: global_scale applies to format 'nvfp4' only, not to format {format!r}")


def _quant_call(op: str, input: Tensor, residual: Optional[Tensor], weight: Tensor, eps, format, scale_layout,
                scale_format, scale_mode, global_scale, normed, norm_convention) -> BlockQuantized:
    _check_format_options(op, format, scale_layout, scale_format, scale_mode, global_scale, normed,
                          norm_convention)
    if eps is None:
        eps = EPS_NONE
    if _is_grad_enabled():
        _refuse_grad(op, input, residual, weight)
    if residual is not None and residual.shape != input.shape:
        raise RuntimeError(f"{op}: residual must have the shape of input {_list(input.shape)}, "
                           f"got {_list(residual.shape)}")
    functional, out_op = _QUANT_OPS[residual is not None]
    bump = residual is not None and not (
        _is_compiling() or (residual.is_inference() and _inference_update_allowed(op)))
    lead, x = input.shape[:-1], _rows(op, input, "input", False)
    ins = (x, weight) if residual is None else (x, _rows(op, residual, "residual", True), weight)
    conv = None if norm_convention == "torch" else norm_convention
    opts = (eps, format, scale_layout, scale_format, scale_mode, global_scale, conv)
    if normed:
        out, scale, n = functional(*ins, *opts)
    else:
        out, scale, n = _quant_outputs(x, parse_quant(op, format, scale_layout, scale_format, scale_mode,
                                                      global_scale))
        out_op(*ins, *opts, out=out, block_scale=scale, normed_out=None)
        n = None
    if bump:
        _bump_versions((residual,))
    if len(lead) != 1:
        out, n = out.view(*lead, out.shape[-1]), None if n is None else n.view(*lead, n.shape[-1])
        if scale_layout == "row" or format == "fp8_1x128":  # the swizzled layout is 2-D
            scale = scale.view(*lead, scale.shape[-1])
    return BlockQuantized(out, scale, n)


_FORMAT_ARGS_DOC = """
        format: ``"fp8_1x128"`` (the default; as :func:`fused_add_rmsnorm_fp8_block_quant`),
            ``"mxfp8"`` (1x32 blocks, float8_e4m3fn codes, UE8M0 scales), ``"mxfp4"`` (1x32 blocks,
            e2m1 codes two per byte: out is float4_e2m1fn_x2 (..., H/2), element 2j in the low
            nibble; UE8M0 scales) or ``"nvfp4"`` (1x16 blocks, e2m1 codes, float8_e4m3fn scales,
            global_scale). H: a positive multiple of the block (128, 32, 32, 16).
        scale_layout: fp8_1x128: ``"deepgemm"`` (default), ``"scaled_mm"`` or ``"row"``
            (:func:`block_scale_strides`). The others: ``"swizzled"`` (default; the 128x4 layout of
            cuBLAS, CUTLASS and ``torch._scaled_mm``: a contiguous [round_up(M, 128),
            round_up(H / block, 4)] tensor for the M = prod(leading dims) rows, padding zero) or
            ``"row"`` ((..., H / block), row-major).
        scale_format: fp8_1x128 only: ``"fp32"`` (default), ``"ue8m0"`` or ``"ue8m0_packed"``.
        scale_mode: MX only: ``"rceil"`` (default; the smallest power of two >= amax / max_elem,
            as TransformerEngine, FlashInfer, vLLM and SGLang scale activations) or ``"floor"``
            (the OCP MX v1.0 rule, torchao's default).
        global_scale: nvfp4 only, required: the per-tensor encode scale ``448 * 6 / amax``, a
            float32 tensor of one element on input's device (read there: no host sync).
        normed, norm_convention: as for :func:`fused_add_rmsnorm_fp8_block_quant`.

    Returns:
        BlockQuantized(out, block_scale, normed); reference: ``torch_fp8norm.reference.quantize``.

    Raises TypeError for an argument of the wrong type; ValueError for an option that does not
    apply to the format (and for nvfp4 without global_scale, another format with one);
    RuntimeError for a value the ops refuse, and where autograd would record the call; all before
    writing anything.
    """


def fused_add_rmsnorm_quant(
    input: Tensor,
    residual: Tensor,
    weight: Tensor,
    eps: Optional[float] = 1e-6,
    *,
    format: str = "fp8_1x128",
    scale_layout: Optional[str] = None,
    scale_format: Optional[str] = None,
    scale_mode: Optional[str] = None,
    global_scale: Optional[Tensor] = None,
    normed: bool = True,
    norm_convention: str = "torch",
) -> BlockQuantized:
    try:
        return _quant_call(FUSED_QUANT_OP, input, residual, weight, eps, format, scale_layout, scale_format,
                           scale_mode, global_scale, normed, norm_convention)
    except Exception:
        _check_types(FUSED_QUANT_OP, input, residual, weight, eps, True)
        raise


def rmsnorm_quant(
    input: Tensor,
    weight: Tensor,
    eps: Optional[float] = 1e-6,
    *,
    format: str = "fp8_1x128",
    scale_layout: Optional[str] = None,
    scale_format: Optional[str] = None,
    scale_mode: Optional[str] = None,
    global_scale: Optional[Tensor] = None,
    normed: bool = True,
    norm_convention: str = "torch",
) -> BlockQuantized:
    try:
        return _quant_call(PLAIN_QUANT_OP, input, None, weight, eps, format, scale_layout, scale_format,
                           scale_mode, global_scale, normed, norm_convention)
    except Exception:
        _check_types(PLAIN_QUANT_OP, input, None, weight, eps, False)
        raise


fused_add_rmsnorm_quant.__doc__ = """``residual += input; normed = rmsnorm(residual) * weight;
    (out, block_scale) = quantize(normed, format)`` in one memory pass, for every block format.

    Args:
        input, residual, weight, eps: as for :func:`fused_add_rmsnorm_fp8_block_quant` (H a
            positive multiple of the format's block).""" + _FORMAT_ARGS_DOC
rmsnorm_quant.__doc__ = """``normed = rmsnorm(input) * weight; (out, block_scale) = quantize(normed, format)``
    in one memory pass (no residual).

    Args:
        input, weight, eps: as for :func:`rmsnorm_fp8_block_quant`.""" + _FORMAT_ARGS_DOC
