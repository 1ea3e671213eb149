"""Edge cases, costs and argument errors of the attention ops."""

import numpy as np
import pytest

from test_library_helpers import both, build, costs
from twdialect import ops as tw
from twdialect.library import LibraryError


def test_attend_to_offset_before_start_reads_position_zero():
    m = build(lambda: tw.attend_to_offset(tw.pos_encoding(2, 32), tw.input("v", 1, (0, 99)), 5))
    v = np.arange(20.0).reshape(-1, 1) * 3 + 1
    want = v[np.maximum(np.arange(20) - 5, 0)]
    np.testing.assert_allclose(both(m, {"v": v}), want, atol=1e-4)
    assert costs(m) == (1, 0, 1)


def test_get_prev_value_on_a_long_sequence():
    m = build(lambda: tw.get_prev_value(tw.pos_encoding(2, 1024), tw.input("v", 1, (-1, 1))))
    v = np.random.default_rng(3).uniform(-1, 1, (400, 1))
    want = v[np.maximum(np.arange(400) - 1, 0)]
    np.testing.assert_allclose(both(m, {"v": v}), want, atol=1e-5)


@pytest.mark.slow
def test_get_prev_value_at_max_len():
    m = build(lambda: tw.get_prev_value(tw.pos_encoding(2, 1024), tw.input("v", 1, (-1, 1))))
    v = np.random.default_rng(4).uniform(-1, 1, (1024, 1))
    want = v[np.maximum(np.arange(1024) - 1, 0)]
    np.testing.assert_allclose(both(m, {"v": v}), want, atol=1e-5)


def test_attend_mean_where_without_valid_positions_is_the_plain_mean():
    m = build(lambda: tw.attend_mean_where(tw.input("ok", 1, (-1, 1)), tw.input("v", 1, (-9, 9))))
    ok = np.array([[-1.0], [-1.0], [1.0], [-1.0], [1.0]])
    v = np.array([[1.0], [3.0], [6.0], [8.0], [-2.0]])
    want = np.array([[1.0], [2.0], [6.0], [6.0], [2.0]])
    np.testing.assert_allclose(both(m, {"ok": ok, "v": v}), want, atol=1e-5)


def test_argmax_ties_average():
    m = build(lambda: tw.attend_argmax(tw.input("s", 1, (0, 9)), tw.input("v", 1, (-9, 9))))
    s = np.array([[1.0], [4.0], [4.0], [2.0]])
    v = np.array([[0.0], [2.0], [6.0], [9.0]])
    np.testing.assert_allclose(both(m, {"s": s, "v": v}), [[0.0], [2.0], [4.0], [4.0]], atol=1e-5)


def test_argmin_where_negative_scores():
    m = build(lambda: tw.attend_argmin_where(tw.input("ok", 1, (-1, 1)), tw.input("s", 1, (-50, 50)),
                                             tw.input("v", 1, (-9, 9)), score_range=(-50, 50)))
    ok = np.array([[1.0], [-1.0], [1.0], [-1.0]])
    s = np.array([[10.0], [-50.0], [-49.0], [-50.0]])
    v = np.array([[1.0], [2.0], [3.0], [4.0]])
    np.testing.assert_allclose(both(m, {"ok": ok, "s": s, "v": v}), [[1], [1], [3], [3]], atol=1e-5)


def test_most_recent_matching_without_a_match_reads_the_latest_best():
    m = build(lambda: tw.attend_most_recent_matching(
        tw.pos_encoding(2, 16), tw.input("q", 2, (0, 1)), tw.input("k", 2, (0, 1)),
        tw.input("v", 1, (0, 9))))
    q = np.array([[0, 1], [0, 1], [1, 0], [1, 0]], dtype=float)
    k = np.array([[1, 0], [1, 0], [0, 1], [1, 0]], dtype=float)
    v = np.array([[1.0], [2.0], [3.0], [4.0]])
    # position 0: no key [0,1] yet -> latest best (itself); 1: same -> itself; 2: key [1,0] at 1.
    np.testing.assert_allclose(both(m, {"q": q, "k": k, "v": v}), [[1], [2], [2], [4]], atol=1e-5)


def test_wide_values_read_in_one_op():
    m = build(lambda: tw.get_prev_value(tw.pos_encoding(2, 16), tw.input("v", 40, (-1, 1))))
    v = np.random.default_rng(0).uniform(-1, 1, (6, 40))
    np.testing.assert_allclose(both(m, {"v": v}), v[[0, 0, 1, 2, 3, 4]], atol=1e-5)


@pytest.mark.parametrize("call,op", [
    (lambda x, p: tw.attend_to_offset(x, x, 1), "attend_to_offset"),
    (lambda x, p: tw.attend_to_offset(tw.pos_encoding(2, 4096), x, 1), "attend_to_offset"),
    (lambda x, p: tw.attend_to_offset(tw.pos_encoding(1, 16), x, 1), "attend_to_offset"),
    (lambda x, p: tw.attend_to_offset(p, x, -1), "attend_to_offset"),
    (lambda x, p: tw.attend_mean_where(tw.concat(x, x), x), "attend_mean_where"),
    (lambda x, p: tw.attend_argmax_where(x, x, x, None), "attend_argmax_where"),
    (lambda x, p: tw.attend_argmin_where(x, x, x, (1, 0)), "attend_argmin_where"),
    (lambda x, p: tw.attend_argmax(x, x, gap=0), "attend_argmax"),
    (lambda x, p: tw.attend_argmax_dot(tw.concat(x, x), x, x), "attend_argmax_dot"),
    (lambda x, p: tw.attend_most_recent_matching(p, x, tw.concat(x, x), x),
     "attend_most_recent_matching"),
])
def test_bad_arguments_name_the_op(call, op):
    with pytest.raises(LibraryError, match=rf"^tw\.{op}: "):
        with tw.Graph("main", verify=False):
            call(tw.input("x", 1, (-1, 1)), tw.pos_encoding(2, 16))


@pytest.mark.slow
@pytest.mark.parametrize("offset", [0, 700, 1023])
def test_attend_to_offset_at_max_len(offset):
    m = build(lambda: tw.attend_to_offset(tw.pos_encoding(2, 1024), tw.input("v", 1, (-1, 1)), offset))
    v = np.random.default_rng(4).uniform(-1, 1, (1024, 1))
    want = v[np.maximum(np.arange(1024) - offset, 0)]
    np.testing.assert_allclose(both(m, {"v": v}), want, atol=1e-6)


@pytest.mark.slow
def test_most_recent_matching_at_max_len():
    m = build(lambda: tw.attend_most_recent_matching(
        tw.pos_encoding(2, 1024), tw.input("q", 3, (0, 1)), tw.input("k", 3, (0, 1)),
        tw.input("v", 1, (-1, 1))))
    rng = np.random.default_rng(1)
    q, k = np.eye(3)[rng.integers(0, 3, 1024)], np.eye(3)[rng.integers(0, 3, 1024)]
    v = rng.uniform(-1, 1, (1024, 1))
    kq, kk = q.argmax(1), k.argmax(1)
    want = np.zeros((1024, 1))
    for t in range(1024):
        hits = np.flatnonzero(kk[: t + 1] == kq[t])
        want[t] = v[hits[-1] if hits.size else t]
    np.testing.assert_allclose(both(m, {"q": q, "k": k, "v": v}), want, atol=1e-6)
