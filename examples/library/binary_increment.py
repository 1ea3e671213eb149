"""binary_increment, library-only: "1011=" -> "1100". Adds one to a binary number, keeping its
width (it grows by one digit only on overflow: "111=" -> "1000").

  layer 0 attention: n, the position of "=" (the input width), and, at every position,
                     whether "=" has been seen (attend_mean_where);
  layer 0 MLP:       "an input 0" (compare of is-0 minus seen), a +/-1 key for the next read;
  layer 1 attention: bit t of the input (t = i - n, attend_argmax_dot on [i, n, 1] .
                     [2 j, -2 j, -j^2]) and the latest input 0 (attend_argmax_where: its
                     position z, and whether there is one);
  layer 1 MLP:       one compare of six integer forms: bit t kept before z, 1 at z, 0 after;
                     with no 0 (all ones) "1" then zeros; the end token at t = n (+1 on
                     overflow); the logits are a linear map of those steps.

Floor 2 layers, as the hand-tuned program (the anchor compiler needs 22 greedy / 17 CP-SAT).
"""

from __future__ import annotations

import numpy as np

from tw_examples.binary_increment import MAX_BITS, MAX_LEN, PATTERN, reference, sample
from tw_examples.token_program import Anchor, Geometry, TokenProgram, check_regex
from twdialect import ops as tw

VOCAB = "01=$"
END = "$"
BIT_SCALE = 10.0
FLAG_SCALE = 100.0 * BIT_SCALE


def normalize(prompt: str) -> str:
    """Only validates: the prompt as typed, with a missing trailing '=' appended."""
    check_regex("binary_increment", PATTERN, prompt, f"'1011=' (1-{MAX_BITS} bits)")
    return prompt if prompt.endswith("=") else prompt + "="


def build_graph():
    # token features: is "0", is "1", "=" as a +/-1 boolean, "=" as 0/1, the constant 1
    table = np.array([[c == "0", c == "1", 2.0 * (c == "=") - 1.0, c == "=", 1.0]
                      for c in VOCAB], dtype=np.float64)
    with tw.Graph("main") as g:
        tok = tw.embedding("tokens", table)
        pos = tw.pos_encoding(2, MAX_LEN)
        i = tw.slice(pos, 0, 1)
        is_eq = tw.slice(tok, 2, 1)
        # [n, 1]: the position of "=" (and the constant 1 the next query needs)
        width = tw.attend_mean_where(is_eq, tw.concat(i, tw.slice(tok, 4, 1)))
        seen = tw.attend_mean_where(is_eq, tw.slice(tok, 3, 1))  # 1 once "=" is seen, else 0
        input_zero = tw.compare(tw.subtract(tw.slice(tok, 0, 1), seen), 0.5, 0.5)
        # bit t = the token at i - n: query [i, n, 1] . key [2 j, -2 j, -j^2] = 2 t j - j^2
        key = tw.linear(tw.slice(pos, 0, 2), [[2.0, -2.0, 0.0], [0.0, 0.0, -1.0]])
        bit = tw.attend_argmax_dot(tw.concat(i, width), key, tw.slice(tok, 1, 1))
        # [z, found]: the latest input 0 and whether there is one (+/-1)
        zero = tw.attend_argmax_where(input_zero, i, tw.concat(i, input_zero),
                                      (0.0, MAX_LEN - 1.0))
        # integer forms over x = [i, n, 1, bit, z, found]; t = i - n, all = (1 - found) / 2
        m = 2.0 * MAX_LEN  # beyond any |z - t|
        t = np.array([1.0, -1.0, 0.0, 0.0, 0.0, 0.0])
        z = np.array([0.0, 0.0, 0.0, 0.0, 1.0, 0.0])
        bit_v = np.array([0.0, 0.0, 0.0, 1.0, 0.0, 0.0])
        n = np.array([0.0, 1.0, 0.0, 0.0, 0.0, 0.0])
        one = np.array([0.0, 0.0, 1.0, 0.0, 0.0, 0.0])
        all_ones = (one - np.array([0.0, 0.0, 0.0, 0.0, 0.0, 1.0])) / 2.0
        forms = [
            m * bit_v + z - t - one - m * one - m * all_ones,  # bit kept: bit = 1 and t < z
            z - t - m * all_ones,  # t <= z (some 0)
            z - t - one - m * all_ones,  # t < z
            -t - m * (one - all_ones),  # all ones, t = 0: the leading 1
            t - n - all_ones,  # t >= n (+1 on overflow)
            t - n - all_ones - one,  # t > n (+1 on overflow)
        ]
        w = np.stack(forms, axis=1)
        steps = tw.compare(tw.linear(tw.concat(i, width, bit, zero), w,
                                     np.full(len(forms), 0.25)), 0.0, 0.5)
        # value = [kept] + [t == z] + [leading 1] (0/1 each, at most one set); end = [t == n']
        # as +/-1 steps: value = (s0 + 1) / 2 + (s1 - s2) / 2 + (s3 + 1) / 2
        value = np.array([0.5, 0.5, -0.5, 0.5, 0.0, 0.0])
        end = np.array([0.0, 0.0, 0.0, 0.0, 0.5, -0.5])
        lw = np.zeros((len(forms), len(VOCAB)))
        lb = np.full(len(VOCAB), -3.0 * FLAG_SCALE)
        # "1" scores s (2 x - 1) and "0" scores 0 for the bit x (argmax is the bit, by s)
        lw[:, VOCAB.index("1")] = 2.0 * BIT_SCALE * value
        lb[VOCAB.index("1")] = BIT_SCALE  # s (2 * 1 - 1): the constant part of value is 1
        lb[VOCAB.index("0")] = 0.0
        lw[:, VOCAB.index(END)] = 2.0 * FLAG_SCALE * end
        lb[VOCAB.index(END)] = -FLAG_SCALE
        tw.output("logits", tw.linear(steps, lw, lb))
    return g.module


def build() -> TokenProgram:
    return TokenProgram(
        name="binary_increment", vocab=VOCAB, end=END, module=build_graph(), max_len=MAX_LEN,
        max_answer=MAX_BITS + 2, normalize=normalize, reference=reference, sample=sample,
        geometry=Geometry(d=512, d_head=64, d_hidden=2048),
        anchor=Anchor(greedy=22, cpsat=17, d=512),
        description="binary number plus one, same width unless it overflows: 1011= -> 1100 "
                    "(library ops)")
