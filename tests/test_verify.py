"""`tw_lowering.verify.verify_trace`: drafted traces checked in one teacher-forced pass with the
exact-index heads answered as gathers. A machine's own generation verifies with no
divergence; a draft altered at position k diverges at exactly k - 1 (the first position p
whose greedy next value differs from draft[p + 1]); the predicted values equal `ct.run`'s on
any sequence, whether heads are gathered or attended; the match-head certificate never
certifies a key that is not the softmax's winner."""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("firebrand", reason="firebrand (tw-compiler[firebrand]) is not installed")

from firebrand.ir import Machine, history, match, read_at  # noqa: E402

from tw_lowering import compile_machine  # noqa: E402
from tw_lowering.index_heads import HeadPlan, needed_gap  # noqa: E402
from tw_lowering.verify import _attend, _match_winners, verify_trace  # noqa: E402
from twdialect import ArgumentError  # noqa: E402

STORED = Path(__file__).resolve().parent.parent / "examples" / "rv32" / "hello.elf"


def _compiled(machine):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return compile_machine(machine)


def _fibonacci():
    return Machine((history(0) + history(1)) % 10, lower=0, upper=9, halt_values=(0,),
                   min_prefix=2, context_limit=40)


def _induction():
    """The token after the newest earlier occurrence of the current one (a match head), mixed
    with the current token, mod 7."""
    x = history(0)
    at = match([x], [history(1)], period=1, phase=0, start=1, sentinel=1)
    return Machine((read_at(at) + 3 * x + 1) % 7, lower=0, upper=6, halt_values=(),
                   min_prefix=2, context_limit=64)


@pytest.fixture(scope="module")
def fibonacci():
    return _compiled(_fibonacci())


@pytest.fixture(scope="module")
def induction():
    return _compiled(_induction())


def _kinds(cm) -> set[str]:
    return {p.kind for layer in cm.compiled.layers for p in layer.attn.plans}


def _run_next(cm, values) -> np.ndarray:
    out = cm.compiled.run({"tokens": np.asarray(values) - cm.machine.lower})
    return np.floor(out["next"][:, 0] + 0.5).astype(np.int64)


@pytest.mark.parametrize("name,prefix", [("fibonacci", [1, 1]), ("fibonacci", [2, 7]),
                                         ("induction", [0, 3]), ("induction", [5, 2])])
def test_generated_draft_verifies_and_an_altered_one_diverges_just_before(
        name, prefix, request):
    cm = request.getfixturevalue(name)
    trace = cm.generate(prefix, 60)
    r = verify_trace(cm, trace, prompt_length=len(prefix))
    assert r.first_divergence is None and r.positions == len(trace)
    assert r.checked_from == len(prefix) - 1
    assert r.indexed_heads > 0 and r.tokens_per_s > 0
    assert list(r.predicted[len(prefix) - 1:-1]) == trace[len(prefix):]
    m = cm.machine
    for k in range(len(prefix), len(trace)):
        bad = list(trace)
        bad[k] = m.lower + (bad[k] - m.lower + 1) % (m.upper - m.lower + 1)
        got = verify_trace(cm, bad, prompt_length=len(prefix)).first_divergence
        assert got == k - 1, (k, got)


def test_the_match_machine_has_a_match_head(induction):
    assert "match" in _kinds(induction) and "position" in _kinds(induction)


@pytest.mark.parametrize("name", ["fibonacci", "induction"])
def test_predictions_equal_run_on_any_sequence(name, request):
    cm = request.getfixturevalue(name)
    m = cm.machine
    rng = np.random.default_rng(7)
    for _ in range(15):
        n = int(rng.integers(2, cm.max_context + 1))
        seq = rng.integers(m.lower, m.upper + 1, size=n)
        r = verify_trace(cm, seq, keep_outputs=True)
        out = cm.compiled.run({"tokens": seq - m.lower})
        assert np.array_equal(r.predicted, np.floor(out["next"][:, 0] + 0.5))
        np.testing.assert_allclose(r.outputs["next"], out["next"], rtol=0, atol=1e-4)


def test_attended_heads_give_the_same_answers(induction, monkeypatch):
    """A gap no query reaches: every head falls back to attention, with the same answers."""
    import tw_lowering.index_heads as ih

    trace = induction.generate([0, 3], 50)
    gathered = verify_trace(induction, trace, prompt_length=2)
    monkeypatch.setattr(ih, "needed_gap", lambda n: 1e12)
    attended = verify_trace(induction, trace, prompt_length=2)
    assert attended.first_divergence is None
    assert attended.attended_heads > gathered.attended_heads
    assert attended.indexed_heads + attended.attended_heads == \
        gathered.indexed_heads + gathered.attended_heads
    assert attended.attended_by_head and np.array_equal(attended.predicted, gathered.predicted)


def test_chunks_do_not_change_the_answer(induction):
    trace = induction.generate([5, 2], 60)
    whole = verify_trace(induction, trace, prompt_length=2, keep_outputs=True)
    for chunk in (1, 7, 16):
        r = verify_trace(induction, trace, prompt_length=2, chunk=chunk, keep_outputs=True)
        assert r.first_divergence is None and np.array_equal(r.predicted, whole.predicted)
        np.testing.assert_allclose(r.outputs["next"], whole.outputs["next"], rtol=0, atol=1e-9)


def test_a_compiled_transformer_with_next_of(induction):
    ct, m = induction.compiled, induction.machine
    trace = np.array(induction.generate([0, 3], 40))
    next_of = (lambda out: np.floor(out["next"][:, 0] + 0.5) - m.lower)
    r = verify_trace(ct, trace - m.lower, next_of=next_of, prompt_length=2)
    assert r.first_divergence is None
    bad = trace - m.lower
    bad[20] = (bad[20] + 1) % 7
    assert verify_trace(ct, bad, next_of=next_of, prompt_length=2).first_divergence == 19
    r = verify_trace(ct, {"tokens": bad}, next_of=next_of, expected=bad, prompt_length=2)
    assert r.first_divergence == 19


def test_bad_calls_are_one_line(induction):
    with pytest.raises(ArgumentError, match="outside the machine's alphabet"):
        verify_trace(induction, [0, 3, 9])
    with pytest.raises(ArgumentError, match="non-empty 1-D"):
        verify_trace(induction, [])
    with pytest.raises(ArgumentError, match="next_of"):
        verify_trace(induction.compiled, np.array([0, 3, 1]))
    with pytest.raises(ArgumentError, match="expected="):
        verify_trace(induction.compiled, {"tokens": np.array([0, 3])}, next_of=lambda o: o)
    with pytest.raises(ArgumentError, match="prompt_length"):
        verify_trace(induction, [0, 3, 1], prompt_length=0)


# -- the match certificate on synthetic heads ------------------------------------------------


def _synthetic(n, rng, classes=3, beta=1e5, recency=40.0, values=12):
    """A match head's compiled dims: [v, v^2, j, class, 1] keys; queries aiming at target t
    (q_v = 2 beta t, q_sq = -beta), recency weight 1, a class weight and a constant."""
    plan = HeadPlan("match", "synthetic", recency, 5, value_dims=(0,), square_dims=(1,),
                    sigma=(1.0,), value_lo=(0.0,), value_hi=(float(values),),
                    value_step=(1.0,), recency_dim=2, recency=recency, class_dims=(3,),
                    const_dims=(4,), const=(1.0,))
    v = rng.integers(0, values, n).astype(np.float64)
    c = rng.integers(0, classes, n).astype(np.float64)
    j = np.arange(n, dtype=np.float64)
    k = np.stack([v, v * v, recency * j, c, np.ones(n)], 1)
    t = rng.integers(0, values + 2, n).astype(np.float64)
    cw = rng.choice([0.0, 3.0, 1e4, -1e4], n)
    q = np.stack([2 * beta * t, -beta * np.ones(n), np.ones(n), cw, rng.normal(size=n)], 1)
    return plan, torch.from_numpy(q), torch.from_numpy(k)


def _argmax(q, k) -> np.ndarray:
    s = (q @ k.T).numpy()
    s[np.triu_indices(len(s), 1)] = -np.inf
    return s.argmax(1), s


@pytest.mark.parametrize("seed", range(6))
def test_certified_match_winners_are_the_softmax_winners(seed):
    rng = np.random.default_rng(seed)
    n = 300
    plan, q, k = _synthetic(n, rng, classes=int(rng.integers(1, 6)))
    need = needed_gap(n)
    win = _match_winners(q, k, plan, need).numpy()
    best, s = _argmax(q, k)
    ok = win >= 0
    assert ok.mean() > 0.5  # most queries are certified
    assert np.array_equal(win[ok], best[ok])
    for i in np.nonzero(ok)[0]:  # the winner leads every other key by the gap
        row = np.delete(s[i, :i + 1], win[i])
        assert row.size == 0 or s[i, win[i]] - row.max() >= need


def test_keys_off_the_lattice_and_too_many_classes_are_attended():
    rng = np.random.default_rng(11)
    n = 200
    plan, q, k = _synthetic(n, rng)
    k[60, 0] += 0.5  # a content value off its integers
    win = _match_winners(q, k, plan, needed_gap(n)).numpy()
    assert (win[60:] == -1).all() and (win[:60] >= 0).any()
    plan, q, k = _synthetic(n, rng, classes=1)
    k[:, 3] = torch.from_numpy(np.minimum(np.arange(n) // 5, 40).astype(np.float64))  # a new
    # class every 5 keys
    win = _match_winners(q, k, plan, needed_gap(n)).numpy()
    assert (win[16 * 5:] == -1).all() and (win[:16 * 5] >= 0).any()
    best, _ = _argmax(q, k)
    ok = win >= 0
    assert np.array_equal(win[ok], best[ok])


@pytest.mark.parametrize("budget", [1, 7, 500, 1 << 24])
def test_attended_queries_in_blocks_are_softmax_attention(budget, monkeypatch):
    import tw_lowering.verify as verify

    monkeypatch.setattr(verify, "ATTEND_BUDGET", budget)
    g = torch.Generator().manual_seed(0)
    n, e = 300, 5
    q, k = torch.randn(n, e, generator=g, dtype=torch.float64), torch.randn(
        n, e, generator=g, dtype=torch.float64)
    v = torch.randn(n, 3, generator=g, dtype=torch.float64)
    rows = torch.sort(torch.randperm(n, generator=g)[:120]).values
    s = q[rows] @ k.T
    causal = torch.softmax(s.masked_fill(torch.arange(n)[None] > rows[:, None], -math.inf),
                           -1) @ v
    torch.testing.assert_close(_attend(q[rows], rows, k, v, False), causal)
    torch.testing.assert_close(_attend(q[rows], rows, k, v, True), torch.softmax(s, -1) @ v)


# -- RV32 ------------------------------------------------------------------------------------


def test_rv32_hello_draft_verifies():
    """The stored hello ELF on RV32(ram_bytes=1024): its trace (the index decoder's)
    verifies; a token altered in the generated part diverges just before; the predictions
    equal ct.run's."""
    from tw_frontends.firebrand.rv32 import RV32, load_elf

    rv = RV32(ram_bytes=1024, max_context=2048)
    image, entry = load_elf(STORED.read_bytes(), 1024)
    prompt = rv.prompt(image, entry)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (float64's static bound on the softmax reads)
        cm = rv.compiled
    trace = list(prompt)
    for v in cm.next_values(prompt, rv.max_context, "test"):
        trace.append(v)
        if v == -1:
            break
    assert trace[-1] == -1 and rv.result(trace, image, len(prompt)).console == "hi\n"
    r = verify_trace(cm, trace, prompt_length=len(prompt))
    assert r.first_divergence is None and r.positions == len(trace)
    assert r.indexed_heads > 10 * r.attended_heads
    k = len(prompt) + 37
    bad = list(trace)
    bad[k] = (bad[k] + 1) % 256
    assert verify_trace(cm, bad, prompt_length=len(prompt)).first_divergence == k - 1
    assert np.array_equal(r.predicted, _run_next(cm, trace))
    assert math.isfinite(r.seconds)
