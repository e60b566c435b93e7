"""The benchmark command lines: the benchmark's help prints (argparse formats every help string),
and benchmarks/ab_env.py times both sides, refuses a malformed group and fails when a run fails."""
import importlib.util
import json
import pathlib
import subprocess
import sys

import pytest

BENCH = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "bench_fused_add_rmsnorm_fp8_block_quant.py"


def test_benchmark_help(capsys):
    spec = importlib.util.spec_from_file_location("bench_fp8norm", BENCH)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    with pytest.raises(SystemExit) as exit_info:
        bench.main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "--shapes" in out and "% of copy bandwidth" in out


AB_ENV = BENCH.parent / "ab_env.py"


def test_ab_env_runs_both_sides(tmp_path):
    """benchmarks/ab_env.py: one pass, two environments, each shape timed on both sides."""
    out = tmp_path / "ab.json"
    run = subprocess.run([sys.executable, str(AB_ENV), str(out), "1",
                          "g;bfloat16;2x256,3x384;FP8NORM_CPU_ISA=baseline;"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    records = json.loads(out.read_text())["records"]
    assert sorted(records) == ["g|bfloat16|2x256", "g|bfloat16|3x384"]
    for sides in records.values():
        assert len(sides["A"]) == len(sides["B"]) == 1 and sides["A"][0]["op"] > 0 and sides["B"][0]["op"] > 0
    # the table's row: the op and the op without normed_out on both sides, B / A of each, both copies
    row = next(line for line in run.stdout.splitlines() if "g|bfloat16|2x256" in line)
    assert len(row.strip().strip("|").split(" | ")) == 9, row


def test_ab_env_rejects_a_malformed_group(tmp_path):
    run = subprocess.run([sys.executable, str(AB_ENV), str(tmp_path / "ab.json"), "1", "g;bfloat16;2x256"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode != 0 and "name;dtype;shapes;ENV_A;ENV_B" in run.stderr


def test_ab_env_fails_when_a_run_fails(tmp_path):
    """A side whose benchmark run fails makes the exit status non-zero (no silent half table).
    B's interpreter cannot start (no standard library under PYTHONHOME): a failure on every
    machine, CPU or GPU."""
    run = subprocess.run([sys.executable, str(AB_ENV), str(tmp_path / "ab.json"), "1",
                          "g;bfloat16;2x256;;PYTHONHOME=/nonexistent"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode != 0 and "1 benchmark run(s) failed" in run.stderr
