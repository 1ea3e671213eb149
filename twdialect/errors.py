"""The one base class of every error tw raises on purpose.

A `TwError` is a user-facing failure: its message says what is wrong (naming the op, input or
option concerned) and, where it can, what would work. Tools print it as one line and exit 1
(tools/cli.py; the tools' own errors, `ToolError`, derive from it too); any other exception
escaping tw is a bug (the fuzz tests count it as a crash). `op`, when set, is the operation the
error is about, so tools can point at its source line: `TwError(message, op)` is enough, a
subclass needs no `__init__` of its own for it."""

from __future__ import annotations


class TwError(ValueError):
    """A failure tw raises on purpose, with a message for the user (see the module docstring)."""

    def __init__(self, message: str = "", op=None):
        super().__init__(message)
        if op is not None or not hasattr(self, "op"):
            self.op = op


def shortened(text: str, limit: int = 60) -> str:
    """`text` on one line (whitespace collapsed), cut to `limit` characters: how a message
    names what it was given without echoing a large object or a hand-edited file."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."
