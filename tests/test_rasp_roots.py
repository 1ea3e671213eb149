"""SOps of one root: a SequenceMap whose two inputs are Maps and SequenceMaps of one SOp (the
indices, the tokens, or any other) is a function of that SOp, and so are the value tuples of
a selector's keys (or queries) that all derive from one categorical SOp. The frontend tables
them over the root's values (n of them, a linear map of its one-hot) rather than over every
pair of the inputs' values (n^2, a neuron each). Each is checked against `rasp.evaluate`
(tests/test_rasp.py's rule) and its shape (no MLP, or far fewer neurons) against the form it
claims; the forms it must not take (different roots, an input read twice) keep theirs.
"""

from __future__ import annotations

import pytest

pytest.importorskip("tracr.rasp.rasp", reason="the RASP frontend's tests need tw-compiler[rasp]")
from tracr.rasp import rasp  # noqa: E402

from test_rasp import BOS, all_inputs, check, sampled  # noqa: E402
from test_rasp_fuzz import causal_evaluate  # noqa: E402
from tw_lowering import compile_rasp_to_model  # noqa: E402
from twdialect.dense import shape_of  # noqa: E402
from twdialect.dialect import MlpOp  # noqa: E402
from tw_frontends.rasp.translator import translate  # noqa: E402
from tw_frontends.rasp.values import _root  # noqa: E402

NUMS = {0, 1, 2, 3}
i, t = rasp.indices, rasp.tokens


def _neurons(model) -> int:
    return int(sum(model.stats.neurons_per_layer))


def _mlps(module) -> list[int]:
    return [shape_of(op.w1)[1] for op in module.walk() if isinstance(op, MlpOp)]


def test_sequence_map_of_indices_and_a_map_of_them_is_a_table_of_the_index():
    program = rasp.SequenceMap(lambda a, b: (a * b) % 7, i, rasp.Map(lambda x: x + 1, i))
    model = compile_rasp_to_model(program, NUMS, 80, compiler_bos=BOS)
    assert _neurons(model) == 0  # (a neuron per index pair before: 6,480)
    # the output's code is a position table: no layer, no one-hot of 80 positions
    assert model.stats.n_layers == 0 and model.stats.d < 16
    check(model, program, sampled(NUMS, 80, 12))


def test_sequence_map_of_tokens_and_a_map_of_them_is_a_table_of_the_token():
    program = rasp.SequenceMap(lambda a, b: a + 10 * b, t, rasp.Map(lambda x: x % 2, t))
    model = compile_rasp_to_model(program, NUMS, 5, compiler_bos=BOS)
    assert _neurons(model) == 0
    check(model, program, all_inputs(NUMS, 4))


def test_a_root_through_nested_sequence_maps_and_constants():
    inner = rasp.SequenceMap(lambda a, b: a - b, i, rasp.Full(2))
    both = rasp.SequenceMap(lambda a, b: a * b, inner, rasp.Map(lambda x: x // 2, i))
    program = rasp.numerical(rasp.Map(lambda x: x / 2, both))
    assert _root(program) is rasp.indices
    model = compile_rasp_to_model(program, NUMS, 30, compiler_bos=BOS)
    assert _neurons(model) == 0
    check(model, program, sampled(NUMS, 30, 12))


def test_a_root_that_is_an_aggregate_tables_over_its_values():
    shifted = rasp.Aggregate(rasp.Select(i, rasp.Map(lambda x: x - 1, i), rasp.Comparison.EQ),
                             t, default=0)
    program = rasp.SequenceMap(lambda a, b: 4 * a + b, shifted,
                               rasp.Map(lambda x: x * x % 5, shifted))
    assert _root(program) is shifted
    rg = translate(program, NUMS, 8, compiler_bos=BOS)
    assert _mlps(rg.module) == []  # (a pair table's MLP before)
    model = compile_rasp_to_model(program, NUMS, 8, compiler_bos=BOS)
    check(model, program, sampled(NUMS, 8, 60))


def test_none_and_raising_functions_pass_through_the_root_as_rasp_gives_them():
    gap = rasp.Map(lambda x: None if x == 2 else x, i)
    program = rasp.SequenceMap(lambda a, b: 10 // (b - 3) + a, gap, i)  # raises at index 3
    model = compile_rasp_to_model(program, NUMS, 6, compiler_bos=BOS)
    assert _neurons(model) == 0
    short = [x for x in all_inputs(NUMS, 3)]  # (longer inputs raise in RASP too)
    check(model, program, short)
    assert model.apply([BOS, 1, 1, 1]).decoded == [BOS, -4, -4, None]


def test_roots_under_a_causal_mask():
    program = rasp.numerical(rasp.Aggregate(
        rasp.Select(i, rasp.SequenceMap(lambda a, b: a - b, i, rasp.Map(lambda x: x % 2, i)),
                    rasp.Comparison.EQ),
        rasp.numerical(rasp.Map(lambda x: x / 4, t)), default=0))
    model = compile_rasp_to_model(program, NUMS, 6, causal=True, compiler_bos=BOS)
    for x in sampled(NUMS, 6, 40):
        got = model.apply([BOS, *x]).decoded[1:]
        want = [causal_evaluate(program, x[:k + 1])[k] for k in range(len(x))]
        assert all(abs(g - w) < 1e-4 for g, w in zip(got, want)), (x, got, want)


def test_selector_keys_of_one_root_are_a_table_of_the_root():
    block = rasp.Map(lambda x: x // 3, i)
    select = rasp.Select(i, i, rasp.Comparison.LT) & rasp.Select(block, block,
                                                                 rasp.Comparison.EQ)
    program = rasp.numerical(rasp.Aggregate(
        select, rasp.numerical(rasp.Map(lambda x: 1 if x == 1 else 0, t)), default=0))
    rg = translate(program, NUMS, 40, compiler_bos=BOS)
    assert _mlps(rg.module) == []  # (the key and query pairs' joint: 1,600 neurons each)
    model = compile_rasp_to_model(program, NUMS, 40, compiler_bos=BOS)
    check(model, program, sampled(NUMS, 40, 12))


def test_selector_keys_of_different_roots_keep_their_joint():
    select = rasp.Select(t, t, rasp.Comparison.EQ) & rasp.Select(i, i, rasp.Comparison.LEQ)
    program = rasp.SelectorWidth(rasp.Select(t, t, rasp.Comparison.EQ) | select)
    rg = translate(program, NUMS, 5, compiler_bos=BOS)
    assert 4 * 5 in _mlps(rg.module)  # the (token, index) tuples of the keys, a neuron each
    model = compile_rasp_to_model(program, NUMS, 5, compiler_bos=BOS)
    check(model, program, sampled(NUMS, 5, 60))


def test_sequence_maps_of_different_roots_keep_their_pair_table():
    length = rasp.SelectorWidth(rasp.Select(t, t, rasp.Comparison.TRUE))
    program = rasp.SequenceMap(lambda a, b: a * b % 5, rasp.Map(lambda x: x + 1, t), length)
    assert _root(program) is program
    model = compile_rasp_to_model(program, NUMS, 5, compiler_bos=BOS)
    assert _neurons(model) > 0
    check(model, program, all_inputs(NUMS, 4))


class _MemoEvaluator(rasp.DefaultRASPEvaluator):
    """RASP's evaluator, each expression evaluated once per input (RASP's own walks every
    path of a DAG)."""

    def __init__(self):
        super().__init__()
        self.memo: dict = {}

    def evaluate(self, expr, xs):
        key = (expr.unique_id, tuple(xs))
        if key not in self.memo:
            self.memo[key] = super().evaluate(expr, xs)
        return self.memo[key]


def test_a_program_whose_sops_share_subexpressions_is_rooted_once_each():
    """A DAG of SequenceMaps, each reading the two before it: walked once per node (2^40
    paths without the memo)."""
    a, b = i, rasp.Map(lambda x: x + 1, i)
    for _ in range(40):
        a, b = b, rasp.SequenceMap(lambda x, y: (x + y) % 11, a, b)
    assert _root(b) is rasp.indices
    model = compile_rasp_to_model(b, NUMS, 10, compiler_bos=BOS)
    assert _neurons(model) == 0
    evaluator = _MemoEvaluator()
    for x in sampled(NUMS, 10, 8):
        assert model.apply([BOS, *x]).decoded[1:] == evaluator.evaluate(b, x)


def test_a_sum_of_numbers_read_off_one_one_hot_is_read_off_it_too():
    """numerical(a f(x) + b g(x)) of one categorical x: a value per column of x's one-hot (not
    every pair of f's and g's values), and a Map of it is a linear map of that one-hot."""
    f = rasp.numerical(rasp.Map(lambda x: x * x, t))
    g = rasp.numerical(rasp.Map(lambda x: 3 - x, t))
    total = rasp.numerical(rasp.LinearSequenceMap(f, g, 1, 2))
    program = rasp.Map(lambda v: v % 4, total)
    rg = translate(program, NUMS, 6, compiler_bos=BOS)
    assert _mlps(rg.module) == []  # (a table of steps over the sum's values before)
    model = compile_rasp_to_model(program, NUMS, 6, compiler_bos=BOS)
    check(model, program, sampled(NUMS, 6, 60))


def test_a_key_of_one_root_is_not_split_into_value_and_index():
    """Select(k, k, LT) with k = f(x, index) and x a function of the index too: k has n
    values, so the width is one head, not the (x, index) rank split's two or three."""
    x = rasp.Map(lambda i: i % 3, i)
    k = rasp.SequenceMap(lambda a, b: a + b / 100, x, i)
    program = rasp.SelectorWidth(rasp.Select(k, k, rasp.Comparison.LT))
    rg = translate(program, NUMS, 8, compiler_bos=BOS)
    assert sum(op.name == "tw.attn" for op in rg.module.walk()) == 1
    model = compile_rasp_to_model(program, NUMS, 8, compiler_bos=BOS)
    check(model, program, sampled(NUMS, 8, 30))


def test_categorical_maps_of_tokens_read_the_embeddings_columns_for_them():
    """tracr's detect_pattern over 26 letters: every read of the token one-hot is a map of a
    few values (== 'a', == 'b', == 'c'), so the embedding carries those columns and the
    one-hot is not in the residual (d 52 before)."""
    import string

    from tracr.compiler import lib

    program = lib.detect_pattern(t, "abc")
    vocab = set(string.ascii_lowercase)
    model = compile_rasp_to_model(program, vocab, 10, compiler_bos=BOS)
    assert model.stats.d < 30
    check(model, program, sampled(vocab, 10, 40) + [list("abcabcab"), list("xabcz")])


def test_a_key_of_one_root_with_far_fewer_values_of_x_is_still_split():
    """k = f(x, index) over 30 positions with x of one value (a fuzz program's x < y of the
    index with itself): the (x, index) split's heads over x's one value, not a head over
    k's 30 (d 64 without the split, 10 with it)."""
    never = rasp.SequenceMap(lambda a, b: a < b, i, i)
    k = rasp.SequenceMap(lambda a, b: a - b / 3, never, i)
    program = rasp.numerical(rasp.Map(lambda x: x - 1,
                                      rasp.SelectorWidth(rasp.Select(k, k, rasp.Comparison.GT))))
    model = compile_rasp_to_model(program, NUMS, 30, compiler_bos=BOS)
    assert model.stats.d <= 16
    check(model, program, sampled(NUMS, 30, 12))


def test_a_sequence_map_of_two_functions_of_the_same_two_sops_tables_over_those_two():
    """f(g(t, i), h(t, i)): a table over the (token, index) pairs, not over every pair of g's
    and h's values (at 10: 1 layer, 54 neurons; before: 2 layers, 129)."""
    g = rasp.SequenceMap(lambda a, b: a + b, t, i)
    h = rasp.SequenceMap(lambda a, b: a * b % 5, t, i)
    program = rasp.SequenceMap(lambda x, y: (x * y + x) % 7, g, h)
    model = compile_rasp_to_model(program, NUMS, 10, compiler_bos=BOS)
    assert model.stats.n_layers == 1 and _neurons(model) <= len(NUMS) * 10 + 16
    check(model, program, sampled(NUMS, 10, 40))
