"""`GraphPass`: the base of every tw pass that rewrites one `tw.graph` at a time.

xDSL runs a ModulePass on a whole module; tw's rewrites each work inside one graph (a graph is
IsolatedFromAbove: nothing it holds reads another graph). The base owns the loop over a
module's graphs, so a pass states only what it does to one graph:

    @dataclass(frozen=True)
    class MyPass(GraphPass):
        name = "my-pass"
        width: int = 4

        def check_options(self) -> None:          # optional: refuse bad options up front
            if self.width < 1:
                raise PassOptionError(f"my-pass: width must be at least 1, got {self.width}")

        def run_on_graph(self, ctx, graph) -> int:
            ...                                   # rewrite `graph` in place

It stays an xDSL ModulePass, so xDSL's PassPipeline, tw-opt and the registry run it as any other.
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from twdialect.dialect import GraphOp


def graphs_of(module: ModuleOp) -> list[GraphOp]:
    """The graphs a module holds, in order: those directly in its body, as `find_graph` and the
    lowering see them (a graph in a nested builtin.module is invisible to both)."""
    return [op for op in module.body.block.ops if isinstance(op, GraphOp)]


@dataclass(frozen=True)
class GraphPass(ModulePass):
    """A pass that rewrites each graph of a module on its own; subclasses implement
    `run_on_graph` and, where an option has a domain, `check_options`."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        # Options are checked before any graph changes: a bad option leaves the module as it was.
        self.check_options()
        for graph in self.graphs(op):
            self.run_on_graph(ctx, graph)

    def check_options(self) -> None:
        """Raise a TwError naming the option that is outside its domain (none by default)."""

    def graphs(self, module: ModuleOp) -> list[GraphOp]:
        """The graphs this run rewrites (all of them; a pass with a graph option narrows it)."""
        return graphs_of(module)

    @abstractmethod
    def run_on_graph(self, ctx: Context, graph: GraphOp) -> object:
        """Rewrite `graph` in place. What it returns (counts, stats) is for tests and benches;
        the pipeline ignores it."""
