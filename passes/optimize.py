"""`optimize`: the default pipeline, as one pass.

    DEFAULT_PIPELINE = (DecomposePass(), CanonicalizePass(), FuseLinears(), FormMlps(),
                        FuseLinears(), BalanceSums(), CanonicalizePass(),
                        CommonSubexpressionElimination(), DeadCodeElimination())
    DEFAULT_SPEC = "decompose,canonicalize,fuse-linears,form-mlps,fuse-linears,balance-sums,"
                   "canonicalize,cse,dce"       (its text form, for the command line)

Why this order (measured by `bench/passes_effect.py`; figures in docs/passes.md):
  decompose       the lowering reads primitives only, and the later passes see through the
                  library ops' affine parts only once they are primitives. It fuses select
                  trees first (fuse-select-trees: a chain of k selects is one MLP chain,
                  not k), with the ranges of the graph as written. Skipped when the
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
from xdsl.passes import ModulePass, PassPipeline
from xdsl.transforms.canonicalize import CanonicalizePass
from xdsl.transforms.common_subexpression_elimination import CommonSubexpressionElimination
from xdsl.transforms.dead_code_elimination import DeadCodeElimination

import tw_passes as passes
from tw_passes import PassOptionError, Pipeline, pipeline_passes, pipeline_spec
from tw_passes.balance_sums import BalanceSums
from tw_passes.decompose import DecomposePass
from tw_passes.form_mlps import FormMlps
from tw_passes.fuse_linears import FuseLinears

DEFAULT_PIPELINE: Pipeline = (
    DecomposePass(),
    CanonicalizePass(),
    FuseLinears(),
    FormMlps(),
    FuseLinears(),
    BalanceSums(),
    CanonicalizePass(),
    CommonSubexpressionElimination(),
    DeadCodeElimination(),
)
# Its text form, for the command line and the `pipeline` option below.
DEFAULT_SPEC = pipeline_spec(DEFAULT_PIPELINE)


@dataclass(frozen=True)
class Optimize(ModulePass):
    """Run `pipeline` (default: DEFAULT_PIPELINE), skipping `decompose` when nothing needs it."""

    name = "optimize"

    pipeline: str = DEFAULT_SPEC

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        stages = pipeline_passes(self.pipeline)
        if any(isinstance(p, Optimize) for p in stages):
            raise PassOptionError("optimize: its pipeline must not contain `optimize` itself")
        if not passes.needs_decompose(op):  # the one rule, shared with lowering.prepare
            stages = tuple(p for p in stages if not isinstance(p, DecomposePass))
        PassPipeline(stages).apply(ctx, op)
