"""`lower-to-transformer{d=.. d-head=.. d-hidden=..}`: schedule the graph, record placement in the IR.

Every op that does work gets `tw.layer`, `tw.sublayer` ("attn" or "mlp"), `tw.cols` (the
residual columns of its result) and its cost (`tw.heads` for attention ops, `tw.dims` for
head work, `tw.neurons` for MLP work); accumulating adds get `tw.accumulate`; sources get
`tw.cols`; a value whose columns were cancelled for reuse gets `tw.cancel = "L<layer>.<sublayer>"`.
The graph gets `tw.n_layers`, `tw.floor` and `tw.geometry`. Values are unchanged: the pass only
annotates (FileCheck tests read the placement from here). Dead code (work no output reads) is
not placed, so it gets no placement attributes (a dead accumulating add keeps `tw.accumulate`).
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import DenseArrayBase, ModuleOp, StringAttr, UnitAttr, i64

from tw_lowering.machine import Machine
from tw_passes.graph_pass import GraphPass, graphs_of
from twdialect.analysis import accumulating_adds, is_attention_slot, layer_of, sublayer_name
from twdialect.dialect import AttnOp, GraphOp, int_prop


def annotate_schedule(sched) -> None:
    tg = sched.tg
    g: GraphOp = tg.graph
    for t in tg.tasks:
        s = sched.slot[t.tid]
        if s < 0:
            continue
        op = t.op
        op.attributes["tw.layer"] = int_prop(layer_of(s))
        op.attributes["tw.sublayer"] = StringAttr(sublayer_name(s))
        from tw_lowering.rules import task_cost

        cost = task_cost(tg, t, sched.machine)
        if is_attention_slot(s):
            if isinstance(op, AttnOp):
                op.attributes["tw.heads"] = int_prop(cost.heads)
            else:
                op.attributes["tw.dims"] = int_prop(cost.dims)
        else:
            op.attributes["tw.neurons"] = int_prop(cost.neurons)
        op.attributes["tw.cols"] = _cols(sched.cols[t.out_group])
    for add in accumulating_adds(g):
        add.attributes["tw.accumulate"] = UnitAttr()
        gid = int(tg.refs[add.results[0]].group[0])
        if sched.cols[gid] is not None:  # None: nothing reads the sum, it was never placed
            add.attributes["tw.cols"] = _cols(sched.cols[gid])
    for gid in tg.sources:
        if sched.cols[gid] is not None:
            tg.groups[gid].source.attributes["tw.cols"] = _cols(sched.cols[gid])
    for s, gid in sched.cancels:
        owner = tg.groups[gid].value.owner
        owner.attributes["tw.cancel"] = StringAttr(f"L{layer_of(s)}.{sublayer_name(s)}")
    g.attributes["tw.n_layers"] = int_prop(sched.n_layers)
    g.attributes["tw.floor"] = int_prop(sched.floor)
    m = sched.machine
    g.attributes["tw.geometry"] = StringAttr(f"d={m.d} d_head={m.d_head} d_hidden={m.d_hidden}")


def _cols(cols) -> DenseArrayBase:
    return DenseArrayBase.from_list(i64, [int(c) for c in cols])


@dataclass(frozen=True)
class LowerToTransformerPass(GraphPass):
    name = "lower-to-transformer"

    d: int = 256
    d_head: int = 16
    d_hidden: int = 0  # 0: 4 * d (Machine's default)
    graph: str = ""  # empty: every graph in the module

    def machine(self) -> Machine:
        """The options' geometry (a GeometryError names a bad one)."""
        return Machine(self.d, self.d_head, self.d_hidden or None)

    def check_options(self) -> None:
        self.machine()

    def graphs(self, module: ModuleOp) -> list[GraphOp]:
        """The graph named by option `graph`, or every graph when it is empty."""
        graphs = graphs_of(module)
        if not self.graph:
            return graphs
        chosen = [g for g in graphs if g.sym_name.data == self.graph]
        if not chosen:
            from tw_lowering.tasks import LoweringError

            names = ", ".join("@" + g.sym_name.data for g in graphs) or "none"
            raise LoweringError(f"lower-to-transformer: option graph={self.graph}: no such graph "
                                f"in the module (graphs: {names})")
        return chosen

    def run_on_graph(self, ctx: Context, graph: GraphOp) -> None:
        from xdsl.rewriter import Rewriter

        from tw_lowering.schedule import schedule
        from tw_lowering.tasks import TaskGraph

        sched = schedule(TaskGraph(graph), self.machine())
        if sched.tg.graph is not graph:  # the width needed cheap values recomputed: the IR
            Rewriter.replace_op(graph, sched.tg.graph)  # shows the clones it schedules
        annotate_schedule(sched)
