"""A translated RASP program (`RaspGraph`): the tw module, how to feed it tokens and how to read
its output back as RASP's values; and how a categorical output is coded as one number
(`output_codes`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
from xdsl.dialects.builtin import ModuleOp

from tw_frontends.rasp.limits import RaspError, rasp
from tw_frontends.rasp.numbers import _is_number
# A categorical output row within this of one-hot is that value; of a mix summing to 1, the mix.
MIX_TOLERANCE = 1e-3


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
    # what the translation cost (`translator.translate`): graphs built (the retries among
    # them), ops built over all of them, and ops of the kept graph its output does not read
    # (built to ask, then read through or replaced: the pipeline's DCE drops them)
    effort: dict = field(default_factory=dict)

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
