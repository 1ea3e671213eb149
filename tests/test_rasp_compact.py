"""The RASP frontend's narrower forms, each exact and each only where it applies:

* a SequenceMap that depends on one sum a x + b y of its inputs is a linear map and a table of
  steps over the sum, not a table over every value pair;
* `Select(indices, indices, LEQ)`, alone or in an And chain, is a causal head's mask;
* a selector whose every query picks the keys of at most one number reads the key's number
  (two head dimensions) rather than a one-hot;
* SelectorWidth's BOS share keeps widths far enough apart for one MLP at length 50;
* the default width is the one that stores the fewest parameters at the fewest layers.

Each is checked against `rasp.evaluate` on every input (tests/test_rasp.py's rule), and its
shape (neurons, mask, head width, layers) against the form it claims.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tracr.rasp.rasp", reason="the RASP frontend's tests need tw-compiler[rasp]")
from tracr.compiler import lib  # noqa: E402
from tracr.rasp import rasp  # noqa: E402

from test_rasp import BOS, agrees, all_inputs, check, sampled  # noqa: E402
from test_rasp_fuzz import causal_evaluate  # noqa: E402
from tw_examples.rasp import LIB_PROGRAMS  # noqa: E402
from tw_lowering import compile_rasp_to_model  # noqa: E402
from tw_lowering.sweep import Sweep  # noqa: E402
from twdialect.dense import shape_of  # noqa: E402
from twdialect.dialect import AttnOp, MlpOp  # noqa: E402
from tw_frontends.rasp.keys import MAX_DIGITS, _rank_digits  # noqa: E402
from tw_frontends.rasp.limits import GAIN, RaspError  # noqa: E402
from tw_frontends.rasp.tables import _parabola  # noqa: E402
from tw_frontends.rasp.translator import translate  # noqa: E402

NUMS = {0, 1, 2}


def _mlp_widths(module) -> list[int]:
    return [shape_of(op.w1)[1] for op in module.walk() if isinstance(op, MlpOp)]


def _heads(module) -> list[AttnOp]:
    return [op for op in module.walk() if isinstance(op, AttnOp)]


def _mask(op: AttnOp) -> str:
    return "causal" if op.mask is None else op.mask.data


def _compiled_exactly(program, vocab, n: int, causal: bool = False):
    model = compile_rasp_to_model(program, vocab, n, causal=causal, compiler_bos=BOS)
    check(model, program, all_inputs(vocab, n))
    return model


# -- a SequenceMap through one sum ----------------------------------------------------------

@pytest.mark.parametrize("body", ["x - y", "x + y", "(x - y) % 3", "x - 2 * y > 0",
                                  "abs(x - y)"])
def test_sequence_map_of_a_sum_needs_no_pair_table(body):
    program = rasp.SequenceMap(eval(f"lambda x, y: {body}"), rasp.tokens, rasp.indices)
    model = _compiled_exactly(program, NUMS, 4)
    pairs = len(NUMS) * 4
    assert all(w < pairs for w in _mlp_widths(model.module)), _mlp_widths(model.module)


def test_numerical_affine_sequence_map_is_a_linear_map():
    program = rasp.numerical(rasp.SequenceMap(lambda x, y: 0.5 * x - 3 * y + 1,
                                              rasp.tokens, rasp.indices))
    model = _compiled_exactly(program, NUMS, 4)
    assert _mlp_widths(model.module) == []


def test_sequence_map_of_no_sum_keeps_its_pair_table():
    program = rasp.SequenceMap(lambda x, y: x * y, rasp.tokens, rasp.indices)
    model = _compiled_exactly(program, NUMS, 4)
    assert max(_mlp_widths(model.module)) >= len(NUMS) * 4


def test_an_input_that_may_be_none_keeps_the_pair_table():
    # the Aggregate selects nothing where no earlier token equals this one: None, which a
    # sum cannot carry; RASP's SequenceMap passes it on
    first = rasp.Aggregate(rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.GT),
                           rasp.tokens)
    program = rasp.SequenceMap(lambda x, y: x - y, first, rasp.indices)
    _compiled_exactly(program, NUMS, 4)


def test_reverse_at_length_50_has_no_pair_table():
    program, vocab = LIB_PROGRAMS["reverse"](50)
    model = compile_rasp_to_model(program, vocab, 50, compiler_bos=BOS)
    assert max(_mlp_widths(model.module)) < 51 * 50 // 4
    check(model, program, sampled(vocab, 50, 8, seed=3), oracle=False)


# -- indices <= indices as the causal mask --------------------------------------------------

def _prefix():
    return rasp.Select(rasp.indices, rasp.indices, rasp.Comparison.LEQ)


def test_prefix_selector_is_a_causal_head_without_index_keys():
    program = rasp.numerical(rasp.Aggregate(
        _prefix(), rasp.numerical(rasp.Map(lambda t: float(t == 1), rasp.tokens)), default=0))
    model = _compiled_exactly(program, NUMS, 5)
    (head,) = _heads(model.module)
    assert head.mask_kind == "causal"
    assert shape_of(head.wq)[1] <= 2  # no one-hot of the indices: TRUE needs one dimension


@pytest.mark.parametrize("order", ["prefix first", "prefix second"])
def test_prefix_in_an_and_chain_leaves_the_rest_to_the_logits(order):
    eq = rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.EQ)
    sel = rasp.SelectorAnd(_prefix(), eq) if order == "prefix first" \
        else rasp.SelectorAnd(eq, _prefix())
    program = rasp.SelectorWidth(sel)
    model = _compiled_exactly(program, NUMS, 5)
    assert {h.mask_kind for h in _heads(model.module)} == {"causal"}


def test_prefix_under_or_or_not_stays_full():
    sel = rasp.SelectorOr(_prefix(), rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.EQ))
    program = rasp.SelectorWidth(rasp.SelectorNot(sel))
    model = _compiled_exactly(program, NUMS, 5)
    assert {h.mask_kind for h in _heads(model.module)} == {"full"}


def test_lt_on_indices_is_not_a_prefix():
    program = rasp.SelectorWidth(rasp.Select(rasp.indices, rasp.indices, rasp.Comparison.LT))
    model = _compiled_exactly(program, NUMS, 5)
    assert {h.mask_kind for h in _heads(model.module)} == {"full"}


# -- a selector through the key's number ----------------------------------------------------

def test_one_key_value_per_query_reads_the_keys_number():
    program = rasp.Aggregate(rasp.Select(rasp.indices, rasp.indices,
                                         lambda k, q: k == q - 1), rasp.tokens)
    model = _compiled_exactly(program, NUMS, 5)
    (head,) = _heads(model.module)
    assert shape_of(head.wq)[1] == 3  # t and t^2 against k and k^2, and BOS's column


def test_uneven_key_values_and_queries_that_select_nothing():
    # key values 0, 1, 5, 6 (uneven gaps); a query 3 selects nothing (Aggregate's default)
    keys = rasp.Map(lambda i: [0, 1, 5, 6, 6][i], rasp.indices)
    queries = rasp.Map(lambda t: [5, 3, 0][t], rasp.tokens)
    program = rasp.Aggregate(rasp.Select(keys, queries, rasp.Comparison.EQ), rasp.tokens)
    model = _compiled_exactly(program, NUMS, 5)
    assert shape_of(_heads(model.module)[0].wq)[1] == 3


def test_selector_width_through_the_keys_number():
    keys = rasp.Map(lambda i: 10 * i, rasp.indices)
    queries = rasp.Map(lambda t: 10 * t, rasp.tokens)
    program = rasp.SelectorWidth(rasp.Select(keys, queries, rasp.Comparison.EQ))
    _compiled_exactly(program, NUMS, 5)


@pytest.mark.parametrize("letters", [6, 26])
def test_selector_width_through_the_keys_number_keeps_bos_exact(letters):
    # hist over many tokens at length 50: BOS's logit s t^2 + log n sat near 10^5, where
    # float32's rounding (0.004) moved BOS's share past the width table's plateaus (61 of
    # 300 inputs wrong for 26 letters); centred logits keep it exact in a head as narrow
    from tracr.compiler import lib

    vocab = set("abcdefghijklmnopqrstuvwxyz"[:letters])
    program = lib.make_hist()
    model = compile_rasp_to_model(program, vocab, 50, compiler_bos=BOS)
    assert model.stats.d_head <= 4 and model.stats.n_layers == 1
    check(model, program, sampled(vocab, 50, 60, seed=50))


def test_a_width_of_table_made_queries_keeps_the_one_hot():
    # a noisy (softmax-made) query through the key's number would move BOS's logit by its
    # error times the key's magnitude: a SelectorWidth's head reads such a query one-hot
    mean = rasp.numerical(rasp.Aggregate(rasp.Select(rasp.indices, rasp.indices,
                                                     rasp.Comparison.EQ),
                                         rasp.numerical(rasp.Map(lambda t: t, rasp.tokens))))
    program = rasp.SelectorWidth(rasp.Select(rasp.tokens, mean, rasp.Comparison.EQ))
    model = _compiled_exactly(program, NUMS, 5)
    assert all(shape_of(op.wq)[1] > 3 for op in _heads(model.module)
               if shape_of(op.wv)[1] == 1)


def test_keys_that_may_be_none_keep_the_one_hot():
    # None at index 2 (a Comparison raises on a None key; a plain predicate does not)
    keys = rasp.Map(lambda i: None if i == 2 else i, rasp.indices)
    program = rasp.Aggregate(rasp.Select(keys, rasp.indices, lambda k, q: k == q), rasp.tokens)
    _compiled_exactly(program, NUMS, 4)  # a None key must not read as the number 0


# -- SelectorWidth in one MLP, the width that stores least ----------------------------------

@pytest.mark.parametrize("n", [20, 50])
def test_selector_width_is_one_layer_at_tracrs_lengths(n):
    program, vocab = LIB_PROGRAMS["length"](n)
    model = compile_rasp_to_model(program, vocab, n, compiler_bos=BOS)
    assert model.stats.n_layers == 1
    check(model, program, [["a"] * k for k in range(1, n + 1)], oracle=False)


def test_default_width_stores_the_fewest_params_at_the_fewest_layers():
    program, vocab = LIB_PROGRAMS["sort_unique"](20)
    model = compile_rasp_to_model(program, vocab, 20, compiler_bos=BOS)
    dh = model.compiled.machine.d_head
    sweep = Sweep(translate(program, vocab, 20, False, BOS, "PAD").module, "default")
    hidden = model.compiled.machine.d_hidden
    for p in sweep.curve(dh, range(dh, 4 * model.compiled.machine.d + dh, dh), d_hidden=hidden):
        if p.n_layers == model.stats.n_layers:
            assert model.compiled.allocated_params() <= p.params, p


def test_tables_sharing_a_layer_get_the_mlp_width_they_use_not_4_d():
    # descending sort through `length - indices - 1` at length 40: three tables of 80
    # neurons share a layer, which 4 d held only at d 60; at d_hidden 240, d 16
    from tracr.compiler import lib

    n = 40
    keys = rasp.numerical(rasp.SequenceMap(lambda x, i: x + i / n, rasp.tokens, rasp.indices))
    rank = rasp.SelectorWidth(rasp.Select(keys, keys, rasp.Comparison.LT))
    opp = rasp.Map(lambda x: x - 1, rasp.SequenceMap(lambda length, i: length - i,
                                                     lib.make_length(), rasp.indices))
    program = rasp.Aggregate(rasp.Select(rank, opp, rasp.Comparison.EQ), rasp.tokens)
    model = compile_rasp_to_model(program, {1, 2, 3}, n, compiler_bos=BOS)
    assert model.stats.n_layers == 3 and model.compiled.machine.d <= 24
    check(model, program, sampled({1, 2, 3}, n, 8, seed=n), oracle=False)


# -- a head reads its narrow features from the one-hot's source -----------------------------

def test_reverse_keeps_no_one_hot_of_positions_in_the_residual():
    # opp_idx (a table over length - indices) and indices reach the final head as (t, t^2)
    # features from a table beside opp_idx's and a position table, not as one-hots of 40 and
    # 20 columns
    program, vocab = LIB_PROGRAMS["reverse"](20)
    model = compile_rasp_to_model(program, vocab, 20, compiler_bos=BOS)
    assert model.compiled.machine.d <= 24
    check(model, program, sampled(vocab, 20, 12, seed=5))


def test_a_head_reads_a_pair_table_by_its_values_not_the_pairs_one_hot():
    # rotation: `(i + 1) % length` is a table over 400 (index, length) pairs to 20 values; the
    # query reads the 20 values, not the 400-wide one-hot of the pairs beneath (d 447)
    length = lib.make_length()
    source = rasp.SequenceMap(lambda i, n: (i + 1) % n, rasp.indices, length)
    program = rasp.Aggregate(rasp.Select(rasp.indices, source, rasp.Comparison.EQ),
                             rasp.tokens)
    model = compile_rasp_to_model(program, {"a", "b", "c"}, 20, compiler_bos=BOS)
    assert model.compiled.machine.d <= 64
    check(model, program, sampled({"a", "b", "c"}, 20, 12, seed=7))


@pytest.mark.parametrize("make", [
    lambda: rasp.SelectorWidth(rasp.SelectorAnd(
        rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.EQ),
        rasp.Select(rasp.indices, rasp.indices, rasp.Comparison.LT))),
    lambda: rasp.numerical(rasp.Aggregate(rasp.SelectorAnd(
        rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.LT),
        rasp.SelectorNot(rasp.Select(rasp.indices, rasp.indices, rasp.Comparison.LEQ))),
        rasp.numerical(rasp.Map(lambda x: x, rasp.tokens)), default=0)),
    lambda: rasp.Aggregate(rasp.SelectorAnd(rasp.SelectorAnd(
        rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.EQ),
        rasp.Select(rasp.indices, rasp.indices, lambda k, q: k == q - 1)),
        rasp.Select(rasp.tokens, rasp.Full(1), rasp.Comparison.NEQ)), rasp.indices),
])
def test_an_and_of_tokens_and_indices_is_one_head_summing_their_logits(make):
    # the keys' one-hot of (token, index) pairs would take 250 columns and an MLP a layer
    # before the head at length 50; each conjunct's logits through its own one-hots take
    # 5 + 50 (count_earlier_equal: 2 layers, d 494 -> 1 layer, d 64)
    program = make()
    vocab = set(range(5))
    model = compile_rasp_to_model(program, vocab, 50, compiler_bos=BOS)
    assert model.stats.n_layers == 1 and model.compiled.machine.d <= 64, model.stats
    check(model, program, sampled(vocab, 50, 12, seed=50))
    causal = compile_rasp_to_model(program, vocab, 8, causal=True, compiler_bos=BOS)
    for x in sampled(vocab, 8, 24, seed=8):
        want = [causal_evaluate(program, x[:i + 1])[i] for i in range(len(x))]
        got = causal.apply([BOS, *x]).decoded[1:]
        assert all(agrees(g, w) for g, w in zip(got, want)), (x, got, want)


def test_a_noisy_key_is_read_as_a_number_where_equal_keys_hold_one_value():
    # sort_unique's target_pos (a width read from a softmax) keys `indices == target_pos`; its
    # float32 noise moves equal keys' logits apart, which is exact only because equal ranks
    # of tokens hold equal tokens (duplicates average one value)
    program, vocab = LIB_PROGRAMS["sort_unique"](6)
    model = _compiled_exactly(program, vocab, 6)
    assert shape_of(_heads(model.module)[-1].wk)[1] <= 3


def test_a_noisy_key_stays_one_hot_where_equal_keys_may_hold_different_values():
    # equal ranks of tokens sit at different indices: averaging those needs an even softmax
    width = rasp.SelectorWidth(rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.LT))
    program = rasp.numerical(rasp.Aggregate(rasp.Select(width, rasp.indices, rasp.Comparison.EQ),
                                            rasp.numerical(rasp.Map(lambda i: i, rasp.indices)),
                                            default=0))
    model = _compiled_exactly(program, NUMS, 5)
    assert shape_of(_heads(model.module)[-1].wk)[1] > 5


def test_a_noisy_key_stays_one_hot_under_a_causal_mask():
    # a causal model's rank counts only the keys before: equal ranks may hold different tokens
    # (a causal model computes something else than rasp.evaluate: compared with tw's oracle)
    program, vocab = LIB_PROGRAMS["sort_unique"](5)
    model = compile_rasp_to_model(program, vocab, 5, causal=True, compiler_bos=BOS)
    assert shape_of(_heads(model.module)[-1].wk)[1] > 5
    for x in all_inputs(vocab, 5):
        assert model.apply([BOS, *x]).decoded == model.evaluate([BOS, *x]).decoded, x


# -- a rank over a key ordered as (x, index) --------------------------------------------------

def _lex_key(f, first_indices: bool = False):
    args = (rasp.indices, rasp.tokens) if first_indices else (rasp.tokens, rasp.indices)
    return rasp.numerical(rasp.SequenceMap(f, *args))


def _heads_of_width(program, causal: bool = False) -> list[AttnOp]:
    model = compile_rasp_to_model(program, NUMS, 5, causal=causal, compiler_bos=BOS)
    if causal:  # every position against RASP's evaluator under a causal mask
        for x in all_inputs(NUMS, 5):
            got = model.apply([BOS, *x]).decoded[1:]
            want = [causal_evaluate(program, x[:i + 1])[i] for i in range(len(x))]
            assert got == want, (x, got, want)
    else:
        check(model, program, all_inputs(NUMS, 5))
    return _heads(model.module)


@pytest.mark.parametrize("predicate", ["LT", "LEQ", "GT", "GEQ"])
@pytest.mark.parametrize("body", ["x + i / 8", "x - i / 8"])
@pytest.mark.parametrize("causal", [False, True])
def test_a_rank_over_x_then_index_is_a_few_narrow_heads(predicate, body, causal):
    # ties broken by the earlier (x + i / 8) or the later (x - i / 8) position
    key = _lex_key(eval(f"lambda x, i: {body}"))
    width = rasp.SelectorWidth(rasp.Select(key, key, getattr(rasp.Comparison, predicate)))
    heads = _heads_of_width(width, causal)
    assert 1 <= len(heads) <= 3 and all(shape_of(op.wk)[1] <= len(NUMS) + 1 for op in heads)


@pytest.mark.parametrize("predicate", ["LT", "GEQ"])
def test_a_numerical_rank_is_exact_too(predicate):
    key = _lex_key(lambda x, i: x + i / 8)
    heads = _heads_of_width(rasp.numerical(rasp.SelectorWidth(
        rasp.Select(key, key, getattr(rasp.Comparison, predicate)))))
    assert all(shape_of(op.wk)[1] <= len(NUMS) + 1 for op in heads)


def test_a_rank_over_index_then_x_arguments_is_split_too():
    key = _lex_key(lambda i, x: 10 * x + i, first_indices=True)
    program = rasp.SelectorWidth(rasp.Select(key, key, rasp.Comparison.LT))
    model = _compiled_exactly(program, NUMS, 5)
    assert len(_heads(model.module)) == 2


@pytest.mark.parametrize("body", ["i + x / 8", "x * 0 + i % 2", "x + (i % 2) / 8"])
def test_a_key_not_ordered_as_x_then_index_is_one_head(body):
    # the index before x, equal keys, an order the index does not keep: no split, still exact
    key = _lex_key(eval(f"lambda x, i: {body}"))
    program = rasp.SelectorWidth(rasp.Select(key, key, rasp.Comparison.LT))
    model = _compiled_exactly(program, NUMS, 5)
    assert len(_heads(model.module)) == 1


def test_a_numerical_map_of_a_categorical_read_as_a_key_needs_no_table():
    # its one-hot is a linear map of the tokens' own: the width is one layer, not two
    neg = rasp.numerical(rasp.Map(lambda x: -2 * x, rasp.tokens))
    program = rasp.SelectorWidth(rasp.Select(neg, neg, rasp.Comparison.LT))
    model = _compiled_exactly(program, NUMS, 5)
    assert model.stats.n_layers == 1


def _sorted_positions(key_of_tokens, n: int):
    """The index each sorted position came from: a head's value is a map of the indices."""
    key = rasp.SequenceMap(lambda x, i: x + i / n, key_of_tokens, rasp.indices)
    rank = rasp.SelectorWidth(rasp.Select(key, key, rasp.Comparison.LT))
    return rasp.numerical(rasp.Aggregate(rasp.Select(rank, rasp.indices, rasp.Comparison.EQ),
                                         rasp.numerical(rasp.Map(lambda i: i, rasp.indices)),
                                         default=0))


def test_a_value_of_the_indices_is_a_position_table_where_nothing_else_reads_them():
    program = _sorted_positions(rasp.Map(lambda t: t % 2, rasp.tokens), 20)
    model = compile_rasp_to_model(program, {1, 2, 3}, 20, compiler_bos=BOS)
    check(model, program, sampled({1, 2, 3}, 20, 12, seed=4))
    # (narrower than the one-hot of the 20 positions alone)
    assert shape_of(_heads(model.module)[-1].wv)[0] <= 3 and model.compiled.machine.d < 20


def test_a_value_of_the_indices_reads_their_one_hot_where_a_query_needs_it_anyway():
    # a width keyed by a noisy rank (not one value per key): the query reads the one-hot
    width = rasp.SelectorWidth(rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.GEQ))
    program = rasp.numerical(rasp.Aggregate(
        rasp.Select(width, rasp.indices, rasp.Comparison.EQ),
        rasp.numerical(rasp.Map(lambda i: i, rasp.indices)), default=0))
    model = _compiled_exactly(program, NUMS, 5)
    assert shape_of(_heads(model.module)[-1].wv)[0] > 5


@pytest.mark.parametrize("predicate", ["lambda k, q: k == q - 1", "rasp.Comparison.EQ"])
def test_a_mean_over_at_most_one_key_takes_the_values_not_their_means(predicate):
    # each query selects at most one position (the keys are the indices): the shifted
    # numbers' value set is the tokens' (and the default), so a table over it is small
    tokens = rasp.numerical(rasp.Map(lambda x: x, rasp.tokens))
    shifted = rasp.numerical(rasp.Aggregate(
        rasp.Select(rasp.indices, rasp.indices, eval(predicate)), tokens, default=0))
    program = rasp.numerical(rasp.Map(lambda x: x * x % 5, shifted))
    model = compile_rasp_to_model(program, NUMS, 20, compiler_bos=BOS)
    check(model, program, sampled(NUMS, 20, 12, seed=6))
    assert max(_mlp_widths(model.module)) <= 8, _mlp_widths(model.module)


def test_sort_at_length_50_keeps_no_one_hot_of_its_keys():
    # make_sort's keys x + i / 50 take 150 values (tracr: d_model 261); split, each head reads
    # the three tokens, and the final head reads target_pos's number
    program, vocab = LIB_PROGRAMS["sort"](50)
    model = compile_rasp_to_model(program, vocab, 50, compiler_bos=BOS)
    assert model.compiled.machine.d <= 24 and model.stats.n_layers == 3
    check(model, program, sampled(vocab, 50, 12, seed=3))


# -- a key's number in digits, where one number asks its tables too much ----------------------

@pytest.mark.parametrize("keys, digits", [(7, 2), (200, 2), (200, 3), (1000, 3)])
def test_rank_digits_keep_every_other_key_gain_below(keys, digits):
    rng = np.random.default_rng(keys + digits)
    rows = np.arange(0, 50, 2)  # the odd queries select nothing
    chosen = rng.integers(0, keys, size=rows.size)
    a, b, lift = _rank_digits((50, keys), rows, chosen, digits)
    assert a.shape == (50, 2 * digits) and b.shape == (keys, 2 * digits)
    logits = a @ b.T
    best = logits[rows, chosen]
    others = logits[rows].copy()
    others[np.arange(rows.size), chosen] = -np.inf
    assert np.all(best - others.max(axis=1) >= GAIN - 1e-6)
    assert np.allclose(lift[rows], best - GAIN) and not lift[1::2].any()


def test_a_tabled_query_of_many_positions_is_read_in_digits():
    # the last token at length 120: the query (length - 1, a table over the length head's
    # share) as one number asks its table for 4e-6 of its largest row, more than one MLP of
    # steps keeps, so the head read its one-hot (121 columns in the residual: d 192); its two
    # digits of radix 11 come from a table beside it
    from tracr.compiler import lib

    last = rasp.Map(lambda x: x - 1, lib.make_length())
    program = rasp.Aggregate(rasp.Select(rasp.indices, last, rasp.Comparison.EQ), rasp.tokens)
    model = compile_rasp_to_model(program, NUMS, 120, compiler_bos=BOS)
    assert model.compiled.machine.d <= 24 and model.stats.n_layers == 2
    check(model, program, sampled(NUMS, 120, 12, seed=120), oracle=False)


def test_a_noisy_key_of_many_ranks_is_read_in_digits():
    # sort at length 150: target_pos as one number was read as 151 one-hot keys (d 453, 1.9
    # million parameters); its digits, from a table beside its own, keep d within 24
    program, vocab = LIB_PROGRAMS["sort"](150)
    model = compile_rasp_to_model(program, vocab, 150, compiler_bos=BOS)
    assert model.compiled.machine.d <= 24 and model.stats.n_layers == 3
    check(model, program, sampled(vocab, 150, 6, seed=150), oracle=False)


def test_a_noisy_key_whose_digits_need_a_deeper_table_is_read_through_its_one_hot():
    # sort_unique over 200 tokens: target_pos's digits would need a second MLP, so the head
    # reads them through target_pos's one-hot (its error times the digits is within the
    # head's tolerance) rather than 201 one-hot key dimensions
    from tracr.compiler import lib

    vocab = set(range(200))
    program = lib.make_sort_unique(rasp.tokens, rasp.tokens)
    model = compile_rasp_to_model(program, vocab, 200, compiler_bos=BOS)
    assert shape_of(_heads(model.module)[-1].wk)[1] <= 2 * MAX_DIGITS + 1
    rng = np.random.default_rng(200)
    check(model, program, [[int(t) for t in rng.permutation(200)[:k]]
                           for k in (1, 2, 50, 120, 199, 200)], oracle=False)


def test_a_one_hot_read_by_a_head_and_by_the_output_stays_exact():
    width = rasp.SelectorWidth(rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.LT))
    picked = rasp.Aggregate(rasp.Select(rasp.indices, width, rasp.Comparison.EQ), rasp.tokens)
    program = rasp.SequenceMap(lambda a, b: (a, b), width, picked)
    _compiled_exactly(program, NUMS, 5)


def test_means_that_differ_by_float64_round_off_are_one_value():
    # thirds averaged: the value set holds 0.0 and +-1.4e-17 (float64 round-off); a map that
    # tells them apart cannot be compiled (the model sees one number), and says so
    thirds = rasp.numerical(rasp.Map(lambda t: [-1.0, 1 / 3, 2 / 3][t], rasp.tokens))
    mean = rasp.numerical(rasp.Aggregate(rasp.Select(rasp.tokens, rasp.tokens,
                                                     rasp.Comparison.TRUE), thirds, default=0))
    with pytest.raises(RaspError, match="closer than float32 can tell apart|float64 sums"):
        translate(rasp.Map(lambda x: x == 0, mean), NUMS, 4, False, BOS, "PAD")
    # a map that does not tell them apart compiles, exactly (x > 0.5 would be refused: 0.5 is
    # a mean, which RASP's float64 sums may give an ulp off, test_rasp_precision.py)
    _compiled_exactly(rasp.Map(lambda x: x > 0.55, mean), NUMS, 4)


# -- a selector's table: whole vectors where it can, the predicate pair by pair otherwise ----

def _pairwise(selector, k_tuples, q_tuples, k_slot, q_slot):
    """The selector at every pair, one Python call each (an exception selects nothing)."""
    from tw_frontends.rasp.values import _selected

    out = np.zeros((len(q_tuples), len(k_tuples)))
    for a, qt in enumerate(q_tuples):
        for b, kt in enumerate(k_tuples):
            try:
                out[a, b] = float(bool(_selected(selector, kt, qt, k_slot, q_slot)))
            except Exception:  # noqa: BLE001
                out[a, b] = 0.0
    return out


def test_vectorized_selection_equals_the_predicate_pair_by_pair():
    import random

    from tw_frontends.rasp.values import _selection

    rng = random.Random(0)
    k_sop, q_sop = rasp.tokens, rasp.indices
    comparisons = list(rasp.Comparison)

    def picky(k, q):  # raises on some pairs: short-circuits decide whether that matters
        if (k + q) % 3 == 0:
            raise ValueError("no meaning here")
        return k < q

    def leaf():
        if rng.random() < 0.3:
            return rasp.Select(k_sop, q_sop, picky)
        return rasp.Select(k_sop, q_sop, rng.choice(comparisons))

    def tree(depth):
        if depth == 0 or rng.random() < 0.3:
            return leaf()
        kind = rng.choice(["and", "or", "not"])
        if kind == "not":
            return rasp.SelectorNot(tree(depth - 1))
        make = rasp.SelectorAnd if kind == "and" else rasp.SelectorOr
        return make(tree(depth - 1), tree(depth - 1))

    k_tuples = [(v,) for v in (0, 1, 2, 5, -3, 2.5)]
    q_tuples = [(v,) for v in (0, 1, 2, 3, 4, -1, 0.5)]
    k_slot, q_slot = {k_sop.unique_id: 0}, {q_sop.unique_id: 0}
    for _ in range(300):
        sel = tree(3)
        want = _pairwise(sel, k_tuples, q_tuples, k_slot, q_slot)
        got = _selection(sel, k_tuples, q_tuples, k_slot, q_slot)
        assert np.array_equal(got, want), sel


# -- a categorical output as one coded column ------------------------------------------------

def _output_width(model) -> int:
    return len(model.compiled.outputs[0].rows)


@pytest.mark.parametrize("vocab, make", [
    (NUMS, lambda: rasp.SelectorWidth(rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.LEQ))),
    ({"a", "b", "c", "d"}, lambda: rasp.Map(lambda x: x + x, rasp.tokens)),
    (NUMS, lambda: rasp.Aggregate(rasp.Select(rasp.indices, rasp.indices,
                                              lambda k, q: k == q - 1), rasp.tokens)),
    ({1, 2, 4}, lambda: rasp.Aggregate(rasp.Select(rasp.tokens, rasp.tokens,
                                                   rasp.Comparison.LT), rasp.tokens)),
])
def test_categorical_output_is_one_coded_column(vocab, make):
    # the last case selects several different numbers (a categorical mix): the code's mean
    # decodes as the numbers' mean, as rasp.evaluate gives it; None where nothing is selected
    program = make()
    model = _compiled_exactly(program, vocab, 5)
    assert model.rasp_graph.codes is not None and _output_width(model) == 1


def test_output_code_refused_where_float32_cannot_tell_codes_apart():
    from tw_frontends.rasp.graph import output_codes

    assert output_codes(["x"], 5) is None  # one value: a one-hot is one column already
    codes, shift, tol = output_codes([-2, 0, 7], 5)
    assert list(codes) == [1.0, 3.0, 10.0] and shift == 3.0 and 0 < tol < 1 / 6
    close = output_codes([0.0, 1e-7, 1.0], 5)  # numbers too close: ranks instead
    assert list(close[0]) == [1.0, 2.0, 3.0] and close[1] is None


def test_output_that_cannot_mix_is_decoded_as_the_nearest_code():
    from tw_frontends.rasp.graph import output_codes

    codes, shift, tol = output_codes([0, 1, 2], 200, mixes=False)
    assert list(codes) == [1.0, 2.0, 3.0] and shift is None and tol == 1 / (4 * 201)
    # 201 numbers: their own codes would need 1 / 804 (float32 keeps 2e-3 of 201); ranks
    # need a quarter gap where no mix is possible, not a quarter gap over n + 1
    codes, shift, tol = output_codes(list(range(201)), 200, mixes=False)
    assert codes[-1] == 201.0 and shift is None and tol == 1 / 4
    assert output_codes(list(range(201)), 200, mixes=True) is None


@pytest.mark.parametrize("name", ["hist", "count"])
def test_a_width_output_at_length_200_is_one_coded_column(name):
    # codes read within a quarter gap over n + 1 (room for a mix) asked its table for 6e-6 of
    # its largest code at length 200: no MLP kept that, so the output was the 201-column
    # one-hot (d 204); a width is never a mix, so a quarter gap does
    program, vocab = LIB_PROGRAMS[name](200)
    model = compile_rasp_to_model(program, vocab, 200, compiler_bos=BOS)
    assert model.compiled.machine.d <= 8 and _output_width(model) == 1
    assert model.rasp_graph.code_shift is None
    values = sorted(vocab)
    check(model, program, [[values[0]] * k for k in (1, 2, 99, 199, 200)] +
          sampled(vocab, 200, 6, seed=200), oracle=False)


@pytest.mark.parametrize("f", [lambda x: x + 1, lambda x: 2 * x])
def test_a_map_of_a_mix_keeps_the_mix_decoding(f):
    # Aggregate's mix of 0, 1 and 2 through a linear Map is the map of their mean, decoded
    # off its code by the shift
    mix = rasp.Aggregate(rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.TRUE),
                         rasp.tokens)
    model = _compiled_exactly(rasp.Map(f, mix), NUMS, 4)
    assert model.rasp_graph.code_shift is not None


def test_a_selector_every_key_passes_reads_no_key_columns():
    """A selector true for every value pair reads its keys as the constant column, not as the
    token one-hot's sum; under a causal mask (frac_prevs' indices <= indices) every query but
    BOS's then reads alike and BOS's sees only BOS: one head dimension, no embedding column
    for it."""
    for program in (lib.make_frac_prevs(rasp.tokens == 1),
                    rasp.numerical(rasp.Aggregate(rasp.Select(rasp.tokens, rasp.indices,
                                                              rasp.Comparison.TRUE),
                                                  rasp.numerical(rasp.Map(float, rasp.tokens)),
                                                  default=0))):
        for causal in (False, True):
            model = compile_rasp_to_model(program, NUMS, 5, causal=causal, compiler_bos=BOS)
            for x in all_inputs(NUMS, 5):
                got = model.apply([BOS, *x]).decoded[1:]
                want = [causal_evaluate(program, x[:i + 1])[i] for i in range(len(x))] \
                    if causal else rasp.evaluate(program, x)
                assert all(abs(g - w) < 1e-4 for g, w in zip(got, want)), (x, got, want)
            heads = _heads(model.module)
            assert len(heads) == 1 and heads[0].key.type.width.data <= 3
            if causal or program.label.startswith("frac_prevs"):
                assert shape_of(heads[0].wq)[1] == 1


def test_a_line_in_the_index_is_read_from_the_position_column():
    """A head's key or query read of the indices that is a line in the index (the key's
    number k of a nearest-key head) comes from the machine's position and constant columns:
    only what is not a line (k^2) takes a position table column."""
    from twdialect.dialect import ConcatOp, PosEncodingOp, PosTableOp
    for program in (lib.shift_by(2, rasp.tokens), lib.make_reverse(rasp.tokens)):
        model = _compiled_exactly(program, NUMS, 5)
        def parts(v):  # the values a (nested) concat joins
            op = v.owner
            return [p for o in op.operands for p in parts(o)] if isinstance(op, ConcatOp) \
                else [v]
        keys = [p for h in _heads(model.module) for p in parts(h.key)]
        assert any(isinstance(k.owner, PosEncodingOp) for k in keys)
        tables = [op for op in model.module.walk() if isinstance(op, PosTableOp)]
        assert sum(shape_of(t.table)[1] for t in tables) <= 6 + 5  # (indices one-hot: 6)


@pytest.mark.parametrize("offset", [1, 2, 3])
def test_a_shift_reads_one_shared_column_of_index_squares(offset):
    """shift_by's `q == k + offset` through the key's number: the key's k^2 and the queries'
    lift (s t^2 - GAIN, t = q - offset, also for the queries that select nothing: BOS still
    outweighs every key by GAIN / 2 there) are parabolas in the index, read from one shared
    position table of i^2 and the machine's position and constant columns."""
    from twdialect.dialect import PosTableOp
    for n in (5, 8):  # (every query past the first `offset` selects a key: t is a line)
        program = lib.shift_by(offset, rasp.tokens)
        model = _compiled_exactly(program, NUMS, n)
        tables = [op for op in model.module.walk() if isinstance(op, PosTableOp)]
        assert [shape_of(t.table)[1] for t in tables] == [1]  # i^2 (the indices' unread)
        assert len(list(tables[0].results[0].uses)) == 2  # the key's and the query's reads


def test_parabola_is_exact_or_refused():
    """`_parabola` recovers whole coefficients exactly (float32 then computes the column
    exactly below 2^24), and refuses what is no parabola, or what float32 would compute
    beyond the tolerance."""
    rng = np.random.default_rng(0)
    i = np.arange(12, dtype=float)
    for _ in range(50):
        a, b, c = (float(x) for x in rng.integers(-300, 300, 3))
        assert _parabola(a * i * i + b * i + c, None) == (a, b, c)
        noisy = a * i * i + b * i + c
        noisy[5] += 0.5
        assert _parabola(noisy, None) is None
    assert _parabola(np.array([0.0, 1.0]), None) is None  # (too few points to tell)
    big = 1e6 * i * i + 0.1
    assert _parabola(big, 1e-9) is None and _parabola(big, 100.0) is not None


def test_selector_width_output_reads_a_line_through_its_points():
    # one neuron where the slope changes, not two a step
    program = rasp.SelectorWidth(rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.LEQ))
    model = _compiled_exactly(program, NUMS, 5)
    assert max(_mlp_widths(model.compiled.schedule.tg.graph)) <= 5


def test_selecting_every_key_counts_positions():
    """A selector that picks every key it sees counts without a table: the length is one
    head reading the last position (no MLP), the width of a prefix (a causal mask, or
    indices <= indices) the position itself (no layer). `length` used as a number (reverse's
    length - indices - 1) is read linearly off that head: reverse takes two layers."""
    every = rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.TRUE)
    prefix = rasp.Select(rasp.indices, rasp.indices, rasp.Comparison.LEQ)
    width, before = rasp.SelectorWidth(every), rasp.SelectorWidth(prefix)
    for program, causal, layers, mlps in [
            (width, False, 1, False), (rasp.numerical(width), False, 1, False),
            (width, True, 0, False), (before, False, 0, False),
            (rasp.numerical(before), False, 0, False),
            (rasp.Map(lambda x: x % 3, width), False, 1, True),
            (lib.make_length(), False, 1, False), (lib.make_reverse(rasp.tokens), False, 2, True)]:
        for n in (2, 4, 7):  # (at 1 the length is a constant)
            model = compile_rasp_to_model(program, NUMS, n, causal=causal, compiler_bos=BOS)
            for x in all_inputs(NUMS, n):
                got = model.apply([BOS, *x]).decoded[1:]
                want = [causal_evaluate(program, x[:i + 1])[i] for i in range(len(x))] \
                    if causal else rasp.evaluate(program, x)
                assert got == want, (x, got, want)
            assert model.stats.n_layers == layers
            assert bool(_mlp_widths(model.compiled.schedule.tg.graph)) == mlps


# -- token features in the embedding ---------------------------------------------------------

def test_narrow_token_reads_come_from_embedding_columns():
    # a Map of the tokens read as one number by a head's value: one embedding column, and
    # the seven-column one-hot is read by nothing
    vocab = {"a", "b", "c", "d", "e", "f", "g"}
    is_vowel = rasp.numerical(rasp.Map(lambda t: 1 if t in "ae" else 0, rasp.tokens))
    program = rasp.numerical(rasp.Aggregate(
        rasp.Select(rasp.indices, rasp.indices, rasp.Comparison.LEQ), is_vowel, default=0))
    model = compile_rasp_to_model(program, vocab, 4, compiler_bos=BOS)
    check(model, program, sampled(vocab, 4, 200))
    (emb,) = [s for s in model.compiled.sources if s.kind == "embedding"]
    assert len(emb.cols) < len(vocab), len(emb.cols)


def _builds(monkeypatch) -> list:
    """The translations `translate` builds (each one's token_features flag), recorded."""
    import tw_frontends.rasp.translator as frontend

    built, build = [], frontend._Translator.build

    def counted(self, program):
        built.append(self.token_features)
        return build(self, program)

    monkeypatch.setattr(frontend._Translator, "build", counted)
    return built


def test_token_features_are_grown_in_one_translation(monkeypatch):
    # reverse's value reads the token one-hot through 2 of 3 columns (a coded output):
    # one translation grows them, and the one-hot is read by nothing
    built = _builds(monkeypatch)
    model = _compiled_exactly(lib.make_reverse(rasp.tokens), {"a", "b", "c"}, 5)
    assert built == [True]
    (emb,) = [s for s in model.compiled.sources if s.kind == "embedding"]
    assert len(emb.cols) < 3 + 2, len(emb.cols)


def test_a_one_hot_read_anyway_is_translated_again_without_features(monkeypatch):
    # hist's selector reads the whole one-hot: its narrow reads read it too, in a second
    # translation, and the embedding holds no column beside it
    built = _builds(monkeypatch)
    model = _compiled_exactly(lib.make_hist(), {"a", "b", "c"}, 4)
    assert built == [True, False]
    (emb,) = [s for s in model.compiled.sources if s.kind == "embedding"]
    assert emb.table.shape[1] <= 3 + 2


def test_a_head_keyed_by_the_one_hot_stops_the_translation_with_features(monkeypatch):
    # hist's selector keys and queries read the one-hot itself: the translation growing
    # features stops at that head, before the program's output, and the next reads the one-hot
    import tw_frontends.rasp.translator as frontend

    stopped, build = [], frontend._Translator.build

    def watched(self, program):
        try:
            return build(self, program)
        except frontend._FeaturesNoNarrower:
            stopped.append([type(op).__name__ for op in self.graph.ops])
            raise

    monkeypatch.setattr(frontend._Translator, "build", watched)
    _compiled_exactly(lib.make_hist(), {"a", "b", "c"}, 4)
    assert len(stopped) == 1 and "AttnOp" in stopped[0] and "OutputOp" not in stopped[0]


def test_features_as_many_as_the_vocabulary_stop_the_translation(monkeypatch):
    # a value read through two columns of a 2-token vocabulary: no narrower than the one-hot
    built = _builds(monkeypatch)
    program = rasp.numerical(rasp.Aggregate(
        rasp.Select(rasp.indices, rasp.indices, rasp.Comparison.LEQ),
        rasp.numerical(rasp.Map(lambda t: 1 if t == "a" else 0, rasp.tokens)), default=0))
    program2 = rasp.numerical(rasp.Aggregate(
        rasp.Select(rasp.indices, rasp.indices, rasp.Comparison.GEQ),
        rasp.numerical(rasp.Map(lambda t: 1 if t == "b" else 0, rasp.tokens)), default=0))
    both = rasp.numerical(rasp.LinearSequenceMap(program, program2, 1, 1))
    _compiled_exactly(both, {"a", "b"}, 4)
    assert built == [True, False]


def test_reads_of_nothing_but_zero_columns_compile():
    # a FALSE selector reads all-zero token columns (fuzz seed 493)
    s8 = rasp.numerical(rasp.Map(lambda x: x, rasp.indices))
    program = rasp.SelectorWidth(rasp.Select(s8, rasp.tokens, rasp.Comparison.FALSE))
    _compiled_exactly(program, {1, 2, 3}, 1)
    _compiled_exactly(program, {1, 2, 3}, 3)


def test_sum_tables_of_whole_numbers_equal_the_pair_by_pair_rationals():
    import itertools
    import random

    from tw_frontends.rasp.tables import _Sums, _sum_weights, _table_of_sum

    rng = random.Random(0)
    maps = [lambda x, y: x - y, lambda x, y: (x + 2 * y) % 3, lambda x, y: x * y,
            lambda x, y: (x - y) > 0, lambda x, y: 0.5 * x - 3 * y + 1]
    for _ in range(300):
        xs = rng.sample(range(-6, 7), rng.randint(1, 5))
        ys = rng.sample(range(-6, 7), rng.randint(1, 5))
        pairs = list(itertools.product(xs, ys))
        f = rng.choice(maps)
        outs = [f(x, y) for x, y in pairs]
        sums = _Sums(pairs, outs)
        for a, b in _sum_weights(pairs, outs):
            want, got = _table_of_sum(pairs, outs, a, b), sums.table(a, b)
            assert (want is None) == (got is None), (pairs, a, b)
            if want is not None:
                assert list(want.items()) == list(got.items())
