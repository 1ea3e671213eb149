"""Token programs built with torchwright's own ops (`torchwright==0.2.0`), for comparing tw's
compiler with torchwright's on graphs of torchwright's kind.

Every MLP is one of torchwright's swiglu-library FFNs (swish lanes, gated where the op gates),
and every head is one of its rotary helpers: *offset* heads (`attend_to_offset`: the token
k positions back, position entering only through RoPE), *recency* heads (`get_prev_value`:
the most recent position where a condition holds, a decaying bump on the mid-frequency
planes) and *content* heads on the slowest planes (`attend_argmin_above_integer`, and the
mean head inside `output_sequence`'s step counter). Each program is a graph from token ids
(an `Embedding` reading `TOKENS`) to an embedding-valued output whose nearest table row is
the next token; `Program.expected` is its plain-Python reference.

    from tw_examples.torchwright_graphs import PROGRAMS
    program = PROGRAMS["caesar"]
    output, embedding = program.build()          # torchwright nodes
    prompt, answer = program.sample(rng)         # token lists
    ids, first = program.feed(embedding, prompt, answer)   # teacher-forced ids, answer start

torchwright is imported only when a graph is built; without it the builders raise a
`TorchwrightError` that says how to install it.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from tw_frontends.torchwright import TorchwrightError

TOKENS = "embedding_input"  # torchwright's Embedding reads the token ids from this input
MAX_POSITIONS = 512  # every program's RoPE config: the rollout its recency heads are sized for
BOS, EOS, TRIGGER, BLANK = "<bos>", "<eos>", "\n", " "
DIGITS = "0123456789"
LETTERS = "abcdefghijklmnopqrstuvwxyz"


def torchwright_modules():
    """torchwright's graph and op modules, imported on first use (one clear error when absent)."""
    try:
        import torch
        from torchwright.graph import Concatenate
        from torchwright.ops import attention_ops, inout_nodes, linear
        from torchwright.ops.swiglu import (arithmetic_ops, embedding_arithmetic, logic_ops,
                                            map_select, scalar_encoding, sequence_ops)
    except ImportError:
        raise TorchwrightError("graphs built with torchwright's ops need torchwright: pip "
                               "install 'tw-compiler[torchwright]'") from None
    return _Ops(torch, Concatenate, attention_ops, inout_nodes, linear, arithmetic_ops,
                embedding_arithmetic, logic_ops, map_select, scalar_encoding, sequence_ops)


@dataclass(frozen=True)
class _Ops:
    """torchwright's modules, named for what the builders take from them (the swiglu op
    library throughout: importing it is torchwright's machine choice)."""

    torch: object
    Concatenate: object
    attn: object
    io: object
    linear: object
    arith: object
    digits: object
    logic: object
    table: object
    scalar: object
    seq: object


@dataclass(frozen=True)
class Program:
    """One token program: how to build its graph, what its prompts are and what it answers.

    `d` and `d_head` are the geometry both compilers are compared at (d_hidden = d); the
    graph is built against `d_head` (torchwright's RoPE config must match the compiled head
    width). `prompts(rng)` is a list of prompts (every prompt where `exhaustive`, else a
    seeded sample); `expected(prompt)` the answer tokens, ending with `<eos>`.
    `torchwright_layers` are torchwright's own compiles of this graph at this geometry
    (`bench/frontends.py --torchwright`; every CP-SAT solve OPTIMAL), which tw must match."""

    name: str
    d: int
    d_head: int
    vocab: tuple[str, ...]
    build_graph: Callable[[_Ops, object, object], object]
    prompts: Callable[[np.random.Generator], list[list[str]]]
    expected: Callable[[Sequence[str]], list[str]]
    exhaustive: bool
    summary: str
    torchwright_layers: tuple[int, int]  # torchwright 0.2.0's (greedy, CP-SAT) layers, measured

    def build(self):
        """(output node, Embedding): the graph, built with torchwright's ops."""
        ops = torchwright_modules()
        embedding = ops.io.create_embedding(vocab=list(self.vocab))
        rope = ops.io.create_rope_config(d_head=self.d_head, max_positions=MAX_POSITIONS)
        return self.build_graph(ops, embedding, rope), embedding

    def sample(self, rng: np.random.Generator) -> tuple[list[str], list[str]]:
        """One random prompt and its answer."""
        prompts = self.prompts(rng)
        prompt = prompts[int(rng.integers(len(prompts)))]
        return prompt, self.expected(prompt)

    def feed(self, embedding, prompt: Sequence[str], answer: Sequence[str]):
        """(token ids of prompt + answer[:-1], the position answering answer[0]): a
        teacher-forced run reads the whole answer at positions first .. first+len-1."""
        tokens = [*prompt, *answer[:-1]]
        return np.array([embedding.tokenizer.get_token_id(t) for t in tokens]), len(prompt) - 1


def reference(output, ids: np.ndarray) -> np.ndarray:
    """torchwright's own evaluation of `output` on token ids (float64 where torch's default
    dtype is): its memoised reference evaluator, since `Node.compute` alone recomputes shared
    inputs once per reader, exponentially in a deep graph's depth."""
    import torch
    from torchwright.debug.probe import reference_eval

    values = reference_eval(output, {TOKENS: torch.tensor(ids)}, len(ids))
    return values[output].detach().double().numpy()


def decode(embedding, vectors: np.ndarray) -> list[str]:
    """The token whose embedding row scores highest against each output vector (the
    unembedding torchwright's Unembedding applies)."""
    table = embedding.table.detach().double().numpy()
    return [embedding.tokenizer.decode_id(int(i)) for i in np.argmax(vectors @ table.T, axis=1)]


# -- shared pieces -----------------------------------------------------------------------------


def _literal(ops: _Ops, embedding, token: str):
    return ops.io.create_literal_value(embedding.get_embedding(token))


def _emit(ops: _Ops, rope, embedding, trigger, tokens: list):
    """The answer (`tokens`, then `<eos>`), one token per position from the trigger on (blank
    before it)."""
    return ops.seq.output_sequence(rope, trigger, [*tokens, _literal(ops, embedding, EOS)],
                                   embedding.get_embedding(BLANK))


def _emit_trimmed(ops: _Ops, rope, embedding, trigger, digits: list):
    """The answer `digits` without its leading zeros (at most len(digits) - 1 dropped), then
    `<eos>`: torchwright's remove_leading_0s shifts the sequence left, padding with its last
    element, so `<eos>` rides inside it and fills the freed slots."""
    eos = _literal(ops, embedding, EOS)
    trimmed = ops.seq.remove_leading_0s(embedding, [*digits, eos],
                                        max_removals=len(digits) - 1)
    return ops.seq.output_sequence(rope, trigger, trimmed, embedding.get_embedding(BLANK))


def _latched_offsets(ops: _Ops, rope, value, trigger, offsets: Sequence[int]) -> list:
    """`value` at each offset from the trigger, read there (offset heads) and held at every
    later position (recency heads keyed on the trigger)."""
    return [ops.attn.get_prev_value(rope, ops.attn.attend_to_offset(rope, value, delta_pos=k),
                                    trigger) for k in offsets]


def _is_token(ops: _Ops, embedding, token: str):
    return ops.logic.equals_vector(embedding, embedding.get_embedding(token))


# -- caesar: a runtime shift applied to a fixed number of letters -------------------------------

CAESAR_LETTERS = 5


def _caesar_graph(ops: _Ops, embedding, rope):
    """The shift digit is held by a recency head keyed on "is a digit"; every letter is
    shifted in place by one table lookup on (letter, shift); at the trigger an offset head
    per letter reads the shifted letters back and recency heads hold them for the answer."""
    e = embedding.get_embedding
    is_digit = ops.table.map_to_table(
        inp=embedding, key_to_value={e(c): ops.torch.tensor([1.0]) for c in DIGITS},
        default=ops.torch.tensor([-1.0]))
    shift = ops.attn.get_prev_value(rope, embedding, is_digit)
    shifted = ops.table.map_to_table(
        ops.linear.concat([embedding, shift]),
        {ops.torch.cat([e(c), e(str(s))]): e(LETTERS[(i + s) % 26])
         for s in range(10) for i, c in enumerate(LETTERS)},
        default=e(BLANK))
    trigger = _is_token(ops, embedding, TRIGGER)
    offsets = range(-CAESAR_LETTERS, 0)
    return _emit(ops, rope, embedding, trigger, _latched_offsets(ops, rope, shifted, trigger,
                                                                  offsets))


def _caesar_prompts(rng: np.random.Generator, n: int = 400) -> list[list[str]]:
    return [[BOS, str(int(rng.integers(10))), *rng.choice(list(LETTERS), CAESAR_LETTERS),
             TRIGGER] for _ in range(n)]


def _caesar_expected(prompt: Sequence[str]) -> list[str]:
    shift = int(prompt[1])
    return [LETTERS[(LETTERS.index(c) + shift) % 26] for c in prompt[2:-1]] + [EOS]


# -- adder: two numbers of up to three digits, digit by digit with carries ----------------------

ADDER_DIGITS = 3


def _adder_graph(ops: _Ops, embedding, rope):
    """Each operand's digits are parsed by torchwright's NumericSequence (offset heads build a
    sliding digit window, zeroed where a number starts) and captured at its delimiter (recency
    heads); the digits are added right to left with one lookup per digit and carry, the last
    carry is the leading digit, and leading zeros are dropped."""
    window = ops.seq.NumericSequence(rope, embedding, ADDER_DIGITS)
    plus, trigger = _is_token(ops, embedding, "+"), _is_token(ops, embedding, TRIGGER)
    first = window.get_digits_at_event(plus)
    second = window.get_digits_at_event(trigger)
    carry = ops.io.create_literal_value(ops.torch.tensor([-1.0]))
    digits = []
    for a, b in reversed(list(zip(first, second))):
        digit, carry = ops.digits.sum_digits(embedding, a, b, carry)
        digits.insert(0, digit)
    leading = ops.table.select(carry, _literal(ops, embedding, "1"), _literal(ops, embedding, "0"))
    return _emit_trimmed(ops, rope, embedding, trigger, [leading, *digits])


def _adder_prompts(rng: np.random.Generator, n: int = 400) -> list[list[str]]:
    top = 10 ** ADDER_DIGITS
    return [[BOS, *str(int(a)), "+", *str(int(b)), TRIGGER]
            for a, b in rng.integers(0, top, (n, 2))]


def _adder_expected(prompt: Sequence[str]) -> list[str]:
    a, b = "".join(prompt[1:-1]).split("+")
    return [*str(int(a) + int(b)), EOS]


# -- binary increment: a fixed-width binary number plus one, with its carry chain ---------------

INCREMENT_BITS = 4


def _increment_graph(ops: _Ops, embedding, rope):
    """At the trigger, offset heads read the bits (held by recency heads); a carry chain of
    AND gates runs from the least significant bit, a carried bit flips, the final carry is a
    new leading bit, and leading zeros are dropped."""
    trigger = _is_token(ops, embedding, TRIGGER)
    bits = _latched_offsets(ops, rope, embedding, trigger, range(-1, -INCREMENT_BITS - 1, -1))
    one, zero = _literal(ops, embedding, "1"), _literal(ops, embedding, "0")
    is_one = [ops.logic.equals_vector(b, embedding.get_embedding("1")) for b in bits]
    carry = ops.io.create_literal_value(ops.torch.tensor([1.0]))
    new_bits = []
    for bit, set_ in zip(bits, is_one):
        new_bits.insert(0, ops.table.select(carry, ops.table.select(set_, zero, one), bit))
        carry = ops.logic.bool_all_true([set_, carry])
    return _emit_trimmed(ops, rope, embedding, trigger,
                         [ops.table.select(carry, one, zero), *new_bits])


def _increment_prompts(rng: np.random.Generator) -> list[list[str]]:
    return [[BOS, *bits, TRIGGER] for bits in itertools.product("01", repeat=INCREMENT_BITS)]


def _increment_expected(prompt: Sequence[str]) -> list[str]:
    return [*format(int("".join(prompt[1:-1]), 2) + 1, "b"), EOS]


# -- fibonacci: a recurrence over the model's own output, two digits per term -------------------

FIB_WIDTH = 2  # digits per term (terms are kept mod 10^FIB_WIDTH)
FIB_TERMS = 8


def _fibonacci_graph(ops: _Ops, embedding, rope):
    """The two seed digits of the prompt open the answer (offset heads at the trigger, held by
    recency heads); every later digit reads the previous two terms from the tokens already
    emitted (offset heads), adds them as numbers and keeps the digit it emits (mod 100)."""
    w = FIB_WIDTH
    trigger = _is_token(ops, embedding, TRIGGER)
    zero = _literal(ops, embedding, "0")
    seeds = _latched_offsets(ops, rope, embedding, trigger, (-2, -1))
    opening = [zero] * (w - 1) + [seeds[0]] + [zero] * (w - 1) + [seeds[1]]
    step = []
    for d in range(w):  # digit d of a term, emitted w - 1 - d positions before its last digit
        def term(back: int):
            return [ops.attn.attend_to_offset(rope, embedding, delta_pos=-(back * w - 1 + d - i))
                    for i in range(w)]
        total = ops.linear.add(ops.scalar.digits_to_number(embedding, term(1)),
                               ops.scalar.digits_to_number(embedding, term(2)))
        digits = ops.scalar.number_to_digit_scalars(total, w + 1, 2 * (10 ** w - 1))
        step.append(ops.scalar.scalar_to_embedding(digits[1 + d], embedding))
    return _emit(ops, rope, embedding, trigger, opening + step * (FIB_TERMS - 2))


def _fibonacci_prompts(rng: np.random.Generator) -> list[list[str]]:
    return [[BOS, a, b, TRIGGER] for a, b in itertools.product(DIGITS, repeat=2)]


def _fibonacci_expected(prompt: Sequence[str]) -> list[str]:
    terms = [int(prompt[1]), int(prompt[2])]
    while len(terms) < FIB_TERMS:
        terms.append((terms[-1] + terms[-2]) % 10 ** FIB_WIDTH)
    return [c for t in terms for c in format(t, f"0{FIB_WIDTH}d")] + [EOS]


# -- digit sort: distinct digits, ascending, one content head per output digit -----------------

SORT_DIGITS = 5


def _sort_graph(ops: _Ops, embedding, rope):
    """Every prompt digit keys its value and ten "above threshold t" indicators; each output
    step is a content head (argmin of the digit among those above the last one emitted, on
    the slowest planes) whose threshold is the previous step's digit, held at the trigger by
    a recency head."""
    t = ops.torch
    one_hot_width = 10  # thresholds -1 .. 8
    trigger = _is_token(ops, embedding, TRIGGER)
    value = ops.scalar.digit_to_scaled_scalar(embedding, embedding, place_value=1.0)
    before_trigger = ops.logic.bool_not(ops.attn.get_prev_value(rope, trigger, trigger))
    keyed = ops.logic.bool_all_true([ops.seq.check_is_digit(embedding), before_trigger])
    nothing = ops.io.create_literal_value(t.tensor([0.0]))
    above = ops.Concatenate([
        ops.table.select(keyed, ops.arith.compare(value, c - 0.5, true_level=1.0,
                                                  false_level=0.0), nothing)
        for c in range(one_hot_width)])
    last = ops.io.create_literal_value(t.tensor([-1.0]))
    answer = []
    for _ in range(SORT_DIGITS):
        low = ops.linear.add_const(last, 1.0)
        slot = ops.table.in_range(low, ops.linear.add_const(low, 1.0), one_hot_width)
        threshold = ops.linear.add_const(ops.linear.multiply_const(slot, 0.5), 0.5)

        def smallest_above(payload):
            return ops.attn.attend_argmin_above_integer(rope, value, above, threshold, payload)

        answer.append(smallest_above(embedding))
        last = ops.attn.get_prev_value(rope, smallest_above(value), trigger)
    return _emit(ops, rope, embedding, trigger, answer)


def _sort_prompts(rng: np.random.Generator, n: int = 400) -> list[list[str]]:
    return [[BOS, *rng.choice(list(DIGITS), SORT_DIGITS, replace=False), TRIGGER]
            for _ in range(n)]


def _sort_expected(prompt: Sequence[str]) -> list[str]:
    return [*sorted(prompt[1:-1]), EOS]


# -- calculator: +, - and * on two numbers of up to two digits, signed answers -----------------

CALC_DIGITS = 2
CALC_OPS = "+-*"


def _calculator_graph(ops: _Ops, embedding, rope):
    """Operands parsed as by the adder and turned into numbers (digit lookups); the operator
    token (one before the trigger) is held by a recency head; sum, difference and product
    (one gated multiply) are switched by it; the magnitude's digits come from floor-division
    staircases, and leading zeros are dropped with a minus sign prepended for a negative
    answer."""
    e = embedding.get_embedding
    window = ops.seq.NumericSequence(rope, embedding, CALC_DIGITS)
    trigger = _is_token(ops, embedding, TRIGGER)
    # an answer's minus sign is no operator: only operator tokens before the trigger count
    before_trigger = ops.logic.bool_not(ops.attn.get_prev_value(rope, trigger, trigger))
    is_operator = ops.logic.bool_all_true([
        ops.logic.bool_any_true([_is_token(ops, embedding, c) for c in CALC_OPS]),
        before_trigger])
    a = ops.scalar.digits_to_number(embedding, window.get_digits_at_event(is_operator))
    b = ops.scalar.digits_to_number(embedding, window.get_digits_at_event(trigger))
    operator = ops.attn.get_prev_value(rope, embedding, is_operator)
    chosen = [ops.logic.equals_vector(operator, e(c)) for c in CALC_OPS]
    value = ops.table.switch(chosen, [ops.linear.add(a, b), ops.linear.subtract(a, b),
                                      ops.arith.multiply(a, b)])
    negative = ops.arith.compare(ops.linear.negate(value), thresh=0.5)
    top = (10 ** CALC_DIGITS - 1) ** 2
    places = len(str(top))
    digits = ops.scalar.number_to_digit_scalars(ops.arith.abs(value), places, top)
    eos = _literal(ops, embedding, EOS)
    answer = ops.seq.remove_leading_0s(
        embedding, [*(ops.scalar.scalar_to_embedding(d, embedding) for d in digits), eos, eos],
        max_removals=places - 1, sign_cond=negative, sign_token=e("-"))
    return ops.seq.output_sequence(rope, trigger, answer, e(BLANK))


def _calculator_prompts(rng: np.random.Generator, n: int = 400) -> list[list[str]]:
    top = 10 ** CALC_DIGITS
    return [[BOS, *str(int(a)), CALC_OPS[int(k)], *str(int(b)), TRIGGER]
            for a, b, k in zip(rng.integers(0, top, n), rng.integers(0, top, n),
                               rng.integers(0, len(CALC_OPS), n))]


def _calculator_expected(prompt: Sequence[str]) -> list[str]:
    text = "".join(prompt[1:-1])
    op = next(c for c in CALC_OPS if c in text)
    a, b = (int(x) for x in text.split(op))
    return [*str({"+": a + b, "-": a - b, "*": a * b}[op]), EOS]


PROGRAMS: dict[str, Program] = {p.name: p for p in (
    Program("adder", 256, 16, (*DIGITS, "+", BLANK, TRIGGER, BOS, EOS), _adder_graph,
            _adder_prompts, _adder_expected, False,
            "two numbers of up to 3 digits added digit by digit (4-digit answers)", (19, 15)),
    Program("binary_increment", 512, 16, ("0", "1", BLANK, TRIGGER, BOS, EOS),
            _increment_graph, _increment_prompts, _increment_expected, True,
            "a 4-bit binary number plus one", (20, 16)),
    Program("caesar", 512, 16, (*LETTERS, *DIGITS, BLANK, TRIGGER, BOS, EOS), _caesar_graph,
            _caesar_prompts, _caesar_expected, False,
            "5 letters shifted by a runtime digit", (9, 7)),
    Program("fibonacci", 512, 16, (*DIGITS, BLANK, TRIGGER, BOS, EOS), _fibonacci_graph,
            _fibonacci_prompts, _fibonacci_expected, True,
            "8 terms mod 100 from two seed digits, each read from the model's own output",
            (11, 8)),
    Program("sort_digits", 384, 32, (*DIGITS, BLANK, TRIGGER, BOS, EOS), _sort_graph,
            _sort_prompts, _sort_expected, False,
            "5 distinct digits in ascending order", (16, 14)),
    Program("calculator", 1024, 16, (*DIGITS, *CALC_OPS, BLANK, TRIGGER, BOS, EOS),
            _calculator_graph, _calculator_prompts, _calculator_expected, False,
            "+, - or * on two numbers of up to 2 digits (signed answers)", (28, 20)),
)}
