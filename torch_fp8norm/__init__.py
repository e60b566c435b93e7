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
    block_scale_strides,
    fused_add_rmsnorm_fp8_block_quant,
    has_cuda_kernels,
    rmsnorm_fp8_block_quant,
)

__all__ = [
    "BlockQuantized",
    "FusedAddRMSNormFP8",
    "block_scale_strides",
    "fused_add_rmsnorm_fp8_block_quant",
    "has_cuda_kernels",
    "reference",
    "rmsnorm_fp8_block_quant",
    "testing",
]
__version__ = "0.2.0"
