"""torch_fp8norm: fused residual-add + RMSNorm + FP8 1x128 block quantization, as PyTorch custom ops.

Importing this package loads the compiled library, which registers the ops under
``torch.ops.fp8norm`` (CPU, CUDA when built with it, and Meta for torch.compile / fake tensors).
The ops are for inference: they have no backward, and refuse a call that autograd would record.
"""
import torch  # noqa: F401  (the compiled library links against torch)

from . import _C  # noqa: F401  (registers torch.ops.fp8norm.*)
from . import reference, testing
from .module import FusedAddRMSNormFP8
from .ops import (
    BlockQuantized,
    block_scale_columns,
    block_scale_strides,
    fused_add_rmsnorm_fp8_block_quant,
    has_cuda_kernels,
    rmsnorm_fp8_block_quant,
)

__all__ = [
    "BlockQuantized",
    "FusedAddRMSNormFP8",
    "block_scale_columns",
    "block_scale_strides",
    "disable_fusion",
    "enable_fusion",
    "fused_add_rmsnorm_fp8_block_quant",
    "has_cuda_kernels",
    "reference",
    "rmsnorm_fp8_block_quant",
    "testing",
]
__version__ = "0.2.0"


def enable_fusion() -> None:
    """Rewrite residual add + RMSNorm + 1x128 FP8 quantization into these ops in graphs that
    torch.compile (Inductor) compiles from now on. See :mod:`torch_fp8norm.fusion`."""
    from .fusion import enable_fusion as enable  # imports Inductor: only when asked for

    enable()


def disable_fusion() -> None:
    """Undo :func:`enable_fusion` for graphs compiled from now on."""
    from .fusion import disable_fusion as disable

    disable()
