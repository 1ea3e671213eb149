"""Canonicalization patterns for tw ops (used by upstream `canonicalize`).

`patterns_for(op_class)` returns the patterns rooted at that op class.

Every pattern strictly shrinks the graph (it replaces its root by an operand, by a literal, or by
one op with fewer operand edges), so no sequence of them can loop:
  identity linear (square identity weight, zero/absent bias)  -> its input
  zero linear (all-zero weight)                               -> literal bias (or zeros)
  linear / relu / mlp / add / concat / slice of literals only  -> literal (constant folding:
                                                                 the oracle's rule for the op)
  add with a zero literal                                      -> the other operand
  concat of a single operand                                   -> that operand
  concat with a concat operand                                 -> flattened concat
  slice of the whole value                                     -> the value
  slice of a slice                                             -> one slice of the source
  slice lying inside one concat operand                        -> slice of that operand
  linear/mlp reading a concat with literal operands           -> reads the rest; the
                                                                 literal rows join the bias
  add(v, v), v read by nothing else, written by a linear / mlp -> that writer, output doubled
  / relu / attn
  embedding / pos_table read only through slices that leave   -> the table of the columns read,
  columns unread                                                 the slices moved onto it
  (a table nothing reads: erased; the one embedding of an input keeps a column)
  linear of a table's columns that only outputs read           -> a table of its rows (an
                                                                 embedding grows the columns)
Literals are folded in float64 by the oracle (`twdialect.interp.evaluate_op`, as xDSL's
constant-fold-interp runs its interpreter) and stored as f32 (the storage type of every dense
attribute). Folded ops keep the root's discardable attributes (annotation, scope tags)."""

from __future__ import annotations

import numpy as np
from xdsl.ir import Operation, SSAValue
from xdsl.rewriter import InsertPoint
from xdsl.pattern_rewriter import PatternRewriter, RewritePattern, op_type_rewrite_pattern

from twdialect.dense import dense, to_numpy
from twdialect.dialect import (
    AddOp,
    AttnOp,
    ConcatOp,
    EmbeddingOp,
    LinearOp,
    LiteralOp,
    MlpOp,
    OutputOp,
    PosTableOp,
    ReluOp,
    SliceOp,
    width_of,
)
from twdialect.interp import evaluate_op
from twdialect.op_sides import concat_like, input_sides, vector_of, with_input_sides


def literal_value(value: SSAValue) -> np.ndarray | None:
    """The constant row of `value` if a `tw.literal` produces it, else None."""
    owner = value.owner
    if isinstance(owner, LiteralOp):
        return to_numpy(owner.value).reshape(-1)
    return None


def make_literal(row: np.ndarray, like: Operation) -> LiteralOp:
    """A literal holding `row`, carrying `like`'s discardable attributes."""
    lit = LiteralOp(np.asarray(row, dtype=np.float64).reshape(-1))
    lit.attributes.update(like.attributes)
    return lit


def _replace_by_value(rewriter: PatternRewriter, op: Operation, value: SSAValue) -> None:
    rewriter.replace(op, [], [value])


class IdentityLinear(RewritePattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: LinearOp, rewriter: PatternRewriter, /):
        n = width_of(op.x)
        if n != width_of(op.out):
            return
        if op.bias is not None and np.any(to_numpy(op.bias) != 0.0):
            return
        if not np.array_equal(to_numpy(op.weight), np.eye(n)):
            return
        _replace_by_value(rewriter, op, op.x)


class LinearOfTable(RewritePattern):
    """linear of a token or position table's columns that only outputs read -> a table of the
    linear's rows.

    A table is looked up at the input, so a linear of one is a table too; left a linear that
    an output reads, it takes a sublayer of its own (a program's output that is a map of its
    tokens, or of positions: a layer for nothing). (A linear that other ops read is left to
    them: most fold it into their weights, and a table's columns would be held in the
    residual from the first layer on, where the linear's are held only from where it runs.)
    Rows are computed by the oracle's rule for the linear (float64, stored f32)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: LinearOp, rewriter: PatternRewriter, /):
        uses = [use.operation for use in op.out.uses]
        if not uses or not all(isinstance(u, OutputOp) for u in uses):
            return
        source, start = op.x.owner, 0
        if isinstance(source, SliceOp):
            source, start = source.x.owner, source.start.value.data
        if not isinstance(source, (EmbeddingOp, PosTableOp)):
            return
        table = to_numpy(source.table, np.float64)
        rows = table[:, start:start + width_of(op.x)]
        folded = evaluate_op(op, [rows], rows.shape[0], {})
        if isinstance(source, PosTableOp):
            new = PosTableOp(folded)
            new.attributes.update(op.attributes)
            rewriter.replace(op, new)
            return
        # an input has one embedding: its table grows the linear's columns, read by a slice
        wider = EmbeddingOp(source.input_name.data, np.hstack([table, folded]))
        wider.attributes.update(source.attributes)
        wider.out.name_hint = source.out.name_hint
        rewriter.insert(wider, InsertPoint.before(source))
        n = width_of(source.out)
        for use in list(source.out.uses):
            reader = use.operation
            if isinstance(reader, SliceOp):
                moved = SliceOp(wider.out, reader.start.value.data, width_of(reader.out))
                moved.attributes.update(reader.attributes)
                rewriter.replace(reader, moved)
            else:  # a reader of the whole table reads its first n columns
                whole = SliceOp(wider.out, 0, n)
                rewriter.insert(whole, InsertPoint.before(reader))
                reader.operands[use.index] = whole.out
        column = SliceOp(wider.out, n, width_of(op.out))
        column.attributes.update(op.attributes)
        rewriter.replace(op, column)
        rewriter.erase(source)


class ZeroLinear(RewritePattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: LinearOp, rewriter: PatternRewriter, /):
        if np.any(to_numpy(op.weight) != 0.0):
            return
        rewriter.replace(op, make_literal(vector_of(op, "bias", width_of(op.out)), op))


# The ops folded when every operand is a literal. Each is position-local (its value at a
# position reads its operands there only), so one row evaluated by the oracle stands for every
# position; attention mixes positions and sources read the run, so neither is ever folded.
# Library ops keep their identity for `decompose`; `tw.after` keeps its ordering edge.
FOLDABLE_OPS = (LinearOp, ReluOp, MlpOp, AddOp, ConcatOp, SliceOp)


class FoldLiteralOperands(RewritePattern):
    """op(literal, ...) -> literal: the oracle's rule for the op run on one position."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter, /):
        if type(op) not in FOLDABLE_OPS:
            return
        rows = [literal_value(v) for v in op.operands]
        if any(row is None for row in rows):
            return
        value = evaluate_op(op, [row[None, :] for row in rows], 1, {})
        rewriter.replace(op, make_literal(value[0], op))


class AddOfZero(RewritePattern):
    """add(x, zeros) / add(zeros, x) -> x."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: AddOp, rewriter: PatternRewriter, /):
        lhs, rhs = literal_value(op.lhs), literal_value(op.rhs)
        if rhs is not None and not np.any(rhs):
            _replace_by_value(rewriter, op, op.lhs)
        elif lhs is not None and not np.any(lhs):
            _replace_by_value(rewriter, op, op.rhs)


# The properties that scale a writer's output: doubling them doubles the result.
_OUTPUT_PROPS = {LinearOp: ("weight", "bias"), MlpOp: ("w2", "b2"), AttnOp: ("wo",)}


class AddOfItself(RewritePattern):
    """add(v, v), where nothing else reads v and v is written by a linear, mlp, relu or attn
    -> that writer with its output doubled (x2 is exact in f32). Two identical single-use
    writers feeding an add accumulate into one block of columns for free; once `cse` merges
    them the add would need a copy and a sublayer, so doubling the writer keeps the depth."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: AddOp, rewriter: PatternRewriter, /):
        v = op.lhs
        if op.rhs is not v or sum(1 for _ in v.uses) != 2:
            return
        owner = v.owner
        if isinstance(owner, ReluOp):
            n = width_of(v)
            new = MlpOp(owner.x, np.eye(n), 2.0 * np.eye(n))
            new.attributes.update(owner.attributes)
        elif type(owner) in _OUTPUT_PROPS:
            new = owner.clone()
            for name in _OUTPUT_PROPS[type(owner)]:
                if name in owner.properties:
                    new.properties[name] = dense(2.0 * to_numpy(owner.properties[name]))
        else:
            return
        new.results[0].name_hint = op.results[0].name_hint  # it stands for the add
        rewriter.replace(op, new)
        rewriter.erase(owner)


class SimplifyConcat(RewritePattern):
    """concat(x) -> x; concat(..., concat(a, b), ...) -> concat(..., a, b, ...)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: ConcatOp, rewriter: PatternRewriter, /):
        ins = list(op.ins)
        if len(ins) == 1:
            _replace_by_value(rewriter, op, ins[0])
            return
        if any(isinstance(v.owner, ConcatOp) for v in ins):
            flat: list[SSAValue] = []
            for v in ins:
                flat.extend(v.owner.ins if isinstance(v.owner, ConcatOp) else [v])
            new = ConcatOp(flat)
            new.attributes.update(op.attributes)
            rewriter.replace(op, new)


class SimplifySlice(RewritePattern):
    """Whole-value slice -> value; slice of slice / of one concat operand -> simpler."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: SliceOp, rewriter: PatternRewriter, /):
        start, length = op.start.value.data, width_of(op.out)
        source = op.x
        if start == 0 and length == width_of(source):
            _replace_by_value(rewriter, op, source)
            return
        inner = source.owner
        if isinstance(inner, SliceOp):
            self._reslice(op, rewriter, inner.x, inner.start.value.data + start)
        elif isinstance(inner, ConcatOp):
            offset = 0
            for v in inner.ins:
                w = width_of(v)
                if offset <= start and start + length <= offset + w:
                    self._reslice(op, rewriter, v, start - offset)
                    return
                offset += w

    @staticmethod
    def _reslice(op: SliceOp, rewriter: PatternRewriter, source: SSAValue, start: int) -> None:
        if start == 0 and width_of(op.out) == width_of(source):
            _replace_by_value(rewriter, op, source)
            return
        new = SliceOp(source, start, width_of(op.out))
        new.attributes.update(op.attributes)
        rewriter.replace(op, new)


class FoldLiteralConcatOperands(RewritePattern):
    """linear/mlp(concat(a, lit, b)) -> linear/mlp(concat(a, b)), lit @ W_lit joining the bias.

    Constant columns cost residual width and head input rows for nothing."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: LinearOp | MlpOp, rewriter: PatternRewriter, /):
        concat = op.x.owner
        if not isinstance(concat, ConcatOp):
            return
        rows_of = [literal_value(v) for v in concat.ins]
        if all(r is None for r in rows_of) or all(r is not None for r in rows_of):
            return  # nothing to fold, or the whole concat folds to a literal first
        kept = [v for v, row in zip(concat.ins, rows_of) if row is None]
        sides = []  # the input side, and a gated mlp's up projection: each folds alike
        for w, b, has_bias in input_sides(op):
            kept_rows: list[np.ndarray] = []
            offset = 0
            for v, row in zip(concat.ins, rows_of):
                n = width_of(v)
                if row is None:
                    kept_rows.append(w[offset:offset + n])
                else:
                    b = b + row @ w[offset:offset + n]
                offset += n
            sides.append((np.vstack(kept_rows), b, has_bias or bool(np.any(b))))
        new_ops, x = concat_like(kept, concat)
        new_ops.append(with_input_sides(op, x, sides))
        rewriter.replace(op, new_ops)


class NarrowTable(RewritePattern):
    """embedding / pos_table whose every reader is a slice, with columns no live slice reads
    -> a table of the columns read; each live slice reads its columns there, dead slices go.

    A source's columns are written at the first position and held in the residual for as long
    as anything reads the source, so a column nobody reads costs width for nothing (a token
    one-hot beside the number column a program actually reads, say)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: EmbeddingOp | PosTableOp, rewriter: PatternRewriter, /):
        slices = [use.operation for use in op.out.uses]
        if not all(isinstance(s, SliceOp) for s in slices) or \
                (not slices and width_of(op.out) == 1 and not _erasable(op)):
            return
        read = np.zeros(width_of(op.out), dtype=bool)
        for s in slices:
            if s.out.uses:
                read[s.start.value.data:s.start.value.data + width_of(s.out)] = True
        if not read.any():
            if _erasable(op):
                for s in slices:
                    rewriter.erase(s)
                rewriter.erase(op)  # (a token table is kept where it alone declares the input)
                return
            read[0] = True  # the input's one table: its narrowest part stays
        if read.all():
            return
        table = to_numpy(op.table)[:, read]
        new = EmbeddingOp(op.input_name.data, table) if isinstance(op, EmbeddingOp) \
            else PosTableOp(table)
        new.attributes.update(op.attributes)
        new.out.name_hint = op.out.name_hint
        rewriter.insert(new, InsertPoint.before(op))
        start_in_new = np.cumsum(read) - 1  # a read column's index in the new table
        for s in slices:
            if not s.out.uses:
                rewriter.erase(s)
                continue
            moved = SliceOp(new.out, int(start_in_new[s.start.value.data]), width_of(s.out))
            moved.attributes.update(s.attributes)
            rewriter.replace(s, moved)
        rewriter.erase(op)


def _erasable(op: EmbeddingOp | PosTableOp) -> bool:
    """Whether a table nothing reads may go: a pos_table, or an embedding whose input another
    embedding of the graph reads too (an input's one embedding declares it)."""
    if isinstance(op, PosTableOp):
        return True
    return any(isinstance(other, EmbeddingOp) and other is not op and
               other.input_name.data == op.input_name.data for other in op.parent_block().ops)


# op class -> tuple of RewritePattern instances, tried in order until one rewrites (a whole-value
# view is dropped before its literal operand would be copied into a new literal).
_FOLD = FoldLiteralOperands()
PATTERNS: dict[type, tuple[RewritePattern, ...]] = {
    LinearOp: (IdentityLinear(), ZeroLinear(), _FOLD, FoldLiteralConcatOperands(),
               LinearOfTable()),
    ReluOp: (_FOLD,),
    MlpOp: (_FOLD, FoldLiteralConcatOperands()),
    AddOp: (_FOLD, AddOfZero(), AddOfItself()),
    ConcatOp: (SimplifyConcat(), _FOLD),
    SliceOp: (SimplifySlice(), _FOLD),
    EmbeddingOp: (NarrowTable(),),
    PosTableOp: (NarrowTable(),),
}


def patterns_for(op_class: type) -> tuple[RewritePattern, ...]:
    return PATTERNS.get(op_class, ())
