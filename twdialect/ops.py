"""The graph builder: write tw graphs in Python, torchwright-style.

    from twdialect import ops as tw
    with tw.Graph("main") as g:
        x = tw.input("x", 2, value_range=(-8.0, 8.0))
        y = tw.select(tw.compare(tw.linear(x, W, b), 0.0), x, tw.negate(x))
        tw.output("y", y)
    module = g.module

Every function appends one op (or a few) to the innermost open `Graph` and returns the new
SSA value. Ops are made by their typed constructors (`LinearOp(x, weight, bias)`), which skip
IRDL's re-checks (fast: big graphs are built here); `Graph.__exit__` verifies the finished
graph unless `verify=False`. A graph holds all of its building state (annotation path, scope
tag, names taken, range cache); the only state outside it is which graph is innermost open,
per thread, as xDSL's `ImplicitBuilder` keeps its current builder.

Arguments are checked at the call: a bad one raises `BuilderError` (a `TwError`) whose message
starts with the function (`tw.linear: matrix ...`) and names the argument, so a misuse never
surfaces later as an internal exception or a verifier error far from its cause. Values must
come from the innermost open graph; widths are at most MAX_WIDTH and weights are finite
float32 numbers (`docs/dialect.md`, Limits).
"""

from __future__ import annotations

import builtins
import contextlib
import gc
import numbers
import os
import re
import sys
import threading
from collections.abc import Callable, Iterator, Sequence

import numpy as np
from xdsl.dialects.builtin import (
    DenseIntOrFPElementsAttr,
    FloatAttr,
    ModuleOp,
    StringAttr,
    UnitAttr,
    f64,
)
from xdsl.ir import Operation, SSAValue

from twdialect.dense import to_numpy
from twdialect.errors import TwError
from twdialect.dialect import (
    FLOAT32_MAX,
    MAX_DENSE_ELEMENTS,
    MAX_WIDTH,
    ANNOTATION,
    ITERATION,
    SCOPE,
    SCOPE_TERMINAL,
    TOLERANCE,
    MARGIN,
    HARD,
    LIBRARY_OPS,
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
    MLP_ACTIVATIONS,
    MlpOp,
    OutputOp,
    PiecewiseLinear2dOp,
    PiecewiseLinearOp,
    PosEncodingOp,
    PosTableOp,
    ReluOp,
    SelectOp,
    SliceOp,
    AfterOp,
    ATTN_MASKS,
    ROPE_BASE,
    VecType,
    int_prop,
    width_of,
)

Value = SSAValue

# --------------------------------------------------------------------------------------
# The graph being built, and which one is innermost open
# --------------------------------------------------------------------------------------


class BuilderError(TwError):
    """A builder function was called with a bad argument (the message names the function and
    the argument: `tw.slice: start ...`)."""


def fail(fn: str, message: str):
    raise BuilderError(f"tw.{fn}: {message}")


@contextlib.contextmanager
def gc_paused():
    """The cyclic GC paused for a block: building and compiling a graph allocate many small
    long-lived objects and no garbage cycles worth collecting, and the GC would rescan the
    growing heap again and again (superlinear at 10^5 ops). The one home of that rule (the
    builder and `lowering.compile` both use it)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


# Frames in this folder are tw's own (the ops library, its helpers): a located op is
# attributed to the first caller outside it.
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


class Graph:
    """Collects ops into a `tw.graph @name`; on exit the graph joins `module` (new if None).

    `locations=True` records where each op was built: `graph.locations` maps it to the
    "file:line" of the first caller outside tw's ops library (for the compile report,
    `ct.report(path, locations=g.locations)`), and names its unnamed results after that line
    (an op a pass rebuilds inherits the name, so the report still finds it). Off by default:
    it reads the call stack once per op."""

    def __init__(self, name: str = "main", module: ModuleOp | None = None, verify: bool = True,
                 locations: bool = False):
        check_name("Graph", name)
        if module is not None and not isinstance(module, ModuleOp):
            fail("Graph", f"module must be a builtin ModuleOp or None, got {type(module).__name__}")
        if not isinstance(verify, (bool, np.bool_)):
            fail("Graph", f"verify must be a bool, got {verify!r}")
        if not isinstance(locations, (bool, np.bool_)):
            fail("Graph", f"locations must be a bool, got {locations!r}")
        if module is not None and any(isinstance(op, GraphOp) and op.sym_name.data == name
                                      for op in module.body.block.ops):
            fail("Graph", f"name: the module already holds a graph @{name}")
        self.name = name
        self.module = module
        self.verify = bool(verify)
        self.locations: dict[Operation, str] | None = {} if locations else None
        self.ops: list[Operation] = []
        self.op: GraphOp | None = None
        self._owned: set[Operation] = set()  # ops built here: values from elsewhere are refused
        self._input_names: set[str] = set()
        self._output_names: set[str] = set()
        self.annotation: list[str] = []  # the `annotate` path, outermost first
        self.scope: list[tuple[str, int]] = []  # the open `sequential_scope` iterations
        # Value-range boxes of values built here, filled on demand by the ops library
        # (`twdialect.ranges.box_of`), so repeated queries cost O(new ops).
        self.value_boxes: dict[SSAValue, tuple[np.ndarray, np.ndarray]] = {}
        self._outer: Graph | None = None  # the graph that was innermost when this one opened
        self._entered = False

    def __enter__(self) -> Graph:
        if self._entered:
            fail("Graph", f"@{self.name} was already built; open a new tw.Graph")
        self._entered = True
        self._outer, _innermost.graph = _innermost.graph, self
        self._gc = gc_paused()  # (building makes many long-lived objects: see gc_paused)
        self._gc.__enter__()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        _innermost.graph, self._outer = self._outer, None
        self._gc.__exit__(None, None, None)
        if exc_type is not None:
            return
        graph = GraphOp(self.name, self.ops)
        self.op = graph
        if self.module is None:
            self.module = ModuleOp([graph])
        else:
            self.module.body.block.add_op(graph)
        if self.verify:
            graph.verify()

    def owns(self, value: SSAValue) -> bool:
        return value.owner in self._owned

    def append(self, op: Operation) -> Operation:
        """Add `op`, tagged with the open annotation path and scope iteration."""
        if self.annotation:
            op.attributes[ANNOTATION] = StringAttr("/".join(self.annotation))
        if self.scope:
            name, it = self.scope[-1]
            op.attributes[SCOPE] = StringAttr(name)
            op.attributes[ITERATION] = int_prop(it)
        if self.locations is not None:
            self._locate(op)
        self.ops.append(op)
        self._owned.add(op)
        return op

    def _locate(self, op: Operation) -> None:
        """Record the first caller outside twdialect (the user's builder line)."""
        frame = sys._getframe(1)
        while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
            frame = frame.f_back
        if frame is None:
            return
        path, line = frame.f_code.co_filename, frame.f_lineno
        self.locations[op] = f"{path}:{line}"
        stem = re.sub(r"\W", "_", os.path.splitext(os.path.basename(path))[0]) or "f"
        stem = stem if stem[0].isalpha() else f"f{stem}"
        for r in op.results:
            if r.name_hint is None:
                r.name_hint = f"{stem}_l{line}"


class _Innermost(threading.local):
    """The innermost open graph of this thread (None outside any `with tw.Graph(...)`); each
    open graph remembers the one it hides, so closing it restores that one."""

    graph: Graph | None = None


_innermost = _Innermost()


def _current(fn: str = "Graph") -> Graph:
    graph = _innermost.graph
    if graph is None:
        fail(fn, "no graph is open: build tw ops inside `with tw.Graph(...)`")
    return graph


def _emit(op: Operation, fn: str = "Graph") -> Operation:
    return _current(fn).append(op)


def _one(op: Operation, fn: str = "Graph") -> Value:
    return _emit(op, fn).results[0]


# --------------------------------------------------------------------------------------
# Argument checks (shared with the ops library): each names the function and the argument
# --------------------------------------------------------------------------------------


def check_value(fn: str, v, name: str, width: int | None = None) -> Value:
    """`v` is a tw value of the innermost open graph (and `width` wide, if given)."""
    if not isinstance(v, SSAValue) or not isinstance(v.type, VecType):
        fail(fn, f"{name} must be a tw value (a !tw.vec), got {type(v).__name__}")
    if not _current(fn).owns(v):
        fail(fn, f"{name} belongs to another graph (or one already closed): a value is used "
             "only inside the `with tw.Graph(...)` that built it")
    if width is not None and width_of(v) != width:
        fail(fn, f"{name} must be {width} wide, got {width_of(v)}")
    return v


def check_values(fn: str, values, name: str) -> list[Value]:
    """A non-empty sequence of tw values (a single value counts as a list of one)."""
    if isinstance(values, SSAValue):
        values = [values]
    if isinstance(values, (str, bytes)) or not isinstance(values, (Sequence, Iterator)):
        fail(fn, f"{name} must be a list of tw values, got {type(values).__name__}")
    values = list(values)
    if not values:
        fail(fn, f"{name} must not be empty")
    for k, v in enumerate(values):
        check_value(fn, v, f"{name}[{k}]")
    return values


def check_number(fn: str, x, name: str, positive: bool = False, float32: bool = False) -> float:
    """A real number (not a bool), finite; within float32's range when it becomes a weight."""
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, numbers.Real):
        fail(fn, f"{name} must be a number, got {x!r}")
    f = float(x)
    if not np.isfinite(f):
        fail(fn, f"{name} must be finite, got {f}")
    if float32 and not builtins.abs(f) <= FLOAT32_MAX:
        fail(fn, f"{name} must be a float32 number (|{name}| <= {FLOAT32_MAX:.7g}), got {f}")
    if positive and not f > 0:
        fail(fn, f"{name} must be positive, got {f}")
    return f


def check_int(fn: str, x, name: str, minimum: int = 0, maximum: int | None = None) -> int:
    """A whole number (an int, or a float without fractional part; not a bool) in range."""
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, numbers.Real):
        fail(fn, f"{name} must be an integer, got {x!r}")
    if not isinstance(x, numbers.Integral) and not (np.isfinite(x) and float(x).is_integer()):
        fail(fn, f"{name} must be an integer, got {x!r}")
    n = int(x)
    if n < minimum:
        fail(fn, f"{name} must be at least {minimum}, got {n}")
    if maximum is not None and n > maximum:
        fail(fn, f"{name} must be at most {maximum}, got {n}")
    return n


def check_width(fn: str, x, name: str = "width") -> int:
    return check_int(fn, x, name, 1, MAX_WIDTH)


def check_name(fn: str, x, name: str = "name") -> str:
    """A non-empty str that UTF-8 can encode: a lone surrogate ('\\udc80', left by decoding
    bytes with errors='surrogateescape') would build, then crash the printer."""
    if not isinstance(x, str) or not x:
        fail(fn, f"{name} must be a non-empty string, got {x!r}")
    try:
        x.encode("utf-8")
    except UnicodeEncodeError as e:
        fail(fn, f"{name} {x!r} holds U+{ord(x[e.start]):04X}, a lone surrogate, which is not "
                 "a character (decode the name's bytes with errors='replace')")
    return x


def check_pair(fn: str, pair, name: str, strict: bool = False) -> tuple[float, float]:
    """(lo, hi): two numbers with lo <= hi (lo < hi when `strict`)."""
    if isinstance(pair, (str, bytes)) or not isinstance(pair, (Sequence, np.ndarray)) \
            or len(pair) != 2:
        fail(fn, f"{name} must be a pair (lo, hi), got {pair!r}")
    lo = check_number(fn, pair[0], f"{name} lower bound")
    hi = check_number(fn, pair[1], f"{name} upper bound")
    if not (lo < hi if strict else lo <= hi):
        fail(fn, f"{name} must satisfy lo {'<' if strict else '<='} hi, got ({lo}, {hi})")
    return lo, hi


def check_choice(fn: str, x, name: str, choices: Sequence[str]) -> str:
    if not isinstance(x, str) or x not in choices:
        fail(fn, f"{name} must be one of {', '.join(map(repr, choices))}, got {x!r}")
    return x


def check_array(fn: str, a, name: str) -> np.ndarray:
    """`a` as a float64 array of finite float32-representable reals, within the size limit."""
    if isinstance(a, (str, bytes)) or a is None or isinstance(a, SSAValue):
        fail(fn, f"{name} must be an array of numbers, got {type(a).__name__}")
    try:
        arr = np.asarray(a)
    except (TypeError, ValueError) as e:  # ragged nesting, unconvertible objects
        fail(fn, f"{name} must be a rectangular array of numbers ({e})")
    if arr.dtype.kind not in "iuf":
        fail(fn, f"{name} must hold real numbers, got dtype {arr.dtype}")
    if arr.size > MAX_DENSE_ELEMENTS:
        fail(fn, f"{name} has {arr.size} elements, above the limit of {MAX_DENSE_ELEMENTS}")
    arr = arr.astype(np.float64)
    if not np.all(np.abs(arr) <= FLOAT32_MAX):
        fail(fn, f"{name} must hold finite float32 numbers (NaN, inf or |x| > "
             f"{FLOAT32_MAX:.7g} found)")
    return arr


def width(v: Value) -> int:
    if not isinstance(v, SSAValue) or not isinstance(v.type, VecType):
        fail("width", f"v must be a tw value (a !tw.vec), got {type(v).__name__}")
    return width_of(v)


def _matrix(fn: str, m, rows: int | None = None, name: str = "matrix",
            max_cols: int | None = MAX_WIDTH) -> np.ndarray:
    """A 2-D weight (a 1-D one reshaped to `rows` rows), nonempty, at most `max_cols` wide."""
    a = check_array(fn, m, name)
    if a.ndim == 1 and rows is not None and a.size and a.size % rows == 0:
        a = a.reshape(rows, -1)
    if a.ndim != 2:
        fail(fn, f"{name} must be 2-D, got shape {a.shape}")
    if rows is not None and a.shape[0] != rows:
        fail(fn, f"{name} has {a.shape[0]} rows, expected {rows}")
    if a.shape[0] < 1 or a.shape[1] < 1:
        fail(fn, f"{name} must not be empty, got shape {a.shape}")
    if max_cols is not None and a.shape[1] > max_cols:
        fail(fn, f"{name} has {a.shape[1]} columns, above the limit of {max_cols} (MAX_WIDTH)")
    return a


def _row(fn: str, v, n: int | None = None, name: str = "vector") -> np.ndarray:
    """A vector of n entries (a scalar broadcasts; n is a checked matrix's, such as an mlp's
    hidden width, which MAX_WIDTH does not bound), or of any length 1..MAX_WIDTH."""
    a = check_array(fn, v, name).reshape(-1)
    if n is not None and a.size == 1 and n > 1:
        a = np.full(n, a[0])
    if n is not None and a.size != n:
        fail(fn, f"{name} has {a.size} entries, expected {n}")
    if n is None and not 1 <= a.size <= MAX_WIDTH:
        fail(fn, f"{name} must have 1 to {MAX_WIDTH} entries, got {a.size}")
    return a


@contextlib.contextmanager
def annotate(name: str) -> Iterator[None]:
    """Tag every op built inside with a hierarchical name (`render/texture`).

    Re-entering a component that is already on the path adds nothing (no `a/b/a/b`)."""
    check_name("annotate", name)
    path = _current("annotate").annotation
    added = [p for p in name.split("/") if p and p not in path]
    path.extend(added)
    try:
        yield
    finally:
        del path[len(path) - len(added):]


def sequential_scope(factories: Sequence[Callable[[], Value]], name: str = "scope") -> list[Value]:
    """Build loop iterations in order, tagging each one's ops with (`name`, iteration).

    Returns each factory's terminal value; the producing op is marked `tw.scope_terminal`.
    The tags change no value: the `sequential-scope` pass turns them into ordering edges.
    Each factory must return a value it built (the terminal of its own iteration)."""
    check_name("sequential_scope", name)
    if isinstance(factories, (str, bytes)) or not isinstance(factories, (Sequence, Iterator)):
        fail("sequential_scope", f"factories must be a list of callables, got "
             f"{type(factories).__name__}")
    factories = list(factories)
    for i, factory in enumerate(factories):
        if not callable(factory):
            fail("sequential_scope", f"factories[{i}] must be callable, got "
                 f"{type(factory).__name__}")
    scope = _current("sequential_scope").scope
    terminals = []
    for i, factory in enumerate(factories):
        scope.append((name, i))
        try:
            t = factory()
        finally:
            scope.pop()
        check_value("sequential_scope", t, f"the value factories[{i}] returns")
        tags = t.owner.attributes
        if tags.get(SCOPE) != StringAttr(name) or tags.get(ITERATION) != int_prop(i):
            fail("sequential_scope", f"factories[{i}] must return a value it built (the "
                 "iteration's terminal), not one built before the scope")
        t.owner.attributes[SCOPE_TERMINAL] = UnitAttr()
        terminals.append(t)
    return terminals


# --------------------------------------------------------------------------------------
# Sources and sinks
# --------------------------------------------------------------------------------------


def _new_input_name(fn: str, name) -> str:
    check_name(fn, name)
    graph = _current(fn)
    if name in graph._input_names:
        fail(fn, f"name: the graph already has an input \"{name}\" (inputs and embeddings "
             "share one namespace)")
    return name


def input(name: str, width: int, value_range: tuple[float, float],  # noqa: A001
          integer: bool = False) -> Value:
    """A named per-position input of `width` floats, each within `value_range` (and an integer
    when `integer`: a promise the oracle checks and `decompose` may use)."""
    _new_input_name("input", name)
    n = check_width("input", width)
    lo, hi = check_pair("input", value_range, "value_range")
    if not isinstance(integer, (bool, np.bool_)):
        fail("input", f"integer must be a bool, got {integer!r}")
    if integer and np.ceil(lo) > np.floor(hi):
        fail("input", f"value_range ({lo}, {hi}) holds no integer but integer=True")
    out = _one(InputOp(name, n, (lo, hi), bool(integer)), "input")
    _current()._input_names.add(name)
    return out


def embedding(name: str, table) -> Value:
    """A token input: the integer id at each position selects a row of `table` (V x D)."""
    _new_input_name("embedding", name)
    t = _matrix("embedding", table, name="table")
    out = _one(EmbeddingOp(name, t), "embedding")
    _current()._input_names.add(name)
    return out


def pos_encoding(width: int, max_len: int = 1024) -> Value:
    """Position features: [i, i*i, sin/cos pairs...] (see `tw.pos_encoding`)."""
    n = check_width("pos_encoding", width)
    m = check_int("pos_encoding", max_len, "max_len", 1, 2**63 - 1)
    return _one(PosEncodingOp(n, m), "pos_encoding")


def pos_table(table) -> Value:
    """Per-position values given by the graph: at position i, row i of `table` (L x W, L the
    longest sequence the graph takes; a longer one is refused at run time). One-hot position
    indices are `np.eye(L)`; any finite float32 table works (see `tw.pos_table`)."""
    t = _matrix("pos_table", table, name="table")
    return _one(PosTableOp(t), "pos_table")


def output(name: str, value: Value, margin: float | None = None) -> None:
    """A named graph output. `margin`: the absolute error its consumer tolerates (half the
    smallest argmax gap of logits, 0.5 for a value rounded to an integer); compiling refuses
    (or warns, `compile(on_margin=...)`) when the output's static float32 error estimate
    exceeds it."""
    check_name("output", name)
    check_value("output", value, "value")
    sink = OutputOp(name, value)
    if margin is not None:
        sink.attributes[MARGIN] = FloatAttr(check_number("output", margin, "margin",
                                                         positive=True), f64)
    graph = _current("output")
    if name in graph._output_names:
        fail("output", f"name: the graph already has an output \"{name}\"")
    _emit(sink, "output")
    graph._output_names.add(name)


# --------------------------------------------------------------------------------------
# Primitives
# --------------------------------------------------------------------------------------


def literal(values) -> Value:
    v = _row("literal", values, name="values")
    return _one(LiteralOp(v), "literal")


def linear(x: Value, matrix, bias=None) -> Value:
    """y = x @ matrix + bias; `matrix` is (width(x), out)."""
    check_value("linear", x, "x")
    m = _matrix("linear", matrix, width_of(x), "matrix")
    b = None if bias is None else _row("linear", bias, m.shape[1], "bias")
    return _one(LinearOp(x, m, b), "linear")


def relu(x: Value) -> Value:
    check_value("relu", x, "x")
    return _one(ReluOp(x), "relu")


def add(a: Value, b: Value) -> Value:
    check_value("add", a, "a")
    check_value("add", b, "b", width_of(a))
    return _one(AddOp(a, b), "add")


def concat(*values) -> Value:
    """Concatenate values (free: consumers read the leaves' columns). Accepts a list too."""
    if len(values) == 1 and isinstance(values[0], (list, tuple)):
        values = tuple(values[0])
    values = check_values("concat", list(values), "values")
    if len(values) == 1:
        return values[0]
    total = builtins.sum(width_of(v) for v in values)
    if total > MAX_WIDTH:
        fail("concat", f"values are {total} wide together, above the limit of {MAX_WIDTH} "
             "(MAX_WIDTH)")
    return _one(ConcatOp(values), "concat")


def slice(x: Value, start: int, length: int) -> Value:  # noqa: A001
    """Components [start, start + length) of x: a free view."""
    check_value("slice", x, "x")
    n = width_of(x)
    start = check_int("slice", start, "start", 0, n - 1)
    length = check_int("slice", length, "length", 1, n - start)
    if start == 0 and length == n:
        return x
    return _one(SliceOp(x, start, length), "slice")


def after(x: Value, *deps: Value) -> Value:
    """x, but available only once every value in `deps` is (an ordering-only edge)."""
    check_value("after", x, "x")
    deps = check_values("after", list(deps), "deps")
    return _one(AfterOp(x, deps), "after")


def attn(query: Value, key: Value, value: Value, wq, wk, wv, wo, mask: str = "causal",
         rope=None, rope_base: float | None = None, rope_dims: int | None = None,
         hard: float | None = None) -> Value:
    """Attention: softmax_j((q_i Wq).(k_j Wk)) over j <= i (`mask="causal"`, the default) or
    over every position of the sequence (`mask="full"`: bidirectional, encoder-style; a graph
    with such a head runs on whole sequences only, never step by step), applied to
    (v_j Wv) Wo.

    Rotary position embeddings (torchwright's `Attn`, HF LLaMA's rotate_half; see `tw.attn`):
    `rope=(base, dims)` rotates q Wq and k Wk by their absolute positions over their first
    `dims` components; `rope=True` is torchwright's default (base 5e5, every d_qk component);
    or the keywords `rope_base=` (and `rope_dims=`, default d_qk). None (the default): no
    rotation.

    `hard=g` claims a one-key read: at every query the top logit leads every other visible
    key's by at least g (`tw.hard`; the oracle checks it on every run, and from g >=
    HARD_INTEGER_GAP the analyses take the output as the winner's value)."""
    mask = check_choice("attn", mask, "mask", ATTN_MASKS)
    for v, nm in ((query, "query"), (key, "key"), (value, "value")):
        check_value("attn", v, nm)
    q = _matrix("attn", wq, width_of(query), "wq", None)
    k = _matrix("attn", wk, width_of(key), "wk", None)
    v = _matrix("attn", wv, width_of(value), "wv", None)
    o = _matrix("attn", wo, v.shape[1], "wo")
    if q.shape[1] != k.shape[1]:
        fail("attn", f"wk must have as many columns as wq ({k.shape[1]} vs {q.shape[1]})")
    base, dims = _rope_of(rope, rope_base, rope_dims, q.shape[1])
    out = _one(AttnOp(query, key, value, q, k, v, o, mask=mask, rope_base=base,
                      rope_dims=dims), "attn")
    return out if hard is None else claim_hard(out, hard)


def claim_hard(read: Value, gap: float) -> Value:
    """Mark the `tw.attn` that made `read` a hard read of logit gap `gap` (`tw.hard`, as
    `attn(hard=...)` does; for heads a library op built). Returns `read`."""
    if not isinstance(getattr(read, "owner", None), AttnOp):
        fail("claim_hard", "read must be the value of a tw.attn")
    read.owner.attributes[HARD] = FloatAttr(check_number("claim_hard", gap, "gap",
                                                         positive=True), f64)
    return read


def _rope_of(rope, rope_base, rope_dims, d_qk: int) -> tuple[float | None, int | None]:
    """The (base, dims) `attn` asked for, checked, or (None, None)."""
    if rope is not None and rope is not False:
        if rope_base is not None or rope_dims is not None:
            fail("attn", "give rope=(base, dims) or rope_base=/rope_dims=, not both")
        if rope is True:
            rope_base = ROPE_BASE
        elif isinstance(rope, (tuple, list)) and len(rope) == 2:
            rope_base, rope_dims = rope
        else:
            fail("attn", f"rope must be (base, dims), True or None, got {rope!r}")
    if rope_base is None:
        if rope_dims is not None:
            fail("attn", "rope_dims needs rope_base")
        return None, None
    base = check_number("attn", rope_base, "rope base")
    if not base > 1:
        fail("attn", f"rope base must exceed 1, got {base}")
    dims = d_qk if rope_dims is None else check_int("attn", rope_dims, "rope dims", 1)
    if dims % 2 or dims > d_qk:
        fail("attn", f"rope dims must be even and at most d_qk={d_qk}, got {dims}")
    return base, dims


def mlp(x: Value, w1, b1, w2, b2=None, activation: str = "relu", up=None,
        up_bias=None) -> Value:
    """One MLP chain: lanes W2 + b2 with lane_j = act(x W1 + b1)_j * up_j(x); act is
    "relu" (the default) or "swish" (z * sigmoid(z)); up_j(x) = (x up + up_bias)_j where `up`
    is given (a gated, SwiGLU-style mlp: activation="swish" with `up` is Llama's), else 1."""
    activation = check_choice("mlp", activation, "activation", MLP_ACTIVATIONS)
    check_value("mlp", x, "x")
    m1 = _matrix("mlp", w1, width_of(x), "w1", None)
    m2 = _matrix("mlp", w2, m1.shape[1], "w2")
    r1 = None if b1 is None else _row("mlp", b1, m1.shape[1], "b1")
    r2 = None if b2 is None else _row("mlp", b2, m2.shape[1], "b2")
    if up is None and up_bias is not None:
        fail("mlp", "up_bias needs an up projection (up)")
    mu = None if up is None else _matrix("mlp", up, width_of(x), "up", None)
    if mu is not None and mu.shape[1] != m1.shape[1]:
        fail("mlp", f"up must have as many columns as w1 ({mu.shape[1]} vs {m1.shape[1]})")
    ru = None if up_bias is None else _row("mlp", up_bias, m1.shape[1], "up_bias")
    return _one(MlpOp(x, m1, m2, b1=r1, b2=r2, activation=activation, up=mu, up_bias=ru), "mlp")


# --------------------------------------------------------------------------------------
# Library ops
# --------------------------------------------------------------------------------------


def compare(x: Value, threshold: float, ramp: float = 0.1) -> Value:
    """+1 where x >= threshold else -1, elementwise; exact outside (threshold - ramp, threshold)."""
    check_value("compare", x, "x")
    t = check_number("compare", threshold, "threshold")
    r = check_number("compare", ramp, "ramp", positive=True)
    return _one(CompareOp(x, t, r), "compare")


def select(cond: Value, if_true: Value, if_false: Value) -> Value:
    """if_true where cond > 0 else if_false (cond is +/-1, 1 wide or one per component)."""
    check_value("select", if_true, "if_true")
    n = width_of(if_true)
    check_value("select", if_false, "if_false", n)
    check_value("select", cond, "cond")
    if width_of(cond) not in (1, n):
        fail("select", f"cond must be 1 or {n} wide (the branches' width), got {width_of(cond)}")
    return _one(SelectOp(cond, if_true, if_false), "select")


def clamp(x: Value, lo: float, hi: float) -> Value:
    check_value("clamp", x, "x")
    lo_ = check_number("clamp", lo, "lo")
    hi_ = check_number("clamp", hi, "hi")
    if not lo_ <= hi_:
        fail("clamp", f"lo {lo_} exceeds hi {hi_}")
    return _one(ClampOp(x, lo_, hi_), "clamp")


def accept_error(x: Value, tolerance: float) -> Value:
    """Let the library op that made `x` (compare, select, clamp, piecewise_linear(_2d)) be
    decomposed even where float32 rounding over its operands' declared ranges may reach
    `tolerance * max(1, |x|)` (`decompose` refuses beyond 1e-4 by default): for operands the
    range analysis cannot prove to be integers but the author knows are. Returns `x`."""
    check_value("accept_error", x, "x")
    t = check_number("accept_error", tolerance, "tolerance", positive=True)
    if not isinstance(x.owner, LIBRARY_OPS):
        fail("accept_error", f"x must be made by a library op, not {x.owner.name}")
    x.owner.attributes[TOLERANCE] = FloatAttr(t, f64)
    return x


def _grid(fn: str, points, name: str) -> np.ndarray:
    """Breakpoints: at least 2, strictly increasing once stored as float32."""
    g = _row(fn, points, name=name)
    if g.size < 2:
        fail(fn, f"{name} must have at least 2 entries, got {g.size}")
    if np.any(np.diff(g.astype(np.float32)) <= 0):
        fail(fn, f"{name} must be strictly increasing (as float32 numbers)")
    return g


def _tabulate(fn: str, values, name: str, grid_shape: tuple[int, ...], at) -> np.ndarray:
    """`values` (or a callable evaluated at every grid point by `at`) as grid_shape + (O,)."""
    if callable(values):
        values = [at(values, idx) for idx in np.ndindex(*grid_shape)]
    v = check_array(fn, values, name)
    n = int(np.prod(grid_shape))
    if v.size == 0 or v.size % n:
        fail(fn, f"{name} has {v.size} entries, not a multiple of the {n} grid points")
    v = v.reshape(grid_shape + (-1,))
    if v.shape[-1] > MAX_WIDTH:
        fail(fn, f"{name} gives {v.shape[-1]} outputs per point, above the limit of {MAX_WIDTH}")
    return v


def piecewise_linear(x: Value, breakpoints, values) -> Value:
    """Linear interpolation through (breakpoints[k], values[k]); constant outside.

    `values` is a sequence (scalar output), an array (len(breakpoints), O), or a callable
    evaluated at each breakpoint."""
    check_value("piecewise_linear", x, "x", 1)
    bp = _grid("piecewise_linear", breakpoints, "breakpoints")
    v = _tabulate("piecewise_linear", values, "values", (bp.size,),
                  lambda f, idx: f(float(bp[idx[0]])))
    return _one(PiecewiseLinearOp(x, bp, v), "piecewise_linear")


def piecewise_linear_2d(x: Value, y: Value, xs, ys, table) -> Value:
    """Triangulated interpolation of `table` (len(xs), len(ys)[, O]) on the grid xs x ys.

    `table` may be a callable f(x, y) evaluated at every grid vertex."""
    check_value("piecewise_linear_2d", x, "x", 1)
    check_value("piecewise_linear_2d", y, "y", 1)
    gx = _grid("piecewise_linear_2d", xs, "xs")
    gy = _grid("piecewise_linear_2d", ys, "ys")
    t = _tabulate("piecewise_linear_2d", table, "table", (gx.size, gy.size),
                  lambda f, idx: f(float(gx[idx[0]]), float(gy[idx[1]])))
    return _one(PiecewiseLinear2dOp(x, y, gx, gy, t), "piecewise_linear_2d")


# --------------------------------------------------------------------------------------
# Affine helpers (each one tw.linear; combinations of several values read a concat)
# --------------------------------------------------------------------------------------


def negate(x: Value) -> Value:
    check_value("negate", x, "x")
    return multiply_const(x, -1.0)


def multiply_const(x: Value, c: float) -> Value:
    n = width_of(check_value("multiply_const", x, "x"))
    return linear(x, np.eye(n) * check_number("multiply_const", c, "c", float32=True) + 0.0)


def add_const(x: Value, c) -> Value:
    n = width_of(check_value("add_const", x, "x"))
    return linear(x, np.eye(n), _row("add_const", c, n, "c"))


def add_scaled(a: Value, b: Value, scale_b: float = 1.0, scale_a: float = 1.0) -> Value:
    """scale_a * a + scale_b * b as one linear over concat(a, b)."""
    n = width_of(check_value("add_scaled", a, "a"))
    check_value("add_scaled", b, "b", n)
    sa = check_number("add_scaled", scale_a, "scale_a", float32=True)
    sb = check_number("add_scaled", scale_b, "scale_b", float32=True)
    if 2 * n > MAX_WIDTH:
        fail("add_scaled", f"a and b are {2 * n} wide together, above the limit of {MAX_WIDTH}")
    return linear(concat(a, b), np.vstack([np.eye(n) * sa, np.eye(n) * sb]))


def subtract(a: Value, b: Value) -> Value:
    """a - b as one linear over concat(a, b)."""
    n = width_of(check_value("subtract", a, "a"))
    check_value("subtract", b, "b", n)
    return add_scaled(a, b, -1.0)


def sum(values: Sequence[Value]) -> Value:  # noqa: A001
    """Elementwise sum of equally wide values as one linear over their concat."""
    values = check_values("sum", values, "values")
    n = width_of(values[0])
    for k, v in enumerate(values):
        if width_of(v) != n:
            fail("sum", f"values[{k}] is {width_of(v)} wide, values[0] {n}: all must match")
    if len(values) == 1:
        return values[0]
    if n * len(values) > MAX_WIDTH:
        fail("sum", f"values are {n * len(values)} wide together, above the limit of {MAX_WIDTH}")
    return linear(concat(values), np.vstack([np.eye(n)] * len(values)))


def weights(op_value: Value, name: str) -> np.ndarray:
    """Read a dense property of the op that produced `op_value` as a numpy array."""
    if not isinstance(op_value, SSAValue) or not isinstance(op_value.owner, Operation):
        fail("weights", f"op_value must be a tw value, got {type(op_value).__name__}")
    prop = op_value.owner.properties.get(name) if isinstance(name, str) else None
    if not isinstance(prop, DenseIntOrFPElementsAttr):
        dense_names = sorted(k for k, p in op_value.owner.properties.items()
                             if isinstance(p, DenseIntOrFPElementsAttr))
        fail("weights", f"name must be one of {dense_names} for '{op_value.owner.name}', "
             f"got {name!r}")
    return to_numpy(prop)
from twdialect.library import *  # noqa: E402,F401,F403 - the ops library: tw.abs, tw.floor_int, ...
