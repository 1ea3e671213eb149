"""`form-mlps`: turn a `tw.relu` and the linears around it into MLP sublayers (one atomic rule).

A graph written node by node expresses an MLP as a sandwich `linear -> relu -> linear`. Lowered
op by op, the relu is one MLP sublayer and each linear a head (or bypass neurons) in a sublayer
of its own; as one `tw.mlp` (relu(x W1 + b1) W2 + b2) the sandwich is a single MLP sublayer.
For every `tw.relu` (and, for its output side, every `tw.mlp`: a swish or gated mlp keeps its
activation and up projection, and a relu never becomes gated or swish) in block order:

  W1 side (relus only)  relu(linear(x, A, a))              -> mlp(x) with w1 = A, b1 = a (a
                                                               linear read by others too is
                                                               copied when small and the relu
                                                               then runs earlier, as
                                                               fuse-linears' fanout does)
                        relu(concat(p, linear(u, A, a), q)) -> the concat operand's block of w1
                                                               (fuse-linears' concat fold)
  W2 side               linear(r, B, b) for r the relu/mlp output -> a block w2 @ B of w2
                        linear(concat(p, r, q), B, b)       -> split: the rows of B for r become
                                                               a block of w2 (b2 takes b), the
                                                               rest is linear(concat(p, q)) and
                                                               an add joins them (free when both
                                                               addends are single-use writers)
                        any other reader of r               -> an identity block (w2 itself)

A relu is rewritten only when some linear is absorbed (otherwise it already is the MLP sublayer
it stands for). A linear whose only reader is a relu or an mlp (directly or through a concat
only that reader reads) is left to that reader's W1 side (absorbed there it costs nothing;
through a concat, absorbed here it would need an add), unless it reads the value directly and
narrows it: then this w2 takes it and fewer residual columns carry the value.

Fanout (`fanout=true`, default): with several output blocks, one MLP gets the wide w2 = [block
| block | ...] and each reader becomes a free `tw.slice` of it (the hidden neurons are paid
once). A reader whose result must be a writer's own output to stay free (the addend of an add:
a slice cannot accumulate into the add's columns) gets its own copy of the hidden layer
instead, when the copied w1/b1 has at most `max-duplicate-params` parameters. With
`fanout=false` only a value read once is absorbed.

Parameters: a relu of width h counts as the MLP it is (w1 = w2 = I_h, 2h^2 parameters), so
absorbing a linear into a relu never inflates. For an existing mlp (h hidden, o outputs) the
blocks are dropped, worst first (their readers stay plain readers), until the new w2 has no
more parameters than the old w2 plus the absorbed readers, unless `allow-inflate=true`.

Never absorbed: a linear with other `tw.scope`/`tw.iteration` tags than the relu/mlp, any
reader of a relu/mlp marked `tw.scope_terminal`, a reader marked `tw.scope_terminal` unless it
is the only block (then the MLP takes its place and attributes, as fuse-linears does).

The MLP keeps the relu's (or mlp's) place and attributes; slices follow it; a split reader's
rest linear and add take the reader's place. Products in float64, stored f32; a rewrite whose
stored products would move an output beyond the tolerance of `twdialect/rounding.py` is left
undone (that can only happen on an existing mlp's w2: a relu's blocks are copies). Cost: one sweep
over the block plus one critical-path analysis; each rewrite touches the op, its producer
and its readers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from xdsl.context import Context
from xdsl.ir import Operation, SSAValue

from tw_passes.fuse_linears import (
    discard,
    fold_concat_operands,
    op_params,
    same_schedule_tags,
)
from tw_passes.graph_pass import GraphPass
from twdialect.analysis import MLP, critical_path, next_slot
from twdialect.rounding import FoldCheck
from twdialect.rounding import mark_addend
from twdialect.rounding import record as record_rounding
from twdialect.dense import to_numpy
from twdialect.op_sides import concat_like, input_side
from twdialect.dialect import (
    SCOPE_TERMINAL,
    AddOp,
    ConcatOp,
    GraphOp,
    LinearOp,
    MlpOp,
    mlp_like,
    ReluOp,
    SliceOp,
    width_of,
)

DIRECT, LINEAR, SPLIT = "direct", "linear", "split"


@dataclass
class FormStats:
    formed: int = 0  # relus that became mlps
    absorbed: int = 0  # linears folded into a w1 or w2
    split: int = 0  # linears over a concat split into an mlp block + a rest linear
    duplicated: int = 0  # extra copies of a hidden layer
    sliced: int = 0  # readers that became slices of a wide w2
    refused_inflate: int = 0
    skipped_precision: int = 0  # rewrites whose float32 products would move an output


@dataclass
class _Block:
    """One output block of the formed MLP's w2."""

    kind: str
    reader: Operation | None  # the linear this block replaces (None: direct readers)
    w: np.ndarray
    b: np.ndarray
    has_bias: bool
    concat: ConcatOp | None = None  # SPLIT: the concat the reader read
    writer: bool = False  # stays free only as a writer's own output
    params: int = 0  # parameters of the reader (rows) this block replaces
    value: SSAValue | None = field(default=None)  # the block's result once built
    gain: np.ndarray | None = None  # block = old output @ gain + gain_bias (None: identity)
    gain_bias: np.ndarray | None = None


def _readers(value: SSAValue) -> list[Operation]:
    """Ops reading `value`, each once, oldest use first (new uses are prepended to the use
    list, so this is block order for a parsed or built graph; deterministic either way)."""
    seen: set[int] = set()
    out = []
    for use in reversed(list(value.uses)):
        if id(use.operation) not in seen:
            seen.add(id(use.operation))
            out.append(use.operation)
    return out


def _sole_reader(value: SSAValue) -> Operation | None:
    use = value.first_use
    if use is None or not value.has_one_use():
        return None
    return use.operation


def _feeds_w1(linear: LinearOp) -> bool:
    """Is `linear` better absorbed by its reader's W1 side (its only reader is a relu or an mlp,
    directly or through a concat only that op reads)?"""
    reader = _sole_reader(linear.out)
    if isinstance(reader, ConcatOp):
        reader = _sole_reader(reader.out)
    return isinstance(reader, (ReluOp, MlpOp))


def _narrows(linear: LinearOp) -> bool:
    return width_of(linear.out) < width_of(linear.x)


def _is_addend(value: SSAValue) -> bool:
    reader = _sole_reader(value)
    return isinstance(reader, AddOp) and reader.lhs is not reader.rhs


@dataclass(frozen=True)
class FormMlps(GraphPass):
    """Fold the linears around each `tw.relu` (and after each `tw.mlp`) into MLP sublayers."""

    name = "form-mlps"

    fanout: bool = True
    """Absorb the readers of a value read several times (one wide w2, readers become slices)."""

    max_duplicate_params: int = 64
    """The largest w1 + b1 (in parameters) copied for a reader that must stay a writer."""

    allow_inflate: bool = False
    """Absorb into an existing mlp's w2 even when the block has more parameters than the reader."""

    def run_on_graph(self, ctx: Context, graph: GraphOp) -> FormStats:
        return _Former(self, graph).run()


class _Former:
    """One run of the pass over one graph: the options, the floor estimate, the counters."""

    def __init__(self, options: FormMlps, graph: GraphOp):
        self.fanout = options.fanout
        self.max_duplicate_params = options.max_duplicate_params
        self.allow_inflate = options.allow_inflate
        self.graph = graph
        self.stats = FormStats()
        # One critical-path analysis per run (as fuse-linears' fanout): ops made by the
        # sweep get an estimate, ops it cannot estimate are left alone.
        floor = critical_path(graph)
        self._slots, self._ready = dict(floor.slots), dict(floor.ready)
        self.check = FoldCheck(graph)  # products stored as float32 must keep the meaning

    def run(self) -> FormStats:
        work = [op for op in self.graph.block.ops if isinstance(op, (ReluOp, MlpOp))]
        for op in work:
            # A formed MLP is visited again: absorbing a reader can expose the next one
            # (relu -> linear -> concat -> linear).
            while op is not None and op.parent is not None:
                op = self._form(op, self.stats)
        return self.stats

    # -- one rewrite: returns the new main MLP, or None when nothing changed
    def _form(self, op: ReluOp | MlpOp, stats: FormStats) -> MlpOp | None:
        is_relu = isinstance(op, ReluOp)
        self._like = None if is_relu or op.is_plain else op  # a swish / gated mlp keeps its kind
        value = op.out
        if is_relu:
            h = width_of(value)
            x, w1, b1, has_b1 = op.x, np.eye(h), np.zeros(h), False
            w2, b2, has_b2 = np.eye(h), np.zeros(h), False
        else:
            x = op.x
            w1, b1, has_b1 = input_side(op)
            w2 = to_numpy(op.w2)
            has_b2 = op.b2 is not None
            b2 = to_numpy(op.b2).reshape(-1) if has_b2 else np.zeros(w2.shape[1])

        # W1 side (relus only; fuse-linears folds linears into existing mlps).
        w1_dead: list[Operation] = []
        new_concat: ConcatOp | None = None
        copied_w1 = False
        if is_relu:
            producer = x.owner
            if isinstance(producer, LinearOp) and x.has_one_use() \
                    and same_schedule_tags(producer, op):
                a, a_bias, a_has = input_side(producer)
                x, w1, b1, has_b1 = producer.x, a, a_bias, a_has
                w1_dead.append(producer)
            elif isinstance(producer, LinearOp) and self._copy_pays(producer, op):
                a, a_bias, a_has = input_side(producer)  # a copy: the others keep reading it
                x, w1, b1, has_b1 = producer.x, a, a_bias, a_has
                copied_w1 = True
            elif isinstance(producer, ConcatOp) and x.has_one_use():
                folded = self._fold_w1_concat(op, producer)
                if folded is not None:
                    new_concat, w1, b1, has_b1, inners = folded
                    x = new_concat.out
                    w1_dead += [producer] + inners

        blocks = self._blocks(op, value, w2, b2, has_b2, stats)
        absorbed = [b for b in blocks if b.kind != DIRECT]
        if not absorbed and not w1_dead and not copied_w1:
            if new_concat is not None:
                discard(new_concat)
            return None

        self._assign_copies(blocks, w1, b1, has_b1, stats)
        main = [b for b in blocks if not b.writer]
        copies = [b for b in blocks if b.writer]
        if not main:  # every block wants to be a writer: the first one is the main MLP
            main, copies = [copies[0]], copies[1:]

        block = op.parent_block()
        new_ops: list[Operation] = [] if new_concat is None else [new_concat]
        sole = main[0] if len(main) == 1 else None
        attrs_from = sole.reader if sole is not None and sole.kind == LINEAR else op
        old = None if is_relu else (w2, b2 if has_b2 else None)  # what an mlp computed before
        main_mlp = self._mlp(x, w1, b1, has_b1, main, attrs_from, old)
        new_ops.append(main_mlp)
        for b in copies:
            copy = self._mlp(x, w1, b1, has_b1, [b], b.reader if b.kind == LINEAR else op, old)
            new_ops.append(copy)
        if not all(self.check.precise(m) for m in new_ops if isinstance(m, MlpOp)):
            stats.skipped_precision += 1
            discard(*reversed(new_ops))
            return None
        for b, copy in zip(copies, new_ops[-len(copies):] if copies else []):
            b.value = copy.out
            stats.duplicated += 1
        for op_new in new_ops:
            block.insert_op_before(op_new, op)
        if sole is not None:
            sole.value = main_mlp.out
        else:
            anchor = op
            start = 0
            for b in main:
                n = b.w.shape[1]
                sl = SliceOp(main_mlp.out, start, n)
                block.insert_op_before(sl, anchor)
                b.value = sl.out
                start += n
                stats.sliced += b.kind != DIRECT

        # Reroute readers, then erase what died (users before producers).
        # Direct readers last: a split still finds `value` among its concat's operands.
        for b in blocks:
            if b.kind == LINEAR:
                b.reader.out.replace_all_uses_with(b.value)
                block.erase_op(b.reader)
            elif b.kind == SPLIT:
                self._finish_split(b, value)
        for b in blocks:
            if b.kind == DIRECT:
                value.replace_all_uses_with(b.value)
        block.erase_op(op)
        for dead in w1_dead:
            block.erase_op(dead)
        stats.formed += is_relu
        stats.duplicated += copied_w1
        if op in self._slots:  # the new MLP runs no later than the op it replaces
            slot = self._slots[op]
            if x in self._ready:
                slot = min(slot, next_slot(self._ready[x], MLP))
            self._slots[main_mlp] = slot
            self._ready[main_mlp.out] = slot
        stats.absorbed += len(w1_dead) - (new_concat is not None) + sum(
            b.kind == LINEAR for b in blocks)
        stats.split += sum(b.kind == SPLIT for b in blocks)
        return main_mlp

    def _copy_pays(self, producer: LinearOp, relu: ReluOp) -> bool:
        """Copy a small linear that other ops read too into this relu's w1 when the relu then
        runs in an earlier slot (fuse-linears' fanout rule: it cannot see a relu)."""
        if not self.fanout or op_params(producer) > self.max_duplicate_params \
                or not same_schedule_tags(producer, relu):
            return False
        if relu not in self._slots or producer.x not in self._ready:
            return False  # made by this sweep: no floor estimate, leave it
        return next_slot(self._ready[producer.x], MLP) < self._slots[relu]

    def _fold_w1_concat(self, relu: ReluOp, concat: ConcatOp):
        """relu(concat(.., linear(u), ..)) through fuse-linears' concat fold on the identity
        MLP the relu is. Returns (new concat, w1, b1, has_b1, folded linears) or None."""
        h = width_of(relu.out)
        base = MlpOp(concat.out, np.eye(h), np.eye(h))
        base.attributes.update(relu.attributes)

        def absorb(v: SSAValue) -> bool:
            # The identity w1 has width(v) rows per operand, so the fold never inflates.
            return v.has_one_use() and isinstance(v.owner, LinearOp) \
                and same_schedule_tags(v.owner, relu)

        inners = [v.owner for v in concat.ins if isinstance(v.owner, LinearOp) and absorb(v)]
        result = fold_concat_operands(base, absorb)
        if result is None:
            discard(base)
            return None
        new, new_concat = result
        w1, b1, has_b1 = input_side(new)
        discard(new, base)
        return new_concat, w1, b1, has_b1, inners

    def _blocks(self, op, value: SSAValue, w2, b2, has_b2, stats: FormStats) -> list[_Block]:
        """The output blocks: absorbed readers (linear, split) and one identity block for the
        direct readers, if any."""
        readers = _readers(value)
        terminal = SCOPE_TERMINAL in op.attributes
        several = len(readers) > 1
        if several and not self.fanout:
            readers = []
        blocks: list[_Block] = []
        direct = False
        for r in readers:
            blk = None
            if not terminal:
                if isinstance(r, LinearOp) and not (_feeds_w1(r) and not _narrows(r)) \
                        and same_schedule_tags(op, r) \
                        and not (several and SCOPE_TERMINAL in r.attributes):
                    m, m_bias, m_has = input_side(r)
                    blk = _Block(LINEAR, r, w2 @ m, b2 @ m + m_bias, has_b2 or m_has,
                                 writer=_is_addend(r.out), params=op_params(r),
                                 gain=m, gain_bias=m_bias)
                elif isinstance(r, ConcatOp):
                    blk = self._split_block(op, value, r, w2, b2, has_b2, stats)
            if blk is None:
                direct = True
            else:
                blocks.append(blk)
        if not self.allow_inflate:
            direct = self._drop_inflating(blocks, w2, direct, stats)
        if direct or not readers:
            blocks.insert(0, _Block(DIRECT, None, w2, b2, has_b2))
        return blocks

    @staticmethod
    def _drop_inflating(blocks: list[_Block], w2: np.ndarray, direct: bool, stats) -> bool:
        """Drop absorbed blocks (their readers stay plain readers) until the new w2 has no
        more parameters than the old w2 and the absorbed readers: the old w2 goes away unless
        a direct reader keeps it. A relu's w2 is I_h, so absorbing into a relu always fits.
        Returns whether a direct block is needed."""
        h, o = w2.shape
        while blocks:
            new = h * (sum(b.w.shape[1] for b in blocks) + (o if direct else 0))
            old = h * o + sum(b.params for b in blocks)
            if new <= old:
                break
            worst = max(blocks, key=lambda b: b.w.size - b.params)
            blocks.remove(worst)
            stats.refused_inflate += 1
            direct = True
        return direct

    def _split_block(self, op, value, concat: ConcatOp, w2, b2, has_b2, stats):
        user = _sole_reader(concat.out)
        if not isinstance(user, LinearOp) or _feeds_w1(user) \
                or sum(1 for v in concat.ins if v is value) != 1 \
                or not same_schedule_tags(op, user) or SCOPE_TERMINAL in user.attributes:
            return None
        m, m_bias, m_has = input_side(user)
        offset = 0
        for v in concat.ins:
            if v is value:
                break
            offset += width_of(v)
        rows = m[offset:offset + width_of(value)]
        return _Block(SPLIT, user, w2 @ rows, b2 @ rows + m_bias, has_b2 or m_has,
                      concat=concat, writer=len(concat.ins) > 1,
                      params=rows.size + (m.shape[1] if m_has else 0),
                      gain=rows, gain_bias=m_bias)

    def _assign_copies(self, blocks: list[_Block], w1, b1, has_b1, stats) -> None:
        """Keep `writer` only on blocks that get their own copy of the hidden layer."""
        copy_params = w1.size + (b1.size if has_b1 else 0)
        allowed = self.fanout and copy_params <= self.max_duplicate_params
        if len(blocks) == 1:
            blocks[0].writer = False
            return
        for b in blocks:
            if b.writer and not allowed:
                b.writer = False

    def _mlp(self, x: SSAValue, w1, b1, has_b1, blocks: list[_Block], attrs_from,
             old=None) -> MlpOp:
        w2 = np.hstack([b.w for b in blocks])
        b2 = np.concatenate([b.b for b in blocks]) if any(b.has_bias for b in blocks) else None
        like = getattr(self, "_like", None)
        if like is not None:  # output side only (W1 is a swish / gated mlp's own): same kind
            new = mlp_like(like, x, w1, w2, b1=b1 if has_b1 else None, b2=b2, up=like.up,
                           up_bias=like.ub)
        else:
            new = MlpOp(x, w1, w2, b1=b1 if has_b1 else None, b2=b2)
        new.attributes.update(attrs_from.attributes)
        record_rounding(new, "in", w1, b1 if has_b1 else None)
        before = None
        if old is not None:  # an existing mlp's w2 took readers: for the 2^24 check
            o = old[0].shape[1]
            gain = np.hstack([np.eye(o) if b.gain is None else b.gain for b in blocks])
            gain_bias = np.concatenate([np.zeros(o) if b.gain is None else b.gain_bias
                                        for b in blocks])
            before = (old[0], old[1], gain, gain_bias)
        record_rounding(new, "out", w2, b2, before=before)
        for b in blocks:  # a block that takes an addend's place joins its add's dot product
            mark_addend(new, b.reader.out if b.kind == LINEAR else None)
            if b.kind == SPLIT and len(b.concat.ins) > 1:  # it becomes an addend itself
                mark_addend(new, b.reader.out, always=True)
        return new

    def _finish_split(self, b: _Block, value: SSAValue) -> None:
        """reader(concat(p, value, q)) -> add(block, linear(concat(p, q))) at the reader."""
        reader, concat = b.reader, b.concat
        block = reader.parent_block()
        m = input_side(reader)[0]
        rest, rows, offset = [], [], 0
        for v in concat.ins:
            n = width_of(v)
            if v is not value:
                rest.append(v)
                rows.append(m[offset:offset + n])
            offset += n
        if not rest:
            result = b.value
        else:
            new_ops, rest_in = concat_like(rest, concat)
            lin = LinearOp(rest_in, np.vstack(rows))
            lin.attributes.update(reader.attributes)
            add = AddOp(b.value, lin.out)
            add.attributes.update(reader.attributes)
            new_ops += [lin, add]
            for new in new_ops:
                block.insert_op_before(new, reader)
            result = add.out
        reader.out.replace_all_uses_with(result)
        block.erase_op(reader)
        block.erase_op(concat)
