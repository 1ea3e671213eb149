"""Compile statistics: depth against the floor, per-layer use, parameters, per-annotation costs."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

import numpy as np

from tw_lowering.rules import task_cost
from tw_lowering.schedule import Schedule
from twdialect.analysis import is_attention_slot, layer_of
from twdialect.dialect import ANNOTATION, GraphOp


def graph_params(graph: GraphOp) -> int:
    """Non-zero weight entries of the graph's ops (its irreducible information)."""
    from xdsl.dialects.builtin import DenseIntOrFPElementsAttr

    total = 0
    for op in graph.block.ops:
        for name, attr in op.properties.items():
            if isinstance(attr, DenseIntOrFPElementsAttr) and name not in ("table",):
                total += int(np.count_nonzero(np.frombuffer(attr.data.data, "<f4")))
    return total


@dataclass
class Stats:
    n_layers: int
    floor: int
    d: int
    d_head: int
    d_hidden: int
    n_ops: int
    heads_per_layer: list[int]
    neurons_per_layer: list[int]
    occupancy_per_layer: list[int]
    ops_per_layer: list[int]
    cancels: int
    graph_params: int
    allocated_params: int
    total_capacity: int
    per_annotation: dict = field(default_factory=dict)
    seconds: dict = field(default_factory=dict)
    rope_heads: int = 0  # heads with a rotary position embedding, all layers together
    note: str = ""  # where the compiled graph stands in for the one asked for (the width)
    full_heads: int = 0  # heads with a full (bidirectional) mask, all layers together
    swish_neurons: int = 0  # neurons with a swish activation (tw.mlp act swish)
    gated_neurons: int = 0  # neurons of gated mlps (tw.mlp up): act(z) * (x Wu + bu)
    # what each pass changed, where the compile recorded it (`PassTrace`): per step its pass
    # ("input": the graph as given), the graph's ops, critical-path floor and layers after it
    passes: list = field(default_factory=list)
    dtype: str = "float32"  # what the model computes in: "float32" or "float64"
    # the compare ops of the graph as given, each "op: step at t, ramp [t - r, t)": there the
    # model follows a linear ramp from -1 to +1 where the oracle steps (`ramp_zones`)
    ramps: list = field(default_factory=list)
    # per head, every layer: {"layer", "head", "kind", "gap", "why"}: its lookup
    # (lowering/index_heads.py: "position", "match": an exact index; "scan": attention)
    index_heads: list = field(default_factory=list)

    @property
    def depth_ratio(self) -> float:
        return self.n_layers / self.floor if self.floor else 1.0

    def to_dict(self) -> dict:
        d = asdict(self)
        d["depth_ratio"] = round(self.depth_ratio, 4)
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    def report(self) -> str:
        lines = [
            f"layers {self.n_layers} (floor {self.floor}, ratio {self.depth_ratio:.3f})  "
            f"d={self.d} d_head={self.d_head} d_hidden={self.d_hidden}  ops {self.n_ops}  "
            f"{self.dtype}",
            f"params: graph {self.graph_params}  allocated {self.allocated_params}  "
            f"capacity {self.total_capacity}  cancels {self.cancels}"
            + (f"  full-mask heads {self.full_heads}" if self.full_heads else "")
            + (f"  swish neurons {self.swish_neurons}" if self.swish_neurons else "")
            + (f"  gated neurons {self.gated_neurons}" if self.gated_neurons else ""),
        ] + ([f"note: {self.note}"] if self.note else []) + [
            "layer    ops  heads (fill)  neurons (fill)  residual (fill)",
        ]
        if self.rope_heads:
            lines[1] += f"  rotary heads {self.rope_heads}"
        n_heads = self.d // self.d_head
        for i in range(self.n_layers):
            h, n, r = self.heads_per_layer[i], self.neurons_per_layer[i], self.occupancy_per_layer[i]
            lines.append(f"{i:5d}  {self.ops_per_layer[i]:5d}  {h:5d} ({_pct(h, n_heads)})  "
                         f"{n:7d} ({_pct(n, self.d_hidden)})  {r:5d}/{self.d} ({_pct(r, self.d)})")
        if self.per_annotation:
            lines.append("annotation                      ops  heads  head_dims  neurons  layers")
            for name, a in sorted(self.per_annotation.items()):
                lines.append(f"{name[:30]:30s} {a['ops']:4d}  {a['heads']:5d}  {a['head_dims']:9d}  "
                             f"{a['neurons']:7d}  {a['first_layer']}-{a['last_layer']}")
        if self.ramps:
            lines.append(f"ramps: {len(self.ramps)} compare op(s) follow a linear ramp, not the "
                         f"oracle's step, on inputs in [t - r, t): {self.ramps[0]}"
                         + (" ..." if len(self.ramps) > 1 else ""))
        if self.index_heads:
            lines.extend(index_heads_lines(self.index_heads))
        if self.seconds:
            lines.append("seconds: " + "  ".join(f"{k} {v:.3f}" for k, v in self.seconds.items()))
        return "\n".join(lines)


def index_heads_lines(heads: list) -> list[str]:
    """The heads' lookups in a few lines: counts per kind, then each attended head and why."""
    from collections import Counter

    kinds = Counter(h["kind"] for h in heads)
    names = {"position": "position reads", "match": "newest-key matches", "scan": "attention"}
    lines = ["heads: " + ", ".join(f"{kinds[k]} {names[k]}" for k in names if kinds[k])
             + " (position reads and matches are answered from an index)"]
    for h in heads:
        if h["kind"] == "scan":
            lines.append(f"  layer {h['layer']} head {h['head']}: attention ({h['why']})")
    return lines[:1 + 20] + ([f"  ... {len(lines) - 21} more"] if len(lines) > 21 else [])


def head_records(weights) -> list[dict]:
    """`Stats.index_heads` of a model's layer weights."""
    out = []
    for i, w in enumerate(weights):
        for h, plan in enumerate(w.head_plans):
            out.append({"layer": i, "head": h, "kind": plan.kind, "gap": plan.gap,
                        "why": plan.why})
    return out


def _pct(a: int, b: int) -> str:
    return f"{100 * a / b:3.0f}%" if b else "  -"


class PassTrace:
    """What each pass of a compile's pipeline changed (`compile(trace_passes=True)`): the
    graph's ops, critical-path floor and, given the machine, the layers it would be compiled
    into, as given and after every pass, for the compile report. A floor is one walk over the
    graph and layers one schedule per pass, which is why it is asked for."""

    def __init__(self, graph: str, machine=None):
        self.graph = graph  # the name of the graph compiled
        self.machine = machine  # where given, each step's layers are scheduled on it
        self.steps: list[dict] = []

    def record(self, what: str, module) -> None:
        """One step: `what` ran (a pass spec, or "input"), leaving `module` as it is now."""
        from twdialect.analysis import critical_path
        from twdialect.interp import find_graph

        g = find_graph(module, self.graph)
        step = {"pass": what, "ops": len(g.block.ops), "floor": critical_path(g).n_layers}
        if self.machine is not None:
            step["layers"] = layers_as_is(module, self.graph, self.machine)
        self.steps.append(step)

    def after_pass(self, module_pass, module) -> None:
        """`run_pipeline`'s `after_each` hook."""
        from tw_passes import pass_spec

        self.record(pass_spec(module_pass), module)


def layers_as_is(module, graph: str, machine) -> int | None:
    """The layers `module`'s graph takes on `machine` scheduled as it stands (no pipeline:
    `decompose` where library ops remain); None where it does not fit."""
    from tw_lowering import prepare
    from tw_lowering.machine import GeometryError
    from tw_lowering.schedule import schedule
    from tw_lowering.tasks import LoweringError, TaskGraph
    from twdialect.interp import find_graph

    try:
        return schedule(TaskGraph(find_graph(prepare(module, None), graph)), machine).n_layers
    except (GeometryError, LoweringError):
        return None


def make_stats(sched: Schedule, weights, seconds: dict | None = None) -> Stats:
    m = sched.machine
    tg = sched.tg
    heads = [w.n_heads for w in weights]
    neurons = [w.n_neurons for w in weights]
    allocated = sum(h * m.head_params() + n * m.neuron_params() + 2 * m.d
                    for h, n in zip(heads, neurons))
    # a layer with gated neurons stores an up column and bias for each of its neurons
    allocated += sum(w.n_neurons * (m.d + 1) for w in weights if w.wu is not None)
    ops_per_layer = [0] * sched.n_layers
    for s in sched.slot:
        if s >= 0:
            ops_per_layer[layer_of(s)] += 1
    return Stats(
        n_layers=sched.n_layers, floor=sched.floor, d=m.d, d_head=m.d_head, d_hidden=m.d_hidden,
        n_ops=len(tg.ops), heads_per_layer=heads, neurons_per_layer=neurons,
        occupancy_per_layer=sched.occupancy, cancels=len(sched.cancels),
        rope_heads=sum(int((w.head_rope()[:, 1] > 0).sum()) for w in weights),
        ops_per_layer=ops_per_layer,
        graph_params=graph_params(tg.graph), allocated_params=allocated,
        total_capacity=sched.n_layers * m.layer_capacity(), per_annotation=_per_annotation(sched),
        seconds=dict(seconds or {}), note=sched.note,
        full_heads=sum(int(w.head_is_full().sum()) for w in weights),
        swish_neurons=sum(int(w.swish.sum()) for w in weights),
        gated_neurons=sum(_gated(w) for w in weights),
        index_heads=head_records(weights))


def _gated(w) -> int:
    """Gated neurons of a layer: a nonzero up column or an up bias other than 1."""
    if w.wu is None:
        return 0
    g = np.zeros(w.n_neurons, bool)
    g[w.wu.cols] = True
    return int(np.count_nonzero(g | (w.bu != 1.0)))


def _per_annotation(sched: Schedule) -> dict[str, dict]:
    """Per `tw.annotation`: placed ops, what they cost (as the schedule priced them), and the
    layers they span."""
    tg = sched.tg
    per_ann: dict[str, dict] = {}
    for t in tg.tasks:
        s = sched.slot[t.tid]
        if s < 0:
            continue
        ann = t.op.attributes.get(ANNOTATION)
        name = ann.data if ann is not None else "(none)"
        layer = layer_of(s)
        a = per_ann.setdefault(name, {"ops": 0, "heads": 0, "head_dims": 0, "neurons": 0,
                                      "first_layer": layer, "last_layer": layer})
        a["ops"] += 1
        cost = task_cost(tg, t, sched.machine).in_sublayer(is_attention_slot(s))
        a["heads"] += cost.heads
        a["head_dims"] += cost.dims
        a["neurons"] += cost.neurons
        a["first_layer"] = min(a["first_layer"], layer)
        a["last_layer"] = max(a["last_layer"], layer)
    return per_ann


def ramp_zones(graph) -> list[str]:
    """Every `tw.compare` of `graph` (the graph as given, before `decompose`) with the ramp its
    decomposition computes: +1 at and above the threshold t' its float32 weights encode, -1
    at and below t' - r, a linear ramp between (`twdialect.contracts.compare_params`; t' is
    within 2^-24 (|t| + 2 r) of t, r within (ramp/2, ramp]). Outside those zones the model
    is exact; inside them it follows the ramp where the oracle steps."""
    from twdialect.contracts import ContractError, compare_params
    from twdialect.dialect import CompareOp, describe

    out = []
    for op in graph.block.ops:
        if isinstance(op, CompareOp):
            try:
                p = compare_params(op)
            except ContractError:
                continue  # refused by decompose, with its own message
            out.append(f"{describe(op)}: step at {op.threshold.value.data:.9g}, ramp "
                       f"[{p.threshold - p.ramp:.9g}, {p.threshold:.9g})")
    return out
