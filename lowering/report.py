"""The compile report: one self-contained HTML page showing how a graph was compiled.

    ct = tw_lowering.compile(module, d=256, d_head=16, trace_passes=True)
    ct.report("report.html", inputs=feeds)        # or: tw-stats graph.mlir --html report.html

The page needs no network: its CSS, its script and its data are inline (the template is
`report_page.html`, package data beside this module). It holds

* a summary: layers against the critical-path floor, the geometry, heads, neurons, stored
  and allocated parameters, compile time, and what each pass of the pipeline changed (ops
  and floor; `compile(trace_passes=True)` records them);
* a layer chart: per layer, the heads, neurons and residual columns used against the limits;
* the residual map: columns x sublayers, each cell coloured by the value living there,
  drawn on one canvas; hovering looks the cell up in a compact array (no element per cell);
* the critical path through the layers, and for every op placed after its earliest layer,
  why (`why_later`: a late input, or the resource the scheduler found short,
  `schedule.WAIT_REASONS`);
* a searchable per-op table (virtualised: only the visible rows are elements), with the
  compiled value's error against the oracle when inputs are given (`probe.compare_values`).

Everything but the measured compile seconds is a function of the compiled model, so the
same compile writes the same bytes (no timestamps, sorted keys, rounded numbers).
"""

from __future__ import annotations

import html
import json
import math
import re
from collections.abc import Callable, Mapping
from importlib import resources

from xdsl.ir import Operation

from tw_lowering.layer import component_rows
from tw_lowering.rules import task_cost
from tw_lowering.stats import index_heads_lines
from tw_lowering.schedule import WAIT_REASONS, Schedule
from tw_lowering.tasks import TaskGraph
from twdialect.analysis import critical_path, is_attention_slot, layer_of, sublayer_name
from twdialect.dialect import ANNOTATION, GraphOp

PAGE = "report_page.html"
DIGITS = 6  # significant digits of the numbers the page shows (ranges, errors)
NEVER = 1 << 40  # `Schedule.died` of a group whose columns are never reused


def write_report(ct, path, inputs: Mapping | None = None, n_positions: int | None = None,
                 locations: Mapping[Operation, str] | None = None) -> None:
    """Write the report of compiled model `ct` to `path` (see `render_report`)."""
    page = render_report(ct, inputs, n_positions, locations)
    with open(path, "w", encoding="utf-8") as f:
        f.write(page)


def render_report(ct, inputs: Mapping | None = None, n_positions: int | None = None,
                  locations: Mapping[Operation, str] | None = None) -> str:
    """The report page of `ct` as one string.

    `inputs` (as `twdialect.evaluate` takes them; `n_positions` for a graph without inputs):
    when given, the compiled model runs beside the oracle and every value's error is shown.
    `locations`: op of the source module -> "file:line:col" (a parsed .mlir file's, see
    `tw_tools.cli.SourceMap.located`); an op the passes rebuilt is found through the SSA
    name it inherited."""
    parts = {"GRAPH": html.escape(ct.schedule.tg.graph.sym_name.data),
             "SUMMARY": summary_html(ct), "PASSES": passes_html(ct.stats),
             "DATA": _embedded_json(report_data(ct, inputs, n_positions, locations))}
    page = resources.files("tw_lowering").joinpath(PAGE).read_text(encoding="utf-8")
    # one pass, so that no text filled in (a graph name, say) is read as a placeholder
    return re.sub(r"\{\{(GRAPH|SUMMARY|PASSES|DATA)\}\}", lambda m: parts[m.group(1)], page)


def source_locations(positions: Mapping[Operation, tuple[int, int]], file: str
                     ) -> dict[Operation, str]:
    """op -> "file:line:col" for `render_report`, from the (line, column) of each op parsed
    from `file`; every unnamed result is named after its line (`%line42`) on the way. Call it
    before compiling: an op a pass rebuilds inherits the name of the op it replaces (xDSL's
    `Rewriter.replace_op`), and the report finds where it was written through that name.
    (Names are no part of a graph's meaning: the compiled weights are the same.)"""
    out = {}
    for op, (line, col) in positions.items():
        out[op] = f"{file}:{line}:{col}"
        for r in op.results:
            if r.name_hint is None:
                r.name_hint = f"line{line}"
    return out


# --------------------------------------------------------------------------------------
# The summary (server-rendered: its numbers are in the page without the script)
# --------------------------------------------------------------------------------------


def summary_items(ct) -> list[tuple[str, str, float | int]]:
    """(key, label, value) of every summary number, in page order; each key is the
    `data-stat` attribute of its element."""
    s = ct.stats
    items = [
        ("n_layers", "layers", s.n_layers),
        ("floor", "critical-path floor (layers)", s.floor),
        ("depth_ratio", "layers / floor", round(s.depth_ratio, 4)),
        ("d", "d (residual width)", s.d),
        ("d_head", "d_head", s.d_head),
        ("d_hidden", "d_hidden (neurons per layer)", s.d_hidden),
        ("heads_per_layer", "heads per layer (d / d_head)", s.d // s.d_head),
        ("heads", "heads used, all layers", int(sum(s.heads_per_layer))),
        ("neurons", "neurons used, all layers", int(sum(s.neurons_per_layer))),
        ("n_ops", "ops compiled", s.n_ops),
        ("cancels", "cancels", s.cancels),
        ("graph_params", "graph params (nonzero weights)", s.graph_params),
        ("stored_params", "stored params (trimmed runtime)", int(ct.stored_params())),
        ("allocated_params", "allocated params (stock layout)", s.allocated_params),
        ("total_capacity", "capacity params (all layers full)", s.total_capacity),
        ("compile_seconds", "compile time (s)", round(sum(s.seconds.values()), 3)),
    ]
    heads = getattr(s, "index_heads", [])
    if heads:
        items.append(("indexed_heads", "heads answered from an index",
                      sum(h["kind"] != "scan" for h in heads)))
    for key, label in (("full_heads", "full-mask heads"), ("rope_heads", "rotary heads"),
                       ("swish_neurons", "swish neurons"), ("gated_neurons", "gated neurons")):
        if getattr(s, key):
            items.append((key, label, getattr(s, key)))
    return items


def summary_html(ct) -> str:
    """The summary as a definition list, each value in an element with `data-stat` and
    `data-value` (the number as written in `ct.stats`), then the stage times and the note."""
    rows = "".join(
        f'<div class="stat"><dt>{html.escape(label)}</dt><dd data-stat="{key}" '
        f'data-value="{value}">{_grouped(value)}</dd></div>'
        for key, label, value in summary_items(ct))
    stages = ", ".join(f"{html.escape(k)} {v:.3f} s" for k, v in ct.stats.seconds.items())
    note = (f'<p class="note">note: {html.escape(ct.stats.note)}</p>' if ct.stats.note else "")
    return (f'<dl class="stats">{rows}</dl><p class="stages">stages: {stages}</p>{note}'
            + heads_html(ct.stats))


def heads_html(stats) -> str:
    """Every attention head's lookup: the kind (position read, newest-key match: answered
    from an index by the index decoder; attention) and the proof, or why it attends."""
    heads = getattr(stats, "index_heads", [])
    if not heads:
        return ""
    rows = "".join(
        f'<tr data-kind="{html.escape(h["kind"])}"><td>{h["layer"]}</td><td>{h["head"]}</td>'
        f'<td>{html.escape({"scan": "attention"}.get(h["kind"], h["kind"]))}</td>'
        f'<td>{h["gap"]:g}</td><td>{html.escape(h["why"])}</td></tr>' for h in heads)
    return ('<details class="heads"><summary>exact-index heads: '
            + html.escape(index_heads_lines(heads)[0].removeprefix("heads: "))
            + '</summary><table><tr><th>layer</th><th>head</th><th>lookup</th><th>gap</th>'
            f'<th>proof, or why it attends</th></tr>{rows}</table></details>')


def _grouped(value) -> str:
    """A number as the page shows it: thousands grouped with commas."""
    return f"{value:,}" if isinstance(value, int) else f"{value:,.4g}"


def passes_html(stats) -> str:
    """What each pass changed (`stats.passes`, recorded by `compile(trace_passes=True)`):
    ops, floor and layers (the graph compiled as it stood, on this machine) before and after."""
    steps = stats.passes
    if not steps:
        return ('<p class="muted">Per-pass changes were not recorded: compile with '
                '<code>trace_passes=True</code> (<code>tw-stats --html</code> does).</p>')

    def layers(step) -> str:
        n = step.get("layers")
        return "does not fit" if n is None else str(n)

    rows = [f'<tr><td>{html.escape(s["pass"])}</td><td>{p["ops"]:,}</td><td>{s["ops"]:,}</td>'
            f'<td>{p["floor"]}</td><td>{s["floor"]}</td><td>{layers(p)}</td>'
            f'<td>{layers(s)}</td></tr>'
            for p, s in zip(steps, steps[1:])]
    if not rows:
        rows = ['<tr><td colspan="7" class="muted">no pass ran</td></tr>']
    given = steps[0]
    return ('<table class="passes"><thead><tr><th>pass</th><th>ops before</th>'
            '<th>ops after</th><th>floor before</th><th>floor after</th>'
            '<th>layers before</th><th>layers after</th></tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table>'
            f'<p class="muted">As given: {given["ops"]:,} ops, floor {given["floor"]}, '
            f'{layers(given)} layers (each step compiled as it stood on this machine); the '
            f'compiled graph takes {stats.n_layers} layers.</p>')


# --------------------------------------------------------------------------------------
# The data the page draws from
# --------------------------------------------------------------------------------------


def report_data(ct, inputs: Mapping | None = None, n_positions: int | None = None,
                locations: Mapping[Operation, str] | None = None) -> dict:
    """Everything the page's script draws, as plain JSON values (ops in columns)."""
    sched = ct.schedule
    tg = sched.tg
    index = {op: i for i, op in enumerate(tg.ops)}
    cp = critical_path(tg.graph)
    errors = _errors(ct, inputs, n_positions)
    s = ct.stats
    return {
        "graph": tg.graph.sym_name.data,
        "machine": {"d": s.d, "d_head": s.d_head, "d_hidden": s.d_hidden,
                    "n_heads": s.d // s.d_head, "reserved": sched.machine.RESERVED},
        "n_layers": sched.n_layers,
        "floor": sched.floor,
        "layers": {"heads": s.heads_per_layer, "neurons": s.neurons_per_layer,
                   "occupancy": s.occupancy_per_layer, "ops": s.ops_per_layer},
        "ops": op_columns(sched, index, cp.slots, errors, _locator(tg.graph, locations)),
        "groups": residual_groups(sched, index),
        "critical": [index[op] for op in cp.chain if op in index],
        "reasons": {"input": "an input it reads was placed late",
                    "slack": "nothing refused it: it had slack, and more urgent work went "
                             "first", **WAIT_REASONS},
        "probe": None if errors is None else {
            "checked": len(errors),
            "max_error": _num(max(errors.values(), default=0.0))},
    }


# The per-op fields of the page's data, in the order `_OpFacts.row` gives them.
OP_FIELDS = ("name", "ann", "loc", "slot", "earliest", "heads", "dims", "neurons", "cols",
             "lo", "hi", "users", "whyk", "why", "err")


def op_columns(sched: Schedule, index: dict[Operation, int], earliest: dict[Operation, int],
               errors: dict | None, locate: Callable[[Operation], str]) -> dict[str, list]:
    """Per op of the compiled graph, in block order, one list per field (`OP_FIELDS`): name,
    annotation, location, slot (-1: a source; -2: free or dead), earliest slot, heads / head
    dims / neurons, columns, value range, consumers, why it sits after its earliest layer
    (reason key and text), and its error against the oracle."""
    facts = _OpFacts(sched, index, earliest, errors, locate)
    rows = [facts.row(op) for op in sched.tg.ops]
    return {name: [r[k] for r in rows] for k, name in enumerate(OP_FIELDS)}


class _OpFacts:
    """What the op table needs to know of every op, looked up once for the whole graph."""

    def __init__(self, sched: Schedule, index, earliest, errors, locate):
        self.sched, self.index, self.earliest = sched, index, earliest
        self.errors, self.locate = errors or {}, locate
        self.task_of = {t.op: t for t in sched.tg.tasks}
        self.placed = _placed_slots(sched)
        self.ranges = _value_ranges(sched)

    def row(self, op: Operation) -> tuple:
        """The op's fields, in `OP_FIELDS` order."""
        sched = self.sched
        t = self.task_of.get(op)
        slot = self.placed.get(op, -2)
        earliest = self.earliest.get(op, -1)
        placed_task = t is not None and slot >= 0
        cost = task_cost(sched.tg, t, sched.machine).in_sublayer(is_attention_slot(slot)) \
            if placed_task else None
        key, why = why_later(sched, t, slot, earliest) if placed_task else ("", "")
        lo, hi = self.ranges.get(op, (None, None))
        err = self.errors.get(op)
        users = sorted({self.index[u.operation] for r in op.results for u in r.uses
                        if u.operation in self.index})
        return (_op_name(op), _annotation(op), self.locate(op), slot, earliest,
                cost.heads if cost else 0, cost.dims if cost else 0,
                cost.neurons if cost else 0, _columns_text(_value_columns(sched, op)), lo, hi,
                users, key, why, None if err is None else _num(err))


def _placed_slots(sched: Schedule) -> dict[Operation, int]:
    """op -> the slot its value is complete in: a task's own slot, an accumulating add's
    last writer's, a source's -1 (ops absent: free views, literals, sinks, dead code)."""
    tg = sched.tg
    out: dict[Operation, int] = {}
    for t in tg.tasks:
        if sched.slot[t.tid] >= 0:
            out[t.op] = sched.slot[t.tid]
    for g in tg.groups:
        if g.source is not None:
            out[g.source] = -1
        elif g.value.owner not in out and g.writers:
            slots = [sched.slot[w] for w in g.writers]
            if min(slots) >= 0:
                out[g.value.owner] = max(slots)
    return out


def why_later(sched: Schedule, t, slot: int, earliest: int) -> tuple[str, str]:
    """Why task `t`, placed in `slot`, sits after the layer of its `earliest` slot (the
    critical path's, capacity unlimited): ("", "") when it does not. The reason key is
    "input" when an input it waits on was placed late (then the text names it, and any
    resource that turned the task away after), a `WAIT_REASONS` key when the scheduler
    turned it away (`Schedule.waited`), "slack" when neither."""
    if layer_of(slot) <= layer_of(earliest):
        return "", ""
    tg = sched.tg
    late = _latest_input(tg, t, sched.slot)
    parts, key = [], "slack"
    if late is not None and layer_of(late[1] + 1) > layer_of(earliest):
        key = "input"
        parts.append(f"its input {_op_name(late[0])} was complete only in layer "
                     f"{layer_of(late[1])} {sublayer_name(late[1])}")
    waited = sched.waited.get(t.tid)
    if waited is not None:
        at, reason = waited
        key = reason if key == "slack" else key
        parts.append(f"turned away last in layer {layer_of(at)} {sublayer_name(at)}: "
                     f"{WAIT_REASONS[reason]}")
    if not parts:
        parts.append("nothing refused it: it had slack, and more urgent work went first")
    return key, "; ".join(parts)


def _latest_input(tg: TaskGraph, t, sched_slot: list[int]) -> tuple | None:
    """(op, slot) of the group `t` waits on that was complete last, or None (only sources);
    `sched_slot`: task id -> slot."""
    best = None
    for g in t.waits:
        grp = tg.groups[g]
        if grp.source is not None:
            continue
        s = max((sched_slot[w] for w in grp.writers), default=-1)
        if best is None or s > best[1]:
            best = (grp.value.owner, s)
    return best


def residual_groups(sched: Schedule, index: dict[Operation, int]) -> list[list]:
    """The residual map's data: per placed group [first slot, end slot (its columns reusable
    from there, or the schedule's end), op index, [first column, run length, ...]]."""
    tg = sched.tg
    end = 2 * sched.n_layers
    out = []
    for g in tg.groups:
        cols = sched.cols[g.gid]
        if cols is None:
            continue
        if g.source is not None:
            start, op = 0, g.source
        else:
            slots = [sched.slot[w] for w in g.writers if sched.slot[w] >= 0]
            if not slots:
                continue
            start, op = min(slots), g.value.owner
        died = sched.died[g.gid]
        stop = end if died >= NEVER else min(died, end)
        out.append([start, max(stop, start + 1), index.get(op, -1), _runs(cols)])
    return out


def _runs(cols) -> list[int]:
    """Sorted column indices as [first, length, first, length, ...] runs."""
    out: list[int] = []
    for c in sorted(int(c) for c in cols):
        if out and out[-2] + out[-1] == c:
            out[-1] += 1
        else:
            out += [c, 1]
    return out


def _columns_text(cols: list[int]) -> str:
    """Columns as runs, e.g. "12-15 20"."""
    r = _runs(cols)
    return " ".join(f"{a}" if n == 1 else f"{a}-{a + n - 1}" for a, n in zip(r[::2], r[1::2]))


def _value_columns(sched: Schedule, op: Operation) -> list[int]:
    """The residual columns holding `op`'s value (none for constants and unplaced values)."""
    tg = sched.tg
    if not op.results or op.results[0] not in tg.refs:
        return []
    refs = tg.refs[op.results[0]]
    if any(g >= 0 and sched.cols[g] is None for g in refs.group.tolist()):
        return []
    rows, _ = component_rows(sched.machine, sched.cols, refs)
    return sorted({int(r) for r, g in zip(rows.tolist(), refs.group.tolist())
                   if g != refs.CONST})


def _value_ranges(sched: Schedule) -> dict[Operation, tuple]:
    """op -> (lowest, highest) bound over its value's components (None: unbounded), from the
    ranges the scheduler read (computed here for a schedule that kept none)."""
    from tw_lowering.pressure import GroupRanges

    boxes = (sched.ranges or GroupRanges(sched.tg)).boxes()
    if boxes is None:
        return {}
    out = {}
    for v, (lo, hi) in boxes.items():
        if isinstance(v.owner, Operation) and lo.size:
            out[v.owner] = (_num(float(lo.min())), _num(float(hi.max())))
    return out


def _errors(ct, inputs: Mapping | None, n_positions: int | None) -> dict | None:
    """op -> the largest absolute error of its compiled value against the oracle's on
    `inputs`; None when no inputs are given (and the graph has some)."""
    from tw_lowering.probe import compare_values

    if inputs is None and n_positions is None:
        return None
    graph = ct.schedule.tg.graph
    return {c.op: c.error
            for c in compare_values(ct, graph, dict(inputs or {}), graph.sym_name.data,
                                    n_positions)}


def _locator(graph: GraphOp, locations: Mapping[Operation, str] | None
             ) -> Callable[[Operation], str]:
    """op of the compiled graph -> where it was written: its own location, or that of the
    source op whose SSA name it carries (a pass that rebuilds an op keeps the name), or ""."""
    if not locations:
        return lambda op: ""
    by_name: dict[str, str] = {}
    for op, where in locations.items():
        parent = op.parent_op()
        if op.results and op.results[0].name_hint and isinstance(parent, GraphOp) \
                and parent.sym_name.data == graph.sym_name.data:
            by_name[op.results[0].name_hint] = where

    def locate(op: Operation) -> str:
        if op in locations:
            return locations[op]
        hint = op.results[0].name_hint if op.results else None
        return f"{by_name[hint]} (as %{hint})" if hint in by_name else ""

    return locate


def _op_name(op: Operation) -> str:
    """How the page names an op: its kind and SSA name; an output by its output name, an
    input or a token input by its input name and SSA name (`tw.input "x" %x`)."""
    hint = op.results[0].name_hint if op.results else None
    if op.name == "tw.output":
        return f"tw.output \"{op.output_name.data}\""
    kind = f"{op.name} \"{op.input_name.data}\"" if op.name in ("tw.input", "tw.embedding") \
        else op.name
    return f"{kind} %{hint}" if hint else kind


def _annotation(op: Operation) -> str:
    """The op's `tw.annotation` (a builder graph's hierarchical name), or ""."""
    ann = op.attributes.get(ANNOTATION)
    return ann.data if ann is not None else ""


def _num(x: float) -> float | None:
    """A float as the page stores it: DIGITS significant digits; None where not finite."""
    return float(f"{x:.{DIGITS}g}") if math.isfinite(x) else None


# Characters the embedded JSON writes as \u escapes: `<`, `>` and `&` so that no "</script",
# "<!--" or "<script" (which turn the HTML tokenizer's script states: "<!--<script>" in a
# name kept a later "</script>" from closing the element, and the page drew nothing) can
# appear inside the <script> element, whatever a graph, output, input, annotation or file
# name holds; U+2028 and U+2029, which older JavaScript parsers read as line ends. JSON reads
# the escapes back as the same characters, so the data is unchanged.
_SCRIPT_SAFE = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028",
                "\u2029": "\\u2029"}


def _embedded_json(data: dict) -> str:
    """`data` as JSON safe inside a <script> element (`_SCRIPT_SAFE`): the element's text
    holds none of `<`, `>`, `&`, so nothing in it is markup, and JSON.parse gives `data`."""
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return re.sub("[<>&\u2028\u2029]", lambda m: _SCRIPT_SAFE[m.group(0)], text)
