"""`tw.pos_table`: a per-position table given by the graph (row i at position i).

Oracle, value ranges and integrality; the compiled model (run, padded batches, KV-cache
generation: positions come from the model, the host feeds back only its own inputs) against
the oracle; sequences longer than the table refused by oracle and model alike; exports carry
the table in the stock position embedding.
"""

from __future__ import annotations

import numpy as np
import pytest

import twdialect
import tw_lowering as lowering
from pass_checks import run_and_compare
from model_checks import assert_close, onnx_round_trip
from tw_lowering.export.stock import StockPlan
from twdialect import ops as tw
from twdialect.dialect import PosTableOp
from twdialect.errors import TwError
from twdialect.inputs import InputContract
from twdialect.interp import EvaluationError, find_graph
from twdialect.random_graphs import random_graph, sample_inputs
from twdialect.ranges import integer_components, value_ranges

L = 12


def _table(rng, width: int = 3) -> np.ndarray:
    t = np.round(rng.uniform(-2, 2, (L, width)), 3)
    t[:, 0] = np.arange(L)  # a counter column (integer)
    return t


def _graph(seed: int = 0):
    """A token input, a one-hot position table and a sin/cos table with a counter; position
    reads and position-dependent mixing of the token."""
    rng = np.random.default_rng(seed)
    with tw.Graph() as g:
        tok = tw.embedding("tokens", np.round(rng.uniform(-1, 1, (5, 3)), 3))
        onehot = tw.pos_table(np.eye(L))
        trig = tw.pos_table(_table(rng))
        mix = tw.linear(tw.concat(tok, trig), rng.normal(size=(6, 2)) * 0.3)
        prev = tw.attn(onehot, onehot, tok, np.eye(L) * 20.0, np.roll(np.eye(L), 1, axis=1),
                       np.eye(3), np.eye(3))
        tw.output("mix", tw.add(mix, tw.linear(prev, rng.normal(size=(3, 2)) * 0.3)))
        tw.output("trig", trig)
        tw.output("onehot", onehot)
    return g.module


def test_oracle_reads_row_i_at_position_i():
    module = _graph()
    ops = [op for op in find_graph(module).block.ops if isinstance(op, PosTableOp)]
    out = twdialect.evaluate(module, {"tokens": np.array([0, 3, 1, 4])})
    np.testing.assert_array_equal(out["onehot"], np.eye(L)[:4])
    np.testing.assert_array_equal(out["trig"], np.asarray(
        np.frombuffer(ops[1].table.data.data, "<f4").reshape(L, 3)[:4], np.float64))


def test_ranges_are_the_tables_columns_and_integrality_the_integer_columns():
    module = _graph()
    graph = find_graph(module)
    ops = [op for op in graph.block.ops if isinstance(op, PosTableOp)]
    boxes, ints = value_ranges(module), integer_components(module)
    onehot, trig = (op.results[0] for op in ops)
    np.testing.assert_array_equal(boxes[onehot][0], np.zeros(L))
    np.testing.assert_array_equal(boxes[onehot][1], np.ones(L))
    assert boxes[trig][0][0] == 0 and boxes[trig][1][0] == L - 1
    assert ints[onehot].all()
    assert list(ints[trig]) == [True, False, False]


def test_builder_checks_the_table():
    with tw.Graph():
        with pytest.raises(TwError, match="tw.pos_table: table must be 2-D"):
            tw.pos_table(np.arange(4.0))
        with pytest.raises(TwError, match="tw.pos_table: table"):
            tw.pos_table(np.array([[1.0, np.nan]]))
        v = tw.pos_table(np.ones((3, 2)))
        tw.output("p", v)
    assert v.type.width.data == 2 and v.owner.max_len == 3


def test_contract_refuses_a_sequence_longer_than_the_table():
    module = _graph()
    contract = InputContract.of(find_graph(module))
    assert contract.table_len == L and contract.longest == L
    ct = lowering.compile(module, d=128, d_head=16)
    long = {"tokens": np.zeros(L + 1, np.int64)}
    for run in (lambda: twdialect.evaluate(module, long),
                lambda: twdialect.evaluate(module, long, on_out_of_range="unchecked"),
                lambda: ct.run(long), lambda: ct.run(long, on_out_of_range="unchecked")):
        with pytest.raises(EvaluationError, match=rf"position {L} is beyond the graph's "
                                                  r"tw.pos_table, which has rows for positions"):
            run()
    fine = {"tokens": np.zeros(L, np.int64)}
    assert ct.run(fine)["mix"].shape == (L, 2)




@pytest.mark.parametrize("seed", range(3))
def test_compiled_matches_oracle(seed):
    module = _graph(seed)
    ct = lowering.compile(module, d=128, d_head=16)
    rng = np.random.default_rng(seed)
    batch = [{"tokens": rng.integers(0, 5, n)} for n in (1, 4, L)]
    for feeds, got in zip(batch, ct.run_batch(batch)):
        assert_close(got, twdialect.evaluate(module, feeds))
    assert sum(s.kind == "pos_table" for s in ct.sources) == 2


@pytest.mark.parametrize("seed", range(6))
def test_random_graphs_with_a_position_table(seed):
    module = random_graph(300 + seed, 16, library=False, pos_table=True, full_attn=0.3)
    assert any(isinstance(op, PosTableOp) for op in find_graph(module).block.ops)
    ct = lowering.compile(module, d=64, d_head=4)
    for n in (1, 9, 64):
        feeds = sample_inputs(module, n, seed=seed)
        assert_close(ct.run(feeds), twdialect.evaluate(module, feeds))
    with pytest.raises(EvaluationError, match="beyond the graph's tw.pos_(table|encoding)"):
        ct.run(sample_inputs(module, 65, seed=seed))


@pytest.mark.parametrize("spec", ["canonicalize", "cse", "fuse-linears", "horizontal-fuse",
                                  "form-mlps"])
def test_passes_keep_the_oracle_with_a_position_table(spec):
    for seed in range(4):
        run_and_compare(random_graph(400 + seed, 16, library=False, pos_table=True), spec, 10)


def test_generation_reads_positions_from_the_model():
    """The feedback returns only the token; every step's position rows come from the table,
    and the KV-cache decoder matches the oracle's generate (and refuses to run past L)."""
    module = _graph(1)
    ct = lowering.compile(module, d=128, d_head=16)

    def feedback(out):
        return {"tokens": int(np.argmax(out["mix"])) + 2}

    prompt = {"tokens": np.array([1, 0, 3])}
    want = twdialect.generate(module, prompt, 6, feedback)
    got = ct.generate(prompt, 6, feedback)
    assert_close(got, want)
    np.testing.assert_array_equal(got["onehot"], np.eye(L)[:9])
    batch = ct.generate_batch([prompt, {"tokens": np.array([4])}], 4, feedback)
    assert_close(batch[0], twdialect.generate(module, prompt, 4, feedback))
    assert_close(batch[1], twdialect.generate(module, {"tokens": np.array([4])}, 4, feedback))
    for run in (lambda: twdialect.generate(module, prompt, L, feedback),
                lambda: ct.generate(prompt, L, feedback)):
        with pytest.raises(EvaluationError, match="beyond the graph's tw.pos_table"):
            run()


# -- exports: the table rides in the position embedding -------------------------------------


def _token_graph():
    rng = np.random.default_rng(5)
    with tw.Graph() as g:
        tok = tw.embedding("tokens", np.eye(4))
        table = _table(rng, 3)
        table[:, 0] /= L
        p = tw.pos_table(table)
        h = tw.attn(tok, tok, tok, np.eye(4) * 3, np.eye(4), np.eye(4), np.eye(4))
        tw.output("logits", tw.add(h, tw.linear(p, rng.normal(size=(3, 4)) * 0.5)))
    return g.module


def test_stock_plan_puts_the_table_in_the_position_embedding():
    module = _token_graph()
    ct = lowering.compile(module, d=32, d_head=4)
    plan = StockPlan(ct)
    assert plan.geometry.n_ctx == L
    slot = next(s for s in ct.sources if s.kind == "pos_table")
    rows = plan.positions()[:, plan.export_col[slot.cols]]
    np.testing.assert_array_equal(rows, slot.table)
    with pytest.raises(TwError, match=f"n_positions {L + 1} is beyond the graph's tw.pos_table"):
        StockPlan(ct, n_ctx=L + 1)


def test_onnx_export_carries_the_table(tmp_path):
    pytest.importorskip("onnxruntime")
    module = _token_graph()
    ct = lowering.compile(module, d=32, d_head=4)
    feeds = {"tokens": np.array([0, 2, 1, 3, 3, 1])}
    model = onnx_round_trip(ct, module, feeds, tmp_path / "m")
    with pytest.raises(EvaluationError, match="beyond the graph's tw.pos_table"):
        model.run({"tokens": np.zeros(L + 1, np.int64)})


def test_transformers_export_carries_the_table(tmp_path):
    pytest.importorskip("transformers")
    import torch

    from tw_lowering.export import export
    from tw_lowering.export.hf import load_transformers

    module = _token_graph()
    ct = lowering.compile(module, d=32, d_head=4)
    export(ct, tmp_path / "hf", "transformers", vocab="abcd")
    model, _ = load_transformers(tmp_path / "hf", ct.schedule.tg.graph)
    ids = np.array([0, 2, 1, 3, 3, 1, 0, 2, 2, 1, 0, 3])
    with torch.no_grad():
        logits = model(torch.as_tensor(ids)[None]).logits[0].numpy()
    want = twdialect.evaluate(module, {"tokens": ids})["logits"]
    np.testing.assert_allclose(logits, want, atol=1e-4)


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="no CUDA device")
def test_cuda_batches_stop_padding_at_the_tables_last_row():
    """On a GPU a batch is padded to a power of two of positions (at least 16, so CUDA graphs
    repeat); a position table of L = 12 rows has no row there: the padding stops at L (the
    gather read past the table and hit a device-side assert)."""
    module = _graph()
    ct = lowering.compile(module, d=64, d_head=16)
    feeds = [{"tokens": np.array([0, 3, 1, 4, 2][:n])} for n in (5, 3)] + \
        [{"tokens": np.arange(L) % 5}]
    cpu = ct.run_batch(feeds)
    ct.to("cuda")
    for got, want, feed in zip(ct.run_batch(feeds), cpu, feeds):
        assert_close(got, twdialect.evaluate(module, feed))
        for k in want:
            np.testing.assert_allclose(got[k], want[k], atol=1e-5)
