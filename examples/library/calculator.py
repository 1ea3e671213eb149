"""calculator, library-only: "12*34=" -> "408", "5-17=" -> "-12". +, - and * on integers of
1-3 digits as typed (no padding).

The result is R = sum_m 10^m y_m over integer columns y_m; the operator picks the columns by
picking which digits the reads see (a read of an inactive branch lands on the operator, whose
digit value is 0), so no stage gates anything:

  layer 0 attention: [p, +, -, *]: the position of the operator and its one-hot
                     (attend_argmin_where: the first operator, not a generated "-"); e, the
                     position of "=";
  layer 0 MLP:       read addresses (piecewise_linear): digit k of a at p - 1 - k, of b at
                     e - 1 - k; a digit beyond its operand, or of an inactive branch, reads
                     the operator instead;
  layer 1 attention: fifteen digit reads: a for + and -, b for + (added), b for - (subtracted),
                     a and b for * (attend_argmax_dot);
  layer 1 MLP:       the nine digit products a_i b_j (multiply_integers);
  layer 2 MLP:       one compare of integer forms of the columns: the carries of R and of -R
                     (floor(sum_{m<k} 10^m y_m / 10^k) as sums of steps), the digit counts,
                     "R < 0"; and "minus sign now" (compare);
  layer 3 MLP:       the logits: the entry of a table of digit logits (the digits of R, then
                     of -R, each followed by the end token; one linear of the columns and
                     carries) at t + offset (dynamic_extract), plus the minus sign.

Floor 4 layers (the hand-tuned calculator: 3, because it reads zero-padded operands at fixed
positions in layer 0; finding the operands in a variable-length prompt costs one attention).
"""

from __future__ import annotations

import numpy as np

from examples.calculator import PATTERN, reference, sample
from examples.library.adder import FLAG_SCALE, logit_rows
from examples.token_program import Anchor, Geometry, TokenProgram, check_regex
from twdialect import ops as tw

VOCAB = "0123456789+-*=$"
END = "$"
WIDTH = 3
OPS = "+-*"
MAX_LEN = 24
RESULT_DIGITS = 2 * WIDTH  # 999 * 999 has 6 digits
NEG_DIGITS = WIDTH  # b - a <= 999


def normalize(prompt: str) -> str:
    """Only validates: the prompt as typed, with a missing trailing '=' appended."""
    check_regex("calculator", PATTERN, prompt, "'12*34=' (1-3 digit operands, + - or *)")
    return prompt if prompt.endswith("=") else prompt + "="


class Forms:
    """Integer linear forms over the columns of one value (rows of a weight matrix)."""

    def __init__(self, n: int):
        self.n = n

    def unit(self, k: int) -> np.ndarray:
        u = np.zeros(self.n + 1)  # the last entry is the constant
        u[k] = 1.0
        return u

    def const(self, c: float) -> np.ndarray:
        u = np.zeros(self.n + 1)
        u[-1] = c
        return u


def steps(x, forms: list[np.ndarray]):
    """compare of each integer form >= 0 (+/-1), as one tw.compare of one linear of x."""
    w = np.stack([f[:-1] for f in forms], axis=1)
    b = np.array([f[-1] for f in forms]) + 0.25  # thresholds between the integers
    return tw.compare(tw.linear(x, w, b), 0.0, 0.5)


def build_graph():
    def features(c):
        return ([float(c) if c.isdigit() else 0.0] + [float(c == o) for o in OPS]
                + [1.0 if c in OPS else -1.0, 1.0 if c == "=" else -1.0, 1.0])

    table = np.array([features(c) for c in VOCAB])
    top = float(MAX_LEN - 1)
    big = 2.0 * MAX_LEN  # pushes an inactive branch's address onto the operator
    with tw.Graph("main") as g:
        tok = tw.embedding("tokens", table)
        pos = tw.pos_encoding(2, MAX_LEN)
        i = tw.slice(pos, 0, 1)
        digit = tw.slice(tok, 0, 1)
        # the first operator (a generated "-" comes later), read as
        # [p, p - big [*], -p - big [not +], -p - big [not -], -p - big [not *]]
        # (value columns [i, +, -, *, 1])
        op_value = np.array([[1.0, 1.0, -1.0, -1.0, -1.0],
                             [0.0, 0.0, big, 0.0, 0.0],
                             [0.0, 0.0, 0.0, big, 0.0],
                             [0.0, -big, 0.0, 0.0, big],
                             [0.0, 0.0, -big, -big, -big]])
        op = tw.attend_argmin_where(tw.slice(tok, 4, 1), i,
                                    tw.linear(tw.concat(i, tw.slice(tok, 1, 3),
                                                        tw.slice(tok, 6, 1)), op_value),
                                    (0.0, top))
        p = tw.slice(op, 0, 1)
        e = tw.attend_mean_where(tw.slice(tok, 5, 1), i)  # position of "="
        # read at p + f: query [p, 2 f, -1] . key [2 j, j, j^2]
        key = tw.linear(tw.slice(pos, 0, 2), [[2.0, 1.0, 0.0], [0.0, 0.0, 1.0]])

        def read(x, bp, vals):
            shift = tw.piecewise_linear(x, bp, [[2.0 * v, -1.0] for v in vals])
            return tw.attend_argmax_dot(tw.concat(p, shift), key, digit)

        def a_digit(k, x):  # p - (k + 1) [x >= k + 1], x = p or p - big [*]
            return read(x, [float(k), k + 1.0], [0.0, -(k + 1.0)])

        def b_digit(k, gated):  # p + relu(e - p - big [not active] - 1 - k)
            return read(tw.sum([e, gated]), [k + 1.0, top], [0.0, top - k - 1])

        # gates: the branch reads land on the operator unless its operator is active
        a_pm = [a_digit(k, tw.slice(op, 1, 1)) for k in range(WIDTH)]  # a for + and -
        b_plus = [b_digit(k, tw.slice(op, 2, 1)) for k in range(WIDTH)]
        b_minus = [b_digit(k, tw.slice(op, 3, 1)) for k in range(WIDTH)]
        a_any = [a_digit(k, p) for k in range(WIDTH)]
        b_times = [b_digit(k, tw.slice(op, 4, 1)) for k in range(WIDTH)]
        pairs = [(ia, jb) for ia in range(WIDTH) for jb in range(WIDTH)]
        prods = tw.multiply_integers(tw.concat([a_any[ia] for ia, _ in pairs]),
                                     tw.concat([b_times[jb] for _, jb in pairs]), 9)
        # columns y_m over x = [a_pm (3), b_plus (3), b_minus (3), prods (9)]
        x = tw.concat(a_pm + b_plus + b_minus + [prods])
        f = Forms(3 * WIDTH + len(pairs))
        n_cols = 2 * WIDTH - 1
        ys, lo, hi = [], [], []
        for m in range(n_cols):
            y = f.const(0.0)
            if m < WIDTH:
                y = y + f.unit(m) + f.unit(WIDTH + m) - f.unit(2 * WIDTH + m)
            terms = [k for k, (ia, jb) in enumerate(pairs) if ia + jb == m]
            for k in terms:
                y = y + f.unit(3 * WIDTH + k)
            ys.append(y)
            lo.append(-9 if m < WIDTH else 0)
            hi.append(max(18 if m < WIDTH else 0, 81 * len(terms)))

        def partial(k, sign=1.0):
            """sign * sum_{m<k} 10^m y_m and its integer bounds (for -R: the "-" branch's)."""
            top_k = min(k, n_cols if sign > 0 else WIDTH)
            form = sum((ys[m] * 10.0 ** m for m in range(min(k, n_cols))), f.const(0.0))
            bounds = (lo, hi) if sign > 0 else ([-9] * WIDTH, [9] * WIDTH)
            lo_k = sum(bounds[0][m] * 10 ** m for m in range(top_k))
            hi_k = sum(bounds[1][m] * 10 ** m for m in range(top_k))
            return (form, lo_k, hi_k) if sign > 0 else (-form, -hi_k, -lo_k)

        # carries of R (for R >= 0) and of -R (for R < 0): floor(partial_k / 10^k) is
        # lo + the number of multiples c 10^k (lo < c <= hi) that partial_k reaches
        carry_steps, carry_index = [], []

        def carries(sign, n_digits):
            out = [(0.0, [])]
            for k in range(1, n_digits + 1):
                form, lo_k, hi_k = partial(k, sign)
                unit = 10 ** k
                idx = []
                for c in range(lo_k // unit + 1, hi_k // unit + 1):
                    idx.append(len(carry_steps))
                    carry_steps.append(form - c * unit * f.const(1.0))
                out.append((float(lo_k // unit), idx))
            return out

        pos_carries = carries(1.0, RESULT_DIGITS - 1)
        pos_carries.append((0.0, []))  # R < 10^6: no carry out of the top digit
        neg_carries = carries(-1.0, NEG_DIGITS)
        cs = steps(x, carry_steps)
        # digit entries: D_k = s y_k + carry_k - 10 carry_(k+1) over z = [x, cs]
        nx = f.n
        nz = nx + len(carry_steps)

        def digit_form(k, sign, cars):
            d = np.zeros(nz + 1)
            if k < n_cols:
                d[:nx] += sign * ys[k][:-1]
                d[-1] += sign * ys[k][-1]
            for c_k, coef in ((k, 1.0), (k + 1, -10.0)):
                base, idx = cars[c_k]
                d[-1] += coef * (base + 0.5 * len(idx))  # carry = base + sum (step + 1) / 2
                for s in idx:
                    d[nx + s] += coef * 0.5
            return d

        w1, b1 = logit_rows(VOCAB)
        nv = len(VOCAB)
        entries = ([digit_form(k, 1.0, pos_carries) for k in reversed(range(RESULT_DIGITS))]
                   + ["end", "spacer"]
                   + [digit_form(k, -1.0, neg_carries) for k in reversed(range(NEG_DIGITS))]
                   + ["end"])
        tw_w = np.zeros((nz, len(entries) * nv))
        tw_b = np.zeros(len(entries) * nv)
        for n, ent in enumerate(entries):
            cols = slice(n * nv, (n + 1) * nv)
            if isinstance(ent, str):
                if ent == "end":
                    tw_b[cols] = -FLAG_SCALE
                    tw_b[n * nv + VOCAB.index(END)] = FLAG_SCALE
                continue
            tw_w[:, cols] = np.outer(ent[:-1], w1[0])
            tw_b[cols] = ent[-1] * w1[0] + b1
        table_value = tw.linear(tw.concat(x, cs), tw_w, tw_b)
        # counts and sign: [R >= 10^j] (j = 1..6; the last is never set, but a wider compare
        # lets the pipeline fold its input linear), [-R >= 10^j] (j = 1, 2), [-R >= 1]
        r_form = partial(n_cols)[0]
        count_forms = ([r_form - 10.0 ** j * f.const(1.0) for j in range(1, RESULT_DIGITS + 1)]
                       + [-r_form - 10.0 ** j * f.const(1.0) for j in range(1, NEG_DIGITS)]
                       + [-r_form - f.const(1.0)])
        counts = steps(x, count_forms)
        # entry index: R >= 0: (6 - count) + t; R < 0: 8 + (3 - count') + (t - 1); the other
        # count is 1 then, so index = t + 7 - count - count' + 4 [R < 0]
        n_pos, n_neg = RESULT_DIGITS - 1, NEG_DIGITS - 1
        start_w = np.concatenate([np.full(n_pos, -0.5), [0.0], np.full(n_neg, -0.5), [2.0]])
        start_b = 7.0 - (1.0 + 0.5 * n_pos) - (1.0 + 0.5 * n_neg) + 2.0
        start = tw.linear(counts, start_w.reshape(-1, 1), [start_b])
        t = tw.subtract(i, e)
        logits = tw.dynamic_extract(table_value, tw.add(start, t), len(entries),
                                    max_abs=None)
        # the minus sign at t = 0 when R < 0: -R - 1 - 1000 t >= 0 (t >= 0, -R <= 999)
        xt = tw.concat(x, t)
        sign_form = np.append(-r_form[:-1], -1000.0)
        sign = tw.compare(tw.linear(xt, sign_form.reshape(-1, 1), [-r_form[-1] - 1.0 + 0.25]),
                          0.0, 0.5)
        sign_w = np.zeros((1, nv))
        sign_w[0, VOCAB.index("-")] = 2.0 * FLAG_SCALE  # +4 W when set, 0 when not
        sign_b = np.zeros(nv)
        sign_b[VOCAB.index("-")] = 2.0 * FLAG_SCALE
        tw.output("logits", tw.add(logits, tw.linear(sign, sign_w, sign_b)))
    return g.module


def build() -> TokenProgram:
    return TokenProgram(
        name="calculator", vocab=VOCAB, end=END, module=build_graph(), max_len=MAX_LEN,
        max_answer=RESULT_DIGITS + 2, normalize=normalize, reference=reference, sample=sample,
        geometry=Geometry(d=2048, d_head=64, d_hidden=8192),
        anchor=Anchor(greedy=29, cpsat=26, d=2048),
        description="+, - or * on integers of up to 3 digits, e.g. 5-17= -> -12 (library ops)")
