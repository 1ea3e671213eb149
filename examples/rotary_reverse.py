"""rotary_reverse: "123=" -> "3210", written for a SwiGLU/RoPE machine with relu MLPs: every
head is a rotary *offset* head (as in rotary_adder: it reads the token a fixed number of
positions back, with no position feature in the residual; position enters only through RoPE),
and the one MLP is plain relu, ungated, so a Llama export carries its neurons as scaled SiLU.
The number has one to four digits; the prompt is normalised to "DDDD=" (left-padded with
zeros), and the answer is its four digits reversed, then the end token.

Answer step t (t = 0..3 a digit, t = 4 the end token) sits t positions after "=", at position
4 + t, and reads digit 3 - t of the prompt, 2t + 1 positions back; the step is where "=" is,
t positions back. Both are fixed offsets, so one layer does it:

  layer 0 attention: offset heads read (digit value, is "=") 1 and 3 positions back, is "="
                     2 and 4 positions back, and the digit value 5 and 7 positions back (the
                     token itself gives is "=" 0 positions back);
  layer 0 MLP:       relu lanes relu(x_{2t+1} + 9 e_t - 9) = x_{2t+1} e_t pick the digit x of
                     the step whose flag e_t (is "=" t positions back) is set (exactly one is,
                     at an answer position; the others' digits, in [0, 9], gate to 0), and the
                     logits peak at that digit, or at the end token where e_4 is set.

Floor: 1 layer (the answer is read from other positions: one attention, then one MLP to pick
the step's digit). Exact on every prompt (10,000 of them) under the oracle and the compiled
model (`tests/test_rotary_reverse.py`).
"""

from __future__ import annotations

import numpy as np

from twdialect import ops as tw

from tw_examples.rotary_adder import HEAD_DIM, offset_head
from tw_examples.token_program import (
    Anchor,
    Geometry,
    Space,
    TokenProgram,
    build_mlp,
    check_regex,
    emit_logits,
    relu,
)
from tw_lowering.export.prompts import append_missing, apply_rules, pad_digits

VOCAB = "0123456789=$"
END = "$"
MAX_LEN = 16
DIGITS = 4  # "DDDD=": the number's digits, left-padded
STEPS = DIGITS + 1  # answer tokens: the four digits reversed, then the end token

# What normalize does to a checked prompt, as data the exports' tokenizers apply too
# (tw_lowering.export.prompts): the number padded to four digits, "=" added if missing.
PROMPT_RULES = pad_digits(DIGITS) + (append_missing("="),)


def _parse(prompt: str) -> str:
    m = check_regex("rotary_reverse", r"(\d{1,4})=?", prompt,
                    "'123=' (a number of one to four digits)")
    return m.group(1)


def normalize(prompt: str) -> str:
    _parse(prompt)
    return apply_rules(PROMPT_RULES, prompt)


def reference(prompt: str) -> str:
    return _parse(prompt).zfill(DIGITS)[::-1]


def sample(rng: np.random.Generator) -> str:
    n = int(rng.integers(1, DIGITS + 1))
    return "".join(str(d) for d in rng.integers(0, 10, n)) + "="


def build_graph():
    table = np.array([[float(c) if c.isdigit() else 0.0, float(c == "=")] for c in VOCAB])
    digit, is_eq = [[1.0], [0.0]], [[0.0], [1.0]]
    with tw.Graph("main") as g:
        tok = tw.embedding("tokens", table)  # (digit value, is "=")
        both = {k: offset_head(tok, np.eye(2), -k) for k in (1, 3)}
        flags = [tw.slice(tok, 1, 1), tw.slice(both[1], 1, 1),
                 offset_head(tok, is_eq, -2), tw.slice(both[3], 1, 1),
                 offset_head(tok, is_eq, -4)]  # e_t: is "=" t positions back
        digits = [tw.slice(both[1], 0, 1), tw.slice(both[3], 0, 1),
                  offset_head(tok, digit, -5), offset_head(tok, digit, -7)]  # x_{2t+1}
        s = Space(flags + digits)
        e = [s.var(f) for f in flags]
        picked = sum(relu(s.var(x) + e[t] * 9.0 - 9.0) for t, x in enumerate(digits))
        tw.output("logits", build_mlp(s, emit_logits(VOCAB, picked, {END: relu(e[DIGITS])})))
    return g.module


def build() -> TokenProgram:
    return TokenProgram(
        name="rotary_reverse", vocab=VOCAB, end=END, module=build_graph(), max_len=MAX_LEN,
        max_answer=STEPS, normalize=normalize, reference=reference, sample=sample,
        geometry=Geometry(d=96, d_head=HEAD_DIM, d_hidden=16),  # six 16-wide heads in a layer
        anchor=Anchor(greedy=None, cpsat=None, d=None),
        description="reversing a four-digit number on a RoPE machine with relu MLPs: "
                    "123= -> 3210",
        prompt_rules=PROMPT_RULES)
