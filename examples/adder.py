"""adder: "123+456=" -> "579". Two numbers of up to 3 digits; the sum in decimal (up to 1998).

Layout: the prompt is normalised to "aaa+bbb=" (operands zero-padded), so digit k of each
operand sits at a fixed position and output step t is emitted at position 7 + t.

  layer 0 attention: six heads read the six operand digits by absolute position;
  layer 0 MLP:       all sum digits and the digit count at once (carries are staircases of
                     the column sums: D_k = x_k + carry_k - 10 carry_{k+1});
  layer 1 MLP:       the logits: digit number count-1-t (t = i - 7), then the end token.

Floor: 2 layers (the anchor compiler needs 15 greedy / 13 CP-SAT at d = 1024).
"""

from __future__ import annotations

import numpy as np

from twdialect import ops as tw

from tw_examples.token_program import (
    Anchor,
    Geometry,
    Space,
    TokenProgram,
    attend_position,
    build_mlp,
    check_regex,
    column_digits,
    number_logits,
)
from tw_lowering.export.prompts import append_missing, apply_rules, pad_digits

VOCAB = "0123456789+=$"
END = "$"
WIDTH = 3  # operand digits
EQ_POS = 2 * WIDTH + 1  # position of "="


# What normalize does to a checked prompt, as data the exports' tokenizers apply too
# (tw_lowering.export.prompts): each operand padded to WIDTH digits, "=" added if missing.
PROMPT_RULES = pad_digits(WIDTH) + (append_missing("="),)


def normalize(prompt: str) -> str:
    check_regex("adder", r"(\d{1,3})\+(\d{1,3})=?", prompt, "'123+456=' (1-3 digit operands)")
    return apply_rules(PROMPT_RULES, prompt)


def reference(prompt: str) -> str:
    m = check_regex("adder", r"(\d{1,3})\+(\d{1,3})=?", prompt, "'123+456='")
    return str(int(m.group(1)) + int(m.group(2)))


def sample(rng: np.random.Generator) -> str:
    a, b = rng.integers(0, 1000, size=2)
    return f"{a}+{b}="


def build_graph():
    table = np.array([[float(VOCAB.index(c)) if c.isdigit() else 0.0] for c in VOCAB])
    with tw.Graph("main") as g:
        tok = tw.embedding("tokens", table)
        pos = tw.pos_encoding(2, 16)
        # operand digits, least significant first: a_k at position WIDTH-1-k, b_k after "+"
        a = [attend_position(pos, [], WIDTH - 1 - k, tok, [[1.0]]) for k in range(WIDTH)]
        b = [attend_position(pos, [], 2 * WIDTH - k, tok, [[1.0]]) for k in range(WIDTH)]
        s0 = Space(a + b)
        cols = [(s0.var(a[k]) + s0.var(b[k]), 0, 18) for k in range(WIDTH)]
        digits, count = column_digits(cols, WIDTH + 1)
        number = build_mlp(s0, digits + [count])
        s1 = Space([number, pos])
        t = s1.var(pos, 0) - float(EQ_POS)
        logits = number_logits(VOCAB, [s1.var(number, k) for k in range(WIDTH + 1)],
                               s1.var(number, WIDTH + 1), t, None, END)
        tw.output("logits", build_mlp(s1, logits))
    return g.module


def build() -> TokenProgram:
    return TokenProgram(
        name="adder", vocab=VOCAB, end=END, module=build_graph(), max_len=16,
        max_answer=WIDTH + 2, normalize=normalize, reference=reference, sample=sample,
        geometry=Geometry(d=1024, d_head=64, d_hidden=4096),
        anchor=Anchor(greedy=15, cpsat=13, d=1024),
        description="sum of two numbers of up to 3 digits, e.g. 555+445= -> 1000",
        prompt_rules=PROMPT_RULES)
