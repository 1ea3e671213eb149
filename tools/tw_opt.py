"""`tw-opt`: the xdsl-opt style driver for tw IR.

    tw-opt graph.mlir -p decompose,cse,fuse-linears{max-params=0} -o out.mlir
    tw-opt errors.mlir --split-input-file --verify-diagnostics
    cat graph.mlir | tw-opt - -p cse          # '-' (or no file) reads stdin

Knows the builtin and `tw` dialects, tw's own passes (`passes.get_tw_passes()`, imported only
when a pipeline names them) and the upstream xDSL passes that make sense on tw IR
(`passes.UPSTREAM_PASSES`: cse, dce, canonicalize; the other 130 upstream passes target other
dialects and at best do nothing here, some write IR tw-opt cannot read back; the Python
pipeline entry points take the same list). After each pass
the IR is verified and checked to hold only ops tw-opt can parse, so the output always reads
back in.

Error contract (tools/cli.py): every bad input (unknown pass, bad pass option, malformed or
ill-typed IR, a verifier failure, a missing or unreadable file, an output path that cannot be
written, an exception inside a pass) ends the run with exit code 1 and exactly ONE line on
stderr, `tw-opt: error: <file>:<line>:<col>: <message>` (the location
is left out when there is none), never a traceback. Verifier errors are located at the op
they are about. With `--verify-diagnostics` (verifier and pass errors) or
`--parsing-diagnostics` (parse errors) the same line goes to stdout, processing goes on with
the next `// -----` chunk, and the exit code is 0, as in xdsl-opt.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from collections.abc import Iterator, Sequence
from typing import IO

from xdsl.dialects.builtin import Builtin, ModuleOp
from xdsl.ir import Operation
from xdsl.passes import ModulePass
from xdsl.printer import Printer
from xdsl.utils.exceptions import ArgSpecParseError, DiagnosticException
from xdsl.utils.lexer import Span
from xdsl.xdsl_opt_main import xDSLOptMain

from tools.cli import (ToolError, allowed_passes, format_location, located_parse, one_line,
                       run_tool, verify_located)
from twdialect.dialect import TW

PROG = "tw-opt"

# Input extensions read as tw IR text without `--frontend mlir` ("" for a file with none, such
# as /dev/stdin or a process substitution).
MLIR_EXTENSIONS = ("mlir", "")


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


def _last_line(e: BaseException) -> str:
    """xDSL's spec errors span several lines (spec, caret, reason): keep the reason."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    return lines[-1] if lines else type(e).__name__


class TwOptMain(xDSLOptMain):
    """xDSLOptMain restricted to builtin + tw, with tw passes and one-line errors."""

    version_format = "tw-opt built on xdsl {xdsl_version}"

    def __init__(self, description: str = "tw modular optimizer driver",
                 args: Sequence[str] | None = None):
        self.op_spans: dict[Operation, Span] = {}
        self.line_offset = 0
        try:
            super().__init__(description=description, args=args)
        except ArgSpecParseError:
            # xDSL parses --target as a spec before the pipeline: `-t ''` raised its
            # ArgSpecParseError (a BaseException) from here, past every `except Exception`.
            self._refuse_target()
        if self.args.target != "mlir":
            # xDSL overrides the mlir target's options with the print flags and ignores text
            # after its name (`-t mlir,cse`): only the plain name means what it says.
            self._refuse_target()

    def _refuse_target(self):
        raise ToolError(f"bad --target {self.args.target!r}: tw-opt writes only 'mlir' text "
                        "(the default; print options are flags such as --print-op-generic)")

    # -- registration ------------------------------------------------------------------

    def register_all_dialects(self) -> None:
        self.ctx.register_dialect("builtin", lambda: Builtin)
        self.ctx.register_dialect("tw", lambda: TW)

    def register_all_passes(self) -> None:
        for name, factory in allowed_passes().items():
            self.register_pass(name, factory)

    def register_all_targets(self) -> None:
        # Only MLIR text: the other upstream targets print other dialects' assembly.
        super().register_all_targets()
        for name in [n for n in self.available_targets if n != "mlir"]:
            del self.available_targets[name]

    def register_all_frontends(self) -> None:
        def parse_mlir(stream: IO[bytes]) -> ModuleOp:
            text = stream.read()
            if isinstance(text, bytes):
                text = text.decode("utf-8", errors="replace")
            return located_parse(self.ctx, text, self.get_input_name(), self.op_spans,
                                 self.line_offset, not self.args.no_implicit_module)

        self.available_frontends["mlir"] = parse_mlir

    def setup_pipeline(self) -> None:
        try:
            super().setup_pipeline()
        except ArgSpecParseError as e:
            raise ToolError(f"bad pass pipeline {self.args.passes!r}: {_last_line(e)}") from None
        except Exception as e:  # noqa: BLE001 - xDSL raises bare ValueErrors for spec problems
            message = one_line(e)
            if message.startswith("Unrecognized passes"):
                message += f" (tw-opt knows: {', '.join(sorted(self.available_passes))})"
            raise ToolError(f"bad pass pipeline {self.args.passes!r}: {message}") from None

    def register_all_arguments(self, arg_parser: argparse.ArgumentParser) -> None:
        super().register_all_arguments(arg_parser)

        def usage_error(message: str):
            raise ToolError(f"{message} (see {PROG} --help)")

        # argparse would print the usage block and exit 2; keep the one-line contract.
        arg_parser.error = usage_error  # type: ignore[method-assign]

    # -- input and output -----------------------------------------------------------------

    def get_input_stream(self):
        if self.args.input_file == "-":  # stdin, as for tw-stats and most Unix tools
            self.args.input_file = None
        stream, extension = super().get_input_stream()
        if extension in MLIR_EXTENSIONS and not self.args.frontend:
            extension = "mlir"
        return stream, extension

    def prepare_input(self):
        try:
            return super().prepare_input()
        except OSError as e:
            raise ToolError(f"cannot read {e.filename or self.get_input_name()!s}: "
                            f"{e.strerror or e}") from None
        except ValueError as e:
            if not str(e).startswith("Unrecognized file extension"):
                raise
            given = f"--frontend {self.args.frontend}" if self.args.frontend else \
                f"the extension of {self.get_input_name()}"
            raise ToolError(f"cannot tell the input format from {given}: tw-opt reads tw IR "
                            "text; name the file *.mlir or pass --frontend mlir") from None

    def prepare_output(self) -> IO[str]:
        path = self.args.output_file
        try:
            return super().prepare_output()
        except OSError as e:
            folder = os.path.dirname(path) or "."
            hint = (f" (the folder {folder} does not exist: create it first)"
                    if not os.path.isdir(folder) else "")
            raise ToolError(f"cannot write {path}: {e.strerror or e}{hint}") from None

    # -- running ----------------------------------------------------------------------

    def parse_chunk(self, chunk, file_extension: str, start_offset: int = 0):
        self.line_offset = start_offset
        return super().parse_chunk(chunk, file_extension, start_offset)

    def verify(self, module: ModuleOp, after: ModulePass | None) -> None:
        """Verify, locating the failing op; after a pass, also check that every op it left is
        one tw-opt can parse (so the printed output always reads back in)."""
        verify_located(module, self.op_spans, self.line_offset,
                       after.name if after is not None else None)
        if after is None:
            return
        for op in module.walk():
            if self.ctx.get_optional_op(op.name) is None:
                raise ToolError(f"pass '{after.name}' left a '{op.name}' op, which is not tw IR "
                                "(tw-opt could not read its output back)", diagnostic=True)

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
                text = one_line(e) or type(e).__name__
                if not isinstance(e, (ValueError, DiagnosticException)):
                    text = f"{type(e).__name__}: {text}"
                culprit = getattr(e, "op", None)
                span = self.op_spans.get(culprit) if culprit is not None else None
                raise ToolError(f"pass '{module_pass.name}' failed: {text}",
                                format_location(span, self.line_offset) if span else None,
                                diagnostic=True) from None
            if self.args.time_passes:
                print(f"Pass {module_pass.name} took {time.perf_counter() - started} seconds")
            if check:
                self.verify(prog, module_pass)
            if self.args.print_between_passes and i + 1 < len(passes):
                print(f"IR after {module_pass.name}:")
                Printer(stream=sys.stdout).print_op(prog)
                print("\n\n\n")

    def run(self) -> None:
        chunks, file_extension = self.prepare_input()
        output = self.prepare_output()
        try:
            for i, (chunk, offset) in enumerate(chunks):
                try:
                    if i > 0:
                        output.write("// -----\n")
                    self.line_offset = offset
                    self.op_spans.clear()
                    module = self.parse_chunk(chunk, file_extension, offset)
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
    """Console entry point: 0 on success; on any error one stderr line and SystemExit(1)."""
    return run_tool(PROG, lambda: TwOptMain(args=args).run())


if __name__ == "__main__":
    raise SystemExit(main())
