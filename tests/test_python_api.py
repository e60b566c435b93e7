"""The Python API: the wrappers' options (scale layout, scale format, normed), their named-tuple
result, and the FusedAddRMSNormFP8 module, against the contract on every device."""
import pytest
import torch
from torch import nn

import torch_fp8norm
from fp8norm_testing import DEVICES, Case, assert_bitwise, assert_fp8_equal, check_contract, make_inputs
from torch_fp8norm import BlockQuantized, FusedAddRMSNormFP8, block_scale_strides

H = 384


def _call(fused, x, r, w, **options):
    if fused:
        return torch_fp8norm.fused_add_rmsnorm_fp8_block_quant(x, r, w, 1e-6, **options)
    return torch_fp8norm.rmsnorm_fp8_block_quant(x, w, 1e-6, **options)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layout", ["deepgemm", "scaled_mm", "row"])
@pytest.mark.parametrize("fmt", ["fp32", "ue8m0"])
@pytest.mark.parametrize("fused", [True, False])
def test_wrapper_options(device, layout, fmt, fused):
    for m, lead in ((1, ()), (6, ()), (6, (2, 3)), (8, ())):
        x, r, w = make_inputs(Case(device, torch.bfloat16, m, H, fused=fused))
        r0 = None if r is None else r.clone()
        view = (lambda t: t.view(*lead, t.shape[-1])) if lead else (lambda t: t)
        res = _call(fused, view(x), None if r is None else view(r), w, scale_layout=layout, scale_format=fmt)
        assert isinstance(res, BlockQuantized)
        out, s, n = (t.view(m, t.shape[-1]) for t in res)
        assert res.block_scale.shape == (*(lead or (m,)), H // 128)
        assert (s if lead else res.block_scale).stride() == block_scale_strides(m, H, layout)
        check_contract(x, r0, w, 1e-6, fmt == "ue8m0", r, out, s, n)
        # normed=False: the same out and block_scale (res is kept, so its memory is not reused).
        if r is not None:
            r.copy_(r0)
        res2 = _call(fused, view(x), None if r is None else view(r), w, scale_layout=layout, scale_format=fmt,
                     normed=False)
        assert res2.normed is None and res2.block_scale.stride() == res.block_scale.stride()
        assert_fp8_equal(res2.out, res.out, "out")
        assert_bitwise(res2.block_scale, res.block_scale, "block_scale")


@pytest.mark.parametrize("device", DEVICES)
def test_wrapper_option_errors(device):
    x, r, w = make_inputs(Case(device, torch.bfloat16, 2, H))
    with pytest.raises(ValueError, match="scale_layout must be one of"):
        torch_fp8norm.fused_add_rmsnorm_fp8_block_quant(x, r, w, scale_layout="tma")
    with pytest.raises(ValueError, match="scale_format must be one of"):
        torch_fp8norm.rmsnorm_fp8_block_quant(x, w, scale_format="e8m0")
    with pytest.raises(TypeError):
        torch_fp8norm.rmsnorm_fp8_block_quant(x, w, 1e-6, True)  # options are keyword-only
    # Shapes must match as given, not only as the [M, H] views the ops see; nothing is written.
    r0 = r.clone()
    for options in ({}, dict(normed=False)):
        with pytest.raises(ValueError, match="residual must have input's shape"):
            torch_fp8norm.fused_add_rmsnorm_fp8_block_quant(x.view(1, 2, H), r, w, **options)
        with pytest.raises(ValueError, match="residual must have input's shape"):
            torch_fp8norm.fused_add_rmsnorm_fp8_block_quant(x.view(2, 1, H), r.view(1, 2, H), w, **options)
    with pytest.raises(RuntimeError, match="residual must be 2-D"):  # 2-D, default options: the op's check
        torch_fp8norm.fused_add_rmsnorm_fp8_block_quant(x, r.view(2, 1, H), w)
    assert torch.equal(r, r0)


def test_documented():
    # The raw ops and each overload carry a docstring; the result type's fields show their types.
    import pydoc
    for packet in (torch.ops.fp8norm.fused_add_rmsnorm_fp8_block_quant, torch.ops.fp8norm.rmsnorm_fp8_block_quant):
        assert "one memory pass" in packet.__doc__
        assert packet.out.__doc__.startswith("fp8norm::") and "one memory pass" in packet.default.__doc__
    text = pydoc.render_doc(BlockQuantized)
    assert "ForwardRef" not in text and "out: torch.Tensor" in text


class _HFStyleRMSNorm(nn.Module):  # the attributes of Hugging Face's LlamaRMSNorm
    def __init__(self, h, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(h) * 0.5 + 1)
        self.variance_epsilon = eps


@pytest.mark.parametrize("device", DEVICES)
def test_module_matches_the_ops(device):
    torch_norm = nn.RMSNorm(H, eps=1e-5, device=device)
    with torch.no_grad():
        torch_norm.weight.copy_(torch.randn(H) * 0.5 + 1)
    for norm, eps in ((torch_norm, 1e-5), (_HFStyleRMSNorm(H, 1e-6).to(device), 1e-6)):
        mod = FusedAddRMSNormFP8.from_rmsnorm(norm, scale_layout="scaled_mm", scale_format="ue8m0")
        assert mod.weight.data_ptr() == norm.weight.data_ptr() and not mod.weight.requires_grad
        x, r, w = make_inputs(Case(device, torch.bfloat16, 5, H))
        r0 = r.clone()
        got = mod(x, r)  # grad mode on: the weight does not require grad, so the call runs
        check_contract(x, r0, norm.weight.detach(), eps, True, r, *got)
        assert got.block_scale.stride() == block_scale_strides(5, H, "scaled_mm")
        got = mod(x)
        check_contract(x, None, norm.weight.detach(), eps, True, None, *got)


def test_module_options_and_errors():
    mod = FusedAddRMSNormFP8.from_rmsnorm(nn.RMSNorm(256), normed=False)  # eps None: finfo(dtype).eps
    x = torch.randn(3, 256, dtype=torch.bfloat16)
    got = mod(x)
    assert got.normed is None
    want = torch_fp8norm.rmsnorm_fp8_block_quant(x, torch.ones(256), torch.finfo(torch.bfloat16).eps)
    assert_fp8_equal(got.out, want.out, "out")
    assert "normed=False" in repr(mod)
    no_affine = FusedAddRMSNormFP8.from_rmsnorm(nn.RMSNorm(256, elementwise_affine=False))
    assert torch.equal(no_affine.weight, torch.ones(256))
    with pytest.raises(ValueError, match="only one dimension"):
        FusedAddRMSNormFP8.from_rmsnorm(nn.RMSNorm((2, 256)))
    # Norms that are not RMS norms are refused, not silently changed into one.
    for norm in (nn.LayerNorm(256), nn.LayerNorm(256, bias=False), nn.LayerNorm(256, elementwise_affine=False),
                 nn.GroupNorm(1, 256), nn.BatchNorm1d(256), nn.InstanceNorm1d(256, affine=True)):
        with pytest.raises(ValueError, match="subtracts the mean"):
            FusedAddRMSNormFP8.from_rmsnorm(norm)
    biased = _HFStyleRMSNorm(256, 1e-6)
    biased.bias = nn.Parameter(torch.zeros(256))
    with pytest.raises(ValueError, match="has a bias"):
        FusedAddRMSNormFP8.from_rmsnorm(biased)
    no_weight = nn.Module()
    no_weight.eps = 1e-6
    with pytest.raises(ValueError, match="no weight"):
        FusedAddRMSNormFP8.from_rmsnorm(no_weight)
    with pytest.raises(ValueError, match="multiple of 128"):
        FusedAddRMSNormFP8(200)
    with pytest.raises(ValueError, match="scale_format"):
        FusedAddRMSNormFP8(256, scale_format="ue8m0_pack")


@pytest.mark.parametrize("device", DEVICES[-1:])  # one compile: on CUDA where there is one (CI compiles on CPU)
def test_module_compiles_without_graph_break(device):
    torch._dynamo.reset()
    mod = FusedAddRMSNormFP8(H, scale_layout="row", normed=False, device=device, dtype=torch.bfloat16)
    f = torch.compile(mod, fullgraph=True)
    x, r, w = make_inputs(Case(device, torch.bfloat16, 4, H))
    r0 = r.clone()
    got = f(x.view(2, 2, H), r.view(2, 2, H))
    want = torch_fp8norm.fused_add_rmsnorm_fp8_block_quant(x, r0, mod.weight, scale_layout="row", normed=False)
    assert got.normed is None and got.out.shape == (2, 2, H)
    assert_fp8_equal(got.out.view(4, H), want.out, "out")
    assert_bitwise(got.block_scale.view(4, H // 128), want.block_scale, "block_scale")
    assert_bitwise(r, r0, "residual")


def test_readme_quick_use_runs():
    # The README's "Quick use" block, as written (on CUDA when present, else CPU).
    import pathlib
    text = (pathlib.Path(__file__).parents[1] / "README.md").read_text()
    start = text.index("```python\nimport torch, torch_fp8norm") + len("```python\n")
    scope = {}
    exec(text[start:text.index("```", start)], scope)
    assert scope["q"].dtype == torch.float8_e4m3fn and scope["s"].stride() == (1, 4096)
