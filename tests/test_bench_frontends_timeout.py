"""`bench/frontends.py --tracr-timeout`: a tracr row that gives no answer within the limit is a
timeout error row, the program's longer lengths are skipped by tracr, the run goes on and the
summary counts both."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("tracr.compiler.compiling",
                    reason="bench/frontends.py's tracr side needs tw[rasp]")

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
