#!/usr/bin/env bash
# Runs the whole test suite in four parts side by side: tests/test_contract.py, the other files
# except tests/test_launch_switches.py, and that file's tests in two halves. One log per part,
# $OUT/suite_<part>.txt (or ./suite-out/). Exit status 0 only if every part passed.
#
# Why: the suite checks every CUDA result against reference.py on CPU copies, so it is mostly CPU
# time. Alone it took ~455 s on the H200 machine (16 cores); four parts side by side took 217 s
# (2026-12-01, v41), but only with OMP_NUM_THREADS set: with each process's default of one
# thread per core the parts slowed each other several-fold and none finished in 420 s.
# LIMIT=seconds (default 400) stops each part with SIGINT, so pytest still prints its summary.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-suite-out}
mkdir -p "$out"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(( ($(nproc) + 3) / 4 ))}
ids=$(python3 -m pytest -q -p no:cacheprovider --collect-only tests/test_launch_switches.py 2>/dev/null | grep "::")
n=$(echo "$ids" | grep -c "::")
# No ids would leave a half with no arguments, and pytest would run the whole suite there.
[ "$n" -ge 2 ] || { echo "run_suite.sh: collected $n launch-switch tests (collection failed?)" >&2; exit 1; }
half=$(( n / 2 ))
ls1=$(echo "$ids" | head -n "$half")
ls2=$(echo "$ids" | tail -n +"$(( half + 1 ))")
others=$(ls tests/test_*.py | grep -v -e test_launch_switches.py -e test_contract.py)
run() {  # run NAME PYTEST-ARGS...
  local name=$1
  shift
  timeout -s INT "${LIMIT:-400}" python3 -m pytest -v -p no:cacheprovider -rs --durations=25 "$@" > "$out/suite_$name.txt" 2>&1
  echo "$name rc $?" >> "$out/suite_$name.txt"
}
# shellcheck disable=SC2086  # word splitting of the id lists is intended
{
  run contract tests/test_contract.py &
  run others $others &
  run switches1 $ls1 &
  run switches2 $ls2 &
  wait
}
status=0
for name in contract others switches1 switches2; do
  echo "== $name: $(grep -E '^=+ .*(passed|failed|error|skipped)' "$out/suite_$name.txt" | tail -1)"
  grep -q "^$name rc 0$" "$out/suite_$name.txt" || status=1
done
exit $status
