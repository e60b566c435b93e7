"""examples/block_scaled_mm.py: the op's block-format outputs (swizzled scales) as a block-scaled
GEMM consumes them. Everywhere: the emulated GEMM (operands dequantized through the swizzle) is
within each format's quantization error of the float32 layer, on inputs whose 32-element blocks
differ in magnitude by up to 2^12 (a misplaced scale shows). On a Blackwell GPU: F.scaled_mm's
product equals that emulation up to accumulation order and the bfloat16 output."""
import os
import sys

import pytest
import torch

from test_block_formats import DEVICES  # the devices that run the block formats

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
import block_scaled_mm as E  # noqa: E402

M, K, N = 37, 2880, 256
BOUND = {"mxfp8": 0.06, "mxfp4": 0.25, "nvfp4": 0.2}  # relative Frobenius error of the layer


def layer(device, gen, m=M):
    def blocky(rows):  # random 32-blocks scaled by 2^-6..2^6
        t = torch.randn(rows, K, generator=gen)
        mag = torch.exp2(torch.randint(-6, 7, (rows, K // 32, 1), generator=gen).float())
        return (t.view(rows, K // 32, 32) * mag).view(rows, K).to(torch.bfloat16).to(device)

    x, residual = blocky(m), torch.zeros(m, K, dtype=torch.bfloat16, device=device)
    norm_w = (torch.rand(K, generator=gen) + 0.5).to(torch.bfloat16).to(device)
    w = (blocky(N).float() / K**0.5).to(torch.bfloat16)
    normed = E.R.rms_normalize(x.cpu(), norm_w.cpu(), 1e-6)
    return x, residual, norm_w, w, normed


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fmt", E.FORMATS)
def test_emulated_layer_within_the_format_error(device, fmt):
    gen = torch.Generator().manual_seed(1)
    x, residual, norm_w, w, normed = layer(device, gen)
    q, s, gs, w_q, w_s, gs_w = E.layer_operands(fmt, x, residual, norm_w, w, normed.abs().amax())
    emu = E.dequantize(q, s, fmt, gs).cpu() @ E.dequantize(w_q, w_s, fmt, gs_w).cpu().t()
    exact = normed.float() @ w.float().cpu().t()
    err = float((emu - exact).norm() / exact.norm())
    assert err < BOUND[fmt], (fmt, err)
    # The same dequantization with the scales of the wrong rows (a swizzle misread) is far off.
    wrong = E.dequantize(q, s.roll(1, 0), fmt, gs).cpu() @ E.dequantize(w_q, w_s, fmt, gs_w).cpu().t()
    assert float((wrong - exact).norm() / exact.norm()) > 2 * BOUND[fmt]


def test_example_runs():
    results = E.main(m=5, k=256, n=64, device="cpu")
    assert set(results) == set(E.FORMATS)
    assert all(emu < BOUND[f] for f, (_, emu) in results.items()), results


@pytest.mark.skipif(E.gemm_available("cuda") != "", reason="F.scaled_mm's block formats need a Blackwell GPU "
                                                             "(sm_100 / sm_120) and a torch with F.scaled_mm")
@pytest.mark.parametrize("fmt", E.FORMATS)
@pytest.mark.parametrize("m", [1, 37, 128, 300])
def test_gemm_matches_emulation(fmt, m):
    gen = torch.Generator().manual_seed(m)
    x, residual, norm_w, w, normed = layer("cuda", gen, m)
    q, s, gs, w_q, w_s, gs_w = E.layer_operands(fmt, x, residual, norm_w, w, normed.abs().amax())
    y = E.block_scaled_mm(q, s, w_q, w_s, fmt, gs, gs_w).float().cpu()
    emu = E.dequantize(q, s, fmt, gs).cpu() @ E.dequantize(w_q, w_s, fmt, gs_w).cpu().t()
    assert float((y - emu).norm() / emu.norm()) < 1e-2, fmt
