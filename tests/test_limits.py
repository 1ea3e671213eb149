"""Limits and odd-but-valid graphs: every input beyond a documented limit is a one-line TwError
naming the op or option and the limit (never MemoryError, OverflowError or an empty message),
and every valid graph, however odd, lowers without crashing.

The limits (docs/dialect.md): MAX_WIDTH components per value, MAX_DENSE_ELEMENTS f32 numbers
per weight attribute, finite float properties; the machine (lowering/machine.py): MAX_DIM."""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.dialects.builtin import BytesAttr, DenseIntOrFPElementsAttr, TensorType, f32
from xdsl.utils.exceptions import ParseError

from tw_lowering import compile as tw_compile
from tw_passes import run_pipeline
from twdialect import evaluate, parse_module, print_module
from twdialect import ops as tw
from twdialect.dialect import (
    MAX_DENSE_ELEMENTS,
    MAX_WIDTH,
    LiteralOp,
    RangeAttr,
    TwVerifyException,
    VecType,
)
from twdialect.errors import TwError


def _module(body: str, graph: str = "main") -> str:
    return f"builtin.module {{\n  tw.graph @{graph} {{\n{body}\n  }}\n}}\n"


X1 = '    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<1>'


def _verify_error(text: str, *fragments: str) -> TwError:
    with pytest.raises(TwError) as info:
        parse_module(text)
    message = str(info.value)
    assert message and "\n" not in message, message
    for fragment in fragments:
        assert fragment in message, message
    return info.value


# ----------------------------------------------------------------------------------------
# Widths
# ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("width", [MAX_WIDTH + 1, 2**31, 2**64 + 1])
def test_parse_refuses_widths_above_max_width(width):
    """A 2^31-wide vector made decompose allocate 16 GiB; 2^64 + 1 overflowed numpy."""
    text = _module(f'    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<{width}>')
    with pytest.raises(ParseError, match=f"vector width {width} exceeds the limit of {MAX_WIDTH}"):
        parse_module(text)


def test_max_width_itself_parses_and_evaluates():
    text = _module(f'    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<{MAX_WIDTH}>\n'
                   f'    %c = tw.compare %x, 0.0 ramp 0.5 : !tw.vec<{MAX_WIDTH}>\n'
                   f'    tw.output "y" %c : !tw.vec<{MAX_WIDTH}>')
    out = evaluate(parse_module(text), {"x": np.full((2, MAX_WIDTH), 0.25)})
    assert out["y"].shape == (2, MAX_WIDTH) and np.all(out["y"] == 1.0)


def test_an_mlp_may_be_wider_inside_than_max_width():
    # MAX_WIDTH bounds values; an mlp's hidden lanes are not one (a pair table of 5,000
    # neurons): its b1 is as long as w1 is wide, in the builder as in the verifier
    with tw.Graph("main") as g:
        x = tw.input("x", 2, value_range=(-1.0, 1.0))
        tw.output("y", tw.mlp(x, np.ones((2, MAX_WIDTH + 8)), np.full(MAX_WIDTH + 8, -0.5),
                              np.ones((MAX_WIDTH + 8, 1))))
    out = evaluate(g.module, {"x": np.array([[1.0, 0.0]])})["y"]
    assert out[0, 0] == pytest.approx(0.5 * (MAX_WIDTH + 8))


@pytest.mark.parametrize("width", [0, -1, MAX_WIDTH + 1])
def test_vec_type_outside_the_limits_is_a_tw_error(width):
    with pytest.raises(TwError, match=r"!tw.vec width must be in \[1, 4096\]"):
        VecType(width)


@pytest.mark.parametrize("lo, hi", [(float("nan"), 1.0), (0.0, float("inf")), (1.0, 0.0)])
def test_range_attribute_errors_are_tw_errors(lo, hi):
    with pytest.raises(TwError, match="#tw.range"):
        RangeAttr(lo, hi)


# ----------------------------------------------------------------------------------------
# Weights
# ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("element, literal", [
    ("complex<f32>", "dense<(1.0,2.0)>"), ("i32", "dense<1>"), ("f16", "dense<1.0>"),
    ("f64", "dense<1.0>"), ("bf16", "dense<1.0>"), ("i1", "dense<true>")])
def test_weights_must_hold_f32(element, literal):
    """complex<f32> gave an empty message; i32 and f64 bytes were silently read as f32."""
    text = _module(f"    %c = tw.literal {literal} : tensor<2x{element}> : !tw.vec<2>\n"
                   '    tw.output "c" %c : !tw.vec<2>'.replace("tensor<2x", "tensor<2x"))
    _verify_error(text, "'tw.literal' %c in @main", f"must hold f32 elements, got {element}")


def _raw_dense(shape: tuple[int, ...], n_bytes: int) -> DenseIntOrFPElementsAttr:
    """A dense attribute with a declared shape and a payload of n_bytes (no checks)."""
    attr = DenseIntOrFPElementsAttr.__new__(DenseIntOrFPElementsAttr)
    object.__setattr__(attr, "type", TensorType(f32, shape))
    object.__setattr__(attr, "data", BytesAttr(bytes(n_bytes)))
    return attr


def _graph_with_literal(value: DenseIntOrFPElementsAttr, width: int):
    with tw.Graph("main", verify=False) as g:
        c = tw._one(LiteralOp.create(result_types=[VecType(width)], properties={"value": value}))
        tw.output("c", c)
    return g.op


def test_weights_above_max_dense_elements_are_refused_before_reading_them():
    """A splat shape claims any number of elements; to_numpy would expand them all."""
    graph = _graph_with_literal(_raw_dense((MAX_DENSE_ELEMENTS + 1,), 4), 4)
    with pytest.raises(TwVerifyException, match=f"above the limit of {MAX_DENSE_ELEMENTS}"):
        graph.verify()


def test_weight_bytes_must_match_the_shape():
    graph = _graph_with_literal(_raw_dense((3,), 8), 3)
    with pytest.raises(TwVerifyException, match="holds 8 bytes, not 3 f32 elements"):
        graph.verify()


# ----------------------------------------------------------------------------------------
# Structure and discardable attributes
# ----------------------------------------------------------------------------------------


def test_nested_graph_is_refused():
    """It passed the verifier, then crashed six passes and tw-stats (KeyError on GraphOp)."""
    text = _module(X1 + '\n    tw.graph @inner {\n    }\n    tw.output "y" %x : !tw.vec<1>',
                   "outer")
    err = _verify_error(text, "'tw.graph' @inner in @outer", "must sit directly in a builtin.module")
    assert err.op is not None and err.op.sym_name.data == "inner"


def test_graph_in_a_nested_module_is_not_found():
    text = "builtin.module {\n  builtin.module {\n    tw.graph @deep {\n    }\n  }\n}\n"
    # A nested module is a builtin.module too: the graph is found only at the top level, so
    # the verifier accepts it and find_graph reports it missing with the graphs it sees.
    module = parse_module(text)
    with pytest.raises(TwError, match="no graph @main"):
        tw_compile(module, d=64, d_head=8)


@pytest.mark.parametrize("attrs, message", [
    ("{tw.annotation = 3 : i64}", "attribute tw.annotation must be a string, got 3 : i64"),
    ("{tw.annotation = [\"a\"]}", "attribute tw.annotation must be a string"),
    ('{tw.scope = 1 : i64, tw.iteration = 0 : i64}', "attribute tw.scope must be a string"),
    ('{tw.scope = "s", tw.iteration = 1.5 : f64}', "attribute tw.iteration must be an integer"),
    ('{tw.iteration = 0 : i64}', "tw.scope and tw.iteration go together"),
    ('{tw.scope_terminal}', "tw.scope_terminal marks the end of a scope iteration"),
    ('{tw.layer = "0"}', "attribute tw.layer must be an integer"),
    ('{tw.accumulate = 1 : i64}', "attribute tw.accumulate must be a unit attribute"),
])
def test_malformed_discardable_attributes_are_refused(attrs, message):
    """A non-string tw.annotation crashed compile and tw-stats (AttributeError)."""
    text = _module(X1 + f"\n    %r = tw.relu %x {attrs} : !tw.vec<1>\n"
                   '    tw.output "y" %r : !tw.vec<1>')
    _verify_error(text, "'tw.relu' %r in @main", message)


def test_well_formed_discardable_attributes_still_verify_and_compile():
    text = _module(X1 + '\n    %r = tw.relu %x {tw.annotation = "a/b", tw.scope = "s", '
                   'tw.iteration = 0 : i64, tw.scope_terminal} : !tw.vec<1>\n'
                   '    tw.output "y" %r : !tw.vec<1>')
    ct = tw_compile(parse_module(text), d=64, d_head=8)
    assert "a" in ct.stats.per_annotation or "a/b" in ct.stats.per_annotation


@pytest.mark.parametrize("op_text, message", [
    ('"tw.compare"(%x) <{threshold = 0.0 : f64, ramp = 0x7FF0000000000000 : f64}>',
     "ramp must be finite"),
    ('"tw.compare"(%x) <{threshold = 0x7FF8000000000000 : f64, ramp = 0.5 : f64}>',
     "threshold must be finite"),
    ('"tw.clamp"(%x) <{lo = 0xFFF0000000000000 : f64, hi = 1.0 : f64}>', "lo must be finite"),
    ('"tw.clamp"(%x) <{lo = 0.0 : f64, hi = 0x7FF0000000000000 : f64}>', "hi must be finite"),
])
def test_non_finite_float_properties_are_refused(op_text, message):
    text = _module(X1 + f"\n    %c = {op_text} : (!tw.vec<1>) -> !tw.vec<1>\n"
                   '    tw.output "y" %c : !tw.vec<1>')
    _verify_error(text, message)


# ----------------------------------------------------------------------------------------
# Odd but valid graphs lower (lower-to-transformer and compile) without crashing
# ----------------------------------------------------------------------------------------


def _dead_accumulating_add():
    x = tw.input("x", 2, (-1.0, 1.0))
    tw.add(tw.linear(x, np.eye(2)), tw.linear(x, 2 * np.eye(2)))  # nobody reads the sum
    tw.output("y", tw.relu(x))


def _dead_add_of_a_literal():
    x = tw.input("x", 2, (-1.0, 1.0))
    tw.add(tw.linear(x, np.eye(2)), tw.literal([1.0, 2.0]))
    tw.output("y", x)


def _dead_chain_through_an_accumulating_add():
    x = tw.input("x", 2, (-1.0, 1.0))
    tw.relu(tw.add(tw.relu(x), tw.relu(tw.negate(x))))
    tw.output("y", x)


def _output_is_an_input():
    tw.output("y", tw.input("x", 2, (-1.0, 1.0)))


def _output_of_a_literal():
    tw.input("x", 1, (-1.0, 1.0))
    tw.output("y", tw.literal([1.0, 2.0]))


def _no_outputs():
    tw.relu(tw.input("x", 2, (-1.0, 1.0)))


def _two_outputs_of_one_value():
    r = tw.relu(tw.input("x", 2, (-1.0, 1.0)))
    tw.output("a", r)
    tw.output("b", r)


def _unused_input_and_embedding():
    x = tw.input("x", 2, (-1.0, 1.0))
    tw.input("unused", 3, (-1.0, 1.0))
    tw.embedding("tokens", np.eye(3))
    tw.output("y", tw.relu(x))


def _after_with_only_dead_deps():
    x = tw.input("x", 2, (-1.0, 1.0))
    tw.output("y", tw.after(x, tw.relu(tw.linear(x, np.eye(2)))))


def _after_of_a_literal():
    x = tw.input("x", 2, (-1.0, 1.0))
    tw.output("y", tw.after(tw.literal([1.0]), tw.relu(x)))


def _dead_attention_and_mlp():
    x = tw.input("x", 2, (-1.0, 1.0))
    tw.attn(x, x, x, np.eye(2), np.eye(2), np.eye(2), np.eye(2))
    tw.mlp(x, np.eye(2), None, np.eye(2))
    tw.output("y", x)


def _position_columns_only():
    x = tw.input("x", 1, (-1.0, 1.0))
    p = tw.pos_encoding(4, max_len=16)
    tw.output("i", tw.slice(p, 0, 1))
    tw.output("rest", tw.slice(p, 1, 3))
    tw.output("x", x)


ODD_GRAPHS = [_dead_accumulating_add, _dead_add_of_a_literal,
              _dead_chain_through_an_accumulating_add, _output_is_an_input, _output_of_a_literal,
              _no_outputs, _two_outputs_of_one_value, _unused_input_and_embedding,
              _after_with_only_dead_deps, _after_of_a_literal, _dead_attention_and_mlp,
              _position_columns_only]


def _build(make) -> object:
    with tw.Graph("main") as g:
        make()
    return g.module


@pytest.mark.parametrize("make", ODD_GRAPHS, ids=[f.__name__.strip("_") for f in ODD_GRAPHS])
def test_lower_to_transformer_places_odd_graphs(make):
    """lower-to-transformer crashed (TypeError) on an add nobody reads."""
    module = _build(make)
    run_pipeline(module, "lower-to-transformer{d=64 d-head=8}")
    graph = next(iter(module.body.block.ops))
    assert graph.attributes["tw.n_layers"].value.data >= 0
    text = print_module(module)
    assert "tw.layer" in text or graph.attributes["tw.n_layers"].value.data == 0


@pytest.mark.parametrize("make", ODD_GRAPHS, ids=[f.__name__.strip("_") for f in ODD_GRAPHS])
def test_compiled_odd_graphs_match_the_oracle(make):
    module = _build(make)
    rng = np.random.default_rng(0)
    feeds = {}
    for op in module.walk():
        if op.name == "tw.input":
            feeds[op.input_name.data] = rng.uniform(-1, 1, (3, op.results[0].type.width.data))
        elif op.name == "tw.embedding":
            feeds[op.input_name.data] = np.array([0, 2, 1])
    want = evaluate(module, feeds)
    got = tw_compile(module, d=64, d_head=8).run(feeds)
    assert set(got) == set(want)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], atol=1e-5)


def test_dead_accumulating_add_gets_no_columns():
    module = _build(_dead_accumulating_add)
    run_pipeline(module, "lower-to-transformer{d=64 d-head=8}")
    adds = [op for op in module.walk() if op.name == "tw.add"]
    assert adds and all("tw.accumulate" in a.attributes and "tw.cols" not in a.attributes
                        for a in adds)


def test_lower_to_transformer_names_a_missing_graph():
    module = _build(_output_is_an_input)
    with pytest.raises(TwError, match=r"option graph=nope: no such graph in the module "
                                      r"\(graphs: @main\)"):
        run_pipeline(module, "lower-to-transformer{d=64 d-head=8 graph=nope}")


@pytest.mark.parametrize("options, message", [
    ("d=1000000000000 d-head=8", "d=1000000000000 is outside"),
    ("d=64 d-head=7", "d=64 must be a multiple of d_head=7"),
    ("d=64 d-head=8 d-hidden=-3", "d_hidden=-3 is outside"),
])
def test_lower_to_transformer_geometry_errors(options, message):
    module = _build(_output_is_an_input)
    with pytest.raises(TwError, match=message):
        run_pipeline(module, f"lower-to-transformer{{{options}}}")


def test_a_verifier_error_does_not_print_the_module(monkeypatch):
    """xDSL prints the whole module into a failing verifier's message: with a legal 2^26-entry
    weight beside the error that took 13 s; tw's errors are raised as they are."""
    from xdsl.printer import Printer

    from twdialect import parse_module
    from twdialect.dialect import TwVerifyException

    def no_printing(*args, **kwargs):
        raise AssertionError("the module was printed")

    text = ('tw.graph @main {\n  %x = tw.input "x" <-1.0, 1.0> : !tw.vec<2>\n'
            '  %y = tw.linear %x weight dense<1.0> : tensor<3x1xf32> : !tw.vec<2> -> !tw.vec<1>\n'
            '  tw.output "y" %y : !tw.vec<1>\n}\n')
    monkeypatch.setattr(Printer, "print_op", no_printing)
    with pytest.raises(TwVerifyException, match="'tw.linear'"):
        parse_module(text)


def test_values_beyond_float32_are_refused_at_compile_time():
    """The oracle (float64) holds 3.5e38 and 3e38 * 1e38; the float32 model would hold inf."""
    from tw_lowering import LoweringError, compile
    from twdialect import ops as tw

    with tw.Graph() as g:
        tw.output("y", tw.input("x", 1, (-1.0, 3.5e38)))
    with pytest.raises(LoweringError, match="reaches 3.5e\\+38, beyond float32"):
        compile(g.module, d=16, d_head=4)
    with tw.Graph() as h:
        tw.output("y", tw.linear(tw.input("x", 1, (-3e38, 3e38)), [[1e38]]))
    with pytest.raises(LoweringError, match="'tw.linear'.* can reach 3e\\+76"):
        compile(h.module, d=16, d_head=4)
    with tw.Graph() as ok:
        tw.output("y", tw.linear(tw.input("x", 1, (-1e20, 1e20)), [[2.0]]))
    compile(ok.module, d=16, d_head=4)
