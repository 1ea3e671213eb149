"""The translation's graph and its BOS constants (`_Graph`): one translation of one program
grows one tw graph, knows every op's value at the BOS position (the oracle on a one-position
sequence), and dispatches each RASP expression to the stage that translates it (`sop`)."""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from twdialect import ops as tw
from twdialect.dialect import AttnOp, ConcatOp, EmbeddingOp
from twdialect.interp import evaluate_op

from tw_frontends.rasp.limits import ATOL, RaspError, _FeaturesNoNarrower, _label, _need_tracr, rasp
from tw_frontends.rasp.numbers import _Unsteady, _is_number, _ordered, _plain
from tw_frontends.rasp.nodes import Encoded, Value
from tw_frontends.rasp.built import _through_linear
from tw_frontends.rasp.float32 import check_output, output_tolerance
from tw_frontends.rasp.graph import RaspGraph, _may_mix, output_codes
from tw_frontends.rasp.plan import FEATURES, Plan
from tw_frontends.rasp.value_sets import ValueSets
from tw_frontends.rasp.values import _readers


def checked_arguments(vocab, max_seq_len, causal, bos, pad, atol) -> tuple:
    """(vocab in order, max_seq_len, causal, atol) as a translation reads them, or the
    RaspError that names the first wrong one (before any stage runs)."""
    ordered = _ordered(vocab)
    if not (isinstance(atol, (int, float)) and math.isfinite(atol) and atol > 0):
        raise RaspError(f"atol must be a positive number, got {atol!r}")
    if not ordered:
        raise RaspError("vocab must not be empty")
    for v in (bos, pad):
        if v in ordered:
            raise RaspError(f"the BOS/pad token {v!r} must not be in the vocabulary")
    if not isinstance(max_seq_len, (int, np.integer)) or max_seq_len < 1:
        raise RaspError(f"max_seq_len must be a positive integer, got {max_seq_len!r}")
    return ordered, int(max_seq_len), bool(causal), float(atol)


class _Graph:
    """One translation's graph, its BOS values and the memo of translated expressions."""

    def __init__(self, arguments: tuple, bos, pad, plan: Plan, sets: ValueSets,
                 analyses: dict):
        """`arguments`: `checked_arguments`'s (vocab in order, max_seq_len, causal, atol);
        `plan`: what this translation tries; `sets`: the value-set stage's answers;
        `analyses`: the memo of `_analysis`, shared by a program's translations."""
        self.vocab, self.max_seq_len, self.causal, self.atol = arguments
        self.bos, self.pad = bos, pad
        self.memo: dict[int, Encoded] = {}
        self.roots: dict = {}  # `_root`'s answers
        self.leaf_memo: dict = {}  # `_functions_of`'s answers
        self.at_bos: dict[Value, np.ndarray] = {}
        # a table of steps: (input, points, rows, its number of MLPs)
        self.tables: dict[Value, tuple] = {}
        # SequenceMaps kept tables of their value pairs (`_sum_read_apart`, `translate`'s
        # retry), and those read as a number or through a sum instead (unique ids)
        self.tabled_sums: set = set(plan.tabled_sums)
        self.numbered_sums: set = set()
        self.table_errors: dict[Value, float] = {}  # a table's float32 error (`Plan.error`)
        self.errors: dict[Value, float] = {}  # an Encoded value's float32 error (`Encoded.error`)
        self.seen = 0
        self.plan = plan  # (`token_features`, `narrow_indices` read it)
        self.replanned: list[str] = []  # reasons this translation re-planned in place
        # the token embedding's feature columns (`_token_columns`), grown as the reads ask:
        # whether a read went through them (or the constant column), their unit columns (the
        # one-hot's rows @ them) and a column's index by its bytes
        self.features_read = False
        self.feature_columns: list[np.ndarray] = []
        self.feature_index: dict[bytes, int] = {}
        # whether a head's value read the indices one-hot through a position table of fewer
        # columns (`_narrow_read`, where `narrow_indices`)
        self.narrowed_indices = False
        self.squares: Value | None = None  # `_index_squares`
        # answers about the program's functions over its value sets (`_analysis`), which a
        # later translation of the same program (`translate`) asks again
        self.analyses = analyses
        # every SOp's value set and what only value sets decide (the stage before this one)
        self.sets = sets

    @property
    def token_features(self) -> bool:
        """Whether narrow reads of the token one-hot go through feature columns of the
        embedding (`_token_columns`): the plan's, given up in place by `_without_features`."""
        return self.plan.token_features

    @property
    def narrow_indices(self) -> bool:
        """Whether a head's value reads the indices through a position table of its own."""
        return self.plan.narrow_indices

    def _analysis(self, kind: str, expr, compute: Callable[[], Any]):
        """compute(), once per (kind, expr) across the translations of one program: the
        program's functions over value sets that do not depend on how a translation reads
        its inputs."""
        key = (kind, expr.unique_id)
        if key not in self.analyses:
            self.analyses[key] = compute()
        return self.analyses[key]

    # -- the graph and its BOS constants ---------------------------------------------
    def build(self, program) -> RaspGraph:
        _need_tracr()
        with tw.Graph("main", verify=False) as g:  # `translate` verifies the one it keeps
            self.graph = g
            self._sources()
            self.readers = _readers(program)
            self.program = program
            out = self.sop(program)
            if out.numerical:
                out = self._refolded(out)
                check_output(program, out, self.atol)
            code = None if out.numerical else output_codes(
                out.space, self.max_seq_len, mixes=_may_mix(program))
            coded = None if code is None else self._times(out.value, code[0][:, None], code[2])
            if coded is not None:
                self._erase(out.value.owner)
            tw.output("out", out.value if coded is None else coded)
        self._embed_features(g.op)
        rg = RaspGraph(g.module, self.vocab, self.max_seq_len, self.causal, self.bos, self.pad,
                       out.numerical, None if out.numerical else [_plain(v) for v in out.space])
        if coded is not None:
            rg.codes, rg.code_shift, rg.code_tolerance = code
        return rg

    def _refolded(self, out: Encoded) -> Encoded:
        """A numerical output read linearly off a table of steps that nothing else reads (a
        numerical Map of a SelectorWidth's one-hot) as one table of the product, planned to
        `atol`, in two MLPs where one cannot keep it: the pipeline would fold the two
        anyway, keeping float32 only within 1e-5 of the output's magnitude
        (numerical(Map(10 k + 0.1, hist)) at length 40: 2.5e-4 off in one layer; 6e-6 in
        two)."""
        x, w, b = _through_linear(out.value)
        if x is out.value or x not in self.tables or not x.has_one_use():
            return out
        src, points, rows, _ = self.tables[x]
        product = rows @ w + b
        value = self._steps(src, points, product, output_tolerance(product, self.atol) / 2)
        self._erase(out.value.owner)
        return self.encoded(value, True, out._space, out.maybe_none, noisy=out.noisy,
                            error=self.table_errors[value], magnitude=out._magnitude)

    def _erase(self, op) -> None:
        """Drop `op`, which nothing reads, and whatever only it read, from the graph (the
        token input stays: its feed names it); every op left has its BOS value (`_sync`
        counts the ops it has seen)."""
        self._sync()
        self._drop(op)
        self.seen = len(self.graph.ops)

    def _drop(self, op) -> None:
        operands = [o.owner for o in op.operands]
        op.drop_all_references()
        self.graph.ops.remove(op)
        for owner in operands:
            if owner in self.graph.ops and not isinstance(owner, EmbeddingOp) and \
                    not any(r.uses for r in owner.results):
                self._drop(owner)

    def _sources(self) -> None:
        v = len(self.vocab)
        numeric = all(_is_number(t) for t in self.vocab)
        # token ids: the vocabulary, then BOS, then pad. Columns: one-hot, BOS flag, value.
        table = np.zeros((v + 2, v + 2))
        table[np.arange(v), np.arange(v)] = 1.0
        table[v, v] = 1.0
        if numeric:
            table[:v, v + 1] = [float(t) for t in self.vocab]
        self.embedding = tw.embedding("tokens", table)
        self.feeds = {"tokens": table[v:v + 1]}
        self.tokens_onehot = tw.slice(self.embedding, 0, v)
        self.bos_flag = tw.slice(self.embedding, v, 1)
        self.tokens_value = tw.slice(self.embedding, v + 1, 1) if numeric else None
        self.feature_slices: dict[int, Value] = {}  # `_features`
        n = self.max_seq_len
        pos = np.zeros((n + 1, n + 1))
        pos[np.arange(1, n + 1), np.arange(n)] = 1.0  # one-hot of p - 1
        pos[np.arange(1, n + 1), n] = np.arange(n)  # p - 1
        idx = tw.pos_table(pos)
        self.indices_onehot = tw.slice(idx, 0, n)
        self.indices_value = tw.slice(idx, n, 1)
        self.one = tw.literal([1.0])
        self._sync()

    def _sync(self) -> None:
        """The BOS-position value of every op built since the last call (the oracle on a
        one-position sequence: BOS attends only to itself)."""
        for op in self.graph.ops[self.seen:]:
            if self.token_features and isinstance(op, AttnOp) and self._keys_one_hot(op):
                self._without_features()
            if not op.results or op.results[0] in self.at_bos:  # (a feature slice's zeros)
                continue
            args = [self.at_bos[o] for o in op.operands]
            self.at_bos[op.results[0]] = evaluate_op(op, args, 1, self.feeds)
        self.seen = len(self.graph.ops)

    def _without_features(self) -> None:
        """Token features given up (`plan.FEATURES`): in place where no read has gone through
        them yet (every op so far is what a translation without them builds, so it goes on
        as that one: `effort["in_place"]`), else `_FeaturesNoNarrower` (`translate` builds
        again without)."""
        if self.features_read:
            raise _FeaturesNoNarrower()
        self.plan = self.plan.after(FEATURES)
        self.replanned.append(FEATURES)

    def _keys_one_hot(self, head: AttnOp) -> bool:
        """Whether a head's queries or keys read the token one-hot itself: a head is rebuilt
        (`_times`) with the same queries and keys, so the one-hot stays in the residual, and
        token features beside it would only widen it."""
        return any(isinstance(side.owner, ConcatOp) and self.tokens_onehot in side.owner.operands
                   for side in (head.query, head.key))

    def encoded(self, value: Value, numerical: bool, space, maybe_none: bool = False, *,
                noisy: bool, error: float = 0.0, magnitude: float | None = None) -> Encoded:
        self._sync()
        self.errors[value] = max(error, self.errors.get(value, 0.0))
        return Encoded(value, numerical, space, self.at_bos[value][0].copy(), maybe_none, noisy,
                       error=error, _magnitude=magnitude)

    # -- SOps ------------------------------------------------------------------------
    def sop(self, expr) -> Encoded:
        key = expr.unique_id
        if key not in self.memo:
            with tw.annotate(str(expr.label)):
                try:
                    enc = self._translate(expr)
                except _Unsteady as e:  # (the innermost expression whose function jumped)
                    raise RaspError(f"{_label(expr)}: {e.why}") from None
            numerical = rasp.is_numerical(expr)
            if enc.numerical != numerical:
                enc = self.as_numerical(enc, expr) if numerical else self.as_categorical(enc, expr)
            self.memo[key] = enc
        return self.memo[key]

    def _translate(self, expr) -> Encoded:
        numerical = rasp.is_numerical(expr)
        if isinstance(expr, rasp.TokensType):
            if numerical:  # (a vocabulary of numbers: validate.py)
                return self.encoded(self.tokens_value, True, list(self.vocab), noisy=False)
            return self.encoded(self.tokens_onehot, False, list(self.vocab), noisy=False)
        if isinstance(expr, rasp.IndicesType):
            space = list(range(self.max_seq_len))
            if numerical:
                return self.encoded(self.indices_value, True, space, noisy=False)
            return self.encoded(self.indices_onehot, False, space, noisy=False)
        if isinstance(expr, rasp.LengthType):
            return self._length(expr)
        if isinstance(expr, rasp.Full):
            return self._constant(expr, expr.fill)
        if isinstance(expr, rasp.ConstantSOp):
            return self._constant_sop(expr)
        if isinstance(expr, rasp.Map):
            return self._map(expr)
        if isinstance(expr, rasp.SequenceMap):
            return self._sequence_map(expr)
        if isinstance(expr, rasp.Aggregate):
            return self._aggregate(expr)
        if isinstance(expr, rasp.SelectorWidth):
            return self._selector_width(expr, expr.selector)
        raise AssertionError(f"{_label(expr)}: validate.py admits only the classes above")

    def _constant(self, expr, fill) -> Encoded:
        if rasp.is_numerical(expr):
            return self.encoded(tw.literal([self._number(expr, fill)]), True, [fill], noisy=False)
        return self.encoded(tw.literal([1.0]), False, [fill], noisy=False)

    def _constant_sop(self, expr) -> Encoded:
        values = list(expr.value)  # (at most max_seq_len: validate.py)
        n = self.max_seq_len
        if rasp.is_numerical(expr):
            table = np.zeros((n + 1, 1))
            table[1:len(values) + 1, 0] = [self._number(expr, v) for v in values]
            return self.encoded(tw.pos_table(table), True, _ordered(values), noisy=False)
        space = _ordered(values)
        table = np.zeros((n + 1, len(space)))
        for p, v in enumerate(values):
            table[p + 1, space.index(v)] = 1.0
        return self.encoded(tw.pos_table(table), False, space, noisy=False)

    def _number(self, expr, v) -> float:
        if not _is_number(v):
            raise RaspError(f"{_label(expr)}: a numerical SOp holds {v!r}, not a finite number")
        return float(v)
