"""tw: the IR (types, ops, verifiers), the graph builder, the oracle and analyses."""

import functools as _functools

import xdsl.parser.attribute_parser as _attribute_parser

from twdialect.dialect import TW, GraphOp, VecType, width_of
from twdialect.interp import EvaluationError, evaluate, evaluate_values, find_graph, generate


def _cache_dense_literal_constraint() -> None:
    """Memoize `base(...)` as seen by xDSL's attribute parser.

    Every `dense<...>` literal rebuilds the same IRDL constraint through `base(...)`; caching it
    roughly halves parse time for weight-heavy text and changes no output (the constraint is a
    pure function of its hashable argument). Applied once, at import, for every parser user."""
    current = _attribute_parser.base
    if not hasattr(current, "cache_info"):
        _attribute_parser.base = _functools.lru_cache(maxsize=None)(current)


_cache_dense_literal_constraint()


def make_context(allow_unregistered: bool = False):
    """An xDSL context with builtin and tw loaded (what parsing tw text needs)."""
    from xdsl.context import Context
    from xdsl.dialects.builtin import Builtin

    ctx = Context(allow_unregistered=allow_unregistered)
    ctx.load_dialect(Builtin)
    ctx.load_dialect(TW)
    return ctx


def parse_module(text: str):
    """Parse tw text into a verified ModuleOp."""
    from xdsl.parser import Parser

    module = Parser(make_context(), text).parse_module()
    module.verify()
    return module


def print_module(module, generic: bool = False) -> str:
    import io

    from xdsl.printer import Printer

    s = io.StringIO()
    Printer(s, print_generic_format=generic).print_op(module)
    return s.getvalue() + "\n"


__all__ = ["TW", "GraphOp", "VecType", "width_of", "EvaluationError", "evaluate",
           "evaluate_values", "find_graph", "generate", "make_context", "parse_module", "print_module"]
