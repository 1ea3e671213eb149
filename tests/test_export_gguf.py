"""The GGUF export (llama.cpp's gpt2 architecture): loaded by llama-cpp-python in a fresh
process, llama.cpp's own completion API generates exactly what tw-run generates, its logits
at every position are tw's up to float32 round-off, and the loader refuses a file from
another graph."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("gguf")
pytest.importorskip("llama_cpp",
                    reason="llama.cpp's binding is missing: pip install 'tw-compiler[llama]'")

import tw_examples as examples  # noqa: E402
import tw_lowering as lowering  # noqa: E402
from tw_examples.token_program import generate  # noqa: E402
from tw_lowering.export import ExportError, export  # noqa: E402
from tw_lowering.export.gguf import GELU_GAP, check_gguf, export_gguf  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PROMPTS_PER_PROGRAM = 4

# Runs in a fresh interpreter. Generation goes through llama-cpp-python's stock completion
# API (token ids in, llama.cpp's greedy sampler, its detokenizer, stop at the EOS = the
# program's end token); the logits through tw's loader (metadata checked, F32 KV cache).
LOADER = r"""
import json, sys
from llama_cpp import Llama
from tw_lowering.export.gguf import load_gguf
jobs = json.loads(sys.stdin.read())
report = {}
for job in jobs:
    texts = []
    if job["prompts"]:
        llm = Llama(job["path"], n_ctx=0, type_k=0, type_v=0, flash_attn=False, verbose=False)
        for ids in job["prompts"]:
            out = llm.create_completion(ids, max_tokens=job["max_new"], temperature=0.0,
                                        top_k=1, repeat_penalty=1.0)
            texts.append(out["choices"][0]["text"])
        llm.close()
    m = load_gguf(job["path"], n_threads=2)
    report[job["name"]] = {
        "texts": texts,
        "gens": [m.generate(ids, job["max_new"]) for ids in job["prompts"]],
        "logits": [m.logits(s).tolist() for s in job["seqs"]]}
    m.close()
print("JSON" + json.dumps(report))
"""


def _compiled(name):
    p = examples.load(name)
    g = p.geometry
    return p, lowering.compile(p.module, d=g.d, d_head=g.d_head, d_hidden=g.d_hidden)


def _run_loader(jobs: list[dict]) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-c", LOADER], input=json.dumps(jobs), text=True,
                       capture_output=True, cwd=ROOT, env=env, timeout=900)
    line = [x for x in r.stdout.splitlines() if x.startswith("JSON")]
    assert r.returncode == 0 and line, r.stderr[-4000:]
    return json.loads(line[0][4:])


def _tw_greedy(p, ct, prompt: str, ids: list[int], seq: list[int], logits: np.ndarray) -> str:
    """tw-run's greedy generation from prompt `ids` (`examples.token_program.generate` with
    ct.run), read off one forward over `seq` (the prompt and the expected answer): by
    causality each position's argmax is what the greedy loop picks there, as long as it
    agrees with `seq`; where it departs, the loop itself runs."""
    end = p.vocab.index(p.end)
    out = []
    for at in range(len(ids) - 1, len(ids) - 1 + p.max_answer):
        if at >= len(logits):
            break
        tok = int(np.argmax(logits[at]))
        if tok == end:
            return p.decode(out)
        out.append(tok)
        if at + 1 >= len(seq) or seq[at + 1] != tok:
            break
    if len(out) == p.max_answer:
        return p.decode(out)
    return generate(p, prompt, ct.run)


def _program_jobs(tmp: Path, n_prompts: int, seed: int, loop: bool = False):
    """Export every bundled program; per program, tw's side (prompts, generations, logits).
    `loop`: tw's generations from `generate(p, prompt, ct.run)` itself (one forward per
    token) rather than read off the forward over prompt + answer (`_tw_greedy`)."""
    jobs, expect = [], {}
    for name in examples.PROGRAMS:
        p, ct = _compiled(name)
        info = export(ct, tmp / f"{name}.gguf", "gguf", vocab=p.vocab, end=p.end)
        rng = np.random.default_rng(seed)
        prompts = [p.sample(rng) for _ in range(n_prompts)]
        ids = [[int(t) for t in p.encode(q)] for q in prompts]
        seqs = [(i + [p.vocab.index(c) for c in p.reference(q) + p.end])[: info["n_positions"]]
                for i, q in zip(ids, prompts)]
        logits = [ct.run({"tokens": np.array(s, np.int64)})["logits"] for s in seqs]
        gens = ([generate(p, q, ct.run) for q in prompts] if loop else
                [_tw_greedy(p, ct, q, i, s, lg) for q, i, s, lg in zip(prompts, ids, seqs, logits)])
        jobs.append({"name": name, "path": str(tmp / f"{name}.gguf"), "prompts": ids,
                     "seqs": seqs, "max_new": p.max_answer})
        expect[name] = {"program": p, "info": info, "gens": gens, "logits": logits}
    return jobs, expect


@pytest.fixture(scope="module")
def programs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gguf")
    jobs, expect = _program_jobs(tmp, PROMPTS_PER_PROGRAM, seed=0)
    return expect, _run_loader(jobs)


def _check_program(name, expect, got):
    e, g = expect[name], got[name]
    p = e["program"]
    assert g["texts"] == e["gens"], f"{name}: llama.cpp completions differ from tw's"
    assert [p.decode(ids) for ids in g["gens"]] == e["gens"], f"{name}: loader's greedy differs"
    worst = 0.0
    for ref, out in zip(e["logits"], g["logits"]):
        out = np.asarray(out, np.float64)
        assert out.shape == ref.shape
        diff = float(np.abs(out - ref).max())
        worst = max(worst, diff)
        assert diff <= 1e-4 * max(1.0, float(np.abs(ref).max())), (name, diff)
    info = e["info"]
    print(f"{name}: max |logits diff| {worst:.3g}, {info['bytes']} bytes, "
          f"{info['seconds']:.3f} s, params {info['params']} (tw {info['trimmed_params']})")
    return worst


@pytest.mark.parametrize("name", examples.PROGRAMS)
def test_program_runs_exactly_in_llama_cpp(programs, name):
    expect, got = programs
    _check_program(name, expect, got)


@pytest.mark.slow
def test_programs_many_prompts(tmp_path):
    jobs, expect = _program_jobs(tmp_path, 30, seed=1, loop=True)
    got = _run_loader(jobs)
    for name in examples.PROGRAMS:
        _check_program(name, expect, got)


def _synthetic(vocab: int, width: int, seed: int):
    """A token graph whose output width differs from its vocabulary (and a ReLU on real
    pre-activations of every size, through GELU's scaled cut-off)."""
    from twdialect import ops as tw

    rng = np.random.default_rng(seed)
    with tw.Graph("main") as g:
        tok = tw.embedding("tokens", rng.normal(size=(vocab, 3)).round(3))
        h = tw.relu(tw.linear(tok, rng.normal(size=(3, 6)).round(3), rng.normal(size=6) * 1e-3))
        tw.output("logits", tw.linear(h, rng.normal(size=(6, width)).round(3)))
    return lowering.compile(g.module, d=32, d_head=4, d_hidden=16)


def test_output_width_differs_from_vocab(tmp_path):
    cases = {"wide": _synthetic(3, 5, 0), "narrow": _synthetic(6, 2, 1)}
    jobs, refs = [], {}
    rng = np.random.default_rng(2)
    for name, ct in cases.items():
        info = export_gguf(ct, tmp_path / f"{name}.gguf", n_positions=32)
        vocab = ct.sources[0].table.shape[0]
        meta = check_gguf(tmp_path / f"{name}.gguf", graph=ct.schedule.tg.graph)
        assert meta["gguf_vocab"] == max(vocab, meta["geometry"]["n_out"])
        seqs = [rng.integers(0, vocab, size=n).tolist() for n in (1, 7, 32)]
        jobs.append({"name": name, "path": str(tmp_path / f"{name}.gguf"), "prompts": [],
                     "seqs": seqs, "max_new": 0})
        refs[name] = [ct.run({"tokens": np.array(s)})["logits"] for s in seqs]
        assert info["n_positions"] == 32
    got = _run_loader(jobs)
    for name, ref in refs.items():
        for r, o in zip(ref, got[name]["logits"]):
            o = np.asarray(o)
            assert o.shape == r.shape
            assert np.abs(o - r).max() <= 1e-5 * max(1.0, np.abs(r).max()), name


def test_model_without_heads_gets_runnable_heads(tmp_path, monkeypatch):
    """A token -> relu -> linear graph has no heads after the default pipeline: the cheapest
    tied geometry would be d_model heads of width 1, on which llama.cpp aborts the process.
    The export gives it heads of width >= 4 (zero weights; test_output_width_differs_from_vocab
    runs it in llama.cpp, exact), and the loader refuses width-1 heads before llama.cpp reads
    the file (written here by the old rule, any power of four)."""
    import tw_lowering.export.gguf as gguf_export
    from tw_lowering.export.stock import power_of_four

    ct = _synthetic(3, 5, 0)
    assert not any(layer.attn.active for layer in ct.layers)
    export_gguf(ct, tmp_path / "ok.gguf", n_positions=8)
    g = check_gguf(tmp_path / "ok.gguf", graph=ct)["geometry"]
    assert g["head_dim"] >= 4 and g["n_heads"] * g["head_dim"] == g["d_model"]
    monkeypatch.setattr(gguf_export, "runnable_head_dim", power_of_four)
    export_gguf(ct, tmp_path / "ones.gguf", n_positions=8)
    monkeypatch.undo()
    with pytest.raises(ExportError, match="head geometry llama.cpp cannot run") as e:
        gguf_export.load_gguf(tmp_path / "ones.gguf", graph=ct)
    assert "\n" not in str(e.value)


def test_loader_refuses_another_graph(tmp_path):
    p, ct = _compiled("adder")
    _, other = _compiled("caesar")
    export_gguf(ct, tmp_path / "a.gguf", vocab=p.vocab, end=p.end)
    meta = check_gguf(tmp_path / "a.gguf", graph=ct.schedule.tg.graph)
    assert check_gguf(tmp_path / "a.gguf", graph=ct) == meta
    assert meta["format"] == "gguf" and meta["end_id"] == p.vocab.index(p.end)
    from tw_lowering.export.gguf import load_gguf

    with pytest.raises(ExportError, match="another graph") as e:
        load_gguf(tmp_path / "a.gguf", graph=other.schedule.tg.graph)  # (refused before loading)
    assert "\n" not in str(e.value)
    with pytest.raises(ExportError, match="another graph"):
        check_gguf(tmp_path / "a.gguf", graph=other)


def test_loader_refuses_a_foreign_file(tmp_path):
    import gguf

    w = gguf.GGUFWriter(str(tmp_path / "x.gguf"), "gpt2")
    w.add_block_count(1)
    w.add_tensor("t", np.zeros(4, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(ExportError, match="not a tw export"):
        check_gguf(tmp_path / "x.gguf")
    (tmp_path / "y.gguf").write_bytes(b"not a gguf file at all")
    with pytest.raises(ExportError, match="cannot read"):
        check_gguf(tmp_path / "y.gguf")


def test_tensors_as_planned(tmp_path):
    """The file's tensors read back: the stock layout, q pre-scaled by sqrt(head_dim), each
    neuron's ffn_up scaled by a power of two S and its ffn_down row by 1/S (exactly)."""
    import gguf

    from tw_lowering.export.stock import StockPlan, power_of_four

    p, ct = _compiled("calculator")
    export_gguf(ct, tmp_path / "c.gguf", vocab=p.vocab, end=p.end)
    plan = StockPlan(ct, twins=True, tied_width=True, head_dims=power_of_four)
    g = plan.geometry
    t = {x.name: np.asarray(x.data) for x in gguf.GGUFReader(tmp_path / "c.gguf").tensors}
    assert all(a.dtype == np.float32 for a in t.values())
    assert np.array_equal(t["token_embd.weight"], plan.embedding())
    assert np.array_equal(t["position_embd.weight"], plan.positions())
    assert np.array_equal(t["output.weight"], plan.unembedding().T)
    eps = plan.norm_eps()
    assert np.all(t["output_norm.weight"] == np.float32(np.sqrt(eps)))
    dm = g.d_model
    for i in range(g.n_layers):
        L = plan.layer(i)
        qkv = t[f"blk.{i}.attn_qkv.weight"]
        assert np.array_equal(qkv[:dm], L["W_Q"].transpose(0, 2, 1).reshape(-1, dm)
                              * np.float32(np.sqrt(g.head_dim)))
        assert np.array_equal(qkv[2 * dm:], L["W_V"].transpose(0, 2, 1).reshape(-1, dm))
        assert np.array_equal(t[f"blk.{i}.attn_output.weight"], L["W_O"].reshape(-1, dm).T)
        up, down = t[f"blk.{i}.ffn_up.weight"], t[f"blk.{i}.ffn_down.weight"]
        w_in = np.vstack([L["W_in"], L["b_in"][None]])  # (the bias scales with its column)
        up = np.hstack([up, t[f"blk.{i}.ffn_up.bias"][:, None]])
        for n in np.nonzero(np.abs(w_in).max(axis=0) > 0)[0]:
            j = int(np.abs(w_in[:, n]).argmax())
            s = float(up[n, j]) / float(w_in[j, n])
            assert s >= 16 and s == 2.0 ** round(np.log2(s)), (i, n, s)
            assert np.array_equal(up[n] / np.float32(s), w_in[:, n])
            assert np.array_equal(down[:, n] * np.float32(s), L["W_out"][n])


def test_gelu_gap_covers_ggml_table():
    """ggml's CPU GELU for |x| < 10: the fp16 table of the tanh GELU at fp16(x). Its largest
    distance from relu(x) (table value vs relu at the fp16 point, plus the fp16 rounding of
    x, at most 2^-8 below 10) is within GELU_GAP."""
    h = np.arange(0, 1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    h = h[np.isfinite(h) & (np.abs(h.astype(np.float32)) < 10)].astype(np.float32)
    c = np.float32(0.79788456080286535587989211986876)
    table = (np.float32(0.5) * h * (np.float32(1) + np.tanh(
        c * h * (np.float32(1) + np.float32(0.044715) * h * h)))).astype(np.float16)
    gap = np.abs(table.astype(np.float64) - np.maximum(h, 0)).max() + 2.0 ** -8
    assert 0.17 < gap <= GELU_GAP


def test_refusals(tmp_path):
    p, ct = _compiled("adder")
    with pytest.raises(ExportError, match="unknown option"):
        export_gguf(ct, tmp_path / "x.gguf", vocab=p.vocab, flash=True)
    with pytest.raises(ExportError, match="token table has 13 rows"):
        export_gguf(ct, tmp_path / "x.gguf", vocab=p.vocab[:-1])
    with pytest.raises(ExportError, match="not in the vocabulary"):
        export_gguf(ct, tmp_path / "x.gguf", vocab=p.vocab, end="?")
    with pytest.raises(ExportError, match="smallest that works"):
        export_gguf(ct, tmp_path / "x.gguf", vocab=p.vocab, norm_eps=4.0)
    from twdialect import ops as tw

    with tw.Graph("main") as g:
        tw.output("y", tw.relu(tw.input("x", 2, (-1.0, 1.0))))
    with pytest.raises(ExportError, match="real-valued"):
        export_gguf(lowering.compile(g.module, d=16, d_head=4), tmp_path / "x.gguf")


def test_deterministic(tmp_path):
    p, ct = _compiled("binary_increment")
    a = export_gguf(ct, tmp_path / "a.gguf", vocab=p.vocab, end=p.end)
    export_gguf(ct, tmp_path / "b.gguf", vocab=p.vocab, end=p.end)
    assert (tmp_path / "a.gguf").read_bytes() == (tmp_path / "b.gguf").read_bytes()
    assert a["bytes"] == (tmp_path / "a.gguf").stat().st_size
    assert a["params"] > a["trimmed_params"] > 0
