"""The compile report opened in a real browser: headless Chromium over the DevTools protocol
(tests/browser.py). No console errors; the summary read from the page equals `ct.stats`; a
real mouse move over the residual map names the op whose value lives in that cell; a click
finds the op in the table; the search filters it; a 10^4-op page opens fast. A screenshot is
saved for a person to look at (TW_UPDATE_SCREENSHOT=1 also writes docs/images/report.png,
the one docs/report.md shows).

Skipped, with the reason, where no Chromium is on PATH: the test installs nothing (CI's
`.ci/run` installs Debian's `chromium`)."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest

from browser import Browser, find_chromium
from report_checks import (
    CALCULATOR_GEOMETRY,
    CALCULATOR_NAME,
    calculator_file,
    calculator_inputs,
    compile_file,
    expected_summary,
    shown_number,
)

CHROMIUM = find_chromium()
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="no Chromium on PATH (Debian: apt-get install chromium); the "
                             "report's browser test needs one and installs nothing itself")

DOCS_SCREENSHOT = Path(__file__).resolve().parent.parent / "docs" / "images" / "report.png"
OPEN_BUDGET_MS = 2000  # the page of a 10^4-op graph opens in this (asserted with a margin)


@pytest.fixture(scope="module")
def browser():
    with Browser(CHROMIUM, width=1400, height=1000) as b:
        yield b


@pytest.fixture(scope="module")
def calculator_report(tmp_path_factory):
    """(compiled model, report path) of the demonstration graph, with errors and lines."""
    folder = tmp_path_factory.mktemp("report")
    ct, locations = compile_file(calculator_file(folder), name=CALCULATOR_NAME,
                                 **CALCULATOR_GEOMETRY)
    path = folder / "report.html"
    ct.report(path, calculator_inputs(), locations=locations)
    return ct, path


def cell_to_hover(ct) -> tuple[int, int, int]:
    """(slot, column, op index) of a cell the map must name: the first attention op's first
    column in the sublayer that writes it, found from the schedule here."""
    sched = ct.schedule
    tg = sched.tg
    t = next(t for t in tg.tasks if t.op.name == "tw.attn" and sched.slot[t.tid] >= 0)
    group = tg.groups[t.out_group]
    return sched.slot[t.tid], int(sched.cols[group.gid][0]), tg.ops.index(group.value.owner)


def drawn_times(browser) -> tuple[float, float]:
    """(ms from navigation until the page was drawn, ms its script took), as it recorded."""
    times = browser.evaluate("[document.documentElement.dataset.readyMs, "
                             "document.documentElement.dataset.renderMs]")
    return float(times[0]), float(times[1])



def assert_summary_shown(browser, ct) -> None:
    """The page's summary figures (every `data-stat`) are the compile's own."""
    shown = dict(browser.evaluate(
        "Array.from(document.querySelectorAll('[data-stat]'), e => [e.dataset.stat, "
        "e.textContent])"))
    want = expected_summary(ct)
    assert set(shown) == set(want)
    for key, value in want.items():
        assert shown_number(shown[key]) == pytest.approx(value, rel=1e-3), key

def test_report_in_chromium(browser, calculator_report, tmp_path):
    ct, path = calculator_report
    browser.errors.clear()
    browser.open(path.as_uri())
    ready_ms, render_ms = drawn_times(browser)
    print(f"report of {ct.stats.n_ops} ops: script {render_ms:.0f} ms, ready {ready_ms:.0f} ms")

    assert_summary_shown(browser, ct)

    slot, col, op = cell_to_hover(ct)
    name = browser.evaluate(f"twReport.data.ops.name[{op}]")
    assert name.startswith("tw.attn")
    at = browser.evaluate(f"twReport.cellCenter({slot}, {col})")
    browser.mouse_move(at["x"], at["y"])
    info = browser.evaluate("(e => ({op: e.dataset.op, slot: e.dataset.slot, col: e.dataset.col,"
                            " text: e.textContent}))(document.getElementById('cell-info'))")
    assert (int(info["slot"]), int(info["col"]), int(info["op"])) == (slot, col, op)
    assert f"#{op} {name}" in info["text"] and f"layer {slot // 2} attn" in info["text"]

    browser.send("Input.dispatchMouseEvent", type="mousePressed", x=at["x"], y=at["y"],
                 button="left", clickCount=1)
    browser.send("Input.dispatchMouseEvent", type="mouseReleased", x=at["x"], y=at["y"],
                 button="left", clickCount=1)
    assert browser.evaluate(f"!!document.querySelector('.trow.sel[data-op=\"{op}\"]')")

    loc = browser.evaluate(f"twReport.data.ops.loc[{op}]")
    assert loc.startswith(f"{CALCULATOR_NAME}:")  # where the .mlir file holds it
    search = ("(s => { s.value = %s; s.dispatchEvent(new Event('input')); return "
              "[document.getElementById('count').textContent, Array.from(document."
              "querySelectorAll('.trow'), r => +r.dataset.op)]; })(document.getElementById"
              "('search'))")
    count, rows = browser.evaluate(search % json.dumps(loc))
    assert count == f"1 of {ct.stats.n_ops} ops" and rows == [op]
    count, rows = browser.evaluate(search % "''")
    assert count == f"{ct.stats.n_ops} of {ct.stats.n_ops} ops"
    assert 0 < len(rows) <= 60 < ct.stats.n_ops  # only the visible rows are elements

    browser.evaluate("window.scrollTo(0, 0)")
    shot = tmp_path / "report.png"
    browser.screenshot(str(shot))
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 50_000
    if os.environ.get("TW_UPDATE_SCREENSHOT"):
        shutil.copyfile(shot, DOCS_SCREENSHOT)
    assert browser.errors == []


def test_graph_without_layers(browser, tmp_path):
    """A graph whose output is its input takes no layer: the page still draws, quietly."""
    import tw_lowering
    from twdialect import ops as tw

    with tw.Graph() as g:
        tw.output("y", tw.input("x", 2, value_range=(-1.0, 1.0)))
    ct = tw_lowering.compile(g.module, d=16, d_head=4)
    assert ct.stats.n_layers == 0
    path = tmp_path / "empty.html"
    ct.report(path)
    browser.errors.clear()
    browser.open(path.as_uri())
    assert browser.errors == []
    assert browser.evaluate("document.getElementById('count').textContent") == \
        f"{ct.stats.n_ops} of {ct.stats.n_ops} ops"


def test_10k_op_report_opens_fast(browser, tmp_path):
    """A 10^4-op graph's page, opened: its script's work and the time until it is drawn
    (from navigation), against the 2 s the report promises (asserted at 3x: a shared, busy
    machine)."""
    import tw_lowering
    from twdialect.random_graphs import layered_graph

    module, _ = layered_graph(10_000, seed=0)
    ct = tw_lowering.compile(module, d=512, d_head=16, pipeline=None)  # (every op kept)
    path = tmp_path / "big.html"
    ct.report(path)
    browser.errors.clear()
    t = time.perf_counter()
    browser.open(path.as_uri())
    wall_ms = 1000 * (time.perf_counter() - t)
    ready_ms, render_ms = drawn_times(browser)
    print(f"10^4-op report ({path.stat().st_size / 1e6:.2f} MB): script {render_ms:.0f} ms, "
          f"ready {ready_ms:.0f} ms after navigation, load event after {wall_ms:.0f} ms")
    assert browser.errors == []
    assert browser.evaluate("twReport.data.ops.name.length") == ct.stats.n_ops
    assert ready_ms < 3 * OPEN_BUDGET_MS


def test_hostile_names_are_drawn_as_text(browser, tmp_path):
    """`<!--<script>` (and `</script>`, `<!--`, `<script`, an `<img onerror>`, `{{DATA}}`,
    U+2028...) in the graph, input, token input, output and annotation names and in the
    source file's name: the page draws as the calculator's does (no console error, the
    summary equals `ct.stats`, the map names the op under the mouse, the search finds it) and
    every name is shown as the text it is, never as markup."""
    from report_checks import hostile_graph

    ct, feeds, locations, bad = hostile_graph()
    path = tmp_path / "hostile.html"
    ct.report(path, feeds, locations=locations)
    browser.errors.clear()
    browser.open(path.as_uri())
    assert browser.errors == []
    assert browser.evaluate("typeof twReport") == "object"  # the script ran to its end
    assert browser.evaluate("document.querySelectorAll('script').length") == 2
    assert browser.evaluate("document.querySelectorAll('img').length") == 0
    assert browser.evaluate("window.twPwned === undefined")
    assert browser.evaluate("document.title") == "tw compile report: @g" + bad
    assert browser.evaluate("document.querySelector('h1 code').textContent") == "@g" + bad

    assert_summary_shown(browser, ct)
    n = ct.stats.n_ops
    assert browser.evaluate("document.getElementById('count').textContent") == f"{n} of {n} ops"

    # the map: the attention op's cell, hovered, names it with its annotation
    slot, col, op = cell_to_hover(ct)
    at = browser.evaluate(f"twReport.cellCenter({slot}, {col})")
    browser.mouse_move(at["x"], at["y"])
    info = browser.evaluate("document.getElementById('cell-info').textContent")
    assert f"#{op} tw.attn" in info and f"layer {slot // 2} attn" in info

    # each hostile name, searched, is the one row whose cells hold it as text
    search = ("(s => { s.value = %s; s.dispatchEvent(new Event('input')); return "
              "Array.from(document.querySelectorAll('.trow'), r => Array.from(r.children, "
              "c => c.textContent)); })(document.getElementById('search'))")
    for name, column in [("tw.output \"out" + bad + "\"", 1), ("tw.output \"out2" + bad, 1),
                         ("tw.input \"in" + bad + "\"", 1), ("tw.embedding \"tok" + bad, 1),
                         ("ann" + bad, 2), ("file" + bad + ".mlir", 3)]:
        rows = browser.evaluate(search % json.dumps(name))
        assert rows, name
        assert all(name.lower() in " ".join(r).lower() for r in rows), name
        assert any(r[column].startswith(name) for r in rows), (name, rows[0])
    assert browser.evaluate("document.querySelectorAll('img').length") == 0
    assert browser.evaluate("window.twPwned === undefined")
    assert browser.errors == []
