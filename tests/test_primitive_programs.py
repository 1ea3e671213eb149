"""The torchwright-style primitive programs (examples/primitive): exact under the oracle, made
of primitives only (every relu between two linears: no tw.mlp, no library op), compiled
models match the oracle, and bench/primitive_graphs.py runs."""

from __future__ import annotations

import json

import numpy as np
import pytest
from bench_loader import loaded_bench

import tw_examples.primitive as prim
from tw_examples.primitive import prims as P
from tw_examples.primitive import synthetic
from tw_examples.token_program import matches_reference
from twdialect import evaluate
from twdialect import ops as tw
from twdialect.interp import find_graph

ALLOWED = {"tw.input", "tw.embedding", "tw.pos_encoding", "tw.linear", "tw.relu", "tw.add",
           "tw.concat", "tw.slice", "tw.attn", "tw.literal", "tw.output"}


@pytest.fixture(scope="module")
def programs():
    return {name: prim.load(name) for name in prim.PROGRAMS}


def assert_primitive(module):
    ops = list(find_graph(module).block.ops)
    kinds = {op.name for op in ops}
    assert kinds <= ALLOWED, f"non-primitive ops: {sorted(kinds - ALLOWED)}"
    for op in ops:
        if op.name == "tw.relu":  # a sandwich: linear -> relu -> linear(s)
            assert op.operands[0].owner.name == "tw.linear"
            assert all(u.operation.name == "tw.linear" for u in op.results[0].uses)


def test_every_program_is_listed_and_loads(programs):
    assert set(prim.available()) == set(prim.PROGRAMS)
    assert len(programs) >= 7
    with pytest.raises(KeyError):
        prim.load("nope")


@pytest.mark.parametrize("name", prim.PROGRAMS)
def test_program_is_primitive_and_exact_under_the_oracle(programs, name):
    program = programs[name]
    assert_primitive(program.module)
    ops = sum(1 for op in find_graph(program.module).block.ops if op.name != "tw.output")
    assert 40 <= ops <= 2100
    rng = np.random.default_rng(7)
    prompts = [program.sample(rng) for _ in range(6)]
    bad = [q for q in prompts if not matches_reference(program, q)]
    assert not bad, f"{name}: wrong answers on {bad}"


def test_prompts_are_not_padded_by_the_host(programs):
    assert programs["adder"].normalize("7+45") == "7+45="
    assert programs["calculator"].normalize("5-17") == "5-17="
    assert programs["caesar"].normalize("3:ab") == "3:ab="


def test_edge_prompts_under_the_oracle(programs):
    cases = {"adder": ["0+0=", "999+999=", "1+999="],
             "calculator": ["0-999=", "999*999=", "10-10=", "7*8="],
             "binary_increment": ["1=", "0=", "1" * 24 + "="],
             "fibonacci": ["9999,9999", "0,0"],
             "balanced_parens": ["()=", ")(=", "([)]="],
             "sort_digits": ["0=", "9" * 24 + "="],
             "caesar": ["25:z=", "3:hello world="]}
    for name, prompts in cases.items():
        for q in prompts:
            assert matches_reference(programs[name], q), f"{name} {q!r}"


def test_helpers_are_exact_on_integers():
    with tw.Graph("main") as g:
        x = tw.input("x", 1, value_range=(-20, 20), integer=True)
        y = tw.input("y", 1, value_range=(-20, 20), integer=True)
        c = P.compare(x, 3)
        outs = {"sel": P.select(c, x, y, 32), "mul": P.multiply_int(x, y, (-20, 20), (-20, 20)),
                "dm": P.divmod_const(x, 7, -20, 20), "mn": P.minimum(x, y),
                "eq": P.equals(x, -4), "or": P.bool_or(c, P.compare(y, 0))}
        for k, v in outs.items():
            tw.output(k, v)
    assert_primitive(g.module)
    v = np.arange(-20, 21, dtype=np.float64)
    X, Y = (a.reshape(-1, 1) for a in np.meshgrid(v, v))
    r = evaluate(g.module, {"x": X, "y": Y})
    x, y = X[:, 0], Y[:, 0]
    assert np.array_equal(r["sel"][:, 0], np.where(x >= 3, x, y))
    assert np.array_equal(r["mul"][:, 0], x * y)
    assert np.array_equal(r["dm"], np.stack([x // 7, x % 7], 1))
    assert np.array_equal(r["mn"][:, 0], np.minimum(x, y))
    assert np.array_equal(r["eq"][:, 0], np.where(x == -4, 1.0, -1.0))
    assert np.array_equal(r["or"][:, 0], np.where((x >= 3) | (y >= 0), 1.0, -1.0))


def test_synthetic_graphs_are_primitive_and_evaluate():
    for syn in synthetic.default_suite(quick=True):
        assert_primitive(syn.module)
        inputs = syn.sample(np.random.default_rng(0))
        out = evaluate(syn.module, inputs)
        assert all(np.all(np.isfinite(v)) for v in out.values())
    a, b = synthetic.sandwich_chain(10, 3), synthetic.sandwich_chain(10, 3)
    assert a.module.is_structurally_equivalent(b.module)  # seeded


@pytest.mark.parametrize("name,pipeline", [("caesar", None), ("binary_increment", "default")])
def test_small_program_compiles_and_matches(programs, name, pipeline):
    from tw_lowering import compile  # noqa: A004

    program = programs[name]
    ct = compile(program.module, d=1024, d_head=16, d_hidden=1024, pipeline=pipeline)
    assert ct.stats.n_layers >= ct.stats.floor
    rng = np.random.default_rng(3)
    for _ in range(5):
        q = program.sample(rng)
        assert matches_reference(program, q, ct.run), q


def test_synthetic_attention_on_a_position_input_compiles():
    from tw_lowering import compile  # noqa: A004

    for kind in ("quadratic", "onehot"):
        syn = synthetic.attention_chain(3, 2, kind)
        ct = compile(syn.module, d=256, d_head=16, d_hidden=256)
        inputs = syn.sample(np.random.default_rng(1))
        ref = evaluate(syn.module, inputs)
        got = ct.run(inputs)
        assert np.allclose(got["y"], ref["y"], atol=1e-4)


@pytest.fixture(scope="module")
def bench():
    with loaded_bench("primitive_graphs.py") as mod:
        yield mod


def test_bench_quick_on_one_program(bench, capsys):
    bench.main(["--quick", "--only", "primitive/caesar", "--prompts", "4"])
    rows = [json.loads(s) for s in capsys.readouterr().out.splitlines() if s.startswith("{")]
    assert [r["pipeline"] for r in rows] == ["none", "default"]
    for r in rows:
        assert r["case"] == "primitive/caesar" and (r["d"], r["d_head"]) == (512, 16)
        for k in ("ops", "floor", "layers", "heads", "neurons", "allocated_params",
                  "compile_seconds", "exact", "oracle_exact"):
            assert k in r, k
        assert r["exact"] == 1.0 and r["oracle_exact"] == 1.0
        assert r["layers"] >= r["floor"]


def test_bench_reports_a_geometry_error_instead_of_crashing(bench):
    syn = synthetic.parallel_chains(8, 2, 0)
    syn.d = 16
    case = bench.Case("synthetic/narrow", "synthetic", lambda: syn)
    row = bench.measure(case, syn, None, 2, 0, search=True)
    assert "error" in row and "\n" not in row["error"]
    assert row["smallest_d"] is None or row["smallest_d"] > 16


@pytest.mark.slow
@pytest.mark.parametrize("name", prim.PROGRAMS)
def test_program_compiles_at_the_anchor_width(programs, bench, name):
    from tw_lowering import compile  # noqa: A004

    program = programs[name]
    d, d_head = bench.ANCHOR_GEOMETRY[name]
    rng = np.random.default_rng(11)
    prompts = [program.sample(rng) for _ in range(20)]
    for pipeline in (None, "default"):
        ct = compile(program.module, d=d, d_head=d_head, d_hidden=d, pipeline=pipeline)
        bad = [q for q in prompts if not matches_reference(program, q, ct.run)]
        assert not bad, f"{name} {pipeline}: {bad[:3]}"
