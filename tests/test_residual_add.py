"""The new residual, residual + input, over every pair of 2-byte values (CUDA).

The reference adds in float32 and rounds to the activation dtype; the CUDA kernel adds bf16 /
fp16 pairs with one paired add rounded once (csrc/cuda/vector_io.cuh, Cvt::add2). This runs the op on all
2^32 pairs of bit patterns, NaN and infinity included, and compares the residual it writes
with torch's float32 sum rounded to the dtype: bit for bit, any NaN equal to any NaN.
"""
import pytest
import torch

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

H = 4096
CHUNK = 1 << 26  # pairs per call: 16384 rows of H


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_residual_add_every_pair(dtype):
    op = torch.ops.fp8norm.fused_add_rmsnorm_fp8_block_quant.out
    m = CHUNK // H
    w = torch.ones(H, device="cuda", dtype=dtype)
    out = torch.empty(m, H, device="cuda", dtype=torch.float8_e4m3fn)
    scale = torch.empty(m, H // 128, device="cuda")
    normed = torch.empty(m, H, device="cuda", dtype=dtype)
    for start in range(0, 1 << 32, CHUNK):
        pair = torch.arange(start, start + CHUNK, device="cuda", dtype=torch.int64)
        # input takes the high 16 bits of the pair's index, residual the low 16
        x = (pair >> 16).to(torch.int32).to(torch.int16).view(dtype).view(m, H)
        r = (pair & 0xFFFF).to(torch.int32).to(torch.int16).view(dtype).view(m, H)
        want = (x.float() + r.float()).to(dtype)
        op(x, r, w, 1e-6, False, out=out, block_scale=scale, normed_out=normed)
        same = (r.view(torch.int16) == want.view(torch.int16)) | (torch.isnan(r) & torch.isnan(want))
        if not bool(same.all()):
            i = int((~same).flatten().nonzero()[0])
            pytest.fail(f"{dtype}, pair {start + i:#010x} (input bits {(start + i) >> 16:#06x}, residual "
                        f"bits {(start + i) & 0xFFFF:#06x}): got {r.flatten()[i].item()!r}, "
                        f"want {want.flatten()[i].item()!r}")
