"""Rotary position embeddings on `tw.attn` (torchwright 0.2.0's `Attn`, HF LLaMA's rotate_half).

The oracle against an independent numpy implementation (planes as complex numbers) and against
torchwright's own `Attn.compute`; the builder, typed constructor and verifier; the compiled
model against the oracle on graphs mixing rotary, plain and full-mask heads with pooled
position-local linears in the same layers, on whole sequences, padded batches and with the KV
cache (positions absolute); passes on random graphs with rotary heads; the stock exports
refuse rotary heads, the ONNX export carries them.
"""

from __future__ import annotations

import numpy as np
import pytest

import twdialect
import tw_lowering as lowering
from pass_checks import assert_same, run_and_compare
from model_checks import assert_close
from tw_lowering.export import ExportError, export
from tw_passes import run_pipeline
from twdialect import ops as tw
from twdialect import parse_module, print_module
from twdialect.analysis import is_attention_slot, layer_of
from twdialect.dialect import ROPE_BASE, AttnOp, TwAttributeException, attn_rope
from twdialect.errors import TwError
from twdialect.interp import apply_rope
from twdialect.random_graphs import random_graph, sample_inputs

RNG = np.random.default_rng(11)


def _softmax_rows(logits):
    logits = logits - logits.max(axis=1, keepdims=True)
    p = np.exp(logits)
    return p / p.sum(axis=1, keepdims=True)


def _rotate_complex(x, base, dims):
    """Independent rotation: plane p is the complex number x_p + i x_{p + dims/2}, turned by
    e^{i pos theta_p}, theta_p = base^(-2p/dims); components from dims on pass unchanged."""
    half = dims // 2
    pos = np.arange(x.shape[0])[:, None]
    theta = np.array([base ** (-2.0 * p / dims) for p in range(half)])[None, :]
    z = (x[:, :half] + 1j * x[:, half:dims]) * np.exp(1j * pos * theta)
    return np.concatenate([z.real, z.imag, x[:, dims:]], axis=1)


def _reference(q, k, v, wq, wk, wv, wo, rope, full=False):
    qp, kp = q @ wq, k @ wk
    if rope is not None:
        qp, kp = _rotate_complex(qp, *rope), _rotate_complex(kp, *rope)
    logits = qp @ kp.T
    if not full:
        n = q.shape[0]
        logits = np.where(np.tril(np.ones((n, n), bool)), logits, -np.inf)
    return _softmax_rows(logits) @ (v @ wv) @ wo


def _weights(d_in, d_qk, d_v=2, d_out=2, scale=1.0):
    return [RNG.normal(size=s).astype(np.float32).astype(np.float64) * f
            for s, f in (((d_in, d_qk), scale), ((d_in, d_qk), scale), ((2, d_v), 1.0),
                         ((d_v, d_out), 1.0))]


def _attn_graph(rope, d_qk=6, mask="causal", scale=1.0):
    ws = _weights(3, d_qk, scale=scale)
    with tw.Graph() as g:
        x = tw.input("x", 3, (-2.0, 2.0))
        y = tw.input("y", 2, (-2.0, 2.0))
        tw.output("o", tw.attn(x, x, y, *ws, mask=mask, rope=rope))
    return g.module, ws


# -- the oracle -------------------------------------------------------------------------------


@pytest.mark.parametrize("rope,mask", [((10.0, 6), "causal"), ((100.0, 4), "causal"),
                                       ((ROPE_BASE, 2), "full"), ((3.0, 6), "full")])
def test_oracle_matches_independent_numpy(rope, mask):
    module, ws = _attn_graph(rope, mask=mask)
    x, y = RNG.uniform(-2, 2, (23, 3)), RNG.uniform(-2, 2, (23, 2))
    got = twdialect.evaluate(module, {"x": x, "y": y})["o"]
    want = _reference(x, x, y, *ws, rope=rope, full=mask == "full")
    np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-11)


def test_apply_rope_is_the_rotate_half_formula():
    x = RNG.normal(size=(9, 6))
    np.testing.assert_allclose(apply_rope(x, np.arange(9), 50.0, 4), _rotate_complex(x, 50.0, 4),
                               rtol=1e-13, atol=1e-13)
    # position 0 is the identity; the tail beyond dims is untouched at every position
    assert np.array_equal(apply_rope(x, np.zeros(9), 50.0, 4), x)
    assert np.array_equal(apply_rope(x, np.arange(9), 50.0, 4)[:, 4:], x[:, 4:])


@pytest.mark.parametrize("base,d_rot,d_qk", [(ROPE_BASE, 8, 8), (10000.0, 4, 8), (10.0, 2, 6),
                                             (2.0, 6, 6)])
def test_oracle_matches_torchwright_attn_compute(base, d_rot, d_qk):
    torch = pytest.importorskip("torch")
    pytest.importorskip("torchwright")
    from torchwright.graph import Attn
    from torchwright.graph.misc import InputNode

    n = 40
    ws = _weights(3, d_qk, scale=0.7)
    x, y = RNG.uniform(-2, 2, (n, 3)), RNG.uniform(-2, 2, (n, 2))
    xi = InputNode(3, name="x", value_range=(-2.0, 2.0))
    yi = InputNode(2, name="y", value_range=(-2.0, 2.0))
    t = [torch.tensor(w, dtype=torch.float64) for w in ws]
    node = Attn(xi, xi, yi, *t, rope_base=base, rope_d_rot=d_rot)
    theirs = node.compute(n, {"x": torch.tensor(x), "y": torch.tensor(y)}).numpy()
    with tw.Graph() as g:
        xs = tw.input("x", 3, (-2.0, 2.0))
        ys = tw.input("y", 2, (-2.0, 2.0))
        tw.output("o", tw.attn(xs, xs, ys, *ws, rope=(base, d_rot)))
    ours = twdialect.evaluate(g.module, {"x": x, "y": y})["o"]
    # torchwright rounds the frequencies and the angles pos * theta to float32 (tw keeps
    # float64): at 40 positions their angles are off by ~1e-6, which is all that differs
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=2e-5)
    # and their default is tw's rope=True: base 5e5 over every q/k component
    node = Attn(xi, xi, yi, *t)
    with tw.Graph() as g2:
        xs = tw.input("x", 3, (-2.0, 2.0))
        ys = tw.input("y", 2, (-2.0, 2.0))
        tw.output("o", tw.attn(xs, xs, ys, *ws, rope=True))
    np.testing.assert_allclose(twdialect.evaluate(g2.module, {"x": x, "y": y})["o"],
                               node.compute(n, {"x": torch.tensor(x),
                                                "y": torch.tensor(y)}).numpy(), atol=2e-5)


def test_rotary_logits_depend_on_relative_offset_only():
    """A constant query and key: the logit of (i, j) is a function of i - j (RoPE's point),
    so a rotary head can attend to the previous position with no position input at all."""
    d = 8
    with tw.Graph() as g:
        v = tw.input("v", 1, (-5.0, 5.0))
        one = tw.literal([1.0])
        # key pre-rotated by +1 position: logit peaks where i - j = 1 (torchwright's offset head)
        key = apply_rope(np.ones((1, d)), np.array([1]), 100.0, d)
        tw.output("prev", tw.attn(one, one, v, 30.0 * np.ones((1, d)), key, [[1.0]], [[1.0]],
                                  rope=(100.0, d)))
    vals = RNG.uniform(-5, 5, (12, 1))
    out = twdialect.evaluate(g.module, {"v": vals})["prev"]
    np.testing.assert_allclose(out[1:], vals[:-1], atol=1e-6)
    ct = lowering.compile(g.module, d=32, d_head=8)
    np.testing.assert_allclose(ct.run({"v": vals})["prev"], out, atol=1e-4)


def test_ranges_stay_the_convex_hull_of_values():
    from twdialect.ranges import value_ranges

    module, ws = _attn_graph((10.0, 4), scale=3.0)
    x, y = RNG.uniform(-2, 2, (30, 3)), RNG.uniform(-2, 2, (30, 2))
    out = twdialect.evaluate(module, {"x": x, "y": y})["o"]
    from twdialect.interp import find_graph

    g = find_graph(module)
    attn = next(op for op in g.block.ops if isinstance(op, AttnOp))
    lo, hi = value_ranges(g)[attn.results[0]]
    assert (out >= lo - 1e-9).all() and (out <= hi + 1e-9).all()


# -- builder, constructor, verifier, text ---------------------------------------------------


def test_builder_forms_and_errors():
    with tw.Graph():
        x = tw.input("x", 2, (-1.0, 1.0))
        e = np.eye(2)
        a = tw.attn(x, x, x, e, e, e, e, rope=(1e4, 2))
        b = tw.attn(x, x, x, e, e, e, e, rope_base=50.0)
        c = tw.attn(x, x, x, e, e, e, e, rope=True)
        p = tw.attn(x, x, x, e, e, e, e)
        for bad, msg in (((1e4, 3), "even"), ((1e4, 4), "at most d_qk=2"), ((1.0, 2), "exceed 1"),
                         ((float("inf"), 2), "finite"), ("fast", "rope must be")):
            with pytest.raises(TwError, match=msg):
                tw.attn(x, x, x, e, e, e, e, rope=bad)
        with pytest.raises(TwError, match="rope_dims needs rope_base"):
            tw.attn(x, x, x, e, e, e, e, rope_dims=2)
        with pytest.raises(TwError, match="not both"):
            tw.attn(x, x, x, e, e, e, e, rope=(10.0, 2), rope_base=10.0)
        with pytest.raises(TwAttributeException, match="rope_dims without rope_base"):
            AttnOp(x, x, x, e, e, e, e, rope_dims=2)
        op = AttnOp(x, x, x, e, e, e, e, mask="full", rope_base=7.0, rope_dims=2)
        for v in (a, b, c, p):
            tw.output(f"o{len(str(v))}_{id(v)}", v)
    assert attn_rope(a.owner) == a.owner.rope == (1e4, 2)
    assert attn_rope(b.owner) == (50.0, 2) and attn_rope(c.owner) == (ROPE_BASE, 2)
    assert attn_rope(p.owner) is None and "rope_base" not in p.owner.properties
    assert op.rope == (7.0, 2) and op.mask_kind == "full"


def test_print_parse_round_trip_keeps_rope():
    module, _ = _attn_graph((10.0, 4), mask="full")
    text = print_module(module)
    assert " mask full rope base 1.000000e+01 dims 4 wq " in text
    assert print_module(parse_module(text)) == text
    assert print_module(parse_module(print_module(module, generic=True))) == text
    plain, _ = _attn_graph(None)
    assert " rope " not in print_module(plain)


# -- compiled model == oracle -------------------------------------------------------------


def _mixed_layer_graph(seed: int, with_full: bool = False):
    """Rotary heads (different bases and dims, partial and full rotation) beside plain causal
    heads reading the same inputs, position-local linears next to them (a tiny MLP width
    pools them into the attention sublayer), then a second rotary layer reading the first."""
    rng = np.random.default_rng(seed)
    settings = [(10.0, 4), None, (ROPE_BASE, 2), (100.0, 2), None]
    with tw.Graph() as g:
        x = tw.input("x", 3, (-2.0, 2.0))
        y = tw.input("y", 2, (-2.0, 2.0))
        outs = []
        for k, rope in enumerate(settings):
            q = x if k < 2 else tw.concat(x, y)
            d_qk = 4 if k == 0 else 3 if rope is None else 2 + 2 * (k % 2)
            mask = "full" if with_full and k == 3 else "causal"
            w = q.type.width.data
            outs.append(tw.attn(q, q, y, rng.normal(size=(w, d_qk)) * 0.8,
                                rng.normal(size=(w, d_qk)) * 0.8, rng.normal(size=(2, 2)),
                                rng.normal(size=(2, 2)), rope=rope, mask=mask))
        lin = [tw.linear(x, rng.normal(size=(3, 2)), rng.normal(size=2)) for _ in range(3)]
        for k, o in enumerate(outs):
            tw.output(f"a{k}", o)
        for k, o in enumerate(lin):
            tw.output(f"l{k}", o)
        second = tw.attn(tw.add(outs[0], lin[0]), outs[1], tw.add(outs[2], lin[1]),
                         rng.normal(size=(2, 4)), rng.normal(size=(2, 4)), np.eye(2), np.eye(2),
                         rope=(1000.0, 4))
        tw.output("second", tw.add(second, tw.linear(outs[4], rng.normal(size=(2, 2)))))
    return g.module




def _compile(module):
    return lowering.compile(module, d=64, d_head=4, d_hidden=4)


@pytest.mark.parametrize("seed", range(4))
def test_compiled_mixed_layers_match_oracle_with_pooled_head_work(seed):
    module = _mixed_layer_graph(seed)
    ct = _compile(module)
    sched = ct.schedule
    tasks = [t for t in sched.tg.tasks if sched.slot[t.tid] >= 0]
    rope_slots = {sched.slot[t.tid] for t in tasks
                  if isinstance(t.op, AttnOp) and attn_rope(t.op) is not None}
    pooled = {sched.slot[t.tid] for t in tasks
              if not isinstance(t.op, AttnOp) and is_attention_slot(sched.slot[t.tid])}
    assert rope_slots & pooled, "no layer holds rotary heads and pooled head work together"
    for s in rope_slots & pooled:  # pooled heads never rotate: only attn ops' heads do
        a = ct.layers[layer_of(s)].attn
        assert 0 < a.n_rope < a.n_heads
    assert ct.rope_heads == ct.stats.rope_heads == sum(la.attn.n_rope for la in ct.layers) > 0
    assert f"rotary heads {ct.rope_heads}" in ct.stats.report()
    for n in (1, 2, 9, 40):
        feeds = sample_inputs(module, n, seed=seed + n)
        assert_close(ct.run(feeds), twdialect.evaluate(module, feeds))


def test_layer_weights_record_each_heads_rope():
    from tw_lowering.materialize import materialize

    ct = _compile(_mixed_layer_graph(0))
    weights = materialize(ct.schedule)[0]
    seen = {(float(b), int(r)) for w in weights for b, r in w.head_rope() if r}
    assert seen == {(10.0, 4), (ROPE_BASE, 2), (100.0, 2), (1000.0, 4)}
    for w in weights:  # per head (base, dims); a plain or pooled head has none
        assert w.head_rope().shape == (w.n_heads, 2)


def test_rotary_heads_beside_full_heads():
    module = _mixed_layer_graph(5, with_full=True)
    ct = _compile(module)
    assert ct.full_heads > 0 and ct.rope_heads > 0
    batch = [sample_inputs(module, n, seed=n) for n in (3, 17, 1, 8)]
    for feeds, got in zip(batch, ct.run_batch(batch)):
        assert_close(got, twdialect.evaluate(module, feeds))


def test_padded_batch_gives_every_sequence_its_own_positions():
    module = _mixed_layer_graph(7)
    ct = _compile(module)
    batch = [sample_inputs(module, n, seed=n) for n in (5, 30, 1, 12)]
    for feeds, got in zip(batch, ct.run_batch(batch)):
        assert_close(got, twdialect.evaluate(module, feeds))


def _feedback_from(full: dict, start: int):
    at = [start]

    def back(_out):
        i = at[0]
        at[0] += 1
        return {k: v[i] for k, v in full.items()}
    return back


@pytest.mark.parametrize("seed", range(3))
def test_generate_with_kv_cache_uses_absolute_positions(seed):
    module = _mixed_layer_graph(seed)
    ct = _compile(module)
    full = sample_inputs(module, 36, seed=seed)
    want = twdialect.evaluate(module, full)
    prompt = {k: v[:7] for k, v in full.items()}
    got = ct.generate(prompt, 29, _feedback_from(full, 7))
    assert_close(got, want)
    oracle = twdialect.generate(module, prompt, 29, _feedback_from(full, 7))
    assert_close(oracle, want, atol=1e-12)


def test_generate_batch_prompts_of_different_lengths():
    module = _mixed_layer_graph(2)
    ct = _compile(module)
    fulls = [sample_inputs(module, 30, seed=s) for s in (1, 2, 3)]
    lengths = (3, 11, 1)
    prompts = [{k: v[:n] for k, v in f.items()} for f, n in zip(fulls, lengths)]
    steps = 12
    backs = [_feedback_from(f, n) for f, n in zip(fulls, lengths)]
    turn = [0]

    def back(outs):  # called once per sequence, in order, at every step
        i = turn[0] % len(backs)
        turn[0] += 1
        return backs[i](outs)

    got = ct.generate_batch(prompts, steps, back)
    for f, n, g in zip(fulls, lengths, got):
        want = twdialect.evaluate(module, {k: v[:n + steps] for k, v in f.items()})
        assert_close(g, want)


def test_decoder_steps_match_whole_sequence_run():
    module = _mixed_layer_graph(4)
    ct = _compile(module)
    full = sample_inputs(module, 300, seed=4)  # past the first cache allocation (256)
    checked = ct.check_batch([{k: v[:5] for k, v in full.items()}], "error", None)
    dec = ct.decoder(1, 400)
    dec.prefill(checked)
    rows = []
    for i in range(5, 300):
        step = ct.check_batch([{k: v[i:i + 1] for k, v in full.items()}], "error", None)
        rows.append(dec.step(step)[0])
    want = twdialect.evaluate(module, full)
    for k in want:
        got = np.concatenate([r[k] for r in rows])
        scale = max(1.0, float(np.abs(want[k]).max()))
        assert np.abs(got - want[k][5:]).max() <= 1e-4 * scale, k


def test_probe_finds_no_divergence_with_rotary_heads():
    from tw_lowering.probe import probe

    module = _mixed_layer_graph(3)
    report = probe(_compile(module), module, sample_inputs(module, 20))
    assert report.first_divergence is None, str(report)


def test_rotary_qk_wider_than_d_head_is_refused():
    module, _ = _attn_graph((10.0, 6), d_qk=6)
    with pytest.raises(TwError, match="query/key width 6 exceeds d_head=4"):
        lowering.compile(module, d=32, d_head=4)
    ct = lowering.compile(module, d=32, d_head=8)
    feeds = sample_inputs(module, 20)
    assert_close(ct.run(feeds), twdialect.evaluate(module, feeds))


# -- passes on random graphs with rotary heads ------------------------------------------------


def test_random_graphs_unchanged_where_rope_is_off():
    for seed in range(6):
        a = print_module(random_graph(seed, 14, full_attn=0.3))
        b = print_module(random_graph(seed, 14, full_attn=0.3, rope=0.0))
        assert a == b and " rope " not in a
    assert any(" rope " in print_module(random_graph(s, 14, library=False, kinds=("attn",),
                                                     rope=0.8)) for s in range(4))


@pytest.mark.parametrize("seed", range(8))
def test_random_graphs_with_rope_compile_to_the_oracle(seed):
    module = random_graph(seed, 18, library=False, rope=0.6, full_attn=0.2)
    ct = lowering.compile(module, d=64, d_head=4)
    for n in (1, 6, 25):
        feeds = sample_inputs(module, n, seed=seed)
        assert_close(ct.run(feeds), twdialect.evaluate(module, feeds))


@pytest.mark.parametrize("spec", ["fuse-linears", "horizontal-fuse", "cse,dce", "canonicalize",
                                  "form-mlps,fuse-linears,balance-sums"])
@pytest.mark.parametrize("seed", range(6))
def test_passes_keep_the_oracle_on_rotary_graphs(spec, seed):
    module = random_graph(200 + seed, 16, library=False, rope=0.7)
    before = [attn_rope(op) for op in module.walk() if isinstance(op, AttnOp)]
    feeds = sample_inputs(module, 12, seed=seed)
    run_and_compare(module, spec, 12, seed, inputs=feeds)
    after = {attn_rope(op) for op in module.walk() if isinstance(op, AttnOp)}
    assert after <= set(before)  # no rotation invented or changed


# (seeds whose graphs hold a rotary head and whose library ops decompose at the default tolerance)
@pytest.mark.parametrize("seed", [303, 306, 311, 315, 319, 321])
def test_random_rotary_graphs_with_library_ops_through_the_default_pipeline(seed):
    from twdialect.contracts import contract_mask

    module = random_graph(seed, 16, library=True, rope=0.6)
    assert " rope " in print_module(module)
    feeds = sample_inputs(module, 10, seed=seed)
    want = twdialect.evaluate(module, feeds)
    keep = contract_mask(module, feeds)  # (inside the library ops' contracts)
    ct = lowering.compile(module, d=128, d_head=8, pipeline="default")
    got = ct.run(feeds)
    for k in want:
        scale = max(1.0, float(np.abs(want[k]).max()))
        assert np.abs(got[k] - want[k])[keep].max(initial=0.0) <= 1e-4 * scale


def test_fuse_linears_keeps_a_rotary_heads_key_bias():
    rng = np.random.default_rng(0)
    with tw.Graph() as g:
        x = tw.input("x", 2, (-2.0, 2.0))
        v = tw.input("v", 1, (-2.0, 2.0))
        k = tw.linear(x, rng.normal(size=(2, 2)), [3.0, -2.0])
        tw.output("o", tw.attn(x, k, v, rng.normal(size=(2, 2)), rng.normal(size=(2, 2)),
                               [[1.0]], [[1.0]], rope=(10.0, 2)))
    feeds = sample_inputs(g.module, 15)
    want = twdialect.evaluate(g.module, feeds)
    run_pipeline(g.module, "fuse-linears")
    assert any(isinstance(op, tw_linear_type()) for op in g.module.walk())
    assert_same(want, twdialect.evaluate(g.module, feeds), rtol=1e-6)


def tw_linear_type():
    from twdialect.dialect import LinearOp

    return LinearOp


# -- exports ----------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["transformers", "tlens", "gguf"])
def test_stock_exports_refuse_rotary_heads(fmt, tmp_path):
    module = _mixed_layer_graph(0)
    ct = _compile(module)
    with pytest.raises(ExportError, match=rf"export_{fmt}: the model has \d+ rotary attention "
                                          r"heads \(tw.attn rope\).*no rotary"):
        export(ct, tmp_path / "m", fmt)
    from tw_lowering.export.stock import StockPlan

    with pytest.raises(ExportError, match="rotary"):
        StockPlan(ct, fmt=fmt)


def test_onnx_export_carries_rotary_heads(tmp_path):
    pytest.importorskip("onnxruntime")
    from tw_lowering.export.onnx import export_onnx, load_onnx

    module = _mixed_layer_graph(1)
    ct = _compile(module)
    export_onnx(ct, tmp_path / "m")
    om = load_onnx(tmp_path / "m")
    full = sample_inputs(module, 24, seed=3)
    want = twdialect.evaluate(module, full)
    assert_close(om.run(full), want)
    prompt = {k: v[:4] for k, v in full.items()}
    assert_close(om.generate(prompt, 20, _feedback_from(full, 4)), want)
