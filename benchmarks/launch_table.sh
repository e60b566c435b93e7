#!/usr/bin/env bash
# Prints the CUDA op's launch table for a grid of shapes (M x H, 2- and 4-byte types, with and
# without normed_out and PDL, aligned rows, the default switches) on this machine, no GPU
# needed: builds launch_table.cpp, which includes csrc/cuda/fused_add_rmsnorm_fp8_block_quant.cu
# (the host code; the kernels stubbed), with g++ against the installed torch, with the H200's
# device facts. For a launch-rule change, which shapes change kernel:
#   bash benchmarks/launch_table.sh HEAD~1 > old.txt && bash benchmarks/launch_table.sh > new.txt
#   diff old.txt new.txt
# SHAPES=MxH,... (environment): those shapes instead of the grid. RESIDUAL=0 (environment): the
# launches of rmsnorm_fp8_block_quant (no residual) instead of the fused op's. WEIGHT_FP32=1
# (environment): a float32 weight (default: the input's dtype). FP8NORM_TUNE (environment) is
# read as the op reads it, to see what a switch changes; FP8NORM_PDL is not: both settings print.
# REV (optional): the git revision whose csrc to read (launch_table.cpp is always the working
# tree's); default: the working tree. Needs python3 with torch, g++ and nvcc (for CUDA's headers).
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ $# -ge 1 ]; then
  git archive "$1" csrc | tar -x -C "$tmp"
  src=$tmp/csrc
else
  src=$PWD/csrc
fi
torch_dir=$(python3 -c "import os, torch; print(os.path.dirname(torch.__file__))")
. .ci/cuda_home.sh
cuda_home=${CUDA_HOME:?"no CUDA toolkit found (nvcc on PATH, or CUDA_HOME)"}
g++ -std=c++20 -O1 -w -DFP8NORM_LAUNCH_SRC="\"$src/cuda/fused_add_rmsnorm_fp8_block_quant.cu\"" \
  -I"$torch_dir/include" -I"$torch_dir/include/torch/csrc/api/include" -I"$cuda_home/include" \
  benchmarks/launch_table.cpp "$src/common/args.cpp" -o "$tmp/launch_table" \
  -L"$torch_dir/lib" -L"$cuda_home/lib64" -Wl,-rpath,"$torch_dir/lib" -Wl,-rpath,"$cuda_home/lib64" \
  -ltorch -ltorch_cpu -lc10 -lc10_cuda -ltorch_cuda -lcudart
"$tmp/launch_table"
