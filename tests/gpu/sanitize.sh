#!/usr/bin/env bash
# Runs tests/gpu/sanitize_cases.py under compute-sanitizer with memcheck, racecheck, initcheck
# and synccheck (TOOLS="..." to choose), each with the launch settings below; SETTINGS="tool|env;..."
# runs just those pairs instead (env: VAR=value ... or empty for the default launch table; e.g.
# SETTINGS="memcheck|;racecheck|FP8NORM_TUNE=leanvpt=4"). One log, $OUT/sanitize.log (or
# ./sanitize-out/), with a section per tool and launch setting; a summary per pair on stdout.
# Exit status 0 only if every tool reported zero errors and every case met the contract.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-sanitize-out}
mkdir -p "$out"
log="$out/sanitize.log"
: > "$log"
status=0
# Each tool runs the cases with the default launch table; memcheck and racecheck also with a
# forced one (clusters of 3 CTAs with uneven slices, several tiles per slice, no programmatic
# dependent launch), memcheck also with the L2 prefetch of rows a few CTAs ahead in every grid,
# up to 32 rows per CTA and the later tiles of a slice asked into L2 in every grid, with 64
# threads per row slice and no stash (many tiles per slice, re-read from global memory), with
# no decode split (rows of up to 1024 threads that load the weight after the reduction),
# with the weight after the reduction in every 1-vector kernel (clusters too) and the PDL
# release at exit, with plain (unhinted) accesses in every grid of aligned one-CTA rows, and
# with hinted accesses in every grid and the block-scale line policy in short grids (scale
# lines kept evict_last, demoted ~32 rows later: the 1024-row cases with whole-line columns),
# the latter also in lean one-vector rows (float32 1024 x 1152 and bf16 2041 x 2048; neither has
# scale columns of whole lines: lean rows with the line policy run in test_launch_switches.py);
# memcheck and racecheck also with the lean one-row kernel (Layout::kRowVec1) in every launch it
# fits, with the L2 prefetch of rows ahead, and with lean rows of three vectors per thread in
# every lean grid (bf16 2047 x 1152 in 48-thread pairs; the aligned 1024 x 1152 cases), of two
# vectors per thread in every lean grid of 2-byte rows of whole warps (bf16 2041 x 2048), and of
# four without a residual in one-warp rows too (bf16 2113 x 1024, one per CTA; by default 2113 x
# 2048 only);
# racecheck also with plain accesses and 4 vectors per thread (the plain kWarpRows kernel's
# per-row barriers: __syncwarp for rows of one warp, named barriers for rows of several), and
# with plain accesses alone (1-vector rows, one or several per CTA, in Layout::kWarpRowsCta).
pairs=()  # "tool|setting"
if [ -n "${SETTINGS:-}" ]; then
  IFS=';' read -ra pairs <<< "$SETTINGS"
else
  for tool in ${TOOLS:-memcheck racecheck initcheck synccheck}; do
    settings=("")
    case $tool in memcheck|racecheck) settings+=("FP8NORM_TUNE=cluster=3,vpt=1 FP8NORM_PDL=0"
                                                "FP8NORM_TUNE=rowvec1=1,prefetch=1" "FP8NORM_TUNE=leanvpt=3"
                                                "FP8NORM_TUNE=leanvpt=2" "FP8NORM_TUNE=leanvpt=4") ;; esac
    case $tool in racecheck) settings+=("FP8NORM_TUNE=hints=0,vpt=4" "FP8NORM_TUNE=hints=0") ;; esac
    case $tool in memcheck) settings+=("FP8NORM_TUNE=prefetch=1,cta=1024,tiles=1" "FP8NORM_TUNE=threads=64,stash=0"
                                      "FP8NORM_TUNE=slice=0" "FP8NORM_TUNE=weight=2,release=0" "FP8NORM_TUNE=hints=0"
                                      "FP8NORM_TUNE=hints=1,demote=1" "FP8NORM_TUNE=hints=1,demote=1,lean=512") ;; esac
    for setting in "${settings[@]}"; do pairs+=("$tool|$setting"); done
  done
fi
for pair in "${pairs[@]}"; do
  tool=${pair%%|*}
  setting=${pair#*|}
  echo "===== compute-sanitizer --tool $tool ${setting:-(default launch table)}" >> "$log"
  env $setting compute-sanitizer --tool "$tool" --error-exitcode 9 python3 tests/gpu/sanitize_cases.py > "$out/.tool.log" 2>&1
  rc=$?
  cat "$out/.tool.log" >> "$log" && rm -f "$out/.tool.log"
  echo "== $tool ${setting:-(default launch table)}: exit $rc"
  sed -n "/===== compute-sanitizer --tool $tool ${setting:-(default launch table)}/,\$p" "$log" | grep -E "ERROR SUMMARY|RACECHECK SUMMARY|sanitize_cases:|Error" | tail -3
  [ "$rc" -eq 0 ] || status=1
done
exit $status
