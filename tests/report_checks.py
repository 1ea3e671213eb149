"""Shared by the compile report's tests: the summary a report must show, read back from a
page, and the small compiled models they report on."""

from __future__ import annotations

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
