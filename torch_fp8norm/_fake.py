"""Fake kernels of the fp8norm ops, for torch.compile, FakeTensor and meta tensors.

They check the arguments and give the outputs' shapes, dtypes and strides, without memory. The
rules and messages are the C++ libraries' (``csrc/common/args.cpp``: check_inputs, check_outputs),
stated here on possibly symbolic shapes: ``tests/test_errors.py`` holds both to the same messages.
The overlap rules need memory: the real kernels check them.
"""
import torch

from .reference import NORM_CONVENTIONS

BLOCK = 128
_ACTIVATIONS = (torch.float32, torch.float16, torch.bfloat16)
FUSED_OP = "fp8norm.fused_add_rmsnorm_fp8_block_quant"  # the ops as their errors name them
PLAIN_OP = "fp8norm.rmsnorm_fp8_block_quant"


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


def _rows(op, what, t, input, dtype):
    """[M, H] of input's shape and device, `dtype`, last dim contiguous (args.cpp: check_rows)."""
    _placed(op, what, t, input, 2, "[M, H]")
    if t.dtype != dtype:
        _fail(op, f"{what} must have dtype {_name(dtype)}, got {_name(t.dtype)}")
    torch._check(t.shape[0] == input.shape[0] and t.shape[1] == input.shape[1],
                 lambda: f"{op}: {what} must have the shape of input {_list(input.shape)}, got {_list(t.shape)}")
    torch._check(t.stride(1) == 1, lambda: f"{op}: {what} must have a contiguous last dimension (stride 1), "
                                           f"got strides {_list(t.stride())}")


def check_convention(op, norm_convention):
    if norm_convention is not None and norm_convention not in NORM_CONVENTIONS:
        _fail(op, "norm_convention must be one of 'torch', 'hf', 'vllm', 'flashinfer', got "
                  f"'{norm_convention}'")


def check_inputs(op, input, residual, weight, eps, norm_convention=None):
    check_convention(op, norm_convention)
    if input.dim() != 2:
        _fail(op, f"input must be 2-D [M, H], got {input.dim()}-D")
    if input.dtype not in _ACTIVATIONS:
        _fail(op, f"input must be float16, bfloat16 or float32, got {_name(input.dtype)}")
    h = input.shape[1]
    torch._check(h > 0 and h % BLOCK == 0,
                 lambda: f"{op}: the hidden size H (input.size(1)) must be a positive multiple of 128, got {h}")
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


def check_outputs(op, input, scale_ue8m0, out, block_scale, normed_out):
    _rows(op, "out", out, input, torch.float8_e4m3fn)
    if normed_out is not None:
        _rows(op, "normed_out", normed_out, input, input.dtype)
    _placed(op, "block_scale", block_scale, input, 2, "[M, H/128]")
    packed = block_scale.dtype == torch.int32
    if not (block_scale.dtype == torch.float32 or (packed and scale_ue8m0)):
        _fail(op, "block_scale must have dtype float32, or int32 (packed UE8M0 exponents) with scale_ue8m0=True, "
                  f"got {_name(block_scale.dtype)}{'' if scale_ue8m0 else ' (scale_ue8m0=False)'}")
    m, h = input.shape
    cols = (h // BLOCK + 3) // 4 if packed else h // BLOCK
    torch._check(block_scale.shape[0] == m and block_scale.shape[1] == cols,
                 lambda: f"{op}: block_scale must have shape [M, {'ceil(H/512)' if packed else 'H/128'}] = "
                         f"[{m}, {cols}], got {_list(block_scale.shape)}")


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
