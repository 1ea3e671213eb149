"""The RASP frontend: tw's oracle and compiled model against tracr's own evaluator.

Exhaustive over every input up to length 5 for tracr's library programs (vocabularies of 3),
tracr's integration test cases (and the ones tracr refuses, which tw compiles), the library at
max_seq_len 10, 20 and 50 on sampled inputs, and the errors a user can meet.
"""

from __future__ import annotations

import itertools
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

rasp_mod = pytest.importorskip("tracr.rasp.rasp",
                               reason="the RASP frontend's tests need tw-compiler[rasp]")
from tracr.compiler import lib, test_cases  # noqa: E402
from tracr.rasp import rasp  # noqa: E402

from tw_examples.rasp import LIB_PROGRAMS  # noqa: E402
from tw_lowering import compile_rasp_to_model  # noqa: E402
from tw_frontends.rasp.translator import RaspError, translate  # noqa: E402
from twdialect.dense import shape_of  # noqa: E402
from twdialect.dialect import AttnOp, MlpOp  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
BOS = "BOS"


def agrees(got, want) -> bool:
    """One position: equal values; numbers within 1e-4; a numerical None reads as 0 (the
    compiled default, as in tracr's models)."""
    if want is None:
        return got is None or (isinstance(got, float) and abs(got) < 1e-4)
    if isinstance(got, float) and isinstance(want, (int, float)) and not isinstance(want, bool):
        return abs(got - want) < 1e-4
    if isinstance(got, float) and isinstance(want, bool):
        return abs(got - float(want)) < 1e-4
    return got == want and type(got) is type(want) or got == want


def expected(program, tokens):
    try:
        return rasp.evaluate(program, tokens)
    except Exception:  # noqa: BLE001 - an input the program has no meaning for
        return None


def check(model, program, inputs, oracle: bool = True) -> None:
    outs = model.apply_batch([[BOS, *x] for x in inputs])
    for x, out in zip(inputs, outs):
        want = expected(program, x)
        if want is None:
            continue
        assert out.decoded[0] == BOS
        got = out.decoded[1:]
        assert all(agrees(g, w) for g, w in zip(got, want)), (x, got, want)
        if oracle:
            ora = model.evaluate([BOS, *x]).decoded[1:]
            assert all(agrees(g, w) for g, w in zip(ora, want)), ("oracle", x, ora, want)


def all_inputs(vocab, longest: int) -> list[list]:
    vals = sorted(vocab, key=str)
    return [list(p) for n in range(1, longest + 1) for p in itertools.product(vals, repeat=n)]


def sampled(vocab, longest: int, k: int, seed: int = 0) -> list[list]:
    rng = random.Random(seed)
    vals = sorted(vocab, key=str)
    return [[rng.choice(vals) for _ in range(rng.randint(1, longest))] for _ in range(k)] + \
        [[rng.choice(vals) for _ in range(longest)] for _ in range(4)]


@pytest.mark.parametrize("name", list(LIB_PROGRAMS))
def test_lib_program_exhaustive_to_length_5(name):
    program, vocab = LIB_PROGRAMS[name](5)
    model = compile_rasp_to_model(program, vocab, 5, compiler_bos=BOS)
    assert model.stats.n_layers == model.stats.floor
    check(model, program, all_inputs(vocab, 5))


@pytest.mark.parametrize("n", [10, 20, 50])
@pytest.mark.parametrize("name", list(LIB_PROGRAMS))
def test_lib_program_at_longer_lengths(name, n):
    program, vocab = LIB_PROGRAMS[name](n)
    model = compile_rasp_to_model(program, vocab, n, compiler_bos=BOS)
    check(model, program, sampled(vocab, n, 12, seed=n), oracle=n <= 20)


@pytest.mark.parametrize("name", ["reverse", "sort", "count_less_freq", "nary_sequencemap",
                                  "shuffle_dyck"])
def test_lib_program_at_length_100(name):
    """Long inputs at max_seq_len 100: reverse's query table (opp_idx's features, 200 values)
    summed its step pairs' large terms all before cancelling them, 2e-5 off in float32 where
    its head accepts 8e-6, so BOS took a tenth of the softmax (over 10 tokens: 13 of 200
    random inputs wrong; over the library's 3, 2 of these 48); a step's two neurons now sit
    side by side, and a table near its tolerance is checked summed in neuron order too."""
    program, vocab = LIB_PROGRAMS[name](100)
    model = compile_rasp_to_model(program, vocab, 100, compiler_bos=BOS)
    rng = random.Random(100)
    values = sorted(vocab, key=str)
    check(model, program, [[rng.choice(values) for _ in range(rng.randint(80, 100))]
                           for _ in range(48)], oracle=False)


def test_a_sum_of_means_over_one_selector_is_one_mean():
    """make_pair_balance's opens - closes (two means over Select(indices, indices, LEQ),
    built twice): one head averaging the difference, whose value set pairs only means of the
    same number of keys (some n^3), not every mean of one with every mean of the other (some
    n^4: 600,000 at length 50, a million past 60, where shuffle_dyck was refused)."""
    program, vocab = LIB_PROGRAMS["pair_balance"](50)
    model = compile_rasp_to_model(program, vocab, 50, compiler_bos=BOS)
    assert sum(isinstance(op, AttnOp) for op in model.module.walk()) == 1
    assert model.stats.n_layers == 1
    check(model, program, sampled(vocab, 50, 12, seed=5))
    x = lib.make_frac_prevs(rasp.tokens == "a")
    y = lib.make_frac_prevs(rasp.tokens == "b")
    twice = rasp.numerical(rasp.LinearSequenceMap(x, y, 2, -1))
    program = rasp.Map(lambda v: v > 0, twice)  # its table reads the value set
    model = compile_rasp_to_model(program, {"a", "b", "c"}, 8, compiler_bos=BOS)
    check(model, program, all_inputs({"a", "b", "c"}, 5))


def test_a_sum_of_means_holds_what_rasp_computes():
    """The value set of frac(a) - frac(b) is what RASP's float64 gives (3/10 - 1/10 =
    0.19999999999999998, not 0.2): a map that tells those apart is refused, as float32
    cannot; one that does not compiles."""
    fa = lib.make_frac_prevs(rasp.tokens == "a")
    fb = lib.make_frac_prevs(rasp.tokens == "b")
    diff = rasp.numerical(rasp.LinearSequenceMap(fa, fb, 1, -1))
    with pytest.raises(RaspError, match="0.19999999999999998 and 0.2 are one float32 number"):
        compile_rasp_to_model(rasp.Map(lambda v: v >= 0.2, diff), {"a", "b", "c"}, 10,
                              compiler_bos=BOS)
    program = rasp.Map(lambda v: v > 0.15, diff)
    model = compile_rasp_to_model(program, {"a", "b", "c"}, 10, compiler_bos=BOS)
    check(model, program, [list("aaabcccccc"), list("abab"), list("bbbaaaaaac")])


def _cases(group: str) -> list:
    return [pytest.param(c, id=c["testcase_name"]) for c in getattr(test_cases, group)]


@pytest.mark.parametrize("case", _cases("TEST_CASES"))
def test_tracr_test_cases(case):
    _run_case(case, causal=False)


@pytest.mark.parametrize("case", _cases("CAUSAL_TEST_CASES"))
def test_tracr_causal_test_cases(case):
    _run_case(case, causal=True)


@pytest.mark.parametrize("case", _cases("UNSUPPORTED_TEST_CASES"))
def test_what_tracr_refuses_tw_compiles(case):
    """tracr's validator refuses these (numerical Select keys, a categorical mean of numbers,
    non-zero defaults, numerical SequenceMaps, numerical tokens and indices...); tw compiles
    each exactly."""
    _run_case(case, causal=False)


def _run_case(case, causal: bool):
    program, vocab, n = case["program"], case["vocab"], case["max_seq_len"]
    model = compile_rasp_to_model(program, vocab, n, causal=causal, compiler_bos=BOS)
    if "test_input" in case and "expected_output" in case:
        got = model.apply([BOS, *case["test_input"]]).decoded[1:]
        assert all(agrees(g, w) for g, w in zip(got, case["expected_output"])), got
    inputs = all_inputs(vocab, min(n, 5)) if len(vocab) <= 3 else \
        all_inputs(vocab, min(n, 3)) + sampled(vocab, n, 40)
    if causal:  # a causal model sees only the prefix: compare what a prefix determines
        outs = model.apply_batch([[BOS, *x] for x in inputs])
        for x, out in zip(inputs, outs):
            for i in range(len(x)):
                want = expected(program, x[:i + 1])
                if want is not None:
                    assert agrees(out.decoded[1 + i], want[i]), (x, i, out.decoded, want)
        return
    check(model, program, inputs)


def test_decoded_matches_tracr_compiled_model():
    """tracr's own AssembledTransformerModel and tw's give the same `decoded` lists."""
    compiling = pytest.importorskip("tracr.compiler.compiling")
    program, vocab = LIB_PROGRAMS["sort_unique"](4)
    theirs = compiling.compile_rasp_to_model(program, vocab, 4, compiler_bos=BOS)
    ours = compile_rasp_to_model(program, vocab, 4, compiler_bos=BOS)
    for x in all_inputs(vocab, 3):
        if len(set(x)) == len(x):  # sort_unique's contract: unique keys
            assert ours.apply([BOS, *x]).decoded == theirs.apply([BOS, *x]).decoded


def test_model_exposes_module_model_and_stats():
    program, vocab = LIB_PROGRAMS["hist"](5)
    model = compile_rasp_to_model(program, vocab, 5, compiler_bos=BOS)
    assert model.module is model.rasp_graph.module
    assert model.compiled.stats is model.stats
    assert model.stats.n_layers >= 1 and model.seconds["total"] > 0


def test_full_attention_program_refuses_generate():
    program, vocab = LIB_PROGRAMS["length"](5)
    model = compile_rasp_to_model(program, vocab, 5, compiler_bos=BOS)
    ids = model.rasp_graph.token_ids([BOS, "a"])
    with pytest.raises(Exception, match="full"):
        model.compiled.generate({"tokens": ids}, steps=1, feedback=lambda out: out)


def test_causal_program_uses_causal_heads_only():
    program = lib_frac_prevs = LIB_PROGRAMS["frac_prevs"](5)[0]
    del lib_frac_prevs
    rg = translate(program, {"x", "y"}, 5, causal=True, compiler_bos=BOS)
    masks = {op.mask_kind for op in rg.module.walk() if op.name == "tw.attn"}
    assert masks == {"causal"}


# -- errors ----------------------------------------------------------------------------------

def test_length_under_a_causal_mask_is_refused():
    with pytest.raises(RaspError, match="causal model cannot see its end"):
        translate(rasp.Map(lambda n: n + 1, rasp.length), {1, 2}, 5, causal=True)


def test_bad_inputs_are_named():
    program, vocab = LIB_PROGRAMS["hist"](3)
    model = compile_rasp_to_model(program, vocab, 3, compiler_bos=BOS)
    with pytest.raises(RaspError, match="not in the vocabulary"):
        model.apply([BOS, "z"])
    with pytest.raises(RaspError, match="max_seq_len=3"):
        model.apply([BOS, "a", "a", "a", "a"])
    with pytest.raises(RaspError, match="must start with the BOS"):
        model.apply(["a"])


@pytest.mark.parametrize("program, match", [
    (lambda: 3, "must be a RASP SOp"),
    (lambda: rasp.numerical(rasp.Map(lambda x: "s", rasp.tokens)), "not a finite number"),
    (lambda: rasp.Map(lambda x: [x], rasp.tokens), "not hashable"),
])
def test_programs_tw_cannot_compile_are_named(program, match):
    with pytest.raises(RaspError, match=match):
        translate(program(), {1, 2}, 4)


def test_every_static_refusal_is_named_at_once(monkeypatch):
    """The validation stage (`frontends/rasp/validate.py`) checks what needs no value sets
    before anything is built, and names every such expression in one line: numerical tokens
    over letters, a ConstantSOp longer than max_seq_len, `length` in a causal model."""
    import tw_frontends.rasp.translator as frontend

    tok = rasp.numerical(rasp.TokensType())
    six = rasp.ConstantSOp([1] * 6).named("six")
    length = rasp.Map(lambda n: n, rasp.LengthType()).named("m")
    program = rasp.SequenceMap(lambda a, b: a, rasp.SequenceMap(lambda a, b: a, tok, six),
                               length).named("out")

    def never(self):
        raise AssertionError("built a graph for a program the validation refuses")
    monkeypatch.setattr(frontend._Translator, "_sources", never)
    with pytest.raises(RaspError) as e:
        translate(program, {"a", "b"}, 4, causal=True)
    msg = str(e.value)
    assert msg.startswith("3 expressions the RASP frontend does not take: ") and "\n" not in msg
    for part in ("TokensType 'tokens': numerical tokens need a vocabulary of numbers",
                 "6 values, more than max_seq_len=4",
                 "LengthType 'length': `length` needs the whole sequence"):
        assert part in msg
    with pytest.raises(RaspError, match=r"^TokensType 'tokens': numerical tokens need"):
        translate(rasp.Map(lambda x: x, tok), {"a", "b"}, 4)  # (one: its own line alone)


def test_bos_in_the_vocabulary_is_refused():
    with pytest.raises(RaspError, match="must not be in the vocabulary"):
        translate(rasp.tokens, {"BOS", "a"}, 4, compiler_bos="BOS")


# -- the CLI ------------------------------------------------------------------------------------

def _cli(*args):
    return subprocess.run([sys.executable, "-m", "tw_tools.tw_rasp", *args], capture_output=True,
                          text=True, timeout=300)


def test_tw_rasp_runs_a_program_file():
    r = _cli(str(ROOT / "examples/rasp/reverse.py"), "1", "2", "3")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == "['BOS', 3, 2, 1]"
    r = _cli(str(ROOT / "examples/rasp/reverse.py"), "3", "1", "--oracle")
    assert r.stdout.splitlines() == ["['BOS', 1, 3]"]


def test_tw_rasp_emits_tw_ir():
    r = _cli(str(ROOT / "examples/rasp/reverse.py"), "--emit-mlir")
    assert r.returncode == 0 and "tw.attn" in r.stdout and "mask full" in r.stdout


UNNAMED = """
from tracr.rasp.rasp import tokens, Select, SelectorWidth, Map, Comparison
VOCAB = {"a", "b"}
MAX_SEQ_LEN = 4
hist = SelectorWidth(Select(tokens, tokens, Comparison.EQ))
repeated = Map(lambda x: x > 1, hist)
"""


def test_tw_rasp_takes_the_one_unread_sop(tmp_path):
    """Without `program` or --program: the one top-level SOp no other one reads, and VOCAB
    and MAX_SEQ_LEN in capitals; two such SOps are an error naming both."""
    f = tmp_path / "unnamed.py"
    f.write_text(UNNAMED)
    r = _cli(str(f), "a", "b", "a")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == "['BOS', True, False, True]"
    f.write_text(UNNAMED + "other = Map(lambda x: x, tokens)\n")
    r = _cli(str(f), "a")
    assert r.returncode == 1 and "defines the RASP SOps other, repeated" in r.stderr


@pytest.mark.parametrize("args, match", [
    (["missing.py"], "no such file"),
    (["{reverse}", "7"], "not in the vocabulary"),
    (["{reverse}", "--program", "nothing"], "defines no `nothing`"),
])
def test_tw_rasp_errors_are_one_line(args, match):
    args = [a.format(reverse=ROOT / "examples/rasp/reverse.py") for a in args]
    r = _cli(*args)
    assert r.returncode == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tw-rasp: error:") and match in lines[0]


def test_numbers_decode_as_numbers():
    program = rasp.numerical(rasp.Map(lambda x: x / 2, rasp.tokens))
    model = compile_rasp_to_model(program, {1, 2, 3}, 3, compiler_bos=BOS)
    out = model.apply([BOS, 3, 1])
    assert out.decoded[1:] == pytest.approx([1.5, 0.5], abs=1e-6)
    assert isinstance(out.outputs, np.ndarray)


@pytest.mark.parametrize("causal", [False, True])
def test_apply_gives_tracrs_other_fields(causal):
    """residuals, layer_outputs, attn_logits, input_embeddings, transformer_output and
    unembedded, shaped as tracr's (a batch of one) over tw's d columns: the sublayers' changes
    add up to the final residual, whose output columns are `outputs`; a causal model's logits
    are all masked above the diagonal."""
    import torch

    program, vocab = LIB_PROGRAMS["sort"](5)
    model = compile_rasp_to_model(program, vocab, 5, causal=causal, compiler_bos=BOS)
    ct, out = model.compiled, model.apply([BOS, 3, 1, 2])
    t, d = 4, ct.machine.d
    assert out.input_embeddings.shape == out.transformer_output.shape == (1, t, d)
    assert len(out.residuals) == len(out.layer_outputs) == 2 * ct.n_layers
    assert all(r.shape == (1, t, d) for r in out.residuals + out.layer_outputs)
    assert [a.shape for a in out.attn_logits] == [(1, layer.attn.n_heads, t, t)
                                                  for layer in ct.layers]
    np.testing.assert_allclose(out.input_embeddings + sum(out.layer_outputs),
                               out.transformer_output, atol=1e-4)
    cols = ct.read_outputs(ct.output_columns(torch.from_numpy(out.transformer_output[0])).numpy())
    np.testing.assert_allclose(cols[model.rasp_graph.output], out.outputs, atol=1e-6)
    assert out.unembedded.shape == (1, t, out.outputs.shape[1])
    hidden = np.triu(np.ones((t, t), bool), 1)  # (a full model's heads may be causal too)
    assert all((a[0][:, hidden] == -1e30).all() for a in out.attn_logits) or not causal
    with pytest.raises(AttributeError, match="no model to trace"):
        model.evaluate([BOS, 3, 1, 2]).residuals


BEYOND_TRACR = {
    "constant_sop": lambda: rasp.SequenceMap(lambda x, c: x + c, rasp.tokens,
                                             rasp.ConstantSOp([10, 20, 30], check_length=False)),
    "constant_selector": lambda: rasp.numerical(rasp.Aggregate(
        rasp.ConstantSelector([[1, 0, 0], [1, 1, 0], [0, 1, 1]], check_length=False),
        rasp.numerical(rasp.Map(lambda x: x, rasp.tokens)), default=0)),
    "length": lambda: rasp.Map(lambda n: n * 2, rasp.length),
    "categorical_default_outside_the_values": lambda: rasp.Aggregate(
        rasp.Select(rasp.indices, rasp.indices, lambda k, q: k == q - 1), rasp.tokens,
        default=7),
    "selector_or_of_different_sops": lambda: rasp.numerical(rasp.Aggregate(
        rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.EQ)
        | rasp.Select(rasp.indices, rasp.indices, rasp.Comparison.LT),
        rasp.numerical(rasp.Map(lambda x: x, rasp.tokens)), default=0)),
    "selector_not_width": lambda: rasp.SelectorWidth(
        ~rasp.Select(rasp.tokens, rasp.indices, rasp.Comparison.GT)),
}


@pytest.mark.parametrize("name", list(BEYOND_TRACR))
def test_constructs_beyond_tracr(name):
    program = BEYOND_TRACR[name]()
    model = compile_rasp_to_model(program, {1, 2, 3}, 3, compiler_bos=BOS)
    inputs = all_inputs({1, 2, 3}, 3)
    if name == "constant_selector":  # its matrix is for length 3
        inputs = [x for x in inputs if len(x) == 3]
    check(model, program, inputs)


def _case_at(case, n: int, causal: bool):
    program, vocab = case["program"], case["vocab"]
    model = compile_rasp_to_model(program, vocab, n, causal=causal, compiler_bos=BOS)
    check(model, program, sampled(vocab, n, 16, seed=n), oracle=False)


def _longer(group: str, lengths) -> list:
    return [pytest.param(c, n, id=f"{c['testcase_name']}-{n}")
            for c in getattr(test_cases, group) for n in lengths
            if n > c["max_seq_len"]]


@pytest.mark.parametrize("case, n", _longer("TEST_CASES", (10, 20, 50)))
def test_tracr_test_cases_at_longer_lengths(case, n):
    """tracr's test-case programs (built for their own max_seq_len) compiled for longer inputs
    (sampled; the lib programs above run at 10, 20 and 50 too)."""
    _case_at(case, n, causal=False)


def test_linear_sequence_map_of_integers_stays_integers():
    # RASP's evaluator gives -1 * 2 + -1 * i as an int, which a later map may rely on (an int
    # times a tuple repeats it; a float raises): the value set must hold what it gives
    two = rasp.numerical(rasp.Full(2))
    total = rasp.numerical(rasp.LinearSequenceMap(two, rasp.numerical(
        rasp.Map(lambda x: x, rasp.indices)), -1, -1))
    pairs = rasp.SequenceMap(lambda x, y: (x, y), two, rasp.indices)
    program = rasp.SequenceMap(lambda x, y: x * y, total, pairs)
    model = compile_rasp_to_model(program, {0, 1, 2}, 3, causal=True, compiler_bos=BOS)
    assert model.apply([BOS, 0]).decoded == [BOS, ()]


def _none_everywhere(numerical: bool):
    inner = rasp.Map(lambda x: None, rasp.tokens)
    return rasp.numerical(inner) if numerical else rasp.categorical(inner)


def _maybe_none():  # None at token 2, the token elsewhere
    return rasp.numerical(rasp.Map(lambda x: None if x == 2 else x, rasp.tokens))


@pytest.mark.parametrize("make", [
    # an SOp that is None at every position, read where RASP gives None (or a default)
    lambda: rasp.categorical(rasp.SequenceMap(lambda x, y: (x, y), _none_everywhere(True),
                                              rasp.tokens)),
    lambda: rasp.numerical(rasp.SequenceMap(lambda x, y: 1, _none_everywhere(False),
                                            rasp.tokens)),
    lambda: rasp.categorical(rasp.Aggregate(rasp.Select(rasp.tokens, rasp.tokens,
                                                        rasp.Comparison.EQ),
                                            _none_everywhere(False))),
    lambda: rasp.numerical(rasp.Aggregate(rasp.Select(rasp.tokens, rasp.tokens,
                                                      rasp.Comparison.EQ),
                                          _none_everywhere(False))),
    lambda: rasp.categorical(rasp.Aggregate(rasp.Select(rasp.tokens, rasp.tokens,
                                                        rasp.Comparison.LT),
                                            _none_everywhere(False), default=2)),
    lambda: rasp.categorical(rasp.Map(lambda x: 3, _none_everywhere(False), simplify=False)),
    lambda: rasp.numerical(rasp.Map(lambda x: 3, _none_everywhere(True), simplify=False)),
    # a numerical sum of values that may be None is None there, not the other value
    lambda: rasp.numerical(rasp.LinearSequenceMap(_maybe_none(), rasp.numerical(
        rasp.Map(lambda x: x, rasp.tokens)), 1, 2)),
    lambda: rasp.numerical(rasp.LinearSequenceMap(_maybe_none(), _maybe_none(), 1, 2)),
])
def test_values_that_are_none_stay_none(make):
    program = make()
    model = compile_rasp_to_model(program, {1, 2, 3}, 4, compiler_bos=BOS)
    check(model, program, all_inputs({1, 2, 3}, 4))


@pytest.mark.parametrize("side", ["keys", "queries"])
def test_a_selector_reading_none_everywhere_is_named(side):
    # RASP's Select raises on a None key or query: no input has a meaning
    sides = {"keys": rasp.tokens, "queries": rasp.tokens, side: _none_everywhere(True)}
    program = rasp.SelectorWidth(rasp.Select(sides["keys"], sides["queries"],
                                             rasp.Comparison.EQ))
    with pytest.raises(RaspError, match="None at every position, read by a selector"):
        translate(program, {1, 2, 3}, 4, compiler_bos=BOS)


def _limit(monkeypatch, name: str, value) -> None:
    """A frontend limit lowered for one test, in every module of the frontend that reads it
    (each imports the limits it reads by name)."""
    import importlib
    import pkgutil

    import tw_frontends.rasp as package

    patched = 0
    for info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"tw_frontends.rasp.{info.name}")
        if hasattr(module, name):
            monkeypatch.setattr(module, name, value)
            patched += 1
    assert patched > 1


@pytest.mark.parametrize("numerical", [False, True])
def test_a_sequence_map_over_more_pairs_than_a_one_hot_holds_is_one_mlp(monkeypatch, numerical):
    # above MAX_TABLE pairs the pairs' one-hot is never a value: a neuron a pair, straight
    # to the rows (checked here with the limit lowered to 8, on every input)
    _limit(monkeypatch, "MAX_TABLE", 8)
    f = rasp.SequenceMap(lambda x, y: (x * y) % 4 if x > y else x, rasp.tokens, rasp.indices)
    program = rasp.numerical(f) if numerical else rasp.categorical(f)
    model = compile_rasp_to_model(program, {1, 2, 3}, 4, compiler_bos=BOS)
    hidden = [shape_of(op.w1)[1] for op in model.module.walk() if isinstance(op, MlpOp)]
    assert 3 * 4 in hidden
    check(model, program, all_inputs({1, 2, 3}, 4))


def test_a_sequence_map_of_5000_pairs_compiles():
    # tracr compiles this (a 5,000-neuron MLP, in minutes); tw refused it above 4,096 pairs
    vocab = set(range(100))
    program = rasp.categorical(rasp.SequenceMap(lambda x, y: (x + y) % 7 if x > y else x % 3,
                                                rasp.tokens, rasp.indices))
    model = compile_rasp_to_model(program, vocab, 50, compiler_bos=BOS)
    assert model.stats.n_layers == 1
    check(model, program, sampled(vocab, 50, 30), oracle=False)


def test_a_sequence_map_over_too_many_pairs_is_named():
    program = rasp.SequenceMap(lambda x, y: (x * y) % 5, rasp.tokens, rasp.indices)
    with pytest.raises(RaspError, match="value pairs, more than the 65536 a table"):
        translate(program, set(range(1400)), 50, compiler_bos=BOS)


def test_too_many_pairs_are_refused_before_the_function_runs_on_them():
    # 1,100 tokens x 1,000 positions: the function ran on all 1.1 million pairs (as a sum's
    # table, then as the pair table) before the pair table was refused; a length-100 fuzz
    # program over a mean's values ran for minutes and 4 GB
    calls = []

    def f(x, y):
        calls.append(1)
        return x * y

    program = rasp.numerical(rasp.SequenceMap(f, rasp.numerical(rasp.Map(lambda t: t,
                                                                          rasp.tokens)),
                                              rasp.numerical(rasp.Map(lambda i: i,
                                                                      rasp.indices))))
    with pytest.raises(RaspError, match="value pairs, more than the 65536 a table"):
        translate(program, set(range(1100)), 1000, compiler_bos=BOS)
    assert len(calls) < 1000


def test_a_map_of_more_pair_values_than_a_one_hot_holds_is_one_pair_table(monkeypatch):
    # make_nary_sequencemap's tuples of three (|X| |Y| |Z| values, 5,000 for 10 tokens at
    # length 50) are read by one Map: f's pair table goes straight to f's values (checked
    # with the limit lowered to 16, on every input)
    from tracr.compiler import lib

    _limit(monkeypatch, "MAX_TABLE", 16)
    program = lib.make_nary_sequencemap(lambda x, i, y: (x * i + y) % 4, rasp.tokens,
                                        rasp.indices, rasp.tokens)
    model = compile_rasp_to_model(program, {1, 2, 3}, 4, compiler_bos=BOS)
    assert max(shape_of(op.w2)[1] for op in model.module.walk() if isinstance(op, MlpOp)) <= 16
    check(model, program, all_inputs({1, 2, 3}, 4))


def test_a_pair_map_read_twice_is_not_fused(monkeypatch):
    # the SequenceMap's values are read by two maps: each would redo its pair table, so its
    # one-hot stays (and above the limit, is refused by name)
    _limit(monkeypatch, "MAX_TABLE", 8)
    pairs = rasp.SequenceMap(lambda x, i: (x, i), rasp.tokens, rasp.indices)
    program = rasp.SequenceMap(lambda a, b: a[0] == b[1], rasp.Map(lambda p: p, pairs),
                               rasp.Map(lambda p: (p[1], p[0]), pairs))
    with pytest.raises(RaspError, match="12 output values, more than the 8"):
        translate(program, {1, 2, 3}, 4, compiler_bos=BOS)


@pytest.mark.parametrize("numerical", [False, True])
def test_an_nary_sequencemap_is_one_table_over_its_arguments(numerical):
    # make_nary_sequencemap's tuples are read through: one MLP over (x, i, y), not a pair
    # table a level with a one-hot of tuples between (2 layers before)
    from tracr.compiler import lib

    program = lib.make_nary_sequencemap(lambda x, i, y: (x * i + y) % 4, rasp.tokens,
                                        rasp.indices, rasp.tokens)
    if numerical:
        program = rasp.numerical(program)
    model = compile_rasp_to_model(program, {1, 2, 3}, 4, compiler_bos=BOS)
    assert model.stats.n_layers == 1
    check(model, program, all_inputs({1, 2, 3}, 4))


# Functions for random chains Map(f, SequenceMap(g2, SequenceMap(g1, a, b), c)): tuples and
# other one-value-a-pair g1 (read through: one table over a, b, c), sums (not), partial
# functions and failures (None).
_CHAIN_ONE_A_PAIR = ["lambda x, y: (x, y)", "lambda x, y: x * 10 + y",
                     "lambda x, y: (*x, y) if isinstance(x, tuple) else (x, y)"]
_CHAIN_G = _CHAIN_ONE_A_PAIR + ["lambda x, y: x + y", "lambda x, y: (x, y) if x != y else None",
                                "lambda x, y: 1 / (x - y)", "lambda x, y: max(x, y)"]
_CHAIN_F = ["lambda t: str(t)", "lambda t: hash(t) % 5", "lambda t: None if t == 3 else 1",
            "lambda t: t if not isinstance(t, tuple) else sum(t)"]


@pytest.mark.parametrize("seed", range(16))
def test_random_sequence_map_chains_under_a_map(seed):
    rng = random.Random(seed)
    leaves = [rasp.tokens, rasp.indices, rasp.Map(lambda x: x % 2, rasp.tokens)]
    a, b, c = (rng.choice(leaves) for _ in range(3))
    g1 = rng.choice(_CHAIN_ONE_A_PAIR if rng.random() < 0.6 else _CHAIN_G)
    inner = rasp.SequenceMap(eval(g1), a, b)  # noqa: S307 - the test's own
    outer = rasp.SequenceMap(eval(rng.choice(_CHAIN_G)), inner, c)  # noqa: S307
    program = rasp.Map(eval(rng.choice(_CHAIN_F)), outer)  # noqa: S307
    if rng.random() < 0.3:
        program = rasp.numerical(rasp.Map(lambda t: 1 if t is not None and len(str(t)) > 3
                                          else 0, outer))
    model = compile_rasp_to_model(program, {1, 2, 3}, 3, compiler_bos=BOS)
    check(model, program, all_inputs({1, 2, 3}, 3))


def test_numbers_that_differ_by_float64_round_off_are_one_value():
    # a mean minus a token: 1.2 - 2 and 0.2 - 1 give -0.8 and -0.7999999999999998, one
    # float32 point with two outputs 2e-16 apart: one value (refused before)
    tokens = rasp.numerical(rasp.Map(lambda x: x, rasp.tokens))
    mean = rasp.numerical(rasp.Aggregate(rasp.Select(rasp.indices, rasp.indices,
                                                     rasp.Comparison.TRUE), tokens, default=0))
    program = rasp.numerical(rasp.SequenceMap(lambda m, t: m - t, mean, tokens))
    model = compile_rasp_to_model(program, {1, 2, 3}, 5, compiler_bos=BOS)
    check(model, program, all_inputs({1, 2, 3}, 5))


def test_trailing_pads_are_not_seen():
    """tracr's model masks pad tokens: every other position gives RASP's value on the input
    without them (hist counted a pad as a token: ['BOS', 3, 1, 1, ...] on a, b, c, P, P). A
    pad before a token is refused: no RASP input means that."""
    for program in (lib.make_hist(), lib.make_length(), lib.make_sort_unique(rasp.tokens,
                                                                               rasp.indices)):
        model = compile_rasp_to_model(program, {"a", "b", "c"}, 5, compiler_bos=BOS,
                                      compiler_pad="P")
        for x in all_inputs({"a", "b", "c"}, 4):
            for pads in range(1, 6 - len(x)):
                seq = [BOS, *x, *["P"] * pads]
                want = [BOS, *rasp.evaluate(program, x), *["P"] * pads]
                assert model.apply(seq).decoded == want, seq
                assert model.evaluate(seq).decoded == want, seq
        with pytest.raises(RaspError, match="may only end the input"):
            model.apply([BOS, "a", "P", "b"])


def test_tw_rasp_takes_the_pad_token(tmp_path):
    """The file's compiler_pad (or --pad) is the pad token: inputs may end in padding, which
    decodes as tracr's model leaves it (None), and may not be in the vocabulary."""
    f = tmp_path / "padded.py"
    f.write_text(UNNAMED + "compiler_pad = 'P'\n")
    r = _cli(str(f), "a", "b", "a", "P")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0].startswith("['BOS', True, False, True, ")
    r = _cli(str(f), "a", "Q", "--pad", "Q")
    assert r.returncode == 0, r.stderr
    r = _cli(str(f), "a", "--pad", "a")
    assert r.returncode == 1 and "must not be in the vocabulary" in r.stderr


def test_the_translation_reports_what_it_cost():
    # graphs built (a retry is one more), ops built over all of them, and ops of the kept
    # graph that its output does not read (bench/rasp_translation.py sums these)
    from twdialect.dialect import EmbeddingOp, GraphOp, OutputOp

    program = LIB_PROGRAMS["sort"](5)[0]
    rg = translate(program, {1, 2, 3, 4, 5}, 5, compiler_bos=BOS)
    graph = next(op for op in rg.module.walk() if isinstance(op, GraphOp))
    ops = list(graph.body.block.ops)
    live, stack = set(), [op for op in ops if isinstance(op, OutputOp)]
    while stack:
        op = stack.pop()
        if op not in live:
            live.add(op)
            stack.extend(o.owner for o in op.operands if o.owner in ops)
    effort = rg.effort
    assert effort["graphs"] >= 1 and effort["ops"] >= len(ops) + effort["unread"]
    assert effort["unread"] > 0  # (built, then erased: the module holds what the output reads)
    assert all(op in live or isinstance(op, EmbeddingOp) for op in ops)
    assert effort["graphs"] == 1 + len(effort["replans"]) - len(effort["in_place"])


def test_a_plan_changes_one_choice_per_reason():
    from tw_frontends.rasp.plan import FEATURES, INDICES, SUMS, Plan

    first = Plan()
    assert first.after(FEATURES) == Plan(token_features=False)
    assert first.after(INDICES) == Plan(narrow_indices=False)
    assert Plan(token_features=False).after(FEATURES) is None
    tabled = first.after(SUMS, frozenset({7}))
    assert tabled.tabled_sums == {7}
    assert tabled.after(SUMS, frozenset({7})) is None  # (a refusal that reads no new sum stands)
    assert tabled.after(SUMS, frozenset({7, 9})).tabled_sums == {7, 9}


def test_the_translation_replans_where_the_token_features_do_not_pay():
    # make_hist's Select(tokens, tokens, EQ) reads the token one-hot itself: the features
    # are given up and the second translation stands
    program = LIB_PROGRAMS["hist"](5)[0]
    rg = translate(program, {"a", "b", "c", "d"}, 5, compiler_bos=BOS)
    assert rg.effort["replans"] == ["token features no narrower"]
    assert rg.effort["graphs"] == 1 + len(rg.effort["replans"])


def test_token_features_are_given_up_in_place_where_no_read_went_through_them():
    # make_sort's first head reads the token one-hot in its keys before any read has gone
    # through token features: the translation goes on without them, one graph, and its
    # module is the one a translation planned without them builds
    from tw_frontends.rasp.plan import FEATURES, Plan
    from tw_frontends.rasp.translator import _Translator
    from tw_frontends.rasp.build import checked_arguments
    from tw_frontends.rasp.built import _prune
    from tw_frontends.rasp.value_sets import ValueSets

    program = LIB_PROGRAMS["sort"](5)[0]
    vocab = {1, 2, 3, 4, 5}
    rg = translate(program, vocab, 5, compiler_bos=BOS)
    assert rg.effort["replans"] == rg.effort["in_place"] == [FEATURES]
    assert rg.effort["graphs"] == 1
    arguments = checked_arguments(vocab, 5, False, BOS, "compiler_pad", 1e-4)
    t = _Translator(arguments, BOS, "compiler_pad", Plan(token_features=False),
                    ValueSets(*arguments[:3]), {})
    again = t.build(program)
    _prune(t.graph.op.body.block)  # (as `translate` does with the translation it keeps)
    assert str(again.module) == str(rg.module)
