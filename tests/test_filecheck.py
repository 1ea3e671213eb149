"""Run every FileCheck test under tests/filecheck/ as one pytest item per `.mlir` file.

Each file's `// RUN:` lines (with `\\` continuations) are run with `%s` and `TW_ROUNDTRIP`
substituted as in `tests/filecheck/lit.cfg`, with `bash -o pipefail` semantics and the running
Python's bin directory first on PATH (so `tw-opt` and `filecheck` are this environment's).
New files in any subfolder are picked up automatically.

Speed: a RUN line that is a plain pipeline of `tw-opt` and `filecheck` commands is executed
in-process (the stages run one after another on the previous stage's output, exit status as
under pipefail), which saves about 0.6 s of interpreter start-up per command. Anything else
(other programs, redirections, `--disable-verify`, which patches xDSL globally) goes to bash.
Set TW_FILECHECK_SUBPROCESS=1 to run everything through bash, as lit does.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

FILECHECK_ROOT = Path(__file__).parent / "filecheck"
BIN_DIR = os.path.dirname(sys.executable)
ROUNDTRIP = ("tw-opt %s --split-input-file --print-op-generic | tw-opt --split-input-file "
             "| filecheck %s")
RUN_TIMEOUT_S = 120


def run_lines(path: Path) -> list[str]:
    """The file's RUN commands, continuations joined, substitutions applied."""
    commands: list[str] = []
    pending = ""
    for line in path.read_text().splitlines():
        match = re.match(r"^\s*//\s*RUN:(.*)$", line)
        if not match:
            if pending:
                raise ValueError(f"{path}: RUN line ends with '\\' but is not continued")
            continue
        body = match.group(1).strip()
        if body.endswith("\\"):
            pending += body[:-1] + " "
            continue
        commands.append(substitute(pending + body, path))
        pending = ""
    if pending:
        raise ValueError(f"{path}: last RUN line ends with '\\'")
    return commands


def substitute(command: str, path: Path) -> str:
    command = command.replace("TW_ROUNDTRIP", ROUNDTRIP)
    return command.replace("%s", shlex.quote(str(path)))


IN_PROCESS_TOOLS = ("tw-opt", "filecheck")
SHELL_OPERATORS = {"&", "&&", ";", ";;", "<", ">", ">>", "<<", "(", ")", "||", "|&", ">&", "<&"}


def split_pipeline(command: str) -> list[list[str]] | None:
    """`a x | b y` -> [[a, x], [b, y]] when every stage is tw-opt or filecheck; else None."""
    if any(ch in command for ch in "$`\n*?~"):
        return None
    lexer = shlex.shlex(command, posix=True, punctuation_chars="|&;<>()")
    lexer.whitespace_split = True
    try:
        tokens = list(lexer)
    except ValueError:
        return None
    stages: list[list[str]] = [[]]
    for token in tokens:
        if token == "|":
            stages.append([])
        elif token in SHELL_OPERATORS:
            return None
        else:
            stages[-1].append(token)
    if any(not stage or stage[0] not in IN_PROCESS_TOOLS for stage in stages):
        return None
    if any("--disable-verify" in stage for stage in stages):
        return None
    return stages


def _run_stage_in_process(argv: list[str], stdin: bytes) -> tuple[int, str, str]:
    from filecheck.main import main as filecheck_main

    from tw_tools.tw_opt import main as tw_opt_main

    out, err = io.StringIO(), io.StringIO()
    stdin_stream = io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8")
    code = 0
    saved_stdin = sys.stdin
    sys.stdin = stdin_stream
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                if argv[0] == "tw-opt":
                    code = tw_opt_main(argv[1:]) or 0
                else:
                    code = filecheck_main(argv) or 0
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        sys.stdin = saved_stdin
    return code, out.getvalue(), err.getvalue()


def _run_in_process(stages: list[list[str]], cwd: Path) -> subprocess.CompletedProcess:
    data, errors, status = b"", [], 0
    with contextlib.chdir(cwd):
        for argv in stages:
            code, out, err = _run_stage_in_process(argv, data)
            data = out.encode()
            errors.append(err)
            if code != 0:
                status = code  # pipefail: the rightmost failing stage decides
    return subprocess.CompletedProcess(stages, status, data.decode(), "".join(errors))


def run_command(command: str, cwd: Path) -> subprocess.CompletedProcess:
    stages = split_pipeline(command)
    if stages is not None and not os.environ.get("TW_FILECHECK_SUBPROCESS"):
        return _run_in_process(stages, cwd)
    return run_subprocess(command, cwd)


def run_subprocess(command: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([BIN_DIR, env.get("PATH", "")])
    return subprocess.run(["bash", "-o", "pipefail", "-c", command], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=RUN_TIMEOUT_S)


def check_file(path: Path) -> None:
    commands = run_lines(path)
    assert commands, f"{path} has no RUN lines"
    for command in commands:
        result = run_command(command, path.parent)
        if result.returncode != 0:
            pytest.fail(f"RUN line failed (exit {result.returncode}):\n  {command}\n"
                        f"--- stdout ---\n{result.stdout[-4000:]}\n"
                        f"--- stderr ---\n{result.stderr[-4000:]}", pytrace=False)


MLIR_FILES = sorted(FILECHECK_ROOT.rglob("*.mlir"))


@pytest.mark.parametrize("path", MLIR_FILES,
                         ids=[str(p.relative_to(FILECHECK_ROOT)) for p in MLIR_FILES])
def test_filecheck_file(path: Path) -> None:
    check_file(path)


def test_tools_available() -> None:
    env_path = os.pathsep.join([BIN_DIR, os.environ.get("PATH", "")])
    for tool in ("tw-opt", "filecheck"):
        assert shutil.which(tool, path=env_path), f"{tool} is not installed"


NEGATIVE_CONTROL = """\
// RUN: tw-opt %s | filecheck %s
builtin.module {
  tw.graph @main {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<2>
    %r = tw.relu %x : !tw.vec<2>
    tw.output "y" %r : !tw.vec<2>
  }
}
"""


@pytest.mark.parametrize("runner", [run_command, run_subprocess], ids=["in-process", "bash"])
@pytest.mark.parametrize("check, should_pass", [
    ("// CHECK: tw.relu %{{.*}} : !tw.vec<2>", True),
    ("// CHECK: tw.relu %{{.*}} : !tw.vec<3>", False),   # wrong width
    ("// CHECK-NOT: tw.relu", False),                     # op that is there
    ("// CHECK: tw.add", False),                          # op that is not
])
def test_negative_control(tmp_path: Path, check: str, should_pass: bool, runner) -> None:
    """The harness can fail: a wrong CHECK line makes the RUN line fail (both runners)."""
    path = tmp_path / "control.mlir"
    path.write_text(NEGATIVE_CONTROL + check + "\n")
    commands = run_lines(path)
    results = [runner(c, tmp_path) for c in commands]
    ok = all(r.returncode == 0 for r in results)
    assert ok == should_pass, [r.stderr for r in results]


def test_split_pipeline() -> None:
    assert split_pipeline("tw-opt a.mlir -p 'cse{x=1}' | filecheck a.mlir") == [
        ["tw-opt", "a.mlir", "-p", "cse{x=1}"], ["filecheck", "a.mlir"]]
    assert split_pipeline("tw-opt a.mlir > out.txt") is None
    assert split_pipeline("cat a.mlir | filecheck a.mlir") is None
    assert split_pipeline("tw-opt a.mlir --disable-verify | filecheck a.mlir") is None
    assert split_pipeline("tw-opt $X") is None


def test_pipefail_catches_a_failing_producer(tmp_path: Path) -> None:
    """A tw-opt error in front of filecheck fails the RUN line even if filecheck is happy."""
    path = tmp_path / "broken.mlir"
    path.write_text("// RUN: tw-opt %s | filecheck %s --check-prefix=NONE --allow-empty\n"
                    "builtin.module { tw.graph @main { %x = tw.bogus } }\n")
    (command,) = run_lines(path)
    assert run_command(command, tmp_path).returncode != 0
    assert run_subprocess(command, tmp_path).returncode != 0


def test_run_line_continuation(tmp_path: Path) -> None:
    path = tmp_path / "cont.mlir"
    path.write_text("// RUN: tw-opt %s \\\n// RUN:   --print-op-generic | filecheck %s\n")
    (command,) = run_lines(path)
    assert "--print-op-generic" in command and command.count(str(path)) == 2


@pytest.mark.skipif(shutil.which("lit", path=os.pathsep.join([BIN_DIR, os.environ.get(
    "PATH", "")])) is None, reason="lit not installed")
@pytest.mark.slow
def test_lit_suite() -> None:
    """The same files through lit itself (slow: repeats every RUN line)."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([BIN_DIR, env.get("PATH", "")])
    result = subprocess.run(["lit", "-q", str(FILECHECK_ROOT)], env=env, capture_output=True,
                            text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
