"""The lowering's view of a primitive graph: storage groups, component references, tasks.

* A **group** is one block of residual columns: the output of a writer op (linear, add, relu,
  mlp, attn) or of a source (input, embedding, pos_encoding). A free add
  (`twdialect.analysis.free_adds`) shares its dying addend's group: an accumulating add has no
  task of its own (its addends' writers all add into the group), an add into a dying addend
  is a task that copies only the other addend.
* Every value resolves to a list of **component references**: (group, index) pairs, or a
  constant (literals; they ride on the machine's constant-1 column and cost nothing).
  Views (concat, slice, after) only rearrange references.
* A **task** is one writer op to place: its placement kind (`twdialect.analysis.PLACEMENT`), the
  groups it reads, the group it writes, and its extra ordering dependencies (`tw.after`).
"""

from __future__ import annotations

from twdialect.errors import TwError
from dataclasses import dataclass, field

import numpy as np
from xdsl.ir import Operation, SSAValue

from twdialect.analysis import WRITER_OPS, free_adds, placement_kind
from twdialect.dense import to_numpy
from twdialect.dialect import (
    LIBRARY_OPS,
    AfterOp,
    ConcatOp,
    EmbeddingOp,
    GraphOp,
    InputOp,
    LiteralOp,
    OutputOp,
    PosEncodingOp,
    SliceOp,
    describe,
    width_of,
)

POS_GROUP = -1  # pseudo-group of the machine's position column (pos_encoding component 0)


@dataclass
class Refs:
    """Components of a value: group[k] >= 0 with index idx[k], or group[k] == CONST with const[k]."""

    group: np.ndarray  # int64
    idx: np.ndarray  # int64
    const: np.ndarray  # float64, used where group == CONST

    CONST = -2

    @staticmethod
    def of_group(g: int, width: int) -> Refs:
        return Refs(np.full(width, g, np.int64), np.arange(width, dtype=np.int64), np.zeros(width))

    @staticmethod
    def constant(values: np.ndarray) -> Refs:
        n = len(values)
        return Refs(np.full(n, Refs.CONST, np.int64), np.zeros(n, np.int64),
                    np.asarray(values, np.float64))

    @staticmethod
    def cat(parts: list[Refs]) -> Refs:
        return Refs(np.concatenate([p.group for p in parts]), np.concatenate([p.idx for p in parts]),
                    np.concatenate([p.const for p in parts]))

    def sub(self, start: int, length: int) -> Refs:
        s = slice(start, start + length)
        return Refs(self.group[s], self.idx[s], self.const[s])

    def groups(self) -> set[int]:
        return {g for g in self.group.tolist() if g >= 0}


@dataclass
class Group:
    gid: int
    width: int
    value: SSAValue  # the value that names the group (the root of an accumulating add tree)
    writers: list[int] = field(default_factory=list)  # task ids that write into it
    bias: np.ndarray | None = None  # literal addends folded into the first writer's bias
    source: Operation | None = None  # input/embedding/pos_encoding op, for source groups
    is_output: bool = False
    readers: list[int] = field(default_factory=list)  # task ids reading it (real reads)


@dataclass
class Task:
    tid: int
    op: Operation
    kind: str  # ATTN, MLP or EITHER
    out_group: int
    reads: list[int]  # groups read (sorted)
    waits: list[int]  # groups that must be complete first (reads + tw.after deps), sorted
    index: int  # the op's position in the block (tie-breaks)
    operands: tuple  # the values the task reads (an add into a dying addend reads the other)


class LoweringError(TwError):
    """The graph cannot be lowered as it is (library ops left, an op wider than the machine)."""


class TaskGraph:
    """Groups, references and tasks of one graph (see module docstring)."""

    def __init__(self, graph: GraphOp):
        self.graph = graph
        self.ops = list(graph.block.ops)
        self.index = {op: i for i, op in enumerate(self.ops)}
        self.groups: list[Group] = []
        self.tasks: list[Task] = []
        self.refs: dict[SSAValue, Refs] = {}
        self.waits_of: dict[SSAValue, frozenset[int]] = {}  # groups a value's readiness needs
        self.outputs: list[tuple[str, SSAValue]] = []
        self.sources: list[int] = []
        self._in_refs: dict[int, Refs] = {}
        self._build()
        self.writer_ops = {t.op for t in self.tasks}

    def _new_group(self, value: SSAValue, width: int, source: Operation | None = None) -> int:
        g = Group(len(self.groups), width, value, source=source)
        self.groups.append(g)
        return g.gid

    def _build(self) -> None:
        adds = free_adds(self.graph)
        accumulating = adds.accumulating
        self.into = into = adds.into
        # Accumulating adds (and adds into a dying addend): the root add names the group; the
        # addends that write into it inherit it. Walk in reverse so a root precedes its addends.
        target: dict[SSAValue, SSAValue] = {}
        for op in reversed(self.ops):
            if op in accumulating:
                root = target.get(op.results[0], op.results[0])
                for v in op.operands:
                    target[v] = root
            elif op in into:
                target[into[op]] = target.get(op.results[0], op.results[0])
        group_of_value: dict[SSAValue, int] = {}
        for op in self.ops:
            # Exact-type tests: isinstance on xDSL ops goes through ABC machinery (slow here).
            ty = type(op)
            if ty in LIBRARY_OPS:
                raise LoweringError(f"{describe(op)}: library op left in the graph; run "
                                    "`decompose` first (lowering.compile does it for you)")
            if ty is OutputOp:
                self.outputs.append((op.output_name.data, op.value))
                continue
            res = op.results[0]
            w = width_of(res)
            if ty is InputOp or ty is EmbeddingOp:
                g = self._new_group(res, w, source=op)
                self.sources.append(g)
                self.refs[res] = Refs.of_group(g, w)
                self.waits_of[res] = frozenset()
            elif ty is PosEncodingOp:
                refs = Refs.of_group(POS_GROUP, 1)
                if w > 1:
                    g = self._new_group(res, w - 1, source=op)
                    self.sources.append(g)
                    rest = Refs.of_group(g, w - 1)
                    refs = Refs.cat([refs, rest])
                self.refs[res] = refs
                self.waits_of[res] = frozenset()
            elif ty is LiteralOp:
                self.refs[res] = Refs.constant(to_numpy(op.value))
                self.waits_of[res] = frozenset()
            elif ty is ConcatOp:
                self.refs[res] = Refs.cat([self.refs[v] for v in op.ins])
                self.waits_of[res] = frozenset().union(*(self.waits_of[v] for v in op.ins))
            elif ty is SliceOp:
                self.refs[res] = self.refs[op.x].sub(op.start.value.data, w)
                self.waits_of[res] = self.waits_of[op.x]
            elif ty is AfterOp:
                self.refs[res] = self.refs[op.x]
                self.waits_of[res] = self.waits_of[op.x].union(*(self.waits_of[d] for d in op.deps))
            elif op in accumulating:
                root = target.get(res, res)
                g = group_of_value.get(root)
                if g is None:
                    g = group_of_value[root] = self._new_group(root, w)
                for v in op.operands:
                    if type(v.owner) is LiteralOp:
                        lit = to_numpy(v.owner.value)
                        grp = self.groups[g]
                        grp.bias = lit if grp.bias is None else grp.bias + lit
                self.refs[res] = Refs.of_group(g, w)
                self.waits_of[res] = frozenset([g])
            elif ty in WRITER_OPS:
                root = target.get(res, res)
                g = group_of_value.get(root)
                if g is None:
                    g = group_of_value[root] = self._new_group(root, w)
                skip = into.get(op)
                self._add_task(op, g, tuple(v for v in op.operands if v is not skip))
                self.refs[res] = Refs.of_group(g, w)
                self.waits_of[res] = frozenset([g])
            else:
                raise LoweringError(f"{describe(op)}: the lowering does not know this op")
        for _, v in self.outputs:
            for g in self.refs[v].groups():
                self.groups[g].is_output = True

    def _add_task(self, op: Operation, g: int, operands: tuple) -> None:
        reads: set[int] = set()
        waits: set[int] = set()
        for v in operands:
            reads |= self.refs[v].groups()
            waits |= self.waits_of[v]
        tid = len(self.tasks)
        t = Task(tid, op, placement_kind(op), g, sorted(reads), sorted(waits | reads),
                 self.index[op], operands)
        self.tasks.append(t)
        self.groups[g].writers.append(tid)
        for r in t.reads:
            self.groups[r].readers.append(tid)

    def in_refs(self, task: Task) -> Refs:
        """The task's input components in operand order (attn: query, key, value concatenated)."""
        r = self._in_refs.get(task.tid)
        if r is None:
            r = self._in_refs[task.tid] = Refs.cat([self.refs[v] for v in task.operands])
        return r
