"""calculator, written in primitives: "12*34=" -> "408", "5-17=" -> "-12" (+, - and * on
integers of 1-3 digits, no padding).

Heads find the operator (the latest +, - or * before "=", so a "-" the model writes is not
taken for it) with its kind, and "="; the operand digits are read relative to them and gated
beyond each operand's length. Every operator gets its columns: a_m + b_m; +/-(a_m - b_m)
with the sign of A - B (a compare on the two numbers, a select per digit); sum_{i+j=m} a_i b_j
(one quarter-squares multiply sandwich per digit pair). cond_gates keep the active operator's
columns, a carry chain (one divmod sandwich per column, floor division handles borrows) turns
them into the digits of |result|, an OR fold counts them, and the answer is spelled MSB first
after an optional "-".
"""

from __future__ import annotations

from twdialect import ops as tw

from tw_examples import calculator as bundled
from tw_examples.primitive import common as C
from tw_examples.primitive import prims as P
from tw_examples.token_program import Anchor, Geometry, TokenProgram, check_regex

VOCAB = bundled.VOCAB
END = bundled.END
WIDTH = bundled.WIDTH
RESULT_DIGITS = bundled.RESULT_DIGITS
MAX_LEN = 24


def normalize(prompt: str) -> str:
    m = check_regex("calculator", bundled.PATTERN, prompt, "'12*34=' (1-3 digit operands)")
    return f"{m.group(1)}{m.group(2)}{m.group(3)}="


def build_graph():
    with tw.Graph("main") as g:
        digit, is_op, plus, minus, times, is_eq = C.embed(
            VOCAB, [C.digit_value, C.flag("+-*"), C.flag("+"), C.flag("-"), C.flag("*"),
                    C.flag("=")])
        pos = P.pos_encoding(MAX_LEN)
        seen_eq = P.get_prev_value(pos, is_eq, is_eq)
        operator = P.bool_and(is_op, P.bool_not(seen_eq))
        op = P.get_prev_value(pos, tw.concat(pos.index, plus, minus, times), operator)
        p, is_plus, is_minus, is_times = (tw.slice(op, k, 1) for k in range(4))
        eq = P.get_prev_value(pos, pos.index, is_eq)
        a = C.read_digits(pos, digit, p, None, WIDTH)
        b = C.read_digits(pos, digit, eq, p, WIDTH)
        big_a = P.dot(a, [10.0 ** k for k in range(WIDTH)])
        big_b = P.dot(b, [10.0 ** k for k in range(WIDTH)])
        a_ge_b = P.compare_sum([big_a, big_b], [1.0, -1.0], 0)
        negative = P.bool_and(is_minus, P.bool_not(a_ge_b))
        columns = []
        for m in range(RESULT_DIGITS - 1):
            parts = []
            if m < WIDTH:
                parts.append(P.cond_gate(is_plus, P.add(a[m], b[m]), 18.0))
                diff = P.select(a_ge_b, P.subtract(a[m], b[m]), P.subtract(b[m], a[m]), 9.0)
                parts.append(P.cond_gate(is_minus, diff, 9.0))
            products = [P.multiply_int(a[i], b[m - i], (0, 9), (0, 9))
                        for i in range(WIDTH) if 0 <= m - i < WIDTH]
            column = products[0] if len(products) == 1 else P.sum_nodes(products)
            parts.append(P.cond_gate(is_times, column, 81.0 * len(products)))
            columns.append((P.sum_nodes(parts), 81 * len(products)))
        digits = []
        carry = None
        for m, (y, top) in enumerate(columns):
            s = y if carry is None else P.add(y, carry)
            qr = P.divmod_const(s, 10, -10, top + 30)
            carry = tw.slice(qr, 0, 1)
            digits.append(tw.slice(qr, 1, 1))
        digits.append(carry)
        count = C.digit_count(digits)
        t = P.subtract(pos.index, eq)
        value, end, minus_flag = C.emit_number(digits, count, t, negative)
        tw.output("logits", C.logits(VOCAB, value, {"-": minus_flag, END: end}))
    return g.module


def build() -> TokenProgram:
    return TokenProgram(
        name="calculator", vocab=VOCAB, end=END, module=build_graph(), max_len=MAX_LEN,
        max_answer=RESULT_DIGITS + 2, normalize=normalize, reference=bundled.reference,
        sample=bundled.sample, geometry=Geometry(d=1024, d_head=16, d_hidden=1024),
        anchor=Anchor(greedy=29, cpsat=22, d=1024),
        description="primitive-op calculator: + - * on integers of up to 3 digits")
