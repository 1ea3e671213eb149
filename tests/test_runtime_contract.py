"""The run-time input contract (`twdialect.inputs`): the oracle and the compiled model accept the
same inputs, refuse the same ones with the same one-line message, clamp alike when asked, keep
causality whatever later positions hold, and `generate` keeps fed-back values as they are."""

from __future__ import annotations

import numpy as np
import pytest

from tw_lowering import compile
from twdialect import EvaluationError, evaluate, generate
from twdialect import ops as tw
from twdialect.inputs import InputContract, check_inputs
from model_checks import readme_graph  # noqa: E402

TABLE = np.array([[0.0, 1.0], [1.0, 0.0], [2.0, -1.0], [-1.0, 2.0], [0.5, 0.5]])


def _mixed_graph():
    """Every kind of source: a real input, an integer input, tokens and positions; the output
    reads them all through an attention (a prefix mean) and an MLP."""
    with tw.Graph() as g:
        x = tw.input("x", 2, value_range=(-8.0, 8.0))
        k = tw.input("k", 1, value_range=(0.0, 9.0), integer=True)
        e = tw.embedding("tokens", TABLE)
        p = tw.pos_encoding(2, max_len=16)
        s = tw.linear(tw.concat(x, k, e, p), np.arange(14.0).reshape(7, 2) / 10.0, [0.5, -0.5])
        mean = tw.attn(tw.literal([1.0]), s, s, np.ones((1, 1)), np.zeros((2, 1)), np.eye(2),
                       np.eye(2))
        tw.output("y", tw.add(tw.relu(s), mean))
    return g.module


@pytest.fixture(scope="module")
def mixed():
    module = _mixed_graph()
    return module, compile(module, d=32, d_head=8, d_hidden=64)


def _good(n=4):
    rng = np.random.default_rng(0)
    return {"x": rng.uniform(-8, 8, (n, 2)), "k": rng.integers(0, 10, (n, 1)).astype(float),
            "tokens": rng.integers(0, 5, n)}


def _refusal(fn) -> str:
    with pytest.raises(EvaluationError) as e:
        fn()
    msg = str(e.value)
    assert msg and "\n" not in msg
    return msg


def _same_refusal(module, ct, inputs, **kw) -> str:
    """Oracle, compiled run and compiled generate (prefill) refuse alike; the message."""
    want = _refusal(lambda: evaluate(module, inputs, **kw))
    assert _refusal(lambda: ct.run(inputs, **kw)) == want
    assert _refusal(lambda: ct.generate(inputs, 0, lambda o: {}, **kw)) == want
    assert _refusal(lambda: generate(module, inputs, 0, lambda o: {}, **kw)) == want
    return want


# -- the README example -----------------------------------------------------------------------


def test_readme_example_refuses_out_of_range_and_clamps_alike():
    module = readme_graph()
    ct = compile(module, d=64, d_head=8, d_hidden=256, pipeline="default")
    bad = {"x": np.array([[20.0, -30.0]])}
    msg = _same_refusal(module, ct, bad)
    assert msg.startswith('input "x" position 0 component 0 holds 20.0, outside its declared '
                          "range [-8.0, 8.0] (1 other value too)")
    assert 'on_out_of_range="clamp"' in msg
    want = evaluate(module, bad, on_out_of_range="clamp")["y"]
    np.testing.assert_array_equal(want, [[8.0, -8.0]])  # the oracle on (8, -8)
    np.testing.assert_allclose(ct.run(bad, on_out_of_range="clamp")["y"], want, atol=1e-4)
    inside = {"x": np.random.default_rng(1).uniform(-8, 8, (6, 2))}
    np.testing.assert_allclose(ct.run(inside)["y"], evaluate(module, inside)["y"], atol=1e-4)


# -- refusals, side by side ---------------------------------------------------------------------


def _with(**changes):
    feeds = _good()
    for k, v in changes.items():
        if v is None:
            del feeds[k]
        else:
            feeds[k] = v
    return feeds


BAD_INPUTS = {
    "missing": (_with(k=None), 'missing input "k": shape (n_positions, 1), integers in [0.0, 9.0]'),
    "missing tokens": (_with(tokens=None), 'missing token input "tokens": one id in [0, 5)'),
    "unknown": (_with(z=np.zeros((4, 1))), 'unknown input "z" (the graph\'s inputs: "x", "k", '
                                           '"tokens")'),
    "wrong width": (_with(x=np.zeros((4, 3))), 'input "x" must be shaped (n_positions, 2), got '
                                               "(4, 3)"),
    "vector for a wide input": (_with(x=np.zeros(4)), 'input "x" must be shaped'),
    "three dims": (_with(x=np.zeros((4, 2, 1))), 'input "x" must be shaped'),
    "scalar": (_with(k=3.0), 'input "k" must be shaped (n_positions, 1), got ()'),
    "empty": ({"x": np.zeros((0, 2)), "k": np.zeros((0, 1)), "tokens": np.zeros(0, int)},
              'input "x" has no positions: a sequence needs at least one'),
    "position counts differ": (_with(k=np.zeros((3, 1))), 'input "k" has 3 positions, expected 4'),
    "booleans": (_with(x=np.ones((4, 2), bool)), 'input "x" holds booleans (dtype bool), not '
                                                 "real numbers"),
    "complex": (_with(x=np.ones((4, 2)) * 1j), 'input "x" holds complex numbers'),
    "strings": (_with(x=[["1", "2"]] * 4), 'input "x" holds strings'),
    "objects": (_with(x=np.array([[None, 1.0]] * 4, dtype=object)), 'input "x" holds NoneType '
                                                                    "values"),
    "ragged": (_with(x=[[1.0, 2.0], [3.0]] * 2), 'input "x" is not an array of numbers'),
    "nan": (_with(x=np.array([[0, 0], [0, 0], [0, np.nan], [0, 0]])),
            'input "x" position 2 component 1 holds nan, not a finite number'),
    "inf": (_with(x=np.array([[0, 0], [-np.inf, 0], [0, 0], [0, 0]])),
            'input "x" position 1 component 0 holds -inf, not a finite number'),
    "above range": (_with(x=np.array([[0, 0], [0, 0], [0, 0], [0, 8.5]])),
                    'input "x" position 3 component 1 holds 8.5, outside its declared range '
                    "[-8.0, 8.0]; pass"),
    "non-integer": (_with(k=np.array([[1.0], [2.0], [2.5], [3.0]])),
                    'input "k" is declared integer but position 2 component 0 holds 2.5'),
    "token 1.5": (_with(tokens=np.array([0, 1.5, 2, 3])),
                  'token input "tokens" position 1 holds 1.5, not a token id (an integer in '
                  "[0, 5))"),
    "token -1": (_with(tokens=np.array([0, 1, -1, 3])), "position 2 holds -1.0, not a token id"),
    "token = vocab": (_with(tokens=np.array([5, 1, 2, 3])), "position 0 holds 5.0, not a token"),
    "token nan": (_with(tokens=np.array([0, np.nan, 2, 3])), "position 1 holds nan, not a token"),
    "token ids 2-d": (_with(tokens=np.zeros((4, 2), int)), 'token input "tokens" must hold one '
                                                           "id per position"),
    "token booleans": (_with(tokens=np.ones(4, bool)), 'token input "tokens" holds booleans'),
    "beyond max_len": ({"x": np.zeros((17, 2)), "k": np.zeros((17, 1)), "tokens": np.zeros(17)},
                       "position 16 is beyond the graph's tw.pos_encoding max_len 16"),
    "not a mapping": ([np.zeros((4, 2))], "inputs must be a mapping {name: array}, got list"),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_oracle_and_compiled_model_refuse_alike(mixed, case):
    module, ct = mixed
    inputs, expected = BAD_INPUTS[case]
    assert expected in _same_refusal(module, ct, inputs)


def test_bad_on_out_of_range_option_is_refused(mixed):
    module, ct = mixed
    msg = _same_refusal(module, ct, _good(), on_out_of_range="saturate")
    assert msg == "on_out_of_range='saturate' is not one of \"error\", \"clamp\", \"unchecked\""


def test_n_positions_must_agree_with_the_inputs(mixed):
    module, ct = mixed
    msg = _same_refusal(module, ct, _good(4), n_positions=3)
    assert msg == ('input "x" has 4 positions, expected 3 (as n_positions): every input needs '
                   "the same number")
    assert "on_out_of_range=['clamp'] is not one of" in _same_refusal(
        module, ct, _good(), on_out_of_range=["clamp"])


def test_unchecked_still_refuses_what_cannot_be_fed(mixed):
    module, ct = mixed
    for case in ("missing", "unknown", "wrong width", "empty", "booleans", "token 1.5",
                 "token = vocab"):
        _same_refusal(module, ct, BAD_INPUTS[case][0], on_out_of_range="unchecked")


def test_accepted_forms_convert_alike(mixed):
    """Lists, ints, float32, (n,) for a width-1 input and (n, 1) token ids all mean the same."""
    module, ct = mixed
    feeds = _good()
    want = evaluate(module, feeds)["y"]
    other = {"x": feeds["x"].astype(np.float32).astype(np.float64).tolist(),
             "k": feeds["k"].reshape(-1).astype(np.int32),
             "tokens": feeds["tokens"].astype(np.float64).reshape(-1, 1)}
    x32 = np.asarray(other["x"])
    np.testing.assert_allclose(evaluate(module, other)["y"], evaluate(module, {**feeds, "x": x32})
                               ["y"], atol=0)
    np.testing.assert_allclose(ct.run(other)["y"], want, atol=1e-4 * max(1, np.abs(want).max()))


def test_clamp_agrees_on_both_and_keeps_integers_integer(mixed):
    module, ct = mixed
    feeds = _with(x=np.array([[-20, 3], [1, 30], [0, 0], [9, -9]]),
                  k=np.array([[-4.0], [12.0], [3.0], [9.0]]))
    want = evaluate(module, feeds, on_out_of_range="clamp")["y"]
    clamped = _with(x=np.array([[-8, 3], [1, 8], [0, 0], [8, -8]]),
                    k=np.array([[0.0], [9.0], [3.0], [9.0]]))
    np.testing.assert_array_equal(want, evaluate(module, clamped)["y"])
    np.testing.assert_allclose(ct.run(feeds, on_out_of_range="clamp")["y"], want,
                               atol=1e-4 * max(1, np.abs(want).max()))
    # Clamp is about the range, never rounding: a non-integer is still refused.
    _same_refusal(module, ct, _with(k=np.array([[0.5], [1], [2], [3]])), on_out_of_range="clamp")
    _same_refusal(module, ct, BAD_INPUTS["nan"][0], on_out_of_range="clamp")
    # An integer input whose bounds are not integers clamps to the integers inside them.
    with tw.Graph() as g:
        tw.output("y", tw.input("i", 1, value_range=(0.5, 9.5), integer=True))
    got = evaluate(g.module, {"i": [[-3.0], [20.0]]}, on_out_of_range="clamp")["y"]
    np.testing.assert_array_equal(got, [[1.0], [9.0]])


def test_graph_without_inputs_needs_n_positions():
    with tw.Graph() as g:
        tw.output("p", tw.pos_encoding(2, max_len=8))
    ct = compile(g.module, d=16, d_head=4)
    for fn in (lambda: evaluate(g.module, {}), lambda: ct.run({})):
        assert "the graph has no inputs: pass n_positions" in _refusal(fn)
    for n in (0, -1, 2.5, True):
        msg = _refusal(lambda: evaluate(g.module, {}, n_positions=n))
        assert msg == _refusal(lambda: ct.run({}, n_positions=n))
    np.testing.assert_array_equal(ct.run({}, n_positions=3)["p"],
                                  evaluate(g.module, {}, n_positions=3)["p"])
    assert "max_len 8" in _refusal(lambda: ct.run({}, n_positions=9))


def test_contract_is_the_same_object_for_oracle_and_compiled(mixed):
    """The compiled model reads its contract from the compiled graph's own declarations."""
    module, ct = mixed
    from twdialect.interp import find_graph

    assert ct.contract == InputContract.of(find_graph(module))
    checked = check_inputs(ct.contract, _good())
    assert checked.n_positions == 4 and checked.values["tokens"].dtype == np.int64


# -- causality ----------------------------------------------------------------------------------


def _prefix_graph():
    """Per position: a prefix mean of relu(x W) through one attention, then an MLP."""
    with tw.Graph() as g:
        x = tw.input("x", 2, value_range=(-4.0, 4.0))
        h = tw.relu(tw.linear(x, [[1.0, -1.0, 0.5], [0.5, 2.0, -1.0]], [0.1, 0.2, 0.3]))
        mean = tw.attn(tw.linear(x, [[0.2], [0.1]]), h, h, np.ones((1, 1)),
                       np.array([[0.3], [-0.2], [0.1]]), np.eye(3), np.eye(3))
        tw.output("y", tw.mlp(tw.add(mean, h), np.eye(3), np.zeros(3), np.eye(3)))
    return g.module


@pytest.fixture(scope="module")
def prefix():
    module = _prefix_graph()
    return module, compile(module, d=32, d_head=4)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # numpy on the poisoned rows
@pytest.mark.parametrize("poison", [np.nan, np.inf, -np.inf, 3e38])
def test_a_later_non_finite_position_leaves_earlier_outputs_alone(prefix, poison):
    module, ct = prefix
    x = np.random.default_rng(3).uniform(-4, 4, (7, 2))
    bad = x.copy()
    bad[-1, 0] = poison
    feeds, poisoned = {"x": x}, {"x": bad}
    kw = {"on_out_of_range": "unchecked"}
    for run in (lambda f: evaluate(module, f, **kw), lambda f: ct.run(f, **kw),
                lambda f: ct.generate(f, 0, lambda o: {}, **kw)):
        np.testing.assert_array_equal(run(poisoned)["y"][:-1], run(feeds)["y"][:-1])
    # Through the KV cache: the poison in the prefill, then steps that read it.
    steps = ct.generate(poisoned, 2, lambda o: {"x": [0.5, -0.5]}, **kw)["y"]
    np.testing.assert_array_equal(steps[:6], ct.run(feeds)["y"][:6])
    # A poison in the middle spoils nothing before it.
    mid = x.copy()
    mid[3, 1] = poison
    got = ct.generate({"x": mid[:5]}, 2, lambda o: {"x": [1.0, 1.0]}, **kw)["y"]
    np.testing.assert_array_equal(got[:3], ct.run({"x": x[:3]})["y"])
    np.testing.assert_array_equal(evaluate(module, {"x": mid}, **kw)["y"][:3],
                                  evaluate(module, {"x": x[:3]})["y"])


def test_weighted_values_rule_is_the_same_in_oracle_and_model():
    """Zero weight contributes 0 whatever the value; positive weight gives IEEE's sum."""
    import torch

    from tw_lowering.model import weighted_values as model_rule
    from twdialect.interp import weighted_values as oracle_rule

    p = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [0.25, 0.25, 0.5]])
    v = np.array([[1.0, 2.0], [np.inf, -1.0], [np.nan, -np.inf]])
    want = np.array([[1.0, 2.0], [np.inf, 0.5], [np.nan, -np.inf]])
    np.testing.assert_array_equal(oracle_rule(p, v), want)
    got = model_rule(torch.tensor(p, dtype=torch.float32), torch.tensor(v, dtype=torch.float32))
    np.testing.assert_array_equal(got.numpy(), want)
    mixed_inf = np.array([[np.inf], [-np.inf], [0.0]])
    assert np.isnan(oracle_rule(p, mixed_inf)[1, 0]) and oracle_rule(p, mixed_inf)[0, 0] == np.inf


# -- generate -----------------------------------------------------------------------------------


def _halving_graph(integer=False):
    with tw.Graph() as g:
        x = tw.input("x", 1, value_range=(-100.0, 100.0), integer=integer)
        tw.output("y", tw.linear(x, [[0.5]], [0.25]))
    return g.module


def test_generate_keeps_fed_back_reals():
    """An integer prompt and real feedback: no truncation (3 -> 1.75 -> 1.125 -> 0.8125)."""
    module = _halving_graph()
    ct = compile(module, d=16, d_head=4)
    fb = lambda o: {"x": o["y"]}  # noqa: E731
    want = [[1.75], [1.125], [0.8125], [0.65625]]
    np.testing.assert_array_equal(generate(module, {"x": np.array([[3]])}, 3, fb)["y"], want)
    np.testing.assert_allclose(ct.generate({"x": np.array([[3]])}, 3, fb)["y"], want, atol=1e-6)


def test_generate_refuses_non_integer_feedback_for_an_integer_input():
    module = _halving_graph(integer=True)
    ct = compile(module, d=16, d_head=4)
    fb = lambda o: {"x": o["y"]}  # noqa: E731
    msg = _refusal(lambda: generate(module, {"x": [[3]]}, 2, fb))
    assert msg == _refusal(lambda: ct.generate({"x": [[3]]}, 2, fb))
    assert msg == ('generate: the feedback for position 1: input "x" is declared integer but '
                   "position 1 component 0 holds 1.75 (inputs are never rounded)")


BAD_FEEDBACK = {
    "None": (lambda o: None, "returned nothing; it must return {name: value} with one position "
                             'of every input (input "x": shape (n_positions, 2)'),
    "empty": (lambda o: {}, "returned nothing"),
    "list": (lambda o: [o["y"][:2]], "returned a list"),
    "missing": (lambda o: {"x": [0.0, 0.0], "k": [1.0]}, 'missing token input "tokens"'),
    "unknown": (lambda o: {"x": [0, 0], "k": 1, "tokens": 0, "y": 1}, 'unknown input "y"'),
    "two positions": (lambda o: {"x": np.zeros((2, 2)), "k": 1, "tokens": 0},
                      'input "x" is shaped (2, 2); expected one position, shaped (2,)'),
    "token list": (lambda o: {"x": [0, 0], "k": 1, "tokens": [1, 2]},
                   'token input "tokens" is shaped (2,); expected one token id'),
    "token 1.5": (lambda o: {"x": [0, 0], "k": 1, "tokens": 1.5}, "position 3 holds 1.5, not a"),
    "out of range": (lambda o: {"x": [0, 9], "k": 1, "tokens": 0},
                     "position 3 component 1 holds 9.0, outside its declared range"),
    "nan": (lambda o: {"x": [0, np.nan], "k": 1, "tokens": 0}, "holds nan, not a finite number"),
}


@pytest.mark.parametrize("case", list(BAD_FEEDBACK))
def test_bad_feedback_is_one_line_and_the_same_on_both(mixed, case):
    module, ct = mixed
    feedback, expected = BAD_FEEDBACK[case]
    prompt = _good(3)
    msg = _refusal(lambda: generate(module, prompt, 2, feedback))
    assert msg == _refusal(lambda: ct.generate(prompt, 2, feedback))
    assert msg.startswith("generate: the feedback for position 3")
    assert expected in msg


def test_generate_agrees_with_the_oracle_and_checks_every_step(mixed):
    module, ct = mixed
    fb = lambda o: {"x": np.clip(o["y"], -8, 8), "k": 2, "tokens": np.int64(4)}  # noqa: E731
    prompt = _good(3)
    want = generate(module, prompt, 4, fb)["y"]
    np.testing.assert_allclose(ct.generate(prompt, 4, fb)["y"], want,
                               atol=1e-4 * max(1, np.abs(want).max()))
    # Past max_len (16 positions) the step is refused on both.
    msg = _refusal(lambda: generate(module, prompt, 14, fb))
    assert msg == _refusal(lambda: ct.generate(prompt, 14, fb))
    assert "position 16 is beyond the graph's tw.pos_encoding max_len 16" in msg
    # Feedback values outside the range clamp when asked, on both.
    wild = lambda o: {"x": o["y"] * 100.0, "k": 20, "tokens": 1}  # noqa: E731
    want = generate(module, prompt, 3, wild, on_out_of_range="clamp")["y"]
    np.testing.assert_allclose(ct.generate(prompt, 3, wild, on_out_of_range="clamp")["y"], want,
                               atol=1e-4 * max(1, np.abs(want).max()))


@pytest.mark.parametrize("steps", [-1, 1.5, True, "2"])
def test_generate_steps_must_be_a_count(mixed, steps):
    module, ct = mixed
    msg = _refusal(lambda: generate(module, _good(), steps, lambda o: {}))
    assert msg == _refusal(lambda: ct.generate(_good(), steps, lambda o: {}))
    assert msg.startswith("generate: steps must be a non-negative integer")


def test_generate_refuses_an_absurd_step_count_at_once():
    from twdialect import ops as tw
    from twdialect.inputs import MAX_STEPS

    with tw.Graph() as g:
        tw.output("y", tw.input("x", 1, (0.0, 1.0)))
    with pytest.raises(EvaluationError, match=f"steps must be at most {MAX_STEPS}"):
        generate(g.module, {"x": [[0.5]]}, 2 ** 63, lambda out: {"x": [[0.5]]})


def test_graph_names_must_be_strings():
    from twdialect import ops as tw

    with tw.Graph() as g:
        tw.output("y", tw.input("x", 1, (0.0, 1.0)))
    with pytest.raises(EvaluationError, match="graph must be the name of a tw.graph"):
        evaluate(g.module, {"x": [[0.5]]}, graph=np.ones(2))


def test_fed_back_plain_numbers_check_as_the_array_path_does():
    """check_feedback takes plain numbers (a token id, a number, a short list or array) on a
    fast path: on random values, valid and not, it gives exactly what the array path gives
    (the same values, or the same refusal), in every mode."""
    from twdialect import inputs as inp

    contract = InputContract((inp.InputSpec("t", "embedding", 1, vocab=10),
                              inp.InputSpec("x", "input", 2, -1.0, 5.0, True),
                              inp.InputSpec("y", "input", 1)), max_len=6)
    rng = np.random.default_rng(0)
    picks = [3, 0, 9, 10, -1, 2.0, True, np.int64(4), 1.5, np.nan, np.inf, 5, -1, 6]
    fast = 0
    for i in range(600):
        ret = {"t": picks[rng.integers(len(picks))],
               "x": [picks[rng.integers(len(picks))] for _ in range(int(rng.integers(1, 4)))],
               "y": picks[rng.integers(len(picks))]}
        if i % 3 == 1:
            ret["x"] = np.asarray(ret["x"], float)
        mode, pos = ("error", "clamp", "unchecked")[i % 3], int(rng.integers(0, 8))
        fast += inp._fed_plain(contract, ret, pos) is not None

        def slow():
            rows = {k: inp._one_position(contract, k, v) for k, v in ret.items()}
            return check_inputs(contract, rows, mode, n_positions=1, start=pos)
        try:
            want = slow()
        except EvaluationError as e:
            with pytest.raises(EvaluationError) as got:
                inp.check_feedback(contract, ret, pos, mode)
            assert str(e) in str(got.value)
            continue
        got = inp.check_feedback(contract, ret, pos, mode)
        assert got.n_positions == want.n_positions == 1
        for k in want.values:
            np.testing.assert_array_equal(got.values[k], want.values[k])
            assert got.values[k].dtype == want.values[k].dtype
    assert fast > 5  # (the fast path was taken)
