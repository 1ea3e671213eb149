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

from tw_lowering.op_errors import EPS, ErrorInputs
from tw_lowering.op_errors import in_error as _in_error
from tw_lowering.op_errors import in_magnitude as _in_magnitude
from tw_lowering.pressure import GroupRanges
from tw_lowering.rules import RULES
from tw_lowering.schedule import Schedule
from twdialect.analysis import is_attention_slot
from twdialect.dense import to_numpy
from twdialect.dialect import MARGIN, AddOp, LinearOp, MlpOp, OutputOp
from twdialect.dialect import is_plain_mlp, width_of
from twdialect.errors import TwError

def estimate_errors(sched: Schedule, mag: GroupRanges | None = None) -> tuple[dict, list[float]]:
    tg = sched.tg
    mag = GroupRanges(tg) if mag is None else mag
    err = [0.0] * len(tg.groups)
    exact = _ExactOps(tg, mag)
    for g in tg.sources:  # inputs and embedding tables are rounded to float32 on the way in
        err[g] = 0.0 if exact.source_is_exact(g) else EPS * mag[g]
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
        if e_in == 0.0 and exact.computes_exactly(op):
            e = 0.0  # exact inputs, an exact computation (integers on a grid below 2^24)
        else:
            e = RULES[type(op)].error(op, ErrorInputs(e_in, m_in, err, mag, tg))
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


class _ExactOps:
    """Which computations float32 carries out exactly, whatever order a kernel sums in:
    integer inputs (and dyadic weights) whose every product and partial sum stays on a common
    grid below 2^24 of it (`twdialect.f32_error`'s grids). A token program's arithmetic is
    such: its ids, digits and positions are integers and its sums small, so its values carry
    no rounding at all until an op that really rounds (a softmax, a non-dyadic weight);
    without this, first-order bounds compound through every large gain and say nothing."""

    def __init__(self, tg, mag: GroupRanges):
        self.tg, self.mag = tg, mag
        self._ints = None

    def integer(self, v) -> np.ndarray:
        from twdialect.ranges import integer_components

        if self._ints is None:
            try:
                self._ints = integer_components(self.tg.graph)
            except TwError:
                self._ints = {}
        got = self._ints.get(v)
        return np.zeros(width_of(v), bool) if got is None else np.asarray(got, bool)

    def source_is_exact(self, g: int) -> bool:
        """A source whose values float32 holds exactly: integers below 2^24."""
        v = self.tg.groups[g].value
        return v is not None and bool(np.all(self.integer(v))) and self.mag[g] < 2.0 ** 24

    def box(self, v) -> np.ndarray | None:
        """The largest |v| per component by the value ranges (None where they say nothing):
        the operand's own range, not the columns' (a position read has none of its own)."""
        got = (self.mag.boxes() or {}).get(v)
        if got is None:
            return None
        m = np.maximum(np.abs(np.asarray(got[0], np.float64)), np.abs(np.asarray(got[1], np.float64)))
        return m if np.all(np.isfinite(m)) else None

    def computes_exactly(self, op) -> bool:
        """Whether `op`, fed exact values, computes exactly in float32, its result added
        exactly into its columns (an integer below 2^24: the accumulating writers' sum too)."""
        from twdialect.f32_error import mlp_exact, linear_error_bound

        if not isinstance(op, (LinearOp, AddOp, MlpOp)) or not op.operands:
            return False
        x, out = op.operands[0], op.results[0]
        ints, m_x, m_out = self.integer(x), self.box(x), self.box(out)
        if m_x is None or m_out is None or not np.all(ints) or not np.all(self.integer(out)):
            return False
        if not float(m_out.max(initial=0.0)) < 2.0 ** 24:
            return False
        with np.errstate(all="ignore"):
            if isinstance(op, AddOp):
                m_y = self.box(op.operands[1])
                both = m_y is not None and np.all(self.integer(op.operands[1]))
                return bool(both and float((m_x + m_y).max(initial=0.0)) < 2.0 ** 24)
            if isinstance(op, LinearOp):
                w = to_numpy(op.weight)
                b = to_numpy(op.bias) if op.bias is not None else None
                return bool(np.all(linear_error_bound(w, b, -m_x, m_x, ints) == 0.0))
            if not is_plain_mlp(op):  # (swish lanes are never exactly relu's: their bound)
                return False
            w1, w2 = to_numpy(op.w1), to_numpy(op.w2)
            b1 = to_numpy(op.b1) if op.b1 is not None else None
            b2 = to_numpy(op.b2) if op.b2 is not None else None
            return mlp_exact(w1, b1, w2, b2, -m_x, m_x, ints)


def max_relative_output_error(sched: Schedule) -> float:
    """The largest estimated output error relative to max(1, the output's magnitude), the
    magnitude taken from the value ranges. An interval box overstates an mlp whose hidden
    units cancel (a compare on a wide input spans its pre-activations), so there the relative
    figure understates; the absolute bounds of `estimate_errors` stay sound."""
    mag = sched.ranges or GroupRanges(sched.tg)
    _, err = estimate_errors(sched, mag)
    worst = 0.0
    for _, v in sched.tg.outputs:
        for g in sched.tg.refs[v].groups():
            worst = max(worst, err[g] / max(1.0, mag[g]))
    return worst


class PrecisionError(TwError):
    """An output whose static float32 error estimate exceeds the margin its consumer declared."""


class PrecisionWarning(UserWarning):
    """An output float32 cannot be shown to keep: its static error bound is infinite, or
    beyond the contract's atol (1e-4 relative to max(1, |output|)) where it declares no margin.
    The message names the output, the op where the bound first leaves that tolerance, and
    what would help."""


ATOL = 1e-4  # the contract of an output without a margin: |model - oracle| <= ATOL max(1, |y|)
# float64's unit roundoff over float32's: a first-order bound scales by it (`dtype_scale`)
FLOAT64_SCALE = 2.0 ** -29
REMEDIES = ("declare narrower input ranges (tw.input value_range)",
            "a margin on the output (tw.output(..., margin=))")


def remedy(dtype=np.float32) -> str:
    """What would help an output the bound cannot keep (float64 too, for a float32 model)."""
    if dtype_scale(dtype) == 1.0:
        return f"{REMEDIES[0]}, {REMEDIES[1]}, or compile with dtype='float64'"
    return f"{REMEDIES[0]} or {REMEDIES[1]}"


def dtype_scale(dtype) -> float:
    """What a float32 error bound is multiplied by for a model computing in `dtype`: 1, or
    float64's unit roundoff over float32's (every first-order term is a multiple of it)."""
    return FLOAT64_SCALE if np.dtype(dtype) == np.float64 else 1.0


def culprits(sched: Schedule, per_op: dict, mag: GroupRanges,
             limit: float | None = None) -> dict:
    """{op: the first op, in schedule order, among those `op` depends on (itself included),
    where the error bound leaves ATOL of that op's own magnitude (`limit`, an output's
    margin, where given) or becomes infinite, described with its layer and sublayer (None
    where none does)}: where to look. One walk over the graph, for every output at once."""
    from twdialect.analysis import layer_of, sublayer_name
    from twdialect.dialect import describe

    tg = sched.tg
    first: dict = {}  # op -> (slot, index, op) of its first out-of-tolerance dependency
    bad = {}
    for t in tg.tasks:
        s = sched.slot[t.tid]
        if s < 0 or t.op not in per_op:
            continue
        e = per_op[t.op]
        size = float(np.max(mag[t.out_group], initial=0.0))
        if not np.isfinite(e) or e > (ATOL * max(1.0, size) if limit is None else limit):
            bad[t.op] = (s, t.index, t.op)
    for op in tg.graph.block.ops:  # (block order: operands first)
        cands = [first[u.owner] for u in op.operands if first.get(u.owner) is not None]
        if op in bad:
            cands.append(bad[op])
        first[op] = min(cands, key=lambda c: (c[0], c[1])) if cands else None
    return {op: (None if c is None else f"{describe(c[2])} (layer {layer_of(c[0])} "
                                        f"{sublayer_name(c[0])})")
            for op, c in first.items()}


class Estimate:
    """`estimate_errors` of a schedule, run once for every check that reads it: the value
    ranges (`mag`), each op's bound (`per_op`) and each group's (`err`)."""

    def __init__(self, sched: Schedule):
        self.sched = sched
        self.mag = sched.ranges or GroupRanges(sched.tg)
        self.per_op, self.err = estimate_errors(sched, self.mag)

    def output(self, v) -> tuple[float, float]:
        """(bound, largest |value| by the ranges) of output value `v`, over its groups."""
        groups = self.sched.tg.refs[v].groups()
        return (max((self.err[g] for g in groups), default=0.0),
                max((float(np.max(self.mag[g], initial=0.0)) for g in groups), default=0.0))


def check_outputs(sched: Schedule, on_margin: str = "error", dtype=np.float32,
                  estimate: Estimate | None = None) -> dict[str, tuple[float, float]]:
    """The float32 contract stated at compile time: every output's static error bound
    (`estimate_errors`, scaled for `dtype`) is finite and within its declared margin, or
    within ATOL of its magnitude where it declares none; otherwise one warning (a
    PrecisionWarning) names each such output, the op where its bound leaves the tolerance
    (`culprit`) and what would help. An output with a margin is `check_margins`' (an error
    under on_margin="error"). "ignore" checks nothing. Returns {output: (bound, allowed)}."""
    if on_margin == "ignore":
        return {}
    est = estimate or Estimate(sched)
    scale = dtype_scale(dtype)
    margins = output_margins(sched.tg.graph)
    report, over, where_of = {}, [], None
    for name, v in sched.tg.outputs:
        bound, size = est.output(v)
        bound *= scale
        allowed = margins.get(name, ATOL * max(1.0, size))
        report[name] = (bound, allowed)
        if name in margins or (np.isfinite(bound) and bound <= allowed):
            continue
        if where_of is None:
            where_of = culprits(sched, est.per_op, est.mag)
        where = where_of.get(v.owner)
        what = "infinite" if not np.isfinite(bound) else f"{bound:.3g} (atol {allowed:.3g})"
        over.append(f"output \"{name}\": its error bound is {what}" +
                    (f", first out of tolerance at {where}" if where else ""))
    if over:
        import warnings

        precision = "float64" if scale != 1.0 else "float32"
        warnings.warn(f"{precision} cannot be shown to keep every output within its contract: "
                      f"{'; '.join(over)}; {remedy(dtype)}", PrecisionWarning, stacklevel=3)
    return report


def output_errors(sched: Schedule) -> dict[str, tuple[float, float]]:
    """Per graph output: (estimated absolute float32 error, largest |output| from the value
    ranges), the error the largest over the output's components (`estimate_errors`)."""
    est = Estimate(sched)
    return {name: est.output(v) for name, v in sched.tg.outputs}


def output_margins(graph) -> dict[str, float]:
    """The `tw.margin` each output of `graph` declares (outputs without one are left out)."""
    return {op.output_name.data: op.attributes[MARGIN].value.data
            for op in graph.block.ops if isinstance(op, OutputOp) and MARGIN in op.attributes}


def check_margins(sched: Schedule, on_margin: str = "error", dtype=np.float32,
                  estimate: Estimate | None = None) -> dict[str, tuple[float, float]]:
    """Compare every output's error estimate (scaled for `dtype`) with its declared margin:
    "error" raises a PrecisionError naming the outputs that exceed theirs and the op where
    each bound leaves tolerance, "warn" issues a PrecisionWarning, "ignore" does neither.
    Returns {output: (estimate, margin)} for the outputs with a margin."""
    if on_margin not in ("error", "warn", "ignore"):
        raise PrecisionError(f"on_margin must be 'error', 'warn' or 'ignore', got {on_margin!r}")
    margins = output_margins(sched.tg.graph)
    if not margins or on_margin == "ignore":
        return {}
    est = estimate or Estimate(sched)
    scale = dtype_scale(dtype)
    values = dict(sched.tg.outputs)
    report = {name: (est.output(values[name])[0] * scale, m)
              for name, m in margins.items() if name in values}
    over = {name: em for name, em in report.items() if not em[0] <= em[1]}
    if over:
        parts = []
        for n, (e, m) in sorted(over.items()):
            where = culprits(sched, est.per_op, est.mag, m / scale).get(values[n].owner)
            parts.append(f"\"{n}\" may be off by {e:.3g} (margin {m:g})" +
                         (f", first out of tolerance at {where}" if where else ""))
        message = (f"float32 error estimate exceeds the declared margin: {', '.join(parts)}; "
                   f"{remedy(dtype)}; or compile with on_margin='warn'")
        if on_margin == "error":
            raise PrecisionError(message)
        import warnings

        warnings.warn(message, PrecisionWarning, stacklevel=3)
    return report
