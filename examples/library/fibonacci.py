"""fibonacci, library-only: "0,1" -> "1,2,3,5,8,13,...,6765,". From two seeds, emits the
Fibonacci-style sequence, each term the sum of the previous two as read back from the text so
far, comma separated; it stops (end token) where the next term would need 5 digits. Seeds are
0-9999, read as typed: no start marker is added (a missing trailing "," is).

Every "," (position c) adds the two terms before it: the previous term's digits sit at
offsets 1..lb, the digits of the term before at offsets lb + 2 .. lb + 1 + la, where the
shape (la, lb) is pinned by the separators among the tokens at offsets 1..10 (one "," at
offset lb + 1 and none before it; one at offset lb + 2 + la, or, for the first seed, the
start of the text there). So, as in the library adder, "," computes the sum for all 16
shapes at once and the answer steps read it back from the latest ",":

  layer 0 attention: the tokens at offsets 1..10 (digit, separator flag, position;
                     attend_to_offset) and c1, the latest separator (attend_argmax_where);
  layer 0 MLP:       two compares of integer forms: every shape's carries of its own column
                     sums (unmasked: its digits D_k = a_k + b_k + c_k - 10 c_(k+1) are linear
                     in them and in the reads), and the steps masked to the text's shape by
                     the row trick with one-sided penalties (0 for the shape, >= 1 otherwise:
                     which shape, the digit-count steps of the sum);
  layer 1 attention: at c1: the table of every shape's digits (one linear of the reads and
                     the carry compare's +/-1 outputs), where the answer starts in it and the
                     digit count;
  layer 1 MLP:       the logits: for each digit character, its score at entry start + t of
                     the table, t = i - c1 (one dynamic_extract per character); "," at t =
                     count and the end token at t = 0 for a 5-digit sum (compare).

Floor 2 layers (the hand-tuned program: 5, chaining its separator look-ups; the anchor
compiler needs 8 greedy / 6 CP-SAT).
"""

from __future__ import annotations

import numpy as np

from tw_examples.fibonacci import MAX_ANSWER, MAX_LEN, PATTERN, TERM_DIGITS, reference, sample
from tw_examples.library.adder import FLAG_SCALE, INTEGER_FORMS, Steps, digit_logits
from tw_examples.token_program import Anchor, Geometry, TokenProgram, check_regex
from twdialect import ops as tw

VOCAB = "0123456789,^$"
END = "$"
BLOCK = TERM_DIGITS + 2  # table entries per shape: the 5 digits of the sum, then a spare


def normalize(prompt: str) -> str:
    """Only validates: the prompt as typed, with a missing trailing ',' appended."""
    check_regex("fibonacci", PATTERN, prompt, "'0,1' (two seeds of 0-9999)")
    return prompt if prompt.endswith(",") else prompt + ","


def build_graph():
    n = TERM_DIGITS
    n_reads = 2 * n + 2  # up to the separator before a 4-digit term before a 4-digit term
    # token features: digit value, separator as 0/1 and as +/-1, the constant 1
    table = np.array([[float(c) if c.isdigit() else 0.0, float(c in ",^"),
                       1.0 if c in ",^" else -1.0, 1.0] for c in VOCAB])
    with tw.Graph("main") as g:
        tok = tw.embedding("tokens", table)
        pos = tw.pos_encoding(2, MAX_LEN)
        i = tw.slice(pos, 0, 1)
        one = tw.slice(tok, 3, 1)
        sep = tw.slice(tok, 2, 1)
        # [digit, separator, position] at offsets 1..10 (a read before the text reads 0)
        reads = [tw.attend_to_offset(pos, tw.concat(tw.slice(tok, 0, 2), i), m)
                 for m in range(1, n_reads + 1)]
        c1 = tw.attend_argmax_where(sep, i, i, (0.0, MAX_LEN - 1.0))  # the latest separator
        # integer forms over z = [reads (3 x 10), i] (then the constant)
        nz = 3 * n_reads + 1
        z = tw.concat(reads + [i])

        def unit(k):
            u = np.zeros(nz + 1)
            u[k] = 1.0
            return u

        const = unit(nz)
        zero = 0.0 * const

        def digit(m):
            return unit(3 * (m - 1))

        def is_sep(m):
            return unit(3 * (m - 1) + 1)

        def where(m):  # the position read at offset m: max(i - m, 0)
            return unit(3 * (m - 1) + 2)

        carry, mask = Steps(nz), Steps(nz)
        blocks = []  # per shape: the digit forms (reads part, carry part), most significant first
        count, start = mask.zero(1.0), mask.zero()
        for la in range(1, n + 1):
            for lb in range(1, n + 1):
                ys = [(digit(1 + k) if k < lb else zero) + (digit(lb + 2 + k) if k < la else zero)
                      for k in range(n)]
                y_max = [9 * (k < lb) + 9 * (k < la) for k in range(n)]
                cs = [carry.zero()]
                for k in range(1, n + 1):  # c_k = [sum_{m<k} 10^m y_m >= 10^k], unmasked
                    q = sum((ys[m] * 10.0 ** m for m in range(k)), zero)
                    q_max = sum(y_max[m] * 10 ** m for m in range(k))
                    cs.append(carry.step(q - 10.0 ** k * const) if 10 ** k <= q_max
                              else carry.zero())
                cs.append(carry.zero())
                blocks.append([(ys[k] if k < n else zero, cs[k] - 10.0 * cs[k + 1])
                               for k in reversed(range(n + 1))])
                # penalties, each >= 0 and 0 exactly for this shape: a "," at offset lb + 1,
                # none before it, none among the la digits after it, and beyond them a "," or
                # the start of the text (offset lb + 1 + la reads position 0 itself)
                base = (const - is_sep(lb + 1)) + sum((is_sep(m) for m in range(1, lb + 1)), zero)
                base = base + sum((is_sep(m) for m in range(lb + 2, lb + 2 + la)), zero)
                m0 = lb + 1 + la
                penalties = [base + (const - is_sep(m0 + 1)),
                             base + 2.0 * where(m0) - unit(nz - 1) + m0 * const]
                s_max = sum(y_max[m] * 10 ** m for m in range(n))
                for pen in penalties:
                    (here,) = mask.masked(zero, 0, -pen, [0])
                    start = start + float(BLOCK * (len(blocks) - 1) + n + 1) * here
                    for st in mask.masked(sum((ys[m] * 10.0 ** m for m in range(n)), zero),
                                          s_max, -(s_max + 1.0) * pen,
                                          [10 ** j for j in range(1, n + 1) if 10 ** j <= s_max]):
                        count = count + st
        carry.emit(z)
        flags = mask.emit(z)  # 0/1 steps
        nc, nm = len(carry.rows), len(mask.rows)
        # the table: BLOCK entries per shape (the digits D_n .. D_0, a spare 0), then a spare
        n_entries = BLOCK * len(blocks) + 1
        tab = np.zeros((nz + nc + 1, n_entries))
        for bi, entries in enumerate(blocks):
            for slot, (y, c) in enumerate(entries):
                col = BLOCK * bi + slot
                tab[:nz, col] = y[:-1]
                tab[nz:nz + nc, col] = 0.5 * c[:nc]
                tab[-1, col] = y[-1] + c[-1] + 0.5 * c[:nc].sum()
        at_sep = tw.attend_argmax_where(sep, i, tw.linear(tw.concat(z, carry.signs, one), tab),
                                        (0.0, MAX_LEN - 1.0))
        # start = BLOCK b + n + 1 - count (the first digit), and count itself
        start = start - count
        counted = tw.linear(flags, np.stack([start[:nm], count[:nm]], axis=1),
                            [start[-1], count[-1]])
        start = tw.attend_argmax_where(sep, i, tw.slice(counted, 0, 1), (0.0, MAX_LEN - 1.0))
        count = tw.attend_argmax_where(sep, i, tw.slice(counted, 1, 1), (0.0, MAX_LEN - 1.0))
        t = tw.subtract(i, c1)
        index = tw.add(start, t)
        # digit v scores s (2 v x - v^2) for the entry x: one dynamic_extract per digit
        digits = digit_logits(at_sep, index, n_entries, VOCAB)
        # "," at t = count (t >= count and not t >= count + 1); the end token at t = 0 for a
        # 5-digit sum (count - 5 - 10 t >= 0)
        # (positions and counts are integers: see INTEGER_FORMS)
        marks = tw.accept_error(tw.compare(tw.linear(tw.concat(t, count), [[1.0, 1.0, -10.0], [-1.0, -1.0, 1.0]],
                                     [0.25, -0.75, -(n + 1.0) + 0.25]), 0.0, 0.5), INTEGER_FORMS)
        rest = VOCAB[10:]
        mw = np.zeros((3, len(rest)))
        mb = np.full(len(rest), -FLAG_SCALE)
        mw[0, rest.index(",")], mw[1, rest.index(",")] = FLAG_SCALE, -FLAG_SCALE
        mw[2, rest.index(END)], mb[rest.index(END)] = 2.0 * FLAG_SCALE, FLAG_SCALE
        tw.output("logits", tw.concat(digits + [tw.linear(marks, mw, mb)]))
    return g.module


def build() -> TokenProgram:
    return TokenProgram(
        name="fibonacci", vocab=VOCAB, end=END, module=build_graph(), max_len=MAX_LEN,
        max_answer=MAX_ANSWER, normalize=normalize, reference=reference, sample=sample,
        geometry=Geometry(d=1024, d_head=64, d_hidden=4096),
        anchor=Anchor(greedy=8, cpsat=6, d=None),
        description="Fibonacci-style sequence from two seeds: 0,1 -> 1,2,3,5,8,...,6765, "
                    "(library ops)")
