"""`balance-sums`: reassociate serial sums into balanced trees (one atomic rewrite: reassociate).

A fold `((t1 + t2) + t3) + ... + tn` is n-1 adds in a row: n-1 sublayer slots on the critical
path. The same sum as a balanced tree takes about log2 n slots. The pass finds every maximal sum
tree and rebuilds it when that lowers the slot of the tree's root.

A sum node is a `tw.add`, or a bias-free `tw.linear` over a `tw.concat` whose weight is a stack of
identity blocks (what the builder's `tw.sum` makes). A sum node's operand is expanded into its own
terms when it is a sum node with exactly one use (that node) and the same sequential-scope tags;
anything else is a leaf. Leaves are combined Huffman-style on their ready slot from
`twdialect.analysis.critical_path`: the two earliest-ready terms are added first (terms that cannot
accumulate before those that can, then by position in the original sum), which gives the
shallowest binary tree for those ready times (with equal ready times: ceil(log2 n) slots, or
one slot when adds of single-use writer outputs accumulate for free, as the floor counts them). The new adds take the root's discardable
attributes and are inserted just before it.

Semantics: addition is reassociated, which in floating point changes rounding only. The oracle
evaluates in float64 (and the machine in float32); for terms of magnitude M the difference is a
few ulps of n*M, far inside the project's 1e-4 relative tolerance (checked by differential tests).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.ir import Operation, SSAValue

from twdialect.analysis import EITHER, accumulates, critical_path, next_slot
from twdialect.dense import to_numpy
from twdialect.dialect import AddOp, ConcatOp, GraphOp, LinearOp, LiteralOp, width_of
from tw_passes.fuse_linears import same_schedule_tags
from tw_passes.graph_pass import GraphPass


def sum_terms(op: Operation) -> list[SSAValue] | None:
    """The terms an op adds up, or None if it is not a sum node."""
    if isinstance(op, AddOp):
        return [op.lhs, op.rhs]
    if isinstance(op, LinearOp) and op.bias is None and isinstance(op.x.owner, ConcatOp):
        concat = op.x.owner
        n = width_of(op.out)
        if any(width_of(v) != n for v in concat.ins):
            return None
        w = to_numpy(op.weight)
        if not np.array_equal(w, np.tile(np.eye(n), (len(concat.ins), 1))):
            return None
        return list(concat.ins)
    return None


def _is_literal(value: SSAValue) -> bool:
    return isinstance(value.owner, LiteralOp)


def _is_literal_term(term) -> bool:
    return isinstance(term, SSAValue) and _is_literal(term)


def _expandable(value: SSAValue, root: Operation) -> bool:
    owner = value.owner
    if not isinstance(owner, Operation) or not value.has_one_use():
        return False
    if sum_terms(owner) is None or not same_schedule_tags(owner, root):
        return False
    # A sum-linear's concat must be read only by it, or it would be left alive.
    return not isinstance(owner, LinearOp) or owner.x.has_one_use()


@dataclass(frozen=True)
class BalanceSums(GraphPass):
    """Rebuild serial chains of adds (and identity-stacked sum linears) as balanced trees."""

    name = "balance-sums"

    def run_on_graph(self, ctx: Context, graph: GraphOp) -> int:
        """Rebalance every sum tree of `graph`; returns how many trees were rebuilt."""
        floor = critical_path(graph)
        slots, ready = dict(floor.slots), dict(floor.ready)
        rebuilt = 0
        # Roots: sum nodes that are not themselves expanded into a bigger sum. Visit roots in
        # block order; a tree's interior lies before its root, so it is still intact.
        roots = [op for op in graph.block.ops if sum_terms(op) is not None
                 and not self._is_interior(op)]
        for root in roots:
            if self._rebuild(root, slots, ready):
                rebuilt += 1
        return rebuilt

    @staticmethod
    def _is_interior(op: Operation) -> bool:
        user = op.results[0].get_user_of_unique_use()
        if user is None:
            return False
        if isinstance(user, ConcatOp):  # a term of a sum-linear?
            user = user.out.get_user_of_unique_use()
            if user is None:
                return False
        return sum_terms(user) is not None and _expandable(op.results[0], user)

    def _rebuild(self, root: Operation, slots, ready) -> bool:
        leaves: list[SSAValue] = []
        interior: list[Operation] = []
        stack = list(reversed(sum_terms(root)))
        while stack:  # depth-first, left to right: leaves keep their order in the sum
            v = stack.pop()
            if _expandable(v, root):
                owner = v.owner
                interior.append(owner)
                stack.extend(reversed(sum_terms(owner)))
            else:
                leaves.append(v)
        if len(leaves) < 3 or any(v not in ready for v in leaves):
            return False
        # Plan first (no op is created unless the tree gets shallower). Heap entries:
        # (ready slot, accumulates?, tie-break, term); pairing terms that cannot accumulate
        # first turns them into adds, whose single-use results then accumulate.
        terms: list[SSAValue | tuple[int, int]] = list(leaves)
        heap = [(ready[v], accumulates(v), i, i) for i, v in enumerate(leaves)]
        heapq.heapify(heap)
        plan_ready: list[int] = []
        while len(heap) > 1:
            r1, acc1, _, a = heapq.heappop(heap)
            r2, acc2, _, b = heapq.heappop(heap)
            # The floor's cost model: an add of two accumulating addends is free.
            free = acc1 and acc2 and terms[a] is not terms[b] \
                and not (_is_literal_term(terms[a]) and _is_literal_term(terms[b]))
            r = max(r1, r2) if free else next_slot(max(r1, r2), EITHER)
            terms.append((a, b))
            plan_ready.append(r)
            heapq.heappush(heap, (r, True, len(terms) - 1, len(terms) - 1))
        if heap[0][0] >= slots.get(root, heap[0][0] + 1):
            return False
        block = root.parent_block()
        values: list[SSAValue] = list(leaves)
        new_ops: list[AddOp] = []
        new_ready: dict[SSAValue, int] = {}
        for (a, b), r in zip(terms[len(leaves):], plan_ready):
            add = AddOp(values[a], values[b])
            add.attributes.update(root.attributes)
            block.insert_op_before(add, root)
            values.append(add.out)
            new_ops.append(add)
            new_ready[add.out] = r
        top = new_ops[-1]
        root.results[0].replace_all_uses_with(top.out)
        dead = [root] + interior
        for op in dead:  # users before producers
            concat = op.x.owner if isinstance(op, LinearOp) else None
            block.erase_op(op)
            if concat is not None and concat.out.first_use is None:
                block.erase_op(concat)
        for add in new_ops:
            slots[add] = new_ready[add.out]
        ready.update(new_ready)
        return True
