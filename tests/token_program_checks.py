"""Checks shared by the bundled token programs' tests (tests/test_rotary_program.py,
tests/test_rotary_reverse.py): teacher-forced answers over many prompts in batched passes,
KV-cache generation, one-line refusals of bad prompts."""

from __future__ import annotations

import numpy as np
import pytest

from tw_examples.token_program import PromptError


def forced_wrong(p, prompts: list[str], run_batch) -> list[str]:
    """The prompts whose teacher-forced answers (prompt + reference + end, one batched pass)
    are not the argmax at every answer position: `matches_reference` for many prompts."""
    seqs, starts, wants = [], [], []
    for q in prompts:
        ids = list(p.encode(q))
        want = [p.vocab.index(c) for c in p.reference(q) + p.end]
        seqs.append({"tokens": np.array(ids + want[:-1], np.int64)})
        starts.append(len(ids) - 1)
        wants.append(want)
    wrong = []
    for lo in range(0, len(seqs), 1000):
        outs = run_batch(seqs[lo: lo + 1000])
        for q, out, start, want in zip(prompts[lo:], outs, starts[lo:], wants[lo:]):
            if not np.array_equal(np.argmax(out["logits"][start:], axis=1), want):
                wrong.append(q)
    return wrong


def kv_generated(p, ct, q: str) -> str:
    """The answer and end token the compiled model generates for `q` with its KV cache."""
    want = p.reference(q) + p.end
    ids = p.encode(q)
    out = ct.generate({"tokens": ids}, len(want) - 1,
                      lambda last: {"tokens": int(np.argmax(last["logits"]))})
    return p.decode(np.argmax(out["logits"][len(ids) - 1:], axis=1))


def check_bad_prompts(p, bad: list[str]) -> None:
    """Every prompt in `bad` is refused in one line naming the program."""
    for q in bad:
        with pytest.raises(PromptError) as info:
            p.encode(q)
        assert "\n" not in str(info.value) and p.name in str(info.value)
