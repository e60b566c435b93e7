"""Build torch_fp8norm: a CUDA extension when torch has CUDA and nvcc is found, else CPU only.

No GPU is needed at build time. Environment:
  TORCH_CUDA_ARCH_LIST  GPU targets, as for any torch extension (default here: "9.0a"). Unless
                        it already names a +PTX target, "8.0+PTX" is added (sm_80 code and
                        compute_80 PTX), so the library loads on any GPU of compute capability
                        >= 8.0.
  FP8NORM_CPU_ONLY=1    build without CUDA even when it is available.
  CUDA_HOME             the CUDA toolkit; when unset, the folder nvcc itself reports is used.
"""
import glob
import os
import re
import shutil
import subprocess

from setuptools import find_packages, setup


def _nvcc_toolkit():
    """The toolkit folder of the nvcc on PATH, even when that nvcc is a wrapper script."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        return None
    try:
        dry = subprocess.run(
            [nvcc, "--dryrun", "-x", "cu", "-c", os.devnull, "-o", os.devnull],
            capture_output=True, text=True).stderr
    except OSError:
        return None
    for line in dry.splitlines():
        if line.startswith("#$ TOP="):
            return os.path.normpath(line.split("=", 1)[1].strip())  # <toolkit>/bin/..
    return None


if "CUDA_HOME" not in os.environ and "CUDA_PATH" not in os.environ:
    _home = _nvcc_toolkit()
    if _home:
        os.environ["CUDA_HOME"] = _home
# sm_90a for H100/H200 unless told otherwise; always a portable target (sm_80 code + compute_80
# PTX) so that the library loads on any GPU of compute capability >= 8.0.
_arch = os.environ.get("TORCH_CUDA_ARCH_LIST", "9.0a")
if "+PTX" not in _arch:
    _arch += ";8.0+PTX"
os.environ["TORCH_CUDA_ARCH_LIST"] = _arch

import torch  # noqa: E402
from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CppExtension, CUDAExtension  # noqa: E402

here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "torch_fp8norm", "__init__.py")) as f:
    version = re.search(r'^__version__ = "([^"]+)"', f.read(), re.M).group(1)
use_cuda = (
    os.environ.get("FP8NORM_CPU_ONLY", "0") != "1"
    and torch.version.cuda is not None
    and CUDA_HOME is not None
    and os.path.exists(os.path.join(CUDA_HOME, "bin", "nvcc"))
)

# csrc/cuda/*.cpp is the launch policy, pure C++: in every build (its tests run on CPU).
sources = sorted(glob.glob(os.path.join("csrc", "*.cpp")) + glob.glob(os.path.join("csrc", "common", "*.cpp"))
                 + glob.glob(os.path.join("csrc", "cpu", "*.cpp")) + glob.glob(os.path.join("csrc", "cuda", "*.cpp")))
# -fopenmp: at::parallel_for is inline; without it the CPU kernel runs on one thread.
# -fno-trapping-math: lets GCC compute both sides of a select (the CPU kernel's branch-free fp8
# conversion) and vectorize; it changes no result (no reassociation, no fast-math).
# -ffp-contract=off: no a * b + c fused into one FMA (GCC's default for C++ allows it), which
# would change results in the CPU kernel's AVX2 / AVX-512 builds (csrc/cpu).
extra = {"cxx": ["-O3", "-fopenmp", "-fno-trapping-math", "-ffp-contract=off"]}
ext_cls = CppExtension
if use_cuda:
    print(f"torch_fp8norm: building the CUDA kernels too (nvcc in {CUDA_HOME}, TORCH_CUDA_ARCH_LIST={_arch}): "
          "this takes minutes; FP8NORM_CPU_ONLY=1 builds the CPU kernels only", flush=True)
    ext_cls = CUDAExtension
    sources += sorted(glob.glob(os.path.join("csrc", "cuda", "*.cu")))
    # No fast-math: the contract fixes results bit for bit (correctly rounded division).
    extra["nvcc"] = ["-O3", "-lineinfo"]

setup(
    name="torch_fp8norm",
    version=version,
    description="Fused residual-add + RMSNorm + FP8 1x128 block quantization as PyTorch custom ops",
    license="Apache-2.0",
    packages=find_packages(include=["torch_fp8norm", "torch_fp8norm.*"]),
    ext_modules=[ext_cls("torch_fp8norm._C", sources, extra_compile_args=extra, extra_link_args=["-fopenmp"],
                         py_limited_api=True)],
    cmdclass={"build_ext": BuildExtension},
    options={"bdist_wheel": {"py_limited_api": "cp39"}},
    python_requires=">=3.9",
    install_requires=["torch"],
)
