"""bench/rv32.py on the stored hello.elf at 1024 bytes of RAM, in-process: a compile line
(both compilers, the critical path before and after the passes) and a run line whose trace
equals firebrand's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench_loader import loaded_bench

pytest.importorskip("firebrand", reason="firebrand (tw-compiler[firebrand]) is not installed")

HELLO = Path(__file__).resolve().parent.parent / "examples" / "rv32" / "hello.elf"


def test_compile_and_run_lines(capsys):
    with loaded_bench("rv32.py") as bench:
        assert bench.main(["--elfs", str(HELLO), "--ram", "1024", "--max-context", "2048",
                           "--compile-repeats", "1", "--critical-path"]) == 0
    compile_line, run_line = (json.loads(l) for l in capsys.readouterr().out.splitlines())
    assert compile_line["kind"] == "compile" and compile_line["firebrand_layers"] > 100
    assert compile_line["tw_layers"] <= 49 and compile_line["tw_residual"] <= 4586 // 2
    assert compile_line["critical_path"] > compile_line["critical_path_after_passes"] \
        == compile_line["tw_floor"]
    assert len(compile_line["tw_compile_runs"]) == 1 and compile_line["compile_ratio"] > 0
    assert run_line["kind"] == "run" and run_line["exact"] is True
    assert run_line["console"] == "hi\n" and run_line["exit_code"] == 7
