"""balanced_parens, written in primitives: "([]{})=" -> "yes", "([)]=" -> "no".

The depth after each position is (i + 1) times the prefix mean of the bracket deltas (one
mean head, one integer-times-real sandwich); its square is a table sandwich. For every closer,
one head reads the kind of the latest opener whose depth after it equals the closer's depth
before it (logits G (2 q D_j - D_j^2) + an opener bonus + a recency tilt); a position is bad
when a closer's kind differs, when the depth is negative, or when it is not zero at "=";
"any bad so far" is a recency read of the bad flag; the answer is spelled from equals/and
sandwiches on the step t = i - pos("=").
"""

from __future__ import annotations

import numpy as np

from twdialect import ops as tw

from tw_examples import balanced_parens as bundled
from tw_examples.primitive import common as C
from tw_examples.primitive import prims as P
from tw_examples.token_program import Anchor, Geometry, TokenProgram

OPENERS, CLOSERS = bundled.OPENERS, bundled.CLOSERS
VOCAB = bundled.VOCAB
END = bundled.END
MAX_LEN = bundled.MAX_LEN
SPAN = bundled.MAX_BRACKETS + 1  # |depth| <= SPAN everywhere that matters


def build_graph():
    def delta(c):
        return float(c in OPENERS) - float(c in CLOSERS)

    def kind(c):
        for k in range(3):
            if c in (OPENERS[k], CLOSERS[k]):
                return float(k + 1)
        return 0.0

    with tw.Graph("main") as g:
        d, kd, is_open, is_close, is_eq = C.embed(
            VOCAB, [delta, kind, C.flag(OPENERS), C.flag(CLOSERS), C.flag("=")])
        pos = P.pos_encoding(MAX_LEN)
        mean = P.attend_mean(d)
        n = P.add_const(pos.index, 1.0)
        depth = P.multiply_int_real(n, mean, MAX_LEN, -1.0, 1.0)
        depth_c = P.clamp(depth, -1.0, float(SPAN))
        square = P.integer_table(depth_c, -1, SPAN, lambda v: v * v)
        # the closer's depth before it, q = depth + 1, against each opener's depth after it
        recency = P.RECENCY
        gain = recency * (MAX_LEN + 1)
        bonus = gain * (MAX_LEN + 1)
        query = tw.concat(tw.literal([1.0]), depth_c)
        keys = tw.concat(depth_c, square, is_open, pos.index)
        wq = np.zeros((2, 4))
        wq[0, 0] = 2.0 * gain  # 2 G q D_j with q = depth + 1
        wq[1, 0] = 2.0 * gain
        wq[0, 1] = -gain  # -G D_j^2
        wq[0, 2] = bonus  # openers first
        wq[0, 3] = recency  # the latest one
        opener_kind = tw.attn(query, keys, kd, wq, np.eye(4), np.eye(1), np.eye(1))
        mismatch = P.bool_and(is_close, P.bool_not(P.equals(P.subtract(opener_kind, kd), 0)))
        negative = P.bool_not(P.compare(depth_c, 0))
        open_at_end = P.bool_and(is_eq, P.bool_not(P.equals(depth_c, 0)))
        bad = P.bool_any_true([mismatch, negative, open_at_end])
        any_bad = P.get_prev_value(pos, bad, bad)
        ok = P.bool_not(any_bad)
        eq = P.get_prev_value(pos, pos.index, is_eq)
        t = P.subtract(pos.index, eq)
        step = [P.equals(t, k) for k in range(4)]
        flags = {"y": P.bool_and(ok, step[0]), "e": P.bool_and(ok, step[1]),
                 "s": P.bool_and(ok, step[2]), "n": P.bool_and(any_bad, step[0]),
                 "o": P.bool_and(any_bad, step[1]),
                 END: P.bool_or(P.bool_and(ok, step[3]), P.bool_and(any_bad, step[2]))}
        tw.output("logits", C.logits(VOCAB, None, flags))
    return g.module


def build() -> TokenProgram:
    return TokenProgram(
        name="balanced_parens", vocab=VOCAB, end=END, module=build_graph(), max_len=MAX_LEN,
        max_answer=4, normalize=bundled.normalize, reference=bundled.reference,
        sample=bundled.sample, geometry=Geometry(d=512, d_head=16, d_hidden=512),
        anchor=Anchor(greedy=33, cpsat=26, d=None),
        description="primitive-op bracket matching: ([]{})= -> yes")
