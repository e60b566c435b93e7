"""Automatic fusion under torch.compile.

:func:`enable_fusion` installs an Inductor graph pass (a ``CustomGraphPass`` built on Inductor's
pattern matcher) that rewrites, in every graph compiled afterwards,

    residual = x + residual                      # or residual + x; or no residual at all
    h = rmsnorm(residual) * weight               # F.rms_norm / nn.RMSNorm, the manual form, or
                                                 # Hugging Face's or vLLM's (below)
    q, scale = fp8_quant_1x128(h)                # view / abs / amax / clamp / div / clamp / to(e4m3)

into one call of ``fp8norm.fused_add_rmsnorm_fp8_block_quant.out`` (``rmsnorm_fp8_block_quant.out``
without a residual), with the norm convention the matched code computes (README, "Norm
conventions"): ``"torch"`` for F.rms_norm and the manual form (one rounding of ``x * rstd *
weight``), ``"hf"`` for transformers' ``LlamaRMSNorm`` (``weight * (x * rstd).to(dtype)``, after
a separate add in the dtype), ``"vllm"`` for vLLM's ``RMSNorm.forward_native`` (the norm of the
float32 sum, ``(x * rstd).to(dtype) * weight``). These forms state the package's numerical contract
step by step: quantization of the rounded normed values, ``scale = max(amax, 1e-10) / 448`` and,
with UE8M0 scales, the smallest power of two >= scale; the fused op meets it (eager CUDA torch
computes ``amax / 448.0`` as ``amax * (1 / 448)``, so its scales can differ by one ulp). Forms that
round differently are not matched (README, "Automatic fusion").

The pass runs on Inductor's joint graph, before Inductor's own joint-graph patterns: one of those
(``pointless_convert``) may drop the rounding of the normed values to the input dtype before they
are quantized, after which the graph no longer says which values the program quantizes.
"""
from __future__ import annotations

import functools
from typing import Callable, List, Optional

import torch
import torch.nn.functional as F
from torch._higher_order_ops.auto_functionalize import auto_functionalized
from torch._inductor import config as inductor_config
from torch._inductor.custom_graph_pass import CustomGraphPass, get_hash_for_files
from torch._inductor.fx_passes.post_grad import remove_noop_ops
from torch._inductor.pattern_matcher import Match, PatternMatcherPass, fwd_only, register_replacement
from torch.fx.experimental.symbolic_shapes import statically_known_true

from .reference import AMAX_FLOOR, BLOCK, FP8_MAX, ue8m0_round_up

__all__ = ["enable_fusion", "disable_fusion", "fusion_enabled"]

aten = torch.ops.aten
FP8 = torch.float8_e4m3fn
# The eps the forms are traced with: exact in float32, so that it appears as itself in every
# form's graph and the matcher can bind the model's eps in its place.
_TRACE_EPS = 2.0 ** -20


# ---- the forms matched (traced into aten graphs by the pattern matcher) ----

def _quant(h: torch.Tensor, ue8m0: bool = False):
    m, n = h.shape
    g = h.float().view(m, n // BLOCK, BLOCK)
    amax = g.abs().amax(-1, keepdim=True).clamp(min=AMAX_FLOOR)
    scale = amax / FP8_MAX
    if ue8m0:  # a Python flag: each value traces its own form
        scale = ue8m0_round_up(scale)
    q = (g / scale).clamp(-FP8_MAX, FP8_MAX).to(FP8)
    return q.view(m, n), scale.squeeze(-1)


def _rms_functional(s, weight, eps):
    return F.rms_norm(s, (s.shape[-1],), weight, eps)


def _rms_manual(s, weight, eps):
    v = s.float()
    return (v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(s.dtype)


def _rms_hf(s, weight, eps):  # transformers' LlamaRMSNorm.forward
    v = s.to(torch.float32)
    v = v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + eps)
    return weight * v.to(s.dtype)


def _rms_vllm_f32(v, dtype, weight, eps):  # vLLM's RMSNorm.forward_native after its add: v float32
    v = v * torch.rsqrt(v.pow(2).mean(dim=-1, keepdim=True) + eps)
    return v.to(dtype) * weight


def _rms_vllm(s, weight, eps):  # vLLM's RMSNorm.forward_native without a residual
    return _rms_vllm_f32(s.to(torch.float32), s.dtype, weight, eps)


# The convention of each norm form (the fused forms' add rounds the sum to the dtype, but vLLM's);
# None is the ops' default, "torch".
_CONVENTION = {_rms_functional: None, _rms_manual: None, _rms_hf: "hf", _rms_vllm: "vllm"}


# ---- the replacements: the .out ops, functionalized (Inductor updates the residual in place
# where the program no longer needs its old value, else it copies it first) ----

def _outputs(x: torch.Tensor, normed: bool):
    m, n = x.shape
    out = torch.empty((m, n), dtype=FP8, device=x.device)
    scale = torch.empty((m, n // BLOCK), dtype=torch.float32, device=x.device)  # row-major, as the forms' own
    return out, scale, (torch.empty((m, n), dtype=x.dtype, device=x.device) if normed else None)


def _fused(x, residual, weight, eps, ue8m0: bool, normed: bool, convention: Optional[str]):
    out, scale, nrm = _outputs(x, normed)
    r = auto_functionalized(torch.ops.fp8norm.fused_add_rmsnorm_fp8_block_quant.out, input=x, residual=residual,
                            weight=weight, eps=eps, scale_ue8m0=ue8m0, norm_convention=convention, out=out,
                            block_scale=scale, normed_out=nrm)
    return r[1], r[2], r[3], (r[4] if normed else None)


def _plain(x, weight, eps, ue8m0: bool, normed: bool, convention: Optional[str]):
    out, scale, nrm = _outputs(x, normed)
    r = auto_functionalized(torch.ops.fp8norm.rmsnorm_fp8_block_quant.out, input=x, weight=weight, eps=eps,
                            scale_ue8m0=ue8m0, norm_convention=convention, out=out, block_scale=scale,
                            normed_out=nrm)
    return r[1], r[2], (r[3] if normed else None)


# ---- the patterns ----

def _extra_check(fused: bool, weight_as_x: bool = False) -> Callable[[Match], bool]:
    """What the ops accept beyond the form: x 2-D bfloat16 or float16 (a float32 graph has no
    conversions: another form), weight (H,) of x's dtype or float32 (only x's with weight_as_x:
    the two-rounding forms multiply in the weight's dtype, so a float32 weight gives float32
    normed values), residual x's shape. The matcher itself re-traces the form with the matched
    shapes and dtypes and compares every constant (floor, 448, dtypes, view sizes); eps alone is
    free."""
    def check(match: Match) -> bool:
        x, w = match.kwargs["x"].meta.get("val"), match.kwargs["weight"].meta.get("val")
        if x is None or w is None or x.dim() != 2 or w.dim() != 1:
            return False
        weights = (x.dtype,) if weight_as_x else (x.dtype, torch.float32)
        if x.dtype not in (torch.bfloat16, torch.float16) or w.dtype not in weights:
            return False
        if fused:
            r = match.kwargs["residual"].meta.get("val")
            if r is None or r.dtype != x.dtype or not statically_known_true(r.shape == x.shape):
                return False
        return True
    return check


def _example_inputs(fused: bool, weight_dtype: torch.dtype):
    x = torch.empty(2, 2 * BLOCK, dtype=torch.bfloat16)
    w = torch.empty(2 * BLOCK, dtype=weight_dtype)
    return [x, torch.empty_like(x), w, _TRACE_EPS] if fused else [x, w, _TRACE_EPS]


def _fused_forms(add_first: bool, rms, ue8m0: bool):
    """(search, replacement) pairs of a fused form: normed values unused elsewhere, then used.
    vLLM's form adds in float32 and rounds the sum only for the residual."""
    quant = functools.partial(_quant, ue8m0=ue8m0)
    convention = _CONVENTION[rms]

    def add_and_norm(x, residual, weight, eps):
        if rms is _rms_vllm:  # forward_native(x, residual)
            v = x.to(torch.float32)
            v = v + residual.to(torch.float32) if add_first else residual.to(torch.float32) + v
            return v.to(x.dtype), _rms_vllm_f32(v, x.dtype, weight, eps)
        s = x + residual if add_first else residual + x
        return s, rms(s, weight, eps)

    def search(x, residual, weight, eps):
        s, h = add_and_norm(x, residual, weight, eps)
        q, scale = quant(h)
        return q, scale, s

    def search_normed(x, residual, weight, eps):
        s, h = add_and_norm(x, residual, weight, eps)
        q, scale = quant(h)
        return q, scale, s, h

    def replace(x, residual, weight, eps):
        s, q, scale, _ = _fused(x, residual, weight, eps, ue8m0, False, convention)
        return q, scale, s

    def replace_normed(x, residual, weight, eps):
        s, q, scale, h = _fused(x, residual, weight, eps, ue8m0, True, convention)
        return q, scale, s, h

    return (search, replace), (search_normed, replace_normed)


def _plain_forms(rms, ue8m0: bool):
    quant = functools.partial(_quant, ue8m0=ue8m0)
    convention = _CONVENTION[rms]

    def search(x, weight, eps):
        return quant(rms(x, weight, eps))

    def search_normed(x, weight, eps):
        h = rms(x, weight, eps)
        q, scale = quant(h)
        return q, scale, h

    def replace(x, weight, eps):
        return _plain(x, weight, eps, ue8m0, False, convention)[:2]

    def replace_normed(x, weight, eps):
        return _plain(x, weight, eps, ue8m0, True, convention)

    return (search, replace), (search_normed, replace_normed)


def _register(passes: List[PatternMatcherPass]) -> None:
    """Every form, in the order the passes run: the fused forms before the plain ones (a plain
    form is part of a fused one), and within each, the forms whose normed values are not used
    elsewhere before those that are (the kernel then skips writing them)."""
    # The manual form converts the weight only when it is not float32 already (a graph without
    # that conversion); F.rms_norm's graph is the same for both. The two-rounding forms take a
    # weight of x's dtype only (_extra_check).
    forms = [(_rms_functional, torch.bfloat16), (_rms_manual, torch.bfloat16), (_rms_manual, torch.float32),
             (_rms_hf, torch.bfloat16), (_rms_vllm, torch.bfloat16)]
    for rms, weight_dtype in forms:
        weight_as_x = _CONVENTION[rms] in ("hf", "vllm")
        for ue8m0 in (False, True):
            for add_first in (True, False):
                for i, (search, replace) in enumerate(_fused_forms(add_first, rms, ue8m0)):
                    _add_pattern(passes[i], search, replace, _example_inputs(True, weight_dtype), True, weight_as_x)
            for i, (search, replace) in enumerate(_plain_forms(rms, ue8m0)):
                _add_pattern(passes[2 + i], search, replace, _example_inputs(False, weight_dtype), False, weight_as_x)


def _trace(fn, args, **kwargs) -> torch.fx.GraphModule:
    """fn as Inductor's joint graphs show it: decomposed and functional (a decomposition's
    in-place op on its own intermediate, e.g. F.rms_norm's ``add_`` of eps, as its out-of-place
    overload)."""
    gm = fwd_only(fn, args, **kwargs)
    for n in gm.graph.nodes:
        target = n.target
        if (n.op == "call_function" and isinstance(target, torch._ops.OpOverload) and target.namespace == "aten"
                and target._schema.name.endswith("_")):
            packet = getattr(torch.ops.aten, target._schema.name.split("::")[1][:-1], None)
            functional = getattr(packet, target._overloadname, None) if packet is not None else None
            if functional is not None and len(n.args[0].users) == 1:
                n.target = functional
    gm.recompile()
    return gm


def _add_pattern(pass_: PatternMatcherPass, search, replace, example_inputs, fused: bool,
                 weight_as_x: bool = False) -> None:
    register_replacement(search, replace, example_inputs, _trace, pass_,
                         extra_check=_extra_check(fused, weight_as_x), scalar_workaround={"eps": _TRACE_EPS})


def _explicit_view_sizes(graph: torch.fx.Graph) -> None:
    """A -1 in a view's sizes replaced by the size it stands for, where that is a constant: the
    forms' views are traced with explicit sizes, and the matcher compares sizes exactly."""
    for n in [*graph.find_nodes(op="call_function", target=aten.view.default),
              *graph.find_nodes(op="call_function", target=aten.reshape.default)]:
        sizes, val = n.args[1], n.meta.get("val")
        if not isinstance(sizes, (list, tuple)) or val is None:
            continue
        i = next((i for i, v in enumerate(sizes) if isinstance(v, int) and v == -1), None)
        if i is not None and isinstance(val.shape[i], int):
            n.args = (n.args[0], [*sizes[:i], val.shape[i], *sizes[i + 1:]], *n.args[2:])


@functools.lru_cache(maxsize=None)
def _passes() -> List[PatternMatcherPass]:
    """The pattern passes, built once (tracing every form takes seconds)."""
    passes = [PatternMatcherPass(pass_name=f"fp8norm_fusion_{i}") for i in range(4)]
    _register(passes)
    return passes


class FusionPass(CustomGraphPass):
    """The pass enable_fusion installs as Inductor's ``joint_custom_pre_pass`` (it runs the pass
    that was installed there before, then its own)."""

    def __init__(self, previous: Optional[Callable] = None) -> None:
        self.previous = previous
        self.passes = _passes()

    def __call__(self, graph: torch.fx.Graph) -> None:
        if self.previous is not None:
            self.previous(graph)
        g = graph.graph if isinstance(graph, torch.fx.GraphModule) else graph
        remove_noop_ops(g)  # as Inductor does right after this pass (aliases break the forms)
        _explicit_view_sizes(g)
        for p in self.passes:
            p.apply(graph)

    def uuid(self):
        """Keys Inductor's FX graph cache: this file's hash and the chained pass's uuid."""
        prev = getattr(self.previous, "uuid", lambda: None)() if self.previous is not None else None
        return f"fp8norm-fusion-{get_hash_for_files((__file__,)).hex()}-{prev}"


_installed: Optional[FusionPass] = None


def enable_fusion() -> None:
    """Install the fusion pass (chained after a joint_custom_pre_pass already installed). Affects
    graphs compiled afterwards; the FX graph cache keys on the pass's uuid. The first call traces
    every form (seconds)."""
    global _installed
    if _installed is None or inductor_config.joint_custom_pre_pass is not _installed:
        _installed = FusionPass(inductor_config.joint_custom_pre_pass)
        inductor_config.joint_custom_pre_pass = _installed


def disable_fusion() -> None:
    """Remove the pass enable_fusion installed (restoring the pass it was chained after)."""
    global _installed
    if _installed is not None and inductor_config.joint_custom_pre_pass is _installed:
        inductor_config.joint_custom_pre_pass = _installed.previous
    _installed = None


def fusion_enabled() -> bool:
    """Whether enable_fusion's pass is installed."""
    return _installed is not None and inductor_config.joint_custom_pre_pass is _installed
