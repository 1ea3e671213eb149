"""caesar, written in primitives: "3:hello world=" -> "khoor zruog" (key of 1 or 2 digits,
no padding).

Heads find ":" and "=", read the key digits at positions 0 and 1 (a select on the colon's
position decides whether the key has one or two digits) and, for output step t = i - pos("="),
the text character at pos(":") + 1 + t; the shifted letter is (letter + key) mod 26 (one
mod_const sandwich); a space stays a space and the "=" read at the end of the text becomes
the end token.
"""

from __future__ import annotations

from twdialect import ops as tw

from tw_examples import caesar as bundled
from tw_examples.primitive import common as C
from tw_examples.primitive import prims as P
from tw_examples.token_program import Anchor, Geometry, TokenProgram

VOCAB = bundled.VOCAB
END = bundled.END
LETTERS = bundled.LETTERS
MAX_LEN = bundled.MAX_LEN


def normalize(prompt: str) -> str:
    m = bundled.check_regex("caesar", bundled.PATTERN, prompt.lower(), "'3:hello world='")
    bundled._parse(prompt)  # the key range check
    return f"{m.group(1)}:{m.group(2)}="


def build_graph():
    def letter(c):
        return float(LETTERS.index(c)) if c in LETTERS else 0.0

    with tw.Graph("main") as g:
        digit, char, is_colon, is_space, is_eq = C.embed(
            VOCAB, [C.digit_value, letter, C.flag(":"), C.flag(" "), C.flag("=")])
        pos = P.pos_encoding(MAX_LEN)
        colon = P.get_prev_value(pos, pos.index, is_colon)
        eq = P.get_prev_value(pos, pos.index, is_eq)
        d0 = P.attend_to_position(pos, digit, None, 0.0)
        d1 = P.attend_to_position(pos, digit, None, 1.0)
        key = P.select(P.compare(colon, 2), P.dot([d0, d1], [10.0, 1.0]), d0, 128.0)
        source = P.dot([colon, pos.index, eq], [1.0, 1.0, -1.0], 1.0)  # colon + 1 + t
        read = P.attend_to_position(pos, tw.concat(char, is_space, is_eq), source)
        shifted = P.add(tw.slice(read, 0, 1), key)
        out = P.mod_const(shifted, 26, 0, 50)
        flags = {" ": tw.slice(read, 1, 1), END: tw.slice(read, 2, 1)}
        tw.output("logits", C.logits(VOCAB, out, flags, digit_chars=LETTERS))
    return g.module


def build() -> TokenProgram:
    return TokenProgram(
        name="caesar", vocab=VOCAB, end=END, module=build_graph(), max_len=MAX_LEN,
        max_answer=bundled.MAX_TEXT + 1, normalize=normalize, reference=bundled.reference,
        sample=bundled.sample, geometry=Geometry(d=512, d_head=16, d_hidden=512),
        anchor=Anchor(greedy=9, cpsat=7, d=512),
        description="primitive-op Caesar cipher: 3:hello world= -> khoor zruog")
