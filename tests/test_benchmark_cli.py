"""The benchmark's command line: its help prints (argparse formats every help string)."""
import importlib.util
import pathlib

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
