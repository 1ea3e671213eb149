"""balanced_parens: "([]{})=" -> "yes", "([)]=" -> "no". Brackets of three kinds: the string is
balanced when every closer closes the latest still-open bracket, of its own kind, and nothing
stays open.

  layer 0 attention: the mean bracket delta (+1 open, -1 close) over positions 0..i, and the
                     position of "=";
  layer 0 MLP:  the depth after position i ((i + 1) * mean, a sum of gated ReLUs) and the
                flags "depth went negative here" and, at "=", "depth is not zero";
  layer 1 MLP:  depth^2 (a key feature for the matching head);
  layer 2 attention: for every closer, one head reads the kind of the latest opener whose
                depth after it equals the closer's depth before it (logit -G (D_k - q)^2
                plus a recency tilt);
  layer 2 MLP:  a closer is bad when that kind is not its own;
  layer 3 attention: "any bad position so far", read at the answer positions;
  layer 3 MLP:  the logits for "yes" / "no", one character per step, then the end token.

Floor: 4 layers (the anchor compiler needs 33 greedy / 26 CP-SAT).
"""

from __future__ import annotations

import numpy as np

from twdialect import ops as tw

from tw_examples.token_program import (
    Anchor,
    Expr,
    Geometry,
    Space,
    TokenProgram,
    attend_content,
    build_mlp,
    check_regex,
    eq,
    gate,
    integer_function,
    lin,
    relu,
    switch,
)
from tw_lowering.export.prompts import append_missing, apply_rules

OPENERS, CLOSERS = "([{", ")]}"
VOCAB = OPENERS + CLOSERS + "=yesno$"
END = "$"
MAX_BRACKETS = 40
MAX_LEN = 64
PATTERN = r"([\(\)\[\]\{\}]{1,%d})=?" % MAX_BRACKETS
RECENCY = 20.0  # logit per position between two equally good openers
DEPTH_GAIN = 2.0 * RECENCY * (MAX_BRACKETS + 2)  # a depth mismatch outweighs any recency
ANSWERS = ("yes", "no")


# What normalize does to a checked prompt, as data the exports' tokenizers apply too
# (tw_lowering.export.prompts): "=" added if missing.
PROMPT_RULES = (append_missing("="),)


def normalize(prompt: str) -> str:
    check_regex("balanced_parens", PATTERN, prompt,
                f"'([]{{}})=' (1-{MAX_BRACKETS} of ()[]{{}})")
    return apply_rules(PROMPT_RULES, prompt)


def reference(prompt: str) -> str:
    text = check_regex("balanced_parens", PATTERN, prompt, "'([]{})='").group(1)
    stack = []
    for c in text:
        if c in OPENERS:
            stack.append(c)
        elif not stack or OPENERS.index(stack.pop()) != CLOSERS.index(c):
            return "no"
    return "no" if stack else "yes"


def sample(rng: np.random.Generator) -> str:
    """Half the prompts are balanced by construction, the rest random or slightly broken."""
    n = int(rng.integers(1, MAX_BRACKETS // 2 + 1))
    kind = rng.random()
    if kind < 0.5:
        out, stack = [], []
        while len(out) + len(stack) < 2 * n:
            if stack and (rng.random() < 0.5 or len(out) + 2 * len(stack) >= 2 * n):
                out.append(CLOSERS[stack.pop()])
            else:
                k = int(rng.integers(0, 3))
                stack.append(k)
                out.append(OPENERS[k])
        out += [CLOSERS[k] for k in reversed(stack)]
        if kind < 0.25 and len(out) > 1:  # break one bracket: swap kinds or positions
            i = int(rng.integers(0, len(out)))
            out[i] = (OPENERS + CLOSERS)[int(rng.integers(0, 6))]
        text = "".join(out)
    else:
        text = "".join(rng.choice(list(OPENERS + CLOSERS), size=int(rng.integers(1, 9))))
    return text[:MAX_BRACKETS] + "="


def build_graph():
    def features(c):
        kind = [float(c in (OPENERS[k], CLOSERS[k])) for k in range(3)]
        return [float(c in OPENERS) - float(c in CLOSERS), float(c in OPENERS),
                float(c in CLOSERS), float(c == "=")] + kind

    table = np.array([features(c) for c in VOCAB])
    with tw.Graph("main") as g:
        tok = tw.embedding("tokens", table)
        pos = tw.pos_encoding(2, MAX_LEN)
        mean = attend_content(tok, np.zeros(7), tok, np.eye(7)[:, :1])
        eq_pos = attend_content(tok, np.eye(7)[3], pos, [[1.0], [0.0]])

        # layer 0 MLP: depth = (i + 1) * mean, negative-depth and final-depth flags
        s0 = Space([mean, tok, pos])
        m = s0.var(mean)
        n = s0.var(pos, 0) + 1.0
        span = MAX_BRACKETS + 2
        depth = Expr(0.0)
        for r in range(1, span + 1):
            depth = depth + gate(m + 1.0, 2.0, n - float(r))
        depth = depth - lin(n)
        # mean < 0 <=> mean <= -1/span; mean != 0 <=> |mean| >= 1/span (positions < span)
        below = relu(m * -span) - relu(m * -span - 1.0)
        above = relu(m * span) - relu(m * span - 1.0)
        bracket = s0.var(tok, 1) + s0.var(tok, 2)
        bad_here = switch(below, bracket, span + 1.0) + switch(below + above, s0.var(tok, 3),
                                                               span + 1.0)
        stage0 = build_mlp(s0, [depth, bad_here])

        # layer 1 MLP: depth^2 for the matching keys
        s1 = Space([stage0])
        d = s1.var(stage0, 0)
        stage1 = build_mlp(s1, [lin(d), integer_function(d, -span, span, lambda x: x * x),
                                lin(s1.var(stage0, 1))])

        # layer 2 attention: the closer's depth before it, q = depth + 1, against each
        # opener's depth after it: G (2 q D - D^2) + opener bonus + recency
        query = tw.concat(tw.literal([1.0]), stage1, tok)  # 1, D, D^2, bad, 7 token features
        keys = tw.concat(stage1, tok, pos)  # D, D^2, bad, 7 token features, j, j^2
        wq = np.zeros((11, 5))
        wq[0, 0] = 2.0 * DEPTH_GAIN  # times D_k: 2 G q, q = D_j + 1
        wq[1, 0] = 2.0 * DEPTH_GAIN
        wq[0, 1] = -DEPTH_GAIN  # times D_k^2
        wq[0, 2] = 1.0  # times the opener flag
        wq[0, 3] = RECENCY  # times k
        wk = np.zeros((12, 5))
        wk[0, 0] = 1.0
        wk[1, 1] = 1.0
        wk[4, 2] = 2.0 * DEPTH_GAIN
        wk[10, 3] = 1.0
        value_kind = np.zeros((12, 3))
        value_kind[7:10, :] = np.eye(3)
        match_kind = tw.attn(query, keys, keys, wq, wk, value_kind, np.eye(3))

        # layer 2 MLP: bad = earlier flags + (a closer whose match has another kind)
        s2 = Space([match_kind, stage1, tok])
        closer = s2.var(tok, 2)
        same = sum((gate(s2.var(match_kind, k), 1.0, s2.var(tok, 4 + k) + closer - 2.0)
                    for k in range(3)), Expr(0.0))
        bad = lin(s2.var(stage1, 2)) + lin(closer) - same
        stage2 = build_mlp(s2, [bad])

        # layer 3: any bad position so far (0, or between 1 and 2), then the answer letters
        any_bad = attend_content(stage2, [1.0], stage2, [[1.0]])
        s3 = Space([any_bad, eq_pos, pos])
        t = s3.var(pos, 0) - s3.var(eq_pos)
        flags = {ch: Expr(0.0) for ch in "yesno" + END}
        yes, no = ANSWERS[0] + END, ANSWERS[1] + END
        for tau in range(max(len(yes), len(no))):
            on = eq(t - float(tau))  # [t == tau]
            spoilt = gate(s3.var(any_bad), 2.0, t - float(tau)) - gate(s3.var(any_bad), 2.0,
                                                                      t - float(tau) - 1.0)
            if tau < len(yes):
                flags[yes[tau]] = flags[yes[tau]] + on - spoilt
            if tau < len(no):
                flags[no[tau]] = flags[no[tau]] + spoilt
        logits = [flags[ch] * 10.0 if ch in flags else Expr(-100.0) for ch in VOCAB]
        tw.output("logits", build_mlp(s3, logits))
    return g.module


def build() -> TokenProgram:
    return TokenProgram(
        name="balanced_parens", vocab=VOCAB, end=END, module=build_graph(), max_len=MAX_LEN,
        max_answer=4, normalize=normalize, reference=reference, sample=sample,
        geometry=Geometry(d=1024, d_head=64, d_hidden=4096),
        anchor=Anchor(greedy=33, cpsat=26, d=None),
        description="is a string of ()[]{} balanced? ([]{})= -> yes",
        prompt_rules=PROMPT_RULES)
