"""Shared by the compile report's tests: the summary a report must show, read back from a
page, and the small compiled models they report on."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import numpy as np


def expected_summary(ct) -> dict[str, float]:
    """Every number the summary shows, computed here from `ct.stats` (and the runtime's
    stored parameters), not by the report's own code."""
    s = ct.stats
    want = {
        "n_layers": s.n_layers, "floor": s.floor, "depth_ratio": round(s.n_layers / s.floor, 4),
        "d": s.d, "d_head": s.d_head, "d_hidden": s.d_hidden,
        "heads_per_layer": s.d // s.d_head, "heads": sum(s.heads_per_layer),
        "neurons": sum(s.neurons_per_layer), "n_ops": s.n_ops, "cancels": s.cancels,
        "graph_params": s.graph_params, "stored_params": ct.stored_params(),
        "allocated_params": s.allocated_params, "total_capacity": s.total_capacity,
        "compile_seconds": round(sum(s.seconds.values()), 3),
    }
    if s.index_heads:  # heads answered from an index: every one not left to attention
        want["indexed_heads"] = len([h for h in s.index_heads if h["kind"] in ("position", "match")])
    for key in ("full_heads", "rope_heads", "swish_neurons", "gated_neurons"):
        if getattr(s, key):
            want[key] = getattr(s, key)
    return want


def shown_number(text: str) -> float:
    """A number as the page shows it (thousands grouped with commas)."""
    return float(text.replace(",", ""))


class SummaryReader(HTMLParser):
    """The summary's numbers in a page: `data-stat` key -> (data-value, shown text)."""

    def __init__(self):
        super().__init__()
        self.stats: dict[str, tuple[str, str]] = {}
        self._open: tuple[str, str] | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "data-stat" in a:
            self._open = (a["data-stat"], a["data-value"])

    def handle_data(self, data):
        if self._open is not None:
            key, value = self._open
            self.stats[key] = (value, data)
            self._open = None


def summary_of(page: str) -> dict[str, tuple[str, str]]:
    reader = SummaryReader()
    reader.feed(page)
    return reader.stats


# The report's demonstration graph: the primitive calculator (186 ops after the default
# pipeline) at a geometry narrow enough that ops sit late for several kinds of reason (full
# neurons, the order gate, cancels); compiled from a .mlir file, so that the report knows
# its lines.
CALCULATOR_GEOMETRY = {"d": 128, "d_head": 16, "d_hidden": 192, "pipeline": "default"}
CALCULATOR_NAME = "calculator.mlir"  # the file's name in the report (no folder)
CALCULATOR_PROMPT = "850-636="


def calculator_file(folder) -> str:
    """The primitive calculator written to `folder`/calculator.mlir; its path."""
    import tw_examples.primitive as primitive

    path = f"{folder}/calculator.mlir"
    with open(path, "w") as f:
        f.write(str(primitive.load("calculator").module))
    return path


def compile_file(path: str, trace_passes: bool = True, name: str | None = None, **geometry):
    """(compiled model, locations for its report) of the .mlir file at `path`, as tw-stats
    --html compiles it; `name`: the file's name in the locations (default: `path`)."""
    import tw_lowering
    from tw_lowering.report import source_locations
    from tw_tools.cli import SourceMap, parse_file

    source = SourceMap(name or path)
    module = parse_file(path, source)
    locations = source_locations(source.positions(), source.name)
    return tw_lowering.compile(module, trace_passes=trace_passes, **geometry), locations


def calculator_inputs(prompt: str = CALCULATOR_PROMPT) -> dict:
    """The feeds of one calculator prompt (its token ids)."""
    import tw_examples.primitive as primitive

    return {"tokens": np.asarray(primitive.load("calculator").encode(prompt), np.int64)}


# -- hostile names: every string the page embeds ----------------------------------------

# (no "-->": after "<!--" it would end the escape it began, hiding the break it tests)
HOSTILE = ["<!--<script>", "</script>", "<!--", "<script", "</SCRIPT >",
           '<img src=x onerror="window.twPwned=1">', "{{DATA}}", "&amp;", "\"'`",
           "\u2028\u2029", "]]>", "\\u003c/script>"]


def hostile_graph(tag: str = ""):
    """(compiled model, feeds, locations, the hostile text): a graph whose graph, input,
    token input, output and annotation names, and the file name of its ops' locations, all
    hold every HOSTILE string (tests/test_report_browser.py opens its page)."""
    import tw_lowering
    from tw_lowering.report import source_locations
    from twdialect import ops as tw

    bad = tag + "".join(HOSTILE)
    with tw.Graph("g" + bad) as g:
        with tw.annotate("ann" + bad):
            x = tw.input("in" + bad, 2, (-1.0, 1.0))
            t = tw.embedding("tok" + bad, [[0.0, 1.0], [2.0, 3.0]])
            h = tw.relu(tw.linear(tw.add(x, t), [[1.0, -1.0], [0.5, 2.0]], [0.1, 0.0]))
        tw.output("out" + bad, h)
        tw.output("out2" + bad, tw.attn(h, h, h, np.eye(2), np.eye(2), np.eye(2), np.eye(2)))
    locations = source_locations({op: (k + 1, 5) for k, op in enumerate(g.op.block.ops)},
                                 f"file{bad}.mlir")
    ct = tw_lowering.compile(g.module, d=32, d_head=4, trace_passes=True, pipeline="default")
    feeds = {"in" + bad: np.array([[0.5, -0.5], [0.25, 0.0], [-1.0, 1.0]]),
             "tok" + bad: np.array([0, 1, 1])}
    return ct, feeds, locations, bad


def script_texts(page: str) -> list[str]:
    """The text of each <script> element, cut where the HTML tokenizer would end it at the
    simplest: the first "</script" after its start tag (a "<!--" or "<script" inside would
    move that end, which `test_report_page_embeds_hostile_names_as_data` also refuses)."""
    out = []
    for m in re.finditer(r"<script\b[^>]*>", page, re.I):
        end = page.lower().find("</script", m.end())
        out.append(page[m.end():end])
    return out
