"""binary_increment, written in primitives: "1011=" -> "1100" (width kept; "111=" -> "1000").

Heads find "=" (its position is the width n), whether "=" has been seen (so output zeros
are not taken for input zeros), the latest input "0" (its position z, and whether there is
one), and input bit t for output step t = i - n. The output bit is a select between
"all ones" (1 then zeros) and the normal case (bit t before z, 1 at z, 0 after), built from
compare/equals/cond_gate sandwiches; the end token comes at t = n (+1 on overflow).
"""

from __future__ import annotations

from twdialect import ops as tw

from tw_examples import binary_increment as bundled
from tw_examples.primitive import common as C
from tw_examples.primitive import prims as P
from tw_examples.token_program import Anchor, Geometry, TokenProgram

VOCAB = bundled.VOCAB
END = bundled.END
MAX_LEN = bundled.MAX_LEN


def build_graph():
    with tw.Graph("main") as g:
        bit, is_zero, is_eq = C.embed(VOCAB, [lambda c: float(c == "1"), C.flag("0"),
                                              C.flag("=")])
        pos = P.pos_encoding(MAX_LEN)
        n = P.get_prev_value(pos, pos.index, is_eq)
        seen_eq = P.get_prev_value(pos, is_eq, is_eq)  # +1 at and after "=", else -1
        input_zero = P.bool_and(is_zero, P.bool_not(seen_eq))
        latest = P.get_prev_value(pos, tw.concat(pos.index, input_zero), input_zero)
        z, found = tw.slice(latest, 0, 1), tw.slice(latest, 1, 1)
        t = P.subtract(pos.index, n)
        bit_t = P.attend_to_position(pos, bit, t)
        before_z = P.compare_sum([z, t], [1.0, -1.0], 1)  # t < z
        at_z = P.equals(P.subtract(t, z), 0)
        normal = P.dot([P.cond_gate(before_z, bit_t, 1.0), at_z], [1.0, 0.5], 0.5)
        overflow = P.to01(P.equals(t, 0))  # all ones: "1" then zeros
        value = P.select(found, normal, overflow, 1.0)
        end = P.equals(P.dot([t, n, found], [1.0, -1.0, 0.5], -0.5), 0)  # t = n + all_ones
        tw.output("logits", C.logits(VOCAB, value, {END: end}, digit_chars="01"))
    return g.module


def build() -> TokenProgram:
    return TokenProgram(
        name="binary_increment", vocab=VOCAB, end=END, module=build_graph(), max_len=MAX_LEN,
        max_answer=bundled.MAX_BITS + 2, normalize=bundled.normalize,
        reference=bundled.reference, sample=bundled.sample,
        geometry=Geometry(d=512, d_head=16, d_hidden=512),
        anchor=Anchor(greedy=20, cpsat=16, d=512),
        description="primitive-op binary increment: 1011= -> 1100")
