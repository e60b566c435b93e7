"""One table from several benchmark JSON files of one run (benchmarks/gpu_variants.sh):
op µs and % of copy per variant and shape, op without normed_out as a ratio to the full op.

    python benchmarks/compare_variants.py v_main.json v_pdl0.json ... [--json all.json]
"""
import argparse
import json
import os


def main():
    p = argparse.ArgumentParser()
    p.add_argument("files", nargs="+")
    p.add_argument("--json", default=None)
    args = p.parse_args()
    runs = {}
    for f in args.files:
        with open(f) as fh:
            runs[os.path.basename(f)[2:-5]] = json.load(fh)["records"]
    names = sorted(runs, key=lambda n: (n != "main", n))
    shapes = [(r["M"], r["H"]) for r in runs[names[0]]]
    print("| M | H | copy µs | " + " | ".join(f"{n} µs (% copy, no-normed x)" for n in names) + " |")
    print("|" + "---|" * (3 + len(names)))
    for m, h in shapes:
        cells = [str(m), str(h)]
        first = next(r for r in runs[names[0]] if (r["M"], r["H"]) == (m, h))
        cells.append(f"{first['us']['copy']:.2f}")
        for n in names:
            r = next((r for r in runs[n] if (r["M"], r["H"]) == (m, h)), None)
            if r is None:
                cells.append("-")
                continue
            ratio = r["us"]["op_nonormed"] / r["us"]["op"]
            cells.append(f"{r['us']['op']:.2f} ({r['pct_of_copy']['op']:.0f}%, {ratio:.2f}x)")
        print("| " + " | ".join(cells) + " |")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(runs, fh, indent=1)


if __name__ == "__main__":
    main()
