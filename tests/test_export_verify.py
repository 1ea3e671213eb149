"""Loaders verify what they load: every export records each tensor's sha256, the config fields
that make its computation and each file's own sha256, and every tw loader refuses a damaged,
foreign or edited export with one ExportError line naming the file, never another exception
and never a silently wrong model; an export as written still loads and runs exactly.

A campaign per format over a small compiled program: bytes flipped at seeded random offsets of
every file the export wrote (weights, headers, configs, tokenizers), files truncated, deleted
or swapped for another program's, each config field edited, tw's metadata set to null or to
values of the wrong type. The default suite runs a few seeds; `--runslow` many more.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

for _module in ("transformers", "tokenizers", "safetensors", "onnx", "onnxruntime", "gguf",
                "transformer_lens"):
    pytest.importorskip(_module, reason=f"{_module} is missing: pip install 'tw-compiler[export]'")

import torch  # noqa: E402

import tw_lowering as lowering  # noqa: E402
from tw_lowering.export import ExportError, export  # noqa: E402
from tw_lowering.export.gguf import load_gguf  # noqa: E402
from tw_lowering.export.hf import load_transformers  # noqa: E402
from tw_lowering.export.llama import load_llama  # noqa: E402
from tw_lowering.export.onnx import MODEL_FILE, load_onnx  # noqa: E402
from tw_lowering.export.tlens import load_tlens  # noqa: E402
from twdialect import ops as tw  # noqa: E402

FORMATS = ("transformers", "tlens", "onnx", "gguf", "llama")
CONFIG_FORMATS = ("transformers", "tlens", "llama")
SEEDS = (0, 1, 2)  # the default suite's campaign
SLOW_SEEDS = tuple(range(3, 40))
N_POSITIONS = 16
IDS = [0, 3, 1, 2, 2, 4, 1]
# An internal exception's name or a traceback laundered into the message.
LAUNDERED = re.compile(r"Traceback|internal error|\b(KeyError|IndexError|AttributeError|"
                       r"TypeError|ZeroDivisionError|OverflowError|RecursionError|MemoryError|"
                       r"AssertionError|UnboundLocalError|NameError)\b")


def _token_program(seed: int):
    """Tokens (5) through a relu layer to 4 logits, compiled as written (two layers, each
with heads and neurons): every format carries it."""
    rng = np.random.default_rng(seed)
    with tw.Graph("main") as g:
        tok = tw.embedding("tokens", rng.normal(size=(5, 3)).round(3))
        h = tw.relu(tw.linear(tok, rng.normal(size=(3, 6)).round(3), rng.normal(size=6) * 1e-3))
        tw.output("logits", tw.linear(h, rng.normal(size=(6, 4)).round(3)))
    return lowering.compile(g.module, d=32, d_head=4, d_hidden=16, pipeline="none")


def _rotary_program(seed: int):
    """Tokens (5), one rotary head reading them, a swish MLP to 4 logits (what Llama carries)."""
    rng = np.random.default_rng(seed)
    with tw.Graph("main") as g:
        tok = tw.embedding("tokens", rng.integers(-3, 4, (5, 3)).astype(float))
        one = tw.literal([1.0])
        head = tw.attn(one, one, tok, np.full((1, 16), 8.0), np.ones((1, 16)), np.eye(3),
                       np.eye(3), rope=(10000.0, 16))
        x = tw.concat(tok, head)
        tw.output("logits", tw.mlp(x, rng.normal(size=(6, 8)), rng.normal(size=8),
                                   rng.normal(size=(8, 4)), activation="swish"))
    return lowering.compile(g.module, d=32, d_head=16, d_hidden=32)


def _export(ct, path: Path, fmt: str) -> Path:
    options = {} if fmt == "llama" else {"n_positions": N_POSITIONS}
    export(ct, path, fmt, **options)
    return path


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    """{format: (compiled model, its export, another program's export of the same shapes)}."""
    root = tmp_path_factory.mktemp("verify")
    out = {}
    programs = {False: [_token_program(0), _token_program(1)],
                True: [_rotary_program(0), _rotary_program(1)]}
    for fmt in FORMATS:
        a, b = programs[fmt == "llama"]
        suffix = ".gguf" if fmt == "gguf" else ""
        out[fmt] = (a, _export(a, root / f"{fmt}-a{suffix}", fmt),
                    _export(b, root / f"{fmt}-b{suffix}", fmt))
    return out


LLAMA_CPP = "llama.cpp's binding is missing (pip install 'tw-compiler[llama]')"


def _load(fmt: str, path, graph=None):
    """The export at `path` loaded by tw's loader of `fmt` (checked against `graph`); a GGUF
    one needs llama.cpp (only its cases skip without it)."""
    if fmt == "gguf":
        pytest.importorskip("llama_cpp", reason=LLAMA_CPP)
    return {"transformers": load_transformers, "llama": load_llama, "tlens": load_tlens,
            "onnx": load_onnx, "gguf": lambda p, g: load_gguf(p, g, n_threads=1)}[fmt](path,
                                                                                      graph)


def _close(fmt: str, loaded) -> None:
    if fmt == "gguf":
        loaded.close()


def _logits(fmt: str, loaded, ids: list[int], n_out: int) -> np.ndarray:
    """The loaded export's outputs at every position of `ids`, in its stock tool."""
    if fmt == "onnx":
        return loaded.run({"tokens": np.array(ids)})["logits"]
    if fmt == "gguf":
        return loaded.logits(ids)
    with torch.no_grad():
        if fmt == "tlens":
            return loaded(torch.tensor([ids]))[0].double().numpy()[:, :n_out]
        return loaded[0](torch.tensor([ids])).logits[0].double().numpy()[:, :n_out]


def _files(path: Path) -> list[str]:
    """The files an export wrote, relative to it ("" for a one-file export)."""
    return [""] if path.is_file() else sorted(p.name for p in path.iterdir() if p.is_file())


def _copy(src: Path, dst: Path) -> Path:
    if src.is_file():
        shutil.copy(src, dst)
    else:
        shutil.copytree(src, dst)
    return dst


class Campaign:
    """Damaged copies of one export, each loaded: refused in one line naming the export, or a
    failure listing what else happened."""

    def __init__(self, fmt: str, exports, tmp: Path):
        self.fmt, (self.ct, self.good, self.other) = fmt, exports[fmt]
        self.tmp, self.n, self.cases, self.failures = tmp, 0, 0, []
        self.messages: list[str] = []

    def copy(self) -> Path:
        self.n += 1
        return _copy(self.good, self.tmp / f"case{self.n}{self.good.suffix}")

    def file(self, path: Path, name: str) -> Path:
        return path / name if name else path

    def refused(self, path: Path, what: str, graph=None) -> None:
        self.cases += 1
        try:
            loaded = _load(self.fmt, path, graph)
        except ExportError as e:
            msg = str(e)
            if "\n" in msg or str(path) not in msg or LAUNDERED.search(msg):
                self.failures.append(f"{what}: message not one clean line naming the export: "
                                     f"{msg!r}")
            self.messages.append(msg)
            return
        except Exception as e:  # noqa: BLE001 (what the campaign looks for)
            self.failures.append(f"{what}: {type(e).__name__} escaped the loader: {e}")
            return
        _close(self.fmt, loaded)
        self.failures.append(f"{what}: the damaged export loaded")

    def damage(self, what: str, name: str, edit, graph=None) -> None:
        """A copy whose file `name` is replaced by `edit(its bytes)` (None: deleted), loaded
        (against `graph`, if given)."""
        path = self.copy()
        target = self.file(path, name)
        data = edit(target.read_bytes())
        if data is None:
            target.unlink()
        else:
            target.write_bytes(data)
        self.refused(path, f"{what} of {name or path.name}", graph)

    def check(self) -> None:
        assert not self.failures, (f"{len(self.failures)} of {self.cases} damaged {self.fmt} "
                                   "exports not refused cleanly:\n" + "\n".join(self.failures[:20]))
        assert self.cases and len(self.messages) == self.cases


def _flip(rng: np.random.Generator, head: bool):
    """XOR 1-4 bytes at random offsets (`head`: within the first 4 KiB, where the headers
    and key/values are) with random nonzero bytes."""
    def edit(data: bytes) -> bytes:
        out = bytearray(data)
        span = min(len(out), 4096) if head else len(out)
        for _ in range(int(rng.integers(1, 5))):
            out[int(rng.integers(0, span))] ^= int(rng.integers(1, 256))
        return bytes(out)
    return edit


def _bytes_campaign(c: Campaign, seeds) -> None:
    for seed in seeds:
        rng = np.random.default_rng([seed, FORMATS.index(c.fmt)])
        for name in _files(c.good):
            c.damage(f"seed {seed} flip anywhere", name, _flip(rng, head=False))
            c.damage(f"seed {seed} flip near the start", name, _flip(rng, head=True))
            cut = lambda data: data[: int(rng.integers(0, len(data)))]  # noqa: E731
            c.damage(f"seed {seed} truncation", name, cut)


def _file_campaign(c: Campaign) -> None:
    for name in _files(c.good):
        if name:
            c.damage("deletion", name, lambda data: None)
        other = c.file(c.other, name).read_bytes()
        if other != c.file(c.good, name).read_bytes():  # (a tokenizer may be the same file)
            # (a one-file export swapped whole is another export: refused given the graph)
            c.damage("another program's file", name, lambda data, other=other: other,
                     graph=c.ct if not name else None)
    if not c.good.is_file():
        c.refused(c.tmp / "missing", "a missing export")
    if c.fmt in ("transformers", "llama"):  # (a file transformers would read beside them)
        for name in ("added_tokens.json", "special_tokens_map.json", "chat_template.jinja"):
            path = c.copy()
            (path / name).write_text('{"x": 1}')
            c.refused(path, f"{name} added")


def _json_values():
    """Replacements for a value: null, and values of every JSON type."""
    return [None, 5, 2.5, "x", "", [], {}, True, [1, 2]]


def _config_campaign(c: Campaign, rng: np.random.Generator) -> None:
    """Each config field edited to another value of its type and to values of other types; a
    field added; tw's entry and each of its keys set to null and to wrong types."""
    config = json.loads((c.good / "config.json").read_text())

    def write(cfg) -> None:
        path = c.copy()
        (path / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True))
        return path

    for key, value in config.items():
        if key == "tw":
            continue
        if isinstance(value, bool):
            changed = not value
        elif isinstance(value, (int, float)):
            changed = value * 2 + 1
        elif isinstance(value, str):
            changed = value + "x"
        elif isinstance(value, list):
            changed = value + ["x"]
        elif isinstance(value, dict):
            changed = {**value, "x": 1}
        else:
            changed = 1
        for new in [changed, _json_values()[int(rng.integers(0, len(_json_values())))]]:
            if new == value and type(new) is type(value):
                continue
            path = write({**config, key: new})
            c.refused(path, f"config.json {key} = {new!r}")
            if key in ("activation_function", "layer_norm_epsilon", "hidden_act",
                       "rms_norm_eps", "act_fn", "attn_scale", "scale_attn_weights"):
                if key not in c.messages[-1]:
                    c.failures.append(f"config.json {key} edited: the message does not name "
                                      f"the field: {c.messages[-1]!r}")
    c.refused(write({**config, "attn_implementation": "sdpa"}), "a config field added")
    for bad in _json_values():
        if not isinstance(bad, dict):
            c.refused(write({**config, "tw": bad}), f"tw = {bad!r}")
    for key in sorted(config["tw"]):
        for bad in (None, 5, "x", [], {"a": 1}):
            c.refused(write({**config, "tw": {**config["tw"], key: bad}}), f"tw.{key} = {bad!r}")
    c.refused(write({**config, "tw": {k: v for k, v in config["tw"].items()
                                      if k != "geometry"}}), "tw.geometry removed")


def _onnx_campaign(c: Campaign, rng: np.random.Generator) -> None:
    """model.onnx edited through onnx itself (a valid model that is not tw's): tw's metadata
    values of wrong types, an initializer's values or external offset, a node's attribute."""
    import onnx

    def write(model) -> Path:
        path = c.copy()
        (path / MODEL_FILE).write_bytes(model.SerializeToString())
        return path

    def fresh():
        return onnx.load(str(c.good / MODEL_FILE), load_external_data=False)

    props = {p.key: p.value for p in fresh().metadata_props}
    for key in sorted(props):
        for bad in {"null", "5", '"x"', "[]", "{}", "", props[key][::-1]} - {props[key]}:
            model = fresh()
            del model.metadata_props[:]
            onnx.helper.set_model_props(model, {**props, key: bad})
            c.refused(write(model), f"model.onnx {key} = {bad!r}")
    model = fresh()
    inner = [t for t in model.graph.initializer if not t.external_data]
    for t in inner[:: max(1, len(inner) // 6)]:
        model = fresh()
        t = next(x for x in model.graph.initializer if x.name == t.name)
        a = onnx.numpy_helper.to_array(t).copy()
        a.reshape(-1)[0] = a.reshape(-1)[0] + 1
        t.CopyFrom(onnx.numpy_helper.from_array(a, t.name))
        c.refused(write(model), f"initializer {t.name} edited")
    model = fresh()
    outer = [t for t in model.graph.initializer if t.external_data]
    for t in outer[:: max(1, len(outer) // 4)]:
        model = fresh()
        t = next(x for x in model.graph.initializer if x.name == t.name)
        for e in t.external_data:
            if e.key == "offset":
                e.value = str(int(e.value) + 64 * int(rng.integers(-2, 3) or 1))
        c.refused(write(model), f"external initializer {t.name}'s offset moved")
    model = fresh()
    nodes = [n for n in model.graph.node if any(a.type == a.INT for a in n.attribute)]
    for n in nodes[:: max(1, len(nodes) // 4)]:
        model = fresh()
        node = next(x for x in model.graph.node if x.name == n.name)
        attr = next(a for a in node.attribute if a.type == a.INT)
        attr.i += 1
        c.refused(write(model), f"node {n.name} attribute {attr.name} edited")


def _gguf_campaign(c: Campaign, rng: np.random.Generator) -> None:
    """One byte flipped inside each key/value's value (every hyperparameter, token, tw key)
    and inside each tensor's info and data."""
    import gguf

    reader = gguf.GGUFReader(str(c.good))
    regions = []
    for key, field in reader.fields.items():
        start = int(field.offset) + sum(int(p.nbytes) for p in field.parts[:3])
        end = int(field.offset) + sum(int(p.nbytes) for p in field.parts)
        regions.append((f"key/value {key}", start, end))
    for t in reader.tensors:
        regions.append((f"tensor {t.name}", int(t.data_offset),
                        int(t.data_offset) + int(t.n_bytes)))
    del reader
    for what, start, end in regions:
        if end <= start:
            continue

        def edit(data: bytes, start=start, end=end) -> bytes:
            out = bytearray(data)
            out[int(rng.integers(start, end))] ^= int(rng.integers(1, 256))
            return bytes(out)
        c.damage(f"a byte of {what}", "", edit)


def _campaign(fmt: str, exports, tmp: Path, seeds) -> Campaign:
    c = Campaign(fmt, exports, tmp)
    rng = np.random.default_rng([7, FORMATS.index(fmt), len(seeds)])
    _bytes_campaign(c, seeds)
    _file_campaign(c)
    if fmt in CONFIG_FORMATS:
        _config_campaign(c, rng)
    elif fmt == "onnx":
        _onnx_campaign(c, rng)
    else:
        _gguf_campaign(c, rng)
    return c


@pytest.mark.parametrize("fmt", FORMATS)
def test_damaged_exports_are_refused_in_one_line(exports, tmp_path, fmt):
    _campaign(fmt, exports, tmp_path, SEEDS).check()


@pytest.mark.slow
@pytest.mark.parametrize("fmt", FORMATS)
def test_damaged_exports_are_refused_many_seeds(exports, tmp_path, fmt):
    _campaign(fmt, exports, tmp_path, SLOW_SEEDS).check()


@pytest.mark.parametrize("fmt", FORMATS)
def test_an_export_as_written_loads_and_runs_exactly(exports, fmt):
    ct, good, _ = exports[fmt]
    loaded = _load(fmt, good)
    try:
        want = ct.run({"tokens": np.array(IDS)})["logits"]
        got = _logits(fmt, loaded, IDS, want.shape[1])
    finally:
        _close(fmt, loaded)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * max(1.0, np.abs(want).max()))


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_same_export_twice_is_byte_identical(exports, tmp_path, fmt):
    ct, good, _ = exports[fmt]
    again = _export(ct, tmp_path / good.name, fmt)
    for name in _files(good):
        first = (good / name if name else good).read_bytes()
        assert first == (again / name if name else again).read_bytes(), name


def test_named_differences(exports, tmp_path):
    """The message names what differs: the tensor whose bytes changed, the field edited."""
    _, good, _ = exports["transformers"]
    path = _copy(good, tmp_path / "hf")
    config = json.loads((path / "config.json").read_text())
    config["layer_norm_epsilon"] *= 4
    (path / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True))
    with pytest.raises(ExportError, match="layer_norm_epsilon"):
        load_transformers(path)
    _, good, _ = exports["gguf"]
    import gguf

    reader = gguf.GGUFReader(str(good))
    t = next(t for t in reader.tensors if t.name == "blk.0.ffn_up.weight")
    start = int(t.data_offset)
    del reader
    data = bytearray(good.read_bytes())
    data[start: start + 4096] = bytes(min(4096, len(data) - start))
    (tmp_path / "x.gguf").write_bytes(bytes(data))
    with pytest.raises(ExportError, match="blk.0.ffn_up.weight"):
        load_gguf(tmp_path / "x.gguf")


# -- tw-export's own errors -------------------------------------------------------------------


def _cli_error(capsys, argv) -> str:
    """tw-export's one stderr error line for `argv`, which must fail with exit code 1 (beside
    it, only the compile's own `tw-export: warning:` lines, one per PrecisionWarning)."""
    from tw_tools.tw_export import main

    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 1
    lines = capsys.readouterr().err.splitlines(keepends=True)
    err = "".join(x for x in lines if not x.startswith("tw-export: warning: "))
    assert err.count("\n") == 1 and err.startswith("tw-export: error: "), err
    assert "internal error" not in err, err
    return err


def test_cli_creates_the_output_folder(tmp_path, capsys):
    from tw_tools.tw_export import main

    out = tmp_path / "no" / "such" / "dir" / "a.gguf"
    assert main(["adder", "-f", "gguf", "-o", str(out)]) == 0
    pytest.importorskip("llama_cpp", reason=LLAMA_CPP)
    assert load_gguf(out).close() is None
    capsys.readouterr()  # (llama.cpp's own notes while loading)
    (tmp_path / "file").write_text("x")
    err = _cli_error(capsys, ["adder", "-f", "gguf", "-o", str(tmp_path / "file" / "d" / "a.gguf")])
    assert f"{tmp_path / 'file'} is a file" in err
    err = _cli_error(capsys, ["adder", "-f", "gguf", "-o", str(tmp_path / "no")])
    assert "cannot write" in err and str(tmp_path / "no") in err


@pytest.mark.parametrize("module, fmt", [("gguf", "gguf"), ("onnx", "onnx"),
                                         ("tokenizers", "transformers")])
def test_cli_names_the_missing_extra(tmp_path, capsys, monkeypatch, module, fmt):
    import sys

    monkeypatch.setitem(sys.modules, module, None)  # (an import of it fails, as uninstalled)
    err = _cli_error(capsys, ["adder", "-f", fmt, "-o", str(tmp_path / "out")])
    assert f"needs '{module}'" in err and "pip install 'tw-compiler[export]'" in err


# -- tw's metadata check takes values of any type ---------------------------------------------


def test_check_metadata_refuses_malformed_values_of_any_type(exports):
    """Every tw.* value replaced by null, numbers, bools, lists, objects and strings that are
    not what tw writes: one ExportError line naming the export, never another exception."""
    import onnx

    from tw_lowering.export.metadata import check_metadata

    _, good, _ = exports["onnx"]
    meta = {p.key: p.value for p in onnx.load(str(good / MODEL_FILE),
                                              load_external_data=False).metadata_props}
    values = [None, 0, -1, 2.5, float("nan"), True, [], [1], {}, {"a": 1}, "", "x", "null",
              "[]", "{}", "5", '"x"', b"x", object()]
    for key in sorted(meta):
        for bad in values:
            try:
                check_metadata({**meta, key: bad}, "onnx", geometry={"n_layers": 1},
                               where="the export")
            except ExportError as e:
                assert "\n" not in str(e) and str(e).startswith("the export: "), str(e)
            except Exception as e:  # noqa: BLE001
                pytest.fail(f"{key} = {bad!r}: {type(e).__name__} escaped: {e}")
    for bad in (None, 5, "x", [], [("tw.version", "0.1")]):
        with pytest.raises(ExportError, match="the export"):
            check_metadata(bad, where="the export")


def test_the_harness_export_surface_finds_nothing(tmp_path):
    """A short run of the reliability harness's `export` surface (`fuzz_exports.py`): every
    damaged export refused cleanly, every undamaged one exact (the long run: `--runslow` in
    test_fuzz.py's mixes, or `fuzz_harness.py --cases`)."""
    import fuzz_harness as fh

    summary = fh.run_campaign(fh.plan_counts({"export": 12}, 11), 11, tmp_path)
    per = summary["per_category"]["export"]
    assert per["masked_crash"] == per["hang"] == per["wrong_answer"] == 0, \
        summary["distinct_failures"]
    assert per["clean_error"] > 0 and sum(per.values()) == 12
