"""`tw.attn` mask kinds: causal (the default) and full (bidirectional, encoder-style).

The oracle against a numpy reference; the compiled model against the oracle on graphs mixing
causal and full heads in one layer (pooled position-local head work included), in padded
batches too; step-by-step generation and the stock exports refuse full heads; passes keep the
mask (horizontal-fuse never merges two kinds) and keep the oracle's values on random graphs
with full heads.
"""

from __future__ import annotations

import numpy as np
import pytest

import twdialect
import tw_lowering as lowering
from pass_checks import assert_same, run_and_compare
from model_checks import assert_close
from tw_lowering.export import ExportError, export
from tw_lowering.export.onnx import export_onnx
from tw_lowering.export.stock import StockPlan
from tw_passes import run_pipeline
from twdialect import ops as tw
from twdialect import parse_module, print_module
from twdialect.analysis import is_attention_slot, layer_of
from twdialect.contracts import contract_mask
from twdialect.dialect import AttnOp, LinearOp, TwAttributeException, attn_mask
from twdialect.errors import TwError
from twdialect.interp import EvaluationError, find_graph
from twdialect.random_graphs import random_graph, sample_inputs

RNG = np.random.default_rng(7)


def _softmax_rows(logits):
    logits = logits - logits.max(axis=1, keepdims=True)
    p = np.exp(logits)
    return p / p.sum(axis=1, keepdims=True)


def _reference(q, k, v, wq, wk, wv, wo, full: bool):
    """Plain numpy attention, every query over every key (full) or keys j <= i (causal)."""
    n = q.shape[0]
    logits = (q @ wq) @ (k @ wk).T
    if not full:
        logits = np.where(np.tril(np.ones((n, n), bool)), logits, -np.inf)
    return _softmax_rows(logits) @ (v @ wv) @ wo


def _attn_graph(mask: str):
    # (the weights as the graph stores them: float32)
    wq, wk, wv, wo = (RNG.normal(size=s).astype(np.float32).astype(np.float64)
                      for s in ((3, 2), (3, 2), (2, 3), (3, 2)))
    with tw.Graph() as g:
        x = tw.input("x", 3, (-2.0, 2.0))
        y = tw.input("y", 2, (-2.0, 2.0))
        tw.output("o", tw.attn(x, x, y, wq, wk, wv, wo, mask=mask))
    return g.module, (wq, wk, wv, wo)


@pytest.mark.parametrize("mask", ["causal", "full"])
def test_oracle_matches_numpy_reference(mask):
    module, ws = _attn_graph(mask)
    x, y = RNG.uniform(-2, 2, (9, 3)), RNG.uniform(-2, 2, (9, 2))
    got = twdialect.evaluate(module, {"x": x, "y": y})["o"]
    want = _reference(x, x, y, *ws, full=mask == "full")
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_full_mask_sees_later_positions_and_causal_does_not():
    module_f, _ = _attn_graph("full")
    module_c, _ = _attn_graph("causal")
    x, y = RNG.uniform(-2, 2, (6, 3)), RNG.uniform(-2, 2, (6, 2))
    y2 = y.copy()
    y2[-1] = -y2[-1]
    for module, changes in ((module_f, True), (module_c, False)):
        a = twdialect.evaluate(module, {"x": x, "y": y})["o"]
        b = twdialect.evaluate(module, {"x": x, "y": y2})["o"]
        assert (not np.allclose(a[0], b[0])) == changes


def test_non_finite_value_reaches_every_full_output_but_no_earlier_causal_one():
    module_f, _ = _attn_graph("full")
    module_c, _ = _attn_graph("causal")
    x, y = RNG.uniform(-2, 2, (5, 3)), RNG.uniform(-2, 2, (5, 2))
    y[-1, 0] = np.nan
    feeds = {"x": x, "y": y}
    full = twdialect.evaluate(module_f, feeds, on_out_of_range="unchecked")["o"]
    causal = twdialect.evaluate(module_c, feeds, on_out_of_range="unchecked")["o"]
    assert np.isnan(full).any(axis=1).all()
    assert np.isfinite(causal[:-1]).all() and np.isnan(causal[-1]).any()
    for module, want in ((module_f, full), (module_c, causal)):
        ct = lowering.compile(module, d=32, d_head=4)
        got = ct.run(feeds, on_out_of_range="unchecked")["o"]
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_allclose(got[np.isfinite(want)], want[np.isfinite(want)], atol=1e-4)


def test_builder_constructor_and_verifier_name_the_kinds():
    with tw.Graph():
        x = tw.input("x", 2, (-1.0, 1.0))
        with pytest.raises(TwError, match=r"tw\.attn: mask must be one of 'causal', 'full'"):
            tw.attn(x, x, x, np.eye(2), np.eye(2), np.eye(2), np.eye(2), mask="bidirectional")
        with pytest.raises(TwAttributeException, match="mask must be one of"):
            AttnOp(x, x, x, np.eye(2), np.eye(2), np.eye(2), np.eye(2), mask="encoder")
        full = tw.attn(x, x, x, np.eye(2), np.eye(2), np.eye(2), np.eye(2), mask="full")
        causal = tw.attn(x, x, x, np.eye(2), np.eye(2), np.eye(2), np.eye(2))
        tw.output("f", full)
        tw.output("c", causal)
    assert attn_mask(full.owner) == full.owner.mask_kind == "full"
    assert causal.owner.mask_kind == "causal" and "mask" not in causal.owner.properties


def test_print_parse_round_trip_keeps_the_mask():
    module, _ = _attn_graph("full")
    text = print_module(module)
    assert " mask full wq " in text
    again = parse_module(text)
    assert print_module(again) == text
    generic = parse_module(print_module(module, generic=True))
    assert print_module(generic) == text


# -- compiled model == oracle -------------------------------------------------------------


def _mixed_layer_graph(seed: int):
    """Causal and full heads reading the same layer's inputs, with position-local linears (and
    adds) next to them: a tiny MLP width sends those into the attention sublayer as pooled
    head work, beside the full heads."""
    rng = np.random.default_rng(seed)
    with tw.Graph() as g:
        x = tw.input("x", 3, (-2.0, 2.0))
        y = tw.input("y", 2, (-2.0, 2.0))
        outs = []
        for k in range(4):
            mask = "full" if k % 2 == 0 else "causal"
            q = x if k < 2 else tw.concat(x, y)
            outs.append(tw.attn(q, q, y, rng.normal(size=(q.type.width.data, 2)) * 0.7,
                                rng.normal(size=(q.type.width.data, 2)) * 0.7,
                                rng.normal(size=(2, 2)), rng.normal(size=(2, 2)), mask=mask))
        lin = [tw.linear(x, rng.normal(size=(3, 2)), rng.normal(size=2)) for _ in range(3)]
        for k, o in enumerate(outs):
            tw.output(f"a{k}", o)
        for k, o in enumerate(lin):
            tw.output(f"l{k}", o)
        second = tw.attn(tw.add(outs[0], lin[0]), outs[1], tw.add(outs[2], lin[1]),
                         rng.normal(size=(2, 2)), rng.normal(size=(2, 2)), np.eye(2), np.eye(2),
                         mask="full")
        tw.output("second", tw.add(second, tw.linear(outs[3], rng.normal(size=(2, 2)))))
    return g.module




@pytest.mark.parametrize("seed", range(4))
def test_compiled_mixed_layers_match_oracle_with_pooled_head_work(seed):
    module = _mixed_layer_graph(seed)
    ct = lowering.compile(module, d=64, d_head=4, d_hidden=4)
    sched = ct.schedule
    tasks = [t for t in sched.tg.tasks if sched.slot[t.tid] >= 0]
    full_slots = {sched.slot[t.tid] for t in tasks
                  if isinstance(t.op, AttnOp) and attn_mask(t.op) == "full"}
    pooled = {sched.slot[t.tid] for t in tasks
              if not isinstance(t.op, AttnOp) and is_attention_slot(sched.slot[t.tid])}
    assert full_slots & pooled, "no layer holds full heads and pooled head work together"
    for s in full_slots & pooled:  # pooled heads stay causal: only attn ops' heads are full
        w = ct.layers[layer_of(s)].attn
        assert 0 < w.n_full < w.n_heads
    assert ct.stats.full_heads == sum(layer.attn.n_full for layer in ct.layers) > 0
    for n in (1, 2, 7, 13):
        feeds = sample_inputs(module, n, seed=seed + n)
        assert_close(ct.run(feeds), twdialect.evaluate(module, feeds))


def test_padded_batch_keeps_full_heads_off_the_padding():
    module = _mixed_layer_graph(11)
    ct = lowering.compile(module, d=64, d_head=4, d_hidden=4)
    batch = [sample_inputs(module, n, seed=n) for n in (3, 9, 1, 6)]
    for feeds, got in zip(batch, ct.run_batch(batch)):
        assert_close(got, twdialect.evaluate(module, feeds))


@pytest.mark.parametrize("seed", range(8))
def test_random_graphs_with_full_heads_compile_to_the_oracle(seed):
    module = random_graph(seed, 18, library=False, full_attn=0.5)
    ct = lowering.compile(module, d=64, d_head=4)
    for n in (1, 5, 12):
        feeds = sample_inputs(module, n, seed=seed)
        assert_close(ct.run(feeds), twdialect.evaluate(module, feeds))


@pytest.mark.parametrize("seed", range(4))
def test_random_graphs_with_full_heads_and_library_ops_through_the_default_pipeline(seed):
    module = random_graph(100 + seed, 16, library=True, full_attn=0.5)
    feeds = sample_inputs(module, 8, seed=seed)
    want = twdialect.evaluate(module, feeds)
    ct = lowering.compile(module, d=128, d_head=8, pipeline="default")
    keep = contract_mask(module, feeds)
    got = ct.run(feeds)
    for k in want:  # inside the library ops' contracts (a full head spreads a stray one)
        scale = max(1.0, float(np.abs(want[k]).max()))
        assert np.abs(got[k] - want[k])[keep].max(initial=0.0) <= 1e-4 * scale


def test_probe_finds_no_divergence_with_full_heads():
    from tw_lowering.probe import probe

    module = _mixed_layer_graph(3)
    ct = lowering.compile(module, d=64, d_head=4, d_hidden=4)
    report = probe(ct, module, sample_inputs(module, 10))
    assert report.first_divergence is None, str(report)


def test_contract_mask_spreads_through_full_heads_to_every_position():
    with tw.Graph() as g:
        x = tw.input("x", 1, (-2.0, 2.0))
        c = tw.compare(x, 0.0, ramp=0.5)
        tw.output("f", tw.attn(x, x, c, [[1.0]], [[1.0]], [[1.0]], [[1.0]], mask="full"))
    x = np.array([[1.0], [1.0], [-0.25], [1.0]])  # position 2 sits in the ramp
    assert not contract_mask(g.module, {"x": x}).any()
    x[2] = -1.0
    assert contract_mask(g.module, {"x": x}).all()


# -- running step by step is refused --------------------------------------------------------


def test_generate_refuses_full_heads_everywhere():
    module, _ = _attn_graph("full")
    feeds = {"x": np.zeros((2, 3)), "y": np.zeros((2, 2))}
    back = lambda out: {"x": np.zeros(3), "y": np.zeros(2)}  # noqa: E731
    with pytest.raises(EvaluationError, match="full attention mask.*whole sequences"):
        twdialect.generate(module, feeds, 2, back)
    ct = lowering.compile(module, d=32, d_head=4)
    for call in (lambda: ct.generate(feeds, 2, back),
                 lambda: ct.generate_batch([feeds], 1, back),
                 lambda: ct.decoder(1, 8)):
        with pytest.raises(EvaluationError, match="full-mask attention head.*run / run_batch"):
            call()
    assert twdialect.evaluate(module, feeds)["o"].shape == (2, 2)  # whole sequences run
    assert ct.run(feeds)["o"].shape == (2, 2)


def test_token_program_generation_refuses_full_heads():
    from tw_examples.token_program import TokenProgram, generate, matches_reference

    with tw.Graph() as g:
        tok = tw.embedding("tokens", np.eye(3))
        tw.output("logits", tw.attn(tok, tok, tok, np.eye(3), np.eye(3), np.eye(3), np.eye(3),
                                    mask="full"))
    program = TokenProgram("enc", "ab.", ".", g.module, 8, 2, lambda p: p, lambda p: "a",
                           lambda rng: "a", None, None)
    with pytest.raises(EvaluationError, match="enc: generate: .*full attention mask"):
        generate(program, "ab")
    with pytest.raises(EvaluationError, match="enc: matches_reference: .*full attention mask"):
        matches_reference(program, "ab")


# -- exports are causal decoders --------------------------------------------------------


def _token_model(mask: str):
    with tw.Graph() as g:
        tok = tw.embedding("tokens", np.eye(4))
        pos = tw.pos_encoding(2, max_len=16)
        h = tw.attn(tok, tok, tok, np.eye(4), np.eye(4), np.eye(4), np.eye(4), mask=mask)
        tw.output("logits", tw.add(h, tw.linear(pos, np.ones((2, 4)) * 0.01)))
    return g.module, lowering.compile(g.module, d=32, d_head=4)


@pytest.mark.parametrize("fmt", ["transformers", "tlens", "onnx", "gguf"])
def test_exports_refuse_full_heads(fmt, tmp_path):
    _, ct = _token_model("full")
    with pytest.raises(ExportError, match=f"export_{fmt}: the model has 1 full-mask attention "
                                          "head.*causal decoder"):
        export(ct, tmp_path / fmt, fmt)
    assert not (tmp_path / fmt).exists()


def test_export_writers_refuse_full_heads_when_called_directly(tmp_path):
    _, ct = _token_model("full")
    with pytest.raises(ExportError, match="export_onnx: .*full-mask"):
        export_onnx(ct, tmp_path / "m")
    with pytest.raises(ExportError, match="full-mask"):
        StockPlan(ct)
    _, causal = _token_model("causal")
    StockPlan(causal)  # (the causal twin is fine)


# -- passes keep the mask ------------------------------------------------------------------


def test_horizontal_fuse_does_not_merge_different_masks():
    with tw.Graph() as g:
        k = tw.input("k", 2, (-1.0, 1.0))
        v = tw.input("v", 1, (-1.0, 1.0))
        w = tw.input("w", 1, (-1.0, 1.0))
        wq, wk = [[1.0], [0.0]], [[0.0], [1.0]]
        tw.output("c", tw.attn(k, k, v, wq, wk, [[1.0]], [[2.0]]))
        tw.output("f", tw.attn(k, k, w, wq, wk, [[3.0]], [[1.0]], mask="full"))
    module = g.module
    run_and_compare(module, "horizontal-fuse", 6)
    masks = sorted(attn_mask(op) for op in find_graph(module).block.ops
                   if isinstance(op, AttnOp))
    assert masks == ["causal", "full"]


def test_fuse_linears_keeps_the_mask_when_folding_into_attention():
    with tw.Graph() as g:
        x = tw.input("x", 2, (-1.0, 1.0))
        q = tw.linear(x, [[1.0, 0.5], [0.0, 1.0]])
        tw.output("f", tw.attn(q, x, x, np.eye(2), np.eye(2), np.eye(2), np.eye(2),
                               mask="full"))
    module = g.module
    run_and_compare(module, "fuse-linears", 7)
    ops = list(find_graph(module).block.ops)
    assert not any(isinstance(op, LinearOp) for op in ops)
    assert [attn_mask(op) for op in ops if isinstance(op, AttnOp)] == ["full"]


PASSES = ["canonicalize", "cse", "dce", "fuse-linears", "horizontal-fuse", "form-mlps",
          "balance-sums", "default"]


@pytest.mark.parametrize("spec", PASSES)
@pytest.mark.parametrize("seed", range(5))
def test_passes_keep_the_oracle_on_graphs_with_full_heads(spec, seed):
    module = random_graph(200 + seed, 20, library=False, full_attn=0.6)
    n_full = sum(1 for op in find_graph(module).block.ops
                 if isinstance(op, AttnOp) and attn_mask(op) == "full")
    feeds = sample_inputs(module, 9, seed=seed)
    before = twdialect.evaluate(module, feeds)
    if spec == "default":
        from tw_passes.optimize import DEFAULT_PIPELINE

        run_pipeline(module, DEFAULT_PIPELINE)
    else:
        run_pipeline(module, spec)
    module.verify()
    assert_same(before, twdialect.evaluate(module, feeds))
    if n_full and spec not in ("default", "horizontal-fuse", "canonicalize", "cse", "dce"):
        assert any(isinstance(op, AttnOp) and attn_mask(op) == "full"
                   for op in find_graph(module).block.ops)
