"""The float32 error each writer op adds, one rule per op kind: the `error` of its `Rule` in
`lowering/rules.py` (beside its price and its writer), which `lowering/precision.py`'s
forward propagation calls for every task it meets.

A rule takes the op and its `ErrorInputs` (the largest error and the magnitudes of what it
reads, and the per-group errors and magnitudes for an op that reads several operands) and
returns the error it leaves on its output: the rounding of its own products and sums
(`EPS * (terms + 2) * sum |w| |x|` per output component, a dot product's classic bound plus
the residual add) plus the error it inherits, scaled by its matrix.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tw_lowering.tasks import Refs
from twdialect.dense import to_numpy
from twdialect.dialect import attn_rope, is_plain_mlp, mlp_activation
from twdialect.f32_error import ffn_error_bound, mlp_error_bound

EPS = 2.0 ** -24  # unit roundoff of float32


@dataclass
class ErrorInputs:
    """What an op reads, as the propagation knows it: `e_in` the largest error of its first
    operand's groups, `m_in` their magnitudes per component; `err` and `mag` every group's
    (an attention head reads three operands), `tg` the task graph (its references)."""

    e_in: float
    m_in: np.ndarray
    err: list
    mag: object
    tg: object


def _planes(m: np.ndarray, dims: int) -> np.ndarray:
    """Per-component magnitudes after a rotary embedding over the first `dims` components:
    each of a plane's two components (p, p + dims/2) is bounded by the plane's norm."""
    out = np.array(m, np.float64)
    half = dims // 2
    norm = np.hypot(out[:half], out[half:dims])
    out[:half], out[half:dims] = norm, norm
    return out


def in_error(err: list[float], refs: Refs) -> float:
    groups = refs.group[refs.group >= 0]
    return max((err[g] for g in set(groups.tolist())), default=0.0)


def in_magnitude(mag, refs: Refs) -> np.ndarray:
    out = np.abs(refs.const).astype(np.float64)
    for k, g in enumerate(refs.group.tolist()):
        if g >= 0:
            out[k] = mag[g]
    return out


def _affine_bound(w: np.ndarray, b: np.ndarray | None, m_in: np.ndarray, e_in: float) -> float:
    aw = np.abs(w)
    gain = float(aw.sum(axis=0).max()) if aw.size else 0.0
    terms = float((m_in[:, None] * aw).sum(axis=0).max()) if aw.size else 0.0
    if b is not None:
        terms += float(np.abs(b).max())
    return gain * e_in + EPS * (w.shape[0] + 2) * terms


def linear_error(op, x: ErrorInputs) -> float:
    w = to_numpy(op.weight)
    return _affine_bound(w, to_numpy(op.bias) if op.bias is not None else None, x.m_in, x.e_in)


def add_error(op, x: ErrorInputs) -> float:
    return x.e_in + EPS * 3 * float(x.m_in.sum() if len(x.m_in) else 0.0)


def relu_error(op, x: ErrorInputs) -> float:
    """Exact on its input: it only zeroes negatives."""
    return x.e_in


def mlp_error(op, x: ErrorInputs) -> float:
    """A relu MLP: the dot-product bound through both matrices, or the hinge-level bound
    (`twdialect.f32_error`) over the box |x| <= m_in where larger (it sees the rounding left
    behind where large hinges cancel, which the dot-product bound, scaled by the output's
    size, can miss). Swish or gated lanes: the conservative bound of `twdialect.f32_error`,
    input errors carried by slope (no hinge analysis: relu only)."""
    e_in, m_in = x.e_in, x.m_in
    w1, w2 = to_numpy(op.w1), to_numpy(op.w2)
    b1 = to_numpy(op.b1) if op.b1 is not None else None
    b2 = to_numpy(op.b2) if op.b2 is not None else None
    if not is_plain_mlp(op):
        with np.errstate(all="ignore"):
            return float(np.max(ffn_error_bound(
                w1, b1, w2, b2, -m_in, m_in, mlp_activation(op),
                to_numpy(op.up) if op.up is not None else None,
                to_numpy(op.ub) if op.ub is not None else None,
                e_in=np.full(len(m_in), e_in)), initial=0.0))
    e_h = _affine_bound(w1, b1, m_in, e_in)
    hidden = np.abs(w1).T @ m_in + (np.abs(b1) if b1 is not None else 0.0)
    e = _affine_bound(w2, b2, hidden, e_h)
    with np.errstate(all="ignore"):
        own = float(np.max(mlp_error_bound(w1, b1, w2, b2, -m_in, m_in), initial=0.0))
        lip = float(np.max(np.abs(w1).sum(axis=0) @ np.abs(w2), initial=0.0))
    return max(e, lip * e_in + own) if np.isfinite(own) else e


def attn_error(op, x: ErrorInputs) -> float:
    """The value path's affine bound, plus what rounded scores do to the softmax: a logit off
    by d changes every probability by a factor within exp(+-2d), so the output (a mean of
    value rows) moves by up to (exp(2d) - 1) * 2 max|v|. d: the dot products' rounding plus
    the query's and key's own errors carried through their matrices."""
    err, mag, tg = x.err, x.mag, x.tg
    wq, wk = to_numpy(op.wq), to_numpy(op.wk)
    wvo = to_numpy(op.wv) @ to_numpy(op.wo)
    v_refs = tg.refs[op.value]
    m_v = in_magnitude(mag, v_refs)
    e = _affine_bound(wvo, None, m_v, in_error(err, v_refs))
    q_refs, k_refs = tg.refs[op.query], tg.refs[op.key]
    m_q, m_k = in_magnitude(mag, q_refs) @ np.abs(wq), in_magnitude(mag, k_refs) @ np.abs(wk)
    s_q, s_k = np.abs(wq).sum(axis=0), np.abs(wk).sum(axis=0)
    rope, turn = attn_rope(op), 0
    if rope is not None:  # a rotated component is bounded by its plane's norm, and the
        # rotation's own float32 products and sum add a few roundings
        m_q, m_k, s_q, s_k = (_planes(a, rope[1]) for a in (m_q, m_k, s_q, s_k))
        turn = 4
    with np.errstate(all="ignore"):
        d = (EPS * (wq.shape[0] + wk.shape[0] + wq.shape[1] + 2 + turn) * float(m_q @ m_k)
             + in_error(err, q_refs) * float(s_q @ m_k)
             + in_error(err, k_refs) * float(m_q @ s_k))
        v_max = float(np.max(m_v @ np.abs(wvo), initial=0.0))
        return e + float(np.expm1(min(2.0 * d, 700.0))) * 2.0 * v_max
