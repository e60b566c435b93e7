#!/usr/bin/env bash
# The GPU lanes a change to CUDA code must pass (README, "What is tested"), on a machine with a GPU,
# torch, nvcc, pytest and hypothesis installed; from the repository root:
#   tests/gpu/lanes.sh LANE...
#   suite      build in place for TORCH_CUDA_ARCH_LIST (default: setup.py's DEFAULT_ARCHS, the
#              wheel's), then the whole suite; the CUDA tests must run, not skip
#   wheel=W    the whole suite beside wheel W alone: W installed into its own folder, the tests run
#              from a copy of tests/ and examples/ outside the repository
#   sanitize   tests/gpu/sanitize.sh on the current in-place build (run suite first)
#   bench      the benchmark's default grid on the current in-place build (cold L2)
#   ptx        build in place for "8.0+PTX" (compute_80 PTX JIT-compiled: what a GPU newer than the
#              cubins sees), then the whole suite; leaves that build in place, so run it last
# Each lane logs to $OUT/<lane>.log (or ./gpu-lanes-out/) and prints one summary line. Exit status 0
# only if every lane passed.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-gpu-lanes-out}
mkdir -p "$out" && out=$(realpath "$out")
export PYTHONUNBUFFERED=1 MAX_JOBS=${MAX_JOBS:-16}
status=0

build() {  # in place, for the arch list $1
  TORCH_CUDA_ARCH_LIST="$1" python3 -m pip install -q --no-build-isolation --no-deps -e . > "$out/build.log" 2>&1 \
    || { tail -30 "$out/build.log"; return 1; }
}

suite() {  # $1: log name; the rest: pytest arguments, with the CUDA kernels loaded on a GPU.
  local log="$out/$1.log"; shift
  python3 -c "import torch, torch_fp8norm as f; assert torch.cuda.is_available() and f.has_cuda_kernels()" \
    || { echo "  no GPU, or no CUDA kernels loaded"; return 1; }
  python3 -m pytest -q -p no:cacheprovider -rs "$@" > "$log" 2>&1
  local rc=$?
  tail -1 "$log"
  return $rc
}

lane() {  # $1: lane name; the rest: the command. One summary line.
  local name=$1; shift
  local t0=$SECONDS
  "$@"
  local rc=$?
  echo "== lane $name: $([ $rc -eq 0 ] && echo passed || echo FAILED) ($((SECONDS - t0)) s)"
  [ $rc -eq 0 ] || status=1
}

suite_lane() { build "${TORCH_CUDA_ARCH_LIST:-$(sed -n 's/^DEFAULT_ARCHS = "\(.*\)"/\1/p' setup.py)}" && suite suite tests; }
ptx_lane() { build "8.0+PTX" && suite ptx tests; }

wheel_lane() {  # $1: the wheel
  local dir
  dir=$(mktemp -d)
  python3 -m pip install -q --no-index --no-deps --target "$dir/site" "$1" > "$out/wheel-install.log" 2>&1 \
    || { cat "$out/wheel-install.log"; return 1; }
  cp -r tests examples "$dir/"
  (cd "$dir" && export PYTHONPATH="$dir/site${PYTHONPATH:+:$PYTHONPATH}" \
    && python3 -c "import torch_fp8norm as f; assert f.__file__.startswith('$dir/site'), f.__file__" \
    && suite wheel tests)
  local rc=$?
  rm -rf "$dir"
  return $rc
}

for arg in "$@"; do
  case "$arg" in
    suite) lane suite suite_lane ;;
    ptx) lane ptx ptx_lane ;;
    wheel=*) lane wheel wheel_lane "$(realpath "${arg#wheel=}")" ;;
    sanitize) lane sanitize env OUT="$out" bash tests/gpu/sanitize.sh ;;
    bench) lane bench bash -c "python3 benchmarks/bench_fused_add_rmsnorm_fp8_block_quant.py > '$out/bench.log' 2>&1; \
rc=\$?; tail -40 '$out/bench.log'; exit \$rc" ;;
    *) echo "unknown lane '$arg' (suite, wheel=W, sanitize, bench, ptx)"; exit 2 ;;
  esac
done
exit $status
