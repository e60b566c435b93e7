#!/usr/bin/env bash
# One device call that verifies a tree on the H200: builds the extension (sm_90a), then runs the
# whole test suite (run_suite.sh, four lanes) with a compute-sanitizer lane beside it
# (sanitize.sh: memcheck and racecheck, each also with FP8NORM_TUNE=leanvpt=4, and initcheck and
# synccheck, one after another), and prints every summary to stdout, so that a call stopped by
# its time limit still shows what finished. Logs: $OUT (or ./verify-out/): build.log,
# suite_<part>.txt, sanitize.log and sanitize_lane.txt (few files: the device tool returns a
# limited number).
#   BUDGET=seconds  the call's own time limit (default 590): each suite part gets what is left of
#                   it after the build, less 45 s for the parts' summaries and the lane's end
#   BUILD=0         skip the build (the tree's extension is already built for this GPU)
# opcheck imports expecttest: PYTHONPATH must reach it (the device machine has no network: install
# the wheel from ../shared/wheels with `pip install --no-index --target DIR`, as the README says).
# The suite lanes took 505 s with the build in v58 (LIMIT 440 s after a ~100 s build); with
# less, parts are stopped and say so in their summaries (v59: LIMIT 388 s, four parts unseen).
# v60, every part passed: BUDGET=596 after a 107 s build (LIMIT 444 s; the longest part 425 s, the
# call 540 s), and BUILD=0 BUDGET=560 (LIMIT 515 s; the longest part 479 s, the call 488 s).
# v61: BUDGET=596 after a 79 s build (LIMIT 472 s; the longest part 367 s, the call 454 s).
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-verify-out}
mkdir -p "$out"
export OUT=$out
t0=$(date +%s)
since() { echo $(( $(date +%s) - t0 )); }
if [ "${BUILD:-1}" != 0 ]; then
  TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0a} MAX_JOBS=${MAX_JOBS:-16} \
    python3 -m pip install -q --no-build-isolation --no-deps -e . > "$out/build.log" 2>&1 ||
    { tail -50 "$out/build.log"; exit 1; }
fi
echo "build done at +$(since) s"
# The sanitizer lane: six settings of sanitize.sh's (its whole list takes too long beside the suite).
SETTINGS="memcheck|;racecheck|;memcheck|FP8NORM_TUNE=leanvpt=4;initcheck|;synccheck|;racecheck|FP8NORM_TUNE=leanvpt=4" \
  bash tests/gpu/sanitize.sh > "$out/sanitize_lane.txt" 2>&1 &
lane_pid=$!
LIMIT=$(( ${BUDGET:-590} - 45 - $(since) )) bash tests/gpu/run_suite.sh
suite=$?
echo "suite rc $suite at +$(since) s"
wait "$lane_pid"
lane=$?
echo "== sanitizer lane (exit $lane; the whole log: sanitize.log)"
cat "$out/sanitize_lane.txt"
for f in "$out"/suite_*.txt; do
  grep -E "FAILED|^ERROR" "$f" | head -5
done
echo "verify: suite rc $suite, sanitizer lane rc $lane, total +$(since) s"
[ "$suite" = 0 ] && [ "$lane" = 0 ]
