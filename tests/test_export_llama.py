"""The Llama export (lowering/export/llama.py): a SwiGLU/RoPE model written as a stock
`LlamaForCausalLM` that transformers loads and runs as tw's model does (logits within 1e-4,
greedy generations equal), a relu one as hidden_act relu, and every model Llama cannot carry
exactly refused with one line naming why. Every head is 64 or 256 wide (the widths every
engine's kernels take whose square root is a power of two), relu neurons ride on SiLU through
a per-neuron power-of-two scale, and a model whose heads never turn rides on a rope_theta
whose every plane but one stands still."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

import tw_examples as examples  # noqa: E402
from tw_examples.token_program import generate  # noqa: E402
from tw_lowering import compile  # noqa: A004, E402
from tw_lowering.export import ExportError, export  # noqa: E402
from tw_lowering.export.llama import load_llama  # noqa: E402
from twdialect import ops as tw  # noqa: E402
from twdialect.dialect import ROPE_BASE  # noqa: E402

PROMPTS = 12

# Runs in a fresh interpreter that imports only transformers: a stock user of the checkpoint.
LOADER = r'''
import json, sys
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
job = json.loads(sys.stdin.read())
model = AutoModelForCausalLM.from_pretrained(job["path"], dtype="float32").eval()
tok = AutoTokenizer.from_pretrained(job["path"])
out = {"class": type(model).__name__, "gens": [], "ids": []}
for text in job["texts"]:
    ids = tok(text, return_tensors="pt").input_ids
    out["ids"].append(ids[0].tolist())
    gen = model.generate(ids, max_new_tokens=job["max_new"], do_sample=False)
    out["gens"].append(tok.decode(gen[0, ids.shape[1]:], skip_special_tokens=True))
print(json.dumps(out))
'''


def compiled(name="rotary_adder"):
    p = examples.load(name)
    g = p.geometry
    return p, compile(p.module, d=g.d, d_head=g.d_head, d_hidden=g.d_hidden)


@pytest.fixture(scope="module")
def rotary(tmp_path_factory):
    p, ct = compiled()
    path = tmp_path_factory.mktemp("llama")
    report = export(ct, path, "llama", vocab=p.vocab, end=p.end)
    return p, ct, path, report


def test_config_is_a_stock_swiglu_rope_llama(rotary):
    p, ct, path, report = rotary
    config = json.loads((path / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and config["hidden_act"] == "silu"
    assert config["head_dim"] == 64 and config["rope_theta"] == ROPE_BASE
    assert config["attention_bias"] and config["mlp_bias"]
    assert config["num_hidden_layers"] == ct.stats.n_layers == 2
    assert report["hidden_act"] == "silu" and report["bytes"] > 0


def test_logits_are_tws(rotary):
    p, ct, path, _ = rotary
    model, _ = load_llama(path, graph=ct.schedule.tg.graph)
    assert type(model).__name__ == "LlamaForCausalLM"
    rng = np.random.default_rng(3)
    for q in ["47+85=", "0+0=", "99+99="] + [p.sample(rng) for _ in range(PROMPTS)]:
        ids = list(p.encode(q)) + [p.vocab.index(c) for c in p.reference(q)]
        want = ct.run({"tokens": np.array(ids)})["logits"]
        with torch.no_grad():
            got = model(torch.tensor([ids])).logits[0].numpy()[:, : want.shape[1]]
        assert np.abs(got - want).max() <= 1e-4 * max(1.0, float(np.abs(want).max())), q


def test_a_fresh_transformers_process_generates_tws_answers(rotary):
    p, ct, path, _ = rotary
    rng = np.random.default_rng(4)
    raw = ["47+85=", "9+9="] + [p.sample(rng) for _ in range(PROMPTS)]
    job = {"path": str(path), "texts": [p.normalize(q) for q in raw], "max_new": p.max_answer}
    res = subprocess.run([sys.executable, "-c", LOADER], input=json.dumps(job),
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["class"] == "LlamaForCausalLM"
    assert out["ids"][0] == p.encode(raw[0]).tolist()  # the tokenizer is tw's encoding
    assert out["gens"] == [generate(p, q, ct.run) for q in raw]


def test_loading_checks_the_graph(rotary):
    p, ct, path, _ = rotary
    _, other = compiled("adder")
    with pytest.raises(ExportError, match="another graph"):
        load_llama(path, graph=other.schedule.tg.graph)


def _rotary_read(tok, base: float = ROPE_BASE, dims: int = 16, mask: str = "causal"):
    """A head over 16 q.k dims (q and k the constant 1) reading tok, rotating `dims` of them."""
    one = tw.literal([1.0])
    return tw.attn(one, one, tok, np.full((1, 16), 8.0), np.ones((1, 16)), np.eye(3), np.eye(3),
                   rope=(base, dims), mask=mask)


def _graph(mlp="relu", heads=((ROPE_BASE, 16),), pos=False):
    """Tokens (a 4-row table), one rotary head per (base, dims), then an MLP of `mlp` lanes
    ("mixed": a relu and a swish MLP summed) writing 4 logits; `pos`: the MLP reads a
    pos_encoding too."""
    rng = np.random.default_rng(0)
    table = rng.integers(-3, 4, (4, 3)).astype(float)
    with tw.Graph("main") as g:
        tok = tw.embedding("tokens", table)
        parts = [tok] + [_rotary_read(tok, *h) for h in heads]
        x = tw.concat(*parts, tw.pos_encoding(2, 64)) if pos else tw.concat(*parts)

        def lanes(act):
            n = tw.width(x)
            return tw.mlp(x, rng.normal(size=(n, 8)), rng.normal(size=8),
                          rng.normal(size=(8, 4)), activation=act)

        out = tw.add(lanes("relu"), lanes("swish")) if mlp == "mixed" else lanes(mlp)
        tw.output("logits", out)
    return g.module


def _same_logits(ct, path, n_out=4, seed=0):
    model, _ = load_llama(path)
    rng = np.random.default_rng(seed)
    for _ in range(4):
        ids = rng.integers(0, 4, 9)
        want = ct.run({"tokens": ids})["logits"]
        with torch.no_grad():
            got = model(torch.tensor([ids.tolist()])).logits[0].numpy()[:, :n_out]
        assert np.abs(got - want).max() <= 1e-4 * max(1.0, float(np.abs(want).max()))


@pytest.mark.parametrize("mlp", ["relu", "mixed"])
def test_relu_neurons_ride_on_scaled_silu(tmp_path, mlp):
    ct = compile(_graph(mlp), d=32, d_head=16, d_hidden=32)
    report = export(ct, tmp_path, "llama")
    assert report["hidden_act"] == "silu" and 0 < report["silu_error_bound"] < 1e-12
    config = json.loads((tmp_path / "config.json").read_text())
    scales = config["tw"]["ffn_scale_log2"]  # (relu lanes scaled far past SiLU's cut-off)
    scales = json.loads(scales) if isinstance(scales, str) else scales
    assert max(k[1] for k in scales if k) >= 40
    _same_logits(ct, tmp_path)


def test_silu_gap_is_a_bound():
    """SILU_GAP bounds |SiLU(x) - relu(x)| as torch computes SiLU in float32."""
    from tw_lowering.export.llama import SILU_GAP

    x = torch.linspace(-40, 40, 400001, dtype=torch.float32)
    gap = float((torch.nn.functional.silu(x) - torch.relu(x)).abs().max())
    assert 0.278 < gap <= SILU_GAP
    big = torch.tensor([17.0, 20.0, 1e3, 1e20], dtype=torch.float32)
    assert torch.equal(torch.nn.functional.silu(big), big)  # (exact past the cut-off)


def _plain_graph(pos_head=False):
    """Tokens, two unrotated heads of 12 q.k dims, an MLP: no positions anywhere."""
    rng = np.random.default_rng(1)
    table = rng.integers(-3, 4, (4, 3)).astype(float)
    with tw.Graph("main") as g:
        tok = tw.embedding("tokens", table)
        heads = [tw.attn(tok, tok, tok, rng.normal(size=(3, 12)), rng.normal(size=(3, 12)),
                         np.eye(3), np.eye(3)) for _ in range(2)]
        x = tw.concat(tok, *heads)
        out = tw.mlp(x, rng.normal(size=(9, 8)), rng.normal(size=8), rng.normal(size=(8, 4)))
        tw.output("logits", out)
    return g.module


def test_a_model_whose_heads_never_turn_rides_on_a_still_rope(tmp_path):
    from tw_lowering.export.llama import UNTURNED_THETA

    ct = compile(_plain_graph(), d=64, d_head=16, d_hidden=64)
    report = export(ct, tmp_path, "llama")
    assert report["rope_theta"] == UNTURNED_THETA
    _same_logits(ct, tmp_path, seed=5)


@pytest.mark.parametrize("kwargs, message", [
    (dict(heads=((ROPE_BASE, 16), (10000.0, 16))), r"'tw.attn' in @main \(tw.attn #1 of 2\) and "
     r"'tw.attn' in @main \(tw.attn #2 of 2\) rotate with different \(base, dims\)"),
    (dict(heads=((ROPE_BASE, 8),)), r"'tw.attn' in @main \(tw.attn #1 of 1\) rotates 8 of its 16 q.k dimensions"),
    (dict(pos=True), "reads tw.pos_encoding; Llama has no position embedding"),
    (dict(heads=((ROPE_BASE, 16, "full"),)), "full-mask attention head"),
    (dict(heads=()), "no attention head, so no rope_theta"),
])
def test_what_llama_cannot_carry_is_refused(tmp_path, kwargs, message):
    ct = compile(_graph(**kwargs), d=64, d_head=16, d_hidden=64)
    with pytest.raises(ExportError, match=message) as info:
        export(ct, tmp_path, "llama")
    assert "\n" not in str(info.value)
    assert not any(tmp_path.iterdir())  # refused before anything is written


def test_a_rotary_width_no_engine_head_holds_is_refused(tmp_path):
    with tw.Graph("main") as g:
        tok = tw.embedding("tokens", np.eye(4)[:, :3])
        one = tw.literal([1.0])
        h = tw.attn(one, one, tok, np.full((1, 12), 8.0), np.ones((1, 12)), np.eye(3),
                    np.eye(3), rope=(ROPE_BASE, 12))
        tw.output("logits", tw.concat(tok, h))
    ct = compile(g.module, d=64, d_head=16, d_hidden=64)
    with pytest.raises(ExportError, match="the rotary width 12 needs 12 head dimensions, and "
                       "no head width the engines take"):
        export(ct, tmp_path, "llama")


def test_unrotated_heads_beside_rotary_ones_are_refused_by_name(tmp_path):
    rng = np.random.default_rng(2)
    with tw.Graph("main") as g:
        tok = tw.embedding("tokens", rng.integers(-3, 4, (4, 3)).astype(float))
        plain = tw.attn(tok, tok, tok, rng.normal(size=(3, 16)), rng.normal(size=(3, 16)),
                        np.eye(3), np.eye(3))
        tw.output("logits", tw.concat(plain, _rotary_read(tok)))
    ct = compile(g.module, d=64, d_head=16, d_hidden=64)
    with pytest.raises(ExportError, match=r"attention op 'tw.attn' in @main \(tw.attn #1 of 2\) has no rotary "
                       r"embedding while 'tw.attn' in @main \(tw.attn #2 of 2\) rotates"):
        export(ct, tmp_path, "llama")
    _, adder = compiled("adder")  # (its heads read the pos_encoding: no position embedding)
    with pytest.raises(ExportError, match="reads tw.pos_encoding"):
        export(adder, tmp_path, "llama")


def test_tw_export_cli_writes_llama(tmp_path, capsys):
    from tw_tools.tw_export import main

    assert main(["rotary_adder", "-f", "llama", "-o", str(tmp_path / "out"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["format"] == "llama" and (tmp_path / "out" / "config.json").exists()
