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


def test_benchmark_no_residual_on_cpu(tmp_path):
    """--no-residual times rmsnorm_fp8_block_quant: its record says so, and its byte model is 5 bytes
    per bf16 element (3 without normed_out), not the fused op's 9 (7)."""
    out = tmp_path / "nores.json"
    run = subprocess.run([sys.executable, str(BENCH), "--device", "cpu", "--shapes", "3x256", "--skip-compile",
                          "--calls", "1", "--replays", "1", "--no-residual", "--json", str(out)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    data = json.loads(out.read_text())
    assert data["op"] == "rmsnorm_fp8_block_quant"
    (rec,) = data["records"]
    assert rec["residual"] is False
    m, h = 3, 256
    assert rec["bytes"] == 5 * m * h + 4 * m * (h // 128) + 2 * h
    assert rec["bytes_nonormed"] == 3 * m * h + 4 * m * (h // 128) + 2 * h
    assert all(rec["us"][k] > 0 for k in ("op", "op_nonormed", "eager"))


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


def test_ab_env_passes_bench_args(tmp_path):
    """A group's optional sixth field goes to both sides' benchmark runs: --no-residual runs, and
    an argument the benchmark does not know fails both sides (so the field is not dropped)."""
    out = tmp_path / "ab.json"
    run = subprocess.run([sys.executable, str(AB_ENV), str(out), "1", "g;bfloat16;2x256;;;--no-residual"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    sides = json.loads(out.read_text())["records"]["g|bfloat16|2x256"]
    assert len(sides["A"]) == len(sides["B"]) == 1
    run = subprocess.run([sys.executable, str(AB_ENV), str(out), "1", "g;bfloat16;2x256;;;--no-such-flag"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode != 0 and "2 benchmark run(s) failed" in run.stderr, run.stderr[-500:]


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
