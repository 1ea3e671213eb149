"""The library-only versions of adder, calculator, binary_increment and fibonacci
(`examples/library/`): exact through the oracle and through the compiled model (default
pipeline, each program's geometry) on edge and random prompts, prompts taken as typed, no
hand-assembled MLP in the graphs, and their depths against the hand-tuned programs."""

from __future__ import annotations

import functools
import inspect
from pathlib import Path

import numpy as np
import pytest

import tw_examples as examples
from tw_examples import library
from tw_examples.token_program import PromptError, generate, matches_reference
from twdialect import ops as tw

NAMES = ("adder", "calculator", "binary_increment", "fibonacci")

# layers of the hand-tuned programs, and what the library versions reach (default pipeline)
HAND_TUNED = {"adder": 2, "calculator": 3, "binary_increment": 2, "fibonacci": 5}
LIBRARY = {"adder": 2, "calculator": 3, "binary_increment": 2, "fibonacci": 2}

EDGE_PROMPTS = {
    "adder": ["7+456=", "555+445=", "0+0=", "999+999=", "5+7=", "1+999=", "999+1=", "500+500=",
              "99+1", "1+99=", "9+991=", "10+90=", "0+999="],
    "calculator": ["12*34=", "5-17=", "0-0=", "999*999=", "1-999=", "999-998=", "102-99=",
                   "0*7=", "999+999=", "100*10=", "10-100=", "9*9=", "1-2", "0*0=", "7+456=",
                   "999*9=", "1*999=", "5-5=", "0-999="],
    "binary_increment": ["1011=", "111=", "0=", "1=", "0011", "1000", "101111", "1" * 24,
                         "0" * 24, "10", "01", "0" + "1" * 23],
    "fibonacci": ["0,1", "1,1", "0,0", "9999,1", "5000,4999", "5,7", "0,9999", "1,0",
                  "9999,9999", "0,1,", "12,345"],
}

BAD_PROMPTS = {
    "adder": ["1234+5=", "12-3=", "12+x=", "", "+5="],
    "calculator": ["12/3=", "1+2+3=", "-1+2=", "1000*2="],
    "binary_increment": ["102=", "1" * 25, "="],
    "fibonacci": ["1", "1,2,3", "10000,1"],
}


@functools.cache
def program(name):
    return library.load(name)


@functools.cache
def compiled(name):
    from tw_lowering import compile  # noqa: A004

    g = program(name).geometry
    return compile(program(name).module, d=g.d, d_head=g.d_head, d_hidden=g.d_hidden,
                   pipeline="default")


def prompts(name: str, n: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    return [program(name).sample(rng) for _ in range(n)]


def wrong(name: str, cases, runner=None) -> list[str]:
    return [q for q in cases if not matches_reference(program(name), q, runner)]


@pytest.mark.parametrize("name", NAMES)
def test_same_interface_as_the_hand_tuned_program(name):
    lib, hand = program(name), examples.load(name)
    assert (lib.name, lib.vocab, lib.end) == (hand.name, hand.vocab, hand.end)
    assert lib.max_answer == hand.max_answer
    assert lib.geometry == hand.geometry
    rng = np.random.default_rng(7)
    for _ in range(20):
        q = lib.sample(rng)
        assert lib.reference(q) == hand.reference(q)


@pytest.mark.parametrize("name", NAMES)
def test_prompts_are_taken_as_typed(name):
    """normalize only validates: the text fed to the model is the prompt, plus its missing
    terminator (no zero padding, no start marker)."""
    p = program(name)
    end_mark = "," if name == "fibonacci" else "="
    for q in EDGE_PROMPTS[name]:
        text = p.normalize(q)
        assert text == (q if q.endswith(end_mark) else q + end_mark)
        assert len(p.encode(q)) == len(text)


@pytest.mark.parametrize("name", NAMES)
def test_bad_prompts_are_rejected_with_one_line(name):
    for q in BAD_PROMPTS[name]:
        with pytest.raises(PromptError) as info:
            program(name).encode(q)
        assert "\n" not in str(info.value) and name in str(info.value)


@pytest.mark.parametrize("name", NAMES)
def test_oracle_exact(name):
    cases = EDGE_PROMPTS[name] + prompts(name, 30)
    bad = wrong(name, cases)
    assert not bad, f"{name}: {len(bad)}/{len(cases)} wrong, e.g. {bad[:3]}"
    q = EDGE_PROMPTS[name][0]  # and the host loop itself
    assert generate(program(name), q) == program(name).reference(q)


@pytest.mark.parametrize("name", NAMES)
def test_compiled_exact(name):
    ct = compiled(name)
    cases = EDGE_PROMPTS[name][:8] + prompts(name, 12, seed=1)
    bad = wrong(name, cases, ct.run)
    assert not bad, f"{name}: {len(bad)}/{len(cases)} wrong, e.g. {bad[:3]}"
    q = EDGE_PROMPTS[name][1]
    assert generate(program(name), q, ct.run) == program(name).reference(q)


@pytest.mark.parametrize("name, q", [("adder", "7+456="), ("binary_increment", "0111="),
                                     ("fibonacci", "123,4567"), ("calculator", "5-17=")])
def test_compiled_generate_with_kv_cache_matches(name, q):
    p = program(name)
    want = p.reference(q) + p.end
    ids = p.encode(q)
    out = compiled(name).generate({"tokens": ids}, len(want) - 1,
                                  lambda last: {"tokens": int(np.argmax(last["logits"]))})
    assert p.decode(np.argmax(out["logits"][len(ids) - 1:], axis=1)) == want


@pytest.mark.parametrize("name", NAMES)
def test_depth_against_the_hand_tuned_program(name):
    stats = compiled(name).stats
    assert stats.n_layers <= LIBRARY[name] <= HAND_TUNED[name] + 1
    assert stats.n_layers == stats.floor


@pytest.mark.parametrize("name", NAMES)
def test_no_hand_assembled_mlp(name, monkeypatch):
    """Every tw.mlp in the graph is emitted by an op of the ops library (twdialect/library),
    none by the program itself, and the program does not use the hand-tuned MLP builders."""
    import importlib

    lib_dir = Path(inspect.getfile(tw.abs)).parent
    callers = []
    real = tw.mlp

    def recording_mlp(*args, **kwargs):
        callers.append(Path(inspect.stack()[1].filename).parent)
        return real(*args, **kwargs)

    monkeypatch.setattr(tw, "mlp", recording_mlp)
    module = importlib.import_module(f"tw_examples.library.{name}")
    module.build_graph()
    assert all(c == lib_dir for c in callers), callers
    source = inspect.getsource(module)
    for banned in ("tw.mlp", "build_mlp", "Space(", "Expr(", "attend_position",
                   "attend_content"):
        assert banned not in source


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_sweep_compiled_and_oracle(name):
    cases = EDGE_PROMPTS[name] + prompts(name, 300, seed=2026)
    bad = wrong(name, cases, compiled(name).run)
    assert not bad, f"{name}: compiled {len(bad)}/{len(cases)} wrong, e.g. {bad[:3]}"
    bad = wrong(name, cases[:150])
    assert not bad, f"{name}: oracle {len(bad)} wrong, e.g. {bad[:3]}"


SHAPES = ["0", "1", "9", "10", "99", "100", "999", "007", "05", "500", "101", "998"]


@pytest.mark.slow
@pytest.mark.parametrize("name, ops", [("adder", "+"), ("calculator", "+-*")])
def test_every_operand_shape_compiled(name, ops):
    """Every operand shape (1-3 digits each, leading zeros included) and operator, with
    extreme and carrying values, through the compiled model."""
    cases = [f"{a}{o}{b}=" for o in ops for a in SHAPES for b in SHAPES]
    bad = wrong(name, cases, compiled(name).run)
    assert not bad, f"{name}: {len(bad)}/{len(cases)} wrong, e.g. {bad[:3]}"
