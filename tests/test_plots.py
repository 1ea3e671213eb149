"""bench/plots.py: the benchmarks' JSON lines drawn as PNGs (a tiny saved file of each
benchmark's lines), byte-identical from the same lines, and bad input refused in one line."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "bench" / "plots.py"
PNG = b"\x89PNG\r\n\x1a\n"

# One or two lines of each benchmark, as it writes them (the keys the plots read, and some
# they do not); the summaries and failures the plots skip.
TINY = [
    {"program": "adder", "n_layers": 3, "floor": 2, "compile_seconds": 0.2, "exact": 1.0},
    {"program": "caesar", "n_layers": 5, "floor": 5, "compile_seconds": 0.1, "exact": 1.0},
    {"case": "primitive/adder", "kind": "primitive", "pipeline": "none", "ops": 120,
     "layers": 14, "floor": 11, "compile_seconds": 0.4, "anchor_same_graph_greedy": 16,
     "anchor_same_graph_cpsat": 11},
    {"case": "primitive/adder", "kind": "primitive", "pipeline": "default", "ops": 120,
     "layers": 9, "floor": 9, "compile_seconds": 0.5, "anchor_same_graph_greedy": 16,
     "anchor_same_graph_cpsat": 11},
    {"case": "synthetic/chain", "kind": "synthetic", "pipeline": "none", "ops": 2000,
     "layers": 40, "floor": 40, "compile_seconds": 1.5},
    {"case": "library/adder", "kind": "library", "pipeline": "none", "ops": 90,
     "error": "residual width binds", "smallest_d": 64},
    {"case": "library/oops", "kind": "library", "build_error": "ImportError: not yet"},
    {"n_ops": 10000, "d": 2048, "seconds": {"build": 1.0, "schedule": 2.0, "weights": 1.0,
                                           "module": 0.5}},
    {"case": "renderer_small", "d": 64, "n_layers": 30, "floor": 12, "params": 100},
    {"case": "renderer_small", "d": 128, "n_layers": 12, "floor": 12, "params": 300},
    {"case": "renderer_small", "points": 2, "smallest_d": 64},
    {"program": "sort", "max_seq_len": 5, "tw": {"layers": 3, "params_allocated": 10139},
     "tracr": {"layers": 3, "params_allocated": 11394}},
    {"program": "reverse", "max_seq_len": 5, "tw": {"layers": 3, "params_allocated": 6532},
     "tracr": {"error": "took too long"}},
    {"summary": True, "rows": 2},
]
ALL_PLOTS = ["compile_time.png", "depth_width.png", "layers_vs_floor.png", "vs_torchwright.png",
             "vs_tracr.png"]


@pytest.fixture(scope="module")
def plots():
    spec = importlib.util.spec_from_file_location("tw_bench_plots", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (its dataclasses look their module up)
    spec.loader.exec_module(module)
    return module


def _write(path: Path, rows) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_every_plot_is_written_from_a_tiny_saved_file(plots, tmp_path, capsys):
    data = _write(tmp_path / "tiny.jsonl", TINY)
    assert plots.main([str(data), "--out", str(tmp_path / "out")]) == 0
    written = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert written == ALL_PLOTS
    for name in written:
        png = (tmp_path / "out" / name).read_bytes()
        assert png.startswith(PNG) and len(png) > 5000, name
    assert capsys.readouterr().out.split() == [str(tmp_path / "out" / n) for n in
                                               ["layers_vs_floor.png", "compile_time.png",
                                                "depth_width.png", "vs_torchwright.png",
                                                "vs_tracr.png"]]


def test_the_lines_sort_into_the_plots_they_feed(plots, tmp_path):
    lines = plots.read_files([str(_write(tmp_path / "tiny.jsonl", TINY))])
    assert [label for label, _, _ in lines.depth] == [
        "adder (hand-tuned)", "caesar (hand-tuned)", "primitive/adder (none)",
        "primitive/adder (default)"]
    assert ("layered graphs (compile_scaling)", 10000, 3.5) in lines.compiles
    assert len(lines.compiles) == 4  # 3 compiled primitive_graphs lines, 1 compile_scaling
    assert lines.curves == {"renderer_small": [(64, 30, 12), (128, 12, 12)]}
    assert lines.torchwright == {"adder": {"torchwright greedy": 16, "torchwright CP-SAT": 11,
                                           "tw, pipeline none": 14,
                                           "tw, pipeline default": 9}}
    assert [(r["program"], r["n"]) for r in lines.tracr] == [("sort", 5)]


def test_a_plot_without_lines_is_not_written(plots, tmp_path):
    data = _write(tmp_path / "sweep.jsonl", TINY[8:11])
    assert plots.main([str(data), "--out", str(tmp_path / "out")]) == 0
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["depth_width.png"]


def test_the_same_lines_give_byte_identical_pngs(plots, tmp_path):
    data = str(_write(tmp_path / "tiny.jsonl", TINY))
    plots.main([data, "--out", str(tmp_path / "a")])
    plots.main([data, "--out", str(tmp_path / "b")])
    for name in ALL_PLOTS:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


@pytest.mark.parametrize("rows, message", [
    ([TINY[0], "{not json"], r"bad\.jsonl:2: not JSON"),
    ([TINY[0], [1, 2]], r"bad\.jsonl:2: not a benchmark line"),
    ([{"hello": 1}], r"bad\.jsonl:1: not a line of a known benchmark .*keys: hello"),
    ([TINY[6], TINY[13]], r"nothing to plot in .*bad\.jsonl"),
])
def test_bad_input_is_one_line_and_exit_1(plots, tmp_path, capsys, rows, message):
    import re

    data = _write(tmp_path / "bad.jsonl", rows)
    with pytest.raises(SystemExit) as e:
        plots.main([str(data), "--out", str(tmp_path / "out")])
    assert e.value.code == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("plots: error: ")
    assert re.search(message, err), err
    assert not (tmp_path / "out").exists()


def test_the_command_line_refuses_a_missing_file_in_one_line(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "absent.jsonl"),
                           "--out", str(tmp_path / "out")], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.splitlines() == [
        f"plots: error: cannot read {tmp_path / 'absent.jsonl'}: No such file or directory"]


def test_files_or_run_not_both_nor_neither(plots, tmp_path, capsys):
    for argv in ([], ["x.jsonl", "--run"], ["x.jsonl", "--full"]):
        with pytest.raises(SystemExit):
            plots.main(argv)
        assert capsys.readouterr().err.startswith("plots: error: ")
