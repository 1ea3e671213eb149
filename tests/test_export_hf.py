"""The transformers (GPT-2) export: loaded by the stock library in a fresh process, it generates
exactly what tw-run generates, its hidden states are tw's residual (with the twin columns),
and a norm constant that cannot be certified is refused naming the smallest that works."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

import tw_examples as examples  # noqa: E402
import tw_lowering as lowering  # noqa: E402
from tw_examples.token_program import generate  # noqa: E402
from tw_lowering.export import ExportError, export  # noqa: E402
from tw_lowering.export.hf import load_transformers, transformers_plan  # noqa: E402

PROMPTS_PER_PROGRAM = 4

# Runs in a fresh interpreter: only the stock libraries, nothing of tw.
LOADER = r"""
import json, sys, torch
from transformers import AutoModelForCausalLM, AutoTokenizer
jobs = json.loads(sys.stdin.read())
report = {}
for job in jobs:
    m = AutoModelForCausalLM.from_pretrained(job["path"])
    tok = AutoTokenizer.from_pretrained(job["path"])
    gens = []
    for text in job["texts"]:
        ids = tok(text, return_tensors="pt").input_ids
        out = m.generate(ids, max_new_tokens=job["max_new"], do_sample=False,
                         eos_token_id=tok.eos_token_id, pad_token_id=tok.eos_token_id)
        new = out[0, ids.shape[1]:].tolist()
        if tok.eos_token_id in new:
            new = new[: new.index(tok.eos_token_id)]
        gens.append(tok.decode(new))
    ids = tok(job["texts"][0], return_tensors="pt").input_ids
    with torch.no_grad():
        o = m(ids, output_hidden_states=True)
    # Teacher-forced: every block gets tw's residual before it (hooks replace its input), so
    # each block's output shows that block's own rounding, not the graph's amplification
    # of earlier rounding.
    feed = [torch.tensor(x, dtype=torch.float32)[None] for x in job["residuals"]]
    blocks, outs = m.transformer.h, []
    hooks = [b.register_forward_pre_hook(
                 lambda mod, args, kwargs, i=i: ((feed[i],) + args[1:], kwargs), with_kwargs=True)
             for i, b in enumerate(blocks)]
    hooks += [b.register_forward_hook(
                  lambda mod, args, out: outs.append((out[0] if isinstance(out, tuple) else out)[0]))
              for b in blocks]
    with torch.no_grad():
        m(ids)
    for h in hooks:
        h.remove()
    report[job["name"]] = {"gens": gens, "ids": ids[0].tolist(),
                           "logits": o.logits[0].tolist(),
                           "hidden": [h[0].tolist() for h in o.hidden_states],
                           "blocks": [b.tolist() for b in outs]}
print(json.dumps(report))
"""


def _compiled(name):
    p = examples.load(name)
    g = p.geometry
    return p, lowering.compile(p.module, d=g.d, d_head=g.d_head, d_hidden=g.d_hidden)


def _tw_residuals(ct, tokens) -> list[np.ndarray]:
    """tw's residual before layer 0 and after each layer (positions, d)."""
    import torch

    x = ct.embed({"tokens": tokens})[0].clone()
    out = [x.numpy().copy()]
    with torch.inference_mode():
        for layer in ct.layers:
            layer(x, 1, x.shape[0])
            out.append(x.numpy().copy())
    return out


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """Every bundled program exported, and what a fresh process running only transformers
    makes of each export."""
    jobs, cases = [], {}
    for i, name in enumerate(examples.PROGRAMS):
        p, ct = _compiled(name)
        path = tmp_path_factory.mktemp(name)
        report = export(ct, path, "transformers", vocab=p.vocab, end=p.end)
        rng = np.random.default_rng(100 + i)
        raw = [p.sample(rng) for _ in range(PROMPTS_PER_PROGRAM)]
        cases[name] = (p, ct, raw, report, path)
        plan = transformers_plan(ct)
        residuals = [plan.residual(x).tolist() for x in _tw_residuals(ct, p.encode(raw[0]))]
        jobs.append({"name": name, "path": str(path), "max_new": p.max_answer,
                     "texts": [p.normalize(r) for r in raw], "residuals": residuals[:-1]})
    res = subprocess.run([sys.executable, "-c", LOADER], input=json.dumps(jobs),
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    return cases, json.loads(res.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", examples.PROGRAMS)
def test_generate_matches_tw_run(exported, name):
    cases, report = exported
    p, ct, raw, _, _ = cases[name]
    want = [generate(p, r, lambda inputs: ct.run(inputs)) for r in raw]
    assert report[name]["gens"] == want
    assert report[name]["ids"] == p.encode(raw[0]).tolist()  # the tokenizer is tw's encoding


@pytest.mark.parametrize("name", examples.PROGRAMS)
def test_logits_and_hidden_states_are_tws(exported, name):
    """Logits match `ct.run` at fp32 round-off; the embedding is tw's first residual exactly,
    and each block, fed tw's residual, gives tw's next residual (twins included) within twice
    tw's static float32 error bound of each column (two float32 evaluations in different
    summation orders) plus 1e-6 of the row's largest value."""
    cases, report = exported
    p, ct, raw, _, _ = cases[name]
    tokens = p.encode(raw[0])
    want = ct.run({"tokens": tokens})["logits"]
    got = np.array(report[name]["logits"])
    scale = np.maximum(1.0, np.abs(want))
    assert np.all(np.abs(got - want) <= 1e-4 * scale + 1e-5 * np.abs(want).max())
    plan = transformers_plan(ct)
    ours = [plan.residual(x) for x in _tw_residuals(ct, tokens)]
    hidden = report[name]["hidden"]  # the embedding, then after each block (the last after
    assert len(hidden) == len(ours)  # ln_f, an identity)
    assert np.array_equal(np.array(hidden[0]), ours[0])
    bound = plan.residual(_column_error_bounds(ct)[None])[0]
    for k, (b, x) in enumerate(zip(report[name]["blocks"], ours[1:])):
        b = plan.collapse(np.array(b))  # (each partial column added into its own)
        tol = 2 * np.abs(bound) + 1e-6 * np.maximum(1.0, np.abs(x).max(axis=1, keepdims=True))
        assert np.all(np.abs(b - x) <= tol), (name, k, np.abs(b - x).max())


def _column_error_bounds(ct) -> np.ndarray:
    """Per tw column, the largest static float32 error bound (`lowering.precision`) of any
    value it holds: what tw itself promises of its own float32 evaluation, and so how far
    another float32 evaluation in another summation order may land from it."""
    from tw_lowering.precision import estimate_errors

    _, err = estimate_errors(ct.schedule)
    out = np.zeros(ct.machine.d)
    for g, cols in enumerate(ct.schedule.cols):
        if cols is not None and len(cols):
            out[np.asarray(cols)] = np.maximum(out[np.asarray(cols)], err[g])
    return out


def test_report_sizes(exported):
    cases, _ = exported
    for name, (_, ct, _, report, _) in cases.items():
        assert report["trimmed_params"] == ct.stored_params()
        assert report["padded_params"] > report["trimmed_params"]
        assert report["bytes"] >= 4 * report["padded_params"]


def test_loader_checks_metadata(exported):
    cases, _ = exported
    p, ct, _, _, path = cases["adder"]
    model, tok = load_transformers(path, graph=ct.schedule.tg.graph)
    assert model.config.n_layer == ct.n_layers
    _, other = _compiled("caesar")
    with pytest.raises(ExportError, match="another graph"):
        load_transformers(path, graph=other.schedule.tg.graph)
    cfg = json.loads((path / "config.json").read_text())
    cfg["n_layer"] += 1
    bad = path.parent / "tampered"
    bad.mkdir()
    (bad / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ExportError, match="disagree"):
        load_transformers(bad)


def test_norm_constant_refused_with_the_smallest_that_works(tmp_path):
    p, ct = _compiled("adder")
    eps = transformers_plan(ct).norm_eps()
    with pytest.raises(ExportError, match=re.escape(f"smallest that works is {eps:.6g}")):
        export(ct, tmp_path / "x", "transformers", vocab=p.vocab, end=p.end, norm_eps=eps / 4)
    export(ct, tmp_path / "y", "transformers", vocab=p.vocab, end=p.end, norm_eps=eps * 4)


def test_values_too_large_for_any_norm_constant(tmp_path):
    """A graph whose values reach 1e20: no float32 LayerNorm constant swallows their energy."""
    from twdialect import ops as tw

    with tw.Graph("main") as g:
        tok = tw.embedding("tokens", np.array([[1.0], [2.0]]))
        big = tw.linear(tok, np.array([[1e20]]))
        tw.output("logits", tw.concat([big, big]))
    ct = lowering.compile(g.module, d=16, d_head=4)
    with pytest.raises(ExportError, match="beyond what a float32 norm constant"):
        export(ct, tmp_path / "x", "transformers")


def test_real_inputs_are_refused(tmp_path):
    from twdialect import ops as tw

    with tw.Graph("main") as g:
        x = tw.input("x", 2, (-1.0, 1.0))
        tw.output("y", tw.relu(x))
    ct = lowering.compile(g.module, d=16, d_head=4)
    with pytest.raises(ExportError, match="real-valued"):
        export(ct, tmp_path / "x", "transformers")


def test_deterministic(tmp_path):
    p, ct = _compiled("adder")
    for sub in ("a", "b"):
        export(ct, tmp_path / sub, "transformers", vocab=p.vocab, end=p.end)
    for f in ("model.safetensors", "config.json", "tokenizer.json"):
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes(), f


def test_refused_before_writing_when_the_disk_is_too_small(tmp_path, monkeypatch):
    """A stock layout larger than the free space is refused before a byte is written."""
    import shutil
    from collections import namedtuple

    p, ct = _compiled("adder")
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(10**6, 10**6 - 1000, 1000))
    with pytest.raises(ExportError, match="GB are free there"):
        export(ct, tmp_path / "x", "transformers", vocab=p.vocab, end=p.end)
    assert not (tmp_path / "x").exists()
