"""balance-sums: serial sums become balanced trees; single-use rule; differential tests."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tw_passes import run_pipeline
from tw_passes.balance_sums import BalanceSums
from twdialect import evaluate, make_context, print_module
from twdialect import ops as tw
from twdialect.analysis import critical_path
from twdialect.interp import find_graph
from twdialect.random_graphs import random_graph, sample_inputs

from pass_checks import assert_same  # noqa: E402
import pass_checks  # noqa: E402

N_POS = 5



def run_and_compare(module, spec: str = "balance-sums", seed: int = 0, inputs=None):
    return pass_checks.run_and_compare(module, spec, N_POS, seed, inputs)


def floor(module) -> int:
    return critical_path(find_graph(module)).floor


def last_slot(module) -> int:
    return max(critical_path(find_graph(module)).ready.values())


def serial_sum(n: int, width: int = 2, builder=tw.add):
    with tw.Graph() as g:
        xs = [tw.input(f"x{i}", width, (-1.0, 1.0)) for i in range(n)]
        s = xs[0]
        for x in xs[1:]:
            s = builder(s, x)
        tw.output("s", s)
    return g.module


def test_64_term_serial_sum_is_already_shallow():
    # Each add after the first writes into its dying addend's columns (the lowering's add into
    # a dying addend): all 62 copies run in the first sublayer, as a balanced tree would.
    module = serial_sum(64)
    assert floor(module) == 1
    run_and_compare(module)
    ops = [op.name for op in find_graph(module).block.ops]
    assert ops.count("tw.add") == 63
    assert floor(module) == 1


def test_sum_linear_chain_is_rebalanced():
    module = serial_sum(16, builder=lambda a, b: tw.sum([a, b]))
    before = floor(module)
    run_and_compare(module)
    assert floor(module) < before
    assert [op.name for op in find_graph(module).block.ops].count("tw.linear") == 0


def test_mixed_ready_times_combine_early_terms_first():
    # A late term (behind three relu layers) joins last, so the others are summed while it
    # is computed.
    with tw.Graph() as g:
        xs = [tw.input(f"x{i}", 1, (-1.0, 1.0)) for i in range(5)]
        late = tw.relu(tw.linear(tw.relu(tw.linear(tw.relu(xs[0]), np.eye(1))), np.eye(1)))
        s = late
        for x in xs[1:]:
            s = tw.add(s, x)
        tw.output("s", s)
    before = last_slot(g.module)
    # Adds into dying addends: the early terms are copied in while the late one is computed.
    assert before == critical_path(find_graph(g.module)).slots[late.owner]
    run_and_compare(g.module)
    assert last_slot(g.module) == before


def test_multi_use_intermediate_cuts_the_chain():
    with tw.Graph() as g:
        xs = [tw.input(f"x{i}", 1, (-1.0, 1.0)) for i in range(4)]
        s1 = tw.add(xs[0], xs[1])
        s2 = tw.add(s1, xs[2])
        s3 = tw.add(s2, xs[3])
        tw.output("mid", s2)
        tw.output("s", s3)
    text = print_module(g.module)
    run_and_compare(g.module)
    assert print_module(g.module) == text


def test_balanced_sum_is_left_alone_and_pass_is_idempotent():
    module = serial_sum(20)
    run_pipeline(module, "balance-sums")
    text = print_module(module)
    assert BalanceSums().run_on_graph(make_context(), find_graph(module)) == 0
    assert print_module(module) == text


def test_reassociation_error_stays_small_with_mixed_magnitudes():
    # Terms from 1e-3 to 1e3: float64 reassociation changes the last bits only.
    n = 32
    module = serial_sum(n, width=1)
    inputs = {f"x{i}": np.full((N_POS, 1), (-1) ** i * 10.0 ** (3 - 6 * i / n)) for i in range(n)}
    for op in find_graph(module).block.ops:
        if op.name == "tw.input":
            op.properties["range"] = type(op.range)(-1000.0, 1000.0)
    run_and_compare(module, inputs=inputs)


@settings(max_examples=50, deadline=None)
@given(seed=st.integers(0, 10**6), n_ops=st.integers(3, 30))
def test_random_graphs_keep_their_meaning(seed, n_ops):
    module = random_graph(seed, n_ops, library=False)
    before = floor(module)
    run_and_compare(module, seed=seed)
    assert floor(module) <= before


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10**6), n_ops=st.integers(3, 40))
def test_add_heavy_random_graphs_keep_their_meaning(seed, n_ops):
    module = random_graph(seed, n_ops, library=False, kinds=("add", "add", "linear", "relu"))
    before = floor(module)
    run_and_compare(module, seed=seed)
    assert floor(module) <= before


@pytest.mark.parametrize("seed", range(5))
def test_compiled_model_matches_after_balancing(seed):
    from tw_lowering import compile

    module = random_graph(seed, 16, library=False, kinds=("add", "add", "linear", "relu"))
    inputs = sample_inputs(module, N_POS, seed)
    reference = evaluate(module, inputs)
    compiled = compile(module, d=128, d_head=8, pipeline="balance-sums")
    assert_same(reference, compiled.run(inputs, n_positions=N_POS))


def test_compiled_serial_sums_are_one_layer():
    from tw_lowering import compile

    module = serial_sum(16, width=1)
    inputs = sample_inputs(module, N_POS)
    plain = compile(module, d=64, d_head=4, pipeline="none")
    balanced = compile(module, d=64, d_head=4, pipeline="balance-sums")
    assert_same(evaluate(module, inputs), plain.run(inputs))
    assert_same(evaluate(module, inputs), balanced.run(inputs))
    assert plain.stats.n_layers == balanced.stats.n_layers == 1
    # A chain of sum-linears still needs the pass: 15 serial linears -> a tree of free adds.
    module = serial_sum(16, width=1, builder=lambda a, b: tw.sum([a, b]))
    plain = compile(module, d=64, d_head=4, pipeline="none")
    balanced = compile(module, d=64, d_head=4, pipeline="balance-sums")
    assert_same(evaluate(module, inputs), balanced.run(inputs))
    assert balanced.stats.n_layers < plain.stats.n_layers


@pytest.mark.slow
def test_sweep_random_graphs():
    for seed in range(300):
        run_and_compare(random_graph(seed, 80, library=False,
                                     kinds=("add", "add", "linear", "relu", "concat")), seed=seed)
