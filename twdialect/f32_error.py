"""How far float32 evaluation of one `tw.mlp` can stray from its exact value over an input box.

The oracle evaluates in float64; the compiled model runs float32. Most of the library's MLP
constructions cancel large hinges (compare's relu(z + 1) - relu(z), clamp's
relu(x - lo) - relu(x - hi), a piecewise_linear's tail): where the declared input range is
wide, each hinge rounds at the float32 spacing (ulp) of its own magnitude and the cancellation
leaves that rounding behind. `mlp_error_bound` bounds it, per output component, so `decompose`
and the library can refuse (or reorient) a construction that fp32 cannot keep within its
contract over the declared ranges.

Evaluation model (what torch does for an `nn.Linear`): each pre-activation is a dot product of
the input row with one weight column, accumulated in float32, then the bias is added; the
output is the same for the hidden layer. An addition rounds by at most half an ulp of its
*result*; a product x w is exact when w is a power of two (or x is an integer and the product
fits 24 bits). Kernels may fuse a product with the addition that follows (FMA: one rounding
of x w + b at the sum), so no rule here relies on a product being rounded on its own.

The bound, per output k:
* bias adds: sum_j |W2[j, k]| ulp(Z_j)/2, Z_j the largest positive pre-activation of neuron j
  (a neuron that never fires rounds nothing into the output);
* dot products: neurons reading the same weight column share their dot product bit for bit, so
  its rounding shifts their common input p; it costs |slope| ulp(|p|)/2 per interval of p
  between the neurons' breakpoints (zero where the outputs are flat, as outside a compare's
  ramp: there it only moves the threshold by 2^-24 |t|, which the contract's guard covers);
* output sums: ulp(max |partial sum|)/2 per addition, the partial sums taken as exact
  piecewise-linear functions of each family's input (so relu(z + 1) - relu(z) is seen to be
  small, not 2|z|), summed over families;
* exactness: where every operand is an integer or a dyadic weight and every partial sum stays
  below 2^24 times their common grid, float32 is exact and the terms above are 0.
Input errors `e_in` are carried through |W1| and |W2| (a Lipschitz bound).

That hinge analysis is relu's. A swish or gated `tw.mlp` (act swish, up) has
`ffn_error_bound` instead: conservative (each lane's slope, its own rounding and a product's,
the output sums' dot-product bound), with no cancellation analysis; `mlp_error_bound` must
not be asked about such an mlp (its callers check `twdialect.dialect.is_plain_mlp`).
"""

from __future__ import annotations

import hashlib
import math

import numpy as np

MANTISSA = 24  # float32 significand bits (the implicit one included)


def ulp(x: float) -> float:
    """The float32 spacing at magnitude |x| (2^-149 at the bottom of the subnormals)."""
    x = abs(float(x))
    if x == 0.0 or not math.isfinite(x):
        return 0.0 if x == 0.0 else math.inf
    return math.ldexp(1.0, max(math.frexp(x)[1] - MANTISSA, -149))


def lowbit(v: float) -> float:
    """The largest power of two dividing float `v` (its grid); inf for 0."""
    if v == 0.0:
        return math.inf
    m, e = math.frexp(abs(float(v)))
    n = int(m * (1 << 53))
    return math.ldexp(1.0, e - 53 + ((n & -n).bit_length() - 1))


def _odd_part(v: float) -> float:
    return abs(v) / lowbit(v) if v != 0 else 0.0


class _Neuron:
    """One hidden unit's pre-activation z = x @ w + b over the box: magnitudes and grids."""

    def __init__(self, w: np.ndarray, b: float, lo: np.ndarray, hi: np.ndarray,
                 integer: np.ndarray, nz: np.ndarray | None = None):
        nz = np.nonzero(w)[0] if nz is None else nz
        mag = np.maximum(np.abs(lo[nz]), np.abs(hi[nz])) * np.abs(w[nz])
        self.p_lo = float(np.sum(np.minimum(lo[nz] * w[nz], hi[nz] * w[nz])))
        self.p_hi = float(np.sum(np.maximum(lo[nz] * w[nz], hi[nz] * w[nz])))
        self.b = float(b)
        self.z_pos = max(0.0, self.p_hi + self.b)  # largest positive pre-activation
        total = float(mag.sum())
        # Grid of the exact dot product (0: none, the operands are reals).
        grids, products_exact = [], True
        for i, m in zip(nz.tolist(), mag.tolist()):
            wi = float(w[i])
            if integer[i]:
                grids.append(lowbit(wi))
                products_exact &= _odd_part(wi) * max(abs(lo[i]), abs(hi[i])) < 2.0 ** MANTISSA
            else:
                grids.append(0.0)
                products_exact &= _odd_part(wi) == 1.0
        grid = min(grids, default=math.inf)
        single = len(nz) <= 1
        self.dot_exact = products_exact and (single or (grid > 0 and total < 2.0 ** MANTISSA * grid))
        self.single_real_term = single and not self.dot_exact
        self.dot_terms = len(nz)
        self.dot_total = total
        bias_grid = min(grid, lowbit(self.b))
        self.exact = self.dot_exact and (
            self.b == 0.0 or (bias_grid > 0 and total + abs(self.b) < 2.0 ** MANTISSA * bias_grid))
        self.grid = bias_grid if self.exact else 0.0

    def dot_error(self, p_mag: float) -> float:
        """Rounding of the dot product (before the bias) where |p| <= p_mag."""
        if self.dot_exact:
            return 0.0
        if self.single_real_term:
            return ulp(p_mag) / 2
        return self.dot_terms * ulp(self.dot_total) / 2

    def bias_error(self) -> float:
        if self.exact or self.b == 0.0:
            return 0.0
        if self.dot_exact and self.b < 0 and self.z_pos < 2.0 ** MANTISSA * lowbit(self.b):
            # Firing means p > -b > 0, so z = p + b is smaller than p and a multiple of
            # min(ulp(p), grid(b)) below 2^24 of them: exact. Only for an exact product p:
            # a fused multiply-add (GPU kernels, AVX-512 BLAS) rounds x w + b once, at z.
            return 0.0
        return ulp(self.z_pos) / 2


def _column_nonzeros(w: np.ndarray) -> list[np.ndarray]:
    """The row indices of each column's non-zero entries, in one pass over the matrix
    (elementwise ops are wide and sparse: a column at a time would be quadratic)."""
    cols, rows = np.nonzero(w.T)
    return np.split(rows, np.searchsorted(cols, np.arange(1, w.shape[1])))


def _families(w1: np.ndarray, nzs: list[np.ndarray] | None = None) -> list[list[int]]:
    """Neurons grouped by identical weight columns (they share one dot product)."""
    nzs = _column_nonzeros(w1) if nzs is None else nzs
    groups: dict[bytes, list[int]] = {}
    for j, nz in enumerate(nzs):
        groups.setdefault(nz.tobytes() + w1[nz, j].tobytes(), []).append(j)
    return list(groups.values())


def _family_samples(neurons: list[_Neuron], members: list[int]) -> np.ndarray:
    """The family's common input p at the box ends and at every breakpoint inside."""
    first = neurons[members[0]]
    pts = [first.p_lo, first.p_hi] + [-neurons[j].b for j in members
                                       if first.p_lo < -neurons[j].b < first.p_hi]
    return np.unique(np.asarray(pts, dtype=np.float64))


_BOUNDS: dict[bytes, np.ndarray] = {}  # memo of `mlp_error_bound`: unrolled loops repeat it
_BOUNDS_MAX = 1 << 14


def mlp_error_bound(w1: np.ndarray, b1: np.ndarray | None, w2: np.ndarray,
                    b2: np.ndarray | None, lo: np.ndarray, hi: np.ndarray,
                    integer: np.ndarray | None = None,
                    e_in: np.ndarray | None = None) -> np.ndarray:
    """Per output component, a bound on |float32 evaluation - exact evaluation| of
    relu(x @ w1 + b1) @ w2 + b2 for x in the box [lo, hi] (see the module docstring).
    `integer[i]` says input i takes only integer values; `e_in[i]` bounds its incoming error.
    Remembered by its arguments' bytes (a decomposed loop asks the same question often)."""
    key = hashlib.sha1()
    for a in (w1, b1, w2, b2, lo, hi, integer, e_in):
        if a is None:
            key.update(b"-")
        else:
            a = np.asarray(a)
            key.update(f"{a.dtype}{a.shape}".encode())
            key.update(np.ascontiguousarray(a).tobytes())
    digest = key.digest()
    got = _BOUNDS.get(digest)
    if got is None:
        if len(_BOUNDS) >= _BOUNDS_MAX:
            _BOUNDS.clear()
        got = _BOUNDS[digest] = _mlp_error_bound(w1, b1, w2, b2, lo, hi, integer, e_in)
    return got.copy()


def _mlp_error_bound(w1, b1, w2, b2, lo, hi, integer, e_in) -> np.ndarray:
    w1, w2 = np.asarray(w1, np.float64), np.asarray(w2, np.float64)
    n_in, n_hidden = w1.shape
    n_out = w2.shape[1]
    b1 = np.zeros(n_hidden) if b1 is None else np.asarray(b1, np.float64).reshape(-1)
    b2 = np.zeros(n_out) if b2 is None else np.asarray(b2, np.float64).reshape(-1)
    lo, hi = np.asarray(lo, np.float64), np.asarray(hi, np.float64)
    integer = np.zeros(n_in, bool) if integer is None else np.asarray(integer, bool)
    nzs = _column_nonzeros(w1)
    neurons = [_Neuron(w1[:, j], b1[j], lo, hi, integer, nzs[j]) for j in range(n_hidden)]
    families = _families(w1, nzs)
    family_of = np.empty(n_hidden, dtype=np.int64)
    for f, members in enumerate(families):
        family_of[members] = f
    samples = [_family_samples(neurons, m) for m in families]
    readers = _column_nonzeros(w2)  # per output: the hidden units it reads

    err = np.zeros(n_out)
    if e_in is not None:  # incoming errors, through |W1| then |W2|
        err += (np.abs(np.asarray(e_in, np.float64)) @ np.abs(w1)) @ np.abs(w2)
    for members in families:
        err += _bias_rounding(neurons, members, w2)
    for members, ps in zip(families, samples):
        err += _dot_rounding(neurons, members, ps, w2)
    for k in range(n_out):
        err[k] += _sum_rounding(neurons, family_of, samples, w2[:, k], readers[k], b2[k])
    return err


def _bias_rounding(neurons: list[_Neuron], members: list[int], w2: np.ndarray) -> np.ndarray:
    """The bias adds of one family, per output. Two units whose biases differ by an even
    multiple of the ulp at their largest pre-activation (compare's relu(z + 1), relu(z)) round alike while
    both sums stay in one binade, so their difference is off by at most 3/4 ulp (the crossing
    of a power of two), not by the sum of two half ulps."""
    e = np.array([neurons[j].bias_error() for j in members])
    if len(members) == 2 and e.all():
        a, b = (neurons[j] for j in members)
        top = ulp(max(a.z_pos, b.z_pos))
        if math.fmod(a.b - b.b, 2 * top) == 0.0:  # even: ties to even also round alike
            c1, c2 = w2[members[0]], w2[members[1]]
            return np.abs(c1 + c2) * top / 2 + np.minimum(np.abs(c1), np.abs(c2)) * 0.75 * top
    return e @ np.abs(w2[members])


def _dot_rounding(neurons: list[_Neuron], members: list[int], ps: np.ndarray,
                  w2: np.ndarray) -> np.ndarray:
    """max over intervals of p of |slope| * dot rounding there, per output."""
    first = neurons[members[0]]
    if first.dot_exact:
        return np.zeros(w2.shape[1])
    worst = np.zeros(w2.shape[1])
    for a, b in zip(ps[:-1], ps[1:]) if ps.size > 1 else [(ps[0], ps[0])]:
        mid = 0.5 * (a + b)
        active = [j for j in members if mid + neurons[j].b > 0]
        if not active:
            continue
        slope = np.abs(w2[active].sum(axis=0))
        worst = np.maximum(worst, slope * first.dot_error(max(abs(a), abs(b))))
    return worst


def _sum_rounding(neurons: list[_Neuron], family_of: np.ndarray, samples: list[np.ndarray],
                  c: np.ndarray, read: np.ndarray, bias: float) -> float:
    """Rounding of one output's sum over the hidden units it reads (in order), with its bias
    added last (CPU kernels) or starting the accumulator (GPU kernels: C = bias + A B): the
    larger of the two."""
    terms = [j for j in read.tolist() if neurons[j].z_pos > 0]
    if not terms:
        return 0.0
    values = {f: np.zeros(samples[f].size) for f in {int(family_of[j]) for j in terms}}
    peak = dict.fromkeys(values, 0.0)
    grids = []
    err, total, biggest = 0.0, 0.0, 0.0
    products, bias_first = 0.0, 0.0
    for n, j in enumerate(terms):
        f = int(family_of[j])
        cj, nj = float(c[j]), neurons[j]
        product_exact = _odd_part(cj) == 1.0 or (
            nj.grid > 0 and _odd_part(cj) * nj.z_pos / nj.grid < 2.0 ** MANTISSA)
        if not product_exact:
            products += ulp(abs(cj) * nj.z_pos) / 2  # the product W2[j, k] h_j rounds
        grids.append(lowbit(cj) * nj.grid if product_exact else 0.0)
        values[f] += cj * np.maximum(samples[f] + nj.b, 0.0)
        new_peak = float(np.abs(values[f]).max())
        total += new_peak - peak[f]
        peak[f] = new_peak
        biggest = max(biggest, total)
        if n > 0:
            err += ulp(total) / 2
        if bias != 0.0:  # the same partial sum, started from the bias
            with_bias = (float(np.abs(values[f] + bias).max()) if len(values) == 1
                         else total + abs(bias))
            bias_first += ulp(with_bias) / 2
            biggest = max(biggest, with_bias)
    if bias != 0.0:
        grids.append(lowbit(bias))
        err += ulp(total + abs(bias)) / 2
        biggest = max(biggest, total + abs(bias))
    grid = min(grids)
    if grid > 0 and biggest < 2.0 ** MANTISSA * grid:
        return 0.0  # every partial sum is an exact float32 on the common grid
    return products + max(err, bias_first)


def mlp_output_box(w1: np.ndarray, b1: np.ndarray | None, w2: np.ndarray,
                   b2: np.ndarray | None, lo: np.ndarray,
                   hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The exact range of each output of relu(x @ w1 + b1) @ w2 + b2 over the box when the
    output reads one family of units (a one-input piecewise-linear function: its extremes sit
    at the breakpoints or the ends); otherwise the interval bound."""
    w1, w2 = np.asarray(w1, np.float64), np.asarray(w2, np.float64)
    n_hidden, n_out = w2.shape
    b1 = np.zeros(n_hidden) if b1 is None else np.asarray(b1, np.float64).reshape(-1)
    b2 = np.zeros(n_out) if b2 is None else np.asarray(b2, np.float64).reshape(-1)
    lo, hi = np.asarray(lo, np.float64), np.asarray(hi, np.float64)
    integer = np.zeros(lo.size, bool)
    nzs = _column_nonzeros(w1)
    neurons = [_Neuron(w1[:, j], b1[j], lo, hi, integer, nzs[j]) for j in range(n_hidden)]
    h_hi = np.array([n.z_pos for n in neurons])
    h_lo = np.array([max(0.0, n.p_lo + n.b) for n in neurons])
    out_lo = b2 + np.minimum(h_lo[:, None] * w2, h_hi[:, None] * w2).sum(axis=0)
    out_hi = b2 + np.maximum(h_lo[:, None] * w2, h_hi[:, None] * w2).sum(axis=0)
    families = _families(w1, nzs)
    family_of = np.empty(n_hidden, dtype=np.int64)
    for f, members in enumerate(families):
        family_of[members] = f
    readers = _column_nonzeros(w2)
    for k in range(n_out):
        used = np.unique(family_of[readers[k]])
        if used.size == 1:
            members = families[int(used[0])]
            ps = _family_samples(neurons, members)
            vals = b2[k] + sum(w2[j, k] * np.maximum(ps + neurons[j].b, 0.0) for j in members)
            out_lo[k], out_hi[k] = float(np.min(vals)), float(np.max(vals))
    return out_lo, out_hi


def linear_error_bound(w: np.ndarray, b: np.ndarray | None, lo: np.ndarray, hi: np.ndarray,
                       integer: np.ndarray | None = None,
                       e_in: np.ndarray | None = None) -> np.ndarray:
    """Per output, a bound on |float32 - exact| of x @ w + b over the box (products, then the
    sum in order, then the bias; exact where every term sits on a common grid below 2^24)."""
    w = np.asarray(w, np.float64)
    n_in, n_out = w.shape
    b = np.zeros(n_out) if b is None else np.asarray(b, np.float64).reshape(-1)
    lo, hi = np.asarray(lo, np.float64), np.asarray(hi, np.float64)
    integer = np.zeros(n_in, bool) if integer is None else np.asarray(integer, bool)
    err = np.zeros(n_out)
    if e_in is not None:
        err += np.abs(np.asarray(e_in, np.float64)) @ np.abs(w)
    for j in range(n_out):
        n = _Neuron(w[:, j], b[j], lo, hi, integer)
        if n.exact:
            continue
        err[j] += n.dot_error(n.dot_total) + (ulp(n.dot_total + abs(n.b)) / 2 if n.b else 0.0)
    return err


# The largest slope of swish, z * sigmoid(z) (1.0998 at z = 2.3994): a Lipschitz constant.
SWISH_SLOPE = 1.1


def ffn_error_bound(w1: np.ndarray, b1: np.ndarray | None, w2: np.ndarray,
                    b2: np.ndarray | None, lo: np.ndarray, hi: np.ndarray,
                    activation: str = "relu", up: np.ndarray | None = None,
                    ub: np.ndarray | None = None, integer: np.ndarray | None = None,
                    e_in: np.ndarray | None = None) -> np.ndarray:
    """Per output, a conservative bound on |float32 - exact| of a swish or gated `tw.mlp`:
    lanes act(x w1 + b1) * (x up + ub) (up = 1 where not gated), then lanes @ w2 + b2, over
    the box. No hinge analysis (that is `mlp_error_bound`, relu only): each pre-activation
    and up projection by `linear_error_bound`; an activation moves its input error by at most
    its slope (1, or SWISH_SLOPE) and swish adds its own rounding (a few ulp of |z|: torch's
    silu rounds the exponential, the sum and the product); a product adds e_a |u| + |a| e_u +
    e_a e_u and one rounding of its result; |act(z)| <= |z| bounds the lanes' size. The
    output sums follow the dot-product bound (n + 2 roundings of the largest partial sum)."""
    w1, w2 = np.asarray(w1, np.float64), np.asarray(w2, np.float64)
    h = w1.shape[1]
    lo, hi = np.asarray(lo, np.float64), np.asarray(hi, np.float64)
    if activation == "swish" and up is None:
        hinged = swish_hinge_bound(w1, b1, w2, b2, lo, hi, integer, e_in)
        if hinged is not None:
            return hinged
    x_mag = np.maximum(np.abs(lo), np.abs(hi))
    eps = 2.0 ** -MANTISSA
    with np.errstate(over="ignore", invalid="ignore"):
        z_mag = x_mag @ np.abs(w1) + (0.0 if b1 is None else np.abs(np.asarray(b1)).reshape(-1))
        e_z = linear_error_bound(w1, b1, lo, hi, integer, e_in)
        if activation == "swish":
            e_a = SWISH_SLOPE * e_z + 4.0 * eps * z_mag
        else:
            e_a = e_z
        a_mag = z_mag
        if up is not None:
            u_mag = x_mag @ np.abs(up) + (0.0 if ub is None else np.abs(np.asarray(ub)).reshape(-1))
            e_u = linear_error_bound(up, ub, lo, hi, integer, e_in)
            lane = a_mag * u_mag
            e_l = e_a * u_mag + a_mag * e_u + e_a * e_u + eps * lane
        else:
            lane, e_l = a_mag, e_a
        b2_mag = 0.0 if b2 is None else np.abs(np.asarray(b2)).reshape(-1)
        sums = lane @ np.abs(w2) + b2_mag
        err = e_l @ np.abs(w2) + eps * (h + 2) * sums
    return np.nan_to_num(err, nan=np.inf)


# Beyond this |z|, float32's swish is relu's: z / (1 + exp(-z)) divides by exactly 1 (exp(-32)
# is far below half an ulp of 1) and z * exp(z) / (1 + exp(z)) is below 32 e^-32 = 4e-13.
SWISH_HINGE = 32.0


def _nearest_to_zero(n: _Neuron, w: np.ndarray, integer: np.ndarray, e_z: float) -> float:
    """The smallest |z| neuron `n` (weights `w`) reaches over its box, its pre-activation
    moved by up to `e_z`: z = p + b with p on the grid of an exact dot product of integer
    inputs (p a multiple of its weights' greatest common divisor), else over the interval."""
    z_lo, z_hi = n.p_lo + n.b - e_z, n.p_hi + n.b + e_z
    if z_lo > 0.0 or z_hi < 0.0:
        return min(abs(z_lo), abs(z_hi))
    nz = np.nonzero(w)[0]
    if not n.dot_exact or not nz.size or not np.all(integer[nz]):
        return 0.0
    g = _weights_gcd([float(w[i]) for i in nz.tolist()])  # every p is a multiple of g
    k_lo, k_hi = math.ceil(n.p_lo / g), math.floor(n.p_hi / g)
    k = -n.b / g  # z = k g + b is 0 here
    ks = [c for c in (math.floor(k), math.ceil(k), k_lo, k_hi) if k_lo <= c <= k_hi]
    nearest = min((abs(c * g + n.b) for c in ks), default=math.inf)
    return max(nearest - e_z, 0.0)


def _weights_gcd(ws: list[float]) -> float:
    """The largest g with every w / g an integer, for dyadic floats `ws` (all are): each w
    is an odd integer times a power of two, so scaled by the smallest grid they are integers."""
    unit = min(lowbit(w) for w in ws)
    g = 0
    for w in ws:
        g = math.gcd(g, int(abs(w) / unit))
    return g * unit


def swish_hinge_bound(w1, b1, w2, b2, lo, hi, integer=None, e_in=None) -> np.ndarray | None:
    """The float32 error bound of an ungated swish mlp whose every pre-activation stays at
    least SWISH_HINGE from 0 over the box (on its grid: torchwright's thermometers put a gain
    of 1280 on integers, z = 1280 (x + 0.5)): there float32 swish is relu to 4e-13 a lane,
    so `mlp_error_bound`'s hinge and exactness analysis applies, plus that tail. None where
    some pre-activation can come near 0 (the lanes curve: `ffn_error_bound` bounds those)."""
    w1, w2 = np.asarray(w1, np.float64), np.asarray(w2, np.float64)
    n_in, n_hidden = w1.shape
    b1v = np.zeros(n_hidden) if b1 is None else np.asarray(b1, np.float64).reshape(-1)
    lo, hi = np.asarray(lo, np.float64), np.asarray(hi, np.float64)
    if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi))):
        return None
    ints = np.zeros(n_in, bool) if integer is None else np.asarray(integer, bool)
    e_z = np.zeros(n_hidden) if e_in is None else \
        np.abs(np.asarray(e_in, np.float64)) @ np.abs(w1)
    nzs = _column_nonzeros(w1)
    for j in range(n_hidden):
        n = _Neuron(w1[:, j], b1v[j], lo, hi, ints, nzs[j])
        if _nearest_to_zero(n, w1[:, j], ints, float(e_z[j])) < SWISH_HINGE:
            return None
    tail = 2.0 * SWISH_HINGE * math.exp(-SWISH_HINGE) * np.abs(w2).sum(axis=0)
    return mlp_error_bound(w1, b1, w2, b2, lo, hi, integer, e_in) + tail


def mlp_exact(w1, b1, w2, b2, lo, hi, integer) -> bool:
    """Whether relu(x @ w1 + b1) @ w2 + b2 is exact in float32 in ANY summation order over
    the box: every hidden unit exact on its grid (`_Neuron.exact`), and every output's terms
    h_j w2[j, k] exact products on a common grid whose absolute sum, bias included, stays
    below 2^24 of it (a blocked or threaded kernel may add them in any order)."""
    w1, w2 = np.asarray(w1, np.float64), np.asarray(w2, np.float64)
    n_in, n_hidden = w1.shape
    b1 = np.zeros(n_hidden) if b1 is None else np.asarray(b1, np.float64).reshape(-1)
    b2 = np.zeros(w2.shape[1]) if b2 is None else np.asarray(b2, np.float64).reshape(-1)
    lo, hi = np.asarray(lo, np.float64), np.asarray(hi, np.float64)
    ints = np.asarray(integer, bool)
    nzs = _column_nonzeros(w1)
    h_mag, h_grid = np.zeros(n_hidden), np.zeros(n_hidden)
    for j in range(n_hidden):
        n = _Neuron(w1[:, j], b1[j], lo, hi, ints, nzs[j])
        if not n.exact:
            return False
        h_mag[j], h_grid[j] = n.z_pos, n.grid if n.grid > 0 else math.inf
    for k in range(w2.shape[1]):
        rows = np.nonzero(w2[:, k])[0]
        grid, total = lowbit(float(b2[k])), abs(float(b2[k]))
        for j in rows.tolist():
            if h_mag[j] == 0.0:
                continue  # a unit that never fires adds nothing
            w = float(w2[j, k])
            if _odd_part(w) * h_mag[j] / h_grid[j] >= 2.0 ** MANTISSA:
                return False  # the product itself rounds
            grid = min(grid, h_grid[j] * lowbit(w))
            total += h_mag[j] * abs(w)
        if total > 0.0 and not total < 2.0 ** MANTISSA * grid:
            return False
    return True
