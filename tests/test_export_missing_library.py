"""`export()` with a writer's stock library missing (one the writer imports when it runs, not
at its module's import): one ExportError line naming the library and the extra that installs
it, never a raw ModuleNotFoundError; tw's own import errors stay what they are."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from tw_lowering.export import ExportError, export, missing_library
from twdialect import ops as tw


def _graph():
    with tw.Graph("main") as g:
        tok = tw.embedding("tokens", np.eye(3))
        tw.output("logits", tw.relu(tw.linear(tok, np.ones((3, 3)))))
    return g.module


@pytest.mark.parametrize("format, library, ext", [
    ("onnx", "onnx", "onnx"), ("gguf", "gguf", "gguf"),
    ("transformers", "tokenizers", "hf"), ("transformers", "transformers", "hf")])
def test_missing_library_is_one_line(tmp_path, monkeypatch, format, library, ext):
    pytest.importorskip(library)
    monkeypatch.setitem(sys.modules, library, None)  # (import now raises ModuleNotFoundError)
    with pytest.raises(ExportError) as e:
        export(_graph(), tmp_path / f"m.{ext}", format, d=32, d_head=4, d_hidden=16)
    msg = str(e.value)
    assert "\n" not in msg and f"{library!r}" in msg and "not installed" in msg
    assert "pip install 'tw-compiler[export]'" in msg


def test_llama_cpp_names_its_own_extra():
    e = missing_library(ModuleNotFoundError("No module named 'llama_cpp'", name="llama_cpp"),
                        "gguf")
    assert str(e) == ("export: the gguf export needs 'llama_cpp', which is not installed: "
                      "pip install 'tw-compiler[llama]'")
    e = missing_library(ImportError("cannot import name 'X' from 'onnx'", name="onnx"), "onnx")
    assert "'onnx', which does not import (cannot import name 'X'" in str(e)


def test_tw_import_error_is_not_a_missing_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "tw_lowering.export.onnx", None)
    with pytest.raises(ModuleNotFoundError):
        export(_graph(), tmp_path / "m", "onnx", d=32, d_head=4, d_hidden=16)
