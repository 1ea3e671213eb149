"""The lowering's view of a primitive graph: storage groups, component references, tasks.

* A **group** is one block of residual columns: the output of a writer op (linear, add, relu,
  mlp, attn) or of a source (input, embedding, pos_encoding, pos_table). A free add
  (`twdialect.analysis.free_adds`) shares its dying addend's group: an accumulating add has no
  task of its own (its addends' writers all add into the group), an add into a dying addend
  is a task that copies only the other addend.
* Every value resolves to a list of **component references**: (group, index) pairs, or a
  constant (literals; they ride on the machine's constant-1 column and cost nothing).
  Views (concat, slice, after) only rearrange references.
* A **task** is one writer op to place: its placement kind (`twdialect.analysis.PLACEMENT`), the
  groups it reads, the group it writes, and its extra ordering dependencies (`tw.after`).

What each op class contributes is one small function, found by exact class in `CASES` (as
`lowering/rules.py` `RULES` and `twdialect.analysis.PLACEMENT` are): a new op the lowering
accepts gets one entry there.
"""

from __future__ import annotations

from twdialect.errors import TwError
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from xdsl.ir import Operation, SSAValue

from twdialect.analysis import (WRITER_OPS, CriticalPath, FreeAdds, critical_path, free_adds,
                                placement_kind)
from twdialect.dense import to_numpy
from twdialect.dialect import (
    LIBRARY_OPS,
    AddOp,
    AfterOp,
    ConcatOp,
    EmbeddingOp,
    GraphOp,
    InputOp,
    LiteralOp,
    OutputOp,
    PosEncodingOp,
    PosTableOp,
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
    source: Operation | None = None  # input/embedding/pos_encoding/pos_table op (source groups)
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
        self.index_cache: dict = {}  # (lowering/index_heads.py: plans made on this graph)
        self.ops = list(graph.block.ops)
        self.index = {op: i for i, op in enumerate(self.ops)}
        self.groups: list[Group] = []
        self.tasks: list[Task] = []
        self.refs: dict[SSAValue, Refs] = {}
        self.waits_of: dict[SSAValue, frozenset[int]] = {}  # groups a value's readiness needs
        self.outputs: list[tuple[str, SSAValue]] = []
        self.sources: list[int] = []
        self._in_refs: dict[int, Refs] = {}
        self._critical_path: CriticalPath | None = None
        self.costs: dict[tuple[int, int], object] = {}  # (tid, d_head) -> Cost (rules.task_cost)
        self._build()
        self.writer_ops = {t.op for t in self.tasks}

    @property
    def critical_path(self) -> CriticalPath:
        """The graph's critical path (`twdialect.analysis.critical_path`), found once: every
        schedule of a width search reads it, and the graph under a task graph does not change."""
        if self._critical_path is None:
            self._critical_path = critical_path(self.graph)
        return self._critical_path

    def _new_group(self, value: SSAValue, width: int, source: Operation | None = None) -> int:
        g = Group(len(self.groups), width, value, source=source)
        self.groups.append(g)
        return g.gid

    def _build(self) -> None:
        adds = free_adds(self.graph)
        self._accumulating = adds.accumulating
        self.into = adds.into
        self._root = _group_roots(self.ops, adds)
        self._group_of_root: dict[SSAValue, int] = {}
        for op in self.ops:
            # Exact-type lookup: isinstance on xDSL ops goes through ABC machinery (slow here).
            case = CASES.get(type(op))
            if case is None:
                raise LoweringError(_refusal(op))
            case(self, op)
        for _, v in self.outputs:
            for g in self.refs[v].groups():
                self.groups[g].is_output = True

    def _group_of(self, res: SSAValue) -> int:
        """The group `res` is written into: its free-add root's, made on first use."""
        root = self._root.get(res, res)
        g = self._group_of_root.get(root)
        if g is None:
            g = self._group_of_root[root] = self._new_group(root, width_of(res))
        return g

    def _define(self, res: SSAValue, refs: Refs, waits: frozenset[int]) -> None:
        self.refs[res] = refs
        self.waits_of[res] = waits

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


# --------------------------------------------------------------------------------------
# One case per op class the lowering accepts (`CASES`)
# --------------------------------------------------------------------------------------


def _group_roots(ops: list[Operation], adds: FreeAdds) -> dict[SSAValue, SSAValue]:
    """value -> the result naming the group it is written into, for the addends of free adds:
    an accumulating add's addends inherit its root, an add into a dying addend hands its root
    to that addend. Walked in reverse so a root precedes its addends."""
    root: dict[SSAValue, SSAValue] = {}
    for op in reversed(ops):
        if op in adds.accumulating:
            r = root.get(op.results[0], op.results[0])
            for v in op.operands:
                root[v] = r
        elif op in adds.into:
            root[adds.into[op]] = root.get(op.results[0], op.results[0])
    return root


def _refusal(op: Operation) -> str:
    if type(op) in LIBRARY_OPS:
        return (f"{describe(op)}: library op left in the graph; run `decompose` first "
                "(lowering.compile does it for you)")
    return f"{describe(op)}: the lowering does not know this op"


def _output(tg: TaskGraph, op: OutputOp) -> None:
    tg.outputs.append((op.output_name.data, op.value))


def _source(tg: TaskGraph, op: InputOp | EmbeddingOp | PosTableOp) -> None:
    res = op.results[0]
    g = tg._new_group(res, width_of(res), source=op)
    tg.sources.append(g)
    tg._define(res, Refs.of_group(g, width_of(res)), frozenset())


def _pos_encoding(tg: TaskGraph, op: PosEncodingOp) -> None:
    """Component 0 is the machine's own position column; the rest is a source group."""
    res = op.results[0]
    w = width_of(res)
    refs = Refs.of_group(POS_GROUP, 1)
    if w > 1:
        g = tg._new_group(res, w - 1, source=op)
        tg.sources.append(g)
        refs = Refs.cat([refs, Refs.of_group(g, w - 1)])
    tg._define(res, refs, frozenset())


def _literal(tg: TaskGraph, op: LiteralOp) -> None:
    tg._define(op.out, Refs.constant(to_numpy(op.value)), frozenset())


def _concat(tg: TaskGraph, op: ConcatOp) -> None:
    tg._define(op.out, Refs.cat([tg.refs[v] for v in op.ins]),
               frozenset().union(*(tg.waits_of[v] for v in op.ins)))


def _slice(tg: TaskGraph, op: SliceOp) -> None:
    tg._define(op.out, tg.refs[op.x].sub(op.start.value.data, width_of(op.out)),
               tg.waits_of[op.x])


def _after(tg: TaskGraph, op: AfterOp) -> None:
    """x's components, ready only once every dependency is."""
    tg._define(op.out, tg.refs[op.x],
               tg.waits_of[op.x].union(*(tg.waits_of[d] for d in op.deps)))


def _writer(tg: TaskGraph, op: Operation) -> None:
    """One task writing the op's group; an add into a dying addend reads only the other."""
    res = op.results[0]
    g = tg._group_of(res)
    skip = tg.into.get(op)
    tg._add_task(op, g, tuple(v for v in op.operands if v is not skip))
    tg._define(res, Refs.of_group(g, width_of(res)), frozenset([g]))


def _add(tg: TaskGraph, op: AddOp) -> None:
    """An accumulating add has no task: its addends' writers add into its group, and its
    literal addends join that group's bias. Any other add is a writer."""
    if op not in tg._accumulating:
        _writer(tg, op)
        return
    res = op.out
    g = tg._group_of(res)
    for v in op.operands:
        if type(v.owner) is LiteralOp:
            lit = to_numpy(v.owner.value)
            grp = tg.groups[g]
            grp.bias = lit if grp.bias is None else grp.bias + lit
    tg._define(res, Refs.of_group(g, width_of(res)), frozenset([g]))


# Keyed by exact op class. Library ops are absent on purpose: `decompose` lowers them first.
# tests/test_op_coverage.py checks every primitive, view, source and sink has a case here.
CASES: dict[type, Callable[[TaskGraph, Operation], None]] = {
    OutputOp: _output,
    InputOp: _source, EmbeddingOp: _source, PosEncodingOp: _pos_encoding, PosTableOp: _source,
    LiteralOp: _literal, ConcatOp: _concat, SliceOp: _slice, AfterOp: _after,
    AddOp: _add,
    **{cls: _writer for cls in WRITER_OPS if cls is not AddOp},
}
