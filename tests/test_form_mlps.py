"""form-mlps: targeted rewrites, the cases it must leave alone, differential tests (oracle
before == oracle after on relu-heavy random graphs, compiled == oracle through the default
pipeline), and the depth it reaches on torchwright-style sandwich chains."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pass_checks  # noqa: E402
from tw_lowering import GeometryError, compile
from tw_passes import run_pipeline
from tw_passes.form_mlps import FormMlps
from tw_passes.optimize import DEFAULT_PIPELINE
from twdialect import evaluate, make_context
from twdialect import ops as tw
from twdialect.analysis import critical_path
from twdialect.dialect import ITERATION, SCOPE, SCOPE_TERMINAL, ReluOp
from twdialect.interp import find_graph
from twdialect.random_graphs import random_graph, sample_inputs
from xdsl.dialects.builtin import IntegerAttr, StringAttr, UnitAttr, i64

N_POS = 5
RELU_HEAVY = ("linear", "relu", "relu", "relu", "add", "concat", "attn", "mlp", "slice",
              "literal")
# The previous default: DEFAULT_PIPELINE without its first fuse-linears and form-mlps.
WITHOUT = "decompose,canonicalize,fuse-linears,balance-sums,canonicalize,cse,dce"


def run_and_compare(module, spec: str = "form-mlps", seed: int = 0):
    return pass_checks.run_and_compare(module, spec, N_POS, seed)


def kinds(module) -> list[str]:
    return [op.name for op in find_graph(module).block.ops]


def floor(module) -> int:
    return critical_path(find_graph(module)).floor


def assert_matches(ct, module, feeds, atol=1e-4):
    got, want = ct.run(feeds), evaluate(module, feeds)
    assert got.keys() == want.keys()
    for k in want:
        scale = max(1.0, float(np.abs(want[k]).max()))
        np.testing.assert_allclose(got[k], want[k], atol=atol * scale, rtol=0, err_msg=k)


# --------------------------------------------------------------------------------------
# Targeted rewrites
# --------------------------------------------------------------------------------------


def test_sandwich_becomes_one_mlp_and_saves_a_layer():
    rng = np.random.default_rng(0)
    with tw.Graph() as g:
        x = tw.input("x", 3, (-1.0, 1.0))
        h = tw.relu(tw.linear(x, rng.normal(size=(3, 5)), rng.normal(size=5)))
        tw.output("y", tw.linear(h, rng.normal(size=(5, 2)), rng.normal(size=2)))
    assert floor(g.module) == 2  # linear (head), relu (MLP), linear (next layer's head)
    run_and_compare(g.module)
    assert kinds(g.module) == ["tw.input", "tw.mlp", "tw.output"]
    assert floor(g.module) == 1


def test_relu_without_linear_neighbours_is_left_alone():
    with tw.Graph() as g:
        x = tw.input("x", 2, (-1.0, 1.0))
        tw.output("s", tw.add(tw.relu(x), x))
    stats = FormMlps().run_on_graph(make_context(), find_graph(g.module))
    assert stats.formed == 0 and "tw.relu" in kinds(g.module)


def test_fanout_shares_the_hidden_layer_and_readers_become_slices():
    rng = np.random.default_rng(1)
    with tw.Graph() as g:
        x = tw.input("x", 2, (-1.0, 1.0))
        r = tw.relu(tw.linear(x, rng.normal(size=(2, 4))))
        for i in range(3):
            tw.output(f"y{i}", tw.linear(r, rng.normal(size=(4, 2)), rng.normal(size=2)))
        tw.output("r", r)  # read directly too: an identity block
    run_and_compare(g.module)
    ops = kinds(g.module)
    assert ops.count("tw.mlp") == 1 and ops.count("tw.slice") == 4
    assert "tw.linear" not in ops and "tw.relu" not in ops
    mlp = next(op for op in find_graph(g.module).block.ops if op.name == "tw.mlp")
    assert mlp.hidden == 4
    w2 = tw.weights(mlp.out, "w2")
    np.testing.assert_array_equal(w2[:, :4], np.eye(4))


def test_fanout_off_only_absorbs_single_use_values():
    rng = np.random.default_rng(1)
    with tw.Graph() as g:
        x = tw.input("x", 2, (-1.0, 1.0))
        r = tw.relu(x)
        tw.output("a", tw.linear(r, rng.normal(size=(2, 1))))
        tw.output("b", tw.linear(r, rng.normal(size=(2, 1))))
    run_and_compare(g.module, "form-mlps{fanout=false}")
    assert kinds(g.module).count("tw.linear") == 2


def _addend_readers(hidden_in: int):
    """A relu read by two linears, each the addend of an add (accumulating when a writer)."""
    rng = np.random.default_rng(2)
    with tw.Graph() as g:
        x = tw.input("x", hidden_in, (-1.0, 1.0))
        r = tw.relu(tw.linear(x, rng.normal(size=(hidden_in, 4))))
        for i in range(2):
            other = tw.linear(x, rng.normal(size=(hidden_in, 1)))
            tw.output(f"s{i}", tw.add(tw.linear(r, rng.normal(size=(4, 1))), other))
    return g.module


def test_addend_readers_get_their_own_copy_within_the_bound():
    module = _addend_readers(2)  # w1 + b1 = 8 parameters: copied
    before = floor(module)
    run_and_compare(module)
    assert kinds(module).count("tw.mlp") == 2 and "tw.slice" not in kinds(module)
    assert floor(module) < before


@pytest.mark.parametrize("spec", ["form-mlps{max-duplicate-params=7}",
                                  "form-mlps{max-duplicate-params=0}"])
def test_copies_beyond_the_bound_share_one_wide_mlp(spec):
    module = _addend_readers(2)
    before = floor(module)
    run_and_compare(module, spec)
    assert kinds(module).count("tw.mlp") == 1 and kinds(module).count("tw.slice") == 2
    assert floor(module) <= before


def test_small_shared_linear_is_copied_into_w1_when_the_relu_gets_earlier():
    rng = np.random.default_rng(6)
    with tw.Graph() as g:
        pos = tw.pos_encoding(2, max_len=16)
        x = tw.input("x", 2, (-1.0, 1.0))
        a = tw.attn(pos, pos, x, rng.normal(size=(2, 2)), rng.normal(size=(2, 2)), np.eye(2),
                    np.eye(2))
        lin = tw.linear(a, rng.normal(size=(2, 3)))
        tw.output("l", lin)
        tw.output("r", tw.relu(lin))
    module = g.module.clone()
    assert floor(g.module) == 2
    run_and_compare(g.module)
    assert kinds(g.module).count("tw.linear") == 1 and "tw.relu" not in kinds(g.module)
    assert floor(g.module) == 1
    run_and_compare(module, "form-mlps{max-duplicate-params=5}")  # 6 parameters: no copy
    assert "tw.relu" in kinds(module) and floor(module) == 2


def test_linear_over_concat_splits_into_an_mlp_block_and_a_free_add():
    rng = np.random.default_rng(3)
    with tw.Graph() as g:
        pos = tw.pos_encoding(2, max_len=16)
        x = tw.input("x", 2, (-1.0, 1.0))
        a = tw.linear(tw.relu(tw.linear(x, rng.normal(size=(2, 3)))), rng.normal(size=(3, 2)))
        b = tw.linear(tw.relu(tw.linear(x, rng.normal(size=(2, 3)))), rng.normal(size=(3, 2)))
        j = tw.linear(tw.concat(a, b, x), rng.normal(size=(6, 2)), rng.normal(size=2))
        k = tw.concat(pos, j)
        tw.output("o", tw.attn(k, k, j, rng.normal(size=(4, 2)), rng.normal(size=(4, 2)),
                               np.eye(2), np.eye(2)))
    assert floor(g.module) == 3
    run_and_compare(g.module)
    ops = kinds(g.module)
    assert ops.count("tw.mlp") == 2 and ops.count("tw.add") == 2 and "tw.relu" not in ops
    # The attention reads a sum of two mlps and a linear of x: all written in layer 0.
    assert floor(g.module) == 2


def test_concat_operand_linear_folds_into_w1():
    with tw.Graph() as g:
        a = tw.input("a", 2, (-1.0, 1.0))
        b = tw.input("b", 1, (-1.0, 1.0))
        r = tw.relu(tw.concat(tw.linear(a, [[1.0], [2.0]], [1.0]), b))
        tw.output("r", r)
    run_and_compare(g.module)
    assert kinds(g.module) == ["tw.input", "tw.input", "tw.concat", "tw.mlp", "tw.output"]


def test_a_linear_feeding_the_next_relu_goes_to_its_w1():
    rng = np.random.default_rng(4)
    with tw.Graph() as g:
        x = tw.input("x", 2, (-1.0, 1.0))
        m = tw.mlp(x, rng.normal(size=(2, 3)), None, rng.normal(size=(3, 2)))
        h = tw.relu(tw.linear(m, rng.normal(size=(2, 4))))  # widening: the relu's w1
        tw.output("y", tw.linear(h, rng.normal(size=(4, 1))))
    run_and_compare(g.module)
    ops = list(find_graph(g.module).block.ops)
    assert [op.name for op in ops] == ["tw.input", "tw.mlp", "tw.mlp", "tw.output"]
    assert ops[2].hidden == 4 and ops[1].out.type.width.data == 2


def test_existing_mlp_blocks_that_inflate_are_refused():
    with tw.Graph() as g:
        x = tw.input("x", 2, (-1.0, 1.0))
        m = tw.mlp(x, np.ones((2, 4)), None, np.ones((4, 1)))
        tw.output("y", tw.linear(m, [[1.0, 2.0, 3.0, 4.0]]))
        tw.output("z", tw.linear(m, [[1.0, 1.0, 1.0, 1.0]]))
    module = g.module.clone()
    stats = FormMlps().run_on_graph(make_context(), find_graph(g.module))
    assert stats.refused_inflate == 2 and kinds(g.module).count("tw.linear") == 2
    run_and_compare(module, "form-mlps{allow-inflate=true}")
    assert "tw.linear" not in kinds(module)


def _tag(value, **attrs):
    for k, v in attrs.items():
        value.owner.attributes[k] = v


def test_scope_tags_and_terminals_block_absorption():
    def build(relu_iter: int, terminal: bool):
        with tw.Graph() as g:
            x = tw.input("x", 1, (-1.0, 1.0))
            a = tw.linear(x, [[2.0]])
            r = tw.relu(a)
            y = tw.linear(r, [[3.0]])
            tw.output("y", y)
        loop = StringAttr("loop")
        _tag(a, **{SCOPE: loop, ITERATION: IntegerAttr(0, i64)})
        _tag(r, **{SCOPE: loop, ITERATION: IntegerAttr(relu_iter, i64)})
        if terminal:
            r.owner.attributes[SCOPE_TERMINAL] = UnitAttr()
        _tag(y, **{SCOPE: loop, ITERATION: IntegerAttr(0, i64)})
        return g.module

    module = build(1, False)
    run_and_compare(module)
    assert kinds(module).count("tw.linear") == 2 and "tw.relu" in kinds(module)
    module = build(0, True)  # same iteration, but the relu anchors the scope's ordering
    run_and_compare(module)
    assert kinds(module) == ["tw.input", "tw.mlp", "tw.linear", "tw.output"]
    mlp = find_graph(module).block.ops.first.next_op
    assert SCOPE_TERMINAL in mlp.attributes
    module = build(0, False)
    run_and_compare(module)
    assert kinds(module) == ["tw.input", "tw.mlp", "tw.output"]


def test_add_of_mlp_and_linear_already_costs_no_layer():
    """Why `add(mlp(..), linear(..))` is not reassociated into one MLP with bypass neurons: the
    linear already runs as a bypass pair in the same MLP sublayer and the add accumulates."""
    rng = np.random.default_rng(5)
    with tw.Graph() as g:
        pos = tw.pos_encoding(2, max_len=16)
        x = tw.input("x", 2, (-1.0, 1.0))
        k = tw.concat(pos, x)
        a = tw.attn(k, k, x, rng.normal(size=(4, 2)), rng.normal(size=(4, 2)), np.eye(2),
                    np.eye(2))
        s = tw.add(tw.mlp(a, rng.normal(size=(2, 6)), rng.normal(size=6),
                          rng.normal(size=(6, 2))),
                   tw.linear(a, rng.normal(size=(2, 2)), rng.normal(size=2)))
        k2 = tw.concat(pos, s)
        tw.output("o", tw.attn(k2, k2, s, rng.normal(size=(4, 2)), rng.normal(size=(4, 2)),
                               np.eye(2), np.eye(2)))
    ct = compile(g.module, d=64, d_head=8, pipeline="default")
    assert ct.stats.n_layers == ct.stats.floor == 2
    assert_matches(ct, g.module, sample_inputs(g.module, 6, 0))


# --------------------------------------------------------------------------------------
# Sandwich chains (torchwright style: linear -> relu -> linear, joined by linears over
# concats, an attention now and then)
# --------------------------------------------------------------------------------------


def sandwich_chain(depth: int, width: int = 2, attn_every: int = 0, seed: int = 0):
    """Each level: two sandwiches over concat(last two values), joined by a subtraction (a
    linear over their concat), every `attn_every`-th level read back through an attention."""
    rng = np.random.default_rng(seed)

    def sandwich(x):
        w, h = tw.width(x), 4 * width
        hidden = tw.relu(tw.linear(x, rng.normal(size=(w, h)) / w, rng.normal(size=h) * 0.1))
        return tw.linear(hidden, rng.normal(size=(h, width)) / h, rng.normal(size=width) * 0.1)

    with tw.Graph() as g:
        pos = tw.pos_encoding(2, max_len=64)
        vals = [tw.input(f"x{i}", width, (-1.0, 1.0)) for i in range(2)]
        for level in range(depth):
            a = sandwich(tw.concat(vals[-1], vals[-2]))
            b = sandwich(tw.concat(vals[-1], vals[-2]))
            j = tw.linear(tw.concat(a, b), np.vstack([np.eye(width), -np.eye(width)]))
            if attn_every and level % attn_every == attn_every - 1:
                k = tw.concat(pos, j)
                j = tw.attn(k, k, j, rng.normal(size=(width + 2, 2)) * 0.1,
                            rng.normal(size=(width + 2, 2)) * 0.1, np.eye(width), np.eye(width))
            vals.append(j)
        tw.output("y", vals[-1])
    return g.module


@pytest.mark.parametrize("depth, attn_every, layers", [
    (3, 0, 3),  # one MLP sublayer per level
    (6, 0, 6),
    (6, 3, 7),  # six levels of MLPs, two attentions: the second one costs a layer
])
def test_sandwich_chain_reaches_one_layer_per_level(depth, attn_every, layers):
    module = sandwich_chain(depth, attn_every=attn_every)
    feeds = sample_inputs(module, 6, 0)
    ct = compile(module, d=128, d_head=16, pipeline="default")
    assert ct.stats.n_layers == ct.stats.floor == layers
    assert_matches(ct, module, feeds)
    assert sum(ct.stats.heads_per_layer) == (depth // attn_every if attn_every else 0)
    old = compile(module, d=128, d_head=16, pipeline=WITHOUT)
    assert old.stats.n_layers >= 2 * depth  # without the pass: two layers per level
    assert sum(ct.stats.neurons_per_layer) < sum(old.stats.neurons_per_layer)


# --------------------------------------------------------------------------------------
# Differential tests
# --------------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10**6), n_ops=st.integers(3, 40))
def test_random_relu_graphs_keep_meaning_and_never_get_deeper(seed, n_ops):
    module = random_graph(seed, n_ops, library=False, kinds=RELU_HEAVY)
    before = floor(module)
    n_relus = sum(isinstance(op, ReluOp) for op in find_graph(module).block.ops)
    run_and_compare(module, seed=seed)
    assert floor(module) <= before
    n_left = sum(isinstance(op, ReluOp) for op in find_graph(module).block.ops)
    assert n_left <= n_relus
    run_and_compare(module, "form-mlps", seed=seed)  # a second run keeps meaning too


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10**6), n_ops=st.integers(3, 30))
def test_default_pipeline_on_relu_graphs_never_deeper_than_without_the_pass(seed, n_ops):
    module = random_graph(seed, n_ops, library=False, kinds=RELU_HEAVY)
    without = module.clone()
    run_pipeline(without, WITHOUT)
    run_and_compare(module, DEFAULT_PIPELINE, seed=seed)
    assert floor(module) <= floor(without)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10**6), n_ops=st.integers(1, 30))
def test_compiled_relu_graphs_match_the_oracle(seed, n_ops):
    module = random_graph(seed, n_ops, library=False, kinds=RELU_HEAVY,
                          embedding=seed % 2 == 0)
    try:
        ct = compile(module, d=96, d_head=8, d_hidden=256, pipeline="default")
    except GeometryError as e:
        assert "smallest d that fits" in str(e)
        ct = compile(module, d=512, d_head=8, d_hidden=256, pipeline="default")
    assert_matches(ct, module, sample_inputs(module, 6, seed))


@pytest.mark.slow
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10**6), n_ops=st.integers(1, 60))
def test_compiled_relu_graphs_match_the_oracle_sweep(seed, n_ops):
    module = random_graph(seed, n_ops, library=False, kinds=RELU_HEAVY, max_width=6)
    ct = compile(module, d=512, d_head=8, d_hidden=1024, pipeline="default")
    assert_matches(ct, module, sample_inputs(module, 6, seed))
