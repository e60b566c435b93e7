"""A Blackwell block-scaled linear layer fed by torch_fp8norm: residual add + RMSNorm + MXFP8, MXFP4 or
NVFP4 quantization in one pass, its scales already in the 128x4 swizzled layout cuBLAS takes, then
``torch.nn.functional.scaled_mm`` (``ScalingType.BlockWise1x32`` / ``BlockWise1x16``,
``SwizzleType.SWIZZLE_32_4_4``).

    python examples/block_scaled_mm.py      # each format: the GEMM against its emulation

The GEMM needs a Blackwell GPU (sm_100 or sm_120) and a torch with ``F.scaled_mm``; elsewhere the
example runs the emulation alone (the operands dequantized, then a float32 matmul: what the GEMM
computes, up to its accumulation order) and says so. The weight is quantized by
``torch_fp8norm.reference.quantize`` (the op's own specification) into the same layout.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

import torch_fp8norm
from torch_fp8norm import reference as R

FORMATS = ("mxfp8", "mxfp4", "nvfp4")


def gemm_available(device) -> str:
    """'' where F.scaled_mm can run the block formats on `device`, else what is missing."""
    if not hasattr(F, "scaled_mm"):
        return "a torch with torch.nn.functional.scaled_mm"
    if torch.device(device).type != "cuda" or not torch.cuda.is_available():
        return "a CUDA device"
    if torch.cuda.get_device_capability(device)[0] not in (10, 12):
        return "a Blackwell GPU (sm_100 or sm_120)"
    return ""


def nvfp4_encode_scale(amax: Tensor) -> Tensor:
    """NVFP4's per-tensor encode scale, 448 * 6 / amax (the op's global_scale), float32 [1]."""
    return (R.FP8_MAX * R.E2M1_MAX / amax.float().clamp_min(1e-30)).reshape(1)


def quantize_weight(w: Tensor, fmt: str):
    """[N, K] weight -> (codes, swizzled scales, NVFP4's encode scale or None): the op's format, by
    the reference, so that both GEMM operands share one specification."""
    gs = nvfp4_encode_scale(w.abs().amax()).to(w.device) if fmt == "nvfp4" else None
    q, s = R.quantize(w, fmt, "swizzled", None, gs)
    return q, s, gs


def dequantize(q: Tensor, scale: Tensor, fmt: str, global_scale: Tensor | None = None) -> Tensor:
    """The values a block-scaled GEMM sees, float32 [M, K]: the swizzled scales undone, then codes x
    block scale (x 1 / global_scale for NVFP4), by the reference."""
    k = q.shape[1] * (1 if fmt == "mxfp8" else 2)
    return R.dequantize(q, R.unswizzle_128x4(scale, q.shape[0], k // R.FORMAT_BLOCK[fmt]), fmt, global_scale)


def block_scaled_mm(q: Tensor, s: Tensor, w_q: Tensor, w_s: Tensor, fmt: str, gs_a=None, gs_w=None,
                    out_dtype=torch.bfloat16) -> Tensor:
    """q [M, K] (codes) times w_q.T ([N, K] codes), both with 128x4 swizzled block scales (and for
    NVFP4 their encode scales gs_a, gs_w): cuBLAS's block-scaled GEMM through F.scaled_mm."""
    if fmt == "nvfp4":
        recipe = [F.ScalingType.BlockWise1x16, F.ScalingType.TensorWise]
        swizzle = [F.SwizzleType.SWIZZLE_32_4_4, F.SwizzleType.NO_SWIZZLE]
        return F.scaled_mm(q, w_q.t(), [s, 1.0 / gs_a], recipe, [w_s, 1.0 / gs_w], recipe, swizzle, swizzle,
                           output_dtype=out_dtype)
    recipe, swizzle = F.ScalingType.BlockWise1x32, F.SwizzleType.SWIZZLE_32_4_4
    return F.scaled_mm(q, w_q.t(), s, recipe, w_s, recipe, swizzle, swizzle, output_dtype=out_dtype)


def quantize_activations(x: Tensor, residual: Tensor, norm_weight: Tensor, fmt: str, global_scale=None,
                         eps: float = 1e-6):
    """``residual += x`` and the block quantization of ``rmsnorm(residual) * norm_weight`` in one
    torch_fp8norm call: (codes, swizzled scales). NVFP4 takes the activations' encode scale
    (engines calibrate it offline)."""
    q, s, _ = torch_fp8norm.fused_add_rmsnorm_quant(x, residual, norm_weight, eps, format=fmt,
                                                    global_scale=global_scale, normed=False)
    return q, s


def layer_operands(fmt: str, x: Tensor, residual: Tensor, norm_weight: Tensor, w: Tensor, act_amax: Tensor):
    """One format's GEMM operands: the activations by the op (residual updated in place; NVFP4's
    encode scale from act_amax, the activations' calibrated amax) and the weight by the reference:
    (q, s, gs, w_q, w_s, gs_w), gs None but for NVFP4."""
    gs = nvfp4_encode_scale(act_amax).to(x.device) if fmt == "nvfp4" else None
    q, s = quantize_activations(x, residual, norm_weight, fmt, gs)
    return (q, s, gs, *quantize_weight(w, fmt))


def main(m: int = 37, k: int = 2880, n: int = 1024, device=None) -> dict:
    """Each format: the layer's output by the GEMM (where it runs) and by the emulation, and their
    relative errors against the unquantized float32 layer. Returns {format: (gemm_err, emu_err)}."""
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(m, k, generator=gen).to(torch.bfloat16).to(device)
    residual = torch.randn(m, k, generator=gen).to(torch.bfloat16).to(device)
    norm_w = (torch.rand(k, generator=gen) + 0.5).to(torch.bfloat16).to(device)
    w = (torch.randn(n, k, generator=gen) / k**0.5).to(torch.bfloat16).to(device)
    missing = gemm_available(device)
    normed = R.rms_normalize(R.residual_sum(x.cpu(), residual.cpu())[1], norm_w.cpu(), 1e-6)
    exact = normed.float() @ w.float().cpu().t()
    results = {}
    for fmt in FORMATS:
        q, s, gs, w_q, w_s, gs_w = layer_operands(fmt, x, residual.clone(), norm_w, w, normed.abs().amax())
        emu = dequantize(q, s, fmt, gs).cpu() @ dequantize(w_q, w_s, fmt, gs_w).cpu().t()
        rel = lambda y: float((y.float().cpu() - exact).norm() / exact.norm())  # noqa: E731
        gemm_err = None if missing else rel(block_scaled_mm(q, s, w_q, w_s, fmt, gs, gs_w))
        results[fmt] = (gemm_err, rel(emu))
        print(f"{fmt}: relative error against the float32 layer: emulation {rel(emu):.3e}"
              + ("" if gemm_err is None else f", GEMM {gemm_err:.3e}"))
    if missing:
        print(f"(the block-scaled GEMM itself needs {missing}: only its emulation ran)")
    return results


if __name__ == "__main__":
    main()
