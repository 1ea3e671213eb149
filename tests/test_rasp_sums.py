"""Sums of two numerical means (`LinearSequenceMap(Aggregate(s1, u), Aggregate(s2, v), a, b)`),
the shape of make_pair_balance's opens - closes, compiled and checked against tracr's
evaluator: over one selector (the same object, or rebuilt as make_frac_prevs does) they are
one head and a value set of the means of the same number of keys. The sum is the output, a map's input, or read as a category beside one of the
means (which then has two readers). A program whose answer depends on float64 rounding that
float32 cannot follow is refused (a RaspError), never answered wrongly.
"""

from __future__ import annotations

import itertools
import random

import pytest

pytest.importorskip("tracr.rasp.rasp", reason="the RASP frontend's tests need tw-compiler[rasp]")
from tracr.rasp import rasp  # noqa: E402

from test_rasp_user_programs import check_against_rasp  # noqa: E402
from tw_lowering import compile_rasp_to_model  # noqa: E402
from tw_frontends.rasp.translator import RaspError  # noqa: E402

C = rasp.Comparison
SOURCES = [lambda x: x, lambda x: x * 0.5, lambda x: 1 if x > 1 else 0, lambda x: x - 2]


# Sums written as a SequenceMap's own function: affine in (x, y), some not bit for bit
# numpy's (a x + b y) + c (the halves), which the value sets must follow as RASP computes them.
AFFINE = [lambda x, y: x - y, lambda x, y: x + y + 1, lambda x, y: (x - y) / 2,
          lambda x, y: 3 * y - x]


def sum_program(seed: int, plain: str | None = None):
    """(program, vocab, max_seq_len, causal) of one seed; `plain`: the sum a SequenceMap,
    not a LinearSequenceMap, of the same a x + b y ("same") or of an `AFFINE` lambda."""
    rng = random.Random(seed)
    vocab = {1, 2, 3} if rng.random() < 0.5 else {0, 1, 2, 3, 4}
    n = rng.choice([3, 5, 8, 12])
    causal = rng.random() < 0.3
    side = [rasp.tokens, rasp.indices]
    first = rasp.Select(rng.choice(side), rng.choice(side),
                        rng.choice([C.LEQ, C.LT, C.EQ, C.GEQ, C.TRUE, C.NEQ]))
    # the same object, or rebuilt alike (another selector takes the general path, whose value
    # pairs of non-binary means run to 10^5 at length 20: tens of seconds, then refused)
    second = first if seed % 2 else rasp.Select(first.keys, first.queries, first.predicate)
    x = rasp.numerical(rasp.Aggregate(first, rasp.numerical(rasp.Map(rng.choice(SOURCES),
                                                                     rasp.tokens)), default=0))
    y = rasp.numerical(rasp.Aggregate(second, rasp.numerical(rasp.Map(
        rng.choice(SOURCES), rng.choice(side))), default=0))
    a, b = rng.choice([1, -1, 2]), rng.choice([1, -1, -0.5])
    total = rasp.numerical(rasp.LinearSequenceMap(x, y, a, b))
    if plain == "same":
        total = rasp.numerical(rasp.SequenceMap(lambda u, v: a * u + b * v, x, y))
    elif plain:
        total = rasp.numerical(rasp.SequenceMap(AFFINE[seed % len(AFFINE)], x, y))
    use = rng.random()
    if use < 0.4:
        program = total
    elif use < 0.7:
        program = rasp.Map(lambda v: v > 0, total)
    else:
        program = rasp.SequenceMap(lambda s, m: (s > 0, m > 0.5), total, x)
    return program, vocab, n, causal


@pytest.mark.parametrize("seed", range(12))
def test_sum_of_means(seed):
    program, vocab, n, causal = sum_program(seed)
    try:
        model = compile_rasp_to_model(program, vocab, n, causal=causal, compiler_bos="BOS")
    except RaspError:
        return  # (refused with its reason: float32 cannot follow the program's float64)
    rng = random.Random(seed)
    values = sorted(vocab)
    check_against_rasp(model, program, [[rng.choice(values) for _ in range(rng.randint(1, n))]
                                        for _ in range(20)], causal, seed)


def sizes(program, vocab, n, causal):
    try:
        s = compile_rasp_to_model(program, vocab, n, causal=causal, compiler_bos="BOS").stats
    except RaspError as e:
        return str(e).split(": ", 1)[1]  # (the reason, without the expression's label)
    return s.n_layers, s.d, s.heads_per_layer, s.neurons_per_layer


@pytest.mark.parametrize("seed", range(12))
def test_a_sequence_map_of_a_x_plus_b_y_compiles_as_the_linear_sequence_map(seed):
    """`SequenceMap(lambda u, v: a * u + b * v, x, y)` of two means is what
    `LinearSequenceMap(x, y, a, b)` is: a linear map (one head where both average over one
    selector that nothing else reads), not a table of their value pairs."""
    assert sizes(*sum_program(seed, plain="same")) == sizes(*sum_program(seed))


@pytest.mark.parametrize("seed", range(12))
def test_an_affine_sequence_map_of_means_agrees_with_rasp(seed):
    """Affine lambdas whose float64 roundings are their own ((x - y) / 2): exact, or refused
    for RASP's float64 round-off (never for an unknown value set)."""
    program, vocab, n, causal = sum_program(seed, plain="affine")
    try:
        model = compile_rasp_to_model(program, vocab, n, causal=causal, compiler_bos="BOS")
    except RaspError as e:
        assert "float64" in str(e) or "float32" in str(e), e
        return
    rng = random.Random(seed)
    values = sorted(vocab)
    check_against_rasp(model, program, [[rng.choice(values) for _ in range(rng.randint(1, n))]
                                        for _ in range(20)], causal, seed)


def test_depth_of_brackets_as_a_sequence_map_is_one_head():
    """The share of opens minus the share of closes over each prefix, written with a plain
    lambda: at length 10 it was a table of 33 x 33 pairs of means (d 68, 1,290 neurons)."""
    num = rasp.numerical
    prefix = rasp.Select(rasp.indices, rasp.indices, C.LEQ)
    opens = num(rasp.Aggregate(prefix, num(rasp.Map(lambda t: t == "(", rasp.tokens)),
                               default=0))
    closes = num(rasp.Aggregate(prefix, num(rasp.Map(lambda t: t == ")", rasp.tokens)),
                                default=0))
    depth = num(rasp.SequenceMap(lambda a, b: a - b, opens, closes))
    model = compile_rasp_to_model(depth, {"(", ")"}, 10, compiler_bos="BOS")
    s = model.stats
    assert (s.n_layers, sum(s.heads_per_layer), sum(s.neurons_per_layer)) == (1, 1, 0)
    rng = random.Random(10)
    xs = [[rng.choice("()") for _ in range(rng.randint(1, 10))] for _ in range(40)]
    check_against_rasp(model, depth, xs, False, "depth")


def prefix_mean():
    tok = rasp.numerical(rasp.Map(lambda x: x, rasp.tokens))
    return rasp.numerical(rasp.Aggregate(rasp.Select(rasp.indices, rasp.indices, C.LEQ), tok,
                                         default=0))


@pytest.mark.parametrize("make, layers, most", [
    # m + i, i the (categorical) indices read as a number: a linear map (was 590 columns,
    # 17,888 neurons at length 30: a table of the value pairs)
    (lambda m: rasp.numerical(rasp.SequenceMap(lambda x, i: x + i, m, rasp.indices)), 1, 4),
    # a threshold of m + i: a table of the one number s = m + i, whose exact sums float64
    # rounds to one number (0.1 + 2 and 1.1 + 1): one point where their results agree
    (lambda m: rasp.SequenceMap(lambda x, i: x + i > 3.5, m, rasp.indices), 1, 4),
    (lambda m: rasp.SequenceMap(lambda x, i: round(x + i), m, rasp.indices), 1, 100),
])
def test_a_mean_and_the_indices_through_their_sum(make, layers, most):
    program = make(prefix_mean())
    model = compile_rasp_to_model(program, {1, 2, 3}, 30, compiler_bos="BOS")
    s = model.stats
    assert s.n_layers == layers and s.d <= 4 and sum(s.neurons_per_layer) <= most, s
    rng = random.Random(30)
    xs = [[rng.choice([1, 2, 3]) for _ in range(rng.randint(1, 30))] for _ in range(30)]
    check_against_rasp(model, program, xs, False, "sum with the indices")


def test_a_map_that_tells_apart_what_the_sum_rounds_together_reads_the_pairs():
    """round(m - i + 0.1): RASP gives -0.5000000000000001 for one (mean, index) pair and -0.5
    for another, which round to -1 and 0 and float32 cannot tell apart: the sum stays a
    table of its value pairs (the map reads each pair's own value), not a number; exact on
    every input."""
    num = rasp.numerical
    shifted = num(rasp.Map(lambda i: i - 2, rasp.indices))
    mean = num(rasp.Aggregate(rasp.Select(rasp.indices, rasp.tokens, C.NEQ), shifted,
                              default=0))
    total = num(rasp.SequenceMap(lambda x, y: x - y + 0.1, mean, rasp.indices))
    program = rasp.Map(lambda v: round(v), total)
    model = compile_rasp_to_model(program, {1, 2, 3}, 5, compiler_bos="BOS")
    xs = [list(x) for m in range(1, 6) for x in itertools.product([1, 2, 3], repeat=m)]
    check_against_rasp(model, program, xs, False, "round of a sum")


def test_a_product_of_means_is_no_sum():
    """x * y is not affine: the pairs' table, still exact."""
    from tw_frontends.rasp.tables import _affine_fit

    assert _affine_fit(lambda x, y: x * y, [0.0, 0.5, 1.0], [0.0, 1.0]) is None
    assert _affine_fit(lambda x, y: x - y, [0.0, 0.5, 1.0], [0.0, 1.0])[:3] == (1.0, -1.0, 0.0)
    assert _affine_fit(lambda x, y: 100 * x, [0.0, 1.0], [0.0, 1.0]) is None  # (too steep)
    assert _affine_fit(lambda x, y: (x - y) / 3, [0.1, 0.7], [0.2, 0.9])[3] is False


def test_an_input_of_one_value_is_no_term_of_a_sum():
    """x % 2 + y with x only ever 1 is y + 1: x's coefficient 0, not least squares' share
    of the constant (0.5 x + y + 0.5 read x, a column the model then keeps: fuzz seed 4522,
    d 18 -> 24)."""
    from tw_frontends.rasp.tables import _affine_fit

    assert _affine_fit(lambda x, y: x % 2 + y, [1], [0, 1, 2])[:3] == (0.0, 1.0, 1.0)
    assert _affine_fit(lambda x, y: 2 * x + y, [0, 1], [3])[:3] == (2.0, 0.0, 3.0)


def test_a_map_of_pair_balance_at_length_150():
    # opens - closes over prefixes of up to 150 keys: some 1.2 million pairs of means (the
    # value-set bound was a million pairs: refused), 2 m + 1 distinct differences a length m
    from tracr.compiler import lib

    vocab = {"(", ")", "a"}
    program = rasp.Map(lambda b: b < 0, lib.make_pair_balance(rasp.tokens, "(", ")"))
    model = compile_rasp_to_model(program, vocab, 150, compiler_bos="BOS")
    rng = random.Random(150)
    xs = [[rng.choice(["(", ")", ")", "a"]) for _ in range(rng.randint(100, 150))]
          for _ in range(6)]
    check_against_rasp(model, program, xs, False, "pair_balance at 150")


@pytest.mark.parametrize("values", [[0.5, 1.25, 3.0], [-2.0, 0.1, 7.0, 7.5], [2.0 ** 61, 1.0]])
def test_sums_of_m_values_are_every_multiset_sum(values):
    # int64 sums through numpy where every sum fits, Python's integers where not (the last)
    import itertools
    from fractions import Fraction

    from tw_frontends.rasp.values import _sums

    common, per_count = _sums(values, 4)
    for m, sums in enumerate(per_count, start=1):
        want = {sum(c, Fraction(0)) for c in itertools.combinations_with_replacement(
            [Fraction(v) for v in values], m)}
        assert {Fraction(s, common) for s in sums} == want
        assert len(list(sums)) == len(want)
