"""Library-only versions of caesar, balanced_parens and sort_digits (examples/library/): the same
prompts and answers as the hand-tuned programs, graphs built from ops-library ops only (no
tw.mlp, no host-side padding), exact through the oracle and through the compiled model (default
pipeline, the program's geometry), and as deep as the hand-tuned programs."""

import numpy as np
import pytest

from tw_examples.library import load
from tw_examples.token_program import PromptError, generate, matches_reference
from twdialect.interp import find_graph

PROGRAMS = ("caesar", "balanced_parens", "sort_digits")

# Compiled layers (default pipeline): the hand-tuned program's, and this version's (+0 each).
HAND_TUNED_LAYERS = {"caesar": 2, "balanced_parens": 4, "sort_digits": 2}
LIBRARY_LAYERS = {"caesar": 2, "balanced_parens": 4, "sort_digits": 2}

# Ops a library-only graph may hold before the pipeline runs: sources and sinks, the glue
# (linear, add, views), the library's IR ops, and tw.attn, which the library's attention ops
# emit. No tw.mlp and no tw.relu.
ALLOWED = {"tw.embedding", "tw.pos_encoding", "tw.output", "tw.literal", "tw.linear", "tw.add",
           "tw.concat", "tw.slice", "tw.attn", "tw.compare", "tw.select", "tw.clamp",
           "tw.piecewise_linear", "tw.piecewise_linear_2d"}

O, C = "([{", ")]}"
EDGE = {
    "caesar": ["0:a=", "25:z=", "00:zz=", "05:hello world", "3:hello world=", "13:Hello World=",
               "1: =", "19:xyz=", "9:" + " " * 40 + "=", "25:" + ("abcdefghijklmnopqrstuvwxyz" * 2)[:40],
               "7:abcdefghijklmnopqrstuvwxyz=", "24:a b c d=", "10:z=", "2:" + "z" * 40 + "="],
    "balanced_parens": ["(=", ")=", "()=", "(]=", "[)=", "{}=", ")(=", "([)]=", "{[(])}=",
                        "())(=", "((())=", "(()))(=", "([{}])(){}[]=", "(" * 20 + ")" * 20 + "=",
                        "(" * 40 + "=", ")" * 40 + "=", "([{" * 6 + "((" + "))" + "}])" * 6 + "=",
                        "([{" * 6 + "((" + ")]" + "}])" * 6 + "=", "()" * 20 + "=",
                        "[" * 19 + "()" + "]" * 19 + "=", "[" * 19 + "(}" + "]" * 19 + "="],
    "sort_digits": ["0=", "9=", "5", "10=", "01=", "9" * 24 + "=", "0" * 24 + "=",
                    "012345678901234567890123=", "987654321098765432109876=", "3141=",
                    "111111111111111111111110=", "55555=", "90=", "2" * 12 + "1" * 12],
}


def _deep_brackets(rng, n=20):
    """A balanced string of 2n brackets nested n deep; half the time one bracket changed."""
    k = rng.integers(0, 3, n)
    s = [O[x] for x in k] + [C[x] for x in k[::-1]]
    if rng.random() < 0.5:
        s[int(rng.integers(0, 2 * n))] = (O + C)[int(rng.integers(0, 6))]
    return "".join(s) + "="


def prompts(name, n_random, seed):
    rng = np.random.default_rng(seed)
    prog = load(name)
    out = [prog.sample(rng) for _ in range(n_random)]
    if name == "balanced_parens":
        out += [_deep_brackets(rng) for _ in range(4)]
    if name == "caesar":  # wrap-around shifts: keys 20-25 on late letters
        out += [f"{int(rng.integers(20, 26))}:{''.join(rng.choice(list('uvwxyz '), 12))}="
                for _ in range(3)]
    return out


@pytest.fixture(scope="module", params=PROGRAMS)
def compiled(request):
    from tw_lowering import compile

    prog = load(request.param)
    g = prog.geometry
    ct = compile(load(request.param).module, d=g.d, d_head=g.d_head, d_hidden=g.d_hidden,
                 pipeline="default")
    return request.param, prog, ct


@pytest.mark.parametrize("name", PROGRAMS)
def test_graph_is_library_only(name):
    ops = {op.name for op in find_graph(load(name).module, "main").block.ops}
    assert "tw.mlp" not in ops
    assert ops <= ALLOWED, sorted(ops - ALLOWED)


@pytest.mark.parametrize("name", PROGRAMS)
def test_same_vocabulary_and_prompts_as_hand_tuned(name):
    import importlib

    hand = importlib.import_module(f"tw_examples.{name}").build()
    prog = load(name)
    assert (prog.vocab, prog.end, prog.max_answer) == (hand.vocab, hand.end, hand.max_answer)
    assert prog.geometry == hand.geometry
    for p in EDGE[name]:
        assert prog.reference(p) == hand.reference(p)
        text = prog.normalize(p)  # only validates: the prompt as typed, "=" appended
        assert text == (p.lower() if name == "caesar" else p) + ("" if p.endswith("=") else "=")


@pytest.mark.parametrize("name,bad", [("caesar", "26:abc="), ("caesar", "3:ab1="),
                                      ("caesar", ":abc="), ("caesar", "3:" + "a" * 41 + "="),
                                      ("sort_digits", "="), ("sort_digits", "12a="),
                                      ("sort_digits", "1" * 25 + "="),
                                      ("balanced_parens", "="), ("balanced_parens", "(x)="),
                                      ("balanced_parens", "()" * 21 + "=")])
def test_bad_prompts_rejected(name, bad):
    with pytest.raises(PromptError):
        load(name).encode(bad)


@pytest.mark.parametrize("name", PROGRAMS)
def test_oracle_exact(name):
    prog = load(name)
    for p in EDGE[name] + prompts(name, 30, seed=11):
        assert matches_reference(prog, p), p


def test_oracle_host_loop():
    for name in PROGRAMS:
        prog = load(name)
        for p in EDGE[name][:3]:
            assert generate(prog, p) == prog.reference(p), (name, p)


def test_compiled_exact_and_depth(compiled):
    name, prog, ct = compiled
    assert ct.stats.n_layers <= HAND_TUNED_LAYERS[name] + 0
    assert ct.stats.n_layers == LIBRARY_LAYERS[name]
    for p in EDGE[name][:10] + prompts(name, 10, seed=12):
        assert matches_reference(prog, p, ct.run), p
    for p in EDGE[name][:2]:  # the host loop with the compiled model
        assert generate(prog, p, ct.run) == prog.reference(p), p


@pytest.mark.slow
def test_compiled_sweep(compiled):
    name, prog, ct = compiled
    for p in EDGE[name] + prompts(name, 300, seed=13):
        assert matches_reference(prog, p, ct.run), p
