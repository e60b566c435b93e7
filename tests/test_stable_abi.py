"""The built libraries use LibTorch's stable ABI only: no undefined C++ symbol of c10::, at:: or
torch:: outside torch::stable (the C shim's functions are C symbols). Such a symbol would tie a
library to the torch release it was built with."""
import glob
import os
import re
import shutil
import subprocess

import pytest

import torch_fp8norm

LIBS = sorted(glob.glob(os.path.join(os.path.dirname(torch_fp8norm.__file__), "*.so")))
UNSTABLE = re.compile(r"(^|[^\w])(c10|at|torch)::")

pytestmark = pytest.mark.skipif(shutil.which("nm") is None or shutil.which("c++filt") is None,
                                reason="needs binutils (nm, c++filt)")


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
