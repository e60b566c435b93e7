"""Instruction counts of the main CUDA kernels, from the built extension's SASS (cuobjdump).

    python3 benchmarks/sass_histogram.py torch_fp8norm/_C.abi3.so > sass.txt
"""
import collections
import re
import subprocess
import sys

KERNELS = {
    "bf16 vpt4": "_ZN7fp8norm4cuda40fused_add_rmsnorm_fp8_block_quant_kernelI13__nv_bfloat16S2_Lb1ELb1ELi4EEEvNS_7RowArgsENS0_9TileShapeE",
    "bf16 vpt1": "_ZN7fp8norm4cuda40fused_add_rmsnorm_fp8_block_quant_kernelI13__nv_bfloat16S2_Lb1ELb1ELi1EEEvNS_7RowArgsENS0_9TileShapeE",
}


def main(lib):
    for name, sym in KERNELS.items():
        sass = subprocess.run(["cuobjdump", "-sass", "-arch", "sm_90a", "-fun", sym, lib],
                              capture_output=True, text=True).stdout
        ops = re.findall(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", sass)
        counts = collections.Counter(op.split(".")[0] for op in ops)
        print(f"== {name}: {len(ops)} instructions")
        print(", ".join(f"{op} {n}" for op, n in counts.most_common()))


if __name__ == "__main__":
    main(sys.argv[1])
