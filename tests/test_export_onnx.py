"""The ONNX export (lowering/export/onnx.py): every bundled token program exported and run by
onnxruntime in a fresh process (plain onnxruntime and numpy, no tw) matches `ct.run` at every
position and greedy KV-cache generation gives tw-run's text; random graphs with real inputs
match through the loader's run and generate; the metadata is checked; exports are
byte-identical."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

import tw_examples as examples  # noqa: E402
from tw_examples.token_program import generate  # noqa: E402
from tw_lowering import compile  # noqa: E402,A004
from tw_lowering.export.metadata import ExportError, graph_sha256  # noqa: E402
from tw_lowering.export.onnx import DATA_FILE, MODEL_FILE, export_onnx, load_onnx  # noqa: E402
from twdialect import ops as tw  # noqa: E402
from twdialect.inputs import EvaluationError  # noqa: E402
from twdialect.random_graphs import layered_graph, random_graph, sample_inputs  # noqa: E402

PROMPTS_PER_PROGRAM = 3


def _close(got, want):
    for k in want:
        scale = max(1.0, float(np.abs(want[k]).max()))
        np.testing.assert_allclose(got[k], want[k], atol=1e-4 * scale, rtol=0, err_msg=k)


def _compiled(name):
    program = examples.load(name)
    g = program.geometry
    return program, compile(program.module, d=g.d, d_head=g.d_head, d_hidden=g.d_hidden)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """{program: (program, ct, export directory)} for every bundled token program."""
    root = tmp_path_factory.mktemp("onnx")
    out = {}
    for name in examples.PROGRAMS:
        program, ct = _compiled(name)
        export_onnx(ct, root / name)
        out[name] = (program, ct, root / name)
    return out


# Runs in a fresh interpreter with nothing of tw importable: a stock onnxruntime user.
FRESH_SCRIPT = r'''
import json, sys
import numpy as np
import onnxruntime as ort

jobs = json.load(open(sys.argv[1]))
out = {}
for j, job in enumerate(jobs):
    s = ort.InferenceSession(job["model"], providers=["CPUExecutionProvider"])
    assert s.get_modelmeta().custom_metadata_map["tw.format"] == "onnx"
    past = [(i.name, i.shape) for i in s.get_inputs() if i.name.startswith("past_kv_")]
    at = [o.name for o in s.get_outputs()].index("logits")
    empty = [np.zeros((1, shape[1], 0, shape[3]), np.float32) for _, shape in past]

    def forward(ids, kv):
        feeds = {"tokens": np.array([ids], np.int64)}
        feeds.update({name: a for (name, _), a in zip(past, kv)})
        res = s.run(None, feeds)
        return res[at][0], res[len(res) - len(past):]

    for k, seq in enumerate(job["sequences"]):  # whole sequences: the prefill graph
        out[f"{j}/full/{k}"] = forward(seq, empty)[0]
    for k, prompt in enumerate(job["prompts"]):  # greedy, one KV-cache step per token
        logits, kv = forward(prompt, empty)
        tokens = []
        for _ in range(job["max_answer"]):
            tok = int(np.argmax(logits[-1]))
            if tok == job["end"]:
                break
            tokens.append(tok)
            logits, kv = forward([tok], kv)
        out[f"{j}/gen/{k}"] = np.array(tokens, np.int64)
assert not any(m.split(".")[0] in ("lowering", "twdialect", "examples") for m in sys.modules)
np.savez(sys.argv[2], **out)
'''


def test_token_programs_in_a_fresh_onnxruntime_process(exported, tmp_path):
    jobs, want = [], []
    for name, (program, ct, path) in exported.items():
        onnx.checker.check_model(str(path / MODEL_FILE))
        rng = np.random.default_rng(sum(map(ord, name)))
        prompts = [program.sample(rng) for _ in range(PROMPTS_PER_PROGRAM)]
        answers = [generate(program, p, ct.run) for p in prompts]  # what tw-run prints
        ids = [[int(i) for i in program.encode(p)] for p in prompts]
        seqs = [i + [program.vocab.index(c) for c in a] for i, a in zip(ids, answers)]
        jobs.append({"model": str(path / MODEL_FILE), "sequences": seqs, "prompts": ids,
                     "end": program.vocab.index(program.end),
                     "max_answer": program.max_answer})
        want.append((name, program, ct, seqs, prompts, answers))
    (tmp_path / "jobs.json").write_text(json.dumps(jobs))
    (tmp_path / "fresh.py").write_text(FRESH_SCRIPT)
    done = subprocess.run([sys.executable, "-I", str(tmp_path / "fresh.py"),
                           str(tmp_path / "jobs.json"), str(tmp_path / "out.npz")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    got = np.load(tmp_path / "out.npz")
    for j, (name, program, ct, seqs, prompts, answers) in enumerate(want):
        for k, seq in enumerate(seqs):
            _close({"logits": got[f"{j}/full/{k}"]},
                   ct.run({"tokens": np.array(seq, np.int64)}))
        for k, (prompt, answer) in enumerate(zip(prompts, answers)):
            assert program.decode(got[f"{j}/gen/{k}"]) == answer, (name, prompt)


def test_loader_generate_matches_compiled_generate(exported):
    for name in ("calculator", "fibonacci"):
        program, ct, path = exported[name]
        model = load_onnx(path, ct)
        prompt = {"tokens": program.encode(program.sample(np.random.default_rng(1)))}

        def feedback(last):
            return {"tokens": int(np.argmax(last["logits"]))}

        steps = program.max_answer - 1
        _close(model.generate(prompt, steps, feedback), ct.generate(prompt, steps, feedback))
        _close(model.run(prompt), ct.run(prompt))


@pytest.mark.parametrize("seed, kwargs", [
    (3, {}), (7, {"library": False, "embedding": True}), (11, {"n_ops": 60})])
def test_random_graph_with_real_inputs(tmp_path, seed, kwargs):
    module = random_graph(seed, **{"n_ops": 40, **kwargs})
    ct = compile(module, d=256, d_head=8, d_hidden=512)
    export_onnx(ct, tmp_path / "m")
    model = load_onnx(tmp_path / "m", ct)
    feeds = sample_inputs(module, 12, seed)
    want = ct.run(feeds)
    _close(model.run(feeds), want)
    at = iter(range(5, 12))

    def feedback(_last):
        i = next(at)
        return {k: v[i] for k, v in feeds.items()}

    _close(model.generate({k: v[:5] for k, v in feeds.items()}, 7, feedback), want)


def test_literal_outputs_load_in_onnxruntime(tmp_path):
    """Two literal outputs read the constant column: two equal one-element index tensors,
    which onnxruntime's constant sharing merges and may lend to a shape input (Unsqueeze's
    axes [0]); an external one could not be read there, so none is external."""
    with tw.Graph("main") as g:
        x = tw.input("x", 2, value_range=(-1.0, 1.0))
        tw.output("y", tw.relu(x))
        tw.output("c", tw.literal([3.0]))
        tw.output("e", tw.literal([5.0]))
    ct = compile(g.module, d=64, d_head=8, d_hidden=64)
    export_onnx(ct, tmp_path / "m")
    written = onnx.load(str(tmp_path / "m" / MODEL_FILE), load_external_data=False)
    assert all(int(np.prod(t.dims)) > 1 for t in written.graph.initializer if t.external_data)
    feeds = {"x": np.array([[0.5, -0.5], [-1.0, 1.0], [0.25, 0.0]])}
    _close(load_onnx(tmp_path / "m", ct).run(feeds), ct.run(feeds))


def _tables(ct) -> int:
    """The floats an ONNX export stores beside the runtime's trimmed blocks: the pos_encoding
    feature table (max_len rows of its features past the position column), each pos_table
    and embedding table, and each output's literal scale."""
    n = 0
    for s in ct.sources:
        if s.kind == "pos" and s.pos_width > 1:
            n += ct.contract.max_len * (s.pos_width - 1)
        elif s.kind in ("pos_table", "embedding"):
            n += s.table.size
    return n + sum(np.size(o.scale) for o in ct.outputs if not np.all(np.asarray(o.scale) == 1))


@pytest.mark.parametrize("pipeline, table", [("none", 4096), ("default", 0)])
def test_layered_graph(tmp_path, pipeline, table):
    """The runtime's trimmed blocks and nothing more but the tables the model reads: as written
    the graph's pos_encoding (4096 x 1 features) rides along; the default pipeline drops it,
    since no attention at this size reads it (the op is dead), and with it the table."""
    module, _ = layered_graph(300)
    ct = compile(module, d=256, d_head=16, d_hidden=1024, pipeline=pipeline)
    info = export_onnx(ct, tmp_path / "m")
    assert _tables(ct) == table
    assert info["params"] == info["trimmed_params"] + table
    feeds = sample_inputs(module, 20, 4)
    _close(load_onnx(tmp_path / "m", ct).run(feeds), ct.run(feeds))


def test_graph_without_inputs_or_attention_takes_its_positions(tmp_path):
    with tw.Graph("main") as g:
        p = tw.pos_encoding(3, max_len=32)
        tw.output("o", tw.mlp(p, np.full((3, 2), 0.1), np.zeros(2), np.ones((2, 2))))
    ct = compile(g.module, d=64, d_head=8, d_hidden=64)
    export_onnx(ct, tmp_path / "m")
    model = load_onnx(tmp_path / "m", ct)
    names = {i.name for i in model.session.get_inputs()}
    assert names == {"new_positions", "position_offset"}
    want = ct.run({}, n_positions=9)
    _close(model.run({}, n_positions=9), want)
    _close(model.generate({}, 5, lambda _last: {}, n_positions=4), want)


def test_metadata_is_written_and_checked(exported, tmp_path):
    program, ct, path = exported["adder"]
    meta = {p.key: p.value for p in onnx.load(str(path / MODEL_FILE),
                                               load_external_data=False).metadata_props}
    assert meta["tw.format"] == "onnx"
    assert meta["tw.graph_sha256"] == graph_sha256(ct.schedule.tg.graph)
    assert json.loads(meta["tw.geometry"])["n_layers"] == ct.n_layers
    model = load_onnx(path, ct.schedule.tg.graph)  # the graph, or the compiled model itself
    assert model.meta["format"] == "onnx"
    assert load_onnx(path).contract == ct.contract  # without a graph: the recorded contract

    _, other = _compiled("caesar")
    with pytest.raises(ExportError, match="another graph") as e:
        load_onnx(path, other)
    assert "\n" not in str(e.value)

    def tampered(key, value):
        where = tmp_path / f"{key}-{value}"[:40]
        where.mkdir()
        shutil.copy(path / DATA_FILE, where / DATA_FILE)
        model = onnx.load(str(path / MODEL_FILE), load_external_data=False)
        props = {p.key: p.value for p in model.metadata_props}
        if value is None:
            props.pop(key)
        else:
            props[key] = value
        del model.metadata_props[:]
        onnx.helper.set_model_props(model, props)
        (where / MODEL_FILE).write_bytes(model.SerializeToString())
        return where

    for key, value, graph, message in [
            ("tw.graph_sha256", "0" * 64, ct, "another graph"),
            ("tw.format", "gguf", None, "expected 'onnx'"),
            ("tw.version", "0.0.1", None, "written by tw"),
            ("tw.geometry", json.dumps({"kv_layers": {}}), None, "disagree"),
            ("tw.machine", None, None, "not a tw export")]:
        with pytest.raises(ExportError, match=message) as e:
            load_onnx(tampered(key, value), graph)
        assert "\n" not in str(e.value)


def test_onnxruntime_keeps_every_bias_after_its_product(exported, tmp_path):
    """With default session options onnxruntime fuses no MatMul + Add into a Gemm (whose C
    input may start the accumulator: `lowering.model.affine`); products and biases stay
    apart, a bias Add right after each weight product."""
    import onnxruntime as ort

    _, ct, path = exported["calculator"]
    options = ort.SessionOptions()
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    options.add_session_config_entry(
        "session.optimized_model_external_initializers_file_name", "optimized.data")
    ort.InferenceSession(str(path / MODEL_FILE), options, providers=["CPUExecutionProvider"])
    nodes = onnx.load(str(tmp_path / "optimized.onnx"), load_external_data=False).graph.node
    kinds = [n.op_type for n in nodes]
    assert not {"Gemm", "FusedGemm"} & set(kinds)
    made_by = {o: n for n in nodes for o in n.output}
    bias_adds = [n for n in nodes if n.op_type == "Add" and n.input[1].endswith(
        (".b_o", ".b1", ".b2"))]
    assert len(bias_adds) == sum(int(layer.attn.active) + 2 * int(
        layer.mlp.n_neurons > 0 and layer.mlp.n_write > 0) for layer in ct.layers)
    assert all(made_by[n.input[0]].op_type == "MatMul" for n in bias_adds)


def test_two_exports_are_byte_identical(exported, tmp_path):
    _, ct, path = exported["fibonacci"]
    info = export_onnx(ct, tmp_path / "again")
    for f in (MODEL_FILE, DATA_FILE):
        assert (path / f).read_bytes() == (tmp_path / "again" / f).read_bytes()
    assert info["files"] == {f: os.path.getsize(path / f) for f in (MODEL_FILE, DATA_FILE)}


def test_errors_are_one_line(exported, tmp_path):
    program, ct, path = exported["adder"]
    (tmp_path / "file").write_text("x")
    for kwargs, message in [({"n_positions": 0}, "n_positions"),
                            ({"n_positions": True}, "n_positions")]:
        with pytest.raises(ExportError, match=message):
            export_onnx(ct, tmp_path / "m", **kwargs)
    with pytest.raises(ExportError, match="is a file"):
        export_onnx(ct, tmp_path / "file")
    with pytest.raises(ExportError, match="no model.onnx"):
        load_onnx(tmp_path / "nothing")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / MODEL_FILE).write_bytes(b"not a model")
    with pytest.raises(ExportError, match="onnxruntime cannot load it"):
        load_onnx(tmp_path / "bad")
    # inputs are checked as ct.run checks them, with the same message
    model = load_onnx(path, ct)
    bad = {"tokens": np.array([0, 99])}
    with pytest.raises(EvaluationError) as mine:
        model.run(bad)
    with pytest.raises(EvaluationError) as theirs:
        ct.run(bad)
    assert str(mine.value) == str(theirs.value)
    # positions beyond the exported position table
    export_onnx(ct, tmp_path / "short", n_positions=4)
    short = load_onnx(tmp_path / "short", ct)
    _close(short.run({"tokens": np.array([1, 2, 3])}), ct.run({"tokens": np.array([1, 2, 3])}))
    with pytest.raises(ExportError, match="covers 4") as e:
        short.run({"tokens": np.arange(6)})
    assert "\n" not in str(e.value)
