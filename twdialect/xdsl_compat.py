"""Every change tw makes to xDSL's own classes, in one table, applied once at `import twdialect`.

tw pins xdsl==0.74.0 and corrects a few of its behaviours in place, so that every way tw reads
or prints IR (`twdialect.parse_module`, `tw-opt`, `tw-stats`, stock `xdsl-opt` with tw's
plugin) behaves alike:

* the lexer and parser fixes of `twdialect/parsing.py` (bounded work on hostile text, located
  messages instead of internal exceptions, non-ASCII names that round-trip);
* `Printer.print_float`: every finite float prints as text that parses back to it;
* `Operation.emit_error`: an error records the op it is about, and a TwError skips the dump of
  the whole module;
* the attribute parser's `base(...)`: memoized (halves the parse time of weight-heavy text).

The patches reach into xDSL's private names, so they hold for one xDSL series only: importing
tw with another version fails at once, naming the pinned one (`XdslVersionError`), instead of
failing later in a patched method. Each patch keeps xDSL's results on input it already handled.
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Callable
from importlib import metadata

from twdialect.errors import TwError

# The xDSL series the patches below are written against (pyproject.toml pins xdsl==0.74.0).
XDSL_SERIES = "0.74"


class XdslVersionError(TwError, ImportError):
    """The installed xDSL is not the series tw's patches were written for."""


def check_xdsl_version(found: str | None = None) -> None:
    """Refuse an xDSL outside XDSL_SERIES (`found`: the installed version by default)."""
    if found is None:
        try:
            found = metadata.version("xdsl")
        except metadata.PackageNotFoundError:
            import xdsl

            found = getattr(xdsl, "__version__", "unknown")
    if found.split("+")[0].split(".")[:2] != XDSL_SERIES.split("."):
        raise XdslVersionError(
            f"tw needs xdsl {XDSL_SERIES}.x (pyproject.toml pins xdsl=={XDSL_SERIES}.0), found "
            f"xdsl {found}: its patches of xDSL's parser, printer and errors "
            "(twdialect/xdsl_compat.py) fit that series only; install it with "
            f"pip install 'xdsl=={XDSL_SERIES}.0'")


# -- the patches that are not about parsing ------------------------------------------------


def _float_literal_that_parses(value: float, digits: int) -> str:
    """`value` with `digits` significant digits, always with a '.' before any exponent."""
    text = f"{value:.{digits}g}"
    mantissa, _, exponent = text.partition("e")
    if "." not in mantissa:
        mantissa += ".0"
    return mantissa + ("e" + exponent if exponent else "")


def _print_floats_that_reparse(original: Callable) -> Callable:
    """xDSL 0.74 prints a finite float whose short forms are not exact and whose `%.9g` (f32)
    or `%.17g` (f64) text has no '.' as its raw bit pattern (`123456789.0` -> `0x4CEB79A3`),
    but its parser reads such a literal inside `dense<[...]>` as the *integer* 0x4CEB79A3, so
    weights like 1234567.0 silently changed on a round trip. Only those values print
    differently (`123456792.0`); everything else is untouched."""
    from xdsl.dialects.builtin import Float32Type, Float64Type

    def print_float(self, value: float, type) -> None:
        if math.isfinite(value) and isinstance(type, (Float32Type, Float64Type)):
            digits = 9 if isinstance(type, Float32Type) else 17
            short = f"{value:.5e}"
            exact_short = type.unpack(type.pack([float(short)]), 1)[0] == value
            if not exact_short and "." not in f"{value:.{digits}g}":
                self.print_string(_float_literal_that_parses(value, digits))
                return
        original(self, value, type)

    return print_float


def _errors_know_their_op(original: Callable) -> Callable:
    """xDSL's `Operation.emit_error` re-raises an error with the whole enclosing module printed
    into a note, and without saying which op it is about.

    Every error passing through it now records that op as `error.op` (the innermost one: the
    pattern driver reports an exception inside a pattern this way), so tools point at its
    source line. A TwError is raised as it is: its message already names and locates its op,
    and a module holding a legal 2^26-element weight took 13 s and gigabytes to print for a
    mismatch elsewhere."""

    def emit_error(self, message: str, underlying_error: Exception):
        if getattr(underlying_error, "op", None) is None:
            with contextlib.suppress(AttributeError):  # an exception type without a __dict__
                underlying_error.op = self
        if isinstance(underlying_error, TwError):
            raise underlying_error
        return original(self, message, underlying_error)

    return emit_error


def _memoized(original: Callable) -> Callable:
    """Every `dense<...>` literal rebuilds the same IRDL constraint through `base(...)`, a pure
    function of its hashable argument: caching it changes no result."""
    return functools.lru_cache(maxsize=None)(original)


def _replaced_by(replacement: Callable) -> Callable[[Callable], Callable]:
    """A patch that replaces xDSL's function outright (rather than wrapping it)."""
    return lambda _original: replacement


# -- the table -----------------------------------------------------------------------------


def patches() -> list[tuple[object, str, Callable[[Callable], Callable]]]:
    """(owner, attribute, patch): `owner.attribute` becomes `patch(original)`."""
    import xdsl.parser.attribute_parser as attribute_parser
    from xdsl.ir import Operation
    from xdsl.parser import Parser
    from xdsl.parser.attribute_parser import AttrParser
    from xdsl.parser.generic_parser import GenericParser
    from xdsl.printer import Printer
    from xdsl.utils import arg_spec
    from xdsl.utils.mlir_lexer import MLIRLexer, StringLiteral

    from twdialect import parsing as p

    return [
        (MLIRLexer, "_lex_string_literal", _replaced_by(p.lex_string_literal)),
        (MLIRLexer, "lex", p.wrap_lex),
        (MLIRLexer, "_lex_prefixed_ident", p.wrap_lex_prefixed_ident),
        (MLIRLexer, "_lex_number", p.wrap_lex_number),
        (StringLiteral, "string_contents", p.wrap_string_contents),
        (GenericParser, "_consume_token", _replaced_by(p.consume_token)),
        (Parser, "_parse_block", p.wrap_parse_block),
        (Parser, "parse_module", p.wrap_parse_top_level),
        (Parser, "parse_module", p.wrap_parse_module),  # outermost: catches the recursion
        (Parser, "parse_optional_operation", p.wrap_parse_optional_operation),
        (AttrParser, "_parse_optional_integer_or_float_type",
         p.wrap_parse_integer_or_float_type),
        (AttrParser, "_parse_optional_complex", _replaced_by(p.parse_optional_complex)),
        (AttrParser._TensorLiteralElement, "to_complex", p.wrap_to_complex),
        (AttrParser, "_parse_dense_literal_type", p.wrap_parse_dense_literal_type),
        (AttrParser, "parse_dense_int_or_fp_elements_attr", p.wrap_parse_dense_elements),
        (AttrParser, "parse_optional_builtin_int_or_float_attr", p.wrap_parse_int_or_float_attr),
        (attribute_parser, "base", _memoized),
        (arg_spec.ArgSpecConvertible, "from_spec", p.wrap_from_spec),
        (arg_spec.PipelineLexer, "_generator", p.wrap_pipeline_lexer),
        (Printer, "print_float", _print_floats_that_reparse),
        (Operation, "emit_error", _errors_know_their_op),
    ]


def install() -> None:
    """Check xDSL's version, then apply every patch of the table (once per process)."""
    import xdsl

    if getattr(xdsl, "_tw_patched", False):
        return
    check_xdsl_version()
    for owner, name, patch in patches():
        setattr(owner, name, patch(getattr(owner, name)))
    xdsl._tw_patched = True
