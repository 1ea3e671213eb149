"""`tw-opt`: the xdsl-opt style driver for tw IR.

    tw-opt graph.mlir -p decompose,cse,fuse-linears{max-params=0} -o out.mlir
    tw-opt errors.mlir --split-input-file --verify-diagnostics

Knows the builtin and `tw` dialects, the upstream xDSL passes (cse, dce, canonicalize, ...)
and tw's own passes (`passes.get_all_passes()`, imported only when a pipeline names them).

Error contract: every bad input (unknown pass, bad pass option, malformed or ill-typed IR, a
verifier failure, a missing file, an exception inside a pass) ends the run with exit code 1
and exactly ONE line on stderr, `tw-opt: error: <file>:<line>:<col>: <message>` (the location
is left out when there is none), never a traceback. Verifier errors are located at the op
they are about. With `--verify-diagnostics` (verifier and pass errors) or
`--parsing-diagnostics` (parse errors) the same line goes to stdout, processing goes on with
the next `// -----` chunk, and the exit code is 0, as in xdsl-opt.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Iterator, Sequence
from typing import IO

from xdsl.context import Context
from xdsl.dialects.builtin import Builtin, ModuleOp
from xdsl.ir import Operation
from xdsl.parser import Parser
from xdsl.passes import ModulePass
from xdsl.printer import Printer
from xdsl.utils.exceptions import ArgSpecParseError, DiagnosticException, ParseError
from xdsl.utils.lexer import Span
from xdsl.xdsl_opt_main import xDSLOptMain

import twdialect  # noqa: F401 - applies the parser speed-up before any parsing
from twdialect.dialect import TW, describe

PROG = "tw-opt"


class ToolError(Exception):
    """A user-facing failure: `location` is "file:line:col" or None."""

    def __init__(self, message: str, location: str | None = None, diagnostic: bool = False):
        super().__init__(message)
        self.message = message
        self.location = location
        # True for verifier/pass failures (reported on stdout under --verify-diagnostics).
        self.diagnostic = diagnostic

    def line(self) -> str:
        text = " ".join(self.message.split("\n")).strip()
        return f"{self.location}: {text}" if self.location else text


def _one_line(text: str) -> str:
    return " ".join(part.strip() for part in str(text).splitlines() if part.strip())


class LocatingParser(Parser):
    """A Parser that remembers where each op starts, so later errors can point at it."""

    def __init__(self, ctx: Context, text: str, name: str, op_spans: dict[Operation, Span]):
        super().__init__(ctx, text, name)
        self.op_spans = op_spans
        self.open_ops: list[Span] = []  # start spans of ops being parsed, innermost last

    def parse_operation(self) -> Operation:
        start = self._current_token.span
        self.open_ops.append(start)
        op = super().parse_operation()
        self.open_ops.pop()
        self.op_spans[op] = start
        return op


def _format_location(span: Span, line_offset: int) -> str:
    loc = span.get_location()
    return f"{loc.file}:{loc.line + line_offset}:{loc.col}"


@contextlib.contextmanager
def _record_failing_op() -> Iterator[None]:
    """While a pass runs, note on each diagnosed exception which op xDSL reported it at.

    The pattern driver turns an exception inside a pattern into `op.emit_error(...)`, which
    re-raises the original exception without saying which op failed; keeping that op lets the
    error point at its source line."""
    original = Operation.emit_error

    def emit_error(self: Operation, message: str, underlying_error: Exception):
        if getattr(underlying_error, "op", None) is None:
            with contextlib.suppress(AttributeError):
                underlying_error.op = self  # type: ignore[attr-defined]
        return original(self, message, underlying_error)

    Operation.emit_error = emit_error  # type: ignore[method-assign]
    try:
        yield
    finally:
        Operation.emit_error = original  # type: ignore[method-assign]


class TwOptMain(xDSLOptMain):
    """xDSLOptMain restricted to builtin + tw, with tw passes and one-line errors."""

    version_format = "tw-opt built on xdsl {xdsl_version}"

    def __init__(self, description: str = "tw modular optimizer driver",
                 args: Sequence[str] | None = None):
        self.op_spans: dict[Operation, Span] = {}
        self.line_offset = 0
        super().__init__(description=description, args=args)

    # -- registration ------------------------------------------------------------------

    def register_all_dialects(self) -> None:
        self.ctx.register_dialect("builtin", lambda: Builtin)
        self.ctx.register_dialect("tw", lambda: TW)

    def register_all_passes(self) -> None:
        from passes import get_all_passes

        for name, factory in get_all_passes().items():
            self.register_pass(name, factory)

    def register_all_frontends(self) -> None:
        def parse_mlir(stream: IO[bytes]) -> ModuleOp:
            text = stream.read()
            if isinstance(text, bytes):
                text = text.decode("utf-8", errors="replace")
            if not any(line.strip() and not line.lstrip().startswith("//")
                       for line in text.splitlines()):
                # xDSL's own message here is "Could not parse entire input!".
                raise ToolError("no operations in this input (an empty file or chunk)",
                                f"{self.get_input_name()}:{self.line_offset + 1}:1")
            parser = LocatingParser(self.ctx, text, self.get_input_name(), self.op_spans)
            try:
                return parser.parse_module(not self.args.no_implicit_module)
            except ParseError:
                raise
            except Exception as e:  # noqa: BLE001 - attribute verifiers raise while parsing
                if not parser.open_ops:
                    raise ToolError(_one_line(e)) from None
                where = _format_location(parser.open_ops[-1], self.line_offset)
                raise ToolError(_one_line(e), where) from None

        self.available_frontends["mlir"] = parse_mlir

    def setup_pipeline(self) -> None:
        try:
            super().setup_pipeline()
        except ArgSpecParseError as e:
            detail = str(e).splitlines()[-1].strip() if str(e).splitlines() else ""
            raise ToolError(f"bad pass pipeline {self.args.passes!r}: {detail}") from None
        except Exception as e:  # noqa: BLE001 - xDSL raises bare ValueErrors for spec problems
            raise ToolError(f"bad pass pipeline {self.args.passes!r}: {_one_line(e)}") from None

    def register_all_arguments(self, arg_parser: argparse.ArgumentParser) -> None:
        super().register_all_arguments(arg_parser)

        def usage_error(message: str):
            raise ToolError(f"{message} (see {PROG} --help)")

        # argparse would print the usage block and exit 2; keep the one-line contract.
        arg_parser.error = usage_error  # type: ignore[method-assign]

    # -- running ----------------------------------------------------------------------

    def parse_chunk(self, chunk, file_extension: str, start_offset: int = 0):
        self.line_offset = start_offset
        return super().parse_chunk(chunk, file_extension, start_offset)

    def locate(self, op: Operation | None) -> str | None:
        span = self.op_spans.get(op) if op is not None else None
        return _format_location(span, self.line_offset) if span is not None else None

    def verify(self, module: ModuleOp, after: ModulePass | None) -> None:
        """Verify like `module.verify()`, but report the op that failed and where it is.

        Children are checked before their parent, as `Operation.verify` does."""
        for op in module.walk(region_first=True):
            try:
                op.verify(verify_nested_ops=False)
            except Exception as e:  # noqa: BLE001 - any verifier failure is a user error
                culprit = getattr(e, "op", None) or op
                message = _one_line(e)
                if not message.startswith(f"'{culprit.name}'"):
                    message = f"{describe(culprit)}: {message}"
                if after is not None:
                    message = f"IR after pass '{after.name}' does not verify: {message}"
                raise ToolError(message, self.locate(culprit), diagnostic=True) from None

    def apply_passes(self, prog: ModuleOp) -> None:
        """Verify the input, then run each pass and verify its result."""
        check = not self.args.disable_verify
        if check:
            self.verify(prog, None)
        passes = self.pipeline.passes
        for i, module_pass in enumerate(passes):
            started = time.perf_counter()
            try:
                with _record_failing_op():
                    module_pass.apply(self.ctx, prog)
            except (KeyboardInterrupt, SystemExit):
                raise
            except Exception as e:  # noqa: BLE001 - a failing pass must not print a traceback
                text = _one_line(e) or type(e).__name__
                if not isinstance(e, (ValueError, DiagnosticException)):
                    text = f"{type(e).__name__}: {text}"
                raise ToolError(f"pass '{module_pass.name}' failed: {text}",
                                self.locate(getattr(e, "op", None)), diagnostic=True) from None
            if self.args.time_passes:
                print(f"Pass {module_pass.name} took {time.perf_counter() - started} seconds")
            if check:
                self.verify(prog, module_pass)
            if self.args.print_between_passes and i + 1 < len(passes):
                print(f"IR after {module_pass.name}:")
                Printer(stream=sys.stdout).print_op(prog)
                print("\n\n\n")

    def run(self) -> None:
        try:
            chunks, file_extension = self.prepare_input()
        except OSError as e:
            raise ToolError(f"cannot read {e.filename or self.get_input_name()!s}: "
                            f"{e.strerror or e}") from None
        output = self.prepare_output()
        try:
            for i, (chunk, offset) in enumerate(chunks):
                try:
                    if i > 0:
                        output.write("// -----\n")
                    self.line_offset = offset
                    self.op_spans.clear()
                    try:
                        module = self.parse_chunk(chunk, file_extension, offset)
                    except ParseError as e:
                        raise ToolError(_one_line(e.msg),
                                        _format_location(e.span, offset)) from None
                    if module is not None:
                        self.apply_passes(module)
                        output.write(self.output_resulting_program(module))
                    output.flush()
                except ToolError as e:
                    reported = (self.args.verify_diagnostics if e.diagnostic
                                else self.args.parsing_diagnostics)
                    if not reported:
                        raise
                    print(f"{PROG}: error: {e.line()}", flush=True)
                finally:
                    chunk.close()
        finally:
            if output is not sys.stdout:
                output.close()


def main(args: Sequence[str] | None = None) -> int:
    """Console entry point: returns (and exits with) 0 on success, 1 on any error."""
    try:
        TwOptMain(args=args).run()
    except ToolError as e:
        _report(e.line())
        sys.exit(1)
    except SystemExit:
        raise  # --help and --version exit 0 through argparse
    except KeyboardInterrupt:
        _report("interrupted")
        sys.exit(130)
    except BaseException as e:  # noqa: BLE001 - never show a traceback to the user
        _report(f"internal error: {type(e).__name__}: {_one_line(e)}")
        sys.exit(1)
    return 0


def _report(line: str) -> None:
    sys.stdout.flush()
    print(f"{PROG}: error: {line}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
