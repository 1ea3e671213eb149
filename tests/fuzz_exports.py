"""The reliability harness's `export` surface (`fuzz_harness.py`): a small random program
compiled and exported in a random format, the export damaged at random (bytes flipped anywhere,
a file truncated, deleted or swapped for another program's, a config field or tw's metadata
edited to a value of any JSON type) or left as written, then loaded by tw's loader.

Outcomes: a damaged export refused with a deliberate error is a clean refusal; any other
exception is a masked crash; a damaged export that loads and answers differently from the
compiled model, or an undamaged one that is refused or answers differently, is a wrong answer
(an export whose damage left it loadable and right is accepted). Everything is drawn from the
case's generator, so a case replays exactly.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile

import numpy as np

FORMATS = ("transformers", "tlens", "onnx", "gguf", "llama")
DAMAGES = ("none", "flip", "flip_head", "truncate", "delete", "swap", "config_field",
           "tw_value")
N_POSITIONS = 8
TOLERANCE = 1e-4  # the export's logits within TOLERANCE * max(1, |y|) of the compiled model's


def make_payload(rng: np.random.Generator) -> dict:
    """A case: the program's shape and seeds, the format, the damage and its own seed."""
    return {"format": FORMATS[int(rng.integers(len(FORMATS)))],
            "damage": DAMAGES[int(rng.integers(len(DAMAGES)))],
            "vocab": int(rng.integers(2, 9)), "hidden": int(rng.integers(1, 9)),
            "width": int(rng.integers(1, 7)), "pipeline": ("none", "default")[int(rng.integers(2))],
            "seeds": [int(s) for s in rng.integers(0, 2**31, 3)]}


def _program(payload: dict, seed: int):
    """A compiled program of the payload's shape: tokens through a relu layer (swish and a
    rotary head for llama, which carries only rotary heads), compiled with the payload's
    pipeline (as written, or the default one, which may leave a layer without heads)."""
    import tw_lowering as lowering
    from twdialect import ops as tw

    rng = np.random.default_rng(seed)
    v, h, w = payload["vocab"], payload["hidden"], payload["width"]
    rotary = payload["format"] == "llama"
    with tw.Graph("main") as g:
        tok = tw.embedding("tokens", rng.normal(size=(v, 3)).round(3))
        if rotary:
            one = tw.literal([1.0])
            head = tw.attn(one, one, tok, np.full((1, 16), 8.0), np.ones((1, 16)), np.eye(3),
                           np.eye(3), rope=(10000.0, 16))
            x = tw.concat(tok, head)
            tw.output("logits", tw.mlp(x, rng.normal(size=(6, h)), rng.normal(size=h),
                                       rng.normal(size=(h, w)), activation="swish"))
        else:
            hid = tw.relu(tw.linear(tok, rng.normal(size=(3, h)).round(3),
                                    rng.normal(size=h) * 1e-3))
            tw.output("logits", tw.linear(hid, rng.normal(size=(h, w)).round(3)))
    pipeline = payload.get("pipeline", "none")
    if rotary:
        return lowering.compile(g.module, d=32, d_head=16, d_hidden=32, pipeline=pipeline)
    return lowering.compile(g.module, d=32, d_head=4, d_hidden=16, pipeline=pipeline)


def _export(ct, path: str, fmt: str) -> None:
    from tw_lowering.export import export

    export(ct, path, fmt, **({} if fmt == "llama" else {"n_positions": N_POSITIONS}))


def _files(path: str) -> list[str]:
    return [path] if os.path.isfile(path) else sorted(
        os.path.join(path, f) for f in os.listdir(path) if os.path.isfile(os.path.join(path, f)))


def _json_value(rng: np.random.Generator):
    return [None, 0, -1, 2.5, 1e300, "", "x", [], [1], {}, {"a": None}, True][
        int(rng.integers(12))]


def _damage(payload: dict, path: str, other: str, rng: np.random.Generator) -> bool:
    """Damage the export at `path` as the payload says (`other`: another program's export of
    the same format); False where this damage has nothing to act on (no change made)."""
    kind = payload["damage"]
    files = _files(path)
    target = files[int(rng.integers(len(files)))]
    data = open(target, "rb").read()
    if kind in ("flip", "flip_head"):
        out = bytearray(data)
        span = min(len(out), 4096) if kind == "flip_head" else len(out)
        for _ in range(int(rng.integers(1, 5))):
            out[int(rng.integers(span))] ^= int(rng.integers(1, 256))
        new = bytes(out)
    elif kind == "truncate":
        new = data[: int(rng.integers(len(data)))]
    elif kind == "delete":  # (a one-file export deleted is a missing path)
        os.remove(target)
        return True
    elif kind == "swap":
        if target == path:
            return False  # (a whole one-file export swapped is another export, not damage)
        twin = os.path.join(other, os.path.basename(target))
        new = open(twin, "rb").read() if os.path.exists(twin) else b""
    else:
        config_path = os.path.join(path, "config.json")
        if not os.path.exists(config_path):
            return False
        config = json.loads(open(config_path).read())
        if kind == "config_field":
            keys = sorted(k for k in config if k != "tw")
            config[keys[int(rng.integers(len(keys)))]] = _json_value(rng)
        elif rng.integers(3) == 0:
            config["tw"] = _json_value(rng)
        else:
            keys = sorted(config["tw"])
            config["tw"][keys[int(rng.integers(len(keys)))]] = _json_value(rng)
        target, new = config_path, json.dumps(config, indent=2, sort_keys=True).encode()
    if new == data:
        return False
    with open(target, "wb") as f:
        f.write(new)
    return True


def _logits(fmt: str, path: str, ids: list[int], n_out: int) -> np.ndarray:
    """Load the export with tw's loader and run `ids` through it in its stock tool."""
    import torch

    from tw_lowering.export.gguf import load_gguf
    from tw_lowering.export.hf import load_transformers
    from tw_lowering.export.llama import load_llama
    from tw_lowering.export.onnx import load_onnx
    from tw_lowering.export.tlens import load_tlens

    if fmt == "onnx":
        return load_onnx(path).run({"tokens": np.array(ids)})["logits"]
    if fmt == "gguf":
        m = load_gguf(path, n_threads=1)
        try:
            return m.logits(ids)
        finally:
            m.close()
    with torch.no_grad():
        if fmt == "tlens":
            return load_tlens(path)(torch.tensor([ids]))[0].double().numpy()[:, :n_out]
        load = load_transformers if fmt == "transformers" else load_llama
        return load(path)[0](torch.tensor([ids])).logits[0].double().numpy()[:, :n_out]


def run(payload: dict, classify) -> tuple[str, str, str]:
    """(outcome, stage, detail) of one case; `classify(e)` is the harness's judge of an
    exception ((outcome, detail): clean_error or masked_crash)."""
    fmt, stage = payload["format"], "export/" + payload["format"] + "/" + payload["damage"]
    rng = np.random.default_rng(payload["seeds"][2])
    folder = tempfile.mkdtemp(prefix="tw-fuzz-export-")
    try:
        try:  # (compiling and exporting the program: a refusal here is tw's too)
            ct = _program(payload, payload["seeds"][0])
            name = "m.gguf" if fmt == "gguf" else "m"
            path, other = os.path.join(folder, name), os.path.join(folder, "other-" + name)
            _export(ct, path, fmt)
            damaged = False
            if payload["damage"] != "none":
                _export(_program(payload, payload["seeds"][1]), other, fmt)
                damaged = _damage(payload, path, other, rng)
            ids = [int(t) for t in rng.integers(0, payload["vocab"],
                                                size=int(rng.integers(1, 8)))]
            want = ct.run({"tokens": np.array(ids)})["logits"]
        except BaseException as e:  # noqa: BLE001
            if isinstance(e, KeyboardInterrupt) or type(e).__name__ == "CaseTimeout":
                raise
            return (*classify(e)[:1], stage + "/setup", classify(e)[1])
        try:
            got = _logits(fmt, path, ids, want.shape[1])
        except BaseException as e:  # noqa: BLE001
            if isinstance(e, KeyboardInterrupt) or type(e).__name__ == "CaseTimeout":
                raise
            outcome, detail = classify(e)
            if outcome == "clean_error" and not damaged:
                return "wrong_answer", stage, f"an export as written was refused: {detail}"
            return outcome, stage, detail
        got = np.asarray(got, np.float64)
        if got.shape != want.shape or not np.all(
                np.abs(got - want) <= TOLERANCE * np.maximum(1.0, np.abs(want))):
            what = "a damaged export loaded and" if damaged else "the export"
            return "wrong_answer", stage, f"{what} answers differently from the compiled model"
        return "accepted", stage, ""
    finally:
        shutil.rmtree(folder, ignore_errors=True)
