"""bench/passes_effect.py on the bundled token programs: one small program, compiled, under the
default pipeline. The line carries the figures before and after, and the exactness check both
passes on an intact program and catches a broken one."""

from __future__ import annotations

import json

import numpy as np
import pytest
from bench_loader import loaded_bench

from tw_passes.optimize import DEFAULT_SPEC

PROGRAM = "binary_increment"  # small: a few ms to compile, 2 layers
FIGURES = ("ops", "floor", "layers", "heads", "neurons", "graph_params", "allocated_params",
           "exact", "oracle_exact")


@pytest.fixture(scope="module")
def bench():
    with loaded_bench("passes_effect.py") as mod:
        yield mod


def test_example_cases_cover_every_program_and_pipeline(bench):
    import tw_examples as examples

    names = {c.name for c in bench.CASES if c.program}
    for prog in examples.PROGRAMS:
        for pipe in ("default", "horizontal-fuse", "select-tree-to-pwl2d,default",
                     *bench.PIPELINES):
            assert f"example/{prog}/{pipe}" in names
    case = next(c for c in bench.CASES if c.name == f"example/{PROGRAM}/default")
    assert case.pipeline == DEFAULT_SPEC


def test_default_pipeline_on_a_program_keeps_it_exact_and_no_deeper(bench, capsys):
    bench.main(["--examples-only", "--only", f"example/{PROGRAM}/default", "--prompts", "20"])
    lines = [json.loads(s) for s in capsys.readouterr().out.splitlines() if s.startswith("{")]
    assert len(lines) == 1
    row = lines[0]
    assert row["case"] == f"example/{PROGRAM}/default"
    assert row["program"] == PROGRAM and row["prompts"] == 20
    assert "pass_error" not in row
    for side in ("before", "after"):
        missing = [k for k in FIGURES if k not in row[side]]
        assert not missing, f"{side} lacks {missing}: {row[side]}"
    before, after = row["before"], row["after"]
    assert before["exact"] == 1.0 and before["oracle_exact"] == 1.0
    assert row["exact"] is True and after["exact"] == 1.0 and after["oracle_exact"] == 1.0
    assert after["layers"] <= before["layers"]
    assert after["floor"] <= before["floor"]
    assert after["ops"] <= before["ops"]


def test_exactness_check_catches_a_broken_program(bench, monkeypatch):
    """A 'pass' that negates the logits MLP is reported exact: false (the check is not
    vacuous)."""
    from twdialect.dense import dense, to_numpy
    from twdialect.interp import find_graph

    real = bench.run_pipeline

    def breaking(module, spec):
        real(module, spec)
        out = next(op for op in find_graph(module).block.ops if op.name == "tw.output")
        mlp = out.operands[0].owner
        assert mlp.name == "tw.mlp"
        mlp.properties["w2"] = dense(-to_numpy(mlp.w2))
        if mlp.b2 is not None:
            mlp.properties["b2"] = dense(-to_numpy(mlp.b2))

    monkeypatch.setattr(bench, "run_pipeline", breaking)
    row = bench.run_example(PROGRAM, "default", compiled=True, n_prompts=10)
    assert row["before"]["exact"] == 1.0
    assert row["exact"] is False
    assert row["after"]["exact"] < 1.0 and row["after"]["oracle_exact"] < 1.0
    assert np.isfinite(row["after"]["layers"])
