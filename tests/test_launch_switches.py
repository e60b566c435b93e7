"""The CUDA kernel under every launch shape the table can pick, forced through the environment
switches (FP8NORM_PDL, FP8NORM_TUNE; read once per process, so each setting runs in a fresh
interpreter): clusters of 2..8 CTAs per row with even and uneven slices, several tiles per slice
with and without the shared-memory stash, 1 and 4 vectors per thread, rows in whole warps or in
half-warps, the weight loaded in pass 1 or 2, launches without programmatic dependent launch or
with the next grid released at exit, the L2 prefetch of later rows, the L2 prefetch of a slice's
later tiles in every grid, plain (unhinted) or cache-hinted accesses in every grid, plain rows
of whole warps in the kernel with the per-row barrier code or in the one without it (one-row
CTAs or every CTA), the block-scale stores with the L2 line policy (evict_last, then demoted) in
a short grid or without it, grids of many rows in lean one-vector rows or in 4-vector rows only,
and lean rows of whole warps in the kernel for rows with idle lanes or in their own one in every
launch, lean rows of an odd number of half-warps two per CTA (the default) or one, lean rows
of three vectors per thread in every lean grid or in none, one-row CTAs of 2-byte rows of an
odd number of half-warps in 16-byte vectors or in 8-byte ones in every grid, and one-vector
one-row CTAs forming each stream's row offset from its own stride where all four are equal.
Each case is checked against the full contract."""
import os
import re
import subprocess
import sys

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")

SWITCHES = [
    {"FP8NORM_PDL": "0"},
    {"FP8NORM_TUNE": "slice=0"},                 # no split: one CTA per row (65536: whole-row stash)
    {"FP8NORM_TUNE": "slice=32"},                # decode split as far as it goes (rows > 256 vectors)
    {"FP8NORM_TUNE": "cluster=2,vpt=1"},         # long rows: many tiles per slice
    {"FP8NORM_TUNE": "cluster=3"},               # uneven slices (H / 128 not a multiple of 3)
    {"FP8NORM_TUNE": "cluster=7,vpt=4"},
    {"FP8NORM_TUNE": "cluster=8,vpt=1", "FP8NORM_PDL": "0"},
    {"FP8NORM_TUNE": "vpt=4"},
    {"FP8NORM_TUNE": "stash=0"},                 # multi-tile slices re-read from global
    {"FP8NORM_TUNE": "cluster=2,vpt=1,stash=0"},
    {"FP8NORM_TUNE": "cta=1024"},                # up to 32 rows per CTA (last CTA partly idle)
    {"FP8NORM_TUNE": "prefetch=1"},              # L2 prefetch of the rows a few CTAs ahead
    {"FP8NORM_TUNE": "cta=1024,prefetch=1"},     # ... with rows past M in the last CTA
    {"FP8NORM_TUNE": "half=0"},                  # rows in whole warps only (no half-warp rows)
    {"FP8NORM_TUNE": "threads=64"},              # many tiles per slice, idle lanes in short rows
    {"FP8NORM_TUNE": "weight=1"},                # weight with the row in pass 1 (1024-thread rows too)
    {"FP8NORM_TUNE": "weight=2,release=0"},      # weight in pass 2 (clusters too); PDL release at exit
    {"FP8NORM_TUNE": "threads=64,tiles=1"},      # L2 prefetch of a slice's later tiles, every grid
    {"FP8NORM_TUNE": "hints=0"},                 # plain accesses (no cache hints), every grid
    {"FP8NORM_TUNE": "hints=0,vpt=4,cta=1024,prefetch=1"},  # ... 4-vector rows, 32 rows per CTA, L2
                                                            # prefetch of rows (off by default when plain)
    {"FP8NORM_TUNE": "hints=1"},                 # cache hints in every grid
    {"FP8NORM_TUNE": "hints=0,row1=0"},          # plain rows of whole warps in the kernel with the
                                                 # per-row barrier code (kWarpRows), every CTA
    {"FP8NORM_TUNE": "hints=0,row1=1"},          # ... one-row CTAs in the one without it
                                                 # (kWarpRowsCta), however many rows per SM
    {"FP8NORM_TUNE": "hints=0,row1=1,vpt=1"},    # ... 1-vector rows
    {"FP8NORM_TUNE": "hints=0,row1=2,cta=1024"},  # ... every CTA, up to 32 rows (4-vector ones too)
    {"FP8NORM_TUNE": "hints=1,demote=1"},        # block-scale lines evict_last, demoted ~32 rows later
                                                 # (2048 x 2048: scale columns of whole 128-byte lines)
    {"FP8NORM_TUNE": "demote=0"},                # block-scale stores without the line policy
    {"FP8NORM_TUNE": "rowvec1=1"},               # the lean one-row kernel in every launch it fits
                                                 # (1 x 1152: idle lanes; fp32 257 x 1024)
    {"FP8NORM_TUNE": "rowvec1=1,prefetch=1"},    # ... with the L2 prefetch of rows ahead
    {"FP8NORM_TUNE": "rowvec1=0"},               # never: those rows in kWarpRows' kernel
    {"FP8NORM_TUNE": "lean=0"},                  # grids of many rows: 4-vector rows only
    {"FP8NORM_TUNE": "rowvec1=1,full=0"},        # lean rows of whole warps in the kernel with the
                                                 # `valid` predicate (not the FULL one)
    {"FP8NORM_TUNE": "full=1"},                  # ... in the FULL one in grids of many rows too
                                                 # (2048 x 1024)
    {"FP8NORM_TUNE": "lean=1024,hints=1,demote=1"},  # lean one-vector rows up to 1024 vectors, with
                                                     # PDL in L2, hinted: block-scale lines demoted
                                                     # ~32 rows later (4096 x 1152, "tma"; two
                                                     # rows per CTA)
    {"FP8NORM_TUNE": "pair=0"},                  # lean rows of an odd number of half-warps one per
                                                 # CTA, with idle lanes (default: two per CTA)
    {"FP8NORM_TUNE": "leanvpt=3"},               # lean rows of 3 vectors per thread in every lean
                                                 # grid (H = 1152: 48 threads, two rows per CTA;
                                                 # float32 96 threads, one row; default: by
                                                 # launch_config's rule, 2047 x 1152)
    {"FP8NORM_TUNE": "leanvpt=1"},               # ... never: one vector per thread
    {"FP8NORM_TUNE": "narrow=0"},                # one-row CTAs of 2-byte rows of an odd number of
                                                 # half-warps in 16-byte vectors, with idle lanes
                                                 # (default: 8-byte vectors, whole warps, in grids
                                                 # of at most two rows per SM)
    {"FP8NORM_TUNE": "narrow=1"},                # ... in 8-byte vectors in every grid (600 x 1152)
    {"FP8NORM_TUNE": "leanvpt=2"},               # 2-byte lean rows of whole warps in 2 vectors per
                                                 # thread in every lean grid (2048 x 2048, 2048 x
                                                 # 1024; default: without normed_out by
                                                 # launch_config's rule, 2048 x 2048 below)
    {"FP8NORM_TUNE": "onestride=0"},             # one-vector one-row CTAs: each stream's row from its
                                                 # own stride where all four strides are equal too
    {"FP8NORM_TUNE": "leanvpt=4"},               # lean rows of whole warps of 4 vectors per thread
                                                 # without a residual in every grid of many rows
                                                 # (2048 x 1024: 32 threads, float32 64; default:
                                                 # rows of two warps or more beyond two waves)
]

# Shapes x options: odd block counts (1152: 9 blocks; 1408: 11, in half-warp rows of 48 threads
# with 4 vectors each at M = 1030, the last CTA half idle), long rows (fp32 65536: a slice over
# shared memory re-read from global), M around the table's thresholds, rows of one warp (bf16
# 1024 at 4 vectors per thread: the plain kernels' __syncwarp row barrier; 130 x 4096 takes
# their named per-row barriers), scale columns of whole 128-byte lines (2048 x 2048, "scaled_mm":
# the block-scale line policy where demote=P brings it into a short grid), and grids of many rows of
# 128..512 vectors (1030 x 1408, 2048 x 1024, 4096 x 1152: lean one-vector rows, the last with whole
# scale lines); lean rows of an odd number of half-warps (2047 x 1152, 1031 x 1408: two per CTA
# by default, odd M, three vectors per thread by default at 2047 x 1152 and under leanvpt=3;
# 2049 x 1152 unaligned); 2-byte 2048 x 2048 without normed_out: two vectors per thread by default.
CASES = """
import torch
from fp8norm_testing import Case, check_case
for dtype in (torch.bfloat16, torch.float32, torch.float16):
    for i, (m, h) in enumerate([(1, 128), (1, 1152), (3, 5120), (2, 16384), (1, 65536),
                                (130, 4096), (600, 1152), (5, 32768), (1030, 1408), (257, 1024),
                                (2048, 2048), (2048, 1024), (4096, 1152)]):
        check_case(Case("cuda", dtype, m, h, fused=i % 3 != 2, pad=(0, 1, 128)[i % 3],
                        ue8m0=i % 2 == 0, weight_fp32=i % 4 == 1, normed_none=i % 5 == 3,
                        layout=("tma", "scaled_mm", "row_major")[i % 3]))
    # Lean rows of an odd number of half-warps, two per CTA by default, with an odd M (the last
    # CTA's second row past M), and one unaligned (no lean rows); lean rows of two vectors per
    # thread without normed_out (2048 x 2048, by default).
    if dtype != torch.float32:
        for m, h, pad, wf, nn in [(2047, 1152, 0, False, False), (1031, 1408, 128, True, True), (2049, 1152, 1, False, False),
                                  (2048, 2048, 0, True, True)]:
            check_case(Case("cuda", dtype, m, h, fused=True, pad=pad, weight_fp32=wf, normed_none=nn, layout="tma"))
torch.cuda.synchronize()
print("ok")
"""


def run_cases(script, switches):
    """Runs a script of check_case calls in a fresh process under the environment `switches`
    (the launch switches are read once per process); it must print "ok" last."""
    here = os.path.dirname(__file__)
    env = {**os.environ, **switches, "PYTHONPATH": os.pathsep.join([here, os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stdout + proc.stderr


def case_script(fused, cases, forced_cases=()):
    """A script for run_cases: check_case over (dtype, M, H, weight_fp32, normed_none, pad, layout)
    cases of the fused op or (fused=False) the op without a residual, scale_ue8m0 where normed_out
    is None; forced_cases too where FP8NORM_TUNE holds leanvpt=4."""
    return f"""
import os
import torch
from fp8norm_testing import Case, check_case
cases = {list(cases)!r}
if "leanvpt=4" in os.environ.get("FP8NORM_TUNE", ""):
    cases += {list(forced_cases)!r}
for dtype, m, h, wf, nn, pad, layout in cases:
    check_case(Case("cuda", dtype, m, h, fused={fused!r}, weight_fp32=wf, normed_none=nn, ue8m0=nn, pad=pad,
                    layout=layout))
torch.cuda.synchronize()
print("ok")
"""


@pytest.mark.parametrize("switches", SWITCHES, ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()))
def test_contract_under_launch_switch(switches):
    run_cases(CASES, switches)


# Lean rows of four vectors per thread (the op without a residual: bf16 2113 x 2048 in 64 threads,
# with and without normed_out; float32 4099 x 1024; bf16 3001 x 4096 with a float32 weight, in
# 128; bf16 4096 x 2048, whose column-major scales are whole 128-byte lines) with hinted accesses
# and the block-scale line policy (hints=1,demote=1: most of them are plain by default, their
# bytes fitting in L2), the scale-once code's other instantiation (CASES above has no such rows).
LEAN_FOUR_CASES = case_script(False, [
    (torch.bfloat16, 2113, 2048, False, False, 0, "tma"), (torch.bfloat16, 2113, 2048, False, True, 0, "tma"),
    (torch.float32, 4099, 1024, False, True, 0, "tma"), (torch.bfloat16, 3001, 4096, True, True, 0, "tma"),
    (torch.bfloat16, 4096, 2048, False, True, 0, "tma")])
# Lean four rows beyond 512 vectors, by default (v55), with and without PDL: bf16 531 x 16384 (512
# threads, the bound; 531 rows: two waves and three rows of 512-thread CTAs), 1031 x 12288 (384)
# without normed_out, 1031 x 5120 (160, five warps) strided, float16 1031 x 8192 with a float32
# weight, float32 1031 x 8192 (512) and 531 x 6144 (384) in the other scale layouts.
LEAN_FOUR_WIDE_CASES = case_script(False, [
    (torch.bfloat16, 531, 16384, False, False, 0, "tma"), (torch.bfloat16, 1031, 12288, False, True, 0, "scaled_mm"),
    (torch.bfloat16, 1031, 5120, True, False, 128, "row_major"), (torch.float16, 1031, 8192, True, True, 0, "tma"),
    (torch.float32, 1031, 8192, False, False, 0, "scaled_mm"), (torch.float32, 531, 6144, True, True, 128, "row_major")])


def test_lean_four_hinted():
    run_cases(LEAN_FOUR_CASES, {"FP8NORM_TUNE": "hints=1,demote=1"})


@pytest.mark.parametrize("switches", [{}, {"FP8NORM_PDL": "0"}], ids=["pdl", "no_pdl"])
def test_lean_four_wide_rows(switches):
    run_cases(LEAN_FOUR_WIDE_CASES, switches)


# Which kernel a launch takes, read from the profiler's kernel names (the script's arguments: M,
# H, 1 to write normed_out or 0 not to, 1 for the fused op or 0 for the op without a residual,
# 1 for a float32 weight or 0 for bf16, and 1 for input rows 128 elements apart beyond H (the
# other streams contiguous) or 0 for a contiguous input; bf16 input).
KERNEL_NAMES = """
import sys
import torch
from torch.profiler import ProfilerActivity, profile
import torch_fp8norm
from torch_fp8norm.ops import block_scale_layout_strides
m, h = int(sys.argv[1]), int(sys.argv[2])
x = torch.randn(m, h + 128 * int(sys.argv[6]), device="cuda", dtype=torch.bfloat16)[:, :h]
r = torch.randn(m, h, device="cuda", dtype=torch.bfloat16)
w = torch.randn(h, device="cuda", dtype=torch.float32 if sys.argv[5] == "1" else torch.bfloat16)
out = torch.empty(m, h, device="cuda", dtype=torch.float8_e4m3fn)
scale = torch.empty_strided((m, h // 128), block_scale_layout_strides(m), device="cuda", dtype=torch.float32)
normed = torch.empty_like(x) if sys.argv[3] == "1" else None
def call():
    if sys.argv[4] == "1":
        torch.ops.fp8norm.fused_add_rmsnorm_fp8_block_quant.out(x, r, w, out=out, block_scale=scale, normed_out=normed)
    else:
        torch.ops.fp8norm.rmsnorm_fp8_block_quant.out(x, w, out=out, block_scale=scale, normed_out=normed)
call()
torch.cuda.synchronize()
with profile(activities=[ProfilerActivity.CUDA]) as prof:
    call()
    torch.cuda.synchronize()
print("\\n".join(sorted({e.name for e in prof.events() if "fp8norm" in e.name})))
"""


def kernel_template_args(tune, m, h, kernel, normed=True, residual=True, weight_fp32=False, input_padded=False):
    """The template arguments of the one `kernel` launch of the op on bf16 m x h, with PDL, under
    FP8NORM_TUNE=tune (None: the table), writing normed_out or (normed=False) not; the fused op,
    or (residual=False) the op without a residual; a bf16 weight, or (weight_fp32) a float32 one;
    a contiguous input, or (input_padded) one whose rows are H + 128 elements apart."""
    env = dict(os.environ)
    env.pop("FP8NORM_TUNE", None)
    env.pop("FP8NORM_PDL", None)
    if tune is not None:
        env["FP8NORM_TUNE"] = tune
    proc = subprocess.run([sys.executable, "-c", KERNEL_NAMES, str(m), str(h), str(int(normed)), str(int(residual)),
                           str(int(weight_fp32)), str(int(input_padded))], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    names = [n for n in proc.stdout.splitlines() if kernel + "<" in n]
    assert len(names) == 1, proc.stdout
    return [a.strip() for a in names[0].split(">(")[0].split("<", 1)[1].split(",")]


def template_bool(arg):
    """A bool template argument as printed in a kernel name (true / 1): "true" or "false"."""
    return {"1": "true", "0": "false"}.get(arg, arg)


def template_int(arg):
    """An int template argument as printed in a kernel name (3 / (int)3): its digits."""
    return re.sub(r"\D", "", arg)


def template_vpt(kernel, args):
    """The vectors per thread of a `kernel` launch from its template arguments: row_vec1_kernel's
    seventh, fused_add_rmsnorm_fp8_block_quant_kernel's fifth."""
    return template_int(args[6 if kernel == "row_vec1_kernel" else 4])


# Lean rows of an odd number of half-warps (bf16 2047 x 1152: 144 vectors, one wave of pairs) run
# row_vec1_kernel with PAIR (its sixth template argument) with three vectors per thread (VPT, the
# seventh) by default (the rule: one wave over more than half the CTA slots) and under
# leanvpt=3, one under leanvpt=1, neither under pair=0 (three-vector rows of 48 threads need pairs).
@pytest.mark.parametrize("tune,pair,vpt", [(None, "true", "3"), ("leanvpt=1", "true", "1"), ("leanvpt=3", "true", "3"),
                                           ("pair=0", "false", "1"), ("pair=0,leanvpt=3", "false", "1")])
def test_lean_rows_two_per_cta_taken(tune, pair, vpt):
    # row_vec1_kernel<T, W, HAS_RES, HINTED, FULL, PAIR, VPT>(...); a bool may print as true / 1,
    # an int with a cast
    args = kernel_template_args(tune, 2047, 1152, "row_vec1_kernel")
    assert (template_bool(args[5]), template_int(args[6])) == (pair, vpt), args


# Beyond one wave (bf16 16384 x 1152: about six), lean rows take three vectors per thread
# without normed_out (the call's bytes, 94 MB, within twice the L2) and one with it; leanvpt=1:
# one without normed_out too.
@pytest.mark.parametrize("tune,normed,vpt", [(None, False, "3"), (None, True, "1"), ("leanvpt=1", False, "1")])
def test_lean_rows_three_vectors_without_normed_out(tune, normed, vpt):
    args = kernel_template_args(tune, 16384, 1152, "row_vec1_kernel", normed)
    assert (template_bool(args[5]), template_int(args[6])) == ("true", vpt), args


# Lean rows of whole warps in a grid of about two waves (bf16 2048 x 2048: 256 vectors) take two
# vectors per thread without normed_out (within twice the L2) and one with it; leanvpt=1: one
# without normed_out too; leanvpt=2: two with it too.
@pytest.mark.parametrize("tune,normed,vpt", [(None, False, "2"), (None, True, "1"), ("leanvpt=1", False, "1"),
                                             ("leanvpt=2", True, "2")])
def test_lean_rows_two_vectors_without_normed_out(tune, normed, vpt):
    args = kernel_template_args(tune, 2048, 2048, "row_vec1_kernel", normed)
    assert (template_bool(args[5]), template_int(args[6])) == ("false", vpt), args


# Lean four rows of 513..1024 threads (the op without a residual, without normed_out, by default, v56;
# with normed_out under leanvpt=4): bf16 531 x 32768 (1024 threads, one CTA per SM), 1031 x 24576
# (768) strided, float32 300 x 16384 (1024) with a float32 weight, float16 300 x 32768 with
# normed_out.
LEAN_FOUR_1024_CASES = case_script(False, [
    (torch.bfloat16, 531, 32768, False, True, 0, "tma"), (torch.bfloat16, 1031, 24576, False, True, 128, "row_major"),
    (torch.float32, 300, 16384, True, True, 0, "scaled_mm"), (torch.float16, 300, 32768, False, False, 0, "tma")])
# The fused op in lean four rows (v56: rows of 128..256 threads in grids of at most 2048 rows, with a
# weight of the input's dtype): bf16 2047 x 4096 (128 threads, odd M), 1031 x 8192 (256) without
# normed_out, float16 2048 x 5120 (160) strided, float32 2047 x 2048 (128) and 1031 x 4096 (256)
# without normed_out; v57: bf16 2561 x 5120 (160 threads, over 2048 rows), 3071 x 4096 (128) strided
# without normed_out; v58: bf16 8193 x 6144 (192 threads, over 6144 rows) without normed_out; bf16
# 1031 x 8192 with a float32 weight takes 4-vector rows. Under leanvpt=4
# (every fused grid of many rows of whole warps of four vectors), also 531 x 16384 (512 threads)
# and 300 x 32768 (1024), and float16 2048 x 5120 with a float32 weight (still 4-vector rows).
LEAN_FOUR_FUSED_CASES = case_script(True, [
    (torch.bfloat16, 2047, 4096, False, False, 0, "tma"), (torch.bfloat16, 1031, 8192, False, True, 0, "scaled_mm"),
    (torch.float16, 2048, 5120, False, False, 128, "row_major"), (torch.float32, 2047, 2048, False, False, 0, "tma"),
    (torch.float32, 1031, 4096, False, True, 128, "scaled_mm"), (torch.bfloat16, 1031, 8192, True, False, 0, "tma"),
    (torch.bfloat16, 2561, 5120, False, False, 0, "scaled_mm"), (torch.bfloat16, 3071, 4096, False, True, 128, "row_major"),
    (torch.bfloat16, 8193, 6144, False, True, 0, "tma")],
    forced_cases=[(torch.bfloat16, 531, 16384, False, True, 0, "tma"),
                  (torch.bfloat16, 300, 32768, False, False, 128, "row_major"),
                  (torch.float16, 2048, 5120, True, True, 0, "scaled_mm")])


# The table with PDL; leanvpt=4 (the float16 case with normed_out in lean four too) without PDL.
@pytest.mark.parametrize("switches", [{}, {"FP8NORM_PDL": "0", "FP8NORM_TUNE": "leanvpt=4"}], ids=["pdl", "leanvpt4_no_pdl"])
def test_lean_four_1024_rows(switches):
    run_cases(LEAN_FOUR_1024_CASES, switches)


@pytest.mark.parametrize("switches", [{}, {"FP8NORM_PDL": "0"}, {"FP8NORM_TUNE": "leanvpt=4"}],
                         ids=["pdl", "no_pdl", "leanvpt4"])
def test_lean_four_fused_rows(switches):
    run_cases(LEAN_FOUR_FUSED_CASES, switches)


# The op without a residual, in grids of more than two waves of lean rows of a multiple of 128
# vectors, takes 4-vector rows (fused_add_rmsnorm_fp8_block_quant_kernel, VPT its fifth template
# argument) where those are one warp (bf16 8192 x 1024, 16384 x 1024 without normed_out) and lean
# rows of four vectors per thread (row_vec1_kernel, VPT its seventh) where they are two warps or
# more (bf16 8192 x 2048 / 16384 x 4096, with and without normed_out; all lean one-vector rows
# before v51, 4-vector rows in v51); lean=512 keeps the rule, lean=512,leanvpt=1 takes lean
# one-vector rows (v50's table) and leanvpt=1 v51's 4-vector rows; leanvpt=4 takes lean four for
# rows of one warp too. One-vector lean rows in 1.9 waves (512 x 4096) and where 4-vector rows
# are half-warps (8192 x 1152); the fused op keeps lean one-vector rows at 8192 x 2048. Rows
# beyond 512 vectors take lean four too (v55: 531 x 16384 in 512 threads, 1031 x 8192), 4-vector
# rows under lean=N below their length; without normed_out up to 1024 threads (v56: 2048 x 32768;
# 4-vector rows with normed_out, and under lean=2048). The fused op: see below.
@pytest.mark.parametrize("tune,m,h,normed,residual,kernel,vpt", [
    (None, 8192, 1024, True, False, "fused_add_rmsnorm_fp8_block_quant_kernel", "4"),
    (None, 16384, 1024, False, False, "fused_add_rmsnorm_fp8_block_quant_kernel", "4"),
    (None, 8192, 2048, True, False, "row_vec1_kernel", "4"), (None, 16384, 4096, False, False, "row_vec1_kernel", "4"),
    ("lean=512", 8192, 2048, True, False, "row_vec1_kernel", "4"),
    ("lean=512,leanvpt=1", 8192, 2048, True, False, "row_vec1_kernel", "1"),
    ("leanvpt=1", 16384, 2048, False, False, "fused_add_rmsnorm_fp8_block_quant_kernel", "4"),
    ("leanvpt=4", 8192, 1024, True, False, "row_vec1_kernel", "4"),
    ("leanvpt=4", 8192, 1024, False, False, "row_vec1_kernel", "4"),
    (None, 512, 4096, True, False, "row_vec1_kernel", "1"), (None, 8192, 1152, True, False, "row_vec1_kernel", "1"),
    (None, 8192, 2048, True, True, "row_vec1_kernel", "1"),
    (None, 531, 16384, True, False, "row_vec1_kernel", "4"), (None, 1031, 8192, False, False, "row_vec1_kernel", "4"),
    ("lean=1024", 531, 16384, True, False, "fused_add_rmsnorm_fp8_block_quant_kernel", "4"),
    ("lean=512", 1031, 8192, False, False, "fused_add_rmsnorm_fp8_block_quant_kernel", "4"),
    (None, 2048, 32768, False, False, "row_vec1_kernel", "4"),
    (None, 2048, 32768, True, False, "fused_add_rmsnorm_fp8_block_quant_kernel", "4"),
    ("lean=2048", 2048, 32768, False, False, "fused_add_rmsnorm_fp8_block_quant_kernel", "4")])
def test_rows_without_residual_taken(tune, m, h, normed, residual, kernel, vpt):
    args = kernel_template_args(tune, m, h, kernel, normed, residual)
    assert template_bool(args[2]) == ("true" if residual else "false"), args
    assert template_vpt(kernel, args) == vpt, args


# The fused op (v56) takes lean four rows (row_vec1_kernel, VPT 4, HAS_RES true) in rows of 128..256
# threads in grids of at most 2048 rows (bf16 1031 x 8192, 2048 x 4096 without normed_out); v57: rows
# of more than 128 threads up to 6144 rows (6144 x 8192), rows of 128 threads without normed_out up
# to 3072 (3072 x 4096; 3073 x 4096 in lean rows of two vectors per thread); v58: rows of more than
# 128 threads without normed_out up to 16384 rows (16384 x 5120; 16385 x 5120 in 4-vector rows);
# 4-vector rows (fused_add_rmsnorm_fp8_block_quant_kernel, VPT 4) beyond (6145 x 8192, 8192 x 8192
# with normed_out), in longer rows (2048 x 16384), with a float32 weight (1031 x 8192, also under
# leanvpt=4) and under fourres=0; fourres=1 takes lean four at 8192 x 8192 too, and so does
# fourrows=8192 (the row bound), while fourrows=1024 leaves 2048 x 4096 in 4-vector rows.
@pytest.mark.parametrize("tune,m,h,normed,weight_fp32,kernel,vpt", [
    (None, 1031, 8192, True, False, "row_vec1_kernel", "4"), (None, 2048, 4096, False, False, "row_vec1_kernel", "4"),
    (None, 6144, 8192, True, False, "row_vec1_kernel", "4"),
    (None, 6145, 8192, True, False, "fused_add_rmsnorm_fp8_block_quant_kernel", "4"),
    (None, 3072, 4096, False, False, "row_vec1_kernel", "4"), (None, 3073, 4096, False, False, "row_vec1_kernel", "2"),
    (None, 16384, 5120, False, False, "row_vec1_kernel", "4"),
    (None, 16385, 5120, False, False, "fused_add_rmsnorm_fp8_block_quant_kernel", "4"),
    (None, 8192, 8192, True, False, "fused_add_rmsnorm_fp8_block_quant_kernel", "4"),
    (None, 2048, 16384, True, False, "fused_add_rmsnorm_fp8_block_quant_kernel", "4"),
    ("fourres=0", 1031, 8192, True, False, "fused_add_rmsnorm_fp8_block_quant_kernel", "4"),
    ("fourres=1", 8192, 8192, True, False, "row_vec1_kernel", "4"),
    ("fourrows=8192", 8192, 8192, True, False, "row_vec1_kernel", "4"),
    ("fourrows=1024", 2048, 4096, True, False, "fused_add_rmsnorm_fp8_block_quant_kernel", "4"),
    (None, 1031, 8192, True, True, "fused_add_rmsnorm_fp8_block_quant_kernel", "4"),
    ("leanvpt=4", 1031, 8192, True, True, "fused_add_rmsnorm_fp8_block_quant_kernel", "4")])
def test_fused_lean_four_taken(tune, m, h, normed, weight_fp32, kernel, vpt):
    args = kernel_template_args(tune, m, h, kernel, normed, True, weight_fp32)
    assert template_bool(args[2]) == "true", args
    assert template_vpt(kernel, args) == vpt, args


LAYOUTS = ["kWarpRows", "kHalfWarpRows", "kClusterSlices", "kWarpRowsCta", "kRowVec1"]  # launch.h's order


# Plain 1-vector rows of whole warps outside the lean kernel take Layout::kWarpRowsCta, the
# kernel without the per-row barrier code, by default: in one-row CTAs (bf16 1 x 1152 with PDL
# under narrow=0: 144 vectors in 160 threads, idle lanes) and in CTAs of several rows (128 x
# 1024: two rows of 128 threads per CTA); kWarpRows' kernel under row1=0, and under row1=1 where
# a CTA holds several rows. Hinted (the table's choice under 1.5 MiB), both take kWarpRows' kernel.
@pytest.mark.parametrize("tune,m,h,layout,hinted", [
    ("hints=0,narrow=0", 1, 1152, "kWarpRowsCta", "false"), ("hints=0,row1=0,narrow=0", 1, 1152, "kWarpRows", "false"),
    ("narrow=0", 1, 1152, "kWarpRows", "true"), ("hints=0", 128, 1024, "kWarpRowsCta", "false"),
    ("hints=0,row1=1", 128, 1024, "kWarpRows", "false"), (None, 128, 1024, "kWarpRows", "true")])
def test_plain_one_vector_rows_taken(tune, m, h, layout, hinted):
    # fused_add_rmsnorm_fp8_block_quant_kernel<T, W, HAS_RES, ALIGNED, VPT, L, HINTED>(...); an
    # enum may print as its name or as a cast number
    args = kernel_template_args(tune, m, h, "fused_add_rmsnorm_fp8_block_quant_kernel")
    name = LAYOUTS[int(args[5].rsplit(")", 1)[1])] if ")" in args[5] else args[5].rsplit("::", 1)[-1]
    assert (template_int(args[4]), name, template_bool(args[6])) == ("1", layout, hinted), args


# With PDL where the hinted call's bytes fit in L2 (footprint 72% .. 100% of the H200's L2), lean
# rows (row_vec1_kernel) where 4-vector rows would leave idle lanes (bf16 6144 x 1152: 144
# vectors, 36 lanes of 48), 4-vector rows where they fill whole half-warps (4096 x 2048: 256
# vectors, 64 lanes) and in rows of more than 384 vectors (2048 x 3200: 400); vpt=4 gives 6144 x
# 1152 the 4-vector rows.
@pytest.mark.parametrize("tune,m,h,kernel,vpt", [
    (None, 6144, 1152, "row_vec1_kernel", "1"), ("vpt=4", 6144, 1152, "fused_add_rmsnorm_fp8_block_quant_kernel", "4"),
    (None, 4096, 2048, "fused_add_rmsnorm_fp8_block_quant_kernel", "4"),
    (None, 2048, 3200, "fused_add_rmsnorm_fp8_block_quant_kernel", "4")])
def test_lean_rows_in_l2_band_taken(tune, m, h, kernel, vpt):
    args = kernel_template_args(tune, m, h, kernel)
    assert template_vpt(kernel, args) == vpt, args


# One-row CTAs of 2-byte rows of an odd number of half-warps take row_vec1_kernel's FULL kernel
# (its fifth template argument) in 8-byte vectors (VB, its eighth) by default in grids of at most
# two rows per SM: bf16 1 x 1152 (with PDL: 288 threads, where 16-byte vectors take kWarpRows'
# kernel), 128 x 1920, 2 x SMs x 1152; (2 x SMs + 1) x 1152 and 600 x 1152 (more than two rows per
# SM on a GPU of under 300 SMs) take the kernel with the `valid` predicate in 16-byte vectors (160
# threads, 16 idle lanes), 600 x 1152 the narrow one under narrow=1, 2 x SMs x 1152 the other
# under narrow=0.
SMS = torch.cuda.get_device_properties(0).multi_processor_count if torch.cuda.is_available() else 0


@pytest.mark.parametrize("tune,m,h,full,vb", [
    (None, 1, 1152, "true", "8"), (None, 128, 1920, "true", "8"), (None, 2 * SMS, 1152, "true", "8"),
    (None, 2 * SMS + 1, 1152, "false", "16"), (None, 600, 1152, "false", "16"),
    ("narrow=1", 600, 1152, "true", "8"), ("narrow=0", 2 * SMS, 1152, "false", "16")])
def test_narrow_vectors_taken(tune, m, h, full, vb):
    # row_vec1_kernel<T, W, HAS_RES, HINTED, FULL, PAIR, VPT, VB>(...)
    args = kernel_template_args(tune, m, h, "row_vec1_kernel")
    assert (template_bool(args[4]), template_bool(args[5]), template_int(args[7])) == (full, "false", vb), args


# One-vector one-row CTAs (row_vec1_kernel with one vector per thread, 16-byte vectors) form one
# row offset for input, residual, normed_out and out (ONE_STRIDE, the ninth template argument)
# where the four share a row stride and the call writes normed_out: bf16 128 x 4096 (FULL, one
# wave), 2048 x 2048 (lean rows of whole warps: FULL in the plain-access band since v60), 2048 x
# 2176 (lean rows with idle lanes: the `valid` predicate) and the op without a residual; not
# without normed_out, not with an input of its own stride, not under onestride=0.
@pytest.mark.parametrize("tune,m,h,normed,residual,input_padded,one", [
    (None, 128, 4096, True, True, False, "true"), (None, 2048, 2048, True, True, False, "true"),
    (None, 2048, 2176, True, True, False, "true"),
    (None, 128, 4096, True, False, False, "true"), (None, 128, 4096, False, True, False, "false"),
    (None, 128, 4096, True, True, True, "false"), ("onestride=0", 128, 4096, True, True, False, "false")])
def test_one_row_offset_taken(tune, m, h, normed, residual, input_padded, one):
    # row_vec1_kernel<T, W, HAS_RES, HINTED, FULL, PAIR, VPT, VB, ONE_STRIDE>(...)
    args = kernel_template_args(tune, m, h, "row_vec1_kernel", normed=normed, residual=residual,
                                input_padded=input_padded)
    assert (template_int(args[6]), template_int(args[7]), template_bool(args[8])) == ("1", "16", one), args


# Lean rows of whole warps (row_vec1_kernel in grids of many rows) take the FULL kernel (no
# `valid` predicate, the fifth template argument) where the call's buffers take the plain-access
# band of L2 (unhinted, the fourth; v60: bf16 2048 x 2048, 1024 x 4096, 2048 x 1024 without
# normed_out) and the kernel with the predicate where the call is hinted (16384 x 2048, beyond L2)
# or the rows have idle lanes (2048 x 2176: 272 vectors in 288 threads); full=0 / full=1 force
# either.
@pytest.mark.parametrize("tune,m,h,normed,hinted,full", [
    (None, 2048, 2048, True, "false", "true"), (None, 1024, 4096, True, "false", "true"),
    (None, 2048, 1024, False, "false", "true"), (None, 16384, 2048, True, "true", "false"),
    (None, 2048, 2176, True, "false", "false"), ("full=0", 2048, 2048, True, "false", "false"),
    ("full=1", 16384, 2048, True, "true", "true")])
def test_full_lean_rows_in_plain_band_taken(tune, m, h, normed, hinted, full):
    # row_vec1_kernel<T, W, HAS_RES, HINTED, FULL, PAIR, VPT, VB, ONE_STRIDE>(...)
    args = kernel_template_args(tune, m, h, "row_vec1_kernel", normed=normed)
    assert (template_bool(args[3]), template_bool(args[4]), template_int(args[6])) == (hinted, full, "1"), args
