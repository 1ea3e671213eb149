"""The `tw` dialect: a per-position vector type, graph structure, primitives and library ops.

Every value is a `!tw.vec<N>`: at each sequence position, N f32 numbers. Primitives are what
the transformer machine executes directly (see `docs/architecture.md`); library ops carry an
ideal meaning that the `decompose` pass lowers to primitives under a documented contract
(`twdialect/contracts.py`). Weights are bytes-backed dense attributes (`twdialect.dense`).
Every op class has a typed constructor (`LinearOp(x, weight, bias)`, weights as arrays or
dense attributes) that derives the result type; the parser builds ops with `create`.

Discardable attributes understood everywhere:
  `tw.annotation = "render/texture"`  hierarchical name, free at run time, carried into reports;
  `tw.scope = "loop"`, `tw.iteration = 3 : i64`  membership in a `sequential_scope` iteration;
  `tw.scope_terminal`  marks an iteration's terminal value;
  `tw.tolerance = 0.2 : f64`  on a library op: the float32 error its author accepts for it,
      relative to max(1, |output|), where `decompose`'s default (1e-4) would refuse it;
  `tw.margin = 0.5 : f64`  on a `tw.output`: the absolute error its consumer tolerates (half
      an argmax gap, 0.5 for rounding to integers); compile refuses (or warns) when the static
      float32 error estimate of the output exceeds it (`lowering/precision.py`).
The graph verifier checks their types (what the passes and reports read).

Limits (`docs/dialect.md`): a value is at most MAX_WIDTH components wide and a weight attribute
holds at most MAX_DENSE_ELEMENTS finite f32 numbers, so no pass, oracle or lowering step is ever
asked to allocate gigabytes; float properties and ranges (f64) are finite.
"""

from __future__ import annotations

import functools

import math
from collections.abc import Sequence
from typing import ClassVar

import numpy as np
from twdialect.errors import TwError
from xdsl.dialects.builtin import (
    DenseIntOrFPElementsAttr,
    I64,
    FloatAttr,
    Float64Type,
    IntAttr,
    IntegerAttr,
    StringAttr,
    ModuleOp,
    SymbolNameConstraint,
    UnitAttr,
    f32,
    f64,
    i64,
)
from xdsl.ir import (
    Attribute,
    Block,
    Dialect,
    Operation,
    ParametrizedAttribute,
    Region,
    SSAValue,
    TypeAttribute,
)
from xdsl.irdl import (
    IRDLOperation,
    VarConstraint,
    base,
    irdl_attr_definition,
    irdl_op_definition,
    operand_def,
    opt_prop_def,
    prop_def,
    region_def,
    result_def,
    traits_def,
    var_operand_def,
)
from xdsl.irdl.declarative_assembly_format import (
    AttributeVariable,
    CustomDirective,
    ParsingState,
    irdl_custom_directive,
    PrintingState,
)
from xdsl.parser import AttrParser, Parser
from xdsl.printer import Printer
from xdsl.traits import (
    HasCanonicalizationPatternsTrait,
    IsolatedFromAbove,
    NoTerminator,
    Pure,
    SymbolOpInterface,
)
from xdsl.utils.exceptions import VerifyException

from twdialect.dense import as_dense, shape_of, to_numpy

# Limits (see the module docstring). Library ops decompose into (width x 2*width) matrices, so
# MAX_WIDTH = 4096 keeps each one of them below 2^25 entries; MAX_DENSE_ELEMENTS (2^26 f32
# numbers, 256 MiB) bounds any one weight attribute, including a splat written as text.
MAX_WIDTH = 1 << 12
MAX_DENSE_ELEMENTS = 1 << 26
FLOAT32_MAX = float(np.finfo(np.float32).max)

ANNOTATION = "tw.annotation"
SCOPE = "tw.scope"
ITERATION = "tw.iteration"
SCOPE_TERMINAL = "tw.scope_terminal"
TOLERANCE = "tw.tolerance"
MARGIN = "tw.margin"
# On a tw.attn: the author's claim that at every query the largest logit leads every other
# visible key's by at least this much (a hard, one-key read: the output is that key's value up
# to a leakage below n exp(-gap) of the values). The oracle checks the claim at every run;
# the integrality analysis then treats the read as its winner's value (HARD_INTEGER_GAP).
HARD = "tw.hard"
HARD_INTEGER_GAP = 24.0


# --------------------------------------------------------------------------------------
# Types and attributes
# --------------------------------------------------------------------------------------


@irdl_attr_definition
class VecType(ParametrizedAttribute, TypeAttribute):
    """`!tw.vec<N>`: N f32 values at every position."""

    name = "tw.vec"
    width: IntAttr

    def __init__(self, width: int | IntAttr):
        super().__init__(width if isinstance(width, IntAttr) else IntAttr(width))

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        with parser.in_angle_brackets():
            pos = parser.pos
            w = parser.parse_integer(allow_negative=False, allow_boolean=False)
            if w < 1:
                parser.raise_error("vector width must be at least 1", pos, parser.pos)
            if w > MAX_WIDTH:
                parser.raise_error(f"vector width {w} exceeds the limit of {MAX_WIDTH} "
                                   "components (MAX_WIDTH)", pos, parser.pos)
        return (IntAttr(w),)

    def print_parameters(self, printer: Printer) -> None:
        with printer.in_angle_brackets():
            printer.print_string(str(self.width.data))

    def verify(self) -> None:
        w = self.width.data
        if not 1 <= w <= MAX_WIDTH:
            raise TwAttributeException(f"!tw.vec width must be in [1, {MAX_WIDTH}] (MAX_WIDTH), "
                                       f"got {w}")


@irdl_attr_definition
class RangeAttr(ParametrizedAttribute):
    """`#tw.range<lo, hi>`: a declared closed value range [lo, hi] for every component."""

    name = "tw.range"
    lo: FloatAttr
    hi: FloatAttr

    def __init__(self, lo: float, hi: float):
        super().__init__(FloatAttr(float(lo), f64), FloatAttr(float(hi), f64))

    @property
    def bounds(self) -> tuple[float, float]:
        return (self.lo.value.data, self.hi.value.data)

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        with parser.in_angle_brackets():
            lo = parser.parse_float()
            parser.parse_punctuation(",")
            hi = parser.parse_float()
        return (FloatAttr(lo, f64), FloatAttr(hi, f64))

    def print_parameters(self, printer: Printer) -> None:
        with printer.in_angle_brackets():
            printer.print_string(f"{_fmt(self.lo.value.data)}, {_fmt(self.hi.value.data)}")

    def verify(self) -> None:
        lo, hi = self.bounds
        if not (np.isfinite(lo) and np.isfinite(hi)):
            raise TwAttributeException(f"#tw.range bounds must be finite, got [{lo}, {hi}]")
        if lo > hi:
            raise TwAttributeException(f"#tw.range lower bound {lo} exceeds upper bound {hi}")


def _fmt(x: float) -> str:
    """Shortest exact text of x as an MLIR float literal, which needs a '.' before any
    exponent (`1e-05` does not parse, `1.0e-05` does)."""
    r = repr(float(x))
    if "n" in r:  # inf/nan: rejected by the verifier anyway
        return r
    mantissa, exp = r.split("e") if "e" in r else (r, None)
    if "." not in mantissa:
        mantissa += ".0"
    return mantissa if exp is None else f"{mantissa}e{exp}"


class TwAttributeException(VerifyException, TwError):
    """A tw type or attribute with bad parameters (raised where it is built or parsed)."""

    op = None


@functools.lru_cache(maxsize=4096)
def vec(width: int) -> VecType:
    """`!tw.vec<width>`, built once per width (attributes are immutable; passes that build many
    ops spent a quarter of their time making the same types)."""
    return VecType(width)


def width_of(value: SSAValue) -> int:
    t = value.type
    if not isinstance(t, VecType):
        raise TypeError(f"expected a !tw.vec value, got {t}")
    return t.width.data


# --------------------------------------------------------------------------------------
# Verification helpers: errors name the op they are about
# --------------------------------------------------------------------------------------


def describe(op: Operation) -> str:
    """A short, stable identification of `op` for error messages."""
    parts = [f"'{op.name}'"]
    if isinstance(op, GraphOp) and isinstance(op.properties.get("sym_name"), StringAttr):
        parts.append(f"@{op.sym_name.data}")
    if op.results and op.results[0].name_hint:
        parts.append(f"%{op.results[0].name_hint}")
    block = op.parent_block()
    graph = block.parent_op() if block is not None else None
    if isinstance(graph, GraphOp):
        parts.append(f"in @{graph.sym_name.data}")
    if (ann := op.attributes.get(ANNOTATION)) is not None and isinstance(ann, StringAttr):
        parts.append(f"[{ann.data}]")
    return " ".join(parts)


class TwVerifyException(VerifyException, TwError):
    """A tw verifier failure; `op` is the op it is about (a graph-level check such as
    use-before-def names the offending inner op, not the graph), so tools can locate it."""

    def __init__(self, message: str, op: Operation):
        super().__init__(message)
        self.op = op


def _fail(op: Operation, message: str):
    raise TwVerifyException(f"{describe(op)}: {message}", op)


def _check_dense(op, attr, name: str) -> tuple[int, ...]:
    """Every weight is an f32 tensor of static shape whose bytes hold its elements (or one,
    a splat), no larger than MAX_DENSE_ELEMENTS: what `twdialect.dense` and every pass read."""
    element = attr.get_element_type()
    if element != f32:
        _fail(op, f"{name} must hold f32 elements, got {element}")
    shape = shape_of(attr)
    if any(n < 1 for n in shape):
        _fail(op, f"{name} must have a static, nonempty shape, got {list(shape)}")
    n = math.prod(shape)
    if n > MAX_DENSE_ELEMENTS:
        _fail(op, f"{name} has {n} elements, above the limit of {MAX_DENSE_ELEMENTS} "
              "(MAX_DENSE_ELEMENTS)")
    if len(attr.data.data) not in (4, 4 * n):
        _fail(op, f"{name} holds {len(attr.data.data)} bytes, not {n} f32 elements")
    return shape


def _check_matrix(op, attr, name: str, rows: int | None, cols: int | None):
    shape = _check_dense(op, attr, name)
    if len(shape) != 2:
        _fail(op, f"{name} must be a 2-D matrix, got shape {list(shape)}")
    if rows is not None and shape[0] != rows:
        _fail(op, f"{name} has {shape[0]} rows but its input is {rows} wide")
    if cols is not None and shape[1] != cols:
        _fail(op, f"{name} has {shape[1]} columns but must produce {cols}")
    _check_finite(op, attr, name)


def _check_vector(op, attr, name: str, length: int):
    shape = _check_dense(op, attr, name)
    if len(shape) != 1 or shape[0] != length:
        _fail(op, f"{name} must be a vector of length {length}, got shape {list(shape)}")
    _check_finite(op, attr, name)


def _check_finite(op, attr, name: str):
    if not np.all(np.isfinite(np.frombuffer(attr.data.data, "<f4"))):
        _fail(op, f"{name} contains a non-finite value")


def _check_scalar(op, prop, name: str, positive: bool = False) -> float:
    """A float property (f64): finite (passes turn it into weights), positive if asked."""
    x = prop.value.data
    if not np.isfinite(x):
        _fail(op, f"{name} must be finite, got {x}")
    if positive and not x > 0:
        _fail(op, f"{name} must be positive, got {x}")
    return x


# Discardable attributes tw reads, with the attribute kind every reader assumes. The placement
# attributes are written by `lower-to-transformer`; a hand-written one must still be well formed.
_INT = "an integer"
_STR = "a string"
_UNIT = "a unit attribute (no value)"
_FLOAT = "a positive finite float"
DISCARDABLE_KINDS: dict[str, str] = {
    ANNOTATION: _STR, SCOPE: _STR, ITERATION: _INT, SCOPE_TERMINAL: _UNIT, TOLERANCE: _FLOAT,
    MARGIN: _FLOAT, HARD: _FLOAT, "tw.index": _STR,
    "tw.layer": _INT, "tw.sublayer": _STR, "tw.heads": _INT, "tw.dims": _INT,
    "tw.neurons": _INT, "tw.cancel": _STR, "tw.accumulate": _UNIT, "tw.n_layers": _INT,
    "tw.floor": _INT, "tw.geometry": _STR,
}
_KIND_TYPES = {_INT: IntegerAttr, _STR: StringAttr, _UNIT: UnitAttr, _FLOAT: FloatAttr}


def _check_discardable(op: Operation) -> None:
    """The tw.* discardable attributes of `op` have the kinds their readers assume, and the
    scope tags come as a pair (`sequential_scope` writes both)."""
    attrs = op.attributes
    for key, attr in attrs.items():
        kind = DISCARDABLE_KINDS.get(key)
        if kind is not None and (not isinstance(attr, _KIND_TYPES[kind]) or (
                kind == _FLOAT and not (np.isfinite(attr.value.data) and attr.value.data > 0))):
            _fail(op, f"attribute {key} must be {kind}, got {attr}")
    if (SCOPE in attrs) != (ITERATION in attrs):
        _fail(op, f"{SCOPE} and {ITERATION} go together (one names the loop, the other the "
              "iteration)")
    if SCOPE_TERMINAL in attrs and SCOPE not in attrs:
        _fail(op, f"{SCOPE_TERMINAL} marks the end of a scope iteration, but the op has no "
              f"{SCOPE}/{ITERATION}")


class TwCanonicalization(HasCanonicalizationPatternsTrait):
    """Upstream `canonicalize` picks up tw's patterns (`twdialect/canonicalization.py`, the
    dialect's own: they import this module, so they are read when first asked)."""

    def get_patterns(self, op):
        from twdialect.canonicalization import patterns_for

        return tuple(patterns_for(op))

    @classmethod
    def get_canonicalization_patterns(cls):
        return ()


# Weights as the typed constructors take them: an array (stored as f32) or a dense attribute.
Weights = np.ndarray | Sequence | DenseIntOrFPElementsAttr


def _fill(op: Operation, operands: Sequence[SSAValue] = (), result: Attribute | None = None,
          properties: dict[str, Attribute] | None = None) -> None:
    """Initialize `op` as `Operation.create` does. The typed constructors hand over arguments of
    the right kinds, so IRDL's per-argument re-checks (a large share of building a 10^5-op
    graph) are skipped; the graph verifier checks the finished graph. Properties go in the
    order the parser builds them, so a built and a parsed module print alike."""
    Operation.__init__(op, operands=operands, result_types=[] if result is None else [result],
                       properties=properties or {})


def _with_optional(properties: dict[str, Attribute], name: str, values: Weights | None) -> None:
    if values is not None:
        properties[name] = as_dense(values)


# Scalar properties are pinned to i64 / f64 so the custom syntax can omit the type
# (`max_len 16`, not `max_len 16 : i64`); the builder always makes these types.
I64Prop = IntegerAttr[I64]
F64Prop = FloatAttr[Float64Type]


# --------------------------------------------------------------------------------------
# Graph structure
# --------------------------------------------------------------------------------------


@irdl_op_definition
class GraphOp(IRDLOperation):
    """`tw.graph @main { ... }`: one computation graph (a symbol; a module may hold several).

    Its single block holds `tw.input`/`tw.embedding`/`tw.pos_encoding`/`tw.pos_table` sources,
    computation, and `tw.output` sinks, in an order where every value is defined before it is
    used.
    """

    name = "tw.graph"
    sym_name = prop_def(SymbolNameConstraint())
    body = region_def()  # one block, checked by verify_ with a message naming the graph
    traits = traits_def(NoTerminator(), IsolatedFromAbove(), SymbolOpInterface())

    def __init__(self, name: str, ops: Sequence[Operation] = ()):
        super().__init__(properties={"sym_name": StringAttr(name)}, regions=[Region(Block(ops))])

    @property
    def block(self) -> Block:
        return self.body.block

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_symbol_name(self.sym_name.data)
        extra = {k: v for k, v in self.attributes.items()}
        if extra:
            printer.print_string(" attributes ")
            printer.print_attr_dict(extra)
        printer.print_string(" ")
        printer.print_region(self.body, print_entry_block_args=False, print_empty_block=False)

    @classmethod
    def parse(cls, parser: Parser) -> GraphOp:
        name = parser.parse_symbol_name().data
        attrs = {}
        if parser.parse_optional_keyword("attributes"):
            attrs = dict(parser.parse_optional_attr_dict())
        region = parser.parse_region()
        if not region.blocks:
            region.add_block(Block())
        op = cls.create(properties={"sym_name": StringAttr(name)}, regions=[region])
        op.attributes.update(attrs)
        return op

    def verify_(self) -> None:
        self._verify_structure()
        inputs: dict[str, Operation] = {}
        outputs: dict[str, Operation] = {}
        defined: set[SSAValue] = set()
        for op in self.block.ops:
            if type(op) not in _INNER_OPS:
                _fail(op, "only tw ops may appear in a tw.graph (and no tw.graph: graphs sit "
                      "directly in the module)")
            for i, operand in enumerate(op.operands):
                if operand not in defined:
                    _fail(op, f"operand #{i} is used before it is defined (values must be "
                          "defined earlier in the graph's block)")
            defined.update(op.results)
            if op.attributes:
                _check_discardable(op)
            if isinstance(op, (InputOp, EmbeddingOp)):
                n = op.input_name.data
                if n in inputs:
                    _fail(op, f"duplicate input name \"{n}\"")
                inputs[n] = op
            elif isinstance(op, OutputOp):
                n = op.output_name.data
                if n in outputs:
                    _fail(op, f"duplicate output name \"{n}\"")
                outputs[n] = op

    def _verify_structure(self) -> None:
        """A graph is a symbol of the module holding exactly one block (what every pass, the
        oracle and the lowering iterate)."""
        parent = self.parent_op()
        if parent is not None and not isinstance(parent, ModuleOp):
            _fail(self, f"a tw.graph must sit directly in a builtin.module, not in "
                  f"'{parent.name}'")
        if len(self.body.blocks) != 1:
            _fail(self, f"a tw.graph holds exactly one block, got {len(self.body.blocks)}")
        if self.block.args:
            _fail(self, "a tw.graph's block takes no arguments (inputs are tw.input ops)")
        if self.attributes:
            _check_discardable(self)


@irdl_op_definition
class InputOp(IRDLOperation):
    """`%x = tw.input "x" <-8.0, 8.0> : !tw.vec<2>`: a named per-position input.

    `integer` (`tw.input "d" <0.0, 9.0> integer : !tw.vec<1>`) declares every value
    integer-valued, as the declared range is: a promise the oracle checks and analyses use
    (an integer lattice lets `decompose` build some tables in one MLP chain instead of two)."""

    name = "tw.input"
    input_name = prop_def(StringAttr, prop_name="name")
    range = prop_def(RangeAttr)
    integer = opt_prop_def(UnitAttr)
    out = result_def(VecType)
    assembly_format = "$name $range (`integer` $integer^)? attr-dict `:` type($out)"
    traits = traits_def(TwCanonicalization())  # not Pure: inputs are the graph's interface, dce keeps them

    def __init__(self, name: str, width: int, value_range: tuple[float, float],
                 integer: bool = False):
        props: dict[str, Attribute] = {"name": StringAttr(name), "range": RangeAttr(*value_range)}
        if integer:
            props["integer"] = UnitAttr()
        _fill(self, result=vec(width), properties=props)

    def verify_(self) -> None:
        if not self.input_name.data:
            _fail(self, "input name must not be empty")
        lo, hi = self.range.bounds
        if self.integer is not None and np.ceil(lo) > np.floor(hi):
            _fail(self, f"declared integer but its range [{lo}, {hi}] holds no integer")


@irdl_op_definition
class OutputOp(IRDLOperation):
    """`tw.output "y" %v : !tw.vec<1>`: a named graph output (read after the last layer)."""

    name = "tw.output"
    output_name = prop_def(StringAttr, prop_name="name")
    value = operand_def(VecType)
    assembly_format = "$name $value attr-dict `:` type($value)"

    def __init__(self, name: str, value: SSAValue):
        _fill(self, [value], properties={"name": StringAttr(name)})

    def verify_(self) -> None:
        if not self.output_name.data:
            _fail(self, "output name must not be empty")


@irdl_op_definition
class EmbeddingOp(IRDLOperation):
    """`%e = tw.embedding "tokens" table dense<...> : tensor<VxDxf32> : !tw.vec<D>`.

    A token input: at each position the integer token id t in [0, V) selects row t of the table.
    """

    name = "tw.embedding"
    input_name = prop_def(StringAttr, prop_name="name")
    table = prop_def(DenseIntOrFPElementsAttr)
    out = result_def(VecType)
    assembly_format = "$name `table` $table attr-dict `:` type($out)"
    traits = traits_def(TwCanonicalization())  # not Pure: inputs are the graph's interface, dce keeps them

    def __init__(self, name: str, table: Weights):
        table = as_dense(table)
        _fill(self, result=vec(shape_of(table)[1]),
              properties={"name": StringAttr(name), "table": table})

    def verify_(self) -> None:
        _check_matrix(self, self.table, "embedding table", None, width_of(self.out))


@irdl_op_definition
class PosEncodingOp(IRDLOperation):
    """`%p = tw.pos_encoding max_len 512 : !tw.vec<W>`: the position features.

    Column 0 is the position index i (0-based); column 1 (if W >= 2) is i*i; columns 2.. hold
    sin/cos pairs sin(i / 10000^(2k/(W-2))), cos(...) as in Vaswani et al. `max_len` bounds i
    (it sets the value range of the index columns).
    """

    name = "tw.pos_encoding"
    max_len = prop_def(I64Prop)
    out = result_def(VecType)
    assembly_format = "`max_len` $max_len attr-dict `:` type($out)"
    traits = traits_def(Pure(), TwCanonicalization())

    def __init__(self, width: int, max_len: int):
        _fill(self, result=vec(width), properties={"max_len": int_prop(max_len)})

    def verify_(self) -> None:
        if self.max_len.value.data < 1:
            _fail(self, "max_len must be at least 1")


@irdl_op_definition
class PosTableOp(IRDLOperation):
    """`%p = tw.pos_table table dense<...> : tensor<LxWxf32> : !tw.vec<W>`: a per-position table.

    At position i (0-based) the value is row i of the (L x W) table; L is the longest sequence
    the graph supports (a longer run is refused by the input contract, `twdialect.inputs`).
    Any table: one-hot position indices (an L x L identity), sin/cos with a counter column...
    Positions come from the model itself, so generation needs no host feedback for them.
    """

    name = "tw.pos_table"
    table = prop_def(DenseIntOrFPElementsAttr)
    out = result_def(VecType)
    assembly_format = "`table` $table attr-dict `:` type($out)"
    traits = traits_def(Pure(), TwCanonicalization())

    def __init__(self, table: Weights):
        table = as_dense(table)
        _fill(self, result=vec(shape_of(table)[-1]), properties={"table": table})

    @property
    def max_len(self) -> int:
        """L: the table's rows, the positions it covers."""
        return shape_of(self.table)[0]

    def verify_(self) -> None:
        _check_matrix(self, self.table, "position table", None, width_of(self.out))


# --------------------------------------------------------------------------------------
# Primitives
# --------------------------------------------------------------------------------------


@irdl_op_definition
class LiteralOp(IRDLOperation):
    """`%c = tw.literal dense<[1.0, 2.0]> : tensor<2xf32> : !tw.vec<2>`: a constant row."""

    name = "tw.literal"
    value = prop_def(DenseIntOrFPElementsAttr)
    out = result_def(VecType)
    assembly_format = "$value attr-dict `:` type($out)"
    traits = traits_def(Pure(), TwCanonicalization())

    def __init__(self, value: Weights):
        value = as_dense(value)
        _fill(self, result=vec(shape_of(value)[0]), properties={"value": value})

    def verify_(self) -> None:
        _check_vector(self, self.value, "literal value", width_of(self.out))


@irdl_op_definition
class LinearOp(IRDLOperation):
    """`%y = tw.linear %x weight M (bias b)? : !tw.vec<I> -> !tw.vec<O>`: y = x @ M + b."""

    name = "tw.linear"
    x = operand_def(VecType)
    weight = prop_def(DenseIntOrFPElementsAttr)
    bias = opt_prop_def(DenseIntOrFPElementsAttr)
    out = result_def(VecType)
    assembly_format = "$x `weight` $weight (`bias` $bias^)? attr-dict `:` type($x) `->` type($out)"
    traits = traits_def(Pure(), TwCanonicalization())

    def __init__(self, x: SSAValue, weight: Weights, bias: Weights | None = None):
        props = {"weight": as_dense(weight)}
        _with_optional(props, "bias", bias)
        _fill(self, [x], vec(shape_of(props["weight"])[1]), props)

    def verify_(self) -> None:
        _check_matrix(self, self.weight, "weight", width_of(self.x), width_of(self.out))
        if self.bias is not None:
            _check_vector(self, self.bias, "bias", width_of(self.out))


@irdl_op_definition
class ReluOp(IRDLOperation):
    """`%y = tw.relu %x : !tw.vec<N>`: elementwise max(x, 0)."""

    name = "tw.relu"
    T: ClassVar = VarConstraint("T", base(VecType))
    x = operand_def(T)
    out = result_def(T)
    assembly_format = "$x attr-dict `:` type($out)"
    traits = traits_def(Pure(), TwCanonicalization())

    def __init__(self, x: SSAValue):
        _fill(self, [x], x.type)

    def verify_(self) -> None:
        if self.x.type != self.out.type:
            _fail(self, f"result type {self.out.type} must equal operand type {self.x.type}")


@irdl_op_definition
class AddOp(IRDLOperation):
    """`%s = tw.add %a, %b : !tw.vec<N>`: elementwise sum."""

    name = "tw.add"
    T: ClassVar = VarConstraint("T", base(VecType))
    lhs = operand_def(T)
    rhs = operand_def(T)
    out = result_def(T)
    assembly_format = "$lhs `,` $rhs attr-dict `:` type($out)"
    traits = traits_def(Pure(), TwCanonicalization())

    def __init__(self, lhs: SSAValue, rhs: SSAValue):
        _fill(self, [lhs, rhs], lhs.type)

    def verify_(self) -> None:
        if not (self.lhs.type == self.rhs.type == self.out.type):
            _fail(self, f"operand widths must match the result: {self.lhs.type}, "
                  f"{self.rhs.type} -> {self.out.type}")


@irdl_op_definition
class ConcatOp(IRDLOperation):
    """`%c = tw.concat (%a, %b) : !tw.vec<1>, !tw.vec<2> -> !tw.vec<3>`: free; a view of leaves."""

    name = "tw.concat"
    ins = var_operand_def(VecType)
    out = result_def(VecType)
    assembly_format = "`(` $ins `)` attr-dict `:` type($ins) `->` type($out)"
    traits = traits_def(Pure(), TwCanonicalization())

    def __init__(self, ins: Sequence[SSAValue]):
        ins = list(ins)
        _fill(self, ins, vec(sum(width_of(v) for v in ins)))

    def verify_(self) -> None:
        if not self.ins:
            _fail(self, "concat needs at least one operand")
        total = sum(width_of(v) for v in self.ins)
        if total != width_of(self.out):
            _fail(self, f"operand widths sum to {total} but the result is {width_of(self.out)} wide")


# The mask kinds of `tw.attn`: "causal" (a query at position i sees keys j <= i; the default,
# left out of the IR) or "full" (every query sees every key of the whole sequence: an
# encoder-style, bidirectional head; its output at a position depends on later positions, so
# a graph with one runs on whole sequences only, never step by step).
ATTN_MASKS = ("causal", "full")
CAUSAL, FULL = ATTN_MASKS


class _KindDirective(CustomDirective):
    """`<keyword> <kind>` in an op's custom syntax, nothing for the default kind, so ops of the
    default kind print as before the keyword existed. The kind is a bare word; one that is not
    an identifier prints quoted (the verifier refuses it anyway, and the printed text still
    parses back to the same op). Subclasses name the keyword, the default and the variable."""

    keyword: ClassVar[str]
    default: ClassVar[str]
    kinds: ClassVar[str]  # for the parse error: "causal or full"

    def variable(self) -> AttributeVariable:
        raise NotImplementedError

    def parse(self, parser: Parser, state: ParsingState) -> None:
        if not parser.parse_optional_keyword(self.keyword):
            return
        kind = parser.parse_optional_identifier()
        if kind is None:
            kind = parser.parse_optional_str_literal()
        if kind is None:
            parser.raise_error(f"expected a kind after '{self.keyword}' ({self.kinds})")
        if kind != self.default:  # the default is left out: `<keyword> <default>` reads as none
            self.variable().set(state, StringAttr(kind))

    def print(self, printer: Printer, state: PrintingState, op: IRDLOperation) -> None:
        if not self.is_present(op):
            return
        attr = self.variable().get(op)
        state.print_whitespace(printer)
        printer.print_string(f"{self.keyword} ")
        kind = attr.data if isinstance(attr, StringAttr) else None
        if kind is not None and kind.isidentifier():
            printer.print_string(kind)
        else:
            printer.print_attribute(attr)

    def is_present(self, op: IRDLOperation) -> bool:
        attr = self.variable().get(op)
        return attr is not None and not (isinstance(attr, StringAttr) and attr.data == self.default)

    def is_optional_like(self) -> bool:
        return True


@irdl_custom_directive
class AttnMaskDirective(_KindDirective):
    """`mask full` in `tw.attn`'s custom syntax; nothing for the default (causal)."""

    mask: AttributeVariable
    keyword, default, kinds = "mask", CAUSAL, "causal or full"

    def variable(self) -> AttributeVariable:
        return self.mask


# Rotary position embeddings on `tw.attn` (torchwright 0.2.0's `Attn` exactly, HF LLaMA
# convention): after projection, q_i = q_i Wq and k_j = k_j Wk are rotated by their absolute
# positions i and j over their first `dims` components, rotate_half style: component p and
# p + dims/2 (p < dims/2) form one plane turned by the angle pos * base^(-2p/dims); the last
# d_qk - dims components are left alone. Absent: no rotation. ROPE_BASE is torchwright's
# default base (the LLaMA3 family's).
ROPE_BASE = 500000.0


@irdl_custom_directive
class AttnRopeDirective(CustomDirective):
    """`rope base 5.000000e+05 dims 8` in `tw.attn`'s custom syntax; nothing where the op has
    no rotation. Both properties come together (the verifier refuses one without the other;
    the text still prints what there is, and parses back to the same op)."""

    rope_base: AttributeVariable
    rope_dims: AttributeVariable

    def parse(self, parser: Parser, state: ParsingState) -> None:
        if not parser.parse_optional_keyword("rope"):
            return
        if parser.parse_optional_keyword("base"):
            self.rope_base.set(state, float_prop(parser.parse_float()))
        if parser.parse_optional_keyword("dims"):
            self.rope_dims.set(state, IntegerAttr(parser.parse_integer(), i64))

    def print(self, printer: Printer, state: PrintingState, op: IRDLOperation) -> None:
        base, dims = self.rope_base.get(op), self.rope_dims.get(op)
        if base is None and dims is None:
            return
        state.print_whitespace(printer)
        printer.print_string("rope")
        if base is not None:
            printer.print_string(" base ")
            printer.print_float(base.value.data, f64)
        if dims is not None:
            printer.print_string(f" dims {dims.value.data}")

    def is_present(self, op: IRDLOperation) -> bool:
        return self.rope_base.get(op) is not None or self.rope_dims.get(op) is not None

    def is_optional_like(self) -> bool:
        return True


@irdl_op_definition
class AttnOp(IRDLOperation):
    """One attention head family (no 1/sqrt(d) scaling), causal unless `mask full`.

    `%o = tw.attn %q, %k, %v (mask full)? (rope base B dims R)? wq Wq wk Wk wv Wv wo Wo : !tw.vec<Q>, !tw.vec<K>, !tw.vec<V> -> !tw.vec<O>`
    logits[i, j] = rot_i(q_i Wq) . rot_j(k_j Wk) for j <= i (causal) or every j (full), rot_p
    the rotary position embedding at absolute position p (identity without `rope`, see
    ROPE_BASE); out_i = sum_j softmax_j(logits[i]) (v_j Wv) Wo.
    """

    name = "tw.attn"
    query = operand_def(VecType)
    key = operand_def(VecType)
    value = operand_def(VecType)
    mask = opt_prop_def(StringAttr)  # absent: causal (see ATTN_MASKS)
    rope_base = opt_prop_def(F64Prop)  # absent (with rope_dims): no rotation (see ROPE_BASE)
    rope_dims = opt_prop_def(I64Prop)
    wq = prop_def(DenseIntOrFPElementsAttr)
    wk = prop_def(DenseIntOrFPElementsAttr)
    wv = prop_def(DenseIntOrFPElementsAttr)
    wo = prop_def(DenseIntOrFPElementsAttr)
    out = result_def(VecType)
    assembly_format = (
        "$query `,` $key `,` $value custom<AttnMaskDirective>($mask) "
        "custom<AttnRopeDirective>($rope_base, $rope_dims) `wq` $wq `wk` $wk "
        "`wv` $wv `wo` $wo attr-dict `:` "
        "type($query) `,` type($key) `,` type($value) `->` type($out)"
    )
    custom_directives = (AttnMaskDirective, AttnRopeDirective)
    traits = traits_def(Pure(), TwCanonicalization())

    def __init__(self, query: SSAValue, key: SSAValue, value: SSAValue, wq: Weights, wk: Weights,
                 wv: Weights, wo: Weights, mask: str = CAUSAL, rope_base: float | None = None,
                 rope_dims: int | None = None):
        """`rope_base` / `rope_dims`: rotary position embeddings (both, or neither: none); a
        base alone rotates all d_qk components."""
        if mask not in ATTN_MASKS:
            raise TwAttributeException(f"tw.attn: mask must be one of "
                                       f"{', '.join(map(repr, ATTN_MASKS))}, got {mask!r}")
        props = {"wq": as_dense(wq), "wk": as_dense(wk), "wv": as_dense(wv), "wo": as_dense(wo)}
        if rope_base is not None or rope_dims is not None:
            if rope_base is None:
                raise TwAttributeException("tw.attn: rope_dims without rope_base")
            dims = shape_of(props["wq"])[1] if rope_dims is None else rope_dims
            props = {"rope_base": float_prop(rope_base), "rope_dims": int_prop(dims), **props}
        if mask != CAUSAL:  # the default stays out of the IR (it prints and parses as before)
            props = {"mask": StringAttr(mask), **props}
        _fill(self, [query, key, value], vec(shape_of(props["wo"])[1]), props)

    @property
    def rope(self) -> tuple[float, int] | None:
        """(base, dims) of a rotary op, None without rotation (see ROPE_BASE)."""
        return attn_rope(self)

    @property
    def mask_kind(self) -> str:
        """"causal" or "full" (see ATTN_MASKS); "causal" where the property is absent."""
        m = self.properties.get("mask")
        return CAUSAL if m is None else m.data

    @property
    def is_full(self) -> bool:
        return self.mask_kind == FULL

    def verify_(self) -> None:
        m = self.properties.get("mask")
        if m is not None and (not isinstance(m, StringAttr) or m.data not in ATTN_MASKS):
            got = m.data if isinstance(m, StringAttr) else m
            _fail(self, f"mask must be one of {', '.join(ATTN_MASKS)}, got {got!r}")
        _check_matrix(self, self.wq, "wq", width_of(self.query), None)
        d_qk = shape_of(self.wq)[1]
        _check_matrix(self, self.wk, "wk", width_of(self.key), d_qk)
        _check_matrix(self, self.wv, "wv", width_of(self.value), None)
        _check_matrix(self, self.wo, "wo", shape_of(self.wv)[1], width_of(self.out))
        base, dims = self.properties.get("rope_base"), self.properties.get("rope_dims")
        if (base is None) != (dims is None):
            _fail(self, "rope needs both a base and dims, got only "
                        f"{'dims' if base is None else 'a base'}")
        if base is not None:
            b = _check_scalar(self, base, "rope base")
            if not b > 1:
                _fail(self, f"rope base must exceed 1, got {b}")
            r = dims.value.data
            if r <= 0 or r % 2 or r > d_qk:
                _fail(self, f"rope dims must be even and in (0, d_qk={d_qk}] (rotate_half "
                            f"pairs component p with p + dims/2), got {r}")


def attn_mask(op: Operation) -> str:
    """The mask kind of a `tw.attn` op ("causal" or "full")."""
    m = op.properties.get("mask")
    return CAUSAL if m is None else m.data


def attn_rope(op: Operation) -> tuple[float, int] | None:
    """(base, dims) of a rotary `tw.attn`, None for one without rotation."""
    base, dims = op.properties.get("rope_base"), op.properties.get("rope_dims")
    if base is None or dims is None:
        return None
    return float(base.value.data), int(dims.value.data)


def rope_kwargs(op: Operation) -> dict:
    """AttnOp keyword arguments that keep `op`'s mask and rotation (passes rebuilding it)."""
    rope = attn_rope(op)
    out = {"mask": attn_mask(op)}
    if rope is not None:
        out.update(rope_base=rope[0], rope_dims=rope[1])
    return out


def has_full_attention(graph: GraphOp) -> bool:
    """Whether `graph` holds a `tw.attn` with `mask full` (then it runs on whole sequences:
    no step-by-step generation)."""
    return any(type(op) is AttnOp and "mask" in op.properties and attn_mask(op) == FULL
               for op in graph.block.ops)


# The activations of `tw.mlp`: "relu" (the default, left out of the IR) or "swish" (SiLU:
# z * sigmoid(z)). With an up projection (`up Wu (ub bu)?`) every lane is gated:
# act(x W1 + b1) * (x Wu + bu), the SwiGLU-style lane of Llama-family MLPs.
MLP_ACTIVATIONS = ("relu", "swish")
RELU, SWISH = MLP_ACTIVATIONS


@irdl_custom_directive
class MlpActDirective(_KindDirective):
    """`act swish` in `tw.mlp`'s custom syntax; nothing for the default (relu), so every relu
    mlp prints as before."""

    act: AttributeVariable
    keyword, default, kinds = "act", RELU, "relu or swish"

    def variable(self) -> AttributeVariable:
        return self.act


@irdl_op_definition
class MlpOp(IRDLOperation):
    """`%y = tw.mlp %x (act swish)? w1 W1 (b1 b1)? (up Wu)? (ub bu)? w2 W2 (b2 b2)? : !tw.vec<I> -> !tw.vec<O>`.

    y = lanes W2 + b2, lane_j = act(x W1 + b1)_j * up_j(x): exactly what one MLP sublayer
    computes. act is relu (the default, left out of the IR) or swish (z * sigmoid(z));
    up_j(x) = (x Wu + bu)_j where the op has an up projection (a gated mlp), else 1.
    """

    name = "tw.mlp"
    x = operand_def(VecType)
    act = opt_prop_def(StringAttr)  # absent: relu (see MLP_ACTIVATIONS)
    w1 = prop_def(DenseIntOrFPElementsAttr)
    b1 = opt_prop_def(DenseIntOrFPElementsAttr)
    up = opt_prop_def(DenseIntOrFPElementsAttr)
    ub = opt_prop_def(DenseIntOrFPElementsAttr)
    w2 = prop_def(DenseIntOrFPElementsAttr)
    b2 = opt_prop_def(DenseIntOrFPElementsAttr)
    out = result_def(VecType)
    assembly_format = (
        "$x custom<MlpActDirective>($act) `w1` $w1 (`b1` $b1^)? (`up` $up^)? (`ub` $ub^)? "
        "`w2` $w2 (`b2` $b2^)? attr-dict `:` type($x) `->` type($out)"
    )
    custom_directives = (MlpActDirective,)
    traits = traits_def(Pure(), TwCanonicalization())

    def __init__(self, x: SSAValue, w1: Weights, w2: Weights, *, b1: Weights | None = None,
                 b2: Weights | None = None, activation: str = RELU, up: Weights | None = None,
                 up_bias: Weights | None = None):
        if activation not in MLP_ACTIVATIONS:
            raise TwAttributeException(f"tw.mlp: activation must be one of "
                                       f"{', '.join(map(repr, MLP_ACTIVATIONS))}, "
                                       f"got {activation!r}")
        if up is None and up_bias is not None:
            raise TwAttributeException("tw.mlp: an up bias (ub) needs an up projection (up)")
        props = {} if activation == RELU else {"act": StringAttr(activation)}
        props["w1"] = as_dense(w1)
        _with_optional(props, "b1", b1)
        _with_optional(props, "up", up)
        _with_optional(props, "ub", up_bias)
        props["w2"] = as_dense(w2)
        _with_optional(props, "b2", b2)
        _fill(self, [x], vec(shape_of(props["w2"])[1]), props)

    @property
    def hidden(self) -> int:
        return shape_of(self.w1)[1]

    @property
    def activation(self) -> str:
        """"relu" or "swish" (see MLP_ACTIVATIONS); "relu" where the property is absent."""
        return mlp_activation(self)

    @property
    def is_gated(self) -> bool:
        """Whether every lane is multiplied by its up projection x Wu + bu."""
        return "up" in self.properties

    @property
    def is_plain(self) -> bool:
        """relu(x W1 + b1) W2 + b2: a relu mlp without an up projection."""
        return is_plain_mlp(self)

    def verify_(self) -> None:
        a = self.properties.get("act")
        if a is not None and (not isinstance(a, StringAttr) or a.data not in MLP_ACTIVATIONS):
            got = a.data if isinstance(a, StringAttr) else a
            _fail(self, f"act must be one of {', '.join(MLP_ACTIVATIONS)}, got {got!r}")
        _check_matrix(self, self.w1, "w1", width_of(self.x), None)
        h = shape_of(self.w1)[1]
        if self.b1 is not None:
            _check_vector(self, self.b1, "b1", h)
        if self.up is not None:
            _check_matrix(self, self.up, "up", width_of(self.x), h)
        if self.ub is not None:
            if self.up is None:
                _fail(self, "ub (the up bias) needs an up projection (up)")
            _check_vector(self, self.ub, "ub", h)
        _check_matrix(self, self.w2, "w2", h, width_of(self.out))
        if self.b2 is not None:
            _check_vector(self, self.b2, "b2", width_of(self.out))


def mlp_activation(op: Operation) -> str:
    """The activation of a `tw.mlp` op ("relu" or "swish")."""
    a = op.properties.get("act")
    return RELU if a is None else a.data


def is_plain_mlp(op: Operation) -> bool:
    """A relu `tw.mlp` without an up projection (what every mlp was before activations)."""
    return "up" not in op.properties and mlp_activation(op) == RELU


def mlp_kind(op: Operation) -> tuple[str, bool]:
    """(activation, gated) of a `tw.mlp`: two mlps of one kind compute lanes alike."""
    return mlp_activation(op), "up" in op.properties


def mlp_like(op: MlpOp, x: SSAValue, w1: Weights, w2: Weights, *, b1: Weights | None = None,
             b2: Weights | None = None, up: Weights | None = None,
             up_bias: Weights | None = None) -> MlpOp:
    """A new `tw.mlp` of `op`'s kind (activation; gated where `op` is, and then `up` must be
    given) with the given weights: how a pass rebuilds an mlp without dropping its kind."""
    if op.is_gated and up is None:
        raise ValueError("mlp_like: a gated mlp needs its up projection")
    if not op.is_gated and up is not None:
        raise ValueError("mlp_like: an up projection for an mlp that is not gated")
    return MlpOp(x, w1, w2, b1=b1, b2=b2, activation=mlp_activation(op), up=up, up_bias=up_bias)


@irdl_op_definition
class SliceOp(IRDLOperation):
    """`%s = tw.slice %x[2] : !tw.vec<8> -> !tw.vec<3>`: components start..start+len (free view)."""

    name = "tw.slice"
    x = operand_def(VecType)
    start = prop_def(I64Prop)
    out = result_def(VecType)
    assembly_format = "$x `[` $start `]` attr-dict `:` type($x) `->` type($out)"
    traits = traits_def(Pure(), TwCanonicalization())

    def __init__(self, x: SSAValue, start: int, length: int):
        _fill(self, [x], vec(length), {"start": int_prop(start)})

    def verify_(self) -> None:
        s = self.start.value.data
        if s < 0 or s + width_of(self.out) > width_of(self.x):
            _fail(self, f"slice [{s}, {s + width_of(self.out)}) is outside the "
                  f"{width_of(self.x)}-wide operand")


@irdl_op_definition
class AfterOp(IRDLOperation):
    """`%y = tw.after %x, (%t...) : !tw.vec<N>, ...`: x itself, available only once every %t is.

    An ordering-only edge (free, no value change): `sequential-scope` routes an iteration's
    entry reads through it so the scheduler starts the iteration after an earlier one ends."""

    name = "tw.after"
    T: ClassVar = VarConstraint("T", base(VecType))
    x = operand_def(T)
    deps = var_operand_def(VecType)
    out = result_def(T)
    assembly_format = "$x `,` `(` $deps `)` attr-dict `:` type($out) `,` type($deps)"
    traits = traits_def(Pure(), TwCanonicalization())

    def __init__(self, x: SSAValue, deps: Sequence[SSAValue]):
        _fill(self, [x, *deps], x.type)

    def verify_(self) -> None:
        if not self.deps:
            _fail(self, "tw.after needs at least one dependency")


# --------------------------------------------------------------------------------------
# Library ops (ideal meaning; `decompose` lowers them under twdialect/contracts.py)
# --------------------------------------------------------------------------------------


@irdl_op_definition
class CompareOp(IRDLOperation):
    """`%b = tw.compare %x, 5.0e-01 ramp 1.0e-01 : !tw.vec<N>`: elementwise +1 if x >= t else -1.

    Decomposed as a ramp that is exact outside (t - ramp, t).
    """

    name = "tw.compare"
    T: ClassVar = VarConstraint("T", base(VecType))
    x = operand_def(T)
    threshold = prop_def(F64Prop)
    ramp = prop_def(F64Prop)
    out = result_def(T)
    assembly_format = "$x `,` $threshold `ramp` $ramp attr-dict `:` type($out)"
    traits = traits_def(Pure(), TwCanonicalization())

    def __init__(self, x: SSAValue, threshold: float, ramp: float):
        _fill(self, [x], x.type, {"threshold": float_prop(threshold), "ramp": float_prop(ramp)})

    def verify_(self) -> None:
        if self.x.type != self.out.type:
            _fail(self, f"result type {self.out.type} must equal operand type {self.x.type}")
        _check_scalar(self, self.threshold, "threshold")
        _check_scalar(self, self.ramp, "ramp", positive=True)


@irdl_op_definition
class SelectOp(IRDLOperation):
    """`%r = tw.select %c, %a, %b : !tw.vec<C>, !tw.vec<N>`: a where c > 0, else b.

    c is a +/-1 boolean, one per component (C == N) or one for all (C == 1).
    """

    name = "tw.select"
    T: ClassVar = VarConstraint("T", base(VecType))
    cond = operand_def(VecType)
    if_true = operand_def(T)
    if_false = operand_def(T)
    out = result_def(T)
    assembly_format = "$cond `,` $if_true `,` $if_false attr-dict `:` type($cond) `,` type($out)"
    traits = traits_def(Pure(), TwCanonicalization())

    def __init__(self, cond: SSAValue, if_true: SSAValue, if_false: SSAValue):
        _fill(self, [cond, if_true, if_false], if_true.type)

    def verify_(self) -> None:
        n = width_of(self.out)
        if width_of(self.if_true) != n or width_of(self.if_false) != n:
            _fail(self, f"both branches must be {n} wide, got {width_of(self.if_true)} and "
                  f"{width_of(self.if_false)}")
        if width_of(self.cond) not in (1, n):
            _fail(self, f"condition must be 1 or {n} wide, got {width_of(self.cond)}")


@irdl_op_definition
class ClampOp(IRDLOperation):
    """`%y = tw.clamp %x, lo, hi : !tw.vec<N>`: elementwise min(max(x, lo), hi)."""

    name = "tw.clamp"
    T: ClassVar = VarConstraint("T", base(VecType))
    x = operand_def(T)
    lo = prop_def(F64Prop)
    hi = prop_def(F64Prop)
    out = result_def(T)
    assembly_format = "$x `,` $lo `,` $hi attr-dict `:` type($out)"
    traits = traits_def(Pure(), TwCanonicalization())

    def __init__(self, x: SSAValue, lo: float, hi: float):
        _fill(self, [x], x.type, {"lo": float_prop(lo), "hi": float_prop(hi)})

    def verify_(self) -> None:
        if self.x.type != self.out.type:
            _fail(self, f"result type {self.out.type} must equal operand type {self.x.type}")
        lo, hi = _check_scalar(self, self.lo, "lo"), _check_scalar(self, self.hi, "hi")
        if not lo <= hi:
            _fail(self, f"lo {lo} exceeds hi {hi}")


@irdl_op_definition
class PiecewiseLinearOp(IRDLOperation):
    """`%y = tw.piecewise_linear %x breakpoints B values V : !tw.vec<1> -> !tw.vec<O>`.

    The linear interpolant through (B[k], V[k, :]), constant beyond the first and last
    breakpoint. B is strictly increasing, V has shape (len(B), O).
    """

    name = "tw.piecewise_linear"
    x = operand_def(VecType)
    breakpoints = prop_def(DenseIntOrFPElementsAttr)
    values = prop_def(DenseIntOrFPElementsAttr)
    out = result_def(VecType)
    assembly_format = (
        "$x `breakpoints` $breakpoints `values` $values attr-dict `:` type($x) `->` type($out)"
    )
    traits = traits_def(Pure(), TwCanonicalization())

    def __init__(self, x: SSAValue, breakpoints: Weights, values: Weights):
        props = {"breakpoints": as_dense(breakpoints), "values": as_dense(values)}
        _fill(self, [x], vec(shape_of(props["values"])[1]), props)

    def verify_(self) -> None:
        if width_of(self.x) != 1:
            _fail(self, f"input must be a scalar (!tw.vec<1>), got {self.x.type}")
        bp = _check_dense(self, self.breakpoints, "breakpoints")
        if len(bp) != 1 or bp[0] < 2:
            _fail(self, f"breakpoints must be a vector of at least 2, got shape {list(bp)}")
        _check_increasing(self, self.breakpoints, "breakpoints")
        _check_matrix(self, self.values, "values", bp[0], width_of(self.out))


@irdl_op_definition
class PiecewiseLinear2dOp(IRDLOperation):
    """`%z = tw.piecewise_linear_2d %x, %y xs X ys Y table T : !tw.vec<1>, !tw.vec<1> -> !tw.vec<O>`.

    The interpolant of T (shape (len(X), len(Y), O)) on the grid X x Y, linear on each cell's two
    triangles (cells split along the diagonal from (X[i], Y[j]) to (X[i+1], Y[j+1])), with the
    inputs clamped to the grid.
    """

    name = "tw.piecewise_linear_2d"
    x = operand_def(VecType)
    y = operand_def(VecType)
    xs = prop_def(DenseIntOrFPElementsAttr)
    ys = prop_def(DenseIntOrFPElementsAttr)
    table = prop_def(DenseIntOrFPElementsAttr)
    out = result_def(VecType)
    assembly_format = (
        "$x `,` $y `xs` $xs `ys` $ys `table` $table attr-dict `:` type($x) `,` type($y) "
        "`->` type($out)"
    )
    traits = traits_def(Pure(), TwCanonicalization())

    def __init__(self, x: SSAValue, y: SSAValue, xs: Weights, ys: Weights, table: Weights):
        props = {"xs": as_dense(xs), "ys": as_dense(ys), "table": as_dense(table)}
        _fill(self, [x, y], vec(shape_of(props["table"])[2]), props)

    def verify_(self) -> None:
        for v, nm in ((self.x, "x"), (self.y, "y")):
            if width_of(v) != 1:
                _fail(self, f"input {nm} must be a scalar (!tw.vec<1>), got {v.type}")
        for a, nm in ((self.xs, "xs"), (self.ys, "ys")):
            s = _check_dense(self, a, nm)
            if len(s) != 1 or s[0] < 2:
                _fail(self, f"{nm} must be a vector of at least 2, got shape {list(s)}")
            _check_increasing(self, a, nm)
        want = (shape_of(self.xs)[0], shape_of(self.ys)[0], width_of(self.out))
        if _check_dense(self, self.table, "table") != want:
            _fail(self, f"table must have shape {list(want)}, got {list(shape_of(self.table))}")
        _check_finite(self, self.table, "table")


def _check_increasing(op, attr, name):
    a = to_numpy(attr)
    if not np.all(np.isfinite(a)):
        _fail(op, f"{name} contains a non-finite value")
    if np.any(np.diff(a) <= 0):
        _fail(op, f"{name} must be strictly increasing")


PRIMITIVE_OPS = (LiteralOp, LinearOp, ReluOp, AddOp, ConcatOp, AttnOp, MlpOp)
# Views cost nothing: their columns are their operands' columns.
VIEW_OPS = (ConcatOp, SliceOp, AfterOp)
SOURCE_OPS = (InputOp, EmbeddingOp, PosEncodingOp, PosTableOp)
LIBRARY_OPS = (CompareOp, SelectOp, ClampOp, PiecewiseLinearOp, PiecewiseLinear2dOp)
TW_OPS = (GraphOp, OutputOp) + SOURCE_OPS + PRIMITIVE_OPS + (SliceOp, AfterOp) + LIBRARY_OPS
_INNER_OPS = frozenset(TW_OPS) - {GraphOp}  # exact types: what a graph's block may hold

TW = Dialect("tw", list(TW_OPS), [VecType, RangeAttr])


def float_prop(x: float) -> FloatAttr:
    return FloatAttr(float(x), f64)


@functools.lru_cache(maxsize=4096)
def _int_attr(x: int) -> IntegerAttr:
    return IntegerAttr(x, i64)


def int_prop(x: int) -> IntegerAttr:
    """An i64 property, built once per value (see `vec`)."""
    return _int_attr(int(x))
