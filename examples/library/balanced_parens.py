"""balanced_parens, library-only: "([]{})=" -> "yes", "([)]=" -> "no". Brackets of three kinds:
the string is balanced when every closer closes the latest still-open bracket, of its own kind,
and nothing stays open.

  layer 0 attention: m, the mean bracket delta (+1 open, -1 close) over positions 0..i, and
                     p_eq, the position of "=" (attend_mean_where);
  layer 0 MLP:       the running count: the depth D = (i + 1) m as a sum of clamps (below);
  layer 1 MLP:       D^2 (piecewise_linear through the integers) and the flag "depth below 0
                     here, or a non-zero depth at =" (piecewise_linear of D + 200 [=]);
  layer 2 attention: for every closer, the kind of the latest opener whose depth after it equals
                     the closer's depth before it, q = D + 1 (attend_argmax_dot: the score
                     G (2 q D_j - D_j^2) + 2 G [opener_j] + j peaks there);
  layer 2 MLP:       bad = the flag, or a closer whose opener has another kind (piecewise_linear
                     of one integer code);
  layer 3 attention: "any bad position so far" (attend_mean_where over the bad positions);
  layer 3 MLP:       the letters of "yes" / "no" for step t = i - p_eq, then the end token
                     (map_to_table of t + 10 any_bad).

The running count (no product op needed): with v = m + 1 in [0, 2] and k_r = i + 1 - r,
relu(v + 2 k_r) is v + 2 k_r for r <= i + 1 and 0 for r > i + 1 (v + 2 k_r <= v - 2 <= 0), so
sum_{r=1..N} relu(v + 2 k_r) = (i + 1) v + i (i + 1), and D = that sum - i^2 - 2 i - 1, a linear
form of the clamps and the position features [i, i^2]. One `tw.clamp` of an N-wide linear form
(the upper bound is never reached) computes the relus: one MLP sublayer after the mean's head.

Floor 4 layers, as the hand-tuned balanced_parens.
"""

from __future__ import annotations

import numpy as np

from tw_examples.balanced_parens import (
    ANSWERS,
    CLOSERS,
    MAX_BRACKETS,
    OPENERS,
    PATTERN,
    reference,
    sample,
)
from tw_examples.token_program import Anchor, Geometry, TokenProgram, char_table, check_regex
from tw_examples.library.adder import INTEGER_FORMS
from twdialect import ops as tw

VOCAB = OPENERS + CLOSERS + "=yesno$"
END = "$"
MAX_LEN = 64
SPAN = MAX_LEN  # the running count is exact at positions i < SPAN
MAX_DEPTH = MAX_BRACKETS + 1
GAIN = 64  # per unit of depth mismatch: above the largest recency difference (positions)
EQ_SHIFT = 200.0  # D + EQ_SHIFT [=] separates "=" from the brackets in one code
SCALE = 10.0  # logit margin of the emitted character

# Feature columns of the token embedding.
DELTA = 0  # +1 opener, -1 closer, 0 otherwise
OPENER = 1  # 0/1
CLOSER = 2  # 0/1
EQ = 3  # 0/1
EQ_PM = 4  # +/-1
KIND = 5  # 0, 1, 2 for (), [], {} (0 otherwise)
ONE = 6  # +1 everywhere: "every position is valid" for a plain prefix mean


def normalize(prompt: str) -> str:
    """Only validates: the prompt as typed, with a missing trailing '=' appended."""
    check_regex("balanced_parens", PATTERN, prompt,
                f"'([]{{}})=' (1-{MAX_BRACKETS} of ()[]{{}})")
    return prompt if prompt.endswith("=") else prompt + "="


def _features(c: str) -> list[float]:
    kind = (OPENERS.index(c) if c in OPENERS else CLOSERS.index(c) if c in CLOSERS else 0)
    return [float(c in OPENERS) - float(c in CLOSERS), float(c in OPENERS),
            float(c in CLOSERS), float(c == "="), 1.0 if c == "=" else -1.0, float(kind), 1.0]


def _answer_table() -> tuple[list[int], np.ndarray]:
    """(codes, logits) for the code t + 10 any_bad: "yes" then the end token at t = 0..3, "no"
    then the end token at 10..12."""
    return char_table([(base + t, ch) for base, word in ((0, ANSWERS[0]), (10, ANSWERS[1]))
                       for t, ch in enumerate(word + END)], VOCAB, SCALE)


def build_graph():
    table = np.array([_features(c) for c in VOCAB])
    with tw.Graph("main") as g:
        tok = tw.embedding("tokens", table)
        pos = tw.pos_encoding(2, MAX_LEN)
        i = tw.slice(pos, 0, 1)
        everywhere = tw.slice(tok, ONE, 1)
        mean = tw.attend_mean_where(everywhere, tw.slice(tok, DELTA, 1))
        p_eq = tw.attend_mean_where(tw.slice(tok, EQ_PM, 1), i)

        # layer 0 MLP: the depth D_i (see the module docstring)
        r = np.arange(1, SPAN + 1, dtype=np.float64)
        z = tw.linear(tw.concat(mean, i), np.vstack([np.ones(SPAN), 2.0 * np.ones(SPAN)]),
                      1.0 + 2.0 * (1.0 - r))
        hinges = tw.clamp(z, 0.0, 2.0 * SPAN + 4.0)
        depth = tw.linear(tw.concat(hinges, pos),
                          np.vstack([np.ones((SPAN, 1)), [[-2.0]], [[-1.0]]]), [-1.0])

        # layer 1 MLP: D^2, and bad_depth = [D < 0] at a bracket, [D != 0] at "="
        ks = np.arange(-MAX_DEPTH, MAX_DEPTH + 1, dtype=np.float64)
        # (depth is an integer, though the range analysis cannot prove it: see INTEGER_FORMS)
        square = tw.accept_error(tw.piecewise_linear(depth, ks, ks * ks), INTEGER_FORMS)
        code = tw.linear(tw.concat(depth, tw.slice(tok, EQ, 1)), [[1.0], [EQ_SHIFT]])
        # (so is code)
        bad_depth = tw.accept_error(tw.piecewise_linear(
            code, [-1.0, 0.0, MAX_DEPTH, EQ_SHIFT - MAX_DEPTH, EQ_SHIFT - 1.0, EQ_SHIFT,
                   EQ_SHIFT + 1.0],
            [1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0]), INTEGER_FORMS)

        # layer 2 attention: the kind of the matching opener. Query [D_i, 1], key
        # [2 G D_j, 2 G D_j - G D_j^2 + 2 G opener_j + j]: the score is
        # G (2 q D_j - D_j^2) + 2 G opener_j + j with q = D_i + 1, i.e. -G (D_j - q)^2 plus
        # a per-query constant: the latest opener at depth q beats any other opener by >= 1
        # (recency) or >= G - (i - j) (depth), and any non-opener by >= 2 G - (i - j).
        keys = tw.concat(depth, square, tw.slice(tok, OPENER, 1), i)
        key_form = np.array([[2.0 * GAIN, 2.0 * GAIN], [0.0, -GAIN], [0.0, 2.0 * GAIN],
                             [0.0, 1.0]])
        match = tw.attend_argmax_dot(tw.concat(depth, tw.literal([1.0])),
                                     tw.linear(keys, key_form), tw.slice(tok, KIND, 1))

        # layer 2 MLP: bad = 1 where bad_depth, or a closer whose opener's kind differs.
        # code = match - kind + 10 (1 - closer) + 40 bad_depth: in {-2..2} at a closer (bad
        # unless 0), in [8, 12] elsewhere, >= 36 with bad_depth.
        local = tw.linear(tw.concat(tw.slice(tok, CLOSER, 1), tw.slice(tok, KIND, 1)),
                          [[-10.0], [-1.0]], [10.0])
        mismatch_code = tw.add(match, tw.add(tw.multiply_const(bad_depth, 40.0), local))
        # 10 bad, so that any_bad below comes out as 10 or 0 with no linear after the head
        # (an integer code, read through attention: see INTEGER_FORMS)
        bad = tw.accept_error(
            tw.piecewise_linear(mismatch_code, [-1.0, 0.0, 1.0, 2.0, 8.0, 12.0, 36.0],
                                [10.0, 0.0, 10.0, 10.0, 0.0, 0.0, 10.0]), INTEGER_FORMS)

        # layer 3: any bad position so far (10, else the mean of zeros), then the answer
        any_bad = tw.attend_mean_where(tw.linear(bad, [[0.2]], [-1.0]), bad)
        step = tw.linear(tw.concat(i, p_eq), [[1.0], [-1.0]])  # t = i - p_eq
        codes, rows = _answer_table()
        answer = tw.add(any_bad, step)
        tw.output("logits", tw.map_to_table(answer, codes, rows, default=-SCALE))
    return g.module


def build() -> TokenProgram:
    return TokenProgram(
        name="balanced_parens", vocab=VOCAB, end=END, module=build_graph(), max_len=MAX_LEN,
        max_answer=4, normalize=normalize, reference=reference, sample=sample,
        geometry=Geometry(d=1024, d_head=64, d_hidden=4096),
        anchor=Anchor(greedy=33, cpsat=26, d=None),
        description="is a string of ()[]{} balanced? ([]{})= -> yes (library ops)")
