"""Attention reads: one `tw.attn` each (ceil(width(value) / d_head) heads once lowered).

The machine's attention is softmax with no 1/sqrt(d) scaling, so a logit gap of G between
the wanted key and every other key leaves each other key a weight below exp(-G). It is causal
unless a content read (mean, argmax/argmin, argmax_dot) takes `mask="full"`: then it reads
the whole sequence.
Every op here builds its query from exact quantities (the position columns [i, i*i] of
`tw.pos_encoding`, a `tw.literal([1.0])`, booleans or integer scores) and picks its gains so
the wanted key wins by at least SOFTMAX_GAP, i.e. exp(-30) ~ 1e-13 leakage per other position,
while the logits stay small enough that fp32 rounding cannot eat the gap.

Position reads use logits G (2 t j - j^2) = G t^2 - G (j - t)^2 for target t: the peak is at
j = t and the neighbours lose G. With G = POSITION_GAIN = 40 and max_len <= MAX_POSITIONS =
1024 the logits stay below 2 G max_len^2 ~ 8.4e7, where fp32 rounds by at most 4 per term, so the
computed gap stays above 24.
"""

from __future__ import annotations

import numpy as np
from xdsl.ir import SSAValue

from twdialect import ops as tw
from twdialect.dialect import ATTN_MASKS, width_of
from twdialect.library._util import (
    check_bound,
    check_choice,
    check_int,
    check_pair,
    check_value,
    fail,
    library_op,
    ones_literal,
    pos_max_len,
)

Value = SSAValue

SOFTMAX_GAP = 30.0
POSITION_GAIN = 40.0
MAX_POSITIONS = 1024


def _identity_read(query: Value, key: Value, value: Value, wq, wk, mask: str = "causal"
                   ) -> Value:
    n = width_of(value)
    return tw.attn(query, key, value, wq, wk, np.eye(n), np.eye(n), mask=mask)


def _mask(op: str, mask) -> str:
    """The `mask` argument of a content read: "causal" (positions j <= i, the default) or
    "full" (every position of the sequence; the graph then runs on whole sequences only)."""
    return check_choice(op, mask, "mask", ATTN_MASKS)


def _check_positions(op: str, pos: Value) -> int:
    max_len = pos_max_len(op, pos)
    if max_len > MAX_POSITIONS:
        fail(op, f"pos max_len {max_len} exceeds {MAX_POSITIONS}, the longest sequence whose "
             "position logits keep their gap in fp32")
    return max_len


@library_op("attention")
def attend_to_offset(pos: Value, value: Value, offset: int) -> Value:
    """value at position i - offset (offset >= 0 a constant); positions i < offset read
    position 0.

    pos: the `tw.pos_encoding` value (max_len <= 1024). Query [i, 1] (a free concat with a
    literal), key [j, j*j], logits 40 (2 (i - offset) j - j^2).
    Contract: the read is exact up to a relative leakage below 1e-10 of the neighbours'
    values (fp32 rounding of the logits keeps a gap >= 24). Cost: 1 attention head
    (ceil(width / d_head)), no MLP.
    """
    _check_positions("attend_to_offset", pos)
    check_value("attend_to_offset", value, "value")
    k = check_int("attend_to_offset", offset, "offset", 0)
    g = POSITION_GAIN
    query = tw.concat(tw.slice(pos, 0, 1), ones_literal())
    key = tw.slice(pos, 0, 2)
    wq = np.array([[2.0 * g, 0.0], [-2.0 * g * k, -g]])
    return _identity_read(query, key, value, wq, np.eye(2))


@library_op("attention")
def get_prev_value(pos: Value, value: Value) -> Value:
    """value at the previous position (position 0 reads itself): `attend_to_offset(pos,
    value, 1)`. Contract and cost as `attend_to_offset`."""
    _check_positions("get_prev_value", pos)
    check_value("get_prev_value", value, "value")
    return attend_to_offset(pos, value, 1)


@library_op("attention")
def attend_mean_where(valid: Value, value: Value, mask: str = "causal") -> Value:
    """Mean of value over the positions j <= i where valid_j = +1 (valid: a +/-1 boolean);
    with `mask="full"`, over every such position of the whole sequence.

    Query literal [1], key valid, logits 20 valid_j: invalid positions weigh exp(-40) of a
    valid one. When no position is valid yet, the mean over all positions j <= i (or all).
    Contract: the mean up to fp32 rounding plus a relative leakage below i * exp(-40) for
    |valid| = 1 (exact booleans). Cost: 1 attention head.
    """
    check_value("attend_mean_where", valid, "valid", 1)
    check_value("attend_mean_where", value, "value")
    mask = _mask("attend_mean_where", mask)
    g = SOFTMAX_GAP * 2.0 / 3.0
    return _identity_read(ones_literal(), valid, value, [[g]], [[1.0]], mask)


def _argext(op: str, score: Value, value: Value, sign: float, gap: float,
            valid: Value | None, score_range, mask: str = "causal") -> Value:
    check_value(op, score, "score", 1)
    check_value(op, value, "value")
    mask = _mask(op, mask)
    g = SOFTMAX_GAP / check_bound(op, gap, "gap")
    if valid is None:
        return _identity_read(ones_literal(), score, value, [[sign * g]], [[1.0]], mask)
    check_value(op, valid, "valid", 1)
    if score_range is None:
        fail(op, "the _where variants need score_range=(lo, hi) to size the validity bonus")
    lo, hi = check_pair(op, score_range, "score_range", strict=True)
    # A valid key must beat every invalid one: 2 M >= (hi - lo) + gap.
    bonus = (hi - lo) + gap
    if g * (abs(lo) + abs(hi) + 2 * bonus) > 1e6:
        fail(op, f"score_range {score_range} with gap {gap} makes logits too large for fp32")
    return _identity_read(ones_literal(), tw.concat(score, valid), value,
                          [[sign * g, g * bonus]], np.eye(2), mask)


@library_op("attention")
def attend_argmax(score: Value, value: Value, gap: float = 1.0, mask: str = "causal") -> Value:
    """value at the position j <= i with the largest score (a scalar); with `mask="full"`,
    at the position of the whole sequence with the largest score.

    Contract: exact (leakage below i * exp(-30) of the others' values) when the best score
    beats every other score at positions <= i by at least `gap`; equal best scores are
    averaged. Logits 30 / gap * score, so keep |score| * 30 / gap below ~1e6.
    Cost: 1 attention head.
    """
    return _argext("attend_argmax", score, value, 1.0, gap, None, None, mask)


@library_op("attention")
def attend_argmin(score: Value, value: Value, gap: float = 1.0, mask: str = "causal") -> Value:
    """value at the position j <= i (every j with `mask="full"`) with the smallest score.
    Contract and cost as `attend_argmax` (logits -30 / gap * score)."""
    return _argext("attend_argmin", score, value, -1.0, gap, None, None, mask)


@library_op("attention")
def attend_argmax_where(valid: Value, score: Value, value: Value,
                        score_range: tuple[float, float], gap: float = 1.0,
                        mask: str = "causal") -> Value:
    """value at the valid position (valid_j = +1) with the largest score in score_range
    (positions j <= i, or the whole sequence with `mask="full"`).

    A validity bonus M = (hi - lo) + gap on the +/-1 valid column makes every valid key beat
    every invalid one by at least `gap` (in score units). Contract: exact (leakage below
    i * exp(-30)) when the best valid score beats the other valid scores by `gap` and some
    position <= i is valid; with none valid, the argmax over all. Cost: 1 attention head.
    """
    check_value("attend_argmax_where", valid, "valid", 1)
    return _argext("attend_argmax_where", score, value, 1.0, gap, valid, score_range, mask)


@library_op("attention")
def attend_argmin_where(valid: Value, score: Value, value: Value,
                        score_range: tuple[float, float], gap: float = 1.0,
                        mask: str = "causal") -> Value:
    """value at the valid position with the smallest score. Contract, cost and `mask` as
    `attend_argmax_where`."""
    check_value("attend_argmin_where", valid, "valid", 1)
    return _argext("attend_argmin_where", score, value, -1.0, gap, valid, score_range, mask)


@library_op("attention")
def attend_argmax_dot(query: Value, key: Value, value: Value, gap: float = 1.0,
                      mask: str = "causal") -> Value:
    """value at the position j <= i (every j with `mask="full"`) whose key has the largest dot
    product with the query at i.

    Logits 30 / gap * (query_i . key_j). Contract: exact (leakage below i * exp(-30)) when the
    best dot product beats every other by at least `gap`, e.g. one-hot or +/-1 codes.
    Cost: 1 attention head (query and key of any equal width).
    """
    check_value("attend_argmax_dot", query, "query")
    check_value("attend_argmax_dot", key, "key", width_of(query))
    check_value("attend_argmax_dot", value, "value")
    mask = _mask("attend_argmax_dot", mask)
    g = SOFTMAX_GAP / check_bound("attend_argmax_dot", gap, "gap")
    n = width_of(query)
    return _identity_read(query, key, value, np.eye(n) * g, np.eye(n), mask)


@library_op("attention")
def attend_most_recent_matching(pos: Value, query: Value, key: Value, value: Value,
                                gap: float = 1.0) -> Value:
    """value at the most recent position j <= i whose key matches the query at i.

    Matching means query_i . key_j is largest (equal-norm codes: one-hot, +/-1, ...): logits
    A (query_i . key_j) + 30 j with A = 30 (max_len + 1) / gap, so any better match beats any
    recency and the most recent of equal matches wins by 30.
    Contract: exact (leakage below 2 exp(-30)) when a match exists at some j <= i and
    non-matches score at least `gap` lower; with no match, the most recent position with the
    best dot product. pos: `tw.pos_encoding` (max_len <= 1024); keep |query.key| * A below
    ~1e6. Cost: 1 attention head.
    """
    max_len = _check_positions("attend_most_recent_matching", pos)
    check_value("attend_most_recent_matching", query, "query")
    check_value("attend_most_recent_matching", key, "key", width_of(query))
    check_value("attend_most_recent_matching", value, "value")
    g = check_bound("attend_most_recent_matching", gap, "gap")
    n = width_of(query)
    a = SOFTMAX_GAP * (max_len + 1) / g
    wq = np.zeros((n + 1, n + 1))
    wq[:n, :n] = np.eye(n) * a
    wq[n, n] = SOFTMAX_GAP
    q = tw.concat(query, ones_literal())
    k = tw.concat(key, tw.slice(pos, 0, 1))
    return _identity_read(q, k, value, wq, np.eye(n + 1))
