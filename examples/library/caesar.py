"""caesar, library-only: "3:hello world=" -> "khoor zruog". Shifts each letter by the key
(0-25, typed with one or two digits) around the alphabet; spaces stay.

The graph parses the prompt as typed: the key has one or two digits, so the text starts at
position p_colon + 1 with p_colon in {1, 2}.

  layer 0 attention: p_colon and p_eq (attend_mean_where on the ":" and "=" flags), and the
                     previous token's digit value (get_prev_value);
  layer 0 MLP:       the tens part of the key at position 1: 10 * (digit at 0) there, 0 at
                     position 0 (one piecewise_linear of prev_digit + 20 i, which also gives 0
                     at every later position);
  layer 1 attention: the key, d + tens at the latest digit position (attend_argmax_where), and
                     the text character for output step t = i - p_eq, at p_colon + 1 + t
                     (attend_argmax_dot of [p_colon, p_eq, i, 1] . [2j, -2j, 2j, 2j - j^2]);
  layer 1 MLP:       the logits (map_to_table of one integer code: letter + key in 0..50,
                     SPACE + key for a space, END_CODE + key for "=", which ends the answer).

Floor 2 layers, as the hand-tuned caesar (which zero-pads the key to two digits on the host
and reads it at fixed positions).
"""

from __future__ import annotations

import numpy as np

from tw_examples.caesar import LETTERS, MAX_TEXT, PATTERN, reference, sample
from tw_examples.token_program import (Anchor, Geometry, PromptError, TokenProgram, char_table,
                                     check_regex)
from twdialect import ops as tw

VOCAB = "0123456789:" + LETTERS + " =$"
END = "$"
MAX_LEN = 96
SCALE = 10.0  # logit margin of the emitted character
SPACE = 51  # code of a space (plus the key): above every letter + key (<= 50)
END_CODE = 77  # code of "=" (plus the key): above every space code (<= 76)

# Feature columns of the token embedding.
DIGIT = 0  # a digit's value (0 otherwise)
IS_DIGIT = 1  # +/-1
COLON = 2  # +/-1
EQ = 3  # +/-1
CODE = 4  # letter index, SPACE for a space, END_CODE for "=" (0 otherwise)


def normalize(prompt: str) -> str:
    """Only validates: the prompt as typed (lower-cased: the vocabulary has lower-case letters
    only), with a missing trailing '=' appended."""
    text = prompt.lower()
    m = check_regex("caesar", PATTERN, text,
                    f"'3:hello world=' (key 0-25, then 1-{MAX_TEXT} letters or spaces)")
    if int(m.group(1)) > 25:
        raise PromptError(f"caesar: key {int(m.group(1))} is out of range (0-25)")
    return text if text.endswith("=") else text + "="


def _features(c: str) -> list[float]:
    code = LETTERS.index(c) if c in LETTERS else SPACE if c == " " else END_CODE if c == "=" else 0
    return [float(c) if c.isdigit() else 0.0, 1.0 if c.isdigit() else -1.0,
            1.0 if c == ":" else -1.0, 1.0 if c == "=" else -1.0, float(code)]


def _logit_rows() -> tuple[list[int], np.ndarray]:
    """(codes, logits): the logits of every code letter + key, SPACE + key, END_CODE + key."""
    return char_table([pair for key in range(26)
                       for pair in [(L + key, LETTERS[(L + key) % 26]) for L in range(26)]
                       + [(SPACE + key, " "), (END_CODE + key, END)]], VOCAB, SCALE)


def build_graph():
    table = np.array([_features(c) for c in VOCAB])
    with tw.Graph("main") as g:
        tok = tw.embedding("tokens", table)
        pos = tw.pos_encoding(2, MAX_LEN)
        i = tw.slice(pos, 0, 1)
        digit = tw.slice(tok, DIGIT, 1)
        p_colon = tw.attend_mean_where(tw.slice(tok, COLON, 1), i)
        p_eq = tw.attend_mean_where(tw.slice(tok, EQ, 1), i)
        prev_digit = tw.get_prev_value(pos, digit)
        # 10 * prev_digit at position 1, 0 elsewhere: prev_digit + 20 i is in [0, 9] at
        # position 0, [20, 29] at position 1, >= 40 later
        tens = tw.piecewise_linear(tw.add(prev_digit, tw.multiply_const(i, 20.0)),
                                   [9.0, 20.0, 29.0, 30.0], [0.0, 0.0, 90.0, 0.0])
        # the key: d + tens at the latest digit (position 0 or 1)
        key = tw.attend_argmax_where(tw.slice(tok, IS_DIGIT, 1), i, tw.add(digit, tens),
                                     (0.0, MAX_LEN - 1.0))
        # the text character of step t = i - p_eq at T = p_colon + 1 + t: logits
        # 30 (2 T j - j^2) from [p_colon, p_eq, i, 1] . [2 j, -2 j, 2 j, 2 j - j^2]
        query = tw.concat(p_colon, p_eq, i, tw.literal([1.0]))
        key_form = np.array([[2.0, -2.0, 2.0, 2.0], [0.0, 0.0, 0.0, -1.0]])
        char = tw.attend_argmax_dot(query, tw.linear(pos, key_form),
                                    tw.slice(tok, CODE, 1))
        code = tw.add(char, key)  # two head outputs: they accumulate into one column
        codes, rows = _logit_rows()
        tw.output("logits", tw.map_to_table(code, codes, rows))
    return g.module


def build() -> TokenProgram:
    return TokenProgram(
        name="caesar", vocab=VOCAB, end=END, module=build_graph(), max_len=MAX_LEN,
        max_answer=MAX_TEXT + 1, normalize=normalize, reference=reference, sample=sample,
        geometry=Geometry(d=1024, d_head=64, d_hidden=4096),
        anchor=Anchor(greedy=6, cpsat=5, d=None),
        description="shift letters by a key: 3:hello world= -> khoor zruog (library ops)")
