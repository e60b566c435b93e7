#!/usr/bin/env bash
# One device call: build this tree, run the whole test suite, benchmark it, then build a variant
# of the same tree with extra nvcc flags (e.g. -DFP8NORM_NO_CACHE_HINTS) and benchmark that in
# the same run. Logs and JSON go to $OUT (the device tool's folder) or ./gpu-out.
#   bash benchmarks/gpu_check_and_compare.sh "<variant nvcc flags>" [grid]
set -uo pipefail
variant_flags=${1:-}
grid=${2:-small}
out=${OUT:-gpu-out}
mkdir -p "$out"
export MAX_JOBS=${MAX_JOBS:-16} TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0a}
here=$(pwd)
rm -rf /tmp/variant && cp -r "$here" /tmp/variant && rm -rf /tmp/variant/build
(cd /tmp/variant && FP8NORM_NVCC_FLAGS="$variant_flags" python3 setup.py -q build_ext --inplace > "$out/build_variant.log" 2>&1) &
variant_build=$!
python3 -m pip install -q --no-build-isolation --no-deps -e . > "$out/build.log" 2>&1 || { tail -20 "$out/build.log"; exit 1; }
python3 -m pytest -q -p no:logging -rs tests 2>&1 | tee "$out/pytest.txt" | tail -3
PYTHONUNBUFFERED=1 python3 benchmarks/bench_fused_add_rmsnorm_fp8_block_quant.py --grid "$grid" --skip-eager \
  --json "$out/bench.json" 2> "$out/bench.err" | tee "$out/bench.txt"
wait $variant_build || { tail -20 "$out/build_variant.log"; exit 1; }
echo "variant: $variant_flags"
(cd /tmp/variant && PYTHONPATH=/tmp/variant:${PYTHONPATH:-} PYTHONUNBUFFERED=1 python3 -c "import torch_fp8norm; print(torch_fp8norm.__file__)" && \
 PYTHONPATH=/tmp/variant:${PYTHONPATH:-} python3 benchmarks/bench_fused_add_rmsnorm_fp8_block_quant.py --grid "$grid" \
  --skip-eager --skip-compile --json "$out/bench_variant.json" 2> "$out/bench_variant.err" | tee "$out/bench_variant.txt")
