"""The default pipeline (`optimize` / DEFAULT_PIPELINE): meaning kept, depth never worse."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tw_passes import needs_decompose, parse_pipeline, pipeline_passes, run_pipeline
from tw_passes.decompose import DecomposeError, DecomposePass
from tw_passes.optimize import DEFAULT_PIPELINE, DEFAULT_SPEC
from twdialect import evaluate, print_module
from twdialect.analysis import critical_path, first_use_before_def
from twdialect.interp import find_graph
from twdialect.random_graphs import layered_graph, random_graph, sample_inputs

from pass_checks import assert_same  # noqa: E402

N_POS = 5



def test_default_pipeline_starts_with_decompose_and_its_spec_reads_back():
    assert isinstance(DEFAULT_PIPELINE[0], DecomposePass)
    names = [p.name for p in DEFAULT_PIPELINE]
    assert {"canonicalize", "fuse-linears", "balance-sums", "cse", "dce"} <= set(names)
    assert DEFAULT_SPEC.split(",") == names  # every stage at its defaults: bare names
    assert pipeline_passes(DEFAULT_SPEC) == DEFAULT_PIPELINE


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10**6), n_ops=st.integers(3, 40))
@example(seed=10, n_ops=10)  # cse merges two relus read by an add
def test_primitive_graphs_keep_meaning_and_never_get_deeper(seed, n_ops):
    # CSE alone can deepen the floor (merging two single-use writers makes an add that read
    # both non-accumulating), so the bound is what `cse` leaves; the other stages must
    # never add depth.
    module = random_graph(seed, n_ops, library=False)
    inputs = sample_inputs(module, N_POS, seed)
    before = evaluate(module, inputs)
    without_cse = module.clone()
    floor = critical_path(find_graph(module)).floor
    run_pipeline(without_cse, tuple(p for p in DEFAULT_PIPELINE if p.name != "cse"))
    assert critical_path(find_graph(without_cse)).floor <= floor
    deduplicated = module.clone()
    run_pipeline(deduplicated, "cse,dce")
    run_pipeline(module, "optimize")
    module.verify()
    assert first_use_before_def(find_graph(module).block) is None
    assert_same(before, evaluate(module, inputs, n_positions=N_POS))
    assert critical_path(find_graph(module)).floor <= max(
        floor, critical_path(find_graph(deduplicated)).floor)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10**6), n_ops=st.integers(3, 25))
def test_library_graphs_match_plain_decomposition(seed, n_ops):
    # Decomposition is approximate by contract (ramps near thresholds), so compare the
    # optimized graph with the merely decomposed one, not with the ideal oracle.
    module = random_graph(seed, n_ops, library=True)
    plain = module.clone()
    try:
        run_pipeline(plain, "decompose")
    except DecomposeError as e:  # float32 could not keep a library op's contract: refused
        assert "float32 rounding" in str(e) and e.op is not None
        return
    inputs = sample_inputs(module, N_POS, seed)
    run_pipeline(module, "optimize")
    assert not needs_decompose(module)
    assert_same(evaluate(plain, inputs), evaluate(module, inputs, n_positions=N_POS))


def test_default_is_deterministic_and_idempotent_on_a_layered_graph():
    texts = []
    for _ in range(2):
        module, _ = layered_graph(400, seed=3)
        run_pipeline(module, DEFAULT_PIPELINE)
        texts.append(print_module(module))
    assert texts[0] == texts[1]
    module, _ = layered_graph(400, seed=3)
    run_pipeline(module, DEFAULT_PIPELINE)
    run_pipeline(module, DEFAULT_PIPELINE)
    assert print_module(module) == texts[0]


def test_optimize_rejects_itself_in_its_pipeline():
    from twdialect.errors import TwError

    module = random_graph(1, 5, library=False)
    with pytest.raises(TwError, match="optimize"):
        run_pipeline(module, 'optimize{pipeline="optimize"}')


@pytest.mark.parametrize("spec, message", [
    ("cse},dce", "Expected a comma"),  # xDSL's ArgSpecParseError is a BaseException
    ("fuse-linears{", "fuse-linears"),
    ("no-such-pass", "no-such-pass"),
])
def test_bad_pipeline_syntax_is_a_pipeline_error(spec, message):
    from tw_passes import PipelineError

    with pytest.raises(PipelineError, match=message) as info:
        parse_pipeline(spec)
    assert "\n" not in str(info.value)  # one line for the user


@pytest.mark.parametrize("seed", range(6))
def test_compiled_default_pipeline_matches_oracle(seed):
    from tw_lowering import compile

    module = random_graph(seed, 16, library=False)
    inputs = sample_inputs(module, N_POS, seed)
    reference = evaluate(module, inputs)
    assert_same(reference, compile(module, d=128, d_head=8).run(inputs, n_positions=N_POS))  # the lowering alone must already match
    compiled = compile(module, d=128, d_head=8, pipeline="default")
    assert_same(reference, compiled.run(inputs, n_positions=N_POS))


@pytest.mark.slow
def test_sweep_default_pipeline():
    for seed in range(200):
        module = random_graph(seed, 80, library=False)
        inputs = sample_inputs(module, N_POS, seed)
        before = evaluate(module, inputs)
        run_pipeline(module, DEFAULT_PIPELINE)
        assert_same(before, evaluate(module, inputs, n_positions=N_POS))


@pytest.mark.parametrize("spec", [None, 5, b"cse"])
def test_a_pipeline_that_is_not_a_string_is_a_pipeline_error(spec):
    from tw_passes import PipelineError

    with pytest.raises(PipelineError, match="a pipeline is a string .* or a tuple of passes"):
        run_pipeline(random_graph(1, 5, library=False), spec)
