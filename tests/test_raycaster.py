"""examples/raycaster.py: the oracle equals the plain-Python reference, the compiled model
equals the oracle (exactly after rounding: every output is an integer), and the default size
is a 10^4-op graph."""

from __future__ import annotations

import numpy as np
import pytest

from tw_examples import raycaster as R
from tw_lowering import compile
from tw_lowering.sweep import width_sweep
from twdialect import evaluate

SMALL = {"n_columns": 4, "map": R.SMALL_MAP, "steps": 8}


@pytest.fixture(scope="module")
def small():
    return R.build(**SMALL)


def _states(seed, n=20, grid=R.SMALL_MAP):
    return R.sample(np.random.default_rng(seed), grid, n)


def test_oracle_equals_reference(small):
    module, reference = small
    for seed in range(3):
        xs = _states(seed)
        want, got = reference(xs), evaluate(module, xs)
        for name in ("step", "wall", "height"):
            np.testing.assert_array_equal(np.asarray(got[name]), want[name], err_msg=name)
    # the states are not degenerate: some rays hit a wall within the march, some do not
    steps = reference(_states(0, 60))["step"]
    assert (steps <= SMALL["steps"]).any() and (steps > SMALL["steps"]).any()


def test_reference_edge_states(small):
    """Any integer camera in the declared range (walls, negative positions, odd vectors)."""
    module, reference = small
    rng = np.random.default_rng(7)
    cam = rng.integers(-8, 41, size=(20, 4)).astype(np.float64)
    cam[:, 2:] = rng.integers(-8, 9, size=(20, 2))
    xs = {"cam": cam}
    want, got = reference(xs), evaluate(module, xs)
    for name in want:
        np.testing.assert_array_equal(np.asarray(got[name]), want[name], err_msg=name)


def test_compiled_equals_oracle(small):
    module, _ = small
    d = width_sweep(module, 16, pipeline="default")[0].d
    ct = compile(module, d=d, d_head=16, pipeline="default")
    for seed in range(2):
        xs = _states(10 + seed)
        want, got = evaluate(module, xs), ct.run(xs)
        for name in ("step", "wall", "height"):
            g, w = np.asarray(got[name], dtype=np.float64), np.asarray(want[name])
            assert np.abs(g - w).max() < 1e-3, name
            np.testing.assert_array_equal(np.round(g), w, err_msg=name)


def test_default_size_builds_large():
    module, reference = R.build()
    assert R.n_ops(module) >= 10_000
    xs = R.sample(np.random.default_rng(0), R.DEFAULT_MAP, 2)
    out = reference(xs)
    assert out["step"].shape == (2, 64)
