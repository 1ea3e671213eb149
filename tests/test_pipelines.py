"""Passes and pipelines as objects: the GraphPass base owns the loop over a module's graphs, a
pipeline is a tuple of pass objects whose spec string (the command line's form) reads back to
equal objects and rewrites identically, and one function decides whether `decompose` runs."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from xdsl.dialects.builtin import ModuleOp

import tw_passes as passes
from tw_lowering import compile as tw_compile
from tw_lowering import prepare
from tw_passes import (TW_PASSES, PipelineError, get_tw_passes, pipeline_passes, pipeline_spec,
                    run_pipeline)
from tw_passes.decompose import DecomposePass
from tw_passes.fuse_linears import FuseLinears
from tw_passes.graph_pass import GraphPass, graphs_of
from tw_passes.horizontal_fuse import HorizontalFusePass
from tw_passes.optimize import DEFAULT_PIPELINE, DEFAULT_SPEC, Optimize
from tw_lowering.sequential_scope import SequentialScopePass
from twdialect import evaluate, parse_module, print_module
from twdialect import ops as tw
from twdialect.dialect import LIBRARY_OPS, GraphOp
from twdialect.errors import TwError
from twdialect.random_graphs import random_graph, sample_inputs

from pass_checks import assert_same  # noqa: E402


@dataclass(frozen=True)
class RecordGraphs(GraphPass):
    """Records the graphs it is run on (a test pass: not registered)."""

    name = "record-graphs"

    seen: list = field(default_factory=list)
    refuse: bool = False

    def check_options(self) -> None:
        if self.refuse:
            raise TwError("record-graphs: refused")

    def run_on_graph(self, ctx, graph: GraphOp) -> None:
        self.seen.append(graph.sym_name.data)


def _clamp_graph(name: str) -> GraphOp:
    """A graph with a library op, outside any module."""
    with tw.Graph(name) as g:
        tw.output("y", tw.clamp(tw.relu(tw.input("x", 2, (-1.0, 1.0))), 0.0, 0.5))
    return g.op.clone()


def _library_ops(module) -> list:
    return [op for op in module.walk() if isinstance(op, LIBRARY_OPS)]


# -- the GraphPass base --------------------------------------------------------------------


def test_graph_pass_visits_every_graph_of_a_module_once_in_order():
    module = ModuleOp([_clamp_graph(n) for n in ("a", "b", "c")])
    recorder = RecordGraphs()
    run_pipeline(module, (recorder,))
    assert recorder.seen == ["a", "b", "c"]
    assert [g.sym_name.data for g in graphs_of(module)] == ["a", "b", "c"]


def test_graph_pass_checks_its_options_before_any_graph():
    recorder = RecordGraphs(refuse=True)
    with pytest.raises(TwError, match="record-graphs: refused"):
        run_pipeline(ModuleOp([_clamp_graph("a")]), (recorder,))
    assert recorder.seen == []


def test_a_real_graph_pass_rewrites_every_graph():
    module = ModuleOp([_clamp_graph("a"), _clamp_graph("b")])
    run_pipeline(module, (DecomposePass(),))
    assert _library_ops(module) == []


def test_every_per_graph_pass_derives_from_graph_pass_and_keeps_no_loop_of_its_own():
    """`optimize` runs a pipeline over the module; every other pass works graph by graph."""
    factories = get_tw_passes()
    for name in TW_PASSES:
        cls = factories[name]()
        if name == "optimize":
            continue
        assert issubclass(cls, GraphPass), name
        assert "apply" not in vars(cls), f"{name} overrides the base's loop"


# -- pipelines: objects, and their spec strings ----------------------------------------------


def test_default_pipeline_round_trips_to_the_cli_string():
    assert DEFAULT_SPEC == ("decompose,canonicalize,fuse-linears,form-mlps,fuse-linears,"
                            "balance-sums,canonicalize,cse,dce")
    assert pipeline_spec(DEFAULT_PIPELINE) == DEFAULT_SPEC
    assert pipeline_passes(DEFAULT_SPEC) == DEFAULT_PIPELINE
    assert Optimize().pipeline == DEFAULT_SPEC


CONFIGURED = (
    SequentialScopePass(batch_size=2),
    DecomposePass(tolerance=1.0e30),
    FuseLinears(fanout=False, max_duplicate_params=8),
    HorizontalFusePass(d_head=8, pooled_heads=False),
    Optimize(pipeline="canonicalize,cse"),
)


def test_options_round_trip_in_kebab_case():
    spec = pipeline_spec(CONFIGURED)
    assert spec == ('sequential-scope{batch-size=2},decompose{tolerance=1.0e+30},'
                    'fuse-linears{fanout=false max-duplicate-params=8},'
                    'horizontal-fuse{d-head=8 pooled-heads=false},'
                    'optimize{pipeline="canonicalize,cse"}')
    assert pipeline_passes(spec) == CONFIGURED
    assert pipeline_passes(pipeline_spec((DecomposePass(tolerance=1e-5),))) == \
        (DecomposePass(tolerance=1e-5),)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("pipeline", [DEFAULT_PIPELINE, CONFIGURED], ids=["default", "configured"])
def test_a_tuple_pipeline_and_its_string_give_identical_ir(seed, pipeline):
    module = random_graph(seed, 20, library=True)
    inputs = sample_inputs(module, 4, seed)
    as_objects = run_pipeline(module.clone(), pipeline)
    as_text = run_pipeline(module.clone(), pipeline_spec(pipeline))
    assert print_module(as_objects) == print_module(as_text)
    assert_same(evaluate(as_objects, inputs), evaluate(as_text, inputs))


def test_compile_and_prepare_take_a_tuple_pipeline():
    module = random_graph(4, 16, library=True)
    assert print_module(prepare(module, DEFAULT_PIPELINE)) == \
        print_module(prepare(module, "default"))
    inputs = sample_inputs(module, 4, 4)
    by_objects = tw_compile(module, d=128, d_head=8, pipeline=DEFAULT_PIPELINE).run(inputs)
    by_name = tw_compile(module, d=128, d_head=8, pipeline="default").run(inputs)
    assert by_objects.keys() == by_name.keys()
    for name in by_name:
        assert (by_objects[name] == by_name[name]).all()


def test_the_cli_reads_the_default_spec_to_the_same_ir(tmp_path, capsys):
    from tw_tools.tw_opt import main

    module = random_graph(7, 20, library=True)
    src = tmp_path / "in.mlir"
    src.write_text(print_module(module))
    out = tmp_path / "out.mlir"
    assert main([str(src), "-p", DEFAULT_SPEC, "-o", str(out)]) == 0
    expected = print_module(run_pipeline(module, DEFAULT_PIPELINE))
    assert print_module(parse_module(out.read_text())) == expected


@pytest.mark.parametrize("pipeline, message", [
    ((DecomposePass,), "item 0 is the class DecomposePass: give a pass object, DecomposePass()"),
    ((DecomposePass(), "cse"), "item 1 is a str, not a pass object"),
    (None, "a pipeline is a string"),
])
def test_a_malformed_tuple_is_a_pipeline_error(pipeline, message):
    with pytest.raises(PipelineError, match=message.replace("(", r"\(").replace(")", r"\)")):
        run_pipeline(random_graph(1, 5, library=False), pipeline)


# -- decompose if needed: one function decides ------------------------------------------------


def test_needs_decompose_is_the_one_rule(monkeypatch):
    """prepare and optimize both ask `passes.needs_decompose`: overriding it steers both."""
    asked = []

    def never(module) -> bool:
        asked.append(type(module).__name__)
        return False

    monkeypatch.setattr(passes, "needs_decompose", never)
    graph = _clamp_graph("main")
    assert prepare(graph) is graph  # nothing to run: the graph itself, clamp and all
    module = ModuleOp([_clamp_graph("main")])
    run_pipeline(module, "optimize")
    assert len(_library_ops(module)) == 1  # optimize dropped its decompose
    assert asked == ["GraphOp", "ModuleOp"]


def test_needs_decompose_follows_the_library_ops():
    graph = _clamp_graph("main")
    assert passes.needs_decompose(graph)
    prepared = prepare(graph)
    assert not passes.needs_decompose(prepared)
    assert passes.needs_decompose(graph)  # the input is left alone
