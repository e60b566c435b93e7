"""Build torch_fp8norm: a CUDA extension when torch has CUDA and nvcc is found, else CPU only.

No GPU is needed at build time. Environment:
  TORCH_CUDA_ARCH_LIST  GPU targets, as for any torch extension. Default (DEFAULT_ARCHS): a cubin
                        for each current architecture and the PTX of the newest, so the library
                        runs on every NVIDIA GPU from compute capability 8.0. A shorter list builds
                        faster, e.g. "9.0" for H100 / H200 alone.
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
# Cubins for sm_80 (A100; they also run on sm_86 / sm_89: A10, L4, L40S, RTX 30 / 40), sm_90
# (H100, H200), sm_100 (B200, GB200; also B300's sm_103) and sm_120 (RTX 50, RTX PRO 6000), and
# compute_120 PTX for later GPUs. No arch-specific ("a") target: the kernels use no instruction
# that needs one (docs/design.md). The sm_90 features (clusters, PDL, L2 hints) are compiled into
# the sm_90+ images only; the launch policy asks the loaded image, not the GPU (csrc/cuda/ops.cu).
DEFAULT_ARCHS = "8.0;9.0;10.0;12.0+PTX"
_arch = os.environ.setdefault("TORCH_CUDA_ARCH_LIST", DEFAULT_ARCHS)

import torch  # noqa: E402
from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CppExtension, CUDAExtension  # noqa: E402

_torch_release = torch.__version__.split("+")[0]  # "2.14.1" of "2.14.1+cu130"
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
    # --compress-mode=size: the smallest fatbin (each image is decompressed once, when loaded).
    extra["nvcc"] = ["-O3", "-lineinfo", "--compress-mode=size"]

setup(
    name="torch_fp8norm",
    version=version,
    description="Fused residual-add + RMSNorm + FP8 1x128 block quantization as PyTorch custom ops",
    license="Apache-2.0",
    packages=find_packages(include=["torch_fp8norm", "torch_fp8norm.*"]),
    ext_modules=[ext_cls("torch_fp8norm._C", sources, extra_compile_args=extra, extra_link_args=["-fopenmp"],
                         py_limited_api=True)],
    cmdclass={"build_ext": BuildExtension},
    # Python's limited API of 3.10 (torch's BuildExtension compiles for it): one wheel for 3.10+.
    options={"bdist_wheel": {"py_limited_api": "cp310"}},
    python_requires=">=3.10",
    # The library links against this torch's C++ ABI: it loads with this release only.
    install_requires=[f"torch=={_torch_release}"],
)
