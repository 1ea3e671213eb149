"""Serving benchmark: tokens per second of `vllm serve` (vLLM's CPU build, float32) on tw's
exports of the bundled token programs, beside tw's own generation of the same prompts, and
whether every answer agrees. One JSON object per (program, format) line.

    python3 bench/serving.py                       # adder, calculator (transformers), rotary_adder (llama)
    python3 bench/serving.py --prompts 512 --repeats 5

For each case: the program is compiled and exported, `vllm serve` starts on 127.0.0.1 (its
start-up, `serve_start_s`, is reported but not counted), and the same batch of random typed
prompts is sent `--repeats` times as one completions request; `vllm_tokens_per_s` is the
median of completion tokens (the server's own `usage` count) over wall seconds. tw's side,
over the same prompts: `tw_batch_tokens_per_s`, the batched KV-cache decoder
(`ct.generate_batch`, every sequence decoding `max_answer` steps, tokens counted up to each
answer's end token) and `tw_generate_tokens_per_s`, tw-run's loop (`generate`, one prompt at a
time, a full forward per token) on `--loop-prompts` of them. `ratio_vllm_over_tw_batch` is
measured side by side in this one run. `exact`: vLLM's completions equal tw's on every prompt.
The vLLM environment is `tw_lowering.serving.vllm_env()` (made when missing).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import warnings

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASES = (("adder", "transformers"), ("calculator", "transformers"), ("rotary_adder", "llama"))


def tw_side(p, ct, prompts: list[str], loop: int, repeats: int) -> dict:
    """tw's tokens/s: the batched decoder and tw-run's loop; and tw's answers."""
    from tw_examples.token_program import generate

    end = p.vocab.index(p.end)
    feeds = [{"tokens": p.encode(q)} for q in prompts]

    def next_token(out):
        return {"tokens": np.array([int(np.argmax(out["logits"]))])}

    times, answers = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        rows = ct.generate_batch(feeds, p.max_answer, next_token)
        times.append(time.perf_counter() - t0)
    n_tokens = 0
    for q, row in zip(prompts, rows):
        ids = np.argmax(row["logits"][len(p.encode(q)) - 1:], axis=1).tolist()
        cut = ids.index(end) if end in ids else len(ids)
        answers.append(p.decode(ids[:cut]))
        n_tokens += min(cut + 1, p.max_answer)
    t0 = time.perf_counter()
    looped = [generate(p, q, ct.run) for q in prompts[:loop]]
    loop_s = time.perf_counter() - t0
    loop_tokens = sum(min(len(a) + 1, p.max_answer) for a in looped)
    assert looped == answers[:loop], "tw's decoder and tw-run's loop disagree"
    return {"answers": answers, "tw_batch_tokens_per_s": n_tokens / statistics.median(times),
            "tw_generate_tokens_per_s": loop_tokens / loop_s}


def vllm_side(py: str, path: str, prompts: list[str], max_tokens: int, repeats: int) -> dict:
    from tw_lowering.serving import completions, vllm_server

    t0 = time.perf_counter()
    with vllm_server(py, path) as url:
        start = time.perf_counter() - t0
        completions(url, path, prompts[:4], max_tokens)  # (warm-up)
        rates, texts = [], None
        for _ in range(repeats):
            t1 = time.perf_counter()
            reply = completions(url, path, prompts, max_tokens, timeout=600)
            rates.append(reply["usage"]["completion_tokens"] / (time.perf_counter() - t1))
            texts = [c["text"] for c in sorted(reply["choices"], key=lambda c: c["index"])]
    return {"texts": texts, "serve_start_s": start, "vllm_tokens_per_s": statistics.median(rates)}


def run_case(py: str, name: str, fmt: str, args) -> dict:
    import tw_examples as examples
    from tw_lowering import compile
    from tw_lowering.export import export

    p = examples.load(name)
    g = p.geometry
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ct = compile(p.module, d=g.d, d_head=g.d_head, d_hidden=g.d_hidden)
    rng = np.random.default_rng(args.seed)
    prompts = [p.sample(rng) for _ in range(args.prompts)]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, f"{name}-{fmt}")
        rules = getattr(p, "prompt_rules", None)
        export(ct, path, fmt, vocab=p.vocab, end=p.end,
               **({"prompt_rules": rules} if rules else {}))
        ours = tw_side(p, ct, prompts, args.loop_prompts, args.repeats)
        theirs = vllm_side(py, path, prompts, p.max_answer + 1, args.repeats)
    wrong = sum(a != b for a, b in zip(ours["answers"], theirs["texts"]))
    return {"program": name, "format": fmt, "prompts": len(prompts), "exact": wrong == 0,
            "wrong": wrong, "serve_start_s": round(theirs["serve_start_s"], 1),
            "vllm_tokens_per_s": round(theirs["vllm_tokens_per_s"], 1),
            "tw_batch_tokens_per_s": round(ours["tw_batch_tokens_per_s"], 1),
            "tw_generate_tokens_per_s": round(ours["tw_generate_tokens_per_s"], 1),
            "ratio_vllm_over_tw_batch": round(theirs["vllm_tokens_per_s"]
                                              / ours["tw_batch_tokens_per_s"], 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=",".join(f"{n}:{f}" for n, f in CASES),
                    help="program:format pairs, comma-separated")
    ap.add_argument("--prompts", type=int, default=256)
    ap.add_argument("--loop-prompts", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    sys.path.insert(0, ROOT)
    from tw_lowering.serving import vllm_env

    py = vllm_env()
    for case in args.cases.split(","):
        name, fmt = case.split(":")
        print(json.dumps(run_case(py, name, fmt, args), sort_keys=True), flush=True)


if __name__ == "__main__":
    main()
