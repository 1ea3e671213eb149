"""The float32 error bound of an mlp (twdialect/f32_error.py) and decompose's check with it:
a library op whose decomposition float32 cannot keep within 1e-4 * max(1, |output|) over the
declared ranges is reoriented (hinges cancelling on the narrower side) or refused by name."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tw_passes import run_pipeline
from tw_passes.decompose import DecomposeError
from twdialect import evaluate
from twdialect import ops as tw
from twdialect.dense import to_numpy
from twdialect.dialect import MlpOp, TwVerifyException
from twdialect.f32_error import lowbit, mlp_error_bound, ulp


def _mlp(module) -> MlpOp:
    (op,) = [o for o in module.walk() if isinstance(o, MlpOp)]
    return op


def _arrays(op: MlpOp):
    get = (lambda a: None if a is None else to_numpy(a))
    return to_numpy(op.w1), get(op.b1), to_numpy(op.w2), get(op.b2)


def _float32(op: MlpOp, x: np.ndarray) -> np.ndarray:
    """What an nn.Linear pair computes in float32 (addmm: the product, then the bias)."""
    w1, b1, w2, b2 = (torch.tensor(a if a is not None else np.zeros(1), dtype=torch.float32)
                      for a in _arrays(op))
    h = torch.relu(torch.addmm(b1, torch.tensor(x, dtype=torch.float32), w1))
    return torch.addmm(b2, h, w2).double().numpy()


def _fused(op: MlpOp, x: np.ndarray) -> np.ndarray:
    """The same as a GPU kernel does it: the bias starts the accumulator and every x w + acc
    step is a fused multiply-add, rounded once at its sum (emulated in float64, exact for
    these few-term products)."""
    w1, b1, w2, b2 = _arrays(op)
    b1 = np.zeros(w1.shape[1]) if b1 is None else b1
    b2 = np.zeros(w2.shape[1]) if b2 is None else b2
    f32 = (lambda a: np.asarray(a, np.float32).astype(np.float64))
    x = f32(x)
    h = np.tile(b1, (x.shape[0], 1))  # the bias is the accumulator's start (C = bias + A B)
    for i in range(w1.shape[0]):
        h = f32(x[:, i:i + 1] * w1[i] + h)
    h = np.maximum(h, 0.0)
    y = np.tile(b2, (x.shape[0], 1))
    for j in range(w2.shape[0]):
        y = f32(h[:, j:j + 1] * w2[j] + y)
    return y


def _exact(op: MlpOp, x: np.ndarray) -> np.ndarray:
    w1, b1, w2, b2 = _arrays(op)
    b1 = np.zeros(w1.shape[1]) if b1 is None else b1
    b2 = np.zeros(w2.shape[1]) if b2 is None else b2
    f32 = (lambda a: a.astype(np.float32).astype(np.float64))
    return np.maximum(f32(x) @ w1 + b1, 0.0) @ w2 + b2


def _adversarial(op: MlpOp, lo: float, hi: float, rng) -> np.ndarray:
    """Uniform points plus points whose hinges sit just below and above powers of two (where
    float32 sums change binade: the worst rounding)."""
    w1, b1, _, _ = _arrays(op)
    b1 = np.zeros(w1.shape[1]) if b1 is None else b1
    pts = [rng.uniform(lo, hi, 4000), [lo, hi]]
    for w, b in zip(w1[0], b1):
        if w != 0:
            k = np.arange(-4, 31)
            for d in (-1.5, -1.0, -0.5, -0.25, 0.0, 0.25, 0.5):
                for s in (1.0, -1.0):
                    pts.append((s * 2.0 ** k + d - b) / w)
    x = np.concatenate(pts)
    return x[(x >= lo) & (x <= hi)][:, None]


BUILDERS = {
    "compare": lambda x: tw.compare(x, 0.37, 1.0),
    "compare_fine": lambda x: tw.compare(x, 2.5, 0.01),
    "clamp": lambda x: tw.clamp(x, -0.98, 0.73),
    "pwl": lambda x: tw.piecewise_linear(x, [-1.0, 0.0, 1.0], [0.3, 1.7, -0.2]),
}


@pytest.mark.parametrize("name", sorted(BUILDERS))
@pytest.mark.parametrize("r", [10.0, 1e3, 1e4])
def test_bound_holds_against_float32_evaluation(name, r):
    """Measured |float32 - exact| (torch here, and a fused multiply-add evaluation as GPUs do)
    never exceeds the bound, and the bound is not loose by more than a small factor where the
    error is visible at all."""
    with tw.Graph() as g:
        tw.output("y", BUILDERS[name](tw.input("x", 1, (-r, r))))
    run_pipeline(g.module, "decompose{tolerance=1.0e30}")
    op = _mlp(g.module)
    x = _adversarial(op, -r, r, np.random.default_rng(0))
    exact = _exact(op, x)
    measured = max(np.abs(_float32(op, x) - exact).max(), np.abs(_fused(op, x) - exact).max())
    bound = mlp_error_bound(*_arrays(op), np.array([-r]), np.array([r]))[0]
    assert measured <= bound
    if measured > 1e-6:
        assert bound <= 16 * measured


def test_integer_operands_are_exact():
    with tw.Graph() as g:
        x = tw.input("x", 1, (-1e6, 1e6), integer=True)
        tw.output("y", tw.compare(x, 0.5, 1.0))
    run_pipeline(g.module, "decompose")  # accepted: integer hinges add exactly
    op = _mlp(g.module)
    bound = mlp_error_bound(*_arrays(op), np.array([-1e6]), np.array([1e6]), np.array([True]))
    assert bound[0] == 0.0
    x = np.arange(-1000.0, 1000.0)[:, None] * 997.0
    np.testing.assert_array_equal(_float32(op, x), _exact(op, x))


@pytest.mark.parametrize("build, r, what", [
    (lambda x: tw.compare(x, 0.0, 1e-4), 1e4, "'tw.compare'"),
    (lambda x: tw.compare(x, 0.0, 1e-3), 1e5, "'tw.compare'"),
    (lambda x: tw.clamp(x, -0.98, 0.73), 1e4, "'tw.clamp'"),
    (lambda x: tw.clamp(x, -0.98, 0.73), 1e8, "'tw.clamp'"),
    (lambda x: tw.piecewise_linear(x, [-1.0, 0.0, 1.0], [0.3, 1.7, -0.2]), 1e4,
     "'tw.piecewise_linear'"),
    (lambda x: tw.piecewise_linear_2d(x, x, [0.0, 1.0, 2.0], [0.0, 1.0],
                                      np.arange(6.0).reshape(3, 2, 1)), 1e8,
     "'tw.piecewise_linear_2d'"),
])
def test_wide_ranges_are_refused_with_what_would_fit(build, r, what):
    """The issue's cases: each was a silent wrong answer (up to 15 off) before."""
    with tw.Graph() as g:
        tw.output("y", build(tw.input("x", 1, (-r, r))))
    with pytest.raises(DecomposeError) as info:
        run_pipeline(g.module, "decompose")
    msg = str(info.value)
    assert msg.startswith(what) and f"{-r:g}" in msg and "allowed 0.0001" in msg
    assert "decompose{tolerance=" in msg and info.value.op is not None
    if "fits with" in msg:  # the range it names does fit
        lo, hi = (float(v) for v in msg.split("fits with x in [")[1].split("]")[0].split(","))
        with tw.Graph() as h:
            tw.output("y", build(tw.input("x", 1, (lo, hi))))
        run_pipeline(h.module, "decompose")
    tolerance = msg.split("decompose{tolerance=")[1].split("}")[0]
    run_pipeline(g.module, f"decompose{{tolerance={tolerance}}}")  # the advice works


def test_one_sided_range_reorients_the_hinges():
    """x reaches far above a compare's threshold (-2.75) but not below: the usual
    relu(z + 1) - relu(z) would cancel rounded sums up to 2e4 up there; relu(-z) - relu(-z - 1)
    cancels on the narrow side instead, where its sums are exact."""
    with tw.Graph() as g:
        x = tw.input("x", 1, (-3.0, 5000.0))
        tw.output("y", tw.compare(x, -2.75, 0.25))
    xs = np.concatenate([[-3.0], np.linspace(-2.75, 5000, 20011)])[:, None]
    ideal = evaluate(g.module, {"x": xs})["y"]
    run_pipeline(g.module, "decompose")
    op = _mlp(g.module)
    assert np.all(to_numpy(op.w1) < 0)  # the reoriented form
    np.testing.assert_array_equal(_float32(op, xs), ideal)


def test_accept_error_widens_one_ops_contract():
    with tw.Graph() as g:
        x = tw.input("x", 1, (-1e4, 1e4))
        y = tw.accept_error(tw.clamp(x, -0.98, 0.73), 2e-3)
        tw.output("y", y)
    run_pipeline(g.module, "decompose")  # 9.8e-4 of rounding, accepted for this op
    with tw.Graph() as h:
        x = tw.input("x", 1, (-1e4, 1e4))
        tw.output("y", tw.accept_error(tw.clamp(x, -0.98, 0.73), 5e-4))
    with pytest.raises(DecomposeError, match="'tw.clamp'"):
        run_pipeline(h.module, "decompose")
    with tw.Graph():
        with pytest.raises(Exception, match="accept_error: x must be made by a library op"):
            tw.accept_error(tw.input("x", 1, (0.0, 1.0)), 1.0)


def test_tolerance_attribute_is_verified():
    with tw.Graph() as g:
        y = tw.clamp(tw.input("x", 1, (0.0, 1.0)), 0.0, 1.0)
        tw.output("y", y)
    y.owner.attributes["tw.tolerance"] = tw.StringAttr("big") if hasattr(tw, "StringAttr") \
        else __import__("xdsl.dialects.builtin", fromlist=["StringAttr"]).StringAttr("big")
    with pytest.raises(TwVerifyException, match="tw.tolerance must be a positive finite float"):
        g.module.verify()


def test_decompose_rejects_a_bad_tolerance_option():
    with tw.Graph() as g:
        tw.output("y", tw.clamp(tw.input("x", 1, (0.0, 1.0)), 0.0, 1.0))
    with pytest.raises(DecomposeError, match="tolerance must be > 0"):
        run_pipeline(g.module, "decompose{tolerance=-1.0}")


def test_ulp_and_grid_helpers():
    assert ulp(1.0) == 2.0 ** -23 and ulp(1.5) == 2.0 ** -23 and ulp(2.0 ** 24) == 2.0
    assert ulp(0.0) == 0.0 and ulp(1e-45) == 2.0 ** -149
    assert lowbit(0.75) == 0.25 and lowbit(12.0) == 4.0 and lowbit(0.0) == float("inf")


def test_dynamic_extract_refuses_an_index_declared_far_outside_its_table():
    """An index declared in +-1e4 read 7.8e-3 instead of 0 outside the table before."""
    for r, fits in ((4.0, True), (1e4, False), (100.0, False)):
        def build():
            with tw.Graph():
                t = tw.input("t", 10, (-3.0, 3.0))
                i = tw.input("i", 1, (-r, r) if r > 4 else (0.0, r), integer=True)
                tw.dynamic_extract(t, i, 5)
        if fits:
            build()
        else:
            with pytest.raises(Exception, match="dynamic_extract: float32 rounding can reach"):
                build()


def test_a_decomposition_too_large_to_hold_is_refused_before_it_is_built():
    with tw.Graph() as g:
        c = tw.input("c", 1, (-1.0, 1.0))
        a, b = tw.input("a", 4096, (-1.0, 1.0)), tw.input("b", 4096, (-1.0, 1.0))
        tw.output("y", tw.select(c, a, b))
    with pytest.raises(DecomposeError, match="'tw.select'.* needs a weight of 100675584 entries"):
        run_pipeline(g.module, "decompose")
