"""`bench/frontends.py --tracr-timeout`: a tracr row that gives no answer within the limit is a
timeout error row, the program's longer lengths are skipped by tracr, the run goes on and the
summary counts both."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("tracr.compiler.compiling",
                    reason="bench/frontends.py's tracr side needs tw-compiler[rasp]")

BENCH = Path(__file__).resolve().parents[1] / "bench" / "frontends.py"


def test_tracr_timeout_row_then_skip_and_summary():
    # tracr's compile of sort (with its exactness run) takes seconds, far over 0.5 s
    res = subprocess.run([sys.executable, str(BENCH), "--programs", "sort", "--lengths", "5,10",
                          "--tracr-timeout", "0.5"], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    first, second, summary = (json.loads(line) for line in res.stdout.strip().splitlines())
    assert (first["program"], first["max_seq_len"]) == ("sort", 5)
    assert first["tracr"] == {"error": "timeout: no result after 0.5 s", "timeout_s": 0.5}
    assert first["tw"]["exact"] == 1.0  # tw's side is unaffected
    assert second["max_seq_len"] == 10
    assert second["tracr"] == {"skipped": "timed out at max_seq_len 5", "timeout_s": 0.5}
    assert summary["summary"] and summary["rows"] == 2 and summary["compared_rows"] == 0
    assert summary["tracr_timeouts"] == 1 and summary["tracr_skipped"] == 1


def test_each_tracr_row_is_timed_in_a_fresh_worker():
    # hist at length 5 is a model of length's shape (1 layer, d_model 18): a worker that
    # compiled length keeps it in JAX's caches and compiles hist in about 0.02 s; a fresh
    # warmed-up worker per row times hist as a first compile of its shape (seconds)
    res = subprocess.run([sys.executable, str(BENCH), "--programs", "length,hist", "--lengths",
                          "5", "--tw-repeats", "2"], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    length, hist, summary = (json.loads(line) for line in res.stdout.strip().splitlines())
    assert (length["tracr"]["d_model"], length["tracr"]["layers"]) == \
        (hist["tracr"]["d_model"], hist["tracr"]["layers"])
    assert length["tracr"]["worker"] == hist["tracr"]["worker"] == "fresh"
    assert hist["tracr"]["compile_s"] > 0.3
    assert hist["tw"]["compile_repeats"] == 2
    assert summary["tracr_worker"] == "fresh" and summary["tw_compile_repeats"] == "2"
