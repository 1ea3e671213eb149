"""A static estimate of the fp32 error of every value a schedule computes.

First-order forward propagation over the schedule, from the value ranges
(`twdialect.ranges`): each writer adds the rounding of its own products and sums
(`EPS * (terms + 2) * sum |w| |x|` per output component, a dot product's classic bound plus the
residual add) to the error it inherits from its inputs (scaled by its matrix's largest
absolute row sum per output); a cancel in the same sublayer as the writer that refills its
columns adds half an ulp of the dead value, and a one-neuron MLP cancel (a column the ranges
say is one-signed) leaves behind at most the dead value's own error, should rounding have
pushed it across zero. Softmax leakage of attention (exp(-gap) of the
other positions) is not modelled: the gaps the library uses make it far smaller than this;
the rounding of the scores themselves is (it moves every probability).

`estimate_errors(sched)` returns ({op: bound}, per-group bounds); `max_relative_output_error`
is the largest bound over the outputs, relative to max(1, |output|); `output_errors` gives
each output's bound, and `check_margins` holds them to the margins the outputs declare
(`tw.margin`: half an argmax gap, 0.5 for rounding to integers), which `compile` runs. It is an estimate for
reports and tests (the measured error must stay under it), not a proof: the first-order bound
ignores products of errors.
"""

from __future__ import annotations

import numpy as np

from tw_lowering.pressure import GroupRanges
from tw_lowering.schedule import Schedule
from twdialect.analysis import is_attention_slot
from tw_lowering.tasks import Refs
from twdialect.dense import to_numpy
from twdialect.f32_error import ffn_error_bound, mlp_error_bound
from twdialect.dialect import MARGIN, AddOp, AttnOp, LinearOp, MlpOp, OutputOp
from twdialect.dialect import attn_rope
from twdialect.dialect import is_plain_mlp, mlp_activation
from twdialect.errors import TwError

EPS = 2.0 ** -24  # unit roundoff of float32


def _planes(m: np.ndarray, dims: int) -> np.ndarray:
    """Per-component magnitudes after a rotary embedding over the first `dims` components:
    each of a plane's two components (p, p + dims/2) is bounded by the plane's norm."""
    out = np.array(m, np.float64)
    half = dims // 2
    norm = np.hypot(out[:half], out[half:dims])
    out[:half], out[half:dims] = norm, norm
    return out


def _in_error(err: list[float], refs: Refs) -> float:
    groups = refs.group[refs.group >= 0]
    return max((err[g] for g in set(groups.tolist())), default=0.0)


def _in_magnitude(mag: GroupRanges, refs: Refs) -> np.ndarray:
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


def estimate_errors(sched: Schedule, mag: GroupRanges | None = None) -> tuple[dict, list[float]]:
    tg = sched.tg
    mag = GroupRanges(tg) if mag is None else mag
    err = [0.0] * len(tg.groups)
    for g in tg.sources:  # inputs and embedding tables are rounded to float32 on the way in
        err[g] = EPS * mag[g]
    per_op = {}
    # Per column, what a cancel adds to the value that refills it: half an ulp of a dead
    # value cancelled in the same sublayer; a one-neuron cancel's possible leftover.
    leftover: dict[int, tuple[int, float, float]] = {}  # col -> (cancel slot, same, any)
    cancels_in: dict[int, list[int]] = {}
    for s, g in sched.cancels:
        cancels_in.setdefault(s, []).append(g)
    started: set[int] = set()
    order = sorted((sched.slot[t.tid], t.index, t.tid) for t in tg.tasks if sched.slot[t.tid] >= 0)
    last_slot = None
    for s, _, tid in order:
        if s != last_slot:
            for old in cancels_in.get(s, ()):
                signs = sched.cancel_signs.get(old)
                for k, c in enumerate(sched.cols[old].tolist()):
                    # refilled in this very sublayer: (-old + new) rounds at ulp(old)
                    same = EPS * mag[old]
                    left = err[old] if not is_attention_slot(s) and signs is not None and signs[k] != 0 else 0.0
                    leftover[c] = (s, same, left)
            last_slot = s
        t = tg.tasks[tid]
        op = t.op
        refs = tg.in_refs(t)
        e_in, m_in = _in_error(err, refs), _in_magnitude(mag, refs)
        if isinstance(op, LinearOp):
            w = to_numpy(op.weight)
            e = _affine_bound(w, to_numpy(op.bias) if op.bias is not None else None, m_in, e_in)
        elif isinstance(op, AddOp):
            e = e_in + EPS * 3 * float(m_in.sum() if len(m_in) else 0.0)
        elif isinstance(op, MlpOp) and not is_plain_mlp(op):
            # swish or gated lanes: the conservative bound of `twdialect.f32_error` over the
            # box |x| <= m_in, input errors carried by slope (no hinge analysis: relu only)
            w1, w2 = to_numpy(op.w1), to_numpy(op.w2)
            with np.errstate(all="ignore"):
                e = float(np.max(ffn_error_bound(
                    w1, to_numpy(op.b1) if op.b1 is not None else None, w2,
                    to_numpy(op.b2) if op.b2 is not None else None, -m_in, m_in,
                    mlp_activation(op), to_numpy(op.up) if op.up is not None else None,
                    to_numpy(op.ub) if op.ub is not None else None,
                    e_in=np.full(len(m_in), e_in)), initial=0.0))
        elif isinstance(op, MlpOp):
            w1, w2 = to_numpy(op.w1), to_numpy(op.w2)
            b1 = to_numpy(op.b1) if op.b1 is not None else None
            b2 = to_numpy(op.b2) if op.b2 is not None else None
            e_h = _affine_bound(w1, b1, m_in, e_in)
            hidden = np.abs(w1).T @ m_in + (np.abs(b1) if b1 is not None else 0.0)
            e = _affine_bound(w2, b2, hidden, e_h)
            # The hinge-level bound (`twdialect.f32_error`) over the box |x| <= m_in: it sees
            # the rounding left behind where large hinges cancel, which the dot-product bound
            # above, scaled by the output's size, can miss.
            with np.errstate(all="ignore"):
                own = float(np.max(mlp_error_bound(w1, b1, w2, b2, -m_in, m_in), initial=0.0))
                lip = float(np.max(np.abs(w1).sum(axis=0) @ np.abs(w2), initial=0.0))
            e = max(e, lip * e_in + own) if np.isfinite(own) else e
        elif isinstance(op, AttnOp):
            wq, wk = to_numpy(op.wq), to_numpy(op.wk)
            wvo = to_numpy(op.wv) @ to_numpy(op.wo)
            v_refs = tg.refs[op.value]
            m_v = _in_magnitude(mag, v_refs)
            e = _affine_bound(wvo, None, m_v, _in_error(err, v_refs))
            # Rounded scores move the softmax: a logit off by d changes every probability by
            # a factor within exp(+-2d), so the output (a mean of value rows) moves by up to
            # (exp(2d) - 1) * 2 max|v|. d: the dot products' rounding plus the query's and
            # key's own errors carried through their matrices.
            q_refs, k_refs = tg.refs[op.query], tg.refs[op.key]
            m_q, m_k = _in_magnitude(mag, q_refs) @ np.abs(wq), _in_magnitude(mag, k_refs) @ np.abs(wk)
            s_q, s_k = np.abs(wq).sum(axis=0), np.abs(wk).sum(axis=0)
            rope, turn = attn_rope(op), 0
            if rope is not None:  # a rotated component is bounded by its plane's norm, and
                # the rotation's own float32 products and sum add a few roundings
                m_q, m_k, s_q, s_k = (_planes(a, rope[1]) for a in (m_q, m_k, s_q, s_k))
                turn = 4
            with np.errstate(all="ignore"):
                d = (EPS * (wq.shape[0] + wk.shape[0] + wq.shape[1] + 2 + turn) * float(m_q @ m_k)
                     + _in_error(err, q_refs) * float(s_q @ m_k)
                     + _in_error(err, k_refs) * float(m_q @ s_k))
                v_max = float(np.max(m_v @ np.abs(wvo), initial=0.0))
                e += float(np.expm1(min(2.0 * d, 700.0))) * 2.0 * v_max
        else:  # relu: exact on its input
            e = e_in + EPS * float(m_in.max() if len(m_in) else 0.0)
        g = t.out_group
        if g not in started:  # the group's columns: whatever their last cancel left
            started.add(g)
            extra = 0.0
            for c in sched.cols[g].tolist():
                if c in leftover:
                    cs, same, left = leftover.pop(c)
                    extra = max(extra, left + (same if cs == s else 0.0))
            e += extra
        err[g] += e
        per_op[op] = err[g]
    return per_op, err


def max_relative_output_error(sched: Schedule) -> float:
    """The largest estimated output error relative to max(1, the output's magnitude), the
    magnitude taken from the value ranges. An interval box overstates an mlp whose hidden
    units cancel (a compare on a wide input spans its pre-activations), so there the relative
    figure understates; the absolute bounds of `estimate_errors` stay sound."""
    mag = GroupRanges(sched.tg)
    _, err = estimate_errors(sched, mag)
    worst = 0.0
    for _, v in sched.tg.outputs:
        for g in sched.tg.refs[v].groups():
            worst = max(worst, err[g] / max(1.0, mag[g]))
    return worst


class PrecisionError(TwError):
    """An output whose static float32 error estimate exceeds the margin its consumer declared."""


def output_errors(sched: Schedule) -> dict[str, tuple[float, float]]:
    """Per graph output: (estimated absolute float32 error, largest |output| from the value
    ranges), the error the largest over the output's components (`estimate_errors`)."""
    mag = GroupRanges(sched.tg)
    _, err = estimate_errors(sched, mag)
    out = {}
    for name, v in sched.tg.outputs:
        groups = sched.tg.refs[v].groups()
        out[name] = (max((err[g] for g in groups), default=0.0),
                     max((float(np.max(mag[g])) for g in groups), default=0.0))
    return out


def output_margins(graph) -> dict[str, float]:
    """The `tw.margin` each output of `graph` declares (outputs without one are left out)."""
    return {op.output_name.data: op.attributes[MARGIN].value.data
            for op in graph.block.ops if isinstance(op, OutputOp) and MARGIN in op.attributes}


def check_margins(sched: Schedule, on_margin: str = "error") -> dict[str, tuple[float, float]]:
    """Compare every output's error estimate with its declared margin: "error" raises a
    PrecisionError naming the outputs that exceed theirs, "warn" issues a warning, "ignore"
    does neither. Returns {output: (estimate, margin)} for the outputs with a margin."""
    if on_margin not in ("error", "warn", "ignore"):
        raise PrecisionError(f"on_margin must be 'error', 'warn' or 'ignore', got {on_margin!r}")
    margins = output_margins(sched.tg.graph)
    if not margins or on_margin == "ignore":
        return {}
    estimates = output_errors(sched)
    report = {name: (estimates[name][0], m) for name, m in margins.items() if name in estimates}
    over = {name: em for name, em in report.items() if em[0] > em[1]}
    if over:
        what = ", ".join(f"\"{n}\" may be off by {e:.3g} (margin {m:g})"
                         for n, (e, m) in sorted(over.items()))
        message = (f"float32 error estimate exceeds the declared margin: {what}; narrow the "
                   "inputs' declared ranges, widen the margin, or compile with on_margin='warn'")
        if on_margin == "error":
            raise PrecisionError(message)
        import warnings

        warnings.warn(message, stacklevel=3)
    return report
