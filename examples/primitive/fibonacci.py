"""fibonacci, written in primitives: "0,1" -> "1,2,3,5,8,...,6765," (seeds 0-9999; the end
token instead of a 5-digit term).

Heads find the latest separator c1 (the term being written starts after it), the one before
(c1 as seen from c1 - 1) and the one before that; the two previous terms' digits are read
relative to them (gated to 0 beyond each term's length), added by a ripple-carry chain,
counted by an OR fold, and spelled MSB first at step t = i - c1, then ",".
"""

from __future__ import annotations

from twdialect import ops as tw

from tw_examples import fibonacci as bundled
from tw_examples.primitive import common as C
from tw_examples.primitive import prims as P
from tw_examples.token_program import Anchor, Geometry, TokenProgram

VOCAB = bundled.VOCAB
END = bundled.END
DIGITS = bundled.TERM_DIGITS
MAX_LEN = bundled.MAX_LEN


def build_graph():
    with tw.Graph("main") as g:
        digit, is_sep = C.embed(VOCAB, [C.digit_value, C.flag(",^")])
        pos = P.pos_encoding(MAX_LEN)
        c1 = P.get_prev_value(pos, pos.index, is_sep)
        c2 = P.attend_to_position(pos, c1, c1, offset=-1.0)
        c3 = P.attend_to_position(pos, c1, c2, offset=-1.0)
        last = C.read_digits(pos, digit, c1, c2, DIGITS)
        before = C.read_digits(pos, digit, c2, c3, DIGITS)
        total = C.ripple_add(last, before)
        count = C.digit_count(total)
        t = P.subtract(pos.index, c1)
        value, past_digits, _ = C.emit_number(total, count, t)
        too_long = P.compare(count, DIGITS + 1)
        at_count = P.equals(P.subtract(t, count), 0)
        flags = {",": P.bool_and(at_count, P.bool_not(too_long)),
                 END: P.bool_and(too_long, P.equals(t, 0))}
        tw.output("logits", C.logits(VOCAB, value, flags))
    return g.module


def build() -> TokenProgram:
    return TokenProgram(
        name="fibonacci", vocab=VOCAB, end=END, module=build_graph(), max_len=MAX_LEN,
        max_answer=bundled.MAX_ANSWER, normalize=bundled.normalize,
        reference=bundled.reference, sample=bundled.sample,
        geometry=Geometry(d=512, d_head=16, d_hidden=512),
        anchor=Anchor(greedy=9, cpsat=7, d=512),
        description="primitive-op Fibonacci-style sequence: 0,1 -> 1,2,3,5,8,...")
