"""Loads the compiled libraries: _C (every schema, the CPU kernels) always; _C_cu<CUDA major>, the
CUDA kernels, where torch is built for that CUDA major version. It links that version's CUDA
runtime, so beside a torch of another (a CUDA 12 build, say) it is not loaded (one process, one
CUDA runtime): the ops' CUDA kernels then refuse every call with the reason, and the CPU kernels
work as everywhere."""
import importlib
import os
import pkgutil
import re
from typing import Optional

import torch

from . import _C  # noqa: F401  (registers torch.ops.fp8norm.* and the CPU kernels)

OPS = ("fused_add_rmsnorm_fp8_block_quant", "fused_add_rmsnorm_fp8_block_quant.out",
       "rmsnorm_fp8_block_quant", "rmsnorm_fp8_block_quant.out",
       "fused_add_rmsnorm_quant", "fused_add_rmsnorm_quant.out", "rmsnorm_quant", "rmsnorm_quant.out")
_CUDA_MODULE: Optional[str] = None  # the CUDA library loaded, if any
_REFUSALS: Optional[torch.library.Library] = None  # the CUDA kernels that refuse, where it is not


def has_cuda_kernels() -> bool:
    """Whether this process runs the fp8norm ops on CUDA: torch is built for CUDA, and this build of
    torch_fp8norm has CUDA kernels for that CUDA major version."""
    return _CUDA_MODULE is not None


def _refuse_cuda(reason: str) -> torch.library.Library:
    """CUDA kernels of the ops that raise RuntimeError(reason): a CUDA tensor gets the reason, not
    torch's 'no kernel for the CUDA backend'."""
    lib = torch.library.Library("fp8norm", "IMPL")
    for name in OPS:
        op = "fp8norm." + name.split(".")[0]

        def refuse(*args, _op=op, **kwargs):
            raise RuntimeError(f"{_op}: {reason}")

        lib.impl(name, refuse, "CUDA")
    return lib


def _load(package: str, folder: str) -> None:
    global _CUDA_MODULE, _REFUSALS
    if torch.version.cuda is None:  # a CPU build of torch: no CUDA tensors
        return
    major = torch.version.cuda.split(".")[0]
    names = [m.name for m in pkgutil.iter_modules([folder])]
    built = sorted(n[len("_C_cu"):] for n in names if re.fullmatch(r"_C_cu\d+", n))  # CUDA majors
    if major in built:
        importlib.import_module(f"{package}._C_cu{major}")
        _CUDA_MODULE = f"_C_cu{major}"
        return
    if built:
        reason = (f"torch_fp8norm's CUDA kernels are built for CUDA {' and '.join(built)} builds of torch, but this "
                  f"torch {torch.__version__} is built for CUDA {torch.version.cuda}, so only its CPU kernels are "
                  f"loaded: install a torch built for CUDA {built[-1]}, or build torch_fp8norm from source against "
                  "this torch (README, Install)")
    else:
        reason = ("this build of torch_fp8norm has no CUDA kernels (it was built without nvcc, or with "
                  "FP8NORM_CPU_ONLY=1), so only its CPU kernels run: build it with the CUDA toolkit of this torch "
                  "(README, Install)")
    _REFUSALS = _refuse_cuda(reason)


_load(__package__, os.path.dirname(__file__))
