"""tw: the IR (types, ops, verifiers), the graph builder, the oracle and analyses."""

import functools as _functools
import math as _math

import numpy as _np

import xdsl.parser.attribute_parser as _attribute_parser
from xdsl.dialects.builtin import Float32Type as _Float32Type
from xdsl.dialects.builtin import Float64Type as _Float64Type
from xdsl.printer import Printer as _Printer

from twdialect.dialect import TW, GraphOp, VecType, width_of
from twdialect.errors import TwError
from twdialect.interp import EvaluationError, evaluate, evaluate_values, find_graph, generate
from twdialect.parsing import install as _install_parsing_fixes

# xDSL's lexer hangs on an unterminated string and its parser has cryptic or unbounded failure
# modes; one compatibility layer fixes them for every parse entry point (twdialect/parsing.py).
_install_parsing_fixes()


def _cache_dense_literal_constraint() -> None:
    """Memoize `base(...)` as seen by xDSL's attribute parser.

    Every `dense<...>` literal rebuilds the same IRDL constraint through `base(...)`; caching it
    roughly halves parse time for weight-heavy text and changes no output (the constraint is a
    pure function of its hashable argument). Applied once, at import, for every parser user."""
    current = _attribute_parser.base
    if not hasattr(current, "cache_info"):
        _attribute_parser.base = _functools.lru_cache(maxsize=None)(current)


_cache_dense_literal_constraint()


def _float_literal_that_parses(value: float, digits: int) -> str:
    """`value` with `digits` significant digits, always with a '.' before any exponent."""
    text = f"{value:.{digits}g}"
    mantissa, _, exponent = text.partition("e")
    if "." not in mantissa:
        mantissa += ".0"
    return mantissa + ("e" + exponent if exponent else "")


def _print_floats_that_reparse() -> None:
    """Make xDSL print every finite f32/f64 as a decimal that parses back to the same value.

    xDSL 0.74 prints a finite float whose short forms are not exact and whose `%.9g` (f32) or
    `%.17g` (f64) text has no '.' as its raw bit pattern (`123456789.0` -> `0x4CEB79A3`), but
    its parser reads such a literal inside `dense<[...]>` as the *integer* 0x4CEB79A3, so
    weights like 1234567.0 silently changed on a round trip. Only those values print
    differently (`123456792.0`); everything else is untouched."""
    original = _Printer.print_float
    if getattr(original, "_tw_reparsable", False):
        return

    def print_float(self, value: float, type) -> None:
        if _math.isfinite(value) and isinstance(type, (_Float32Type, _Float64Type)):
            digits = 9 if isinstance(type, _Float32Type) else 17
            short = f"{value:.5e}"
            exact_short = type.unpack(type.pack([float(short)]), 1)[0] == value
            if not exact_short and "." not in f"{value:.{digits}g}":
                self.print_string(_float_literal_that_parses(value, digits))
                return
        original(self, value, type)

    print_float._tw_reparsable = True
    _Printer.print_float = print_float


_print_floats_that_reparse()


def _tw_errors_skip_the_module_dump() -> None:
    """xDSL's `Operation.emit_error` prints the whole enclosing module into a failing
    verifier's message. tw's verifier errors already name and locate their op (one line), and
    a module holding a legal 2^26-element weight took 13 s and gigabytes to print for a
    mismatch elsewhere: a TwError is raised as it is."""
    from xdsl.ir import Operation

    original = Operation.emit_error
    if getattr(original, "_tw_no_dump", False):
        return

    def emit_error(self, message: str, underlying_error: Exception):
        if isinstance(underlying_error, TwError):
            if getattr(underlying_error, "op", None) is None:
                underlying_error.op = self
            raise underlying_error
        return original(self, message, underlying_error)

    emit_error._tw_no_dump = True
    Operation.emit_error = emit_error


_tw_errors_skip_the_module_dump()


def make_context(allow_unregistered: bool = False):
    """An xDSL context with builtin and tw loaded (what parsing tw text needs)."""
    from xdsl.context import Context
    from xdsl.dialects.builtin import Builtin

    ctx = Context(allow_unregistered=allow_unregistered)
    ctx.load_dialect(Builtin)
    ctx.load_dialect(TW)
    return ctx


class ArgumentError(TwError):
    """A public tw function got an argument of the wrong kind (None or bytes for IR text, a
    number for a module); the message names the function and the argument."""


def parse_module(text: str):
    """Parse tw text into a verified ModuleOp.

    Bad text is an xDSL ParseError (located, one clear message: see twdialect/parsing.py) or a
    verifier error; an argument that is not a str is an ArgumentError."""
    from xdsl.parser import Parser

    if not isinstance(text, str):
        hint = " (decode bytes first: data.decode('utf-8'))" if isinstance(
            text, (bytes, bytearray, memoryview)) else ""
        raise ArgumentError(f"parse_module: text must be a str of tw IR, got "
                            f"{type(text).__name__}{hint}")
    module = Parser(make_context(), text).parse_module()
    module.verify()
    return module


def print_module(module, generic: bool = False) -> str:
    """The text of `module` (any xDSL operation: a ModuleOp, a tw.graph...), which
    `parse_module` reads back; `generic` prints xDSL's generic op form."""
    import io

    from xdsl.ir import Operation
    from xdsl.printer import Printer

    if not isinstance(module, Operation):
        raise ArgumentError(f"print_module: module must be an xDSL operation such as a "
                            f"ModuleOp, got {type(module).__name__}")
    if not isinstance(generic, (bool, _np.bool_)):
        raise ArgumentError(f"print_module: generic must be True or False, got {generic!r}")
    s = io.StringIO()
    try:
        Printer(s, print_generic_format=generic).print_op(module)
    except UnicodeEncodeError as e:  # a str attribute built outside tw.ops' name checks
        bad = e.object[e.start:e.end] if isinstance(e.object, str) else ""
        code = f"U+{ord(bad[0]):04X}, " if bad else ""
        raise ArgumentError(f"print_module: the module holds a string with {code}a lone "
                            "surrogate, which UTF-8 cannot encode (build names from valid "
                            "text)") from None
    return s.getvalue() + "\n"


__all__ = ["ArgumentError", "TW", "GraphOp", "VecType", "width_of", "EvaluationError", "evaluate",
           "evaluate_values", "find_graph", "generate", "make_context", "parse_module", "print_module"]
