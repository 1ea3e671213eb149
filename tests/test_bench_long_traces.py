"""bench/long_traces.py --quick, in-process: stdout is JSON lines only; the RV32 programs'
traces (hello, fib) and the checksum loop's long trace equal firebrand's C decoder's token for
token; the windows' cost per token and the decoder's memory are reported; generate with the
index decoder gives the torch decoder's tokens (token programs) and values (the layered
graph). Where firebrand or the RISC-V cross compiler is missing, the machine parts say
"skipped"."""

from __future__ import annotations

import json

import pytest
from bench_loader import loaded_bench

pytest.importorskip("numba", reason="the index decoder needs numba")


@pytest.fixture(scope="module")
def rows():
    import contextlib
    import io

    out = io.StringIO()
    with loaded_bench("long_traces.py") as bench, contextlib.redirect_stdout(out):
        assert bench.main(["--quick", "--no-cache"]) == 0
    lines = out.getvalue().splitlines()
    assert lines
    return [json.loads(line) for line in lines]  # every line one JSON object


def _machine_parts_skipped(rows) -> bool:
    skipped = [r for r in rows if r["kind"] in ("rv32", "flat") and "skipped" in r]
    return bool(skipped)


def test_no_errors(rows):
    assert not [r for r in rows if "error" in r]


def test_rv32_programs_match_firebrand(rows):
    if _machine_parts_skipped(rows):
        pytest.skip(next(r["skipped"] for r in rows if "skipped" in r))
    (machine,) = [r for r in rows if r["kind"] == "rv32_machine"]
    assert machine["tw_layers"] > 0 and machine["max_context"] > 0
    runs = {r["program"]: r for r in rows if r["kind"] == "rv32"}
    assert set(runs) == {"hello", "fib"}
    for r in runs.values():
        for k in ("instructions", "tokens", "prompt_tokens", "tw_tokens_per_cpu_s",
                  "tw_generate_tokens_per_cpu_s", "tw_run_tokens_per_cpu_s",
                  "firebrand_tokens_per_cpu_s", "ratio"):
            assert r[k] > 0, k
        assert r["exact"] is True and r["exact_run"] is True and r["halted"] is True
        assert r["tw_run_decoder"] == "index"
    assert runs["hello"]["console"] == "hi\n" and runs["hello"]["exit_code"] == 7
    assert runs["fib"]["console"].startswith("fib(20)=6765")


def test_flat_windows_and_memory(rows):
    if _machine_parts_skipped(rows):
        pytest.skip(next(r["skipped"] for r in rows if "skipped" in r))
    windows = [r for r in rows if r["kind"] == "flat_window"]
    (flat,) = [r for r in rows if r["kind"] == "flat"]
    assert [w["position"] for w in windows] == [1000, 10000]
    assert all(w["ms_per_token"] > 0 and w["stop"] > w["start"] for w in windows)
    assert flat["max_context"] == flat["max_context_requested"] == 1 << 15
    assert flat["exact"] is True and flat["console_ok"] is True and flat["halted"] is True
    assert flat["reached"] > 0.9 * flat["max_context"]  # the loop ran near the context's end
    assert flat["max_min_ratio"] >= 1.0 and isinstance(flat["within_1_5x"], bool)
    assert set(flat["windows"]) == {"1000", "10000"}
    assert 0 < flat["state_bytes_at_reached"] <= flat["state_bytes_allocated"]
    assert flat["state_bytes_per_position"] > 0 and flat["table_entries"] > 0


def test_generate_torch_against_index(rows):
    gen = {r["graph"]: r for r in rows if r["kind"] == "generate"}
    assert set(gen) == {"calculator", "sort_digits", "layered_1000"}
    for r in gen.values():
        assert "skipped" not in r, r.get("skipped")
        assert r["torch_ms_per_token"] > 0 and r["index_ms_per_token"] > 0 and r["ratio"] > 0
        assert r["identical"] is True
    for name in ("calculator", "sort_digits"):
        assert gen[name]["tokens_equal"] is True and gen[name]["answer_ok"] is True
    assert gen["layered_1000"]["values_close"] is True
    assert gen["layered_1000"]["max_abs_diff"] <= 1e-4
