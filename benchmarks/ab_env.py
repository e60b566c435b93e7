"""Same-binary A/B of launch switches: groups of shapes, each timed with two environments (A, B)
alternating within every pass (A first in even passes, B first in odd ones), so both sides see
the same machine state; medians and B / A,
of the op with and without normed_out.

    python benchmarks/ab_env.py OUT.json PASSES 'name;dtype;MxH,...;ENV_A;ENV_B[;BENCH_ARGS]' ...

ENV_A / ENV_B: space-separated VAR=value pairs (may be empty), e.g.
    python benchmarks/ab_env.py ab.json 3 \\
        'pairs;bfloat16;64x4096,48x5120;FP8NORM_PDL=0 FP8NORM_TUNE=cluster=2;FP8NORM_PDL=0'
BENCH_ARGS (optional): more arguments for both sides' benchmark runs, e.g. --no-residual.
OUT.json holds every pass of every shape (`records["name|dtype|MxH"]["A" / "B"]`: the
benchmark's `us` dicts); the table goes to stdout; the exit status is 1 if any run failed. Each run is a fresh process of
bench_fused_add_rmsnorm_fp8_block_quant.py (--skip-eager --skip-compile), ~5-10 s.
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile

BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bench_fused_add_rmsnorm_fp8_block_quant.py")


def parse_env(spec):
    env = dict(os.environ)
    for kv in spec.split():
        key, value = kv.split("=", 1)
        env[key] = value
    return env


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    out, passes, groups = sys.argv[1], int(sys.argv[2]), [g.split(";") for g in sys.argv[3:]]
    for g in groups:
        if len(g) not in (5, 6):
            sys.exit(f"a group is 'name;dtype;shapes;ENV_A;ENV_B' or 'name;dtype;shapes;ENV_A;ENV_B;BENCH_ARGS', "
                     f"got {';'.join(g)!r}")
    records, failures = {}, 0
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = os.path.join(tmpdir, "run.json")
        for p in range(passes):
            for name, dtype, shapes, env_a, env_b, *extra in groups:
                # A then B in even passes, B then A in odd ones: a bias of the second run of a
                # pair (or of the first) falls on both sides alike.
                sides = (("A", env_a), ("B", env_b)) if p % 2 == 0 else (("B", env_b), ("A", env_a))
                for side, spec in sides:
                    run = subprocess.run([sys.executable, BENCH, "--shapes", shapes, "--dtype", dtype,
                                          "--skip-eager", "--skip-compile", "--json", tmp,
                                          *(extra[0].split() if extra else [])],
                                         env=parse_env(spec), capture_output=True, text=True)
                    if run.returncode:
                        failures += 1
                        print(f"{name} {side} ({spec}) failed:\n{run.stderr[-2000:]}", file=sys.stderr)
                        continue
                    with open(tmp) as f:
                        for rec in json.load(f)["records"]:
                            key = f"{name}|{dtype}|{rec['M']}x{rec['H']}"
                            records.setdefault(key, {}).setdefault(side, []).append(rec["us"])
    with open(out, "w") as f:
        json.dump(dict(groups=[";".join(g) for g in groups], records=records), f, indent=1)

    def median(passes, field):
        return statistics.median(p[field] for p in passes) if passes else float("nan")

    print(f"| {'group|dtype|shape':34s} | A op µs | B op µs | B / A | A no-normed µs | B no-normed µs | B / A "
          f"| A copy µs | B copy µs |")
    print("|---|---|---|---|---|---|---|---|---|")
    for key, sides in records.items():
        a, b = median(sides.get("A"), "op"), median(sides.get("B"), "op")
        na, nb = median(sides.get("A"), "op_nonormed"), median(sides.get("B"), "op_nonormed")
        print(f"| {key:34s} | {a:.3f} | {b:.3f} | {b / a:.3f} | {na:.3f} | {nb:.3f} | {nb / na:.3f} | "
              f"{median(sides.get('A'), 'copy'):.3f} | {median(sides.get('B'), 'copy'):.3f} |")
    if failures:
        sys.exit(f"{failures} benchmark run(s) failed: the table lacks their passes")


if __name__ == "__main__":
    main()
