"""Every malformed call raises a clear error naming the argument and the rule, and writes nothing;
the fake kernels (torch.compile, meta tensors) raise the same errors."""
import pytest
import torch

from fp8norm_testing import DEVICES, Case, check_case, int_view, make_inputs, out_buffers

M, H = 4, 256
BF = torch.bfloat16


def _valid(device):
    c = Case(device, BF, M, H)
    x, r, w = make_inputs(c)
    out, s, n = out_buffers(c)
    return dict(input=x, residual=r, weight=w, eps=1e-6, norm_convention="torch", out=out, block_scale=s, normed_out=n)


def _buf(device, *shape, dtype=BF):
    return torch.randn(*shape, device=device).to(dtype)


# (name, function of (valid args, device) -> args to use, error message pattern)
BAD = [
    ("input 1-D", lambda a, d: {**a, "input": a["input"][0]}, "input must be 2-D"),
    ("input 3-D", lambda a, d: {**a, "input": a["input"].view(2, 2, H)}, "input must be 2-D"),
    ("input float64", lambda a, d: {**a, "input": a["input"].double()}, "input must be float16, bfloat16 or float32, got float64"),
    ("input int32", lambda a, d: {**a, "input": a["input"].int()}, "input must be float16, bfloat16 or float32"),
    ("input float8_e8m0fnu", lambda a, d: {**a, "input": _buf(d, M, H, dtype=torch.uint8).view(torch.float8_e8m0fnu)},
     "input must be float16, bfloat16 or float32, got float8_e8m0fnu"),
    ("H not a multiple of 128", lambda a, d: {**a, "input": a["input"][:, :192], "residual": a["residual"][:, :192],
                                              "weight": a["weight"][:192]}, "positive multiple of 128"),
    ("input last dim strided", lambda a, d: {**a, "input": _buf(d, M, 2 * H)[:, ::2]}, "input must have a contiguous last dimension"),
    ("residual dtype", lambda a, d: {**a, "residual": a["residual"].half()}, "residual must have dtype bfloat16, got float16"),
    ("residual shape", lambda a, d: {**a, "residual": _buf(d, M + 1, H)}, "residual must have the shape of input"),
    ("residual 1-D", lambda a, d: {**a, "residual": _buf(d, H)}, "residual must be 2-D"),
    ("residual last dim strided", lambda a, d: {**a, "residual": _buf(d, M, 2 * H)[:, ::2]}, "residual must have a contiguous last dimension"),
    ("weight length", lambda a, d: {**a, "weight": _buf(d, H + 128)}, "weight must have H = 256 elements"),
    ("weight dtype", lambda a, d: {**a, "weight": a["weight"].half()}, r"weight must have dtype bfloat16 \(input's\) or float32, got float16"),
    ("weight dtype, float32 input", lambda a, d: {**a, "input": a["input"].float(), "residual": a["residual"].float(),
                                                 "normed_out": a["normed_out"].float(), "weight": a["weight"].half()},
     r"weight must have dtype float32 \(input's\), got float16"),
    ("weight 2-D", lambda a, d: {**a, "weight": a["weight"].view(2, H // 2)}, "weight must be 1-D"),
    ("weight strided", lambda a, d: {**a, "weight": _buf(d, 2 * H)[::2]}, "weight must be contiguous"),
    ("out dtype", lambda a, d: {**a, "out": _buf(d, M, H)}, "out must have dtype float8_e4m3fn, got bfloat16"),
    ("out float4_e2m1fn_x2", lambda a, d: {**a, "out": _buf(d, M, H, dtype=torch.uint8).view(torch.float4_e2m1fn_x2)},
     "out must have dtype float8_e4m3fn, got float4_e2m1fn_x2"),
    ("out shape", lambda a, d: {**a, "out": _buf(d, M, H + 128).to(torch.float8_e4m3fn)}, "out must have the shape of input"),
    ("out last dim strided", lambda a, d: {**a, "out": _buf(d, M, 2 * H).to(torch.float8_e4m3fn)[:, ::2]}, "out must have a contiguous last dimension"),
    ("block_scale dtype", lambda a, d: {**a, "block_scale": _buf(d, M, H // 128)}, "block_scale must have dtype float32"),
    ("block_scale float8_e8m0fnu", lambda a, d: {**a, "block_scale": _buf(d, M, H // 128, dtype=torch.uint8).view(torch.float8_e8m0fnu)},
     "block_scale must have dtype float32, or int32 .*, got float8_e8m0fnu"),
    ("block_scale shape", lambda a, d: {**a, "block_scale": _buf(d, M, H // 128 + 1, dtype=torch.float32)}, r"block_scale must have shape \[M, H/128\]"),
    ("block_scale 1-D", lambda a, d: {**a, "block_scale": _buf(d, M * 2, dtype=torch.float32)}, "block_scale must be 2-D"),
    ("block_scale overlapping strides", lambda a, d: {**a, "block_scale": _buf(d, 1, H // 128, dtype=torch.float32).expand(M, H // 128)},
     r"block_scale is written by this op, so each of its elements needs memory of its own, but its strides \[0, 1\] for shape \[4, 2\] give several elements one address"),
    ("normed_out dtype", lambda a, d: {**a, "normed_out": _buf(d, M, H, dtype=torch.float32)}, "normed_out must have dtype"),
    ("normed_out shape", lambda a, d: {**a, "normed_out": _buf(d, M, H * 2)}, "normed_out must have the shape of input"),
    ("eps negative", lambda a, d: {**a, "eps": -1.0}, "eps must be finite and >= 0, got -1"),
    ("eps NaN", lambda a, d: {**a, "eps": float("nan")}, "eps must be finite and >= 0, got nan"),
    ("eps inf", lambda a, d: {**a, "eps": float("inf")}, "eps must be finite and >= 0, got inf"),
    ("residual is input", lambda a, d: {**a, "residual": a["input"]}, "residual overlaps input"),
    ("residual overlaps input", lambda a, d: (lambda b: {**a, "input": b[:, :H], "residual": b[:, 128:128 + H]})(_buf(d, M, 2 * H)),
     "residual overlaps input"),
    ("residual rows overlap", lambda a, d: {**a, "residual": _buf(d, 2 * M * H).as_strided((M, H), (128, 1))},
     "residual is written by this op, so each of its elements needs memory of its own"),
    ("weight inside residual", lambda a, d: {**a, "weight": a["residual"][1]}, "residual overlaps weight"),
    ("out aliases normed_out", lambda a, d: (lambda b: {**a, "normed_out": b, "out": b.view(torch.float8_e4m3fn)[:, :H]})(_buf(d, M, H)),
     "normed_out overlaps out"),
    ("block_scale inside normed_out", lambda a, d: {**a, "block_scale": a["normed_out"].view(torch.float32)[:, :H // 128]},
     "normed_out overlaps block_scale"),
    ("out inside input", lambda a, d: {**a, "out": a["input"].view(torch.float8_e4m3fn)[:, :H]}, "out overlaps input"),
    ("unknown norm_convention", lambda a, d: {**a, "norm_convention": "llama"},
     "norm_convention must be one of 'torch', 'hf', 'vllm', 'flashinfer', got 'llama'"),
]


def _call(args, fused):
    kw = {k: args[k] for k in ("out", "block_scale", "normed_out")}
    if fused:
        torch.ops.fp8norm.fused_add_rmsnorm_fp8_block_quant.out(args["input"], args["residual"], args["weight"],
                                                                args["eps"], False, args["norm_convention"], **kw)
    else:
        torch.ops.fp8norm.rmsnorm_fp8_block_quant.out(args["input"], args["weight"], args["eps"], False,
                                                      args["norm_convention"], **kw)


def _snapshot(args):
    return {k: int_view(v).clone() for k, v in args.items() if isinstance(v, torch.Tensor)}


def _as_meta(v):
    """v on the meta device with its shape and strides (fake kernels see no memory)."""
    if not isinstance(v, torch.Tensor):
        return v
    return torch.empty_strided(v.shape, v.stride(), dtype=v.dtype, device="meta")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name,make,pattern", BAD, ids=[b[0] for b in BAD])
def test_bad_call_raises_and_writes_nothing(device, name, make, pattern):
    args = make(_valid(device), device)
    fused_cases = [True] if "residual" in name else [True, False]
    for fused in fused_cases:
        before = _snapshot(args)
        with pytest.raises(RuntimeError, match=pattern):
            _call(args, fused)
        for k, v in before.items():
            assert torch.equal(int_view(args[k]), v), f"{k} was modified by a rejected call"


# The overlap rules need memory: only the real kernels check them.
FAKE_BAD = [b for b in BAD if "overlap" not in b[2] and "memory of its own" not in b[2]]


@pytest.mark.parametrize("name,make,pattern", FAKE_BAD, ids=[b[0] for b in FAKE_BAD])
def test_fake_kernels_raise_the_same_errors(name, make, pattern):
    a = {k: _as_meta(v) for k, v in make(_valid("cpu"), "cpu").items()}
    outputs_ok = not any(k in name for k in ("out", "block_scale", "normed_out"))
    for fused in [True] if "residual" in name else [True, False]:
        with pytest.raises(RuntimeError, match=pattern):
            _call(a, fused)
        if outputs_ok:  # the functional ops too
            with pytest.raises(RuntimeError, match=pattern):
                if fused:
                    torch.ops.fp8norm.fused_add_rmsnorm_fp8_block_quant(a["input"], a["residual"], a["weight"], a["eps"],
                                                                        False, a["norm_convention"])
                else:
                    torch.ops.fp8norm.rmsnorm_fp8_block_quant(a["input"], a["weight"], a["eps"], False,
                                                              a["norm_convention"])
    _call({k: _as_meta(v) for k, v in _valid("cpu").items()}, True)  # and accept the valid call


@pytest.mark.parametrize("device", DEVICES + ["meta"])
@pytest.mark.parametrize("fused", [True, False])
def test_none_for_a_tensor(device, fused):
    # torch hands None for a Tensor argument to the kernels as an undefined tensor: every kernel
    # (and the fake kernels, on meta) names the argument, and leaks no build path.
    a = _valid("cpu" if device == "meta" else device)
    if device == "meta":
        a = {k: _as_meta(v) for k, v in a.items()}
    before = {} if device == "meta" else _snapshot(a)
    names = ["input", "residual", "weight"] if fused else ["input", "weight"]
    op = torch.ops.fp8norm.fused_add_rmsnorm_fp8_block_quant if fused else torch.ops.fp8norm.rmsnorm_fp8_block_quant
    for name in names + ["out", "block_scale"]:
        args = {**a, name: None}
        ins = [args[n] for n in names]
        message = rf"^fp8norm.{'fused_add_' if fused else ''}rmsnorm_fp8_block_quant: {name} must be a Tensor, got None$"
        with pytest.raises(RuntimeError, match=message):
            op.out(*ins, args["eps"], out=args["out"], block_scale=args["block_scale"], normed_out=args["normed_out"])
        if name in names:
            with pytest.raises(RuntimeError, match=message):
                op(*ins, args["eps"])
    for k, v in before.items():
        assert torch.equal(int_view(a[k]), v), f"{k} was modified by a rejected call"


@pytest.mark.parametrize("device", DEVICES)
def test_bad_functional_calls(device):
    a = _valid(device)
    with pytest.raises(RuntimeError, match="positive multiple of 128"):
        torch.ops.fp8norm.rmsnorm_fp8_block_quant(a["input"][:, :64], a["weight"][:64])
    r = a["residual"].clone()
    with pytest.raises(RuntimeError, match="residual overlaps input"):
        torch.ops.fp8norm.fused_add_rmsnorm_fp8_block_quant(r, r, a["weight"])
    with pytest.raises(RuntimeError, match="weight must be on"):
        torch.ops.fp8norm.rmsnorm_fp8_block_quant(a["input"], a["weight"].to("meta"))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_mixed_devices_rejected():
    a = _valid("cuda")
    for k in ("residual", "weight", "out", "block_scale", "normed_out"):
        bad = {**a, k: a[k].cpu()}
        before = _snapshot(a)
        with pytest.raises(RuntimeError, match=f"{k} must be on cuda"):
            _call(bad, True)
        for kk, v in before.items():
            assert torch.equal(int_view(a[kk]), v)


@pytest.mark.parametrize("device", DEVICES)
def test_interleaved_views_of_one_buffer_are_accepted(device):
    # input and residual as the two halves of one [M, 2H] buffer: rows interleave, bytes do not.
    x, r, w = make_inputs(Case(device, BF, M, H))
    buf = torch.empty(M, 2 * H, dtype=BF, device=device)
    buf[:, :H], buf[:, H:] = x, r
    out, s, n = torch.ops.fp8norm.fused_add_rmsnorm_fp8_block_quant(buf[:, :H], buf[:, H:], w)
    r_ref = (x.float() + r.float()).to(BF)
    assert torch.equal(buf[:, H:], r_ref) and torch.equal(buf[:, :H], x)


@pytest.mark.parametrize("device", DEVICES)
def test_empty_rows(device):
    check_case(Case(device, BF, 0, 1152))
    check_case(Case(device, BF, 0, 1152, functional=True, fused=False))


# ---- The block-format ops (fp8norm.fused_add_rmsnorm_quant, fp8norm.rmsnorm_quant): their options and
# outputs. Valid call: MXFP4 with swizzled scales (or NVFP4 where the case names it), M = 4, H = 2880.
QH = 2880


def _qvalid(device, fmt="mxfp4", layout=None):
    x = _buf(device, M, QH)
    ks = QH // (16 if fmt == "nvfp4" else 32)
    shape = ((M + 127) // 128 * 128, (ks + 3) // 4 * 4) if layout != "row" else (M, ks)
    sdt = torch.float8_e4m3fn if fmt == "nvfp4" else torch.float8_e8m0fnu
    return dict(input=x, residual=_buf(device, M, QH), weight=_buf(device, QH), eps=1e-6, format=fmt,
                scale_layout=layout, scale_format=None, scale_mode=None,
                global_scale=torch.ones(1, device=device) if fmt == "nvfp4" else None, norm_convention=None,
                out=torch.zeros(M, QH // 2, dtype=torch.uint8, device=device).view(torch.float4_e2m1fn_x2),
                block_scale=torch.zeros(*shape, dtype=torch.uint8, device=device).view(sdt),
                normed_out=_buf(device, M, QH))


def _u8(d, *shape, dtype):
    return torch.zeros(*shape, dtype=torch.uint8, device=d).view(dtype)


E8, E2, E4 = torch.float8_e8m0fnu, torch.float4_e2m1fn_x2, torch.float8_e4m3fn
QBAD = [
    ("unknown format", lambda a, d: {**a, "format": "mxfp6"},
     "format must be one of 'fp8_1x128', 'mxfp8', 'mxfp4', 'nvfp4', got 'mxfp6'"),
    ("fp8 layout for mx", lambda a, d: {**a, "scale_layout": "deepgemm"},
     "scale_layout must be one of 'swizzled', 'row' for format 'mxfp4', got 'deepgemm'"),
    ("mx layout for fp8", lambda a, d: {**a, "format": "fp8_1x128", "scale_layout": "swizzled"},
     "scale_layout must be one of 'deepgemm', 'scaled_mm', 'row' for format 'fp8_1x128', got 'swizzled'"),
    ("scale_format for mx", lambda a, d: {**a, "scale_format": "ue8m0"},
     "scale_format applies to format 'fp8_1x128' only .format 'mxfp4' has its own scale dtype., got 'ue8m0'"),
    ("unknown scale_format", lambda a, d: {**a, "format": "fp8_1x128", "scale_format": "e8m0"},
     "scale_format must be one of 'fp32', 'ue8m0', 'ue8m0_packed', got 'e8m0'"),
    ("scale_mode for nvfp4", lambda a, d: {**_qvalid(d, "nvfp4"), "scale_mode": "floor"},
     "scale_mode applies to the MX formats only .'mxfp8', 'mxfp4'., got 'floor' with format 'nvfp4'"),
    ("unknown scale_mode", lambda a, d: {**a, "scale_mode": "ceil"}, "scale_mode must be one of 'rceil', 'floor', got 'ceil'"),
    ("nvfp4 without global_scale", lambda a, d: {**_qvalid(d, "nvfp4"), "global_scale": None},
     "format 'nvfp4' needs global_scale"),
    ("global_scale for mx", lambda a, d: {**a, "global_scale": torch.ones(1, device=d)},
     "global_scale applies to format 'nvfp4' only, got one with format 'mxfp4'"),
    ("global_scale dtype", lambda a, d: {**_qvalid(d, "nvfp4"), "global_scale": torch.ones(1, device=d, dtype=BF)},
     "global_scale must have dtype float32, got bfloat16"),
    ("global_scale two elements", lambda a, d: {**_qvalid(d, "nvfp4"), "global_scale": torch.ones(2, device=d)},
     r"global_scale must have one element .the per-tensor NVFP4 encode scale., got shape \[2\]"),
    ("H not a multiple of 32", lambda a, d: {**a, "input": a["input"][:, :80], "residual": a["residual"][:, :80],
                                             "weight": a["weight"][:80]},
     r"H \(input.size\(1\)\) must be a positive multiple of 32 \(format 'mxfp4'\), got 80"),
    ("H not a multiple of 16", lambda a, d: (lambda v: {**v, "input": v["input"][:, :40], "residual": v["residual"][:, :40],
                                                         "weight": v["weight"][:40]})(_qvalid(d, "nvfp4")),
     r"must be a positive multiple of 16 \(format 'nvfp4'\), got 40"),
    ("fp4 out dtype", lambda a, d: {**a, "out": _u8(d, M, QH // 2, dtype=E4)},
     "out must have dtype float4_e2m1fn_x2, got float8_e4m3fn"),
    ("fp4 out shape", lambda a, d: {**a, "out": _u8(d, M, QH, dtype=E2)},
     r"out must have shape \[M, H/2\] = \[4, 1440\], got \[4, 2880\]"),
    ("mxfp8 out dtype", lambda a, d: {**a, "format": "mxfp8", "block_scale": a["block_scale"]},
     "out must have dtype float8_e4m3fn, got float4_e2m1fn_x2"),
    ("mx block_scale dtype", lambda a, d: {**a, "block_scale": _u8(d, 128, 92, dtype=E4)},
     r"block_scale must have dtype float8_e8m0fnu \(format 'mxfp4'\), got float8_e4m3fn"),
    ("nvfp4 block_scale dtype", lambda a, d: {**_qvalid(d, "nvfp4"), "block_scale": _u8(d, 128, 180, dtype=E8)},
     r"block_scale must have dtype float8_e4m3fn \(format 'nvfp4'\), got float8_e8m0fnu"),
    ("swizzled block_scale shape", lambda a, d: {**a, "block_scale": _u8(d, M, 90, dtype=E8)},
     r"block_scale must have shape \[round_up\(M, 128\), round_up\(H/32, 4\)\] = \[128, 92\] \(scale_layout 'swizzled'\), "
     r"got \[4, 90\]"),
    ("swizzled block_scale strided", lambda a, d: {**a, "block_scale": _u8(d, 128, 184, dtype=E8)[:, ::2]},
     r"block_scale must be contiguous \(scale_layout 'swizzled'\), got strides \[184, 2\]"),
    ("row block_scale shape", lambda a, d: {**_qvalid(d, "mxfp4", "row"), "block_scale": _u8(d, 128, 92, dtype=E8)},
     r"block_scale must have shape \[M, H/32\] \(scale_layout 'row'\) = \[4, 90\], got \[128, 92\]"),
    ("row block_scale last dim strided", lambda a, d: {**_qvalid(d, "mxfp4", "row"), "block_scale": _u8(d, M, 180, dtype=E8)[:, ::2]},
     "block_scale must have a contiguous last dimension"),
    ("packed fp8 block_scale as float32", lambda a, d: {**a, "format": "fp8_1x128", "scale_format": "ue8m0_packed",
                                                        "input": a["input"][:, :256], "residual": a["residual"][:, :256],
                                                        "weight": a["weight"][:256], "normed_out": a["normed_out"][:, :256],
                                                        "out": _u8(d, M, 256, dtype=E4),
                                                        "block_scale": torch.zeros(M, 1, device=d)},
     r"block_scale must have dtype int32 \(packed UE8M0 exponents\) with scale_format 'ue8m0_packed', got float32"),
    ("fp32 fp8 block_scale as int32", lambda a, d: {**a, "format": "fp8_1x128", "scale_format": "fp32",
                                                    "input": a["input"][:, :256], "residual": a["residual"][:, :256],
                                                    "weight": a["weight"][:256], "normed_out": a["normed_out"][:, :256],
                                                    "out": _u8(d, M, 256, dtype=E4),
                                                    "block_scale": torch.zeros(M, 1, device=d, dtype=torch.int32)},
     r"block_scale must have dtype float32 with scale_format 'fp32', got int32"),
    ("global_scale inside out", lambda a, d: (lambda v: {**v, "global_scale": v["out"].view(torch.uint8)[0, :4].view(torch.float32)})(_qvalid(d, "nvfp4")),
     "out overlaps global_scale"),
]


def _qcall(a, fused, functional=False):
    opts = (a["eps"], a["format"], a["scale_layout"], a["scale_format"], a["scale_mode"], a["global_scale"],
            a["norm_convention"])
    op = torch.ops.fp8norm.fused_add_rmsnorm_quant if fused else torch.ops.fp8norm.rmsnorm_quant
    ins = (a["input"], a["residual"], a["weight"]) if fused else (a["input"], a["weight"])
    if functional:
        return op(*ins, *opts)
    op.out(*ins, *opts, out=a["out"], block_scale=a["block_scale"], normed_out=a["normed_out"])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name,make,pattern", QBAD, ids=[b[0] for b in QBAD])
def test_block_format_bad_call_raises_and_writes_nothing(device, name, make, pattern):
    if device == "cuda":
        pytest.skip("the MX and NV formats have no CUDA kernel yet")
    args = make(_qvalid(device), device)
    for fused in (True, False):
        before = _snapshot(args)
        with pytest.raises(RuntimeError, match=pattern):
            _qcall(args, fused)
        for k, v in before.items():
            assert torch.equal(int_view(args[k]), v), f"{k} was modified by a rejected call"


@pytest.mark.parametrize("name,make,pattern", [b for b in QBAD if "overlaps" not in b[2]],
                         ids=[b[0] for b in QBAD if "overlaps" not in b[2]])
def test_block_format_fake_kernels_raise_the_same_errors(name, make, pattern):
    a = {k: _as_meta(v) for k, v in make(_qvalid("cpu"), "cpu").items()}
    outputs_ok = not any(k in name for k in ("out", "block_scale"))
    for fused in (True, False):
        with pytest.raises(RuntimeError, match=pattern):
            _qcall(a, fused)
        if outputs_ok:
            with pytest.raises(RuntimeError, match=pattern):
                _qcall(a, fused, functional=True)
    for fmt in ("mxfp4", "nvfp4"):  # and accept the valid calls
        _qcall({k: _as_meta(v) for k, v in _qvalid("cpu", fmt).items()}, True)


@pytest.mark.parametrize("device", DEVICES + ["meta"])
def test_block_format_none_for_a_tensor(device):
    if device == "cuda":
        pytest.skip("the MX and NV formats have no CUDA kernel yet")
    a = _qvalid("cpu" if device == "meta" else device, "nvfp4")
    if device == "meta":
        a = {k: _as_meta(v) for k, v in a.items()}
    for fused in (True, False):
        op = "fused_add_rmsnorm_quant" if fused else "rmsnorm_quant"
        for name in (["input", "residual", "weight"] if fused else ["input", "weight"]) + ["out", "block_scale"]:
            with pytest.raises(RuntimeError, match=rf"^fp8norm.{op}: {name} must be a Tensor, got None$"):
                _qcall({**a, name: None}, fused)
