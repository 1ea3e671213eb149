"""bench/machines.py on the smallest machines, in-process: counter (firebrand refuses it, tw
compiles it), fibonacci and stack (both compile them). Each row carries every column, and
whichever compiler ran generates firebrand.reference.run's tokens ("exact")."""

from __future__ import annotations

import json

import pytest
from bench_loader import loaded_bench

pytest.importorskip("firebrand", reason="firebrand (tw-compiler[firebrand]) is not installed")

COMMON = ("machine", "inputs", "prefix_length", "max_context", "max_steps", "steps", "halted",
          "exact", "error", "firebrand_error")


@pytest.fixture(scope="module")
def bench():
    with loaded_bench("machines.py") as mod:
        yield mod


def _keys(bench) -> set:
    tw = {f"tw_{k}" for k in (*bench.TW_KEYS, "compile_seconds", "exact", "tokens_per_s")}
    fb = {f"firebrand_{k}" for k in (*bench.FB_KEYS, "compile_seconds", "exact",
                                      "tokens_per_s")}
    return set(COMMON) | tw | fb


@pytest.mark.parametrize("name", ["fibonacci", "stack"])
def test_both_compile_and_match_the_reference(bench, name):
    row = bench.run_machine(name, max_steps=40, repeats=1)
    assert set(row) == _keys(bench)
    json.dumps(row, sort_keys=True)  # one JSON line
    assert row["machine"] == name and row["halted"] is True
    assert row["error"] is None and row["firebrand_error"] is None
    assert row["exact"] is True and row["tw_exact"] is True and row["firebrand_exact"] is True
    for k in ("tw_layers", "tw_residual", "tw_params", "firebrand_layers", "firebrand_width",
              "firebrand_params", "firebrand_blocks"):
        assert isinstance(row[k], int) and row[k] > 0, k
    assert row["tw_floor"] <= row["tw_layers"]
    assert row["tw_tokens_per_s"] > 0 and row["firebrand_tokens_per_s"] > 0
    assert row["tw_compile_seconds"] >= 0 and row["firebrand_compile_seconds"] >= 0


def test_a_refusal_is_a_one_line_column(bench):
    # counter: history(0) + 1 reaches upper + 1, so firebrand's range inference refuses it;
    # tw compiles it (no layers: the next value is affine in the current token).
    row = bench.run_machine("counter", max_steps=40, repeats=1)
    assert set(row) == _keys(bench)
    assert row["exact"] is True and row["tw_exact"] is True and row["error"] is None
    assert row["firebrand_exact"] is None and row["firebrand_layers"] is None
    msg = row["firebrand_error"]
    assert isinstance(msg, str) and msg and "\n" not in msg


def test_max_steps_is_bounded_by_the_context(bench):
    row = bench.run_machine("fibonacci", max_steps=500, max_context=8, repeats=1)
    assert row["max_context"] == 8 and row["max_steps"] == 8 - row["prefix_length"]
    assert row["steps"] == row["max_steps"] and row["halted"] is False
    assert row["error"] is None and row["firebrand_error"] is None and row["exact"] is True
