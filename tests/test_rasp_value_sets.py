"""The RASP frontend's value-set stage (`frontends/rasp/value_sets.py`): sound against RASP's own
evaluator on programs it did not see (tracr's library, random fuzz programs), pure (no tw op
built), and the questions it answers (a selector picking one key, a SOp fixing another)."""

from __future__ import annotations

import random

import pytest

pytest.importorskip("tracr")

from tracr.compiler import lib  # noqa: E402
from tracr.rasp import rasp  # noqa: E402

from twdialect import ops as tw  # noqa: E402
from tw_examples.rasp import LIB_PROGRAMS  # noqa: E402
from tw_frontends.rasp.numbers import _Near, _ordered  # noqa: E402
from tw_frontends.rasp.validate import expressions  # noqa: E402
from tw_frontends.rasp.value_sets import ValueSets  # noqa: E402

from test_rasp_fuzz import generate  # noqa: E402


def _inputs(vocab: list, n: int, count: int, seed: int) -> list[list]:
    rng = random.Random(seed)
    return [[rng.choice(vocab) for _ in range(rng.randint(1, n))] for _ in range(count)]


def _covered(v, values: list) -> bool:
    """v is in the value set, or within a `_Near` value's round-off of one."""
    if v in values:
        return True
    return any(type(s) is _Near and abs(float(v) - float(s)) <= s.radius for s in values)


def _check_sound(program, vocab, n: int, causal: bool, seed: int = 0, count: int = 40) -> int:
    """Every value RASP gives each SOp of the program on random inputs lies in its value set
    (None only where `maybe_none`); the number of values checked."""
    vocab = _ordered(vocab)
    sets = ValueSets(vocab, n, causal)
    checked = 0
    sops = [e for e in expressions(program) if isinstance(e, rasp.SOp)]
    for xs in _inputs(vocab, n, count, seed):
        for sop in sops:
            try:
                got = rasp.evaluate(sop, xs)
            except Exception:  # (RASP itself fails on this input: nothing to compare)
                continue
            values = sets.of(sop)
            for v in got:
                if v is None:
                    assert sets.maybe_none(sop), f"{sop.label}: None on {xs}"
                elif values is not None:
                    assert _covered(v, values), f"{sop.label}: {v!r} on {xs} not in {values}"
                    checked += 1
    return checked


@pytest.mark.parametrize("name", sorted(LIB_PROGRAMS))
def test_value_sets_hold_what_rasp_gives_on_tracrs_library(name):
    program, vocab = LIB_PROGRAMS[name](6)
    assert _check_sound(program, vocab, 6, False) > 0


@pytest.mark.parametrize("seed", range(0, 120, 3))
def test_value_sets_hold_what_rasp_gives_on_random_programs(seed):
    prog = generate(seed)
    _check_sound(prog.build(), set(prog.vocab), prog.max_seq_len, prog.causal, seed)


def test_a_missed_value_is_caught():
    """The check can fail: a value set one value short is reported."""
    program = rasp.Map(lambda x: x + 1, rasp.tokens)
    sets = ValueSets([1, 2, 3], 4, False)
    assert sets.of(program) == [2, 3, 4]
    sets.sets[program.unique_id].values = [2, 3]
    with pytest.raises(AssertionError):
        got = rasp.evaluate(program, [3])
        assert all(_covered(v, sets.of(program)) for v in got)


def test_no_op_is_built_to_answer():
    """Every value set and question of tracr's library programs, asked inside a graph,
    leaves the graph empty."""
    for name in sorted(LIB_PROGRAMS):
        program, vocab = LIB_PROGRAMS[name](5)
        sets = ValueSets(_ordered(vocab), 5, False)
        with tw.Graph("probe", verify=False) as g:
            for e in expressions(program):
                if isinstance(e, rasp.SOp):
                    sets.of(e)
                    sets.maybe_none(e)
                elif isinstance(e, rasp.Select):
                    sets.picks_one(e)
                    sets.determines(e.keys, e.queries)
        assert len(g.ops) == 0, name


def test_picks_one_and_determines():
    n = 6
    sets = ValueSets([1, 2, 3], n, False)
    opp = rasp.SequenceMap(lambda x, y: x - y - 1, rasp.length, rasp.indices)
    flip = rasp.Select(rasp.indices, opp, rasp.Comparison.EQ)  # (make_reverse's)
    assert sets.picks_one(flip)
    assert not sets.picks_one(rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.EQ))
    shifted = rasp.Map(lambda i: i + 1, rasp.indices)
    assert sets.picks_one(rasp.Select(shifted, rasp.indices, rasp.Comparison.EQ))
    # a map that merges indices is no one key's
    halved = rasp.Map(lambda i: i // 2, rasp.indices)
    assert not sets.picks_one(rasp.Select(halved, rasp.indices, rasp.Comparison.EQ))
    assert sets.determines(rasp.indices, rasp.Map(lambda i: i % 2, rasp.indices))
    assert not sets.determines(rasp.tokens, rasp.indices)
    # make_sort_unique's key fixes the tokens: one key per query value
    key = rasp.SequenceMap(lambda x, i: x + i / n, rasp.tokens, rasp.indices)
    assert sets.fixes(key, 1)


def test_a_mean_value_set_is_every_mean_or_the_values_where_one_key():
    n = 4
    sets = ValueSets([0, 1], n, False)
    tok = rasp.numerical(rasp.Map(lambda x: x, rasp.tokens))
    every = rasp.numerical(rasp.Aggregate(
        rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.TRUE), tok, default=0))
    assert sorted(sets.of(every)) == sorted({k / m for m in range(1, n + 1)
                                             for k in range(m + 1)})
    prev = rasp.numerical(rasp.Aggregate(rasp.Select(
        rasp.indices, rasp.Map(lambda i: i - 1, rasp.indices), rasp.Comparison.EQ),
        tok, default=5))  # (the first position selects nothing: the default)
    assert sorted(sets.of(prev)) == [0.0, 1.0, 5.0]
    assert _check_sound(prev, {0, 1}, n, False) > 0


def test_frac_prevs_value_set_holds_its_outputs_at_length_10():
    program = lib.make_frac_prevs(rasp.tokens == "x")
    assert _check_sound(program, {"x", "y"}, 10, False, count=60) > 0


def test_every_refusal_the_value_sets_show_is_named_at_once():
    from tw_frontends.rasp.translator import RaspError, translate

    never = rasp.Map(lambda x: None, rasp.tokens)  # (None at every position)
    width = rasp.SelectorWidth(rasp.Select(never, rasp.tokens, rasp.Comparison.EQ))
    text = rasp.numerical(rasp.Map(lambda x: "t" + str(x), rasp.tokens))  # (no number)
    program = rasp.SequenceMap(lambda a, b: a, width, text)
    program = rasp.SequenceMap(lambda a, b: a, program, rasp.length)  # (causal: refused)
    with pytest.raises(RaspError) as e:
        translate(program, {1, 2, 3}, 4, causal=True)
    message = str(e.value)
    assert message.startswith("3 expressions the RASP frontend does not take")
    assert "None at every position, read by a selector" in message
    assert "a numerical SOp holds 't1', not a finite number" in message
    assert "`length` needs the whole sequence" in message


def test_unnamed_expressions_are_labelled_as_tracrs_compiler_labels_them():
    # breadth first from the output: the output's id is drawn first
    from tracr.compiler import rasp_to_graph
    from tw_frontends.rasp.validate import name

    def fresh():
        a = rasp.Map(lambda x: x + 1, rasp.tokens)
        b = rasp.Map(lambda x: x * 2, a, simplify=False)
        return rasp.SequenceMap(lambda x, y: x + y, b,
                                rasp.Map(lambda x: x - 1, a, simplify=False))

    ours = fresh()
    name(ours)
    theirs = fresh()
    rasp_to_graph.extract_rasp_graph(theirs)
    number = lambda e: int(e.label.rsplit("_", 1)[1])  # noqa: E731
    assert number(ours) < number(ours.fst) < number(ours.snd) < number(ours.fst.inner)
    assert [number(e) - number(ours) for e in (ours.fst, ours.snd, ours.fst.inner)] == \
        [number(e) - number(theirs) for e in (theirs.fst, theirs.snd, theirs.fst.inner)]


def test_a_refusal_names_the_expression_as_tracr_would():
    from tracr.compiler import rasp_to_graph
    from tw_frontends.rasp.translator import RaspError, translate

    def fresh():
        a = rasp.Map(lambda x: x + 1, rasp.tokens)
        bad = rasp.numerical(rasp.Map(lambda x: "t" + str(x), a, simplify=False))
        return rasp.SequenceMap(lambda x, y: x, rasp.Map(lambda x: x, a, simplify=False), bad)

    ours = fresh()
    with pytest.raises(RaspError) as e:
        translate(ours, {1, 2}, 3)
    theirs = fresh()
    rasp_to_graph.extract_rasp_graph(theirs)
    offset = int(theirs.snd.label.rsplit("_", 1)[1]) - int(theirs.label.rsplit("_", 1)[1])
    named = int(ours.label.rsplit("_", 1)[1]) + offset
    assert f"Map 'map_{named}': a numerical SOp holds" in str(e.value)


def test_a_function_that_tells_a_means_int_from_its_float_is_refused():
    # RASP's mean returns the one selected value itself (2) and a float over several keys
    # (2.0): str() of it has no table of values; one key at most, or a function blind to
    # the difference, compiles
    from tw_frontends.rasp.translator import RaspError, translate

    same = rasp.Select(rasp.tokens, rasp.length, rasp.Comparison.EQ)  # (several keys)
    mean = rasp.Aggregate(same, rasp.tokens, default=0)
    with pytest.raises(RaspError, match="which RASP's Aggregate gives alike"):
        translate(rasp.Map(lambda x: str(x), mean), {1, 2, 3}, 4)
    translate(rasp.Map(lambda x: x + 1, mean), {1, 2, 3}, 4)
    one = rasp.Aggregate(rasp.Select(rasp.indices, rasp.indices, rasp.Comparison.EQ),
                         rasp.tokens, default=0)
    translate(rasp.Map(lambda x: str(x), one), {1, 2, 3}, 4)


@pytest.mark.parametrize("seed", [3569, 3911, 4041])
def test_fuzz_programs_that_told_int_from_float_are_refused(seed):
    from test_rasp_fuzz import run_program

    assert run_program(generate(seed)).status == "refused"


def test_a_width_of_a_selector_that_always_or_never_picks_the_query_itself():
    n = 4
    sets = ValueSets([1, 2], n, False)
    width = lambda s: sets.of(rasp.SelectorWidth(s))  # noqa: E731
    same = rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.EQ)
    other = rasp.Select(rasp.tokens, rasp.indices, rasp.Comparison.LEQ)
    never = rasp.SelectorNot(same)  # (`~same` is a Select of a lambda: no rule reads it)
    assert width(same) == [1, 2, 3, 4]
    assert width(never) == [0, 1, 2, 3]
    assert width(other | same) == [1, 2, 3, 4]
    assert width(other & never) == [0, 1, 2, 3]
    assert width(other) == width(~same) == [0, 1, 2, 3, 4]
    for selector in (same, never, other | same, other & never):  # (sound: RASP agrees)
        assert _check_sound(rasp.SelectorWidth(selector), {1, 2}, n, False) > 0


@pytest.mark.parametrize("seed", [5848, 6300, 7218])
def test_a_mean_read_by_a_type_blind_function_or_never_averaged_compiles(seed):
    # x > 1 gives a bool at 2 and at 2.0 alike (no int-or-float passes on); a selector that
    # selects no key gives the default itself, never a float
    from test_rasp_fuzz import run_program

    assert run_program(generate(seed)).status == "ok"


def test_an_aggregate_over_a_selector_that_always_selects_never_gives_its_default():
    n = 4
    sets = ValueSets(["a", "b"], n, False)
    first = rasp.Select(rasp.indices, rasp.indices, lambda k, q: k == 0)  # (index 0: always)
    same = rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.EQ)  # (itself: always)
    full = rasp.Select(rasp.Full(1), rasp.indices, lambda k, q: k > q)  # (not at q >= 1)
    later = rasp.Select(rasp.indices, rasp.indices, lambda k, q: k == q + 1)  # (not the last)
    for selector, always in ((first, True), (same, True), (first | later, True),
                             (full, False), (later, False), (first & later, False)):
        assert sets.always_selects(selector) is always
        mean = rasp.Aggregate(selector, rasp.tokens, default="z")
        assert ("z" in sets.of(mean)) is not always
        assert _check_sound(mean, {"a", "b"}, n, False) > 0


def test_a_sequence_map_of_one_sop_twice_is_asked_at_equal_values_only():
    # x * y of one mean at (0, 0) and (0.0, 0.0): alike; never at ('z', 0) (the default with
    # an int, which gives '' where 'z' * 0.0 fails)
    from tw_frontends.rasp.translator import translate

    mean = rasp.Aggregate(rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.LT),
                          rasp.indices, default="z")  # (the least token selects none)
    translate(rasp.SequenceMap(lambda x, y: x * y, mean, mean), {1, 2, 3}, 4)


@pytest.mark.parametrize("seed", [3827, 6690])
def test_fuzz_programs_whose_telling_values_value_sets_now_exclude_compile(seed):
    from test_rasp_fuzz import run_program

    assert run_program(generate(seed)).status == "ok"
