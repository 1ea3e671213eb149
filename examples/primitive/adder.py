"""adder, written in primitives: "123+45=" -> "168" (operands of 1-3 digits, no padding).

The graph parses the prompt itself: heads find "+" and "=" (get_prev_value of their
positions), read each operand digit relative to them (attend_to_position) and zero the
digits beyond an operand's length (compare + cond_gate); a ripple-carry chain adds the
digits column by column (compare sandwiches for the carries), an OR fold counts the
significant digits, and output step t = i - pos("=") picks digit count-1-t (equals +
cond_gate per digit) or the end token.
"""

from __future__ import annotations

import numpy as np

from twdialect import ops as tw

from tw_examples import adder as bundled
from tw_examples.primitive import common as C
from tw_examples.primitive import prims as P
from tw_examples.token_program import Anchor, Geometry, TokenProgram, check_regex

VOCAB = bundled.VOCAB
END = bundled.END
WIDTH = 3
MAX_LEN = 16


def normalize(prompt: str) -> str:
    m = check_regex("adder", r"(\d{1,3})\+(\d{1,3})=?", prompt, "'123+456=' (1-3 digit operands)")
    return f"{m.group(1)}+{m.group(2)}="


def build_graph():
    with tw.Graph("main") as g:
        digit, is_plus, is_eq = C.embed(VOCAB, [C.digit_value, C.flag("+"), C.flag("=")])
        pos = P.pos_encoding(MAX_LEN)
        plus = P.get_prev_value(pos, pos.index, is_plus)
        eq = P.get_prev_value(pos, pos.index, is_eq)
        a = C.read_digits(pos, digit, plus, None, WIDTH)
        b = C.read_digits(pos, digit, eq, plus, WIDTH)
        total = C.ripple_add(a, b)
        count = C.digit_count(total)
        t = P.subtract(pos.index, eq)
        value, end, _ = C.emit_number(total, count, t)
        tw.output("logits", C.logits(VOCAB, value, {END: end}))
    return g.module


def build() -> TokenProgram:
    return TokenProgram(
        name="adder", vocab=VOCAB, end=END, module=build_graph(), max_len=MAX_LEN,
        max_answer=WIDTH + 2, normalize=normalize, reference=bundled.reference,
        sample=bundled.sample, geometry=Geometry(d=256, d_head=16, d_hidden=256),
        anchor=Anchor(greedy=18, cpsat=14, d=256),
        description="primitive-op adder: sum of two numbers of up to 3 digits")


def count_ops(module) -> int:
    from twdialect.interp import find_graph

    return sum(1 for _ in find_graph(module).block.ops)


if __name__ == "__main__":  # pragma: no cover
    prog = build()
    print(count_ops(prog.module), "ops")
    rng = np.random.default_rng(0)
    from tw_examples.token_program import matches_reference

    print(all(matches_reference(prog, prog.sample(rng)) for _ in range(20)))
