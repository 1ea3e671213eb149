"""The RASP frontend where float64 and float32 part ways: RASP's evaluator sums a mean's values
in list order (a mean of 1000.1, 1000.4, ... comes out as 1000.2500000000001 for some orders of
the same keys), a model computes in float32. A reader that tells such values apart is refused
(`_Near`, `_Unsteady`); one that does not compiles and agrees with RASP."""

from __future__ import annotations

import itertools
import math
import os
import subprocess
import sys

import pytest

pytest.importorskip("tracr.rasp.rasp")

from tracr.rasp import rasp  # noqa: E402

from tw_lowering import compile_rasp_to_model  # noqa: E402
from tw_frontends.rasp.limits import RaspError  # noqa: E402
from tw_frontends.rasp.numbers import ULP64, _apply, _Near  # noqa: E402
from tw_frontends.rasp.values import _mean_radius, _mean_space, _selection  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from test_rasp import agrees  # noqa: E402

C = rasp.Comparison
BASE = 1000.0
VOCAB = {BASE + 0.1, BASE + 0.2, BASE + 0.4}  # sums that round in float64


def tokens_mean(selector=None):
    tok = rasp.numerical(rasp.Map(lambda x: x, rasp.tokens))
    return rasp.numerical(rasp.Aggregate(
        selector or rasp.Select(rasp.indices, rasp.indices, C.LEQ), tok, default=0))


def check_exact(program, vocab, n: int) -> None:
    model = compile_rasp_to_model(program, vocab, n, compiler_bos="BOS")
    xs = [list(x) for m in range(1, n + 1) for x in itertools.product(sorted(vocab), repeat=m)]
    for x, out in zip(xs, model.apply_batch([["BOS", *x] for x in xs])):
        want = rasp.evaluate(program, x)
        assert all(agrees(g, w) for g, w in zip(out.decoded[1:], want)), (x, out.decoded, want)


def test_rasp_mean_differs_from_the_quotient():
    """The premise: RASP's mean of these values is not always the rounded quotient."""
    assert rasp.evaluate(tokens_mean(), [1000.4, 1000.1])[1] == 1000.25
    got = rasp.evaluate(tokens_mean(), [1000.4, 1000.1, 1000.4, 1000.4, 1000.1, 1000.1])[5]
    assert got != 1000.25 and abs(got - 1000.25) < 1e-12


def test_threshold_at_a_mean_is_refused():
    with pytest.raises(RaspError, match="float64 sums"):
        compile_rasp_to_model(rasp.Map(lambda x: x > BASE + 0.25, tokens_mean()), VOCAB, 8,
                              compiler_bos="BOS")


def test_threshold_through_a_map_is_refused():
    """3 x moves with x: the radius goes on, and the threshold at 3 * 1000.25 is refused."""
    tripled = rasp.numerical(rasp.Map(lambda x: 3 * x, tokens_mean()))
    with pytest.raises(RaspError, match="float64 sums"):
        compile_rasp_to_model(rasp.Map(lambda x: x > 3 * (BASE + 0.25), tripled), VOCAB, 6,
                              compiler_bos="BOS")


def test_comparing_means_is_refused():
    """Two positions with the same exact mean may hold RASP means an ulp apart: LT flips.
    (Here the value set's own near-duplicates are refused first.)"""
    mean = tokens_mean()
    smaller = rasp.numerical(rasp.SelectorWidth(rasp.Select(mean, mean, C.LT)))
    with pytest.raises(RaspError, match="float64 sums|float32"):
        compile_rasp_to_model(smaller, VOCAB, 5, compiler_bos="BOS")


@pytest.mark.parametrize("predicate", [C.LT, C.EQ, lambda k, q: k + q > 0.5])
def test_selector_near_a_mean_is_refused(predicate):
    """A comparison (as a whole matrix, or a predicate pair by pair) that flips within a
    mean's radius: refused; one that does not: the same selection."""
    select = rasp.Select(rasp.tokens, rasp.tokens, predicate)
    slots = {rasp.tokens.unique_id: 0}
    keys = [(_Near(0.25, 1e-15),), (0.75,)]
    with pytest.raises(RaspError):
        _selection(select, keys, [(0.25,)], slots, slots)
    far = _selection(select, keys, [(0.5,)], slots, slots)
    assert far.tolist() == _selection(select, [(0.25,), (0.75,)], [(0.5,)], slots,
                                      slots).tolist()


def test_threshold_between_means_compiles_exactly():
    """No mean sits within its radius of 1000.22: compiled, and right on every input."""
    check_exact(rasp.Map(lambda x: x > BASE + 0.22, tokens_mean()), VOCAB, 4)


def test_whole_number_means_are_exact():
    """Integers sum exactly in float64: RASP's mean is the quotient, a threshold at one is
    compiled and right."""
    check_exact(rasp.Map(lambda x: x > 2.5, tokens_mean()), {1, 2, 3, 4}, 4)


def test_steady_functions_compile():
    """max(x, 1) at a mean of 1 gives 1 or x: one number either way (no jump)."""
    recip = rasp.numerical(rasp.Map(lambda i: 1 / (i + 1), rasp.indices))
    mean = rasp.numerical(rasp.Aggregate(rasp.Select(rasp.indices, rasp.indices, C.LEQ),
                                         recip, default=0))
    check_exact(rasp.numerical(rasp.Map(lambda x: max(x, 1), mean)), {"a"}, 5)


def test_a_difference_of_means_that_rasp_gives_off_zero_is_refused():
    """x - y of two means over different selectors is 0 where both average one token, and
    RASP gives -1.4e-17 there (0.1 + 0.1 + 0.1 rounds): `x - y < 0` is True in RASP, False
    in any model that computes 0. The sum's value set keeps the round-off of its inputs
    (0.0 exactly, reached from 0 - 0, no longer hides 0.1 - 0.1's radius): refused."""
    tok = rasp.numerical(rasp.Map(lambda t: {"a": 0.1, "b": 0.2, "c": 0.7}[t], rasp.tokens))
    x = rasp.numerical(rasp.Aggregate(rasp.Select(rasp.indices, rasp.indices, C.LEQ), tok,
                                      default=0))
    y = rasp.numerical(rasp.Aggregate(rasp.Select(rasp.indices, rasp.indices, C.TRUE), tok,
                                      default=0))
    below = rasp.Map(lambda d: d < 0, rasp.numerical(rasp.LinearSequenceMap(x, y, 1, -1)))
    assert rasp.evaluate(below, list("aaa")) == [True, True, False]  # (the premise)
    with pytest.raises(RaspError, match="float64 sums"):
        compile_rasp_to_model(below, set("abc"), 5, compiler_bos="BOS")


def test_the_radii_of_several_near_arguments_add_up():
    """f(x, y) = x - y moves by both radii at once where both are off."""
    moved = _apply(lambda u, v: u - v, _Near(0.25, 1e-15), _Near(0.5, 2e-15))
    assert type(moved) is _Near and math.isclose(moved.radius, 3e-15, rel_tol=1e-2)


def test_mean_radius():
    assert _mean_radius([0, 1], 50) is None  # 0/1: exact
    assert _mean_radius([1, 2, 3], 50) is None  # integers
    assert _mean_radius([0.5, 0.25, -0.75], 50) is None  # few binary digits
    one_signed = _mean_radius([0.1, 0.2], 10)
    assert one_signed(0.0) == 0.0 and one_signed(0.15) == pytest.approx(ULP64 * 10 * 0.15)
    signed = _mean_radius([-0.1, 0.3], 10)
    assert signed(0.0) == pytest.approx(ULP64 * 10 * 0.3)
    means = _mean_space([0.1, 0.2], 4, 0.0)
    assert all(type(q) is _Near for q in means if q)


def test_near_arithmetic_and_apply():
    x = _Near(0.25, 1e-15)
    s = 2 * x + 1
    assert type(s) is _Near and s == 1.5 and s.radius >= 2e-15
    assert type(-x) is _Near and (-x).radius == 1e-15
    assert _apply(lambda v: v > 0.2, x) is True  # far from the threshold
    moved = _apply(lambda v: v * 4, x)
    assert type(moved) is _Near and math.isclose(moved.radius, 4e-15, rel_tol=1e-2)
    with pytest.raises(RaspError):
        _apply(lambda v: v >= 0.25, x)
    assert _apply(lambda v: round(v, 6), x) == 0.25


# -- magnitudes float32 cannot keep within atol ---------------------------------------------

def sampled_error(model, program, vocab, n: int, count: int = 200) -> float:
    """The largest |model - RASP| over seeded random inputs."""
    import random

    rnd, values = random.Random(0), sorted(vocab)
    xs = [[rnd.choice(values) for _ in range(rnd.randint(1, n))] for _ in range(count)]
    worst = 0.0
    for x, out in zip(xs, model.apply_batch([["BOS", *x] for x in xs])):
        for got, want in zip(out.decoded[1:], rasp.evaluate(program, x)):
            if want is not None:
                worst = max(worst, abs(got - want))
    return worst


def scaled(m: float) -> set:
    return {round(m * k / 7, 3) for k in range(1, 8)}


@pytest.mark.parametrize("m", [10.0, 100.0])
def test_means_of_hundreds_compile_within_atol(m):
    program = tokens_mean()
    model = compile_rasp_to_model(program, scaled(m), 10, compiler_bos="BOS")
    assert sampled_error(model, program, scaled(m), 10) < 1e-4


def test_means_of_thousands_are_refused_or_held_to_a_wider_atol():
    """A softmax's mean of values up to 1e4 comes out of float32 some 1e-3 off: refused at
    the default atol (measured above it), compiled with atol=1e-2 and within it."""
    program = tokens_mean()
    with pytest.raises(RaspError, match="values up to 1e\\+04.*beyond atol=0.0001"):
        compile_rasp_to_model(program, scaled(1e4), 10, compiler_bos="BOS")
    model = compile_rasp_to_model(program, scaled(1e4), 10, compiler_bos="BOS", atol=1e-2)
    assert 1e-4 < sampled_error(model, program, scaled(1e4), 10) < 1e-2


@pytest.mark.parametrize("n, f, vocab, atol", [
    (30, lambda x: x * x, {1, 2, 3}, 1e-4), (50, lambda x: 1 / (x + 0.5), {0, 1}, 1e-4),
    (30, lambda x: x * x, {1, 2, 3}, 1e-5)])
def test_a_curve_of_a_mean_as_the_output_is_one_line_within_atol(n, f, vocab, atol):
    """The program's numerical output f(mean), f curved, through a line of its hundreds of
    points (one MLP, a neuron per point) where the input's error times the slope stays
    within atol: one layer and d 4, where steps took two and d 560 (x^2 at length 30);
    steps (a plateau a point, two neurons) where atol is tighter than the line keeps."""
    program = rasp.numerical(rasp.Map(f, tokens_mean()))
    model = compile_rasp_to_model(program, vocab, n, compiler_bos="BOS", atol=atol)
    s = model.stats
    if atol < 1e-4:
        assert s.n_layers == 2, s  # (the slope times the mean's error is most of 1e-5)
    else:
        assert (s.n_layers, s.d) == (1, 4), s
    assert sampled_error(model, program, vocab, n) < atol


def test_a_small_difference_of_large_means_is_refused():
    """mean - token is near 0, but carries the mean's float32 error: refused."""
    tok = rasp.numerical(rasp.Map(lambda x: x, rasp.tokens))
    program = rasp.numerical(rasp.LinearSequenceMap(tokens_mean(), tok, 1, -1))
    with pytest.raises(RaspError, match="float32 computes only to about"):
        compile_rasp_to_model(program, scaled(1e4), 10, compiler_bos="BOS")


def test_values_float32_cannot_hold_are_refused():
    """1e9 + 1.1 and 1e9 + 2.1 are both 1e9 in float32."""
    program = rasp.numerical(rasp.Map(lambda x: x + 1e9 + 0.1, rasp.tokens))
    with pytest.raises(RaspError, match="values up to 1e\\+09"):
        compile_rasp_to_model(program, {1, 2}, 3, compiler_bos="BOS")
    model = compile_rasp_to_model(program, {1, 2}, 3, compiler_bos="BOS", atol=100)
    assert model.apply(["BOS", 1, 2]).decoded[1:] == pytest.approx([1e9 + 1.1, 1e9 + 2.1],
                                                                    abs=100)
    with pytest.raises(RaspError, match="atol must be a positive number"):
        compile_rasp_to_model(program, {1, 2}, 3, compiler_bos="BOS", atol=0)


def test_a_table_of_large_means_too_close_to_read_is_refused():
    """Means of 1e5 + 0.1, 1e5 + 0.2 and 1e5 + 0.4 sit some 0.005 apart, where float32 computes
    them to some 0.02: a table could read one as another (it did: 20 wrong of 300 inputs)."""
    vocab = {1e5 + 0.1, 1e5 + 0.2, 1e5 + 0.4}
    program = rasp.Map(lambda x: round(x, 4) > 1e5 + 0.3, tokens_mean())
    with pytest.raises(RaspError, match="softmax's mean that float32 keeps only"):
        compile_rasp_to_model(program, vocab, 8, compiler_bos="BOS")


def test_tw_rasp_takes_atol(tmp_path):
    f = tmp_path / "big.py"
    f.write_text("from tracr.rasp import rasp\n"
                 "program = rasp.numerical(rasp.Map(lambda x: x * 1e5 + 0.3, rasp.tokens))\n"
                 "vocab = {1, 2}\nmax_seq_len = 3\n")
    cli = [sys.executable, "-m", "tw_tools.tw_rasp", str(f), "1", "2"]
    r = subprocess.run(cli, capture_output=True, text=True, timeout=300)
    assert r.returncode == 1 and "--atol" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = subprocess.run([*cli, "--atol", "0.01"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    got = eval(r.stdout.splitlines()[0])  # noqa: S307 - our own printout of a list
    assert got[1:] == pytest.approx([1e5 + 0.3, 2e5 + 0.3], abs=0.01)


# -- values float32 cannot tell apart, read as categories -----------------------------------

def sums_of_means():
    """Means of 0.1, 0.2, 0.3 over two selectors, summed: 1/7 is reached two ways
    (0.14285714285714285 and 0.14285714285714288), one float32 number."""
    a = rasp.numerical(rasp.Map(lambda x: {1: 0.1, 2: 0.2, 3: 0.3}[x], rasp.tokens))
    m1 = rasp.numerical(rasp.Aggregate(rasp.Select(rasp.indices, rasp.indices, C.LEQ), a,
                                       default=0))
    m2 = rasp.numerical(rasp.Aggregate(rasp.Select(rasp.indices, rasp.indices, C.GEQ), a,
                                       default=0))
    return rasp.numerical(rasp.LinearSequenceMap(m1, m2, 1.0, 1.0))


def test_values_float32_cannot_tell_apart_are_one_category():
    """A SequenceMap that reads the sum as a category: its near-equal values are one column
    (they were refused), and the map, which does not tell them apart, is right."""
    program = rasp.SequenceMap(lambda x, t: round(x, 4) > 0.3 and t == 1, sums_of_means(),
                               rasp.tokens)
    check_exact(program, {1, 2, 3}, 7)


def test_a_category_that_tells_them_apart_is_refused():
    program = rasp.SequenceMap(lambda x, t: x > 0.14285714285714285 and t == 1,
                               sums_of_means(), rasp.tokens)
    with pytest.raises(RaspError, match="float64 sums can give"):
        compile_rasp_to_model(program, {1, 2, 3}, 8, compiler_bos="BOS")


def test_a_mean_of_one_key_is_its_value():
    """One key (a shift, or length 1) weighs 1 in float32: values up to 2e3 are kept (the
    averaging bound would refuse them)."""
    big = rasp.numerical(rasp.Map(lambda t: {1: 0.0, 2: 500.0, 3: 1000.0}[t], rasp.tokens))
    mean = rasp.numerical(rasp.Aggregate(rasp.Select(rasp.indices, rasp.indices, C.LEQ), big,
                                         default=0))
    check_exact(mean, {1, 2, 3}, 1)
    with pytest.raises(RaspError, match="beyond atol"):
        compile_rasp_to_model(mean, {1, 2, 3}, 5, compiler_bos="BOS")
    before = rasp.Select(rasp.indices, rasp.numerical(rasp.Map(lambda i: i + 1, rasp.indices)),
                         C.EQ)
    shifted = rasp.numerical(rasp.Aggregate(before, big, default=0))
    check_exact(shifted, {1, 2, 3}, 5)


@pytest.mark.parametrize("scale", [10, 30])
def test_a_number_read_off_a_table_keeps_atol_through_the_pipeline(scale):
    """numerical(Map(scale k + 0.1, hist)) at length 40: the pipeline folded the read into
    hist's table keeping float32 only within 1e-5 of 400 (2.5e-4 off); the frontend now
    builds that table itself, to atol (two MLPs where one cannot keep it)."""
    from tracr.compiler import lib

    program = rasp.numerical(rasp.Map(lambda k: scale * k + 0.1, lib.make_hist()))
    model = compile_rasp_to_model(program, {"a", "b", "c"}, 40, compiler_bos="BOS")
    assert sampled_error(model, program, {"a", "b", "c"}, 40) < 1e-4
