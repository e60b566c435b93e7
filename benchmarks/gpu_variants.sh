#!/usr/bin/env bash
# One device call: build this tree (and variants of it), run the whole test suite, benchmark it,
# then benchmark the variants in the same run. Results: $OUT (or ./gpu-out): pytest.txt,
# bench.json / bench.txt (this tree, with torch.compile), variants.json + variants.txt (every
# variant's % of copy beside this tree's, on VSHAPES).
#   GRID=small|full          grid of the main benchmark (default small)
#   VSHAPES=MxH,...          shapes for the variants (default: the main grid)
#   ENV_VARIANTS='name:VAR=v VAR2=v;...'   this build, run with extra environment variables
#   BUILD_VARIANTS='name:-DFLAG=1 ...;...'  this tree rebuilt with extra nvcc flags, or
#                            'name:@dir' the tree in dir (e.g. `git archive <commit>` unpacked
#                            under .gpu/, which the device tool carries), with this benchmark
#   TESTS=0                  skip the test suite (TEST_ARGS: pytest arguments, default: tests)
#   MAIN=0                   skip the main benchmark (bench.json: this tree with torch.compile)
#   BENCH_ARGS='...'         extra arguments for every benchmark run
set -uo pipefail
out=${OUT:-gpu-out}
rm -rf /tmp/bench  # a warm machine keeps /tmp: no variant JSON of an earlier call may join this table
mkdir -p "$out" /tmp/bench
export MAX_JOBS=${MAX_JOBS:-16} TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0a} PYTHONUNBUFFERED=1
here=$(pwd)
bench=benchmarks/bench_fused_add_rmsnorm_fp8_block_quant.py
vshapes=()
[ -n "${VSHAPES:-}" ] && vshapes=(--shapes "$VSHAPES")

IFS=';' read -ra build_variants <<< "${BUILD_VARIANTS:-}"
pids=()
for v in "${build_variants[@]}"; do
  name=${v%%:*}; flags=${v#*:}; src=$here
  if [ "${flags:0:1}" = "@" ]; then src=${flags:1}; flags=""; fi  # another tree, e.g. an old commit
  rm -rf "/tmp/variant_$name" && cp -r "$src" "/tmp/variant_$name" && rm -rf "/tmp/variant_$name/build"
  (cd "/tmp/variant_$name" && FP8NORM_NVCC_FLAGS="$flags" MAX_JOBS=4 python3 setup.py -q build_ext --inplace \
     > "/tmp/bench/build_$name.log" 2>&1) &
  pids+=($!)
done
python3 -m pip install -q --no-build-isolation --no-deps -e . > /tmp/bench/build.log 2>&1 || { tail -30 /tmp/bench/build.log; exit 1; }
if [ "${TESTS:-1}" != 0 ]; then
  python3 -m pytest -q -p no:logging -rs ${TEST_ARGS:-tests} 2>&1 | tee "$out/pytest.txt" | tail -3
fi
if [ "${MAIN:-1}" != 0 ]; then
  python3 $bench --grid "${GRID:-small}" --skip-eager --json "$out/bench.json" ${BENCH_ARGS:-} 2> /tmp/bench/main.err > "$out/bench.txt"
fi
python3 $bench --grid "${GRID:-small}" "${vshapes[@]}" --skip-eager --skip-compile --json /tmp/bench/v_main.json ${BENCH_ARGS:-} > /dev/null 2>&1
IFS=';' read -ra env_variants <<< "${ENV_VARIANTS:-}"
for v in "${env_variants[@]}"; do
  name=${v%%:*}
  env ${v#*:} python3 $bench --grid "${GRID:-small}" "${vshapes[@]}" --skip-eager --skip-compile \
    --json "/tmp/bench/v_$name.json" ${BENCH_ARGS:-} > /dev/null 2> "/tmp/bench/$name.err" || tail -5 "/tmp/bench/$name.err"
done
i=0
for v in "${build_variants[@]}"; do
  name=${v%%:*}
  wait "${pids[$i]}" || { echo "variant $name did not build"; tail -20 "/tmp/bench/build_$name.log"; }
  i=$((i + 1))
  (cd "/tmp/variant_$name" && export PYTHONPATH="/tmp/variant_$name:${PYTHONPATH:-}" && \
   python3 -c "import torch_fp8norm as t; assert t.__file__.startswith('/tmp/variant_$name'), t.__file__" && \
   python3 "$here/$bench" --grid "${GRID:-small}" \
     "${vshapes[@]}" --skip-eager --skip-compile --json "/tmp/bench/v_$name.json" ${BENCH_ARGS:-} > /dev/null 2> "/tmp/bench/$name.err") \
     || tail -5 "/tmp/bench/$name.err"
done
python3 benchmarks/compare_variants.py /tmp/bench/v_*.json --json "$out/variants.json" | tee "$out/variants.txt"
