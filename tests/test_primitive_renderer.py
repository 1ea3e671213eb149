"""examples/primitive/renderer.py: the DOOM-style renderer in primitives. The oracle equals
the plain-Python reference (consistent scenes and arbitrary in-range inputs), the graph is made
of primitive ops only, the sizes are what the docstring says, and the small variant compiles
and matches the oracle exactly after rounding."""

from __future__ import annotations

import numpy as np
import pytest

import tw_lowering as lowering
from tw_examples.primitive import renderer as R
from twdialect import evaluate

PRIMITIVE = {"builtin.module", "tw.graph", "tw.input", "tw.pos_encoding", "tw.linear",
             "tw.relu", "tw.add", "tw.concat", "tw.slice", "tw.literal", "tw.attn",
             "tw.output"}


@pytest.fixture(scope="module")
def small():
    return R.build(small=True)


@pytest.fixture(scope="module")
def default():
    return R.build()


def assert_matches(got, want, atol=1e-6):
    assert set(got) == set(want) == set(R.OUTPUTS)
    for name in want:
        g = np.asarray(got[name], dtype=np.float64)
        assert g.shape == want[name].shape, name
        assert np.abs(g - want[name]).max() <= atol, name
        np.testing.assert_array_equal(np.round(g), want[name], err_msg=name)


def test_oracle_equals_reference_small(small):
    rng = np.random.default_rng(0)
    seen_hit = seen_miss = False
    for _ in range(20):
        xs = small.sample(rng)
        n = xs["scene"].shape[0]
        assert small.layout.first_column < n <= small.layout.max_len
        want = small.reference(xs)
        assert_matches(evaluate(small.module, xs), want)
        cols = want["wall"][small.layout.first_column:]
        seen_hit |= bool((cols >= 0).any())
        seen_miss |= bool((cols < 0).any())
        assert not any(want[k][:small.layout.first_column].any() for k in want)
    assert seen_hit and seen_miss


def test_oracle_equals_reference_on_arbitrary_inputs(small):
    """Any in-range scene (inconsistent BSPs, garbage at node / camera / column rows, short
    sequences that stop inside the scene): the ranges hold at every position."""
    rng = np.random.default_rng(1)
    for _ in range(10):
        n = int(rng.integers(1, small.layout.max_len + 1))
        xs = {"scene": rng.integers(0, R.GRID + 1, size=(n, R.FIELDS)).astype(np.float64)}
        assert_matches(evaluate(small.module, xs), small.reference(xs))


def test_oracle_equals_reference_default(default):
    rng = np.random.default_rng(2)
    lay = default.layout
    textures, heights = set(), []
    for _ in range(3):
        xs = R.sample_scene(lay, rng, lay.col_tokens)
        want = default.reference(xs)
        assert_matches(evaluate(default.module, xs), want)
        textures |= set(want["texture"][lay.first_column:].ravel().tolist())
        heights.extend(want["height"][lay.first_column:].ravel().tolist())
    assert len(textures - {-1}) >= 2 and len(set(heights) - {0}) >= 2


def test_only_primitive_ops(small, default):
    for syn in (small, default):
        ops = list(syn.module.walk())
        assert {op.name for op in ops} <= PRIMITIVE, {op.name for op in ops} - PRIMITIVE
        for op in ops:
            if op.name == "tw.relu":  # every relu is a sandwich: linear -> relu -> linear
                assert op.operands[0].owner.name == "tw.linear"
                assert all(u.operation.name == "tw.linear" for u in op.results[0].uses)


def test_sizes(small, default):
    big, little = R.op_counts(default.module), R.op_counts(small.module)
    assert 3000 <= big["ops"] <= 5000 and big["relu"] >= 400 and 20 <= big["attn"] <= 40
    assert 300 <= little["ops"] <= 600 and little["attn"] >= 5
    assert big["ops"] == len(list(default.module.walk()))


def test_small_compiles_and_matches(small):
    ct = lowering.compile(small.module, d=small.d, d_head=small.d_head,
                          d_hidden=small.d_hidden, pipeline="default")
    rng = np.random.default_rng(3)
    for _ in range(3):
        xs = small.sample(rng)
        want = evaluate(small.module, xs)
        got = ct.run(xs)
        for name in want:
            g = np.asarray(got[name], dtype=np.float64)
            assert np.abs(g - want[name]).max() < 1e-3, name
            np.testing.assert_array_equal(np.round(g), np.round(want[name]), err_msg=name)
