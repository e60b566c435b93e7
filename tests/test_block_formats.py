"""The block-format ops (fp8norm.fused_add_rmsnorm_quant, fp8norm.rmsnorm_quant) against reference.py:
every format, scale layout and scale mode, both overloads, with and without a residual, on fresh
random inputs with outputs poisoned (random bytes) before every call. The contract: residual
bitwise, normed within 1 ulp of the reference with exact rstd, out and block_scale (the swizzled
layout's padding included) bitwise the reference's quantization of the op's own normed."""
import pytest
import torch

from fp8norm_testing import (assert_bitwise, assert_fp8_equal, assert_only_view_written, exact_rstd_normalize,
                             int_view, storage_bytes, ulp_distance)
from torch_fp8norm import reference as R
from torch_fp8norm.testing import opcheck

ops = torch.ops.fp8norm
DEVICES = ["cpu"]  # the MX and NV formats have no CUDA kernel yet: test_cuda_refuses_block_formats

# (format, scale_layout, scale_format, scale_mode): every layout and mode of each format.
OPTIONS = [
    ("fp8_1x128", None, None, None), ("fp8_1x128", "row", "ue8m0", None),
    ("fp8_1x128", "scaled_mm", "ue8m0_packed", None), ("fp8_1x128", "deepgemm", "fp32", None),
    ("mxfp8", None, None, None), ("mxfp8", "row", None, "floor"), ("mxfp8", "swizzled", None, "rceil"),
    ("mxfp8", "swizzled", None, "floor"),
    ("mxfp4", None, None, None), ("mxfp4", "row", None, "floor"), ("mxfp4", "row", None, "rceil"),
    ("mxfp4", "swizzled", None, "floor"),
    ("nvfp4", None, None, None), ("nvfp4", "row", None, None),
]
IDS = ["-".join(str(v) for v in o if v is not None) for o in OPTIONS]
DTYPES = [torch.bfloat16, torch.float16, torch.float32]


def hidden_sizes(fmt):
    """H values for a format: multiples of its block, 128 and not (gpt-oss's 2880)."""
    return {"fp8_1x128": [128, 640], "nvfp4": [16, 48, 2880], "mxfp8": [32, 96, 2880], "mxfp4": [32, 96, 2880]}[fmt]


def as_bytes(t):
    """t's elements' bytes, row-major, whatever its strides and dtype."""
    i = int_view(t)
    return torch.empty(i.shape, dtype=i.dtype, device=i.device).copy_(i).view(torch.uint8)


def poison_bytes_(t, gen=None):
    """Random bytes in every byte of t's storage (so that a byte left unwritten shows)."""
    s = torch.empty(0, dtype=torch.uint8, device=t.device).set_(t.untyped_storage())
    s.copy_(torch.randint(0, 256, s.shape, dtype=torch.uint8, generator=gen).to(t.device))
    return t


def global_scale_for(normed_like: torch.Tensor):
    """The encode scale engines pass: 448 * 6 / amax of the tensor."""
    amax = normed_like.float().abs().amax().clamp_min(1e-30)
    return (torch.tensor(448 * 6.0) / amax).reshape(1).to(normed_like.device)


def scale_shape(fmt, layout, m, h):
    if fmt == "fp8_1x128":
        return None
    ks = h // R.FORMAT_BLOCK[fmt]
    return ((m + 127) // 128 * 128, (ks + 3) // 4 * 4) if (layout or "swizzled") == "swizzled" else (m, ks)


def out_buffers(fmt, layout, scale_format, m, h, dtype, device, pad=0):
    """Poisoned .out buffers, rows padded by `pad` elements (out, normed and row-layout scales)."""
    fp4 = fmt in ("mxfp4", "nvfp4")
    ocols = h // 2 if fp4 else h
    out = poison_bytes_(torch.empty(m, ocols + pad, dtype=torch.uint8, device=device))[:, :ocols]
    out = out.view(torch.float4_e2m1fn_x2 if fp4 else torch.float8_e4m3fn)
    normed = poison_bytes_(torch.empty(m, h + pad, dtype=dtype, device=device))[:, :h]
    if fmt == "fp8_1x128":
        packed = scale_format == "ue8m0_packed"
        cols = (h // 128 + 3) // 4 if packed else h // 128
        s = torch.empty(m, cols + pad, dtype=torch.int32 if packed else torch.float32, device=device)[:, :cols]
    else:
        rows, cols = scale_shape(fmt, layout, m, h)
        dt = torch.float8_e4m3fn if fmt == "nvfp4" else torch.float8_e8m0fnu
        if (layout or "swizzled") == "swizzled":
            s = torch.empty(rows, cols, dtype=torch.uint8, device=device).view(dt)
        else:
            s = torch.empty(rows, cols + pad, dtype=torch.uint8, device=device)[:, :cols].view(dt)
    return out, poison_bytes_(s), normed


def call(fused, x, r, w, eps, fmt, layout, scale_format, mode, gs, conv, outs=None):
    """The functional overload (outs None) or .out into outs; returns (out, block_scale, normed)."""
    opts = (eps, fmt, layout, scale_format, mode, gs, conv)
    if outs is None:
        return ops.fused_add_rmsnorm_quant(x, r, w, *opts) if fused else ops.rmsnorm_quant(x, w, *opts)
    out, s, n = outs
    kw = dict(out=out, block_scale=s, normed_out=n)
    if fused:
        ops.fused_add_rmsnorm_quant.out(x, r, w, *opts, **kw)
    else:
        ops.rmsnorm_quant.out(x, w, *opts, **kw)
    return out, s, n


def assert_codes_equal(got, want, fmt, what):
    if fmt in ("fp8_1x128", "mxfp8"):
        assert_fp8_equal(got, want, what)
    else:
        assert_bitwise(got.view(torch.uint8), want.view(torch.uint8), what)


def assert_scales_equal(got, want, fmt, what):
    if fmt == "fp8_1x128":
        assert_bitwise(got, want, what)  # values, whatever the strides
    elif fmt == "nvfp4":
        assert_fp8_equal(got, want, what)
    else:
        assert_bitwise(got.view(torch.uint8), want.view(torch.uint8), what)


def check(x, r_before, w, eps, fmt, layout, scale_format, mode, gs, conv, r_after, out, s, n):
    """The contract of one call (module docstring)."""
    if r_before is not None:
        new_residual, s_ref = R.residual_sum(x, r_before, conv)
        assert_bitwise(r_after, new_residual, "residual")
    else:
        s_ref = x
    ref_normed = exact_rstd_normalize(s_ref, w, eps, x.dtype, conv)
    d = ulp_distance(n, ref_normed)
    assert d.numel() == 0 or int(d.max()) <= 1, f"normed: {int(d.max())} ulp from the reference"
    if fmt == "fp8_1x128":
        q, sc = R.quantize_fp8_block(n, scale_format in ("ue8m0", "ue8m0_packed"))
        if scale_format == "ue8m0_packed":
            from test_ue8m0_packed import pack_ue8m0
            sc = pack_ue8m0(sc)
    else:
        q, sc = R.quantize(n, fmt, layout, mode, gs)
    assert_codes_equal(out, q, fmt, "out")
    assert_scales_equal(s, sc, fmt, "block_scale")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("fmt,layout,scale_format,mode", OPTIONS, ids=IDS)
def test_contract(device, dtype, fmt, layout, scale_format, mode):
    gen = torch.Generator().manual_seed(torch.randint(0, 2**31, ()).item())
    for h in hidden_sizes(fmt):
        for m in (1, 130):
            for fused in (True, False):
                for functional in (True, False):
                    conv = ("torch", "vllm", "hf", "flashinfer")[(m + h + fused) % 4]
                    x = (torch.randn(m, h, generator=gen) * torch.exp(torch.randn(m, 1, generator=gen) * 2))
                    x = x.to(dtype).to(device)
                    r = (torch.randn(m, h, generator=gen)).to(dtype).to(device) if fused else None
                    w = (torch.randn(h, generator=gen) * 0.5 + 1).to(dtype if (m % 2) else torch.float32).to(device)
                    gs = global_scale_for(x) if fmt == "nvfp4" else None
                    r_before = r.clone() if fused else None
                    outs = None if functional else out_buffers(fmt, layout, scale_format, m, h, dtype, device,
                                                               pad=(m + h) % 3)
                    before = None if outs is None else [storage_bytes(t) for t in outs]
                    out, s, n = call(fused, x, r, w, 1e-6, fmt, layout, scale_format, mode, gs, conv, outs)
                    if before is not None:
                        for t, b, what in zip(outs, before, ("out", "block_scale", "normed_out")):
                            assert_only_view_written(t, b, what)
                    else:
                        shape = scale_shape(fmt, layout, m, h)
                        assert shape is None or tuple(s.shape) == shape and s.is_contiguous()
                    check(x, r_before, w, 1e-6, fmt, layout, scale_format, mode, gs, conv, r, out, s, n)


def special_rows(h, dtype, gen):
    """Rows of every kind: zero, tiny, huge, inf, NaN, a single spike, mixed magnitudes."""
    big = torch.finfo(dtype).max / 4
    rows = [torch.zeros(h), torch.full((h,), 1e-30), torch.full((h,), big), torch.randn(h, generator=gen) * 1e-3]
    spike = torch.randn(h, generator=gen) * 1e-4
    spike[h // 2] = 50.0
    rows.append(spike)
    for v in (float("inf"), float("-inf"), float("nan")):
        t = torch.randn(h, generator=gen)
        t[h // 3] = v
        rows.append(t)
    mixed = torch.randn(h, generator=gen) * torch.exp2(torch.randint(-30, 30, (h,), generator=gen).float())
    rows.append(mixed)
    return torch.stack(rows).to(dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
@pytest.mark.parametrize("fmt,layout,scale_format,mode", [o for o in OPTIONS if o[0] != "fp8_1x128"],
                         ids=[i for i, o in zip(IDS, OPTIONS) if o[0] != "fp8_1x128"])
def test_special_values(device, dtype, fmt, layout, scale_format, mode):
    gen = torch.Generator().manual_seed(5)
    h = 96 if fmt != "nvfp4" else 48
    x = special_rows(h, dtype, gen).to(device)
    w = torch.ones(h, dtype=dtype, device=device)
    gss = [global_scale_for(x.nan_to_num(0, 0, 0))] if fmt != "nvfp4" else [
        torch.tensor([v], device=device) for v in (2688.0, 0.0, float("inf"), float("nan"), 1e-30, 3e38, -5.0)]
    for gs in gss if fmt == "nvfp4" else [None]:
        for normed_src in ("op",):
            out, s, n = call(False, x, None, w, 1e-6, fmt, layout, scale_format, mode, gs, "torch")
            check(x, None, w, 1e-6, fmt, layout, scale_format, mode, gs, "torch", None, out, s, n)


@pytest.mark.parametrize("device", DEVICES)
def test_empty_rows(device):
    """M = 0: every output empty (the swizzled scales too: round_up(0, 128) rows), nothing written."""
    for fmt, layout, scale_format, mode in OPTIONS:
        h = 128
        x = torch.empty(0, h, device=device)
        w = torch.ones(h, device=device)
        gs = torch.ones(1, device=device) if fmt == "nvfp4" else None
        out, s, n = ops.rmsnorm_quant(x, w, 1e-6, fmt, layout, scale_format, mode, gs)
        assert out.shape[0] == 0 and s.shape[0] == 0 and n.shape == (0, h)
        outs = out_buffers(fmt, layout, scale_format, 0, h, torch.float32, device)
        ops.fused_add_rmsnorm_quant.out(x, x.clone(), w, 1e-6, fmt, layout, scale_format, mode, gs, out=outs[0],
                                        block_scale=outs[1], normed_out=outs[2])


@pytest.mark.parametrize("device", DEVICES)
def test_normed_out_none(device):
    """normed_out=None: the same out and block_scale as a call that writes normed."""
    for fmt, layout, scale_format, mode in OPTIONS:
        h = 2880 if fmt != "fp8_1x128" else 384
        x = torch.randn(5, h, device=device, dtype=torch.bfloat16)
        w = torch.randn(h, device=device, dtype=torch.bfloat16)
        gs = global_scale_for(x) if fmt == "nvfp4" else None
        a = out_buffers(fmt, layout, scale_format, 5, h, torch.bfloat16, device)
        b = out_buffers(fmt, layout, scale_format, 5, h, torch.bfloat16, device)
        call(False, x, None, w, 1e-6, fmt, layout, scale_format, mode, gs, None, a)
        call(False, x, None, w, 1e-6, fmt, layout, scale_format, mode, gs, None, (b[0], b[1], None))
        assert torch.equal(as_bytes(a[0]), as_bytes(b[0])) and torch.equal(as_bytes(a[1]), as_bytes(b[1]))


@pytest.mark.parametrize("device", DEVICES)
def test_strided_input_rows(device):
    """input, residual and outputs with row strides: the same results as contiguous tensors."""
    for fmt, layout, scale_format, mode in OPTIONS:
        h = 96 if fmt != "fp8_1x128" else 256
        base = torch.randn(7, h + 32, device=device, dtype=torch.bfloat16)
        x = base[:, 16:16 + h]
        r = torch.randn(7, h, device=device, dtype=torch.bfloat16)
        w = torch.randn(h, device=device, dtype=torch.bfloat16)
        gs = global_scale_for(x) if fmt == "nvfp4" else None
        r1, r2 = r.clone(), r.clone()
        got = call(True, x, r1, w, 1e-6, fmt, layout, scale_format, mode, gs, None,
                   out_buffers(fmt, layout, scale_format, 7, h, torch.bfloat16, device, pad=5))
        want = call(True, x.contiguous(), r2, w, 1e-6, fmt, layout, scale_format, mode, gs, None)
        assert torch.equal(r1, r2)
        assert torch.equal(as_bytes(got[0]), as_bytes(want[0])) and torch.equal(as_bytes(got[1]), as_bytes(want[1]))
        assert torch.equal(got[2], want[2])


def test_matches_torchao_mx_floor():
    """MX FLOOR scales and codes of the op's own normed are bit-exact to torchao's to_mx (finite data)."""
    mx = pytest.importorskip("torchao.prototype.mx_formats.mx_tensor")
    from torchao.prototype.mx_formats.config import ScaleCalculationMode
    x = torch.randn(64, 2880, dtype=torch.bfloat16) * 3
    w = torch.randn(2880, dtype=torch.bfloat16)
    for fmt, elem in (("mxfp8", torch.float8_e4m3fn), ("mxfp4", torch.float4_e2m1fn_x2)):
        out, s, n = ops.rmsnorm_quant(x, w, 1e-6, fmt, "row", None, "floor")
        scale, data = mx.to_mx(n, elem, 32, ScaleCalculationMode.FLOOR)
        assert torch.equal(s.view(torch.uint8), scale.view(torch.uint8).view(64, 90))
        assert torch.equal(out.view(torch.uint8), data.view(torch.uint8).view(out.shape))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fmt,layout,scale_format,mode", OPTIONS, ids=IDS)
def test_opcheck(device, fmt, layout, scale_format, mode):
    h = 2880 if fmt != "fp8_1x128" else 256
    x = torch.randn(3, h, device=device, dtype=torch.bfloat16)
    r = torch.randn(3, h, device=device, dtype=torch.bfloat16)
    w = torch.randn(h, device=device, dtype=torch.bfloat16)
    gs = global_scale_for(x) if fmt == "nvfp4" else None
    opts = (1e-6, fmt, layout, scale_format, mode, gs, "vllm")
    opcheck(ops.fused_add_rmsnorm_quant.default, (x, r, w, *opts))
    opcheck(ops.rmsnorm_quant.default, (x, w, *opts))
    out, s, n = out_buffers(fmt, layout, scale_format, 3, h, torch.bfloat16, device)
    opcheck(ops.rmsnorm_quant.out, (x, w, *opts), dict(out=out, block_scale=s, normed_out=n))
    opcheck(ops.fused_add_rmsnorm_quant.out, (x, r, w, *opts), dict(out=out, block_scale=s, normed_out=None))


@pytest.mark.parametrize("device", DEVICES)
def test_compile_dynamic_rows(device):
    """torch.compile(fullgraph=True, dynamic=True): one graph for every M, the eager results."""
    torch._dynamo.reset()

    def f(x, r, w, gs):
        a = ops.fused_add_rmsnorm_quant(x, r, w, 1e-6, "nvfp4", None, None, None, gs)
        b = ops.rmsnorm_quant(a[2], w, 1e-6, "mxfp4", "row", None, "floor")
        return a[0], a[1], b[0], b[1]

    g = torch.compile(f, fullgraph=True, dynamic=True)
    for m in (1, 37, 130):
        x = torch.randn(m, 2880, device=device, dtype=torch.bfloat16)
        r = torch.randn(m, 2880, device=device, dtype=torch.bfloat16)
        w = torch.randn(2880, device=device, dtype=torch.bfloat16)
        gs = global_scale_for(x)
        r1, r2 = r.clone(), r.clone()
        got, want = g(x, r1, w, gs), f(x, r2, w, gs)
        assert torch.equal(r1, r2)
        for a, b in zip(got, want):
            assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(as_bytes(a), as_bytes(b))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_refuses_block_formats():
    """On CUDA the new ops run fp8_1x128 (the existing kernels) and refuse the other formats with the
    reason, before writing anything."""
    import torch_fp8norm
    if not torch_fp8norm.has_cuda_kernels():
        pytest.skip("no CUDA kernels loaded")
    x = torch.randn(4, 256, device="cuda", dtype=torch.bfloat16)
    w = torch.ones(256, device="cuda", dtype=torch.bfloat16)
    out, s, n = ops.rmsnorm_quant(x, w)
    check(x.cpu(), None, w.cpu(), 1e-6, "fp8_1x128", None, None, None, None, "torch", None, out.cpu(), s.cpu(),
          n.cpu())
    with pytest.raises(RuntimeError, match="CPU only in this build"):
        ops.rmsnorm_quant(x, w, 1e-6, "mxfp8")


# ---- The Python functions (torch_fp8norm.fused_add_rmsnorm_quant, rmsnorm_quant).
import torch_fp8norm  # noqa: E402


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fmt,layout,scale_format,mode", OPTIONS, ids=IDS)
def test_functions_leading_dims_and_normed_false(device, fmt, layout, scale_format, mode):
    """(..., H) inputs give the raw op's results on the [M, H] view: out (..., H or H/2), row-layout
    scales (..., H / block), swizzled ones 2-D; normed=False returns None and the same codes."""
    h = 2880 if fmt != "fp8_1x128" else 384
    x = torch.randn(2, 3, h, device=device, dtype=torch.bfloat16)
    r = torch.randn(2, 3, h, device=device, dtype=torch.bfloat16)
    w = torch.randn(h, device=device, dtype=torch.bfloat16)
    gs = global_scale_for(x) if fmt == "nvfp4" else None
    kw = dict(format=fmt, scale_layout=layout, scale_format=scale_format, scale_mode=mode, global_scale=gs)
    r1, r2 = r.clone(), r.clone()
    got = torch_fp8norm.fused_add_rmsnorm_quant(x, r1, w, **kw)
    want = ops.fused_add_rmsnorm_quant(x.view(6, h), r2.view(6, h), w, 1e-6, fmt, layout, scale_format, mode, gs)
    assert torch.equal(r1, r2) and torch.equal(got.normed.view(6, h), want[2])
    assert got.out.shape[:2] == (2, 3) and torch.equal(as_bytes(got.out.view(6, -1)), as_bytes(want[0]))
    swizzled = fmt != "fp8_1x128" and layout in (None, "swizzled")
    assert got.block_scale.dim() == (2 if swizzled else 3)
    assert torch.equal(as_bytes(got.block_scale.reshape(want[1].shape)), as_bytes(want[1]))
    plain = torch_fp8norm.rmsnorm_quant(x, w, normed=False, **kw)
    want = ops.rmsnorm_quant(x.view(6, h), w, 1e-6, fmt, layout, scale_format, mode, gs)
    assert plain.normed is None and torch.equal(as_bytes(plain.out.view(6, -1)), as_bytes(want[0]))
    assert torch.equal(as_bytes(plain.block_scale.reshape(want[1].shape)), as_bytes(want[1]))


def test_functions_refuse_options_that_do_not_apply():
    x, w = torch.randn(4, 256), torch.ones(256)
    f = torch_fp8norm.rmsnorm_quant
    cases = [
        (dict(format="mxfp8", scale_format="ue8m0"), ValueError, "scale_format applies to format 'fp8_1x128' only"),
        (dict(format="nvfp4", scale_mode="rceil", global_scale=torch.ones(1)), ValueError,
         "scale_mode applies to the MX formats only"),
        (dict(format="fp8_1x128", scale_mode="floor"), ValueError, "scale_mode applies to the MX formats only"),
        (dict(format="nvfp4"), ValueError, "format 'nvfp4' needs global_scale"),
        (dict(format="mxfp4", global_scale=torch.ones(1)), ValueError, "global_scale applies to format 'nvfp4' only"),
        (dict(format="mxfp8", scale_layout="deepgemm"), ValueError,
         "scale_layout 'deepgemm' applies to format 'fp8_1x128' only, not to format 'mxfp8'"),
        (dict(format="fp8_1x128", scale_layout="swizzled"), ValueError,
         "scale_layout 'swizzled' applies to the MX and NV formats only"),
        (dict(format="mxfp6"), RuntimeError, "format must be one of"),
        (dict(format="mxfp8", scale_mode="ceil"), RuntimeError, "scale_mode must be one of 'rceil', 'floor'"),
        (dict(format=8), TypeError, "format must be a str, got int"),
        (dict(format="nvfp4", global_scale=2.0), TypeError, "global_scale must be a torch.Tensor, got float"),
        (dict(format="mxfp8", normed=1), TypeError, "normed must be a bool"),
    ]
    for kw, exc, pattern in cases:
        with pytest.raises(exc, match=pattern):
            f(x, w, **kw)
    r = torch.randn(4, 256)
    before = r.clone()
    with pytest.raises(ValueError):
        torch_fp8norm.fused_add_rmsnorm_quant(x, r, w, format="nvfp4")
    assert torch.equal(r, before)


def test_functions_autograd_and_versions():
    """Grad refused before anything is written; the residual's version bumped once per call."""
    x, w = torch.randn(4, 64), torch.ones(64)
    r = torch.randn(4, 64)
    with pytest.raises(RuntimeError, match="no backward"):
        torch_fp8norm.fused_add_rmsnorm_quant(x.requires_grad_(), r, w, format="mxfp8")
    x = x.detach()
    v = r._version
    torch_fp8norm.fused_add_rmsnorm_quant(x, r, w, format="mxfp4", normed=False)
    assert r._version == v + 1
    with torch.inference_mode():
        ri = torch.randn(4, 64)
    with pytest.raises(RuntimeError, match="inference tensor"):
        torch_fp8norm.fused_add_rmsnorm_quant(x, ri, w, format="mxfp8")


def test_module_and_from_rmsnorm_formats():
    """FusedAddRMSNormFP8 (and from_rmsnorm) with format=: the functions' results, the format's
    defaults resolved, the options checked at construction."""
    h = 2880
    norm = torch.nn.RMSNorm(h, eps=1e-6)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(h) * 0.5 + 1)
    x = torch.randn(3, 5, h)
    gs = global_scale_for(x)
    for fmt, kw in (("mxfp8", {}), ("mxfp4", dict(scale_layout="row", scale_mode="floor")),
                    ("nvfp4", dict(global_scale=gs))):
        m = torch_fp8norm.FusedAddRMSNormFP8.from_rmsnorm(norm, format=fmt, **kw)
        assert m.norm_convention == "torch" and m.format == fmt
        assert m.scale_layout == kw.get("scale_layout", "swizzled")
        assert m.scale_mode == (kw.get("scale_mode", "rceil") if fmt != "nvfp4" else None)
        r1, r2 = torch.randn(3, 5, h), None
        r2 = r1.clone()
        with torch.no_grad():
            got = m(x, r1)
        want = torch_fp8norm.fused_add_rmsnorm_quant(x, r2, norm.weight.detach(), 1e-6, format=fmt, **kw)
        assert torch.equal(r1, r2) and torch.equal(got.normed, want.normed)
        assert torch.equal(as_bytes(got.out), as_bytes(want.out))
        assert torch.equal(as_bytes(got.block_scale), as_bytes(want.block_scale))
        assert fmt in repr(m)
    with pytest.raises(ValueError, match="format 'nvfp4' needs global_scale"):
        torch_fp8norm.FusedAddRMSNormFP8(h, format="nvfp4")
    with pytest.raises(RuntimeError, match=r"positive multiple of 32 \(format 'mxfp8'\), got 80"):
        torch_fp8norm.FusedAddRMSNormFP8(80, format="mxfp8")
    with pytest.raises(RuntimeError, match="positive multiple of 128, got 2880"):
        torch_fp8norm.FusedAddRMSNormFP8(h)
    m = torch_fp8norm.FusedAddRMSNormFP8(256)
    assert (m.format, m.scale_layout, m.scale_format, m.scale_mode) == ("fp8_1x128", "deepgemm", "fp32", None)


@pytest.mark.parametrize("fmt", ["mxfp8", "mxfp4", "nvfp4"])
def test_consumer_view_of_the_swizzled_outputs(fmt):
    """What a GEMM consuming the op's outputs sees: the swizzled scales are torchao's to_blocked of
    the row layout's (zero padding included), and codes x scales (x 1/gs) give back the op's normed
    values within half a code step at the scaled value (no saturation under "rceil" and NVFP4's
    encode scale)."""
    blocked = pytest.importorskip("torchao.prototype.mx_formats.utils").to_blocked
    m, h = 200, 2880
    x = torch.randn(m, h, dtype=torch.bfloat16)
    w = (torch.randn(h) * 0.5 + 1).to(torch.bfloat16)
    gs = global_scale_for(torch.ops.fp8norm.rmsnorm_quant(x, w, 1e-6, "mxfp8")[2]) if fmt == "nvfp4" else None
    out, s, n = ops.rmsnorm_quant(x, w, 1e-6, fmt, "swizzled", None, None, gs)
    _, s_row, _ = ops.rmsnorm_quant(x, w, 1e-6, fmt, "row", None, None, gs)
    assert torch.equal(s.view(torch.uint8).flatten(), blocked(s_row.view(torch.uint8)).flatten())
    block = R.FORMAT_BLOCK[fmt]
    y = R.dequantize(out, R.unswizzle_128x4(s, m, h // block), fmt, gs).view(m, -1, block)
    step = (s_row.float() / gs if fmt == "nvfp4" else s_row.float())[..., None]
    v = (n.float().view(m, -1, block) / step).abs()
    if fmt == "mxfp8":
        half = torch.where(v < 2 ** -6, 2.0 ** -10, torch.ldexp(torch.ones_like(v), torch.frexp(v)[1] - 5))
    else:
        half = torch.where(v < 2, 0.25, torch.where(v < 4, 0.5, 1.0))
    assert bool(((y - n.float().view(m, -1, block)).abs() <= half * step * (1 + 2 ** -10)).all())
