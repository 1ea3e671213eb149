"""fibonacci, library-only: "0,1" -> "1,2,3,5,8,13,...,6765,". From two seeds, emits the
Fibonacci-style sequence, each term the sum of the previous two as read back from the text so
far, comma separated; it stops (end token) where the next term would need 5 digits. Seeds are
0-9999, read as typed: no start marker is added (a missing trailing "," is).

  layer 0 attention: c1, the latest separator at or before i (attend_argmax_where; none
                     gives i - big), with the constant 1 beside it;
  layer 0 MLP:       clamp(c1, -1, ...): "no separator" reads as position -1;
  layer 1 attention: c2 = c1 as seen from position c1 - 1 (the separator before; query
                     [c1, 1] . key [2 j, -2 j - j^2]);
  layer 1 MLP:       where to read the previous term's digits: c1 - 1 - m while that is after
                     c2, else c1 (a separator reads 0; piecewise_linear of c1 - c2);
  layer 2 attention: c3 (c1 as seen from c2 - 1) and the previous term's four digits;
  layer 2 MLP:       where to read the digits of the term before (c2, c3 likewise);
  layer 3 attention: that term's four digits;
  layer 3 MLP:       the digits of the sum (sum_digits) and its digit count (compare);
  layer 4 MLP:       the logits: the entry of a table [end, 5 digits, ","] (one linear of the
                     digits) at 6 - count + t, t = i - c1 (dynamic_extract); a 5-digit sum
                     counts its top digit twice, so it reads the end token at t = 0.

Floor 5 layers, as the hand-tuned program (the anchor compiler needs 8 greedy / 6 CP-SAT).
"""

from __future__ import annotations

import numpy as np

from examples.fibonacci import MAX_ANSWER, MAX_LEN, PATTERN, TERM_DIGITS, reference, sample
from examples.library.adder import FLAG_SCALE, logit_rows
from examples.token_program import Anchor, Geometry, TokenProgram, check_regex
from twdialect import ops as tw

VOCAB = "0123456789,^$"
END = "$"


def normalize(prompt: str) -> str:
    """Only validates: the prompt as typed, with a missing trailing ',' appended."""
    check_regex("fibonacci", PATTERN, prompt, "'0,1' (two seeds of 0-9999)")
    return prompt if prompt.endswith(",") else prompt + ","


def build_graph():
    # token features: digit value, separator as +/-1 and as 0/1, the constant 1
    table = np.array([[float(c) if c.isdigit() else 0.0, 1.0 if c in ",^" else -1.0,
                       float(c in ",^"), 1.0] for c in VOCAB])
    top = float(MAX_LEN - 1)
    big = 2.0 * MAX_LEN
    n = TERM_DIGITS
    with tw.Graph("main") as g:
        tok = tw.embedding("tokens", table)
        pos = tw.pos_encoding(2, MAX_LEN)
        i = tw.slice(pos, 0, 1)
        digit = tw.slice(tok, 0, 1)
        # [c1, 1]: the latest separator (value j + big (sep - 1), so none gives i - big < -1)
        latest = tw.attend_argmax_where(
            tw.slice(tok, 1, 1), i,
            tw.linear(tw.concat(i, tw.slice(tok, 2, 2)), [[1.0, 0.0], [big, 0.0], [-big, 1.0]]),
            (0.0, top))
        c1 = tw.clamp(latest, -1.0, top)
        # the separator before: [c, 1] . [2 j, -2 j - j^2] = 2 (c - 1) j - j^2 reads at c - 1
        back = tw.linear(tw.slice(pos, 0, 2), [[2.0, -2.0], [0.0, -1.0]])
        c2 = tw.attend_argmax_dot(c1, back, c1)
        c3 = tw.attend_argmax_dot(c2, back, c1)
        # digit m of the term between separators lo < hi: at hi - 1 - m while that is after
        # lo, else at hi: query [hi, 2 f, -1] . key [2 j, j, j^2], f = -(m + 1) [hi - lo >= m + 2]
        key = tw.linear(tw.slice(pos, 0, 2), [[2.0, 1.0, 0.0], [0.0, 0.0, 1.0]])

        def term(hi, lo):
            h = tw.slice(hi, 0, 1)
            gap = tw.subtract(h, tw.slice(lo, 0, 1))
            out = []
            for m in range(n):  # least significant first
                f = tw.piecewise_linear(gap, [m + 1.0, m + 2.0],
                                        [[0.0, -1.0], [-2.0 * (m + 1), -1.0]])
                out.append(tw.attend_argmax_dot(tw.concat(h, f), key, digit))
            return out

        a = term(c1, c2)  # the previous term
        b = term(c2, c3)  # the term before it
        total = tw.sum_digits(a[::-1], b[::-1])  # n + 1 digits, most significant first
        # count' = 1 + #{j < n : a + b >= 10^j} + 2 [a + b >= 10^n]
        place = np.array([10.0 ** k for k in range(n)] * 2).reshape(-1, 1)
        over = tw.compare(tw.linear(tw.concat(a + b), np.tile(place, (1, n)),
                                    [0.25 - 10.0 ** j for j in range(1, n + 1)]), 0.0, 0.5)
        # table: [end, D_n .. D_0, ","]; step t = i - c1 reads entry n + 2 - count' + t
        w1, b1 = logit_rows(VOCAB)
        nv = len(VOCAB)
        tw_w = np.zeros((n + 1, (n + 3) * nv))
        tw_b = np.full((n + 3) * nv, -FLAG_SCALE)
        tw_b[VOCAB.index(END)] = FLAG_SCALE
        for k in range(n + 1):
            tw_w[k, (k + 1) * nv:(k + 2) * nv] = w1[0]
            tw_b[(k + 1) * nv:(k + 2) * nv] = b1
        tw_b[(n + 2) * nv + VOCAB.index(",")] = FLAG_SCALE
        entries = tw.linear(total, tw_w, tw_b)
        # count' = 1 + sum_{j<n} (s_j + 1) / 2 + (s_n + 1)
        coef = np.array([0.5] * (n - 1) + [1.0])
        start = tw.linear(over, -coef.reshape(-1, 1), [n + 2 - (1.0 + coef.sum())])
        t = tw.subtract(i, tw.slice(c1, 0, 1))
        tw.output("logits", tw.dynamic_extract(entries, tw.add(start, t), n + 3,
                                               max_abs=3.0 * FLAG_SCALE))
    return g.module


def build() -> TokenProgram:
    return TokenProgram(
        name="fibonacci", vocab=VOCAB, end=END, module=build_graph(), max_len=MAX_LEN,
        max_answer=MAX_ANSWER, normalize=normalize, reference=reference, sample=sample,
        geometry=Geometry(d=1024, d_head=64, d_hidden=4096),
        anchor=Anchor(greedy=8, cpsat=6, d=None),
        description="Fibonacci-style sequence from two seeds: 0,1 -> 1,2,3,5,8,...,6765, "
                    "(library ops)")
