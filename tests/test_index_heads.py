"""Exact-index heads (`lowering/index_heads.py`) and the index decoder (`lowering/fast_decode.py`).

* Planning: which lookup each `tw.attn` gets (position read, newest key match, or attention),
  on graphs built by hand and by the library, and that a compiled model keeps the plans.
* The index decoder's answer is real attention's: `IndexDecoder` prefilled with a whole random
  sequence against `ct.run` at every position (position reads clamped at 0 and at the query,
  sequences reaching the context end, absent keys, ties, repeated keys), with `stats()`
  showing which path answered.
* Whole decoders: the index decoder against the torch KV-cache decoder token for token on
  firebrand machines, the RV32 machine (slow) and the bundled token programs.
* Without numba: `supports` says why, "auto" decodes with torch, "index" is refused.
"""

from __future__ import annotations

import itertools
import warnings
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from tw_lowering import compile  # noqa: A004
from tw_lowering import fast_decode
from tw_lowering.fast_decode import IndexDecoder, available, supports
from tw_lowering.index_heads import (HeadPlan, annotate, graph_positions, needed_gap, plan_head,
                                     plans)
from twdialect import ops as tw
from twdialect.dialect import AttnOp
from twdialect.inputs import check_feedback, check_inputs
from twdialect.interp import find_graph

needs_numba = pytest.mark.skipif(available() is not None,
                                 reason=f"the index decoder does not run here: {available()}")

GAIN = 30.0  # firebrand's logit per score unit
ATOL = 1e-4


# --------------------------------------------------------------------------------------
# Graphs
# --------------------------------------------------------------------------------------


def _head_plans(module) -> list[HeadPlan]:
    """The plan of every tw.attn of `module`'s graph, in graph order."""
    return list(plans(find_graph(module)).values())


def _position_head(rope=None, mask="causal", curvature_input=False, offset=3, max_len=32):
    """attend_to_offset's head written by hand: query [i, 1] (and an input x), key [j, j^2],
    logits 40 (2 (i - offset) j - j^2) (- 40 x j^2 with x)."""
    g = 40.0
    with tw.Graph("main") as gr:
        pos = tw.pos_encoding(2, max_len)
        v = tw.input("v", 1, (0, 99), integer=True)
        parts = [tw.slice(pos, 0, 1), tw.literal([1.0])]
        wq = [[2 * g, 0.0], [-2 * g * offset, -g]]
        if curvature_input:
            parts.append(tw.input("x", 1, (0, 3), integer=True))
            wq.append([0.0, -g])
        tw.output("y", tw.attn(tw.concat(*parts), tw.slice(pos, 0, 2), v, np.array(wq),
                               np.eye(2), np.eye(1), np.eye(1), mask=mask, rope=rope))
    return gr.module


def _match_module(L=24, square=lambda x: x * x, tag=lambda j: j % 3 == 0, tag_weight=None,
                  extra_mlp=True):
    """A firebrand-style match head (`frontends/firebrand/translator.py`, `_content`'s match) over
    one digit: query [q, 1, w], key [k, k^2 (a tw.piecewise_linear through the squares of k),
    j (tw.pos_encoding column 0), tag_j (a tw.pos_table column)], scores (times 30)
    S = 2A (2 q k - k^2) + 2 j + tag_weight w tag_j with A = 2L + 1 (tag_weight A unless
    given). The value read is the integer input v; output "y" is the read itself."""
    a = 2 * L + 1
    with tw.Graph("main") as g:
        pos = tw.pos_encoding(2, L)
        q = tw.input("q", 1, (0, 9), integer=True)
        k = tw.input("k", 1, (0, 9), integer=True)
        w = tw.input("w", 1, (0, 1), integer=True)
        v = tw.input("v", 1, (0, 99), integer=True)
        ksq = tw.piecewise_linear(k, list(range(10)), [float(square(x)) for x in range(10)])
        tags = tw.pos_table(np.array([[float(tag(j))] for j in range(L)]))
        query = tw.concat(q, tw.literal([1.0]), w)
        key = tw.concat(k, ksq, tw.slice(pos, 0, 1), tags)
        wq = np.zeros((3, 4))
        wq[0, 0] = 4.0 * a
        wq[1, 1] = -2.0 * a
        wq[1, 2] = 2.0
        wq[2, 3] = float(a if tag_weight is None else tag_weight)
        tw.output("y", tw.attn(query, key, v, wq * GAIN, np.eye(4), np.eye(1), np.eye(1)))
        if extra_mlp:
            tw.output("z", tw.relu(tw.add_const(v, -50.0)))
    return g.module


def _match_scores(ins, L, tag, tag_weight=None):
    """S[i, j] of `_match_module` (score units), for the reference softmax."""
    a = 2 * L + 1
    tw_ = a if tag_weight is None else tag_weight
    q, k, w = (ins[n][:, 0] for n in ("q", "k", "w"))
    n = len(q)
    j = np.arange(n)
    tags = np.array([float(tag(x)) for x in j])
    return (2 * a * (2 * q[:, None] * k[None, :] - k[None, :] ** 2) + 2 * j[None, :]
            + tw_ * w[:, None] * tags[None, :])


def _softmax_reads(scores, v):
    """Causal softmax of GAIN * scores over v, in float64: real attention's answer."""
    n = len(v)
    out = np.zeros(n)
    for i in range(n):
        s = GAIN * scores[i, : i + 1]
        p = np.exp(s - s.max())
        out[i] = p @ v[: i + 1] / p.sum()
    return out


def _position_module(L=32):
    """Position reads: attend_to_offset at offsets 0, 1, 5 and 40 (beyond every position),
    and a read_at-style head: key [j, j^2] from a tw.pos_table, query [t, 1] with t an input
    that may lie beyond the query's own position (the read clamps to it)."""
    g = 40.0
    with tw.Graph("main") as gr:
        pos = tw.pos_encoding(2, L)
        v = tw.input("v", 1, (0, 99), integer=True)
        t = tw.input("t", 1, (0, L + 8), integer=True)
        for off in (0, 1, 5, 40):
            tw.output(f"off{off}", tw.attend_to_offset(pos, v, off))
        table = tw.pos_table(np.array([[j, j * j] for j in range(L)], np.float64))
        tw.output("at", tw.attn(tw.concat(t, tw.literal([1.0])), table, v,
                                np.array([[2 * g, 0.0], [0.0, -g]]), np.eye(2), np.eye(1),
                                np.eye(1)))
        tw.output("z", tw.relu(tw.add_const(v, -50.0)))
    return gr.module


def _embedding_module(L=20):
    """A latest-style head over a token embedding whose rows are [c, c^2, 3c + 1]: query
    [x, 1], key [c, c^2, j, tag], S = L (2 x c - c^2) + j + T tag (firebrand's latest); the
    value is the embedding's third column."""
    tags = [float(j % 2 == 1) for j in range(L)]
    t_bonus = L * 90 + L  # beats the spread of the rest
    with tw.Graph("main") as g:
        pos = tw.pos_encoding(2, L)
        emb = tw.embedding("tokens", np.array([[c, c * c, 3 * c + 1] for c in range(10)],
                                              np.float64))
        x = tw.input("x", 1, (0, 9), integer=True)
        key = tw.concat(tw.slice(emb, 0, 2), tw.slice(pos, 0, 1),
                        tw.pos_table(np.array(tags)[:, None]))
        wq = np.array([[2.0 * L, 0.0, 0.0, 0.0], [0.0, -float(L), 1.0, float(t_bonus)]])
        tw.output("y", tw.attn(tw.concat(x, tw.literal([1.0])), key, tw.slice(emb, 2, 1),
                               wq * GAIN, np.eye(4), np.eye(1), np.eye(1)))
        tw.output("z", tw.relu(tw.add_const(tw.slice(emb, 2, 1), -10.0)))
    return g.module


def _compiled(module, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # float32's static bound on the softmax reads
        return compile(module, d=kw.pop("d", 64), d_head=kw.pop("d_head", 16), **kw)


# --------------------------------------------------------------------------------------
# 1. Planning
# --------------------------------------------------------------------------------------


def test_offset_reads_plan_as_position_reads_of_gap_40():
    with tw.Graph("main") as g:
        pos = tw.pos_encoding(2, 64)
        v = tw.input("v", 2, (-5, 5))
        for off in (0, 1, 7, 100):
            tw.output(f"o{off}", tw.attend_to_offset(pos, v, off))
        tw.output("prev", tw.get_prev_value(pos, v))
    got = _head_plans(g.module)
    assert len(got) == 5
    for p in got:
        assert p.kind == "position" and p.indexed, p.why
        assert p.gap == 40.0 and p.gap >= needed_gap(64)
        assert p.a2[1] == 1.0 and p.a1[0] == 1.0  # key [j, j^2]
    assert graph_positions(find_graph(g.module)) == 64


def test_hand_written_position_head_plans_like_the_library_one():
    (p,) = _head_plans(_position_head())
    assert p.kind == "position" and p.gap == 40.0
    # the gap a plan needs grows with the positions: 40 covers 1024, not 2^40
    assert needed_gap(1024) < 40.0 < needed_gap(2 ** 40)


def test_plan_needs_the_gap_for_the_graphs_positions():
    """The same head over far more positions than its gap covers is attended."""
    from twdialect.ranges import integer_components, value_ranges

    gr = find_graph(_position_head())
    op = next(o for o in gr.block.ops if isinstance(o, AttnOp))
    boxes, ints = value_ranges(gr, strict=False), integer_components(gr)
    assert plan_head(op, boxes, ints, 32).kind == "position"
    far = plan_head(op, boxes, ints, 2 ** 40)
    assert far.kind == "scan" and "gap" in far.why


def test_mean_read_plans_as_attention():
    with tw.Graph("main") as g:
        ok = tw.input("ok", 1, (-1, 1), integer=True)
        tw.output("y", tw.attend_mean_where(ok, tw.input("v", 1, (-9, 9))))
    (p,) = _head_plans(g.module)
    assert p.kind == "scan" and not p.indexed


@pytest.mark.parametrize("kw,why", [(dict(rope=True), "rotary"),
                                    (dict(mask="full"), "full-mask"),
                                    (dict(curvature_input=True), "curvature")])
def test_rotary_full_mask_and_query_curvature_heads_plan_as_attention(kw, why):
    (p,) = _head_plans(_position_head(**kw))
    assert p.kind == "scan" and why in p.why


def test_firebrand_style_match_head_plans_as_a_match():
    (p,) = _head_plans(_match_module(extra_mlp=False))
    assert p.kind == "match" and p.indexed, p.why
    assert p.value_dims == (0,) and p.square_dims == (1,) and p.recency_dim == 2
    assert p.class_dims == (3,) and p.sigma == (1.0,)
    L, a = 24, 49
    assert p.gap >= needed_gap(L)
    assert p.recency == 1.0 and p.gap == min(2 * a * GAIN - 2 * GAIN * (L - 1), 2 * GAIN)


@pytest.mark.parametrize("square", [lambda x: x * x + (x == 4), lambda x: (x + 1) ** 2,
                                    lambda x: 2 * x * x])
def test_match_head_whose_square_column_is_not_the_square_plans_as_attention(square):
    (p,) = _head_plans(_match_module(square=square, extra_mlp=False))
    assert p.kind == "scan", p.why


def test_plan_survives_the_tw_index_attribute():
    from tw_lowering.index_heads import INDEX

    module = _match_module(extra_mlp=False)
    (want,) = _head_plans(module)
    annotate(module)
    (op,) = [o for o in find_graph(module).block.ops if isinstance(o, AttnOp)]
    assert HeadPlan.from_json(op.attributes[INDEX].data) == want


def test_compiled_model_keeps_the_plans():
    """A model compiled from a graph with a position read, a match and a mean read keeps one
    plan per head: the match and the mean as planned (extra position heads are the pooled
    self-attention ones)."""
    L = 24
    with tw.Graph("main") as g:
        pos = tw.pos_encoding(2, L)
        q = tw.input("q", 1, (0, 9), integer=True)
        k = tw.input("k", 1, (0, 9), integer=True)
        ok = tw.input("ok", 1, (-1, 1), integer=True)
        ksq = tw.piecewise_linear(k, list(range(10)), [float(x * x) for x in range(10)])
        a = 2 * L + 1
        wq = np.zeros((2, 3))
        wq[0, 0], wq[1, 1], wq[1, 2] = 4.0 * a, -2.0 * a, 2.0
        tw.output("m", tw.attn(tw.concat(q, tw.literal([1.0])),
                               tw.concat(k, ksq, tw.slice(pos, 0, 1)), q, wq * GAIN,
                               np.eye(3), np.eye(1), np.eye(1)))
        tw.output("p", tw.attend_to_offset(pos, k, 2))
        tw.output("mean", tw.attend_mean_where(ok, k))
        tw.output("z", tw.relu(tw.add_const(k, -4.0)))
    assert Counter(p.kind for p in _head_plans(g.module)) == Counter(
        {"match": 1, "position": 1, "scan": 1})
    ct = _compiled(g.module)
    kinds = Counter(p.kind for layer in ct.layers for p in layer.attn.plans)
    assert kinds["match"] == 1 and kinds["scan"] == 1 and kinds["position"] >= 1
    assert sum(layer.attn.n_heads for layer in ct.layers) == sum(kinds.values())


# --------------------------------------------------------------------------------------
# 2. The index decoder's answer is real attention's
# --------------------------------------------------------------------------------------


def _index_prefill(ct, inputs, capacity=None):
    checked = check_inputs(ct.contract, inputs)
    dec = IndexDecoder(ct, capacity or checked.n_positions)
    return dec.prefill([checked])[0], dec


def _agrees(ct, inputs, capacity=None):
    """The index decoder's outputs equal ct.run's at every position; returns (outputs, stats)."""
    want = ct.run(inputs)
    got, dec = _index_prefill(ct, inputs, capacity)
    assert set(got) == set(want)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=0, atol=ATOL, err_msg=name)
    return want, dec.stats()


@pytest.fixture(scope="module")
def position_model():
    return _compiled(_position_module())


@pytest.fixture(scope="module")
def match_model():
    return _compiled(_match_module())


@pytest.fixture(scope="module")
def tie_model():
    # the tag bonus equals one position's recency: a tagged key ties the untagged one after it
    return _compiled(_match_module(L=16, tag=lambda j: j % 2 == 0, tag_weight=2.0))


@needs_numba
def test_position_keys_are_proven_once_or_checked_at_each_step(position_model, monkeypatch):
    """A position read whose key reads only the position and its tables is shown to be its
    polynomial at every position when the decoder is made; where a table leaves the polynomial
    (bent here from position 20 on) the key is not proven and the step that reaches it stops
    the decoder (`IndexMismatch`: the callers finish with the torch decoder)."""
    dec = IndexDecoder(position_model, 32)
    kinds, proven = dec.arrays[1][4], dec.state[1][11]
    position = [g for g in range(len(kinds)) if kinds[g] == fast_decode.KIND_POSITION]
    assert position and all(proven[g] for g in position)
    bent = fast_decode._InputRows(position_model, 32)
    bent.pos_rows = bent.pos_rows.copy()
    bent.pos_rows[20:] += 0.5
    monkeypatch.setattr(position_model, "_index_inputs", (position_model._np_dtype, 32, bent))
    monkeypatch.setattr(fast_decode.flat_of(position_model), "proven", None)
    dec = IndexDecoder(position_model, 32)
    assert not any(dec.state[1][11][g] for g in position)
    rng = np.random.default_rng(0)
    ins = {"v": rng.integers(0, 100, (24, 1)).astype(float),
           "t": rng.integers(0, 41, (24, 1)).astype(float)}
    with pytest.raises(fast_decode.IndexMismatch, match="position 20"):
        dec.prefill([check_inputs(position_model.contract, ins)])


@needs_numba
def test_match_table_grows_and_answers_alike(match_model, monkeypatch):
    """The match heads' table starts at TABLE_ROWS rows and doubles when half full, between
    two positions: from 4 rows it grows several times within 24 positions, answers unchanged."""
    monkeypatch.setattr(fast_decode, "TABLE_ROWS", 4)
    ins = _random_digits(np.random.default_rng(5), 24)
    want = match_model.run(ins)
    got, dec = _index_prefill(match_model, ins)
    np.testing.assert_allclose(got["y"], want["y"], rtol=0, atol=ATOL)
    assert len(dec.state[2][0]) > 4 and dec.stats()["table_entries"] > 2


@needs_numba
def test_position_model_plans(position_model):
    kinds = [p.kind for layer in position_model.layers for p in layer.attn.plans]
    assert kinds.count("position") >= 5 and "scan" not in kinds and supports(position_model) is None


@needs_numba
@pytest.mark.parametrize("seed,n", [(0, 32), (1, 32), (2, 17), (3, 1)])
def test_position_reads_equal_attention(position_model, seed, n):
    """Offsets beyond the position read position 0, read_at targets beyond the query read the
    query itself; 32 positions is exactly the pos_encoding's max_len (and the table's rows)."""
    rng = np.random.default_rng(seed)
    ins = {"v": rng.integers(0, 100, (n, 1)).astype(float),
           "t": rng.integers(0, 41, (n, 1)).astype(float)}
    want, stats = _agrees(position_model, ins, capacity=32)
    v, i = ins["v"][:, 0], np.arange(n)
    for off in (0, 1, 5, 40):
        np.testing.assert_allclose(want[f"off{off}"][:, 0], v[np.maximum(i - off, 0)], atol=ATOL)
    at = np.minimum(ins["t"][:, 0].astype(int), i)
    np.testing.assert_allclose(want["at"][:, 0], v[at], atol=ATOL)
    assert stats["indexed"] >= 5 * n and stats["attended"] == 0, stats


def _random_digits(rng, n: int) -> dict:
    """Query and key digits, a 0/1 sentinel weight and values at n positions."""
    return {"q": rng.integers(0, 10, (n, 1)).astype(float),
            "k": rng.integers(0, 10, (n, 1)).astype(float),
            "w": rng.integers(0, 2, (n, 1)).astype(float),
            "v": rng.integers(0, 100, (n, 1)).astype(float)}


@needs_numba
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_match_reads_equal_attention_on_random_sequences(match_model, seed):
    """Random digits over 24 positions (the context's end: pos_encoding max_len and the tag
    table's rows): repeated keys (the newest wins), present and absent targets."""
    L = 24
    ins = _random_digits(np.random.default_rng(seed), L)
    want, stats = _agrees(match_model, ins)
    tag = (lambda j: j % 3 == 0)
    ref = _softmax_reads(_match_scores(ins, L, tag), ins["v"][:, 0])
    np.testing.assert_allclose(want["y"][:, 0], ref, atol=ATOL)
    assert stats["indexed"] > 0, stats


@needs_numba
def test_match_newest_of_repeated_keys_wins(match_model):
    """Keys from three values only, w = 0 (no tag bonus): every query's target is present many
    times, and the newest occurrence is read: all by index."""
    L = 24
    rng = np.random.default_rng(7)
    k = rng.integers(3, 6, L).astype(float)
    q = np.array([k[rng.integers(0, i + 1)] for i in range(L)])  # a value seen at or before i
    v = rng.permutation(100)[:L].astype(float)
    ins = {"q": q[:, None], "k": k[:, None], "w": np.zeros((L, 1)), "v": v[:, None]}
    want, stats = _agrees(match_model, ins)
    newest = [max(j for j in range(i + 1) if k[j] == q[i]) for i in range(L)]
    np.testing.assert_allclose(want["y"][:, 0], v[newest], atol=ATOL)
    assert stats["attended"] == 0 and stats["indexed"] > 0, stats


@needs_numba
def test_match_with_absent_keys_attends_and_agrees(match_model):
    """Keys even, queries odd: no target is ever present, the softmax reads the nearest keys
    (a blend where they score alike): the decoder must attend."""
    L = 24
    rng = np.random.default_rng(11)
    ins = {"q": (2 * rng.integers(0, 5, (L, 1)) + 1).astype(float),
           "k": (2 * rng.integers(0, 5, (L, 1))).astype(float),
           "w": rng.integers(0, 2, (L, 1)).astype(float),
           "v": rng.integers(0, 100, (L, 1)).astype(float)}
    want, stats = _agrees(match_model, ins)
    ref = _softmax_reads(_match_scores(ins, L, lambda j: j % 3 == 0), ins["v"][:, 0])
    np.testing.assert_allclose(want["y"][:, 0], ref, atol=ATOL)
    assert stats["attended"] > 0, stats


@needs_numba
@pytest.mark.parametrize("far", [0, 8])
def test_match_tie_between_two_absent_neighbours_is_averaged(tie_model, far):
    """Target 5 absent, key 4 at an even (tagged) position p and key 6 at p + 1: with w = 1
    both score the same (the tag's bonus is one position's recency), so the softmax averages
    their values; `far` keys far from 5 come first (the tagged class then holds more keys than
    the decoder scores one by one)."""
    p = 4 + far
    n = p + 4
    k = np.full(n, 9.0)
    k[p], k[p + 1] = 4.0, 6.0
    k[: far] = 0.0
    q = np.full(n, 9.0)
    q[p + 2:] = 5.0
    v = np.arange(n, dtype=float) * 5 + 3
    ins = {"q": q[:, None], "k": k[:, None], "w": np.ones((n, 1)), "v": v[:, None]}
    want, stats = _agrees(tie_model, ins)
    tie = (v[p] + v[p + 1]) / 2
    np.testing.assert_allclose(want["y"][p + 2:, 0], tie, atol=ATOL)
    assert stats["attended"] >= 2, stats  # the two tied queries at least


@needs_numba
@pytest.mark.parametrize("seed", [0, 1])
def test_tie_model_on_random_sequences(tie_model, seed):
    L = 16
    ins = _random_digits(np.random.default_rng(seed), L)
    want, _ = _agrees(tie_model, ins)
    ref = _softmax_reads(_match_scores(ins, L, lambda j: j % 2 == 0, 2.0), ins["v"][:, 0])
    np.testing.assert_allclose(want["y"][:, 0], ref, atol=ATOL)


@needs_numba
@pytest.mark.parametrize("seed", [0, 1])
def test_embedding_latest_head_equals_attention(seed):
    """A latest-style head whose key squares are an embedding column (the index's square
    fact from the table itself), value an embedding column, over the whole 20 positions."""
    module = _embedding_module()
    (p,) = _head_plans(module)
    assert p.kind == "match", p.why
    ct = _compiled(module)
    rng = np.random.default_rng(seed)
    L = 20
    ins = {"tokens": rng.integers(0, 10, L), "x": rng.integers(0, 10, (L, 1)).astype(float)}
    _, stats = _agrees(ct, ins)
    assert stats["indexed"] > 0, stats
    # only a few token values: targets are present (indexed) and absent (attended) both
    ins = {"tokens": rng.integers(2, 5, L), "x": rng.integers(0, 10, (L, 1)).astype(float)}
    _, stats = _agrees(ct, ins)
    assert stats["attended"] > 0, stats


@needs_numba
@pytest.mark.parametrize("build", ["position", "match"])
def test_float64_models_equal_attention(build):
    """The same reads compiled to float64 (the decoder computes in the model's dtype)."""
    module = _position_module() if build == "position" else _match_module()
    ct = _compiled(module, dtype="float64")
    assert ct._np_dtype == np.float64
    rng = np.random.default_rng(5)
    if build == "position":
        ins = {"v": rng.integers(0, 100, (32, 1)).astype(float),
               "t": rng.integers(0, 41, (32, 1)).astype(float)}
    else:
        ins = {n: rng.integers(0, 2 if n == "w" else 10, (24, 1)).astype(float) for n in "qkw"}
        ins["v"] = rng.integers(0, 100, (24, 1)).astype(float)
    _, stats = _agrees(ct, ins)
    assert stats["indexed"] > 0, stats


@needs_numba
def test_match_head_with_five_class_dims_equals_attention():
    """Class dims 3..6 are 1 only at the last position (equal on every key read here), class
    dim 7 a tag whose bonus (4A) beats one step off the target (2A): real attention reads the
    newest tagged key 4, never the untagged exact 5."""
    L, a = 24, 49
    with tw.Graph("main") as g:
        pos = tw.pos_encoding(2, L)
        q = tw.input("q", 1, (0, 9), integer=True)
        k = tw.input("k", 1, (0, 9), integer=True)
        v = tw.input("v", 1, (0, 99), integer=True)
        ksq = tw.piecewise_linear(k, list(range(10)), [float(x * x) for x in range(10)])
        cls = tw.pos_table([[float(j == L - 1)] * 4 + [float(j % 2 == 0)] for j in range(L)])
        wq = np.zeros((2, 8))
        wq[0, 0], wq[1, 1], wq[1, 2], wq[1, 3:7], wq[1, 7] = 4 * a, -2 * a, 2, 1, 4 * a
        tw.output("y", tw.attn(tw.concat(q, tw.literal([1.0])),
                               tw.concat(k, ksq, tw.slice(pos, 0, 1), cls), v,
                               wq * GAIN, np.eye(8), np.eye(1), np.eye(1)))
    (p,) = _head_plans(g.module)
    assert p.kind == "match" and len(p.class_dims) == 5
    ct = _compiled(g.module)
    ins = {"q": np.full((12, 1), 5.0), "k": np.array([[4.0], [5.0]] * 6),
           "v": np.arange(12.0)[:, None] * 3 + 1}
    want, _ = _agrees(ct, ins, capacity=L)
    np.testing.assert_allclose(want["y"][:, 0], ins["v"][(np.arange(12) // 2) * 2, 0], atol=ATOL)


@needs_numba
def test_model_without_mlp_neurons():
    """A model that is one attention read and nothing else (no MLP arrays to flatten)."""
    with tw.Graph("main") as g:
        v = tw.input("v", 1, (0, 99), integer=True)
        tw.output("y", tw.attend_to_offset(tw.pos_encoding(2, 16), v, 2))
    ct = _compiled(g.module)
    assert all(layer.mlp.n_neurons == 0 for layer in ct.layers)
    v = np.random.default_rng(0).integers(0, 100, (16, 1)).astype(float)
    want, stats = _agrees(ct, {"v": v})
    np.testing.assert_allclose(want["y"], v[np.maximum(np.arange(16) - 2, 0)], atol=ATOL)
    assert stats["indexed"] > 0 and stats["attended"] == 0, stats


# --------------------------------------------------------------------------------------
# 3. Whole decoders: index against torch
# --------------------------------------------------------------------------------------


def _machines():
    from firebrand.ir import Machine, history, latest, match, position_mod, read_at, select

    h0, h1 = history(0), history(1)
    return {
        # tests/test_compile_machine.py's machines (they halt)
        "counter": Machine(h0 + 1, lower=0, upper=12, halt_values=(12,), context_limit=16),
        "fibonacci": Machine((h0 + h1) % 10, lower=0, upper=9, halt_values=(0,),
                             min_prefix=2, context_limit=40),
        "select": Machine(select(h0.equals(6), 0, (h0 + position_mod(3)).lookup(
            [3, 1, 4, 1, 5, 2, 6, 5, 3])), lower=0, upper=6, halt_values=(0,),
            context_limit=24),
        # an induction head: the token after the previous occurrence of the current one (a
        # match, its sentinel where there is none)
        "induction": Machine((read_at(match([h0], [h1], period=1, phase=0, start=1, sentinel=1,
                                            digit_limit=9)) + h0 + position_mod(3) + 1) % 10,
                             lower=0, upper=9, min_prefix=2, context_limit=320),
        # latest over odd positions, often without an exact key (then the nearest)
        "latest": Machine((read_at(latest((h0 + 3) % 10, period=2, phase=1, start=1))
                           + 2 * h0 + position_mod(4)) % 10,
                          lower=0, upper=9, min_prefix=2, context_limit=320),
    }


@pytest.fixture(scope="module")
def machines():
    pytest.importorskip("firebrand", reason="firebrand is not installed")
    from tw_lowering import compile_machine

    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, m in _machines().items():
            out[name] = compile_machine(m)
    return out


def _index_and_torch(cm, prefix, steps):
    """(index tokens, torch tokens) after `prefix`: at most `steps`, up to a halt value (the
    index decoder stops there; the torch one is read as far)."""
    cap = min(cm.max_context, len(prefix) + steps)
    got = list(itertools.islice(cm.next_values(prefix, cap, "test", decoder="index"), steps))
    assert cm.decoder_used == "index"  # (no fallback to torch on the way)
    stats = cm.index_decoder.stats()
    want = list(itertools.islice(cm.next_values(prefix, cap, "test", decoder="torch"), len(got)))
    assert cm.decoder_used == "torch"
    return got, want, stats


@needs_numba
@pytest.mark.parametrize("name,prefix,steps", [
    ("counter", [0], 20), ("counter", [7], 20), ("fibonacci", [1, 1], 38),
    ("fibonacci", [2, 7], 38), ("select", [1], 22), ("select", [4, 5], 22),
    ("induction", [3, 1, 4, 1, 5], 300), ("induction", [0, 0], 300),
    ("latest", [2, 7], 300), ("latest", [9, 9, 9], 300)])
def test_machine_index_decoder_equals_torch(machines, name, prefix, steps):
    cm = machines[name]
    got, want, stats = _index_and_torch(cm, prefix, steps)
    assert got == want and len(got) >= 1
    halts = set(cm.machine.halt_values)
    assert len(got) == steps or got[-1] in halts
    if any(p.indexed for layer in cm.compiled.layers for p in layer.attn.plans):
        assert stats["indexed"] > 0, stats  # (the counter has no head at all)
    if name in ("induction", "latest"):
        from firebrand import reference

        assert reference.run(cm.machine, prefix, steps)[len(prefix):] == got


@needs_numba
def test_machine_plans_use_the_index(machines):
    kinds = {name: Counter(p.kind for layer in cm.compiled.layers for p in layer.attn.plans)
             for name, cm in machines.items()}
    assert kinds["induction"]["match"] >= 1 and kinds["latest"]["match"] >= 1
    assert kinds["fibonacci"]["position"] >= 1 and kinds["counter"]["match"] == 0


def _machine_run(cm, prefix, steps):
    """(status, tokens) of `IndexDecoder.run_machine` from `prefix` for `steps` positions."""
    m = cm.machine
    n = len(prefix)
    dec = IndexDecoder(cm.compiled, n + steps)
    ids = np.zeros(n + steps + 1, np.int64)
    ids[:n] = np.asarray(prefix) - m.lower
    status, nxt = dec.run_machine(ids, n, 0, n + steps, m.lower, m.upper, m.halt_values)
    return status, (ids[:nxt + 1] + m.lower).tolist(), dec


@needs_numba
def test_memoized_units_answer_as_recomputed_and_are_used(machines):
    """The induction machine's MLPs hold units (neurons sharing their sums) that read one
    slot: their sums are remembered by that slot's value, shared by every decoder of the
    model. A second run answers from the memo and gives the same trace as the first and as
    firebrand's reference; a memo whose sums are changed changes the trace (so the memo is
    what answered)."""
    from firebrand import reference

    cm, prefix = machines["induction"], [3, 1, 4, 1, 5]
    _, first, dec = _machine_run(cm, prefix, 200)
    assert len(dec.arrays[7][0]) > 0 and dec.stats()["memo_entries"] > 0
    _, again, dec = _machine_run(cm, prefix, 200)
    assert dec.stats()["memo_hits"] > 0 and again == first
    ref = reference.run(cm.machine, prefix, 200)
    assert first[:len(ref)] == ref
    pool = fast_decode.flat_of(cm.compiled).memo[3]
    pool += 1.0
    try:
        status, bad, _ = _machine_run(cm, prefix, 200)
        assert bad != first or status == 2
    finally:
        pool -= 1.0


@needs_numba
def test_machine_position_values_are_read_from_the_tokens(machines):
    """A machine's position reads whose values read input columns alone store no values: the
    decoder reads the winner's from its token and position (firebrand's design), and the trace
    is the torch decoder's."""
    cm = machines["fibonacci"]
    _, got, dec = _machine_run(cm, [2, 7], 30)
    assert dec.state[1][10].any()
    want = list(itertools.islice(cm.next_values([2, 7], 32, "test", decoder="torch"), 30))
    assert got[2:] == want[:len(got) - 2]


@needs_numba
def test_a_lazy_position_read_that_must_attend_stores_its_values_first(machines):
    """A machine's position read whose values are read from the tokens (lazy) and that has
    to attend (here: mid-run the gap asked of a winner made infinite, so the index certifies
    none) first stores its values at every earlier position from the tokens, then attends
    over them and stores from then on: the trace is the indexed run's."""
    cm, prefix, steps = machines["fibonacci"], [1, 1], 30  # (halts at its first 0: token 14)
    _, want, _ = _machine_run(cm, prefix, steps)
    m, n = cm.machine, len(prefix)
    dec = IndexDecoder(cm.compiled, n + steps)
    ids = np.zeros(n + steps + 1, np.int64)
    ids[:n] = np.asarray(prefix) - m.lower
    status, nxt = dec.run_machine(ids, n, 0, n + 4, m.lower, m.upper, m.halt_values)
    lazy, qd = dec.state[1][10], dec.state[0][9]
    heads = np.flatnonzero(lazy)
    assert status == 0 and len(heads) and len(heads) == len(lazy)  # (no head reads itself)
    dec.need, qd[heads] = np.inf, 1  # (no target leads by an infinite gap: attend)
    status, nxt = dec.run_machine(ids, n, nxt, n + steps, m.lower, m.upper, m.halt_values)
    assert dec.stats()["attended"] > 0 and not lazy[heads].any()
    assert status == 1 and (ids[:nxt + 1] + m.lower).tolist() == want


@needs_numba
def test_latest_machine_scans_where_the_key_is_absent(machines):
    cm = machines["latest"]
    _, _, stats = _index_and_torch(cm, [2, 7], 200)
    assert stats["attended"] > 0 and stats["indexed"] > 0, stats


RV32_ELF = Path(__file__).resolve().parent.parent / "examples" / "rv32" / "hello.elf"


@needs_numba
@pytest.mark.slow
def test_rv32_hello_index_trace_equals_torch():
    pytest.importorskip("firebrand", reason="firebrand is not installed")
    from tw_frontends.firebrand.rv32 import RV32, load_elf

    rv = RV32(ram_bytes=1024)
    run = rv.run(RV32_ELF.read_bytes())  # (the index decoder: "auto" with numba)
    cm = rv.compiled
    assert cm.decoder_used == "index" and run.halted and run.console == "hi\n"
    assert cm.index_decoder.stats()["indexed"] > 0
    image, entry = load_elf(RV32_ELF.read_bytes(), 1024)
    prompt = rv.prompt(image, entry)
    n = len(run.trace) - len(prompt)
    torch_tokens = list(itertools.islice(
        cm.next_values(prompt, len(run.trace), "test", decoder="torch"), n))
    assert prompt + torch_tokens == run.trace


def _index_generate(ct, inputs, steps, feedback):
    """`ct.generate` with the index decoder (batch 1): prefill, then `steps` fed back."""
    checked = check_inputs(ct.contract, inputs)
    dec = IndexDecoder(ct, checked.n_positions + steps)
    rows = [dec.prefill([checked])[0]]
    for _ in range(steps):
        nxt = check_feedback(ct.contract, feedback({k: v[-1] for k, v in rows[-1].items()}),
                             dec.position)
        rows.append(dec.step([nxt])[0])
    return {k: np.concatenate([r[k] for r in rows]) for k in rows[0]}, dec


@needs_numba
@pytest.mark.parametrize("name,prompts", [
    ("adder", ["555+445=", "0+0=", "999+999="]),
    ("calculator", ["12*34=", "5-17="]),
    ("fibonacci", ["123,4567"]),
    ("caesar", ["3:hello world="]),
    ("balanced_parens", ["([]{})=", "(()"]),
    ("sort_digits", ["3141="]),
])
def test_token_programs_generate_alike(name, prompts):
    import tw_examples as examples

    p = examples.load(name)
    g = p.geometry
    ct = _compiled(p.module, d=g.d, d_head=g.d_head, d_hidden=g.d_hidden)
    assert supports(ct) is None
    back = (lambda last: {"tokens": int(np.argmax(last["logits"]))})
    for q in prompts:
        ids = p.encode(q)
        steps = len(p.reference(q) + p.end) - 1
        want = ct.generate({"tokens": ids}, steps, back, decoder="torch")
        assert ct.decoder_used == "torch"
        got, dec = _index_generate(ct, {"tokens": ids}, steps, back)
        np.testing.assert_allclose(got["logits"], want["logits"], rtol=0, atol=ATOL)
        auto = ct.generate({"tokens": ids}, steps, back)  # (the index decoder where it applies)
        assert ct.decoder_used == "index"
        np.testing.assert_allclose(auto["logits"], want["logits"], rtol=0, atol=ATOL)
        answer = p.decode(np.argmax(got["logits"][len(ids) - 1:], axis=1))
        assert answer == p.reference(q) + p.end
        s = dec.stats()
        assert s["indexed"] + s["attended"] > 0
        if any(pl.kind == "position" for layer in ct.layers for pl in layer.attn.plans):
            assert s["indexed"] > 0, s


# --------------------------------------------------------------------------------------
# 4. Without numba
# --------------------------------------------------------------------------------------


def test_without_numba_auto_decodes_with_torch_and_index_is_refused(machines, monkeypatch):
    """`_MISSING` set (numba absent): `supports` gives the reason, "auto" decodes with torch
    (machines and `ct.generate`), "index" is refused in one line naming it."""
    from firebrand import reference

    from tw_lowering.machines import MachineError
    from twdialect.inputs import EvaluationError

    cm = machines["fibonacci"]
    want = list(itertools.islice(cm.next_values([1, 1], 12, "test", decoder="torch"), 10))
    why = "numba is not installed (No module named 'numba')"
    monkeypatch.setattr(fast_decode, "_MISSING", why)
    assert supports(cm.compiled) == why and available() == why
    got = list(itertools.islice(cm.next_values([1, 1], 12, "test", decoder="auto"), 10))
    assert got == want == reference.run(cm.machine, [1, 1], 10)[2:]
    assert cm.decoder_used.startswith("torch") and why in cm.decoder_used
    assert cm.generate([1, 1], 30) == reference.run(cm.machine, [1, 1], 30)
    with pytest.raises(MachineError) as e:
        next(cm.next_values([1, 1], 12, "test", decoder="index"))
    assert why in str(e.value) and "test" in str(e.value) and "\n" not in str(e.value)
    # a compiled graph's generate: the same choice
    ct = cm.compiled
    back = (lambda last: {"tokens": int(round(float(last["next"][0])))})
    out = ct.generate({"tokens": np.array([1, 1])}, 5, back)
    assert ct.decoder_used == "torch"
    assert np.rint(out["next"][1:, 0]).astype(int).tolist() == want[:6]
    with pytest.raises(EvaluationError) as e:
        ct.generate({"tokens": np.array([1, 1])}, 5, back, decoder="index")
    assert why in str(e.value) and "\n" not in str(e.value)
