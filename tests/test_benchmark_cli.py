"""The benchmark's command line on CPU (a few seconds): its help, its JSON (header fields, byte
model, timed columns), --no-residual, --weight-fp32, --from-json, --call-cost, and the cold-L2
buffer sets it would time on a GPU (strides, alignment, count), built here on CPU."""
import importlib.util
import json
import math
import pathlib
import subprocess
import sys

import pytest
import torch

import torch_fp8norm

BENCH = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "bench_fused_add_rmsnorm_fp8_block_quant.py"
FAST = ["--device", "cpu", "--skip-compile", "--calls", "1", "--replays", "1"]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_fp8norm", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_benchmark_help(bench, capsys):
    with pytest.raises(SystemExit) as exit_info:
        bench.main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for flag in ("--shapes", "--grid", "--hot", "--call-cost", "--no-residual", "--weight-fp32", "--from-json",
                 "--max-gb", "--skip-compile", "--skip-eager", "--plot", "cold L2", "% of copy bandwidth"):
        assert flag in out, flag


def test_benchmark_script_on_cpu(tmp_path):
    """The script as a command: a header line that says what was measured, a Markdown table, and a
    JSON whose byte model is 9 bytes per bf16 element (7 without normed_out)."""
    out = tmp_path / "b.json"
    run = subprocess.run([sys.executable, str(BENCH), *FAST, "--shapes", "3x256,2x384", "--json", str(out)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    assert lines[0].startswith("# fused_add_rmsnorm_fp8_block_quant on cpu (")
    for words in ("threads)", "bfloat16", f"torch {torch.__version__}", "wall clock", ".out into preallocated",
                  "allocate their outputs"):
        assert words in lines[0], words
    assert lines[1].startswith("| M | H | copy µs | op µs | op % of copy | no-normed µs (/ op) |")
    assert lines[3].startswith("| 3 | 256 | ") and lines[4].startswith("| 2 | 384 | ")
    data = json.loads(out.read_text())
    assert data["mode"] == "cpu" and data["device"] == "cpu" and data["dtype"] == "bfloat16"
    assert data["op"] == "fused_add_rmsnorm_fp8_block_quant" and data["torch"] == torch.__version__
    assert data["threads"] == torch.get_num_threads() and isinstance(data["warnings"], list)
    for rec, (m, h) in zip(data["records"], [(3, 256), (2, 384)]):
        assert (rec["M"], rec["H"], rec["residual"]) == (m, h, True)
        assert rec["bytes"] == 9 * m * h + 4 * m * (h // 128) + 2 * h
        assert rec["bytes_nonormed"] == 7 * m * h + 4 * m * (h // 128) + 2 * h
        assert rec["sets"] == {"copy": 1, "copy_nonormed": 1, "op": 1}  # CPU: the same buffers
        us = rec["us"]
        assert all(us[k] > 0 for k in ("copy", "copy_nonormed", "op", "op_nonormed", "eager"))
        assert "compile" not in us
        assert us["copy"] == min(us["copy_memcpy"], us["copy_kernel"])
        assert rec["pct_of_copy"]["op"] == pytest.approx(100 * us["copy"] / us["op"])
        assert rec["pct_of_copy"]["op_nonormed"] == pytest.approx(100 * us["copy_nonormed"] / us["op_nonormed"])
        assert rec["gbps"]["op"] == pytest.approx(rec["bytes"] / (us["op"] * 1e3))


def test_benchmark_convention_and_strided_input(bench, tmp_path, capsys):
    """--norm-convention times the op (and its reference) under that convention; --strided-input
    gives the op input rows of row stride 2H; the header and the JSON say both."""
    out = tmp_path / "conv.json"
    bench.main([*FAST, "--shapes", "3x256", "--norm-convention", "vllm", "--strided-input", "--json", str(out)])
    assert "(weight bfloat16, norm_convention vllm, input row stride 2H)" in capsys.readouterr().out
    data = json.loads(out.read_text())
    assert data["norm_convention"] == "vllm" and data["strided_input"] is True
    assert data["records"][0]["us"]["op"] > 0
    sets = bench.op_sets(3, 256, 2, torch.bfloat16, torch.bfloat16, True, "cpu", strided_input=True)
    assert sets[0][0][0].stride() == (512, 1)


def test_benchmark_no_residual_and_fp32_weight(bench, tmp_path, capsys):
    """--no-residual times rmsnorm_fp8_block_quant (5 bytes per bf16 element, 3 without normed_out);
    --weight-fp32 leaves the byte model alone and says so in the header."""
    out = tmp_path / "nores.json"
    bench.main([*FAST, "--shapes", "3x256", "--no-residual", "--weight-fp32", "--skip-eager", "--json", str(out)])
    assert "(weight float32)" in capsys.readouterr().out
    data = json.loads(out.read_text())
    assert data["op"] == "rmsnorm_fp8_block_quant" and data["weight_dtype"] == "float32"
    (rec,) = data["records"]
    m, h = 3, 256
    assert rec["residual"] is False
    assert rec["bytes"] == 5 * m * h + 4 * m * (h // 128) + 2 * h
    assert rec["bytes_nonormed"] == 3 * m * h + 4 * m * (h // 128) + 2 * h
    assert "eager" not in rec["us"] and rec["us"]["op"] > 0


def test_benchmark_packed_column(bench, capsys):
    """--packed times the op writing packed UE8M0 scales beside the float32 ones; its scale
    buffers are int32 [M, ceil(H/512)] strided (1, round_up(M, 4)); --layer needs CUDA."""
    bench.main([*FAST, "--shapes", "3x640", "--packed", "--skip-eager"])
    lines = capsys.readouterr().out.splitlines()
    assert "| packed UE8M0 µs (/ op) |" in lines[1] and lines[3].startswith("| 3 | 640 | ")
    (p,) = bench.packed_scales(3, 640, 1, "cpu")
    assert p.dtype == torch.int32 and p.shape == (3, 2) and p.stride() == (1, 4)
    with pytest.raises(SystemExit):
        bench.main(["--device", "cpu", "--layer"])


def test_benchmark_from_json_reprints(bench, tmp_path, capsys):
    out = tmp_path / "b.json"
    bench.main([*FAST, "--shapes", "3x256", "--json", str(out)])
    first = capsys.readouterr().out
    bench.main(["--from-json", str(out)])
    assert capsys.readouterr().out == first


def test_benchmark_call_cost(bench, tmp_path, capsys):
    out = tmp_path / "cc.json"
    bench.main(["--device", "cpu", "--call-cost", "--shapes", "1x256", "--calls", "20", "--replays", "2",
                "--json", str(out)])
    printed = capsys.readouterr().out.splitlines()
    assert "host cost per eager call, 20 calls back to back" in printed[0]
    assert printed[1].startswith("| M | H | .out µs | functional op µs | Python wrapper µs |")
    data = json.loads(out.read_text())
    assert data["mode"] == "call-cost"
    (rec,) = data["records"]
    assert (rec["M"], rec["H"]) == (1, 256)
    assert sorted(rec["call_us"]) == ["add_", "functional", "out", "wrapper"] and min(rec["call_us"].values()) > 0
    bench.main(["--from-json", str(out)])
    assert capsys.readouterr().out.splitlines() == printed


def test_cold_sets(bench):
    """The cold-L2 sets: enough to cover 4x the L2 (at most MAX_SETS, 1 when hot), each set its own
    views of one arena per stream, block_scale strided like the functional ops' result, every view
    16-byte aligned; the copy pairs hold half the bytes each."""
    l2 = 60 << 20
    sb = bench.set_bytes(1, 2048, torch.bfloat16, torch.bfloat16, True)
    assert sb == 3 * 2 * 2048 + 2048 + 2 * 2048 + 4 * 16 * 4
    assert bench.n_sets(sb, l2, True) == math.ceil(4 * l2 / sb) and bench.n_sets(sb, l2, False) == 1
    assert bench.n_sets(1, l2, True) == bench.MAX_SETS and bench.n_sets(10**12, l2, True) == 1
    m, h, n = 5, 384, 3
    sets = bench.op_sets(m, h, n, torch.bfloat16, torch.float32, True, "cpu")
    assert len(sets) == n
    for ins, out, scale, normed in sets:
        assert [t.shape for t in ins] == [(m, h), (m, h), (h,)] and ins[2].dtype == torch.float32
        assert out.shape == normed.shape == (m, h) and out.dtype == torch.float8_e4m3fn
        assert scale.shape == (m, h // 128) and scale.stride() == torch_fp8norm.block_scale_strides(m, h)
        assert all(t.is_contiguous() for t in (*ins, out, normed))
        assert all(t.data_ptr() % 16 == 0 for t in (*ins, out, scale, normed))
    for k in range(4):  # each stream's sets are disjoint
        ptrs = [(s[k] if k else s[0][0]).data_ptr() for s in sets]
        assert len(set(ptrs)) == n
    ins, out, scale, normed = sets[1]
    torch.ops.fp8norm.fused_add_rmsnorm_fp8_block_quant.out(*ins, 1e-6, False, out=out, block_scale=scale,
                                                            normed_out=normed)
    pairs = bench.copy_sets(1000, 3, "cpu")
    assert all(s.numel() * 4 * 2 >= 1000 and s.data_ptr() % 16 == 0 and d.data_ptr() % 16 == 0 for s, d in pairs)


def test_header_and_table_for_cuda_records(bench, tmp_path, capsys):
    """The CUDA modes' header and the torch.compile columns (not timed on CPU here), from a record
    of the JSON's form."""
    meta = dict(op="fused_add_rmsnorm_fp8_block_quant", device="cuda", name="NVIDIA H200", torch="2.11.0",
                dtype="bfloat16", weight_dtype="bfloat16", l2_bytes=60 << 20, threads=16, calls=20, replays=15,
                mode="cold-l2", warnings=[], records=[dict(
                    M=1, H=2048, us=dict(copy=1.0, copy_nonormed=0.9, op=2.0, op_nonormed=1.8, compile=3.0),
                    pct_of_copy=dict(op=50.0, op_nonormed=50.0, compile=100 / 3))])
    bench.report(meta)
    lines = capsys.readouterr().out.splitlines()
    assert "NVIDIA H200" in lines[0] and "cold L2" in lines[0] and "60 MiB" in lines[0]
    assert lines[1] == ("| M | H | copy µs | op µs | op % of copy | no-normed µs (/ op) | no-normed % of its copy "
                        "| torch.compile µs | op speedup over compile |")
    assert lines[3] == "| 1 | 2048 | 1.00 | 2.00 | 50 | 1.80 (0.90) | 50 | 3.00 | 1.50x |"
    meta["mode"] = "hot"
    assert "hot L2" in bench.header(meta)
    pytest.importorskip("matplotlib")
    bench.plot(meta, tmp_path / "p.png")
    assert (tmp_path / "p.png").stat().st_size > 0


def test_benchmark_argument_errors(bench, monkeypatch, capsys):
    # Mistakes are usage errors before anything is measured, not tracebacks after.
    for shapes, words in (("100x1000", "'100x1000': M must be >= 1 and H a positive multiple of 128"),
                          ("0x256", "M must be >= 1"), ("16-256", "'16-256' is not MxH")):
        with pytest.raises(SystemExit) as exit_info:
            bench.main([*FAST, "--shapes", shapes])
        assert exit_info.value.code == 2 and words in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as where it is not installed
    with pytest.raises(SystemExit) as exit_info:
        bench.main([*FAST, "--shapes", "2x256", "--plot", "p.png"])
    assert exit_info.value.code == 2 and "--plot needs matplotlib" in capsys.readouterr().err


def test_benchmark_max_gb_names_the_need(bench, capsys):
    bench.main([*FAST, "--shapes", "16x4096", "--max-gb", "0.000001"])
    err = capsys.readouterr().err
    assert "skipped 16x4096: needs ~0.00152 GB > --max-gb 1e-06" in err


def _record(copy_memcpy, copy_kernel, op):
    us = dict(copy_memcpy=copy_memcpy, copy_kernel=copy_kernel, copy=min(copy_memcpy, copy_kernel),
              copy_nonormed_memcpy=1.0, copy_nonormed_kernel=1.0, copy_nonormed=1.0, op=op, op_nonormed=1.0)
    return dict(M=16, H=4096, us=us, spread={k: 1.0 for k in us},
                pct_of_copy=dict(op=100 * us["copy"] / op, op_nonormed=100.0))


def test_benchmark_remeasures_implausible_cpu_readings(bench, monkeypatch, capsys):
    # Under load a CPU run once printed copy 6665.92 µs at 16x4096 and "op % of copy 11867": such
    # a record is measured again, and a warning names the shape if it stays implausible.
    good, bogus = _record(20.0, 22.0, 25.0), _record(6665.92, 21.0, 56.2)
    assert bench.implausible(good) is None
    assert bench.implausible(_record(1.33, 4.46, 2.0)) is None  # small copies: a kernel's fixed cost
    assert "copy: memcpy 6665.92 µs, copy kernel 21.00 µs" in bench.implausible(bogus)
    assert "op at 11861% of copy" in bench.implausible(_record(6665.92, 6665.92, 56.2))
    readings = iter([bogus, good])
    monkeypatch.setattr(bench, "bench_shape", lambda *a: next(readings))
    assert bench.main([*FAST, "--shapes", "16x4096"]) == [good]
    assert "WARNING" not in capsys.readouterr().err
    monkeypatch.setattr(bench, "bench_shape", lambda *a: bogus)
    assert bench.main([*FAST, "--shapes", "16x4096"]) == [bogus]
    assert "WARNING: 16x4096: the readings disagree (copy: memcpy 6665.92" in capsys.readouterr().err


def test_benchmark_plot(bench, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    png = tmp_path / "p.png"
    bench.main([*FAST, "--shapes", "2x256,4x256", "--plot", str(png)])
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_benchmark_block_formats(bench, tmp_path, capsys):
    """--format times fp8norm.fused_add_rmsnorm_quant in that format: its bytes (codes 1 B or 1/2 B
    per element, 1 B per scale with the swizzled padding), header, JSON; the buffer sets are the
    functional op's outputs; the options that do not apply are usage errors."""
    out = tmp_path / "fmt.json"
    bench.main([*FAST, "--shapes", "3x96", "--format", "mxfp4", "--json", str(out)])
    assert "format mxfp4 (swizzled scales, rceil)" in capsys.readouterr().out
    data = json.loads(out.read_text())
    assert data["op"] == "fused_add_rmsnorm_quant" and data["format"] == "mxfp4"
    (rec,) = data["records"]
    m, h = 3, 96
    assert rec["bytes"] == 8 * m * h + m * h // 2 + 128 * 4 + 2 * h
    assert rec["bytes_nonormed"] == 6 * m * h + m * h // 2 + 128 * 4 + 2 * h
    bench.main([*FAST, "--shapes", "3x96", "--format", "nvfp4", "--scale-layout", "row", "--json", str(out)])
    (rec,) = json.loads(out.read_text())["records"]
    assert rec["bytes"] == 8 * m * h + m * h // 2 + m * h // 16 + 2 * h and rec["us"]["op"] > 0
    capsys.readouterr()
    for fmt, layout in (("mxfp8", "swizzled"), ("nvfp4", "row")):
        bench.FORMAT.update(format=fmt, scale_layout=layout, scale_mode=None)
        ((ins, o, s, n),) = bench.op_sets(5, 96, 1, torch.bfloat16, torch.bfloat16, True, "cpu")
        want = torch.ops.fp8norm.fused_add_rmsnorm_quant(*ins, 1e-6, *bench.format_args("cpu"))
        assert (o.shape, o.dtype, s.shape, s.dtype) == (want[0].shape, want[0].dtype, want[1].shape, want[1].dtype)
    for argv, words in ((["--format", "mxfp8", "--packed"], "time the fp8_1x128 ops"),
                        (["--scale-layout", "row"], "apply to the block formats"),
                        (["--format", "nvfp4", "--scale-mode", "floor"], "applies to the MX formats"),
                        (["--format", "mxfp8", "--shapes", "2x80"], "H a positive multiple of 32")):
        with pytest.raises(SystemExit) as exit_info:
            bench.main([*FAST, "--shapes", "2x256", *argv])
        assert exit_info.value.code == 2 and words in capsys.readouterr().err, argv
    bench.main([*FAST, "--shapes", "2x256", "--skip-eager"])  # and back to fp8_1x128
    assert json.loads(out.read_text())["format"] == "nvfp4" and "format" not in capsys.readouterr().out.split("\n")[0]
