"""Numeric contracts of the library ops' decompositions (what `decompose` promises).

The oracle (`twdialect.interp`) gives every library op its *ideal* meaning. The `decompose`
pass (passes/decompose.py) replaces each library op by MLP chains of primitives; this module
states where that replacement computes exactly the ideal value and where it does not, and what
each replacement costs. "Exact" means: equal up to floating-point rounding of the arithmetic
and of the f32 weights (the weights are stored as f32; every constant whose rounding would
break a cancellation is chosen to be exactly representable in f32, see each contract).

compare(x, t, ramp) -> +1 if x >= t else -1 (elementwise)
    Decomposition: z = x*w + beta with w the smallest power of two >= 1/ramp (so x*w is exact in
    f32 and the encoded ramp 1/w lies in (ramp/2, ramp]), beta = -t*w rounded to a grid on which
    beta and beta + 1 are both exact in f32;
    out = -1 + 2*(relu(z + 1) - relu(z)). One MLP chain, 2 neurons per component.
    Exact region: x >= t' or x <= t' - ramp', where t' = -beta/w and ramp' = 1/w are the
    threshold and ramp the f32 weights actually encode (|t' - t| <= 2^-24 (|t| + 2 ramp),
    ramp/2 < ramp' <= ramp). Since the oracle flips at t, the ideal and decomposed values
    agree exactly for x >= max(t, t') or x <= min(t, t' - ramp') ("outside the ramp zone").
    Inside (t' - ramp', t') the output is the linear ramp -1 + 2 (z + 1), in [-1, 1].
    At the edges the error is at most 2*|rounding of z| (about 2^-52 |z| in float64); beta + 1
    is exact in f32 (checked; |t/ramp| < 2^23 is required), so relu(z+1) - relu(z) = 1 exactly
    for z >= 0.

select(c, a, b) -> a where c > 0 else b; c is +/-1, 1 wide (broadcast) or one per component
    Decomposition (one MLP chain over concat(c, a, b)), per component k, with offsets o_a <= lo_a,
    o_b <= lo_b below the value ranges (`twdialect.ranges`) and gains K_a, K_b:
        h_a = relu(a - o_a + K_a (c - 1)),  h_b = relu(b - o_b - K_b (c + 1)),
        g_a = relu(c + 1),  g_b = relu(1 - c),  out = h_a + h_b + g_a o_a / 2 + g_b o_b / 2.
    2 neurons per component plus the gates: g_a where some o_a != 0 and g_b where some o_b != 0,
    one each when c is 1 wide, one per such component when c is N wide (at most 2N). Each
    branch is rebuilt from its own offset only, so the other branch's range never enters the
    sum (with a shared constant o_b + g (o_a - o_b) / 2 a far wider b made the selected a round
    at b's scale).
    K is the smallest power of two with K (2 - SELECT_COND_TOLERANCE) >= hi - o, so for c within
    SELECT_COND_TOLERANCE of -1 (resp. +1) the losing neuron h_a (resp. h_b) is exactly 0; with c
    exactly +/-1 the losing branch may even exceed its range by up to K * SELECT_COND_TOLERANCE.
    o is lo rounded down to a grid step s = 2^(floor(log2 m) - 20) of the branch's own largest
    magnitude m, so o, o + K and o / 2 are exact in f32.
    Exact region: c in {-1, +1} (the oracle values of compare outside its ramp zone). For c
    within SELECT_COND_TOLERANCE of +/-1 the losing branch still contributes exactly 0 and the
    result is off by at most |c -+ 1| (K + |o| / 2) of the winning branch. Otherwise (c near 0)
    the output mixes both branches. Error in the exact region: rounding at the scale of the
    selected branch's |o| + K (about 2^-52 (|o| + K) in float64, 2^-23 (|o| + K) on an fp32
    machine). Ranges must be finite with magnitude <= SELECT_MAX_MAGNITUDE (else `decompose`
    refuses, naming the op).

clamp(x, lo, hi) -> min(max(x, lo), hi)
    Decomposition: lo + relu(x - lo) - relu(x - hi); one MLP chain, 2 neurons per component.
    Exact everywhere, up to the f32 rounding of lo and hi (error <= 2^-24 max(|lo|, |hi|)).

piecewise_linear(x, B, V) -> interpolation through (B[k], V[k]), constant outside [B0, Bn-1]
    Decomposition: V[0] + sum_k C[k] relu(x - B[k]) (+ R relu(x - B[n-1])), one MLP chain with
    one neuron per breakpoint; neurons whose coefficient is 0 in every output column (no slope
    change) are dropped. C is chosen breakpoint by breakpoint so the f32 coefficients hit V[k+1]
    at B[k+1] given the already rounded earlier ones (errors do not accumulate along the
    breakpoints). C[n-1] = f32(-sum C[:n-1]) flattens the right tail and R, the f32 remainder of
    that rounding, is a second neuron on the last breakpoint where it is non-zero: at most
    n + 1 neurons. Exact everywhere (it is piecewise linear with the same breakpoints) up to the
    f32 rounding of C: at most 2^-24 |C[k]| (B[k+1] - B[k]) at each breakpoint, linear in
    between, and a residual tail slope of about 2^-48 |sum C| (so far-away inputs stay flat).
    On an fp32 machine the hinge sum itself rounds at the scale of |C| |x - B|.

piecewise_linear_2d(x, y, xs, ys, T) -> triangulated interpolation, inputs clamped to the grid
    Decomposition: two MLP chains.
    Chain 1 (over concat(x, y)): per strip, r_i = relu(z_i) - relu(z_i - 1) with
    z_i = (x - xs[i]) / (xs[i+1] - xs[i]) (f32 weights), i.e. clamp(z_i, 0, 1); likewise s_j(y).
    2 neurons per strip: 2 (n1 - 1) + 2 (n2 - 1) neurons.
    Chain 2 (over concat(r, s)): on cell (I, J) with local coordinates u = r_I, v = s_J the
    triangulated interpolant is T00 + u (T10 - T00) + v (T01 - T00) + g min(u, v) with
    g = T11 - T10 - T01 + T00 (lower triangle u >= v: min = v; upper: min = u). Summing over
    strips (r_i = 1 left of the cell, 0 right of it) this telescopes to
        f = T[0,0] + sum_i a_i r_i + sum_j b_j s_j + sum_ij c_ij min(r_i, s_j),
        a_i = T[i+1,0] - T[i,0], b_j = T[0,j+1] - T[0,j],
        c_ij = T[i+1,j+1] - T[i+1,j] - T[i,j+1] + T[i,j],
    and min(r, s) = r - relu(r - s) with relu(r) = r (r >= 0). Neurons: one per r_i and s_j,
    one per (i, j) with c_ij != 0: at most n1 n2 - 1.
    Exact everywhere (corners, edges and outside the grid included), up to f32 rounding of the
    strip weights (which moves strip edges by about 2^-24 |xs|) and of a, b, c.
    Lattice form (one MLP chain). An AND of two continuous ramps needs two ReLU layers, but
    when x and y are integers (`twdialect.ranges.integer_components`: inputs declared
    `integer`, integer embeddings and weights, ...) with finite ranges [x0, x1] x [y0, y1] of
    at most LATTICE_MAX_POINTS lattice points, t = (x - x0) + (x1 - x0 + 1)(y - y0) numbers the
    lattice points one to one, and the op is the 1-d interpolant through (t, f(x, y)): one
    hinge chain over concat(x, y) with first-layer weights (1, x1 - x0 + 1), breakpoints where
    the slope along t changes (the ends of each row, plus the kinks inside a row), built as
    piecewise_linear is. The order (which operand is the row) with fewer breakpoints wins; used
    when it needs at most `lattice-neurons` (default LATTICE_MAX_NEURONS) neurons.
    Exact at every integer point, up to the f32 rounding of the hinge coefficients (t, the
    weights and the biases are integers, exact in f32 below 2^24: an order whose sums could
    reach 2^24 is not used); non-integer operands break
    the declared promise (the oracle refuses non-integer values of an `integer` input).

Float32 over the declared ranges (all ops): the contracts above hold for the arithmetic; on
the float32 machine each construction also rounds at the spacing of its hinges' magnitudes.
`decompose` bounds that rounding over the operands' value ranges (`twdialect.f32_error`) and
keeps it within DEFAULT_TOLERANCE * max(1, |output|) (option `tolerance`; an op's own
`tw.tolerance` widens it): it picks the construction cancelling on the narrower side, or
refuses the op by name with the ranges that would fit (docs/decompose.md).

Primitives (`tw.linear`, `tw.mlp`, ...) and views are untouched by `decompose`.

Costs and exact regions are tables of per-library-op rules (`DECOMPOSITION_COST`,
`EXACT_REGION`: `OpRules` of `twdialect.interp`); `contract_mask` runs the shared graph walk.
"""

from __future__ import annotations

from twdialect.errors import TwError
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from xdsl.ir import Operation

from twdialect.dense import shape_of
from twdialect.dialect import (
    LIBRARY_OPS,
    FULL,
    AttnOp,
    ClampOp,
    CompareOp,
    OutputOp,
    PiecewiseLinear2dOp,
    PiecewiseLinearOp,
    SelectOp,
    attn_mask,
    describe,
    width_of,
)
from twdialect.interp import OpRules, evaluate_values, find_graph, walk_graph

# A select's condition may be this far from +/-1 and the losing branch is still exactly 0.
SELECT_COND_TOLERANCE = 0.25
# Largest |bound| of a select branch's value range that `decompose` accepts.
SELECT_MAX_MAGNITUDE = float(2 ** 20)
# How far a decomposition's float32 evaluation may stray from the ideal value over the
# operands' declared ranges, relative to max(1, |output|) (the output's range): `decompose`
# refuses a library op whose bound (`twdialect.f32_error`) exceeds it (option `tolerance`).
DEFAULT_TOLERANCE = 1e-4
# Condition values treated as exactly +/-1 by `contract_mask` (float64 noise only).
SELECT_EXACT_ATOL = 1e-9
# The one-chain integer-lattice form of piecewise_linear_2d: at most this many lattice points
# are tabulated, and by default at most this many hinge neurons are spent (`decompose` option
# lattice-neurons); beyond either the two-chain form is used.
LATTICE_MAX_POINTS = 1 << 16
LATTICE_MAX_NEURONS = 256
# Default guard band of `contract_mask` around compare's ramp zone: inputs this close (times
# 1 + |t|) to an edge count as outside the exact region, which absorbs the tiny f32-weight
# rounding of upstream decompositions (e.g. piecewise_linear slopes) in differential tests.
DEFAULT_GUARD = 1e-6


class ContractError(TwError):
    """A library op whose parameters cannot be decomposed within its contract."""

    def __init__(self, message: str, op: Operation | None = None):
        super().__init__(message)
        self.op = op


def f32(x) -> np.ndarray | float:
    """Round to the nearest f32, returned as float64 (what a stored weight reads back as)."""
    return np.asarray(x, dtype=np.float32).astype(np.float64)


def unit_grid_round(x: np.ndarray) -> np.ndarray:
    """Round x to a grid fine enough for f32 yet coarse enough that x + 1 and x - 1 are exact
    in f32 too: multiples of 2^(ceil(log2(|x| + 2)) - 24)."""
    x = np.asarray(x, dtype=np.float64)
    q = np.exp2(np.ceil(np.log2(np.abs(x) + 2.0)) - 24)
    return np.round(x / q) * q


@dataclass(frozen=True)
class CompareParams:
    """The f32 weights of compare's ramp and the threshold/ramp they encode."""

    w: float  # the smallest power of two >= 1 / ramp
    beta: float  # -t * w rounded so that beta and beta + 1 are exact in f32
    threshold: float  # t' = -beta / w
    ramp: float  # ramp' = 1 / w


def compare_params(op: CompareOp) -> CompareParams:
    t, ramp = op.threshold.value.data, op.ramp.value.data
    # A power of two, so x w is exact in float32 and the hinges z + 1, z round only where
    # they are summed (a fused multiply-add would otherwise round x w + b at large z): the
    # encoded ramp 1/w lies in (ramp/2, ramp], a narrower ramp zone inside the requested one.
    with np.errstate(all="ignore"):
        w = float(np.exp2(np.ceil(np.log2(1.0 / ramp)))) if ramp > 0 else np.inf
    if not (np.isfinite(w) and w > 0 and w < 2.0 ** 127):
        raise ContractError(f"{describe(op)}: ramp {ramp} is too small for f32 weights "
                            "(1/ramp overflows)", op)
    beta = float(unit_grid_round(np.asarray(-t * w)))
    if not np.isfinite(beta) or abs(beta) >= 2.0 ** 23 or float(f32(beta + 1.0)) != beta + 1.0:
        raise ContractError(f"{describe(op)}: threshold/ramp = {t / ramp:.6g} is too large for "
                            "an exact f32 ramp (|t/ramp| must stay below 2^23)", op)
    return CompareParams(w=w, beta=beta, threshold=-beta / w, ramp=1.0 / w)


# --------------------------------------------------------------------------------------
# Costs
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DecompositionCost:
    """MLP sublayers (chained `tw.mlp` ops) and hidden neurons of one decomposition;
    `neurons` is an upper bound where zero-weight neurons may be dropped."""

    mlp_sublayers: int
    neurons: int


def _not_library_op(op: Operation) -> ContractError:
    return ContractError(f"{describe(op)}: not a library op", op)


DECOMPOSITION_COST = OpRules("decomposition cost", _not_library_op)


def decomposition_cost(op: Operation) -> DecompositionCost:
    """The cost of decomposing library op `op` (see the module docstring)."""
    return DECOMPOSITION_COST(op)


@DECOMPOSITION_COST.rule(CompareOp, ClampOp)
def _two_per_component(op: CompareOp | ClampOp) -> DecompositionCost:
    return DecompositionCost(1, 2 * width_of(op.out))


@DECOMPOSITION_COST.rule(SelectOp)
def _select_cost(op: SelectOp) -> DecompositionCost:
    n = width_of(op.out)
    return DecompositionCost(1, 2 * n + (2 if width_of(op.cond) == 1 else 2 * n))


@DECOMPOSITION_COST.rule(PiecewiseLinearOp)
def _pwl_cost(op: PiecewiseLinearOp) -> DecompositionCost:
    return DecompositionCost(1, shape_of(op.breakpoints)[0] + 1)


@DECOMPOSITION_COST.rule(PiecewiseLinear2dOp)
def _pwl_2d_cost(op: PiecewiseLinear2dOp) -> DecompositionCost:
    """The two-chain form; integer operands may get the one-chain lattice form."""
    n1, n2 = shape_of(op.xs)[0], shape_of(op.ys)[0]
    return DecompositionCost(2, 2 * (n1 - 1) + 2 * (n2 - 1) + n1 * n2 - 1)


# --------------------------------------------------------------------------------------
# Exact regions and the differential-test mask
# --------------------------------------------------------------------------------------


EXACT_REGION = OpRules("exact region", _not_library_op)


def exact_region(op: Operation, args: list[np.ndarray], guard: float = DEFAULT_GUARD) -> np.ndarray:
    """Per position (n,), whether library op `op` with operand values `args` (the oracle's,
    each (n, width)) is inside the region where its decomposition is exact."""
    return EXACT_REGION(op, args, guard)


@EXACT_REGION.rule(CompareOp)
def _compare_exact(op: CompareOp, args: list[np.ndarray], guard: float) -> np.ndarray:
    p = compare_params(op)
    t = op.threshold.value.data
    x = args[0]
    g = guard * (1.0 + abs(t))
    high = x >= max(t, p.threshold) + g
    low = x <= min(t, p.threshold - p.ramp) - g
    return np.all(high | low, axis=1)


@EXACT_REGION.rule(SelectOp)
def _select_exact(op: SelectOp, args: list[np.ndarray], guard: float) -> np.ndarray:
    return np.all(np.abs(np.abs(args[0]) - 1.0) <= SELECT_EXACT_ATOL, axis=1)


@EXACT_REGION.rule(ClampOp, PiecewiseLinearOp, PiecewiseLinear2dOp)
def _exact_everywhere(op: Operation, args: list[np.ndarray], guard: float) -> np.ndarray:
    return np.ones(args[0].shape[0], dtype=bool)


def contract_mask(module, inputs: Mapping[str, np.ndarray], graph: str = "main",
                  guard: float = DEFAULT_GUARD) -> np.ndarray:
    """Bool array (n_positions,): True where every graph output is covered by the contracts.

    A position is False when some library op, evaluated by the oracle on `inputs`, sits outside
    its exact region there (`exact_region`), or when an output at that position depends on such
    an op: per position through per-position ops, and through attention on every later
    position too (a query at position i reads keys and values at positions j <= i), or on
    every position through a full-mask attention (its queries read the whole sequence).
    Differential tests compare the oracle before and after `decompose` only where this holds.
    """
    g = find_graph(module, graph)
    values = evaluate_values(module, inputs, graph)
    n = next(iter(values.values())).shape[0] if values else 0

    def taint(op: Operation, ins: list[np.ndarray]) -> np.ndarray:
        """Positions where `op`'s value strays from the oracle's (see above)."""
        if type(op) is AttnOp:
            kv = ins[1] | ins[2]
            t = ins[0] | (np.full(n, kv.any()) if attn_mask(op) == FULL
                          else np.logical_or.accumulate(kv))
        else:
            t = np.zeros(n, dtype=bool)
            for a in ins:
                t |= a
        if type(op) in LIBRARY_OPS:
            t |= ~exact_region(op, [values[v] for v in op.operands], guard)
        return t

    tainted = walk_graph(g, taint)
    bad = np.zeros(n, dtype=bool)
    for op in g.block.ops:
        if type(op) is OutputOp:
            bad |= tainted[op.value]
    return ~bad
