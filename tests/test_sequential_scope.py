"""sequential-scope: iteration i's entry reads go through `tw.after` on iteration i-K's terminal;
values never change, the gating is visible in the IR, and bad tags give clear errors."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from xdsl.dialects.builtin import StringAttr, UnitAttr

from twdialect.errors import TwError
from tw_passes import PipelineError, run_pipeline
from tw_lowering.sequential_scope import (
    SequentialScopeError,
    auto_batch_size,
    candidate_batch_sizes,
    choose_batch_sizes,
    SequentialScopePass,
    find_scopes,
    last_reads,
    peak_width,
)
from twdialect import evaluate, make_context, ops as tw, print_module
from twdialect.analysis import critical_path, first_use_before_def
from twdialect.dialect import ITERATION, SCOPE, SCOPE_TERMINAL, AfterOp, int_prop
from twdialect.interp import find_graph
from twdialect.random_graphs import chain_loop, sample_inputs


def afters(module) -> list[AfterOp]:
    return [op for op in find_graph(module).block.ops if isinstance(op, AfterOp)]


def loop(n_iter: int = 5, wide: int = 8, depth: int = 1, name: str = "loop", seed: int = 0,
         carried: bool = False):
    """`n_iter` iterations reading input x (and, if `carried`, the previous terminal), each a
    chain of `depth` wide mlps narrowed to a scalar terminal."""
    rng = np.random.default_rng(seed)
    with tw.Graph("main") as g:
        x = tw.input("x", 3, (-1.0, 1.0))
        prev = [tw.input("c", 1, (-1.0, 1.0))]

        def body():
            src = tw.concat(x, prev[-1]) if carried else x
            h = tw.mlp(src, rng.uniform(-1, 1, (src.type.width.data, wide)), None, np.eye(wide))
            for _ in range(depth - 1):
                h = tw.mlp(h, rng.uniform(-1, 1, (wide, wide)) / wide, None, np.eye(wide))
            t = tw.linear(h, rng.uniform(-1, 1, (wide, 1)) / wide)
            prev.append(t)
            return t

        ts = tw.sequential_scope([body for _ in range(n_iter)], name)
        tw.output("y", tw.concat(ts))
    return g.module


def check_values(module, spec: str):
    inputs = sample_inputs(module, 4, 0)
    before = evaluate(module, inputs)
    run_pipeline(module, spec)
    module.verify()
    assert first_use_before_def(find_graph(module).block) is None
    after = evaluate(module, inputs)
    for k in before:
        np.testing.assert_array_equal(after[k], before[k])
    return module


def assert_gated(module, k: int) -> None:
    """Every op of iteration i >= k reads outside values only via tw.after on terminal i-k."""
    (scope,) = find_scopes(find_graph(module))
    for pos, it in enumerate(scope.indices):
        members = set(scope.ops[it])
        for op in scope.ops[it]:
            for v in op.operands:
                if v.owner in members:
                    continue
                if pos >= k:
                    term = scope.terminals[scope.indices[pos - k]]
                    assert v is term or (isinstance(v.owner, AfterOp) and term in v.owner.deps), \
                        f"iteration {it} reads {v} ungated"
                else:
                    assert not isinstance(v.owner, AfterOp)


def test_batch_size_two_gates_each_iteration_on_the_one_two_back():
    m = check_values(loop(5), "sequential-scope{batch-size=2}")
    assert len(afters(m)) == 3  # iterations 2, 3, 4: one outside value each
    assert_gated(m, 2)


def test_gating_deepens_only_as_the_batch_size_says():
    floors = {}
    for k in (1, 2, 4, 8):
        m = check_values(loop(8), f"sequential-scope{{batch-size={k}}}")
        floors[k] = critical_path(find_graph(m)).n_layers
    ungated = critical_path(find_graph(loop(8))).n_layers
    assert floors[1] > floors[2] > floors[4] > floors[8] == ungated


def test_loop_carried_terminal_is_not_gated_twice():
    m = check_values(loop(4, carried=True), "sequential-scope{batch-size=1}")
    assert_gated(m, 1)
    # Iteration i reads terminal i-1 directly (that is already the gate) and x through a gate.
    assert len(afters(m)) == 3


def test_running_twice_adds_nothing():
    m = check_values(loop(6), "sequential-scope{batch-size=2}")
    text = print_module(m)
    run_pipeline(m, "sequential-scope{batch-size=2}")
    assert print_module(m) == text


def test_batch_size_at_least_iterations_is_a_no_op():
    m = check_values(loop(4), "sequential-scope{batch-size=4}")
    assert not afters(m)


def test_auto_rule():
    assert auto_batch_size(32, 1024, 64) == 16  # default headroom 1: K = d // peak
    assert auto_batch_size(32, 1024, 32, headroom=4) == 8  # the seed's rule of thumb
    assert auto_batch_size(32, 1024, 1000) == 2  # never serialises
    assert auto_batch_size(32, 1 << 20, 1) == 31  # never lets every iteration in
    assert auto_batch_size(32, 1024, 32, headroom=2) == 16


def test_auto_peak_width_counts_live_intermediates():
    m = loop(6, wide=8, depth=3)
    g = find_graph(m)
    slots = critical_path(g).slots
    (scope,) = find_scopes(g)
    # Two wide mlp results are live at once (one read while the next is written).
    assert peak_width(scope, slots, last_reads(g, slots)) == 16
    rule = SequentialScopePass(d=64, search_budget=0)
    assert rule.run_on_graph(make_context(), g) == {"loop": 64 // 16}


def test_rule_gates_with_its_k():
    # Peak 9: the 8-wide mlp result is still read while the scalar terminal is written.
    rule = SequentialScopePass(d=32, search_budget=0)
    expected = rule.run_on_graph(make_context(), find_graph(loop(10, wide=8)))
    assert expected == {"loop": 32 // 9}
    m = check_values(loop(10, wide=8), "sequential-scope{batch-size=auto d=32 search-budget=0}")
    assert_gated(m, 3)


def test_short_loops_are_not_gated_by_auto():
    m = check_values(loop(2), "sequential-scope")
    assert not afters(m)


def test_graph_without_scopes_is_untouched():
    with tw.Graph("main") as g:
        tw.output("y", tw.relu(tw.input("x", 2, (-1.0, 1.0))))
    text = print_module(g.module)
    run_pipeline(g.module, "sequential-scope{batch-size=1}")
    assert print_module(g.module) == text


def test_two_loops_are_gated_independently():
    with tw.Graph("main") as g:
        x = tw.input("x", 1, (-1.0, 1.0))
        a = tw.sequential_scope([lambda: tw.relu(tw.negate(x)) for _ in range(4)], "a")
        b = tw.sequential_scope([lambda: tw.relu(tw.add_const(x, 1.0)) for _ in range(4)], "b")
        tw.output("y", tw.concat(a + b))
    m = check_values(g.module, "sequential-scope{batch-size=3}")
    assert len(afters(m)) == 2


# --------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------


def test_two_loops_with_one_name_are_reported():
    with tw.Graph("main") as g:
        x = tw.input("x", 1, (-1.0, 1.0))
        a = tw.sequential_scope([lambda: tw.relu(x) for _ in range(3)])
        b = tw.sequential_scope([lambda: tw.relu(x) for _ in range(3)])
        tw.output("y", tw.concat(a + b))
    with pytest.raises(SequentialScopeError, match="second terminal.*own name"):
        run_pipeline(g.module, "sequential-scope{batch-size=1}")


def test_missing_terminal_is_reported():
    m = loop(3)
    for op in find_graph(m).block.ops:
        if op.attributes.get(ITERATION) == int_prop(1):
            op.attributes.pop(SCOPE_TERMINAL, None)
    with pytest.raises(SequentialScopeError, match="iteration 1 has no op marked"):
        run_pipeline(m, "sequential-scope{batch-size=1}")


def test_terminal_built_outside_the_loop_is_reported():
    """The builder refuses it at the call (and the verifier refuses a tw.scope_terminal
    without its tw.scope, so the pass never meets one)."""
    with tw.Graph("main"):
        x = tw.input("x", 1, (-1.0, 1.0))
        with pytest.raises(TwError, match="sequential_scope: factories"):
            tw.sequential_scope([lambda: x], "loop")


def test_gate_cycle_is_reported():
    # Iteration 0's terminal reads iteration 1's value: gating 1 on 0 would deadlock.
    with tw.Graph("main") as g:
        x = tw.input("x", 1, (-1.0, 1.0))
        early = tw.relu(x)
        t0 = tw.negate(early)
        t1 = tw.negate(x)
        tw.output("y", tw.concat(t0, t1))
    for op, it, term in ((early.owner, 1, False), (t0.owner, 0, True), (t1.owner, 1, True)):
        op.attributes[SCOPE] = StringAttr("loop")
        op.attributes[ITERATION] = int_prop(it)
        if term:
            op.attributes[SCOPE_TERMINAL] = UnitAttr()
    # Iteration 1 holds two ops; its terminal t1 comes after t0, which reads `early`.
    with pytest.raises(SequentialScopeError, match="cycle"):
        run_pipeline(g.module, "sequential-scope{batch-size=1}")


@pytest.mark.parametrize("spec, message", [
    ("sequential-scope{batch-size=0}", "at least 1"),
    ("sequential-scope{batch-size=\"fast\"}", "integer or 'auto'"),
    ("sequential-scope{d=0}", "positive"),
    ("sequential-scope{d-head=0}", "positive"),
    ("sequential-scope{d=100}", "multiple of d-head=16"),
    ("sequential-scope{search-budget=-1}", ">= 0"),
])
def test_bad_options_are_reported(spec, message):
    # A TwError (one line for the user), not a bare ValueError the tools would call internal.
    with pytest.raises(TwError, match=message):
        run_pipeline(loop(3), spec)


# --------------------------------------------------------------------------------------
# Differential
# --------------------------------------------------------------------------------------


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), n_iter=st.integers(1, 9), k=st.integers(1, 10),
       depth=st.integers(1, 3), carried=st.booleans())
def test_random_loops_keep_values_and_are_gated(seed, n_iter, k, depth, carried):
    m = loop(n_iter, wide=4, depth=depth, seed=seed, carried=carried)
    floor_before = critical_path(find_graph(m)).n_layers
    m = check_values(m, f"sequential-scope{{batch-size={k}}}")
    if k < n_iter:
        assert_gated(m, k)
    else:
        assert not afters(m)
        assert critical_path(find_graph(m)).n_layers == floor_before


# --------------------------------------------------------------------------------------
# Compiled model
# --------------------------------------------------------------------------------------


def test_compiled_wide_loop_auto_ties_ungated_and_beats_serial():
    """16 iterations, each two 16-wide mlps, at d=256: the residual width binds (floor 3). The
    scheduler's admission reserve keeps the ungated loop from deadlocking; K=1 serialises;
    auto schedules its candidates and keeps the ungated loop; the rule with the seed's
    headroom 4 gates too hard (as a search seed it costs nothing)."""
    from tw_lowering import compile

    module = loop(16, wide=16, depth=2)
    inputs = sample_inputs(module, 3, 0)
    ref = evaluate(module, inputs)["y"]
    ungated = compile(module, d=256, d_head=16, pipeline="none")
    assert ungated.stats.n_layers > ungated.stats.floor  # residual-bound
    serial = compile(module, d=256, d_head=16, pipeline="sequential-scope{batch-size=1}")
    auto = compile(module, d=256, d_head=16, pipeline="sequential-scope{batch-size=auto d=256}")
    auto4 = compile(module, d=256, d_head=16,
                    pipeline="sequential-scope{batch-size=auto d=256 headroom=4}")
    tight = compile(module, d=256, d_head=16,
                    pipeline="sequential-scope{batch-size=auto d=256 headroom=4 search-budget=0}")
    assert auto.stats.n_layers == auto4.stats.n_layers == ungated.stats.n_layers
    assert ungated.stats.n_layers < tight.stats.n_layers < serial.stats.n_layers
    for ct in (ungated, serial, auto, auto4, tight):
        np.testing.assert_allclose(ct.run(inputs)["y"], ref, atol=1e-5)


# --------------------------------------------------------------------------------------
# batch-size=auto: the search
# --------------------------------------------------------------------------------------


def bulge_loop(n_iter: int, wide: int, seed: int = 0):
    """`n_iter` independent iterations reading x (width 4): mlp to wide/4, mlp to `wide`, mlp
    back to wide/4, a linear to a scalar terminal. The wide middle value appears after the
    iteration is admitted, which is where a greedy scheduler can crowd the residual."""
    return chain_loop(n_iter, [wide // 4, wide, wide // 4], seed)


def compiled_layers(module, d: int, pipeline: str | None = None) -> int | None:
    """Layers of the compiled module, None when the scheduler stalls on residual width."""
    from tw_lowering import GeometryError, compile

    try:
        return compile(module, d=d, d_head=16, pipeline=pipeline).stats.n_layers
    except GeometryError as e:
        assert "residual width binds" in str(e)
        return None


def test_auto_beats_ungated_the_rule_and_k1_and_no_candidate_does_better():
    """12 iterations with a wide middle step at d=128: auto's K compiles in fewer layers than
    ungated, the rule's K and K=1, and no candidate does better; the values hold."""
    from tw_lowering import compile

    module = bulge_loop(12, 32)
    d = 128
    (choice,) = choose_batch_sizes(find_graph(module), d=d).values()
    ungated = compiled_layers(module, d)
    cands = candidate_batch_sizes(12, d, choice.peak)
    assert 0 in cands and choice.rule_k in cands and choice.k in cands and 1 not in cands
    layers = {k: compiled_layers(module, d, f"sequential-scope{{batch-size={k}}}")
              for k in cands + [1] if k}
    auto = compile(module, d=d, d_head=16, pipeline=f"sequential-scope{{d={d}}}")
    assert choice.k != 0 and auto.stats.n_layers == layers[choice.k] == choice.layers[choice.k]
    assert all(v is None or auto.stats.n_layers <= v for v in layers.values()), layers
    assert auto.stats.n_layers < ungated
    assert auto.stats.n_layers < layers[choice.rule_k]  # the search beats the rule here
    assert auto.stats.n_layers < layers[1]  # and does not serialise
    for k, floor in choice.pruned.items():  # skipped only where it could at best tie
        got = layers[k] if k in layers else \
            compiled_layers(module, d, f"sequential-scope{{batch-size={k}}}")
        assert floor >= auto.stats.n_layers and (got is None or got >= floor)
    inputs = sample_inputs(module, 3, 0)
    np.testing.assert_allclose(auto.run(inputs)["y"], evaluate(module, inputs)["y"], atol=1e-5)
    m = check_values(bulge_loop(12, 32), f"sequential-scope{{d={d}}}")
    assert_gated(m, choice.k)


def test_auto_falls_back_to_k1_when_every_other_candidate_stalls(monkeypatch):
    """K=1 serialises, so it is tried only when every other candidate stalls (simulated here:
    the scheduler's full admission reserve leaves few such loops)."""
    import tw_lowering.sequential_scope as pass_module

    real_trial = pass_module._trial

    def trial(graph, ks, *args):
        result = real_trial(graph, ks, *args)
        return result if ks.get("loop") == 1 else pass_module._Trial()  # a stall

    monkeypatch.setattr(pass_module, "_trial", trial)
    module = bulge_loop(3, 64)
    (choice,) = choose_batch_sizes(find_graph(module), d=96).values()
    assert set(choice.layers) == {0, choice.rule_k, 1} and choice.layers[1]
    assert choice.k == 1
    (choice,) = choose_batch_sizes(find_graph(bulge_loop(12, 32)), d=128).values()
    assert choice.k == 1 and choice.layers[1] and \
        all(v is None for k, v in choice.layers.items() if k != 1)


def test_auto_keeps_the_rule_when_nothing_compiles():
    module = bulge_loop(4, 96)  # the smallest d that fits (d_head=4) is 104: at 100, even
    # K=1 stalls (its 96-wide step fits the 98 free columns, but not beside what is live)
    (choice,) = choose_batch_sizes(find_graph(module), d=100, d_head=4).values()
    assert set(choice.layers.values()) == {None}
    assert choice.k == choice.rule_k == 2


def test_auto_adds_no_gate_where_ungated_is_optimal():
    module = bulge_loop(12, 32)
    d = 512
    ungated = compiled_layers(module, d)
    (choice,) = choose_batch_sizes(find_graph(module), d=d).values()
    assert choice.k == 0 and choice.layers[0] == ungated
    for k in candidate_batch_sizes(12, d, choice.peak)[1:]:
        assert compiled_layers(module, d, f"sequential-scope{{batch-size={k}}}") >= ungated
    m = check_values(module, f"sequential-scope{{d={d}}}")
    assert not afters(m)


def test_auto_on_an_unlowerable_graph_takes_the_rule():
    # A 64-wide mlp result cannot fit d=32 at all: no K helps, the pass does not fail, the
    # rule decides and the lowering reports the real problem.
    module = loop(6, wide=64)
    (choice,) = choose_batch_sizes(find_graph(module), d=32).values()
    assert not choice.searched and choice.k == choice.rule_k
    check_values(module, "sequential-scope{d=32}")


def test_auto_search_budget_zero_is_the_rule():
    module = bulge_loop(12, 32)
    (choice,) = choose_batch_sizes(find_graph(module), d=128, search_budget=0).values()
    assert not choice.searched and choice.k == choice.rule_k and not choice.layers
    m = check_values(module, "sequential-scope{d=128 search-budget=0}")
    assert_gated(m, choice.rule_k)


def test_auto_budget_caps_the_trials():
    g = find_graph(bulge_loop(12, 32))
    n_ops = len(g.block.ops)  # 51 ops: a trial costs 51
    (few,) = choose_batch_sizes(g, d=128, search_budget=n_ops - 1).values()
    assert not few.searched and few.k == few.rule_k == 3
    (two,) = choose_batch_sizes(g, d=128, search_budget=2 * n_ops).values()
    assert len(two.layers) == 2 and 0 in two.layers  # ungated and one more candidate
    assert two.k == min(two.layers, key=lambda k: (two.layers[k], k != 0, -k))
    (full,) = choose_batch_sizes(g, d=128).values()
    assert len(full.layers) + len(full.pruned) >= 6  # the candidates, then the refinement
    assert full.layers[full.k] <= two.layers[two.k]


def test_auto_refines_between_ladder_steps_and_matches_the_best_k():
    """The ladder 2, 3, 4, 6, 8, 12, ... is coarse; auto also probes midpoints next to the
    winner. On this loop it matches the best K over every K in 1..n-1."""
    module = bulge_loop(12, 32)
    d = 128
    (choice,) = choose_batch_sizes(find_graph(module), d=d).values()
    every = {k: compiled_layers(module, d, f"sequential-scope{{batch-size={k}}}")
             for k in range(1, 12)}
    best = min(v for v in every.values() if v is not None)
    assert choice.layers[choice.k] == best
    assert set(choice.layers) - set(candidate_batch_sizes(12, d, choice.peak)), \
        "no refinement probe was scheduled"


def test_auto_is_deterministic_and_idempotent():
    texts = {print_module(run_pipeline(bulge_loop(12, 32), "sequential-scope{d=128}"))
             for _ in range(2)}
    assert len(texts) == 1
    m = run_pipeline(bulge_loop(12, 32), "sequential-scope{d=128}")
    run_pipeline(m, "sequential-scope{d=128}")
    assert print_module(m) == texts.pop()


def test_auto_searches_two_loops_one_after_the_other():
    with tw.Graph("main") as g:
        x = tw.input("x", 4, (-1.0, 1.0))
        rng = np.random.default_rng(1)

        def body(wide):
            h = tw.mlp(x, rng.uniform(-1, 1, (4, 8)) / 4, None, np.eye(8))
            h = tw.mlp(h, rng.uniform(-1, 1, (8, wide)) / 8, None, np.eye(wide))
            h = tw.mlp(h, rng.uniform(-1, 1, (wide, 8)) / wide, None, np.eye(8))
            return tw.linear(h, rng.uniform(-1, 1, (8, 1)) / 8)

        a = tw.sequential_scope([lambda: body(32)] * 6, "a")
        b = tw.sequential_scope([lambda: body(4)] * 6, "b")
        tw.output("y", tw.concat(a + b))
    ungated = compiled_layers(g.module, 128)
    choices = choose_batch_sizes(find_graph(g.module), d=128)
    assert set(choices) == {"a", "b"} and all(c.searched for c in choices.values())
    # Loop b is searched with loop a already gated at its choice.
    assert choices["b"].layers[0] == choices["a"].layers[choices["a"].k]
    m = check_values(g.module, "sequential-scope{d=128}")
    assert len(afters(m)) == sum(6 - c.k for c in choices.values() if c.k)
    best = min(v for v in choices["b"].layers.values() if v is not None)
    # (gating paid, 9 vs 15, until the scheduler gated new work by itself: now 7 either way)
    assert compiled_layers(m, 128) == best <= ungated


def test_auto_searches_through_library_ops():
    # The trial decomposes its copy (library ops do not lower as they are).
    with tw.Graph("main") as g:
        x = tw.input("x", 2, (-1.0, 1.0))
        ts = tw.sequential_scope(
            [lambda i=i: tw.clamp(tw.linear(x, [[1.0 + i], [0.5]]), -0.5, 0.5) for i in range(4)],
            "loop")
        tw.output("y", tw.concat(ts))
    (choice,) = choose_batch_sizes(find_graph(g.module), d=64).values()
    assert choice.searched and choice.layers[0] is not None
    check_values(g.module, "sequential-scope{d=64}")
