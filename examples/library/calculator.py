"""calculator, library-only: "12*34=" -> "408", "5-17=" -> "-12". +, - and * on integers of
1-3 digits as typed (no padding).

As in the library adder, "=" computes the answer for every prompt shape c = (operator, la,
lb) at once from the tokens at offsets 1..7 (a_k at e - lb - 2 - k, b_k at e - 1 - k), and
the answer steps read it back from "=":

  layer 0 attention: the tokens at offsets 1..7 (digit and operator flags, attend_to_offset);
                     p, the position of the first operator, so la = p (attend_argmin_where);
                     e, the position of "=" (attend_mean_where);
  layer 0 MLP:       the twelve products of an a-offset digit and a b-offset digit
                     (multiply_integers);
  layer 1 MLP:       two compares of integer forms. One holds, for every shape, the carries
                     of its own columns (y_m = a_m + b_m, a_m - b_m or sum a_i b_j;
                     floor(sum_{m<k} 10^m y_m / 10^k) as sums of steps; for "-" also those of
                     -R), unmasked: each shape's digits D_k = y_k + c_k - 10 c_(k+1) are linear
                     in them and in the reads. The other holds the steps masked to the
                     prompt's shape by the row trick (the operator flag read at offset lb + 1
                     and p = la pin it): which shape, the digit counts of R and -R, "R < 0";
  layer 2 attention: at "=": the table of every shape's digits (8 entries per shape, one
                     linear of the reads and the carry steps), where the answer starts in it,
                     its length and "R < 0";
  layer 2 MLP:       the logits: for each digit character v, its score s (2 v x - v^2) of the
                     entry x = table[start + t], t = i - e (ten dynamic_extracts, so no linear
                     map follows the last MLP); the end token at t = length and the minus sign
                     at t = 0 (compare).

Floor 3 layers, as the hand-tuned calculator (which zero-pads the operands on the host).
"""

from __future__ import annotations

import numpy as np

from tw_examples.calculator import PATTERN, reference, sample
from tw_examples.library.adder import FLAG_SCALE, INTEGER_FORMS, Steps, digit_logits
from tw_examples.token_program import Anchor, Geometry, TokenProgram, check_regex
from twdialect import ops as tw

VOCAB = "0123456789+-*=$"
END = "$"
WIDTH = 3
OPS = "+-*"
MAX_LEN = 24
RESULT_DIGITS = 2 * WIDTH  # 999 * 999 has 6 digits


def normalize(prompt: str) -> str:
    """Only validates: the prompt as typed, with a missing trailing '=' appended."""
    check_regex("calculator", PATTERN, prompt, "'12*34=' (1-3 digit operands, + - or *)")
    return prompt if prompt.endswith("=") else prompt + "="


def build_graph():
    def features(c):
        return ([float(c) if c.isdigit() else 0.0] + [float(c == o) for o in OPS]
                + [1.0 if c in OPS else -1.0, 1.0 if c == "=" else -1.0, 1.0])

    table = np.array([features(c) for c in VOCAB])
    n_reads = 2 * WIDTH + 1
    with tw.Graph("main") as g:
        tok = tw.embedding("tokens", table)
        pos = tw.pos_encoding(2, MAX_LEN)
        i = tw.slice(pos, 0, 1)
        one = tw.slice(tok, 6, 1)
        # [digit, +, -, *] at offsets 1..7
        reads = [tw.attend_to_offset(pos, tw.slice(tok, 0, 4), m) for m in range(1, n_reads + 1)]
        is_eq = tw.slice(tok, 5, 1)
        e = tw.attend_mean_where(is_eq, i)
        # p, the position of the first operator (a generated "-" comes later): la = p
        p = tw.attend_argmin_where(tw.slice(tok, 4, 1), i, i, (0.0, MAX_LEN - 1.0))

        def digit_at(m):  # column of z holding the digit at offset m (1-based)
            return 4 * (m - 1)

        # products d(u) d(v) of an a-offset u and a b-offset v, over every shape
        pairs = sorted({(lb + 2 + k, 1 + j) for lb in range(1, WIDTH + 1)
                        for k in range(WIDTH) for j in range(lb)})
        prods = tw.multiply_integers(
            tw.concat([tw.slice(reads[u - 1], 0, 1) for u, _ in pairs]),
            tw.concat([tw.slice(reads[v - 1], 0, 1) for _, v in pairs]), 9)
        # integer forms over z = [reads (4 x 7), products, p] (then the constant)
        nz = 4 * n_reads + len(pairs) + 1
        z = tw.concat(reads + [prods, p])

        def unit(k):
            u = np.zeros(nz + 1)
            u[k] = 1.0
            return u

        const = unit(nz)
        zero = 0.0 * const
        pos_p = unit(nz - 1)
        # two compares: the carries of every shape (unmasked) and the shape-masked steps
        carry, mask = Steps(nz), Steps(nz)
        blocks = []  # per shape: 8 table entries (y over z, carry over `carry`), None: 0
        count, count_neg, neg = mask.zero(1.0), mask.zero(1.0), mask.zero()
        start = mask.zero(1.0)  # where the answer starts in the table (see below)
        for o, op_char in enumerate(OPS):
            for la in range(1, WIDTH + 1):
                for lb in range(1, WIDTH + 1):
                    a = [unit(digit_at(lb + 2 + k)) if k < la else zero for k in range(WIDTH)]
                    b = [unit(digit_at(1 + j)) if j < lb else zero for j in range(WIDTH)]
                    if op_char == "*":
                        n_cols = 2 * WIDTH - 1
                        ys = [sum((unit(4 * n_reads + pairs.index((lb + 2 + k, 1 + j)))
                                   for k in range(la) for j in range(lb) if k + j == m), zero)
                              for m in range(n_cols)]
                        y_lo = [0] * n_cols
                        y_hi = [81 * sum(1 for k in range(la) for j in range(lb) if k + j == m)
                                for m in range(n_cols)]
                        r_lo, r_hi = 0, (10 ** la - 1) * (10 ** lb - 1)
                    else:
                        sign = 1.0 if op_char == "+" else -1.0
                        ys = [a[m] + sign * b[m] for m in range(WIDTH)]
                        y_lo = [0 if sign > 0 else -9 * (m < lb) for m in range(WIDTH)]
                        y_hi = [9 * (m < la) + 9 * (m < lb) * (sign > 0) for m in range(WIDTH)]
                        r_lo = 0 if sign > 0 else -(10 ** lb - 1)
                        r_hi = (10 ** la - 1) + (10 ** lb - 1 if sign > 0 else 0)

                    def carries(sign, n_digits, ys=ys, y_lo=y_lo, y_hi=y_hi):
                        """floor(sign * sum_{m<k} 10^m y_m / 10^k), k = 0..n_digits, then 0:
                        forms over the carry steps (this shape's own reading of the offsets)."""
                        out = [carry.zero()]
                        for k in range(1, n_digits + 1):
                            top = min(k, len(ys))
                            q = sign * sum((ys[m] * 10.0 ** m for m in range(top)), zero)
                            lo, hi = sorted(int(sign * sum(y[m] * 10 ** m for m in range(top)))
                                            for y in (y_lo, y_hi))
                            unit_k = 10 ** k
                            c = carry.zero(float(lo // unit_k))
                            for mult in range(lo // unit_k + 1, hi // unit_k + 1):
                                c = c + carry.step(q - mult * unit_k * const)
                            out.append(c)
                        return out + [carry.zero()]

                    def digit(k, sign, cs, ys=ys):
                        """D_k = y_k + c_k - 10 c_(k+1): (the y part over z, the carry part)."""
                        return (sign * ys[k] if k < len(ys) else zero, cs[k] - 10.0 * cs[k + 1])

                    n_dig = {"+": WIDTH + 1, "-": WIDTH, "*": 2 * WIDTH}[op_char]
                    cs = carries(1.0, n_dig - 1)
                    entries = [None] * 8
                    if op_char == "-":
                        cs_neg = carries(-1.0, WIDTH - 1)
                        for k in range(WIDTH):  # -R at entries 1..3, R at 5..7
                            entries[3 - k] = digit(k, -1.0, cs_neg)
                            entries[7 - k] = digit(k, 1.0, cs)
                    else:
                        for k in range(n_dig):
                            entries[n_dig - k] = digit(k, 1.0, cs)
                    blocks.append(entries)
                    # the row trick: this shape iff its operator is at offset lb + 1 (the
                    # flag read there is 1) and p = la; the shifts are 0 for this shape and
                    # push every other one below or above the steps' range (p <= 3 and 0/1
                    # flags keep the hidden values below 2^24)
                    flag = unit(digit_at(lb + 1) + 1 + o)
                    # [this shape]; the block's first entry and base: + 5, - 8, * 7
                    (here,) = mask.masked(zero, 0, (pos_p - la * const)
                                          - 4.0 * (const - flag), [0])
                    base = {"+": 5, "-": 8, "*": 7}[op_char]
                    start = start + (8.0 * (len(blocks) - 1) + base) * here
                    # [this shape and R >= 10^j]; for "-" also -R >= 10^j and -R >= 1
                    r = sum((ys[m] * 10.0 ** m for m in range(len(ys))), zero)
                    span = r_hi - r_lo
                    far = span + (span + 1.0) * (WIDTH - la) + 1.0
                    shift = (span + 1.0) * (pos_p - la * const) - far * (const - flag)
                    for st in mask.masked(r - r_lo * const, span, shift,
                                          [10 ** j - r_lo for j in range(1, 2 * WIDTH)
                                           if 10 ** j <= r_hi]):
                        count = count + st
                    if op_char == "-":
                        got = mask.masked(-r + r_hi * const, span, shift,
                                          [t + r_hi for t in [1] + [10 ** j for j in
                                                                    range(1, WIDTH)
                                                                    if 10 ** j < 10 ** lb]])
                        neg = neg + got[0]
                        for st in got[1:]:
                            count_neg = count_neg + st
        carry.emit(z)
        flags = mask.emit(z)  # 0/1 steps
        nc, nm = len(carry.rows), len(mask.rows)
        # the table: digit values, 8 entries per shape, then one spare (0) entry, as a linear
        # of [z, carry signs s, 1] (a carry step is (s + 1) / 2)
        n_entries = 8 * len(blocks) + 1
        tab = np.zeros((nz + nc + 1, n_entries))
        for bi, entries in enumerate(blocks):
            for slot, ent in enumerate(entries):
                if ent is None:
                    continue
                y, c = ent
                col = 8 * bi + slot
                tab[:nz, col] = y[:-1]
                tab[nz:nz + nc, col] = 0.5 * c[:nc]
                tab[-1, col] = y[-1] + c[-1] + 0.5 * c[:nc].sum()
        entries_at_eq = tw.attend_mean_where(is_eq, tw.linear(tw.concat(z, carry.signs, one), tab))
        # start = 8 b + base - count - count_neg + 1 - 5 neg (b: the shape's block), the
        # answer's length count + count_neg - 1 + neg, and neg
        start = start - count - count_neg - 5.0 * neg
        length = count + count_neg + neg - mask.zero(1.0)
        at_eq = tw.linear(flags, np.stack([start[:nm], length[:nm], neg[:nm]], axis=1),
                          [start[-1], length[-1], neg[-1]])
        start = tw.attend_mean_where(is_eq, tw.slice(at_eq, 0, 1))
        length = tw.attend_mean_where(is_eq, tw.slice(at_eq, 1, 2))
        t = tw.subtract(i, e)
        index = tw.add(start, t)
        # the logits: digit v scores s (2 v x - v^2) for the entry x; one dynamic_extract per
        # digit character reads that score from a table of scores (a linear of the digits), so
        # every logit is an MLP output (no linear map after the last MLP)
        digits = digit_logits(entries_at_eq, index, n_entries, VOCAB)
        # the other characters: t >= length and t >= length + 1 (the end token between),
        # neg - 1 - t >= 0 (the minus sign)
        # (positions and counts are integers: see INTEGER_FORMS)
        marks = tw.accept_error(tw.compare(tw.linear(tw.concat(t, length),
                                     [[1.0, 1.0, -1.0], [-1.0, -1.0, 0.0], [0.0, 0.0, 1.0]],
                                     [0.0, -1.0, -1.0]), 0.0, 1.0), INTEGER_FORMS)
        rest = VOCAB[10:]
        mw = np.zeros((3, len(rest)))
        mb = np.full(len(rest), -FLAG_SCALE)
        k_end, k_minus = rest.index(END), rest.index("-")
        mw[0, k_end], mw[1, k_end] = FLAG_SCALE, -FLAG_SCALE  # +W when set, -W when not
        mw[2, k_minus], mb[k_minus] = 2.0 * FLAG_SCALE, FLAG_SCALE  # +3 W when set
        tw.output("logits", tw.concat(digits + [tw.linear(marks, mw, mb)]))
    return g.module


def build() -> TokenProgram:
    return TokenProgram(
        name="calculator", vocab=VOCAB, end=END, module=build_graph(), max_len=MAX_LEN,
        max_answer=RESULT_DIGITS + 2, normalize=normalize, reference=reference, sample=sample,
        geometry=Geometry(d=2048, d_head=64, d_hidden=8192),
        anchor=Anchor(greedy=29, cpsat=26, d=2048),
        description="+, - or * on integers of up to 3 digits, e.g. 5-17= -> -12 (library ops)")
