"""How a head compares numbers: a key's tolerance for its query's error (`_query_tolerance`,
`_key_tolerance`), keys ranked by value (`_ranked`), and the nearest-key head (`_nearest_key`:
logits -(q - k)^2, split into digits where one would overflow its logit range)."""

from __future__ import annotations

import math

import numpy as np

from twdialect.dialect import EmbeddingOp, PosTableOp, SliceOp

from tw_frontends.rasp.limits import GAIN, rasp
from tw_frontends.rasp.numbers import _is_number
from tw_frontends.rasp.nodes import Encoded
from tw_frontends.rasp.built import _through_linear
from tw_frontends.rasp.tables import _affine, _distinct_rows


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
        one = _one_digit(pred.shape[0], key_values, rows, chosen, bos_weight, bos_error, extend)
        if one is None:
            return None
        a, b, lift, centred = one
    largest = (np.abs(a) @ np.abs(b).T).max()
    if largest > MAX_NEAREST_LOGIT * GAIN:
        return None
    if centred and (largest >= 2 ** 24 or np.any(a != np.round(a)) or np.any(b != np.round(b))):
        return None
    if min(len(_distinct_rows(pred)[0]), len(_distinct_rows(pred.T)[0])) <= 2 * digits:
        return None  # the one-hot form is as narrow
    return a, b, lift


def _one_digit(n_queries: int, key_values: list, rows: np.ndarray, chosen: np.ndarray,
               bos_weight: float, bos_error: float | None, extend: bool):
    """`_nearest_key`'s (A, B, lift, centred) over the key values themselves (numbers, or
    the ranks of other values); None where two keys hold one number."""
    numbers = all(_is_number(v) for v in key_values)  # other values: their ranks
    k = np.array([float(v) for v in key_values] if numbers else range(len(key_values)),
                 float)
    t = k[chosen]
    gaps = np.abs(k[None, :] - t[:, None])
    gaps[gaps == 0] = np.inf  # (the selected value itself)
    if np.any(np.sum(k[None, :] == t[:, None], axis=1) > 1):
        return None  # two keys of one number
    scale = GAIN / gaps.min(axis=1, initial=np.inf) ** 2
    lift = np.zeros(n_queries)
    lift[rows] = scale * t ** 2 - GAIN
    centred = bos_error is not None and \
        float(np.abs(lift[rows] + bos_weight * GAIN).max(initial=0.0)) * 2.0 ** -22 > \
        bos_error
    a = np.zeros((n_queries, 3))
    a[rows] = scale[:, None] * np.stack([2 * t, -np.ones_like(t), -t ** 2], axis=1)
    b = np.stack([k, k * k, np.ones_like(k)], axis=1)
    if centred:
        lift[rows] = -GAIN
    else:
        a, b = a[:, :2], b[:, :2]
        if extend:
            _extend_to_empty_rows(a, lift, rows, t, scale, k)
    return a, b, lift, centred


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
