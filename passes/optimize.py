"""`optimize`: the default pipeline, as one pass.

    DEFAULT_PIPELINE =
        "decompose,canonicalize,fuse-linears,form-mlps,fuse-linears,balance-sums,canonicalize,cse,dce"

Why this order (measured by `bench/passes_effect.py`; figures in docs/passes.md):
  decompose       the lowering reads primitives only, and the later passes see through the
                  library ops' affine parts only once they are primitives. Skipped when the
                  module holds no library op (it would change nothing).
  canonicalize    folds literals, drops identity linears, flattens nested concats: fusion then
                  sees `linear(concat(...))` directly instead of behind a concat of a concat.
  fuse-linears    composes affine chains (fewer ops, fewer slots on the critical path).
  form-mlps       a relu and the linears around it become one MLP sublayer. After fusion:
                  a linear chain is one linear by then, so splitting a linear over a concat
                  of relu outputs cannot leave an add between two linears fusion would
                  have composed.
  fuse-linears    again: small multi-use linears feeding the new mlps are duplicated into
                  their w1 where that takes a layer off (fanout), and the rest of the affine
                  chains around them fold in.
  balance-sums    reassociates the remaining add chains (after fusion, so that sums already
                  collapsed into one linear are not rebuilt as trees of adds).
  canonicalize    fusion can produce identity/zero linears and literal-fed ops: fold them.
  cse, dce        merge duplicates (after fusion: merging first would give intermediates a
                  second use and block single-use folds) and drop what became dead.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from twdialect.dialect import LIBRARY_OPS

DEFAULT_PIPELINE = (
    "decompose,canonicalize,fuse-linears,form-mlps,fuse-linears,balance-sums,canonicalize,cse,dce"
)


def has_library_ops(module: ModuleOp) -> bool:
    return any(isinstance(op, LIBRARY_OPS) for op in module.walk())


def pipeline_stages(spec: str) -> list[str]:
    """Split a pipeline string on its top-level commas (options in braces stay attached)."""
    stages, depth, cur = [], 0, []
    for ch in spec:
        if ch == "," and depth == 0:
            stages.append("".join(cur).strip())
            cur = []
            continue
        depth += ch == "{"
        depth -= ch == "}"
        cur.append(ch)
    if "".join(cur).strip():
        stages.append("".join(cur).strip())
    return [s for s in stages if s]


@dataclass(frozen=True)
class Optimize(ModulePass):
    """Run `pipeline` (default: DEFAULT_PIPELINE), skipping `decompose` when nothing needs it."""

    name = "optimize"

    pipeline: str = DEFAULT_PIPELINE

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        from passes import PassOptionError, parse_pipeline

        stages = pipeline_stages(self.pipeline)
        if "optimize" in (s.split("{")[0].strip() for s in stages):
            raise PassOptionError("optimize: its pipeline must not contain `optimize` itself")
        if not has_library_ops(op):
            stages = [s for s in stages if s.split("{")[0].strip() != "decompose"]
        if stages:
            parse_pipeline(",".join(stages)).apply(ctx, op)
