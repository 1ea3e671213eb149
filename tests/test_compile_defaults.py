"""What `compile` does unasked: the default pipeline, dead code that costs nothing, the float32
contract stated (a PrecisionWarning naming the output and the op), ramps reported, and a
probe that always compares something."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from tw_lowering import compile  # noqa: A004
from tw_lowering.precision import PrecisionError, PrecisionWarning
from tw_lowering.probe import probe
from twdialect import evaluate
from twdialect import ops as tw
from twdialect.random_graphs import random_graph, sample_inputs
from model_checks import readme_graph  # noqa: E402


def _chain_of_linears(n: int = 6):
    """relu(linear^n(x)): n linears fusion folds into one."""
    rng = np.random.default_rng(0)
    with tw.Graph("main") as g:
        x = tw.input("x", 4, value_range=(-1.0, 1.0))
        v = x
        for _ in range(n):
            v = tw.linear(v, rng.normal(size=(4, 4)) * 0.5)
        tw.output("y", tw.relu(v))
    return g.module


def test_compile_runs_the_default_pipeline_unless_told_none():
    module = _chain_of_linears()
    unasked = compile(module, d=32, d_head=4, d_hidden=64)
    default = compile(module, d=32, d_head=4, d_hidden=64, pipeline="default")
    as_written = compile(module, d=32, d_head=4, d_hidden=64, pipeline="none")
    assert unasked.n_layers == default.n_layers < as_written.n_layers
    assert unasked.stats.n_ops == default.stats.n_ops < as_written.stats.n_ops
    for none in (None, "", " none "):
        assert compile(module, d=32, d_head=4, d_hidden=64, pipeline=none).n_layers == \
            as_written.n_layers


@pytest.mark.parametrize("pipeline", ["none", "default"])
def test_ops_no_output_reads_never_cost_a_layer(pipeline):
    """A deep dead chain (heads and mlps) beside a one-layer output."""
    rng = np.random.default_rng(1)
    with tw.Graph("main") as g:
        x = tw.input("x", 8, value_range=(-1.0, 1.0))
        dead = x
        for _ in range(8):
            dead = tw.attn(dead, dead, dead, *(rng.normal(size=(8, 8)) * 0.2 for _ in range(4)))
            dead = tw.relu(tw.linear(dead, rng.normal(size=(8, 8)) * 0.3))
        tw.output("y", tw.relu(tw.linear(x, rng.normal(size=(8, 8)))))
    ct = compile(g.module, d=32, d_head=8, d_hidden=64, pipeline=pipeline)
    assert ct.n_layers == ct.stats.floor == 1


def test_the_ramp_is_reported_and_the_model_is_exact_outside_it():
    module = readme_graph()
    ct = compile(module, d=64, d_head=8, d_hidden=256)
    assert len(ct.stats.ramps) == 1 and "ramp [-0.0625, 0)" in ct.stats.ramps[0]
    assert "ramps: 1 compare" in ct.stats.report()
    xs = np.random.default_rng(0).uniform(-8, 8, (4000, 2))
    z = xs[:, 0] - xs[:, 1] + 0.5
    outside = (z >= 0) | (z <= -0.0625)
    err = np.abs(ct.run({"x": xs})["y"] - evaluate(module, {"x": xs})["y"]).max(axis=1)
    assert err[outside].max() <= 1e-4 * 8
    assert (err[~outside] > 1e-4).any()  # inside, the model follows the ramp


def test_probe_never_compares_nothing_and_names_the_ramp():
    module = readme_graph()
    ct = compile(module, d=64, d_head=8, d_hidden=256)
    clean = probe(ct, module, {"x": np.array([[1.0, 2.0], [-8.0, -7.0]])})
    assert clean.first_divergence is None and clean.checked > 0 and not clean.ramps
    inside = probe(ct, module, {"x": np.array([[1.0, 1.52], [2.0, -3.0]])})
    assert inside.first_divergence == "output 'y'"
    assert inside.ramps and "tw.compare" in inside.ramps[0] and "position 0" in inside.ramps[0]
    assert "inside a compare ramp" in str(inside)


def test_probe_checks_the_compiled_graphs_ops_after_the_pipeline():
    for seed in range(4):
        module = random_graph(seed, 25, library=False)
        ct = compile(module, d=96, d_head=8, d_hidden=256)
        report = probe(ct, module, sample_inputs(module, 5, seed))
        assert report.first_divergence is None and report.checked > len(ct.schedule.tg.outputs)


def _wide_sum(margin=None):
    """An output float32 cannot be shown to keep: a head whose scores reach 3e6, where a
    rounding of the scores moves every softmax weight."""
    with tw.Graph("main") as g:
        x = tw.input("x", 4, value_range=(-1e3, 1e3))
        s = tw.attn(x, x, x, np.eye(4), np.eye(4), np.eye(4), np.eye(4)[:, :1])
        tw.output("s", tw.relu(s), margin=margin)
    return g.module


def test_an_output_float32_cannot_keep_warns_naming_it_and_the_op():
    with pytest.warns(PrecisionWarning) as caught:
        compile(_wide_sum(), d=96, d_head=8, d_hidden=64, pipeline="none")
    text = str(caught[0].message)
    assert 'output "s"' in text and "'tw.attn'" in text and "float64" in text
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrecisionWarning)
        compile(_wide_sum(), d=96, d_head=8, d_hidden=64, on_margin="ignore")


def test_a_declared_margin_refuses_and_names_the_op():
    with pytest.raises(PrecisionError, match=r'"s" may be off by .* first out of tolerance '
                                             r"at 'tw.attn'"):
        compile(_wide_sum(margin=1e-3), d=96, d_head=8, d_hidden=64, pipeline="none")


def test_exact_integer_arithmetic_has_a_finite_bound_and_no_warning():
    with tw.Graph("main") as g:
        a = tw.input("a", 4, value_range=(0.0, 1000.0), integer=True)
        s = tw.linear(a, [[1.0], [2.0], [4.0], [-8.0]], [3.0])
        tw.output("y", tw.relu(tw.add(s, tw.linear(a, [[1.0], [1.0], [1.0], [1.0]]))))
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrecisionWarning)
        ct = compile(g.module, d=32, d_head=4, d_hidden=32)
    from tw_lowering.precision import output_errors

    assert output_errors(ct.schedule)["y"][0] == 0.0
