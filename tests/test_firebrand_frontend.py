"""firebrand's integer expression IR through `tw_frontends.firebrand.translator.translate`: the tw
oracle (and, on a few, the compiled model) against `firebrand.reference.evaluate` at every
position of random token prefixes where firebrand's value is defined."""

import random
import warnings

import numpy as np
import pytest

firebrand = pytest.importorskip("firebrand", reason="firebrand (tw-compiler[firebrand]) is not installed")

from firebrand import ir as fb  # noqa: E402
from firebrand import reference  # noqa: E402

from twdialect import evaluate  # noqa: E402
from tw_frontends.firebrand.translator import FirebrandError, intervals, translate  # noqa: E402

LOWER, UPPER, CONTEXT = -2, 6, 12
# The oracle's attention is a true softmax: a history read leaks exp(-40)-sized weights of its
# neighbours (tw.attend_to_offset's contract, relative leakage < 1e-10); every other op is exact.
EXACT = 1e-9
KINDS = ["constant", "add", "scale", "relu", "clip", "equals", "mod", "lookup", "select",
         "position", "position_mod", "position_digit", "position_quotient", "history"]


def _reference(expr, tokens):
    try:
        return reference.evaluate(expr, list(tokens))
    except ValueError:
        return None


def _compiled_checks(ct, expr, rng, label="") -> int:
    """The compiled model against firebrand's reference at every defined position of three
    random sequences (within 1e-3); returns how many positions were checked."""
    checked = 0
    for _ in range(3):
        tokens = [rng.randint(LOWER, UPPER) for _ in range(CONTEXT)]
        got = ct.run({"tokens": np.array(tokens) - LOWER})["next"][:, 0]
        for p in range(CONTEXT):
            want = _reference(expr, tokens[:p + 1])
            if want is not None:
                assert abs(got[p] - want) < 1e-3, (label, tokens[:p + 1], got[p], want)
                checked += 1
    return checked


def _interval(expr):
    return intervals(expr, LOWER, UPPER, CONTEXT)[id(expr)]


def _leaf(rng):
    pick = rng.randrange(6)
    if pick == 0:
        return fb.constant(rng.randint(-3, 3))
    if pick == 1:
        return fb.position()
    if pick == 2:
        return fb.position_mod(rng.randint(1, 4), rng.randint(0, 3))
    return fb.history(rng.randint(0, 2))


def _expr(rng, depth):
    """A random expression of supported kinds, kept small so domains stay small."""
    if depth == 0:
        return _leaf(rng)
    return _of_kind(rng.choice(KINDS), rng, depth - 1)


def _bool(rng, depth):
    x = _expr(rng, depth)
    lo, hi = _interval(x) or (0, 0)
    return x.equals(rng.randint(lo, hi)) if rng.random() < 0.7 else fb.position_mod(2, rng.randint(0, 1))


def _of_kind(kind, rng, depth):
    """A random expression whose root is `kind`."""
    sub = lambda: _expr(rng, depth)  # noqa: E731
    if kind == "constant":
        return fb.constant(rng.randint(-9, 9))
    if kind == "add":
        return sub() + sub()
    if kind == "scale":
        return sub() * rng.choice([-3, -2, -1, 0, 2, 3])
    if kind == "relu":
        return (sub() - rng.randint(-2, 4)).relu()
    if kind == "clip":
        a = rng.randint(-4, 4)
        return sub().clip(a, a + rng.randint(0, 5))
    if kind == "equals":
        x = sub()
        lo, hi = _interval(x) or (0, 0)
        return x.equals(rng.randint(lo - 1, hi + 1))
    if kind == "mod":
        x = sub()
        if rng.random() < 0.5:
            x = x.relu()  # firebrand's mod is undefined on negative operands
        return x % rng.randint(1, 7)
    if kind == "lookup":
        x = sub()
        lo, hi = _interval(x) or (0, 0)
        start = lo + rng.randint(0, 1)          # sometimes leave a value outside the table
        n = max(1, hi - start + 1 - rng.randint(0, 1))
        return x.lookup([rng.randint(-6, 6) for _ in range(n)], start)
    if kind == "select":
        return fb.select(_bool(rng, depth), sub(), sub() if rng.random() < 0.7
                         else fb.constant(rng.randint(-3, 3)))
    if kind == "position":
        return fb.position() + sub()
    if kind == "position_mod":
        return fb.position_mod(rng.randint(1, 5), rng.randint(0, 4)) + sub()
    if kind == "position_digit":
        return fb.position_digit(rng.randint(0, 1), rng.randint(-3, 300))
    if kind == "position_quotient":
        return fb.position_quotient(rng.randint(1, 5), rng.randint(-4, 4)) * 2 + sub()
    if kind == "history":
        return fb.history(rng.randint(0, 3)) - sub()
    raise AssertionError(kind)


def _check_oracle(expr, rng, sequences=3):
    """tw's oracle vs firebrand's reference at every defined position; returns the count."""
    module = translate(expr, lower=LOWER, upper=UPPER, max_context=CONTEXT)
    checked = 0
    for s in range(sequences):
        tokens = [rng.randint(LOWER, UPPER) for _ in range(CONTEXT)]
        ids = np.array(tokens) - LOWER
        got = evaluate(module, {"tokens": ids})["next"][:, 0]
        for p in range(CONTEXT):
            want = _reference(expr, tokens[:p + 1])
            if want is None:
                continue
            if s == 0 and p % 4 == 3:  # the prefix alone, its last position
                alone = evaluate(module, {"tokens": ids[:p + 1]})["next"][-1, 0]
                assert abs(alone - want) <= EXACT, (expr, tokens[:p + 1], alone, want)
            assert abs(got[p] - want) <= EXACT, (expr, tokens[:p + 1], got[p], want)
            checked += 1
    return checked


@pytest.mark.parametrize("kind", KINDS)
def test_oracle_matches_reference(kind):
    rng = random.Random(f"firebrand-{kind}")
    checked = 0
    for _ in range(6):
        checked += _check_oracle(_of_kind(kind, rng, rng.randint(0, 2)), rng)
    assert checked >= 40, f"only {checked} defined positions for {kind}"


def test_intervals_hold_every_node():
    rng = random.Random("firebrand-intervals")
    for _ in range(15):
        expr = _expr(rng, 3)
        iv = intervals(expr, LOWER, UPPER, CONTEXT)
        tokens = [rng.randint(LOWER, UPPER) for _ in range(CONTEXT)]
        for p in range(CONTEXT):
            if _reference(expr, tokens[:p + 1]) is None:
                continue
            for node in fb.nodes(expr):  # every node is defined where the root is
                lo, hi = iv[id(node)]
                assert lo <= reference.evaluate(node, tokens[:p + 1]) <= hi, node.op


def test_machine_and_deeper_expressions():
    rng = random.Random("firebrand-deep")
    h0, h1 = fb.history(0), fb.history(1)
    step = fb.select(h0.equals(0), (h1 * 3 - h0).relu() % 5, (h0 + h1).clip(-1, 6))
    machine = fb.Machine(step.clip(LOWER, UPPER), LOWER, UPPER, context_limit=CONTEXT)
    module = translate(machine)
    tokens = [rng.randint(LOWER, UPPER) for _ in range(CONTEXT)]
    got = evaluate(module, {"tokens": np.array(tokens) - LOWER})["next"][:, 0]
    want = [reference.evaluate(machine.next_value, tokens[:p + 1]) for p in range(1, CONTEXT)]
    assert np.abs(got[1:] - want).max() <= EXACT
    checked = sum(_check_oracle(_expr(rng, 4), rng, 2) for _ in range(8))
    assert checked >= 40


def test_compiled_model_agrees():
    from tw_lowering import compile

    h0, h1, h3 = fb.history(0), fb.history(1), fb.history(3)
    exprs = [
        fb.select(h0.equals(1), (h1 * 3 - h0).relu() % 4,
                  (h0 + h1).clip(-2, 7).lookup([5, 1, 4, 1, 5, 9, 2, 6, 5, 3], -1))
        + fb.position_mod(3, 1) + fb.position_quotient(4, -2) + h3,
        (h0 - h1).equals(0) * 7 + fb.position_digit(0, 250) - fb.position(),
    ]
    rng = random.Random("firebrand-compiled")
    for expr in exprs:
        module = translate(expr, lower=LOWER, upper=UPPER, max_context=CONTEXT)
        with warnings.catch_warnings():  # the static attention bound is loose (see report)
            warnings.simplefilter("ignore")
            ct = compile(module, d=64, d_head=8, d_hidden=256)
        assert _compiled_checks(ct, expr, rng) >= 20


def _content(kind, rng, depth):
    """A random read_at / latest / match over random sub-expressions (intervals kept small)."""
    sub = lambda: _expr(rng, depth)  # noqa: E731
    if kind == "read_at":
        address = rng.choice([fb.position() - rng.randint(0, 3), sub().clip(0, CONTEXT - 1),
                              (fb.position() - fb.history(0)).relu()])
        return fb.read_at(address)
    if kind == "latest":
        period = rng.randint(1, 3)
        return fb.latest(sub().clip(-4, 8), period=period, phase=rng.randrange(period),
                         start=rng.randint(0, 3))
    digits = rng.randint(1, 2)
    period = rng.randint(1, 2)
    phase = rng.randrange(period)
    sentinel = phase + period * rng.randint(0, 2)
    end = rng.choice([None, sentinel + rng.randint(1, 6)])
    keys = [(fb.history(rng.randint(0, 2)) + rng.randint(0, 2)) for _ in range(digits)]
    query = [sub().clip(-1, 9) if rng.random() < 0.5 else fb.history(rng.randint(0, 1)) + 2
             for _ in range(digits)]
    return fb.match(query, keys, period=period, phase=phase, start=rng.randint(0, sentinel),
                    sentinel=sentinel, digit_limit=rng.choice([6, 8, 10]), end=end)


@pytest.mark.parametrize("kind", ["read_at", "latest", "match"])
def test_content_reads_match_reference(kind):
    rng = random.Random(f"firebrand-content-{kind}")
    checked = 0
    for k in range(8):
        expr = _content(kind, rng, rng.randint(0, 1))
        if k % 2:  # used inside pointwise ops and next to history
            expr = (expr * 2 - fb.history(1)).clip(-5, 20) + fb.position_mod(3)
        checked += _check_oracle(expr, rng)
    assert checked >= 60, f"only {checked} defined positions for {kind}"


def test_content_read_semantics_edges():
    """latest's nearest-value fallback and newest-among-ties, match's sentinel and end."""
    rng = random.Random("firebrand-content-edges")
    h0, h1 = fb.history(0), fb.history(1)
    exprs = [
        fb.latest(fb.constant(7), period=1, phase=0, start=0),        # never exact: nearest
        fb.latest(h0, period=1, phase=0, start=0),                    # itself: the current j
        fb.read_at(fb.latest(h0 + 1, period=2, phase=1, start=1)),
        fb.match([h0 + 2], [h1 + 2], period=1, phase=0, start=1, sentinel=1, digit_limit=8),
        fb.match([fb.constant(0)], [h0 + 2], period=1, phase=0, start=0, sentinel=3,
                 digit_limit=8, end=8),                               # all-zero query
        fb.read_at(fb.match([h0 + 2, h1 + 2], [h1 + 2, fb.history(2) + 2], period=1, phase=0,
                            start=2, sentinel=2, digit_limit=8)),
    ]
    assert sum(_check_oracle(e, rng, 4) for e in exprs) >= 200


def test_content_reads_compiled():
    from tw_lowering import compile

    h0, h1, h2 = fb.history(0), fb.history(1), fb.history(2)
    exprs = [
        fb.read_at((h0 + 2).clip(0, CONTEXT - 1)) * 3
        + fb.latest(h1 + 1, period=3, phase=1, start=0) - fb.position_mod(2),
        fb.match([h0 + 2, h1 + 2], [h1 + 2, h2 + 2], period=2, phase=0, start=2, sentinel=2,
                 digit_limit=8, end=9) + fb.read_at(fb.position() - 1),
    ]
    rng = random.Random("firebrand-content-compiled")
    for expr in exprs:
        module = translate(expr, lower=LOWER, upper=UPPER, max_context=CONTEXT)
        for dtype in ("float32", "float64"):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ct = compile(module, d=64, d_head=8, d_hidden=256, dtype=dtype)
            assert _compiled_checks(ct, expr, rng, dtype) >= 20


def test_content_read_is_checked_when_broken(monkeypatch):
    """A broken score (latest without its recency term) ties keys: the oracle refuses the head's
    `tw.hard` claim, naming it; without the claim, the values disagree with the reference."""
    import tw_frontends.firebrand.translator as frontend
    from twdialect.inputs import EvaluationError

    expr = fb.latest(fb.history(0) % 3, period=1, phase=0, start=0)
    rng = random.Random("firebrand-broken")
    _check_oracle(expr, rng)
    real = frontend._read
    monkeypatch.setattr(frontend, "_read", lambda q, k, v, wq, g: real(
        q, k, v, np.asarray(wq) * [1, 1, 0, 1], g))
    with pytest.raises(EvaluationError, match=r"'tw.attn' in @main: declared tw.hard but query "
                                              r"\d+'s top logit leads the next by 0"):
        _check_oracle(expr, random.Random("firebrand-broken"))

    def unclaimed(q, k, v, wq, g):
        out = real(q, k, v, np.asarray(wq) * [1, 1, 0, 1], g)
        del out.owner.attributes["tw.hard"]
        return out

    monkeypatch.setattr(frontend, "_read", unclaimed)
    with pytest.raises(AssertionError):
        _check_oracle(expr, random.Random("firebrand-broken"))


def test_float64_requirement_and_refusal():
    from tw_frontends.firebrand.translator import (FLOAT32_SCORE_LIMIT, needs_float64,
                                               score_magnitudes)

    read = fb.read_at(fb.position() - 1)
    assert not needs_float64(read, lower=0, upper=9, max_context=1024)
    assert needs_float64(read, lower=0, upper=9, max_context=1025)
    assert score_magnitudes(read, lower=0, upper=9, max_context=1024) == [
        ("read_at", FLOAT32_SCORE_LIMIT)]
    wide = fb.match([fb.history(0)] * 3, [fb.history(0)] * 3, period=1, phase=0, start=0,
                    sentinel=0)
    assert needs_float64(wide, lower=0, upper=255, max_context=64)
    assert not needs_float64(wide, lower=0, upper=9, max_context=64)
    with pytest.raises(FirebrandError) as info:
        translate(fb.latest(fb.constant(4000), period=1, phase=0, start=0), lower=0, upper=4000,
                  max_context=10**7)
    assert "\n" not in str(info.value) and "2**46" in str(info.value)


def test_large_domains_refused():
    x = fb.position() * 100 + fb.history(0)
    with pytest.raises(FirebrandError) as info:  # a table that bends at every integer
        translate(x.lookup([v % 2 for v in range(6000)]), lower=0, upper=9, max_context=64)
    assert "\n" not in str(info.value) and "lookup" in str(info.value) \
        and "over [0, 5999] bends at 6000 integers" in str(info.value)
    # a long table whose slope seldom changes is a few hinges: translated, and exact
    _check_oracle(x.lookup([min(v, 3000) // 2 * 2 if v < 4 else min(v, 3000)
                            for v in range(6400)]), random.Random("long-table"))
    with pytest.raises(FirebrandError, match="mod"):
        translate((x * 50) % 3, lower=0, upper=9, max_context=64)
    with pytest.raises(FirebrandError, match="2\\*\\*24"):
        translate(fb.history(0) * 10**8, lower=0, upper=9, max_context=8)
    with pytest.raises(FirebrandError, match="unknown operation"):
        translate(fb.history(0) + fb.Expr("gather", ()), lower=0, upper=9, max_context=8)


def test_history_beyond_1024_positions_reads_by_address_in_float64():
    """Past tw.attend_to_offset's 1024 positions, history(k) is the read_at head at address
    position - k: flagged as needing float64, and exact there over a 1500-token sequence."""
    from tw_lowering import compile  # noqa: A004
    from tw_frontends.firebrand.translator import needs_float64

    expr = fb.history(3) * 2 + fb.history(1)
    assert not needs_float64(expr, lower=0, upper=9, max_context=1024)
    assert needs_float64(expr, lower=0, upper=9, max_context=1536)
    module = translate(expr, lower=0, upper=9, max_context=1536)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ct = compile(module, d=64, d_head=8, d_hidden=64, dtype="float64")
    rng = random.Random(11)
    tokens = [rng.randint(0, 9) for _ in range(1500)]
    got = ct.run({"tokens": np.array(tokens)})["next"][:, 0]
    want = np.array([2 * tokens[p - 3] + tokens[p - 1] for p in range(3, 1500)], np.float64)
    assert np.abs(got[3:] - want).max() < 1e-6
