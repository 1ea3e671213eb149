"""fuse-select-trees: oracle-preserving on random select trees (integer and real leaves),
compiled models exact, one MLP chain instead of one per level, and its refusals."""

from __future__ import annotations

import random

import numpy as np
import pytest

import tw_lowering
from tw_passes import PassOptionError, run_pipeline
from tw_passes.fuse_select_trees import FuseSelectTrees
from twdialect import evaluate
from twdialect import ops as tw
from twdialect.dialect import MlpOp, SelectOp


def _tree(rng: random.Random, integer: bool):
    """A random tree of selects over compares of an integer input z (thresholds off the
    integers, so conditions are exactly +/-1), leaves affine in x (integer or real) or
    literals."""
    with tw.Graph() as g:
        x = tw.input("x", 3, (-8.0, 8.0), integer=integer)
        z = tw.input("z", 3, (-8.0, 8.0), integer=True)
        conds = [tw.compare(tw.linear(z, np.array([[rng.choice([-1.0, 1.0, 0.0])]
                                                    for _ in range(3)])),
                            rng.randint(-3, 3) + 0.5) for _ in range(4)]
        scale = 1.0 if integer else 0.37

        def leaf():
            if rng.random() < 0.2:
                return tw.literal([rng.randint(-4, 4), 7.0])
            w = np.array([[rng.randint(-3, 3), rng.randint(-2, 2)] for _ in range(3)]) * scale
            return tw.linear(x, w, [rng.randint(-5, 5), rng.randint(-5, 5)])

        cur = leaf()
        for _ in range(rng.randint(2, 7)):
            other = leaf() if rng.random() < 0.7 else tw.select(rng.choice(conds), leaf(), leaf())
            c = rng.choice(conds)
            cur = tw.select(c, other, cur) if rng.random() < 0.5 else tw.select(c, cur, other)
        tw.output("y", cur)
    return g.module


def _feeds(rng: random.Random, integer: bool, n: int = 60):
    xs = [[rng.randint(-8, 8) if integer else rng.uniform(-8, 8) for _ in range(3)]
          for _ in range(n)]
    zs = [[rng.randint(-8, 8) for _ in range(3)] for _ in range(n)]
    return {"x": np.array(xs, dtype=float), "z": np.array(zs, dtype=float)}


@pytest.mark.parametrize("integer", [True, False])
def test_random_trees_keep_the_oracle_and_compile_exactly(integer):
    rng = random.Random(f"fuse-select-trees-{integer}")
    fused_any = 0
    for _ in range(25):
        module = _tree(rng, integer)
        feeds = _feeds(rng, integer)
        want = evaluate(module, feeds)["y"]
        rewritten = module.clone()
        run_pipeline(rewritten, (FuseSelectTrees(),))
        fused_any += sum(isinstance(o, MlpOp) for o in rewritten.walk())
        assert np.allclose(evaluate(rewritten, feeds)["y"], want, atol=1e-9)
        ct = tw_lowering.compile(module, d=64, d_head=8)
        assert np.allclose(ct.run(feeds)["y"], want, atol=1e-4)
    assert fused_any >= 20


def test_a_chain_is_one_mlp_chain():
    """k selects in a chain: k MLP chains on the critical path without the pass, 1 with it."""
    k = 8
    with tw.Graph() as g:
        x = tw.input("x", 1, (0.0, 15.0), integer=True)
        cur = tw.literal([0.0])
        for i in range(k):
            cur = tw.select(tw.compare(x, i + 0.5), tw.literal([float(i + 1)]), cur)
        tw.output("y", cur)
    plain = tw_lowering.compile(g.module, d=64, d_head=8,
                                pipeline="decompose{select-trees=false}")
    fused = tw_lowering.compile(g.module, d=64, d_head=8)
    assert plain.stats.n_layers == k + 1 and fused.stats.n_layers == 2  # compares, then one
    xs = {"x": np.arange(16.0)[:, None]}
    assert np.array_equal(fused.run(xs)["y"][:, 0], np.minimum(np.arange(16), k))
    module = g.module.clone()
    run_pipeline(module, (FuseSelectTrees(),))
    assert not any(isinstance(o, SelectOp) for o in module.walk())


def test_leaf_limit_splits_a_long_chain():
    with tw.Graph() as g:
        x = tw.input("x", 1, (0.0, 40.0), integer=True)
        cur = tw.literal([0.0])
        for i in range(30):
            cur = tw.select(tw.compare(x, i + 0.5), x, cur)
        tw.output("y", cur)
    module = g.module.clone()
    run_pipeline(module, (FuseSelectTrees(max_leaves=8),))
    mlps = [o for o in module.walk() if isinstance(o, MlpOp)]
    assert len(mlps) >= 4 and all(o.w1.type.get_shape()[1] <= 2 * 8 for o in mlps)
    feeds = {"x": np.arange(41.0)[:, None]}
    assert np.array_equal(evaluate(module, feeds)["y"], evaluate(g.module, feeds)["y"])


@pytest.mark.parametrize("option,value,says", [
    ("max_leaves", 1, "max-leaves must be at least 2"),
    ("tolerance", 0.0, "tolerance must be > 0"),
    ("dtype", "float16", "dtype must be one of float32, float64"),
])
def test_bad_options(option, value, says):
    with pytest.raises(PassOptionError, match=says):
        FuseSelectTrees(**{option: value}).check_options()


def test_decompose_keeps_the_trees_hull_downstream():
    """decompose fuses with the ranges of the graph as written: a clamp after a 12-leaf
    tree of values in [-1e5, 1e5] still sees that range (the fused chain's own interval box
    is about 12 times wider, and float32's check of the clamp would refuse it)."""
    from tw_passes.decompose import DecomposeError, DecomposePass

    with tw.Graph() as g:
        x = tw.input("x", 1, (-1.0e5, 1.0e5))
        n = tw.input("n", 1, (0.0, 15.0), integer=True)
        cur = x
        for i in range(11):
            cur = tw.select(tw.compare(n, i + 0.5), tw.linear(x, [[1.0]], [float(i % 3)]), cur)
        tw.output("y", tw.clamp(cur, -1200.0, 1200.0))
    fused = g.module.clone()
    run_pipeline(fused, (DecomposePass(),))
    assert not any(isinstance(o, SelectOp) for o in fused.walk())
    alone = g.module.clone()
    run_pipeline(alone, (FuseSelectTrees(),))
    with pytest.raises(DecomposeError, match="'tw.clamp'"):
        run_pipeline(alone, (DecomposePass(),))
