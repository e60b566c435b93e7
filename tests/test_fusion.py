"""torch_fp8norm.enable_fusion(): the Inductor pass that rewrites residual add + RMSNorm + 1x128
FP8 quantization in compiled graphs into the fp8norm ops. Each form is compiled with the pass on
and off; the tests assert which graph calls an fp8norm op, and check the fused results against
the contract (or bitwise against the eager op where the normed values are not returned)."""
import uuid as uuid_module

import pytest
import torch
import torch.nn.functional as F
from torch._inductor.utils import run_and_get_code

import torch_fp8norm
from fp8norm_testing import (DEVICES, Case, LlamaRMSNorm, assert_bitwise, assert_fp8_equal, check_contract,
                             make_inputs)
from torch_fp8norm import fusion, reference

H = 384
# Each case is an Inductor compile: on CUDA where there is one, else (CI) on CPU.
FUSION_DEVICES = DEVICES[-1:]


def quant(h, floor=1e-10, fp8=torch.float8_e4m3fn, fp8_max=448.0, block=128, ue8m0=None):
    m, n = h.shape
    g = h.float().view(m, n // block, block)
    amax = g.abs().amax(-1, keepdim=True).clamp(min=floor)
    scale = amax / fp8_max
    if ue8m0 == "bits":
        scale = reference.ue8m0_round_up(scale)
    elif ue8m0 == "log2":
        scale = torch.exp2(torch.ceil(torch.log2(scale)))
    q = (g / scale).clamp(-fp8_max, fp8_max).to(fp8)
    return q.view(m, n), scale.squeeze(-1)


def rms_functional(s, w, eps):
    return F.rms_norm(s, (s.shape[-1],), w, eps)


def rms_manual(s, w, eps):
    v = s.float()
    return (v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(s.dtype)


def rms_hf(s, w, eps):  # transformers' LlamaRMSNorm.forward
    v = s.to(torch.float32)
    v = v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + eps)
    return w * v.to(s.dtype)


def vllm_layer(normed_used=False, eps=1e-5):
    """vLLM's RMSNorm.forward_native(x, residual), then the 1x128 quantization."""
    def f(x, r, w):
        orig_dtype = x.dtype
        v = x.to(torch.float32)
        v = v + r.to(torch.float32)
        r = v.to(orig_dtype)
        variance = v.pow(2).mean(dim=-1, keepdim=True)
        v = v * torch.rsqrt(variance + eps)
        h = v.to(orig_dtype) * w
        q, s = quant(h)
        return (q, s, r, h * 2) if normed_used else (q, s, r)
    return f


def layer(rms=rms_functional, residual_first=False, normed_used=False, eps=1e-5, **quant_options):
    def f(x, r, w):
        r = r + x if residual_first else x + r
        h = rms(r, w, eps)
        q, s = quant(h, **quant_options)
        return (q, s, r, h * 2) if normed_used else (q, s, r)
    return f


def first_layer(rms=rms_functional, normed_used=False, eps=1e-5, **quant_options):
    def f(x, w):
        h = rms(x, w, eps)
        q, s = quant(h, **quant_options)
        return (q, s, h * 2) if normed_used else (q, s)
    return f


@pytest.fixture
def fusion_on():
    torch._dynamo.reset()
    torch_fp8norm.enable_fusion()
    yield
    torch_fp8norm.disable_fusion()
    torch._dynamo.reset()


def compiled(f, *args, dynamic=False):
    """f compiled (fullgraph): its results and whether its code calls an fp8norm op."""
    torch._dynamo.reset()
    out, code = run_and_get_code(torch.compile(f, fullgraph=True, dynamic=dynamic), *args)
    return out, any("fp8norm" in c for c in code)


# Each value of every option at least once.
FUSED_FORMS = [(rms_functional, None, False, False), (rms_functional, "bits", True, True),
               (rms_manual, None, True, True), (rms_manual, "bits", False, False)]


@pytest.mark.parametrize("device", FUSION_DEVICES)
@pytest.mark.parametrize("rms, ue8m0, normed_used, residual_first", FUSED_FORMS)
def test_fused_forms_are_rewritten(device, rms, ue8m0, normed_used, residual_first, fusion_on):
    f = layer(rms, residual_first, normed_used, ue8m0=ue8m0)
    x, r, w = make_inputs(Case(device, torch.bfloat16, 6, H))
    r0 = r.clone()
    got, fused = compiled(f, x, r, w)
    assert fused, "the pass did not rewrite the graph"
    assert torch.equal(r, r0), "the graph input residual must stay unchanged (the function does not mutate it)"
    q, s, r_new = got[:3]
    if normed_used:
        check_contract(x, r0, w, 1e-5, ue8m0 is not None, r_new, q, s, got[3] / 2)
    else:  # the same kernel, eagerly
        want = torch.ops.fp8norm.fused_add_rmsnorm_fp8_block_quant(x, r0.clone(), w, 1e-5, ue8m0 is not None)
        assert_fp8_equal(q, want[0], "out")
        assert_bitwise(s, want[1], "block_scale")
        check_contract(x, r0, w, 1e-5, ue8m0 is not None, r_new, want[0], want[1], want[2])


@pytest.mark.parametrize("device", FUSION_DEVICES)
@pytest.mark.parametrize("convention, normed_used", [("hf", False), ("hf", True), ("vllm", False), ("vllm", True)])
def test_two_rounding_forms_keep_their_convention(device, convention, normed_used, fusion_on):
    # Hugging Face's norm after its separate add, vLLM's forward_native: each fused with its own
    # convention, the same bits as the eager op under it.
    f = layer(rms_hf, True, normed_used) if convention == "hf" else vllm_layer(normed_used)
    x, r, w = make_inputs(Case(device, torch.bfloat16, 6, H))
    r0 = r.clone()
    got, fused = compiled(f, x, r, w)
    assert fused, "the pass did not rewrite the graph"
    want = torch.ops.fp8norm.fused_add_rmsnorm_fp8_block_quant(x, r0.clone(), w, 1e-5, False, convention)
    assert_fp8_equal(got[0], want[0], "out")
    assert_bitwise(got[1], want[1], "block_scale")
    check_contract(x, r0, w, 1e-5, False, got[2], want[0], want[1], got[3] / 2 if normed_used else want[2],
                   norm_convention=convention)


class Fp8Mlp(torch.nn.Module):  # an MLP whose input is quantized 1x128 (its GEMM: dequantized, float32)
    def forward(self, h):
        q, s = quant(h)
        m, n = h.shape
        return (q.float().view(m, n // 128, 128) * s[..., None]).view(m, n)


class DecoderLayer(torch.nn.Module):  # transformers' LlamaDecoderLayer.forward (attention: a Linear)
    def __init__(self, hidden_size, eps):
        super().__init__()
        self.self_attn = torch.nn.Linear(hidden_size, hidden_size, bias=False)
        self.mlp = Fp8Mlp()
        self.input_layernorm = LlamaRMSNorm(hidden_size, eps=eps)
        self.post_attention_layernorm = LlamaRMSNorm(hidden_size, eps=eps)

    def forward(self, hidden_states):
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        hidden_states = self.self_attn(hidden_states)
        hidden_states = residual + hidden_states

        # Fully Connected
        residual = hidden_states
        hidden_states = self.post_attention_layernorm(hidden_states)
        hidden_states = self.mlp(hidden_states)
        hidden_states = residual + hidden_states
        return hidden_states


@pytest.mark.parametrize("device", FUSION_DEVICES)
def test_hugging_face_decoder_layer(device, fusion_on):
    # The post-attention norm and the MLP's input quantization become one op with convention "hf";
    # the layer's output is bitwise what eager code computes with that op.
    # Attention's weights are zero, so that the norm's input is the layer's input exactly (the
    # compiled and the eager input norm may differ in their float32 sums' order); the MLP returns
    # float32, so that no rounding after the op is Inductor's to elide.
    torch.manual_seed(0)
    layer_ = DecoderLayer(H, 1e-6).to(device=device, dtype=torch.bfloat16)
    with torch.no_grad():
        layer_.self_attn.weight.zero_()
        layer_.post_attention_layernorm.weight.copy_(torch.randn(H) * 0.3 + 1)
        x = torch.randn(64, H, device=device, dtype=torch.bfloat16)
        got, fused = compiled(layer_, x)
        assert fused, "the pass did not rewrite the graph"
        eager = layer_(x)
        q, s, _ = torch.ops.fp8norm.rmsnorm_fp8_block_quant(x, layer_.post_attention_layernorm.weight, 1e-6, False, "hf")
        want = x + (q.float().view(64, -1, 128) * s[..., None]).view(64, H)
    assert_bitwise(got, want, "layer output")
    # Eager code (float32 mean and rsqrt) differs from it only where rstd rounds differently.
    assert int((got != eager).sum()) * 100 <= got.numel(), int((got != eager).sum())


# A float32 weight with float16 activations is a form the pass fuses; tracing F.rms_norm on it
# makes torch warn that the dtypes differ, as intended here.
@pytest.mark.filterwarnings("ignore:Mismatch dtype between input and weight:UserWarning")
@pytest.mark.parametrize("device", FUSION_DEVICES)
@pytest.mark.parametrize("rms, normed_used", [(rms_functional, False), (rms_manual, True)])
def test_plain_forms_are_rewritten(device, rms, normed_used, fusion_on):
    x, _, w = make_inputs(Case(device, torch.float16, 5, H, fused=False, weight_fp32=True))
    got, fused = compiled(first_layer(rms, normed_used), x, w)
    assert fused
    want = torch.ops.fp8norm.rmsnorm_fp8_block_quant(x, w, 1e-5, False)
    assert_fp8_equal(got[0], want[0], "out")
    assert_bitwise(got[1], want[1], "block_scale")
    if normed_used:
        check_contract(x, None, w, 1e-5, False, None, got[0], got[1], got[2] / 2)


@pytest.mark.parametrize("device", FUSION_DEVICES)
def test_module_and_dynamic_shapes(device, fusion_on):
    norm = torch.nn.RMSNorm(H, eps=1e-6, device=device, dtype=torch.bfloat16)

    def f(x, r):  # constants as literals: dynamic=True turns a float argument into a graph input
        r = x + r
        g = norm(r).float().view(r.shape[0], -1, 128)
        scale = g.abs().amax(-1, keepdim=True).clamp(min=1e-10) / 448.0
        q = (g / scale).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
        return q.view(r.shape), scale.squeeze(-1), r

    torch._dynamo.reset()
    g = torch.compile(f, fullgraph=True, dynamic=True)
    for m in (3, 9, 17):
        x, r, _ = make_inputs(Case(device, torch.bfloat16, m, H))
        r0 = r.clone()
        with torch.no_grad():  # norm.weight requires grad
            (q, s, r_new), code = run_and_get_code(g, x, r)
        assert any("fp8norm" in c for c in code)
        rc = r0.clone()
        want = torch.ops.fp8norm.fused_add_rmsnorm_fp8_block_quant(x, rc, norm.weight.detach(), 1e-6, False)
        assert_fp8_equal(q, want[0], "out")
        assert_bitwise(s, want[1], "block_scale")
        assert_bitwise(r_new, rc, "residual")


@pytest.mark.parametrize("device", FUSION_DEVICES)
def test_forms_that_differ_are_left_alone(device, fusion_on):
    x, r, w = make_inputs(Case(device, torch.bfloat16, 4, 256))
    differ = {
        "UE8M0 by log2/ceil/exp2 (float32 log2 rounds scales just above a power of two down)": dict(ue8m0="log2"),
        "another amax floor": dict(floor=1e-12),
        "float8_e5m2": dict(fp8=torch.float8_e5m2, fp8_max=57344.0),
        "e4m3fnuz's 240": dict(fp8_max=240.0),
        "1x64 blocks": dict(block=64),
    }
    for why, options in differ.items():
        _, fused = compiled(layer(**options), x, r.clone(), w)
        assert not fused, why

    def times_reciprocal(x, r, w):  # DeepGEMM's reference: multiply by 448 / amax
        r = x + r
        g = rms_functional(r, w, 1e-5).float().view(4, 2, 128)
        amax = g.abs().amax(-1, keepdim=True).clamp(min=1e-10)
        return (g * (448.0 / amax)).clamp(-448.0, 448.0).to(torch.float8_e4m3fn).view(4, 256), (amax / 448.0).squeeze(-1), r

    # Hugging Face's two roundings with a float32 weight: the product is float32, its values are
    # quantized unrounded (no convention rounds them so).
    for why, f, weight in (("two roundings, float32 weight", layer(rms_hf), w.float()),
                           ("448 / amax", times_reciprocal, w)):
        _, fused = compiled(f, x, r.clone(), weight)
        assert not fused, why
    # and with the pass off, nothing is rewritten
    fusion.disable_fusion()
    _, fused = compiled(layer(), x, r.clone(), w)
    assert not fused


def test_enable_disable_chain():
    from torch._inductor import config
    from torch._inductor.custom_graph_pass import CustomGraphPass

    calls = []
    token = f"previous-{uuid_module.uuid4()}"

    class Previous(CustomGraphPass):
        def __call__(self, graph):
            calls.append(graph)

        def uuid(self):  # unique per run: a graph cached by an earlier run would run no pass
            return token

    before = config.joint_custom_pre_pass
    prev = Previous()
    config.joint_custom_pre_pass = prev
    try:
        fusion.enable_fusion()
        assert fusion.fusion_enabled() and config.joint_custom_pre_pass is not prev
        uuid = config.joint_custom_pre_pass.uuid()
        assert uuid == config.joint_custom_pre_pass.uuid() and token in uuid
        fusion.enable_fusion()  # idempotent
        assert config.joint_custom_pre_pass.previous is prev
        x, r, w = make_inputs(Case(FUSION_DEVICES[0], torch.bfloat16, 2, 256))
        _, fused = compiled(layer(), x, r, w)
        assert fused and calls, "the previous pass runs too"
        fusion.disable_fusion()
        assert config.joint_custom_pre_pass is prev and not fusion.fusion_enabled()
    finally:
        fusion.disable_fusion()
        config.joint_custom_pre_pass = before
        torch._dynamo.reset()
