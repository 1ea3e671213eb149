"""The TransformerLens export (`lowering/export/tlens.py`): every bundled token program written,
then loaded by a fresh Python process through TransformerLens, must give tw's logits (fp32
round-off), tw's greedy generations, and tw's residual stream at every hook_resid_pre / mid /
post; a foreign, stale or edited export is refused in one line before anything is built.

The fresh process loads every program's export in one go (one TransformerLens import); the
refusals are checked here, where no model is built (the checks come first)."""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import tw_examples as examples
import twdialect
from tw_examples.token_program import generate
from tw_lowering.export import export
from tw_lowering.export.metadata import ExportError
from tw_lowering.export.stock import StockPlan
from tw_lowering.export.tlens import ATTN_SCALE, export_tlens, load_tlens

PROGRAMS = examples.PROGRAMS
ROOT = Path(__file__).resolve().parents[1]
N_PROMPTS = 4  # random prompts per program (greedy generations compared)

needs_tlens = pytest.mark.skipif(importlib.util.find_spec("transformer_lens") is None,
                                 reason="transformer-lens is not installed")


@functools.cache
def compiled(name):
    from tw_lowering import compile  # noqa: A004

    p = examples.load(name)
    g = p.geometry
    return compile(p.module, d=g.d, d_head=g.d_head, d_hidden=g.d_hidden)


def tw_residuals(ct, ids) -> np.ndarray:
    """(layers, 3, n, d): tw's residual before each layer, after its attention, after its MLP
    (the sublayers of `CompiledTransformer.forward`, one sequence)."""
    out = []
    with torch.inference_mode():
        x = ct.embed({"tokens": ids})[0].clone()
        n = x.shape[0]
        for layer in ct.layers:
            pre = x.clone()
            layer.attn(x, 1, n)
            mid = x.clone()
            layer.mlp(x)
            out.append(torch.stack([pre, mid, x.clone()]))
    return torch.stack(out).double().numpy()


# The fresh process: loads each export, runs every sequence with run_with_cache, and runs
# tw-run's greedy loop with the loaded model as the runner.
FRESH = r"""
import json, sys, time
import numpy as np, torch
import tw_examples as examples
from tw_examples.token_program import generate, matches_reference
from tw_lowering.export.tlens import load_tlens

job = json.load(open(sys.argv[1]))
arrays, report = {}, {}
with torch.no_grad():
    for name, spec in job.items():
        t0 = time.perf_counter()
        model = load_tlens(spec["path"])
        load_s = time.perf_counter() - t0
        for j, seq in enumerate(spec["seqs"]):
            logits, cache = model.run_with_cache(torch.tensor([seq]))
            arrays[f"{name}/{j}/logits"] = logits[0].double().numpy()
            arrays[f"{name}/{j}/resid"] = np.stack([np.stack([
                cache[f"blocks.{i}.hook_resid_{k}"][0].double().numpy()
                for k in ("pre", "mid", "post")]) for i in range(model.cfg.n_layers)])
        p = examples.load(name)
        run = lambda inputs: {"logits": model(torch.as_tensor(inputs["tokens"])[None])[0]
                              .double().numpy()}
        report[name] = {
            "class": type(model).__name__, "load_seconds": load_s,
            "generations": [generate(p, q, run) for q in spec["prompts"]],
            "reference": [matches_reference(p, q, run) for q in spec.get("reference", [])]}
np.savez(sys.argv[2], **arrays)
json.dump(report, open(sys.argv[3], "w"))
"""


def run_fresh(job: dict, tmp: Path) -> tuple[dict, dict]:
    """Run FRESH on `job` ({program: {path, seqs, prompts}}) in a new interpreter."""
    (tmp / "job.json").write_text(json.dumps(job))
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    proc = subprocess.run([sys.executable, "-c", FRESH, str(tmp / "job.json"),
                           str(tmp / "out.npz"), str(tmp / "report.json")],
                          cwd=tmp, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with np.load(tmp / "out.npz") as z:
        arrays = {k: z[k] for k in z.files}
    return arrays, json.loads((tmp / "report.json").read_text())


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """Every program exported, tw's references computed, and the fresh process's results."""
    root = tmp_path_factory.mktemp("tlens")
    job, refs = {}, {}
    for k, name in enumerate(PROGRAMS):
        p, ct = examples.load(name), compiled(name)
        report = export_tlens(ct, root / name)
        rng = np.random.default_rng(100 + k)
        prompts = [p.sample(rng) for _ in range(N_PROMPTS)]
        gens = [generate(p, q, ct.run) for q in prompts]
        seqs = [np.array(list(p.encode(q)) + [p.vocab.index(c) for c in a], np.int64)
                for q, a in zip(prompts, gens)]
        plan = StockPlan(ct)
        refs[name] = {
            "report": report, "plan": plan, "generations": gens, "seqs": seqs,
            "logits": [ct.run({"tokens": s})["logits"] for s in seqs],
            "oracle": [twdialect.evaluate(p.module, {"tokens": s})["logits"] for s in seqs],
            "resid": [plan.residual(tw_residuals(ct, s)) for s in seqs]}
        job[name] = {"path": str(root / name), "prompts": prompts,
                     "seqs": [s.tolist() for s in seqs]}
    arrays, fresh = run_fresh(job, root)
    return refs, arrays, fresh


def close(got, want, what: str, rel: float = 1e-4) -> float:
    """assert |got - want| <= rel * max(1, |want|) (tw's comparison); the largest difference."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape, (what, got.shape, want.shape)
    scale = max(1.0, float(np.abs(want).max())) if want.size else 1.0
    np.testing.assert_allclose(got, want, atol=rel * scale, rtol=0, err_msg=what)
    return float(np.abs(got - want).max()) if want.size else 0.0


# -- the programs through TransformerLens ---------------------------------------------------
@needs_tlens
@pytest.mark.parametrize("name", PROGRAMS)
def test_logits_match_tw_and_oracle(exported, name):
    refs, arrays, fresh = exported
    r = refs[name]
    assert fresh[name]["class"] == "TransformerBridge"
    for j in range(len(r["seqs"])):
        got = arrays[f"{name}/{j}/logits"]
        close(got, r["logits"][j], f"{name} sequence {j}: logits vs tw")
        close(got, r["oracle"][j], f"{name} sequence {j}: logits vs the oracle")


@needs_tlens
@pytest.mark.parametrize("name", PROGRAMS)
def test_greedy_generations_match_tw(exported, name):
    refs, _, fresh = exported
    assert fresh[name]["generations"] == refs[name]["generations"]


@needs_tlens
@pytest.mark.parametrize("name", PROGRAMS)
def test_hooked_residuals_match_tw(exported, name):
    """blocks.{i}.hook_resid_pre / mid / post hold tw's residual (in the export's columns,
    each partial column added into its own: `StockPlan.collapse`) before layer i, after its
    attention and after its MLP."""
    refs, arrays, _ = exported
    r = refs[name]
    for j in range(len(r["seqs"])):
        got, want = r["plan"].collapse(arrays[f"{name}/{j}/resid"]), r["resid"][j]
        assert got.shape == want.shape
        for i in range(got.shape[0]):
            for k, hook in enumerate(("pre", "mid", "post")):
                close(got[i, k], want[i, k], f"{name} sequence {j}: blocks.{i}.hook_resid_{hook}")


def test_state_dict_config_and_report(exported):
    """HookedTransformer's parameter names and shapes, the TransformerLens config fields, W_Q
    times the attention scale, nothing else altered."""
    from safetensors.numpy import load_file

    refs, _, _ = exported
    r = refs["adder"]
    path = Path(r["report"]["path"])
    g = r["plan"].geometry
    config = json.loads((path / "config.json").read_text())
    assert {k: config[k] for k in ("n_layers", "d_model", "n_heads", "d_head", "d_mlp",
                                   "d_vocab", "d_vocab_out", "n_ctx")} == {
        "n_layers": g.n_layers, "d_model": g.d_model, "n_heads": g.n_heads,
        "d_head": g.head_dim, "d_mlp": g.d_mlp, "d_vocab": g.vocab, "d_vocab_out": g.n_out,
        "n_ctx": g.n_ctx}
    assert config["act_fn"] == "relu" and config["normalization_type"] is None
    assert config["use_attn_scale"] is True and config["attn_scale"] == ATTN_SCALE
    assert config["positional_embedding_type"] == "standard"
    assert config["default_prepend_bos"] is False and config["tokenizer_name"] is None
    assert config["tw"]["format"] == "tlens"
    w = load_file(str(path / "model.safetensors"))
    d, nh, e, m = g.d_model, g.n_heads, g.head_dim, g.d_mlp
    want = {"embed.W_E": (g.vocab, d), "pos_embed.W_pos": (g.n_ctx, d),
            "unembed.W_U": (d, g.n_out), "unembed.b_U": (g.n_out,)}
    for i in range(g.n_layers):
        want.update({f"blocks.{i}.attn.{k}": s for k, s in (
            ("W_Q", (nh, d, e)), ("W_K", (nh, d, e)), ("W_V", (nh, d, e)), ("W_O", (nh, e, d)),
            ("b_Q", (nh, e)), ("b_K", (nh, e)), ("b_V", (nh, e)), ("b_O", (d,)))})
        want.update({f"blocks.{i}.mlp.{k}": s for k, s in (
            ("W_in", (d, m)), ("b_in", (m,)), ("W_out", (m, d)), ("b_out", (d,)))})
    assert {k: v.shape for k, v in w.items()} == want
    plan = r["plan"]
    layer = plan.layer(0)
    np.testing.assert_array_equal(w["blocks.0.attn.W_Q"], layer["W_Q"] * np.float32(ATTN_SCALE))
    for k in ("W_K", "W_V", "W_O", "b_O"):
        np.testing.assert_array_equal(w[f"blocks.0.attn.{k}"], layer[k])
    np.testing.assert_array_equal(w["embed.W_E"], plan.embedding())
    np.testing.assert_array_equal(w["pos_embed.W_pos"], plan.positions())
    np.testing.assert_array_equal(w["unembed.W_U"], plan.unembedding())
    rep = r["report"]
    assert rep["files"]["model.safetensors"] == (path / "model.safetensors").stat().st_size
    assert rep["bytes"] == sum(rep["files"].values())
    assert rep["padded_params"] == g.params() and rep["trimmed_params"] == compiled(
        "adder").stored_params()


def test_export_entry_point_and_positions(tmp_path):
    ct = compiled("adder")
    rep = export(ct, tmp_path / "e", "tlens", n_positions=40)
    assert rep["format"] == "tlens" and rep["geometry"]["n_ctx"] == 40
    from safetensors.numpy import load_file

    assert load_file(str(tmp_path / "e" / "model.safetensors"))["pos_embed.W_pos"].shape[0] == 40
    with pytest.raises(ExportError, match="n_positions"):
        export_tlens(ct, tmp_path / "bad", n_positions=0)


def test_real_valued_inputs_are_refused(tmp_path):
    from tw_lowering import compile  # noqa: A004
    from twdialect import ops as tw

    with tw.Graph("main") as g:
        x = tw.input("x", 2, value_range=(-4, 4))
        tw.output("y", tw.mlp(x, np.eye(2), np.zeros(2), np.eye(2)))
    ct = compile(g.module, d=16, d_head=4, d_hidden=8)
    with pytest.raises(ExportError, match="real-valued") as e:
        export_tlens(ct, tmp_path / "x")
    assert "\n" not in str(e.value)


# -- refusals: checked before anything is built ---------------------------------------------
@pytest.fixture(scope="module")
def adder_export(tmp_path_factory):
    path = tmp_path_factory.mktemp("tlens-adder") / "adder"
    export_tlens(compiled("adder"), path)
    return path


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def _rewrite(path: Path, edit) -> None:
    """Rewrite the weights' metadata with `edit(meta)`, and the config's copy and hash with
    it (a consistent export that differs only in what `edit` changes)."""
    from safetensors.numpy import load_file, save_file
    from safetensors import safe_open

    weights = path / "model.safetensors"
    with safe_open(str(weights), "np") as f:
        meta = dict(f.metadata())
    edit(meta)
    save_file(load_file(str(weights)), str(weights), metadata=meta)
    config = json.loads((path / "config.json").read_text())
    config["tw"] = {k[3:]: v for k, v in meta.items() if k.startswith("tw.")}
    from tw_lowering.export.tlens import _sha256

    config["tw"]["weights_sha256"] = _sha256(weights)
    (path / "config.json").write_text(json.dumps(config))


def _refused(path, match: str, graph=None):
    with pytest.raises(ExportError, match=match) as e:
        load_tlens(path, graph=graph)
    assert "\n" not in str(e.value)


def _edit_config(path: Path, **changes) -> None:
    config = json.loads((path / "config.json").read_text())
    config.update(changes)
    (path / "config.json").write_text(json.dumps(config))


def test_checks_pass_on_a_fresh_export(adder_export, monkeypatch):
    from tw_lowering.export import tlens

    built = []
    monkeypatch.setattr(tlens, "_build", lambda *a: built.append(a) or "model")
    ct = compiled("adder")
    assert load_tlens(adder_export, graph=ct) == "model"
    assert load_tlens(adder_export, graph=ct.schedule.tg.graph) == "model"
    assert built[0][1] == StockPlan(ct).geometry


def test_refuses_another_graph(adder_export):
    _refused(adder_export, "exported from another graph", graph=compiled("calculator"))


def test_refuses_edited_config_fields(adder_export, tmp_path):
    for i, (key, value, match) in enumerate([
            ("act_fn", "gelu", "act_fn='gelu'"), ("normalization_type", "LN", "LN"),
            ("attn_scale", 1.0, "attn_scale"), ("use_attn_scale", False, "use_attn_scale"),
            ("n_heads", 3, "n_heads=3"), ("n_ctx", 99, "n_ctx=99")]):
        path = _copy(adder_export, tmp_path / str(i))
        _edit_config(path, **{key: value})
        _refused(path, match)


def test_refuses_edited_weights(adder_export, tmp_path):
    path = _copy(adder_export, tmp_path / "flip")
    data = bytearray((path / "model.safetensors").read_bytes())
    data[-3] ^= 0x40
    (path / "model.safetensors").write_bytes(bytes(data))
    _refused(path, "changed since it was exported")
    path = _copy(adder_export, tmp_path / "cut")
    data = (path / "model.safetensors").read_bytes()
    (path / "model.safetensors").write_bytes(data[:-4])
    _refused(path, "its header describes")


def test_refuses_mismatched_metadata(adder_export, tmp_path):
    path = _copy(adder_export, tmp_path / "pair")  # config from one export, weights another
    _edit_config(path, tw={**json.loads((path / "config.json").read_text())["tw"],
                           "graph_sha256": "0" * 64})
    _refused(path, "come from different exports")
    path = _copy(adder_export, tmp_path / "geometry")

    def geometry(meta):
        g = json.loads(meta["tw.geometry"])
        g["n_ctx"] = 99
        meta["tw.geometry"] = json.dumps(g, sort_keys=True)

    _rewrite(path, geometry)
    _refused(path, "metadata and weights disagree")
    path = _copy(adder_export, tmp_path / "version")
    _rewrite(path, lambda meta: meta.update({"tw.version": "0.0.9"}))
    _refused(path, "written by tw 0.0.9")


def test_refuses_foreign_exports(adder_export, tmp_path):
    path = _copy(adder_export, tmp_path / "other-format")
    _rewrite(path, lambda meta: meta.update({"tw.format": "transformers"}))
    _refused(path, "a 'transformers' export, expected 'tlens'")
    path = _copy(adder_export, tmp_path / "not-tw")  # a TransformerLens checkpoint, not tw's
    _rewrite(path, lambda meta: [meta.pop(k) for k in list(meta) if k.startswith("tw.")])
    _refused(path, "not a tw export")
    config = json.loads((path / "config.json").read_text())
    del config["tw"]
    (path / "config.json").write_text(json.dumps(config))
    _refused(path, "no tw metadata")
    (path / "config.json").write_text("{not json")
    _refused(path, "no readable config.json")
    _refused(tmp_path / "missing", "not a directory")
    path = _copy(adder_export, tmp_path / "renamed")  # another state dict under the metadata
    from safetensors.numpy import load_file, save_file
    from safetensors import safe_open

    weights = path / "model.safetensors"
    with safe_open(str(weights), "np") as f:
        meta = dict(f.metadata())
    tensors = load_file(str(weights))
    tensors["blocks.0.attn.W_Qx"] = tensors.pop("blocks.0.attn.W_Q")
    save_file(tensors, str(weights), metadata=meta)
    _refused(path, "not a TransformerLens state dict|does not hold the state dict")


# -- a longer sweep -------------------------------------------------------------------------
@needs_tlens
@pytest.mark.slow
def test_reference_answers_sweep(tmp_path):
    """25 random prompts per program: the loaded model reproduces each reference answer (one
    forced forward pass each, `matches_reference`) and tw's greedy generation."""
    job, want = {}, {}
    for k, name in enumerate(PROGRAMS):
        p, ct = examples.load(name), compiled(name)
        export_tlens(ct, tmp_path / name)
        rng = np.random.default_rng(500 + k)
        prompts = [p.sample(rng) for _ in range(25)]
        want[name] = [generate(p, q, ct.run) for q in prompts]
        job[name] = {"path": str(tmp_path / name), "prompts": prompts, "seqs": [],
                     "reference": prompts}
    _, fresh = run_fresh(job, tmp_path)
    for name in PROGRAMS:
        assert fresh[name]["generations"] == want[name], name
        assert all(fresh[name]["reference"]), name
