"""The graph builder: write tw graphs in Python, torchwright-style.

    from twdialect import ops as tw
    with tw.Graph("main") as g:
        x = tw.input("x", 2, value_range=(-8.0, 8.0))
        y = tw.select(tw.compare(tw.linear(x, W, b), 0.0), x, tw.negate(x))
        tw.output("y", y)
    module = g.module

Every function appends one op (or a few) to the innermost open `Graph` and returns the new
SSA value. Ops are created without re-running IRDL checks (fast: big graphs are built here);
`Graph.__exit__` verifies the finished graph unless `verify=False`.
"""

from __future__ import annotations

import builtins
import contextlib
import gc
from collections.abc import Callable, Iterator, Sequence

import numpy as np
from xdsl.dialects.builtin import ModuleOp, StringAttr, UnitAttr
from xdsl.ir import Block, Operation, Region, SSAValue

from twdialect.dense import dense, to_numpy
from twdialect.dialect import (
    ANNOTATION,
    ITERATION,
    SCOPE,
    SCOPE_TERMINAL,
    AddOp,
    AttnOp,
    ClampOp,
    CompareOp,
    ConcatOp,
    EmbeddingOp,
    GraphOp,
    InputOp,
    LinearOp,
    LiteralOp,
    MlpOp,
    OutputOp,
    PiecewiseLinear2dOp,
    PiecewiseLinearOp,
    PosEncodingOp,
    RangeAttr,
    ReluOp,
    SelectOp,
    SliceOp,
    AfterOp,
    VecType,
    float_prop,
    int_prop,
    width_of,
)

Value = SSAValue

# --------------------------------------------------------------------------------------
# Builder state: the open graphs, the annotation path and the scope tag
# --------------------------------------------------------------------------------------

_graphs: list[Graph] = []
_annotation: list[str] = []
_scope: list[tuple[str, int]] = []


class Graph:
    """Collects ops into a `tw.graph @name`; on exit the graph joins `module` (new if None)."""

    def __init__(self, name: str = "main", module: ModuleOp | None = None, verify: bool = True):
        self.name = name
        self.module = module
        self.verify = verify
        self.ops: list[Operation] = []
        self.op: GraphOp | None = None

    def __enter__(self) -> Graph:
        _graphs.append(self)
        # Building allocates many small long-lived objects; the cyclic GC would rescan them all
        # again and again (superlinear on 10^5-op graphs). Nothing here makes garbage cycles.
        self._gc_was_enabled = gc.isenabled()
        gc.disable()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        _graphs.pop()
        if self._gc_was_enabled:
            gc.enable()
        if exc_type is not None:
            return
        graph = GraphOp.create(properties={"sym_name": StringAttr(self.name)},
                               regions=[Region(Block(self.ops))])
        self.op = graph
        if self.module is None:
            self.module = ModuleOp([graph])
        else:
            self.module.body.block.add_op(graph)
        if self.verify:
            graph.verify()


def _current() -> Graph:
    if not _graphs:
        raise RuntimeError("tw ops must be built inside `with tw.Graph(...)`")
    return _graphs[-1]


def _emit(op: Operation) -> Operation:
    if _annotation:
        op.attributes[ANNOTATION] = StringAttr("/".join(_annotation))
    if _scope:
        name, it = _scope[-1]
        op.attributes[SCOPE] = StringAttr(name)
        op.attributes[ITERATION] = int_prop(it)
    _current().ops.append(op)
    return op


def _one(op: Operation) -> Value:
    return _emit(op).results[0]


@contextlib.contextmanager
def annotate(name: str) -> Iterator[None]:
    """Tag every op built inside with a hierarchical name (`render/texture`).

    Re-entering a component that is already on the path adds nothing (no `a/b/a/b`)."""
    parts = [p for p in name.split("/") if p]
    added = [p for p in parts if p not in _annotation]
    _annotation.extend(added)
    try:
        yield
    finally:
        del _annotation[len(_annotation) - len(added):]


def sequential_scope(factories: Sequence[Callable[[], Value]], name: str = "scope") -> list[Value]:
    """Build loop iterations in order, tagging each one's ops with (`name`, iteration).

    Returns each factory's terminal value; the producing op is marked `tw.scope_terminal`.
    The tags change no value: the `sequential-scope` pass turns them into ordering edges."""
    terminals = []
    for i, factory in enumerate(factories):
        _scope.append((name, i))
        try:
            t = factory()
        finally:
            _scope.pop()
        if not isinstance(t, SSAValue):
            raise TypeError(f"sequential_scope factory {i} must return a tw value, got {type(t)}")
        t.owner.attributes[SCOPE_TERMINAL] = UnitAttr()
        terminals.append(t)
    return terminals


def width(v: Value) -> int:
    return width_of(v)


def _matrix(m, rows: int | None = None, name: str = "matrix") -> np.ndarray:
    a = np.asarray(m, dtype=np.float64)
    if a.ndim == 1 and rows is not None:
        a = a.reshape(rows, -1)
    if a.ndim != 2:
        raise ValueError(f"{name} must be 2-D, got shape {a.shape}")
    if rows is not None and a.shape[0] != rows:
        raise ValueError(f"{name} has {a.shape[0]} rows, expected {rows}")
    return a


def _row(v, n: int | None = None, name: str = "vector") -> np.ndarray:
    a = np.asarray(v, dtype=np.float64).reshape(-1)
    if n is not None and a.size == 1 and n > 1:
        a = np.full(n, a[0])
    if n is not None and a.size != n:
        raise ValueError(f"{name} has {a.size} entries, expected {n}")
    return a


# --------------------------------------------------------------------------------------
# Sources and sinks
# --------------------------------------------------------------------------------------


def input(name: str, width: int, value_range: tuple[float, float],  # noqa: A001
          integer: bool = False) -> Value:
    """A named per-position input of `width` floats, each within `value_range` (and an integer
    when `integer`: a promise the oracle checks and `decompose` may use)."""
    lo, hi = value_range
    props = {"name": StringAttr(name), "range": RangeAttr(lo, hi)}
    if integer:
        props["integer"] = UnitAttr()
    return _one(InputOp.create(result_types=[VecType(width)], properties=props))


def embedding(name: str, table) -> Value:
    """A token input: the integer id at each position selects a row of `table` (V x D)."""
    t = _matrix(table, name="embedding table")
    return _one(EmbeddingOp.create(result_types=[VecType(t.shape[1])],
                                   properties={"name": StringAttr(name), "table": dense(t)}))


def pos_encoding(width: int, max_len: int = 1024) -> Value:
    """Position features: [i, i*i, sin/cos pairs...] (see `tw.pos_encoding`)."""
    return _one(PosEncodingOp.create(result_types=[VecType(width)],
                                     properties={"max_len": int_prop(max_len)}))


def output(name: str, value: Value) -> None:
    _emit(OutputOp.create(operands=[value], properties={"name": StringAttr(name)}))


# --------------------------------------------------------------------------------------
# Primitives
# --------------------------------------------------------------------------------------


def literal(values) -> Value:
    v = _row(values, name="literal")
    return _one(LiteralOp.create(result_types=[VecType(v.size)], properties={"value": dense(v)}))


def linear(x: Value, matrix, bias=None) -> Value:
    """y = x @ matrix + bias; `matrix` is (width(x), out)."""
    m = _matrix(matrix, width_of(x), "linear weight")
    props = {"weight": dense(m)}
    if bias is not None:
        props["bias"] = dense(_row(bias, m.shape[1], "linear bias"))
    return _one(LinearOp.create(operands=[x], result_types=[VecType(m.shape[1])], properties=props))


def relu(x: Value) -> Value:
    return _one(ReluOp.create(operands=[x], result_types=[x.type]))


def add(a: Value, b: Value) -> Value:
    if width_of(a) != width_of(b):
        raise ValueError(f"add: widths differ ({width_of(a)} vs {width_of(b)})")
    return _one(AddOp.create(operands=[a, b], result_types=[a.type]))


def concat(*values) -> Value:
    """Concatenate values (free: consumers read the leaves' columns). Accepts a list too."""
    if len(values) == 1 and isinstance(values[0], (list, tuple)):
        values = tuple(values[0])
    if len(values) == 1:
        return values[0]
    total = builtins.sum(width_of(v) for v in values)
    return _one(ConcatOp.create(operands=list(values), result_types=[VecType(total)]))


def slice(x: Value, start: int, length: int) -> Value:  # noqa: A001
    """Components [start, start + length) of x: a free view."""
    if start == 0 and length == width_of(x):
        return x
    return _one(SliceOp.create(operands=[x], result_types=[VecType(length)],
                               properties={"start": int_prop(start)}))


def after(x: Value, *deps: Value) -> Value:
    """x, but available only once every value in `deps` is (an ordering-only edge)."""
    return _one(AfterOp.create(operands=[x, *deps], result_types=[x.type]))


def attn(query: Value, key: Value, value: Value, wq, wk, wv, wo) -> Value:
    """Causal attention: softmax_j((q_i Wq).(k_j Wk)) over j <= i, applied to (v_j Wv) Wo."""
    q = _matrix(wq, width_of(query), "wq")
    k = _matrix(wk, width_of(key), "wk")
    v = _matrix(wv, width_of(value), "wv")
    o = _matrix(wo, v.shape[1], "wo")
    if q.shape[1] != k.shape[1]:
        raise ValueError(f"attn: wq and wk must have the same width ({q.shape[1]} vs {k.shape[1]})")
    return _one(AttnOp.create(operands=[query, key, value], result_types=[VecType(o.shape[1])],
                              properties={"wq": dense(q), "wk": dense(k), "wv": dense(v),
                                          "wo": dense(o)}))


def mlp(x: Value, w1, b1, w2, b2=None) -> Value:
    """One MLP chain: relu(x W1 + b1) W2 + b2."""
    m1 = _matrix(w1, width_of(x), "w1")
    m2 = _matrix(w2, m1.shape[1], "w2")
    # Property order as the parser builds it (w1, b1, w2, b2): generic text is then identical
    # for a built and a re-parsed module.
    props = {"w1": dense(m1)}
    if b1 is not None:
        props["b1"] = dense(_row(b1, m1.shape[1], "b1"))
    props["w2"] = dense(m2)
    if b2 is not None:
        props["b2"] = dense(_row(b2, m2.shape[1], "b2"))
    return _one(MlpOp.create(operands=[x], result_types=[VecType(m2.shape[1])], properties=props))


# --------------------------------------------------------------------------------------
# Library ops
# --------------------------------------------------------------------------------------


def compare(x: Value, threshold: float, ramp: float = 0.1) -> Value:
    """+1 where x >= threshold else -1, elementwise; exact outside (threshold - ramp, threshold)."""
    return _one(CompareOp.create(operands=[x], result_types=[x.type],
                                 properties={"threshold": float_prop(threshold),
                                             "ramp": float_prop(ramp)}))


def select(cond: Value, if_true: Value, if_false: Value) -> Value:
    """if_true where cond > 0 else if_false (cond is +/-1, 1 wide or one per component)."""
    return _one(SelectOp.create(operands=[cond, if_true, if_false], result_types=[if_true.type]))


def clamp(x: Value, lo: float, hi: float) -> Value:
    return _one(ClampOp.create(operands=[x], result_types=[x.type],
                               properties={"lo": float_prop(lo), "hi": float_prop(hi)}))


def piecewise_linear(x: Value, breakpoints, values) -> Value:
    """Linear interpolation through (breakpoints[k], values[k]); constant outside.

    `values` is a sequence (scalar output), an array (len(breakpoints), O), or a callable
    evaluated at each breakpoint."""
    bp = _row(breakpoints, name="breakpoints")
    if callable(values):
        values = [values(float(b)) for b in bp]
    v = np.asarray(values, dtype=np.float64)
    v = v.reshape(bp.size, -1)
    return _one(PiecewiseLinearOp.create(operands=[x], result_types=[VecType(v.shape[1])],
                                         properties={"breakpoints": dense(bp), "values": dense(v)}))


def piecewise_linear_2d(x: Value, y: Value, xs, ys, table) -> Value:
    """Triangulated interpolation of `table` (len(xs), len(ys)[, O]) on the grid xs x ys.

    `table` may be a callable f(x, y) evaluated at every grid vertex."""
    gx, gy = _row(xs, name="xs"), _row(ys, name="ys")
    if callable(table):
        table = [[table(float(a), float(b)) for b in gy] for a in gx]
    t = np.asarray(table, dtype=np.float64).reshape(gx.size, gy.size, -1)
    return _one(PiecewiseLinear2dOp.create(
        operands=[x, y], result_types=[VecType(t.shape[2])],
        properties={"xs": dense(gx), "ys": dense(gy), "table": dense(t)}))


# --------------------------------------------------------------------------------------
# Affine helpers (each one tw.linear; combinations of several values read a concat)
# --------------------------------------------------------------------------------------


def negate(x: Value) -> Value:
    return multiply_const(x, -1.0)


def multiply_const(x: Value, c: float) -> Value:
    n = width_of(x)
    return linear(x, np.eye(n) * c + 0.0)


def add_const(x: Value, c) -> Value:
    n = width_of(x)
    return linear(x, np.eye(n), _row(c, n, "constant"))


def add_scaled(a: Value, b: Value, scale_b: float = 1.0, scale_a: float = 1.0) -> Value:
    """scale_a * a + scale_b * b as one linear over concat(a, b)."""
    n = width_of(a)
    if width_of(b) != n:
        raise ValueError(f"add_scaled: widths differ ({n} vs {width_of(b)})")
    return linear(concat(a, b), np.vstack([np.eye(n) * scale_a, np.eye(n) * scale_b]))


def subtract(a: Value, b: Value) -> Value:
    """a - b as one linear over concat(a, b)."""
    return add_scaled(a, b, -1.0)


def sum(values: Sequence[Value]) -> Value:  # noqa: A001
    """Elementwise sum of equally wide values as one linear over their concat."""
    values = list(values)
    if not values:
        raise ValueError("sum of no values")
    n = width_of(values[0])
    if any(width_of(v) != n for v in values):
        raise ValueError("sum: all values must have the same width")
    if len(values) == 1:
        return values[0]
    return linear(concat(values), np.vstack([np.eye(n)] * len(values)))


def weights(op_value: Value, name: str) -> np.ndarray:
    """Read a dense property of the op that produced `op_value` as a numpy array."""
    return to_numpy(op_value.owner.properties[name])
from twdialect.library import *  # noqa: E402,F401,F403 - the ops library: tw.abs, tw.floor_int, ...
