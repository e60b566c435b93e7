"""FusedAddRMSNormFP8.from_rmsnorm runs the norm's own forward on a probe input and refuses, with a
ValueError naming the module and the difference, a norm that computes something else; the norms
it replaces (torch's, Hugging Face's two-rounding LlamaRMSNorm, vLLM's RMSNorm) are accepted, each
with its own norm convention, under which the module's results equal the norm's own."""
import pytest
import torch
from torch import nn

from fp8norm_testing import DEVICES, Case, LlamaRMSNorm, check_contract, make_inputs, ulp_distance
from torch_fp8norm import FusedAddRMSNormFP8

H = 256
DTYPES = [torch.bfloat16, torch.float16, torch.float32]


class VllmRMSNorm(nn.Module):  # vLLM's RMSNorm.forward_native, as written there (no variance override)
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, x, residual=None):
        orig_dtype = x.dtype
        x = x.to(torch.float32)
        if residual is not None:
            x = x + residual.to(torch.float32)
            residual = x.to(orig_dtype)
        variance = x.pow(2).mean(dim=-1, keepdim=True)
        x = x * torch.rsqrt(variance + self.variance_epsilon)
        x = x.to(orig_dtype)
        x = x * self.weight
        if residual is None:
            return x
        return x, residual


class GemmaRMSNorm(nn.Module):  # Gemma's: x * rstd * (1 + weight), weight initialized to zeros
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        output = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
        return (output * (1.0 + self.weight.float())).type_as(x)


class ScaledRMSNorm(LlamaRMSNorm):  # an RMS norm times 2
    def forward(self, hidden_states):
        return 2 * super().forward(hidden_states)


class WrongEpsRMSNorm(LlamaRMSNorm):  # its eps attribute is not the eps its forward uses
    def __init__(self, hidden_size, eps, forward_eps):
        super().__init__(hidden_size, eps)
        self.forward_eps = forward_eps

    def forward(self, hidden_states):
        x = hidden_states.float()
        return (self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.forward_eps))).to(
            hidden_states.dtype)


def _weighted(norm, dtype, device):
    with torch.no_grad():
        norm.weight.copy_(torch.randn(H) * 0.3 + 1)
    return norm.to(device=device, dtype=dtype)


def _same_as_norm(norm, mod, dtype, device):
    """The module's results equal the norm's own forward on fresh inputs, up to the rounding of
    rstd: normed within 2 ulps (a 1-ulp difference in the first of two roundings, times the
    weight) in at most 1% of the elements (2-byte dtypes; float32: 2^-16 relative), the residual
    bitwise."""
    x, r, _ = make_inputs(Case(device, dtype, 64, H))
    with torch.no_grad():
        if isinstance(norm, VllmRMSNorm):
            theirs, r_theirs = norm(x, r.clone())
        else:
            r_theirs = (x.float() + r.float()).to(dtype)  # the model code's own residual add
            theirs = norm(r_theirs)
    got = mod(x, r)
    assert torch.equal(r, r_theirs)
    theirs = theirs.to(dtype)
    if dtype == torch.float32:
        torch.testing.assert_close(got.normed, theirs, rtol=2.0 ** -16, atol=0)
    else:
        d = ulp_distance(got.normed, theirs)
        assert int(d.max()) <= 2 and int((d != 0).sum()) * 100 <= d.numel(), (int(d.max()), int((d != 0).sum()))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_norms_it_replaces_are_accepted(device, dtype):
    # A float32 weight is probed with bfloat16 activations (with float32 ones the conventions
    # coincide), as Hugging Face's float32 weights (its default) meet bfloat16 activations.
    norms = [(nn.RMSNorm(H, eps=1e-5), 1e-5, "torch"), (nn.RMSNorm(H), torch.finfo(torch.float32).eps, "torch"),
             (LlamaRMSNorm(H, 1e-6), 1e-6, "hf"), (LlamaRMSNorm(H, 0.0), 0.0, "hf"),
             (VllmRMSNorm(H, 1e-6), 1e-6, "vllm")]
    for norm, eps, convention in norms:
        norm = _weighted(norm, dtype, device)
        mod = FusedAddRMSNormFP8.from_rmsnorm(norm)
        assert mod.norm_convention == convention, (type(norm).__name__, dtype)
        x, r, _ = make_inputs(Case(device, dtype, 3, H))
        r0 = r.clone()
        check_contract(x, r0, norm.weight.detach(), eps, False, r, *mod(x, r), norm_convention=convention)
        _same_as_norm(norm, mod, dtype, device)


def test_a_forced_convention_is_kept():
    norm = _weighted(LlamaRMSNorm(H), torch.bfloat16, "cpu")
    for convention in ("torch", "flashinfer"):
        assert FusedAddRMSNormFP8.from_rmsnorm(norm, norm_convention=convention).norm_convention == convention
    with pytest.raises(ValueError, match="under norm_convention 'torch'"):  # Gemma, forced or not
        FusedAddRMSNormFP8.from_rmsnorm(_weighted(GemmaRMSNorm(H), torch.bfloat16, "cpu"), norm_convention="torch")
    with pytest.raises(RuntimeError, match="norm_convention must be one of"):
        FusedAddRMSNormFP8.from_rmsnorm(norm, norm_convention="llama")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_norms_that_compute_something_else_are_refused(device, dtype):
    for norm, why in ((GemmaRMSNorm(H), "Gemma, zero weight"), (_weighted(GemmaRMSNorm(H), dtype, device), "Gemma"),
                      (_weighted(ScaledRMSNorm(H), dtype, device), "times 2"),
                      (_weighted(WrongEpsRMSNorm(H, 1e-6, 1e-5), dtype, device), "eps 1e-5, not 1e-6"),
                      (_weighted(WrongEpsRMSNorm(H, 1e-5, 1e-6), dtype, device), "eps 1e-6, not 1e-5"),
                      (_weighted(WrongEpsRMSNorm(H, 0.0, 1e-6), dtype, device), "eps 1e-6, not 0")):
        norm = norm.to(device=device, dtype=dtype)
        name = type(norm).__name__
        with pytest.raises(ValueError, match=f"{name} computes something other than .* differs from "
                                             r"FusedAddRMSNormFP8's normed values by up to \d"):
            FusedAddRMSNormFP8.from_rmsnorm(norm)


def test_probe_edge_cases():
    class TupleNorm(LlamaRMSNorm):
        def forward(self, hidden_states):
            return super().forward(hidden_states), None

    with pytest.raises(ValueError, match="TupleNorm's forward did not return one tensor"):
        FusedAddRMSNormFP8.from_rmsnorm(TupleNorm(H))
    with pytest.raises(ValueError, match="RMSNorm has a float64 weight"):
        FusedAddRMSNormFP8.from_rmsnorm(nn.RMSNorm(H, dtype=torch.float64))
    # On the meta device there are no values to probe: the module is built as it is.
    mod = FusedAddRMSNormFP8.from_rmsnorm(GemmaRMSNorm(H).to("meta"))
    assert mod.weight.device.type == "meta"
    # The probe leaves the norm as it was, and needs no grad mode.
    norm = LlamaRMSNorm(H)
    before = norm.weight.detach().clone()
    FusedAddRMSNormFP8.from_rmsnorm(norm)
    assert torch.equal(norm.weight, before) and norm.weight.grad is None
