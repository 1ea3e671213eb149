"""sort_digits, library-only: "3141=" -> "1134". The prompt's digits in ascending order.

No counts are formed: every test is a comparison of prefix means. At output step t (the
position i = p_eq + t, where p_eq is the position of "="), the positions j <= i hold the n
input digits, "=", and the t digits already written, which are the t smallest input digits.
With C_v = #{input digits <= v}, the digits <= v seen so far number
total_v = C_v + min(C_v, t), so

    C_v <= t   <=>   total_v <= 2 t   <=>   2 t / (i + 1) - total_v / (i + 1) >= 0,

and both sides are prefix means: total_v / (i + 1) is the mean of [token <= v] (digits only),
and t / (i + 1) is the mean of [j > p_eq], i.e. of "= seen at j" minus the mean of [token is =].
The digit to write is #{v < 9 : C_v <= t}; the end token comes once C_9 = n <= t.

  layer 0 attention: the prefix means of [token <= v] (v = 0..9) and of [token is "="]
                     (attend_mean_where over all positions), and "= seen" (a 0/1 flag: the
                     mean of [token is "="] over the "=" positions; 0 while there is none);
  layer 1 attention: the prefix mean of "= seen";
  layer 1 MLP:       ten comparisons (tw.compare of one 10-wide linear form of the means);
                     the logits are a linear map of the ten +/-1 flags (folded into the MLP).

Floor 2 layers, as the hand-tuned sort_digits (which multiplies means by n + 1 with a
hand-built MLP instead).
"""

from __future__ import annotations

import numpy as np

from tw_examples.sort_digits import MAX_DIGITS, PATTERN, reference, sample
from tw_examples.token_program import Anchor, Geometry, TokenProgram, check_regex
from twdialect import ops as tw

VOCAB = "0123456789=$"
END = "$"
MAX_LEN = 64
DIGIT_SCALE = 10.0  # the best digit's logit beats the next by this much
END_SCALE = 100.0 * DIGIT_SCALE  # above every digit logit (digit 9 scores 81 DIGIT_SCALE)

# Feature columns of the token embedding.
LE = 0  # [token <= v] for v = 0..9 (digits only), 10 columns
EQ = 10  # [token is "="] (0/1)
EQ_PM = 11  # the same as a +/-1 boolean
ONE = 12  # +1 everywhere: "every position is valid" for a plain prefix mean


def normalize(prompt: str) -> str:
    """Only validates: the prompt as typed, with a missing trailing '=' appended."""
    check_regex("sort_digits", PATTERN, prompt, f"'3141=' (1-{MAX_DIGITS} digits)")
    return prompt if prompt.endswith("=") else prompt + "="


def _features(c: str) -> list[float]:
    le = [float(c.isdigit() and int(c) <= v) for v in range(10)]
    return le + [float(c == "="), 1.0 if c == "=" else -1.0, 1.0]


def build_graph():
    table = np.array([_features(c) for c in VOCAB])
    with tw.Graph("main") as g:
        tok = tw.embedding("tokens", table)
        tw.pos_encoding(2, MAX_LEN)  # the graph's position source (read by no op)
        everywhere = tw.slice(tok, ONE, 1)
        eq = tw.slice(tok, EQ, 1)
        # prefix means: total_v / (i + 1) for v = 0..9, then 1 / (i + 1) (one "=" so far)
        means = tw.attend_mean_where(everywhere, tw.concat(tw.slice(tok, LE, 10), eq))
        seen = tw.attend_mean_where(tw.slice(tok, EQ_PM, 1), eq)  # 1 from "=" on, else 0
        after = tw.attend_mean_where(everywhere, seen)  # (t + 1) / (i + 1)
        # x_v = 2 t / (i + 1) - total_v / (i + 1) = 2 after - 2 mean_eq - mean_v: a multiple
        # of 1 / (i + 1) >= 1 / MAX_LEN, so the step sits between -1 / MAX_LEN and 0
        w = np.zeros((12, 10))
        w[:10, :] = -np.eye(10)
        w[10, :] = -2.0
        w[11, :] = 2.0
        x = tw.linear(tw.concat(means, after), w)
        flags = tw.compare(x, -0.5 / MAX_LEN, ramp=0.25 / MAX_LEN)  # +1 iff C_v <= t
        # digit e = #{v < 9 : flag_v} = sum (flag_v + 1) / 2; digit v scores s (2 v e - v^2);
        # the end token scores +-END_SCALE with flag_9 (all digits written)
        wl = np.zeros((10, len(VOCAB)))
        bl = np.full(len(VOCAB), -2.0 * END_SCALE)
        for v in range(10):
            k = VOCAB.index(str(v))
            wl[:9, k] = DIGIT_SCALE * v  # 2 s v * (flag + 1) / 2
            bl[k] = DIGIT_SCALE * v * 9 - DIGIT_SCALE * v * v
        wl[9, VOCAB.index(END)] = END_SCALE
        bl[VOCAB.index(END)] = 0.0
        tw.output("logits", tw.linear(flags, wl, bl))
    return g.module


def build() -> TokenProgram:
    return TokenProgram(
        name="sort_digits", vocab=VOCAB, end=END, module=build_graph(), max_len=MAX_LEN,
        max_answer=MAX_DIGITS + 1, normalize=normalize, reference=reference, sample=sample,
        geometry=Geometry(d=1024, d_head=64, d_hidden=4096),
        anchor=Anchor(greedy=None, cpsat=None, d=None),
        description="digits in ascending order: 3141= -> 1134 (library ops)")
