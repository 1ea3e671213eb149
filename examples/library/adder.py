"""adder, library-only: "7+456=" -> "463". Two numbers of 1-3 digits as typed (no padding);
the sum in decimal (up to 1998).

The graph parses the prompt itself. At the "=" (position e) the operands end at fixed
offsets: b_k at e - 1 - k while k < lb, a_k at e - lb - 2 - k while k < la, where the
prompt's shape (la, lb) = (p, e - p - 1) comes from p, the position of "+". So "=" can add
as soon as it knows the shape: for each of the 9 shapes c, a quantity Q_c (a digit column, a
partial sum) is an integer form of the offset reads, and the row trick
[shape = c and Q_c >= T] = [Q_c + M x >= T + M x_c] - [Q_c + M x >= Q_max + 1 + M x_c]
(x = 4 la + lb, M above every Q_max) masks it to its shape with two steps, in one MLP.

  layer 0 attention: the tokens at offsets 1..7 (attend_to_offset), p and e, the positions
                     of "+" and "=" (attend_mean_where);
  layer 0 MLP:       two compares of integer forms: for every shape, the masked column sums
                     a_k + b_k (as sums of unit steps) and carries, so the digits
                     D_k = y_k + c_k - 10 c_(k+1) are linear in the steps; and the masked
                     digit-count steps;
  layer 1 attention: at "=" (attend_mean_where): the digits (one linear of the first compare's
                     +/-1 outputs, so no large hidden values enter the sums) and 4 - count;
  layer 1 MLP:       the logits: for each character, its score at entry 4 - count + t of the
                     table [D_3 .. D_0, end], t = i - e (one dynamic_extract per character, so
                     no linear map follows the last MLP).

Floor 2 layers, as the hand-tuned adder (which zero-pads the operands on the host instead).
"""

from __future__ import annotations

import numpy as np

from tw_examples.adder import reference, sample
from tw_examples.token_program import Anchor, Geometry, TokenProgram, check_regex
from twdialect import ops as tw

VOCAB = "0123456789+=$"
END = "$"
WIDTH = 3
MAX_LEN = 16
PATTERN = r"(\d{1,3})\+(\d{1,3})=?"
DIGIT_SCALE = 10.0  # the best digit's logit beats the next by this much
# The float32 error accepted for a compare of integer forms over real-valued ranges
# (`tw.accept_error`): its operands are integers, whose sums float32 adds exactly.
INTEGER_FORMS = 16.0
FLAG_SCALE = 100.0 * DIGIT_SCALE  # above every digit logit


def normalize(prompt: str) -> str:
    """Only validates: the prompt as typed, with a missing trailing '=' appended."""
    check_regex("adder", PATTERN, prompt, "'123+456=' (1-3 digit operands)")
    return prompt if prompt.endswith("=") else prompt + "="


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


def digit_logits(entries, index, n_entries: int, vocab: str = VOCAB) -> list:
    """The logits of the ten digit characters at step `index` of `entries` (digit values): one
    dynamic_extract per digit v of the table of its scores s (2 v x - v^2), so every logit is
    an MLP output (no linear map after the last MLP)."""
    w, b = logit_rows(vocab)
    return [tw.dynamic_extract(tw.linear(entries, np.eye(n_entries) * w[0, vocab.index(str(v))],
                                         np.full(n_entries, b[vocab.index(str(v))])),
                               index, n_entries, max_abs=4096.0)
            for v in range(10)]


class Steps:
    """Unit steps [form >= 0] of integer forms over the columns of one value z (each form: the
    weights, then the constant), gathered into ONE tw.compare, i.e. one MLP sublayer.

    Each step is returned as a linear form over the steps' 0/1 outputs (a vector of
    `capacity` coefficients, then the constant), so sums of steps are plain vector sums;
    `emit` builds the compare and the 0/1 map, `trim` cuts a form to the steps emitted."""

    def __init__(self, n_in: int, capacity: int = 4096):
        self.n_in, self.capacity = n_in, capacity
        self.rows: list[np.ndarray] = []
        self.signs = None  # the compare's +/-1 outputs, once emitted

    def zero(self, c: float = 0.0) -> np.ndarray:
        out = np.zeros(self.capacity + 1)
        out[-1] = c
        return out

    def step(self, form: np.ndarray) -> np.ndarray:
        self.rows.append(np.asarray(form, dtype=np.float64))
        out = self.zero()
        out[len(self.rows) - 1] = 1.0
        return out

    def masked(self, q: np.ndarray, q_max: int, shift: np.ndarray, thresholds) -> list:
        """[shape = c and q >= T] for each T: q in [0, q_max] an integer form and shift an
        integer form that is 0 for shape c and otherwise below -q_max or above q_max (e.g.
        M (x - x_c) for an integer shape id x and M > q_max), so that q + shift of another
        shape is below every T or above q_max: the steps of q + shift at T and at q_max + 1."""
        thresholds = list(thresholds)
        if not thresholds:
            return []
        lift = q + shift
        upper = self.step(lift - self._const(q_max + 1.0))
        return [self.step(lift - self._const(float(t))) - upper for t in thresholds]

    def _const(self, c: float) -> np.ndarray:
        out = np.zeros(self.n_in + 1)
        out[-1] = c
        return out

    def emit(self, z):
        """The steps' 0/1 outputs (s + 1) / 2, s = compare(form + 1/4, 0, ramp 1/2): the
        threshold and its ramp zone lie between the integers, so integer forms are exact
        (`signs` keeps s)."""
        w = np.stack([r[:-1] for r in self.rows], axis=1)
        b = np.array([r[-1] for r in self.rows]) + 0.25
        n = len(self.rows)
        # The forms are integers (sums of digits read by attention, which the range analysis
        # cannot prove integral), so float32 adds them exactly even where a real-valued form
        # of their magnitude would round: accept what decompose would refuse for reals.
        self.signs = tw.accept_error(tw.compare(tw.linear(z, w, b), 0.0, 0.5), INTEGER_FORMS)
        return tw.linear(self.signs, np.eye(n) * 0.5, np.full(n, 0.5))

    def trim(self, form: np.ndarray) -> tuple[np.ndarray, float]:
        """(coefficients over the emitted steps, constant)."""
        return form[:len(self.rows)], float(form[-1])


def build_graph():
    # token features: digit value, "+" and "=" as +/-1 booleans, the constant 1
    table = np.array([[float(c) if c.isdigit() else 0.0, 1.0 if c == "+" else -1.0,
                       1.0 if c == "=" else -1.0, 1.0] for c in VOCAB])
    with tw.Graph("main") as g:
        tok = tw.embedding("tokens", table)
        pos = tw.pos_encoding(2, MAX_LEN)
        i = tw.slice(pos, 0, 1)
        digit = tw.slice(tok, 0, 1)
        one = tw.slice(tok, 3, 1)
        n_reads = 2 * WIDTH + 1
        reads = [tw.attend_to_offset(pos, digit, m) for m in range(1, n_reads + 1)]
        p = tw.attend_mean_where(tw.slice(tok, 1, 1), i)  # position of "+"
        # integer forms over z = [d(i-1) .. d(i-7), p, i] (then the constant)
        nz = n_reads + 2
        z = tw.concat(reads + [p, i])

        def unit(k):
            u = np.zeros(nz + 1)
            u[k] = 1.0
            return u

        const = unit(nz)
        shape = 3.0 * unit(n_reads) + unit(n_reads + 1) - const  # 4 la + lb = 3 p + i - 1
        big = 2048.0  # above every q_max (1998)
        steps, counts = Steps(nz), Steps(nz)
        digits = [steps.zero() for _ in range(WIDTH + 1)]  # D_0 .. D_3 over the steps
        count = counts.zero(1.0)  # 1 + [S >= 10] + [S >= 100] + [S >= 1000]
        for la in range(1, WIDTH + 1):
            for lb in range(1, WIDTH + 1):
                shift = big * (shape - (4 * la + lb) * const)
                ys, maxes = [], []
                for k in range(WIDTH):  # column k: a_k + b_k, each while within its operand
                    y = np.zeros(nz + 1)
                    if k < lb:
                        y += unit(k)  # b_k = d(i - 1 - k)
                    if k < la:
                        y += unit(lb + 1 + k)  # a_k = d(i - lb - 2 - k)
                    ys.append(y)
                    maxes.append(9 * ((k < la) + (k < lb)))
                for k in range(WIDTH):  # the masked column: sum_u [y >= u]
                    if maxes[k]:
                        for st in steps.masked(ys[k], maxes[k], shift, range(1, maxes[k] + 1)):
                            digits[k] += st
                for k in range(1, WIDTH + 1):  # carry c_k = [sum_{m<k} 10^m y_m >= 10^k]
                    q = sum(ys[m] * 10.0 ** m for m in range(k))
                    q_max = sum(maxes[m] * 10 ** m for m in range(k))
                    if 10 ** k <= q_max:
                        (st,) = steps.masked(q, q_max, shift, [10 ** k])
                        digits[k - 1] -= 10.0 * st
                        digits[k] += st
                # the digit count reads the whole sum: [S >= 10^j], j = 1, 2, 3 (a compare of
                # its own, whose only reader is the start index)
                thresholds = [10 ** j for j in range(1, WIDTH + 1) if 10 ** j <= q_max]
                for st in counts.masked(q, q_max, shift, thresholds):
                    count += st
        steps.emit(z)
        n = len(steps.rows)
        count_flags = counts.emit(z)  # 0/1 steps
        nc = len(counts.rows)
        is_eq = tw.slice(tok, 2, 1)
        # at "=": the digits D_3 .. D_0, one linear of [step signs s, 1] (a step is (s + 1) / 2)
        # read straight from the signs (no large hidden values enter the sums), and 4 - count
        tab = np.zeros((n + 1, WIDTH + 1))
        for slot, k in enumerate(reversed(range(WIDTH + 1))):
            c, c0 = steps.trim(digits[k])
            tab[:n, slot] = 0.5 * c
            tab[n, slot] = c0 + 0.5 * c.sum()
        entries = tw.attend_mean_where(is_eq, tw.linear(tw.concat(steps.signs, one), tab))
        start = tw.attend_mean_where(is_eq, tw.linear(count_flags, -count[:nc].reshape(-1, 1),
                                                      [WIDTH + 1 - count[-1]]))
        t = tw.subtract(i, tw.attend_mean_where(is_eq, i))  # t = i - e
        index = tw.add(start, t)
        # the logits, one dynamic_extract per character of a table of its scores over the
        # entries [D_3 .. D_0, end] (so every logit is an MLP output: no linear map after the
        # last MLP): digit v scores s (2 v x - v^2) for the digit x, the end token +W at the
        # end entry; "+" and "=" a constant -W
        w1, b1 = logit_rows(VOCAB)
        n_entries = WIDTH + 2
        cols = []
        for k, ch in enumerate(VOCAB):
            if ch.isdigit():
                sw = np.zeros((WIDTH + 1, n_entries))
                sw[:, :WIDTH + 1] = np.eye(WIDTH + 1) * w1[0, k]
                sb = np.append(np.full(WIDTH + 1, b1[k]), -FLAG_SCALE)
                cols.append(tw.dynamic_extract(tw.linear(entries, sw, sb), index, n_entries,
                                               max_abs=3.0 * FLAG_SCALE))
            elif ch == END:
                sb = np.append(np.full(WIDTH + 1, -FLAG_SCALE), FLAG_SCALE)
                cols.append(tw.dynamic_extract(tw.linear(entries, np.zeros((WIDTH + 1, n_entries)),
                                                         sb), index, n_entries,
                                               max_abs=3.0 * FLAG_SCALE))
            else:
                cols.append(tw.literal([-3.0 * FLAG_SCALE]))
        tw.output("logits", tw.concat(cols))
    return g.module


def build() -> TokenProgram:
    return TokenProgram(
        name="adder", vocab=VOCAB, end=END, module=build_graph(), max_len=MAX_LEN,
        max_answer=WIDTH + 2, normalize=normalize, reference=reference, sample=sample,
        geometry=Geometry(d=1024, d_head=64, d_hidden=4096),
        anchor=Anchor(greedy=15, cpsat=13, d=1024),
        description="sum of two numbers of up to 3 digits, e.g. 7+456= -> 463 (library ops)")
