#!/usr/bin/env bash
# Runs tests/gpu/sanitize_cases.py under compute-sanitizer with memcheck, racecheck, initcheck
# and synccheck (TOOLS="..." to choose). Logs go to $OUT (or ./sanitize-out). Exit status 0 only
# if every tool reported zero errors and every case met the contract.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-sanitize-out}
mkdir -p "$out"
status=0
for tool in ${TOOLS:-memcheck racecheck initcheck synccheck}; do
  compute-sanitizer --tool "$tool" --error-exitcode 9 python3 tests/gpu/sanitize_cases.py > "$out/sanitize_$tool.log" 2>&1
  rc=$?
  echo "== $tool: exit $rc"
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|sanitize_cases:|Error" "$out/sanitize_$tool.log" | tail -3
  [ "$rc" -eq 0 ] || status=1
done
exit $status
