"""Benchmark of fp8norm.fused_add_rmsnorm_fp8_block_quant (or, with --no-residual,
fp8norm.rmsnorm_fp8_block_quant) against eager PyTorch and torch.compile.

For each (M, H): the op, the eager reference (torch_fp8norm.reference), torch.compile of the
reference, and a device-to-device copy of the same number of bytes (half read, half written),
all timed in the same run (the copy: the faster of cudaMemcpy and an elementwise copy kernel).
Prints µs, GB/s (byte model below) and % of copy bandwidth
(copy time / kernel time, as in shared/anchors/h200.md).

Byte model (bf16): read input, read residual, write residual, write normed (4 x 2 B), write fp8
(1 B) per element, plus 4 B per 128-element scale and the weight once:
    bytes = 9*M*H + 4*M*H/128 + 2*H      (normed_out=None: 7*M*H + ...)
--no-residual (read input, write normed, write fp8): 5*M*H + ... (normed_out=None: 3*M*H + ...).

CUDA times are medians over samples of back-to-back CUDA-graph replays (each replay runs the call
`--calls` times back to back; each sample lasts >= ~0.5 ms); CPU times are medians of wall-clock
repeats.

    python benchmarks/bench_fused_add_rmsnorm_fp8_block_quant.py [--device cuda] [--grid full] [--json out.json]
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

GRIDS = {
    # (M values, H values)
    "cpu": ([1, 16, 1024], [1152, 4096, 7168]),
    "small": ([1, 128, 2048, 16384], [2048, 4096, 7168, 8192, 16384]),
    "full": ([1, 16, 128, 512, 2048, 8192, 16384, 32768],
             [1152, 2048, 4096, 5120, 6144, 7168, 8192, 16384, 32768, 65536]),
}


# The op timed, by whether it has a residual: the name of its torch.ops.fp8norm op and of its
# torch_fp8norm.reference function.
OP_NAMES = {True: "fused_add_rmsnorm_fp8_block_quant", False: "rmsnorm_fp8_block_quant"}


def byte_count(m: int, h: int, dtype: torch.dtype, normed: bool = True, residual: bool = True) -> int:
    e = torch.empty((), dtype=dtype).element_size()
    streams = (4 if normed else 3) if residual else (2 if normed else 1)  # 2-byte streams
    per_elem = streams * e + 1
    return per_elem * m * h + 4 * m * (h // 128) + e * h


def column_major_scales(m: int, h: int, device) -> torch.Tensor:
    """An uninitialized block_scale [M, H/128] in the layout the functional ops return."""
    return torch.empty_strided((m, h // 128), torch_fp8norm.block_scale_layout_strides(m),
                               dtype=torch.float32, device=device)


def copy_buffers(nbytes: int, device):
    """(src, dst) int32 buffers of nbytes / 2 each: a copy between them moves nbytes (half read,
    half written), the op's "% of copy" baseline."""
    src = torch.randint(0, 2**31 - 1, ((nbytes // 2 + 3) // 4,), dtype=torch.int32, device=device)
    return src, torch.empty_like(src)


def time_copies(src, dst, timer, calls: int, replays: int):
    """(memcpy µs, kernel µs): the same-bytes copy as cudaMemcpy (copy_) and as an elementwise
    kernel (x | 0). "% of copy" takes the faster: in CUDA graphs a mid-size memcpy can be slower
    than a kernel copy (606 MB: 224.7 against 143.9 µs; benchmarks/NOTES.md, v29)."""
    return (timer(lambda: dst.copy_(src), calls, replays),
            timer(lambda: torch.bitwise_or(src, 0, out=dst), calls, replays))


def cuda_graph(fn, calls: int):
    """A CUDA graph of `calls` back-to-back calls of fn (after three warm-up calls on a side
    stream, as graph capture wants)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    return g


def time_cuda(fn, calls: int, replays: int) -> float:
    """Median µs per call. A CUDA graph holds `calls` back-to-back calls; each timed sample
    replays it back to back for >= ~0.5 ms (so that the GPU stays busy and clocked up, and launch
    gaps stay out), and the median over `replays` samples is taken."""
    g = cuda_graph(fn, calls)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(3):
        g.replay()
    start.record()
    g.replay()
    end.record()
    end.synchronize()
    inner = max(1, min(200, math.ceil(500.0 / max(start.elapsed_time(end) * 1000.0, 1e-3))))
    times = []
    for _ in range(replays):
        start.record()
        for _ in range(inner):
            g.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000.0 / (calls * inner))
    return statistics.median(times)


def print_probe_rows(m: int, h: int, rows, copy_us: float | None = None):
    """The probes' report: one (name, µs) line per row under an "M = .., H = .." header, with
    the % of `copy_us` (a same-run copy of the same bytes) when given."""
    print(f"M = {m}, H = {h} (bf16), µs")
    width = max(len(name) for name, _ in rows)
    for name, t in rows:
        pct = f"  ({100.0 * copy_us / t:5.1f}% of copy)" if copy_us is not None else ""
        print(f"  {name:>{width}}: {t:9.2f}{pct}")
    sys.stdout.flush()


def time_cpu(fn, calls: int, replays: int) -> float:
    fn()
    times = []
    for _ in range(replays):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - t0) * 1e6 / calls)
    return statistics.median(times)


def bench_shape(m, h, dtype, device, args, compiled_ref):
    gen = torch.Generator(device="cpu").manual_seed(m * 7919 + h)
    residual = not args.no_residual
    x = torch.randn(m, h, generator=gen).to(dtype).to(device)
    r = torch.randn(m, h, generator=gen).to(dtype).to(device) if residual else None
    w = (torch.randn(h, generator=gen) * 0.5 + 1).to(torch.float32 if args.weight_fp32 else dtype).to(device)
    out = torch.empty(m, h, dtype=torch.float8_e4m3fn, device=device)
    scale = column_major_scales(m, h, device)
    normed = torch.empty(m, h, dtype=dtype, device=device)
    ins = (x, r, w) if residual else (x, w)  # the op's and the reference's leading arguments
    op = getattr(torch.ops.fp8norm, OP_NAMES[residual]).out
    ref = getattr(R, OP_NAMES[residual])  # the reference module's function of the same name
    nbytes = byte_count(m, h, dtype, residual=residual)
    nbytes_nonormed = byte_count(m, h, dtype, normed=False, residual=residual)
    copies = {"copy": copy_buffers(nbytes, device), "copy_nonormed": copy_buffers(nbytes_nonormed, device)}

    timer = time_cuda if device == "cuda" else time_cpu
    big = m * h >= (1 << 24)
    calls = args.calls if not big else max(2, args.calls // 10)
    replays = args.replays
    t = {}
    for key, (src, dst) in copies.items():
        t[key + "_memcpy"], t[key + "_kernel"] = time_copies(src, dst, timer, calls, replays)
        t[key] = min(t[key + "_memcpy"], t[key + "_kernel"])
    t["op"] = timer(lambda: op(*ins, 1e-6, False, out=out, block_scale=scale, normed_out=normed), calls, replays)
    t["op_nonormed"] = timer(lambda: op(*ins, 1e-6, False, out=out, block_scale=scale, normed_out=None), calls, replays)
    if not args.skip_eager:
        t["eager"] = timer(lambda: ref(*ins, 1e-6, False), calls, replays)
    if compiled_ref is not None:
        t["compile"] = timer(lambda: compiled_ref(*ins), calls, replays)
    rec = dict(M=m, H=h, dtype=str(dtype).replace("torch.", ""), device=device, residual=residual,
               bytes=nbytes, bytes_nonormed=nbytes_nonormed, us=t)
    rec["gbps"] = {k: (nbytes_nonormed if "nonormed" in k else nbytes) / (v * 1e3) for k, v in t.items()}
    rec["pct_of_copy"] = {k: 100.0 * (t["copy_nonormed"] if "nonormed" in k else t["copy"]) / v
                          for k, v in t.items() if not k.startswith("copy")}
    return rec


def _reference_layer(*ins):
    """The reference with the benchmark's eps and scale_ue8m0: (x, r, w), or (x, w) without a residual."""
    return getattr(R, OP_NAMES[len(ins) == 3])(*ins, 1e-6, False)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--grid", choices=sorted(GRIDS), default=None, help="default: cpu on CPU, small on CUDA")
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    p.add_argument("--calls", type=int, default=None, help="calls per timed replay")
    p.add_argument("--replays", type=int, default=None)
    p.add_argument("--skip-eager", action="store_true")
    p.add_argument("--skip-compile", action="store_true")
    p.add_argument("--json", default=None, help="write the results to this path")
    p.add_argument("--plot", default=None, help="write a PNG: %% of copy bandwidth vs M, one line per H")
    p.add_argument("--from-json", default=None, help="plot/print an earlier --json file instead of measuring")
    p.add_argument("--compile-from", default=None,
                   help="with --from-json: take the torch.compile columns from this other run's JSON "
                        "(its own times and %% of its own copy; the op code does not change them)")
    p.add_argument("--shapes", default=None, help="MxH list instead of a grid, e.g. 1x2048,16384x4096")
    p.add_argument("--max-gb", type=float, default=40.0, help="skip shapes needing more device memory")
    p.add_argument("--no-residual", action="store_true",
                   help="time rmsnorm_fp8_block_quant (no residual: 5 bytes per bf16 element, 3 "
                        "without normed_out) instead of fused_add_rmsnorm_fp8_block_quant")
    p.add_argument("--weight-fp32", action="store_true",
                   help="a float32 weight (the ops take the input's dtype or float32; the byte count "
                        "keeps the input's: the weight is read once)")
    args = p.parse_args(argv)
    if args.from_json:
        with open(args.from_json) as f:
            data = json.load(f)
        if args.compile_from:
            with open(args.compile_from) as f:
                other = {(r["M"], r["H"]): r for r in json.load(f)["records"]}
            for r in data["records"]:
                o = other.get((r["M"], r["H"]))
                if o is not None and "compile" in o["us"]:
                    for key in ("us", "gbps", "pct_of_copy"):
                        r[key]["compile"] = o[key]["compile"]
            speedups = [r["us"]["compile"] / r["us"]["op"] for r in data["records"] if "compile" in r["us"]]
            if speedups:
                geo = math.exp(sum(math.log(x) for x in speedups) / len(speedups))
                print(f"op vs torch.compile ({args.compile_from}): {len(speedups)} shapes, least "
                      f"{min(speedups):.2f}x, geometric mean {geo:.2f}x")
        print_table(data["records"])
        if args.plot:
            title = f"{data.get('name', '')}, {data.get('dtype', '')}"
            if args.compile_from:
                title += f"; torch.compile: {os.path.basename(args.compile_from)}"
            plot(data["records"], args.plot, title, data.get("op", OP_NAMES[True]))
        return data["records"]
    dtype = getattr(torch, args.dtype)
    grid = args.grid or ("small" if args.device == "cuda" else "cpu")
    args.calls = args.calls or (20 if args.device == "cuda" else 3)
    args.replays = args.replays or (15 if args.device == "cuda" else 5)
    ms, hs = GRIDS[grid]
    if args.shapes:
        wanted = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]

    try:
        from tqdm import tqdm
    except ImportError:  # the progress bar is optional
        def tqdm(it, **_):
            return it
    shapes = wanted if args.shapes else [(m, h) for h in hs for m in ms]
    shapes = [(m, h) for m, h in shapes
              if byte_count(m, h, dtype, residual=not args.no_residual) * 1.6 / 1e9 <= args.max_gb]
    records = []
    for m, h in tqdm(shapes, desc="shapes", file=sys.stderr):
        compiled_ref = None
        if not args.skip_compile:
            torch._dynamo.reset()  # a fresh static-shape compilation for every shape
            compiled_ref = torch.compile(_reference_layer, dynamic=False)
        records.append(bench_shape(m, h, dtype, args.device, args, compiled_ref))
        if args.device == "cuda":
            torch.cuda.empty_cache()

    print_table(records)
    name = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    op_name = OP_NAMES[not args.no_residual]
    if args.plot:
        plot(records, args.plot, f"{name}, {args.dtype}", op_name)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(device=args.device, name=name, torch=torch.__version__, dtype=args.dtype,
                           op=op_name, weight_fp32=args.weight_fp32, records=records), f, indent=1)
    return records


def plot(records, path, title, op_name=None):
    """% of copy bandwidth vs M, one line per H: the op solid, torch.compile dashed."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 5.5))
    hs = sorted({r["H"] for r in records})
    colors = plt.cm.viridis([i / max(1, len(hs) - 1) for i in range(len(hs))])
    for h, color in zip(hs, colors):
        rs = sorted((r for r in records if r["H"] == h), key=lambda r: r["M"])
        ms = [r["M"] for r in rs]
        ax.plot(ms, [r["pct_of_copy"]["op"] for r in rs], "-o", color=color, label=f"H={h}", ms=3)
        if all("compile" in r["pct_of_copy"] for r in rs):
            ax.plot(ms, [r["pct_of_copy"]["compile"] for r in rs], "--", color=color, alpha=0.6)
    ax.axhline(100, color="gray", lw=0.8)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("M (rows)")
    ax.set_ylabel("% of same-bytes copy bandwidth")
    ax.set_title(f"{op_name or OP_NAMES[True]} ({title})\nsolid: fp8norm, dashed: torch.compile",
                 fontsize=10)
    ax.legend(ncol=3, fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def print_table(records):
    cols = [("op", "op"), ("op_nonormed", "op no-normed"), ("eager", "eager"), ("compile", "compile")]
    cols = [c for c in cols if any(c[0] in r["us"] for r in records)]
    head = "| M | H | copy µs | " + " | ".join(f"{n} µs | {n} GB/s | {n} % copy" for _, n in cols) + " |"
    print(head)
    print("|" + "---|" * (3 + 3 * len(cols)))
    for r in records:
        cells = [str(r["M"]), str(r["H"]), f"{r['us']['copy']:.2f}"]
        for k, _ in cols:
            if k in r["us"]:
                cells += [f"{r['us'][k]:.2f}", f"{r['gbps'][k]:.0f}", f"{r['pct_of_copy'][k]:.0f}"]
            else:
                cells += ["-", "-", "-"]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
