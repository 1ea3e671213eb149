"""float32 storage of composed weights: may a fold replace some ops by their product?

A graph's weights are stored as float32, and the oracle evaluates them exactly (float64).
Folding `linear(linear(x, A, a), B, b)` into `linear(x, f32(A @ B), f32(a @ B + b))` rounds
the product, so the folded graph means something slightly different: each output moves by
`sum_i |x_i| |dW_ij| + |db_j|`, dW and db the rounding residuals. That is harmless unless the
terms cancel: inputs 1.2e6 * x against a bias of -1.08e7 leave pre-activations of order 1,
and the rounding of the folded bias alone (ulp = 1) can flip a compare.

The fold builders (`passes/fuse_linears.py`, `passes/form_mlps.py`) `record` the residuals of
what they round, per side of the new op ("in": the matrix and bias applied to its input;
"out": an mlp's second matrix and bias). `FoldCheck(graph).precise(op)` bounds how far the
rounded biases move the op's output (an input-side bias carried through |W2| for an mlp)
and accepts the fold when that stays within `TOLERANCE * max(1, |output|)`. Rounded matrix
entries are not charged: they move an output in proportion to the input, exactly as float32
evaluation of the op does wherever it runs. The output's scale is exact for a linear (the
affine image of its input box), but an interval box overstates an mlp whose units cancel (a
compare's box spans its pre-activations), so an mlp's scale is the largest |output| on a
fixed sample of its input box instead (an underestimate only makes the check stricter).

A second check (`grows_past_exact`) keeps float32 evaluation exact where it was: a fold into
an mlp's output side must not push its sums of products from below 2^24 to past 2^27 (a
heuristic margin: between the two, coarse values such as even integers still add exactly) (the compare of integers up to 2e5 followed by a gain of 1000: exact as two ops,
off by 16 as one mlp whose sums reach 1e9).
"""

from __future__ import annotations

import weakref

import numpy as np
from xdsl.ir import Operation, SSAValue

from twdialect.dense import shape_of, to_numpy
from twdialect.dialect import (ConcatOp, GraphOp, LinearOp, MlpOp, is_plain_mlp,
                               mlp_activation, width_of)

TOLERANCE = 1e-6  # how far a fold may move an output, relative to max(1, |output|)
# How far float32 evaluation of a folded mlp may stray from its exact value, relative to
# max(1, |output|), unless the ops it replaces strayed as far (`FoldCheck.keeps_float32`).
F32_TOLERANCE = 1e-5
SAMPLE_POSITIONS = 16  # positions of sampled inputs `FoldCheck.sampled_magnitude` runs
EXACT_INTEGERS = 2.0 ** 24  # float32 adds integers exactly below this
ROUNDING_SUMS = 2.0 ** 27  # above this even multiples of 8 round (see grows_past_exact)
VACUOUS_BOX = 2.0 ** 40  # a box wider than this bounds nothing (see FoldCheck.box_measures)

_RESIDUALS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _vec(op: Operation, name: str, n: int) -> np.ndarray:
    attr = op.properties.get(name)
    return to_numpy(attr).reshape(-1) if attr is not None else np.zeros(n)


def record(op: Operation, side: str, w: np.ndarray, b: np.ndarray | None,
           before: tuple | None = None) -> None:
    """Remember what storing float64 `w`, `b` as float32 on `op`'s `side` rounded away, and
    for an mlp's output side (`before`) what it computed before the fold: its old W2 and b2
    and the gain G and bias g of the readers it absorbed (new output = old output @ G + g)."""
    dw = np.abs(w - w.astype(np.float32).astype(np.float64))
    db = np.zeros(w.shape[1]) if b is None else \
        np.abs(b - b.astype(np.float32).astype(np.float64))
    _RESIDUALS.setdefault(op, {})[side] = (dw, db)
    if before is not None:
        _BEFORE.setdefault(op, {})[side] = before


_BEFORE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
# folds whose output will be an addend of a tw.add (`mark_addend`)
_ADDENDS: weakref.WeakSet = weakref.WeakSet()


def mark_addend(op: Operation, value: SSAValue | None, always: bool = False) -> None:
    """Note that fold `op` takes the place of `value` where `value` is an addend of a
    tw.add (`always`: the fold's output becomes one): the lowering may then add its output
    sum and another writer's in one dot product
    (an accumulating add: both write one block of columns), so its sums must stay below 2^24
    itself (`grows_past_exact`), not 2^27: terms of 2e7 that add exactly among themselves
    round once another writer's finer terms join them."""
    if value is None:
        return
    uses = list(value.uses)
    if always or (len(uses) == 1 and type(uses[0].operation).__name__ == "AddOp"):
        _ADDENDS.add(op)


class _Unsampled(Exception):
    """A value `FoldCheck` has no sample of: an operand-less op the sample run did not reach."""


class FoldCheck:
    """Value ranges of a graph (computed on first use, extended to the ops a pass creates)."""

    def __init__(self, graph: GraphOp, dtype: str = "float32"):
        self.graph = graph
        # "float64": the model computes in float64, where the float32 evaluation checks
        # (sums past 2^24, hinge rounding, float32 samples) do not apply; the weights are
        # still stored as float32, so a fold's deviation is checked as ever
        self.dtype = dtype
        self._boxes: dict[SSAValue, tuple[np.ndarray, np.ndarray]] | None = None
        self._integers: dict[SSAValue, np.ndarray] | None = None
        self._samples: dict[SSAValue, np.ndarray] | None = None

    def box(self, v: SSAValue) -> tuple[np.ndarray, np.ndarray]:
        from twdialect.ranges import op_box, value_ranges

        if self._boxes is None:
            self._boxes = value_ranges(self.graph, strict=False)
        if v not in self._boxes:  # a value a pass made: from its operands' boxes, iteratively
            stack = [v]
            while stack:
                top = stack[-1]
                missing = [u for u in top.owner.operands if u not in self._boxes]
                if missing:
                    stack.extend(missing)
                    continue
                stack.pop()
                with np.errstate(over="ignore", invalid="ignore"):
                    self._boxes[top] = op_box(top.owner,
                                              [self._boxes[u] for u in top.owner.operands])
        return self._boxes[v]

    def magnitude(self, v: SSAValue) -> np.ndarray:
        lo, hi = self.box(v)
        m = np.maximum(np.abs(lo), np.abs(hi))
        return np.where(np.isnan(m), np.inf, m)

    def deviation(self, op: Operation) -> np.ndarray | None:
        """Per output component, how far storing the fold's float64 products as float32 moves
        `op`'s exact (oracle) value over its input box (None: nothing was recorded): each
        rounded bias by its residual, each rounded matrix entry by its residual times the
        largest |input| it multiplies. Where large terms cancel (1.2e6 x - 1.08e7 against a
        compare, or x A B with A B = 0 in exact arithmetic) this is far above the output,
        and the fold would change the oracle's answer."""
        sides = _RESIDUALS.get(op)
        if not sides:
            return None
        if isinstance(op, MlpOp) and not is_plain_mlp(op):
            return self._lane_deviation(op, sides)
        dev = 0.0
        x_mag = None
        if any(np.any(dw) for dw, _ in sides.values()):
            lo, hi = self.box(op.operands[0])
            x_mag = np.nan_to_num(np.maximum(np.abs(lo), np.abs(hi)), nan=np.inf)
        if "in" in sides:
            dw, db = sides["in"]
            dev = db + (x_mag @ dw if x_mag is not None and np.any(dw) else 0.0)
        if isinstance(op, MlpOp):
            w1, b1, w2, _ = self._mlp_arrays(op)
            dev = np.asarray(dev) @ np.abs(w2) if np.ndim(dev) else np.zeros(w2.shape[1])
            if "out" in sides:
                dw2, db2 = sides["out"]
                dev = dev + db2
                if x_mag is not None and np.any(dw2):
                    hidden = x_mag @ np.abs(w1) + np.abs(b1)
                    dev = dev + hidden @ dw2
        with np.errstate(invalid="ignore"):
            return np.nan_to_num(np.asarray(dev, np.float64), nan=np.inf)

    def _lane_deviation(self, op: MlpOp, sides: dict) -> np.ndarray:
        """`deviation` of a swish or gated mlp: a lane act(z) * u moves by at most
        L dz |u| + |act(z)| du + L dz du (L = 1.1 bounds swish's slope, relu's is 1; |act(z)|
        <= |z| for both), carried through |W2|, plus the output side's own rounding."""
        lo, hi = self.box(op.operands[0])
        x_mag = np.nan_to_num(np.maximum(np.abs(lo), np.abs(hi)), nan=np.inf)
        w1, b1, w2, _ = self._mlp_arrays(op)
        h = w1.shape[1]
        with np.errstate(over="ignore", invalid="ignore"):
            act = x_mag @ np.abs(w1) + np.abs(b1)
            up, du = np.ones(h), np.zeros(h)
            if op.is_gated:
                wu = to_numpy(op.up)
                up = x_mag @ np.abs(wu) + np.abs(_vec(op, "ub", h))
                if "up" in sides:
                    dwu, dbu = sides["up"]
                    du = dbu + x_mag @ dwu
            dz = np.zeros(h)
            if "in" in sides:
                dw, db = sides["in"]
                dz = db + x_mag @ dw
            dev = (1.1 * dz * up + act * du + 1.1 * dz * du) @ np.abs(w2)
            if "out" in sides:
                dw2, db2 = sides["out"]
                dev = dev + db2 + (act * up) @ dw2
            return np.nan_to_num(np.asarray(dev, np.float64), nan=np.inf)

    def grows_past_exact(self, op: Operation) -> bool:
        """Whether a fold into an mlp's output side pushes its sums of products from below
        2^24 (where float32 adds integers and fine binary fractions exactly) to 2^27 or more
        (where even multiples of 8 round): an mlp that computed exactly (a compare of large
        integers: units of 4e5 whose difference is the answer) would start rounding once its
        W2 absorbs a gain of 1000. Between the two, sums of coarse values (even integers,
        multiples of 10) still add exactly, so the check leaves them alone: a heuristic
        margin, not a proof. Measured on a fixed sample of the input box."""
        before = _BEFORE.get(op, {}).get("out")
        if before is None or not isinstance(op, MlpOp):
            return False
        old_w2, old_b2, gain, gain_bias = before
        old_b2 = np.zeros(old_w2.shape[1]) if old_b2 is None else old_b2
        # On a fixed sample of the input box: the sums |hidden| |W2| + |b2| of the new mlp;
        # before, the old mlp's, then its readers' over its outputs.
        w2 = np.abs(to_numpy(op.w2))
        b2 = np.abs(_vec(op, "b2", shape_of(op.w2)[1]))
        if significant_bits(w2) > significant_bits(old_w2) and \
                not self.box_measures(op.operands[0]):
            return True  # wider products of an mlp whose sums no range can bound
        for x in self.input_samples(op.operands[0]):
            with np.errstate(over="ignore", invalid="ignore"):
                lane = lanes(op, x)
                new = np.abs(lane) @ w2 + b2
                old_mlp = np.abs(lane) @ np.abs(old_w2) + np.abs(old_b2)
                old_readers = np.abs(lane @ old_w2 + old_b2) @ np.abs(gain) + np.abs(gain_bias)
                old = max(old_mlp.max(initial=0.0), old_readers.max(initial=0.0))
                if op in _ADDENDS:  # its terms join another writer's: below 2^24 whatever
                    if new.max(initial=0.0) >= EXACT_INTEGERS:  # the old sums were
                        return True
                elif old < EXACT_INTEGERS and new.max(initial=0.0) >= ROUNDING_SUMS:
                    return True
        return False

    def float32_worse_on_samples(self, op: Operation, replaced: list[Operation] | None) -> bool:
        """Whether float32 evaluation of the fold `op`, over integer inputs, strays further
        from the exact value than float32 evaluation of what it replaces, by more than
        F32_TOLERANCE * max(1, |value|), at a sampled input where the replaced form kept it
        (the box's integers and the graph's own sampled values). The bounds above cannot see
        exactness they cannot prove (a thermometer over wide integers whose lanes round
        alike and cancel exactly); running both forms in float32 can. Over reals both forms
        round, and the bounds weigh them. The replaced form: an mlp and the readers whose
        gain its output side took (`record`'s `before`), or `replaced`, a chain of linears
        and mlps each reading the one before (the first reading `op`'s input)."""
        chain = self._replaced_chain(op, replaced)
        if chain is None:
            return False
        x_value = op.operands[0]
        ints = self.integer(x_value)
        if not np.all(ints):  # reals round in either form: the bounds above weigh them
            return False
        new = _f32_form(op)
        for x in self.input_samples(x_value):
            x = np.where(ints, np.round(x), x)
            if not np.all(np.abs(x) < VACUOUS_BOX):
                continue  # (a vacuous box: `box_measures` rules there)
            with np.errstate(all="ignore"):
                exact = x
                for form in chain:
                    exact = form(exact, np.float64)
                tol = F32_TOLERANCE * np.maximum(1.0, np.abs(exact))
                for mode in (np.float32, ROUNDED):  # fused products, and products rounded
                    got_old = x.astype(np.float32)
                    for form in chain:
                        got_old = form(got_old, mode)
                    got_new = new(x.astype(np.float32), mode)
                    e_old = np.abs(got_old.astype(np.float64) - exact)
                    e_new = np.abs(got_new.astype(np.float64) - exact)
                    # where the replaced form kept the value, the fold must keep it too
                    if np.any((e_old <= tol) & ~(e_new <= e_old + tol)):
                        return True
        return False

    def _replaced_chain(self, op: Operation, replaced: list[Operation] | None):
        """The forms (`_f32_form`) that `op` replaces, in order, or None where they are not
        a chain this check can run."""
        before = _BEFORE.get(op, {}).get("out") if isinstance(op, MlpOp) else None
        if before is not None:
            old_w2, old_b2, gain, gain_bias = before
            w1, b1, _, _ = self._mlp_arrays(op)
            up = to_numpy(op.up) if op.up is not None else None
            ub = _vec(op, "ub", w1.shape[1]) if op.up is not None else None
            old_b2 = np.zeros(old_w2.shape[1]) if old_b2 is None else old_b2
            old = _mlp_form(w1, b1, old_w2, old_b2, mlp_activation(op), up, ub)
            return [old, _linear_form(gain, gain_bias)]
        if not replaced or not all(isinstance(r, (LinearOp, MlpOp)) for r in replaced):
            return None
        if replaced[0].operands[0] is not op.operands[0] or any(
                b.operands[0] is not a.results[0] for a, b in zip(replaced, replaced[1:])):
            return None
        return [_f32_form(r) for r in replaced]

    def integer(self, v: SSAValue) -> np.ndarray:
        """Which components of `v` are integers whenever the inputs keep their promises."""
        from twdialect.ranges import integer_components, op_integer

        if self._integers is None:
            self._integers = integer_components(self.graph)
        stack = [v]
        while stack:  # values a pass made: from their operands, iteratively
            top = stack[-1]
            if top in self._integers:
                stack.pop()
                continue
            missing = [u for u in top.owner.operands if u not in self._integers]
            if missing:
                stack.extend(missing)
                continue
            stack.pop()
            self._integers[top] = op_integer(top.owner,
                                             [self._integers[u] for u in top.owner.operands])
        return self._integers[v]

    def precise(self, op: Operation, replaced: list[Operation] | None = None) -> bool:
        """Whether the rounding recorded for `op` (a candidate, its operand live) keeps its
        output within TOLERANCE * max(1, |output|) (`deviation`), and, given the ops it
        `replaced` (in order, the last one producing the value `op` takes over), whether an
        mlp's float32 evaluation strays no further than theirs did (`keeps_float32`);
        without them, whether its sums stay below 2^24 if they did before (`grows_past_exact`)."""
        if not isinstance(op, (LinearOp, MlpOp)):
            return True
        if self.dtype == "float64":
            return self._within_deviation(op, replaced)
        if isinstance(op, MlpOp):  # (every kind of lane: relu, swish, gated)
            if op in _BEFORE and self.grows_past_exact(op):
                return False
            if replaced is not None and (self.input_grows_past_exact(op, replaced)
                                         or not self.keeps_float32(op, replaced)):
                return False
        if self.float32_worse_on_samples(op, replaced):
            return False
        return self._within_deviation(op, replaced)

    def _within_deviation(self, op: Operation, replaced: list[Operation] | None) -> bool:
        """The rounding recorded for `op` keeps its output within TOLERANCE * max(1,
        |output|) (`deviation`)."""
        dev = self.deviation(op)
        if dev is None or np.all(dev <= TOLERANCE):  # within tolerance at any scale >= 1:
            return True  # (the common case)
        scale = self.out_magnitude(op)
        if replaced:  # what the replaced ops really computed, correlations included
            scale = np.minimum(scale, self.sampled_magnitude(replaced[-1].results[0]))
        return bool(np.all(dev <= TOLERANCE * np.maximum(1.0, scale)))

    def sampled_magnitude(self, v: SSAValue) -> np.ndarray:
        """Largest |v| per component over a fixed sample of the graph's inputs, run through the
        oracle: unlike an interval box it sees x A B = 0 when A B = 0 (a fold whose rounded
        product breaks that cancellation moves the output by far more than its size)."""
        from twdialect.interp import evaluate_values
        from twdialect.random_graphs import sample_inputs

        if self._samples is None:
            try:
                self._samples = dict(evaluate_values(
                    self.graph, sample_inputs(self.graph, SAMPLE_POSITIONS),
                    self.graph.sym_name.data, n_positions=SAMPLE_POSITIONS))
            except (ValueError, ArithmeticError):  # (a graph the oracle cannot run yet)
                self._samples = {}
        values = self._sample_of(v)
        if values is None:
            return np.full(width_of(v), np.inf)
        with np.errstate(invalid="ignore"):
            return np.nan_to_num(np.abs(values).max(axis=0), nan=np.inf)

    def _sample_of(self, v: SSAValue) -> np.ndarray | None:
        """`v` on the sampled inputs (values a pass made: from their operands, by the oracle's
        op rules, through the shared walk that keeps them in `_samples`); None where the
        oracle cannot tell."""
        from twdialect.interp import evaluate_op, walk_to

        def run(op: Operation, args: list[np.ndarray]) -> np.ndarray:
            if not args:  # a source (or literal) the sample run did not see: left unknown
                raise _Unsampled(op)
            with np.errstate(all="ignore"):
                return evaluate_op(op, args, SAMPLE_POSITIONS, {})

        try:
            return walk_to(v, self._samples, run)
        except Exception:  # noqa: BLE001 - an op the oracle needs more context for
            return None

    def out_magnitude(self, op: Operation) -> np.ndarray:
        """Largest |output| per component of a candidate linear or mlp over its input box."""
        from twdialect.ranges import op_box

        x_lo, x_hi = self.box(op.operands[0])
        with np.errstate(over="ignore", invalid="ignore"):
            if isinstance(op, LinearOp):
                lo, hi = op_box(op, [(x_lo, x_hi)])
            elif not is_plain_mlp(op):  # a swish or gated mlp: its interval box
                lo, hi = op_box(op, [(x_lo, x_hi)])
            else:  # an interval box overstates an mlp whose units cancel: sample it instead
                w1, w2 = to_numpy(op.w1), to_numpy(op.w2)
                return _sampled_magnitude(w1, _vec(op, "b1", w1.shape[1]), w2,
                                          _vec(op, "b2", w2.shape[1]), x_lo, x_hi)
        m = np.maximum(np.abs(lo), np.abs(hi))
        return np.where(np.isnan(m), np.inf, m)

    def input_grows_past_exact(self, op: MlpOp, replaced: list[Operation]) -> bool:
        """The input-side twin of `grows_past_exact`: folding a linear into an mlp's first
        matrix must not push the sums of products from below 2^24 (in the linear and the mlp
        apart) to 2^27 or more (the fused terms |x_k| |(A W1)_kj| can be huge where x A alone
        was small and exact). Measured on a fixed sample of the linear's input box."""
        if len(replaced) != 2 or not isinstance(replaced[0], LinearOp) \
                or not isinstance(replaced[1], MlpOp) or replaced[1].x is not replaced[0].out:
            return False
        lin, old = replaced
        a = to_numpy(lin.weight)
        a_b = _vec(lin, "bias", a.shape[1])
        widens = max(significant_bits(w) for w, _ in _input_matrices(op)) > max(
            significant_bits(a), *(significant_bits(w) for w, _ in _input_matrices(old)))
        if widens and not self.box_measures(lin.x):
            return True  # wider products over an input no range can bound
        for x in self.input_samples(lin.x):
            with np.errstate(over="ignore", invalid="ignore"):
                y = x @ a + a_b
                before = (np.abs(x) @ np.abs(a) + np.abs(a_b)).max(initial=0.0)
                after = 0.0
                for w, b in _input_matrices(old):  # w1 and, for a gated mlp, its up matrix
                    before = max(before, (np.abs(y) @ np.abs(w) + np.abs(b)).max(initial=0.0))
                for w, b in _input_matrices(op):
                    after = max(after, (np.abs(x) @ np.abs(w) + np.abs(b)).max(initial=0.0))
            if before < EXACT_INTEGERS and after >= ROUNDING_SUMS:
                return True
        return False

    def box_measures(self, v: SSAValue) -> bool:
        """Whether `v`'s interval box says anything about the sums the growth checks measure:
        every component within VACUOUS_BOX. Beyond it a float32 value carries absolute errors
        over 10^5, so no output read to 1e-4 from it could be exact: such a box is one the
        analysis lost track of (the products and heads of a deep graph widen it to 1e22
        where the values stay below 2e4), not a range the values reach. There the growth
        checks cannot tell exact sums from rounding ones, and a fold that widens the
        significands of the products is refused rather than trusted."""
        return bool(np.all(self.magnitude(v) < VACUOUS_BOX))

    def input_samples(self, v: SSAValue) -> list[np.ndarray]:
        """Points of `v` the growth checks measure: a fixed sample of its interval box and,
        where the oracle can tell, its values on the graph's sampled inputs. An interval box
        can be vacuous (products and heads of a deep graph widen it to 1e22 where the values
        stay below 2e4): a growth past 2^24 must not hide behind it."""
        out = [_sample(*self.box(v))]
        seen = self._sample_of_inputs(v)
        if seen is not None and seen.size and np.all(np.isfinite(seen)):
            out.append(seen)
        return out

    def _sample_of_inputs(self, v: SSAValue) -> np.ndarray | None:
        """`v` on the graph's sampled inputs (run once, shared with `sampled_magnitude`)."""
        if self._samples is None:
            self.sampled_magnitude(v)
        return self._sample_of(v)

    def keeps_float32(self, op: MlpOp, replaced: list[Operation]) -> bool:
        """Whether float32 evaluation of the candidate mlp strays from its exact value by no
        more than the ops it replaces did, plus F32_TOLERANCE * max(1, |output|), over the
        value ranges (`twdialect.f32_error`). Folding a gain or a wide input into a
        construction whose hinges cancel exactly (a compare on a range up to 1e6) can leave
        sums float32 cannot add; the separate ops computed them exactly."""
        with np.errstate(over="ignore", invalid="ignore"):
            if self.float32_clean(op):
                return True
            if any(self.float32_clean(o) for o in replaced if isinstance(o, MlpOp)):
                return False  # it would spoil an mlp float32 evaluates within tolerance
            bound = self.own_error(op)
            allowed = F32_TOLERANCE * np.maximum(1.0, self.out_magnitude(op))
            return bool(np.all(bound <= self.chain_error(replaced) + allowed))

    def own_error(self, op: MlpOp) -> np.ndarray:
        """The float32 rounding of `op` itself over its input box (exact inputs)."""
        from twdialect.f32_error import ffn_error_bound, mlp_error_bound

        if is_plain_mlp(op):
            return mlp_error_bound(*self._mlp_arrays(op), *self._input(op))
        lo, hi, ints = self._input(op)
        return ffn_error_bound(*self._mlp_arrays(op), lo, hi, mlp_activation(op),
                               to_numpy(op.up) if op.up is not None else None,
                               to_numpy(op.ub) if op.ub is not None else None, ints)

    def float32_clean(self, op: MlpOp) -> bool:
        """Whether float32 evaluation of `op` stays within F32_TOLERANCE * max(1, |output|)
        (first by the classic dot-product bound, cheap and coarse; then `own_error`)."""
        allowed = F32_TOLERANCE * np.maximum(1.0, self.out_magnitude(op))
        w1, b1, w2, b2 = self._mlp_arrays(op)
        lo, hi, _ = self._input(op)
        with np.errstate(all="ignore"):
            x = np.maximum(np.abs(lo), np.abs(hi))
            hidden = x @ np.abs(w1) + np.abs(b1)  # |act(z)| <= |z| for relu and swish
            if op.up is not None:  # a gated lane: times its up projection
                hidden = hidden * (x @ np.abs(to_numpy(op.up)) + np.abs(_vec(op, "ub", len(b1))))
            coarse = 2.0 ** -24 * ((w1.shape[0] + 2) * hidden @ np.abs(w2)
                                   + (w2.shape[0] + 2) * (hidden @ np.abs(w2) + np.abs(b2)))
        if np.all(coarse <= allowed):
            return True
        return bool(np.all(self.own_error(op) <= allowed))

    def _mlp_arrays(self, op: MlpOp):
        w1, w2 = to_numpy(op.w1), to_numpy(op.w2)
        return w1, _vec(op, "b1", w1.shape[1]), w2, _vec(op, "b2", w2.shape[1])

    def _input(self, op: Operation, v: SSAValue | None = None):
        v = op.operands[0] if v is None else v
        lo, hi = (_finite(a) for a in self.box(v))
        return lo, hi, self.integer(v)

    def chain_error(self, ops: list[Operation]) -> np.ndarray:
        """The float32 error bound of the last of `ops`, each op's rounding carried into the
        ops of the list that read it (values from outside the list are taken as exact)."""
        from twdialect.f32_error import ffn_error_bound, linear_error_bound, mlp_error_bound

        err: dict[SSAValue, np.ndarray] = {}

        def incoming(v: SSAValue) -> np.ndarray:
            if v in err:
                return err[v]
            if isinstance(v.owner, ConcatOp) and any(u in err for u in v.owner.operands):
                return np.concatenate([incoming(u) for u in v.owner.operands])
            return np.zeros(width_of(v))

        for o in ops:
            if isinstance(o, MlpOp) and not is_plain_mlp(o):
                lo, hi, ints = self._input(o)
                e = ffn_error_bound(*self._mlp_arrays(o), lo, hi, mlp_activation(o),
                                    to_numpy(o.up) if o.up is not None else None,
                                    to_numpy(o.ub) if o.ub is not None else None, ints,
                                    incoming(o.x))
            elif isinstance(o, MlpOp):
                e = mlp_error_bound(*self._mlp_arrays(o), *self._input(o), incoming(o.x))
            elif isinstance(o, LinearOp):
                w = to_numpy(o.weight)
                e = linear_error_bound(w, _vec(o, "bias", w.shape[1]), *self._input(o),
                                       incoming(o.x))
            else:
                e = np.full(width_of(o.results[0]),
                            max((float(incoming(u).max(initial=0.0)) for u in o.operands),
                                default=0.0))
            err[o.results[0]] = e
        return err[ops[-1].results[0]]


def _finite(a: np.ndarray) -> np.ndarray:
    return np.nan_to_num(np.asarray(a, np.float64), nan=0.0, posinf=3e38, neginf=-3e38)


def _sample(lo: np.ndarray, hi: np.ndarray, n: int = 64) -> np.ndarray:
    """The box's corners lo and hi, its centre and n fixed random points."""
    lo = np.where(np.isfinite(lo), lo, -1e30)
    hi = np.where(np.isfinite(hi), hi, 1e30)
    u = np.random.default_rng(0).uniform(size=(n, len(lo)))
    return np.vstack([lo, hi, (lo + hi) / 2, lo + u * (hi - lo)])


def _sampled_magnitude(w1, b1, w2, b2, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Largest |relu(x W1 + b1) W2 + b2| per output over `_sample` of the box."""
    with np.errstate(over="ignore", invalid="ignore"):
        y = np.maximum(_sample(lo, hi) @ w1 + b1, 0.0) @ w2 + b2
    return np.nan_to_num(np.abs(y), nan=np.inf).max(axis=0)


def lanes(op: MlpOp, x: np.ndarray) -> np.ndarray:
    """The hidden lanes of mlp `op` on inputs `x` (rows), exactly as the oracle computes them:
    act(x W1 + b1), times (x Wu + bu) for a gated mlp; relu or swish."""
    from twdialect.interp import swish

    w1 = to_numpy(op.w1)
    z = x @ w1 + _vec(op, "b1", w1.shape[1])
    h = swish(z) if mlp_activation(op) == "swish" else np.maximum(z, 0.0)
    if op.up is not None:
        h = h * (x @ to_numpy(op.up) + _vec(op, "ub", w1.shape[1]))
    return h


def _input_matrices(op: MlpOp) -> list[tuple[np.ndarray, np.ndarray]]:
    """The (matrix, |bias|) pairs an mlp applies to its input: W1, and Wu where it is gated."""
    w1 = to_numpy(op.w1)
    out = [(w1, np.abs(_vec(op, "b1", w1.shape[1])))]
    if op.up is not None:
        out.append((to_numpy(op.up), np.abs(_vec(op, "ub", w1.shape[1]))))
    return out


def significant_bits(a: np.ndarray) -> int:
    """The most significant bits any finite entry of `a` needs (1 for a power of two, 53 for
    0.1; 0 for an array of zeros). Products of an input grid by weights of b bits need b more
    bits than the grid: a fold that multiplies a gain into exact power-of-two weights widens
    every product by the gain's bits."""
    a = np.asarray(a, np.float64).reshape(-1)
    a = a[np.isfinite(a) & (a != 0.0)]
    if not a.size:
        return 0
    mant = (np.abs(np.frexp(a)[0]) * 2.0 ** 53).astype(np.int64)
    low = mant & -mant  # the lowest set bit
    return int(53 - np.log2(low.astype(np.float64)).min())


def _swish(z: np.ndarray) -> np.ndarray:
    """SiLU in z's own dtype, as torch computes it: z / (1 + exp(-z))."""
    with np.errstate(over="ignore"):
        return z / (z.dtype.type(1.0) + np.exp(-z))


# float32 evaluated with every product rounded on its own, then summed (`_linear_form`)
ROUNDED = "rounded"
ROUNDED_TERMS = 1 << 16  # widest in x out evaluated that way (beyond: the matmul alone)


def _linear_form(w: np.ndarray, b: np.ndarray):
    """x @ w + b in a dtype: the weights stored as float32 (the model's and the oracle's).
    np.float32 runs numpy's matmul (which may fuse a product with its sum, as GPU kernels
    and AVX-512 BLAS do); ROUNDED rounds every product to float32 on its own first, as a
    kernel without fused multiply-adds does: a fold must keep the value either way."""
    w32, b32 = np.asarray(w, np.float32), np.asarray(b, np.float32).reshape(-1)

    def form(x: np.ndarray, dtype) -> np.ndarray:
        if isinstance(dtype, str):
            x = x.astype(np.float32)
            if x.shape[1] * w32.shape[1] <= ROUNDED_TERMS:
                return (x[:, :, None] * w32[None, :, :]).sum(axis=1, dtype=np.float32) + b32
            return x @ w32 + b32
        return x.astype(dtype) @ w32.astype(dtype) + b32.astype(dtype)
    return form


def _mlp_form(w1, b1, w2, b2, activation: str, up=None, ub=None):
    """An mlp's lanes and output in a dtype, its weights stored as float32."""
    first, second = _linear_form(w1, b1), _linear_form(w2, b2)
    gate = None if up is None else _linear_form(up, ub)

    def form(x: np.ndarray, dtype) -> np.ndarray:
        z = first(x, dtype)
        h = _swish(z) if activation == "swish" else np.maximum(z, z.dtype.type(0.0))
        if gate is not None:
            h = h * gate(x, dtype)
        return second(h, dtype)
    return form


def _f32_form(op: Operation):
    """`op` (a linear or an mlp) as a form `form(x, dtype)`."""
    if isinstance(op, LinearOp):
        w = to_numpy(op.weight)
        return _linear_form(w, _vec(op, "bias", w.shape[1]))
    w1, w2 = to_numpy(op.w1), to_numpy(op.w2)
    up = to_numpy(op.up) if op.up is not None else None
    ub = _vec(op, "ub", w1.shape[1]) if op.up is not None else None
    return _mlp_form(w1, _vec(op, "b1", w1.shape[1]), w2, _vec(op, "b2", w2.shape[1]),
                     mlp_activation(op), up, ub)
