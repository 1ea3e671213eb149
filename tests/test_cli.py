"""`tw-opt` as a user meets it: a subprocess per bad input, asserting exit code 1, exactly one
line on stderr (`tw-opt: error: ...`, located where possible) and never a traceback.

All subprocesses are started together by one module-scoped fixture (they are independent and
mostly interpreter start-up), then each test checks its own result.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from cli_checks import BIN_DIR, GOOD, REPO  # noqa: E402

# Each file's offending op is on line 4, column 5 unless the case says otherwise.
BAD_FILES = {
    "good.mlir": GOOD,
    "malformed.mlir": GOOD.replace("tw.relu %x : !tw.vec<2>", "tw.relu %x !tw.vec<2>"),
    "ill_typed.mlir": GOOD.replace(
        '%r = tw.relu %x : !tw.vec<2>',
        '%b = tw.input "b" <-1.0, 1.0> : !tw.vec<3>\n    %r = tw.add %x, %b : !tw.vec<2>'),
    "width_mismatch.mlir": GOOD.replace(
        "%r = tw.relu %x : !tw.vec<2>",
        "%r = tw.linear %x weight dense<1.0> : tensor<2x3xf32> : !tw.vec<2> -> !tw.vec<2>"),
    "generic_width_mismatch.mlir": GOOD.replace(
        "%r = tw.relu %x : !tw.vec<2>", '%r = "tw.relu"(%x) : (!tw.vec<2>) -> !tw.vec<3>'
    ).replace('tw.output "y" %r : !tw.vec<2>', 'tw.output "y" %r : !tw.vec<3>'),
    "use_before_def.mlir": GOOD.replace(
        "%r = tw.relu %x : !tw.vec<2>",
        "%r = tw.relu %q : !tw.vec<2>\n    %q = tw.relu %x : !tw.vec<2>"),
    "verifier.mlir": GOOD.replace("%r = tw.relu %x : !tw.vec<2>",
                                  "%r = tw.clamp %x, 1.0, -1.0 : !tw.vec<2>"),
    "duplicate_output.mlir": GOOD.replace('tw.output "y" %r : !tw.vec<2>',
                                          'tw.output "y" %r : !tw.vec<2>\n'
                                          '    tw.output "y" %x : !tw.vec<2>'),
    "bad_type.mlir": GOOD.replace("!tw.vec<2>\n    %r", "!tw.vec<0>\n    %r"),
    "foreign_op.mlir": GOOD.replace(
        "%r = tw.relu %x : !tw.vec<2>",
        "%r = builtin.unrealized_conversion_cast %x : !tw.vec<2> to !tw.vec<2>"),
    "garbage.mlir": "this is not IR\n",
    "empty.mlir": "// nothing but a comment\n",
}

# A tw-opt with one extra pass, `explode{kind=...}`, that fails in the requested way.
EXPLODING_TW_OPT = textwrap.dedent('''
    import sys
    from dataclasses import dataclass

    from xdsl.passes import ModulePass
    from xdsl.pattern_rewriter import (PatternRewriter, PatternRewriteWalker, RewritePattern,
                                       op_type_rewrite_pattern)
    from xdsl.utils.exceptions import DiagnosticException, VerifyException

    from tw_tools import tw_opt
    from twdialect.dialect import OutputOp, ReluOp


    class ExplodeOnRelu(RewritePattern):
        @op_type_rewrite_pattern
        def match_and_rewrite(self, op: ReluOp, rewriter: PatternRewriter, /) -> None:
            raise ValueError("relu is not allowed here")


    @dataclass(frozen=True)
    class Explode(ModulePass):
        name = "explode"
        kind: str = "value"

        def apply(self, ctx, op) -> None:
            if self.kind == "value":
                raise ValueError("bad weights somewhere")
            if self.kind == "verify":
                raise VerifyException("the graph is not schedulable")
            if self.kind == "diagnostic":
                raise DiagnosticException("cannot place op")
            if self.kind == "runtime":
                raise RuntimeError("unexpected state")
            if self.kind == "key":
                {}["missing"]
            if self.kind == "pattern":
                PatternRewriteWalker(ExplodeOnRelu()).rewrite_module(op)
            if self.kind == "corrupt":  # leaves IR that no longer verifies
                out = next(o for o in op.walk() if isinstance(o, OutputOp))
                out.parent_block().add_op(out.clone())


    original = tw_opt.TwOptMain.register_all_passes


    def register_all_passes(self):
        original(self)
        self.register_pass("explode", lambda: Explode)


    tw_opt.TwOptMain.register_all_passes = register_all_passes
    tw_opt.main(sys.argv[1:])
''')


MIXED = BAD_FILES["verifier.mlir"] + "// -----\n" + GOOD
LATER = GOOD + "// -----\n" + BAD_FILES["verifier.mlir"]
BAD_FILES["mixed.mlir"] = MIXED
BAD_FILES["later.mlir"] = LATER


@dataclass
class Case:
    args: list[str]
    message: str                       # must appear in the error line
    location: str | None = None        # "file:line:col" expected after "tw-opt: error: "
    exploding: bool = False            # run the tw-opt with the `explode` pass
    stdin: str | None = None
    expect_code: int = 1


CASES: dict[str, Case] = {
    "unknown_pass": Case(["good.mlir", "-p", "no-such-pass"], "Unrecognized passes: ['no-such-pass']"),
    "unknown_pass_option": Case(["good.mlir", "-p", "cse{bogus=1}"], "bogus"),
    "bad_option_value": Case(["good.mlir", "-p", "explode{kind=1}"], "kind", exploding=True),
    "bad_pipeline_syntax": Case(["good.mlir", "-p", "cse{"], "bad pass pipeline 'cse{'"),
    "missing_file": Case(["does_not_exist.mlir"], "cannot read does_not_exist.mlir"),
    "unknown_flag": Case(["good.mlir", "--no-such-flag"], "unrecognized arguments: --no-such-flag"),
    "malformed": Case(["malformed.mlir"], "Expected ':'", "malformed.mlir:4:21"),
    "empty": Case(["empty.mlir"], "no operations in this input", "empty.mlir:1:1"),
    "garbage": Case(["garbage.mlir"], "Operation this is not registered", "garbage.mlir:1:6"),
    "ill_typed": Case(["ill_typed.mlir"], "operand is used with type !tw.vec<2>",
                      "ill_typed.mlir:5:21"),
    "bad_type": Case(["bad_type.mlir"], "vector width must be at least 1", "bad_type.mlir:3:45"),
    "width_mismatch": Case(["width_mismatch.mlir"],
                           "'tw.linear' %r in @main: weight has 3 columns but must produce 2",
                           "width_mismatch.mlir:4:5"),
    "generic_width_mismatch": Case(["generic_width_mismatch.mlir"],
                                   "'tw.relu' %r in @main: result 'out'",
                                   "generic_width_mismatch.mlir:4:5"),
    "verifier": Case(["verifier.mlir"], "'tw.clamp' %r in @main: lo 1.0 exceeds hi -1.0",
                     "verifier.mlir:4:5"),
    "duplicate_output": Case(["duplicate_output.mlir"], 'duplicate output name "y"',
                             "duplicate_output.mlir:6:5"),
    "use_before_def": Case(["use_before_def.mlir"],
                           "'tw.relu' %r in @main: operand #0 is used before it is defined",
                           "use_before_def.mlir:4:5"),
    "foreign_op": Case(["foreign_op.mlir"], "only tw ops may appear in a tw.graph",
                       "foreign_op.mlir:4:5"),
    "stdin_parse_error": Case([], "Expected ':'", "stdin:4:21",
                              stdin=BAD_FILES["malformed.mlir"]),
    "pass_value_error": Case(["good.mlir", "-p", "explode{kind=value}"],
                             "pass 'explode' failed: bad weights somewhere", exploding=True),
    "pass_verify_exception": Case(["good.mlir", "-p", "explode{kind=verify}"],
                                  "pass 'explode' failed: the graph is not schedulable",
                                  exploding=True),
    "pass_diagnostic": Case(["good.mlir", "-p", "explode{kind=diagnostic}"],
                            "pass 'explode' failed: cannot place op", exploding=True),
    "pass_runtime_error": Case(["good.mlir", "-p", "explode{kind=runtime}"],
                               "pass 'explode' failed: RuntimeError: unexpected state",
                               exploding=True),
    "pass_key_error": Case(["good.mlir", "-p", "explode{kind=key}"],
                           "pass 'explode' failed: KeyError: 'missing'", exploding=True),
    "pass_pattern_error": Case(["good.mlir", "-p", "explode{kind=pattern}"],
                               "pass 'explode' failed: relu is not allowed here",
                               "good.mlir:4:5", exploding=True),
    "pass_corrupts_ir": Case(["good.mlir", "-p", "explode{kind=corrupt}"],
                             "IR after pass 'explode' does not verify: 'tw.output' in @main: "
                             'duplicate output name "y"', exploding=True),
}


# Runs that are not one-line-error cases; checked by the tests below.
OTHER_RUNS: dict[str, Case] = {
    "good": Case(["good.mlir"], ""),
    "output_file": Case(["good.mlir", "-o", "out.mlir", "--print-op-generic"], ""),
    "verify_diagnostics": Case(["mixed.mlir", "--split-input-file", "--verify-diagnostics"], ""),
    "verify_diagnostics_parse_error": Case(["malformed.mlir", "--verify-diagnostics"], ""),
    "later_chunk": Case(["later.mlir", "--split-input-file"], ""),
    "help": Case(["--help"], ""),
    "version": Case(["--version"], ""),
}


def _run(case: Case, workdir: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([BIN_DIR, env.get("PATH", "")])
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    if case.exploding:
        command = [sys.executable, "-c", EXPLODING_TW_OPT, *case.args]
    else:
        command = [os.path.join(BIN_DIR, "tw-opt"), *case.args]
    return subprocess.run(command, cwd=workdir, env=env, input=case.stdin, capture_output=True,
                          text=True, timeout=120)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("cli")
    for name, text in BAD_FILES.items():
        (path / name).write_text(text)
    return path


@pytest.fixture(scope="module")
def results(workdir: Path) -> dict[str, subprocess.CompletedProcess]:
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        futures = {name: pool.submit(_run, case, workdir)
                   for name, case in {**CASES, **OTHER_RUNS}.items()}
        return {name: f.result() for name, f in futures.items()}


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_gives_one_error_line(name: str, results) -> None:
    case, result = CASES[name], results[name]
    assert "Traceback" not in result.stderr + result.stdout, result.stderr
    assert result.returncode == case.expect_code, (result.returncode, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    (line,) = lines
    assert line.startswith("tw-opt: error: "), line
    assert case.message in line, line
    if case.location is not None:
        assert line.startswith(f"tw-opt: error: {case.location}: "), line
    assert result.stdout == "", result.stdout


def test_good_input_round_trips(results) -> None:
    result = results["good"]
    assert result.returncode == 0 and result.stderr == ""
    assert result.stdout.strip() == GOOD.strip()


def test_output_file(results, workdir: Path) -> None:
    result = results["output_file"]
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    assert '"tw.relu"(%x) : (!tw.vec<2>) -> !tw.vec<2>' in (workdir / "out.mlir").read_text()


def test_verify_diagnostics_prints_to_stdout_and_succeeds(results) -> None:
    """As in xdsl-opt: the error text goes to stdout, exit code 0; each chunk on its own."""
    result = results["verify_diagnostics"]
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    first, second = result.stdout.split("// -----\n")
    assert first.strip() == ("tw-opt: error: mixed.mlir:4:5: 'tw.clamp' %r in @main: "
                             "lo 1.0 exceeds hi -1.0")
    assert second.strip() == GOOD.strip()


def test_verify_diagnostics_does_not_hide_parse_errors(results) -> None:
    result = results["verify_diagnostics_parse_error"]
    assert result.returncode == 1
    assert result.stderr.startswith("tw-opt: error: malformed.mlir:4:21: Expected ':'")


def test_split_input_file_locates_errors_in_later_chunks(results) -> None:
    result = results["later_chunk"]
    assert result.returncode == 1
    # GOOD has 7 lines and the separator one more: line 4 of the second chunk is line 12.
    assert result.stderr.startswith("tw-opt: error: later.mlir:12:5: 'tw.clamp'"), result.stderr


@pytest.mark.parametrize("flag", ["help", "version"])
def test_help_and_version(flag: str, results) -> None:
    result = results[flag]
    assert result.returncode == 0 and "tw-opt" in result.stdout, result.stderr


def test_in_process_main_returns_exit_code(workdir: Path, capsys) -> None:
    """`main()` can be called from Python; errors raise SystemExit(1) with the same line."""
    from tw_tools.tw_opt import main

    with pytest.raises(SystemExit) as info:
        main([str(workdir / "verifier.mlir")])
    assert info.value.code == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "lo 1.0 exceeds hi -1.0" in err
    assert main([str(workdir / "good.mlir")]) == 0


def test_pass_modules_are_imported_only_when_named(workdir: Path) -> None:
    """The registry is lazy: running without tw passes imports none of their modules, and
    naming one imports just that one (pass modules may be missing or broken meanwhile)."""
    from tw_passes import TW_PASSES

    probe = textwrap.dedent("""
        import sys
        from tw_tools.tw_opt import main
        main(sys.argv[1:])
        print(sorted(m for m in sys.modules if m.startswith(("passes.", "lowering."))))
    """)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    result = subprocess.run([sys.executable, "-c", probe, "good.mlir", "-p", "cse"],
                            cwd=workdir, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    imported = ast.literal_eval(result.stdout.strip().splitlines()[-1])
    assert not set(imported) & set(TW_PASSES.values()), imported
