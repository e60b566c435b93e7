"""The CPU kernel under each instruction set it is built for (FP8NORM_CPU_ISA=baseline, avx2,
avx512; read once per process, so each runs the CPU contract tests in a fresh interpreter), and
a clear error for a value that names none, or an instruction set the CPU or the build lacks."""
import os
import platform
import re
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))

# The CPU features of x86-64-v3 (the avx2 build) and x86-64-v4 (avx512), as /proc/cpuinfo names them.
V3 = {"avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave"}
V4 = V3 | {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}
NEEDS = {"baseline": set(), "avx2": V3, "avx512": V4}
# One CPU call of the op (the instruction set is chosen, and FP8NORM_CPU_ISA checked, at the first).
ONE_CALL = ("import torch, torch_fp8norm\n"
            "x = torch.randn(2, 128)\n"
            "torch_fp8norm.fused_add_rmsnorm_fp8_block_quant(x, x.clone(), torch.ones(128))\n")


def cpu_flags():
    """The CPU's feature flags from /proc/cpuinfo, or None where there is none."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return None


def gcc_12_or_later():
    """Whether the C++ compiler that builds the extension (torch's: $CXX, else c++) is GCC 12 or
    later, which builds the avx2 and avx512 kernels on x86-64; None if it cannot be asked."""
    try:
        out = subprocess.run([os.environ.get("CXX", "c++"), "--version"], capture_output=True, text=True,
                             timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"\b(\d+)\.\d+\.\d+", out)
    return "clang" not in out.lower() and m is not None and int(m.group(1)) >= 12


def isa_env(isa):
    return {**os.environ, "FP8NORM_CPU_ISA": isa}


def run_with_isa(isa, args):
    return subprocess.run([sys.executable, *args], env=isa_env(isa), capture_output=True, text=True, timeout=600,
                          cwd=os.path.dirname(HERE))


def lacking(isa):
    """Why this machine cannot run `isa`'s kernel (None: it can, or the build will say)."""
    if isa == "baseline":
        return None
    flags = cpu_flags()
    if platform.machine() not in ("x86_64", "AMD64") or flags is None:
        return "an x86-64 Linux CPU is needed to know whether it has " + isa
    missing = NEEDS[isa] - flags
    return f"this CPU lacks {sorted(missing)}" if missing else None


@pytest.fixture(scope="module")
def contract_runs():
    """The CPU contract tests (every block format's too) under every instruction set this CPU has, in one interpreter per
    instruction set, all started at once, the cores shared between them (each interpreter's
    thread pool sized to its share: pools that together spin on more threads than there are cores
    run several times slower): isa -> (exit status, output)."""
    isas = [isa for isa in NEEDS if lacking(isa) is None]
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    threads = str(max(1, cores // len(isas)))
    procs = {isa: subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                    "tests/test_contract.py", "tests/test_block_formats.py::test_contract",
                                    "tests/test_block_formats.py::test_special_values", "-k", "cpu"], text=True,
                                   env={**isa_env(isa), "OMP_NUM_THREADS": threads},
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=os.path.dirname(HERE))
             for isa in isas}
    outs = {isa: p.communicate(timeout=600)[0] for isa, p in procs.items()}
    return {isa: (procs[isa].returncode, out) for isa, out in outs.items()}


@pytest.mark.parametrize("isa", sorted(NEEDS))
def test_cpu_contract_under_isa(isa, contract_runs):
    why = lacking(isa)
    if why:
        pytest.skip(why)
    rc, out = contract_runs[isa]
    if "this build has the baseline kernel only" in out and gcc_12_or_later() is False:
        pytest.skip(f"the extension's compiler is not GCC 12 or later: no {isa} kernel")
    assert rc == 0 and " passed" in out, out[-6000:]


def test_cpu_isa_unknown():
    proc = run_with_isa("sse9", ["-c", ONE_CALL])
    assert proc.returncode != 0 and "FP8NORM_CPU_ISA must be baseline, avx2 or avx512, got 'sse9'" in proc.stderr, \
        proc.stderr[-3000:]


def test_cpu_isa_beyond_the_cpu():
    flags = cpu_flags()
    if flags is None or platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("an x86-64 Linux CPU is needed to know what it lacks")
    if V4 <= flags:
        pytest.skip("this CPU has every instruction set the kernel is built for")
    proc = run_with_isa("avx512", ["-c", ONE_CALL])
    assert proc.returncode != 0 and re.search(
        "FP8NORM_CPU_ISA=avx512, but this (CPU supports at most|build has the baseline kernel only)",
        proc.stderr), proc.stderr[-3000:]
