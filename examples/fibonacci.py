"""fibonacci: "0,1" -> "1,2,3,5,8,13,...,6765,". From two seeds, emits the Fibonacci-style
sequence, each term the sum of the previous two as read back from the text so far (so the
model really adds the numbers it wrote), comma separated; it stops (end token) where the next
term would need 5 digits. Seeds are 0-9999; the prompt is normalised to "^a,b," (^ marks the
start).

  layer 0 attention: c1, the latest separator at or before i (the term being written
                     starts after it);
  layer 1 attention: c2 = c1 as seen from position c1 - 1 (the separator before);
  layer 1 MLP:       where to read the previous term's digits: max(c1 - 1 - m, c2);
  layer 2 attention: c3 (the separator before c2) and the previous term's digits;
  layer 2 MLP:       where to read the digits of the term before: max(c2 - 1 - m, c3);
  layer 3 attention: that term's digits (a separator reads as 0, so short terms pad);
  layer 3 MLP:       the digits of the sum and their count (carries are staircases);
  layer 4 MLP:       the logits: digit count-1-t (t = i - c1), "," after the last digit,
                     the end token instead of a 5-digit term.

Floor: 5 layers (the anchor compiler needs 8 greedy / 6 CP-SAT).
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
    column_digits,
    lin,
    number_logits,
    relu,
    step,
)
from tw_lowering.export.prompts import append_missing, apply_rules, prepend

VOCAB = "0123456789,^$"
END = "$"
TERM_DIGITS = 4
MAX_LEN = 96
MAX_ANSWER = 80
PATTERN = r"(\d{1,4}),(\d{1,4}),?"
RECENCY = 20.0


# What normalize does to a checked prompt, as data the exports' tokenizers apply too
# (tw_lowering.export.prompts): "^" put in front, "," added after the seeds if missing.
PROMPT_RULES = (prepend("^"), append_missing(","))


def _seeds(prompt: str) -> tuple[int, int]:
    m = check_regex("fibonacci", PATTERN, prompt, "'0,1' (two seeds of 0-9999)")
    return int(m.group(1)), int(m.group(2))


def normalize(prompt: str) -> str:
    check_regex("fibonacci", PATTERN, prompt, "'0,1' (two seeds of 0-9999)")
    return apply_rules(PROMPT_RULES, prompt)


def reference(prompt: str) -> str:
    """The terms after the seeds, each followed by ",", until one reaches 10^4 (then the end
    token); cut at MAX_ANSWER characters when the sequence never grows (seeds 0, 0)."""
    a, b = _seeds(prompt)
    out = ""
    while len(out) < MAX_ANSWER:
        a, b = b, a + b
        if b >= 10 ** TERM_DIGITS:
            return out
        out += f"{b},"
    return out[:MAX_ANSWER]


def sample(rng: np.random.Generator) -> str:
    hi = 20 if rng.random() < 0.5 else 10 ** TERM_DIGITS
    a, b = rng.integers(0, hi, size=2)
    return f"{a},{b}"


def build_graph():
    table = np.array([[float(c) if c.isdigit() else 0.0, float(c in ",^")] for c in VOCAB])
    with tw.Graph("main") as g:
        tok = tw.embedding("tokens", table)
        pos = tw.pos_encoding(2, MAX_LEN)
        c1 = attend_content(tok, [0.0, 2.0 * RECENCY * MAX_LEN / 40.0], pos, [[1.0], [0.0]],
                            pos=pos, recency=RECENCY)
        c2 = attend_position(pos, [(c1, [1.0])], -1.0, c1, [[1.0]])
        s1 = Space([c1, c2])
        targets_a = build_mlp(s1, [lin(s1.var(c2)) + relu(s1.var(c1) - 1.0 - m - s1.var(c2))
                                   for m in range(TERM_DIGITS)])
        c3 = attend_position(pos, [(c2, [1.0])], -1.0, c1, [[1.0]])
        digit = [[1.0], [0.0]]
        a = [attend_position(pos, [(targets_a, np.eye(TERM_DIGITS)[m])], 0.0, tok, digit)
             for m in range(TERM_DIGITS)]
        s2 = Space([c2, c3])
        targets_b = build_mlp(s2, [lin(s2.var(c3)) + relu(s2.var(c2) - 1.0 - m - s2.var(c3))
                                   for m in range(TERM_DIGITS)])
        b = [attend_position(pos, [(targets_b, np.eye(TERM_DIGITS)[m])], 0.0, tok, digit)
             for m in range(TERM_DIGITS)]
        s3 = Space(a + b)
        cols = [(s3.var(a[m]) + s3.var(b[m]), 0, 18) for m in range(TERM_DIGITS)]
        digits, count = column_digits(cols, TERM_DIGITS + 1)
        total = build_mlp(s3, digits + [count])
        s4 = Space([total, c1, pos])
        t = s4.var(pos, 0) - s4.var(c1)
        n = s4.var(total, TERM_DIGITS + 1)
        too_long = step(n - (TERM_DIGITS + 1.0) - t * (TERM_DIGITS + 2.0))  # t = 0, 5 digits
        logits = number_logits(VOCAB, [s4.var(total, k) for k in range(TERM_DIGITS + 1)], n, t,
                               None, ",", extra_flags={END: too_long})
        tw.output("logits", build_mlp(s4, logits))
    return g.module


def build() -> TokenProgram:
    return TokenProgram(
        name="fibonacci", vocab=VOCAB, end=END, module=build_graph(), max_len=MAX_LEN,
        max_answer=MAX_ANSWER, normalize=normalize, reference=reference, sample=sample,
        geometry=Geometry(d=1024, d_head=64, d_hidden=4096),
        anchor=Anchor(greedy=8, cpsat=6, d=None),
        description="Fibonacci-style sequence from two seeds: 0,1 -> 1,2,3,5,8,...,6765,",
        prompt_rules=PROMPT_RULES)
