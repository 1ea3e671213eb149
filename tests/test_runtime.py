"""The batched runtime: run_batch and generate_batch against run, the static-cache decoder,
the stock layout of the trimmed weights, and torch.compile(fullgraph=True) over both the
forward pass and the decode step (CUDA graphs: tests/test_cuda.py)."""

import numpy as np
import pytest
import torch

from tw_lowering import compile
from tw_lowering.decode import DecodeError, Decoder, bucket_sizes
from twdialect import evaluate
from twdialect import ops as tw
from twdialect.inputs import EvaluationError
from twdialect.random_graphs import random_graph, sample_inputs


def _close(got, want):
    for k in want:
        scale = max(1.0, float(np.abs(want[k]).max()))
        np.testing.assert_allclose(got[k], want[k], atol=1e-5 * scale, rtol=0)


@pytest.fixture(scope="module")
def model():
    module = random_graph(7, 40, library=False, embedding=True)
    return module, compile(module, d=256, d_head=8, d_hidden=512)


def _feeds(module, n, seed):
    return sample_inputs(module, n, seed)


def test_run_batch_of_different_lengths_matches_run_per_sequence(model):
    module, ct = model
    seqs = [_feeds(module, n, seed) for seed, n in enumerate((5, 1, 9, 3))]
    got = ct.run_batch(seqs)
    for feeds, out in zip(seqs, got):
        n = len(next(iter(feeds.values())))
        assert all(len(v) == n for v in out.values())
        _close(out, ct.run(feeds))
        _close(out, evaluate(module, feeds))


def test_generate_batch_of_different_prompts_matches_run(model):
    module, ct = model
    full = [_feeds(module, 10, seed) for seed in range(3)]
    prompts = [{k: v[:n] for k, v in f.items()} for f, n in zip(full, (2, 6, 4))]
    steps = 4

    def feedback_of(i):
        at = iter(range(len(next(iter(prompts[i].values()))), 10))

        def fb(_last):
            p = next(at)
            return {k: v[p] for k, v in full[i].items()}
        return fb

    # one feedback per sequence: the batch calls each on its own sequence's outputs
    fbs = [feedback_of(i) for i in range(3)]
    calls = iter(range(10 ** 6))

    def feedback(last):  # called once per sequence, in batch order, every step
        return fbs[next(calls) % 3](last)

    got = ct.generate_batch(prompts, steps, feedback)
    for i, out in enumerate(got):
        n = len(next(iter(prompts[i].values()))) + steps
        want = ct.run({k: v[:n] for k, v in full[i].items()})
        _close(out, want)


def test_generate_equals_run_and_generate_batch_of_one(model):
    module, ct = model
    feeds = _feeds(module, 8, 11)
    it = iter(range(3, 8))

    def fb(_last):
        i = next(it)
        return {k: v[i] for k, v in feeds.items()}

    got = ct.generate({k: v[:3] for k, v in feeds.items()}, 5, fb)
    _close(got, ct.run(feeds))


def test_decoder_refuses_what_it_was_not_built_for(model):
    module, ct = model
    feeds = ct.check_batch([_feeds(module, 4, 0)])
    with pytest.raises(DecodeError, match="batch of 2, got 1"):
        Decoder(ct, 2, 8).prefill(feeds)
    with pytest.raises(DecodeError, match="exceeds the capacity 3"):
        Decoder(ct, 1, 3).prefill(feeds)
    dec = Decoder(ct, 1, 4)
    dec.prefill(feeds)
    one = ct.check_batch([_feeds(module, 1, 1)])
    with pytest.raises(DecodeError, match="it is full"):
        dec.step(one)
    with pytest.raises(DecodeError, match="must be >= 1"):
        Decoder(ct, 0, 4)
    for bad in ([], "xy", {"x": 1}, None):
        with pytest.raises(EvaluationError, match="non-empty list of input mappings"):
            ct.run_batch(bad)
    with pytest.raises(EvaluationError, match="non-empty list of input mappings"):
        ct.generate_batch((), 1, lambda o: {})


def test_bucket_sizes_cover_the_capacity_with_at_most_six_graphs():
    assert bucket_sizes(2048) == [64, 128, 256, 512, 1024, 2048]
    assert bucket_sizes(1 << 16)[-1] == 1 << 16 and len(bucket_sizes(1 << 16)) == 6
    assert bucket_sizes(10) == [10]
    for cap in (1, 63, 64, 65, 1000, 4097):
        sizes = bucket_sizes(cap)
        assert sizes[-1] == cap and sizes == sorted(set(sizes)) and len(sizes) <= 6


def test_dense_weights_are_the_stock_layout_of_the_same_model(model):
    """A plain dense transformer built from `dense_weights` computes what the runtime does."""
    module, ct = model
    x0 = ct.embed(_feeds(module, 6, 3))
    x = x0[0].clone()
    n = x.shape[0]
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    for layer in ct.layers:
        w = layer.dense_weights()
        h = w["wq"].shape[0] // ct.machine.d_head
        if h:
            def split(t):
                return t.view(n, h, -1).transpose(0, 1)
            q, k, v = split(x @ w["wq"].T), split(x @ w["wk"].T), split(x @ w["wv"].T)
            p = torch.softmax((q @ k.transpose(1, 2)).masked_fill(~causal, float("-inf")), -1)
            x = x + (p @ v).transpose(0, 1).reshape(n, -1) @ w["wo"].T + w["bo"]
        else:
            x = x + w["bo"]
        x = x + torch.relu(x @ w["w1"].T + w["b1"]) @ w["w2"].T + w["b2"]
    want = ct.forward(x0)[0]
    torch.testing.assert_close(x, want, atol=1e-4 * max(1.0, float(want.abs().max())), rtol=0)
    assert ct.stored_params() < ct.allocated_params()


def test_forward_compiles_with_fullgraph(model):
    module, ct = model
    x0 = ct.embed(_feeds(module, 5, 2))
    torch._dynamo.reset()
    compiled = torch.compile(ct, fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(compiled(x0), ct.forward(x0), atol=1e-5, rtol=0)


def test_decode_step_compiles_with_fullgraph_and_does_not_recompile(model):
    module, ct = model
    feeds = _feeds(module, 12, 4)
    torch._dynamo.reset()
    from torch._dynamo.utils import counters

    counters.clear()
    dec = Decoder(ct, 1, 12, compile="aot_eager")
    rows = [dec.prefill(ct.check_batch([{k: v[:3] for k, v in feeds.items()}]))[0]]
    for _ in range(9):
        rows.append(dec.step([_one(ct, feeds, dec)])[0])
    got = {k: np.concatenate([r[k] for r in rows]) for k in rows[0]}
    _close(got, ct.run(feeds))
    assert counters["stats"]["unique_graphs"] == 1  # one bucket (capacity 12): one graph


def _one(ct, feeds, dec):
    from twdialect.inputs import check_feedback

    p = int(dec.positions[0])
    return check_feedback(ct.contract, {k: v[p] for k, v in feeds.items()}, p)


def test_a_graph_without_attention_or_inputs_runs_batched():
    with tw.Graph("main") as g:
        tw.output("y", tw.relu(tw.linear(tw.pos_encoding(2, 32), [[1.0], [-0.5]], [0.25])))
    ct = compile(g.module, d=16, d_head=4, d_hidden=16)
    a, b = ct.run_batch([{}, {}], n_positions=5)
    np.testing.assert_allclose(a["y"], evaluate(g.module, {}, n_positions=5)["y"], atol=1e-6)
    np.testing.assert_array_equal(a["y"], b["y"])


def test_the_cache_grows_as_the_sequences_do():
    """A decoder built for many positions allocates FIRST_ALLOCATION and doubles as steps
    reach it (a long `steps` costs memory only as far as generation gets)."""
    from tw_lowering.decode import FIRST_ALLOCATION

    with tw.Graph("main") as g:  # (no pos_encoding: its max_len would bound the positions)
        x = tw.input("x", 2, value_range=(-1, 1))
        a = tw.attn(x, x, x, np.eye(2), np.eye(2), np.eye(2), [[1.0], [-1.0]])
        tw.output("y", tw.relu(tw.add(a, tw.slice(x, 0, 1))))
    module = g.module
    ct = compile(module, d=32, d_head=4, d_hidden=32)
    n = FIRST_ALLOCATION + 40
    feeds = {"x": np.random.default_rng(9).uniform(-1, 1, (n, 2))}
    dec = Decoder(ct, 1, 10 ** 6)
    assert dec.allocated == FIRST_ALLOCATION
    rows = [dec.prefill(ct.check_batch([{k: v[:3] for k, v in feeds.items()}]))[0]]
    for _ in range(n - 3):
        rows.append(dec.step([_one(ct, feeds, dec)])[0])
    assert dec.allocated == 2 * FIRST_ALLOCATION
    got = {k: np.concatenate([r[k] for r in rows]) for k in rows[0]}
    _close(got, ct.run(feeds))
