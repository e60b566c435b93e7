"""64-bit indexing on the GPU: more than 2^31 elements, and row strides past 2^32 bytes."""
import pytest
import torch

from fp8norm_testing import assert_bitwise, check_contract, poison_

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device with ~20 GB free"),
]


def test_more_than_2_31_elements():
    h = 16384
    m = (1 << 31) // h + 3  # m * h > 2^31
    x = torch.randn(m, h, device="cuda", dtype=torch.bfloat16)
    r = torch.randn(m, h, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(h, device="cuda", dtype=torch.bfloat16)
    rows = [0, 1, m // 2, m - 2, m - 1]
    r_before = {i: r[i:i + 1].clone() for i in rows}
    out = poison_(torch.empty(m, h, device="cuda", dtype=torch.float8_e4m3fn))
    s = poison_(torch.empty(h // 128, (m + 3) // 4 * 4, device="cuda").t()[:m])
    n = poison_(torch.empty(m, h, device="cuda", dtype=torch.bfloat16))
    torch.ops.fp8norm.fused_add_rmsnorm_fp8_block_quant.out(x, r, w, out=out, block_scale=s, normed_out=n)
    torch.cuda.synchronize()
    for i in rows:
        sl = slice(i, i + 1)
        check_contract(x[sl], r_before[i], w, 1e-6, False, r[sl], out[sl], s[sl], n[sl])
    assert not torch.isnan(n[-1]).any() and not torch.isnan(s).any()


def test_row_strides_past_2_32_bytes():
    h, m = 256, 3
    stride = (1 << 31) + 128  # elements: bf16 rows 4 GiB + 256 B apart
    size = stride * (m - 1) + h
    buf_x = torch.empty(size, device="cuda", dtype=torch.bfloat16)
    buf_r = torch.empty(size, device="cuda", dtype=torch.bfloat16)
    x = buf_x.as_strided((m, h), (stride, 1))
    r = buf_r.as_strided((m, h), (stride, 1))
    x.copy_(torch.randn(m, h))
    r.copy_(torch.randn(m, h))
    # sentinels in the residual buffer just after each row and just before the next
    gaps = [slice(i * stride + h, i * stride + h + 4096) for i in range(m - 1)]
    gaps += [slice((i + 1) * stride - 4096, (i + 1) * stride) for i in range(m - 1)]
    for g in gaps:
        buf_r[g] = torch.randn(4096, device="cuda").to(torch.bfloat16)
    gap_before = [buf_r[g].clone() for g in gaps]
    w = torch.randn(h, device="cuda", dtype=torch.bfloat16)
    r_before = r.clone()
    out = poison_(torch.empty(m, h, device="cuda", dtype=torch.float8_e4m3fn))
    s = poison_(torch.empty(m, h // 128, device="cuda"))
    n = poison_(torch.empty(m, h, device="cuda", dtype=torch.bfloat16))
    torch.ops.fp8norm.fused_add_rmsnorm_fp8_block_quant.out(x, r, w, out=out, block_scale=s, normed_out=n)
    torch.cuda.synchronize()
    check_contract(x, r_before, w, 1e-6, False, r, out, s, n)
    for g, before in zip(gaps, gap_before):
        assert_bitwise(buf_r[g], before, f"residual buffer between rows {g}")
