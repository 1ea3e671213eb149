"""Canonicalization patterns for tw ops (used by upstream `canonicalize`).

`patterns_for(op_class)` returns the patterns rooted at that op class."""

from __future__ import annotations

from xdsl.pattern_rewriter import RewritePattern

# op class -> tuple of RewritePattern instances; filled in as patterns are written.
PATTERNS: dict[type, tuple[RewritePattern, ...]] = {}


def patterns_for(op_class: type) -> tuple[RewritePattern, ...]:
    return PATTERNS.get(op_class, ())
