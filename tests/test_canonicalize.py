"""canonicalize on tw ops: each pattern, termination, and differential tests."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tw_passes import run_pipeline
from twdialect.canonicalization import PATTERNS
from twdialect import evaluate, print_module
from twdialect import ops as tw
from twdialect.analysis import first_use_before_def
from twdialect.dialect import LiteralOp
from twdialect.interp import find_graph
from twdialect.random_graphs import random_graph, sample_inputs

from pass_checks import assert_same  # noqa: E402

N_POS = 4



def canonicalize(module, seed: int = 0):
    inputs = sample_inputs(module, N_POS, seed)
    before = evaluate(module, inputs)
    run_pipeline(module, "canonicalize")
    module.verify()
    assert first_use_before_def(find_graph(module).block) is None
    assert_same(before, evaluate(module, inputs, n_positions=N_POS))
    return module


def body(module) -> list[str]:
    return [op.name for op in find_graph(module).block.ops]


def output_owner(module, name: str):
    for op in find_graph(module).block.ops:
        if op.name == "tw.output" and op.output_name.data == name:
            return op.value.owner
    raise KeyError(name)


def test_every_primitive_view_and_linear_has_patterns():
    assert {cls.__name__ for cls in PATTERNS} >= {"LinearOp", "AddOp", "ConcatOp", "SliceOp",
                                                   "ReluOp", "MlpOp"}


def test_identity_linear_is_its_input():
    with tw.Graph() as g:
        x = tw.input("x", 3, (-1.0, 1.0))
        tw.output("y", tw.linear(x, np.eye(3), np.zeros(3)))
        tw.output("z", tw.linear(x, np.eye(3), [0.0, 1.0, 0.0]))  # a real offset: stays
    canonicalize(g.module)
    assert output_owner(g.module, "y").name == "tw.input"
    assert output_owner(g.module, "z").name == "tw.linear"


def test_zero_linear_is_a_literal():
    with tw.Graph() as g:
        x = tw.input("x", 2, (-1.0, 1.0))
        tw.output("y", tw.linear(x, np.zeros((2, 3)), [1.0, 2.0, 3.0]))
        tw.output("z", tw.linear(x, np.zeros((2, 2))))
    canonicalize(g.module)
    assert isinstance(output_owner(g.module, "y"), LiteralOp)
    assert isinstance(output_owner(g.module, "z"), LiteralOp)


@pytest.mark.parametrize("make", [
    lambda c: tw.linear(c, [[1.0, 2.0], [3.0, 4.0]], [0.5, 0.5]),
    lambda c: tw.relu(c),
    lambda c: tw.mlp(c, [[1.0, -1.0], [0.5, 2.0]], [0.1, -3.0], [[1.0], [2.0]], [0.25]),
    lambda c: tw.add(c, tw.literal([1.0, 1.0])),
    lambda c: tw.slice(c, 1, 1),
    lambda c: tw.concat(c, tw.literal([7.0])),
])
def test_ops_of_literals_fold(make):
    with tw.Graph() as g:
        x = tw.input("x", 1, (-1.0, 1.0))
        tw.output("x", x)
        tw.output("y", make(tw.literal([1.5, -2.0])))
    canonicalize(g.module)
    assert body(g.module) == ["tw.input", "tw.output", "tw.literal", "tw.output"]


def test_add_of_zero_is_the_other_operand():
    with tw.Graph() as g:
        x = tw.input("x", 2, (-1.0, 1.0))
        zero = tw.literal([0.0, 0.0])
        tw.output("a", tw.add(x, zero))
        tw.output("b", tw.add(zero, x))
        tw.output("c", tw.add(x, tw.literal([0.0, 1.0])))  # not zero: stays
    canonicalize(g.module)
    assert output_owner(g.module, "a").name == "tw.input"
    assert output_owner(g.module, "b").name == "tw.input"
    assert output_owner(g.module, "c").name == "tw.add"


def test_views_simplify():
    with tw.Graph() as g:
        x = tw.input("x", 2, (-1.0, 1.0))
        y = tw.input("y", 3, (-1.0, 1.0))
        inner = tw.concat(x, y)
        outer = tw.concat(tw.relu(x), inner)
        tw.output("flat", outer)
        tw.output("whole", tw.slice(tw.concat(x, y), 0, 5))
        tw.output("inside", tw.slice(outer, 5, 2))
        tw.output("twice", tw.slice(tw.slice(outer, 1, 5), 1, 1))  # outer[2] = x[0]
    canonicalize(g.module)
    flat = output_owner(g.module, "flat")
    assert [v.owner.name for v in flat.ins] == ["tw.relu", "tw.input", "tw.input"]
    inside = output_owner(g.module, "inside")
    assert inside.name == "tw.slice" and inside.x.owner.input_name.data == "y"
    twice = output_owner(g.module, "twice")
    assert twice.name == "tw.slice" and twice.x.owner.name == "tw.input"
    assert output_owner(g.module, "whole").name == "tw.concat"


def test_literal_concat_operands_join_the_bias():
    with tw.Graph() as g:
        x = tw.input("x", 2, (-1.0, 1.0))
        c = tw.concat(tw.literal([1.0]), x, tw.literal([2.0, 3.0]))
        tw.output("y", tw.linear(c, np.arange(10.0).reshape(5, 2)))
        tw.output("z", tw.mlp(c, np.ones((5, 2)), None, np.ones((2, 1))))
    canonicalize(g.module)
    for name in ("y", "z"):
        owner = output_owner(g.module, name)
        assert owner.x.owner.name == "tw.input"


def test_single_operand_concat_is_its_operand():
    from twdialect.dialect import ConcatOp

    with tw.Graph() as g:
        x = tw.input("x", 2, (-1.0, 1.0))
        c = tw._one(ConcatOp.create(operands=[x], result_types=[x.type]))
        tw.output("y", c)
    canonicalize(g.module)
    assert body(g.module) == ["tw.input", "tw.output"]


@settings(max_examples=50, deadline=None)
@given(seed=st.integers(0, 10**6), n_ops=st.integers(3, 40))
def test_random_graphs_keep_their_meaning_and_reach_a_fixpoint(seed, n_ops):
    module = canonicalize(random_graph(seed, n_ops, library=False), seed)
    text = print_module(module)
    run_pipeline(module, "canonicalize")
    assert print_module(module) == text  # a second run finds nothing: no pattern undoes another


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10**6), n_ops=st.integers(3, 40))
def test_literal_heavy_random_graphs(seed, n_ops):
    module = random_graph(seed, n_ops, library=False,
                          kinds=("literal", "literal", "linear", "add", "concat", "slice", "relu",
                                 "mlp"))
    canonicalize(module, seed)


@pytest.mark.parametrize("seed", range(4))
def test_compiled_model_matches_after_canonicalize(seed):
    from tw_lowering import compile

    module = random_graph(seed, 16, library=False,
                          kinds=("literal", "linear", "add", "concat", "slice", "relu", "mlp"))
    inputs = sample_inputs(module, N_POS, seed)
    reference = evaluate(module, inputs)
    compiled = compile(module, d=128, d_head=8, pipeline="canonicalize")
    assert_same(reference, compiled.run(inputs, n_positions=N_POS))


def test_tables_lose_the_columns_no_live_slice_reads():
    table = np.arange(20.0).reshape(4, 5)
    with tw.Graph() as g:
        e = tw.embedding("tokens", table)
        p = tw.pos_table(table)
        tw.slice(e, 0, 2)  # dead: its columns go too
        tw.output("y", tw.add(tw.slice(e, 1, 1), tw.slice(e, 4, 1)))
        tw.output("z", tw.slice(p, 2, 2))
    canonicalize(g.module)
    widths = {op.name: op.out.type for op in find_graph(g.module).block.ops
              if op.name in ("tw.embedding", "tw.pos_table")}
    assert str(widths["tw.embedding"]) == "!tw.vec<2>" and str(widths["tw.pos_table"]) == "!tw.vec<2>"


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10**6), data=st.data())
def test_narrowed_tables_keep_their_meaning(seed, data):
    rng = np.random.default_rng(seed)
    width = data.draw(st.integers(2, 7))
    spans = data.draw(st.lists(st.tuples(st.integers(0, width - 1), st.integers(1, width),
                                         st.booleans()), min_size=1, max_size=5))
    with tw.Graph() as g:
        e = tw.embedding("tokens", rng.normal(size=(5, width)))
        p = tw.pos_table(rng.normal(size=(N_POS, width)))
        for k, (start, length, live) in enumerate(spans):
            length = min(length, width - start)
            for name, table in (("e", e), ("p", p)):
                piece = tw.slice(table, start, length)
                if live:
                    tw.output(f"{name}{k}", piece)
    canonicalize(g.module, seed)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10**6), data=st.data())
def test_linears_of_tables_that_outputs_read_become_tables(seed, data):
    """A linear of a table's columns that only outputs read is a table (the embedding grows,
    one per input); one another op reads stays. Meaning kept, and a fixpoint."""
    rng = np.random.default_rng(seed)
    width = data.draw(st.integers(2, 6))
    reads = data.draw(st.lists(st.tuples(st.integers(0, width - 1), st.integers(1, width),
                                         st.integers(1, 3), st.booleans()),
                               min_size=1, max_size=4))
    with tw.Graph() as g:
        e = tw.embedding("tokens", rng.normal(size=(5, width)))
        p = tw.pos_table(rng.normal(size=(N_POS, width)))
        tw.output("whole", tw.linear(e, rng.normal(size=(width, 2))))
        for k, (start, length, out, only_output) in enumerate(reads):
            length = min(length, width - start)
            for name, table in (("e", e), ("p", p)):
                lin = tw.linear(tw.slice(table, start, length), rng.normal(size=(length, out)),
                                rng.normal(size=out))
                tw.output(f"{name}{k}", lin if only_output else tw.relu(lin))
    module = canonicalize(g.module, seed)
    graph = find_graph(module)
    embeddings = [op for op in graph.block.ops if op.name == "tw.embedding"]
    assert len(embeddings) == 1
    readers = [use.operation.name for op in graph.block.ops if op.name == "tw.linear"
               for use in op.out.uses]
    assert "tw.output" not in readers
    text = print_module(module)
    run_pipeline(module, "canonicalize")
    assert print_module(module) == text
