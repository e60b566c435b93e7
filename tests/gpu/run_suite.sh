#!/usr/bin/env bash
# Runs the whole test suite in four lanes side by side: tests/test_launch_switches.py's tests
# (~10 s each, a fresh process per switch setting) in four parts, one after tests/test_contract.py,
# one after the other files, and two alone, sized so that the lanes end about together (25% and
# 11% of them after the contract file and the others, ~55 s and ~150-180 s on the H200; the rest
# halved). One log per part, $OUT/suite_<part>.txt (or ./suite-out/). Exit status 0 only if every
# part passed. (v47: in halves, one half of the launch-switch tests took 320 s, the contract file
# 37 s; v48: in thirds 175-195 s each, the whole suite 238 s; v53, thirds of 83 tests: 262, 287
# and 346 s, the last after the contract file's 47 s; the other files 127-177 s in v41-v51.)
#
# Why: the suite checks every CUDA result against reference.py on CPU copies, so it is mostly CPU
# time. Alone it took ~455 s on the H200 machine (16 cores); four parts side by side took 217 s
# (2026-12-01, v41), but only with OMP_NUM_THREADS set: with each process's default of one
# thread per core the parts slowed each other several-fold and none finished in 420 s.
# LIMIT=seconds (default 400) stops each part with SIGINT, so pytest still prints its summary,
# and kills it 30 s later if it has not exited (v53's call 2: a part stopped in a hung test
# printed its summary but did not exit, and the device call ran to its own limit).
#
# TORCHINDUCTOR_COMPILE_THREADS=1: inductor compiles in the test's process, not in its pool of
# worker processes. With the pool, test_compile_fullgraph_dynamic[cuda] ran past LIMIT in the
# part "others" twice (v52 with sanitizers beside the suite, v53 without: > 250 s, stopped in a
# wait in threading.py; the cause not found), where the whole part had passed in 127-177 s in
# v41-v51's suites; run beside the sanitizers with in-process compiles it took 2.3 s
# (tests/gpu/results/h200_2026-12-02_v53.txt). The whole suite so (v54, LIMIT=330): every part passed, lanes
# 42 + 174, 184 + 77, 255 and 275 s, the [cuda] test 1.7 s (h200_2026-12-02_v54.txt).
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-suite-out}
mkdir -p "$out"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(( ($(nproc) + 3) / 4 ))}
export TORCHINDUCTOR_COMPILE_THREADS=${TORCHINDUCTOR_COMPILE_THREADS:-1}
ids=$(python3 -m pytest -q -p no:cacheprovider --collect-only tests/test_launch_switches.py 2>/dev/null | grep "::")
n=$(echo "$ids" | grep -c "::")
# No ids would leave a part with no arguments, and pytest would run the whole suite there: at
# least 10, so that every part gets one.
[ "$n" -ge 10 ] || { echo "run_suite.sh: collected $n launch-switch tests (collection failed?)" >&2; exit 1; }
n1=$(( n * 25 / 100 ))
n2=$(( n * 11 / 100 ))
n3=$(( (n - n1 - n2) / 2 ))
part() { echo "$ids" | sed -n "$(( $1 + 1 )),$(( $1 + $2 ))p"; }  # part FIRST-INDEX COUNT
ls1=$(part 0 "$n1")
ls2=$(part "$n1" "$n2")
ls3=$(part $(( n1 + n2 )) "$n3")
ls4=$(echo "$ids" | tail -n +"$(( n1 + n2 + n3 + 1 ))")
others=$(ls tests/test_*.py | grep -v -e test_launch_switches.py -e test_contract.py)
run() {  # run NAME PYTEST-ARGS...
  local name=$1
  shift
  timeout -s INT -k 30 "${LIMIT:-400}" python3 -m pytest -v -p no:cacheprovider -rs --durations=25 "$@" > "$out/suite_$name.txt" 2>&1
  echo "$name rc $?" >> "$out/suite_$name.txt"
}
# shellcheck disable=SC2086  # word splitting of the id lists is intended
{
  { run contract tests/test_contract.py; run switches1 $ls1; } &
  { run others $others; run switches2 $ls2; } &
  run switches3 $ls3 &
  run switches4 $ls4 &
  wait
}
status=0
for name in contract others switches1 switches2 switches3 switches4; do
  echo "== $name: $(grep -E '^=+ .*(passed|failed|error|skipped)' "$out/suite_$name.txt" | tail -1)"
  grep -q "^$name rc 0$" "$out/suite_$name.txt" || status=1
done
exit $status
