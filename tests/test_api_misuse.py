"""Misuse of the Python builder and the ops library: every bad argument is a TwError at the call,
whose message names the function (`tw.linear: ...`) and the argument, never an internal
exception (TypeError, KeyError, IndexError...) or a verifier error far from the cause.

The table is generated: every builder and library function x every one of its arguments x a
set of bad values of that argument's kind (wrong types, None, strings, bools, NaN/inf, ragged
or complex arrays, negative or huge sizes, values of another graph...). Each function's good
call is run first, so a case fails only through the one argument it spoils."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pytest

from tw_lowering import compile as tw_compile
from tw_lowering.machine import MAX_DIM, GeometryError, Machine
from twdialect import ops as tw
from twdialect.dialect import MAX_WIDTH
from twdialect.errors import TwError

NAN, INF = float("nan"), float("inf")


class Values:
    """The tw values a good call needs, built in the open graph."""

    def __init__(self):
        self.x1 = tw.input("x1", 1, (-4.0, 4.0))
        self.x2 = tw.input("x2", 2, (-4.0, 4.0))
        self.x4 = tw.input("x4", 4, (-4.0, 4.0))
        self.p1 = tw.input("p1", 1, (1.0, 4.0))
        self.d1 = tw.input("d1", 1, (0.0, 9.0), integer=True)
        self.n1 = tw.input("n1", 1, (0.0, 99.0), integer=True)
        self.oh3 = tw.input("oh3", 3, (0.0, 1.0))
        self.oh10 = tw.input("oh10", 10, (0.0, 1.0))
        self.b1 = tw.compare(self.x1, 0.0)
        self.b2 = tw.compare(self.x2, 0.0)
        self.pos = tw.pos_encoding(2, max_len=16)


def _stranger():
    """A value of a graph that is closed: no other graph may use it."""
    with tw.Graph("other"):
        return tw.input("s", 2, (-1.0, 1.0))


# Bad values per argument kind. Callables receive the Values of the open graph.
BAD_VALUE = [None, 1.0, "x", np.zeros(2), [[1.0]], lambda v: [v.x2], lambda v: _stranger()]
BAD_NUMBER = [None, "1", True, NAN, INF, -INF, [1.0, 2.0], 1 + 1j, lambda v: v.x1]
BAD_POSITIVE = BAD_NUMBER + [0.0, -1.0]
BAD_OPTIONAL_POSITIVE = [b for b in BAD_POSITIVE if b is not None]
BAD_COUNT = [None, "3", True, 2.5, NAN, INF, -1, 0, 10**30, [2]]
# A lone surrogate built, then crashed the printer (UTF-8 cannot encode it).
BAD_NAME = [None, 3, "", b"x", ["a"], "\udc80", "a\ud800b"]
BAD_PAIR = [None, 3, "ab", (1.0,), (1.0, 2.0, 3.0), (2.0, 1.0), (NAN, 1.0), (0.0, INF), ("a", "b")]
BAD_ARRAY = [None, "abc", [[1.0, 2.0], [3.0]], [[NAN, 1.0]], [[INF, 1.0]], np.ones((2, 2), complex),
             [True, False], np.array([object()]), [], [[1e39, 1.0]], lambda v: v.x2]
BAD_VALUES_LIST = [None, [], [None], "ab", 3, lambda v: [v.x1, "a"], lambda v: [_stranger()]]
BAD_CHOICE = [None, 3, "bogus"]
BAD_FLAG = ["yes", 2, None]


@dataclass
class Spec:
    """A builder function, a good call (arguments; "$name" reads Values) and the kind of each
    argument to spoil."""

    name: str
    good: dict
    kinds: dict
    extra: dict = field(default_factory=dict)  # argument -> more bad values for it


def resolve(arg, values: Values):
    if callable(arg) and not isinstance(arg, type):
        return arg(values)
    if isinstance(arg, str) and arg.startswith("$"):
        return getattr(values, arg[1:])
    if isinstance(arg, list):
        return [resolve(a, values) for a in arg]
    return arg


ROWS2 = [[1.0, 0.0], [0.0, 1.0]]
SPECS = [
    # Sources and sinks
    Spec("input", dict(name="new", width=2, value_range=(-1.0, 1.0), integer=False),
         dict(name=BAD_NAME, width=BAD_COUNT + [MAX_WIDTH + 1], value_range=BAD_PAIR,
              integer=BAD_FLAG), extra=dict(name=["x1"])),
    Spec("embedding", dict(name="tok", table=np.eye(3)), dict(name=BAD_NAME, table=BAD_ARRAY),
         extra=dict(name=["x2"], table=[np.zeros((3, 0)), np.zeros((1, MAX_WIDTH + 1))])),
    Spec("pos_encoding", dict(width=3, max_len=16), dict(width=BAD_COUNT, max_len=BAD_COUNT)),
    Spec("output", dict(name="y", value="$x2"), dict(name=BAD_NAME, value=BAD_VALUE)),
    # Primitives
    Spec("literal", dict(values=[1.0, 2.0]), dict(values=BAD_ARRAY),
         extra=dict(values=[np.zeros(MAX_WIDTH + 1)])),
    Spec("linear", dict(x="$x2", matrix=ROWS2, bias=[0.0, 1.0]),
         dict(x=BAD_VALUE, matrix=BAD_ARRAY, bias=BAD_ARRAY[1:]),
         extra=dict(matrix=[np.ones((3, 2)), np.ones(3)], bias=[[1.0, 2.0, 3.0]])),
    Spec("relu", dict(x="$x2"), dict(x=BAD_VALUE)),
    Spec("add", dict(a="$x2", b="$x2"), dict(a=BAD_VALUE, b=BAD_VALUE), extra=dict(b=["$x1"])),
    Spec("slice", dict(x="$x4", start=1, length=2),
         dict(x=BAD_VALUE, start=[None, "1", True, 1.5, NAN, -1, 4, 10**30],
              length=[None, "1", True, 1.5, 0, -1, 4, 10**30])),
    Spec("attn", dict(query="$x2", key="$x2", value="$x2", wq=ROWS2, wk=ROWS2, wv=ROWS2, wo=ROWS2),
         dict(query=BAD_VALUE, key=BAD_VALUE, value=BAD_VALUE, wq=BAD_ARRAY, wk=BAD_ARRAY,
              wv=BAD_ARRAY, wo=BAD_ARRAY), extra=dict(wk=[np.ones((2, 3))])),
    Spec("mlp", dict(x="$x2", w1=ROWS2, b1=[0.0, 0.0], w2=ROWS2, b2=[1.0, 1.0]),
         dict(x=BAD_VALUE, w1=BAD_ARRAY, b1=BAD_ARRAY[1:], w2=BAD_ARRAY, b2=BAD_ARRAY[1:]),
         extra=dict(w2=[np.ones((3, 2))])),
    Spec("compare", dict(x="$x2", threshold=0.5, ramp=0.1),
         dict(x=BAD_VALUE, threshold=BAD_NUMBER, ramp=BAD_POSITIVE)),
    Spec("select", dict(cond="$b1", if_true="$x2", if_false="$x2"),
         dict(cond=BAD_VALUE, if_true=BAD_VALUE, if_false=BAD_VALUE),
         extra=dict(cond=["$x4"], if_false=["$x4"])),
    Spec("clamp", dict(x="$x2", lo=-1.0, hi=1.0), dict(x=BAD_VALUE, lo=BAD_NUMBER, hi=BAD_NUMBER),
         extra=dict(hi=[-2.0])),
    Spec("piecewise_linear", dict(x="$x1", breakpoints=[0.0, 1.0, 2.0], values=[0.0, 1.0, 4.0]),
         dict(x=BAD_VALUE, breakpoints=BAD_ARRAY, values=BAD_ARRAY),
         extra=dict(x=["$x2"], breakpoints=[[1.0], [0.0, 0.0, 1.0], [1.0, 1.0 + 1e-12, 2.0]],
                    values=[[1.0, 2.0], lambda v: (lambda b: None), lambda v: (lambda b: "a")])),
    Spec("piecewise_linear_2d",
         dict(x="$x1", y="$x1", xs=[0.0, 1.0], ys=[0.0, 1.0], table=[[0.0, 1.0], [1.0, 2.0]]),
         dict(x=BAD_VALUE, y=BAD_VALUE, xs=BAD_ARRAY, ys=BAD_ARRAY, table=BAD_ARRAY),
         extra=dict(table=[np.ones(3), lambda v: (lambda a, b: [a, None])])),
    # Affine helpers
    Spec("negate", dict(x="$x2"), dict(x=BAD_VALUE)),
    Spec("multiply_const", dict(x="$x2", c=2.0), dict(x=BAD_VALUE, c=BAD_NUMBER + [1e39])),
    Spec("add_const", dict(x="$x2", c=[1.0, 2.0]), dict(x=BAD_VALUE, c=BAD_ARRAY)),
    Spec("add_scaled", dict(a="$x2", b="$x2", scale_b=2.0, scale_a=1.0),
         dict(a=BAD_VALUE, b=BAD_VALUE, scale_b=BAD_NUMBER, scale_a=BAD_NUMBER)),
    Spec("subtract", dict(a="$x2", b="$x2"), dict(a=BAD_VALUE, b=BAD_VALUE), extra=dict(b=["$x1"])),
    Spec("sum", dict(values=["$x2", "$x2"]), dict(values=BAD_VALUES_LIST),
         extra=dict(values=[["$x2", "$x1"]])),
    Spec("weights", dict(op_value=lambda v: tw.linear(v.x2, ROWS2), name="weight"),
         dict(op_value=[None, 1.0, "x"], name=[None, 3, "bias", "nonexistent"])),
    Spec("width", dict(v="$x2"), dict(v=[None, 1.0, "x", np.zeros(2)])),
    # Library: arithmetic
    Spec("cond_gate", dict(cond="$b1", x="$x2", max_abs=None),
         dict(cond=BAD_VALUE, x=BAD_VALUE, max_abs=BAD_OPTIONAL_POSITIVE), extra=dict(cond=["$x4"])),
    Spec("switch", dict(conds=["$b1", "$b1"], values=["$x2", "$x2"], max_abs=None),
         dict(conds=BAD_VALUES_LIST, values=BAD_VALUES_LIST, max_abs=BAD_OPTIONAL_POSITIVE),
         extra=dict(conds=[["$b1"]])),
    Spec("floor_int", dict(x="$x1", lo=-4.0, hi=4.0, ramp=0.5),
         dict(x=BAD_VALUE, lo=BAD_NUMBER, hi=BAD_NUMBER, ramp=BAD_POSITIVE), extra=dict(hi=[-5.0])),
    Spec("ceil_int", dict(x="$x1", lo=-4.0, hi=4.0, ramp=0.5),
         dict(x=BAD_VALUE, lo=BAD_NUMBER, hi=BAD_NUMBER, ramp=BAD_POSITIVE)),
    Spec("reciprocal", dict(x="$p1", lo=1.0, hi=4.0, rel_error=1e-3),
         dict(x=BAD_VALUE, lo=BAD_NUMBER, hi=BAD_NUMBER, rel_error=BAD_POSITIVE)),
    Spec("abs", dict(x="$x2"), dict(x=BAD_VALUE)),
    Spec("min", dict(a="$x2", b="$x2"), dict(a=BAD_VALUE, b=BAD_VALUE)),
    Spec("max", dict(a="$x2", b="$x2"), dict(a=BAD_VALUE, b=BAD_VALUE)),
    Spec("square", dict(x="$x1", max_abs=4.0, step=1.0),
         dict(x=BAD_VALUE, max_abs=BAD_POSITIVE, step=BAD_POSITIVE)),
    Spec("signed_multiply", dict(a="$x1", b="$x1", max_abs_a=4.0, max_abs_b=4.0, step=1.0,
                                 variant="shallow"),
         dict(a=BAD_VALUE, b=BAD_VALUE, max_abs_a=BAD_POSITIVE, max_abs_b=BAD_POSITIVE,
              step=BAD_POSITIVE, variant=BAD_CHOICE)),
    Spec("multiply_integers", dict(a="$d1", b="$d1", max_value=9, variant="shallow"),
         dict(a=BAD_VALUE, b=BAD_VALUE, max_value=BAD_COUNT, variant=BAD_CHOICE)),
    Spec("multiply_2d", dict(a="$x1", b="$x1", a_range=(-4.0, 4.0), b_range=(-4.0, 4.0), n_a=5,
                             n_b=5),
         dict(a=BAD_VALUE, b=BAD_VALUE, a_range=BAD_PAIR, b_range=BAD_PAIR, n_a=BAD_COUNT,
              n_b=BAD_COUNT)),
    # Library: attention
    Spec("attend_to_offset", dict(pos="$pos", value="$x2", offset=1),
         dict(pos=BAD_VALUE + ["$x2"], value=BAD_VALUE,
              offset=[None, "1", True, 1.5, NAN, INF, -1, [1]])),
    Spec("get_prev_value", dict(pos="$pos", value="$x2"), dict(pos=BAD_VALUE, value=BAD_VALUE)),
    Spec("attend_mean_where", dict(valid="$b1", value="$x2"),
         dict(valid=BAD_VALUE + ["$x2"], value=BAD_VALUE)),
    Spec("attend_argmax", dict(score="$x1", value="$x2", gap=1.0),
         dict(score=BAD_VALUE, value=BAD_VALUE, gap=BAD_POSITIVE)),
    Spec("attend_argmin", dict(score="$x1", value="$x2", gap=1.0),
         dict(score=BAD_VALUE, value=BAD_VALUE, gap=BAD_POSITIVE)),
    Spec("attend_argmax_where", dict(valid="$b1", score="$x1", value="$x2",
                                     score_range=(-4.0, 4.0), gap=1.0),
         dict(valid=BAD_VALUE, score=BAD_VALUE, value=BAD_VALUE, score_range=BAD_PAIR,
              gap=BAD_POSITIVE)),
    Spec("attend_argmin_where", dict(valid="$b1", score="$x1", value="$x2",
                                     score_range=(-4.0, 4.0), gap=1.0),
         dict(valid=BAD_VALUE, score=BAD_VALUE, value=BAD_VALUE, score_range=BAD_PAIR,
              gap=BAD_POSITIVE)),
    Spec("attend_argmax_dot", dict(query="$x2", key="$x2", value="$x2", gap=1.0),
         dict(query=BAD_VALUE, key=BAD_VALUE, value=BAD_VALUE, gap=BAD_POSITIVE)),
    Spec("attend_most_recent_matching", dict(pos="$pos", query="$x2", key="$x2", value="$x2",
                                             gap=1.0),
         dict(pos=BAD_VALUE, query=BAD_VALUE, key=BAD_VALUE, value=BAD_VALUE, gap=BAD_POSITIVE)),
    # Library: logic
    Spec("bool_not", dict(x="$b2"), dict(x=BAD_VALUE)),
    Spec("bool_all_true", dict(values=["$b1", "$b1"]), dict(values=BAD_VALUES_LIST)),
    Spec("bool_any_true", dict(values=["$b1", "$b1"]), dict(values=BAD_VALUES_LIST)),
    Spec("equals_vector", dict(x="$x2", key=[1.0, 0.0], mode="dot", gap=1.0),
         dict(x=BAD_VALUE, key=BAD_ARRAY, mode=BAD_CHOICE, gap=BAD_POSITIVE)),
    # Library: tables
    Spec("onehot_lookup", dict(onehot="$oh3", table=[[1.0], [2.0], [3.0]], encoding="01"),
         dict(onehot=BAD_VALUE, encoding=BAD_CHOICE)),
    Spec("in_range", dict(lower="$d1", upper="$d1", n_slots=4),
         dict(lower=BAD_VALUE, upper=BAD_VALUE, n_slots=[b for b in BAD_COUNT if b != 10**30])),
    Spec("dynamic_extract", dict(table="$x4", index="$d1", n_entries=2, max_abs=None),
         dict(table=BAD_VALUE, index=BAD_VALUE, n_entries=BAD_COUNT,
              max_abs=BAD_OPTIONAL_POSITIVE)),
    Spec("map_to_table", dict(x="$d1", keys=[0.0, 1.0, 2.0], values=[[1.0], [2.0], [3.0]],
                              default=0.0, gap=1.0),
         dict(x=BAD_VALUE)),
    # Library: sequence
    Spec("digits_to_number", dict(digits=["$d1", "$d1"], base=10),
         dict(digits=BAD_VALUES_LIST, base=BAD_COUNT + [1])),
    Spec("number_to_digits", dict(x="$n1", n_digits=2, base=10),
         dict(x=BAD_VALUE, n_digits=BAD_COUNT, base=BAD_COUNT + [1])),
    Spec("digit_to_onehot", dict(digit="$d1", base=10), dict(digit=BAD_VALUE, base=BAD_COUNT)),
    Spec("onehot_to_digit", dict(onehot="$oh10"), dict(onehot=BAD_VALUE)),
    Spec("sum_digits", dict(a=["$d1", "$d1"], b=["$d1", "$d1"], base=10),
         dict(a=BAD_VALUES_LIST, b=BAD_VALUES_LIST, base=BAD_COUNT)),
    Spec("remove_leading_zeros", dict(digits=["$d1", "$d1"], blank=-1.0),
         dict(digits=BAD_VALUES_LIST, blank=BAD_NUMBER)),
    Spec("output_sequence", dict(pos="$pos", trigger="$b1", items="$x2", n_items=2, max_abs=None),
         dict(pos=BAD_VALUE, trigger=BAD_VALUE, items=BAD_VALUE, n_items=BAD_COUNT,
              max_abs=BAD_OPTIONAL_POSITIVE)),
]


def _bad_cases():
    for spec in SPECS:
        for arg, bads in spec.kinds.items():
            for k, bad in enumerate(list(bads) + spec.extra.get(arg, [])):
                yield pytest.param(spec, arg, bad, id=f"{spec.name}-{arg}-{k}")


BAD_CASES = list(_bad_cases())


@pytest.mark.parametrize("spec", SPECS, ids=[s.name for s in SPECS])
def test_good_call_builds(spec):
    """Each table row's good call works: the bad cases spoil exactly one argument of it."""
    with tw.Graph("main"):
        values = Values()
        result = getattr(tw, spec.name)(**{k: resolve(v, values) for k, v in spec.good.items()})
        if isinstance(result, tw.Value):
            tw.output("result", result)


def test_the_table_is_large_and_covers_every_library_op():
    from twdialect.library import REGISTRY

    assert len(BAD_CASES) >= 150
    covered = {s.name for s in SPECS}
    assert set(REGISTRY) <= covered, set(REGISTRY) - covered


@pytest.mark.parametrize("spec, arg, bad", BAD_CASES)
def test_bad_argument_is_a_tw_error_naming_function_and_argument(spec, arg, bad):
    with tw.Graph("main", verify=False):
        values = Values()
        kwargs = {k: resolve(v, values) for k, v in spec.good.items()}
        kwargs[arg] = resolve(bad, values)
        with pytest.raises(TwError) as info:
            getattr(tw, spec.name)(**kwargs)
    message = str(info.value)
    assert "\n" not in message and f"tw.{spec.name}:" in message, message
    assert arg in message.split(":", 1)[1], message


# ----------------------------------------------------------------------------------------
# Misuse of the graph context itself
# ----------------------------------------------------------------------------------------


def test_no_open_graph():
    with pytest.raises(TwError, match=r"tw.input: no graph is open"):
        tw.input("x", 1, (0.0, 1.0))
    with pytest.raises(TwError, match=r"tw.relu: x must be a tw value"):
        tw.relu(None)


def test_value_used_after_its_graph_closed():
    with tw.Graph("a"):
        x = tw.input("x", 1, (0.0, 1.0))
    with pytest.raises(TwError, match="tw.relu: no graph is open"):
        tw.relu(x)
    with tw.Graph("b"):
        with pytest.raises(TwError, match="tw.output: value belongs to another graph"):
            tw.output("y", x)


def test_nested_graphs_keep_their_values_apart():
    with tw.Graph("outer") as outer:
        x = tw.input("x", 1, (0.0, 1.0))
        with tw.Graph("inner") as inner:
            with pytest.raises(TwError, match="tw.add: a belongs to another graph"):
                tw.add(x, x)
            tw.output("c", tw.literal([1.0]))
        tw.output("y", tw.relu(x))
    assert inner.op is not None and outer.op is not None


def test_graph_arguments_and_reentry():
    with pytest.raises(TwError, match="tw.Graph: name must be a non-empty string"):
        tw.Graph(3)
    with pytest.raises(TwError, match="tw.Graph: module must be"):
        tw.Graph("main", module="m")
    with pytest.raises(TwError, match="tw.Graph: verify must be a bool"):
        tw.Graph("main", verify="yes")
    with tw.Graph("main") as g:
        tw.output("y", tw.input("x", 1, (0.0, 1.0)))
    with pytest.raises(TwError, match="tw.Graph: name: the module already holds a graph @main"):
        tw.Graph("main", module=g.module)
    with pytest.raises(TwError, match="tw.Graph: @main was already built"):
        with g:
            pass


def test_duplicate_output_name_is_refused_at_the_call():
    with tw.Graph("main"):
        x = tw.input("x", 1, (0.0, 1.0))
        tw.output("y", x)
        with pytest.raises(TwError, match='tw.output: name: the graph already has an output "y"'):
            tw.output("y", x)


def test_integer_input_range_without_integers():
    with tw.Graph("main"):
        with pytest.raises(TwError, match="tw.input: value_range .* holds no integer"):
            tw.input("x", 1, (0.2, 0.8), integer=True)


@pytest.mark.parametrize("name, message", [(None, "must be a non-empty string"),
                                           (3, "must be a non-empty string"),
                                           ("", "must be a non-empty string"),
                                           ("\udc80", "holds U\\+DC80, a lone surrogate")])
def test_annotate_name(name, message):
    with pytest.raises(TwError, match=f"tw.annotate: name .*{message}"):
        with tw.annotate(name):
            pass


@pytest.mark.parametrize("factories, message", [
    (None, "factories must be a list of callables"),
    ("ab", "factories must be a list of callables"),
    ([1], r"factories\[0\] must be callable"),
    ([lambda: None], r"the value factories\[0\] returns must be a tw value"),
    ([lambda: "x"], r"the value factories\[0\] returns must be a tw value"),
])
def test_sequential_scope_arguments(factories, message):
    with tw.Graph("main"):
        tw.input("x", 1, (0.0, 1.0))
        with pytest.raises(TwError, match="tw.sequential_scope: " + message):
            tw.sequential_scope(factories, "loop")


def test_sequential_scope_terminal_built_outside_the_scope():
    """A factory that returns a value built before the scope used to be marked terminal
    without scope tags, and the sequential-scope pass failed much later."""
    with tw.Graph("main"):
        x = tw.input("x", 1, (0.0, 1.0))
        with pytest.raises(TwError, match=r"tw.sequential_scope: factories\[0\] must return a "
                                          "value it built"):
            tw.sequential_scope([lambda: tw.slice(x, 0, 1)], "loop")
        with pytest.raises(TwError, match="tw.sequential_scope: name must be"):
            tw.sequential_scope([lambda: tw.relu(x)], name=None)


# ----------------------------------------------------------------------------------------
# The machine geometry (lowering.compile and lower-to-transformer build a Machine)
# ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("option, value, message", [
    ("d", 10**12, rf"d=1000000000000 is outside \[1, {MAX_DIM}\]"),
    ("d", True, "d must be a whole number"),
    ("d", 64.5, "d must be a whole number"),
    ("d", NAN, "d must be a whole number"),
    ("d", INF, "d must be a whole number"),
    ("d", "64", "d must be a whole number"),
    ("d", -8, r"d=-8 is outside"),
    ("d", 2, "d=2 leaves no residual columns"),
    ("d_head", 0, r"d_head=0 is outside \[1, 64\]"),
    ("d_head", 128, r"d_head=128 is outside \[1, 64\]"),
    ("d_head", 2.5, "d_head must be a whole number"),
    ("d_head", None, "d_head must be a whole number"),
    ("d_head", 7, "d=64 must be a multiple of d_head=7"),
    ("d_hidden", -1, "d_hidden=-1 is outside"),
    ("d_hidden", 10**12, "d_hidden=1000000000000 is outside"),
    ("d_hidden", "many", "d_hidden must be a whole number"),
    ("self_attend_gain", NAN, "self_attend_gain must be a positive finite number"),
])
def test_machine_geometry_errors_name_the_option(option, value, message):
    """d=10**12 used to raise MemoryError deep in the scheduler."""
    geometry = dict(d=64, d_head=8, d_hidden=256)
    geometry[option] = value
    with pytest.raises(GeometryError, match=message):
        Machine(**geometry)


def test_machine_accepts_whole_floats_and_defaults_d_hidden():
    m = Machine(d=64.0, d_head=np.int64(8))
    assert (m.d, m.d_head, m.d_hidden) == (64, 8, 256) and isinstance(m.d, int)


def test_compile_refuses_a_huge_width_before_allocating():
    with tw.Graph("main") as g:
        tw.output("y", tw.relu(tw.input("x", 2, (-1.0, 1.0))))
    with pytest.raises(GeometryError, match="d=1000000000000 is outside"):
        tw_compile(g.module, d=10**12, d_head=16)
    with pytest.raises(GeometryError, match="d must be a whole number"):
        tw_compile(g.module, d="64", d_head=16)


def test_limits_are_documented_numbers():
    assert MAX_WIDTH == 4096 and MAX_DIM == 2**20 and math.log2(MAX_WIDTH).is_integer()
