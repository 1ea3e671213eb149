"""Runs inside a vLLM virtual environment (not tw's): one offline generation job.

    <vllm venv>/bin/python vllm_job.py JOB.json

JOB.json: {"models": [{"path", "prompts", "max_tokens"}, ...], "eager": bool,
"tensor_parallel": int}. Each model is
loaded with `vllm.LLM(path, dtype="float32")` and its prompts generated greedily in one batch
(`LLM.generate`, temperature 0); the last line printed is `TW-VLLM-RESULT <json>`: per model
its completions, prompt token ids, generated token counts, load and generation seconds.

This file imports vLLM only (tw is not installed beside it: vLLM pins its own transformers), and
it must be started as a script, as vLLM spawns worker processes that re-import `__main__`."""

from __future__ import annotations

import json
import sys
import time

MARK = "TW-VLLM-RESULT "


def run(job: dict) -> list[dict]:
    from vllm import LLM, SamplingParams

    out = []
    for model in job["models"]:
        t0 = time.perf_counter()
        llm = LLM(model=model["path"], dtype="float32", gpu_memory_utilization=0.1,
                  enforce_eager=bool(job.get("eager", True)), seed=0,
                  tensor_parallel_size=int(job.get("tensor_parallel", 1)))
        t1 = time.perf_counter()
        params = SamplingParams(temperature=0.0, max_tokens=int(model["max_tokens"]),
                                skip_special_tokens=True)
        results = llm.generate(list(model["prompts"]), params, use_tqdm=False)
        t2 = time.perf_counter()
        out.append({"path": model["path"],
                    "texts": [r.outputs[0].text for r in results],
                    "prompt_ids": [list(r.prompt_token_ids) for r in results],
                    "new_tokens": [len(r.outputs[0].token_ids) for r in results],
                    "load_s": t1 - t0, "generate_s": t2 - t1})
        del llm
    return out


def main() -> None:
    with open(sys.argv[1]) as f:
        job = json.load(f)
    print(MARK + json.dumps(run(job)), flush=True)


if __name__ == "__main__":
    main()
