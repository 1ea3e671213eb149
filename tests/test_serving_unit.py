"""tw_lowering.serving without vLLM: its errors are one line, its client speaks the
completions API, its server wrapper stops what it started (stand-ins for vLLM here; the real
engine is tests/test_serving_vllm.py)."""

from __future__ import annotations

import json
import os
import stat
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from tw_lowering import serving
from tw_lowering.serving import ServingError, complete, find_vllm_env, vllm_server


def test_a_named_environment_that_is_not_there_is_one_line(monkeypatch, tmp_path):
    monkeypatch.setenv(serving.ENV_VAR, str(tmp_path / "nope" / "python"))
    with pytest.raises(ServingError, match="TW_VLLM_PYTHON=.* is not a python executable"):
        find_vllm_env()


def test_an_environment_that_cannot_be_made_says_which_step(monkeypatch, tmp_path):
    """A venv whose pip cannot install (no such version) fails in one line naming the step."""
    monkeypatch.delenv(serving.ENV_VAR, raising=False)
    monkeypatch.setattr(serving, "VLLM_VERSION", "0.0.0.0.999")
    with pytest.raises(ServingError, match="making the vLLM environment at .*install"):
        serving.vllm_env(str(tmp_path / "env"))


class _Completions(BaseHTTPRequestHandler):
    seen: list = []

    def do_POST(self):  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _Completions.seen.append((self.path, body))
        # answer out of order: the client must put the choices back in prompt order
        choices = [{"index": i, "text": p[::-1]} for i, p in enumerate(body["prompt"])][::-1]
        data = json.dumps({"choices": choices, "usage": {"completion_tokens": 3}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def test_complete_asks_greedily_and_keeps_prompt_order(tmp_path):
    server = HTTPServer(("127.0.0.1", 0), _Completions)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        assert complete(url, str(tmp_path), ["12+3=", "ab"], 7) == ["=3+21", "ba"]
        path, body = _Completions.seen[-1]
        assert path == "/v1/completions" and body["temperature"] == 0.0
        assert body["max_tokens"] == 7 and body["model"] == os.path.abspath(tmp_path)
    finally:
        server.shutdown()
        server.server_close()
    with pytest.raises(ServingError, match="did not answer"):
        complete(url, str(tmp_path), ["x"], 1, timeout=5)


def _fake_vllm(tmp_path, script: str) -> str:
    """A python whose sibling `vllm` command runs `script` (sh)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    vllm = bin_dir / "vllm"
    vllm.write_text("#!/bin/sh\n" + script)
    vllm.chmod(vllm.stat().st_mode | stat.S_IEXEC)
    return str(bin_dir / "python")


def test_a_server_that_dies_is_one_line(tmp_path):
    py = _fake_vllm(tmp_path, "echo 'ValueError: no such model' >&2\nexit 3\n")
    with pytest.raises(ServingError, match=r"vllm serve exited \(3\): ValueError: no such model"):
        with vllm_server(py, str(tmp_path), timeout=30):
            pass


def test_a_server_that_never_answers_is_stopped(tmp_path):
    marker = tmp_path / "pid"
    py = _fake_vllm(tmp_path, f"echo $$ > {marker}\nexec sleep 300\n")
    with pytest.raises(ServingError, match="did not answer /health within 2 s"):
        with vllm_server(py, str(tmp_path), timeout=2):
            pass
    pid = int(marker.read_text())
    with pytest.raises(ProcessLookupError):  # (stopped, and reaped)
        os.kill(pid, 0)
