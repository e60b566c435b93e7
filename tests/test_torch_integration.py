"""The ops as PyTorch custom ops: opcheck, torch.compile (fullgraph, dynamic M, CUDA graphs),
and the Python wrappers."""
import pytest
import torch

import torch_fp8norm
from fp8norm_testing import DEVICES, Case, check_contract, make_inputs, out_buffers
from torch_fp8norm.testing import opcheck


def _sample(device, dtype, weight_fp32, m=5, h=256, ue8m0=False):
    x, r, w = make_inputs(Case(device, dtype, m, h, weight_fp32=weight_fp32))
    return x, r, w, ue8m0


def _outs(device, dtype, m, h, layout="tma", normed=True):
    return out_buffers(Case(device, dtype, m, h, layout=layout, normed_none=not normed))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("weight_fp32", [False, True])
def test_opcheck(device, dtype, weight_fp32):
    ops = torch.ops.fp8norm
    x, r, w, _ = _sample(device, dtype, weight_fp32)
    opcheck(ops.fused_add_rmsnorm_fp8_block_quant.default, (x, r, w, 1e-6, False))
    opcheck(ops.fused_add_rmsnorm_fp8_block_quant.default, (x, r, w, 1e-6, False, "vllm"))
    opcheck(ops.rmsnorm_fp8_block_quant.default, (x, w), {"scale_ue8m0": True, "norm_convention": "hf"})
    conventions = ("flashinfer", "torch", "hf")
    for (layout, normed), conv in zip((("tma", True), ("scaled_mm", False), ("row_major", True)), conventions):
        out, s, n = _outs(device, dtype, 5, 256, layout, normed)
        opcheck(ops.fused_add_rmsnorm_fp8_block_quant.out, (x, r, w, 1e-5, True, conv),
                {"out": out, "block_scale": s, "normed_out": n})
        out, s, n = _outs(device, dtype, 5, 256, layout, normed)
        opcheck(ops.rmsnorm_fp8_block_quant.out, (x, w), {"out": out, "block_scale": s, "normed_out": n})


def _layer(x, residual, weight):
    out, scale, normed = torch.ops.fp8norm.fused_add_rmsnorm_fp8_block_quant(x, residual, weight, 1e-6, False)
    return out, scale, normed


def _layer_out(x, weight, out, scale):
    torch.ops.fp8norm.rmsnorm_fp8_block_quant.out(x, weight, 1e-6, True, out=out, block_scale=scale)
    # Reads a mutated output inside the graph. A matmul is an extern call on CPU too: no
    # generated C++ kernel, whose first compile in a process (headers, ISA probes) outweighs the test.
    return scale @ scale.t()


@pytest.mark.parametrize("device", DEVICES)
def test_compile_fullgraph_dynamic(device):
    from torch._dynamo.testing import CompileCounterWithBackend

    torch._dynamo.reset()
    counter = CompileCounterWithBackend("inductor")
    f = torch.compile(_layer, backend=counter, fullgraph=True, dynamic=True)
    for m in (3, 17, 64, 5, 100):
        x, r, w = make_inputs(Case(device, torch.bfloat16, m, 384))
        r0 = r.clone()
        out, s, n = f(x, r, w)
        assert s.stride() == torch_fp8norm.block_scale_strides(m, 384)
        check_contract(x, r0, w, 1e-6, False, r, out, s, n)  # includes: residual updated in place
    # Inductor inspects the contiguity of block_scale, strided (1, round_up(M, 4)): dense exactly
    # when M % 4 == 0. So one graph serves every M % 4 != 0 and one every M % 4 == 0.
    assert counter.frame_count == 2, f"compiled {counter.frame_count} graphs for 5 values of M"

    g = torch.compile(_layer_out, fullgraph=True, dynamic=True)
    for m in (2, 9):
        x, _, w = make_inputs(Case(device, torch.float16, m, 256, fused=False))
        out, s, _ = _outs(device, torch.float16, m, 256, "scaled_mm", normed=False)
        y = g(x, w, out, s)
        ref_out, ref_s, _ = torch.ops.fp8norm.rmsnorm_fp8_block_quant(x, w, 1e-6, True)
        assert torch.equal(out.view(torch.uint8), ref_out.view(torch.uint8))
        torch.testing.assert_close(s, ref_s, rtol=0, atol=0)
        torch.testing.assert_close(y, ref_s @ ref_s.t())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA device")
def test_compile_reduce_overhead_cuda():
    torch._dynamo.reset()
    f = torch.compile(_layer, mode="reduce-overhead", fullgraph=True)
    x, r, w = make_inputs(Case("cuda", torch.bfloat16, 32, 2048))
    for _ in range(4):  # warm-up, recording, then replays, each on fresh data in the same buffers
        x.copy_(torch.randn_like(x))
        r.copy_(torch.randn_like(r))
        r0 = r.clone()
        out, s, n = f(x, r, w)
        check_contract(x, r0, w, 1e-6, False, r, out.clone(), s.clone(), n.clone())


@pytest.mark.parametrize("device", DEVICES)
def test_wrappers_accept_leading_dims(device):
    x, r, w = make_inputs(Case(device, torch.bfloat16, 6, 256))
    x3, r3 = x.view(2, 3, 256), r.view(2, 3, 256)
    r0 = r.clone()
    out, s, n = torch_fp8norm.fused_add_rmsnorm_fp8_block_quant(x3, r3, w)
    assert out.shape == (2, 3, 256) and s.shape == (2, 3, 2) and n.shape == (2, 3, 256)
    check_contract(x, r0, w, 1e-6, False, r, out.view(6, 256), s.view(6, 2), n.view(6, 256))
    out, s, n = torch_fp8norm.rmsnorm_fp8_block_quant(x3[0, 0], w, scale_format="ue8m0")
    assert out.shape == (256,) and s.shape == (2,)
    check_contract(x[:1], None, w, 1e-6, True, None, out.view(1, 256), s.view(1, 2), n.view(1, 256))
    with pytest.raises(RuntimeError, match="residual .* cannot be viewed"):  # (2, 3, 256), strides (256, 512, 1)
        torch_fp8norm.fused_add_rmsnorm_fp8_block_quant(x3, r.view(3, 2, 256).transpose(0, 1), w)
