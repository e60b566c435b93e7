"""Shared helpers of the fp8norm tests: devices, input makers, poisoning, the contract check."""
from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass
from typing import Optional

import pytest
import torch

import torch_fp8norm
from torch_fp8norm import reference as R

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
DTYPES = [torch.float16, torch.bfloat16, torch.float32]
LAYOUTS = ["tma", "scaled_mm", "row_major"]  # block_scale layouts accepted by the .out ops

# normed_out may differ from the reference by this many units in the last place of its dtype.
NORMED_ULP = 1

# Where check_contract evaluates the reference: None, the op's own device; tests/gpu/sanitize_cases.py
# sets "cpu", so that compute-sanitizer checks this library's kernels, not torch's reductions.
REFERENCE_DEVICE = None


@functools.lru_cache(maxsize=None)
def kernel_image_arch() -> int:
    """The architecture the CUDA kernels loaded on device 0 were compiled for (80 for compute_80
    PTX JIT-compiled on a newer GPU): the launch policy's fact, not the GPU's compute capability."""
    return torch.ops.fp8norm._kernel_image_arch(0)


def kernel_runs_here(name: str) -> bool:
    """Whether kernel `name` can run on device 0: cluster kernels need kernels built for sm_90+."""
    return not name.startswith("cluster") or kernel_image_arch() >= 90


@contextlib.contextmanager
def forced_kernel(name: str):
    """Every CUDA launch inside the block takes kernel `name` (launch_policy.h's names: row,
    row_narrow, row_four, tile1, tile4, half_tile1, half_tile4, cluster1, cluster4)
    with the geometry the policy gives it, instead of the policy's choice; a call that kernel
    cannot run raises. Skips the test where the build's kernels cannot run it (kernel_runs_here)."""
    if not kernel_runs_here(name):
        pytest.skip(f"{name}: the kernels loaded on this GPU hold no sm_90 code (image arch {kernel_image_arch()})")
    torch.ops.fp8norm._force_kernel(name)
    try:
        yield
    finally:
        torch.ops.fp8norm._force_kernel("")


class LlamaRMSNorm(torch.nn.Module):
    """Hugging Face transformers' LlamaRMSNorm, as written there (the model code the "hf"
    convention matches)."""

    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


def poison_(t: torch.Tensor) -> torch.Tensor:
    """Fill with NaN (0x7F for float8), a value no finite input produces."""
    if t.dtype == torch.float8_e4m3fn:
        t.view(torch.uint8).fill_(0x7F)
    elif t.dtype == torch.int32:  # packed UE8M0 scales: exponent byte 1 (2^-126), never written
        t.fill_(0x01010101)
    else:
        t.fill_(float("nan"))
    return t


def rows_view(m: int, h: int, dtype, device, pad: int = 0, fill=None) -> torch.Tensor:
    """An [m, h] tensor; with pad > 0, a view into a bigger [m, h + pad] buffer (strided rows).
    The whole buffer is poisoned (or filled by `fill`): gaps between rows hold NaN, so a kernel
    reading them would show in the results, and no byte of it is uninitialized memory (the
    byte-for-byte storage checks copy all of it; compute-sanitizer's initcheck flags copies of
    never-written memory)."""
    base = torch.empty(m, h + pad, dtype=dtype, device=device)
    if fill is not None:
        fill(base)
    else:
        poison_(base)
    return base[:, :h] if pad else base


def scale_buffer(m: int, h: int, layout: str, device) -> torch.Tensor:
    """block_scale [m, h/128] float32 in one of the accepted layouts, inside a padded buffer."""
    nb = h // 128
    if layout == "tma":
        mp = (m + 3) // 4 * 4
        return poison_(torch.empty(nb, mp, device=device)).t()[:m]
    if layout == "scaled_mm":
        return poison_(torch.empty(nb, m, device=device)).t()
    assert layout == "row_major"
    return poison_(torch.empty(m, nb, device=device))


def random_rows(m: int, h: int, dtype, device, pad: int = 0, scale: float = 1.0, gen=None):
    t = rows_view(m, h, dtype, device, pad)
    t.copy_(torch.randn(m, h, generator=gen) * scale)
    return t


def storage_bytes(t: torch.Tensor) -> torch.Tensor:
    """A copy of every byte of t's storage (to check that nothing outside the view changed)."""
    return torch.empty(0, dtype=torch.uint8, device=t.device).set_(t.untyped_storage()).clone()


def ulp_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """|a - b| in units in the last place of their (shared) float dtype, as int64, on a's device.
    NaN vs NaN counts 0; NaN vs non-NaN counts as huge."""
    int_t = {torch.float32: torch.int32, torch.float16: torch.int16, torch.bfloat16: torch.int16}[a.dtype]
    bits = {torch.int32: 31, torch.int16: 15}[int_t]

    def ordered(x):
        i = x.contiguous().view(int_t).long()
        mag = i & ((1 << bits) - 1)
        return torch.where(i < 0, -mag, mag)

    b = b.to(a.device)
    d = (ordered(a) - ordered(b)).abs()
    an, bn = torch.isnan(a), torch.isnan(b)
    d = torch.where(an & bn, torch.zeros_like(d), d)
    return torch.where(an ^ bn, torch.full_like(d, 1 << 40), d)


def _first_mismatch(bad: torch.Tensor, what: str, got: torch.Tensor, want: torch.Tensor, fmt):
    """Fails with the count and the first index of `bad` (a boolean mask); only that element moves
    to the host."""
    if not bool(bad.any()):
        return
    idx = bad.nonzero()
    first = tuple(idx[0].tolist())
    raise AssertionError(f"{what}: {idx.shape[0]} elements differ, first at {list(first)}: "
                         f"got {fmt(got[first])}, want {fmt(want[first])}")


def assert_fp8_equal(got: torch.Tensor, want: torch.Tensor, what: str):
    """Bitwise equality of float8_e4m3fn tensors; the two NaN encodings (0x7F, 0xFF) are equal."""
    g = got.contiguous().view(torch.uint8)
    w = want.to(got.device).contiguous().view(torch.uint8)
    g = torch.where((g & 0x7F) == 0x7F, torch.full_like(g, 0x7F), g)
    w = torch.where((w & 0x7F) == 0x7F, torch.full_like(w, 0x7F), w)
    _first_mismatch(g != w, what, g, w, lambda v: f"{int(v):#04x}")


def assert_bitwise(got: torch.Tensor, want: torch.Tensor, what: str):
    w = want.to(got.device)
    assert got.shape == w.shape and got.dtype == w.dtype, f"{what}: {got.shape}/{got.dtype} vs {w.shape}/{w.dtype}"
    same = (got == w) | (torch.isnan(got) & torch.isnan(w))
    _first_mismatch(~same, what, got, w, lambda v: repr(v.item()))


def exact_rstd_normalize(s: torch.Tensor, weight: torch.Tensor, eps: float, dtype=None,
                         norm_convention: str = "torch") -> torch.Tensor:
    """reference.rms_normalize of the values s (as `dtype`, default s.dtype) with rstd computed
    exactly (float64) and rounded once to float32."""
    x = s.float()
    mean_sq = x.square().double().mean(-1, keepdim=True)
    rstd = torch.rsqrt(mean_sq + torch.tensor(eps, dtype=torch.float32).double()).float()
    return R.rms_normalize(x, weight, eps, dtype or s.dtype, norm_convention, rstd=rstd)


def check_contract(x, residual_before, weight, eps, ue8m0, residual_after, out, block_scale, normed,
                   norm_convention="torch"):
    """The numerical contract, checked against reference.py on the op's own device (every step
    of the reference there is exact: float32 adds, products and divisions by tensors, float64
    for rstd), so that CUDA results need no copy to the host.

    The new residual is bitwise the reference's. normed_out is within NORMED_ULP of the reference
    evaluated with rstd computed in float64 and rounded once to float32 (the kernels' rstd; the
    reference's own float32 mean and rsqrt are a few float32 ulps off it, and their order differs
    between devices). out and block_scale are bitwise the reference's quantization of the op's
    own normed_out. residual_before is None for rmsnorm_fp8_block_quant. Under norm_convention.
    """
    if REFERENCE_DEVICE is not None:
        x, residual_before, weight, residual_after, out, block_scale, normed = (
            None if t is None else t.to(REFERENCE_DEVICE)
            for t in (x, residual_before, weight, residual_after, out, block_scale, normed))
    if residual_before is not None:
        rc = residual_before.clone()
        R.fused_add_rmsnorm_fp8_block_quant(x, rc, weight, eps, ue8m0, norm_convention)
        assert_bitwise(residual_after, rc, "residual")
        s_ref = R.residual_sum(x, residual_before, norm_convention)[1]
    else:
        s_ref = x
    ref_normed = exact_rstd_normalize(s_ref, weight, eps, x.dtype, norm_convention)
    d = ulp_distance(normed, ref_normed)
    if d.numel():
        worst = int(d.argmax())
        assert int(d.flatten()[worst]) <= NORMED_ULP, (
            f"normed_out: {int(d.flatten()[worst])} ulp from the reference (allowed {NORMED_ULP}) at flat "
            f"index {worst}: got {normed.flatten()[worst].item()!r}, want {ref_normed.flatten()[worst].item()!r}")
    q, s = R.quantize_fp8_block(normed, ue8m0)
    assert_fp8_equal(out, q, "out")
    assert_bitwise(block_scale, s, "block_scale")


def int_view(t: torch.Tensor) -> torch.Tensor:
    """t reinterpreted as integers of the same size (any strides)."""
    return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def assert_only_view_written(t: torch.Tensor, before: torch.Tensor, what: str):
    """Every byte of t's storage outside the view t is as it was (`before`, from storage_bytes)."""
    expected = before.clone()
    v = torch.empty(0, dtype=int_view(t).dtype, device=t.device)
    v.set_(expected.untyped_storage(), t.storage_offset(), t.size(), t.stride())
    v.copy_(int_view(t))
    assert torch.equal(expected, storage_bytes(t)), f"{what}: bytes outside the tensor were written"


@dataclass
class Case:
    """One call of one of the four overloads, with its options."""
    device: str
    dtype: torch.dtype
    m: int
    h: int
    fused: bool = True          # fused_add_rmsnorm_* (else rmsnorm_*)
    functional: bool = False    # functional overload (else .out)
    weight_fp32: bool = False
    pad: int = 0                # extra elements per row: strided rows (1: unaligned rows)
    ue8m0: bool = False
    layout: str = "tma"         # block_scale layout (.out only)
    normed_none: bool = False   # .out with normed_out=None
    eps: float = 1e-6
    pads: Optional[dict] = None  # per row stream ("input", "residual", "normed", "out"): its own
                                 # extra elements per row instead of `pad` (missing: 0)
    norm_convention: str = "torch"

    def pad_of(self, stream: str) -> int:
        return self.pad if self.pads is None else self.pads.get(stream, 0)


def make_inputs(c: Case, gen: Optional[torch.Generator] = None, values=None):
    """Fresh random inputs for a case: rows scaled by random powers of e, random weight, drawn on
    gen's device (default: a fresh generator on the case's device)."""
    gen = gen or torch.Generator(c.device).manual_seed(torch.randint(0, 2**31, ()).item())

    def randn(*shape):
        return torch.randn(*shape, generator=gen, device=gen.device)

    row_scale = torch.exp(randn(c.m, 1) * 2)
    x = rows_view(c.m, c.h, c.dtype, c.device, c.pad_of("input"))
    x.copy_(randn(c.m, c.h) * row_scale)
    r = None
    if c.fused:
        r = rows_view(c.m, c.h, c.dtype, c.device, c.pad_of("residual"))
        r.copy_(randn(c.m, c.h) * row_scale)
    if values is not None:
        values(x, r)
    w = (randn(c.h) * 0.5 + 1).to(torch.float32 if c.weight_fp32 else c.dtype).to(c.device)
    return x, r, w


def out_buffers(c: Case):
    """Poisoned outputs of a .out call for a case: out and normed_out (None if c.normed_none) with
    rows padded by c.pad (or c.pads), block_scale in c.layout."""
    out = poison_(rows_view(c.m, c.h, torch.float8_e4m3fn, c.device, c.pad_of("out")))
    s = poison_(scale_buffer(c.m, c.h, c.layout, c.device))
    n = None if c.normed_none else poison_(rows_view(c.m, c.h, c.dtype, c.device, c.pad_of("normed")))
    return out, s, n


def run_case(c: Case, x, r, w):
    """Calls the op for a case. Returns (out, block_scale, normed or None)."""
    if c.functional:
        if c.fused:
            out, s, n = torch.ops.fp8norm.fused_add_rmsnorm_fp8_block_quant(x, r, w, c.eps, c.ue8m0, c.norm_convention)
        else:
            out, s, n = torch.ops.fp8norm.rmsnorm_fp8_block_quant(x, w, c.eps, c.ue8m0, c.norm_convention)
        assert s.stride() == torch_fp8norm.block_scale_strides(c.m, c.h) or c.m * c.h == 0
        assert out.is_contiguous() and n.is_contiguous()
        return out, s, n
    out, s, n = out_buffers(c)
    before = {name: storage_bytes(t) for name, t in (("out", out), ("block_scale", s), ("normed_out", n)) if t is not None}
    if c.fused:
        torch.ops.fp8norm.fused_add_rmsnorm_fp8_block_quant.out(
            x, r, w, c.eps, c.ue8m0, c.norm_convention, out=out, block_scale=s, normed_out=n)
    else:
        torch.ops.fp8norm.rmsnorm_fp8_block_quant.out(x, w, c.eps, c.ue8m0, c.norm_convention, out=out, block_scale=s,
                                                      normed_out=n)
    for name, t in (("out", out), ("block_scale", s), ("normed_out", n)):
        if t is not None:
            assert_only_view_written(t, before[name], name)
    return out, s, n


def check_case(c: Case, values=None):
    """Runs a case on fresh inputs and checks the whole contract. Returns the results."""
    x, r, w = make_inputs(c, values=values)
    r_before = r.clone() if r is not None else None
    r_bytes = storage_bytes(r) if r is not None else None
    out, s, n = run_case(c, x, r, w)
    if r is not None:
        assert_only_view_written(r, r_bytes, "residual")
    if n is None:
        # normed_out=None: out and block_scale must equal those of a call that writes normed_out
        # (the contract is stated on the op's own normed values).
        r2 = r_before.clone() if r is not None else None
        full = Case(**{**c.__dict__, "normed_none": False})
        out2, s2, n = run_case(full, x, r2, w)
        assert_fp8_equal(out, out2, "out (normed_out=None vs written)")
        assert_bitwise(s, s2, "block_scale (normed_out=None vs written)")
    check_contract(x, r_before, w, c.eps, c.ue8m0, r, out, s, n, c.norm_convention)
    return x, r, w, out, s, n
