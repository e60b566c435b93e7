"""Build torch_fp8norm: the CPU library (torch_fp8norm._C: every op, the CPU kernels) and, when torch
has CUDA and nvcc is found, the CUDA library (torch_fp8norm._C_cu<CUDA major>). Both use LibTorch's
stable ABI only: one build serves torch 2.10 and every later release (of that CUDA major version).

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

# LibTorch's stable ABI, targeting torch 2.10: the headers expose only what 2.10 has, so the
# libraries load on torch 2.10 and every later release (docs/design.md, "Layout").
TORCH_MIN = "2.10"
TARGET = ["-DTORCH_TARGET_VERSION=0x020A000000000000", "-DPy_LIMITED_API=0x030A0000"]

here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "torch_fp8norm", "__init__.py")) as f:
    version = re.search(r'^__version__ = "([^"]+)"', f.read(), re.M).group(1)
with open(os.path.join(here, "README.md"), encoding="utf-8") as f:
    long_description = f.read()
use_cuda = (
    os.environ.get("FP8NORM_CPU_ONLY", "0") != "1"
    and torch.version.cuda is not None
    and CUDA_HOME is not None
    and os.path.exists(os.path.join(CUDA_HOME, "bin", "nvcc"))
)


def sources(*patterns):
    return sorted(f for p in patterns for f in glob.glob(p))


# Compiled into both libraries: validation (csrc/common) and the launch policy, pure C++ (its
# golden tests run on CPU through the CPU library's _launch_plan); csrc/compat (below).
shared = sources("csrc/common/*.cpp", "csrc/cuda/*.cpp", "csrc/compat/*.cpp")
# manylinux_2_28, as torch's own wheels: glibc 2.28 and libstdc++ 3.4.24 suffice, whatever newer
# toolchain builds the libraries. csrc/compat/glibc_2_28.h, force-included into every translation
# unit (C++, and CUDA's host code), binds the few newer glibc symbols to old versions; compat.cpp
# defines what that needs; exports.map exports PyInit_* alone (the string streams compat.cpp
# instantiates, and every inline function of torch's and the C++ library's headers, stay local).
compat = os.path.join(here, "csrc", "compat")
force_include = ["-include", os.path.join(compat, "glibc_2_28.h")]
# libdl and libpthread, needed even where no symbol binds to them (on glibc 2.34+ they are empty
# stubs): older glibc keeps dlsym and pthread_once, at the versions glibc_2_28.h binds, in them.
link = [f"-Wl,--version-script={os.path.join(compat, 'exports.map')}",
        "-Wl,--push-state,--no-as-needed", "-l:libdl.so.2", "-l:libpthread.so.0", "-Wl,--pop-state"]
# -fvisibility=hidden: each library keeps its own copy of those (and of torch's header-only
# code) to itself; only PyInit_* is exported.
# -fno-trapping-math: lets GCC compute both sides of a select (the CPU kernel's branch-free fp8
# conversion) and vectorize; it changes no result (no reassociation, no fast-math).
# -ffp-contract=off: no a * b + c fused into one FMA (GCC's default for C++ allows it), which
# would change results in the CPU kernel's AVX2 / AVX-512 builds (csrc/cpu).
cxx = ["-O3", "-fno-trapping-math", "-ffp-contract=off", "-fvisibility=hidden", *force_include, *TARGET]
ext_modules = [
    # The CPU library: every schema, the CPU kernels. Needs libtorch_cpu only (the C shim).
    CppExtension("torch_fp8norm._C", sources("csrc/registration.cpp", "csrc/cpu/*.cpp") + shared,
                 extra_compile_args={"cxx": cxx}, extra_link_args=link, py_limited_api=True, libraries=[]),
]
if use_cuda:
    # The CUDA library, named for the CUDA major version of this torch (and of nvcc: BuildExtension
    # refuses a mismatch), whose runtime it links: torch_fp8norm/__init__.py loads _C_cu<major>
    # only beside a torch of that CUDA major version. libtorch_cuda for the current stream.
    # No fast-math: the contract fixes results bit for bit (correctly rounded division).
    # --compress-mode=size: the smallest fatbin (each image is decompressed once, when loaded).
    module = f"_C_cu{torch.version.cuda.split('.')[0]}"
    nvcc = ["-O3", "-lineinfo", "--compress-mode=size", "-DUSE_CUDA", "-Xcompiler=-fvisibility=hidden",
            f"-Xcompiler={','.join(force_include)}",
            f"-DFP8NORM_CUDA_MODULE={module}", *TARGET]
    ext_modules.append(CUDAExtension(f"torch_fp8norm.{module}", sources("csrc/cuda/*.cu") + shared,
                                     extra_compile_args={"cxx": cxx, "nvcc": nvcc}, extra_link_args=link,
                                     py_limited_api=True))
# Link what the code calls and nothing else (CppExtension / CUDAExtension add libc10, libtorch, ...).
for ext, libs in zip(ext_modules, (["torch_cpu"], ["torch_cpu", "torch_cuda", "cudart"])):
    ext.libraries = libs


class build_ext(BuildExtension):
    def build_extensions(self):
        if use_cuda:
            print(f"torch_fp8norm: building the CUDA kernels too (nvcc in {CUDA_HOME}, TORCH_CUDA_ARCH_LIST={_arch}): "
                  "this takes minutes; FP8NORM_CPU_ONLY=1 builds the CPU kernels only", flush=True)
        super().build_extensions()


setup(
    name="torch_fp8norm",
    version=version,
    description="Fused residual-add + RMSNorm + FP8 1x128 block quantization as PyTorch custom ops",
    long_description=long_description,
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    packages=find_packages(include=["torch_fp8norm", "torch_fp8norm.*"]),
    ext_modules=ext_modules,
    cmdclass={"build_ext": build_ext},
    # Python's limited API of 3.10: one wheel for CPython 3.10+.
    options={"bdist_wheel": {"py_limited_api": "cp310"}},
    python_requires=">=3.10",
    install_requires=[f"torch>={TORCH_MIN}"],
)
