"""The bundled SwiGLU/RoPE token program (tw_examples.rotary_adder): swish and gated MLPs and
rotary offset heads only, exact on its whole input space (all 10,000 prompts) under the
compiled model, the oracle on edge and random prompts, KV-cache generation, tw-run; and
`build_mlp(swish=True)`, the relu-equivalent swish lanes it is built from."""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import pytest
from token_program_checks import check_bad_prompts, forced_wrong, kv_generated

import tw_examples as examples
import twdialect
from tw_examples import rotary_adder
from tw_examples.token_program import (Space, build_mlp, eq, gate, generate,
                                       integer_function, matches_reference, step)
from twdialect import ops as tw
from twdialect.analysis import critical_path
from twdialect.interp import find_graph

EDGE = ["47+85=", "0+0=", "99+99=", "9+1", "50+50=", "1+99=", "5+4="]
BAD = ["100+1=", "1-2=", "+5=", "a+b=", ""]


@functools.cache
def program():
    return examples.load("rotary_adder")


@functools.cache
def compiled():
    from tw_lowering import compile  # noqa: A004

    g = program().geometry
    return compile(program().module, d=g.d, d_head=g.d_head, d_hidden=g.d_hidden)


def every_prompt() -> list[str]:
    return [f"{a}+{b}=" for a in range(100) for b in range(100)]


def test_registered_and_written_for_a_swiglu_rope_machine():
    assert "rotary_adder" in examples.ALL_PROGRAMS and "rotary_adder" not in examples.PROGRAMS
    ops = list(find_graph(program().module).block.ops)
    mlps = [op for op in ops if op.name == "tw.mlp"]
    heads = [op for op in ops if op.name == "tw.attn"]
    assert mlps and all(op.activation == "swish" for op in mlps)
    assert any(op.is_gated for op in mlps)
    assert heads and all(op.rope == (rotary_adder.ROPE_BASE, rotary_adder.HEAD_DIM)
                         for op in heads)
    assert not [op for op in ops if op.name in ("tw.pos_encoding", "tw.pos_table")]
    assert critical_path(find_graph(program().module)).n_layers == 2


def test_oracle_exact_on_edge_and_random_prompts():
    p = program()
    rng = np.random.default_rng(0)
    prompts = EDGE + [p.sample(rng) for _ in range(30)]
    assert [generate(p, q) for q in EDGE] == [p.reference(q) for q in EDGE]
    assert all(matches_reference(p, q) for q in prompts)


def test_compiled_exact_on_every_prompt():
    ct = compiled()
    assert ct.stats.n_layers == 2
    assert ct.stats.swish_neurons == sum(ct.stats.neurons_per_layer) and ct.stats.gated_neurons
    assert ct.stats.rope_heads == sum(ct.stats.heads_per_layer)
    assert forced_wrong(program(), every_prompt(), ct.run_batch) == []


def test_compiled_matches_the_oracle():
    p, ct = program(), compiled()
    rng = np.random.default_rng(1)
    for q in EDGE + [p.sample(rng) for _ in range(20)]:
        ids = p.encode(q)
        seq = np.array(list(ids) + [p.vocab.index(c) for c in p.reference(q)], np.int64)
        want = twdialect.evaluate(p.module, {"tokens": seq})["logits"]
        got = ct.run({"tokens": seq})["logits"]
        assert np.abs(got - want).max() <= 1e-4 * max(1.0, float(np.abs(want).max()))


def test_the_exhaustive_check_can_fail():
    p = program()
    off = dataclasses.replace(p, reference=lambda q: str(int(p.reference(q)) + 1))
    assert forced_wrong(off, ["47+85=", "0+0="], compiled().run_batch) == ["47+85=", "0+0="]


@pytest.mark.parametrize("q", ["47+85=", "0+0=", "99+99="])
def test_compiled_generate_with_kv_cache_matches(q):
    p = program()
    assert kv_generated(p, compiled(), q) == p.reference(q) + p.end


def test_bad_prompts_are_rejected_with_one_line():
    check_bad_prompts(program(), BAD)


def test_tw_run(capsys):
    from tw_tools.tw_run import main

    assert main(["rotary_adder", "47+85="]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "132"
    assert main(["rotary_adder", "99+99=", "--oracle"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "198"
    assert main(["--list"]) == 0
    assert "rotary_adder" in capsys.readouterr().out


def test_swish_build_mlp_equals_relu_on_integers():
    ks = np.arange(-12, 13, dtype=np.float64)
    grid = np.array([[k, v] for k in ks for v in range(10)], dtype=np.float64)

    def graph(swish: bool):
        with tw.Graph("main") as g:
            x = tw.input("x", 2, value_range=(-20.0, 20.0))
            s = Space([x])
            k, v = s.var(x, 0), s.var(x, 1)
            exprs = [step(k), eq(k), gate(v, 9.0, k),
                     integer_function(k, -12, 12, lambda z: z * z - 3 * z)]
            tw.output("y", build_mlp(s, exprs, swish=swish))
        return g.module

    swish = graph(True)
    assert [op.activation for op in swish.walk() if op.name == "tw.mlp"] == ["swish"]
    relu = twdialect.evaluate(graph(False), {"x": grid})["y"]
    np.testing.assert_allclose(twdialect.evaluate(swish, {"x": grid})["y"], relu, atol=1e-9)
    # off the integers the two differ: the equality is the integers' alone
    near_zero = {"x": np.array([[0.0078125, 0.0]])}
    gap = twdialect.evaluate(swish, near_zero)["y"] - twdialect.evaluate(graph(False), near_zero)["y"]
    assert abs(gap[0, 0]) > 1e-3
