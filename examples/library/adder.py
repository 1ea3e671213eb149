"""adder, library-only: "7+456=" -> "463". Two numbers of 1-3 digits as typed (no padding);
the sum in decimal (up to 1998).

The graph parses the prompt itself: the operands sit wherever the user put them.

  layer 0 attention: p, the position of "+", and e, the position of "=" (attend_mean_where);
  layer 0 MLP:       the read addresses of the operand digits (piecewise_linear of p and of
                     e - p): digit k of a sits at p - 1 - k, digit k of b at e - 1 - k; a
                     digit beyond an operand's length points at "+" instead, which reads 0;
  layer 1 attention: the six digits (attend_argmax_dot on [2 T, -1] . [j, j^2]);
  layer 1 MLP:       the digits of a + b (sum_digits) and the digit count (compare);
  layer 2 MLP:       the logits: digit t of the sum (dynamic_extract, t = i - e), the end
                     token at t = count (compare).

Floor 3 layers (the hand-tuned adder: 2, because it reads zero-padded operands at fixed
positions in layer 0; finding the operands in a variable-length prompt costs one attention).
"""

from __future__ import annotations

import numpy as np

from examples.adder import reference, sample
from examples.token_program import Anchor, Geometry, TokenProgram, check_regex
from twdialect import ops as tw

VOCAB = "0123456789+=$"
END = "$"
WIDTH = 3
MAX_LEN = 16
PATTERN = r"(\d{1,3})\+(\d{1,3})=?"
DIGIT_SCALE = 10.0  # the best digit's logit beats the next by this much
FLAG_SCALE = 100.0 * DIGIT_SCALE  # above every digit logit


def normalize(prompt: str) -> str:
    """Only validates: the prompt as typed, with a missing trailing '=' appended."""
    check_regex("adder", PATTERN, prompt, "'123+456=' (1-3 digit operands)")
    return prompt if prompt.endswith("=") else prompt + "="


def read_at(pos, query, key_form, value):
    """value at the position T named by `query` . `key_form` (j, j^2) = 2 T j - j^2 (one head,
    attend_argmax_dot): key_form maps the position features [j, j^2] to the key, so the query
    carries 2 T split over its parts and -1 against j^2; logits 30 (T^2 - (j - T)^2)."""
    key = tw.linear(tw.slice(pos, 0, 2), key_form)
    return tw.attend_argmax_dot(query, key, value)


def logit_rows(vocab: str = VOCAB) -> tuple[np.ndarray, np.ndarray]:
    """(w, b): the logits of a digit value x, x @ w + b, whose argmax is the digit: digit v
    scores s (2 v x - v^2), which peaks at v = x by s; other characters score -FLAG_SCALE."""
    w = np.zeros((1, len(vocab)))
    b = np.full(len(vocab), -FLAG_SCALE)
    for v in range(10):
        k = vocab.index(str(v))
        w[0, k] = 2.0 * DIGIT_SCALE * v
        b[k] = -DIGIT_SCALE * v * v
    return w, b


def number_table(digits, n: int, end: str, vocab: str = VOCAB):
    """The logits of each of the n digits (a value n wide, most significant first) followed by
    the logits of the end token: a table of n + 1 entries for `dynamic_extract`, one linear of
    the digits."""
    w1, b1 = logit_rows(vocab)
    v = len(vocab)
    w = np.zeros((n, (n + 1) * v))
    b = np.zeros((n + 1) * v)
    for k in range(n):
        w[k, k * v:(k + 1) * v] = w1[0]
        b[k * v:(k + 1) * v] = b1
    b[n * v:] = -FLAG_SCALE
    b[n * v + vocab.index(end)] = FLAG_SCALE
    return tw.linear(digits, w, b)


def build_graph():
    # token features: digit value, "+" and "=" as +/-1 booleans
    table = np.array([[float(c) if c.isdigit() else 0.0, 1.0 if c == "+" else -1.0,
                       1.0 if c == "=" else -1.0] for c in VOCAB])
    with tw.Graph("main") as g:
        tok = tw.embedding("tokens", table)
        pos = tw.pos_encoding(2, MAX_LEN)
        i = tw.slice(pos, 0, 1)
        digit = tw.slice(tok, 0, 1)
        p = tw.attend_mean_where(tw.slice(tok, 1, 1), i)  # position of "+"
        e = tw.attend_mean_where(tw.slice(tok, 2, 1), i)  # position of "="
        top = float(MAX_LEN - 1)
        a, b = [], []
        for k in range(WIDTH):  # least significant first
            # a_k at p - 1 - k while k < p (= len(a)), else at "+": p - (k + 1) [p >= k + 1];
            # the query is [2 T, -1] against the key [j, j^2]
            bp = [0.0, float(k), k + 1.0, top] if k else [0.0, 1.0, top]
            vals = [0.0, float(k), 0.0, top - k - 1] if k else [0.0, 0.0, top - 1]
            back = tw.piecewise_linear(p, bp, [[2.0 * v, -1.0] for v in vals])
            a.append(read_at(pos, back, np.eye(2), digit))
            # b_k at e - 1 - k while that is after "+", else at "+": p + relu(e - p - 1 - k);
            # the query is [p, 2 relu(..), -1] against the key [2 j, j, j^2]
            ahead = tw.piecewise_linear(tw.subtract(e, p), [k + 1.0, top],
                                        [[0.0, -1.0], [2.0 * (top - k - 1), -1.0]])
            b.append(read_at(pos, tw.concat(p, ahead), [[2.0, 1.0, 0.0], [0.0, 0.0, 1.0]],
                             digit))
        total = tw.sum_digits(a[::-1], b[::-1])  # WIDTH + 1 digits, most significant first
        # count = 1 + #{j : a + b >= 10^j}: one compare of three shifted copies of a + b
        place = np.array([10.0 ** k for k in range(WIDTH)] * 2).reshape(-1, 1)
        big = tw.compare(tw.linear(tw.concat(a + b), np.tile(place, (1, WIDTH)),
                                   [0.25 - 10.0 ** j for j in range(1, WIDTH + 1)]), 0.0, 0.5)
        # step t = i - e emits entry (WIDTH + 1 - count) + t of the table (digits, then end);
        # count = 1 + sum (big_j + 1) / 2
        start = tw.linear(big, np.full((WIDTH, 1), -0.5), [WIDTH - WIDTH / 2.0])
        t = tw.subtract(i, e)
        entries = number_table(total, WIDTH + 1, END)
        tw.output("logits", tw.dynamic_extract(entries, tw.add(start, t), WIDTH + 2,
                                               max_abs=3.0 * FLAG_SCALE))
    return g.module


def build() -> TokenProgram:
    return TokenProgram(
        name="adder", vocab=VOCAB, end=END, module=build_graph(), max_len=MAX_LEN,
        max_answer=WIDTH + 2, normalize=normalize, reference=reference, sample=sample,
        geometry=Geometry(d=1024, d_head=64, d_hidden=4096),
        anchor=Anchor(greedy=15, cpsat=13, d=1024),
        description="sum of two numbers of up to 3 digits, e.g. 7+456= -> 463 (library ops)")
