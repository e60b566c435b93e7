"""Benchmark of fp8norm.fused_add_rmsnorm_fp8_block_quant (with --no-residual,
fp8norm.rmsnorm_fp8_block_quant) against torch.compile of its reference and a same-bytes copy.

Cold L2 (the CUDA default): in a model a GEMM runs between two norms, so the norm's operands are
not in L2 when it starts. Each timed call works on its own buffer set (input, residual, weight,
out, block_scale, normed_out), rotating over N sets of at least 4x the L2 in all; the N calls run
back to back in one CUDA graph, and a call's time is the median over graph replays of replay
time / N (replays back to back, >= ~1 ms per timed sample). --hot times back-to-back calls on the same buffers instead (L2-resident where they fit).
The copy baseline is timed the same way and moves the op's bytes (half read, half written), the
faster of cudaMemcpy and an elementwise copy kernel; "% of copy" = copy µs / op µs * 100.

Byte model (bf16): read input, read residual, write residual, write normed (4 x 2 B), write fp8
(1 B) per element, 4 B per 128-element scale and the weight once:
    bytes = 9*M*H + 4*M*H/128 + 2*H      (normed_out=None: 7*M*H + ...)
--no-residual: 5*M*H + ... (normed_out=None: 3*M*H + ...).

--format mxfp8 / mxfp4 / nvfp4 times fp8norm.fused_add_rmsnorm_quant (rmsnorm_quant) in that block
format instead, scales in --scale-layout (swizzled: the padded 128x4 layout; row), its bytes in the
model: 1 B per code (mxfp8) or 0.5 (the fp4 formats), 1 B per scale (the swizzled padding counted),
nvfp4's global scale (4 B) left out; torch.compile times its reference (reference.quantize).

--packed adds the op writing packed UE8M0 scales (int32, four exponents per word) instead of
float32 ones. --layer times a whole layer instead (CUDA, sm_90): examples/fp8_linear.py's fused
norm + quantization + blockwise FP8 GEMM against the unfused layer and the bf16 layer under
torch.compile, each call on its own buffers and weights.

On CPU: wall clock of back-to-back calls on the same buffers, fastest of repeats. --call-cost
times the host cost of one eager call instead. benchmarks/README.md says how to read the output.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time

import torch

import torch_fp8norm
from torch_fp8norm import reference as R

EPS = 1e-6
MAX_SETS = 20000          # most buffer sets (calls per CUDA graph) in cold-L2 mode
L2_FALLBACK = 64 << 20    # when the device does not report its L2 size
SPREAD_LIMIT = 1.1        # median / fastest CUDA-graph sample above which a reading is flagged
# Wall-clock (CPU) records: limits past which a record cannot be right (implausible), and how many
# times such a shape is measured again before a warning names it.
COPY_AGREEMENT = 3.0
COPY_SLACK_US = 20.0
MAX_PCT_OF_COPY = 300.0
WALL_SPREAD_LIMIT = 2.0
REMEASURE = 2
SLEEP_CYCLES = 1 << 21    # GPU spin before each timed sample, so the host has queued the replays
OP_NAMES = {True: "fused_add_rmsnorm_fp8_block_quant", False: "rmsnorm_fp8_block_quant"}
QUANT_OP_NAMES = {True: "fused_add_rmsnorm_quant", False: "rmsnorm_quant"}
# The block format timed (--format, --scale-layout, --scale-mode): fp8_1x128 is the fp8 ops.
FORMAT = dict(format="fp8_1x128", scale_layout=None, scale_mode=None)


def _grid(ms, hs, extra=()):
    return [(m, h) for h in hs for m in ms] + list(extra)


LAYER_SHAPES = [(1, 7168), (16, 7168), (128, 7168), (2048, 7168), (8192, 7168)]
GRIDS = {
    "cpu": _grid([1, 16, 1024], [1152, 4096, 7168]),
    "decode": _grid([1, 16, 128, 512], [2048, 4096, 7168, 8192, 16384]),
    "small": _grid([1, 16, 128, 2048, 16384], [2048, 4096, 7168, 8192, 16384],
                   [(2048, 32768), (16384, 32768), (2048, 65536), (16384, 65536)]),
    "full": _grid([1, 16, 128, 512, 2048, 8192, 16384, 32768],
                  [1152, 2048, 4096, 5120, 6144, 7168, 8192, 16384, 32768, 65536]),
    # the block formats' default: gpt-oss's H = 2880 beside the common sizes
    "formats": _grid([1, 16, 128, 2048, 16384], [2880, 4096, 7168, 8192, 16384]),
    "formats-cpu": _grid([1, 16, 1024], [2880, 4096, 7168]),
}


def scale_bytes(m: int, h: int) -> int:
    """Bytes of one [M, H] call's block_scale in FORMAT (the swizzled layout's padding included)."""
    fmt = FORMAT["format"]
    if fmt == "fp8_1x128":
        return 4 * m * (h // 128)
    ks = h // R.FORMAT_BLOCK[fmt]
    if FORMAT["scale_layout"] == "row":
        return m * ks
    return (m + 127) // 128 * 128 * ((ks + 3) // 4 * 4)


def code_bytes(m: int, h: int) -> int:
    """Bytes of one [M, H] call's out in FORMAT: 1 per element, 1/2 for the fp4 formats."""
    return m * h // 2 if FORMAT["format"] in ("mxfp4", "nvfp4") else m * h


def byte_count(m: int, h: int, dtype: torch.dtype, normed: bool = True, residual: bool = True) -> int:
    """The byte model above (the weight counted in the input's dtype), in FORMAT."""
    e = torch.empty((), dtype=dtype).element_size()
    streams = (4 if normed else 3) if residual else (2 if normed else 1)
    return streams * e * m * h + code_bytes(m, h) + scale_bytes(m, h) + e * h


def set_bytes(m: int, h: int, dtype, wdtype, residual: bool) -> int:
    """Bytes of one buffer set as allocated (block_scale padded to round_up(M, 4) rows)."""
    e, we = dtype.itemsize, wdtype.itemsize
    if FORMAT["format"] != "fp8_1x128":
        return (3 if residual else 2) * e * m * h + code_bytes(m, h) + we * h + scale_bytes(m, h)
    mp = torch_fp8norm.block_scale_strides(m, h)[1]
    return ((3 if residual else 2) * e + 1) * m * h + we * h + 4 * (h // 128) * mp


def n_sets(nbytes: int, l2: int, cold: bool) -> int:
    """Sets of nbytes each that cover 4x the L2 (1 when not cold), at most MAX_SETS."""
    return min(MAX_SETS, max(1, math.ceil(4 * l2 / nbytes))) if cold else 1


def op_sets(m, h, n, dtype, wdtype, residual, device, strided_input=False):
    """n sets (ins, out, block_scale, normed_out), ins = (input, residual, weight) or (input, weight):
    per-set views of one arena per stream; block_scale strided (1, round_up(M, 4)) like the
    functional ops' (torch_fp8norm.block_scale_strides). strided_input: input rows are the first
    halves of rows of 2H elements (row stride 2H, as a split projection's output)."""
    torch.manual_seed(m * 7919 + h)
    x = torch.randn(n, m, 2 * h if strided_input else h, dtype=dtype, device=device)[..., :h]
    r = torch.randn(n, m, h, dtype=dtype, device=device) if residual else None
    w = torch.randn(n, h, device=device).mul_(0.5).add_(1).to(wdtype)
    normed = torch.empty(n, m, h, dtype=dtype, device=device)
    fmt = FORMAT["format"]
    if fmt != "fp8_1x128":  # the format's outputs, as the functional op allocates them
        fp4 = fmt in ("mxfp4", "nvfp4")
        out = torch.empty(n, m, code_bytes(m, h) // max(m, 1), dtype=torch.uint8, device=device)
        out = out.view(torch.float4_e2m1fn_x2 if fp4 else torch.float8_e4m3fn)
        ks = h // R.FORMAT_BLOCK[fmt]
        shape = (m, ks) if FORMAT["scale_layout"] == "row" else ((m + 127) // 128 * 128, (ks + 3) // 4 * 4)
        scale = torch.zeros(n, *shape, dtype=torch.uint8, device=device)
        scale = scale.view(torch.float8_e4m3fn if fmt == "nvfp4" else torch.float8_e8m0fnu)
    else:
        out = torch.empty(n, m, h, dtype=torch.float8_e4m3fn, device=device)
        mp = torch_fp8norm.block_scale_strides(m, h)[1]
        scale = torch.empty(n, h // 128, mp, device=device).transpose(1, 2)[:, :m]  # [n, M, H/128]
    return [((x[i], r[i], w[i]) if residual else (x[i], w[i]), out[i], scale[i], normed[i])
            for i in range(n)]


def packed_scales(m, h, n, device):
    """n int32 [M, ceil(H/512)] packed UE8M0 block_scales, strided (1, round_up(M, 4))."""
    mp = torch_fp8norm.block_scale_strides(m, h, "deepgemm", "ue8m0_packed")[1]
    cols = torch_fp8norm.block_scale_columns(h, "ue8m0_packed")
    return list(torch.empty(n, cols, mp, dtype=torch.int32, device=device).transpose(1, 2)[:, :m])


def copy_sets(nbytes: int, n: int, device):
    """n (src, dst) int32 pairs of nbytes / 2 each (a copy moves nbytes: half read, half written),
    rows of the two arenas padded to 128 bytes so that every view is aligned."""
    k = (nbytes // 2 + 3) // 4
    src = torch.randint(0, 2**31 - 1, (n, (k + 31) // 32 * 32), dtype=torch.int32, device=device)
    dst = torch.empty_like(src)
    return [(src[i, :k], dst[i, :k]) for i in range(n)]


def time_graph(fn, sets, replays: int):
    """(median µs per call, spread) of fn(*a) for every a in `sets`, back to back in one CUDA graph.
    All buffers exist before capture; the calls run once on a side stream first (as capture
    wants; this also compiles and autotunes torch.compile's kernels). Each sample replays the graph
    back to back for >= ~1 ms behind a GPU spin (so the graph launch stays out of the timing);
    spread = median / fastest sample (how far other work moved the reading)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for a in sets:
            fn(*a)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for a in sets:
            fn(*a)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def sample(k: int) -> float:
        torch.cuda._sleep(SLEEP_CYCLES)
        start.record()
        for _ in range(k):
            g.replay()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1000.0 / (k * len(sets))

    sample(1)
    inner = max(1, min(200, math.ceil(1000.0 / (sample(1) * len(sets)))))
    times = [sample(inner) for _ in range(replays)]
    return statistics.median(times), statistics.median(times) / min(times)


def time_wall(fn, calls: int | None, replays: int, sync=lambda: None):
    """(µs per call, spread): wall clock of `calls` back-to-back calls of fn() then sync() (default:
    enough calls for ~20 ms, at least 3), the fastest of `replays` repeats after two warm-up calls
    (a host's other work only adds time: on a 2-core machine medians sat 1.2-1.5x above it);
    spread = median / fastest repeat."""
    fn()
    sync()
    t0 = time.perf_counter()
    fn()
    sync()
    calls = calls or max(3, min(10000, math.ceil(0.02 / max(time.perf_counter() - t0, 1e-7))))
    times = []
    for _ in range(replays):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        times.append((time.perf_counter() - t0) * 1e6 / calls)
    return min(times), statistics.median(times) / min(times)


CONVENTION = ()  # the op's and the reference's norm_convention argument (--norm-convention; none: "torch")


GLOBAL_SCALE: dict = {}  # nvfp4: the global scale on each device (one float32 element)


def global_scale(device):
    if device not in GLOBAL_SCALE:
        GLOBAL_SCALE[device] = torch.tensor([448 * 6 / 8.0], device=device)
    return GLOBAL_SCALE[device]


def format_args(device):
    """The quant ops' arguments after eps for FORMAT: format, scale_layout, scale_format,
    scale_mode, global_scale, norm_convention."""
    fmt = FORMAT["format"]
    return (fmt, FORMAT["scale_layout"], None, FORMAT["scale_mode"],
            global_scale(device) if fmt == "nvfp4" else None, *(CONVENTION or (None,)))


def _reference(*ins):
    """The reference with the benchmark's eps: (x, r, w), or (x, w) without a residual."""
    if FORMAT["format"] != "fp8_1x128":
        fmt, layout, _, mode, gs, conv = format_args(ins[0].device)
        name = QUANT_OP_NAMES[len(ins) == 3]
        return getattr(R, name)(*ins, EPS, fmt, layout or "swizzled", mode, gs, conv or "torch")
    return getattr(R, OP_NAMES[len(ins) == 3])(*ins, EPS, False, *CONVENTION)


def bench_shape(m, h, args, l2, compiled_ref):
    """One record: µs of the copies, the op (.out with and without normed_out), torch.compile and
    eager; copies first, each set of buffers freed before the next is allocated."""
    residual, dev, dtype, wdtype = not args.no_residual, args.device, args.dtype_t, args.wdtype_t
    if dev == "cuda":
        timer = lambda fn, sets: time_graph(fn, sets if args.cold else sets * args.calls, args.replays)
    else:
        timer = lambda fn, sets: time_wall(lambda: fn(*sets[0]), args.calls, args.replays)
    nbytes = byte_count(m, h, dtype, residual=residual)
    nbytes_nn = byte_count(m, h, dtype, normed=False, residual=residual)
    rec = dict(M=m, H=h, dtype=args.dtype, device=dev, residual=residual, bytes=nbytes,
               bytes_nonormed=nbytes_nn, sets={})
    t, spread = {}, {}

    def run(key, fn, sets):
        t[key], spread[key] = timer(fn, sets)

    for key, nb in (("copy", nbytes), ("copy_nonormed", nbytes_nn)):
        rec["sets"][key] = n_sets(nb, l2, args.cold)
        sets = copy_sets(nb, rec["sets"][key], dev)
        memcpy, kernel = (timer(fn, sets) for fn in (lambda s, d: d.copy_(s),
                                                     lambda s, d: torch.bitwise_or(s, 0, out=d)))
        t[key + "_memcpy"], t[key + "_kernel"] = memcpy[0], kernel[0]
        t[key], spread[key] = min(memcpy, kernel)
        del sets
    rec["sets"]["op"] = n_sets(set_bytes(m, h, dtype, wdtype, residual), l2, args.cold)
    sets = op_sets(m, h, rec["sets"]["op"], dtype, wdtype, residual, dev, args.strided_input)
    if FORMAT["format"] != "fp8_1x128":
        op, opts = getattr(torch.ops.fp8norm, QUANT_OP_NAMES[residual]).out, format_args(dev)
    else:
        op, opts = getattr(torch.ops.fp8norm, OP_NAMES[residual]).out, (False, *CONVENTION)
    run("op", lambda ins, o, s, n: op(*ins, EPS, *opts, out=o, block_scale=s, normed_out=n), sets)
    run("op_nonormed", lambda ins, o, s, n: op(*ins, EPS, *opts, out=o, block_scale=s, normed_out=None), sets)
    if args.packed:
        packed = packed_scales(m, h, len(sets), dev)
        run("op_packed", lambda ins, o, p, n: op(*ins, EPS, True, *CONVENTION, out=o, block_scale=p, normed_out=n),
            [(ins, o, p, n) for (ins, o, _, n), p in zip(sets, packed)])
    if compiled_ref is not None:
        run("compile", lambda ins, *_: compiled_ref(*ins), sets)
    if args.eager:
        run("eager", lambda ins, *_: _reference(*ins), sets)
    rec.update(us=t, spread=spread)
    rec["gbps"] = {k: (nbytes_nn if "nonormed" in k else nbytes) / (v * 1e3) for k, v in t.items()}
    rec["pct_of_copy"] = {k: 100.0 * t["copy_nonormed" if "nonormed" in k else "copy"] / v
                          for k, v in t.items() if not k.startswith("copy")}
    return rec


def layer_variants():
    """The layer variants of examples/fp8_linear.py, each fn(x, residual, norm_weight, w, w_q,
    w_scale, q, q_scale): the fused op + FP8 GEMM; the unfused layer (add, RMSNorm, quantization,
    FP8 GEMM) under torch.compile; the layer in bf16 under torch.compile; the FP8 GEMM alone."""
    examples = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples")
    if examples not in sys.path:
        sys.path.insert(0, examples)
    import fp8_linear as L

    unfused = torch.compile(L.unfused_norm_linear, dynamic=False)
    bf16 = torch.compile(L.bf16_norm_linear, dynamic=False)
    return L, {"fused": lambda x, r, nw, w, wq, ws, q, qs: L.fused_norm_linear(x, r, nw, wq, ws, EPS),
               "unfused_compile": lambda x, r, nw, w, wq, ws, q, qs: unfused(x, r, nw, wq, ws, EPS),
               "bf16_compile": lambda x, r, nw, w, wq, ws, q, qs: bf16(x, r, nw, w, EPS),
               "gemm": lambda x, r, nw, w, wq, ws, q, qs: L.fp8_block_gemm(q, qs, wq, ws, x.dtype)}


def layer_set_bytes(m, h, n_out, dtype) -> int:
    e = dtype.itemsize
    return (2 * e + 1) * m * h + e * h + (e + 1) * n_out * h + 4 * m * (h // 128) + 4 * (n_out // 128) * (h // 128)


def bench_layer(m, h, args, l2):
    """One record: µs of a layer with N = H outputs (examples/fp8_linear.py's variants), every
    call on its own buffers and weights (cold L2 as for the op)."""
    torch._dynamo.reset()
    L, variants = layer_variants()
    n_out, dtype, dev = h, args.dtype_t, args.device
    n = n_sets(layer_set_bytes(m, h, n_out, dtype), l2, args.cold)
    torch.manual_seed(m * 7919 + h)
    sets = []
    for _ in range(n):
        x, r = (torch.randn(m, h, dtype=dtype, device=dev) for _ in range(2))
        nw = torch.rand(h, device=dev).add_(0.5).to(dtype)
        w = torch.randn(n_out, h, device=dev).div_(h**0.5).to(dtype)
        sets.append((x, r, nw, w, *L.quantize_weight(w), *L.quantize_activations(x, r.clone(), nw, EPS)))
    timed = {k: time_graph(fn, sets if args.cold else sets * args.calls, args.replays) for k, fn in variants.items()}
    return dict(M=m, H=h, N=n_out, dtype=args.dtype, sets={"layer": n}, us={k: v[0] for k, v in timed.items()},
                spread={k: v[1] for k, v in timed.items()})


def device_gb(m, h, args, l2) -> float:
    """Peak device memory of bench_shape: the larger of the copy arenas and the op's sets plus the
    references' temporaries (about 4 B per element, 16 with eager)."""
    residual = not args.no_residual
    nb = byte_count(m, h, args.dtype_t, residual=residual)
    sb = set_bytes(m, h, args.dtype_t, args.wdtype_t, residual)
    copy = n_sets(nb, l2, args.cold) * (nb + 256)
    ops = n_sets(sb, l2, args.cold) * sb + m * h * (16 if args.eager else 4)
    return max(copy, ops) / 1e9


def call_cost(m, h, args):
    """Host µs per eager call, calls back to back (no graph; on CUDA synchronized at each repeat's
    end, the kernels being far shorter than a call): .out into preallocated outputs, the functional
    op, the Python wrapper, and an in-place add of the same input (the floor of any eager op)."""
    residual = not args.no_residual
    ((ins, o, s, n),) = op_sets(m, h, 1, args.dtype_t, args.wdtype_t, residual, args.device)
    op = getattr(torch.ops.fp8norm, OP_NAMES[residual])
    wrapper = getattr(torch_fp8norm, OP_NAMES[residual])
    acc = torch.zeros_like(ins[0])
    fns = {"out": lambda: op.out(*ins, EPS, False, out=o, block_scale=s, normed_out=n),
           "functional": lambda: op(*ins, EPS, False),
           "wrapper": lambda: wrapper(*ins, EPS),
           "add_": lambda: acc.add_(ins[0])}
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    timed = {k: time_wall(f, args.calls, args.replays, sync) for k, f in fns.items()}
    return dict(M=m, H=h, call_us={k: v[0] for k, v in timed.items()},
                spread={k: v[1] for k, v in timed.items()})


def implausible(rec) -> str | None:
    """Why a wall-clock record cannot be right, or None. Other work on the machine can slow every
    repeat of a reading, so the fastest repeat is not always enough: the two copies of the same
    bytes over COPY_AGREEMENT x and COPY_SLACK_US apart (a copy kernel's fixed cost alone can
    put small copies 3x apart), an op over MAX_PCT_OF_COPY % of its copy's speed (the op moves
    the same bytes and computes too), or a median of the op or a copy (what "% of copy" compares)
    over WALL_SPREAD_LIMIT x its fastest repeat."""
    us, why = rec["us"], []
    for key in ("copy", "copy_nonormed"):
        lo, hi = sorted((us[key + "_memcpy"], us[key + "_kernel"]))
        if hi > COPY_AGREEMENT * lo and hi - lo > COPY_SLACK_US:
            why.append(f"{key}: memcpy {us[key + '_memcpy']:.2f} µs, copy kernel {us[key + '_kernel']:.2f} µs")
    why += [f"{k} at {v:.0f}% of copy" for k, v in rec["pct_of_copy"].items() if v > MAX_PCT_OF_COPY]
    why += [f"{k} median {v:.2f}x its fastest" for k, v in rec["spread"].items()
            if v > WALL_SPREAD_LIMIT and k in ("copy", "copy_nonormed", "op", "op_nonormed")]
    return "; ".join(why) or None


def unreliable(records) -> str | None:
    """One warning naming the shapes whose median (a CUDA-graph reading) sits over SPREAD_LIMIT x
    above their fastest sample: something else used the GPU while they ran, so the reading is off
    by about that much. None when every median is within it: then the readings stand (a single
    slow sample does not move a median)."""
    worst = [(r, max(r["spread"], key=r["spread"].get)) for r in records]
    bad = [f"{r['M']}x{r['H']} {k} {r['spread'][k]:.2f}x" for r, k in worst if r["spread"][k] > SPREAD_LIMIT]
    if not bad:
        return None
    return (f"WARNING: in {len(bad)} of {len(records)} shapes a median is over {SPREAD_LIMIT}x the fastest sample "
            f"(other work on the machine moved the reading); rerun those on an idle machine: {', '.join(bad)}")


HOW = {
    "cold-l2": "cold L2: every call on its own buffers, sets of >= 4x the {l2:.0f} MiB L2 (at most {max_sets}) "
               "back to back in one CUDA graph; median over replays of replay time / calls",
    "hot": "hot L2: {calls} back-to-back calls on the same buffers in one CUDA graph; median over replays",
    "cpu": "wall clock of back-to-back calls on the same buffers, fastest of {replays} repeats; the op "
           "timed as .out into preallocated outputs, eager and torch.compile allocate their outputs",
    "layer": "residual add + RMSNorm + 1x128 FP8 quantization + blockwise FP8 GEMM (torch._scaled_mm, N = H), "
             "every call on its own buffers and weights, sets of >= 4x the {l2:.0f} MiB L2 back to back in one "
             "CUDA graph; median over replays of replay time / calls",
    "call-cost": "host cost per eager call, {calls} calls back to back, fastest of {replays} repeats{sync}",
}


def header(meta) -> str:
    """One line: what was timed, on what, and how."""
    where = f"cpu ({meta['threads']} threads)" if meta["device"] == "cpu" else meta["name"]
    how = HOW[meta["mode"]].format(l2=meta["l2_bytes"] / 2**20, max_sets=MAX_SETS, calls=meta["calls"],
                                   replays=meta["replays"], sync=", synchronized at each repeat's end" if meta["device"] == "cuda" else "")
    conv = meta.get("norm_convention", "torch")
    fmt = meta.get("format", "fp8_1x128")
    opts = (f", norm_convention {conv}" if conv != "torch" else "") + (
        ", input row stride 2H" if meta.get("strided_input") else "") + (
        f", format {fmt} ({meta['scale_layout']} scales{', ' + meta['scale_mode'] if meta.get('scale_mode') else ''})"
        if fmt != "fp8_1x128" else "")
    return (f"# {meta['op']} on {where}, {meta['dtype']} (weight {meta['weight_dtype']}{opts}), "
            f"torch {meta['torch']}: {how}")


def print_table(records):
    """The Markdown table of bench_shape records; a column that no record has is left out."""
    rows = []
    for r in records:
        us, pct = r["us"], r["pct_of_copy"]
        nn, pk, c, e = us.get("op_nonormed"), us.get("op_packed"), us.get("compile"), us.get("eager")
        rows.append({"M": r["M"], "H": r["H"], "copy µs": f"{us['copy']:.2f}", "op µs": f"{us['op']:.2f}",
                     "op % of copy": f"{pct['op']:.0f}",
                     "no-normed µs (/ op)": nn and f"{nn:.2f} ({nn / us['op']:.2f})",
                     "no-normed % of its copy": nn and f"{pct['op_nonormed']:.0f}",
                     "packed UE8M0 µs (/ op)": pk and f"{pk:.2f} ({pk / us['op']:.2f})",
                     "torch.compile µs": c and f"{c:.2f}",
                     "op speedup over compile": c and f"{c / us['op']:.2f}x",
                     "eager µs": e and f"{e:.2f}"})
    cols = [k for k in (rows[0] if rows else []) if any(row[k] is not None for row in rows)]
    print("| " + " | ".join(cols) + " |\n|" + "---|" * len(cols))
    for row in rows:
        print("| " + " | ".join("-" if row[k] is None else str(row[k]) for k in cols) + " |")


def print_call_cost(records):
    print("| M | H | .out µs | functional op µs | Python wrapper µs | add_ µs (floor) |")
    print("|---|---|---|---|---|---|")
    for r in records:
        c = r["call_us"]
        print(f"| {r['M']} | {r['H']} | {c['out']:.2f} | {c['functional']:.2f} | {c['wrapper']:.2f} | "
              f"{c['add_']:.2f} |")


def print_layer(records):
    print("| M | H (= K = N) | fused µs | unfused, torch.compile µs | bf16, torch.compile µs | FP8 GEMM alone µs | "
          "fused speedup over unfused | over bf16 |")
    print("|---|---|---|---|---|---|---|---|")
    for r in records:
        u = r["us"]
        print(f"| {r['M']} | {r['H']} | {u['fused']:.2f} | {u['unfused_compile']:.2f} | {u['bf16_compile']:.2f} | "
              f"{u['gemm']:.2f} | {u['unfused_compile'] / u['fused']:.2f}x | {u['bf16_compile'] / u['fused']:.2f}x |")


def report(meta, plot_path=None):
    print(header(meta))
    {"call-cost": print_call_cost, "layer": print_layer}.get(meta["mode"], print_table)(meta["records"])
    for w in meta["warnings"]:
        print(w, file=sys.stderr)
    if plot_path and meta["mode"] not in ("call-cost", "layer"):
        plot(meta, plot_path)


def plot(meta, path):
    """% of copy vs M, one line per H: the op solid, torch.compile dashed."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = meta["records"]
    fig, ax = plt.subplots(figsize=(9, 5.5))
    hs = sorted({r["H"] for r in records})
    colors = plt.cm.viridis([i / max(1, len(hs) - 1) for i in range(len(hs))])
    for h, color in zip(hs, colors):
        rs = sorted((r for r in records if r["H"] == h), key=lambda r: r["M"])
        ms = [r["M"] for r in rs]
        ax.plot(ms, [r["pct_of_copy"]["op"] for r in rs], "-o", color=color, label=f"H={h}", ms=3)
        if all("compile" in r["pct_of_copy"] for r in rs):
            ax.plot(ms, [r["pct_of_copy"]["compile"] for r in rs], "--x", color=color, alpha=0.6, ms=4)
    ax.axhline(100, color="gray", lw=0.8)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("M (rows)")
    ax.set_ylabel("% of same-bytes copy bandwidth")
    mode = {"cold-l2": "cold L2", "hot": "hot L2", "cpu": "CPU wall clock"}[meta["mode"]]
    ax.set_title(f"{meta['op']} ({meta['name']}, {meta['dtype']}, {mode})\n"
                 f"solid: fp8norm, dashed: torch.compile", fontsize=10)
    ax.legend(ncol=3, fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def measure(shapes, args, l2, meta):
    """bench_shape for every shape that fits in --max-gb, into meta's records, skipped and warnings."""
    try:
        from tqdm import tqdm
    except ImportError:  # the progress bar is optional
        def tqdm(it, **_):
            return it
    for m, h in tqdm(shapes, desc="shapes", file=sys.stderr):
        gb = device_gb(m, h, args, l2)
        if gb > args.max_gb:
            meta["skipped"].append([m, h])
            meta["warnings"].append(f"skipped {m}x{h}: needs ~{gb:.3g} GB > --max-gb {args.max_gb:g}")
            continue
        compiled_ref = None
        if not args.skip_compile:
            torch._dynamo.reset()  # a fresh static-shape compilation for every shape
            compiled_ref = torch.compile(_reference, dynamic=False)
        rec = bench_shape(m, h, args, l2, compiled_ref)
        for _ in range(REMEASURE if args.device == "cpu" else 0):
            if not implausible(rec):
                break
            rec = bench_shape(m, h, args, l2, compiled_ref)  # other work disturbed it: once more
        why = implausible(rec) if args.device == "cpu" else None
        if why:
            meta["warnings"].append(f"WARNING: {m}x{h}: the readings disagree ({why}) after {REMEASURE + 1} "
                                    "measurements: other work on the machine moved them; rerun on an idle machine")
        meta["records"].append(rec)
        if args.device == "cuda":
            torch.cuda.empty_cache()


def parse_shapes(text: str, error, block: int = 128) -> list:
    """--shapes "MxH,...": M >= 1 rows, H a positive multiple of the format's block (what the op
    takes); else error(message), argparse's usage error."""
    shapes = []
    for item in text.split(","):
        try:
            m, h = (int(v) for v in item.strip().split("x"))
        except ValueError:
            error(f"--shapes: {item!r} is not MxH (e.g. 16x7168)")
        if m < 1 or h < 1 or h % block:
            error(f"--shapes: {item!r}: M must be >= 1 and H a positive multiple of {block}")
        shapes.append((m, h))
    return shapes


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=["cuda", "cpu"])
    p.add_argument("--grid", choices=sorted(GRIDS), default=None, help="default: cpu on CPU, small on CUDA")
    p.add_argument("--shapes", default=None, help="MxH list instead of a grid, e.g. 1x2048,16384x4096")
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    p.add_argument("--hot", action="store_true",
                   help="CUDA: back-to-back calls on the same buffers (operands in L2 where they fit) "
                        "instead of cold L2")
    p.add_argument("--calls", type=int, default=None,
                   help="calls per graph with --hot (20), per CPU repeat (~20 ms), per --call-cost "
                        "repeat (2000); cold L2 takes as many as its buffer sets")
    p.add_argument("--replays", type=int, default=None, help="timed samples (CUDA 15, CPU and --call-cost 5)")
    p.add_argument("--eager", action="store_true", help="time the eager reference on CUDA too (slow)")
    p.add_argument("--skip-eager", action="store_true", help="do not time the eager reference on CPU")
    p.add_argument("--skip-compile", action="store_true", help="do not time torch.compile of the reference")
    p.add_argument("--call-cost", action="store_true",
                   help="host µs per eager call (.out, functional op, Python wrapper, add_) at 1x7168 "
                        "or --shapes, instead of the table")
    p.add_argument("--packed", action="store_true",
                   help="also time the op writing packed UE8M0 scales (int32, scale_ue8m0=True)")
    p.add_argument("--layer", action="store_true",
                   help="CUDA (sm_90): time a whole layer instead (examples/fp8_linear.py: the op + FP8 GEMM "
                        "against the unfused layer and the bf16 layer under torch.compile) at M 1..8192, H 7168 "
                        "or --shapes")
    p.add_argument("--json", default=None, help="write the results to this path")
    p.add_argument("--plot", default=None, help="write a PNG: %% of copy bandwidth vs M, one line per H")
    p.add_argument("--from-json", default=None, help="print (and --plot) an earlier --json file instead of measuring")
    p.add_argument("--max-gb", type=float, default=40.0, help="skip shapes needing more device memory")
    p.add_argument("--no-residual", action="store_true",
                   help="time rmsnorm_fp8_block_quant (5 bytes per bf16 element, 3 without normed_out)")
    p.add_argument("--weight-fp32", action="store_true",
                   help="a float32 weight (the byte model keeps the input's dtype: the weight is read once)")
    p.add_argument("--strided-input", action="store_true",
                   help="input rows with row stride 2H (views of wider rows; the bytes read are the same)")
    p.add_argument("--norm-convention", default="torch", choices=list(R.NORM_CONVENTIONS),
                   help="the op's (and the reference's) norm_convention")
    p.add_argument("--format", default="fp8_1x128", choices=list(R.FORMATS),
                   help="the block format (mxfp8, mxfp4, nvfp4: fp8norm.fused_add_rmsnorm_quant; default grid "
                        "'formats', H 2880 too)")
    p.add_argument("--scale-layout", default=None, choices=["swizzled", "row"],
                   help="the block formats' scale layout (default swizzled)")
    p.add_argument("--scale-mode", default=None, choices=list(R.SCALE_MODES), help="MX scale mode (default rceil)")
    args = p.parse_args(argv)
    global CONVENTION
    CONVENTION = () if args.norm_convention == "torch" else (args.norm_convention,)
    blocks = args.format != "fp8_1x128"
    if not blocks and (args.scale_layout or args.scale_mode):
        p.error("--scale-layout and --scale-mode apply to the block formats (--format mxfp8, mxfp4, nvfp4)")
    if args.scale_mode and args.format == "nvfp4":
        p.error("--scale-mode applies to the MX formats (mxfp8, mxfp4)")
    if blocks and (args.packed or args.call_cost or args.layer):
        p.error("--packed, --call-cost and --layer time the fp8_1x128 ops: leave out --format")
    FORMAT.update(format=args.format, scale_layout=(args.scale_layout or "swizzled") if blocks else None,
                  scale_mode=(args.scale_mode or "rceil") if args.format in ("mxfp8", "mxfp4") else None)
    if args.plot:
        try:
            import matplotlib  # noqa: F401  (plot() draws with it, after all the measuring)
        except ImportError:
            p.error("--plot needs matplotlib: pip install matplotlib")
    if args.from_json:
        with open(args.from_json) as f:
            meta = json.load(f)
        report(meta, args.plot)
        return meta["records"]
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: no CUDA device")
    args.dtype_t = getattr(torch, args.dtype)
    args.wdtype_t = torch.float32 if args.weight_fp32 else args.dtype_t
    args.cold = args.device == "cuda" and not args.hot
    args.eager = (args.eager or args.device == "cpu") and not args.skip_eager
    if args.layer and args.device != "cuda":
        p.error("--layer needs CUDA")
    if args.shapes:
        shapes = parse_shapes(args.shapes, p.error, R.FORMAT_BLOCK[args.format])
    elif args.call_cost:
        shapes = [(1, 7168)]
    elif args.layer:
        shapes = LAYER_SHAPES
    else:
        default = ("small" if args.device == "cuda" else "cpu") if not blocks else (
            "formats" if args.device == "cuda" else "formats-cpu")
        shapes = GRIDS[args.grid or default]
    cuda = args.device == "cuda"
    l2 = (getattr(torch.cuda.get_device_properties(), "L2_cache_size", 0) or L2_FALLBACK) if cuda else 0
    meta = dict(op=(QUANT_OP_NAMES if blocks else OP_NAMES)[not args.no_residual], device=args.device,
                format=args.format, scale_layout=FORMAT["scale_layout"], scale_mode=FORMAT["scale_mode"],
                name=torch.cuda.get_device_name() if cuda else "cpu", torch=torch.__version__,
                dtype=args.dtype, weight_dtype=str(args.wdtype_t).replace("torch.", ""),
                weight_fp32=args.weight_fp32, norm_convention=args.norm_convention,
                strided_input=args.strided_input, l2_bytes=l2, threads=torch.get_num_threads(),
                loadavg=os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
                mode=("call-cost" if args.call_cost else "layer" if args.layer else "cold-l2" if args.cold else
                      "hot" if cuda else "cpu"),
                warnings=[], skipped=[], records=[])
    if args.call_cost:
        args.calls, args.replays = args.calls or 2000, args.replays or 5
        meta.update(calls=args.calls, replays=args.replays)
        meta["records"] = [call_cost(m, h, args) for m, h in shapes]
    else:
        args.calls = args.calls or (20 if cuda else None)
        args.replays = args.replays or (15 if cuda else 5)
        meta.update(calls=args.calls, replays=args.replays)
        if args.layer:
            meta["records"] = [bench_layer(m, h, args, l2) for m, h in shapes]
        else:
            measure(shapes, args, l2, meta)
    graph_timed = cuda and not args.call_cost  # wall-clock readings are the fastest repeat: no median to doubt
    meta["warnings"] = [w for w in meta["warnings"] + [unreliable(meta["records"]) if graph_timed else None] if w]
    report(meta, args.plot)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(meta, f, indent=1)
    return meta["records"]


if __name__ == "__main__":
    main()
