"""Typed op constructors (`LinearOp(x, weight, bias)`) and the builder's state.

Every op class builds from typed arguments; an op so built prints as the parser would build it
(property order included), and the builder keeps all of its state in the `Graph` it builds.
"""

from __future__ import annotations

import ast
import pathlib
import threading

import numpy as np
import pytest
from xdsl.dialects.builtin import ModuleOp

from twdialect import dialect as d
from twdialect import ops as tw
from twdialect import parse_module, print_module
from twdialect.dense import dense, to_numpy
from twdialect.dialect import ANNOTATION, TW_OPS, width_of
from twdialect.ranges import box_of


def _every_op_graph() -> d.GraphOp:
    """One graph holding every op class, each made by its typed constructor."""
    x = d.InputOp("x", 2, (-1.0, 1.0))
    s = d.InputOp("s", 1, (0.0, 3.0), integer=True)
    ops = [x, s, d.EmbeddingOp("tokens", np.eye(3, 2)), d.PosEncodingOp(4, 16),
           d.PosTableOp(np.eye(16)[:, :2]), d.LiteralOp([1.0, -2.0])]
    xv, sv = x.out, s.out
    eye = np.eye(2)

    def add(op):
        ops.append(op)
        return op.results[0]

    add(d.LinearOp(xv, eye, [0.5, 0.0]))
    add(d.LinearOp(xv, dense(np.ones((2, 3)))))  # a dense attribute passes through
    add(d.ReluOp(xv))
    add(d.AddOp(xv, xv))
    add(d.ConcatOp([xv, sv]))
    add(d.AttnOp(xv, xv, xv, eye, eye, eye, eye))
    add(d.AttnOp(xv, xv, xv, eye, eye, eye, eye, mask="full"))
    add(d.MlpOp(xv, eye, np.ones((2, 1)), b1=[0.0, 1.0]))
    add(d.MlpOp(xv, eye, eye, b2=[1.0, 1.0]))
    add(d.SliceOp(xv, 1, 1))
    add(d.AfterOp(xv, [sv]))
    c = add(d.CompareOp(xv, 0.0, 0.1))
    add(d.SelectOp(c, xv, xv))
    add(d.ClampOp(xv, -0.5, 0.5))
    add(d.PiecewiseLinearOp(sv, [0.0, 3.0], [[0.0], [1.0]]))
    last = add(d.PiecewiseLinear2dOp(sv, sv, [0.0, 3.0], [0.0, 3.0], np.zeros((2, 2, 2))))
    ops.append(d.OutputOp("y", last))
    return d.GraphOp("main", ops)


def test_every_op_class_has_a_typed_constructor():
    graph = _every_op_graph()
    built = {type(op) for op in graph.block.ops} | {d.GraphOp}
    assert built == set(TW_OPS), f"not built: {[c.name for c in set(TW_OPS) - built]}"


def test_typed_constructors_print_as_the_parser_builds():
    """The module verifies, and its generic text (properties in order) survives a re-parse."""
    module = ModuleOp([_every_op_graph()])
    module.verify()
    generic = print_module(module, generic=True)
    assert print_module(parse_module(generic), generic=True) == generic
    assert print_module(parse_module(print_module(module))) == print_module(module)


def test_result_types_follow_the_arguments():
    x = d.InputOp("x", 3, (0.0, 1.0)).out
    assert width_of(d.LinearOp(x, np.ones((3, 5))).out) == 5
    assert width_of(d.ConcatOp([x, x]).out) == 6
    assert width_of(d.SliceOp(x, 1, 2).out) == 2
    assert width_of(d.AttnOp(x, x, x, np.ones((3, 2)), np.ones((3, 2)), np.ones((3, 4)),
                           np.ones((4, 7))).out) == 7
    mlp = d.MlpOp(x, np.ones((3, 4)), np.ones((4, 2)), b1=np.zeros(4), b2=np.zeros(2))
    assert list(mlp.properties) == ["w1", "b1", "w2", "b2"]
    assert width_of(mlp.out) == 2
    assert d.ReluOp(x).out.type == x.type
    assert np.array_equal(to_numpy(d.LiteralOp([1.0, 2.5]).value), [1.0, 2.5])


def test_builder_makes_ops_with_the_typed_constructors():
    source = pathlib.Path(tw.__file__).read_text()
    assert ".create(" not in source


def test_builder_module_holds_no_mutable_state():
    """The builder's state lives in `Graph`; the module keeps only which graph is innermost
    open, per thread (`_innermost`, as xDSL's ImplicitBuilder keeps its current builder)."""
    tree = ast.parse(pathlib.Path(tw.__file__).read_text())
    assert not [n for n in ast.walk(tree) if isinstance(n, ast.Global)], "`global` in ops.py"
    mutable = (ast.List, ast.Dict, ast.Set, ast.ListComp, ast.DictComp, ast.SetComp)
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [t.id for t in targets if isinstance(t, ast.Name)]
            is_call = isinstance(node.value, ast.Call)
            assert not isinstance(node.value, mutable) and (not is_call or names == ["_innermost"]), \
                f"module-level state in ops.py: {names}"


def test_annotations_belong_to_their_graph():
    with tw.Graph("outer") as outer:
        x = tw.input("x", 1, (0.0, 1.0))
        with tw.annotate("stage"):
            with tw.Graph("inner") as inner:
                tw.output("y", tw.relu(tw.input("z", 1, (0.0, 1.0))))
            tw.output("y", tw.relu(x))
    assert all(ANNOTATION not in op.attributes for op in inner.op.block.ops)
    relu = next(op for op in outer.op.block.ops if isinstance(op, d.ReluOp))
    assert relu.attributes[ANNOTATION].data == "stage"


def test_annotate_outside_a_graph_is_refused():
    with pytest.raises(tw.BuilderError, match="tw.annotate: no graph is open"):
        with tw.annotate("stage"):
            pass


def test_each_thread_builds_into_its_own_graph():
    built = {}

    def build():
        with tw.Graph("side") as g:
            tw.output("y", tw.input("a", 1, (0.0, 1.0)))
        built["side"] = g

    with tw.Graph("main") as main:
        x = tw.input("x", 1, (0.0, 1.0))
        worker = threading.Thread(target=build)
        worker.start()
        worker.join()
        tw.output("y", x)
    assert [op.name for op in built["side"].op.block.ops] == ["tw.input", "tw.output"]
    assert [op.name for op in main.op.block.ops] == ["tw.input", "tw.output"]


def test_range_boxes_are_cached_on_the_graph():
    with tw.Graph("main") as g:
        x = tw.input("x", 2, (-1.0, 1.0))
        y = tw.relu(x)
        lo, hi = box_of(y, g.value_boxes)
        assert set(g.value_boxes) == {x, y}
        tw.output("y", y)
    assert np.array_equal(lo, [0.0, 0.0]) and np.array_equal(hi, [1.0, 1.0])
