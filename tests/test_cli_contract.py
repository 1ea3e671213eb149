"""tw-run and tw-stats keep tw-opt's contract (tools/cli.py): every error is ONE stderr line
`tw-xxx: error: ...` with exit code 1, `--help` exits 0, no warning leaks; tw-opt exposes only
passes that keep tw IR and says what to do for a bad input or output path.

Most runs call each tool's `main()` in-process (fast); two run the installed console scripts.
"""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from twdialect import print_module

from cli_checks import BIN_DIR, GOOD  # noqa: E402

FILES = {
    "good.mlir": GOOD,
    "good.txt": GOOD,
    "bad_op.mlir": GOOD.replace("tw.relu %x", "tw.relu %x %x"),
    "unterminated.mlir": GOOD.replace('"x" <-1.0', '"x <-1.0' + " pad" * 2500),
    "extra_brace.mlir": GOOD + "}\n",
    "integer.mlir": GOOD.replace("<-1.0, 1.0>", "<0.0, 9.0> integer"),
    "no_inputs.mlir": GOOD.replace('%x = tw.input "x" <-1.0, 1.0> : !tw.vec<2>',
                                   "%x = tw.pos_encoding max_len 8 : !tw.vec<2>"),
}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("contract")
    for name, text in FILES.items():
        (path / name).write_text(text)
    from twdialect.random_graphs import random_graph

    (path / "embedding.mlir").write_text(print_module(random_graph(
        1, n_ops=5, embedding=True, library=False)))
    return path


def _call(tool: str, argv: list[str], capsys, cwd: Path) -> tuple[int, str, str]:
    import importlib

    main = importlib.import_module(f"tw_tools.{tool}").main
    old = os.getcwd()
    os.chdir(cwd)
    try:
        code = main(argv)
    except SystemExit as e:
        code = e.code
    finally:
        os.chdir(old)
    out = capsys.readouterr()
    return code, out.out, out.err


def _assert_one_error_line(prog: str, code, out: str, err: str, message: str) -> str:
    assert code == 1, (code, err)
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"{prog}: error: "), lines[0]
    assert message in lines[0], lines[0]
    assert "Traceback" not in out + err and "internal error" not in err
    return lines[0]


TW_RUN_ERRORS = {
    "bad_flag": (["adder", "1+1=", "--bogus"], "unrecognized arguments: --bogus"),
    "dash_word": (["adder", "-x"], "a prompt that starts with '-' goes after '--'"),
    "missing_value": (["adder", "1+1=", "--d"], "argument --d: expected one argument"),
    "zero_d": (["adder", "1+1=", "--d", "0"], "argument --d: must be a whole number in [3,"),
    "negative_d": (["adder", "1+1=", "--d", "-3"], "got -3"),
    "not_a_number": (["adder", "1+1=", "--d-hidden", "x"], "--d-hidden: takes a whole number"),
    "d_head_not_divisor": (["adder", "1+1=", "--d-head", "7"],
                           "--d 1024 (the program's default) is not a multiple of --d-head 7"),
    "too_many": (["adder", "1+1=", "2+2="], "too many arguments: '2+2='"),
    "options_after_dashes": (["calculator", "--", "-5+3=", "--oracle"],
                             "everything after '--' is positional"),
    "no_prompt": (["adder"], "usage: tw-run PROGRAM PROMPT"),
}


@pytest.mark.parametrize("name", list(TW_RUN_ERRORS))
def test_tw_run_errors_are_one_line(name: str, capsys, workdir: Path) -> None:
    argv, message = TW_RUN_ERRORS[name]
    _assert_one_error_line("tw-run", *_call("tw_run", argv, capsys, workdir), message)


@pytest.mark.parametrize("argv", [["calculator", "-5+3=", "--oracle"],
                                  ["calculator", "--oracle", "--", "-5+3="]])
def test_tw_run_takes_a_prompt_starting_with_dash(argv, capsys, workdir: Path) -> None:
    """The prompt reaches the program (which refuses a negative operand in its own words)."""
    line = _assert_one_error_line("tw-run", *_call("tw_run", argv, capsys, workdir),
                                  "prompt '-5+3=' must look like")
    assert "unrecognized" not in line


def test_help_exits_zero(capsys, workdir: Path) -> None:
    for tool in ("tw_run", "tw_stats", "tw_opt"):
        code, out, err = _call(tool, ["--help"], capsys, workdir)
        assert code == 0 and "usage:" in out and err == "", (tool, err)


TW_STATS_ERRORS = {
    "bad_flag": (["good.mlir", "--bogus"], "unrecognized arguments: --bogus"),
    "missing_file_argument": ([], "the following arguments are required: file"),
    "zero_d": (["good.mlir", "--d", "0"], "argument --d: must be a whole number in [3,"),
    "d_head_not_divisor": (["good.mlir", "--d", "64", "--d-head", "7"],
                           "--d 64 is not a multiple of --d-head 7"),
    "negative_probe": (["good.mlir", "--probe", "-1"], "argument --probe: must be a whole number"),
    "missing_file": (["nowhere.mlir"], "cannot read nowhere.mlir: No such file or directory"),
    "parse_error": (["bad_op.mlir"], "bad_op.mlir:4:21: Expected ':'"),
    "unterminated": (["unterminated.mlir"], "unterminated.mlir:3:19: unterminated string literal"),
    "unknown_pass": (["good.mlir", "-p", "test-add-timers-to-top-level-funcs"],
                     "unknown pass 'test-add-timers-to-top-level-funcs' (known: "),
    "pipeline_syntax": (["good.mlir", "-p", "cse;dce"], "cannot read ';dce' at column 4"),
    "unknown_graph": (["good.mlir", "--graph", "nope"], "no graph @nope"),
}


@pytest.mark.parametrize("name", list(TW_STATS_ERRORS))
def test_tw_stats_errors_are_one_line(name: str, capsys, workdir: Path) -> None:
    argv, message = TW_STATS_ERRORS[name]
    _assert_one_error_line("tw-stats", *_call("tw_stats", argv, capsys, workdir), message)


@pytest.mark.parametrize("graph", ["integer.mlir", "embedding.mlir", "no_inputs.mlir"])
def test_tw_stats_probe_on_integer_token_and_no_inputs(graph: str, capsys, workdir: Path
                                                       ) -> None:
    code, out, err = _call("tw_stats", [graph, "--d", "64", "--probe", "12"], capsys, workdir)
    assert code == 0 and err == "", err
    probe = [ln for ln in out.splitlines() if ln.startswith("probe: ")]
    assert probe and "no divergence" in probe[0], out
    if graph == "no_inputs.mlir":  # 12 positions asked, the graph's max_len is 8
        assert "(8 positions: the graph's max_len)" in probe[0]


def test_sample_inputs_keep_integer_promises() -> None:
    import numpy as np

    from twdialect import parse_module
    from twdialect.random_graphs import sample_inputs

    feeds = sample_inputs(parse_module(FILES["integer.mlir"]), 50)
    x = feeds["x"]
    assert x.shape == (50, 2) and np.all(x == np.round(x)) and x.min() >= 0 and x.max() <= 9
    wide = parse_module(GOOD.replace("<-1.0, 1.0>", "<-1.0e300, 1.0e300>"))
    assert np.all(np.isfinite(sample_inputs(wide, 50)["x"]))


def test_warnings_do_not_reach_stderr(capsys) -> None:
    """A library warning before an error leaves only the error line."""
    from tw_tools.cli import ToolError, run_tool

    def body():
        import numpy as np

        np.float32(3e38) * np.float32(10)  # RuntimeWarning: overflow
        warnings.warn("deprecated", DeprecationWarning)
        raise ToolError("the real problem")

    with pytest.raises(SystemExit) as info:
        run_tool("tw-x", body)
    assert info.value.code == 1
    assert capsys.readouterr().err == "tw-x: error: the real problem\n"


def test_long_words_are_shortened() -> None:
    from tw_tools.cli import one_line

    line = one_line("Operation " + "a" * 100000 + " is not\nregistered")
    assert len(line) < 200 and line.endswith("(100000 characters) is not registered")


TW_OPT_ERRORS = {
    "txt_input": (["good.txt"], "name the file *.mlir or pass --frontend mlir"),
    "missing_folder": (["good.mlir", "-o", "no_such_dir/out.mlir"],
                       "cannot write no_such_dir/out.mlir: No such file or directory (the folder "
                       "no_such_dir does not exist: create it first)"),
    "unknown_option": (["good.mlir", "-p", "cse{foo=0}"],
                       "pass 'cse' has no option 'foo' (it takes no options)"),
    "misnamed_option": (["good.mlir", "-p", "fuse-linears{max-params=x}"],
                        "pass 'fuse-linears' has no option 'max-params' (its options: "),
    "bad_option_type": (["good.mlir", "-p", "fuse-linears{allow-inflate=0}"],
                        "option 'allow-inflate' must be true or false, got '0'"),
    "upstream_pass_not_exposed": (["good.mlir", "-p", "test-add-timers-to-top-level-funcs"],
                                  "Unrecognized passes"),
    "other_target": (["good.mlir", "-t", "llvm"], "invalid choice: 'llvm' (choose from mlir)"),
    # An empty target reached xDSL's spec parser: "internal error: ArgSpecParseError".
    "empty_target": (["good.mlir", "-p", "cse", "-t", ""], "bad --target '': tw-opt writes "
                                                           "only 'mlir' text"),
    "target_options": (["good.mlir", "-t", "mlir{x=1}"], "print options are flags such as "
                                                         "--print-op-generic"),
    "target_list": (["good.mlir", "-t", "mlir,cse"], "bad --target 'mlir,cse'"),
    "extra_brace": (["extra_brace.mlir"], "extra_brace.mlir:8:1: unexpected '}' after the end of "
                                          "the module (an extra '}'"),
    "no_implicit_module_trailer": (["extra_brace.mlir", "--no-implicit-module"],
                                   "extra_brace.mlir:8:1: unexpected '}' after the end"),
}


@pytest.mark.parametrize("name", list(TW_OPT_ERRORS))
def test_tw_opt_says_what_to_do(name: str, capsys, workdir: Path) -> None:
    argv, message = TW_OPT_ERRORS[name]
    _assert_one_error_line("tw-opt", *_call("tw_opt", argv, capsys, workdir), message)


def test_tw_opt_reads_stdin_as_dash(capsys, workdir: Path, monkeypatch) -> None:
    """'-' is stdin, as for tw-stats (tw-opt tried to open a file named '-')."""
    import io

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(GOOD.encode())))
    code, out, err = _call("tw_opt", ["-", "-p", "cse"], capsys, workdir)
    assert code == 0 and out.strip() == GOOD.strip(), err


def test_tw_opt_reads_txt_with_frontend(capsys, workdir: Path) -> None:
    code, out, err = _call("tw_opt", ["good.txt", "--frontend", "mlir"], capsys, workdir)
    assert code == 0 and out.strip() == GOOD.strip(), err


def test_tw_opt_exposes_only_passes_that_keep_tw_ir() -> None:
    from tw_passes import TW_PASSES, UPSTREAM_PASSES, get_all_passes
    from tw_tools.cli import allowed_passes

    assert set(allowed_passes()) == set(TW_PASSES) | set(UPSTREAM_PASSES)
    assert set(get_all_passes()) == set(allowed_passes())  # the Python entry points too


@pytest.mark.parametrize("pass_name", ["cse", "dce", "canonicalize"])
def test_upstream_passes_keep_a_real_graph_readable(pass_name: str, capsys, tmp_path: Path
                                                    ) -> None:
    """Each exposed upstream pass, on a bundled program: tw-opt's output parses back."""
    import tw_examples as examples
    from twdialect import parse_module

    (tmp_path / "calc.mlir").write_text(print_module(examples.load("calculator").module))
    code, out, err = _call("tw_opt", ["calc.mlir", "-p", pass_name], capsys, tmp_path)
    assert code == 0, err
    assert print_module(parse_module(out)).strip() == out.strip()


def test_console_scripts_keep_the_contract(workdir: Path) -> None:
    """The installed entry points (not just main()): exit 1 and one line, no hang."""
    env = dict(os.environ, PATH=os.pathsep.join([BIN_DIR, os.environ.get("PATH", "")]))
    runs = [(["tw-stats", "unterminated.mlir"], "tw-stats: error: unterminated.mlir:3:19: "),
            (["tw-run", "adder", "1+1=", "--d", "0"], "tw-run: error: argument --d: ")]
    for argv, start in runs:
        r = subprocess.run(argv, cwd=workdir, env=env, capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 1 and r.stdout == "", (argv, r.stderr)
        assert len(r.stderr.splitlines()) == 1 and r.stderr.startswith(start), r.stderr
