"""The bundled RoPE token program with relu MLPs (tw_examples.rotary_reverse): rotary offset
heads only and one plain (ungated) relu MLP, one layer, exact on its whole input space (all
10,000 prompts) under the oracle and the compiled model, KV-cache generation, tw-run; and its
Llama export, whose relu neurons ride on scaled SiLU, greedy-generating the same answers in
transformers' LlamaForCausalLM."""

from __future__ import annotations

import dataclasses
import functools
import json
import subprocess
import sys

import numpy as np
import pytest
from token_program_checks import check_bad_prompts, forced_wrong, kv_generated

import tw_examples as examples
import twdialect
from tw_examples import rotary_reverse
from tw_examples.token_program import generate, matches_reference
from twdialect.analysis import critical_path
from twdialect.dialect import ROPE_BASE
from twdialect.interp import find_graph

EDGE = ["123=", "0=", "9999=", "7", "0123=", "1000=", "42", "0009="]
BAD = ["12345=", "1+2=", "=", "a=", "", "12=3"]
LAYERS = 1  # the floor the module docstring claims


@functools.cache
def program():
    return examples.load("rotary_reverse")


@functools.cache
def compiled():
    from tw_lowering import compile  # noqa: A004

    g = program().geometry
    return compile(program().module, d=g.d, d_head=g.d_head, d_hidden=g.d_hidden)


def every_prompt() -> list[str]:
    return [f"{n:04d}=" for n in range(10 ** rotary_reverse.DIGITS)]


def test_registered_and_written_for_a_rope_machine_with_relu_mlps():
    assert "rotary_reverse" in examples.ROTARY_PROGRAMS
    assert "rotary_reverse" in examples.ALL_PROGRAMS and "rotary_reverse" not in examples.PROGRAMS
    ops = list(find_graph(program().module).block.ops)
    mlps = [op for op in ops if op.name == "tw.mlp"]
    heads = [op for op in ops if op.name == "tw.attn"]
    assert mlps and all(op.activation == "relu" and not op.is_gated for op in mlps)
    assert heads and all(op.rope == (ROPE_BASE, rotary_reverse.HEAD_DIM) for op in heads)
    assert rotary_reverse.HEAD_DIM == 16
    assert not [op for op in ops if op.name in ("tw.pos_encoding", "tw.pos_table")]
    assert critical_path(find_graph(program().module)).n_layers == LAYERS


def test_normalize_and_reference():
    p = program()
    assert p.normalize("123=") == "0123=" and p.normalize("7") == "0007="
    assert p.reference("123=") == "3210" and p.reference("1000") == "0001"
    assert p.max_answer == 5 and len(p.encode("9999=")) + p.max_answer <= p.max_len


def test_oracle_exact_on_every_prompt():
    p = program()
    assert [generate(p, q) for q in EDGE] == [p.reference(q) for q in EDGE]
    assert forced_wrong(p, every_prompt(), lambda batch: [twdialect.evaluate(p.module, x)
                                                          for x in batch]) == []


def test_oracle_exact_on_random_typed_prompts():
    p = program()
    rng = np.random.default_rng(0)
    assert all(matches_reference(p, p.sample(rng)) for _ in range(30))


def test_compiled_exact_on_every_prompt():
    ct = compiled()
    assert ct.stats.n_layers == LAYERS
    assert ct.stats.swish_neurons == 0 and not ct.stats.gated_neurons
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
    off = dataclasses.replace(p, reference=lambda q: p.reference(q)[::-1])
    assert forced_wrong(off, ["0123=", "1111="], compiled().run_batch) == ["0123="]


@pytest.mark.parametrize("q", ["123=", "0=", "9876="])
def test_compiled_generate_with_kv_cache_matches(q):
    p = program()
    assert kv_generated(p, compiled(), q) == p.reference(q) + p.end


def test_bad_prompts_are_rejected_with_one_line():
    check_bad_prompts(program(), BAD)


def test_tw_run(capsys):
    from tw_tools.tw_run import main

    assert main(["rotary_reverse", "123="]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "3210"
    assert main(["rotary_reverse", "9870", "--oracle"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "0789"
    assert main(["--list"]) == 0
    assert "rotary_reverse" in capsys.readouterr().out


# -- the Llama export: relu neurons carried by scaled SiLU ------------------------------------

@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    pytest.importorskip("transformers")
    pytest.importorskip("torch")
    from tw_lowering.export import export

    p, ct = program(), compiled()
    path = tmp_path_factory.mktemp("llama-reverse")
    report = export(ct, path, "llama", vocab=p.vocab, end=p.end, prompt_rules=p.prompt_rules)
    return p, ct, path, report


def test_llama_export_carries_relu_on_silu(llama):
    p, ct, path, report = llama
    config = json.loads((path / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and config["hidden_act"] == "silu"
    assert config["rope_theta"] == ROPE_BASE and config["num_hidden_layers"] == LAYERS
    assert report["hidden_act"] == "silu" and 0 < report["silu_error_bound"] < 1e-12


def test_llama_greedy_generates_tws_answers(llama):
    import torch

    from tw_lowering.export.llama import load_llama

    p, ct, path, _ = llama
    model, tok = load_llama(path, graph=ct.schedule.tg.graph)
    assert type(model).__name__ == "LlamaForCausalLM"
    rng = np.random.default_rng(5)
    for q in ["123=", "0="] + [p.sample(rng) for _ in range(18)]:
        ids = torch.tensor([p.encode(q).tolist()])
        with torch.no_grad():
            out = model.generate(ids, max_new_tokens=p.max_answer, do_sample=False,
                                 eos_token_id=tok.eos_token_id, pad_token_id=tok.eos_token_id)
        got = p.decode([t for t in out[0, ids.shape[1]:].tolist()
                        if t != p.vocab.index(p.end)])
        assert got == generate(p, q, ct.run) == p.reference(q), q


def test_a_fresh_transformers_process_generates_the_answers_from_typed_prompts(llama):
    from test_export_llama import LOADER  # (a fresh process importing only transformers)

    p, ct, path, _ = llama
    rng = np.random.default_rng(6)
    raw = ["123=", "7", "0099"] + [p.sample(rng) for _ in range(5)]
    job = {"path": str(path), "texts": raw, "max_new": p.max_answer}
    res = subprocess.run([sys.executable, "-c", LOADER], input=json.dumps(job),
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["class"] == "LlamaForCausalLM"
    assert out["ids"] == [p.encode(q).tolist() for q in raw]  # the tokenizer applies the rules
    assert out["gens"] == [p.reference(q) for q in raw]
