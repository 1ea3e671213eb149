"""Composite helpers of the primitive token programs, built from `prims` only (the way a
torchwright user builds `sum_digits`, `output_sequence` or `remove_leading_0s` from the ops
library): token features, reading a number's digits out of the prompt, ripple-carry
addition, digit counts, and the emission of a number MSB first as logits.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

from twdialect import ops as tw

from tw_examples.primitive import prims as P

Value = tw.Value


def embed(vocab: str, features: Sequence[Callable[[str], float]]) -> list[Value]:
    """One token embedding with a column per feature; returns the columns (free slices)."""
    table = np.array([[float(f(c)) for f in features] for c in vocab])
    tok = tw.embedding("tokens", table)
    return [tw.slice(tok, k, 1) for k in range(len(features))]


def flag(chars: str) -> Callable[[str], float]:
    """A +/-1 token feature: +1 on the characters `chars`."""
    return lambda c: 1.0 if c in chars else -1.0


def digit_value(c: str) -> float:
    return float(c) if c.isdigit() else 0.0


def read_digits(pos: P.Pos, digit: Value, end: Value, start: Value | None, n_digits: int,
                bound: float = 9.0) -> list[Value]:
    """The digits (least significant first) of the number written at positions
    start < j < end: digit k is read at end - 1 - k (one head each) and gated to 0 where
    end - 1 - k <= start (a compare and a cond_gate each). start None means -1 (the number
    starts the text)."""
    out = []
    for k in range(n_digits):
        raw = P.attend_to_position(pos, digit, end, offset=-1.0 - k)
        if start is None:
            valid = P.compare(end, k + 1)  # end - 1 - k >= 0
        else:
            valid = P.compare_sum([end, start], [1.0, -1.0], k + 2)  # end - 1 - k > start
        out.append(P.cond_gate(valid, raw, bound))
    return out


def ripple_add(a: Sequence[Value], b: Sequence[Value]) -> list[Value]:
    """Digits of a + b (LSB first, one more than the operands): per column s = a + b + carry,
    carry' = [s >= 10] (a compare), digit = s - 10 carry' (a linear)."""
    digits = []
    carry = None
    for ak, bk in zip(a, b):
        s = P.sum_nodes([ak, bk] if carry is None else [ak, bk, carry])
        carry = P.compare(s, 10, true=1.0, false=0.0)
        digits.append(P.add_scaled(s, carry, 1.0, -10.0))
    digits.append(carry)
    return digits


def digit_count(digits: Sequence[Value]) -> Value:
    """The number of significant digits (at least 1) of the number with these digits (LSB
    first): h_k = "a nonzero digit at k or above" folds down from the top with bool_or."""
    above = None
    flags = []
    for d in reversed(digits[1:]):
        nz = P.compare(d, 1)
        above = nz if above is None else P.bool_or(nz, above)
        flags.append(above)
    n = len(flags)
    return P.dot(flags, [0.5] * n, 1.0 + 0.5 * n)  # 1 + sum (h + 1) / 2


def pick_digit(digits: Sequence[Value], index: Value, bound: float = 9.0) -> Value:
    """digits[index] for an integer index (0 outside): sum_k cond_gate(index == k, d_k)."""
    parts = [P.cond_gate(P.equals(index, k), d, bound) for k, d in enumerate(digits)]
    return P.sum_nodes(parts)


def logits(vocab: str, value: Value | None, flags: Mapping[str, Value],
           digit_chars: str = "0123456789", scale: float = 10.0) -> Value:
    """One linear from an integer `value` (an index into `digit_chars`) and +/-1 character
    flags (at most one true) to one logit per vocabulary character: a true flag's character
    scores +W, a false one -W; digit character v scores scale (2 v value - v^2) - W (#true
    flags), so its argmax is digit_chars[value] when no flag is set; other characters -3W."""
    top = len(digit_chars) - 1
    W = scale * (top * top + 10.0)
    names = list(flags)
    parts = ([value] if value is not None else []) + [flags[c] for c in names]
    rows = len(parts)
    m = np.zeros((rows, len(vocab)))
    b = np.full(len(vocab), -3.0 * W)
    off = 1 if value is not None else 0
    for j, ch in enumerate(vocab):
        if ch in flags:
            m[off + names.index(ch), j] = W
            b[j] = 0.0
        elif value is not None and ch in digit_chars:
            v = digit_chars.index(ch)
            m[0, j] = 2.0 * scale * v
            b[j] = -scale * v * v - W * len(names)
            for k in range(len(names)):
                m[off + k, j] = -W
    return tw.linear(tw.concat(parts), m, b)


def emit_number(digits: Sequence[Value], count: Value, t: Value,
                negative: Value | None = None) -> tuple[Value, Value, Value | None]:
    """The character of output step t when a number is spelled MSB first (an optional "-"
    where the +/-1 `negative` is true, then `count` digits, then the end): returns (the digit
    to write, the +/-1 end flag, the +/-1 minus flag or None)."""
    if negative is None:
        index = P.dot([count, t], [1.0, -1.0], -1.0)  # count - 1 - t
        end = P.compare_sum([t, count], [1.0, -1.0], 0)  # t >= count
        return pick_digit(digits, index), end, None
    neg01 = P.to01(negative)
    index = P.dot([count, t, neg01], [1.0, -1.0, 1.0], -1.0)  # count - 1 - (t - neg)
    end = P.compare_sum([t, count, neg01], [1.0, -1.0, -1.0], 0)
    minus = P.bool_and(negative, P.equals(t, 0))
    return pick_digit(digits, index), end, minus
