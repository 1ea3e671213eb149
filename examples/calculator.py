"""calculator: "12*34=" -> "408", "5-17=" -> "-12". +, - and * on integers of up to 3 digits.

Layout: the prompt is normalised to "aaa?bbb=" (operands zero-padded, ? one of + - *), so
every operand digit and the operator sit at fixed positions; output step t is emitted at
position 7 + t.

  layer 0 attention: six heads read the operand digits, one head the operator flags;
  layer 0 MLP:  the column values y_m of |result| = sum_m 10^m y_m for the active operator:
                a_m + b_m, +-(a_m - b_m) (the sign chosen by A >= B, a staircase of A - B),
                or sum_{i+j=m} a_i b_j (each product (a+b)^2/4 - (a-b)^2/4, exact on
                integers); every branch is gated by its operator flag inside the same MLP;
  layer 1 MLP:  the decimal digits of |result| and their count (carries are staircases);
  layer 2 MLP:  the logits: "-" if negative, the digits MSB first, then the end token.

Floor: 3 layers (the anchor compiler needs 29 greedy / 26 CP-SAT at d = 2048).
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
    attend_position,
    build_mlp,
    check_regex,
    column_digits,
    gate,
    integer_function,
    lin,
    number_logits,
    step,
    switch,
)
from tw_lowering.export.prompts import append_missing, apply_rules, pad_digits

VOCAB = "0123456789+-*=$"
END = "$"
WIDTH = 3
OP_POS = WIDTH
EQ_POS = 2 * WIDTH + 1
OPS = "+-*"
PATTERN = r"(\d{1,3})([-+*])(\d{1,3})=?"
RESULT_DIGITS = 2 * WIDTH  # 999 * 999 has 6 digits


# What normalize does to a checked prompt, as data the exports' tokenizers apply too
# (tw_lowering.export.prompts): each operand padded to WIDTH digits, "=" added if missing.
PROMPT_RULES = pad_digits(WIDTH) + (append_missing("="),)


def normalize(prompt: str) -> str:
    check_regex("calculator", PATTERN, prompt, "'12*34=' (1-3 digit operands, + - or *)")
    return apply_rules(PROMPT_RULES, prompt)


def reference(prompt: str) -> str:
    m = check_regex("calculator", PATTERN, prompt, "'12*34='")
    a, op, b = int(m.group(1)), m.group(2), int(m.group(3))
    return str({"+": a + b, "-": a - b, "*": a * b}[op])


def sample(rng: np.random.Generator) -> str:
    a, b = rng.integers(0, 1000, size=2)
    return f"{a}{OPS[int(rng.integers(0, 3))]}{b}="


def _product(a, b) -> Expr:
    """a * b for integer digits a, b in [0, 9]: ((a+b)^2 - (a-b)^2) / 4, one ReLU per kink."""
    return (integer_function(a + b, 0, 18, lambda x: x * x / 4.0)
            - integer_function(a - b, -9, 9, lambda x: x * x / 4.0))


def build_graph():
    def features(c):
        return [float(c) if c.isdigit() else 0.0] + [1.0 if c == o else 0.0 for o in OPS]

    table = np.array([features(c) for c in VOCAB])
    with tw.Graph("main") as g:
        tok = tw.embedding("tokens", table)
        pos = tw.pos_encoding(2, 24)
        digit = np.array([[1.0], [0.0], [0.0], [0.0]])
        a = [attend_position(pos, [], WIDTH - 1 - k, tok, digit) for k in range(WIDTH)]
        b = [attend_position(pos, [], 2 * WIDTH - k, tok, digit) for k in range(WIDTH)]
        op = attend_position(pos, [], OP_POS, tok, np.vstack([np.zeros((1, 3)), np.eye(3)]))

        s0 = Space(a + b + [op])
        av = [s0.var(x) for x in a]
        bv = [s0.var(x) for x in b]
        plus, minus, times = (s0.var(op, k) for k in range(3))
        big_a = sum(av[k] * 10.0 ** k for k in range(WIDTH))
        big_b = sum(bv[k] * 10.0 ** k for k in range(WIDTH))
        off = 10.0 ** WIDTH  # pushes a gate key negative when its operator flag is 0
        a_ge_b = big_a - big_b + (minus - 1.0) * off  # >= 0 iff "-" and A >= B
        a_lt_b = big_b - big_a - 1.0 + (minus - 1.0) * off  # >= 0 iff "-" and A < B
        columns, ranges = [], []
        for m in range(2 * WIDTH - 1):
            y = Expr(0.0)
            lo, hi = 0, 0
            if m < WIDTH:
                y = y + gate(av[m] + bv[m], 18.0, plus - 1.0)
                y = y + gate(av[m] - bv[m] + 9.0, 18.0, a_ge_b) - step(a_ge_b) * 9.0
                y = y + gate(bv[m] - av[m] + 9.0, 18.0, a_lt_b) - step(a_lt_b) * 9.0
                lo, hi = -9, 18
            pairs = [(i, m - i) for i in range(WIDTH) if 0 <= m - i < WIDTH]
            for i, j in pairs:
                y = y + switch(_product(av[i], bv[j]), times, 40.0)
            columns.append(y)
            ranges.append((lo, max(hi, 81 * len(pairs))))
        negative = step(a_lt_b)
        stage0 = build_mlp(s0, columns + [negative])

        s1 = Space([stage0])
        ys = [(s1.var(stage0, m), lo, hi) for m, (lo, hi) in enumerate(ranges)]
        digits, count = column_digits(ys, RESULT_DIGITS)
        stage1 = build_mlp(s1, digits + [count, lin(s1.var(stage0, len(columns)))])

        s2 = Space([stage1, pos])
        t = s2.var(pos, 0) - float(EQ_POS)
        logits = number_logits(VOCAB, [s2.var(stage1, k) for k in range(RESULT_DIGITS)],
                               s2.var(stage1, RESULT_DIGITS), t,
                               s2.var(stage1, RESULT_DIGITS + 1), END)
        tw.output("logits", build_mlp(s2, logits))
    return g.module


def build() -> TokenProgram:
    return TokenProgram(
        name="calculator", vocab=VOCAB, end=END, module=build_graph(), max_len=24,
        max_answer=RESULT_DIGITS + 2, normalize=normalize, reference=reference, sample=sample,
        geometry=Geometry(d=2048, d_head=64, d_hidden=8192),
        anchor=Anchor(greedy=29, cpsat=26, d=2048),
        description="+, - or * on integers of up to 3 digits, e.g. 5-17= -> -12",
        prompt_rules=PROMPT_RULES)
