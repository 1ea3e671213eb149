"""Progress of long work (`lowering/progress.py`): the `progress=` callback of `compile`, the
reports of the sequential-scope search and the exports, and the tools' terminal bar (drawn on
stderr only when stdout is a terminal, never with --quiet, never into an output)."""

from __future__ import annotations

import hashlib
import os
import pty
import select
import subprocess
import sys

import numpy as np
import pytest

from tw_lowering import compile  # noqa: A004
from tw_lowering.progress import LONG_GRAPH_OPS, count_ops, reporting, track
from twdialect import ArgumentError
from twdialect import ops as tw

BIN = os.path.dirname(sys.executable)


def long_graph():
    """A graph of LONG_GRAPH_OPS ops that compiles in seconds: a 4-wide value rotated by free
    views (slices and concats: no task) 3,400 times, a linear every 16th step."""
    with tw.Graph("main", verify=False) as g:
        v = tw.input("x", 4, value_range=(-1, 1))
        for i in range(3400):
            v = tw.concat(tw.slice(v, 1, 3), tw.slice(v, 0, 1))
            if i % 16 == 0:
                v = tw.linear(v, np.eye(4) * 0.5)
        tw.output("y", v)
    return g.module


@pytest.fixture(scope="module")
def long_module():
    module = long_graph()
    assert count_ops(module) >= LONG_GRAPH_OPS
    return module


class Recorder:
    """A fake progress callback: every (stage, done, total) it hears, in order."""

    def __init__(self):
        self.calls: list[tuple[str, int, int]] = []

    def __call__(self, stage: str, done: int, total: int) -> None:
        self.calls.append((stage, done, total))

    def stages(self) -> list[str]:
        return list(dict.fromkeys(stage for stage, _, _ in self.calls))

    def of(self, stage: str) -> list[tuple[int, int]]:
        return [(done, total) for s, done, total in self.calls if s == stage]


def _digest(ct) -> str:
    h = hashlib.sha256()
    for name, t in ct.named_buffers():
        h.update(name.encode())
        h.update(t.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def test_compile_reports_its_stages_in_order_on_a_long_graph(long_module):
    heard = Recorder()
    ct = compile(long_module, d=64, d_head=16, pipeline="cse,dce", progress=heard)
    assert heard.stages() == ["passes", "schedule", "weights", "module"]
    assert heard.of("passes") == [(1, 2), (2, 2), (2, 2)]  # each pass, then the stage done
    placed = sum(1 for s in ct.schedule.slot if s >= 0)
    schedule = heard.of("schedule")
    assert schedule[-1] == (placed, placed) and all(n == placed for _, n in schedule)
    assert all(a <= b for (a, _), (b, _) in zip(schedule, schedule[1:]))  # one trial: rising
    assert heard.of("weights") == [(k, placed) for k in range(1, placed + 1)]
    assert heard.of("module") == [(0, 1), (1, 1)]


def test_listening_changes_nothing_the_compile_returns(long_module):
    quiet = compile(long_module, d=64, d_head=16)
    heard = compile(long_module, d=64, d_head=16, progress=Recorder())
    assert _digest(quiet) == _digest(heard)
    assert quiet.stats.n_layers == heard.stats.n_layers


def test_a_progress_that_is_not_callable_is_refused_before_any_work(long_module):
    with pytest.raises(ArgumentError, match="compile: progress must be None or a callable"):
        compile(long_module, d=64, d_head=16, progress="yes")


def test_the_sequential_scope_search_reports_the_budget_it_spends():
    from tw_lowering.sequential_scope import SEARCH_BUDGET, choose_batch_sizes
    from twdialect.interp import find_graph

    sys.path.insert(0, os.path.dirname(__file__))
    from test_sequential_scope import bulge_loop

    heard = Recorder()
    with reporting(heard):
        choices = choose_batch_sizes(find_graph(bulge_loop(6, 32)), d=64, d_head=16)
    spent = heard.of("sequential-scope search")
    assert any(c.searched for c in choices.values()) and spent
    assert all(n == SEARCH_BUDGET for _, n in spent)
    assert [d for d, _ in spent] == sorted(d for d, _ in spent) and spent[-1][0] <= SEARCH_BUDGET


def test_an_export_reports_each_layer_written(tmp_path):
    pytest.importorskip("onnx")
    from tw_lowering.export import export
    from twdialect.random_graphs import layered_graph

    ct = compile(layered_graph(100, tokens=8)[0], d=256, d_head=8)
    for fmt, path in (("onnx", tmp_path / "g-onnx"), ("tlens", tmp_path / "g-tl")):
        heard = Recorder()
        with reporting(heard):
            export(ct, str(path), fmt)
        assert heard.of("export")[-1] == (ct.stats.n_layers, ct.stats.n_layers), fmt


def test_track_reports_each_item_done():
    heard = Recorder()
    with reporting(heard):
        assert list(track("abc", "rows")) == ["a", "b", "c"]
    assert heard.calls == [("rows", 0, 3), ("rows", 1, 3), ("rows", 2, 3), ("rows", 3, 3)]


def test_reporting_nests_and_restores_the_outer_receiver():
    outer, inner = Recorder(), Recorder()
    with reporting(outer):
        with reporting(inner):
            list(track("a", "in"))
        with reporting(None):  # None keeps the outer receiver
            list(track("b", "kept"))
    assert inner.stages() == ["in"] and outer.stages() == ["kept"]


# --------------------------------------------------------------------------------------
# The tools' bar: a subprocess on a pipe, and one on a terminal (a pty)
# --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def long_file(tmp_path_factory):
    """A relu chain of LONG_GRAPH_OPS ops as .mlir text (cheap to parse and to run cse on)."""
    lines = ["builtin.module {", "  tw.graph @main {",
             '    %v0 = tw.input "x" <-1.0, 1.0> : !tw.vec<1>']
    lines += [f"    %v{i} = tw.relu %v{i - 1} : !tw.vec<1>" for i in range(1, LONG_GRAPH_OPS)]
    lines += [f'    tw.output "y" %v{LONG_GRAPH_OPS - 1} : !tw.vec<1>', "  }", "}"]
    path = tmp_path_factory.mktemp("long") / "chain.mlir"
    path.write_text("\n".join(lines) + "\n")
    return path


def _tw_opt(long_file, out, *flags) -> list[str]:
    return [os.path.join(BIN, "tw-opt"), str(long_file), "-p", "cse", "-o", str(out), *flags]


def _run_on_a_terminal(argv: list[str]) -> tuple[int, bytes]:
    """Run `argv` with stdout and stderr on terminals (ptys); its exit code and stderr."""
    out_master, out_slave = pty.openpty()
    err_master, err_slave = pty.openpty()
    proc = subprocess.Popen(argv, stdout=out_slave, stderr=err_slave, close_fds=True)
    os.close(out_slave)
    os.close(err_slave)
    err, reading = b"", [out_master, err_master]
    while reading:
        ready, _, _ = select.select(reading, [], [], 1.0)
        for fd in ready:
            try:
                data = os.read(fd, 1 << 16)
            except OSError:  # the child closed its end
                data = b""
            if not data:
                reading.remove(fd)
            elif fd == err_master:
                err += data
        if not ready and proc.poll() is not None:
            break
    os.close(out_master)
    os.close(err_master)
    return proc.wait(timeout=300), err


def test_no_bar_when_stdout_is_not_a_terminal(long_file, tmp_path):
    done = subprocess.run(_tw_opt(long_file, tmp_path / "out.mlir"), capture_output=True,
                          timeout=300)
    assert done.returncode == 0 and done.stderr == b""
    assert (tmp_path / "out.mlir").read_text().count("tw.relu") == LONG_GRAPH_OPS - 1


def test_a_bar_on_a_terminal_and_none_with_quiet(long_file, tmp_path):
    code, err = _run_on_a_terminal(_tw_opt(long_file, tmp_path / "bar.mlir"))
    assert code == 0 and b"passes" in err and b"1/1" in err
    code, err = _run_on_a_terminal(_tw_opt(long_file, tmp_path / "quiet.mlir", "--quiet"))
    assert code == 0 and err == b""
    assert (tmp_path / "bar.mlir").read_bytes() == (tmp_path / "quiet.mlir").read_bytes()
