"""The built libraries use LibTorch's stable ABI only: no undefined C++ symbol of c10::, at:: or
torch:: outside torch::stable (the C shim's functions are C symbols). Such a symbol would tie a
library to the torch release it was built with. And they load where torch's own wheels do
(manylinux_2_28): no glibc symbol newer than 2.28, no libstdc++ symbol newer than 3.4.24, and no
export but PyInit_*."""
import glob
import os
import re
import shutil
import subprocess

import pytest

import torch_fp8norm

LIBS = sorted(glob.glob(os.path.join(os.path.dirname(torch_fp8norm.__file__), "*.so")))
UNSTABLE = re.compile(r"(^|[^\w])(c10|at|torch)::")

pytestmark = pytest.mark.skipif(any(shutil.which(tool) is None for tool in ("nm", "c++filt", "objdump", "readelf")),
                                reason="needs binutils (nm, c++filt, objdump, readelf)")


def test_the_libraries_are_there():
    assert "_C.abi3.so" in [os.path.basename(p) for p in LIBS], LIBS


@pytest.mark.parametrize("lib", LIBS, ids=os.path.basename)
def test_only_stable_abi_symbols(lib):
    undefined = subprocess.run(["nm", "-D", "--undefined-only", lib], capture_output=True, text=True,
                               check=True).stdout
    names = subprocess.run(["c++filt"], input=undefined, capture_output=True, text=True, check=True).stdout
    assert "aoti_torch_" in names  # the C shim: what the library does use
    bad = [line.strip() for line in names.splitlines() if UNSTABLE.search(line) and "torch::stable" not in line]
    assert not bad, f"{os.path.basename(lib)} uses {len(bad)} C++ symbols outside the stable ABI: {bad[:5]}"


def _version(text: str):
    return tuple(int(v) for v in text.split("."))


@pytest.mark.parametrize("lib", LIBS, ids=os.path.basename)
def test_manylinux_2_28_symbols(lib):
    dynamic = subprocess.run(["objdump", "-T", lib], capture_output=True, text=True, check=True).stdout
    # Exports, whatever the toolchain.
    exported = [line.split()[-1] for line in dynamic.splitlines()
                if "*UND*" not in line and re.search(r"\s(g|w)\s+D[FO]\s", line)]
    assert exported and all(name.startswith("PyInit_") for name in exported), exported
    # The glibc bindings of csrc/compat and every symbol version, for the wheel's toolchain (GCC 12
    # on glibc 2.36, as .ci/run builds it). A source build elsewhere runs where it was built: GCC 13
    # on glibc 2.39 binds pthread_once@GLIBC_2.34 despite the header's .symver (seen on the GPU
    # machine), and newer glibc headers redirect more functions (glibc 2.38's: strtol to
    # __isoc23_strtol).
    comment = subprocess.run(["readelf", "-p", ".comment", lib], capture_output=True, text=True).stdout
    gcc = [int(v) for v in re.findall(r"GCC: \(.*?\) (\d+)\.", comment)]
    if not gcc or max(gcc) > 12:
        pytest.skip(f"built by GCC {max(gcc, default='?')}: the glibc bindings and version limits hold for the "
                    "wheel's GCC 12")
    for name in ("dlsym", "pthread_once"):
        versions = re.findall(rf"\((GLIBC_[\d.]+)\)\s+{name}$", dynamic, re.M)
        assert set(versions) <= {"GLIBC_2.2.5"}, (name, versions)
    assert "__libc_single_threaded" not in dynamic
    newest = {}
    for name, version in re.findall(r"\((GLIBC|GLIBCXX|CXXABI)_([\d.]+)\)", dynamic):
        newest[name] = max(newest.get(name, (0,)), _version(version))
    limits = {"GLIBC": (2, 28), "GLIBCXX": (3, 4, 24), "CXXABI": (1, 3, 11)}
    assert all(newest[k] <= limits[k] for k in newest), newest
