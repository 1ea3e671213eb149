"""tw: the IR (types, ops, verifiers), the graph builder, the oracle and analyses."""

from twdialect._version import __version__

# First of all: check xDSL's version and apply tw's patches of it (twdialect/xdsl_compat.py),
# before anything below parses, prints or verifies.
from twdialect.xdsl_compat import install as _install_xdsl_patches

_install_xdsl_patches()

import numpy as _np  # noqa: E402

from twdialect.dialect import TW, GraphOp, VecType, width_of  # noqa: E402
from twdialect.errors import TwError  # noqa: E402
from twdialect.interp import (EvaluationError, evaluate, evaluate_values, find_graph,  # noqa: E402
                              generate)


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


__all__ = ["__version__", "ArgumentError", "TW", "GraphOp", "VecType", "width_of",
           "EvaluationError", "evaluate", "evaluate_values", "find_graph", "generate",
           "make_context", "parse_module", "print_module"]
