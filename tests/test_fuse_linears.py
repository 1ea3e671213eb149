"""fuse-linears: targeted folds, the cases it must leave alone, and differential tests
(oracle before == oracle after, and the compiled model after == the oracle)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tw_passes import PassOptionError, run_pipeline
from tw_passes.fuse_linears import FuseLinears
from tw_passes.optimize import DEFAULT_PIPELINE
from twdialect import evaluate, make_context, print_module
from twdialect import ops as tw
from twdialect.analysis import critical_path
from twdialect.dialect import LinearOp
from twdialect.interp import find_graph
from twdialect.random_graphs import random_graph, sample_inputs

from pass_checks import assert_same  # noqa: E402
import pass_checks  # noqa: E402

N_POS = 5



def run_and_compare(module, spec: str, seed: int = 0):
    return pass_checks.run_and_compare(module, spec, N_POS, seed)


def last_slot(module) -> int:
    """The last sublayer slot any value of the graph is ready in (the floor, in slots)."""
    return max(critical_path(find_graph(module)).ready.values())


def kinds(module) -> list[str]:
    return [op.name for op in find_graph(module).block.ops]


def test_chain_of_eight_scalar_affine_ops_becomes_one_op():
    with tw.Graph() as g:
        x = tw.input("x", 1, (-2.0, 2.0))
        v = x
        steps = [lambda u: tw.add_const(u, 0.5), lambda u: tw.multiply_const(u, 1.5), tw.negate]
        for i in range(8):
            v = steps[i % 3](v)
        tw.output("y", v)
    assert kinds(g.module).count("tw.linear") == 8
    run_and_compare(g.module, "fuse-linears")
    assert kinds(g.module) == ["tw.input", "tw.linear", "tw.output"]
    assert critical_path(find_graph(g.module)).floor == 1


def test_linear_mlp_linear_folds_into_one_mlp():
    rng = np.random.default_rng(1)
    with tw.Graph() as g:
        x = tw.input("x", 3, (-1.0, 1.0))
        a = tw.linear(x, rng.normal(size=(3, 3)), rng.normal(size=3))
        m = tw.mlp(a, rng.normal(size=(3, 5)), rng.normal(size=5), rng.normal(size=(5, 3)))
        y = tw.linear(m, rng.normal(size=(3, 2)), rng.normal(size=2))
        tw.output("y", y)
    run_and_compare(g.module, "fuse-linears")
    assert kinds(g.module) == ["tw.input", "tw.mlp", "tw.output"]


def test_concat_operand_linear_is_absorbed():
    rng = np.random.default_rng(2)
    with tw.Graph() as g:
        a = tw.input("a", 2, (-1.0, 1.0))
        b = tw.input("b", 3, (-1.0, 1.0))
        c = tw.input("c", 1, (-1.0, 1.0))
        inner = tw.linear(b, rng.normal(size=(3, 2)), rng.normal(size=2))
        y = tw.linear(tw.concat(a, inner, c), rng.normal(size=(5, 2)))
        tw.output("y", y)
    run_and_compare(g.module, "fuse-linears")
    ops = list(find_graph(g.module).block.ops)
    linears = [op for op in ops if isinstance(op, LinearOp)]
    assert len(linears) == 1 and linears[0].bias is not None
    assert [v.owner.input_name.data for v in linears[0].x.owner.ins] == ["a", "b", "c"]


def _attention_graph(query_bias, value_bias):
    rng = np.random.default_rng(3)
    with tw.Graph() as g:
        x = tw.input("x", 3, (-1.0, 1.0))
        pos = tw.pos_encoding(2, max_len=16)
        q = tw.linear(x, rng.normal(size=(3, 2)), query_bias)
        k = tw.linear(x, rng.normal(size=(3, 2)), rng.normal(size=2))
        v = tw.linear(x, rng.normal(size=(3, 2)), value_bias)
        tw.output("o", tw.attn(q, tw.concat(pos, k), v, rng.normal(size=(2, 2)),
                               rng.normal(size=(4, 2)), rng.normal(size=(2, 2)), np.eye(2)))
    return g.module


@pytest.mark.parametrize("gated", [False, True])
def test_a_linear_read_twice_by_one_concat_folds_into_the_mlp(gated):
    """torchwright's in_range(x, x + 1): once x + 1 folds into the concat the mlp reads, the
    concat holds the linear x twice; it folds too, so the mlp follows x's producer directly."""
    rng = np.random.default_rng(4)
    up = dict(up=rng.normal(size=(2, 3)), up_bias=rng.normal(size=3)) if gated else {}
    with tw.Graph() as g:
        x = tw.input("x", 1, (-2.0, 2.0))
        head = tw.attn(x, x, x, np.ones((1, 1)), np.ones((1, 1)), np.eye(1), np.eye(1))
        low = tw.add_const(head, 1.0)
        m = tw.mlp(tw.concat(low, tw.add_const(low, 1.0)), rng.normal(size=(2, 3)),
                   rng.normal(size=3), rng.normal(size=(3, 1)), activation="swish", **up)
        tw.output("y", m)
    before = last_slot(g.module)
    run_and_compare(g.module, "fuse-linears")
    assert "tw.linear" not in kinds(g.module)
    assert last_slot(g.module) == before - 2  # the mlp runs right after the head


def test_linears_fold_into_attention_and_a_key_bias_is_dropped():
    module = _attention_graph(None, None)
    run_and_compare(module, "fuse-linears")
    assert kinds(module) == ["tw.input", "tw.pos_encoding", "tw.concat", "tw.attn", "tw.output"]
    assert critical_path(find_graph(module)).floor == 1


def test_query_and_value_biases_keep_their_linears():
    module = _attention_graph([1.0, 0.0], [0.0, 2.0])
    run_and_compare(module, "fuse-linears")
    assert kinds(module).count("tw.linear") == 2  # the key linear still folds


def test_sum_chain_collapses_through_concats():
    with tw.Graph() as g:
        xs = [tw.input(f"x{i}", 2, (-1.0, 1.0)) for i in range(6)]
        s = xs[0]
        for x in xs[1:]:
            s = tw.sum([s, x])
        tw.output("s", s)
    run_and_compare(g.module, "fuse-linears,canonicalize")
    assert kinds(g.module).count("tw.linear") == 1


@pytest.mark.parametrize("allow_inflate, n_linears", [(False, 2), (True, 1)])
def test_bottleneck_fuses_only_when_inflation_allowed(allow_inflate, n_linears):
    with tw.Graph() as g:
        x = tw.input("x", 64, (-1.0, 1.0))
        s = tw.linear(x, np.ones((64, 1)))
        tw.output("y", tw.linear(s, np.arange(64.0).reshape(1, 64)))
    spec = "fuse-linears{allow-inflate=true}" if allow_inflate else "fuse-linears"
    run_and_compare(g.module, spec)
    assert kinds(g.module).count("tw.linear") == n_linears


def _pair_into_mlp(hidden: int):
    """linear(concat(attn read, position)) -> an MLP: the fold widens W1 (2 x hidden for
    2 + hidden parameters) but lets the MLP run in the attention read's layer."""
    with tw.Graph() as g:
        x = tw.input("x", 1, (0.0, 9.0))
        pos = tw.pos_encoding(2, 64)
        prev = tw.get_prev_value(pos, x)
        z = tw.linear(tw.concat(prev, tw.slice(pos, 0, 1)), [[1.0], [20.0]])
        w1 = np.linspace(-1, 1, hidden)[None, :]
        tw.output("y", tw.mlp(z, w1, np.linspace(0, 3, hidden), np.ones((hidden, 1))))
    return g.module


@pytest.mark.parametrize("spec, depth_fold", [
    ("fuse-linears", True), ("fuse-linears{depth-inflate-params=0}", False),
    ("fuse-linears{depth-inflate-params=2}", False)])
def test_inflating_fold_into_an_mlp_is_taken_when_it_saves_a_layer(spec, depth_fold):
    module = _pair_into_mlp(8)
    before = critical_path(find_graph(module)).n_layers
    run_and_compare(module, spec)
    after = critical_path(find_graph(module)).n_layers
    assert (kinds(module).count("tw.linear") == 0) == depth_fold
    assert after == (before - 1 if depth_fold else before)


def test_inflating_fold_never_widens_a_linears_head_work():
    """4 -> 1 -> 4 would save a layer, but the fused linear needs 4 head dims, not 1 + 1."""
    with tw.Graph() as g:
        x = tw.input("x", 4, (-1.0, 1.0))
        s = tw.linear(x, np.ones((4, 1)))
        tw.output("y", tw.linear(s, np.arange(4.0).reshape(1, 4)))
    run_and_compare(g.module, "fuse-linears")
    assert kinds(g.module).count("tw.linear") == 2


def test_relu_between_linears_blocks_fusion():
    with tw.Graph() as g:
        x = tw.input("x", 2, (-1.0, 1.0))
        tw.output("y", tw.linear(tw.relu(tw.linear(x, np.eye(2) * 2)), np.ones((2, 1))))
    run_and_compare(g.module, "fuse-linears")
    assert kinds(g.module).count("tw.linear") == 2


def _fanout_graph(width: int = 1):
    with tw.Graph() as g:
        x = tw.input("x", width, (-1.0, 1.0))
        a = tw.linear(x, np.eye(width) * 2)
        tw.output("a", a)
        tw.output("y", tw.linear(a, np.ones((width, 1))))
    return g.module


def test_fanout_duplicates_small_linear_when_the_reader_gets_earlier():
    module = _fanout_graph()
    assert last_slot(module) == 1  # the reader runs in the MLP sublayer after the linear
    run_and_compare(module, "fuse-linears")
    linears = [op for op in find_graph(module).block.ops if isinstance(op, LinearOp)]
    assert len(linears) == 2 and all(op.x.owner.name == "tw.input" for op in linears)
    assert last_slot(module) == 0


@pytest.mark.parametrize("spec", ["fuse-linears{fanout=false}",
                                  "fuse-linears{max-duplicate-params=3}"])
def test_fanout_can_be_disabled_or_bounded(spec):
    module = _fanout_graph(width=2)  # the shared linear has 4 parameters
    text = print_module(module)
    run_and_compare(module, spec)
    assert print_module(module) == text


def test_no_duplicate_when_the_reader_would_not_get_earlier():
    # The reader is an mlp: it runs in the MLP sublayer right after the linear's attention
    # slot, so a duplicate would not move it.
    with tw.Graph() as g:
        x = tw.input("x", 2, (-1.0, 1.0))
        a = tw.linear(x, np.eye(2) * 2)
        tw.output("a", a)
        tw.output("y", tw.mlp(a, np.ones((2, 3)), None, np.ones((3, 1))))
    text = print_module(g.module)
    run_and_compare(g.module, "fuse-linears")
    assert print_module(g.module) == text


def test_scope_boundaries_and_annotations():
    def iteration(v):
        return lambda: tw.linear(v, np.eye(1) * 2)

    with tw.Graph() as g:
        x = tw.input("x", 1, (-1.0, 1.0))
        (t0,) = tw.sequential_scope([iteration(x)], name="loop")
        with tw.annotate("tail"):
            y = tw.linear(tw.linear(t0, np.eye(1) * 3), np.eye(1) * 5)
        tw.output("y", y)
    run_and_compare(g.module, "fuse-linears")
    linears = [op for op in find_graph(g.module).block.ops if isinstance(op, LinearOp)]
    assert len(linears) == 2  # the scope terminal survives; the two tail linears fuse
    assert linears[1].attributes["tw.annotation"].data == "tail"


def test_pass_options_and_stats():
    module = _fanout_graph()
    stats = FuseLinears().run_on_graph(make_context(), find_graph(module))
    assert (stats.folded, stats.duplicated) == (0, 1)
    with pytest.raises(Exception, match="fuse-linears"):
        run_pipeline(_fanout_graph(), "fuse-linears{no-such-option=1}")


def test_deterministic_output():
    texts = set()
    for _ in range(2):
        m = random_graph(7, 40, library=False)
        run_pipeline(m, "fuse-linears")
        texts.add(print_module(m))
    assert len(texts) == 1


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10**6), n_ops=st.integers(3, 30),
       spec=st.sampled_from(["fuse-linears", "fuse-linears{allow-inflate=true}",
                             "fuse-linears{fanout=false}"]))
def test_random_graphs_keep_their_meaning(seed, n_ops, spec):
    run_and_compare(random_graph(seed, n_ops, library=False), spec, seed)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10**6), n_ops=st.integers(3, 30))
def test_linear_heavy_random_graphs_keep_their_meaning(seed, n_ops):
    m = random_graph(seed, n_ops, library=False, kinds=("linear", "mlp", "concat", "add", "slice"))
    run_and_compare(m, "fuse-linears", seed)


def _compiled_matches(module, pipeline, seed):
    from tw_lowering import compile

    inputs = sample_inputs(module, N_POS, seed)
    reference = evaluate(module, inputs)
    baseline = compile(module, d=128, d_head=8).run(inputs, n_positions=N_POS)
    assert_same(reference, baseline)  # the lowering alone must already match
    compiled = compile(module, d=128, d_head=8, pipeline=pipeline)
    assert_same(reference, compiled.run(inputs, n_positions=N_POS))
    return compiled


@pytest.mark.parametrize("seed", range(6))
def test_compiled_model_matches_after_fusion(seed):
    m = random_graph(seed, 14, library=False, kinds=("linear", "mlp", "concat", "add", "relu"))
    _compiled_matches(m, "fuse-linears", seed)


@pytest.mark.parametrize("seed", range(4))
def test_compiled_model_matches_after_attention_folds(seed):
    m = random_graph(seed, 14, library=False, kinds=("linear", "attn", "concat", "linear", "mlp"))
    _compiled_matches(m, "fuse-linears", seed)


@pytest.mark.slow
def test_sweep_random_graphs():
    for seed in range(300):
        for spec in ("fuse-linears", "fuse-linears{allow-inflate=true}"):
            run_and_compare(random_graph(seed, 60, library=False), spec, seed)


def _cancelling_compare():
    """1.2e6 x - 1.08e7 + 0.25 against a compare: folded into the compare's hidden units the
    bias -2.16e7 would be stored at ulp 2 and lose the +1 that separates the two units."""
    with tw.Graph() as g:
        x = tw.input("x", 1, (0.0, 15.0), integer=True)
        # (the compare's operand lies on a grid of 1/4, which float32 adds exactly below 2^22;
        # the range analysis only knows integers, so it would refuse the compare for reals)
        tw.output("y", tw.accept_error(
            tw.compare(tw.linear(x, [[1.2e6]], [-1.2e6 * 9 + 0.25]), 0.0, 0.5), 4.0))
    return g.module


def test_a_fold_whose_float32_bias_would_change_the_answer_is_refused():
    from tw_lowering import compile

    module = _cancelling_compare()
    xs = {"x": np.arange(16.0)[:, None]}
    want = evaluate(module, xs)["y"].ravel()
    assert list(want) == [-1.0] * 9 + [1.0] * 7
    folded = module.clone()
    stats = FuseLinears().run_on_graph(make_context(), find_graph(_decomposed(folded)))
    assert stats.skipped_precision >= 1
    np.testing.assert_array_equal(evaluate(folded, xs)["y"].ravel(), want)
    ct = compile(module, d=64, d_head=16, d_hidden=256, pipeline="default")
    np.testing.assert_array_equal(ct.run(xs)["y"].ravel(), want)


def test_the_precision_check_can_fail(monkeypatch):
    """Without the check the same fold does change the oracle's answer."""
    import twdialect.rounding

    monkeypatch.setattr(twdialect.rounding, "TOLERANCE", float("inf"))
    monkeypatch.setattr(twdialect.rounding.FoldCheck, "float32_worse_on_samples",
                        lambda *a: False)  # (it sees the same fold spoil the answer)
    module = _decomposed(_cancelling_compare())
    xs = {"x": np.arange(16.0)[:, None]}
    want = evaluate(module, xs)["y"].ravel()
    run_pipeline(module, "fuse-linears")
    assert not np.array_equal(evaluate(module, xs)["y"].ravel(), want)


def _decomposed(module):
    run_pipeline(module, "decompose,canonicalize")
    return module


def test_inflating_fold_into_an_mlps_output_is_taken_when_it_saves_a_layer():
    """piecewise_linear -> linear(1 -> 15): the 15-wide W2 adds weights, not neurons."""
    with tw.Graph() as g:
        x = tw.input("x", 1, (0.0, 9.0))
        p = tw.piecewise_linear(x, [0.0, 3.0, 6.0, 9.0], [0.0, 3.0, 1.0, 2.0])
        tw.output("y", tw.linear(p, np.arange(15.0).reshape(1, 15)))
    module = _decomposed(g.module)
    before = critical_path(find_graph(module)).n_layers
    run_and_compare(module, "fuse-linears")
    assert kinds(module).count("tw.linear") == 0
    assert critical_path(find_graph(module)).n_layers == before - 1 == 1


def test_wide_attention_read_folds_into_the_table_it_feeds():
    """attn (3 wide) -> linear(3 -> 1) -> table: one layer, not two."""
    from tw_lowering import compile

    with tw.Graph() as g:
        x = tw.input("x", 3, (0.0, 9.0))
        pos = tw.pos_encoding(2, 64)
        z = tw.linear(tw.get_prev_value(pos, x), [[1.0], [2.0], [3.0]])
        tw.output("y", tw.piecewise_linear(z, [0.0, 20.0, 40.0, 54.0], [0.0, 3.0, 1.0, 2.0]))
    ct = compile(g.module, d=64, d_head=16, d_hidden=256, pipeline="default")
    assert ct.stats.n_layers == ct.stats.floor == 1


def _gain_after_compare():
    """A compare of integers up to 2e5 (hidden units of 4e5 whose difference is the answer),
    then a gain of 1000: folded into W2, the sums reach 1e9 and float32 rounds them."""
    with tw.Graph() as g:
        x = tw.input("x", 1, (0.0, 200000.0), integer=True)
        s = tw.compare(tw.linear(x, [[1.0]], [-50000.0]), -0.5, 0.5)  # an integer operand
        tw.output("y", tw.linear(s, [[1000.0]]))
    return g.module


def test_a_fold_that_pushes_an_mlps_sums_past_2_27_is_refused():
    from tw_lowering import compile

    module = _gain_after_compare()
    xs = {"x": np.array([[123457.0], [199999.0], [3.0], [49999.0], [50000.0]])}
    want = evaluate(module, xs)["y"].ravel()
    ct = compile(module, d=64, d_head=16, d_hidden=256, pipeline="default")
    np.testing.assert_array_equal(ct.run(xs)["y"].ravel(), want)  # was 1016, 984, ...


def test_the_2_27_check_can_fail(monkeypatch):
    import twdialect.rounding
    from tw_lowering import compile

    monkeypatch.setattr(twdialect.rounding, "ROUNDING_SUMS", float("inf"))
    monkeypatch.setattr(twdialect.rounding.FoldCheck, "keeps_float32", lambda *a: True)
    monkeypatch.setattr(twdialect.rounding.FoldCheck, "input_grows_past_exact", lambda *a: False)
    monkeypatch.setattr(twdialect.rounding.FoldCheck, "float32_worse_on_samples",
                        lambda *a: False)
    module = _gain_after_compare()
    # Unchecked, the gain goes into W2 (sums of 4e8; what float32 then makes of them depends
    # on the kernel: off by 16 on a CPU without fused multiply-adds) ...
    assert kinds(run_pipeline(module.clone(), DEFAULT_PIPELINE)).count("tw.linear") == 0
    monkeypatch.undo()
    # ... checked, it stays a separate linear, and the answer is exact.
    assert kinds(run_pipeline(module.clone(), DEFAULT_PIPELINE)).count("tw.linear") == 1
    xs = {"x": np.array([[123457.0], [199999.0]])}
    np.testing.assert_array_equal(
        compile(module, d=64, d_head=16, d_hidden=256, pipeline="default").run(xs)["y"],
        evaluate(module, xs)["y"])


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2 ** 31 - 1), scale=st.sampled_from([1e2, 1e4, 1e6]))
def test_folds_keep_the_oracle_at_large_ranges(seed, scale):
    """Random primitive graphs over inputs up to 1e6: every fold keeps the oracle's value
    within 1e-6 of max(1, |output|) per output (folded float32 products that broke exact
    cancellations moved it by 8.4e-4 before)."""
    module = random_graph(seed, 14, library=False, value_range=scale)
    inputs = sample_inputs(module, 6, seed)
    before = evaluate(module, inputs)
    run_pipeline(module, "fuse-linears")
    after = evaluate(module, inputs)
    for name in before:
        scale_out = np.maximum(1.0, np.abs(before[name]).max())
        assert np.abs(after[name] - before[name]).max() <= 1e-6 * scale_out


def _near_cancellation():
    """0.1 a - 0.03 a - 0.07 a is 1.9e-9 a with the weights' float32 values: folded with the
    0.7 after it, the product's rounding (7e-10 per entry, times |a| <= 1e6) would be as large
    as the answer itself."""
    with tw.Graph() as g:
        a = tw.input("a", 1, (-1e6, 1e6))
        h = tw.linear(tw.concat(a, a, a), [[0.1], [-0.03], [-0.07]])
        tw.output("y", tw.linear(h, [[0.7]]))
    return g.module, {"a": np.array([[1e6], [-777777.0], [123.0]])}


def test_a_fold_that_breaks_a_cancellation_is_skipped():
    module, xs = _near_cancellation()
    want = evaluate(module, xs)["y"]
    run_pipeline(module, "fuse-linears")
    np.testing.assert_array_equal(evaluate(module, xs)["y"], want)


def test_the_cancellation_check_can_fail(monkeypatch):
    """Sized by the interval box alone (1.4e5 here), the fold passes and moves y by 40%."""
    import twdialect.rounding

    monkeypatch.setattr(twdialect.rounding.FoldCheck, "sampled_magnitude",
                        lambda self, v: np.full(1, np.inf))
    module, xs = _near_cancellation()
    want = evaluate(module, xs)["y"]
    run_pipeline(module, "fuse-linears")
    assert np.abs(evaluate(module, xs)["y"] - want).max() > 1e-4


def test_the_float32_run_alone_keeps_the_gain_out(monkeypatch):
    """With the growth and bound checks off, running both forms in float32 over the integer
    inputs still sees the folded gain round what the compare kept exact."""
    import twdialect.rounding

    monkeypatch.setattr(twdialect.rounding, "ROUNDING_SUMS", float("inf"))
    monkeypatch.setattr(twdialect.rounding.FoldCheck, "keeps_float32", lambda *a: True)
    monkeypatch.setattr(twdialect.rounding.FoldCheck, "input_grows_past_exact", lambda *a: False)
    module = _gain_after_compare()
    assert kinds(run_pipeline(module.clone(), DEFAULT_PIPELINE)).count("tw.linear") == 1


def test_float64_skips_the_float32_evaluation_checks_but_not_the_deviation():
    """compile(dtype="float64") sets fuse-linears' dtype: the gain after a compare of large
    integers folds (float64 adds those sums exactly) and the model is exact; a fold whose
    float32 weights would break a cancellation is still skipped."""
    from tw_lowering import compile
    from tw_passes.fuse_linears import FuseLinears

    module = _gain_after_compare()
    f32_kinds = kinds(run_pipeline(module.clone(), DEFAULT_PIPELINE))
    f64 = tuple(FuseLinears(dtype="float64") if isinstance(p, FuseLinears) else p
                for p in DEFAULT_PIPELINE)
    f64_kinds = kinds(run_pipeline(module.clone(), f64))
    assert f32_kinds.count("tw.linear") == 1 and f64_kinds.count("tw.linear") == 0
    xs = {"x": np.array([[123457.0], [199999.0], [3.0], [49999.0], [50000.0]])}
    want = evaluate(module, xs)["y"].ravel()
    ct = compile(module, d=64, d_head=16, d_hidden=256, dtype="float64")
    np.testing.assert_array_equal(ct.run(xs)["y"].ravel(), want)
    near, ys = _near_cancellation()
    want = evaluate(near, ys)["y"]
    run_pipeline(near, (FuseLinears(dtype="float64"),))
    np.testing.assert_array_equal(evaluate(near, ys)["y"], want)
    with pytest.raises(PassOptionError, match="dtype must be one of float32, float64"):
        FuseLinears(dtype="float16").check_options()
