"""binary_increment: "1011=" -> "1100". Adds one to a binary number, keeping its width
(it grows by one digit only on overflow: "111=" -> "1000").

  layer 0 attention: the position of "=" (n, the input width) and, at every position,
                     whether "=" has been seen (a key feature that tells input from output);
  layer 1 attention: bit t of the input (t = i - n, read by position) and the latest input
                     "0" (its position z; none found means all ones);
  layer 1 MLP:       the logits: bit t for t < z, 1 at t = z, 0 after; all ones give
                     "1" then n zeros; the end token at t = n (+1 on overflow).

Floor: 2 layers (the anchor compiler needs 22 greedy / 17 CP-SAT).
"""

from __future__ import annotations

import numpy as np

from twdialect import ops as tw

from tw_examples.token_program import (
    Anchor,
    Geometry,
    Space,
    TokenProgram,
    attend_content,
    attend_position,
    build_mlp,
    check_regex,
    emit_logits,
    eq,
    gate,
    step,
)
from tw_lowering.export.prompts import append_missing, apply_rules

VOCAB = "01=$"
END = "$"
MAX_BITS = 24
MAX_LEN = 64
PATTERN = r"([01]{1,%d})=?" % MAX_BITS
LATEST = 20.0  # logit gap between consecutive candidate zeros


# What normalize does to a checked prompt, as data the exports' tokenizers apply too
# (tw_lowering.export.prompts): "=" added if missing.
PROMPT_RULES = (append_missing("="),)


def normalize(prompt: str) -> str:
    check_regex("binary_increment", PATTERN, prompt, f"'1011=' (1-{MAX_BITS} bits)")
    return apply_rules(PROMPT_RULES, prompt)


def reference(prompt: str) -> str:
    bits = check_regex("binary_increment", PATTERN, prompt, "'1011='").group(1)
    return format(int(bits, 2) + 1, f"0{len(bits)}b")


def sample(rng: np.random.Generator) -> str:
    n = int(rng.integers(1, MAX_BITS + 1))
    bits = rng.integers(0, 2, size=n)
    if rng.random() < 0.2:  # trailing ones (and all ones) exercise the carry chain
        k = int(rng.integers(0, n + 1))
        bits[n - k:] = 1
    return "".join(str(int(b)) for b in bits) + "="


def build_graph():
    table = np.array([[c == "0", c == "1", c == "="] for c in VOCAB], dtype=np.float64)
    with tw.Graph("main") as g:
        tok = tw.embedding("tokens", table)
        pos = tw.pos_encoding(2, MAX_LEN)
        is_eq = np.array([0.0, 0.0, 1.0])
        width = attend_content(tok, is_eq, pos, [[1.0], [0.0]])  # position of "=" = n
        seen_eq = attend_content(tok, is_eq, tok, [[0.0], [0.0], [1.0]])
        # layer 1: bit t (position i - n) and the latest zero before "="
        bit = attend_position(pos, [(pos, [1.0, 0.0]), (width, [-1.0])], 0.0, tok,
                              [[0.0], [1.0], [0.0]])
        big = LATEST * MAX_LEN + 1.0
        keys = tw.concat(tok, seen_eq)
        zero = tw.attn(tw.literal([1.0]), tw.concat(keys, pos), tw.concat(tok, pos),
                       np.ones((1, 1)),
                       np.array([[big], [0.0], [0.0], [-2.0 * big], [LATEST], [0.0]]),
                       np.array([[1.0, 0.0], [0, 0], [0, 0], [0.0, 1.0], [0, 0]]), np.eye(2))
        s = Space([bit, zero, width, pos])
        t = s.var(pos, 0) - s.var(width)
        all_ones = 1.0 - s.var(zero, 0)
        z = s.var(zero, 1)
        off = 2.0 * MAX_LEN
        value = (gate(s.var(bit), 1.0, z - 1.0 - t - all_ones * off)  # bits before z
                 + eq(t - z - all_ones * off)  # the lowest zero becomes one
                 + step(all_ones - t - 1.0))  # overflow: a leading one
        logits = emit_logits(VOCAB, value, {END: eq(t - s.var(width) - all_ones)},
                             digit_chars="01")
        tw.output("logits", build_mlp(s, logits))
    return g.module


def build() -> TokenProgram:
    return TokenProgram(
        name="binary_increment", vocab=VOCAB, end=END, module=build_graph(), max_len=MAX_LEN,
        max_answer=MAX_BITS + 2, normalize=normalize, reference=reference, sample=sample,
        geometry=Geometry(d=512, d_head=64, d_hidden=2048),
        anchor=Anchor(greedy=22, cpsat=17, d=512),
        description="binary number plus one, same width unless it overflows: 1011= -> 1100",
        prompt_rules=PROMPT_RULES)
