"""`fuse-linears`: fold affine maps into their neighbours (one atomic rewrite: compose matrices).

A `tw.linear` costs an attention head and a sublayer slot wherever it runs; composed into the
next affine map it costs nothing. The pass folds, for every consumer in block order:

  linear(linear(x, A, a), B, b)        -> linear(x, A@B, a@B + b)
  mlp(linear(x, A, a)) (w1, b1)        -> mlp(x) with w1' = A@w1, b1' = a@w1 + b1 (a gated
                                          mlp's up projection folds alike: up' = A@up, ...)
  linear(mlp(x) (w2, b2), B, b)        -> mlp(x) with w2' = w2@B, b2' = b2@B + b
  linear/mlp(concat(p, linear(u, A, a), q)) -> the consumer reads concat(p, u, q); the block of
                                          its input matrix W_j for that operand becomes A@W_j and
                                          a@W_j joins its bias
  attn(q, k, v) with q, k or v = linear(x, A, a) (or a concat holding such linears)
                                       -> the head's wq / wk / wv absorbs A; the operand becomes
                                          x. A key bias is dropped exactly (it shifts every
                                          logit of a query by the same amount); a query or value
                                          bias must be zero (attention has no bias to carry it).
so chains of scalar affine ops (negate, add_const, multiply_const ...) collapse to one op.
Those folds need every use of the folded value to be the consumer (or the concat the consumer
alone reads).

Fanout (option `fanout`, default on): a linear with several readers is duplicated into a reader
(folded into it, keeping the original for the others) when the linear is small (at most
`max-duplicate-params` parameters) and the reader's sublayer slot in the critical-path floor
(`twdialect.analysis.critical_path`) would drop, i.e. the duplicate takes a layer off its path.

Never fused (unless `allow-inflate=true`): a fold whose result has more parameters than the
separate ops (a bottleneck such as 64 -> 1 -> 64 would become a 64x64 matrix), unless the
fold takes its reader's sublayer slot in the critical-path floor down, costs the machine no
more (an MLP reader keeps its neurons however wide W1 grows; a linear's head dims or bypass
neurons, min(inputs, outputs), must not grow) and adds at most `depth-inflate-params`
parameters: a layer is worth far more than a few stored weights. Never fused
either: across sequential-scope iterations (different `tw.scope`/`tw.iteration` tags) or away
from a value marked `tw.scope_terminal`; the schedule hints must keep their anchors.

The folded op takes the consumer's place in the block and its discardable attributes
(annotation, scope tags). Products are computed in float64 and stored as f32. Cost: one or two
sweeps over the block plus one critical-path analysis, O(ops + edges) beyond the matrix products.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.ir import Block, Operation, SSAValue

from tw_passes import PassOptionError
from tw_passes.graph_pass import GraphPass
from twdialect.analysis import critical_path, next_slot, placement_kind
from twdialect.rounding import FoldCheck
from twdialect.rounding import mark_addend
from twdialect.rounding import record as record_rounding
from twdialect.dense import shape_of, to_numpy
from twdialect.op_sides import (concat_like, input_side, input_sides, vector_of,
                                with_input_sides)
from twdialect.dialect import (
    ITERATION,
    AttnOp,
    SCOPE,
    SCOPE_TERMINAL,
    ConcatOp,
    GraphOp,
    LinearOp,
    MlpOp,
    mlp_like,
    width_of,
    attn_rope,
    rope_kwargs,
)

# --------------------------------------------------------------------------------------
# Parameter accounting and affine pieces shared with other passes
# --------------------------------------------------------------------------------------


def op_params(op: Operation) -> int:
    """Graph parameters of a linear or mlp: matrix entries plus the biases it carries."""
    names = ("weight", "bias") if isinstance(op, LinearOp) else ("w1", "b1", "up", "ub", "w2", "b2")
    total = 0
    for name in names:
        attr = op.properties.get(name)
        if attr is not None:
            total += math.prod(shape_of(attr))
    return total


def same_schedule_tags(producer: Operation, consumer: Operation) -> bool:
    """Folding `producer` into `consumer` keeps every sequential-scope hint anchored."""
    if SCOPE_TERMINAL in producer.attributes:
        return False
    return all(producer.attributes.get(k) == consumer.attributes.get(k) for k in (SCOPE, ITERATION))


def discard(*ops: Operation) -> None:
    """Drop candidate ops that were built but never inserted (users first): their operand
    uses would otherwise linger and make single-use values look shared."""
    for op in ops:
        op.erase()


def replace_op(old: Operation, new_ops: list[Operation], new_value: SSAValue) -> None:
    """Insert `new_ops` before `old`, reroute `old`'s result to `new_value`, erase `old`."""
    block = old.parent_block()
    for op in new_ops:
        block.insert_op_before(op, old)
    old.results[0].replace_all_uses_with(new_value)
    block.erase_op(old)


# --------------------------------------------------------------------------------------
# The folds (each returns the replacement op, or None when it does not apply)
# --------------------------------------------------------------------------------------


def fold_linear_into_reader(producer: LinearOp, reader: LinearOp | MlpOp) -> Operation:
    """reader(producer(x)) as one op reading x."""
    a, a_bias, a_has = input_side(producer)
    return with_input_sides(reader, producer.x, [(a @ w, a_bias @ w + b, a_has or b_has)
                                                 for w, b, b_has in input_sides(reader)])


def fold_linear_into_mlp_output(mlp: MlpOp, linear: LinearOp) -> MlpOp:
    """linear(mlp(x)) as one mlp whose second matrix absorbs the linear."""
    w2 = to_numpy(mlp.w2)
    m, m_bias, m_has = input_side(linear)
    b2 = vector_of(mlp, "b2", w2.shape[1])
    new_w2 = w2 @ m
    new_b2 = b2 @ m + m_bias if m_has or mlp.b2 is not None else None
    new = mlp_like(mlp, mlp.x, mlp.w1, new_w2, b1=mlp.b1, b2=new_b2, up=mlp.up, up_bias=mlp.ub)
    new.attributes.update(linear.attributes)
    record_rounding(new, "out", new_w2, new_b2,
                    before=(w2, to_numpy(mlp.b2) if mlp.b2 is not None else None, m, m_bias))
    mark_addend(new, linear.out)
    return new


def fold_concat_operands(reader: LinearOp | MlpOp, absorb) -> tuple[Operation, ConcatOp] | None:
    """Fold the linears producing some operands of the concat that `reader` reads.

    `absorb(value) -> bool` says which operand values to fold (each must be a `tw.linear`
    result). Returns (new reader, new concat) or None when no operand qualifies."""
    concat = reader.x.owner
    assert isinstance(concat, ConcatOp)
    new_operands: list[SSAValue] = []
    offset = 0
    folded = False
    sides = [(w, b, has_bias, []) for w, b, has_bias in input_sides(reader)]
    for v in concat.ins:
        n = width_of(v)
        inner = v.owner
        fold = isinstance(inner, LinearOp) and absorb(v)
        new_operands.append(inner.x if fold else v)
        folded = folded or fold
        for k, (w, b, has_bias, new_rows) in enumerate(sides):
            rows = w[offset:offset + n]
            if fold:
                a, a_bias, a_has = input_side(inner)
                new_rows.append(a @ rows)
                sides[k] = (w, b + a_bias @ rows, has_bias or a_has, new_rows)
            else:
                new_rows.append(rows)
        offset += n
    if not folded:
        return None
    (new_concat,), x = concat_like(new_operands, concat)  # as many operands as before: >= 2
    return with_input_sides(reader, x, [(np.vstack(rows), b, has_bias)
                                        for _, b, has_bias, rows in sides]), new_concat


def _concat_inner_ok(reader: Operation, value: SSAValue, rows: int, allow_inflate: bool) -> bool:
    """May the linear producing concat operand `value` fold into `reader`'s matching rows?"""
    inner = value.owner
    if not isinstance(inner, LinearOp) or not same_schedule_tags(inner, reader):
        return False
    if allow_inflate:
        return True
    out = sum(w.shape[1] for w, _, _ in input_sides(reader))  # a gated mlp's up side too
    # Rows for this block: width(v) x out before, width(u) x out after; the inner op goes away.
    return width_of(inner.x) * out <= rows * out + op_params(inner)


ATTN_INPUTS = (("query", "wq"), ("key", "wk"), ("value", "wv"))


def _dims(linear: LinearOp) -> int:
    """Head dims (or bypass neuron pairs) a linear takes on the machine: min(inputs, outputs)."""
    return min(shape_of(linear.weight))


def read_only_by(value: SSAValue, op: Operation) -> bool:
    """Is every use of `value` by `op` (a concat may hold one value several times, as
    torchwright's in_range(x, x + 1) does once x + 1 has folded into it)?"""
    return value.first_use is not None and all(use.operation is op for use in value.uses)


def unique_ops(ops) -> list[Operation]:
    """`ops` without repeats, in first-seen order (a repeated concat operand's producer)."""
    return list({id(op): op for op in ops}.values())


def _uses_only_by(value: SSAValue, op: Operation, count: int) -> bool:
    """Is `value` read exactly `count` times, all by `op`?"""
    n = 0
    for use in value.uses:
        if use.operation is not op:
            return False
        n += 1
    return n == count


def fold_into_attn(attn: AttnOp, allow_inflate: bool) -> tuple[AttnOp, list[Operation],
                                                               list[Operation]] | None:
    """Fold the linears feeding `attn`'s query/key/value (directly or inside a concat the head
    alone reads) into wq/wk/wv. Returns (new attn, new ops to insert before it, ops that become
    dead), or None when nothing folds."""
    operands = [attn.query, attn.key, attn.value]
    # A key bias c adds q_i . c to every logit of row i, which the softmax drops; rotated by
    # the key's position it adds q_i . R_j c, which varies with j: a rotary head keeps it.
    # (Folding an input-side matrix into Wq / Wk is exact either way: the rotation acts on
    # the projections, whose columns stay as they are.)
    rotary = attn_rope(attn) is not None
    mats = {w: to_numpy(attn.properties[w]) for _, w in ATTN_INPUTS}
    new_operands = list(operands)
    new_mats = dict(mats)
    new_ops: list[Operation] = []
    dead: list[Operation] = []
    handled: list[SSAValue] = []
    for value in operands:
        if any(value is h for h in handled):
            continue
        handled.append(value)
        slots = [i for i, v in enumerate(operands) if v is value]
        if not _uses_only_by(value, attn, len(slots)):
            continue
        owner = value.owner
        if isinstance(owner, LinearOp) and same_schedule_tags(owner, attn):
            a, a_bias, _ = input_side(owner)
            if (rotary or any(i != 1 for i in slots)) and np.any(a_bias != 0.0):
                continue  # a query or value bias has nowhere to go (nor a rotary key's)
            old = op_params(owner) + sum(mats[ATTN_INPUTS[i][1]].size for i in slots)
            new = sum(a.shape[0] * mats[ATTN_INPUTS[i][1]].shape[1] for i in slots)
            if new > old and not allow_inflate:
                continue
            for i in slots:
                key = ATTN_INPUTS[i][1]
                new_mats[key] = a @ mats[key]
                new_operands[i] = owner.x
            dead.append(owner)
        elif isinstance(owner, ConcatOp):
            offset, operands_out, rows = 0, [], {i: [] for i in slots}
            folded = []
            for v in owner.ins:
                n = width_of(v)
                inner = v.owner
                ok = isinstance(inner, LinearOp) and v.has_one_use() \
                    and same_schedule_tags(inner, attn) \
                    and not ((rotary or any(i != 1 for i in slots))
                             and np.any(input_side(inner)[1] != 0.0))
                if ok and not allow_inflate:
                    d_in = width_of(inner.x)
                    cols = sum(mats[ATTN_INPUTS[i][1]].shape[1] for i in slots)
                    ok = d_in * cols <= n * cols + op_params(inner)
                for i in slots:
                    block = mats[ATTN_INPUTS[i][1]][offset:offset + n]
                    rows[i].append(input_side(inner)[0] @ block if ok else block)
                operands_out.append(inner.x if ok else v)
                if ok:
                    folded.append(inner)
                offset += n
            if not folded:
                continue
            cat_ops, cat = concat_like(operands_out, owner)
            new_ops.extend(cat_ops)
            for i in slots:
                new_mats[ATTN_INPUTS[i][1]] = np.vstack(rows[i])
                new_operands[i] = cat
            dead.extend([owner] + folded)
    if not dead:
        return None
    new_attn = AttnOp(*new_operands, new_mats["wq"], new_mats["wk"], new_mats["wv"], attn.wo,
                      **rope_kwargs(attn))
    new_attn.attributes.update(attn.attributes)
    return new_attn, new_ops, dead


# --------------------------------------------------------------------------------------
# The pass
# --------------------------------------------------------------------------------------


@dataclass
class FuseStats:
    """Per-run counts, and the run's fold precision check (value ranges, built lazily)."""

    folded: int = 0
    duplicated: int = 0
    skipped_inflate: int = 0
    skipped_precision: int = 0
    check: FoldCheck | None = None

    def precise(self, new: Operation, replaced: list[Operation]) -> bool:
        if self.check.precise(new, replaced):
            return True
        self.skipped_precision += 1
        return False


@dataclass(frozen=True)
class FuseLinears(GraphPass):
    """Compose linear -> linear / linear -> mlp / mlp -> linear and concat-fed linears."""

    name = "fuse-linears"

    allow_inflate: bool = False
    """Fold even when the fused op has more parameters than the separate ones."""

    fanout: bool = True
    """Duplicate small linears into readers whose critical-path slot then drops."""

    max_duplicate_params: int = 64
    """The largest linear (in parameters) that fanout duplication copies."""

    depth_inflate_params: int = 4096
    """The most parameters a fold may add when it lowers its reader's floor slot (0: never)."""

    dtype: str = "float32"
    """What the model computes in (`compile(dtype=)` sets it): "float64" skips the float32
    evaluation checks of a fold (`twdialect.rounding.FoldCheck`)."""

    def check_options(self) -> None:
        if self.dtype not in ("float32", "float64"):
            raise PassOptionError(f"fuse-linears: dtype must be one of float32, float64, got "
                                  f"{self.dtype!r}")

    def run_on_graph(self, ctx: Context, graph: GraphOp) -> FuseStats:
        stats = FuseStats(check=FoldCheck(graph, self.dtype))
        self._fold_single_use(graph.block, stats)
        if self.fanout and self._duplicate_fanout(graph, stats):
            self._fold_single_use(graph.block, stats)
        if not self.allow_inflate and self.depth_inflate_params and stats.skipped_inflate \
                and self._fold_for_depth(graph, stats):
            self._fold_single_use(graph.block, stats)
        return stats

    def _fits(self, new: Operation, old_params: int, stats: FuseStats) -> bool:
        if self.allow_inflate or op_params(new) <= old_params:
            return True
        stats.skipped_inflate += 1
        return False

    # -- single-use folds: one forward sweep; chains collapse because each fused op takes its
    #    consumer's place and is met again as the producer of the next op down the chain.
    def _fold_single_use(self, block: Block, stats: FuseStats) -> None:
        op = block.first_op
        while op is not None:
            nxt = op.next_op
            if isinstance(op, (LinearOp, MlpOp)):
                self._fold_into(op, stats)
            elif isinstance(op, AttnOp):
                self._fold_into_attn(op, stats)
            op = nxt

    def _fold_into(self, reader: LinearOp | MlpOp, stats: FuseStats) -> None:
        producer = reader.x.owner
        if not reader.x.has_one_use() or not isinstance(producer, Operation):
            return
        if isinstance(producer, LinearOp) or (isinstance(producer, MlpOp)
                                              and isinstance(reader, LinearOp)):
            if not same_schedule_tags(producer, reader):
                return
            fold = fold_linear_into_reader if isinstance(producer, LinearOp) \
                else fold_linear_into_mlp_output
            new = fold(producer, reader)
            if not self._fits(new, op_params(producer) + op_params(reader), stats) \
                    or not stats.precise(new, [producer, reader]):
                discard(new)
                return
            replace_op(reader, [new], new.out)
            producer.parent_block().erase_op(producer)
            stats.folded += 1
        elif isinstance(producer, ConcatOp):
            def absorb(v: SSAValue) -> bool:
                return read_only_by(v, producer) and _concat_inner_ok(
                    reader, v, width_of(v), self.allow_inflate)

            result = fold_concat_operands(reader, absorb)
            if result is None:
                return
            new, new_concat = result
            inners = unique_ops(v.owner for v in producer.ins
                                if isinstance(v.owner, LinearOp) and absorb(v))
            old = op_params(reader) + sum(op_params(i) for i in inners)
            if not self._fits(new, old, stats) or not stats.precise(new, inners + [reader]):
                discard(new, new_concat)
                return
            replace_op(reader, [new_concat, new], new.out)
            producer.parent_block().erase_op(producer)
            for inner in inners:
                inner.parent_block().erase_op(inner)
            stats.folded += len(inners)
            # a folded operand may have been the only other reader of a linear the concat
            # also holds (x beside x + 1): now the concat alone reads it, so try again
            self._fold_into(new, stats)

    def _fold_into_attn(self, attn: AttnOp, stats: FuseStats) -> None:
        result = fold_into_attn(attn, self.allow_inflate)
        if result is None:
            return
        new_attn, new_ops, dead = result
        replace_op(attn, new_ops + [new_attn], new_attn.out)
        for op in dead:  # concats before the linears they read
            op.parent_block().erase_op(op)
        stats.folded += sum(isinstance(op, LinearOp) for op in dead)

    # -- inflating folds that take a slot off the floor: one sweep with the floor's slots.
    def _fold_for_depth(self, graph: GraphOp, stats: FuseStats) -> bool:
        floor = critical_path(graph)
        slots, ready = dict(floor.slots), dict(floor.ready)
        changed = False
        op = graph.block.first_op
        while op is not None:
            nxt = op.next_op
            if isinstance(op, (LinearOp, MlpOp)) and op in slots:
                changed |= self._fold_one_for_depth(op, slots, ready, stats)
            op = nxt
        return changed

    def _fold_one_for_depth(self, reader: LinearOp | MlpOp, slots, ready, stats) -> bool:
        producer = reader.x.owner
        if not reader.x.has_one_use() or not isinstance(producer, Operation):
            return False
        if isinstance(producer, LinearOp):
            if not same_schedule_tags(producer, reader) or producer.x not in ready:
                return False
            new_ready, inners = ready[producer.x], [producer]
            new_ops = [fold_linear_into_reader(producer, reader)]
        elif isinstance(producer, MlpOp) and isinstance(reader, LinearOp):
            # linear(mlp): the mlp's W2 takes the linear; the result is ready with the mlp
            if not same_schedule_tags(producer, reader) or producer not in slots:
                return False
            new = fold_linear_into_mlp_output(producer, reader)
            if op_params(new) > op_params(producer) + op_params(reader) + \
                    self.depth_inflate_params or not stats.precise(new, [producer, reader]):
                discard(new)
                return False
            replace_op(reader, [new], new.out)
            producer.parent_block().erase_op(producer)
            slots[new] = ready[new.out] = slots[producer]
            stats.folded += 1
            return True
        elif isinstance(producer, ConcatOp):
            def absorb(v: SSAValue) -> bool:
                return read_only_by(v, producer) and isinstance(v.owner, LinearOp) \
                    and same_schedule_tags(v.owner, reader) and v.owner.x in ready

            if any(v not in ready for v in producer.ins):
                return False
            inners = unique_ops(v.owner for v in producer.ins if absorb(v))
            if not inners:
                return False
            new_ready = max(ready[v.owner.x] if absorb(v) else ready[v] for v in producer.ins)
            new, new_concat = fold_concat_operands(reader, absorb)
            new_ops = [new_concat, new]
        else:
            return False
        new = new_ops[-1]
        old = op_params(reader) + sum(op_params(i) for i in inners)
        new_slot = next_slot(new_ready, placement_kind(reader))
        machine_cost_grows = isinstance(reader, LinearOp) and \
            _dims(new) > _dims(reader) + sum(_dims(i) for i in inners)
        if new_slot >= slots[reader] or machine_cost_grows \
                or op_params(new) > old + self.depth_inflate_params \
                or not stats.precise(new, inners + [reader]):
            discard(*reversed(new_ops))
            return False
        replace_op(reader, new_ops, new.out)
        for dead in ([producer] if isinstance(producer, ConcatOp) else []) + inners:
            dead.parent_block().erase_op(dead)
        slots[new] = new_slot
        ready[new.out] = new_slot
        stats.folded += len(inners)
        return True

    # -- fanout: duplicate a small multi-use linear into readers that then run earlier.
    def _duplicate_fanout(self, graph: GraphOp, stats: FuseStats) -> bool:
        floor = critical_path(graph)
        slots, ready = dict(floor.slots), dict(floor.ready)
        changed = False
        op = graph.block.first_op
        while op is not None:
            duplicated = False
            if isinstance(op, LinearOp) and op.out.has_more_than_one_use() \
                    and op_params(op) <= self.max_duplicate_params:
                duplicated = self._duplicate_one(op, slots, ready, stats)
                changed |= duplicated
            nxt = op.next_op
            if duplicated and op.out.first_use is None:  # every reader got its own copy
                op.parent_block().erase_op(op)
            op = nxt
        return changed

    def _duplicate_one(self, producer: LinearOp, slots, ready, stats: FuseStats) -> bool:
        # Readers in block order (use lists are linked lists; keep the order deterministic
        # by deduplicating on first appearance).
        readers: list[Operation] = []
        seen: set[int] = set()
        for use in producer.out.uses:
            if id(use.operation) not in seen:
                seen.add(id(use.operation))
                readers.append(use.operation)
        changed = False
        for reader in readers:
            target, concat = reader, None
            if isinstance(reader, ConcatOp):
                user = reader.out.get_user_of_unique_use()
                if not isinstance(user, (LinearOp, MlpOp)) or user.x is not reader.out:
                    continue
                target, concat = user, reader
            elif not isinstance(reader, (LinearOp, MlpOp)):
                continue
            if not same_schedule_tags(producer, target) or target not in slots \
                    or producer.x not in ready:
                continue
            if concat is None:
                new_ready = ready[producer.x]
            else:
                # (xDSL builds an operand or result view on every access: read them once)
                ins, out = tuple(concat.ins), producer.out
                if sum(1 for v in ins if v is out) != 1:
                    continue
                if any(v not in ready for v in ins):
                    continue  # an operand made by this sweep: no floor estimate, leave it
                from_x = ready[producer.x]
                new_ready = max(from_x if v is out else ready[v] for v in ins)
                if not _concat_inner_ok(target, producer.out, width_of(producer.out),
                                        self.allow_inflate):
                    continue
            new_slot = next_slot(new_ready, placement_kind(target))
            if new_slot >= slots[target]:
                continue
            if concat is None:
                new = fold_linear_into_reader(producer, target)
                new_ops = [new]
            else:
                new, new_concat = fold_concat_operands(target, lambda v: v is producer.out)
                new_ops = [new_concat, new]
            if not self._fits(new, op_params(producer) + op_params(target), stats) \
                    or not stats.precise(new, [producer, target]):
                discard(*reversed(new_ops))
                continue
            replace_op(target, new_ops, new.out)
            if concat is not None:
                concat.parent_block().erase_op(concat)
            slots[new] = new_slot
            ready[new.out] = new_slot
            stats.duplicated += 1
            changed = True
        return changed
