#!/usr/bin/env bash
# Runs tests/gpu/sanitize_cases.py (every kernel of the launch policy, forced through the test
# hook, and a grid under the policy) under compute-sanitizer with memcheck, racecheck, initcheck
# and synccheck (TOOLS="..." to choose); arguments choose case groups (kernels policy packed;
# default all). One log, $OUT/sanitize.log (or ./sanitize-out/), a
# section per tool; a summary per tool on stdout. Exit status 0 only if every tool reported zero
# errors and every case met the contract.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-sanitize-out}
mkdir -p "$out"
log="$out/sanitize.log"
: > "$log"
status=0
for tool in ${TOOLS:-memcheck racecheck initcheck synccheck}; do
  echo "===== compute-sanitizer --tool $tool" >> "$log"
  compute-sanitizer --tool "$tool" --error-exitcode 9 python3 tests/gpu/sanitize_cases.py "$@" > "$out/.tool.log" 2>&1
  rc=$?
  cat "$out/.tool.log" >> "$log" && rm -f "$out/.tool.log"
  echo "== $tool: exit $rc"
  sed -n "/===== compute-sanitizer --tool $tool\$/,\$p" "$log" | grep -E "ERROR SUMMARY|RACECHECK SUMMARY|sanitize_cases:|Error" | tail -3
  [ "$rc" -eq 0 ] || status=1
done
exit $status
