"""Packed UE8M0 scales: .out with scale_ue8m0=True and an int32 block_scale [M, ceil(H/512)]
writes each block's biased exponent as byte g % 4 of word g / 4, padding bytes zero. Checked
bitwise against an independent packer of the op's own float32 UE8M0 scales, on every H
(G = H/128 not a multiple of 4 too), every layout, and at the ends of the range."""
import pytest
import torch

import torch_fp8norm
from fp8norm_testing import (DEVICES, Case, assert_fp8_equal, assert_only_view_written, forced_kernel, make_inputs,
                             poison_, storage_bytes)
from torch_fp8norm.testing import opcheck

HS = [128, 256, 384, 512, 640, 1152, 2048, 7168]


def pack_ue8m0(scale: torch.Tensor) -> torch.Tensor:
    """[M, G] float32 powers of two (or Inf / NaN) -> [M, ceil(G/4)] int32 of their exponent bytes."""
    m, g = scale.shape
    exps = (scale.contiguous().view(torch.int32) >> 23) & 0xFF
    padded = torch.zeros(m, (g + 3) // 4 * 4, dtype=torch.int64, device=scale.device)
    padded[:, :g] = exps.long()
    words = padded.view(m, -1, 4)
    packed = words[..., 0] | (words[..., 1] << 8) | (words[..., 2] << 16) | (words[..., 3] << 24)
    return torch.where(packed >= 2**31, packed - 2**32, packed).to(torch.int32)  # the words' bits, signed


def packed_buffer(m, h, layout, device):
    """A poisoned int32 [m, ceil(H/512)] block_scale in `layout`, inside its whole (poisoned) buffer."""
    cols = torch_fp8norm.block_scale_columns(h, "ue8m0_packed")
    if layout == "row":
        return poison_(torch.empty(m, cols, dtype=torch.int32, device=device))
    stride = torch_fp8norm.block_scale_strides(m, h, layout, "ue8m0_packed")[1]
    return poison_(torch.empty(cols, stride, dtype=torch.int32, device=device)).t()[:m]


def fp32_ue8m0(x, r0, w):
    """The functional op's (out, float32 UE8M0 block_scale, normed) for the inputs (r0 None: rmsnorm_*)."""
    if r0 is None:
        return torch.ops.fp8norm.rmsnorm_fp8_block_quant(x, w, 1e-6, True)
    return torch.ops.fp8norm.fused_add_rmsnorm_fp8_block_quant(x, r0, w, 1e-6, True)


def run(x, r, w, packed, normed=True):
    out = poison_(torch.empty(x.shape, dtype=torch.float8_e4m3fn, device=x.device))
    n = torch.empty_like(x) if normed else None
    if r is None:
        torch.ops.fp8norm.rmsnorm_fp8_block_quant.out(x, w, 1e-6, True, out=out, block_scale=packed, normed_out=n)
    else:
        torch.ops.fp8norm.fused_add_rmsnorm_fp8_block_quant.out(x, r, w, 1e-6, True, out=out, block_scale=packed,
                                                                normed_out=n)
    return out


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("h", HS)
@pytest.mark.parametrize("layout", ["deepgemm", "scaled_mm", "row"])
def test_packed_matches_the_fp32_ue8m0_scales(device, h, layout):
    for m, fused in ((1, True), (6, True), (5, False)):
        x, r, w = make_inputs(Case(device, torch.bfloat16, m, h, fused=fused))
        r0 = None if r is None else r.clone()
        packed = packed_buffer(m, h, layout, device)
        before = storage_bytes(packed)
        out = run(x, r, w, packed)
        assert_only_view_written(packed, before, "block_scale")
        want = fp32_ue8m0(x, r0, w)
        assert_fp8_equal(out, want[0], "out")
        assert torch.equal(packed.cpu(), pack_ue8m0(want[1]).cpu()), "packed block_scale"


bf16, fp16 = torch.bfloat16, torch.float16
# Shapes of tests/test_kernels.py that each CUDA kernel runs, G = H/128 a multiple of 4 and not:
# (kernel, dtype, M, H, pad, fused).
KERNEL_CASES = [("row", bf16, 1, 2176, 0, True), ("row", fp16, 5, 1152, 128, False),
                ("row_narrow", bf16, 300, 1408, 0, True), ("row_four", bf16, 2047, 4096, 0, True),
                ("row_four", bf16, 531, 16384, 0, False), ("tile1", bf16, 5, 4096, 1, True),
                ("tile1", fp16, 9, 1152, 1, False), ("tile4", bf16, 3, 32768, 1, True),
                ("tile4", fp16, 1000, 1024, 0, True), ("half_tile1", bf16, 5, 384, 0, True),
                ("half_tile4", bf16, 2047, 1152, 0, True), ("cluster1", bf16, 3, 1408, 0, True),
                ("cluster1", fp16, 16, 8192, 128, False), ("cluster4", bf16, 133, 65536, 0, True),
                ("cluster4", bf16, 1, 1152, 0, True)]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("i", range(len(KERNEL_CASES)),
                         ids=[f"{k}-{str(d)[6:]}-{m}x{h}" for k, d, m, h, _, _ in KERNEL_CASES])
def test_packed_every_cuda_kernel(i):
    kernel, dtype, m, h, pad, fused = KERNEL_CASES[i]
    layout = ("deepgemm", "scaled_mm", "row")[i % 3]
    x, r, w = make_inputs(Case("cuda", dtype, m, h, pad=pad, fused=fused))
    r0 = None if r is None else r.clone()
    packed = packed_buffer(m, h, layout, "cuda")
    before = storage_bytes(packed)
    with forced_kernel(kernel):
        out = run(x, r, w, packed, normed=i % 2 == 0)
        want = fp32_ue8m0(x, r0, w)
    # Values compared on the CPU (tests/gpu/sanitize_cases.py runs this under compute-sanitizer).
    assert_fp8_equal(out.cpu(), want[0].cpu(), "out")
    assert torch.equal(packed.cpu(), pack_ue8m0(want[1].cpu())), "packed block_scale"
    assert_only_view_written(packed, before, "block_scale")


@pytest.mark.parametrize("device", DEVICES)
def test_packed_ends_of_the_range(device):
    # Rows whose blocks' amax falls below the 1e-10 floor (a zero row; 1e-30, whose square
    # underflows, so it normalizes to 1e-27; 3e38, whose sum of squares overflows, so it normalizes
    # to 0) give scale 2^-42: byte 85. A block with an Inf or a NaN gives byte 0xFF. Padding: 0.
    h = 640
    x, r, w = make_inputs(Case(device, torch.float32, 5, h))
    x[0] = 0
    r[0] = 0
    x[1] = 1e-30
    r[1] = 0
    x[2] = 3e38
    r[2] = 0
    x[3, 5] = float("inf")
    x[4, 300] = float("nan")
    r0 = r.clone()
    packed = packed_buffer(5, h, "deepgemm", device)
    run(x, r, w, packed)
    _, s, _ = fp32_ue8m0(x, r0, w)
    assert torch.equal(packed.cpu(), pack_ue8m0(s).cpu())
    b = packed.cpu().contiguous().view(torch.uint8).view(5, -1)
    assert (b[:3, :5] == 85).all() and (b[:, 5:8] == 0).all()
    assert b[3, 0] == 0xFF and b[4, 2] == 0xFF
    # The top: normalized values of 1 times a weight of 3e38 give the largest finite scale,
    # 3e38 / 448 rounded up to 2^120: byte 247.
    ones = torch.ones(2, h, device=device)
    big = torch.full((h,), 3e38, device=device)
    packed = packed_buffer(2, h, "row", device)
    run(ones, None, big, packed, normed=False)
    b = packed.cpu().view(torch.uint8).view(2, -1)
    assert (b[:, :5] == 247).all() and (b[:, 5:] == 0).all()


@pytest.mark.parametrize("device", DEVICES)
def test_wrapper_ue8m0_packed(device):
    x, r, w = make_inputs(Case(device, torch.bfloat16, 6, 640))
    r0 = r.clone()
    for layout in ("deepgemm", "scaled_mm", "row"):
        r.copy_(r0)
        got = torch_fp8norm.fused_add_rmsnorm_fp8_block_quant(x, r, w, scale_layout=layout, scale_format="ue8m0_packed")
        assert got.block_scale.dtype == torch.int32 and got.block_scale.shape == (6, 2)
        assert got.block_scale.stride() == torch_fp8norm.block_scale_strides(6, 640, layout, "ue8m0_packed")
        want = fp32_ue8m0(x, r0.clone(), w)
        assert torch.equal(got.block_scale.cpu(), pack_ue8m0(want[1]).cpu())


@pytest.mark.parametrize("device", DEVICES)
def test_packed_errors(device):
    x, r, w = make_inputs(Case(device, torch.bfloat16, 2, 640))
    out = torch.empty(2, 640, dtype=torch.float8_e4m3fn, device=device)
    op = torch.ops.fp8norm.fused_add_rmsnorm_fp8_block_quant.out
    with pytest.raises(RuntimeError, match="int32 .packed UE8M0 exponents. with scale_ue8m0=True"):
        op(x, r, w, 1e-6, False, out=out, block_scale=torch.empty(2, 2, dtype=torch.int32, device=device))
    with pytest.raises(RuntimeError, match=r"ceil\(H/512\)"):
        op(x, r, w, 1e-6, True, out=out, block_scale=torch.empty(2, 5, dtype=torch.int32, device=device))


@pytest.mark.parametrize("device", DEVICES)
def test_packed_opcheck_and_compile(device):
    x, r, w = make_inputs(Case(device, torch.bfloat16, 5, 640))
    out = torch.empty(5, 640, dtype=torch.float8_e4m3fn, device=device)
    opcheck(torch.ops.fp8norm.fused_add_rmsnorm_fp8_block_quant.out, (x, r, w, 1e-6, True),
            {"out": out, "block_scale": packed_buffer(5, 640, "deepgemm", device), "normed_out": None})

    def f(x, r, w):
        return torch_fp8norm.fused_add_rmsnorm_fp8_block_quant(x, r, w, scale_format="ue8m0_packed", normed=False)

    torch._dynamo.reset()
    r0 = r.clone()
    got = torch.compile(f, fullgraph=True)(x, r, w)
    want = fp32_ue8m0(x, r0, w)
    assert_fp8_equal(got.out, want[0], "out")
    assert got.block_scale.stride() == torch_fp8norm.block_scale_strides(5, 640, "deepgemm", "ue8m0_packed")
    assert torch.equal(got.block_scale.cpu(), pack_ue8m0(want[1]).cpu())
