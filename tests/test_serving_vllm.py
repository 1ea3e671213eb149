"""vLLM serves tw's exports exactly (tw_lowering/serving.py): the transformers (GPT-2) and
Llama exports of the bundled token programs, loaded by vLLM's CPU build in float32, answer
prompts as typed exactly as tw's own generate does, through the offline engine
(`LLM.generate`) at vLLM's thread count and at one thread, and through `vllm serve`'s
OpenAI-compatible completions API on 127.0.0.1, and split over two processes by tensor
parallelism.

vLLM lives in a virtual environment of its own (it pins transformers): `.ci/run` makes it, and
this module makes it when it is missing (about 2 minutes, from the package registry); where
it cannot be made the module skips, saying why, except under CI, where it fails."""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest

pytest.importorskip("transformers")

import tw_examples as examples  # noqa: E402
from tw_examples.token_program import generate  # noqa: E402
from tw_lowering import compile  # noqa: A004, E402
from tw_lowering.export import export  # noqa: E402
from tw_lowering.serving import (ServingError, complete, find_vllm_env, vllm_env,  # noqa: E402
                                 vllm_generate, vllm_server)

# (program, format): two programs a format, the Llama ones written for its SwiGLU/RoPE form
CASES = [("adder", "transformers"), ("calculator", "transformers"),
         ("rotary_adder", "llama")] + [(name, "llama") for name in examples.ROTARY_PROGRAMS
                                       if name != "rotary_adder"][:1]
PROMPTS = 24  # random typed prompts a case (plus the fixed ones below)
FIXED = {"adder": ["1+1=", "999+999=", "12+345"], "calculator": ["12*34=", "0-999=", "999*999="],
         "rotary_adder": ["47+85=", "0+0=", "9+99="]}


@pytest.fixture(scope="module")
def vllm_python():
    try:
        return find_vllm_env() or vllm_env()
    except (ServingError, OSError) as e:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"no vLLM environment could be made here: {e}")


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    """Each case exported, with its typed prompts and tw's own answers to them."""
    out = {}
    for i, (name, fmt) in enumerate(CASES):
        p = examples.load(name)
        g = p.geometry
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ct = compile(p.module, d=g.d, d_head=g.d_head, d_hidden=g.d_hidden)
        path = tmp_path_factory.mktemp(f"{name}-{fmt}")
        export(ct, path, fmt, vocab=p.vocab, end=p.end,
               **({"prompt_rules": p.prompt_rules} if getattr(p, "prompt_rules", None) else {}))
        rng = np.random.default_rng(1000 + i)
        prompts = FIXED.get(name, []) + [p.sample(rng) for _ in range(PROMPTS)]
        want = [generate(p, q, ct.run) for q in prompts]
        assert want == [p.reference(q) for q in prompts]  # (tw's own model is exact)
        out[(name, fmt)] = (str(path), prompts, want, p.max_answer + 1)
    return out


def test_offline_engine_answers_as_tw(vllm_python, exports):
    jobs = [(path, prompts, n) for path, prompts, _, n in exports.values()]
    results = vllm_generate(vllm_python, jobs)
    for (case, (_, prompts, want, _)), got in zip(exports.items(), results):
        assert got["texts"] == want, (case, [(q, g, w) for q, g, w in
                                             zip(prompts, got["texts"], want) if g != w][:5])


def _greedy(ct, ids, steps):
    seq = list(ids)
    for _ in range(steps):
        seq.append(int(np.argmax(ct.run({"tokens": np.array(seq)})["logits"][-1])))
    return "".join(f"<{i}>" for i in seq[len(ids):])


def test_llama_forms_of_random_graphs(vllm_python, tmp_path):
    """The Llama export's three carriages, each on a random graph: relu neurons on scaled
    SiLU, relu and swish neurons mixed, and heads that never turn (rope_theta 1e300)."""
    from test_export_llama import _graph, _plain_graph

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = {"relu": compile(_graph("relu"), d=32, d_head=16, d_hidden=32),
                 "mixed": compile(_graph("mixed"), d=32, d_head=16, d_hidden=32),
                 "still": compile(_plain_graph(), d=64, d_head=16, d_hidden=64)}
    rng = np.random.default_rng(7)
    jobs, want = [], []
    for name, ct in cases.items():
        export(ct, tmp_path / name, "llama", n_positions=32)
        ids = [rng.integers(0, 4, int(rng.integers(1, 9))).tolist() for _ in range(8)]
        jobs.append((str(tmp_path / name), ["".join(f"<{i}>" for i in x) for x in ids], 6))
        want.append([_greedy(ct, x, 6) for x in ids])
    for (name, got), w in zip(zip(cases, vllm_generate(vllm_python, jobs)), want):
        assert got["texts"] == w, name


def test_one_thread_answers_the_same(vllm_python, exports):
    """vLLM's CPU kernels split sums by thread: the export is exact in any order."""
    path, prompts, want, n = exports[("calculator", "transformers")]
    (got,) = vllm_generate(vllm_python, [(path, prompts, n)], threads=1)
    assert got["texts"] == want


def test_two_way_tensor_parallel_answers_as_tw(vllm_python, exports, tmp_path):
    """Exported with tensor_parallel=2 (heads and MLP width padded to even counts), each model
    is split over two vLLM processes (`--tensor-parallel-size 2`), whose all-reduce adds the
    halves of every sum in one more order: the answers stay tw's."""
    jobs, want = [], []
    for case in [("calculator", "transformers"), ("rotary_adder", "llama")]:
        name, fmt = case
        p = examples.load(name)
        g = p.geometry
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ct = compile(p.module, d=g.d, d_head=g.d_head, d_hidden=g.d_hidden)
        path = tmp_path / f"{name}-tp2"
        export(ct, path, fmt, vocab=p.vocab, end=p.end, prompt_rules=p.prompt_rules,
               tensor_parallel=2)
        _, prompts, answers, n = exports[case]
        jobs.append((str(path), prompts, n))
        want.append(answers)
    for (path, _, _), got, w in zip(jobs, vllm_generate(vllm_python, jobs, tensor_parallel=2),
                                    want):
        assert got["texts"] == w, path


def test_vllm_serve_answers_completions_as_tw(vllm_python, exports):
    served = [("calculator", "transformers"), ("rotary_adder", "llama")]
    for case in served:
        path, prompts, want, n = exports[case]
        with vllm_server(vllm_python, path, eager=case[1] == "llama") as url:
            assert complete(url, path, prompts, n) == want, case
