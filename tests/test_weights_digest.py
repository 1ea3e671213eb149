"""bench/weights_digest.py, the check that a refactor left the compiled weights as they were, on
a small subset of its RASP sets: the lines are the same when computed twice in one process
(the second time after other programs, so tracr's process-wide expression ids differ unless the
script renumbers them), they keep their fixed-width format, and a changed weight or decoding
table changes the digest (the check can fail)."""

from __future__ import annotations

import re

import pytest
from bench_loader import loaded_bench

pytest.importorskip("tracr.rasp.rasp", reason="the RASP sets need tw-compiler[rasp]")

# tracr's sort at max_seq_len 5 (3 layers); fuzz seed 1 compiles, seed 110 is refused (a mean's
# float64 round-off), both in a fraction of a second
TRACR = (["sort"], (5,))
SEEDS = [1, 110]
COMPILED = re.compile(r"^(?=.{28} )\S+ +(?=.{8} )\S.* layers=[ \d]{2}\d "
                      r"[0-9a-f]{16} io=[0-9a-f]{16}$")
REFUSED = re.compile(r"^(?=.{28} )\S+ +(?=.{8} )\S.* refused [A-Za-z_]\w*: \S.*$")


@pytest.fixture(scope="module")
def bench():
    with loaded_bench("weights_digest.py") as mod:
        yield mod


def _subset(bench) -> list[str]:
    return list(bench.tracr_lines(*TRACR)) + list(bench.fuzz_lines(SEEDS))


def test_subset_is_deterministic_and_well_formed(bench):
    """A compiled line and a refusal, the same when computed again after other programs."""
    first = _subset(bench)
    assert _subset(bench) == first
    assert [s.split()[0] for s in first] == ["tracr/sort", "fuzz/1", "fuzz/110"]
    assert first[0].split()[1] == "n=5"
    assert COMPILED.match(first[0]) and COMPILED.match(first[1]), first
    assert REFUSED.match(first[2]) and "RaspError" in first[2], first[2]


def _sort_model(bench):
    from tw_lowering import compile_rasp_to_model
    from tw_examples.rasp import LIB_PROGRAMS

    program, vocab = LIB_PROGRAMS["sort"](5)
    return compile_rasp_to_model(program, vocab, 5, compiler_bos=bench.BOS)


def test_a_changed_weight_changes_the_digest(bench):
    """One float nudged in one buffer: the digest must see it, or the check proves nothing."""
    model = _sort_model(bench)
    ct = model.compiled
    before = bench.digest(ct)
    assert bench.digest(ct) == before
    name, weight = next((n, t) for n, t in ct.named_buffers()
                        if t.is_floating_point() and t.numel())
    weight.view(-1)[0] += 1e-3
    assert bench.digest(ct) != before, name


def test_a_changed_decoding_table_changes_the_io_digest(bench):
    """The output's values reordered (weights untouched): io= must see it."""
    rg = _sort_model(bench).rasp_graph
    before = bench.io_digest(rg)
    rg.space = list(reversed(rg.space))
    assert bench.io_digest(rg) != before


def test_refusal_is_one_line_without_addresses(bench):
    error = ValueError("no table for <function <lambda> at 0x7f3a2b1c>\nsecond line")
    text = bench.refusal("fuzz/7", "n=4 c", error)
    assert text == ("fuzz/7                       n=4 c    refused ValueError: no table for "
                    "<function <lambda> at 0x?>")
    assert REFUSED.match(text)


def test_sets_option(bench):
    assert bench.parse_args([]).sets == list(bench.SETS)
    assert bench.parse_args(["--sets", "fuzz,tracr"]).sets == ["fuzz", "tracr"]
    with pytest.raises(SystemExit):
        bench.parse_args(["--sets", "tracr,nope"])
