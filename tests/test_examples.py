"""The bundled token programs: exact answers through the oracle and the compiled model,
floors no deeper than the anchor compiler's, helper arithmetic exact on integers, and the
`tw-run` error contract. Long sweeps (>= 500 prompts per program) are marked slow."""

from __future__ import annotations

import functools

import numpy as np
import pytest

import tw_examples as examples
import twdialect
from tw_examples.token_program import (
    PromptError,
    Space,
    build_mlp,
    eq,
    floor_steps,
    gate,
    gate_eq,
    generate,
    integer_function,
    lin,
    matches_reference,
    step,
    switch,
)
from twdialect import ops as tw
from twdialect.analysis import critical_path
from twdialect.interp import find_graph

PROGRAMS = examples.PROGRAMS

# Hand-picked prompts per program: carries, overflow, signs, empty-ish and extreme inputs.
EDGE_PROMPTS = {
    "adder": ["123+456=", "555+445=", "0+0=", "999+999=", "5+7=", "1+999=", "500+500="],
    "calculator": ["12*34=", "5-17=", "0-0=", "999*999=", "1-999=", "999-998=", "102-99=",
                   "0*7=", "999+999=", "100*10=", "10-100="],
    "binary_increment": ["1011=", "111=", "0=", "1=", "0011", "1000", "101111",
                         "1" * 24, "0" * 24],
    "sort_digits": ["3141=", "0", "9876543210", "5555", "1" + "0" * 23, "90"],
    "caesar": ["3:hello world=", "25:abc xyz", "0:z=", "13:Hello", "1: ", "7:" + "z" * 40],
    "fibonacci": ["0,1", "1,1", "0,0", "9999,1", "5000,4999", "5,7", "0,9999"],
    "balanced_parens": ["([]{})=", "([)]=", "(", ")", "()", "(()", "())(", "{[()()]}",
                        "(]", "(" * 20 + ")" * 20, "(" * 40, "[(])", "{}{}{}{}()[]"],
}

BAD_PROMPTS = {
    "adder": ["1234+5=", "12-3=", "12+x=", ""],
    "calculator": ["12/3=", "1+2+3=", "-1+2="],
    "binary_increment": ["102=", "1" * 25, "="],
    "sort_digits": ["12a=", "1" * 25],
    "caesar": ["26:abc", "3:ABC1", "3:" + "a" * 41, "hello"],
    "fibonacci": ["1", "1,2,3", "10000,1"],
    "balanced_parens": ["(a)", "(" * 41, ""],
}


@functools.cache
def program(name):
    return examples.load(name)


@functools.cache
def compiled(name):
    from tw_lowering import compile  # noqa: A004

    p = program(name)
    g = p.geometry
    return compile(p.module, d=g.d, d_head=g.d_head, d_hidden=g.d_hidden)


def lowering_available() -> bool:
    try:
        from tw_lowering import compile  # noqa: F401, A004
    except ImportError:
        return False
    return True


needs_lowering = pytest.mark.skipif(not lowering_available(), reason="lowering not built yet")


def prompts(name: str, n: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    p = program(name)
    return [p.sample(rng) for _ in range(n)]


def assert_exact(name: str, cases: list[str], runner=None) -> None:
    """Greedy generation reproduces the reference answer for every prompt."""
    p = program(name)
    wrong = [(q, got, want) for q in cases
             if (got := generate(p, q, runner)) != (want := p.reference(q))]
    assert not wrong, f"{name}: {len(wrong)}/{len(cases)} wrong, e.g. {wrong[:3]}"


def assert_exact_forced(name: str, cases: list[str], runner=None) -> None:
    """The same condition, checked with one forward pass per prompt (matches_reference)."""
    p = program(name)
    wrong = [q for q in cases if not matches_reference(p, q, runner)]
    assert not wrong, f"{name}: {len(wrong)}/{len(cases)} wrong, e.g. {wrong[:3]}"


# --------------------------------------------------------------------------------------
# Programs through the oracle
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", PROGRAMS)
def test_oracle_exact_on_edge_and_random_prompts(name):
    assert_exact(name, EDGE_PROMPTS[name] + prompts(name, 5))
    assert_exact_forced(name, prompts(name, 40, seed=3))


def test_forced_check_fails_on_a_wrong_program():
    """matches_reference is not vacuous: a reference that disagrees is reported."""
    import dataclasses

    p = program("adder")
    off_by_one = dataclasses.replace(p, reference=lambda q: str(int(p.reference(q)) + 1))
    assert matches_reference(p, "555+445=")
    assert not matches_reference(off_by_one, "555+445=")


@pytest.mark.parametrize("name", PROGRAMS)
def test_floor_is_below_the_anchor(name):
    p = program(name)
    floor = critical_path(find_graph(p.module)).n_layers
    assert floor >= 1
    if p.anchor.best is not None:
        assert floor < p.anchor.best, f"{name}: floor {floor} vs anchor {p.anchor.best}"


def test_floors_are_as_designed():
    want = {"adder": 2, "calculator": 3, "binary_increment": 2, "sort_digits": 2, "caesar": 2,
            "fibonacci": 5, "balanced_parens": 4}
    got = {n: critical_path(find_graph(program(n).module)).n_layers for n in PROGRAMS}
    assert got == want


@pytest.mark.parametrize("name", PROGRAMS)
def test_bad_prompts_are_rejected_with_one_line(name):
    p = program(name)
    for q in BAD_PROMPTS[name]:
        with pytest.raises(PromptError) as info:
            p.encode(q)
        assert "\n" not in str(info.value) and name in str(info.value)


@pytest.mark.parametrize("name", PROGRAMS)
def test_oracle_generate_agrees_with_the_host_loop(name):
    """twdialect.generate with argmax feedback emits the same tokens as `generate`."""
    p = program(name)
    q = EDGE_PROMPTS[name][0]
    want = p.reference(q) + p.end
    ids = p.encode(q)
    out = twdialect.generate(p.module, {"tokens": ids}, len(want) - 1,
                             lambda last: {"tokens": int(np.argmax(last["logits"]))})
    got = p.decode(np.argmax(out["logits"][len(ids) - 1:], axis=1))
    assert got == want


def test_wrong_reference_is_detected():
    """The exactness check can fail: a program answering a different question is caught."""
    p = program("adder")
    assert generate(p, "555+445=") == "1000"
    assert generate(p, "555+445=") != str(555 + 444)


# --------------------------------------------------------------------------------------
# Helper arithmetic: exact on integers (through the oracle)
# --------------------------------------------------------------------------------------


def _eval_exprs(build, xs: np.ndarray) -> np.ndarray:
    """Build one MLP over an input x (width xs.shape[1]) and evaluate it at rows of xs."""
    with tw.Graph("main") as g:
        x = tw.input("x", xs.shape[1], value_range=(-1000.0, 1000.0))
        s = Space([x])
        tw.output("y", build_mlp(s, build(s, x)))
    return twdialect.evaluate(g.module, {"x": xs})["y"]


def test_integer_helpers_are_exact():
    ks = np.arange(-12, 13, dtype=np.float64)
    grid = np.array([[k, v] for k in ks for v in range(0, 10)], dtype=np.float64)

    def build(s, x):
        k, v = s.var(x, 0), s.var(x, 1)
        return [step(k), eq(k), lin(k), gate(v, 9.0, k), gate_eq(v, 9.0, k),
                integer_function(k, -12, 12, lambda z: z * z - 3 * z),
                floor_steps(k * 7.0, -9, 9, 10.0), switch(lin(v) * 2.0 + 5.0, k - 0.0, 40.0)]

    y = _eval_exprs(build, grid)
    k, v = grid[:, 0], grid[:, 1]
    want = np.stack([k >= 0, k == 0, k, v * (k >= 0), v * (k == 0), k * k - 3 * k,
                     np.floor(7 * k / 10.0), np.where(k == 1, 2 * v + 5, np.nan)], axis=1)
    np.testing.assert_allclose(y[:, :7], want[:, :7].astype(float), atol=1e-9)
    # switch is specified for 0/1 flags only
    flag = np.isin(k, (0.0, 1.0))
    np.testing.assert_allclose(y[flag, 7], np.where(k[flag] == 1, 2 * v[flag] + 5, 0.0),
                               atol=1e-9)


def test_build_mlp_shares_identical_neurons():
    with tw.Graph("main") as g:
        x = tw.input("x", 1, value_range=(-5.0, 5.0))
        s = Space([x])
        y = build_mlp(s, [step(s.var(x)), step(s.var(x)) * 2.0])
        tw.output("y", y)
    assert tw.weights(y, "w1").shape[1] == 2
    out = twdialect.evaluate(g.module, {"x": np.array([[-1.0], [3.0]])})["y"]
    np.testing.assert_allclose(out, [[0.0, 0.0], [1.0, 2.0]])


def test_build_mlp_constant_outputs():
    from tw_examples.token_program import Expr

    with tw.Graph("main") as g:
        x = tw.input("x", 1, value_range=(-5.0, 5.0))
        tw.output("y", build_mlp(Space([x]), [Expr(3.0), Expr(-1.5)]))
    out = twdialect.evaluate(g.module, {"x": np.array([[-4.0], [2.0]])})["y"]
    np.testing.assert_allclose(out, [[3.0, -1.5], [3.0, -1.5]])


# --------------------------------------------------------------------------------------
# Compiled models
# --------------------------------------------------------------------------------------


@needs_lowering
@pytest.mark.parametrize("name", PROGRAMS)
def test_compiled_exact_and_no_deeper_than_the_anchor(name):
    ct = compiled(name)
    p = program(name)
    floor = critical_path(find_graph(p.module)).n_layers
    assert ct.stats.floor <= ct.stats.n_layers
    assert ct.stats.n_layers >= floor
    if p.anchor.best is not None:
        assert ct.stats.n_layers < p.anchor.best
    shortest = sorted(EDGE_PROMPTS[name], key=lambda q: (len(p.reference(q)), q))[:2]
    assert_exact(name, shortest, ct.run)  # the host loop itself, on the quickest prompts
    assert_exact_forced(name, EDGE_PROMPTS[name] + prompts(name, 20, seed=1), ct.run)


@needs_lowering
@pytest.mark.parametrize("name, q", [("adder", "555+445="), ("binary_increment", "111="),
                                     ("fibonacci", "123,4567"), ("calculator", "5-17=")])
def test_compiled_generate_with_kv_cache_matches(name, q):
    p = program(name)
    ct = compiled(name)
    want = p.reference(q) + p.end
    ids = p.encode(q)
    out = ct.generate({"tokens": ids}, len(want) - 1,
                      lambda last: {"tokens": int(np.argmax(last["logits"]))})
    assert p.decode(np.argmax(out["logits"][len(ids) - 1:], axis=1)) == want


# --------------------------------------------------------------------------------------
# tw-run
# --------------------------------------------------------------------------------------


def _tw_run(capsys, *argv):
    from tw_tools.tw_run import main

    try:
        code = main(list(argv))
    except SystemExit as e:
        code = e.code
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("argv, message", [
    (("nope", "1+1="), "unknown program 'nope'"),
    (("adder", "12a+4="), "must look like"),
    (("caesar", "3:" + "a" * 60), "must look like"),
    (("adder",), "usage"),
])
def test_tw_run_errors_are_one_line(capsys, argv, message):
    code, out, err = _tw_run(capsys, *argv)
    assert code == 1 and out == ""
    assert err.count("\n") == 1 and err.startswith("tw-run: error: ") and message in err


def test_tw_run_oracle(capsys):
    code, out, err = _tw_run(capsys, "calculator", "5-17=", "--oracle")
    assert code == 0 and out.splitlines()[0] == "-12" and err == ""


@needs_lowering
def test_tw_run_compiled(capsys):
    import json

    code, out, _ = _tw_run(capsys, "adder", "555+445=")
    assert code == 0
    answer, size = out.splitlines()
    assert answer == "1000" and "layers (floor" in size and "compiled in" in size
    code, out, _ = _tw_run(capsys, "adder", "555+445=", "--json")
    info = json.loads(out)
    assert info["answer"] == "1000" and info["n_layers"] <= 13 and info["d"] == 1024


@needs_lowering
def test_tw_run_geometry_too_small_is_one_line(capsys):
    code, out, err = _tw_run(capsys, "adder", "1+1=", "--d", "8", "--d-head", "4")
    assert code == 1 and err.count("\n") == 1 and "does not compile" in err


# --------------------------------------------------------------------------------------
# Long sweeps
# --------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("name", PROGRAMS)
def test_oracle_sweep_500(name):
    assert_exact_forced(name, prompts(name, 500, seed=7))


@needs_lowering
@pytest.mark.slow
@pytest.mark.parametrize("name", PROGRAMS)
def test_compiled_sweep_500(name):
    assert_exact_forced(name, prompts(name, 500, seed=8), compiled(name).run)


@pytest.mark.parametrize("name", PROGRAMS)
def test_graph_is_deterministic_and_round_trips_as_text(name):
    p = program(name)
    text = twdialect.print_module(p.module)
    assert text == twdialect.print_module(examples.load(name).module)
    parsed = twdialect.parse_module(text)
    ids = p.encode(EDGE_PROMPTS[name][0])
    want = twdialect.evaluate(p.module, {"tokens": ids})["logits"]
    got = twdialect.evaluate(parsed, {"tokens": ids})["logits"]
    np.testing.assert_allclose(got, want, atol=1e-4)
