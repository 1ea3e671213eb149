"""Token programs: a character vocabulary, a tw graph from token ids to next-token logits, and
the host loop that feeds text in and reads text out.

A program's graph reads one token input, `tw.embedding("tokens", table)` (a row of `table`
per character), and the position features `tw.pos_encoding(2, max_len)` (columns i and i*i),
and writes one output, `logits`, one column per vocabulary character. Generation is greedy: the
argmax of the last position's logits is appended as the next token until the program's end
token appears. The same loop drives the oracle (`twdialect.evaluate`) and a compiled model
(`ct.run`), so both are held to the same answers.

Building blocks, chosen for depth (see docs/examples.md):

* `attend_position` / `attend_content`: one attention head that reads another position,
  either the position `T_i` named by a linear function of query features (logits
  G * (2 T_i j - j^2) peak at j = T_i with a gap of G to its neighbours) or the positions
  whose key features score highest.
* `Space` / `Expr` / `build_mlp`: per-position arithmetic as ONE tw.mlp. An `Expr` is a sum
  of ReLUs of affine forms over the MLP's inputs, plus a constant; `step`, `gate`, `eq` etc.
  are exact on integer-valued inputs, so integer programs need no ramps and no approximation.
  Every output of an MLP is an `Expr` over the same inputs, so a whole stage of logic
  (all digits, all carries, all flags) costs one MLP sublayer.
* `emit_logits`: turns a digit-valued `Expr` e and special-token flags into logits whose
  argmax is the token (logit_v = s (2 v e - v^2) peaks at v = e with a margin of s).
"""

from __future__ import annotations

from twdialect.errors import TwError
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from twdialect import ops as tw

POSITION_GAIN = 20.0  # logit gap between the addressed position and its neighbours
CONTENT_GAIN = 40.0  # logit gap between a matching and a non-matching key


class PromptError(TwError):
    """A prompt the program cannot take (unknown character, wrong shape, too long)."""


# --------------------------------------------------------------------------------------
# Attention helpers
# --------------------------------------------------------------------------------------


def attend_position(pos, target: Sequence[tuple[object, np.ndarray]], offset: float, value,
                    wv, gain: float = POSITION_GAIN):
    """One head reading, at every position i, the position j = T_i (clamped into [0, i]).

    `target` lists (query value, coefficient vector) pairs and `offset` a constant:
    T_i = offset + sum(value_i . coef). `pos` is the graph's pos_encoding (columns j, j*j).
    Logits G * (2 T_i j - j^2) = G * (T_i^2 - (j - T_i)^2): the addressed position wins by G
    over each neighbour, so integer targets are read exactly up to exp(-G) leakage.
    Returns (value @ wv) at the addressed position."""
    parts = [tw.literal([1.0])]
    rows = [np.array([[2.0 * gain * offset, -gain]])]
    for v, coef in target:
        coef = np.asarray(coef, dtype=np.float64).reshape(-1, 1)
        parts.append(v)
        rows.append(np.hstack([2.0 * gain * coef, np.zeros_like(coef)]))
    query = tw.concat(parts)
    wq = np.vstack(rows)
    wk = np.zeros((tw.width(pos), 2))
    wk[0, 0] = 1.0
    wk[1, 1] = 1.0
    wv = np.asarray(wv, dtype=np.float64).reshape(tw.width(value), -1)
    return tw.attn(query, pos, value, wq, wk, wv, np.eye(wv.shape[1]))


def attend_content(key, key_score: np.ndarray, value, wv, pos=None, recency: float = 0.0,
                   gain: float = CONTENT_GAIN):
    """One head averaging `value @ wv` over the positions j <= i with the highest
    `gain * (key_j . key_score) + recency * j`.

    With a 0/1 key feature and recency 0, this reads the (unique) marked position, or returns
    the plain mean when no position is marked; with recency > 0 it reads the latest one."""
    key_score = np.asarray(key_score, dtype=np.float64).reshape(-1)
    keys = key if pos is None or recency == 0.0 else tw.concat(key, pos)
    wk = np.zeros((tw.width(keys), 1))
    wk[:key_score.size, 0] = gain * key_score
    if pos is not None and recency != 0.0:
        wk[key_score.size, 0] = recency
    wv = np.asarray(wv, dtype=np.float64).reshape(tw.width(value), -1)
    return tw.attn(tw.literal([1.0]), keys, value, np.ones((1, 1)), wk, wv, np.eye(wv.shape[1]))


# --------------------------------------------------------------------------------------
# One-MLP arithmetic: affine forms and sums of ReLUs
# --------------------------------------------------------------------------------------


class Space:
    """The inputs of one MLP: affine forms are vectors over their concatenated components."""

    def __init__(self, values: Sequence):
        self.values = list(values)
        self.offsets = []
        n = 0
        for v in self.values:
            self.offsets.append(n)
            n += tw.width(v)
        self.width = n

    def var(self, value, component: int = 0) -> Form:
        for v, off in zip(self.values, self.offsets):
            if v is value:
                if not 0 <= component < tw.width(v):
                    raise IndexError(f"component {component} of a {tw.width(v)}-wide value")
                w = np.zeros(self.width)
                w[off + component] = 1.0
                return Form(self, w, 0.0)
        raise KeyError("value is not an input of this MLP space")

    def const(self, c: float) -> Form:
        return Form(self, np.zeros(self.width), float(c))


@dataclass(frozen=True)
class Form:
    """An affine form w . x + c over a Space's inputs."""

    space: Space
    w: np.ndarray
    c: float

    def __add__(self, other):
        if isinstance(other, Form):
            return Form(self.space, self.w + other.w, self.c + other.c)
        return Form(self.space, self.w, self.c + float(other))

    __radd__ = __add__

    def __neg__(self):
        return Form(self.space, -self.w, -self.c)

    def __sub__(self, other):
        return self + (-other)

    def __rsub__(self, other):
        return (-self) + other

    def __mul__(self, k: float):
        return Form(self.space, self.w * float(k), self.c * float(k))

    __rmul__ = __mul__


@dataclass
class Expr:
    """const + sum_h coef_h * relu(form_h)."""

    const: float = 0.0
    terms: list[tuple[float, Form]] = field(default_factory=list)

    def __add__(self, other):
        if isinstance(other, Expr):
            return Expr(self.const + other.const, self.terms + other.terms)
        return Expr(self.const + float(other), list(self.terms))

    __radd__ = __add__

    def __mul__(self, k: float):
        k = float(k)
        return Expr(self.const * k, [(c * k, f) for c, f in self.terms])

    __rmul__ = __mul__

    def __neg__(self):
        return self * -1.0

    def __sub__(self, other):
        return self + (-other)

    def __rsub__(self, other):
        return (-self) + other


def relu(f: Form) -> Expr:
    return Expr(0.0, [(1.0, f)])


def lin(f: Form) -> Expr:
    """f itself (a bypass pair relu(f) - relu(-f))."""
    return Expr(0.0, [(1.0, f), (-1.0, -f)])


def step(f: Form) -> Expr:
    """[f >= 0] for integer-valued f (relu(f + 1) - relu(f))."""
    return Expr(0.0, [(1.0, f + 1.0), (-1.0, f)])


def eq(f: Form) -> Expr:
    """[f == 0] for integer-valued f."""
    return step(f) - step(f - 1.0)


def gate(value: Form, bound: float, key: Form) -> Expr:
    """value * [key >= 0] for integer key and value in [0, bound]:
    relu(value + bound * key) - relu(bound * key)."""
    return Expr(0.0, [(1.0, value + key * bound), (-1.0, key * bound)])


def gate_eq(value: Form, bound: float, key: Form) -> Expr:
    """value * [key == 0] for integer key and value in [0, bound]."""
    return gate(value, bound, key) - gate(value, bound, key - 1.0)


def switch(expr: Expr, flag: Form, big: float) -> Expr:
    """expr * flag for a 0/1 flag, when every pre-activation of expr stays below `big`:
    each ReLU is pushed off by big * (1 - flag); the constant rides on relu(flag)."""
    out = Expr(0.0, [(c, f + (flag - 1.0) * big) for c, f in expr.terms])
    if expr.const:
        out.terms.append((expr.const, flag))
    return out


def integer_function(z: Form, lo: int, hi: int, fn: Callable[[int], float]) -> Expr:
    """fn on the integers lo..hi (z integer-valued in that range), as a piecewise-linear
    interpolant: one ReLU per slope change plus the start value."""
    xs = np.arange(lo, hi + 1)
    ys = np.array([fn(int(x)) for x in xs], dtype=np.float64)
    out = Expr(ys[0], [])
    if len(xs) == 1:
        return out
    slopes = np.diff(ys)
    out.terms.append((slopes[0], z - float(lo)))
    for k in range(1, len(slopes)):
        ds = slopes[k] - slopes[k - 1]
        if ds != 0.0:
            out.terms.append((ds, z - float(xs[k])))
    return out


def floor_steps(f: Form, lo: int, hi: int, unit: float) -> Expr:
    """floor(f / unit) for integer f with floor in [lo, hi] (unit >= 1 an integer)."""
    out = Expr(float(lo), [])
    for k in range(lo + 1, hi + 1):
        out = out + step(f - k * unit)
    return out


SWISH_SHARPNESS = 64.0  # swish(64 z) / 64 is relu(z) to 1e-27 wherever z is an integer


def build_mlp(space: Space, outputs: Sequence[Expr], swish: bool = False):
    """One tw.mlp computing every output Expr (ReLUs over identical forms are shared).

    `swish`: the lanes are swish(G z) / G = z sigmoid(G z) (G = SWISH_SHARPNESS) instead of
    relu(z): equal at z = 0, and at every other integer z off by |z| e^(-64 |z|) < 1e-27, so
    an Expr whose forms are integer-valued keeps its value (relu on a swish machine)."""
    index: dict[bytes, int] = {}
    w1_cols: list[np.ndarray] = []
    b1: list[float] = []
    w2_rows: list[np.ndarray] = []
    n_out = len(outputs)
    for k, e in enumerate(outputs):
        for coef, f in e.terms:
            if f.space is not space:
                raise ValueError("an output Expr uses a form from another MLP space")
            key = np.append(f.w, f.c).tobytes()
            h = index.get(key)
            if h is None:
                h = index[key] = len(b1)
                w1_cols.append(f.w)
                b1.append(f.c)
                w2_rows.append(np.zeros(n_out))
            w2_rows[h][k] += coef
    keep = [h for h in range(len(b1)) if np.any(w2_rows[h] != 0.0)]
    if not keep:  # constant outputs only: one silent neuron keeps the MLP well-formed
        w1_cols.append(np.zeros(space.width))
        b1.append(0.0)
        w2_rows.append(np.zeros(n_out))
        keep = [len(b1) - 1]
    w1 = np.stack([w1_cols[h] for h in keep], axis=1)
    w2 = np.stack([w2_rows[h] for h in keep], axis=0)
    b1 = np.array([b1[h] for h in keep])
    b2 = np.array([e.const for e in outputs])
    if swish:
        g = SWISH_SHARPNESS  # a power of two: the scaled weights are exact
        return tw.mlp(tw.concat(space.values), w1 * g, b1 * g, w2 / g, b2, activation="swish")
    return tw.mlp(tw.concat(space.values), w1, b1, w2, b2)


def char_table(pairs, vocab: str, scale: float) -> tuple[list[int], np.ndarray]:
    """(codes, logits) for `tw.map_to_table`: each (code, character) pair, first one wins,
    scores `scale` on its character and 0 elsewhere."""
    codes, rows = [], []
    for code, ch in pairs:
        if code in codes:
            continue
        row = np.zeros(len(vocab))
        row[vocab.index(ch)] = scale
        codes.append(code)
        rows.append(row)
    return codes, np.array(rows)


def emit_logits(vocab: str, digit: Expr | None, flags: Mapping[str, Expr],
                digit_chars: str = "0123456789", scale: float = 10.0) -> list[Expr]:
    """Logit Exprs (one per vocabulary character) whose argmax is `flags`' character where its
    0/1 flag is set, else digit_chars[e] for the integer digit value e (flags are exclusive).

    Digit v scores scale * (2 v e - v^2): the best digit wins by `scale`; a set flag scores
    +W and an unset one -W with W above every digit score."""
    top = len(digit_chars) - 1
    w = scale * (top * top + 10.0)
    out = []
    for ch in vocab:
        if ch in flags:
            out.append(flags[ch] * (2.0 * w) - w)
        elif digit is not None and ch in digit_chars:
            v = digit_chars.index(ch)
            out.append(digit * (2.0 * scale * v) - scale * v * v)
        else:
            out.append(Expr(-3.0 * w))
    return out


# --------------------------------------------------------------------------------------
# Programs and generation
# --------------------------------------------------------------------------------------


@dataclass
class Geometry:
    d: int
    d_head: int
    d_hidden: int


@dataclass
class Anchor:
    """The anchor compiler's published figures for the same program (layers)."""

    greedy: int | None
    cpsat: int | None
    d: int | None

    @property
    def best(self) -> int | None:
        vals = [v for v in (self.greedy, self.cpsat) if v is not None]
        return min(vals) if vals else None


@dataclass
class TokenProgram:
    """A text-in/text-out program compiled from a tw graph (see module docstring).

    `normalize(prompt)` checks a prompt and returns the exact text fed to the model (raising
    PromptError with a one-line reason); `reference(prompt)` is the plain-Python answer the
    model must reproduce; `sample(rng)` draws a random valid prompt. `prompt_rules`: the
    (pattern, replacement) rewrites `normalize` applies after checking, as data the exports'
    tokenizers apply too (`tw_lowering.export.prompts`; empty: the prompt is fed as typed)."""

    name: str
    vocab: str
    end: str
    module: object
    max_len: int
    max_answer: int
    normalize: Callable[[str], str]
    reference: Callable[[str], str]
    sample: Callable[[np.random.Generator], str]
    geometry: Geometry
    anchor: Anchor
    description: str = ""
    prompt_rules: tuple[tuple[str, str], ...] = ()

    def encode(self, prompt: str) -> np.ndarray:
        text = self.normalize(prompt)
        bad = sorted({ch for ch in text if ch not in self.vocab})
        if bad:
            raise PromptError(f"{self.name}: character(s) {''.join(bad)!r} are not in the "
                              f"vocabulary {self.vocab!r}")
        if len(text) + self.max_answer > self.max_len:
            raise PromptError(f"{self.name}: prompt of {len(text)} tokens is too long (at most "
                              f"{self.max_len - self.max_answer})")
        return np.array([self.vocab.index(ch) for ch in text], dtype=np.int64)

    def decode(self, ids) -> str:
        return "".join(self.vocab[int(i)] for i in ids)


def oracle_runner(program: TokenProgram):
    import twdialect

    return lambda inputs: twdialect.evaluate(program.module, inputs)


def _check_stepwise(program: TokenProgram, what: str) -> None:
    """A program with a full-mask head is refused: its logits at a position depend on later
    tokens, so neither token-by-token generation nor one causal pass means what it says."""
    from twdialect.interp import check_stepwise, find_graph

    check_stepwise(find_graph(program.module), f"{program.name}: {what}")


def generate(program: TokenProgram, prompt: str, runner=None) -> str:
    """Greedy generation from `prompt` until the end token (or max_answer tokens); returns the
    generated text without the end token. `runner(inputs) -> {"logits": (n, V)}` defaults to
    the oracle. A program with a full-mask `tw.attn` is refused (one line, why)."""
    _check_stepwise(program, "generate")
    run = runner or oracle_runner(program)
    ids = list(program.encode(prompt))
    end = program.vocab.index(program.end)
    out: list[int] = []
    for _ in range(program.max_answer):
        logits = np.asarray(run({"tokens": np.array(ids, dtype=np.int64)})["logits"])
        tok = int(np.argmax(logits[-1]))
        if tok == end:
            return program.decode(out)
        out.append(tok)
        ids.append(tok)
    return program.decode(out)


def matches_reference(program: TokenProgram, prompt: str, runner=None) -> bool:
    """Whether greedy generation from `prompt` reproduces `program.reference(prompt)` (and then
    the end token, unless the answer fills max_answer), checked in ONE forward pass over the
    prompt followed by the expected answer: by causality the logits at each position see only
    the tokens before it, so every argmax matching the next expected token is exactly the
    condition for the greedy loop to emit the expected text (a program with a full-mask head
    has no such causality and is refused)."""
    _check_stepwise(program, "matches_reference")
    run = runner or oracle_runner(program)
    ids = list(program.encode(prompt))
    answer = program.reference(prompt)
    want = [program.vocab.index(ch) for ch in answer]
    if len(want) < program.max_answer:
        want.append(program.vocab.index(program.end))
    seq = np.array(ids + want[:-1], dtype=np.int64)
    logits = np.asarray(run({"tokens": seq})["logits"])
    got = np.argmax(logits[len(ids) - 1:], axis=1)
    return bool(np.array_equal(got, np.array(want)))


def check_regex(name: str, pattern: str, text: str, shape: str) -> re.Match:
    m = re.fullmatch(pattern, text)
    if m is None:
        raise PromptError(f"{name}: prompt {text!r} must look like {shape}")
    return m


# --------------------------------------------------------------------------------------
# Decimal numbers: digits from column sums, and MSB-first emission
# --------------------------------------------------------------------------------------


def column_digits(ys: Sequence[tuple[Form, int, int]], n_digits: int) -> tuple[list[Expr], Expr]:
    """Decimal digits D_0..D_{n-1} (least significant first) and the digit count of
    R = sum_m 10^m y_m >= 0, from integer column values y_m in [lo_m, hi_m] (e.g. a_m + b_m).

    carry_k = floor(sum_{m<k} 10^m y_m / 10^k) is a staircase of an affine form, so
    D_k = y_k + carry_k - 10 carry_{k+1} is one MLP stage however the columns overflow."""
    space = ys[0][0].space
    zero = space.const(0.0)

    def partial(k):  # sum_{m<k} 10^m y_m and its bounds
        f, lo, hi = zero, 0, 0
        for m in range(min(k, len(ys))):
            y, ylo, yhi = ys[m]
            f = f + y * (10.0 ** m)
            lo += ylo * 10 ** m
            hi += yhi * 10 ** m
        return f, lo, hi

    carries = [Expr(0.0)]
    for k in range(1, n_digits + 1):
        f, lo, hi = partial(k)
        unit = 10 ** k
        carries.append(floor_steps(f, lo // unit, hi // unit, unit))
    digits = []
    for k in range(n_digits):
        y = lin(ys[k][0]) if k < len(ys) else Expr(0.0)
        digits.append(y + carries[k] - carries[k + 1] * 10.0)
    total, _, _ = partial(len(ys))
    count = Expr(1.0)
    for j in range(1, n_digits):
        count = count + step(total - 10.0 ** j)
    return digits, count


def number_logits(vocab: str, digits: Sequence[Form], count: Form, t: Form,
                  negative: Form | None, end: str, minus: str = "-",
                  extra_flags: Mapping[str, Expr] | None = None) -> list[Expr]:
    """Logits that spell a number MSB first, one character per step t = 0, 1, ...:
    an optional minus sign (when the 0/1 `negative` is set), the `count` digits of
    `digits` (LSB first, each an integer in [0, 9]), then `end`. `extra_flags` add
    characters that override the digits where their 0/1 flag is set."""
    k = len(digits)
    shifted = t - negative if negative is not None else t  # step within the digits
    radix = float(k + 3)  # > the range of `shifted` that matters ([-1, k + 1])
    key = count * radix + shifted
    value = Expr(0.0)
    for n in range(1, k + 1):
        for tau in range(n):
            value = value + gate_eq(digits[n - 1 - tau], 10.0, key - (radix * n + tau))
    flags = {end: eq(shifted - count)}
    if negative is not None:
        flags[minus] = step(negative - t - 1.0)
    flags.update(extra_flags or {})
    return emit_logits(vocab, value, flags)
