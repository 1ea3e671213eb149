"""The compile report (lowering/report.py): its numbers against the compile's own, the
scheduler's reasons, the residual map's data, determinism, the CLI, and a 10^4-op graph's
page written in under 5 s and under 20 MB. (tests/test_report_browser.py opens pages in a
browser.)"""

from __future__ import annotations

import json
import re
import time

import numpy as np
import pytest

import tw_lowering
from twdialect import ArgumentError
from twdialect import ops as tw
from report_checks import (
    CALCULATOR_GEOMETRY,
    CALCULATOR_NAME,
    calculator_file,
    calculator_inputs,
    compile_file,
    expected_summary,
    shown_number,
    summary_of,
)
from tw_lowering.report import render_report, report_data
from tw_lowering.schedule import WAIT_REASONS
from twdialect.analysis import critical_path, layer_of


@pytest.fixture(scope="module")
def calculator(tmp_path_factory):
    """(compiled model, locations, .mlir path) of the report's demonstration graph."""
    path = calculator_file(tmp_path_factory.mktemp("report"))
    ct, locations = compile_file(path, name=CALCULATOR_NAME, **CALCULATOR_GEOMETRY)
    return ct, locations, path


@pytest.fixture(scope="module")
def calculator_page(calculator):
    ct, locations, _ = calculator
    return render_report(ct, calculator_inputs(), locations=locations)


def page_data(page: str) -> dict:
    """The JSON the page's script draws from."""
    m = re.search(r'<script type="application/json" id="tw-data">(.*?)</script>', page, re.S)
    return json.loads(m.group(1).replace("<\\/", "</"))


# -- the summary ----------------------------------------------------------------------------


def test_every_summary_number_equals_the_stats(calculator, calculator_page):
    ct = calculator[0]
    want = expected_summary(ct)
    shown = summary_of(calculator_page)
    assert set(shown) == set(want)  # no number in the summary the stats do not account for
    for key, expected in want.items():
        value, text = shown[key]
        assert float(value) == expected, key
        assert shown_number(text) == pytest.approx(expected, rel=1e-3), key
    for stage, seconds in ct.stats.seconds.items():
        assert f"{stage} {seconds:.3f} s" in calculator_page


def test_pass_table_equals_a_pass_by_pass_replay(calculator, calculator_page):
    """stats.passes (compile(trace_passes=True)) against the pipeline replayed one pass at a
    time here, and the page's pass table against stats.passes."""
    from tw_passes import pass_spec, run_pipeline
    from tw_passes.optimize import DEFAULT_PIPELINE
    from tw_tools.cli import parse_file

    ct, _, path = calculator
    module = parse_file(path)
    graph = module.body.block.first_op

    def layers():  # the graph as it stands, compiled on the same machine
        try:
            return tw_lowering.compile(module.clone(), **{**CALCULATOR_GEOMETRY,
                                                          "pipeline": None}).stats.n_layers
        except tw_lowering.GeometryError:
            return None

    def step(what):
        return {"pass": what, "ops": len(graph.block.ops),
                "floor": critical_path(graph).n_layers, "layers": layers()}

    replay = [step("input")]
    for p in DEFAULT_PIPELINE:
        run_pipeline(module, (p,))
        replay.append(step(pass_spec(p)))
    assert ct.stats.passes == replay
    assert replay[-1]["layers"] == ct.stats.n_layers
    rows = re.findall(r"<tr><td>([^<]*)</td><td>([\d,]+)</td><td>([\d,]+)</td><td>(\d+)</td>"
                      r"<td>(\d+)</td><td>([^<]*)</td><td>([^<]*)</td></tr>", calculator_page)
    shown = {None: "does not fit"}
    assert [(r[0], shown_number(r[1]), shown_number(r[2]), int(r[3]), int(r[4]), r[5], r[6])
            for r in rows] \
        == [(b["pass"], a["ops"], b["ops"], a["floor"], b["floor"],
             shown.get(a["layers"], str(a["layers"])), shown.get(b["layers"], str(b["layers"])))
            for a, b in zip(replay, replay[1:])]


def test_untraced_compile_says_the_passes_were_not_recorded(calculator):
    ct, _, path = calculator
    plain, _ = compile_file(path, trace_passes=False, **CALCULATOR_GEOMETRY)
    assert plain.stats.passes == []
    assert "Per-pass changes were not recorded" in render_report(plain)
    with pytest.raises(ArgumentError, match="trace_passes must be True or False"):
        tw_lowering.compile(plain.schedule.tg.graph, d=96, d_head=16, trace_passes="yes")


# -- the data behind the map, the chart and the table ---------------------------------------


def test_every_late_op_has_its_reason(calculator, calculator_page):
    ct, _, _ = calculator
    sched = ct.schedule
    ops = page_data(calculator_page)["ops"]
    reasons = page_data(calculator_page)["reasons"]
    task_of = {t.op: t for t in sched.tg.tasks}
    seen = set()
    for i, op in enumerate(sched.tg.ops):
        slot, earliest, key = ops["slot"][i], ops["earliest"][i], ops["whyk"][i]
        late = op in task_of and slot >= 0 and layer_of(slot) > layer_of(earliest)
        assert bool(key) == late, (i, op.name)
        if not late:
            continue
        seen.add(key)
        assert key in reasons and ops["why"][i]
        waited = sched.waited.get(task_of[op].tid)
        if key in WAIT_REASONS:  # the scheduler turned it away, and the text says why
            assert waited is not None and waited[1] == key
            assert WAIT_REASONS[key] in ops["why"][i]
        if key == "slack":
            assert waited is None
    assert seen - {"input", "slack"}  # some op waited for a resource, not only for inputs


def test_full_heads_are_named_as_the_reason():
    """Four attention ops ready at once, two heads a layer: two of them wait a layer, and the
    report says the heads were taken."""
    with tw.Graph() as g:
        pos = tw.pos_encoding(2, max_len=16)
        x = tw.input("x", 2, value_range=(-1.0, 1.0))
        k = tw.concat(pos, x)
        for i in range(4):
            v = tw.attn(k, k, x, np.full((4, 2), 0.1 * (i + 1)), np.full((4, 2), 0.2),
                        np.eye(2), np.eye(2))
            tw.output(f"y{i}", v)
    ct = tw_lowering.compile(g.module, d=32, d_head=16)
    ops = report_data(ct)["ops"]
    late = [i for i, k in enumerate(ops["whyk"]) if k]
    assert len(late) == 2 and all(ops["whyk"][i] == "heads" for i in late)
    assert all("heads were all taken" in ops["why"][i] for i in late)


def test_residual_map_cells_hold_one_value_each(calculator, calculator_page):
    """The map's groups decode to the schedule's columns, never overlap in a sublayer, and
    leave the machine's two columns alone."""
    ct, _, _ = calculator
    sched = ct.schedule
    data = page_data(calculator_page)
    n_slots, d = 2 * sched.n_layers, sched.machine.d
    owner = np.full((n_slots, d), -1)
    by_op = {}
    for g, (start, end, op, runs) in enumerate(data["groups"]):
        cols = [c for a, n in zip(runs[::2], runs[1::2]) for c in range(a, a + n)]
        assert min(cols) >= sched.machine.RESERVED
        assert (owner[start:end, cols] == -1).all(), f"group {g} overlaps another"
        owner[start:end, cols] = g
        by_op.setdefault(op, set()).update(cols)
    for grp in sched.tg.groups:
        cols = sched.cols[grp.gid]
        if cols is not None and any(sched.slot[w] >= 0 for w in grp.writers):
            i = sched.tg.ops.index(grp.value.owner)
            assert set(cols.tolist()) <= by_op[i]


def test_errors_against_the_oracle(calculator, calculator_page):
    """Each output's error in the table equals the compiled model's output against the
    oracle's, computed here."""
    from twdialect import evaluate

    ct, _, _ = calculator
    feeds = calculator_inputs()
    data = page_data(calculator_page)
    ops = data["ops"]
    graph = ct.schedule.tg.graph
    got, want = ct.run(feeds), evaluate(graph, feeds)
    index = {op: i for i, op in enumerate(ct.schedule.tg.ops)}
    checked = 0
    for op in graph.block.ops:
        if op.name == "tw.output":
            name = op.output_name.data
            err = float(np.abs(got[name] - want[name]).max())
            assert ops["err"][index[op.value.owner]] == pytest.approx(err, rel=1e-3, abs=1e-9)
            checked += 1
    assert checked and data["probe"]["checked"] > 100
    assert sum(e is not None for e in ops["err"]) == data["probe"]["checked"]


def test_locations_name_the_mlir_lines(calculator, calculator_page):
    """Every op is located at its line of the .mlir file: the parsed op itself, or (an op the
    pipeline copied or rebuilt) through the name it inherited (`%line<N>`)."""
    ct, _, path = calculator
    lines = open(path).read().splitlines()
    ops = page_data(calculator_page)["ops"]
    located = 0
    for name, loc in zip(ops["name"], ops["loc"]):
        if not loc:
            continue
        m = re.fullmatch(re.escape(CALCULATOR_NAME) + r":(\d+):5( \(as %line(\d+)\))?", loc)
        assert m, loc
        line = lines[int(m.group(1)) - 1]
        if m.group(2):  # rebuilt by a pass (or copied): found through its name
            assert m.group(1) == m.group(3) and name.endswith(f"%line{m.group(3)}"), loc
        else:  # the parsed op itself
            assert re.search(rf"{re.escape(name.split()[0])}\b", line), (name, line)
        if name.startswith("tw.attn"):
            assert "tw.attn" in line
        located += 1
    assert located > len(ops["name"]) // 2


def test_locations_of_an_uncopied_graph_are_the_ops_own(tmp_path):
    """Without a pipeline the compiled ops are the parsed ones: each is located at its line."""
    path = tmp_path / "g.mlir"
    path.write_text("builtin.module {\n  tw.graph @main {\n"
                    '    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<2>\n'
                    "    %r = tw.relu %x : !tw.vec<2>\n"
                    '    tw.output "y" %r : !tw.vec<2>\n  }\n}\n')
    ct, locations = compile_file(str(path), d=16, d_head=4, pipeline=None)  # (as written)
    ops = report_data(ct, locations=locations)["ops"]
    assert dict(zip(ops["name"], ops["loc"])) == {
        'tw.input "x" %x': f"{path}:3:5", "tw.relu %r": f"{path}:4:5",
        'tw.output "y"': f"{path}:5:5"}


def test_locations_of_a_builder_graph_are_its_builder_lines():
    """`tw.Graph(locations=True)`: each op is located at the line of this file that built it,
    also after the default pipeline rebuilt it (through the name it inherited)."""
    import inspect

    line = inspect.currentframe().f_lineno
    with tw.Graph("main", locations=True) as g:
        x = tw.input("x", 2, value_range=(-2.0, 2.0))  # line + 2
        h = tw.relu(tw.linear(x, [[1.0, -1.0], [2.0, 0.5]], [0.1, -0.2]))  # line + 3
        tw.output("y", tw.linear(h, [[1.0], [1.0]]))  # line + 4
    here = __file__
    assert set(g.locations.values()) == {f"{here}:{line + k}" for k in (2, 3, 4)}
    ct = tw_lowering.compile(g.module, d=16, d_head=4, pipeline="default")
    ops = report_data(ct, locations=g.locations)["ops"]
    located = [loc for loc in ops["loc"] if loc]
    pattern = rf"{re.escape(here)}:({line + 2}|{line + 3}|{line + 4})( \(as %\S+\))?"
    assert located and all(re.fullmatch(pattern, loc) for loc in located), located
    by_kind = {name.split()[0]: loc for name, loc in zip(ops["name"], ops["loc"])}
    assert by_kind["tw.input"].startswith(f"{here}:{line + 2}")
    assert re.match(rf"{re.escape(here)}:({line + 3}|{line + 4})\b", by_kind["tw.mlp"])


def test_graph_locations_flag_is_checked():
    with pytest.raises(Exception, match="locations must be a bool"):
        tw.Graph("main", locations="yes")


# -- the page -------------------------------------------------------------------------------


def test_same_compile_same_bytes(calculator):
    """Two compiles of one graph give byte-identical pages once their measured seconds
    agree; the page asks nothing of the network."""
    ct, locations, path = calculator
    again, locations2 = compile_file(path, name=CALCULATOR_NAME, **CALCULATOR_GEOMETRY)
    again.stats.seconds = dict(ct.stats.seconds)
    feeds = calculator_inputs()
    a = render_report(ct, feeds, locations=locations)
    assert a == render_report(again, feeds, locations=locations2)
    assert a == render_report(ct, feeds, locations=locations)
    assert "://" not in a and not re.search(r'\b(src|href)="(?!data:)', a)


def test_report_of_a_10k_op_graph_is_written_fast_and_small(tmp_path):
    """10^4 ops (a layered random graph, no pipeline, a width where it schedules quickly):
    the page is written in under 5 s and is under 20 MB."""
    from twdialect.random_graphs import layered_graph

    module, _ = layered_graph(10_000, seed=0)
    ct = tw_lowering.compile(module, d=512, d_head=16, pipeline=None)  # (every op kept)
    assert ct.stats.n_ops >= 10_000
    path = tmp_path / "big.html"
    t = time.perf_counter()
    ct.report(path)
    seconds = time.perf_counter() - t
    size = path.stat().st_size
    print(f"10^4-op report: {ct.stats.n_ops} ops, {ct.stats.n_layers} layers, written in "
          f"{seconds:.2f} s, {size / 1e6:.2f} MB")
    assert seconds < 5.0
    assert size < 20e6
    assert len(page_data(path.read_text())["ops"]["name"]) == ct.stats.n_ops


# -- the CLI --------------------------------------------------------------------------------


def test_tw_stats_html(calculator, tmp_path, capsys):
    from tw_tools import tw_stats

    _, _, path = calculator
    out = tmp_path / "report.html"
    assert tw_stats.main([path, "--d", "128", "--d-head", "16", "--d-hidden", "192", "-p",
                          "default", "--probe", "8", "--html", str(out)]) == 0
    page = out.read_text()
    data = page_data(page)
    assert data["probe"] is not None and f"{path}:" in page
    assert summary_of(page)["n_layers"][0] == str(data["n_layers"])
    capsys.readouterr()
    for bad, reason in ((tmp_path / "missing" / "r.html", "no such directory"),
                        (tmp_path, "it is a directory")):
        with pytest.raises(SystemExit) as e:
            tw_stats.main([path, "--html", str(bad)])
        assert e.value.code == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"cannot write {bad}: {reason}" in err
