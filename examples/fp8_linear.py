"""A block-scaled FP8 linear layer fed by torch_fp8norm: residual add + RMSNorm + 1x128 FP8
quantization in one pass, then ``torch._scaled_mm`` with 1x128 activation scales and 128x128
weight scales (DeepSeek-V3's recipe), on Hopper with a torch whose ``_scaled_mm`` takes blockwise
scales (cuBLASLt's block-scaled FP8 GEMM).

    python examples/fp8_linear.py        # checks one layer against float references, prints errors

``_scaled_mm`` wants the activation scales ``[M, K/128]`` with strides exactly ``(1, M)`` (the
wrappers' ``scale_layout="scaled_mm"``), and M a multiple of 4: the layer has the ``.out`` op
write the first M rows of operands of round_up(M, 4) rows. The weight scales are
``[N/128, K/128]`` row-major, passed transposed with the transposed weight.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

import torch_fp8norm
from torch_fp8norm import reference as R

BLOCK = 128
# cuBLASLt's blockwise FP8 GEMM rejects (CUBLAS_STATUS_NOT_SUPPORTED) activations whose row count is
# not a multiple of this, so the operands are allocated with M rounded up to it: the scales' column
# stride is then round_up(M, 4), the op's "deepgemm" layout.
ROW_ALIGN = 4


def quantize_weight(w: Tensor) -> tuple[Tensor, Tensor]:
    """[N, K] weight -> (float8_e4m3fn [N, K], float32 scales [N/128, K/128]): each 128x128 block
    divided by its amax / 448 (N and K multiples of 128)."""
    n, k = w.shape
    blocks = w.float().view(n // BLOCK, BLOCK, k // BLOCK, BLOCK)
    scale = blocks.abs().amax(dim=(1, 3)).clamp_min(1e-10) / 448.0
    q = (blocks / scale[:, None, :, None]).clamp(-448, 448).to(torch.float8_e4m3fn)
    return q.view(n, k), scale


def gemm_operands(m: int, k: int, device) -> tuple[Tensor, Tensor]:
    """The FP8 GEMM's activation operands for M rows of K: q [Mp, K] float8 and scales [Mp, K/128]
    strided (1, Mp), Mp = M rounded up to ROW_ALIGN; the padding rows zeros with scale 1, the
    first M rows left for the caller to write."""
    mp = (m + ROW_ALIGN - 1) // ROW_ALIGN * ROW_ALIGN
    q = torch.empty(mp, k, dtype=torch.uint8, device=device)  # zeroed as bytes: Inductor has no float8 fill
    q_scale = torch.empty(k // BLOCK, mp, dtype=torch.float32, device=device).t()
    if mp > m:
        q[m:].zero_()
        q_scale[m:].fill_(1.0)
    return q.view(torch.float8_e4m3fn), q_scale


def fp8_block_gemm(q: Tensor, q_scale: Tensor, w_q: Tensor, w_scale: Tensor, out_dtype=torch.bfloat16) -> Tensor:
    """q [M, K] float8 (M a multiple of ROW_ALIGN) with 1x128 scales [M, K/128] strided (1, M),
    times w_q.T ([N, K] float8 with 128x128 scales [N/128, K/128]): [M, N] in out_dtype."""
    return torch._scaled_mm(q, w_q.t(), scale_a=q_scale, scale_b=w_scale.t(), out_dtype=out_dtype)


def quantize_activations(x: Tensor, residual: Tensor, norm_weight: Tensor, eps: float = 1e-6) -> tuple[Tensor, Tensor]:
    """``residual += x`` and the FP8 1x128 quantization of ``rmsnorm(residual) * norm_weight``, in
    one torch_fp8norm call written straight into the GEMM's operands (:func:`gemm_operands`)."""
    m, k = x.shape
    q, q_scale = gemm_operands(m, k, x.device)
    torch.ops.fp8norm.fused_add_rmsnorm_fp8_block_quant.out(x, residual, norm_weight, eps, False, out=q[:m],
                                                            block_scale=q_scale[:m], normed_out=None)
    return q, q_scale


def fused_norm_linear(x: Tensor, residual: Tensor, norm_weight: Tensor, w_q: Tensor, w_scale: Tensor,
                      eps: float = 1e-6) -> Tensor:
    """``residual += x; y = linear(rmsnorm(residual) * norm_weight)`` with the linear in FP8: the
    norm and the quantization in one torch_fp8norm call, the product in one ``torch._scaled_mm``.
    Updates ``residual`` in place, returns y ([M, N], x's dtype)."""
    q, q_scale = quantize_activations(x, residual, norm_weight, eps)
    return fp8_block_gemm(q, q_scale, w_q, w_scale, x.dtype)[:x.shape[0]]


def unfused_norm_linear(x: Tensor, residual: Tensor, norm_weight: Tensor, w_q: Tensor, w_scale: Tensor,
                        eps: float = 1e-6) -> Tensor:
    """The same layer from separate torch ops, as a model without the fused op has it: add,
    RMSNorm, the 1x128 quantization (the reference's), the operands copied into the GEMM's layout."""
    residual.add_(x)
    h = F.rms_norm(residual, (x.shape[-1],), norm_weight, eps)
    q, s = R.quantize_fp8_block(h, False)
    m, k = q.shape
    q_pad, s_pad = gemm_operands(m, k, x.device)
    q_pad[:m] = q
    s_pad[:m] = s
    return fp8_block_gemm(q_pad, s_pad, w_q, w_scale, x.dtype)[:m]


def bf16_norm_linear(x: Tensor, residual: Tensor, norm_weight: Tensor, w: Tensor, eps: float = 1e-6) -> Tensor:
    """The layer without FP8: add, RMSNorm, a GEMM in x's dtype."""
    residual.add_(x)
    return F.linear(F.rms_norm(residual, (x.shape[-1],), norm_weight, eps), w)


class FP8NormLinear(nn.Module):
    """A model's RMSNorm (``torch.nn.RMSNorm`` or alike) and the ``nn.Linear`` after it as one FP8
    layer (:func:`fused_norm_linear`); the linear's weight is quantized once in 128x128 blocks.
    ``forward(x, residual)`` updates ``residual`` in place (``residual += x``) and returns the
    linear of its normalized value."""

    def __init__(self, norm: nn.Module, linear: nn.Linear):
        super().__init__()
        if linear.bias is not None:
            raise ValueError("a linear with a bias is not supported by this example")
        norm8 = torch_fp8norm.FusedAddRMSNormFP8.from_rmsnorm(norm)  # reads (and checks) weight and eps
        self.eps = norm8.eps
        self.register_buffer("norm_weight", norm8.weight.detach())
        w_q, w_scale = quantize_weight(linear.weight.detach())
        self.register_buffer("w_q", w_q)
        self.register_buffer("w_scale", w_scale)

    def forward(self, x: Tensor, residual: Tensor) -> Tensor:
        return fused_norm_linear(x, residual, self.norm_weight, self.w_q, self.w_scale, self.eps)


def dequantized_product(q: Tensor, q_scale: Tensor, w_q: Tensor, w_scale: Tensor) -> Tensor:
    """q * scales times (w_q * scales).T in float64: what the FP8 GEMM computes, up to its float32
    accumulation and the output's rounding."""
    m, k = q.shape
    a = q.double().view(m, k // BLOCK, BLOCK) * q_scale.double()[:, :, None]
    n = w_q.shape[0]
    b = w_q.double().view(n // BLOCK, BLOCK, k // BLOCK, BLOCK) * w_scale.double()[:, None, :, None]
    return a.view(m, k) @ b.view(n, k).t()


def relative_error(got: Tensor, want: Tensor) -> float:
    return float((got.double() - want.double()).norm() / want.double().norm())


@torch.no_grad()
def main(m: int = 128, k: int = 4096, n: int = 2048, device: str = "cuda"):
    torch.manual_seed(0)
    norm = nn.RMSNorm(k, eps=1e-6, device=device, dtype=torch.bfloat16)
    linear = nn.Linear(k, n, bias=False, device=device, dtype=torch.bfloat16)
    norm.weight.uniform_(0.5, 1.5)
    layer = FP8NormLinear(norm, linear)
    x = torch.randn(m, k, dtype=torch.bfloat16, device=device)
    residual = torch.randn(m, k, dtype=torch.bfloat16, device=device)
    q, s, normed = torch_fp8norm.fused_add_rmsnorm_fp8_block_quant(x, residual.clone(), norm.weight,
                                                                   scale_layout="scaled_mm")
    y = layer(x, residual)
    # Against what the GEMM was given (a wrong scale layout shows here) and against the bf16
    # layer in float64 (the FP8 error itself).
    exact = dequantized_product(q, s, layer.w_q, layer.w_scale)
    bf16_layer = normed.double() @ linear.weight.double().t()
    print(f"M={m} K={k} N={n}: relative error {relative_error(y, exact):.1e} against the dequantized "
          f"operands, {relative_error(y, bf16_layer):.1e} against the bf16 layer")


if __name__ == "__main__":
    import sys

    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        sys.exit("fp8_linear.py needs an sm_90 GPU (H100 / H200): torch._scaled_mm's blockwise FP8 GEMM runs there")
    main()
