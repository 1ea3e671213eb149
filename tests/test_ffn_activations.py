"""`tw.mlp` activations beyond relu: swish (SiLU) lanes and gated (SwiGLU-style) lanes.

lane_j = act(x W1 + b1)_j * up_j(x), up_j(x) = (x Wu + bu)_j for a gated mlp, else 1;
output = lanes W2 + b2; act relu or swish. Oracle against numpy, value ranges and integrality,
the builder's and the constructor's refusals, the compiled model (relu, swish and gated mlps
sharing layers, batches, KV-cache generation) against the oracle, the all-relu fast path
untouched, the passes (differential on random graphs; fuse-linears folds a linear into both
the gate and the up projection; form-mlps keeps kinds apart), the float32 error bound, and the
exports (ONNX carries the lanes; the relu MLP formats refuse with one line).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import twdialect
import tw_lowering as lowering
from pass_checks import run_and_compare
from model_checks import assert_close, onnx_round_trip
from twdialect import ops as tw
from twdialect.dialect import MlpOp, is_plain_mlp
from twdialect.errors import TwError
from twdialect.f32_error import ffn_error_bound
from twdialect.interp import find_graph
from twdialect.random_graphs import random_graph, sample_inputs
from twdialect.ranges import SWISH_ARGMIN, SWISH_MIN, integer_components, swish_box, value_ranges


def silu(z):
    return z / (1.0 + np.exp(-z))


def _w(rng, *shape, scale=0.5):
    """Weights float32 holds exactly (the IR stores f32)."""
    return np.round(rng.normal(size=shape) * scale, 3).astype(np.float32).astype(np.float64)


def _mixed(seed: int = 0):
    """relu, swish, gated relu and gated swish mlps over one input, side by side (one MLP
    sublayer can hold them all), and a gated swish mlp reading their sum."""
    rng = np.random.default_rng(seed)
    with tw.Graph() as g:
        x = tw.input("x", 3, (-2, 2))
        a = tw.mlp(x, _w(rng, 3, 4), _w(rng, 4), _w(rng, 4, 2))
        b = tw.mlp(x, _w(rng, 3, 5), _w(rng, 5), _w(rng, 5, 2), activation="swish")
        c = tw.mlp(x, _w(rng, 3, 3), _w(rng, 3), _w(rng, 3, 2), _w(rng, 2), activation="swish",
                   up=_w(rng, 3, 3), up_bias=_w(rng, 3))
        d = tw.mlp(x, _w(rng, 3, 3), None, _w(rng, 3, 2), up=_w(rng, 3, 3))
        s = tw.add(tw.add(a, b), tw.add(c, d))
        e = tw.mlp(s, _w(rng, 2, 4), _w(rng, 4), _w(rng, 4, 2), activation="swish",
                   up=_w(rng, 2, 4))
        tw.output("y", tw.concat(s, e))
    return g.module




# -- oracle -----------------------------------------------------------------------------


@pytest.mark.parametrize("act,gated", [("relu", False), ("swish", False), ("relu", True),
                                       ("swish", True)])
def test_oracle_matches_numpy(act, gated):
    rng = np.random.default_rng(1)
    w1, b1, w2, b2 = _w(rng, 3, 6), _w(rng, 6), _w(rng, 6, 2), _w(rng, 2)
    up, ub = (_w(rng, 3, 6), _w(rng, 6)) if gated else (None, None)
    with tw.Graph() as g:
        x = tw.input("x", 3, (-5, 5))
        tw.output("y", tw.mlp(x, w1, b1, w2, b2, activation=act, up=up, up_bias=ub))
    xs = rng.uniform(-5, 5, (7, 3))
    z = xs @ w1 + b1
    lanes = silu(z) if act == "swish" else np.maximum(z, 0)
    if gated:
        lanes = lanes * (xs @ up + ub)
    want = lanes @ w2 + b2
    np.testing.assert_allclose(twdialect.evaluate(g.module, {"x": xs})["y"], want, atol=1e-12)
    op = next(o for o in find_graph(g.module).block.ops if isinstance(o, MlpOp))
    assert (op.activation, op.is_gated, op.is_plain) == (act, gated, act == "relu" and not gated)


@pytest.mark.parametrize("act,gated", [("relu", False), ("swish", False), ("relu", True),
                                       ("swish", True)])
def test_oracle_matches_torchwright_ffn_compute(act, gated):
    pytest.importorskip("torchwright")
    from torchwright.graph import FFN
    from torchwright.graph.misc import InputNode

    rng = np.random.default_rng(7)
    w1, b1, w2, b2 = _w(rng, 3, 5), _w(rng, 5), _w(rng, 5, 2), _w(rng, 2)
    up, ub = (_w(rng, 3, 5), _w(rng, 5)) if gated else (None, None)
    xs = rng.uniform(-3, 3, (9, 3))
    t = lambda a: None if a is None else torch.tensor(a, dtype=torch.float64)  # noqa: E731
    node = FFN(InputNode(3, name="x", value_range=(-3.0, 3.0)), t(w1.T), t(b1), t(w2), t(b2),
               up_proj=t(None if up is None else up.T), up_bias=t(ub), activation=act)
    theirs = node.compute(9, {"x": torch.tensor(xs)}).numpy()
    with tw.Graph() as g:
        x = tw.input("x", 3, (-3, 3))
        tw.output("y", tw.mlp(x, w1, b1, w2, b2, activation=act, up=up, up_bias=ub))
    np.testing.assert_allclose(twdialect.evaluate(g.module, {"x": xs})["y"], theirs, atol=1e-12)


def test_swish_is_stable_far_out():
    with tw.Graph() as g:
        x = tw.input("x", 1, (-1e4, 1e4))
        tw.output("y", tw.mlp(x, np.ones((1, 1)), None, np.ones((1, 1)), activation="swish"))
    got = twdialect.evaluate(g.module, {"x": np.array([[-1e4], [-50.0], [0.0], [50.0], [1e4]])})
    np.testing.assert_allclose(got["y"][:, 0], [0.0, silu(-50.0), 0.0, 50.0, 1e4], atol=1e-18)


# -- value ranges and integrality -------------------------------------------------------


def test_swish_box_extremes():
    lo, hi = swish_box(np.array([-5.0, -1.0, -3.0, 0.5, -np.inf]),
                       np.array([5.0, 2.0, -2.0, 3.0, -10.0]))
    assert lo[0] <= SWISH_MIN and abs(lo[0] - SWISH_MIN) < 1e-9  # z* inside
    assert lo[1] <= silu(-1.0) and lo[1] > SWISH_MIN and hi[1] >= silu(2.0)  # z* outside
    assert lo[2] <= silu(-2.0) and hi[2] >= silu(-3.0) and lo[2] > SWISH_MIN  # decreasing part
    assert lo[3] <= silu(0.5) and hi[3] >= silu(3.0)  # increasing part
    assert lo[4] <= silu(-10.0) and hi[4] >= 0.0
    z = np.linspace(-10, 10, 200001)
    assert abs(z[np.argmin(silu(z))] - SWISH_ARGMIN) < 1e-3
    assert abs(silu(z).min() - SWISH_MIN) < 1e-9


@pytest.mark.parametrize("seed", range(8))
def test_ranges_hold_the_oracle(seed):
    module = random_graph(700 + seed, 16, library=False, ffn=0.8)
    boxes = value_ranges(find_graph(module))
    from twdialect.interp import evaluate_values

    feeds = sample_inputs(module, 40, seed=seed)
    for v, got in evaluate_values(find_graph(module), feeds, "main", n_positions=40).items():
        if v in boxes:
            lo, hi = boxes[v]
            assert np.all(got >= lo - 1e-9) and np.all(got <= hi + 1e-9)


def test_gated_range_is_the_product_of_intervals():
    with tw.Graph() as g:
        x = tw.input("x", 1, (-1, 2))
        y = tw.mlp(x, np.ones((1, 1)), None, np.ones((1, 1)), up=np.ones((1, 1)) * -3.0,
                   up_bias=np.ones(1))
        tw.output("y", y)
    lo, hi = value_ranges(find_graph(g.module))[y]
    # relu(x) in [0, 2], 1 - 3x in [-5, 4]: the product in [-10, 8]
    assert abs(lo[0] + 10) < 1e-9 and abs(hi[0] - 8) < 1e-9


def test_integrality():
    with tw.Graph() as g:
        x = tw.input("x", 2, (0, 9), integer=True)
        relu_gated = tw.mlp(x, np.eye(2), None, np.eye(2), up=np.eye(2) * 2, up_bias=np.ones(2))
        swish = tw.mlp(x, np.eye(2), None, np.eye(2), activation="swish")
        tw.output("a", relu_gated)
        tw.output("b", swish)
    ints = integer_components(find_graph(g.module))
    assert ints[relu_gated].all() and not ints[swish].any()


# -- builder, constructor, printer ------------------------------------------------------


def test_builder_refuses_with_one_line():
    with tw.Graph():
        x = tw.input("x", 2, (-1, 1))
        for kwargs, match in (({"activation": "gelu"}, "activation must be one of"),
                              ({"up_bias": np.ones(3)}, "up_bias needs an up projection"),
                              ({"up": np.ones((2, 4))}, "up must have as many columns as w1"),
                              ({"up": np.ones((3, 3))}, "up has 3 rows, expected 2"),
                              ({"up": np.ones((2, 3)), "up_bias": np.ones(2)}, "up_bias")):
            with pytest.raises(TwError, match=match):
                tw.mlp(x, np.ones((2, 3)), None, np.ones((3, 1)), **kwargs)


def test_constructor_and_print():
    with tw.Graph() as g:
        x = tw.input("x", 1, (-1, 1))
        tw.output("y", tw.mlp(x, np.ones((1, 1)), None, np.ones((1, 1)), activation="swish",
                              up=np.ones((1, 1))))
        tw.output("z", tw.mlp(x, np.ones((1, 1)), None, np.ones((1, 1))))
    text = str(g.module)
    assert "tw.mlp %0 act swish w1" in text and " up dense<1.000000e+00>" in text
    assert "tw.mlp %0 w1" in text  # a relu mlp prints as it always did
    with pytest.raises(TwError, match="activation must be one of"):
        MlpOp(x, np.ones((1, 1)), np.ones((1, 1)), activation="tanh")
    with pytest.raises(TwError, match="needs an up projection"):
        MlpOp(x, np.ones((1, 1)), np.ones((1, 1)), up_bias=np.ones(1))


# -- the compiled model -----------------------------------------------------------------


@pytest.mark.parametrize("seed", range(3))
def test_compiled_matches_oracle_with_kinds_sharing_layers(seed):
    module = _mixed(seed)
    ct = lowering.compile(module, d=32, d_head=4)
    rng = np.random.default_rng(seed)
    batch = [{"x": rng.uniform(-2, 2, (n, 3))} for n in (1, 5, 9)]
    for feeds, got in zip(batch, ct.run_batch(batch)):
        assert_close(got, twdialect.evaluate(module, feeds))
    kinds = [(layer.mlp.n_swish > 0, layer.mlp.n_gated > 0) for layer in ct.layers]
    assert (True, True) in kinds  # swish and gated neurons in one layer
    assert ct.swish_neurons > 0 and ct.gated_neurons > 0
    assert not all(layer.mlp.plain for layer in ct.layers)


def test_relu_models_keep_the_plain_path():
    module = random_graph(5, 16, library=False)
    ct = lowering.compile(module, d=64, d_head=4)
    assert all(layer.mlp.plain and layer.mlp.swish is None and layer.mlp.wu is None
               for layer in ct.layers)
    assert ct.swish_neurons == ct.gated_neurons == 0


@pytest.mark.parametrize("seed", range(6))
def test_random_graphs_compiled_match_oracle(seed):
    module = random_graph(800 + seed, 18, library=False, ffn=0.7)
    ct = lowering.compile(module, d=64, d_head=4)
    for n in (1, 7, 20):
        feeds = sample_inputs(module, n, seed=seed)
        assert_close(ct.run(feeds), twdialect.evaluate(module, feeds))


def _generation_graph(relu_beside: bool):
    """A token model whose logits come from a gated swish MLP over the tokens and a head
    (and, with `relu_beside`, a relu MLP added to them)."""
    rng = np.random.default_rng(3)
    with tw.Graph() as g:
        tok = tw.embedding("tokens", np.round(rng.uniform(-1, 1, (5, 3)), 3))
        h = tw.attn(tok, tok, tok, _w(rng, 3, 2), _w(rng, 3, 2), np.eye(3), np.eye(3))
        y = tw.mlp(tw.concat(tok, h), _w(rng, 6, 8), _w(rng, 8), _w(rng, 8, 5),
                   activation="swish", up=_w(rng, 6, 8), up_bias=_w(rng, 8))
        if relu_beside:
            y = tw.add(y, tw.mlp(tok, _w(rng, 3, 4), None, _w(rng, 4, 5)))
        tw.output("logits", y)
    return g.module


def test_generation_steps_match_the_oracle():
    module = _generation_graph(relu_beside=True)
    ct = lowering.compile(module, d=64, d_head=4)
    back = lambda out: {"tokens": int(np.argmax(out["logits"]))}  # noqa: E731
    prompt = {"tokens": np.array([1, 3, 0])}
    assert_close(ct.generate(prompt, 5, back), twdialect.generate(module, prompt, 5, back))


def test_probe_and_stats_count_kinds():
    from tw_lowering.probe import probe

    rng = np.random.default_rng(0)
    with tw.Graph() as g:  # (side by side: the probe reads each value's own columns)
        x = tw.input("x", 3, (-2, 2))
        tw.output("y", tw.concat(
            tw.mlp(x, _w(rng, 3, 4), _w(rng, 4), _w(rng, 4, 2)),
            tw.mlp(x, _w(rng, 3, 5), _w(rng, 5), _w(rng, 5, 2), activation="swish"),
            tw.mlp(x, _w(rng, 3, 3), None, _w(rng, 3, 2), activation="swish", up=_w(rng, 3, 3)),
            tw.mlp(x, _w(rng, 3, 3), None, _w(rng, 3, 2), up=_w(rng, 3, 3), up_bias=_w(rng, 3))))
    module = g.module
    ct = lowering.compile(module, d=32, d_head=4)
    report = probe(ct, module, {"x": np.random.default_rng(0).uniform(-2, 2, (4, 3))})
    assert report.first_divergence is None and report.checked > 0
    stats = lowering.compile(_mixed(0), d=32, d_head=4).stats
    assert stats.swish_neurons == 5 + 3 + 4 and stats.gated_neurons == 3 + 3 + 4
    assert "swish neurons 12" in stats.report() and "gated neurons 10" in stats.report()


def test_dense_weights_hold_every_kind():
    ct = lowering.compile(_mixed(0), d=32, d_head=4)
    for layer in ct.layers:
        w = layer.dense_weights()
        if not layer.mlp.plain:
            assert "swish" in w or "wu" in w


# -- float32 error bound ----------------------------------------------------------------


@pytest.mark.parametrize("seed", range(4))
def test_ffn_error_bound_holds(seed):
    rng = np.random.default_rng(seed)
    w1, b1, w2, b2 = rng.normal(size=(4, 16)), rng.normal(size=16), rng.normal(size=(16, 3)), \
        rng.normal(size=3)
    up, ub = rng.normal(size=(4, 16)), rng.normal(size=16)
    lo, hi = -np.full(4, 30.0), np.full(4, 30.0)
    xs = rng.uniform(-30, 30, (500, 4))
    exact = (silu(xs @ w1 + b1) * (xs @ up + ub)) @ w2 + b2
    f = lambda a: torch.as_tensor(np.asarray(a, np.float32))  # noqa: E731
    with torch.no_grad():
        x32 = f(xs)
        z = x32 @ f(w1) + f(b1)
        got = ((torch.nn.functional.silu(z) * (x32 @ f(up) + f(ub))) @ f(w2) + f(b2)).double()
    err = np.abs(got.numpy() - exact).max(axis=0)
    bound = ffn_error_bound(w1, b1, w2, b2, lo, hi, "swish", up, ub)
    assert np.all(err <= bound)


# -- passes -----------------------------------------------------------------------------


@pytest.mark.parametrize("spec", ["canonicalize", "cse", "dce", "fuse-linears",
                                  "horizontal-fuse", "form-mlps", "rematerialize",
                                  "fuse-linears{allow-inflate=true}"])
def test_passes_keep_the_oracle_with_swish_and_gated_mlps(spec):
    for seed in range(6):
        run_and_compare(random_graph(900 + seed, 18, library=False, ffn=0.7), spec, 8)


@pytest.mark.parametrize("spec", ["decompose", "optimize"])
def test_library_graphs_with_swish_and_gated_mlps_inside_contracts(spec):
    """Library ops beside swish and gated mlps: decompose and the default pipeline keep the
    oracle inside each library op's contract (a compare's ramp zone is masked)."""
    from tw_passes import run_pipeline
    from tw_passes.decompose import DecomposeError
    from twdialect.contracts import contract_mask

    ran = 0
    for seed in range(8):
        module = random_graph(900 + seed, 18, library=True, ffn=0.7, value_range=1.0)
        feeds = sample_inputs(module, 8, seed=seed)
        want, keep = twdialect.evaluate(module, feeds), contract_mask(module, feeds)
        try:
            run_pipeline(module, spec)
        except DecomposeError:  # gated lanes multiply ranges: a compare of a wide one refuses
            continue
        ran += 1
        module.verify()
        got = twdialect.evaluate(module, feeds)
        for k in want:
            scale = max(1.0, float(np.abs(want[k]).max()))
            assert np.abs(got[k] - want[k])[keep].max(initial=0.0) <= 1e-4 * scale, k
    assert ran >= 4


def _kinds(module) -> list[tuple[str, bool]]:
    return [(op.activation, op.is_gated) for op in find_graph(module).block.ops
            if isinstance(op, MlpOp)]


def test_fuse_linears_folds_into_gate_and_up():
    rng = np.random.default_rng(0)
    with tw.Graph() as g:
        x = tw.input("x", 2, (-2, 2))
        lin = tw.linear(x, np.array([[1.0, 0.5, 2.0], [0.25, -1.0, 0.0]]), np.array([0.5, 0, 1]))
        y = tw.mlp(lin, _w(rng, 3, 4), _w(rng, 4), _w(rng, 4, 2), activation="swish",
                   up=_w(rng, 3, 4), up_bias=_w(rng, 4))
        tw.output("y", tw.linear(y, np.array([[2.0], [0.5]])))
    module = run_and_compare(g.module, "fuse-linears", 6)
    ops = list(find_graph(module).block.ops)
    assert not any(type(op).__name__ == "LinearOp" for op in ops)
    (mlp,) = [op for op in ops if isinstance(op, MlpOp)]
    assert mlp.activation == "swish" and mlp.is_gated and mlp.x.owner.name == "tw.input"


def test_form_mlps_keeps_kinds_apart():
    rng = np.random.default_rng(2)
    with tw.Graph() as g:
        x = tw.input("x", 2, (-2, 2))
        r = tw.relu(tw.linear(x, _w(rng, 2, 3)))  # a relu chain: becomes a relu mlp
        s = tw.mlp(x, _w(rng, 2, 3), None, _w(rng, 3, 2), activation="swish", up=_w(rng, 2, 3))
        tw.output("r", tw.linear(r, np.array([[1.0], [2.0], [0.5]])))
        tw.output("s", tw.linear(s, np.array([[1.0], [-1.0]])))  # folds into the swish w2
    module = run_and_compare(g.module, "form-mlps", 6)
    assert sorted(_kinds(module)) == [("relu", False), ("swish", True)]
    assert not any(op.name == "tw.linear" for op in find_graph(module).block.ops)


def test_canonicalize_folds_literal_concat_operands_into_up():
    rng = np.random.default_rng(4)
    with tw.Graph() as g:
        x = tw.input("x", 2, (-2, 2))
        cat = tw.concat(x, tw.literal(np.array([1.5])))
        tw.output("y", tw.mlp(cat, _w(rng, 3, 4), None, _w(rng, 4, 1), up=_w(rng, 3, 4)))
    module = run_and_compare(g.module, "canonicalize", 6)
    (mlp,) = [op for op in find_graph(module).block.ops if isinstance(op, MlpOp)]
    assert mlp.is_gated and mlp.ub is not None and mlp.x.owner.name == "tw.input"
    assert not is_plain_mlp(mlp)


# -- exports ----------------------------------------------------------------------------


def _token_graph():
    rng = np.random.default_rng(5)
    with tw.Graph() as g:
        tok = tw.embedding("tokens", np.eye(4))
        h = tw.attn(tok, tok, tok, np.eye(4) * 3, np.eye(4), np.eye(4), np.eye(4))
        y = tw.mlp(tw.concat(tok, h), _w(rng, 8, 6), _w(rng, 6), _w(rng, 6, 4),
                   activation="swish", up=_w(rng, 8, 6))
        tw.output("logits", tw.add(y, tw.mlp(tok, _w(rng, 4, 3), None, _w(rng, 3, 4))))
    return g.module


@pytest.mark.parametrize("fmt", ["transformers", "tlens", "gguf"])
def test_relu_mlp_formats_refuse(tmp_path, fmt):
    from tw_lowering.export import export
    from tw_lowering.export.stock import StockPlan

    ct = lowering.compile(_token_graph(), d=32, d_head=4)
    with pytest.raises(TwError, match=rf"export_{fmt}: the model has \d+ swish and \d+ gated "
                                      r"MLP neurons \(tw.mlp act swish / up\)"):
        export(ct, tmp_path / fmt, fmt)
    with pytest.raises(TwError, match="swish and"):
        StockPlan(ct)


def test_onnx_export_carries_swish_and_gated_lanes(tmp_path):
    pytest.importorskip("onnxruntime")
    module = _token_graph()
    ct = lowering.compile(module, d=32, d_head=4)
    feeds = {"tokens": np.array([0, 2, 1, 3, 3, 1])}
    model = onnx_round_trip(ct, module, feeds, tmp_path / "m")


# -- CUDA -------------------------------------------------------------------------------


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize("seed", range(3))
def test_cuda_runs_lanes_like_the_oracle(seed):
    """On a GPU: run (CUDA-graph replay on the second call), run_batch and generate."""
    module = _mixed(seed)
    ct = lowering.compile(module, d=32, d_head=4).to("cuda")
    rng = np.random.default_rng(seed)
    for n in (3, 3, 8):  # (the repeated shape replays a captured graph)
        feeds = {"x": rng.uniform(-2, 2, (n, 3))}
        assert_close(ct.run(feeds), twdialect.evaluate(module, feeds))
    batch = [{"x": rng.uniform(-2, 2, (n, 3))} for n in (2, 6)]
    for feeds, got in zip(batch, ct.run_batch(batch)):
        assert_close(got, twdialect.evaluate(module, feeds))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_generation_steps():
    module = _generation_graph(relu_beside=False)
    ct = lowering.compile(module, d=64, d_head=4).to("cuda")
    back = lambda out: {"tokens": int(np.argmax(out["logits"]))}  # noqa: E731
    prompt = {"tokens": np.array([1, 3, 0])}
    assert_close(ct.generate(prompt, 6, back), twdialect.generate(module, prompt, 6, back))
