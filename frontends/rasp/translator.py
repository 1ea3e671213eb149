"""RASP programs (DeepMind tracr's language) as tw graphs, exact by construction.

    from tracr.rasp import rasp
    from tw_frontends.rasp.translator import translate
    program = rasp.Map(lambda x: x + 1, rasp.tokens)
    rg = translate(program, vocab={1, 2, 3}, max_seq_len=5)
    rg.module                        # a tw module: evaluate it, run passes, compile it

`tw_lowering.compile_rasp_to_model` (tracr's own interface) compiles the result.

The sequence the graph runs on is tracr's: position 0 holds the BOS token, positions 1..n the
input tokens, so RASP's `indices` at position p is p - 1. Encodings follow tracr's
annotations (`rasp.categorical`, the default, and `rasp.numerical`):

* a categorical SOp is a one-hot vector over its value set (all zero: None), a numerical
  SOp one number;
* Map / SequenceMap are tables over the input value sets, so every one is exact: a
  categorical input is a `tw.linear` (one-hot rows), a numerical one a `tw.piecewise_linear`
  through its value set, a pair of inputs one MLP with a neuron per value pair (inputs that
  are Maps of one SOp: a table over that SOp's values, `_root`);
* Select + Aggregate / SelectorWidth is one `tw.attn` whose logits are GAIN * [selected]
  between one-hot queries and keys (any predicate, and any And/Or/Not tree, is a table over
  the joint value sets); BOS is every query's fallback: it takes half the gain, so it wins
  only where nothing is selected (Aggregate's default), or the full gain for SelectorWidth,
  where its share 1 / (width + 1) gives the width through a table (a selector that picks
  every key counts positions instead: the length is one head reading the last position,
  a prefix's width the position itself, `_count_all`);
* the program's output, where categorical, is one number (`output_codes`: number values as
  themselves, others by rank; 0 is None) made by the op that would make its one-hot (a
  table through its points, an MLP's or a head's output matrix times the codes), so the
  residual holds one column, not one per value; `decode` reads the nearest code, the argmax
  of logits 2 c x - c^2, a linear read-out of [x, 1];
* every value at the BOS position is a compile-time constant (BOS attends only to itself),
  computed here by the oracle as the graph grows; heads subtract it from their keys and
  queries so a BOS column never looks selected, and Aggregate replaces it by the default.

Beyond tracr: numerical Select keys and queries, SequenceMap over numerical inputs, Map from
numerical to categorical, Aggregate defaults other than None/0, numerical tokens and
indices, `length` (full attention only), ConstantSOp and ConstantSelector are compiled (each
through an exact table). Refused, with the expression named: value sets too large to table
(MAX_TABLE entries; a SequenceMap's pairs MAX_PAIRS, one neuron each), `length` under a causal mask (a causal model cannot see the sequence's
end), values that are neither numbers nor hashable, a numerical SOp holding a non-number.
"""

from __future__ import annotations

import functools
import itertools
from collections import Counter
import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Callable, Iterator, Sequence

import numpy as np
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue

from twdialect import ops as tw
from twdialect.dense import to_numpy
from twdialect.dialect import (AttnOp, ConcatOp, EmbeddingOp, LinearOp, MlpOp, OutputOp,
                                PosTableOp, SliceOp, width_of)
from twdialect.errors import TwError
from twdialect.interp import evaluate_op

try:
    from tracr.rasp import rasp
except ImportError:  # pragma: no cover - exercised where tracr is absent
    rasp = None

Value = SSAValue

# Logit gap between a selected key and an unselected one: unselected keys weigh exp(-GAIN)
# (1e-26) of a selected one, BOS exp(-GAIN / 2) where anything is selected.
GAIN = 60.0
# Largest table (one-hot width, joint value set) the frontend builds.
MAX_TABLE = 4096
# Largest SequenceMap over value pairs (one neuron a pair, straight to the output's rows, as
# tracr's), and the most weights its MLP may hold (64 MiB of float32).
MAX_PAIRS = 1 << 16
MAX_PAIR_WEIGHTS = 1 << 24
# Most value pairs a SequenceMap is asked whether it is a function of a x + b y (its function
# run on every pair: some seconds at this many).
MAX_SUM_PAIRS = 1 << 20
# A table in one MLP may stray this far (relative to its largest row) in float32; a steeper one
# takes two MLPs, exact on its plateaus.
CLEAN = 2e-6
# How far (relative) an input may sit off its value when a table's plateaus are measured.
PERTURB = 1e-6
# A categorical output row within this of one-hot is that value; of a mix summing to 1, the mix.
MIX_TOLERANCE = 1e-3
# How far (absolute) each of a rank's two widths may stray where a table of their sum reads
# them (`_Translator._rank`): far inside the quarter unit that table's plateaus allow.
RANK_NOISE = 1e-3
# A numerical output's default tolerance (tracr's tests and tw's contract: 1e-4 absolute); a
# value float32 cannot keep within it is refused (`_Translator.check_output`).
ATOL = 1e-4
# Largest value set of a numerical SOp (an Aggregate's means, a LinearSequenceMap's sums) that
# is enumerated for a table.
MAX_MEANS = 1_000_000
# Most pairs of sums `_means_of_sum` combines (some n^3 / 3 for two 0/1 means: length 370),
# each mean pair one float; their distinct values are again at most MAX_MEANS.
MAX_MEAN_PAIRS = 1 << 24
# Most additions `_sums` spends on one more key's sums (the sums so far times the values: a
# second or two of numpy at this many).
MAX_SUM_WORK = 1 << 26


class RaspError(TwError):
    """A RASP program (or one of its expressions, named) that tw cannot compile, and why."""


class _FeaturesNoNarrower(Exception):
    """A translation's token features reached the one-hot's width (`_token_columns`), a
    head's queries or keys read the one-hot itself (`_keys_one_hot`), or the finished graph
    reads it (`_embed_features`)."""


def _need_tracr() -> None:
    if rasp is None:
        raise RaspError("the RASP frontend needs tracr: pip install 'tw-compiler[rasp]' "
                        "(tracr-pypi)")


def _label(expr) -> str:
    try:
        return f"{type(expr).__name__} '{expr.label}'"
    except Exception:  # noqa: BLE001 - a label is only decoration
        return type(expr).__name__


def _ordered(values) -> list:
    """A value set in a stable order (numbers first, by value; then others by repr)."""
    def key(v):
        if isinstance(v, (bool, int, float, np.integer, np.floating)):
            return (0, float(v), "")
        return (1, 0.0, repr(v))
    values = values if isinstance(values, list) else list(values)
    types = set(map(type, values))
    if types <= _PLAIN_NUMBERS:
        return sorted(set(values))  # the same order, without a key per value (a million means)
    if _Near in types:  # (a value reached exactly and with round-off is as off as the worst)
        return sorted(_widest(values), key=key)
    return sorted(set(values), key=key)


def _widest(values: list) -> set:
    """The distinct values, each with the largest radius any of its equals has (a set would
    keep whichever came first: 0.0 exactly beside 0.1 - 0.1 with its round-off)."""
    radius: dict = {}
    for v in values:
        r = v.radius if type(v) is _Near else 0.0
        if r > radius.get(v, -1.0):
            radius[v] = r
    return {_Near(float(v), r) if r > 0 else v for v, r in radius.items()}


_PLAIN_NUMBERS = {bool, int, float}


def _is_number(v) -> bool:
    return isinstance(v, (bool, int, float, np.integer, np.floating)) and math.isfinite(float(v))


@dataclass
class Encoded:
    """A translated SOp: its tw value, encoding, value set, its value at BOS, whether it
    may be None somewhere (an Aggregate with nothing selected, a map that fails: RASP's maps
    pass None on, which a number cannot say), and whether it is `noisy`: read from a softmax
    (an Aggregate, a SelectorWidth, anything computed from one), so that one value may sit
    a few float32 ulps apart at two positions (a table's plateaus keep that small, not
    zero)."""

    value: Value
    numerical: bool
    # categorical: the value of each column; numerical: its possible values (None: too many
    # to enumerate), or a function of no arguments that enumerates them when first asked
    # (a LinearSequenceMap's sums: a million pairs, which only a later table needs)
    _space: list | None | Callable = field(repr=False)
    bos: np.ndarray = field(repr=False)
    maybe_none: bool = False
    noisy: bool = False
    # a number read off a categorical one-hot (a numerical Map of it): (that Encoded, the
    # value each of its columns maps to), so a categorical use is a linear map of the one-hot
    categories: tuple | None = field(default=None, repr=False)
    # a categorical one-hot tabled from a number of the same values (`as_categorical`):
    # that number's Encoded, so a numerical use reads it, not the one-hot
    number: Encoded | None = field(default=None, repr=False)
    # how far float32 may move it (a one-hot: each column), an estimate carried from its
    # sources: a softmax's mean (`mean_noise` of the magnitudes it averages, however small
    # the result), a table's own error, read through linear maps; and a bound on its
    # magnitude where the caller knows one without enumerating its values
    error: float = 0.0
    _magnitude: float | None = field(default=None, repr=False)

    @property
    def space(self) -> list | None:
        if callable(self._space):
            self._space = self._space()
        return self._space

    @property
    def magnitude(self) -> float:
        """The largest |value| of a number (0 where it has none or they are unknown)."""
        if self._magnitude is None:
            numbers = [float(v) for v in self.space or () if _is_number(v)]
            self._magnitude = float(np.max(np.abs(numbers), initial=0.0))
        return self._magnitude

    @property
    def width(self) -> int:
        return width_of(self.value)


@dataclass
class RaspGraph:
    """A translated program: the tw module, and how to feed and read it."""

    module: ModuleOp
    vocab: list
    max_seq_len: int
    causal: bool
    bos: Any
    pad: Any
    numerical: bool  # the output's encoding
    space: list | None  # categorical: the output's values (numerical: None)
    output: str = "out"
    token_input: str = "tokens"
    # categorical read as one number (`output_codes`): each value's code, and the shift that
    # makes codes of number values the numbers themselves (None: codes are ranks). None: a
    # one-hot, a column per value.
    codes: np.ndarray | None = None
    code_shift: float | None = None
    code_tolerance: float = 0.0

    def token_ids(self, tokens: Sequence) -> np.ndarray:
        """Token ids for a sequence [bos, *tokens] less its trailing pad tokens, which the
        model does not see (tracr's model masks them: every other position reads the input
        without them); a pad before a token, a token outside the vocabulary or a sequence
        longer than max_seq_len + 1 is a RaspError."""
        seq = list(tokens)
        if not seq or seq[0] != self.bos:
            raise RaspError(f"the input must start with the BOS token {self.bos!r}, got "
                            f"{seq[:1]!r}")
        if len(seq) > self.max_seq_len + 1:
            raise RaspError(f"the input holds {len(seq) - 1} tokens after BOS; the model was "
                            f"compiled for at most max_seq_len={self.max_seq_len}")
        seq = seq[:self.unpadded_length(seq)]
        index = {v: i for i, v in enumerate(self.vocab)}
        ids = [len(self.vocab)]
        for t in seq[1:]:
            if t == self.pad:
                raise RaspError(f"the pad token {self.pad!r} may only end the input (it "
                                f"pads a sequence to a batch's length), not precede a token")
            if t not in index:
                raise RaspError(f"token {t!r} is not in the vocabulary {self.vocab!r}")
            ids.append(index[t])
        return np.array(ids, dtype=np.int64)

    def unpadded_length(self, seq: Sequence) -> int:
        """Positions of [bos, *tokens] before its trailing pad tokens."""
        n = len(seq)
        while n > 1 and seq[n - 1] == self.pad:
            n -= 1
        return n

    def decode(self, out: np.ndarray, tokens: Sequence) -> list:
        """tracr's `decoded`: the BOS token, then each position's value (categorical: the
        hot column's value, None where no column is hot; numerical: the number), the pad
        token at the trailing pads `out` has no rows for (`token_ids`)."""
        out = np.asarray(out, dtype=np.float64)
        values: list = [tokens[0]]
        for p in range(1, len(tokens)):
            if p >= out.shape[0]:  # a trailing pad, which the model did not see
                values.append(self.pad)
            elif self.numerical:
                values.append(float(out[p, 0]))
            elif self.codes is not None:
                values.append(self._from_code(float(out[p, 0])))
            else:
                values.append(self._categorical(out[p]))
        return values

    def _from_code(self, x: float):
        """The value whose code is nearest x (the argmax of logits 2 c x - c^2: a linear
        read-out of [x, 1]); None at code 0. Off every code by more than the tolerance: a
        categorical Aggregate's mix of number values, read as their mean (x less the
        shift), as RASP's evaluator gives it."""
        codes = np.concatenate([[0.0], self.codes])
        k = int(np.argmax(2 * codes * x - codes ** 2))
        if abs(x - codes[k]) <= self.code_tolerance or self.code_shift is None:
            return None if k == 0 else self.space[k - 1]
        return float(x - self.code_shift)

    def _categorical(self, row: np.ndarray):
        """The hot column's value; None where none is hot. A mix of number columns (a
        categorical Aggregate over keys holding different numbers) reads as their mean, as
        RASP's evaluator gives it."""
        k = int(np.argmax(row))
        if row[k] > 1 - MIX_TOLERANCE:
            return self.space[k]
        weights = row.sum()
        if abs(weights - 1) < MIX_TOLERANCE and row[k] > MIX_TOLERANCE and \
                all(_is_number(v) for v in self.space):
            return float(row @ np.array([float(v) for v in self.space]))
        return self.space[k] if row[k] > 0.5 else None


class _Translator:
    """One program's translation: a memo of translated expressions and the graph it grows."""

    def __init__(self, vocab, max_seq_len: int, causal: bool, bos, pad,
                 token_features: bool = True, narrow_indices: bool = True,
                 analyses: dict | None = None, atol: float = ATOL, tabled_sums=()):
        self.vocab = _ordered(vocab)
        if not (isinstance(atol, (int, float)) and math.isfinite(atol) and atol > 0):
            raise RaspError(f"atol must be a positive number, got {atol!r}")
        self.atol = float(atol)
        if not self.vocab:
            raise RaspError("vocab must not be empty")
        for v in (bos, pad):
            if v in self.vocab:
                raise RaspError(f"the BOS/pad token {v!r} must not be in the vocabulary")
        if not isinstance(max_seq_len, (int, np.integer)) or max_seq_len < 1:
            raise RaspError(f"max_seq_len must be a positive integer, got {max_seq_len!r}")
        self.max_seq_len = int(max_seq_len)
        self.causal = bool(causal)
        self.bos, self.pad = bos, pad
        self.memo: dict[int, Encoded] = {}
        self.roots: dict = {}  # `_root`'s answers
        self.leaf_memo: dict = {}  # `_functions_of`'s answers
        self.at_bos: dict[Value, np.ndarray] = {}
        # a table of steps: (input, points, rows, its number of MLPs)
        self.tables: dict[Value, tuple] = {}
        # SequenceMaps kept tables of their value pairs (`_sum_read_apart`, `translate`'s
        # retry), and those read as a number or through a sum instead (unique ids)
        self.tabled_sums: set = set(tabled_sums)
        self.numbered_sums: set = set()
        self.table_errors: dict[Value, float] = {}  # a table's float32 error (`Plan.error`)
        self.errors: dict[Value, float] = {}  # an Encoded value's float32 error (`Encoded.error`)
        self.seen = 0
        # whether narrow reads of the token one-hot read columns of the token embedding beside
        # it (`_token_columns`), grown as the reads ask: their unit columns (the one-hot's rows
        # @ them) and a column's index by its bytes
        self.token_features = token_features
        self.feature_columns: list[np.ndarray] = []
        self.feature_index: dict[bytes, int] = {}
        # whether a head's value reads the indices one-hot through a position table of
        # fewer columns (`_narrow_read`), and whether one did
        self.narrow_indices = narrow_indices
        self.narrowed_indices = False
        self.squares: Value | None = None  # `_index_squares`
        # answers about the program's functions over its value sets (`_analysis`), which a
        # later translation of the same program (`translate`) asks again
        self.analyses: dict = {} if analyses is None else analyses

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
        from tw_frontends.rasp.validate import validate

        validate(program, self.vocab, self.max_seq_len, self.causal)  # (every static rule)
        with tw.Graph("main", verify=False) as g:  # `translate` verifies the one it keeps
            self.graph = g
            self._sources()
            self.readers = _readers(program)
            self.program = program
            out = self.sop(program)
            if out.numerical:
                out = self._refolded(out)
                self.check_output(program, out)
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
        value = self._steps(src, points, product, self._output_tolerance(product) / 2)
        self._erase(out.value.owner)
        return self.encoded(value, True, out._space, out.maybe_none, noisy=out.noisy,
                            error=self.table_errors[value], magnitude=out._magnitude)

    def _output_tolerance(self, rows: np.ndarray) -> float:
        """What a table giving the program's numerical output may stray: its default (CLEAN
        of its largest row), at most `atol`."""
        return min(CLEAN * max(1.0, float(np.abs(rows).max())), self.atol)

    def check_output(self, expr, out: Encoded) -> None:
        """A numerical output within `atol` of RASP's value, else refused: float32 holds each
        of its values to half an ulp, and computes it to `out.error` (a softmax's mean to
        `mean_noise` of the magnitudes it averaged, however small the result)."""
        if out.magnitude * 2.0 ** -24 + out.error <= self.atol:
            return  # (half an ulp of the largest value: no need to list the values)
        values = np.array([float(v) for v in out.space or () if _is_number(v)])
        with np.errstate(over="ignore"):
            held = float(np.max(np.abs(values - values.astype(np.float32)), initial=0.0))
        bound = held + out.error
        if bound > self.atol:
            raise RaspError(f"{_label(expr)}: a numerical output (values up to "
                            f"{out.magnitude:.3g}) that float32 computes only to about "
                            f"{bound:.2g}, beyond atol={self.atol:g}: "
                            "compile with a larger atol (compile_rasp_to_model(..., atol=...), "
                            "tw-rasp --atol) or scale the values down")

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

    def _times(self, v: Value, m: np.ndarray, tolerance: float) -> Value | None:
        """v @ m, made by v's own op with its output matrix times m (v is then dead code),
        where nothing else reads v and that op is a table of steps (planned again for the new
        rows, within `tolerance`, no deeper), a linear, a ReLU MLP or an attention head; else
        None (a separate `tw.linear` would cost a sublayer)."""
        op = v.owner
        if v.uses:
            return None
        if v in self.tables:
            x, points, rows, depth = self.tables[v]
            rows, tolerance = rows @ m, np.full(m.shape[1], tolerance / 4)
            affine = _affine(points, rows)
            if affine is not None:  # (a one-hot of a number, read as a code of it)
                return tw.linear(x, [[affine[0]]], [affine[1]])
            line = interpolation_mlp(points, rows)
            if _within(points, rows, line, tolerance):
                return tw.mlp(x, *line)
            plan = step_mlps(points, rows, tolerance)
            return emit_steps(x, rows, plan) if len(plan) <= depth else None
        if isinstance(op, LinearOp):
            x, w, b = _through_linear(v)
            return tw.linear(x, w @ m, b @ m)
        if isinstance(op, PosTableOp):
            return tw.pos_table(to_numpy(op.table, np.float64) @ m)
        if isinstance(op, MlpOp) and op.act is None and op.up is None:
            b2 = np.zeros(width_of(v)) if op.b2 is None else to_numpy(op.b2, np.float64)
            return tw.mlp(op.x, to_numpy(op.w1, np.float64),
                          None if op.b1 is None else to_numpy(op.b1, np.float64),
                          to_numpy(op.w2, np.float64) @ m, b2 @ m)
        if isinstance(op, AttnOp) and op.rope_base is None:
            # the head reads what its output needs: wv wo m, through narrow token columns
            value, wv = self._narrow_value(op.value, to_numpy(op.wv, np.float64)
                                           @ to_numpy(op.wo, np.float64) @ m)
            return tw.attn(op.query, op.key, value, to_numpy(op.wq, np.float64),
                           to_numpy(op.wk, np.float64), wv, np.eye(m.shape[1]),
                           mask="causal" if op.mask is None else op.mask.data)
        return None

    def _narrow_value(self, value: Value, wv: np.ndarray) -> tuple[Value, np.ndarray]:
        """(value, wv) with the value concat's first part read narrower (`_narrow_read`)."""
        concat = value.owner
        parts = list(concat.operands) if isinstance(concat, ConcatOp) else [value]
        n = width_of(parts[0])
        x, w = self._narrow_read(parts[0], wv[:n])
        if x is parts[0]:
            return value, wv
        return tw.concat(x, *parts[1:]), np.vstack([w, wv[n:]])

    def _narrow_read(self, x: Value, mat: np.ndarray) -> tuple[Value, np.ndarray]:
        """(x, mat), or narrower columns and their matrix where x is the token or the indices
        one-hot and mat reads fewer columns than it: the token embedding's feature columns
        (`_token_columns`), a position table of mat's rows (free)."""
        if mat.shape[1] >= width_of(x):
            return x, mat
        if x is self.tokens_onehot:
            return self._token_columns(mat) or (x, mat)
        if x is self.indices_onehot and self.narrow_indices:
            self.narrowed_indices = True
            return self._position_columns(mat), np.eye(mat.shape[1])
        return x, mat

    def _index_columns(self, mat: np.ndarray, tolerance=None) -> tuple:
        """`_from_source`'s read of indices one-hot @ mat: its columns that are lines or
        parabolas in the index (`_parabola`, within `tolerance`) from the machine's position
        and constant columns and one shared table of the index squared (`_index_squares`),
        the others from a position table of their own."""
        cols = mat.shape[1]
        tolerances = [None] * cols if tolerance is None else \
            np.broadcast_to(tolerance, (cols,)).tolist()
        fits = [_parabola(mat[:, j], tol) for j, tol in enumerate(tolerances)]
        rest = [j for j, fit in enumerate(fits) if fit is None]
        if len(rest) == cols:
            return self._position_columns(mat), np.eye(cols), np.zeros(cols), np.zeros(cols)
        # a i^2 + b i + c at index i = p - 1: a (p - 1)^2 + b p + (c - b), exact at BOS too
        parts = [tw.pos_encoding(1, self.max_seq_len + 1), self.one]
        squares = any(fit is not None and fit[0] != 0 for fit in fits)
        if squares:
            parts.append(self._index_squares())
        w = np.zeros((len(parts) + len(rest), cols))
        at_bos = np.zeros(cols)
        for j, fit in enumerate(fits):
            if fit is not None:
                a, b, c = fit
                w[0, j], w[1, j] = b, c - b
                if squares:
                    w[2, j] = a
                at_bos[j] = a + c - b
        if rest:
            parts.append(self._position_columns(mat[:, rest]))
            w[len(parts) - 1 + np.arange(len(rest)), rest] = 1.0
        return tw.concat(*parts), w, np.zeros(cols), at_bos

    def _index_squares(self) -> Value:
        """One position table of (p - 1)^2 (the index squared; 1 at BOS), shared by every
        read of the indices that is a parabola in the index (a nearest-key head's k^2 and
        its queries' lift)."""
        if self.squares is None or self.squares.owner not in self.graph.ops:
            p = np.arange(self.max_seq_len + 1, dtype=float)
            self.squares = tw.pos_table(((p - 1) ** 2)[:, None])
        return self.squares

    def _position_columns(self, mat: np.ndarray) -> Value:
        """indices one-hot @ mat, as a position table (BOS's row zero, as the one-hot's)."""
        table = np.zeros((self.max_seq_len + 1, mat.shape[1]))
        table[1:] = mat  # position p holds index p - 1
        return tw.pos_table(table)

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
                raise _FeaturesNoNarrower()
            if not op.results or op.results[0] in self.at_bos:  # (a feature slice's zeros)
                continue
            args = [self.at_bos[o] for o in op.operands]
            self.at_bos[op.results[0]] = evaluate_op(op, args, 1, self.feeds)
        self.seen = len(self.graph.ops)

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

    def _map(self, expr) -> Encoded:
        if self._sum_read_apart(expr):
            self.tabled_sums.add(expr.inner.unique_id)
        fused = self._fused(expr)
        if fused is not None:
            return fused
        inner = self.sop(expr.inner)
        if inner.space is None:
            raise RaspError(f"{_label(expr)}: its input's value set is unknown (too many means "
                            "to enumerate), so the map cannot be tabled")
        if not inner.space:  # RASP's Map of a None is None
            return self.nowhere(rasp.is_numerical(expr))
        if inner.categories is not None:  # a number read off a one-hot: a map of that
            onehot, values = inner.categories
            return self._table(expr, onehot, [_NONE if v is _NONE else _apply(expr.f, v)
                                              for v in values])
        outs = [_apply(expr.f, x) for x in inner.space]
        return self._table(expr, inner, outs)

    def _fused(self, expr) -> Encoded | None:
        """Map(f, S), S a SequenceMap that nothing else reads, as one table of f over the
        value tuples of what S reads (None where that does not apply: S is translated, then
        f's table of its one-hot):
        * where S reads such SequenceMaps that give a value per pair (tuples:
          make_nary_sequencemap's) or more values than a one-hot may hold: they are read
          through, one MLP rather than one a level, and no one-hot of tuples between;
        * where S reads none but gives more values than a one-hot may hold: its pair table
          goes straight to f's values."""
        inner = expr.inner
        if not self._fusable(inner) or _root(inner, self.roots) is not inner:
            return None  # (a SequenceMap of one root is a table over that root's values)
        leaves, compute, values, pairs = self._chain(inner)
        if values is None:
            return None
        if len(leaves) == 2 and leaves[0] is inner.fst and leaves[1] is inner.snd:
            if pairs <= MAX_TABLE or len(values()) <= MAX_TABLE:  # S's one-hot is fine
                return None
            return self.sop(self._analysis("fused", expr, lambda: _composed(expr, inner)))
        parts = [self.as_categorical(self.sop(leaf), leaf) for leaf in leaves]
        if not all(p.space for p in parts):
            return self.nowhere(rasp.is_numerical(expr))

        def f(*values):
            v = compute(values)
            return None if v is None else expr.f(v)
        outs = [_apply(f, *c) for c in itertools.product(*[p.space for p in parts])]
        if len(outs) > MAX_TABLE:
            return self._combo_table(expr, parts, outs)
        return self._table(expr, self.joint(parts, expr)[0], outs)

    def _rooted(self, expr, pairs: int | None = None) -> Encoded | None:
        """SequenceMap `expr` as a table over the values of the one SOp both its inputs are
        Maps and SequenceMaps of (`_root`): f(i, i + 1) over indices is a function of the
        index, n values, not n^2 pairs of one; a categorical root's table is a linear map of
        its one-hot. None where its inputs have no common root, or the root is numerical
        and has more values than the `pairs` of the inputs' value sets (None: not known yet;
        a table of steps over a number costs a neuron a value) or than a one-hot may hold
        (the pair table's limit: a sum of the two may still be read, `_through_sum`)."""
        root = _root(expr, self.roots)
        if root is expr:
            return None
        enc = self.sop(root)
        if enc.space is None or (enc.numerical and (
                pairs is None or len(enc.space) > min(pairs, MAX_TABLE))):
            return None
        if not enc.space:
            return self.nowhere(rasp.is_numerical(expr))
        return self._table(expr, enc, [_at_root(expr, root, r) for r in enc.space])

    def _over_leaves(self, expr, pairs: int) -> Encoded | None:
        """SequenceMap `expr` whose inputs are functions of the same two SOps (`_functions_of`:
        f(g(t, i), h(t, i))) as a table over the pairs of those two's values, where they are
        fewer than the `pairs` of its inputs' values; else None."""
        leaves = _functions_of(expr, self.leaf_memo)
        if len(leaves) != 2 or {_leaf_key(expr.fst), _leaf_key(expr.snd)} == set(leaves):
            return None  # (its inputs are the leaves: the plain pair table)
        keys, sops = list(leaves), list(leaves.values())
        spaces = [self.sop(s).space for s in sops]
        if not all(spaces) or len(set(spaces[0])) * len(set(spaces[1])) >= pairs:
            return None  # (before tabling them: a mean's values are many)
        parts = [self.as_categorical(self.sop(s), s) for s in sops]
        if not all(p.space for p in parts):
            return None
        outs = [_at_leaves(expr, {keys[0]: x, keys[1]: y}, {})
                for x, y in itertools.product(parts[0].space, parts[1].space)]
        if len(outs) > MAX_TABLE:
            return self._combo_table(expr, parts, outs)
        return self._table(expr, self.joint(parts, expr)[0], outs)

    def _joint_of(self, sops: list, selector) -> tuple[Encoded, list[tuple]]:
        """The one-hot over the value tuples of a selector's keys (or queries) `sops`: where
        they are all functions of one categorical root (`_root`), a table of the tuples the
        root's values give (Select(indices, ...) & Select(indices - 1, ...): n tuples, a
        linear map of the indices' one-hot, where `joint` would take n^2 of them, a neuron
        each; the sops themselves are not translated); else `joint`."""
        roots = {id(r): r for r in (_root_or_constant(s, self.roots) for s in sops)
                 if r is not None}
        if len(sops) > 1 and len(roots) == 1:
            root = next(iter(roots.values()))
            enc = self.sop(root)
            outs = [_tuple_at_root(sops, root, r) for r in enc.space or ()]
            tuples = _ordered(o for o in outs if o is not _NONE)
            if not enc.numerical and tuples:
                self._check_size(selector, len(tuples), "value combinations")
                rows = _one_hot_rows(outs, tuples, len(tuples))
                none = enc.maybe_none or any(o is _NONE for o in outs)
                return self.encoded(tw.linear(enc.value, rows), False, tuples, none,
                                    noisy=enc.noisy, error=_read_error(enc.error, rows)), tuples
        parts = [self.as_categorical(self.sop(s), s) for s in sops]
        for s, part in zip(sops, parts):
            if not part.space:
                raise RaspError(f"{_label(s)}: None at every position, read by a selector "
                                "(RASP's Select raises on a None key or query)")
        return self.joint(parts, selector)

    def _fusable(self, s) -> bool:
        """Whether s is a SequenceMap of two different SOps that only one expression reads,
        and no linear map of two numbers (cheaper than any table of them)."""
        return type(s) is rasp.SequenceMap and self.readers[id(s)] == 1 and \
            s.fst is not s.snd and not self._is_linear(s)

    def _sum_read_apart(self, expr) -> bool:
        """Whether Map `expr` reads a numerical SequenceMap S of numbers (not yet translated)
        whose value set holds values float32 cannot tell apart that the map sends to
        different results (RASP's -0.5000000000000001 and -0.5 from two value pairs, rounded
        to -1 and 0), or too many steps: S is then a table of its value pairs, not a number
        (the linear map `_linear_of`, a table through its sum `_through_sum`): the map reads
        each pair's own value, exactly."""
        inner = expr.inner
        if type(inner) is not rasp.SequenceMap or inner.unique_id in self.memo or \
                not rasp.is_numerical(inner) or inner.fst is inner.snd or \
                not (rasp.is_numerical(inner.fst) or rasp.is_numerical(inner.snd)):
            return False
        if self._one_mean_of_sum(inner):
            space = self._mean_sum_space(inner)
        else:
            space = _linear_space(self.sop(inner.fst).space, self.sop(inner.snd).space, inner.f)
        if space is None:
            return True
        try:
            outs = [_apply(expr.f, v) for v in space]
        except _Unsteady:
            return True
        if any(o is _NONE for o in outs) or \
                sum(a != b for a, b in zip(outs, outs[1:])) > MAX_TABLE:
            return True
        return not _readable(dict(zip((float(v) for v in space), outs)), 0.0,
                             rasp.is_numerical(expr))

    def _is_linear(self, s) -> bool:
        """Whether SequenceMap s is translated as a linear map of two numbers: one mean of a
        sum (`_mean_of_sum`) or `_linear_of` (its inputs translated: they are read either
        way)."""
        if not rasp.is_numerical(s) or s.unique_id in self.tabled_sums or \
                not (rasp.is_numerical(s.fst) or rasp.is_numerical(s.snd)):
            return False
        if self._one_mean_of_sum(s):
            return self._sum_of_means(s) is not None
        return self._linear_of(s, self.sop(s.fst), self.sop(s.snd)) is not None

    def _chain(self, s) -> tuple[list, Callable, Callable | None, int]:
        """(leaves, compute, values, pairs) of SequenceMap s: the distinct SOps it reads,
        through every input that `_fusable` allows and that gives a value per pair or more
        values than a one-hot may hold (the others translated, as leaves);
        compute(leaf values) -> s's value (None where an input is None, as RASP gives);
        values() -> s's value set, computed when first asked (None where it is too large to
        enumerate); the value pairs it reads."""
        leaves: list = []
        with tw.annotate(str(s.label)):  # (what translating s would do first)
            reads = [self._read_through(c, leaves) for c in (s.fst, s.snd)]
        if any(space is None for _, space in reads):
            return leaves, None, None, 0
        pairs = len(reads[0][1]) * len(reads[1][1])
        if pairs > MAX_PAIRS:
            return leaves, None, None, pairs
        (first, xs), (second, ys) = reads

        def values() -> set:
            return self._analysis(
                "values", s, lambda: {_apply(s.f, x, y) for x in xs for y in ys} - {_NONE})

        def compute(vals):
            a, b = first(vals), second(vals)
            return None if a is None or b is None else s.f(a, b)
        return leaves, compute, values, pairs

    def _read_through(self, c, leaves: list) -> tuple[Callable, list | None]:
        """(compute, values) of input c of a fused SequenceMap: read through (its leaves
        added to `leaves`) where `_chain` allows, else a leaf (translated)."""
        if self._fusable(c):
            inner_leaves, compute, values, pairs = self._chain(c)
            if values is not None and (len(values()) == pairs or len(values()) > MAX_TABLE):
                at = [_leaf_slot(leaves, leaf) for leaf in inner_leaves]
                return (lambda vals: compute([vals[i] for i in at])), values()
        enc = self.sop(c)
        i = _leaf_slot(leaves, c)
        return (lambda vals: vals[i]), enc.space

    def _rows(self, expr, outs: list) -> tuple[list, np.ndarray]:
        """(value set, a row per result) of a table giving `outs` (_NONE: None): its number,
        or its one-hot."""
        space = _ordered(o for o in outs if o is not _NONE)
        if rasp.is_numerical(expr):
            return space, np.array([[self._number(expr, o)] if o is not _NONE else [0.0]
                                    for o in outs]).reshape(-1, 1)
        self._check_size(expr, len(space), "output values")
        return space, _one_hot_rows(outs, space, max(1, len(space)))

    def _table(self, expr, inner: Encoded, outs: list) -> Encoded:
        """Map the input's value set through `outs` (one result per value; _NONE where the
        function fails or gives None)."""
        numerical = rasp.is_numerical(expr)
        space, rows = self._rows(expr, outs)
        none = inner.maybe_none or any(o is _NONE for o in outs)
        if not inner.numerical:
            # a categorical map of the tokens reads the embedding's columns for it, where it
            # has them (a number read off the one-hot is left to its readers' narrow reads)
            x, m = (self._token_columns(rows) if inner.value is self.tokens_onehot and
                    not numerical else None) or (inner.value, rows)
            enc = self.encoded(tw.linear(x, m), numerical, space, none,
                               noisy=inner.noisy, error=_read_error(inner.error, rows))
            if numerical:
                enc.categories = (inner, outs)
            return enc
        value, gain, error = self._numeric_table(expr, inner, rows, numerical)
        return self.encoded(value, numerical, space, none, noisy=inner.noisy,
                            error=gain * inner.error + error)

    def _numeric_table(self, expr, inner: Encoded, rows: np.ndarray,
                       numerical: bool) -> tuple[Value, float, float]:
        """(value, gain, error): rows[k] at the input's k-th possible value: a literal for one
        value, else a table of steps (`steps`) through them, exact at each and a quarter gap
        around it (gain 0: an input's error stays behind; error: the table's own), or a line
        (gain: its slope). The program's own numerical output is held to `atol`."""
        points, rows = _merge_float32(expr, [float(x) for x in inner.space], rows)
        if points.size == 1 or not np.any(rows != rows[0]):  # the map is a constant
            return tw.literal(rows[0]), 0.0, 0.0
        line = _affine(points, rows) if numerical else None
        if line is not None:  # a number out, on a line through every point
            return (tw.linear(inner.value, [[line[0]]], [line[1]]), abs(float(line[0])),
                    2.0 ** -23 * float(np.abs(rows).max()))
        self._check_size(expr, int(np.count_nonzero(np.any(rows[1:] != rows[:-1], axis=1))),
                         "steps")
        if inner.error:
            _check_gaps(expr, points, rows, inner.error)
        tolerance = self._output_tolerance(rows) if numerical and expr is self.program else None
        line = None if tolerance is None else self._output_line(inner, points, rows)
        if line is not None:
            return line
        out = self._steps(inner.value, points, rows, tolerance)
        return out, 0.0, self.table_errors[out]

    def _output_line(self, inner: Encoded, points: np.ndarray,
                     rows: np.ndarray) -> tuple[Value, float, float] | None:
        """The program's numerical output as a line through every point (`interpolation_mlp`,
        one MLP, a neuron a change of slope) where float32 keeps it within `atol`: its own
        rounding at the points, plus the steepest slope times the input's error (a line
        passes that on where steps would snap it back; the output need not snap, only stay
        within atol). (value, gain, error) as `_numeric_table`'s; None where it does not fit
        (x^2 of a prefix mean of 1..3 at length 30: 556 neurons in one layer, d 4, where steps
        took 1,116 in two, d 560)."""
        gain = float(np.abs(np.diff(rows[:, 0]) / np.diff(points)).max())
        budget = self.atol - gain * inner.error - 2.0 ** -24 * float(np.abs(rows).max())
        if budget <= 0:
            return None
        mlp = interpolation_mlp(points, rows)
        error = _measured(points, rows, mlp, budget, perturb=0.0)
        if error is None:
            return None
        return tw.mlp(inner.value, *mlp), gain, error

    def _steps(self, x: Value, points: np.ndarray, rows: np.ndarray, tolerance=None) -> Value:
        """`steps`, remembered (a head may read some columns of it from x instead: `_read`)."""
        plan = step_mlps(points, rows, tolerance)
        out = emit_steps(x, rows, plan)
        self.table_errors[out] = plan.error
        self.tables[out] = (x, points, rows, len(plan))
        return out

    def as_categorical(self, enc: Encoded, expr) -> Encoded:
        """A numerical value as a one-hot over its value set: a linear map of the one-hot it
        was read from (a numerical Map of a categorical SOp: no MLP, and None stays None),
        else a table (exact at each value)."""
        if not enc.numerical:
            return enc
        if enc.space is None:
            raise RaspError(f"{_label(expr)}: a categorical use of a numerical value whose value "
                            "set is unknown (too many means to enumerate)")
        space = _ordered(enc.space)
        if not space:
            return self.nowhere(False)
        if enc.categories is None:  # (a one-hot it was read from tells every value apart)
            space = _clustered(space)
        self._check_size(expr, len(space), "values")
        if enc.categories is not None:  # the one-hot it was read from, columns merged
            inner, outs = enc.categories
            rows = _one_hot_rows(outs, space, len(space))
            return self.encoded(tw.linear(inner.value, rows), False, space, enc.maybe_none,
                                noisy=inner.noisy, error=_read_error(inner.error, rows))
        rows = np.eye(len(space))
        inner = Encoded(enc.value, True, space, enc.bos, noisy=enc.noisy, error=enc.error,
                        _magnitude=enc._magnitude)
        value, _, error = self._numeric_table(expr, inner, rows, False)
        out = self.encoded(value, False, space, noisy=enc.noisy, error=error)
        if space == _ordered(enc.space) and not enc.maybe_none:
            out.number = enc
        return out

    def nowhere(self, numerical: bool) -> Encoded:
        """An SOp that is None at every position (its value set is empty): one zero column,
        as a table of no values has."""
        return self.encoded(tw.literal(np.zeros(1)), numerical, [], True, noisy=False)

    def as_numerical(self, enc: Encoded, expr) -> Encoded:
        """A categorical value as its number (one-hot @ values)."""
        if enc.numerical:
            return enc
        if not enc.space:
            return self.nowhere(True)
        if enc.number is not None:  # (the number it was tabled from)
            return enc.number
        rows = np.array([[self._number(expr, v)] for v in enc.space]).reshape(-1, 1)
        x, w, bias, _ = self._read(enc, rows)
        # (read from the one-hot's own table, or from a table beside it: that table's error)
        error = _read_error(self.table_errors[x], w) if x in self.table_errors else \
            _read_error(enc.error, rows)
        return self.encoded(tw.linear(x, w, bias), True, list(enc.space), enc.maybe_none,
                            noisy=enc.noisy, error=error)

    def _sequence_map(self, expr) -> Encoded:
        if rasp.is_numerical(expr):
            combined = self._mean_of_sum(expr)
            if combined is not None:
                return combined
        # (a LinearSequenceMap of numbers stays a linear map: heads read its number)
        linear = isinstance(expr, rasp.LinearSequenceMap)
        rooted = None if linear else self._rooted(expr)
        if rooted is not None:
            return rooted
        fst, snd = self.sop(expr.fst), self.sop(expr.snd)
        affine = self._linear_of(expr, fst, snd)
        if affine is not None:
            a, b, c, _ = affine
            if not linear:
                self.numbered_sums.add(expr.unique_id)
            # (a categorical input of numbers is read as its number: `m + indices`)
            fst, snd = self.as_numerical(fst, expr.fst), self.as_numerical(snd, expr.snd)
            space = lambda: self._means_of_sum(expr) or \
                _linear_space(fst.space, snd.space, expr.f)  # noqa: E731
            none, noisy = fst.maybe_none or snd.maybe_none, fst.noisy or snd.noisy
            bounds = dict(error=abs(a) * fst.error + abs(b) * snd.error,
                          magnitude=abs(a) * fst.magnitude + abs(b) * snd.magnitude + abs(c))
            same = expr.fst.unique_id == expr.snd.unique_id
            value = tw.linear(fst.value, [[a + b]], [c]) if same else \
                tw.linear(tw.concat(fst.value, snd.value), [[a], [b]], [c])
            # both read off one one-hot: the sum is too, one value a column
            one_hot = fst.categories is not None and snd.categories is not None and \
                fst.categories[0].value is snd.categories[0].value
            if not one_hot:
                return self.encoded(value, True, space, none, noisy=noisy, **bounds)
            inner = fst.categories[0]
            outs = [_NONE if _NONE in (x, y) else _apply(expr.f, x, y)
                    for x, y in zip(fst.categories[1], snd.categories[1])]
            enc = self.encoded(value, True, _ordered(o for o in outs if o is not _NONE),
                               none or _NONE in outs, noisy=noisy, **bounds)
            enc.categories = (inner, outs)
            return enc
        if expr.fst.unique_id == expr.snd.unique_id:  # one input: a Map of f(x, x)
            cat = self.as_categorical(fst, expr)
            return self._table(expr, cat, [_apply(lambda x: expr.f(x, x), v) for v in cat.space])
        pairs = len(fst.space or ()) * len(snd.space or ())
        rooted = self._rooted(expr, pairs)
        if rooted is not None:  # (a numerical root with fewer values than the pairs)
            return rooted
        through_sum = None if expr.unique_id in self.tabled_sums else \
            self._through_sum(expr, fst, snd)
        if through_sum is not None:
            self.numbered_sums.add(expr.unique_id)
            return through_sum
        over_leaves = self._over_leaves(expr, pairs)
        if over_leaves is not None:
            return over_leaves
        a, b = self.as_categorical(fst, expr.fst), self.as_categorical(snd, expr.snd)
        if not a.space or not b.space:  # RASP's SequenceMap of a None is None
            return self.nowhere(rasp.is_numerical(expr))
        self._check_pairs(expr, len(a.space) * len(b.space), "value pairs")
        outs = [_apply(expr.f, x, y) for x, y in itertools.product(a.space, b.space)]
        if len(outs) > MAX_TABLE:
            return self._combo_table(expr, [a, b], outs)
        return self._table(expr, self.joint([a, b], expr)[0], outs)

    def _linear_of(self, expr, fst: Encoded, snd: Encoded) -> tuple | None:
        """(a, b, c, numpy_exact) where SequenceMap `expr` of two numbers is a x + b y + c: a
        LinearSequenceMap, or a SequenceMap whose f is affine over every pair of their values
        (`_affine_fit`: `lambda x, y: x - y` over two means is a linear map, not a table of
        their pairs); None where it is not, or an input may be None (no number carries it)."""
        if not rasp.is_numerical(expr) or fst.maybe_none or snd.maybe_none or \
                expr.unique_id in self.tabled_sums:
            return None
        if isinstance(expr, rasp.LinearSequenceMap):
            return (float(expr.fst_fac), float(expr.snd_fac), 0.0, True) \
                if fst.numerical and snd.numerical else None
        if not (fst.numerical or snd.numerical) or expr.fst.unique_id == expr.snd.unique_id:
            return None  # (one-hots: a table of them; one input: a Map of f(x, x))
        return self._analysis("affine", expr, lambda: _affine_fit(expr.f, fst.space, snd.space))

    def _mean_of_sum(self, expr) -> Encoded | None:
        """An affine SequenceMap a x + b y + c of two numerical means over one selector that
        nothing else reads (make_pair_balance's opens - closes) as one mean, of a u + b v + c
        (u, v what x and y average): one head, not two and a sum of them; None where it
        does not apply."""
        x, y = expr.fst, expr.snd
        if not self._one_mean_of_sum(expr) or expr.unique_id in self.tabled_sums:
            return None
        us, vs = (self.as_numerical(self.sop(s.sop), s.sop) for s in (x, y))
        if us.maybe_none or vs.maybe_none or not us.space or not vs.space or \
                len(us.space) * len(vs.space) > MAX_MEANS:
            return None  # (None is no number to sum)
        affine = self._sum_of_means(expr)
        if affine is None:
            return None
        if not isinstance(expr, rasp.LinearSequenceMap):
            self.numbered_sums.add(expr.unique_id)
        a, b, c, _ = affine
        (x1, m1, c1), (x2, m2, c2) = _through_linear(us.value), _through_linear(vs.value)
        if x1 is x2:  # (one linear of their common input: the head reads through it)
            value = tw.linear(x1, a * m1 + b * m2, a * c1 + b * c2 + c)
        else:
            value = tw.linear(tw.concat(x1, x2), np.vstack([a * m1, b * m2]),
                              a * c1 + b * c2 + c)
        src = self.encoded(value, True, lambda: _ordered({a * u + b * v + c for u in us.space
                                                          for v in vs.space}),
                           noisy=us.noisy or vs.noisy,
                           error=abs(a) * us.error + abs(b) * vs.error,
                           magnitude=abs(a) * us.magnitude + abs(b) * vs.magnitude + abs(c))
        return self._mean(expr, x.selector, src, _call(expr.f, [self._default(x),
                                                                self._default(y)]),
                          True, None, space=lambda: self._mean_sum_space(expr))

    def _one_mean_of_sum(self, expr) -> bool:
        """Whether SequenceMap `expr` reads two numerical means over one selector that
        nothing else reads (`_same_means`): one head may average the sum (`_mean_of_sum`)."""
        return self._same_means(expr) and self.readers[id(expr.fst)] == 1 and \
            self.readers[id(expr.snd)] == 1

    def _mean_sum_space(self, expr) -> list | None:
        """The value set of such a sum: the means of the same number of keys where f rounds
        as numpy's (`_means_of_sum`), else f over every pair of the two means' values."""
        return self._means_of_sum(expr) or _linear_space(*self._spaces_of_means(expr), expr.f)

    def _spaces_of_means(self, expr) -> list:
        """The value sets of the two means a SequenceMap reads (`_mean`'s, untranslated)."""
        spaces = [self._mean_values(s.selector, self.as_numerical(self.sop(s.sop), s.sop).space,
                                    self._default(s)) for s in (expr.fst, expr.snd)]
        return [sp() if callable(sp) else sp for sp in spaces]

    def _sum_of_means(self, expr) -> tuple | None:
        """(a, b, c, numpy_exact) where `expr` (two numerical means over one selector) is
        a x + b y + c over every pair of their values (`_linear_of`), else None."""
        if isinstance(expr, rasp.LinearSequenceMap):
            return float(expr.fst_fac), float(expr.snd_fac), 0.0, True
        spaces = self._spaces_of_means(expr)
        if any(sp is None for sp in spaces):
            return None
        return self._analysis("affine means", expr, lambda: _affine_fit(expr.f, *spaces))

    def _same_means(self, expr) -> bool:
        """Whether a SequenceMap reads two numerical means over one selector
        (`_same_selector`): at every position both average the same keys."""
        x, y = expr.fst, expr.snd
        return all(isinstance(s, rasp.Aggregate) and rasp.is_numerical(s) for s in (x, y)) \
            and _same_selector(x.selector, y.selector)

    def _default(self, aggregate) -> float:
        return self._number(aggregate, 0 if aggregate.default is None else aggregate.default)

    def _means_of_sum(self, expr) -> list | None:
        """The value set of an affine SequenceMap f(x, y) = a x + b y + c of two numerical
        means over one selector, where f rounds as numpy's (a x + b y) + c (`_affine_fit`'s
        numpy_exact): f of the means of the same number m of keys, each mean as RASP
        gives it (the sum's exact quotient, rounded once; f in float64 as RASP computes it),
        some n^3 pairs where x's and y's value sets make some n^4 (a million at length 50);
        None where it does not apply, or there are more than MAX_MEAN_PAIRS pairs or
        MAX_MEANS values."""
        if not self._same_means(expr):
            return None
        x, y = expr.fst, expr.snd
        us, vs = (self.sop(s.sop).space for s in (x, y))  # (numbers: checked when translated)
        affine = self._sum_of_means(expr) if us and vs else None
        if affine is None or not affine[3]:
            return None  # (f gives other roundings than numpy's: the pairs' own values)
        a, b, c, _ = affine  # (f is a x + b y + c: as numpy's)
        out = [np.array([_call(expr.f, [self._default(x), self._default(y)])])]
        (dx, x_sums), (dy, y_sums) = _sums(us, self.max_seq_len), _sums(vs, self.max_seq_len)
        pairs = distinct = 0
        for m, (xs, ys) in enumerate(zip(x_sums, y_sums), start=1):
            if xs is None or ys is None:
                return None
            pairs += len(xs) * len(ys)
            if pairs > MAX_MEAN_PAIRS:
                return None
            mx = np.array([sx / (m * dx) for sx in xs])
            my = np.array([sy / (m * dy) for sy in ys])
            out.append(np.unique(a * mx[:, None] + b * my[None, :] + c))
            distinct += out[-1].size
            if distinct > MAX_MEANS:
                return None
        sums = np.unique(np.concatenate(out)).tolist()
        # (RASP's means may sit a little off the quotients where their sums round)
        rx, ry = (_mean_radius(values, self.max_seq_len) for values in (us, vs))
        if rx is None and ry is None:
            return sums
        off = abs(a) * max((rx(q) for q in us), default=0.0) if rx else 0.0
        off += abs(b) * max((ry(q) for q in vs), default=0.0) if ry else 0.0
        return [_near(v, off + ULP64 * abs(v)) for v in sums]

    def _through_sum(self, expr, fst: Encoded, snd: Encoded) -> Encoded | None:
        """f(x, y) as a table of one number s = a x + b y, where f depends on s alone over
        every value pair (x - y, x + y, an affine f itself) and that table is smaller than
        the pair table, or an input is a one-hot tabled from a number (`sooner`): |X| |Y|
        neurons become a linear map and two neurons a step of s (reverse's `length -
        indices`: 2,550 neurons at length 50 become 198). None where no
        such s is cheaper, or an input may be None (a number cannot carry it)."""
        if fst.maybe_none or snd.maybe_none or fst.space is None or snd.space is None:
            return None
        if len(fst.space) * len(snd.space) > MAX_SUM_PAIRS:
            return None  # (the pair table is refused for its size)
        if not all(_is_number(v) for v in [*fst.space, *snd.space]):
            return None

        # an input tabled from a number (`Encoded.number`) is read as that number: the pair
        # table would wait a sublayer for its one-hot
        sooner = fst.number is not None or snd.number is not None

        def cheaper() -> list:  # [(neurons, a, b, {s: f})], the cheapest first
            pairs = list(itertools.product(fst.space, snd.space))
            outs = [_apply(expr.f, x, y) for x, y in pairs]
            if any(o is _NONE for o in outs):
                return []
            found = []
            sums = _Sums(pairs, outs)
            for a, b in _sum_weights(pairs, outs):
                table = sums.table(a, b)
                if table is None:
                    continue
                cost = _steps_cost(table, rasp.is_numerical(expr))
                if cost < len(pairs) or sooner:
                    found.append((cost, a, b, table))
            return sorted(found, key=lambda option: option[0])  # (stable: the first on a tie)
        options = self._analysis(f"through a sum {sooner}", expr, cheaper)
        if not options:
            return None
        x, y = self.as_numerical(fst, expr.fst), self.as_numerical(snd, expr.snd)
        # the first whose sums float32 tells apart (make_sort's keys x + i / 5: RASP's
        # -3 + 6/5 and -4 + 11/5 are two categories an ulp apart, which only the pairs' table
        # tells apart)
        for _, a, b, table in options:
            if _readable(table, abs(a) * x.error + abs(b) * y.error, rasp.is_numerical(expr)):
                break
        else:
            return None
        s = tw.linear(tw.concat(x.value, y.value), [[a], [b]])
        s_space = list(table)
        s_enc = self.encoded(s, True, s_space, noisy=x.noisy or y.noisy,
                             error=abs(a) * x.error + abs(b) * y.error,
                             magnitude=abs(a) * x.magnitude + abs(b) * y.magnitude)
        out = self._table(expr, s_enc, [table[v] for v in s_space])
        if expr is self.program and out.numerical:
            try:  # (the pairs' table reads each pair's value off its one-hot, exactly)
                self.check_output(expr, out)
            except RaspError:
                return None  # (s and its table are dead code)
        return out

    def _combo_table(self, expr, parts: list[Encoded], outs: list) -> Encoded:
        """`outs` (one result per tuple of the parts' values, in product order) over more
        tuples than a one-hot may hold: one MLP, a neuron per tuple (relu(the sum of its
        columns - (k - 1))) straight to the rows, as tracr's; the tuples' one-hot is never a
        value."""
        sizes = [len(p.space) for p in parts]
        n = math.prod(sizes)
        what = "value pairs" if len(parts) == 2 else "value tuples"
        self._check_pairs(expr, n, what)
        space, rows = self._rows(expr, outs)
        if n * (sum(sizes) + rows.shape[1]) > MAX_PAIR_WEIGHTS:
            raise RaspError(f"{_label(expr)}: a table of {n} {what} to {rows.shape[1]} "
                            f"columns, more than the {MAX_PAIR_WEIGHTS} weights it may hold")
        w1, b1 = _tuple_neurons(sizes)
        h = tw.mlp(tw.concat(*[p.value for p in parts]), w1, b1, rows)
        none = any(p.maybe_none for p in parts) or any(o is _NONE for o in outs)
        return self.encoded(h, rasp.is_numerical(expr), space, none,
                            noisy=any(p.noisy for p in parts))

    @staticmethod
    def _check_pairs(expr, n: int, what: str) -> None:
        """Refuse a table over more than MAX_PAIRS value pairs (or tuples), before its
        function runs on every one."""
        if n > MAX_PAIRS:
            raise RaspError(f"{_label(expr)}: {n} {what}, more than the {MAX_PAIRS} a table "
                            "of them may hold")

    def joint(self, parts: list[Encoded], expr) -> tuple[Encoded, list[tuple]]:
        """One-hot over the tuples of several categorical values: one neuron per tuple,
        relu(sum of the tuple's columns - (k - 1)), 1 exactly where every part is hot."""
        if len(parts) == 1:
            return parts[0], [(v,) for v in parts[0].space]
        sizes = [len(p.space) for p in parts]
        self._check_size(expr, math.prod(sizes), "value combinations")
        w1, b1 = _tuple_neurons(sizes)
        h = tw.mlp(tw.concat(*[p.value for p in parts]), w1, b1, np.eye(w1.shape[1]))
        tuples = list(itertools.product(*[p.space for p in parts]))
        return self.encoded(h, False, tuples, any(p.maybe_none for p in parts),
                            noisy=any(p.noisy for p in parts)), tuples

    def _check_size(self, expr, n: int, what: str) -> None:
        if n > MAX_TABLE:
            raise RaspError(f"{_label(expr)}: {n} {what}, more than the {MAX_TABLE} a table "
                            "may hold")

    def _length(self, expr) -> Encoded:  # (not causal: validate.py)
        return self._count_all(rasp.is_numerical(expr), prefix=False)

    def _count_all(self, numerical: bool, prefix: bool) -> Encoded:
        """The width of a selector that picks every key it sees: the query's position p
        (index + 1) where it sees a prefix (a causal mask, or `indices <= indices`), a
        position table; else the length, the largest position, which one head reads off the
        key of largest p (logits GAIN p: the next one weighs e^-GAIN of it), where the width
        through BOS's share takes a table of n + 1 steps and a one-hot of them."""
        n = self.max_seq_len
        if prefix:  # (a categorical use reads its one-hot as a position table: `_from_source`)
            p = np.arange(n + 1)
            if numerical:
                return self.encoded(tw.pos_table(p[:, None].astype(float)), True,
                                    list(range(1, n + 1)), noisy=False)
            return self.encoded(tw.pos_table(np.eye(n + 1)[p, 1:]), False,
                                list(range(1, n + 1)), noisy=False)
        # the machine's position column p (BOS at 0) is the key and the value; the query
        # 2 p - 1 gives a query at p > 0 logits GAIN (2 p - 1) p' at key p', largest at the
        # last key, and BOS's, -GAIN p', largest at BOS's own key (BOS reads 0)
        pos = tw.pos_encoding(1, n + 1)
        length = tw.attn(tw.concat(pos, self.one), pos, pos, GAIN * np.array([[2.0], [-1.0]]),
                         [[1.0]], [[1.0]], [[1.0]], mask="full")
        # (logits are whole multiples of GAIN, the others' weights underflow: one rounding)
        return self.encoded(length, True, list(range(1, n + 1)), noisy=True,
                            error=2.0 ** -23 * n)

    # -- selectors ---------------------------------------------------------------------
    def head(self, selector, value: Encoded | None, bos_weight: float, wo: np.ndarray,
             value_sop=None) -> Value:
        """One attention head over `selector`: keys and queries one-hot (joint where the
        selector reads several SOps, or an And's conjuncts' logits summed where that joint
        would be a one-hot of value tuples: `_summed_parts`), logits GAIN * [selected] +
        bos_weight * GAIN at the BOS key, BOS queries pinned to BOS; it reads concat(value,
        BOS flag) (the flag alone for None) through `wo`. A key, query or value that is a
        `tw.linear` of another value is read through its matrix (folded into the head's
        projections), so a Map feeding a selector costs nothing of its own. `value_sop`: the
        RASP SOp the head averages (an Aggregate's), None for a SelectorWidth."""
        selector, prefix = _without_prefix(selector)
        parts = self._summed_parts(selector)
        if parts is None:
            nk, q_read, k_read = self._joint_reads(selector, value, bos_weight, value_sop)
        else:
            nk, q_read, k_read = self._summed_reads(parts)
        # query [q, 1, bos] -> (q - bos cq) A | bos_weight GAIN + lift + GAIN bos
        q_in, q_w, q_bias, q_bos = q_read
        wq = np.vstack([q_w, q_bias[None, :], -q_bos[None, :]])
        # the constant 1: BOS's fallback logit, above all but one of a sum's parts (a key
        # every part selects has GAIN times their number: `_summed_reads`)
        above = len(parts) - 1 if parts else 0
        wq[-2, nk] += (bos_weight + above) * GAIN
        wq[-1, nk] += GAIN  # BOS queries attend to BOS
        # key [k, 1, bos] -> (k - bos ck) B | bos
        k_in, k_w, k_bias, k_bos = k_read
        wk = np.vstack([np.hstack([k_w, np.zeros((k_w.shape[0], 1))]),
                        np.append(k_bias, 0.0)[None, :], np.append(-k_bos, 1.0)[None, :]])
        query = tw.concat(q_in, self.one, self.bos_flag)
        key = tw.concat(k_in, self.one, self.bos_flag)
        mask = "causal" if self.causal or prefix else "full"
        if mask == "causal" and q_in is self.one:
            # every query but BOS's reads the same (a TRUE selector's), and BOS's sees only
            # BOS: one dimension, the key's logit under that query
            wk, wq = wk @ (wq[0] + wq[-2])[:, None], np.ones((1, 1))
            query = self.one
        if value is None:
            v, wv = self.bos_flag, np.eye(1)
        else:  # value [v, 1, bos] -> v | bos
            v_in, v_mat, v_bias = _through_linear(value.value)
            v_in, v_mat = self._narrow_read(v_in, v_mat)
            w = v_mat.shape[1]
            v = tw.concat(v_in, self.one, self.bos_flag)
            wv = np.zeros((v_mat.shape[0] + 2, w + 1))
            wv[:-2, :w], wv[-2, :w], wv[-1, w] = v_mat, v_bias, 1.0
        return tw.attn(query, key, v, wq, wk, wv, wo, mask=mask)

    def _summed_parts(self, selector) -> list | None:
        """The conjuncts of an And whose keys (or queries) would need a one-hot of their
        value tuples (`joint`: |X| |Y| columns and an MLP a layer before the head), where
        each conjunct alone needs none: the head then sums their logits (`_summed_reads`).
        None where that does not apply."""
        parts = _conjuncts(selector)
        if len(parts) < 2:
            return None
        sides = [[self._sides(_leaves(p), side) for side in ("keys", "queries")] for p in parts]
        if any(self._needs_product(s) for pair in sides for s in pair):
            return None
        whole = [self._sides(_leaves(selector), side) for side in ("keys", "queries")]
        return parts if any(self._needs_product(s) for s in whole) else None

    def _needs_product(self, sops: list) -> bool:
        """Whether `_joint_of` reads these SOps through a one-hot of their value tuples
        (`joint`), not one SOp's one-hot nor a table over one root's values."""
        roots = {id(r) for r in (_root_or_constant(s, self.roots) for s in sops) if r is not None}
        return len(sops) > 1 and len(roots) != 1

    def _summed_reads(self, parts: list) -> tuple:
        """(head dims, query read, key read) of an And's conjuncts as a sum of their logits:
        conjunct i gives GAIN at its selected (query, key) pairs through its own one-hots
        (`_factor`), so a key every conjunct selects has GAIN times their number and any
        other at least GAIN less, as a plain head's unselected key (and BOS's fallback logit
        sits as far below: `head`). The one-hots of tokens x indices (|X| |Y| columns, an MLP
        to make them) become |X| + |Y| columns: count_earlier_equal at length 50, 2 layers
        and d 494 -> 1 layer. The reads as `_read`'s, one value a column block."""
        factors = []
        for part in parts:
            leaves = _leaves(part)
            keys, queries = self._sides(leaves, "keys"), self._sides(leaves, "queries")
            k_enc, k_tuples = self._joint_of(keys, part)
            q_enc, q_tuples = self._joint_of(queries, part)
            pred = _selection(part, k_tuples, q_tuples,
                              {s.unique_id: i for i, s in enumerate(keys)},
                              {s.unique_id: i for i, s in enumerate(queries)})
            factors.append((q_enc, k_enc, *_factor(GAIN * pred)))
        nk = sum(a.shape[1] for _, _, a, _ in factors)
        q_reads, k_reads, at = [], [], 0
        for q_enc, k_enc, a, b in factors:
            dims = a.shape[1]
            aq, bk = np.zeros((a.shape[0], nk + 1)), np.zeros((b.shape[0], nk))
            aq[:, at: at + dims], bk[:, at: at + dims] = a, b
            q_reads.append(self._read(q_enc, aq))
            k_reads.append(self._read(k_enc, bk))
            at += dims
        return nk, _summed(q_reads), _summed(k_reads)

    def _joint_reads(self, selector, value: Encoded | None, bos_weight: float,
                     value_sop) -> tuple:
        """(head dims, query read, key read) of a selector through the one-hots of its keys'
        and queries' value tuples (`_joint_of`), read through the key's number where that
        applies (`_through_number`); the query's matrix has a last column of BOS's `lift`."""
        leaves = _leaves(selector)
        keys, queries = self._sides(leaves, "keys"), self._sides(leaves, "queries")
        k_enc, k_tuples = self._joint_of(keys, selector)
        q_enc, q_tuples = self._joint_of(queries, selector)
        k_slot = {s.unique_id: i for i, s in enumerate(keys)}
        q_slot = {s.unique_id: i for i, s in enumerate(queries)}
        pred = _selection(selector, k_tuples, q_tuples, k_slot, q_slot)
        # logits = q pred k^T = (q A)(k B)^T through the narrower side's distinct rows, or
        # through the key's number where every query selects one key value (_nearest_key);
        # BOS's logit is bos_weight GAIN, plus `lift` (per query class) in the latter.
        # A noisy key's number moves its logit a little (`_key_tolerance`), so keys of one
        # value no longer share the softmax evenly: that is exact only where they hold one
        # value to average (`_determines`) and the key's number is read from a table
        # A SelectorWidth reads BOS's share, so its head goes through the key's number only
        # from exact one-hots, where BOS's logit keeps the share's precision
        # (`_nearest_key`'s `bos_error`: 1 / (64 n), a sixteenth of the width table's plateau)
        width = value is None
        shared = len(keys) == 1 and value_sop is not None and not self.causal and \
            self._key_table(k_enc) and self._determines(keys[0], value_sop)
        keys_values = k_enc.space if len(keys) == 1 and not k_enc.maybe_none and \
            (not k_enc.noisy or shared) and \
            (not width or (_exact(k_enc) and _exact(q_enc))) else None
        bos_error = 1 / (64 * self.max_seq_len) if width else None
        a, b, lift, k_read, q_read = self._through_number(
            pred, keys_values, bos_weight, bos_error, k_enc, q_enc, width)
        nk = a.shape[1]
        a = np.hstack([a, np.zeros((a.shape[0], 1)) if lift is None else lift[:, None]])
        return nk, q_read or self._read(q_enc, a), k_read or self._read(k_enc, b)

    def _through_number(self, pred, keys_values, bos_weight, bos_error, k_enc, q_enc,
                        width: bool) -> tuple:
        """(A, B, lift, key read, query read) of a head's logits q A (k B)^T: through the key's
        number (`_nearest_key`) in the fewest digits whose noisy key and tabled query can be
        read from their tables' sources within the head's tolerances (a number of many
        values asks its tables for a precision of 1 / values^2: at 90 ranks, 4e-6 of the
        largest row, which one MLP of steps cannot keep; its digits ask 1 / radix^2);
        else the fewest digits reading the query through its one-hot; else a noisy key's
        digits through its one-hot where the one-hot's error keeps them within tolerance
        (both keep the one-hot, wide, in the residual); else the keys one-hot (`_factor`: as
        many head dimensions as key values). A read None is the plain one (`_read` with no
        tolerance: that of a one-hot)."""
        @functools.cache
        def near(digits: int):  # (asked again by the second loop)
            return _nearest_key(pred, keys_values, bos_weight, bos_error, digits, extend)

        # (a query read off the indices: lines and parabolas in the index are free)
        extend = _through_linear(q_enc.value)[0] is self.indices_onehot

        def candidates():  # (digits, (A, B, lift)), fewest digits first
            return ((d, near(d)) for d in range(1, MAX_DIGITS + 1) if near(d) is not None)

        def query(digits, a, b, lift):  # (its features [A | lift], their tolerance)
            return np.hstack([a, lift[:, None]]), \
                None if width else _query_tolerance(b, lift, digits)

        fallback = None
        for digits, (a, b, lift) in candidates():
            k_read = None
            if k_enc.noisy:
                k_read = self._read(k_enc, b, _key_tolerance(b, q_enc.noisy, digits),
                                    need_source=True)
                if k_read is None:  # its table would be deeper
                    continue
            aq, tolerance = query(digits, a, b, lift)
            q_read = self._read(q_enc, aq, tolerance, need_source=True)
            if q_read is not None or not self._narrows(q_enc, aq):
                if fallback is not None and fallback[3] is not None:
                    self._erase(fallback[3][0].owner)  # (its key table, read by nothing)
                return a, b, lift, k_read, q_read
            if fallback is None:  # the fewest digits, through the query's one-hot
                fallback = a, b, lift, k_read, self._read(q_enc, aq, tolerance)
            elif k_read is not None:
                self._erase(k_read[0].owner)
        if fallback is not None:
            return fallback
        for digits, (a, b, lift) in candidates() if k_enc.noisy else ():
            k_read = self._through_one_hot(k_enc, b, _key_tolerance(b, q_enc.noisy, digits))
            if k_read is not None:
                return a, b, lift, k_read, self._read(q_enc, *query(digits, a, b, lift))
        return (*_factor(GAIN * pred), None, None, None)

    def _through_one_hot(self, enc: Encoded, mat: np.ndarray, tolerance) -> tuple | None:
        """`_read`'s (x, W, bias, at_bos) of `mat` of a tabled one-hot, read through the
        one-hot itself where its table's float32 error times mat stays within `tolerance`
        per column (`_read_error`'s bound); else None."""
        x, m, bias = _through_linear(enc.value)
        error = self.table_errors.get(x)
        through = m @ mat
        if error is None or np.any(error * np.abs(through).sum(axis=0) > tolerance):
            return None
        return x, through, bias @ mat, enc.bos @ mat

    def _narrows(self, enc: Encoded, mat: np.ndarray) -> bool:
        """Whether reading `mat` of a one-hot needs fewer columns than the one-hot has (so a
        read from its source could leave the one-hot out of the residual)."""
        x, m, _ = _through_linear(enc.value)
        return mat.shape[1] < width_of(x)

    def _read(self, enc: Encoded, mat: np.ndarray, tolerance=None,
              need_source: bool = False) -> tuple | None:
        """(x, W, bias, at_bos) with (enc - [BOS] enc at BOS) @ mat = x W + bias - [BOS]
        at_bos: how a head reads `mat` of a one-hot (through any `tw.linear` that made it,
        folded in). Where mat is narrower than the one-hot, its rows are read from the
        one-hot's own source (`_from_source`); else through the one-hot (None instead where
        `need_source`: the reader cannot take the one-hot's float32 error times mat)."""
        x, m, bias = _through_linear(enc.value)
        if _wider_only_for(x, enc.value):
            x, m, bias = enc.value, np.eye(enc.width), np.zeros(enc.width)
        through, shift = m @ mat, bias @ mat
        if not enc.maybe_none and len(through) and not np.any(through - through[0]):
            # every value reads the same (a TRUE selector's keys): the constant column
            return self.one, through[:1], shift, through[0] + shift
        if through.shape[1] < width_of(x):
            source = self._from_source(x, through, tolerance)
            if source is not None:
                read, w, bias, at_bos = source
                return read, w, shift + bias, at_bos + shift
        if need_source:
            return None
        return x, through, shift, enc.bos @ mat

    def _key_table(self, enc: Encoded) -> bool:
        """Whether the one-hot is a table of steps (through any `tw.linear`), which a head can
        read again as other columns within a tolerance of its own (`_from_source`)."""
        return _through_linear(enc.value)[0] in self.tables

    def _determines(self, a, b) -> bool:
        """Whether SOp a's value at a position fixes SOp b's there, in every input (so keys
        of one a-value hold one b-value): b is a, a constant or a map of what a determines;
        a holds distinct values at distinct positions (`_unique`), is an injective map of
        what determines b, or counts the keys below (above) its own in a strict order of k
        (a rank: a larger k has a larger rank), k determining b."""
        if a.unique_id == b.unique_id or isinstance(b, rasp.Full) or self._unique(a):
            return True
        if isinstance(b, rasp.Map):
            return self._determines(a, b.inner)
        if isinstance(b, rasp.SequenceMap):
            return self._determines(a, b.fst) and self._determines(a, b.snd)
        if isinstance(a, rasp.Map) and self._injective(a):
            return self._determines(a.inner, b)
        k = None if self.causal else _ranked(a)
        return k is not None and self._determines(k, b)

    def _one_key(self, selector) -> bool:
        """Whether every query selects at most one key position (`_picks_one`, or one
        position in all)."""
        return self.max_seq_len == 1 or self._picks_one(selector)

    def _picks_one(self, selector) -> bool:
        """Whether every query selects at most one key position in any input (its mean is
        then one of the values, not any mean of them): a Select whose keys hold distinct
        values at distinct positions (`_unique`) and whose predicate picks at most one key
        value per query value (EQ: shift_by's and reverse's `indices == f(indices)`), or
        an And with such a side."""
        selector, _ = _without_prefix(selector)
        if isinstance(selector, rasp.SelectorAnd):
            return self._picks_one(selector.fst) or self._picks_one(selector.snd)
        if not isinstance(selector, rasp.Select):
            return False
        self.sop(selector.keys), self.sop(selector.queries)  # (the head reads both anyway)
        if not self._unique(selector.keys):
            return False
        if selector.predicate is rasp.Comparison.EQ:
            return True
        spaces = self._spaces(selector.keys, selector.queries)
        if spaces is None:
            return False
        k_id, q_id = selector.keys.unique_id, selector.queries.unique_id
        pred = _selection(selector, [(k,) for k in spaces[0]], [(q,) for q in spaces[1]],
                          {k_id: 0}, {q_id: 0})
        return bool(np.all(pred.sum(axis=1) <= 1))

    def _unique(self, a) -> bool:
        """Whether SOp a holds distinct values at distinct positions of any input: indices,
        an injective map of such, a SequenceMap whose value fixes the argument that is such
        (sort's key x + i / n), the rank of such (`_ranked`). Full attention only (a causal
        model's rank counts only the keys before)."""
        if isinstance(a, rasp.IndicesType):
            return True
        if isinstance(a, rasp.Map):
            return self._injective(a) and self._unique(a.inner)
        if isinstance(a, rasp.SequenceMap):
            return any(self._unique(arg) and self._fixes(a, slot)
                       for slot, arg in enumerate((a.fst, a.snd)))
        k = None if self.causal else _ranked(a)
        return k is not None and self._unique(k)

    def _spaces(self, *sops) -> list | None:
        """The value sets of SOps already translated (a question about the program never
        translates more of it), None where one is not, is unknown, or has too many tuples."""
        encs = [self.memo.get(s.unique_id) for s in sops]
        spaces = [None if e is None else e.space for e in encs]
        if any(sp is None for sp in spaces) or math.prod(len(sp) for sp in spaces) > MAX_MEANS:
            return None
        return spaces

    def _injective(self, m) -> bool:
        spaces = self._spaces(m.inner)
        if spaces is None:
            return False

        def injective() -> bool:
            outs = [_apply(m.f, v) for v in spaces[0]]
            return _NONE not in outs and len(set(outs)) == len(outs)
        return self._analysis("injective", m, injective)

    def _fixes(self, m, slot: int) -> bool:
        """Whether SequenceMap m's value fixes its argument `slot` (0: fst) over every pair."""
        spaces = self._spaces(m.fst, m.snd)
        if spaces is None:
            return False

        def fixes() -> bool:
            seen: dict = {}
            for pair in itertools.product(*spaces):
                out = _apply(m.f, *pair)
                if out is _NONE or seen.setdefault(out, pair[slot]) != pair[slot]:
                    return False
            return True
        return self._analysis(f"fixes {slot}", m, fixes)

    def _token_columns(self, mat: np.ndarray) -> tuple[Value, np.ndarray] | None:
        """(x, W) with x W = tokens one-hot @ mat, x the token embedding's feature columns:
        mat's columns up to scale, each added where no earlier read asked for it (None where
        this translation reads the one-hot itself). A zero mat reads the constant column
        while there are no features. `_FeaturesNoNarrower` once the features would be as
        many as the one-hot's columns."""
        if not self.token_features:
            return None
        units, scales = _unit_columns(mat)
        w_at = []  # (feature, column of mat, scale)
        for i, (col, scale) in enumerate(zip(np.ascontiguousarray(units.T), scales)):
            if scale != 0.0:
                j = self.feature_index.setdefault(col.tobytes(), len(self.feature_columns))
                if j == len(self.feature_columns):
                    self.feature_columns.append(col)
                    if len(self.feature_columns) >= len(self.vocab):
                        raise _FeaturesNoNarrower()
                w_at.append((j, i, scale))
        if not self.feature_columns:
            return self.one, np.zeros((1, mat.shape[1]))
        w = np.zeros((len(self.feature_columns), mat.shape[1]))
        for j, i, scale in w_at:
            w[j, i] = scale
        return self._features(len(self.feature_columns)), w

    def _features(self, k: int) -> Value:
        """The first k feature columns of the token embedding: a slice past the table's
        width while the graph is built (`_embed_features` widens the table), 0 at BOS."""
        if k not in self.feature_slices or \
                self.feature_slices[k].owner not in self.graph.ops:
            v = len(self.vocab)
            view = self.graph.append(SliceOp(self.embedding, v + 2, k)).results[0]
            self.at_bos[view] = np.zeros((1, k))
            self.feature_slices[k] = view
        return self.feature_slices[k]

    def _embed_features(self, graph) -> None:
        """The token embedding with the feature columns the reads asked for (0 at BOS and
        pad), where the program reads the one-hot only through them; else
        `_FeaturesNoNarrower` (its columns serve every read: `translate` builds again
        without)."""
        if not self.feature_columns:
            return
        if _is_read(self.tokens_onehot):
            raise _FeaturesNoNarrower()
        old = self.embedding.owner
        table = to_numpy(old.table, np.float64)
        features = np.stack(self.feature_columns, axis=1)
        table = np.hstack([table, np.vstack([features, np.zeros((2, features.shape[1]))])])
        new = EmbeddingOp(old.input_name.data, table)
        graph.body.block.insert_op_before(new, old)
        old.results[0].replace_all_uses_with(new.results[0])
        graph.body.block.erase_op(old)
        self.embedding = new.results[0]

    def _from_source(self, onehot: Value, mat: np.ndarray, tolerance) -> tuple | None:
        """(x, W, bias, at_bos) with x W + bias = onehot @ mat, x read from what made the
        one-hot: the token embedding's feature columns (`_token_columns`) or a position table
        for the indices (free), or a line of the number a table read (`_affine_read`), or a
        table of steps beside the one-hot's, over the same input and no deeper (the same
        neurons; the one-hot itself is then dead code unless something else reads it).
        `tolerance`: the float32 error the reader accepts in each column (default: CLEAN,
        the one-hot's own). None where neither applies."""
        cols = mat.shape[1]
        if onehot is self.tokens_onehot:
            picked = self._token_columns(mat)
            return None if picked is None else (picked[0], picked[1], np.zeros(cols),
                                                np.zeros(cols))
        if onehot is self.indices_onehot:
            return self._index_columns(mat, tolerance)
        if isinstance(onehot.owner, PosTableOp):  # (a width that is the position)
            table = tw.pos_table(to_numpy(onehot.owner.table, np.float64) @ mat)
            self._sync()
            return table, np.eye(cols), np.zeros(cols), self.at_bos[table][0]
        if onehot not in self.tables:
            return None
        # columns scaled to at most 1 in the table (its float32 error is then the one-hot's)
        scale = np.maximum(np.abs(mat).max(axis=0), np.finfo(np.float64).tiny)
        tol = None if tolerance is None else tolerance / scale
        x, points, rows, depth = self.tables[onehot]
        line = self._affine_read(x, points, rows @ mat, tolerance)
        if line is not None:
            return line
        scaled = rows @ (mat / scale)
        plan = step_mlps(points, scaled, tol)
        if len(plan) > depth:  # deeper than the one-hot's own table
            return None
        read = emit_steps(x, scaled, plan)
        self.table_errors[read] = plan.error
        self._sync()
        return read, np.diag(scale), np.zeros(cols), self.at_bos[read][0] * scale

    def _affine_read(self, x: Value, points: np.ndarray, rows: np.ndarray,
                     tolerance) -> tuple | None:
        """`_from_source`'s (x, W, bias, at_bos) where every column of a table's rows is a
        line through its points (length's one-hot read as length - index): a linear map of
        the table's number x, where x's error times the slope keeps within `tolerance`
        (default: CLEAN of the column's largest entry). None otherwise."""
        error = self.errors.get(x)
        if width_of(x) != 1 or error is None or points.size < 2:
            return None
        lines = [_affine(points, rows[:, [j]]) for j in range(rows.shape[1])]
        if any(line is None for line in lines):
            return None
        slope, intercept = (np.array([line[i] for line in lines]) for i in (0, 1))
        if not slope.any():  # (a constant: the table of steps makes it a literal)
            return None
        allowed = CLEAN * np.maximum(1.0, np.abs(rows).max(axis=0)) if tolerance is None \
            else np.broadcast_to(tolerance, slope.shape)
        if np.any(error * np.abs(slope) > allowed):
            return None
        self._sync()
        return x, slope[None, :], intercept, self.at_bos[x][0] * slope + intercept

    def _sides(self, leaves: list, side: str) -> list:
        out, seen = [], set()
        for leaf in leaves:
            if isinstance(leaf, rasp.ConstantSelector):
                s = rasp.indices
            else:
                s = getattr(leaf, side)
            if s.unique_id not in seen:
                seen.add(s.unique_id)
                out.append(s)
        return out

    def _aggregate(self, expr) -> Encoded:
        numerical = rasp.is_numerical(expr)
        src = self.sop(expr.sop)
        if src.numerical and not numerical:
            # a numerical source's mean, then its one-hot (a categorical one-hot mean would
            # mix the values instead of averaging them)
            mean = self._aggregate_as(expr, src, True)
            return self.as_categorical(mean, expr)
        return self._aggregate_as(expr, src, numerical)

    def _aggregate_as(self, expr, src: Encoded, numerical: bool) -> Encoded:
        """The mean of `src` over the selected keys (numerical: of its number; categorical:
        of its one-hot), the default where none is selected."""
        src = self.as_numerical(src, expr.sop) if numerical else self.as_categorical(src, expr.sop)
        return self._mean(expr, expr.selector, src, expr.default, numerical, expr.sop)

    def _mean(self, expr, selector, src: Encoded, default, numerical: bool,
              value_sop, space=None) -> Encoded:
        """`_aggregate_as`'s head: the mean of `src` over the selector's keys, `default`
        where none is selected (`expr` names the expression in errors; `value_sop`: the SOp
        src stands for, None where it is no one SOp; `space`: a numerical mean's value set
        where the caller knows it, else from src's)."""
        if default is None and not src.space:  # a mean of Nones, or no key: None
            return self.nowhere(numerical)
        one = numerical and self._one_key(selector)  # (its mean is one of the values)
        if numerical:
            d = np.array([0.0 if default is None else self._number(expr, default)])
            if space is None:
                space = self._mean_values(selector, src.space, float(d[0]))
        else:  # a default outside the aggregated values gets a column of its own
            space = list(src.space)
            if default is not None and default not in space:
                space.append(default)
            d = np.zeros(len(space))
            if default is not None:
                d[space.index(default)] = 1.0
        # out = mean + (BOS share) * (default - the value BOS holds)
        widen = np.eye(src.width, src.width if numerical else len(space))
        fix = np.vstack([widen, (d - src.bos @ widen)[None, :]])
        # (a softmax's mean of numbers: its float32 error follows the magnitudes it averages,
        # but one key's weight is 1 in float32; of one-hots of one value, as good as the
        # one-hot: measured, 0 at lengths 10-100)
        head = self.head(selector, src, 0.5, fix, value_sop)
        error = src.error
        if numerical:
            error += 2.0 ** -24 * src.magnitude if one else \
                mean_noise(src.magnitude, self.max_seq_len)
        return self.encoded(head, numerical, space, not numerical and default is None,
                            noisy=True, error=error,
                            magnitude=max(src.magnitude, abs(float(d[0]))) if numerical else None)

    def _mean_values(self, selector, values: list | None, default: float):
        """A numerical mean's value set: the values and the default where every query selects
        at most one key (`_one_key`), else every mean of them (`_mean_space`), enumerated
        where a later table asks (a million means, which only it needs: a callable)."""
        if values is not None and self._one_key(selector):
            return _ordered({v if type(v) is _Near else float(v) for v in values} | {default})
        n = self.max_seq_len
        return lambda: _mean_space(values, n, default)

    def _selector_width(self, expr, selector) -> Encoded:
        rest, prefix = _without_prefix(selector)
        if isinstance(rest, rasp.Select) and rest.predicate is rasp.Comparison.TRUE:
            return self._count_all(rasp.is_numerical(expr), prefix or self.causal)
        split = self._rank_split(selector)
        if split is not None:
            return self._rank(*split, rasp.is_numerical(expr))
        return self._width(selector, rasp.is_numerical(expr))

    def _width(self, selector, numerical: bool, tolerance: float | None = None) -> Encoded:
        """How many keys the selector picks, per query, from BOS's share of one head.
        BOS weighs n selected keys: its share n / (n + width) keeps adjacent widths about
        1 / (4 n) apart (1 / (width + 1) would leave 1 / n^2), so the table of steps that
        reads it is shallow enough for one MLP at tracr's lengths. `tolerance`: the float32
        error its reader accepts (default CLEAN)."""
        n = self.max_seq_len
        share = self.head(selector, None, 1.0 + math.log(n) / GAIN, np.eye(1))
        widths = list(range(n, -1, -1))
        points = np.array([n / (n + k) for k in widths])
        rows = np.array([[float(k)] for k in widths]) if numerical else np.eye(n + 1)[widths]
        out = self._steps(share, points[::-1], rows[::-1], tolerance)
        return self.encoded(out, numerical, list(range(n + 1)), noisy=True,
                            error=self.table_errors[out])

    def _rank_split(self, selector) -> tuple | None:
        """(x, direction, predicate) where the selector is `Select(k, k, LT / LEQ / GT /
        GEQ)` and k = f(x, indices) orders positions as (x, index) does (direction 1:
        tracr's make_sort key x + min_key i / max_seq_len) or as (x, -index) (direction -1;
        `_lexicographic`): then k_key < k_query is x_key < x_query, or the same x at an
        earlier (later) position, so the width is a few heads over x's few values, not one
        over k's |x| n values (sort at length 50: d_head 150). None otherwise."""
        k = _ordered_by(selector)
        split = None if k is None else self._lexicographic(k)
        return None if split is None else (*split, selector.predicate)

    def _lexicographic(self, k) -> tuple | None:
        """(x, direction) where k = SequenceMap(f, x, indices) (or f(indices, x)) and f is
        strictly increasing in (x, direction * index) order over every pair of values
        (numbers all); else None."""
        if not isinstance(k, rasp.SequenceMap):
            return None
        args = [k.fst, k.snd]
        at = [isinstance(a, rasp.IndicesType) for a in args]
        if at.count(True) != 1:
            return None
        x = args[at.index(False)]
        enc = self.sop(x)
        if enc.space is None or enc.maybe_none or \
                not all(_is_number(v) for v in enc.space):
            return None
        xs = sorted(enc.space, key=float)
        if len(xs) * self.max_seq_len > MAX_MEANS:
            return None
        root = _root(k, self.roots)
        if root is not k:  # k, a function of one root, has few values itself: split only
            ks = {_at_root(k, root, r) for r in self.sop(root).space or ()}  # a far fewer x
            if len(ks) < max(MIN_SPLIT_KEYS, 3 * len(xs)):
                return None

        def direction() -> int | None:
            outs = np.zeros((len(xs), self.max_seq_len))
            for r, v in enumerate(xs):
                for i in range(self.max_seq_len):
                    o = _apply(k.f, *((v, i) if at[1] else (i, v)))
                    if o is _NONE or not _is_number(o):
                        return None
                    outs[r, i] = float(o)
            for sign in (1, -1):
                order = outs[:, ::sign].ravel()
                if np.all(order[:-1] < order[1:]):
                    return sign
            return None
        sign = self._analysis("lexicographic", k, direction)
        return None if sign is None else (x, sign)

    def _rank(self, x, direction: int, predicate, numerical: bool) -> Encoded:
        """`_rank_split`'s width: keys on the strict side of x (one head), plus the keys of
        the same x on the tie-break's side: up to the query's own position (a causal head
        C, less the query itself where the comparison is strict), or after it (the full
        count E of the same x less C, plus the query itself where not strict; nothing, or
        the query alone, under a causal mask). Where the width is categorical, its one-hot
        is a table of the sum, flat a quarter unit around each whole number: each width may
        then stray RANK_NOISE."""
        n = self.max_seq_len
        tolerance = None if numerical else RANK_NOISE
        below = predicate in (rasp.Comparison.LT, rasp.Comparison.LEQ)
        inclusive = predicate in (rasp.Comparison.LEQ, rasp.Comparison.GEQ)
        strict = self._width(rasp.Select(x, x, rasp.Comparison.LT if below else
                                         rasp.Comparison.GT), True, tolerance)
        same = rasp.Select(x, x, rasp.Comparison.EQ)
        same_upto = rasp.SelectorAnd(same, rasp.Select(rasp.indices, rasp.indices,
                                                       rasp.Comparison.LEQ))
        if below == (direction > 0):  # ties count at earlier positions
            parts = [strict, self._width(same_upto, True, tolerance)]
            weights, bias = [1.0, 1.0], 0.0 if inclusive else -1.0
        elif self.causal:  # no later position is seen
            parts, weights, bias = [strict], [1.0], 1.0 if inclusive else 0.0
        else:
            parts = [strict, self._width(same, True, tolerance),
                     self._width(same_upto, True, tolerance)]
            weights, bias = [1.0, 1.0, -1.0], 1.0 if inclusive else 0.0
        rank = tw.linear(tw.concat(*[p.value for p in parts]), [[w] for w in weights], [bias])
        return self.encoded(rank, True, list(range(1, n + 1)) if inclusive else list(range(n)),
                            noisy=True)


def steps(x: Value, points: np.ndarray, rows: np.ndarray, tolerance=None) -> Value:
    """The table of steps `step_mlps` plans, applied to x."""
    return emit_steps(x, rows, step_mlps(points, rows, tolerance))


def emit_steps(x: Value, rows: np.ndarray, plan: list[tuple]) -> Value:
    """x through the MLPs of `plan` (`step_mlps`); a literal of the rows where there are none
    (the rows never change)."""
    if not plan:
        return tw.literal(rows[0])
    for w1, b1, w2, b2 in plan:
        x = tw.mlp(x, w1, b1, w2, b2)
    return x


def step_mlps(points: np.ndarray, rows: np.ndarray, tolerance=None) -> Plan:
    """The MLPs (w1, b1, w2, b2) of a table of steps (none where the rows never change):
    rows[k] wherever x is within a quarter gap of points[k] (sorted), ramps between
    neighbours whose rows differ: an input a little off its value (float32 rounding of a
    softmax share or of an earlier table) still reads the exact row, so a one-hot stays 0/1
    and a later head's logits keep their full gap; a threshold over a million values is one
    step.

    One MLP (two neurons a step, each pair opening towards the nearer end of the input's
    range, so few hinges fire far from their ramp) where its float32 rounding at the points
    (and near them) stays below CLEAN of the rows (or `tolerance`, per column, where the
    reader says what it tolerates); else two MLPs that saturate exactly on
    every plateau: h = relu(s (x - b1)), then 1 - relu(1 - h)."""
    change = np.flatnonzero(np.any(rows[1:] != rows[:-1], axis=1))
    if change.size == 0:
        return Plan()
    lo_x, hi_x = float(points[0]), float(points[-1])
    b1 = points[change] + (points[change + 1] - points[change]) / 4
    b2 = points[change + 1] - (points[change + 1] - points[change]) / 4
    slope = 1.0 / (b2 - b1)
    delta = rows[change + 1] - rows[change]
    left = (b1 - lo_x) < (hi_x - b2)  # the ramp sits nearer the low end: hinges open left
    # a step's pair: relu(sign s (x - opens)) - relu(sign s (x - closes)), times sign delta
    sign = np.where(left, -1.0, 1.0)
    opens, closes = np.where(left, b2, b1), np.where(left, b1, b2)
    # a step's two neurons side by side: a sum in neuron order (as a runtime may take it for
    # one row) cancels each pair's two large terms before the next, not after all of them
    w1 = np.repeat(sign * slope, 2)[None, :]
    bias1 = np.stack([-sign * slope * opens, -sign * slope * closes], axis=1).reshape(-1)
    w2 = np.stack([sign[:, None] * delta, -sign[:, None] * delta], axis=1).reshape(
        -1, delta.shape[1])
    bias2 = rows[0] + delta[left].sum(axis=0)
    if tolerance is None:
        tolerance = CLEAN * max(1.0, float(np.abs(rows).max()))
    # a line through the points: fewer neurons, but no plateau snaps an input's error back,
    # so only where it stays within tolerance for inputs LINE_MARGIN times further off
    line = interpolation_mlp(points, rows)
    if line[0].shape[1] < w1.shape[1]:
        error = _measured(points, rows, line, tolerance, LINE_MARGIN * PERTURB)
        if error is not None:
            return Plan([line], error)
    error = _measured(points, rows, (w1, bias1, w2, bias2), tolerance)
    if error is not None:
        return Plan([(w1, bias1, w2, bias2)], error)
    two = [(slope[None, :], -slope * b1, np.eye(len(change)), None),
           (-np.eye(len(change)), np.ones(len(change)), -delta, rows[0] + delta.sum(axis=0))]
    return Plan(two, float(_plateau_error(points, rows, two, in_order=True).max(initial=0.0)))


class Plan(list):
    """`step_mlps`'s MLPs, and the table's float32 error at its points (measured for one
    MLP: `_measured`)."""

    def __init__(self, mlps=(), error: float = 0.0):
        super().__init__(mlps)
        self.error = error


def interpolation_mlp(points: np.ndarray, rows: np.ndarray) -> tuple:
    """One MLP (w1, b1, w2, b2) through every (points[k], rows[k]), linear between and
    beyond: a neuron where the slope changes, half a table of steps' two a step, but an
    input off its point moves the output by the slope (for readers that tolerate it)."""
    order = np.argsort(points, kind="stable")
    points, rows = points[order], rows[order]
    slopes = np.diff(rows, axis=0) / np.diff(points)[:, None]
    change = np.diff(slopes, axis=0, prepend=np.zeros((1, rows.shape[1])))
    hinge = np.flatnonzero(np.any(change != 0, axis=1))
    if hinge.size == 0:  # one point, or the rows never change
        hinge = np.array([0])
    return np.ones((1, hinge.size)), -points[hinge], change[hinge], rows[0]


def _within(points: np.ndarray, rows: np.ndarray, mlp: tuple, tolerance,
            perturb: float = PERTURB) -> bool:
    """Whether a one-MLP table's float32 error stays within `tolerance` (`_measured`)."""
    return _measured(points, rows, mlp, tolerance, perturb) is not None


def _measured(points: np.ndarray, rows: np.ndarray, mlp: tuple, tolerance,
              perturb: float = PERTURB) -> float | None:
    """A one-MLP table's largest float32 error (`_plateau_error`) where it stays within
    `tolerance` (per column), its neurons summed as a blocked matrix product does and, where
    that comes within a quarter of the tolerance, one neuron after another too
    (`_summed_in_order`); None where it does not."""
    error = _plateau_error(points, rows, [mlp], perturb)
    if np.any(error > tolerance):
        return None
    if not np.all(error <= np.asarray(tolerance) / 4):
        error = np.maximum(error, _plateau_error(points, rows, [mlp], perturb, in_order=True))
        if np.any(error > tolerance):
            return None
    return float(error.max(initial=0.0))


def _plateau_error(points: np.ndarray, rows: np.ndarray, mlps: list[tuple],
                   perturb: float = PERTURB, in_order: bool = False) -> np.ndarray:
    """The largest float32 error of a table (its MLPs one after another), per column, at its
    points and at the points moved by `perturb` (relative): what its plateaus give the ops
    that read them; `in_order`: neurons summed one after another (`_summed_in_order`)."""
    worst = np.zeros(rows.shape[1])
    for moved in (points, points * (1 + perturb), points * (1 - perturb)):
        x = np.asarray(moved, np.float32)[:, None]
        for w1, b1, w2, b2 in mlps:
            w2 = np.asarray(w2, np.float32)
            hidden = np.maximum(x @ np.asarray(w1, np.float32) + np.asarray(b1, np.float32),
                                np.float32(0))
            x = _summed_in_order(hidden, w2) if in_order else hidden @ w2
            if b2 is not None:
                x = x + np.asarray(b2, np.float32)
        worst = np.maximum(worst, np.abs(x.astype(np.float64) - rows).max(axis=0))
    return worst


# Largest hidden x output entries a table's check sums one neuron at a time (above: only as a
# blocked product)
SEQUENTIAL_CHECK = 1 << 24


def _summed_in_order(hidden: np.ndarray, w2: np.ndarray) -> np.ndarray:
    """hidden @ w2 in float32, each product rounded and summed one neuron after another: the
    order a runtime may use for one row (a blocked matrix product sums in a friendlier
    order, so its error alone can be many times smaller); the blocked product itself above
    SEQUENTIAL_CHECK entries."""
    if hidden.size * w2.shape[1] > SEQUENTIAL_CHECK:
        return hidden @ w2
    total = np.zeros((hidden.shape[0], w2.shape[1]), np.float32)
    for i in range(w2.shape[0]):
        total += hidden[:, i: i + 1] * w2[i]
    return total


# How many times further off its value (than PERTURB) an input of a table through its points
# (`interpolation_mlp`, no plateaus) may sit and the table stay within its tolerance.
LINE_MARGIN = 16

# Points of a table closer than this (relative to the largest magnitude, or 1) are one value:
# float32 keeps ~6e-8 of it, and such gaps come from float64 round-off in a value set (means
# of 1/3 and 2/3 that give both 0.0 and 1.4e-17), never from values a model could tell apart.
SAME_POINT = 1e-9


def mean_noise(magnitude: float, n: int) -> float:
    """How far float32 may move a softmax's mean of values up to `magnitude` over at most n
    keys (the weights' and sums' roundings): measured, the worst of 200 inputs, 1.1e-7 of it at
    length 10 and 2.4e-7 at 100; this bound is 2-3 times that."""
    return 2.0 ** -24 * (2 + math.log2(n + 1)) * magnitude


def _read_error(error: float, rows: np.ndarray) -> float:
    """The error of a linear read `one-hot @ rows` of a one-hot whose columns are each off
    by up to `error`."""
    return float(error * np.abs(rows).sum(axis=0).max(initial=0.0)) if error else 0.0


def _clustered(space: list) -> list:
    """An ordered value set with the numbers that float32 cannot tell apart (`_merge_float32`'s
    rule: a mean of 1/7 reached two ways, 0.14285714285714285 and 0.14285714285714288) as one
    `_Near` value spanning them: one one-hot column for what a model can tell apart, and its
    readers asked at the span's ends (`_apply`), so one that tells them apart is refused."""
    numbers = [v for v in space if _is_count(v)]
    if len(numbers) < 2:
        return space
    p = np.array([float(v) for v in numbers])
    same = (p[1:].astype(np.float32) == p[:-1].astype(np.float32)) | \
        (np.diff(p) < SAME_POINT * max(1.0, float(np.abs(p).max())))
    if not same.any():
        return space
    out, group = [], [numbers[0]]
    for v, joined in zip(numbers[1:], same.tolist()):
        if joined:
            group.append(v)
        else:
            out.append(_span(group))
            group = [v]
    out.append(_span(group))
    return out + [v for v in space if not _is_count(v)]


def _span(group: list):
    """One value standing for `group` (sorted): its middle, a `_Near` reaching every one."""
    if len(group) == 1:
        return group[0]
    mid = float(group[len(group) // 2])
    return _Near(mid, max(abs(float(v) - mid) + _radius(v) for v in group))


def _check_gaps(expr, points: np.ndarray, rows: np.ndarray, noise: float) -> None:
    """A table's plateaus hold an input within a quarter gap of each value: one that float32
    computes only to `noise` (a softmax's mean of large values: `mean_noise`) needs values
    whose rows differ over 4 noise apart, else it could be read as the other."""
    k = _narrowest_gap(points, rows, noise)
    if k is not None:
        a, b = float(points[k]), float(points[k + 1])
        raise RaspError(f"{_label(expr)}: reads {a!r} and {b!r}, {b - a:.3g} apart, from a "
                        f"softmax's mean that float32 keeps only to about {noise:.2g} at these "
                        "magnitudes: the table could read one as the other")


def _narrowest_gap(points: np.ndarray, rows: np.ndarray, noise: float) -> int | None:
    """k where points k and k + 1 are the nearest two whose rows differ and they are no more
    than 4 noise apart (`_check_gaps`), else None."""
    change = np.flatnonzero(np.any(rows[1:] != rows[:-1], axis=1))
    if change.size == 0:
        return None
    gaps = points[change + 1] - points[change]
    k = int(np.argmin(gaps))
    return int(change[k]) if gaps[k] / 4 <= noise else None


def _merge_float32(expr, points: list[float], rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Points sorted; those float32 cannot tell apart become one, where their rows agree
    (to SAME_POINT: a mean minus a token gives -0.8 and -0.7999999999999998 at two such
    points, one value to any reader)."""
    p, r, clash = _merged_float32(points, rows)
    if clash is not None:
        raise RaspError(f"{_label(expr)}: inputs {clash[0]!r} and {clash[1]!r} are one float32 "
                        "number (closer than float32 can tell apart) but map to different "
                        "values")
    return p, r


def _merged_float32(points: list[float], rows: np.ndarray) -> tuple:
    """(points, rows, clash) of `_merge_float32`: clash the first two points that cannot be
    one (their rows differ), else None."""
    order = np.argsort(np.asarray(points, dtype=np.float64), kind="stable")
    p, r = np.asarray(points, dtype=np.float64)[order], np.asarray(rows)[order]
    same = (np.asarray(p[1:], np.float32) == np.asarray(p[:-1], np.float32)) | \
        (np.diff(p) < SAME_POINT * max(1.0, float(np.abs(p).max(initial=0.0))))
    if same.any():
        apart = np.abs(r[1:] - r[:-1]) > SAME_POINT * max(1.0, float(np.abs(r).max()))
        clash = same & np.any(apart, axis=1)
        if clash.any():
            k = int(np.flatnonzero(clash)[0])
            return p, r, (float(p[k]), float(p[k + 1]))
        keep = np.concatenate([[True], ~same])
        p, r = p[keep], r[keep]
    return p, r, None


def _readable(table: dict, noise: float, numerical: bool) -> bool:
    """Whether `_numeric_table` takes a table over a number s ({s: value}, s sorted) whose
    float32 error is `noise`: no two values of s that float32 cannot tell apart with different
    results (`_merge_float32`), none closer than 4 noise (`_check_gaps`), at most MAX_TABLE
    steps unless a line. Its rows: numbers out, the numbers (one to SAME_POINT); categories,
    an id each (a one-hot row each)."""
    values = list(table.values())
    if numerical:
        rows = np.array([[float(v)] for v in values]).reshape(-1, 1)
    else:
        ids: dict = {}
        rows = np.array([[ids.setdefault(v, len(ids))] for v in values], np.float64)
    points, rows, clash = _merged_float32(list(table), rows)
    if clash is not None or (noise and _narrowest_gap(points, rows, noise) is not None):
        return False
    return (numerical and _affine(points, rows) is not None) or \
        np.count_nonzero(np.any(rows[1:] != rows[:-1], axis=1)) <= MAX_TABLE


# Integer weights (a, b) tried for a SequenceMap's sum s = a x + b y (x - y, x + y, ...).
SUM_WEIGHTS = ((1, -1), (1, 1), (1, -2), (2, -1), (1, 2), (2, 1), (1, 0), (0, 1))


def _sum_weights(pairs: list[tuple], outs: list) -> list[tuple[float, float]]:
    """The weights to try: SUM_WEIGHTS, and f's own where f is affine in (x, y) with numbers
    out (checked on every pair), so that s is f itself."""
    found = [(float(a), float(b)) for a, b in SUM_WEIGHTS]
    if not all(_is_number(o) for o in outs):
        return found
    coef = _plane([float(x) for x, _ in pairs], [float(y) for _, y in pairs],
                  [float(o) for o in outs])
    if coef is not None and (coef[0], coef[1]) not in found:
        found.append((coef[0], coef[1]))
    return found


def _plane(xs: list, ys: list, outs: list) -> tuple[float, float, float] | None:
    """(a, b, c) where outs = a x + b y + c at every (x, y) (to float64 round-off; whole
    coefficients where least squares gives 0.9999999999999998 for 1), else None."""
    xy1 = np.column_stack([xs, ys, np.ones(len(xs))])
    f = np.asarray(outs, np.float64)
    coef = np.linalg.lstsq(xy1, f, rcond=None)[0]
    whole = np.round(coef)
    coef = np.where(np.abs(coef - whole) < 1e-9, whole, coef)
    if not np.allclose(xy1 @ coef, f, rtol=0, atol=1e-12 * max(1.0, float(np.abs(f).max()))):
        return None
    return float(coef[0]), float(coef[1]), float(coef[2])


# Pairs `_affine_fit` asks f at before all of them (most functions are not affine).
AFFINE_PROBES = 8


def _affine_fit(f: Callable, xs: list | None, ys: list | None) -> tuple | None:
    """(a, b, c, numpy_exact) where f(x, y) = a x + b y + c at every pair of xs and ys (to
    float64 round-off), |a| and |b| at most MAX_LINEAR_SLOPE (a table of steps would snap an
    input's float32 error back; a steeper line grows it); numpy_exact where f gives
    (a x + b y) + c bit for bit (numpy's sum of means, `_means_of_sum`). None where not, or
    there are more than MAX_SUM_PAIRS pairs (f is asked at each), or a value is no number.
    A grid of AFFINE_PROBES x AFFINE_PROBES pairs is asked first."""
    if not xs or not ys or len(xs) * len(ys) > MAX_SUM_PAIRS or \
            not all(_is_number(v) for v in itertools.chain(xs, ys)):
        return None
    X, Y = np.array([float(v) for v in xs]), np.array([float(v) for v in ys])

    def fit(px: np.ndarray, py: np.ndarray) -> tuple | None:  # ((a, b, c), f's grid)
        outs = [_call(f, [float(x), float(y)]) for x in px for y in py]
        if not all(_is_number(o) for o in outs):
            return None
        values = np.array([float(o) for o in outs])
        grid = np.meshgrid(px, py, indexing="ij")
        coef = _plane(grid[0].ravel(), grid[1].ravel(), values)
        if coef is None or max(abs(coef[0]), abs(coef[1])) > MAX_LINEAR_SLOPE:
            return None
        return coef, values.reshape(len(px), len(py))

    pick = lambda v: v[np.unique(np.linspace(0, v.size - 1, AFFINE_PROBES).astype(int))]  # noqa
    found = fit(pick(X), pick(Y)) and fit(X, Y)
    if found is None:
        return None
    (a, b, c), outs = found
    return a, b, c, bool(np.array_equal(outs, a * X[:, None] + b * Y[None, :] + c))


class _Sums:
    """A SequenceMap's value pairs and results, asked for s = a x + b y -> f(x, y) over every
    pair (`table`) for several (a, b): whole numbers as int64 arrays (one sort a weight pair),
    else exact rationals pair by pair."""

    def __init__(self, pairs: list[tuple], outs: list):
        self.pairs, self.outs = pairs, outs
        self.whole = all(_integral(v) is not False for v in itertools.chain(*pairs))
        ids: dict = {}  # results that compare equal share an id, as == decides below
        self.ids = np.array([ids.setdefault(o, len(ids)) for o in outs])
        if self.whole:
            self.xy = np.array([[int(float(x)), int(float(y))] for x, y in pairs], np.int64)
            self.big = int(np.abs(self.xy).max(initial=0))

    def table(self, a: float, b: float) -> dict | None:
        """{s: f} sorted by s; None where two pairs with one s give different values (f is
        not a function of s), or where s needs exact rationals over more than MAX_PAIRS
        pairs."""
        ia, ib = _integral(a), _integral(b)
        if not self.whole or ia is False or ib is False or \
                (abs(ia) + abs(ib)) * self.big >= 2 ** 52:
            if len(self.pairs) > MAX_PAIRS:
                return None  # (rationals pair by pair: a minute at 2^20 pairs)
            return _table_of_sum(self.pairs, self.outs, a, b)
        s = self.xy @ np.array([ia, ib], np.int64)
        order = np.argsort(s, kind="stable")
        s, ids = s[order], self.ids[order]
        same = s[1:] == s[:-1]
        if np.any(ids[1:][same] != ids[:-1][same]):
            return None
        firsts = np.flatnonzero(np.concatenate([[True], ~same]))
        return {float(s[i]): self.outs[order[i]] for i in firsts}


def _table_of_sum(pairs: list[tuple], outs: list, a: float, b: float) -> dict | None:
    """s -> f(x, y) over every pair, s = a x + b y in exact rationals, pair by pair, keyed by
    s in float64; None where two pairs with one s (or two s float64 cannot tell apart) give
    different values (f is not a function of s)."""
    whole = all(_integral(v) is not False for v in (a, b, *itertools.chain(*pairs)))
    exact = _integral if whole \
        else (lambda v: Fraction(float(v)))  # integers where they are (fast), else rationals
    fa, fb = exact(a), exact(b)
    table: dict = {}
    for (x, y), o in zip(pairs, outs):
        s = fa * exact(x) + fb * exact(y)
        if table.setdefault(s, o) != o:
            return None
    out: dict = {}
    for s in sorted(table):  # (sums float64 rounds to one number are one point, if one value:
        if out.setdefault(float(s), table[s]) != table[s]:  # 0.1 + 2 and 1.1 + 1 are 2.1)
            return None
    return out


def _integral(v):
    """v as a Python int where it is a whole number (else False)."""
    f = float(v)
    return int(f) if f.is_integer() and abs(f) < 2 ** 52 else False


def _steps_cost(table: dict, numerical: bool) -> int:
    """Neurons of the table of steps over s (two a change of value; none where the map is
    affine with numbers out, a `tw.linear`)."""
    values = list(table.values())
    if numerical and _affine(np.array(list(table)), np.array([[float(v)] for v in values])):
        return 0
    return 2 * sum(1 for u, v in zip(values, values[1:]) if u != v)


# Steepest affine numerical map computed as a `tw.linear` (an input's float32 error grows by
# the slope; a table of steps would snap it back instead).
MAX_LINEAR_SLOPE = 64.0


def _affine(points: np.ndarray, rows: np.ndarray) -> tuple[float, float] | None:
    """(slope, intercept) where one-column rows are slope * point + intercept at every point
    (to float64 round-off) and the slope is at most MAX_LINEAR_SLOPE; else None."""
    if rows.shape[1] != 1 or points.size < 2 or not all(_is_number(r) for r in rows[:, 0]):
        return None
    p, r = points.astype(np.float64), rows[:, 0].astype(np.float64)
    slope = (r[-1] - r[0]) / (p[-1] - p[0])
    intercept = r[0] - slope * p[0]
    scale = max(1.0, float(np.abs(r).max()))
    if abs(slope) > MAX_LINEAR_SLOPE or \
            not np.allclose(slope * p + intercept, r, rtol=0, atol=1e-12 * scale):
        return None
    return float(slope), float(intercept)


def _parabola(column: np.ndarray, tolerance: float | None) -> tuple[float, float, float] | None:
    """(a, b, c) where column[i] = a i^2 + b i + c at every index i (to float64 round-off),
    and float32 computes a i^2 + b i + c within `tolerance` (default CLEAN of the column's
    largest entry): exactly where a, b and c are whole and every term below 2^24; else None."""
    n = column.size
    if n < 3 or not np.all(np.isfinite(column)):
        return None
    i = np.arange(n, dtype=float)
    fit = np.linalg.lstsq(np.stack([i * i, i, np.ones(n)], axis=1), column, rcond=None)[0]
    whole = np.all(column == np.round(column))
    if whole:
        fit = np.round(fit)
    a, b, c = (float(x) for x in fit)
    largest = max(1.0, float(np.abs(column).max()))
    if not np.allclose(a * i * i + b * i + c, column, rtol=0, atol=1e-12 * largest):
        return None
    terms = abs(a) * n * n + abs(b) * n + abs(c)
    error = 0.0 if whole and terms < 2 ** 24 else 2.0 ** -22 * terms
    if error > (CLEAN * largest if tolerance is None else tolerance):
        return None
    return a + 0.0, b + 0.0, c + 0.0


def _query_tolerance(b: np.ndarray, lift: np.ndarray | None,
                     digits: int = 1) -> np.ndarray | None:
    """Per column of a query's features (s 2t | -s per digit, then lift), the float32 error
    a head through the key's number accepts from its query's table: errors e0, e1, e2 move
    a key k's logit by e0 k + e1 k^2 per digit and BOS's by e2, so with K the largest |k|
    (of a digit), D the digits and e0 <= GAIN / (12 D K), e1 <= GAIN / (12 D K^2),
    e2 <= GAIN / 12 the selected keys stay at least GAIN / 4 above BOS (and further above
    every other key value, whose gap grows as (k - t)^2). Every selected key holds one
    value, so an error moves them all alike. None (the one-hot's own, CLEAN) where the
    head is not through the key's number."""
    if lift is None:
        return None
    big = max(1.0, float(np.abs(b[:, 0::2]).max()))
    per_digit = [1 / (digits * big), 1 / (digits * big ** 2)]
    return GAIN / 12 * np.array(per_digit * digits + [1.0])


def _one_hot_rows(outs: list, space: list, width: int) -> np.ndarray:
    """A table's rows: each result's column in `space` hot (none for _NONE), `width` wide."""
    col = {v: i for i, v in enumerate(space)}
    rows = np.zeros((len(outs), width))
    for r, o in enumerate(outs):
        if o is not _NONE:
            rows[r, col[o]] = 1.0
    return rows


def _key_tolerance(b: np.ndarray, noisy_query: bool, digits: int = 1) -> np.ndarray:
    """Per column of a noisy key's features (k, k^2 per digit) read from a table, the float32
    error a head through the key's number accepts: with g the least gap between a digit's
    values, K its largest |value| and D the digits, each query's scale is at most GAIN / g^2
    and its features (2 t s, -s) have |t| <= K, so errors e1 <= g^2 / (4 K D) budget,
    e2 <= g^2 / (2 D) budget move a logit by at most GAIN budget: GAIN / 8 beside an exact
    query (selected keys stay 3 GAIN / 8 above BOS), GAIN / 96 beside a noisy one
    (`_query_tolerance` leaves it GAIN / 4)."""
    budget = (1 / 96 if noisy_query else 1 / 8) / digits
    out = []
    for i in range(digits):
        k = np.unique(b[:, 2 * i])
        big = max(1.0, float(np.abs(k).max()))
        gap = float(np.diff(k).min()) if k.size > 1 else 1.0
        out += [gap ** 2 / (4 * big) * budget, gap ** 2 / 2 * budget]
    return np.array(out)


def _ranked(a):
    """k where SOp a is `SelectorWidth(Select(k, k, LT / LEQ / GT / GEQ))`: per input, a
    strictly increasing (decreasing) function of k, so a's value fixes k's; else None."""
    return _ordered_by(a.selector) if isinstance(a, rasp.SelectorWidth) else None


def _ordered_by(selector):
    """k where the selector is `Select(k, k, LT / LEQ / GT / GEQ)`: k compared with itself
    in an order; else None."""
    orders = (rasp.Comparison.LT, rasp.Comparison.LEQ, rasp.Comparison.GT,
              rasp.Comparison.GEQ)
    if not isinstance(selector, rasp.Select) or \
            selector.keys.unique_id != selector.queries.unique_id or \
            selector.predicate not in orders:
        return None
    return selector.keys


# Fewest values of a key that is a function of one root for which `_rank_split`'s two or
# three heads over x (and their sum) beat one head over the key's one-hot (fuzz programs at
# lengths 3-4: 3-4 key values, the split a layer deeper; at 30: 30 values, d 64 -> 10).
MIN_SPLIT_KEYS = 8
# Largest logit (in GAIN units) a head through the key's number may reach: its float32
# rounding must stay far below the gap between selected and unselected keys.
MAX_NEAREST_LOGIT = 1e5
# Most digits a key's rank is read in through its number (`_nearest_key`): each digit costs a
# head two dimensions; three keep 10^4 ranks' tables to a precision of about 1 / 500.
MAX_DIGITS = 3


def _exact(enc: Encoded) -> bool:
    """Whether a one-hot is exactly 0/1 at every position: a linear map of the embedding's
    or a position table's columns (not a table's steps, nor a softmax's mean)."""
    op = _through_linear(enc.value)[0].owner
    if isinstance(op, SliceOp):
        op = op.x.owner
    return not enc.noisy and isinstance(op, (EmbeddingOp, PosTableOp))


def _nearest_key(pred: np.ndarray, key_values: list | None, bos_weight: float,
                 bos_error: float | None = None, digits: int = 1, extend: bool = False):
    """(A, B, lift) for a selector where every query selects the keys of at most one value,
    and the keys (numbers, or the ranks of other values) are never None and not noisy (one
    value must give the same logit at every position: its keys share the softmax evenly):
    logits s (2 t k - k^2)
    = s (t^2 - (k - t)^2) peak at the selected value t, whichever the key, so the head
    needs two dimensions however many values there are (reverse's `indices == opp_idx`:
    2, not 50 at length 50).
    s = GAIN / (gap to the nearest other key value)^2, per query class, keeps every
    unselected key GAIN below; BOS's logit is lifted to s t^2 - GAIN (1 - bos_weight), its
    place beside a selected key in the one-hot form. None where this does not apply or is
    not narrower.

    `digits` > 1: the key's rank r in that many digits of radix R (the least with
    R^digits >= the key values), logits GAIN sum_i (2 t_i r_i - r_i^2), two dimensions a
    digit: every digit that differs costs GAIN, and a table giving a noisy key's digits (or
    a query's) needs a precision of about 1 / R^2 of its largest row, not 1 / values^2.

    `bos_error` (a SelectorWidth's head, which reads BOS's share of the softmax, not only
    which keys win): how far float32 may move BOS's logit from the selected keys'. Where
    BOS's logit s t^2 - GAIN + bos_weight GAIN is too large for that (4 roundings), the
    logits are centred, -s (k - t)^2 through a third dimension (the key's 1, the query's
    -s t^2), so a selected key's logit is 0 and BOS's lift -GAIN is small; only where every
    weight is a whole number and every logit below 2^24, so float32 computes them exactly
    (26 tokens at length 50: BOS's logit near 10^5, its rounding 0.004, moved the share past
    the width table's plateaus). One digit only.

    `extend`: queries that select nothing take the line of the others' targets where that
    keeps BOS on top (`_extend_to_empty_rows`)."""
    if key_values is None or pred.shape[1] < 3 or (digits > 1 and bos_error is not None):
        return None
    if np.any(pred.sum(axis=1) > 1) or not np.all((pred == 0) | (pred == 1)):
        return None
    rows = np.flatnonzero(pred.sum(axis=1))  # queries that select a value, and which
    chosen = np.array([int(np.flatnonzero(pred[row])[0]) for row in rows], dtype=int)
    if digits > 1:
        a, b, lift = _rank_digits(pred.shape, rows, chosen, digits)
        centred = False
    else:
        numbers = all(_is_number(v) for v in key_values)  # other values: their ranks
        k = np.array([float(v) for v in key_values] if numbers else range(len(key_values)),
                     float)
        t = k[chosen]
        gaps = np.abs(k[None, :] - t[:, None])
        gaps[gaps == 0] = np.inf  # (the selected value itself)
        if np.any(np.sum(k[None, :] == t[:, None], axis=1) > 1):
            return None  # two keys of one number
        scale = GAIN / gaps.min(axis=1, initial=np.inf) ** 2
        lift = np.zeros(pred.shape[0])
        lift[rows] = scale * t ** 2 - GAIN
        centred = bos_error is not None and \
            float(np.abs(lift[rows] + bos_weight * GAIN).max(initial=0.0)) * 2.0 ** -22 > \
            bos_error
        a = np.zeros((pred.shape[0], 3))
        a[rows] = scale[:, None] * np.stack([2 * t, -np.ones_like(t), -t ** 2], axis=1)
        b = np.stack([k, k * k, np.ones_like(k)], axis=1)
        if centred:
            lift[rows] = -GAIN
        else:
            a, b = a[:, :2], b[:, :2]
            if extend:
                _extend_to_empty_rows(a, lift, rows, t, scale, k)
    largest = (np.abs(a) @ np.abs(b).T).max()
    if largest > MAX_NEAREST_LOGIT * GAIN:
        return None
    if centred and (largest >= 2 ** 24 or np.any(a != np.round(a)) or np.any(b != np.round(b))):
        return None
    if min(len(_distinct_rows(pred)[0]), len(_distinct_rows(pred.T)[0])) <= 2 * digits:
        return None  # the one-hot form is as narrow
    return a, b, lift


def _extend_to_empty_rows(a: np.ndarray, lift: np.ndarray, rows: np.ndarray, t: np.ndarray,
                          scale: np.ndarray, k: np.ndarray) -> None:
    """Give the queries that select nothing (A's zero rows) the target t of the line through
    the others' (shift_by's `q == k + 2`: t = q - 2 below q = 2 too), where one scale serves
    every query and each such t is a whole gap from every key: BOS, lifted to s t^2 - GAIN,
    still outweighs every key by GAIN / 2 there, and A's rows and the lift are then a line
    and a parabola in the query's class, which a read of the indices takes from the position
    columns (`_index_columns`), not a table column each. Else A is left as it is."""
    empty = np.setdiff1d(np.arange(a.shape[0]), rows)
    if not empty.size or rows.size < 2 or np.any(scale != scale[0]):
        return
    line = _affine(rows.astype(float), t[:, None])
    if line is None:
        return
    extended = line[0] * empty + line[1]
    gap = math.sqrt(GAIN / scale[0])
    if np.any(np.abs(k[None, :] - extended[:, None]).min(axis=1) < gap):
        return
    a[empty] = scale[0] * np.stack([2 * extended, -np.ones_like(extended)], axis=1)
    lift[empty] = scale[0] * extended ** 2 - GAIN


def _rank_digits(shape: tuple[int, int], rows: np.ndarray, chosen: np.ndarray,
                 digits: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`_nearest_key`'s (A, B, lift) over the keys' ranks in `digits` digits: B's columns
    (r_i, r_i^2) per digit, A's rows GAIN (2 t_i, -1) for the query rows that select rank t
    (`chosen`), lift GAIN (sum t_i^2 - 1) there."""
    queries, keys = shape
    radix = 2
    while radix ** digits < keys:
        radix += 1
    place = radix ** np.arange(digits)
    r = (np.arange(keys)[:, None] // place[None, :]) % radix  # keys x digits
    t = r[chosen].astype(float)
    b = np.empty((keys, 2 * digits))
    b[:, 0::2], b[:, 1::2] = r, r * r
    a = np.zeros((queries, 2 * digits))
    a[rows, 0::2], a[rows, 1::2] = 2 * GAIN * t, -GAIN
    lift = np.zeros(queries)
    lift[rows] = GAIN * ((t * t).sum(axis=1) - 1)
    return a, b, lift


def _factor(m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """m = A B^T exactly, with as few columns as m has distinct rows or distinct columns
    (whichever is fewer): a selector that tells few key (or query) values apart needs that
    many query/key dimensions, not one per value."""
    cols_t, col_class = _distinct_rows(m.T)
    rows, row_class = _distinct_rows(m)
    if cols_t.shape[0] <= rows.shape[0]:  # keys by their column class
        return cols_t.T, np.eye(cols_t.shape[0])[col_class]
    return np.eye(rows.shape[0])[row_class], rows.T


# How far (relative to the largest code) float32 may move a coded output: a table's CLEAN,
# a softmax's rounding, a few of them summed. Codes are used only where decoding's tolerance
# is wider.
CODE_NOISE = 1e-5


def output_codes(space: list, max_seq_len: int, mixes: bool = True) -> tuple | None:
    """A categorical output's codes (all >= 1: 0 is None), their shift and decoding's
    tolerance; None where a one-hot is better (fewer than two values) or codes would not
    survive float32. Number values are coded as themselves shifted by 1 - their least where
    that is below 1, so a mix (a categorical Aggregate over different numbers) is their mean
    shifted alike; other values, or numbers too close together, by rank 1, 2, ... (shift
    None). Tolerance: a quarter of the smallest gap over n + 1, since a mean of at most n
    codes sits on a code or (integer codes) at least gap / n off it. Ranks of an output that
    cannot be a mix (`mixes` False: `_may_mix`) are kept within a quarter gap, and every
    code is decoded as the nearest (shift None): at length 200 a width's 201 codes then fit
    one MLP, not 201 one-hot columns."""
    if len(space) < 2:
        return None
    candidates = []  # (codes, shift, how many gaps' quarters the tolerance is)
    if all(_is_number(v) for v in space):
        numbers = np.array([float(v) for v in space])
        shift = max(0.0, 1.0 - float(numbers.min()))
        candidates.append((numbers + shift, shift if mixes else None, max_seq_len + 1))
    candidates.append((np.arange(1.0, len(space) + 1.0), None, max_seq_len + 1 if mixes else 1))
    for codes, shift, parts in candidates:
        gap = float(np.diff(np.sort(np.concatenate([[0.0], codes]))).min())
        tolerance = gap / (4 * parts)
        if CODE_NOISE * float(codes.max()) <= tolerance:
            return codes, shift, tolerance
    return None


def _may_mix(expr) -> bool:
    """Whether a categorical SOp's value may be a mix (a categorical Aggregate over keys of
    different numbers, which RASP's evaluator averages), or a map of one: an Aggregate
    reached through Maps and SequenceMaps (a SelectorWidth, tokens, indices or a constant
    is always one value)."""
    stack, seen = [expr], set()
    while stack:
        e = stack.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, rasp.Aggregate):
            return True
        if isinstance(e, rasp.Map):
            stack.append(e.inner)
        elif isinstance(e, rasp.SequenceMap):
            stack.extend([e.fst, e.snd])
    return False


def _distinct_rows(m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the distinct rows of m, each row's class): rows compared as bytes, one sort of
    whole rows (np.unique(axis=0) compares column by column: seconds for sort_freq's
    2,550 x 2,550 selector at length 50)."""
    m = np.ascontiguousarray(m, dtype=np.float64) + 0.0  # -0.0 and 0.0 as one value
    as_bytes = m.view(np.dtype((np.void, m.dtype.itemsize * m.shape[1]))).reshape(-1)
    _, first, inverse = np.unique(as_bytes, return_index=True, return_inverse=True)
    return m[first], inverse.reshape(-1)


def _readers(program) -> Counter:
    """How many expressions read each expression of the program, by id() (a RASP
    expression's unique_id is drawn when first asked, and names it: a walk here must not
    renumber the program's labels)."""
    readers: Counter = Counter()
    seen, stack = {id(program)}, [program]
    while stack:
        expr = stack.pop()
        for child in expr.children:
            readers[id(child)] += 1
            if id(child) not in seen:
                seen.add(id(child))
                stack.append(child)
    return readers


def _tuple_neurons(sizes: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """(W1, b1) of a neuron per tuple of k one-hots' values (product order): relu(the sum
    of its k columns - (k - 1)), 1 exactly where every part is hot."""
    n = math.prod(sizes)
    w1 = np.zeros((sum(sizes), n))
    offset = 0
    for i, size in enumerate(sizes):  # part i's value index in each tuple
        w1[offset + (np.arange(n) // math.prod(sizes[i + 1:])) % size, np.arange(n)] = 1.0
        offset += size
    return w1, np.full(n, 1.0 - len(sizes))


def _leaf_slot(leaves: list, sop) -> int:
    """sop's index in `leaves`, appended where it is not there yet (by identity)."""
    for i, other in enumerate(leaves):
        if other is sop:
            return i
    leaves.append(sop)
    return len(leaves) - 1


def _root(s, memo: dict | None = None):
    """The one SOp that s is a function of through Maps and SequenceMaps (constants `Full`
    fit any): tokens or indices (their canonical, categorical objects) or another SOp;
    s itself where its inputs have no common root. (`memo`: answers by unique_id, shared
    by the calls of one translation: a program's SOps form a DAG.)"""
    found = _root_or_constant(s, {} if memo is None else memo)
    return s if found is None else found


def _root_or_constant(s, memo: dict):
    """`_root`, or None for a constant (a Full, or Maps of one)."""
    if s.unique_id in memo:
        return memo[s.unique_id]
    if isinstance(s, rasp.TokensType):
        found = rasp.tokens
    elif isinstance(s, rasp.IndicesType):
        found = rasp.indices
    elif isinstance(s, rasp.Full):
        found = None
    elif isinstance(s, rasp.Map):
        found = _root_or_constant(s.inner, memo)
    elif isinstance(s, rasp.SequenceMap):
        a, b = _root_or_constant(s.fst, memo), _root_or_constant(s.snd, memo)
        found = a if b is None else b if a is None or _same_sop(a, b) else s
    else:
        found = s
    memo[s.unique_id] = found
    return found


def _same_sop(a, b) -> bool:
    return a is b or a.unique_id == b.unique_id


def _at_root(s, root, r, memo: dict | None = None):
    """s's value where its root (`_root`) holds r, as RASP's evaluator gives it (None passes
    on; _NONE where a function raises or gives None). `memo`: values by unique_id, for this
    r."""
    return _at_leaves(s, {_leaf_key(root): r}, {} if memo is None else memo)


def _leaf_key(s):
    """What identifies a leaf of `_functions_of`: tokens and indices by kind (every annotated copy
    is one), any other SOp by its unique_id."""
    if isinstance(s, rasp.TokensType):
        return "tokens"
    if isinstance(s, rasp.IndicesType):
        return "indices"
    return s.unique_id


def _functions_of(s, memo: dict) -> dict:
    """The SOps s is a function of through Maps and SequenceMaps, by `_leaf_key` (constants
    `Full` are none; tokens and indices their canonical objects). `memo`: by unique_id."""
    if s.unique_id not in memo:
        if isinstance(s, rasp.TokensType):
            found = {"tokens": rasp.tokens}
        elif isinstance(s, rasp.IndicesType):
            found = {"indices": rasp.indices}
        elif isinstance(s, rasp.Full):
            found = {}
        elif isinstance(s, rasp.Map):
            found = _functions_of(s.inner, memo)
        elif isinstance(s, rasp.SequenceMap):
            found = {**_functions_of(s.fst, memo), **_functions_of(s.snd, memo)}
        else:
            found = {s.unique_id: s}
        memo[s.unique_id] = found
    return memo[s.unique_id]


def _at_leaves(s, values: dict, memo: dict):
    """s's value where its leaves hold `values` (by `_leaf_key`), as `_at_root`."""
    if s.unique_id in memo:
        return memo[s.unique_id]
    key = _leaf_key(s)
    if key in values:
        v = values[key]
    elif isinstance(s, rasp.Full):
        v = s.fill
    elif isinstance(s, rasp.Map):
        x = _at_leaves(s.inner, values, memo)
        v = _NONE if x is _NONE else _apply(s.f, x)
    else:
        a, b = _at_leaves(s.fst, values, memo), _at_leaves(s.snd, values, memo)
        v = _NONE if a is _NONE or b is _NONE else _apply(s.f, a, b)
    memo[s.unique_id] = v
    return v


def _tuple_at_root(sops: list, root, r):
    """The tuple of the sops' values where their root holds r (_NONE where one is None)."""
    memo: dict = {}
    values = tuple(_at_root(s, root, r, memo) for s in sops)
    return _NONE if any(v is _NONE for v in values) else values


def _composed(m, s):
    """Map m of SequenceMap s as one SequenceMap (m's label and encoding): None where s
    gives None, as RASP's Map passes None on."""
    f, g = m.f, s.f

    def h(x, y):
        v = g(x, y)
        return None if v is None else f(v)
    fused = rasp.SequenceMap(h, s.fst, s.snd).named(m.label)
    return rasp.numerical(fused) if rasp.is_numerical(m) else rasp.categorical(fused)


def _wider_only_for(x: Value, v: Value) -> bool:
    """Whether x, the input of the `tw.linear` that made v, is an MLP's output that only
    linears read, all of them together narrower than x (a joint one-hot of value pairs,
    tabled): a head reading x through the linear would keep all of x in the residual where
    their columns suffice (a rotation's `(i + 1) % length` at length 20: 400 pairs against
    20 values, d 447 -> 45)."""
    if x is v or not isinstance(x.owner, MlpOp):
        return False
    readers = [use.operation for use in x.uses]
    return all(isinstance(op, LinearOp) for op in readers) and \
        sum(width_of(op.results[0]) for op in readers) < width_of(x)


def _through_linear(v: Value) -> tuple[Value, np.ndarray, np.ndarray]:
    """(x, M, b) with v = x M + b: a `tw.linear`'s operand and weights, else (v, I, 0)."""
    op = v.owner
    if isinstance(op, LinearOp):
        m = to_numpy(op.weight, np.float64)
        b = to_numpy(op.bias, np.float64) if op.bias is not None else np.zeros(m.shape[1])
        return op.x, m, b
    n = width_of(v)
    return v, np.eye(n), np.zeros(n)


class _None:
    """Marks a table entry with no value (the function failed or gave None)."""


_NONE = _None()


def _call(f: Callable, args):
    try:
        out = f(*args)
    except Exception:  # noqa: BLE001 - a value the program never meets at run time
        return _NONE
    if out is None:
        return _NONE
    try:
        hash(out)
    except TypeError:
        raise RaspError(f"a map gave {out!r}, which is not hashable: RASP values are numbers, "
                        "strings, booleans or tuples") from None
    return out


def _apply(f: Callable, *args):
    """f at one tuple of values (_NONE where it raises or gives None). Where an argument is
    a `_Near`, f is also asked at its radius's two ends: a result that jumps there (a
    threshold at the mean itself) is `_Unsteady`; a number that only moves a little is a
    `_Near` itself, so a later reader is asked alike."""
    if not any(type(a) is _Near for a in args):
        return _call(f, args)
    plain = [float(a) if type(a) is _Near else a for a in args]
    out = _call(f, plain)
    spread = 0.0  # (each argument may be off at once: their moves add up)
    for i, a in enumerate(args):
        if type(a) is not _Near:
            continue
        moves = []
        for end in (plain[i] - a.radius, plain[i] + a.radius):
            other = _call(f, [*plain[:i], end, *plain[i + 1:]])
            moved = _moved(out, other)
            if moved is None:
                raise _Unsteady(plain[i], a.radius, out, end, other)
            moves.append(moved)
        spread += max(moves)
    return _near(out, spread) if isinstance(out, float) else out


def _moved(out, other) -> float | None:
    """How far `other` (f a radius away) is from `out`: 0 where equal, the distance where
    both are floats a little apart (a number that moves with its input), None where the
    result jumps (another category, an integer, None)."""
    if type(out) is type(other) and out == other:
        return 0.0
    if _is_count(out) and _is_count(other) and (isinstance(out, float) or
                                                isinstance(other, float)):
        moved = abs(float(other) - float(out))
        if moved <= STEADY * max(1.0, abs(float(out))):
            return moved
    return None


def _is_count(v) -> bool:
    """A number that is not a bool (max(x, 1) gives 1 or x, one number either way)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool)


# How far (relative) a float result may move within a `_Near` argument's radius and still
# be the same value moved a little: radii are ulps of float64, so only a jump exceeds it.
STEADY = 1e-9


class _Near(float):
    """A number that RASP's evaluator may give a little off: a mean of values whose float64
    sums round (RASP adds them in list order; the value set holds the exact quotient,
    rounded once) lies within `radius` of it, and so does anything computed from one.
    A reader whose result jumps within that radius would differ from RASP on inputs that
    float32 cannot tell apart, so it is refused (`_apply`, `_selection`): a threshold at
    a mean itself (x > 1000.25 of means of 1000.1, 1000.2 and 1000.4: RASP gives
    1000.2500000000001 for some orders of the same keys). Arithmetic carries the radius
    (a LinearSequenceMap's sums)."""

    __slots__ = ("radius",)

    def __new__(cls, x: float, radius: float):
        near = super().__new__(cls, x)
        near.radius = radius
        return near

    def _then(self, x: float, radius: float):
        return _near(x, radius + ULP64 * abs(x))

    def __add__(self, o):
        return self._then(float(self) + float(o), self.radius + _radius(o))

    __radd__ = __add__

    def __sub__(self, o):
        return self._then(float(self) - float(o), self.radius + _radius(o))

    def __rsub__(self, o):
        return self._then(float(o) - float(self), self.radius + _radius(o))

    def __mul__(self, o):
        return self._then(float(self) * float(o),
                          abs(float(o)) * self.radius + abs(float(self)) * _radius(o))

    __rmul__ = __mul__

    def __truediv__(self, o):
        return self._then(float(self) / float(o),
                          (self.radius + abs(float(self) / float(o)) * _radius(o)) /
                          abs(float(o)))

    def __neg__(self):
        return _Near(-float(self), self.radius)

    def __abs__(self):
        return _Near(abs(float(self)), self.radius)

    def __reduce__(self):
        return (_Near, (float(self), self.radius))


ULP64 = 2.0 ** -52  # float64's relative spacing


def _radius(v) -> float:
    return v.radius if type(v) is _Near else 0.0


def _near(x: float, radius: float):
    return _Near(x, radius) if radius > 0 and isinstance(x, float) else x


def _plain(v):
    """v without a `_Near`'s radius (what a model or a user sees)."""
    return float(v) if type(v) is _Near else v


class _Unsteady(RaspError):
    """A function whose result jumps within a `_Near` argument's radius (`_apply`); `sop`
    names the expression that asked it."""

    def __init__(self, x, radius, out, end, other):
        show = lambda v: None if v is _NONE else v  # noqa: E731
        self.why = (f"reads {x!r}, a value that RASP's float64 sums can give up to "
                    f"{radius:.2g} off (a mean's round-off, or values float32 cannot tell "
                    f"apart), and its result moves within that ({show(out)!r} there, "
                    f"{show(other)!r} at {end!r}): the compiled model could differ from RASP")
        super().__init__(self.why)


def _mean_radius(values, n: int) -> Callable[[float], float] | None:
    """How far RASP's float64 mean of at most n of `values` may sit from the exact quotient
    (rounded once), per mean q: None where every partial sum is exact (integers, halves,
    0/1: the quotient is RASP's). Each addition rounds by an ulp of its partial sum, which
    for values of one sign is at most the whole sum (m q), else m times the largest |value|;
    twice that, as the bound."""
    vals, common = _fractions(values)
    if not vals:
        return None
    largest = max(abs(v) for v in vals)
    if largest * common * n < 2 ** 53:
        return None
    if min(vals) < 0 < max(vals):
        radius = ULP64 * n * float(largest)
        return lambda q: radius
    return lambda q: ULP64 * n * abs(q)


def _is_prefix(selector) -> bool:
    """Whether the selector is `Select(indices, indices, LEQ)`: key <= query, every position
    up to the query's own, which a causal mask gives for nothing."""
    return isinstance(selector, rasp.Select) and \
        isinstance(selector.keys, rasp.IndicesType) and \
        isinstance(selector.queries, rasp.IndicesType) and \
        selector.predicate is rasp.Comparison.LEQ


def _without_prefix(selector) -> tuple:
    """(rest, True) where the selector is `indices <= indices`, alone or as a conjunct of an
    And chain: a causal head then needs only the rest (TRUE where nothing is left: every
    token), and its keys and queries need no one-hot of the indices (frac_prevs: d_head 8,
    not 64, at length 50). Else (selector, False)."""
    if _is_prefix(selector):
        return rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.TRUE), True
    if isinstance(selector, rasp.SelectorAnd):
        for part, other in ((selector.fst, selector.snd), (selector.snd, selector.fst)):
            rest, prefix = _without_prefix(part)
            if prefix:
                return (other if _is_prefix(part) else rasp.SelectorAnd(rest, other)), True
    return selector, False


def _conjuncts(selector) -> list:
    """The selectors an And chain joins (the selector itself where it is no And)."""
    if isinstance(selector, rasp.SelectorAnd):
        return _conjuncts(selector.fst) + _conjuncts(selector.snd)
    return [selector]


def _summed(reads: list) -> tuple:
    """One (x, W, bias, at_bos) read of several `_read`s whose sum a head takes: their
    values side by side (one a value read twice), matrices stacked, biases summed."""
    xs, ws = [], []
    for x, w, _, _ in reads:
        same = next((i for i, y in enumerate(xs) if y is x), None)
        if same is None:
            xs.append(x)
            ws.append(w)
        else:
            ws[same] = ws[same] + w
    x = xs[0] if len(xs) == 1 else tw.concat(*xs)
    return x, np.vstack(ws), sum(r[2] for r in reads), sum(r[3] for r in reads)


def _leaves(selector) -> list:
    if isinstance(selector, (rasp.Select, rasp.ConstantSelector)):
        return [selector]
    if isinstance(selector, (rasp.SelectorAnd, rasp.SelectorOr)):
        return _leaves(selector.fst) + _leaves(selector.snd)
    if isinstance(selector, rasp.SelectorNot):
        return _leaves(selector.inner)
    raise AssertionError(f"{_label(selector)}: validate.py admits only the selectors above")


# numpy's comparison of a Comparison's two number vectors (key first, as RASP's)
_VECTOR_COMPARISONS = {"EQ": np.equal, "LT": np.less, "LEQ": np.less_equal,
                       "GT": np.greater, "GEQ": np.greater_equal, "NEQ": np.not_equal}


def _selection(selector, k_tuples: list, q_tuples: list, k_slot: dict, q_slot: dict
               ) -> np.ndarray:
    """(queries, keys) 1.0 where the selector holds (`_selected` at every pair, with a
    Comparison between numbers compared as whole vectors: sort_freq at length 50 weighs
    2,550 x 2,550 pairs); a predicate that raises at a pair (one the program never meets:
    the evaluator would raise too) selects nothing there, short-circuits included."""
    held, raised = _tree(selector, k_tuples, q_tuples, k_slot, q_slot)
    return (held & ~raised).astype(np.float64)


def _tree(selector, k_tuples, q_tuples, k_slot, q_slot) -> tuple[np.ndarray, np.ndarray]:
    """(held, raised) of a selector tree over every (query, key) pair; `raised` marks pairs
    where evaluating it (left to right, short-circuiting as Python does) raised."""
    if isinstance(selector, (rasp.SelectorAnd, rasp.SelectorOr)):
        a = _tree(selector.fst, k_tuples, q_tuples, k_slot, q_slot)
        b = _tree(selector.snd, k_tuples, q_tuples, k_slot, q_slot)
        if isinstance(selector, rasp.SelectorAnd):  # b is read only where a holds
            return a[0] & b[0], a[1] | (a[0] & b[1])
        return a[0] | b[0], a[1] | (~a[0] & b[1])  # Or: b is read only where a fails
    if isinstance(selector, rasp.SelectorNot):
        held, raised = _tree(selector.inner, k_tuples, q_tuples, k_slot, q_slot)
        return ~held, raised
    vector = _compared(selector, k_tuples, q_tuples, k_slot, q_slot)
    if vector is not None:
        return vector, np.zeros_like(vector)
    held = np.zeros((len(q_tuples), len(k_tuples)), dtype=bool)
    raised = np.zeros_like(held)
    for a, qt in enumerate(q_tuples):
        for b, kt in enumerate(k_tuples):
            try:
                held[a, b] = bool(_selected(selector, kt, qt, k_slot, q_slot))
            except _Unsteady:
                raise
            except Exception:  # noqa: BLE001 - the user's predicate, on a pair it cannot read
                raised[a, b] = True
    return held, raised


def _compared(selector, k_tuples, q_tuples, k_slot, q_slot) -> np.ndarray | None:
    """A Select whose predicate is a Comparison between numbers, as a whole boolean matrix
    (None otherwise: the caller asks the predicate pair by pair)."""
    if not isinstance(selector, rasp.Select) or \
            not isinstance(selector.predicate, rasp.Comparison):
        return None
    keys = [kt[k_slot[selector.keys.unique_id]] for kt in k_tuples]
    queries = [qt[q_slot[selector.queries.unique_id]] for qt in q_tuples]
    name = selector.predicate.name
    if name in ("TRUE", "FALSE"):
        return np.full((len(queries), len(keys)), name == "TRUE")
    if name not in _VECTOR_COMPARISONS or not all(
            _is_number(v) and abs(float(v)) < 2 ** 52 for v in [*keys, *queries]):
        return None
    k = np.array([float(v) for v in keys])
    q = np.array([float(v) for v in queries])
    held = _VECTOR_COMPARISONS[name](k[None, :], q[:, None])
    rk = np.array([_radius(v) for v in keys])
    rq = np.array([_radius(v) for v in queries])
    if rk.any() or rq.any():  # a comparison flips only where the two may meet
        reach = rk[None, :] + rq[:, None]
        close = (reach > 0) & (np.abs(k[None, :] - q[:, None]) <= reach)
        if close.any():
            a, b = np.argwhere(close)[0]
            raise _Unsteady(float(k[b]), float(reach[a, b]), bool(held[a, b]), float(q[a]),
                            not held[a, b])
    return held


def _selected(selector, kt: tuple, qt: tuple, k_slot: dict, q_slot: dict) -> bool:
    """The selector tree at one (key tuple, query tuple)."""
    if isinstance(selector, rasp.Select):
        k = kt[k_slot[selector.keys.unique_id]]
        q = qt[q_slot[selector.queries.unique_id]]
        if type(k) is _Near or type(q) is _Near:  # (asked at their radii's ends too)
            held = _apply(lambda x, y: bool(selector.predicate(x, y)), k, q)
            if held is _NONE:
                raise ValueError("the predicate raised")
            return held
        return bool(selector.predicate(k, q))
    if isinstance(selector, rasp.ConstantSelector):
        i = rasp.indices.unique_id
        q, k = qt[q_slot[i]], kt[k_slot[i]]
        rows = selector.value
        return q < len(rows) and k < len(rows[q]) and bool(rows[q][k])
    if isinstance(selector, rasp.SelectorAnd):
        return _selected(selector.fst, kt, qt, k_slot, q_slot) and \
            _selected(selector.snd, kt, qt, k_slot, q_slot)
    if isinstance(selector, rasp.SelectorOr):
        return _selected(selector.fst, kt, qt, k_slot, q_slot) or \
            _selected(selector.snd, kt, qt, k_slot, q_slot)
    return not _selected(selector.inner, kt, qt, k_slot, q_slot)


def _fractions(values) -> tuple[list[Fraction], int]:
    """The distinct values exactly (sorted), and their common denominator."""
    vals = _exactly(values)
    return vals, math.lcm(*[v.denominator for v in vals])


def _exactly(values) -> list[Fraction]:
    """The distinct values as exact fractions, sorted (as floats: their order, without
    comparing fractions, seconds for some 10^5 of them)."""
    return [Fraction(f) for f in sorted({float(v) for v in values})]


def _sums(values, n: int) -> tuple[int, Iterator]:
    """(D, per m = 1..n the distinct sums of m of `values` with repeats), exactly: the values as
    integers over their common denominator D, a sum s standing for s / D; None (and no more)
    once there are more than MAX_MEANS of them, or the next set would take more than
    MAX_SUM_WORK additions."""
    vals, common = _fractions(values)
    ints = [v.numerator * (common // v.denominator) for v in vals]

    def per_count():
        if max(map(abs, ints), default=0) * n < 1 << 62:  # int64 holds every sum: numpy's
            steps = np.array(ints, dtype=np.int64)  # (distinct: `_fractions`)
            sums, listed = np.zeros(1, dtype=np.int64), np.ndarray.tolist  # (to int)

            def more(sums):
                out = np.sort(np.add.outer(sums, steps).ravel())
                return out[np.concatenate([[True], out[1:] != out[:-1]])]
        else:
            sums, listed = {0}, (lambda s: s)  # (Python's integers already)

            def more(sums):
                return {t + v for t in sums for v in ints}
        for _ in range(n):
            if len(sums) * len(ints) > MAX_SUM_WORK:
                yield None
                return
            sums = more(sums)
            if len(sums) > MAX_MEANS:
                yield None
                return
            yield listed(sums)
    return common, per_count()


def _same_selector(s, t) -> bool:
    """Whether two selectors select alike in every input: one object, or the same
    comparison of the same keys and queries (make_frac_prevs builds its Select anew each
    call), combined alike."""
    if s is t:
        return True
    if type(s) is not type(t):
        return False
    if isinstance(s, rasp.Select):
        return s.keys is t.keys and s.queries is t.queries and s.predicate is t.predicate
    if isinstance(s, rasp.SelectorNot):
        return _same_selector(s.inner, t.inner)
    if isinstance(s, (rasp.SelectorAnd, rasp.SelectorOr)):
        return _same_selector(s.fst, t.fst) and _same_selector(s.snd, t.snd)
    return False


def _linear_space(a: list | None, b: list | None, f: Callable) -> list | None:
    """A LinearSequenceMap's values: its own function over the value pairs (so integers stay
    integers, as RASP's evaluator gives them to a later map), each a `_Near` where an input
    is one (RASP's sum of two means off by their round-off is off by as much: `_apply`)."""
    if a is None or b is None or len(a) * len(b) > MAX_MEANS:
        return None
    return _ordered(_apply(f, x, y) for x in a for y in b)


def _mean_space(values: list | None, n: int, default: float) -> list | None:
    """`_means` of the values, a sequence of them (translate's builds ask for the same), each
    a `_Near` where RASP's float64 sums may give it a little off (`_mean_radius`)."""
    means = None if values is None else _means(tuple(float(v) for v in values), n, default)
    if means is None:
        return None
    radius = _mean_radius(values, n)
    if radius is None:
        return list(means)  # the caller's own list
    return [_near(q, radius(q)) for q in means]


@functools.lru_cache(maxsize=64)
def _means(values: tuple, n: int, default: float) -> list | None:
    """Every mean of 1..n of `values` (with repeats), and the default, computed exactly (a
    mean reached two ways is one value: the values as integers over their common
    denominator D, a mean s / (m D) as the integer s L / m over L D, L = lcm(1..n); each
    float rounded once from the exact quotient, as from a Fraction); None where there are
    more than MAX_MEANS."""
    vals = _exactly(values)
    if set(vals) <= {0, 1}:
        means = {Fraction(k, m) for m in range(1, n + 1) for k in range(m + 1)
                 if (k == 0 or 1 in vals) and (k == m or 0 in vals)}
        return _ordered({float(x) for x in means} | {float(default)})
    common, per_count = _sums(values, n)
    lcm = math.lcm(*range(1, n + 1))
    means = set()
    for m, sums in enumerate(per_count, start=1):
        if sums is None:
            return None
        scale = lcm // m
        means |= {s * scale for s in sums}
        if len(means) > MAX_MEANS:
            return None
    whole = lcm * common
    return _ordered({x / whole for x in means} | {float(default)})


def translate(program, vocab, max_seq_len: int, causal: bool = False,
              compiler_bos: Any = "compiler_bos", compiler_pad: Any = "compiler_pad", *,
              atol: float | None = None) -> RaspGraph:
    """The tw graph of a RASP program (tracr's arguments: the input vocabulary, the longest
    input, causal or full attention, the BOS and pad tokens; `atol`: how far a numerical
    output may be from RASP's value, else it is refused; None: ATOL)."""
    _need_tracr()
    atol = ATOL if atol is None else atol
    args = (vocab, max_seq_len, causal, compiler_bos, compiler_pad)
    analyses: dict = {}  # (the program's functions, asked once across the translations)
    tabled: set = set()  # SequenceMaps whose number a refused translation read

    def build(narrow_indices: bool, features: bool) -> tuple:
        """(translator, graph), or (None, None) where the token features do not pay. A
        translation refused after reading SequenceMaps as numbers (or through a sum) is
        tried again with those as tables of their value pairs, whose one-hots keep apart
        what a number may round together (RASP's a + 5/6 and b + 3/6, an ulp apart, that a
        Select compares), until a refusal reads none (it stands)."""
        while True:
            t = _Translator(*args, features, narrow_indices=narrow_indices, analyses=analyses,
                            atol=atol, tabled_sums=tabled)
            try:
                return t, t.build(program)
            except _FeaturesNoNarrower:
                return None, None
            except RaspError:
                if not t.numbered_sums - tabled:
                    raise
                tabled.update(t.numbered_sums)

    # narrow reads of the token one-hot through feature columns of the embedding where they
    # are fewer than its columns and nothing else reads it; else through the one-hot
    t, rg = build(True, True)
    features = t is not None
    if not features:
        t, rg = build(True, False)
    # a head's value reads the indices through a position table of its own, unless the
    # indices one-hot is in the residual anyway
    if t.narrowed_indices and _is_read(t.indices_onehot):
        t, rg = build(False, features)
        if t is None:
            t, rg = build(False, False)
    return _verified(rg)


def _verified(rg: RaspGraph) -> RaspGraph:
    rg.module.verify()
    return rg


def _unit_columns(m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(U, s) with m = U diag(s): each column over its first non-zero entry (s 0 for a zero
    column), so columns that are multiples of one another share a U column."""
    first = np.argmax(m != 0, axis=0)
    s = m[first, np.arange(m.shape[1])]
    u = np.where(s != 0, m / np.where(s != 0, s, 1.0), 0.0) + 0.0
    return np.ascontiguousarray(u), s


def _is_read(v: Value) -> bool:
    """Whether an op that the graph's outputs depend on reads v (no: v's op was erased)."""
    graph = v.owner.parent_block()
    if graph is None:
        return False
    live, stack = set(), [op for op in graph.ops if isinstance(op, OutputOp)]
    while stack:
        op = stack.pop()
        if op not in live:
            live.add(op)
            stack.extend(o.owner for o in op.operands if isinstance(o.owner, Operation))
    return any(use.operation in live for use in v.uses)
