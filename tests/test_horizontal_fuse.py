"""horizontal-fuse: same-slot linears / same-q-k attentions become one op; values unchanged,
the critical path never grows, dependent or oversized candidates are left alone."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tw_passes import PipelineError, run_pipeline
from tw_passes import horizontal_fuse as hf
from twdialect import evaluate, ops as tw, print_module
from twdialect.analysis import (
    accumulating_adds,
    adds_into,
    critical_path,
    first_use_before_def,
    is_free_add,
    sort_block_topologically,
)
from twdialect.dialect import AttnOp, LinearOp, SliceOp
from twdialect.interp import find_graph
from twdialect.random_graphs import layered_graph, random_graph, sample_inputs


def count(module, cls) -> int:
    return sum(isinstance(op, cls) for op in find_graph(module).block.ops)


def floor(module) -> tuple[int, int]:
    """(layers, last slot) of the critical path: both must not grow."""
    cp = critical_path(find_graph(module))
    return cp.n_layers, max(cp.slots.values())


def check_preserved(module, spec: str, n_positions: int = 5, seed: int = 0):
    """Apply `spec`; assert same outputs, no deeper floor, ordered block. Returns the module."""
    inputs = sample_inputs(module, n_positions, seed)
    before = evaluate(module, inputs)
    floor_before = floor(module)
    run_pipeline(module, spec)
    module.verify()
    assert first_use_before_def(find_graph(module).block) is None
    after = evaluate(module, inputs)
    assert before.keys() == after.keys()
    for name in before:
        np.testing.assert_allclose(after[name], before[name], rtol=1e-6, atol=1e-6, err_msg=name)
    layers, last_slot = floor(module)
    assert layers <= floor_before[0] and last_slot <= floor_before[1], "critical path grew"
    return module


def negates(n: int, shared_input: bool = False):
    with tw.Graph("main") as g:
        xs = [tw.input(f"x{i}", 1, (-2.0, 2.0)) for i in range(1 if shared_input else n)]
        for i in range(n):
            tw.output(f"y{i}", tw.negate(xs[0 if shared_input else i]))
    return g.module


def test_sixteen_scalar_negates_become_one_linear():
    m = check_preserved(negates(16), "horizontal-fuse")
    assert count(m, LinearOp) == 1
    assert count(m, SliceOp) == 16
    (lin,) = [op for op in find_graph(m).block.ops if isinstance(op, LinearOp)]
    np.testing.assert_array_equal(tw.weights(lin.out, "weight"), -np.eye(16))


def test_group_size_is_capped():
    m = check_preserved(negates(20), "horizontal-fuse")
    assert count(m, LinearOp) == 2  # 16 + 4
    m = check_preserved(negates(20), "horizontal-fuse{max-group=5}")
    assert count(m, LinearOp) == 4


def test_shared_input_is_read_once():
    m = check_preserved(negates(12, shared_input=True), "horizontal-fuse")
    (lin,) = [op for op in find_graph(m).block.ops if isinstance(op, LinearOp)]
    assert tw.weights(lin.out, "weight").shape == (1, 12)


def test_dependent_pair_is_not_fused():
    with tw.Graph("main") as g:
        x = tw.input("x", 1, (-1.0, 1.0))
        a = tw.negate(x)
        b = tw.add_const(a, 1.0)
        tw.output("a", a)
        tw.output("b", b)
    m = check_preserved(g.module, "horizontal-fuse")
    assert count(m, LinearOp) == 2 and count(m, SliceOp) == 0


def test_group_that_does_not_fit_a_head_is_not_fused():
    def build():
        with tw.Graph("main") as g:
            a = tw.input("a", 10, (-1.0, 1.0))
            b = tw.input("b", 10, (-1.0, 1.0))
            tw.output("p", tw.linear(a, np.eye(10)[:, :2]))
            tw.output("q", tw.linear(b, np.eye(10)[:, :3]))
        return g.module

    assert count(check_preserved(build(), "horizontal-fuse"), LinearOp) == 2
    assert count(check_preserved(build(), "horizontal-fuse{d-head=20}"), LinearOp) == 1


def test_bias_and_mixed_widths():
    with tw.Graph("main") as g:
        a = tw.input("a", 2, (-1.0, 1.0))
        b = tw.input("b", 3, (-1.0, 1.0))
        tw.output("p", tw.linear(a, [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], [0.5, -0.5, 1.0]))
        tw.output("q", tw.linear(b, np.ones((3, 1))))
        tw.output("r", tw.linear(a, [[1.0], [-1.0]]))
    # Fused: 5 inputs, 5 outputs = 5 head dims against 2 + 1 + 1 apart; only allowed when the
    # head-dims guard is off.
    m = check_preserved(g.module, "horizontal-fuse{pooled-heads=false}")
    assert count(m, LinearOp) == 1


def test_group_that_would_cost_more_head_dims_is_split():
    def build():
        with tw.Graph("main") as g:
            a = tw.input("a", 4, (-1.0, 1.0))
            b = tw.input("b", 1, (-1.0, 1.0))
            tw.output("p", tw.linear(a, np.ones((4, 1))))  # 1 dim
            tw.output("q", tw.linear(b, np.ones((1, 4))))  # 1 dim; fused: min(5, 5) = 5
        return g.module

    assert count(check_preserved(build(), "horizontal-fuse"), LinearOp) == 2
    assert count(check_preserved(build(), "horizontal-fuse{pooled-heads=false}"), LinearOp) == 1


def test_mlp_chain_linears_are_not_standalone():
    with tw.Graph("main") as g:
        x = tw.input("x", 1, (-1.0, 1.0))
        y = tw.input("y", 1, (-1.0, 1.0))
        h = tw.relu(tw.linear(x, [[1.0, -1.0]]))  # chain head: feeds only a relu
        tw.output("h", h)
        tw.output("n", tw.negate(y))
    m = check_preserved(g.module, "horizontal-fuse")
    assert count(m, LinearOp) == 2


def test_accumulating_add_writers_are_left_alone():
    with tw.Graph("main") as g:
        x = tw.input("x", 1, (-1.0, 1.0))
        y = tw.input("y", 1, (-1.0, 1.0))
        tw.output("s", tw.add(tw.negate(x), tw.multiply_const(y, 2.0)))
    m = check_preserved(g.module, "horizontal-fuse")
    assert count(m, LinearOp) == 2


def test_different_iterations_are_not_merged():
    with tw.Graph("main") as g:
        x = tw.input("x", 1, (-1.0, 1.0))
        ts = tw.sequential_scope([lambda: tw.relu(tw.negate(x)) for _ in range(3)], "loop")
        tw.output("y", tw.concat(ts))
    m = check_preserved(g.module, "horizontal-fuse")
    assert count(m, LinearOp) == 3


def attn_family(shared_wk: bool = True, dv: int = 2, n: int = 3):
    rng = np.random.default_rng(3)
    with tw.Graph("main") as g:
        p = tw.pos_encoding(2, max_len=16)
        x = tw.input("x", 3, (-1.0, 1.0))
        k = tw.concat(p, x)
        wq, wk = rng.uniform(-1, 1, (5, 2)), rng.uniform(-1, 1, (5, 2))
        for i in range(n):
            v = x if i % 2 == 0 else tw.concat(tw.slice(x, 1, 2), tw.slice(x, 0, 1))
            wk_i = wk if shared_wk or i == 0 else wk + 0.5
            tw.output(f"o{i}", tw.attn(k, k, v, wq, wk_i, rng.uniform(-1, 1, (3, dv)),
                                       rng.uniform(-1, 1, (dv, 2))))
    return g.module


def test_attentions_sharing_query_and_key_fuse():
    m = check_preserved(attn_family(), "horizontal-fuse", n_positions=7)
    assert count(m, AttnOp) == 1


def test_attentions_with_different_wk_do_not_fuse():
    m = check_preserved(attn_family(shared_wk=False, n=2), "horizontal-fuse", n_positions=7)
    assert count(m, AttnOp) == 2


def test_attention_value_width_is_capped():
    m = check_preserved(attn_family(dv=6, n=4), "horizontal-fuse{d-head=16}", n_positions=7)
    assert count(m, AttnOp) == 2  # 6 + 6 fit in 16, a third does not


def test_bad_options_are_reported():
    from twdialect.errors import TwError

    with pytest.raises(TwError, match="d-head"):
        run_pipeline(negates(2), "horizontal-fuse{d-head=0}")
    with pytest.raises(TwError, match="max-group"):
        run_pipeline(negates(2), "horizontal-fuse{max-group=-1}")


def test_output_is_deterministic():
    texts = set()
    for _ in range(2):
        m = run_pipeline(random_graph(11, 40, kinds=("linear", "attn", "add", "concat")),
                         "horizontal-fuse")
        texts.add(print_module(m))
    assert len(texts) == 1


def wide_random(seed: int, n_ops: int):
    """Random graphs rich in same-depth linears and q/k-sharing attentions."""
    rng = np.random.default_rng(seed)
    with tw.Graph("main") as g:
        vals = [tw.input(f"in{i}", int(rng.integers(1, 4)), (-2.0, 2.0)) for i in range(4)]
        pos = tw.pos_encoding(2, max_len=32)
        qk = tw.concat(pos, vals[0])
        wq, wk = rng.uniform(-1, 1, (2 + vals[0].type.width.data, 2)), \
            rng.uniform(-1, 1, (2 + vals[0].type.width.data, 2))
        for _ in range(n_ops):
            x = vals[int(rng.integers(len(vals)))]
            w = x.type.width.data
            r = rng.random()
            if r < 0.5:
                v = tw.linear(x, np.round(rng.uniform(-1, 1, (w, int(rng.integers(1, 3)))), 2),
                              np.round(rng.uniform(-1, 1, 1), 2) if rng.random() < 0.5 else None)
                if v.type.width.data == 1 and rng.random() < 0.3:
                    v = tw.linear(v, [[1.0, -1.0]])
            elif r < 0.7:
                v = tw.attn(qk, qk, x, wq, wk, rng.uniform(-1, 1, (w, 2)), np.eye(2))
            elif r < 0.85:
                v = tw.relu(x)
            else:
                y = vals[int(rng.integers(len(vals)))]
                v = tw.concat(x, y) if x is not y else tw.relu(x)
            vals.append(v)
        for i, v in enumerate(vals[4:]):
            if not v.uses:
                tw.output(f"o{i}", v)
    return g.module


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), n_ops=st.integers(2, 40), d_head=st.sampled_from([1, 2, 4, 16]))
def test_random_graphs_keep_values_and_depth(seed, n_ops, d_head):
    check_preserved(wide_random(seed, n_ops), f"horizontal-fuse{{d-head={d_head}}}",
                    n_positions=6, seed=seed)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000))
def test_library_random_graphs_keep_values_and_depth(seed):
    check_preserved(random_graph(seed, 25), "horizontal-fuse", n_positions=6, seed=seed)
    # After decompose the library ops are linears and mlps: more candidates.
    decomposed = run_pipeline(random_graph(seed, 25), "decompose{tolerance=1.0e30}")  # float64
    check_preserved(decomposed, "horizontal-fuse", n_positions=6, seed=seed)


def test_layered_graph_keeps_values_and_depth():
    """A larger graph: many groups, many readers moved behind fused ops."""
    m, _ = layered_graph(1500, seed=1)
    linears = count(m, LinearOp)
    check_preserved(m, "horizontal-fuse", n_positions=4)
    assert count(m, LinearOp) < linears


def fused_unordered(make):
    """`make()`'s graph with its groups fused but the block not reordered yet."""
    graph = find_graph(make())
    groups = hf._collect_groups(graph, critical_path(graph).slots, 16, 16, True)
    touched = {}
    for group in groups[0]:
        hf._fuse_linears(group, touched)
    for group in groups[1]:
        hf._fuse_attns(group, touched)
    return graph, touched


@pytest.mark.parametrize("make", [lambda: layered_graph(800, seed=2)[0],
                                  lambda: wide_random(5, 120), lambda: wide_random(9, 60)])
def test_reorder_is_the_stable_topological_sort(make):
    """The pass's one-walk reorder gives exactly `sort_block_topologically`'s order."""
    reference, _ = fused_unordered(make)
    assert first_use_before_def(reference.block) is not None  # there is something to move
    sort_block_topologically(reference.block)
    graph, touched = fused_unordered(make)
    hf._restore_def_before_use(graph.block, touched)
    assert print_module(graph) == print_module(reference)


@pytest.mark.parametrize("seed", range(6))
def test_free_add_check_matches_the_analysis(seed):
    """`is_free_add`, the per-op check the pass uses for adds a writer must keep feeding, is
    `accumulating_adds` plus `adds_into`."""
    for module in (random_graph(seed, 40), layered_graph(600, seed=seed)[0]):
        graph = find_graph(module)
        accumulating = accumulating_adds(graph)
        expected = accumulating | set(adds_into(graph, accumulating))
        assert {op for op in graph.block.ops if is_free_add(op)} == expected


@pytest.mark.slow
def test_random_sweep():
    for seed in range(300):
        check_preserved(wide_random(seed, 80), "horizontal-fuse{d-head=4}", n_positions=6,
                        seed=seed)


# --------------------------------------------------------------------------------------
# Compiled model
# --------------------------------------------------------------------------------------


def compiled_heads_and_error(module, pipeline, d=64, d_head=16, n_positions=7):
    from tw_lowering import compile

    inputs = sample_inputs(module, n_positions, 0)
    ref = evaluate(module, inputs)
    ct = compile(module, d=d, d_head=d_head, pipeline=pipeline)
    out = ct.run(inputs)
    err = max(float(np.abs(out[k] - ref[k]).max()) for k in ref)
    return sum(ct.stats.heads_per_layer), ct.stats.n_layers, err


def test_compiled_attention_family_takes_one_head():
    heads0, layers0, err0 = compiled_heads_and_error(attn_family(dv=2, n=4), None)
    heads1, layers1, err1 = compiled_heads_and_error(attn_family(dv=2, n=4), "horizontal-fuse")
    assert heads0 == 4 and heads1 == 1
    assert layers1 <= layers0
    assert err0 < 1e-4 and err1 < 1e-4


def test_compiled_sixteen_negates_take_one_head():
    heads, layers, err = compiled_heads_and_error(negates(16), "horizontal-fuse")
    assert heads == 1 and layers == 1 and err < 1e-5


@pytest.mark.parametrize("seed", range(4))
def test_compiled_random_graphs_match_after_fusion(seed):
    from tw_lowering import compile

    module = wide_random(seed, 30)
    inputs = sample_inputs(module, 6, seed)
    ref = evaluate(module, inputs)
    plain = compile(module, d=256, d_head=16, pipeline="none")
    fused = compile(module, d=256, d_head=16, pipeline="horizontal-fuse")
    out = fused.run(inputs)
    for k in ref:
        np.testing.assert_allclose(out[k], ref[k], atol=1e-4, rtol=1e-4, err_msg=k)
    assert fused.stats.n_layers <= plain.stats.n_layers
    assert sum(fused.stats.heads_per_layer) <= sum(plain.stats.heads_per_layer)
