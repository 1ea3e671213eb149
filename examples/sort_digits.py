"""sort_digits: "3141=" -> "1134". Emits the prompt's digits in ascending order.

  layer 0 attention: the position of "=" (n, the digit count) and, at every position i, the
                     mean one-hot digit over positions 0..i;
  layer 0 MLP:       at "=" those means times n + 1 are the counts; their running sums
                     C_v = #digits <= v come out of one MLP (a product of a mean and the
                     integer n + 1 is a sum of gated ReLUs, exact on integers);
  layer 1 attention: every output position reads C_0..C_8 from the "=" position;
  layer 1 MLP:       output step t (t = i - n) emits #{v : C_v <= t}, the end token at t = n.

Floor: 2 layers.
"""

from __future__ import annotations

import numpy as np

from twdialect import ops as tw

from tw_examples.token_program import (
    Anchor,
    Expr,
    Geometry,
    Space,
    TokenProgram,
    attend_content,
    build_mlp,
    check_regex,
    emit_logits,
    eq,
    gate,
    step,
)
from tw_lowering.export.prompts import append_missing, apply_rules

VOCAB = "0123456789=$"
END = "$"
MAX_DIGITS = 24
MAX_LEN = 64
PATTERN = r"(\d{1,%d})=?" % MAX_DIGITS


# What normalize does to a checked prompt, as data the exports' tokenizers apply too
# (tw_lowering.export.prompts): "=" added if missing.
PROMPT_RULES = (append_missing("="),)


def normalize(prompt: str) -> str:
    check_regex("sort_digits", PATTERN, prompt, f"'3141=' (1-{MAX_DIGITS} digits)")
    return apply_rules(PROMPT_RULES, prompt)


def reference(prompt: str) -> str:
    return "".join(sorted(check_regex("sort_digits", PATTERN, prompt, "'3141='").group(1)))


def sample(rng: np.random.Generator) -> str:
    n = int(rng.integers(1, MAX_DIGITS + 1))
    return "".join(str(int(d)) for d in rng.integers(0, 10, size=n)) + "="


def build_graph():
    table = np.array([[float(c == str(v)) for v in range(10)] + [float(c == "=")]
                      for c in VOCAB])
    with tw.Graph("main") as g:
        tok = tw.embedding("tokens", table)
        pos = tw.pos_encoding(2, MAX_LEN)
        is_eq = np.eye(11)[10]
        n = attend_content(tok, is_eq, pos, [[1.0], [0.0]])
        mean = attend_content(tok, np.zeros(11), tok, np.vstack([np.eye(10), np.zeros((1, 10))]))
        # running counts at "=": (i + 1) * sum_{u <= v} mean_u, as sum_r [i + 1 >= r] * (...)
        s0 = Space([mean, pos])
        count = s0.var(pos, 0) + 1.0
        running = []
        for v in range(9):
            share = sum((s0.var(mean, u) for u in range(v + 1)), s0.const(0.0))
            acc = Expr(0.0)
            for r in range(1, MAX_DIGITS + 2):
                acc = acc + gate(share, 1.0, count - float(r))
            running.append(acc)
        counts = build_mlp(s0, running)
        fetched = attend_content(tok, is_eq, counts, np.eye(9))
        s1 = Space([fetched, n, pos])
        t = s1.var(pos, 0) - s1.var(n)
        digit = sum((step(t - s1.var(fetched, v)) for v in range(9)), Expr(0.0))
        logits = emit_logits(VOCAB, digit, {END: eq(t - s1.var(n))})
        tw.output("logits", build_mlp(s1, logits))
    return g.module


def build() -> TokenProgram:
    return TokenProgram(
        name="sort_digits", vocab=VOCAB, end=END, module=build_graph(), max_len=MAX_LEN,
        max_answer=MAX_DIGITS + 1, normalize=normalize, reference=reference, sample=sample,
        geometry=Geometry(d=1024, d_head=64, d_hidden=4096),
        anchor=Anchor(greedy=None, cpsat=None, d=None),
        description="digits in ascending order: 3141= -> 1134",
        prompt_rules=PROMPT_RULES)
