"""Instruction counts of the CUDA kernels, from the built extension's SASS (cuobjdump; names
demangled with c++filt).

    python3 benchmarks/sass_histogram.py torch_fp8norm/_C.abi3.so [REGEX] > sass.txt

REGEX picks kernels by their demangled name (default: the bf16 kernels with a bf16 weight, a
residual and aligned rows: every vectors-per-thread, layout and hint variant of them).
"""
import collections
import re
import subprocess
import sys

DEFAULT = r"fused_add_rmsnorm_fp8_block_quant_kernel<__nv_bfloat16, __nv_bfloat16, true, true,"


def kernels(lib):
    """{demangled name: [instruction, ...]} for every function in lib's sm_90a SASS."""
    sass = subprocess.run(["cuobjdump", "-sass", "-arch", "sm_90a", lib], capture_output=True, text=True,
                          check=True).stdout
    funcs, cur = {}, None
    for line in sass.splitlines():
        m = re.match(r"\s*Function : (\S+)", line)
        if m:
            cur = funcs.setdefault(m.group(1), [])
            continue
        m = re.match(r"\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", line)
        if m and cur is not None:
            cur.append(m.group(1))
    names = subprocess.run(["c++filt"], input="\n".join(funcs), capture_output=True, text=True,
                           check=True).stdout.splitlines()
    return dict(zip(names, funcs.values()))


def main(lib, pattern=DEFAULT):
    found = {n: ops for n, ops in kernels(lib).items() if re.search(pattern, n)}
    if not found:
        sys.exit(f"no kernel in {lib} matches {pattern!r}")
    for name, ops in sorted(found.items()):
        counts = collections.Counter(op.split(".")[0] for op in ops)
        print(f"== {name}: {len(ops)} instructions")
        print(", ".join(f"{op} {n}" for op, n in counts.most_common()))


if __name__ == "__main__":
    main(*sys.argv[1:3])
