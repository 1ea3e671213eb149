"""RASP programs as users write them, beyond tracr's library: compiled by tw and checked
against tracr's evaluator on sampled inputs at max_seq_len 5 and 20 (and causal at 8).

Each one once found a gap or stands for a family: tracr's library with other vocabularies
and arguments, histograms of histograms, selector And/Or/Not inside a SelectorWidth (which
tracr refuses), means of non-binary and fractional values, maps of numerical means, numbers
from categorical tables and back, constant and full SOps, deep chains of shifts and sorts,
vocabularies of 30-50 tokens, bool and float tokens and outputs.
"""

from __future__ import annotations

import random

import pytest

pytest.importorskip("tracr.rasp.rasp", reason="the RASP frontend's tests need tw-compiler[rasp]")
from tracr.compiler import lib  # noqa: E402
from tracr.rasp import rasp  # noqa: E402

from test_rasp import agrees  # noqa: E402
from test_rasp_fuzz import causal_evaluate  # noqa: E402
from tw_lowering import compile_rasp_to_model  # noqa: E402

C = rasp.Comparison
T, I = rasp.tokens, rasp.indices
LETTERS = set("abcdefghijklmnopqrstuvwxyz")
DIGITS = set(range(10))


def num(sop):
    return rasp.numerical(sop)


def value_of(sop):
    """The SOp's value as a number (a numerical Map of it)."""
    return num(rasp.Map(lambda x: x, sop))


def mean_over(selector, values):
    return num(rasp.Aggregate(selector, values, default=0))


def hist(sop=T):
    return rasp.SelectorWidth(rasp.Select(sop, sop, C.EQ))


def last_index():
    return rasp.SequenceMap(lambda length, i: length - 1, lib.make_length(), I)


def _library(n):
    yield "hist26", lib.make_hist(), LETTERS
    yield "sort_unique30", lib.make_sort_unique(T, T), set(range(30))
    yield "sort_min_key", lib.make_sort(T, T, max_seq_len=n, min_key=1), set(range(1, 21))
    yield "sort_numerical_values", lib.make_sort(num(rasp.Map(lambda x: 2 * x, T)), T,
                                                 max_seq_len=n, min_key=1), set(range(1, 6))
    yield "sort_freq10", lib.make_sort_freq(max_seq_len=n), DIGITS
    yield "frac_prevs26", lib.make_frac_prevs(T == "a"), LETTERS
    yield "pair_balance_braces", lib.make_pair_balance(T, "{", "}"), set("(){}[]")
    yield "shuffle_dyck3", lib.make_shuffle_dyck(pairs=["()", "{}", "[]"]), set("(){}[]a")
    yield "count_less_freq5", lib.make_count_less_freq(5), set("abcdefgh")
    yield "count_digit", lib.make_count(T, 3), DIGITS
    yield "nary3", lib.make_nary_sequencemap(lambda x, y, z: (x + y + z) % 10, T, I, T), DIGITS
    yield "shift3", lib.shift_by(3, T), DIGITS
    yield "detect_abc", lib.detect_pattern(T, "abc"), set("abc")
    yield "length_numerical", num(lib.make_length()), set("ab")


def _users(n):
    prev = rasp.Aggregate(rasp.Select(I, I, lambda k, q: k == q - 1), T)
    yield "prev_token", prev, DIGITS
    yield "running_mean", mean_over(rasp.Select(I, I, C.LEQ), value_of(T)), DIGITS
    yield "count_greater", rasp.categorical(rasp.Map(
        lambda x: x, rasp.SelectorWidth(rasp.Select(T, T, C.GT)))), DIGITS
    yield "sum_with_prev_mod10", rasp.categorical(rasp.SequenceMap(
        lambda x, y: (x + y) % 10, T, lib.shift_by(1, T))), DIGITS
    is_step_up = num(rasp.SequenceMap(lambda x, y: 1 if y is None or x >= y else 0, T,
                                      lib.shift_by(1, T)))
    yield "share_sorted_steps", mean_over(rasp.Select(I, I, C.TRUE), is_step_up), DIGITS
    yield "most_freq", rasp.Aggregate(rasp.Select(hist(), rasp.Full(n), C.EQ), T), set("abc")
    frac = lib.make_frac_prevs(T == "a")
    yield "frac_gt_half", rasp.Map(lambda x: x > 0.5, frac), set("abc")
    yield "frac_tenths", rasp.Map(lambda x: round(x * 10), frac), set("abc")
    yield "frac_squared", num(rasp.Map(lambda x: x * x, frac)), set("abc")
    yield "frac_affine", num(rasp.Map(lambda x: 2 * x - 1, frac)), set("ab")
    yield "frac_quarters", rasp.categorical(rasp.Map(lambda x: int(x * 4), frac)), set("ab")
    mean_tok = mean_over(rasp.Select(I, I, C.TRUE), value_of(T))
    yield "mean_above_2", rasp.Map(lambda m: m > 2, mean_tok), {1, 2, 3}
    yield "mean_minus_token", num(rasp.SequenceMap(lambda m, t: m - t, mean_tok, value_of(T))), \
        {1, 2, 3}
    yield "token_at_or_before", rasp.Aggregate(rasp.Select(rasp.Full(1), T, C.LT), T), {0, 1, 2}
    width_lt = num(rasp.SelectorWidth(rasp.Select(T, T, C.LT)))
    yield "width_mod3", rasp.Map(lambda x: x % 3, width_lt), {1, 2, 3, 4}
    yield "width_and_or_not", rasp.SelectorWidth(rasp.SelectorOr(
        rasp.SelectorAnd(rasp.Select(T, T, C.EQ), rasp.Select(I, I, C.LT)),
        rasp.SelectorNot(rasp.Select(T, T, C.LEQ)))), {1, 2, 3}
    yield "double_hist", rasp.SelectorWidth(rasp.Select(hist(), hist(), C.EQ)), set("abcd")
    yield "count_earlier_equal", rasp.SelectorWidth(rasp.SelectorAnd(
        rasp.Select(T, T, C.EQ), rasp.Select(I, I, C.LT))), set("ab")
    parity = rasp.Map(lambda i: i % 2, I)
    yield "same_parity_mean", mean_over(rasp.Select(parity, parity, C.EQ),
                                        num(rasp.Map(lambda x: x / 10, T))), set(range(5))
    yield "last_token", rasp.Aggregate(rasp.Select(I, last_index(), C.EQ), T), set("xyz")
    yield "sorted_then_shifted", lib.shift_by(1, lib.make_sort_unique(T, T)), set(range(8))
    yield "width_of_smaller_hist", rasp.SelectorWidth(rasp.Select(hist(), I, C.LT)), set("abc")
    yield "linear_token_index", num(rasp.LinearSequenceMap(value_of(T), value_of(I), 2, -1)), \
        set(range(4))
    yield "float_tokens_mean", mean_over(rasp.Select(I, I, C.LEQ), value_of(T)), {0.5, 1.5, 2.5}
    yield "token_below_index", rasp.SelectorWidth(rasp.Select(T, I, C.LT)), set(range(6))
    yield "repeated", rasp.Map(lambda x: x > 1, hist()), set("ab")
    yield "token_times_position", num(rasp.SequenceMap(
        lambda a, b: a * b, value_of(T), num(rasp.Map(lambda i: i + 1, I)))), set(range(3))
    yield "first_token", rasp.Aggregate(rasp.Select(I, rasp.Full(0), C.EQ), T), set("pq")
    yield "others", rasp.SelectorWidth(rasp.Select(T, T, C.NEQ)), set("abc")
    yield "greater_or_later", rasp.SelectorWidth(rasp.SelectorOr(
        rasp.Select(T, T, C.GT), rasp.Select(I, I, C.GEQ))), set(range(4))
    yield "nothing_selected", mean_over(rasp.Select(T, T, C.FALSE),
                                        num(rasp.Map(lambda x: 1, T))), set("ab")
    yield "max_token", rasp.Aggregate(rasp.Select(I, last_index(), C.EQ),
                                      lib.make_sort_unique(T, T)), set(range(10))
    yield "deep_shifts", lib.shift_by(1, lib.shift_by(1, lib.make_sort_unique(
        lib.shift_by(1, T), I))), set(range(4))
    yield "sort_50_tokens", lib.make_sort_unique(T, T), set(range(50))
    yield "token_times_index_mod7", rasp.categorical(rasp.SequenceMap(
        lambda x, i: (x * i) % 7, T, I)), set(range(7))
    yield "named", num(rasp.Map(lambda x: x + 0.25, value_of(T).named("value"))).named("out"), \
        {1, 2}
    yield "mean_of_widths", mean_over(rasp.Select(I, I, C.TRUE), value_of(num(hist()))), set("ab")
    half = rasp.Map(lambda x: x // 2, T)
    yield "even_in_pair", rasp.Aggregate(rasp.Select(half, half, C.EQ),
                                         rasp.Map(lambda x: x % 2 == 0, T)), set(range(0, 8, 2))


def programs(n: int) -> dict:
    return {name: (program, vocab) for name, program, vocab in [*_library(n), *_users(n)]}


NAMES = list(programs(5))


def sample(vocab, n: int, count: int, seed: int) -> list[list]:
    rng = random.Random(seed)
    values = sorted(vocab, key=str)
    xs = [[rng.choice(values) for _ in range(rng.randint(1, n))] for _ in range(count)]
    return xs + [[rng.choice(values) for _ in range(n)] for _ in range(4)]


def check_program(name: str, n: int, causal: bool) -> None:
    program, vocab = programs(n)[name]
    model = compile_rasp_to_model(program, vocab, n, causal=causal, compiler_bos="BOS")
    check_against_rasp(model, program, sample(vocab, n, 24, n), causal, name)


def check_against_rasp(model, program, xs: list[list], causal: bool, label) -> None:
    """Every input's decoded outputs against tracr's evaluator (causal: each position over
    its prefix); an input the program has no meaning for is skipped."""
    for x, out in zip(xs, model.apply_batch([["BOS", *x] for x in xs])):
        try:
            want = ([causal_evaluate(program, x[:i + 1])[i] for i in range(len(x))] if causal
                    else rasp.evaluate(program, x))
        except Exception:  # noqa: BLE001 - an input the program has no meaning for
            continue
        got = out.decoded[1:]
        assert all(agrees(g, w) for g, w in zip(got, want)), (label, x, got, want)


@pytest.mark.parametrize("n", [5, 20])
@pytest.mark.parametrize("name", NAMES)
def test_user_program(name, n):
    check_program(name, n, causal=False)


@pytest.mark.parametrize("name", NAMES)
def test_user_program_causal(name):
    check_program(name, 8, causal=True)
