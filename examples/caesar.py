"""caesar: "3:hello world=" -> "khoor zruog". Shifts each letter by the key (0-25) around the
alphabet; spaces stay. The prompt is normalised to a two-digit key ("03:...") and lower case.

  layer 0 attention: the position of "=" and the two key digits (by absolute position);
  layer 1 attention: the text character for output step t (position 3 + t = 3 + i - p_eq);
  layer 1 MLP:       the logits: letter (L + key) mod 26, a space for a space, and the end
                     token once the read character is "=".

Floor: 2 layers (the anchor compiler needs 6 greedy / 5 CP-SAT).
"""

from __future__ import annotations

import string

import numpy as np

from twdialect import ops as tw

from tw_examples.token_program import (
    Anchor,
    Geometry,
    PromptError,
    Space,
    TokenProgram,
    attend_content,
    attend_position,
    build_mlp,
    check_regex,
    emit_logits,
    lin,
    step,
)
from tw_lowering.export.prompts import START, append_missing, apply_rules

LETTERS = string.ascii_lowercase
VOCAB = "0123456789:" + LETTERS + " =$"
END = "$"
MAX_TEXT = 40
MAX_LEN = 96
TEXT_POS = 3
PATTERN = r"(\d{1,2}):([a-z ]{1,%d})=?" % MAX_TEXT


# What normalize does to a checked prompt, as data the exports' tokenizers apply too
# (tw_lowering.export.prompts): letters lower-cased, a one-digit key padded to two
# digits, "=" added if missing.
PROMPT_RULES = tuple((c, c.lower()) for c in string.ascii_uppercase) + (
    (START + r"(?=[0-9](?![0-9]))", "0"),
    append_missing("="),
)


def _parse(prompt: str):
    m = check_regex("caesar", PATTERN, prompt.lower(),
                    f"'3:hello world=' (key 0-25, then 1-{MAX_TEXT} letters or spaces)")
    key = int(m.group(1))
    if key > 25:
        raise PromptError(f"caesar: key {key} is out of range (0-25)")
    return key, m.group(2)


def normalize(prompt: str) -> str:
    _parse(prompt)
    return apply_rules(PROMPT_RULES, prompt)


def reference(prompt: str) -> str:
    key, text = _parse(prompt)
    return "".join(c if c == " " else LETTERS[(LETTERS.index(c) + key) % 26] for c in text)


def sample(rng: np.random.Generator) -> str:
    n = int(rng.integers(1, MAX_TEXT + 1))
    chars = rng.choice(list(LETTERS + " "), size=n)
    return f"{int(rng.integers(0, 26))}:{''.join(chars)}="


def build_graph():
    def features(c):
        return [float(c) if c.isdigit() else 0.0,
                float(LETTERS.index(c)) if c in LETTERS else 0.0,
                float(c == " "), float(c == "=")]

    table = np.array([features(c) for c in VOCAB])
    with tw.Graph("main") as g:
        tok = tw.embedding("tokens", table)
        pos = tw.pos_encoding(2, MAX_LEN)
        eq_pos = attend_content(tok, [0.0, 0.0, 0.0, 1.0], pos, [[1.0], [0.0]])
        digit = [[1.0], [0.0], [0.0], [0.0]]
        tens = attend_position(pos, [], 0.0, tok, digit)
        ones = attend_position(pos, [], 1.0, tok, digit)
        char = attend_position(pos, [(pos, [1.0, 0.0]), (eq_pos, [-1.0])], float(TEXT_POS), tok,
                               np.vstack([np.zeros((1, 3)), np.eye(3)]))
        s = Space([char, tens, ones])
        shifted = s.var(char, 0) + s.var(tens) * 10.0 + s.var(ones)
        letter = lin(shifted) - step(shifted - 26.0) * 26.0
        flags = {" ": lin(s.var(char, 1)), END: lin(s.var(char, 2))}
        tw.output("logits", build_mlp(s, emit_logits(VOCAB, letter, flags, digit_chars=LETTERS)))
    return g.module


def build() -> TokenProgram:
    return TokenProgram(
        name="caesar", vocab=VOCAB, end=END, module=build_graph(), max_len=MAX_LEN,
        max_answer=MAX_TEXT + 1, normalize=normalize, reference=reference, sample=sample,
        geometry=Geometry(d=1024, d_head=64, d_hidden=4096),
        anchor=Anchor(greedy=6, cpsat=5, d=None),
        description="shift letters by a key: 3:hello world= -> khoor zruog",
        prompt_rules=PROMPT_RULES)
