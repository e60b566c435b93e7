"""Fake kernels of the fp8norm ops, for torch.compile, FakeTensor and meta tensors.

They check the arguments and give the outputs' shapes, dtypes and strides, without memory. The
rules and messages are the C++ libraries' (``csrc/common/args.cpp``: check_inputs, check_outputs),
stated here on possibly symbolic shapes: ``tests/test_errors.py`` holds both to the same messages.
The overlap rules need memory: the real kernels check them.
"""
import torch

from .reference import FORMAT_BLOCK, NORM_CONVENTIONS

BLOCK = 128
_ACTIVATIONS = (torch.float32, torch.float16, torch.bfloat16)
FUSED_OP = "fp8norm.fused_add_rmsnorm_fp8_block_quant"  # the ops as their errors name them
PLAIN_OP = "fp8norm.rmsnorm_fp8_block_quant"
FUSED_QUANT_OP = "fp8norm.fused_add_rmsnorm_quant"
PLAIN_QUANT_OP = "fp8norm.rmsnorm_quant"


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _list(values) -> str:
    return "[" + ", ".join(str(v) for v in values) + "]"


def _fail(op: str, message: str):
    raise RuntimeError(f"{op}: {message}")


def _defined(op, **tensors):
    """torch passes None for a Tensor argument (as an undefined tensor to the C++ kernels, which
    refuse it with this message)."""
    for what, t in tensors.items():
        if t is None:
            _fail(op, f"{what} must be a Tensor, got None")


def _placed(op, what, t, input, rank, shape):
    """`rank`-D, on input's device."""
    if t.dim() != rank:
        _fail(op, f"{what} must be {rank}-D {shape}, got {t.dim()}-D")
    if t.device != input.device:
        _fail(op, f"{what} must be on {input.device} like input, got {t.device}")


def _rows(op, what, t, input, dtype, cols=None, shape=None):
    """[M, H] of input's shape (or [M, cols], named `shape`) and device, `dtype`, last dim contiguous
    (args.cpp: check_rows)."""
    _placed(op, what, t, input, 2, shape or "[M, H]")
    if t.dtype != dtype:
        _fail(op, f"{what} must have dtype {_name(dtype)}, got {_name(t.dtype)}")
    if cols is None:
        torch._check(t.shape[0] == input.shape[0] and t.shape[1] == input.shape[1],
                     lambda: f"{op}: {what} must have the shape of input {_list(input.shape)}, got {_list(t.shape)}")
    else:
        torch._check(t.shape[0] == input.shape[0] and t.shape[1] == cols,
                     lambda: f"{op}: {what} must have shape {shape} = [{input.shape[0]}, {cols}], got {_list(t.shape)}")
    torch._check(t.stride(1) == 1, lambda: f"{op}: {what} must have a contiguous last dimension (stride 1), "
                                           f"got strides {_list(t.stride())}")


def check_convention(op, norm_convention):
    if norm_convention is not None and norm_convention not in NORM_CONVENTIONS:
        _fail(op, "norm_convention must be one of 'torch', 'hf', 'vllm', 'flashinfer', got "
                  f"'{norm_convention}'")


def check_inputs(op, input, residual, weight, eps, norm_convention=None, format="fp8_1x128"):
    check_convention(op, norm_convention)
    if input.dim() != 2:
        _fail(op, f"input must be 2-D [M, H], got {input.dim()}-D")
    if input.dtype not in _ACTIVATIONS:
        _fail(op, f"input must be float16, bfloat16 or float32, got {_name(input.dtype)}")
    h = input.shape[1]
    block = FORMAT_BLOCK[format]
    which = "" if format == "fp8_1x128" else f" (format '{format}')"
    torch._check(h > 0 and h % block == 0,
                 lambda: f"{op}: the hidden size H (input.size(1)) must be a positive multiple of {block}{which}, "
                         f"got {h}")
    torch._check(input.stride(1) == 1, lambda: f"{op}: input must have a contiguous last dimension (stride 1), "
                                               f"got strides {_list(input.stride())}")
    if residual is not None:
        _rows(op, "residual", residual, input, input.dtype)
    _placed(op, "weight", weight, input, 1, "[H]")
    if weight.dtype not in (input.dtype, torch.float32):
        allowed = "float32 (input's)" if input.dtype == torch.float32 else f"{_name(input.dtype)} (input's) or float32"
        _fail(op, f"weight must have dtype {allowed}, got {_name(weight.dtype)}")
    torch._check(weight.shape[0] == h, lambda: f"{op}: weight must have H = {h} elements, got {weight.shape[0]}")
    torch._check(weight.stride(0) == 1, lambda: f"{op}: weight must be contiguous, got stride {weight.stride(0)}")
    if not (eps >= 0 and eps != float("inf")):  # NaN fails the first test
        _fail(op, f"eps must be finite and >= 0, got {eps:g}")


def check_outputs(op, input, scale_ue8m0, out, block_scale, normed_out, packed=None):
    """packed: None (the fp8 ops: int32 allowed with scale_ue8m0), 1 (int32) or 0 (float32)."""
    _rows(op, "out", out, input, torch.float8_e4m3fn)
    if normed_out is not None:
        _rows(op, "normed_out", normed_out, input, input.dtype)
    _placed(op, "block_scale", block_scale, input, 2, "[M, H/128]")
    is_packed = block_scale.dtype == torch.int32
    if packed is None:
        if not (block_scale.dtype == torch.float32 or (is_packed and scale_ue8m0)):
            _fail(op, "block_scale must have dtype float32, or int32 (packed UE8M0 exponents) with scale_ue8m0=True, "
                      f"got {_name(block_scale.dtype)}{'' if scale_ue8m0 else ' (scale_ue8m0=False)'}")
    elif is_packed != bool(packed) or not (is_packed or block_scale.dtype == torch.float32):
        fmt = "ue8m0_packed" if packed else "ue8m0" if scale_ue8m0 else "fp32"
        _fail(op, f"block_scale must have dtype {'int32 (packed UE8M0 exponents)' if packed else 'float32'} "
                  f"with scale_format '{fmt}', got {_name(block_scale.dtype)}")
    m, h = input.shape
    cols = (h // BLOCK + 3) // 4 if is_packed else h // BLOCK
    torch._check(block_scale.shape[0] == m and block_scale.shape[1] == cols,
                 lambda: f"{op}: block_scale must have shape [M, {'ceil(H/512)' if is_packed else 'H/128'}] = "
                         f"[{m}, {cols}], got {_list(block_scale.shape)}")


class Quant:
    """A call's format options, parsed (args.cpp: parse_quant): format, layout, packed (1 packed
    int32 words, 0 float32, None: the fp8 ops' rule), ue8m0, and the global scale."""

    def __init__(self, format="fp8_1x128", layout="deepgemm", packed=None, ue8m0=False, global_scale=None):
        self.format, self.layout, self.packed, self.ue8m0 = format, layout, packed, ue8m0
        self.global_scale = global_scale


def parse_quant(op, format, scale_layout, scale_format, scale_mode, global_scale) -> Quant:
    if format not in FORMAT_BLOCK:
        _fail(op, f"format must be one of 'fp8_1x128', 'mxfp8', 'mxfp4', 'nvfp4', got '{format}'")
    fp8, mx = format == "fp8_1x128", format in ("mxfp8", "mxfp4")
    q = Quant(format, "deepgemm" if fp8 else "swizzled", 0 if fp8 else None, False, global_scale)
    if scale_layout is not None:
        allowed = ("deepgemm", "scaled_mm", "row") if fp8 else ("swizzled", "row")
        if scale_layout not in allowed:
            _fail(op, f"scale_layout must be one of {', '.join(repr(a) for a in allowed)} for format '{format}', "
                      f"got '{scale_layout}'")
        q.layout = scale_layout
    if scale_format is not None:
        if not fp8:
            _fail(op, f"scale_format applies to format 'fp8_1x128' only (format '{format}' has its own scale dtype), "
                      f"got '{scale_format}'")
        if scale_format not in ("fp32", "ue8m0", "ue8m0_packed"):
            _fail(op, f"scale_format must be one of 'fp32', 'ue8m0', 'ue8m0_packed', got '{scale_format}'")
        q.ue8m0, q.packed = scale_format != "fp32", int(scale_format == "ue8m0_packed")
    if scale_mode is not None:
        if not mx:
            _fail(op, f"scale_mode applies to the MX formats only ('mxfp8', 'mxfp4'), got '{scale_mode}' with "
                      f"format '{format}'")
        if scale_mode not in ("rceil", "floor"):
            _fail(op, f"scale_mode must be one of 'rceil', 'floor', got '{scale_mode}'")
    if format == "nvfp4" and global_scale is None:
        _fail(op, "format 'nvfp4' needs global_scale (a float32 tensor of one element: the encode scale "
                  "448 * 6 / amax of the tensor)")
    if format != "nvfp4" and global_scale is not None:
        _fail(op, f"global_scale applies to format 'nvfp4' only, got one with format '{format}'")
    return q


def check_global_scale(op, input, g):
    if g.dtype != torch.float32:
        _fail(op, f"global_scale must have dtype float32, got {_name(g.dtype)}")
    if g.device != input.device:
        _fail(op, f"global_scale must be on {input.device} like input (the kernels read it there), got {g.device}")
    torch._check(g.numel() == 1, lambda: f"{op}: global_scale must have one element (the per-tensor NVFP4 encode "
                                         f"scale), got shape {_list(g.shape)}")


def check_quant_outputs(op, input, q: Quant, out, block_scale, normed_out):
    """check_outputs for every format (args.cpp: check_outputs)."""
    if q.format == "fp8_1x128":
        return check_outputs(op, input, q.ue8m0, out, block_scale, normed_out, q.packed)
    m, h = input.shape
    if q.format in ("mxfp4", "nvfp4"):
        _rows(op, "out", out, input, torch.float4_e2m1fn_x2, h // 2, "[M, H/2]")
    else:
        _rows(op, "out", out, input, torch.float8_e4m3fn)
    if normed_out is not None:
        _rows(op, "normed_out", normed_out, input, input.dtype)
    dtype = torch.float8_e4m3fn if q.format == "nvfp4" else torch.float8_e8m0fnu
    block = FORMAT_BLOCK[q.format]
    ks = h // block
    if block_scale.device != input.device:
        _fail(op, f"block_scale must be on {input.device} like input, got {block_scale.device}")
    if block_scale.dtype != dtype:
        _fail(op, f"block_scale must have dtype {_name(dtype)} (format '{q.format}'), got {_name(block_scale.dtype)}")
    if q.layout == "row":
        return _rows(op, "block_scale", block_scale, input, dtype, ks, f"[M, H/{block}] (scale_layout 'row')")
    mp, kp = (m + 127) // 128 * 128, (ks + 3) // 4 * 4
    torch._check(block_scale.dim() == 2 and block_scale.shape[0] == mp and block_scale.shape[1] == kp,
                 lambda: f"{op}: block_scale must have shape [round_up(M, 128), round_up(H/{block}, 4)] = [{mp}, {kp}] "
                         f"(scale_layout 'swizzled'), got {_list(block_scale.shape)}")
    torch._check(block_scale.numel() == 0 or (block_scale.stride(0) == kp and block_scale.stride(1) == 1),
                 lambda: f"{op}: block_scale must be contiguous (scale_layout 'swizzled'), got strides "
                         f"{_list(block_scale.stride())}")


def _quant_outputs(input, q: Quant):
    """The block-format ops' functional outputs (args.cpp: allocate_outputs)."""
    m, h = input.shape
    normed = input.new_empty((m, h))
    if q.format == "fp8_1x128":
        cols = (h // BLOCK + 3) // 4 if q.packed else h // BLOCK
        strides = {"row": (cols, 1), "scaled_mm": (1, max(m, 1))}.get(q.layout, (1, (m + 3) // 4 * 4))
        scale = input.new_empty_strided((m, cols), strides, dtype=torch.int32 if q.packed else torch.float32)
        return input.new_empty((m, h), dtype=torch.float8_e4m3fn), scale, normed
    fp4 = q.format in ("mxfp4", "nvfp4")
    out = input.new_empty((m, h // 2 if fp4 else h), dtype=torch.float4_e2m1fn_x2 if fp4 else torch.float8_e4m3fn)
    ks = h // FORMAT_BLOCK[q.format]
    rows, cols = ((m + 127) // 128 * 128, (ks + 3) // 4 * 4) if q.layout == "swizzled" else (m, ks)
    dtype = torch.float8_e4m3fn if q.format == "nvfp4" else torch.float8_e8m0fnu
    return out, input.new_empty((rows, cols), dtype=dtype), normed


def _outputs(input):
    """The functional ops' outputs (args.cpp: allocate_outputs)."""
    m, h = input.shape
    out = input.new_empty((m, h), dtype=torch.float8_e4m3fn)
    block_scale = input.new_empty_strided((m, h // BLOCK), (1, (m + 3) // 4 * 4), dtype=torch.float32)
    return out, block_scale, input.new_empty((m, h))


@torch.library.register_fake("fp8norm::fused_add_rmsnorm_fp8_block_quant")
def _fused(input, residual, weight, eps=1e-6, scale_ue8m0=False, norm_convention=None):
    _defined(FUSED_OP, input=input, residual=residual, weight=weight)
    check_inputs(FUSED_OP, input, residual, weight, eps, norm_convention)
    return _outputs(input)


@torch.library.register_fake("fp8norm::fused_add_rmsnorm_fp8_block_quant.out")
def _fused_out(input, residual, weight, eps=1e-6, scale_ue8m0=False, norm_convention=None, *, out, block_scale,
               normed_out=None):
    _defined(FUSED_OP, input=input, residual=residual, weight=weight, out=out, block_scale=block_scale)
    check_inputs(FUSED_OP, input, residual, weight, eps, norm_convention)
    check_outputs(FUSED_OP, input, scale_ue8m0, out, block_scale, normed_out)


@torch.library.register_fake("fp8norm::rmsnorm_fp8_block_quant")
def _plain(input, weight, eps=1e-6, scale_ue8m0=False, norm_convention=None):
    _defined(PLAIN_OP, input=input, weight=weight)
    check_inputs(PLAIN_OP, input, None, weight, eps, norm_convention)
    return _outputs(input)


@torch.library.register_fake("fp8norm::rmsnorm_fp8_block_quant.out")
def _plain_out(input, weight, eps=1e-6, scale_ue8m0=False, norm_convention=None, *, out, block_scale,
               normed_out=None):
    _defined(PLAIN_OP, input=input, weight=weight, out=out, block_scale=block_scale)
    check_inputs(PLAIN_OP, input, None, weight, eps, norm_convention)
    check_outputs(PLAIN_OP, input, scale_ue8m0, out, block_scale, normed_out)


def _quant_inputs(op, input, residual, weight, eps, format, scale_layout, scale_format, scale_mode, global_scale,
                  norm_convention, fused, **outs):
    q = parse_quant(op, format, scale_layout, scale_format, scale_mode, global_scale)
    ins = dict(input=input, residual=residual, weight=weight) if fused else dict(input=input, weight=weight)
    _defined(op, **ins, **outs)
    check_inputs(op, input, residual, weight, eps, norm_convention, format)
    if global_scale is not None:
        check_global_scale(op, input, global_scale)
    return q


@torch.library.register_fake("fp8norm::fused_add_rmsnorm_quant")
def _quant_fused(input, residual, weight, eps=1e-6, format="fp8_1x128", scale_layout=None, scale_format=None,
                 scale_mode=None, global_scale=None, norm_convention=None):
    q = _quant_inputs(FUSED_QUANT_OP, input, residual, weight, eps, format, scale_layout, scale_format, scale_mode,
                      global_scale, norm_convention, True)
    return _quant_outputs(input, q)


@torch.library.register_fake("fp8norm::fused_add_rmsnorm_quant.out")
def _quant_fused_out(input, residual, weight, eps=1e-6, format="fp8_1x128", scale_layout=None, scale_format=None,
                     scale_mode=None, global_scale=None, norm_convention=None, *, out, block_scale, normed_out=None):
    q = _quant_inputs(FUSED_QUANT_OP, input, residual, weight, eps, format, scale_layout, scale_format, scale_mode,
                      global_scale, norm_convention, True, out=out, block_scale=block_scale)
    check_quant_outputs(FUSED_QUANT_OP, input, q, out, block_scale, normed_out)


@torch.library.register_fake("fp8norm::rmsnorm_quant")
def _quant_plain(input, weight, eps=1e-6, format="fp8_1x128", scale_layout=None, scale_format=None, scale_mode=None,
                 global_scale=None, norm_convention=None):
    q = _quant_inputs(PLAIN_QUANT_OP, input, None, weight, eps, format, scale_layout, scale_format, scale_mode,
                      global_scale, norm_convention, False)
    return _quant_outputs(input, q)


@torch.library.register_fake("fp8norm::rmsnorm_quant.out")
def _quant_plain_out(input, weight, eps=1e-6, format="fp8_1x128", scale_layout=None, scale_format=None,
                     scale_mode=None, global_scale=None, norm_convention=None, *, out, block_scale, normed_out=None):
    q = _quant_inputs(PLAIN_QUANT_OP, input, None, weight, eps, format, scale_layout, scale_format, scale_mode,
                      global_scale, norm_convention, False, out=out, block_scale=block_scale)
    check_quant_outputs(PLAIN_QUANT_OP, input, q, out, block_scale, normed_out)
