"""sort_digits, written in primitives: "3141=" -> "1134".

At every position a mean head averages the indicators [digit <= v] (v = 0..8, token
features); at "=" the count C_v = #digits <= v is (i + 1) times that mean (one
integer-times-real sandwich per v). Every output position reads pos("=") and C_0..C_8 from
"=" (one recency head) and emits, at step t = i - pos("="), the digit #{v : C_v <= t}
(a compare per v, summed), then the end token at t = n.
"""

from __future__ import annotations

from twdialect import ops as tw

from tw_examples import sort_digits as bundled
from tw_examples.primitive import common as C
from tw_examples.primitive import prims as P
from tw_examples.token_program import Anchor, Geometry, TokenProgram

VOCAB = bundled.VOCAB
END = bundled.END
MAX_LEN = bundled.MAX_LEN
MAX_DIGITS = bundled.MAX_DIGITS


def build_graph():
    def at_most(v):
        return lambda c: float(c.isdigit() and int(c) <= v)

    with tw.Graph("main") as g:
        cols = C.embed(VOCAB, [C.flag("=")] + [at_most(v) for v in range(9)])
        is_eq, le = cols[0], cols[1:]
        pos = P.pos_encoding(MAX_LEN)
        n1 = P.add_const(pos.index, 1.0)
        means = P.attend_mean(tw.concat(le))
        counts = [P.multiply_int_real(n1, tw.slice(means, v, 1), MAX_DIGITS + 1, 0.0, 1.0)
                  for v in range(9)]
        fetched = P.get_prev_value(pos, tw.concat([pos.index] + counts), is_eq)
        n = tw.slice(fetched, 0, 1)
        t = P.subtract(pos.index, n)
        below = [P.compare_sum([t, tw.slice(fetched, 1 + v, 1)], [1.0, -1.0], 0, 1.0, 0.0)
                 for v in range(9)]
        value = P.sum_nodes(below)
        end = P.compare_sum([t, n], [1.0, -1.0], 0)
        tw.output("logits", C.logits(VOCAB, value, {END: end}))
    return g.module


def build() -> TokenProgram:
    return TokenProgram(
        name="sort_digits", vocab=VOCAB, end=END, module=build_graph(), max_len=MAX_LEN,
        max_answer=MAX_DIGITS + 1, normalize=bundled.normalize, reference=bundled.reference,
        sample=bundled.sample, geometry=Geometry(d=384, d_head=32, d_hidden=384),
        anchor=Anchor(greedy=26, cpsat=24, d=384),
        description="primitive-op digit sorter: 3141= -> 1134")
