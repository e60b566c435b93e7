"""torch_fp8norm: fused residual-add + RMSNorm + block quantization (FP8 1x128, MXFP8, MXFP4, NVFP4), as
PyTorch custom ops.

Importing this package loads the compiled libraries, which register the ops under
``torch.ops.fp8norm``: the CPU library always, the CUDA library where torch is built for its CUDA
major version (elsewhere the ops refuse CUDA tensors with the reason), and the fake kernels for
torch.compile / fake tensors. The ops are for inference: they have no backward. The
Python functions and the module refuse a call that autograd would record; the raw ops do not
(see the README, "Autograd").
"""
import torch

_TORCH_MIN = "2.10"  # the stable ABI the libraries are built for (setup.py)
if tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]) < tuple(map(int, _TORCH_MIN.split("."))):
    raise ImportError(f"torch_fp8norm needs torch >= {_TORCH_MIN}, but this is torch {torch.__version__}: "
                      f"pip install 'torch>={_TORCH_MIN}'")

from ._libraries import has_cuda_kernels  # noqa: E402  (loads the libraries: the ops and their kernels)
from . import _fake, reference, testing  # noqa: E402, F401
from .module import FusedAddRMSNormFP8
from .ops import (
    BlockQuantized,
    block_scale_columns,
    block_scale_strides,
    fused_add_rmsnorm_fp8_block_quant,
    fused_add_rmsnorm_quant,
    rmsnorm_fp8_block_quant,
    rmsnorm_quant,
)

__all__ = [
    "BlockQuantized",
    "FusedAddRMSNormFP8",
    "block_scale_columns",
    "block_scale_strides",
    "disable_fusion",
    "enable_fusion",
    "fused_add_rmsnorm_fp8_block_quant",
    "fused_add_rmsnorm_quant",
    "has_cuda_kernels",
    "reference",
    "rmsnorm_fp8_block_quant",
    "rmsnorm_quant",
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
