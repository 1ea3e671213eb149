"""rotary_adder: "47+85=" -> "132", written for a SwiGLU/RoPE machine: every MLP is swish
(gated where it selects) and every head is a rotary *offset* head, which reads the token a fixed
number of positions back with no position feature in the residual (position enters only
through RoPE, as in Llama-family models and torchwright's `attend_to_offset`). Operands have
one or two digits; the prompt is normalised to "AA+BB=".

  layer 0 attention: at every position, offset heads read the digits 5, 4, 2 and 1 positions
                     back: at "=" those are A's tens and ones and B's tens and ones;
  layer 0 MLP:       S = 10 a1 + a0 + 10 b1 + b0 and the answer's characters as codes
                     c_t(S) (the digit, or 10 for the end token) for steps t = 0..3, one
                     piecewise-linear function of the integer S each (swish hinges, exact on
                     integers);
  layer 1 attention: answer step t sits t positions after "=": offset heads read (is "=",
                     c_t) from 1, 2 and 3 positions back (step 0 reads its own position);
  layer 1 MLP:       gated lanes swish(G (flag_t - 1/2)) * c_t pick the step whose flag is set,
                     and the logits peak at that code.

Floor: 2 layers. Exact on every prompt (10,000 of them) under the oracle and the compiled
model (`tests/test_rotary_program.py`).
"""

from __future__ import annotations

import numpy as np

from twdialect import ops as tw
from twdialect.dialect import ROPE_BASE
from twdialect.interp import apply_rope

from tw_examples.token_program import (
    SWISH_SHARPNESS,
    Anchor,
    Geometry,
    Space,
    TokenProgram,
    build_mlp,
    check_regex,
    integer_function,
)
from tw_lowering.export.prompts import append_missing, apply_rules, pad_digits

VOCAB = "0123456789+=$"
END = "$"
MAX_LEN = 16
STEPS = 4  # answer tokens: up to three digits, then the end token
EQ_POS = 5  # "AA+BB=": the position of "="
HEAD_DIM = 16  # every head's q.k width, rotated whole (Llama's head_dim)
OFFSET_GAIN = 32.0  # q = GAIN * ones: the addressed key beats its neighbours by ~0.96 GAIN
LOGIT_SCALE = 10.0  # the winning logit's margin over the next code


# What normalize does to a checked prompt, as data the exports' tokenizers apply too
# (tw_lowering.export.prompts): each number padded to two digits, "=" added if missing.
PROMPT_RULES = pad_digits(2) + (append_missing("="),)


def _parse(prompt: str) -> tuple[int, int]:
    m = check_regex("rotary_adder", r"(\d{1,2})\+(\d{1,2})=?", prompt,
                    "'47+85=' (two numbers of one or two digits)")
    return int(m.group(1)), int(m.group(2))


def normalize(prompt: str) -> str:
    _parse(prompt)
    return apply_rules(PROMPT_RULES, prompt)


def reference(prompt: str) -> str:
    a, b = _parse(prompt)
    return str(a + b)


def sample(rng: np.random.Generator) -> str:
    a, b = rng.integers(0, 100, 2)
    return f"{a}+{b}="


def code(total: int, step: int) -> int:
    """The answer's character at `step` as a code: its digit, or 10 for the end token (which
    also fills every step after it)."""
    text = str(total)
    return int(text[step]) if step < len(text) else 10


def offset_head(value, wv, delta: int):
    """`value @ wv` at the position `delta` (< 0) away: q and k are the constant 1, q
    projected to GAIN * ones and k to ones pre-rotated by -delta, so after RoPE the logit
    between query i and key j is 2 GAIN sum_p cos((j - i - delta) theta_p), largest at
    j = i + delta (torchwright's rotary offset head)."""
    one = tw.literal([1.0])
    wq = np.full((1, HEAD_DIM), OFFSET_GAIN)
    wk = apply_rope(np.ones((1, HEAD_DIM)), np.array([-delta]), ROPE_BASE, HEAD_DIM)
    wv = np.asarray(wv, np.float64).reshape(tw.width(value), -1)
    return tw.attn(one, one, value, wq, wk, wv, np.eye(wv.shape[1]),
                   rope=(ROPE_BASE, HEAD_DIM))


def answer_codes(digits: list):
    """Layer 0 MLP: the codes c_0..c_3 of S = 10 a1 + a0 + 10 b1 + b0 (swish hinges)."""
    s = Space(digits)
    a1, a0, b1, b0 = (s.var(d) for d in digits)
    total = a1 * 10.0 + a0 + b1 * 10.0 + b0
    return build_mlp(s, [integer_function(total, 0, 198, lambda v, t=t: code(v, t))
                         for t in range(STEPS)], swish=True)


def emit(flags: list, codes: list):
    """Layer 1 MLP: the logits of the code whose 0/1 flag is set (exactly one is, at an
    answer position), by gated lanes swish(G flag - G/2) * code: G/2 * code when the flag is
    set, under 1e-12 * code when not. Code c's logit is s (2 c v - v^2) for value v of each
    character (digits, and 10 for the end token): it peaks at v = c with margin s."""
    x = tw.concat(*flags, *codes)
    n, g = len(flags), SWISH_SHARPNESS
    w1, up = np.zeros((2 * n, n)), np.zeros((2 * n, n))
    w1[np.arange(n), np.arange(n)] = g
    up[n + np.arange(n), np.arange(n)] = 1.0
    values = np.array([float(VOCAB.index(c)) if c.isdigit() else 10.0 for c in VOCAB])
    special = np.array([c not in "0123456789" + END for c in VOCAB])
    w2 = np.tile(np.where(special, 0.0, 2.0 / g * 2.0 * LOGIT_SCALE * values), (n, 1))
    b2 = np.where(special, -LOGIT_SCALE * 200.0, -LOGIT_SCALE * values ** 2)
    return tw.mlp(x, w1, np.full(n, -g / 2), w2, b2, activation="swish", up=up,
                  up_bias=np.zeros(n))


def build_graph():
    table = np.array([[float(c) if c.isdigit() else 0.0, float(c == "=")] for c in VOCAB])
    with tw.Graph("main") as g:
        tok = tw.embedding("tokens", table)  # (digit value, is "=")
        operands = [offset_head(tok, [[1.0], [0.0]], -k) for k in (5, 4, 2, 1)]
        codes = answer_codes(operands)
        flags, picked = [tw.slice(tok, 1, 1)], [tw.slice(codes, 0, 1)]
        for t in range(1, STEPS):
            read = np.zeros((2 + STEPS, 2))
            read[1, 0] = read[2 + t, 1] = 1.0  # (is "=", c_t) t positions back
            h = offset_head(tw.concat(tok, codes), read, -t)
            flags.append(tw.slice(h, 0, 1))
            picked.append(tw.slice(h, 1, 1))
        tw.output("logits", emit(flags, picked))
    return g.module


def build() -> TokenProgram:
    return TokenProgram(
        name="rotary_adder", vocab=VOCAB, end=END, module=build_graph(), max_len=MAX_LEN,
        max_answer=STEPS, normalize=normalize, reference=reference, sample=sample,
        geometry=Geometry(d=64, d_head=HEAD_DIM, d_hidden=256),
        anchor=Anchor(greedy=None, cpsat=None, d=None),
        description="two-digit addition on a SwiGLU/RoPE machine: 47+85= -> 132",
        prompt_rules=PROMPT_RULES)
