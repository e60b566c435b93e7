"""examples/fp8_linear.py on Hopper: the op's (fp8, scale) pair goes into torch._scaled_mm's
blockwise GEMM (1x128 activation scales, 128x128 weight scales), and the product is what the
dequantized operands give (a misplaced scale shows: block magnitudes vary by up to 2^16) and
within FP8 tolerance of the bf16 layer."""
import os
import sys

import pytest
import torch
from torch import nn

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
import fp8_linear as E  # noqa: E402

pytestmark = pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
                                reason="blockwise torch._scaled_mm needs an sm_90 GPU")

K, N = 2048, 1536


def layer_inputs(m, gen):
    def blocky(rows):  # random 128-blocks of the rows scaled by 2^-8..2^8
        t = torch.randn(rows, K, generator=gen, device="cuda")
        mag = torch.exp2(torch.randint(-8, 9, (rows, K // 128, 1), generator=gen, device="cuda").float())
        return (t.view(rows, K // 128, 128) * mag).view(rows, K).to(torch.bfloat16)

    norm = nn.RMSNorm(K, eps=1e-6, device="cuda", dtype=torch.bfloat16)
    linear = nn.Linear(K, N, bias=False, device="cuda", dtype=torch.bfloat16)
    norm.weight.requires_grad_(False).copy_(blocky(1)[0].abs() + 0.1)
    linear.weight.requires_grad_(False).copy_(blocky(N) / K**0.5)
    return norm, linear, blocky(m), blocky(m)


@pytest.mark.parametrize("m", [1, 37, 128, 2048])
@torch.no_grad()
def test_fp8_linear_against_dequantized_and_bf16(m):
    gen = torch.Generator("cuda").manual_seed(m)
    norm, linear, x, residual = layer_inputs(m, gen)
    layer = E.FP8NormLinear(norm, linear)
    r0 = residual.clone()
    q, s, normed = E.torch_fp8norm.fused_add_rmsnorm_fp8_block_quant(x, r0.clone(), norm.weight,
                                                                     scale_layout="scaled_mm")
    y = layer(x, residual)
    assert y.shape == (m, N) and y.dtype == torch.bfloat16
    assert torch.equal(residual, r0 + x)
    # float32 accumulation and a bf16 output: well under 1%; FP8 rounding of both operands: a few %.
    assert E.relative_error(y, E.dequantized_product(q, s, layer.w_q, layer.w_scale)) < 5e-3
    assert E.relative_error(y, normed.double() @ linear.weight.double().t()) < 0.08
    # The same layer from separate torch ops: the same product up to the norm's rounding.
    r1 = r0.clone()
    y_unfused = E.unfused_norm_linear(x, r1, norm.weight, layer.w_q, layer.w_scale, norm.eps)
    assert torch.equal(r1, residual)
    assert E.relative_error(y_unfused, y) < 0.08


def test_example_main_runs(capsys):
    E.main(m=16, k=1024, n=512)
    assert "relative error" in capsys.readouterr().out
