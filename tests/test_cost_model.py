"""One cost model: what the scheduler plans per layer is what the weight writer writes.

`lowering/rules.py` is the one home of every op kind's cost and writer; `materialize` checks
the written heads/neurons of every layer against the plan on every compile, so each test
that compiles anything checks it too. These tests pin the cases that used to disagree."""

import numpy as np
import pytest

from tw_lowering import compile
from tw_lowering import rules
from tw_lowering.rules import Cost
from twdialect import evaluate
from twdialect import ops as tw
from twdialect.random_graphs import random_graph


def _repeated_relu():
    with tw.Graph("main") as g:
        x = tw.input("x", 1, value_range=(-1.0, 1.0))
        y = tw.relu(tw.concat(x, x, x, x))
        z = tw.relu(tw.concat(x, tw.literal([-2.0, 3.0]), x))
        tw.output("y", y)
        tw.output("z", z)
    return g.module


def test_relu_of_repeated_components_costs_one_neuron_per_distinct_row():
    module = _repeated_relu()
    # relu(concat(x, x, x, x)) is one neuron fanned out to four columns (it used to be
    # planned as 1 and written as 4); the second relu's literals fold into its bias.
    ct = compile(module, d=16, d_head=2, d_hidden=2)
    assert ct.stats.neurons_per_layer == [2]
    xs = np.linspace(-1, 1, 7)[:, None]
    got, want = ct.run({"x": xs}), evaluate(module, {"x": xs})
    for k in want:
        np.testing.assert_allclose(got[k], want[k], atol=1e-6)


def test_written_layers_equal_the_plan_on_random_graphs():
    for seed in range(40):
        module = random_graph(seed, 20, library=False)
        ct = compile(module, d=256, d_head=8, d_hidden=256)
        sched = ct.schedule
        assert ct.stats.heads_per_layer == sched.attn_heads
        assert ct.stats.neurons_per_layer == sched.neurons


def test_a_cost_that_disagrees_with_its_writer_is_caught(monkeypatch):
    """The plan check must be able to fail: under-price relus and the writer objects."""
    monkeypatch.setitem(rules.RULES, rules.ReluOp,
                        rules.Rule(lambda tg, t, m: Cost(neurons=0), rules._write_relu,
                                   rules.relu_error))
    with pytest.raises(AssertionError, match="planned"):
        compile(_repeated_relu(), d=16, d_head=2, d_hidden=8)


def test_mlp_cancel_is_one_neuron_for_a_one_signed_column():
    """x = relu(x) - relu(-x); where the ranges fix the sign, one of the two is always 0."""
    from tw_lowering.layer import LayerBuilder
    from tw_lowering.machine import Machine

    signs = np.array([1, -1, 0, 1], np.int8)
    assert rules.cancel_cost(signs, attention=False) == Cost(neurons=5)
    assert rules.cancel_cost(signs, attention=True) == Cost(dims=4)
    m = Machine(8, 2, 16)
    layer = LayerBuilder(m)
    cols = np.array([2, 3, 4, 5])
    rules.write_cancel(layer, cols, False, signs)
    w = layer.finish()
    x = np.zeros(8)
    x[cols] = [0.75, -2.5, -1.25, 3.0]  # each within its column's sign
    h = np.maximum(x @ w.w1.dense() + w.b1, 0.0)
    out = x + h @ w.w2.dense() + w.b2
    assert w.n_neurons == 5
    np.testing.assert_array_equal(out[cols], 0.0)
