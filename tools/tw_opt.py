"""`tw-opt`: xDSL's own driver (`xDSLOptMain`, as `xdsl-opt`) on tw IR.

    tw-opt graph.mlir -p decompose,cse,fuse-linears{max-params=0} -o out.mlir
    tw-opt errors.mlir --split-input-file --verify-diagnostics
    cat graph.mlir | tw-opt - -p cse          # '-' (or no file) reads stdin

Knows the builtin and `tw` dialects, tw's own passes (imported only when a pipeline names
them) and the upstream xDSL passes that make sense on tw IR (`passes.UPSTREAM_PASSES`: cse,
dce, canonicalize; the other 130 upstream passes target other dialects and at best do nothing
here, some write IR tw-opt cannot read back; the Python pipeline entry points take the same
list, `passes.get_all_passes()`). After each pass the IR is verified and checked to hold only
ops tw-opt can parse, so the output always reads back in. `TW_UNIVERSE` gives stock `xdsl-opt`
the same dialect and tw's passes (the `xdsl.universe` entry point in pyproject.toml).

Error contract (tools/cli.py): every bad input (unknown pass, bad pass option, malformed or
ill-typed IR, a verifier failure, a missing or unreadable file, an output path that cannot be
written, an exception inside a pass) ends the run with exit code 1 and exactly ONE line on
stderr, `tw-opt: error: <file>:<line>:<col>: <message>` (the location is left out when there
is none), never a traceback. Verifier and pass errors are located at the op they are about.
With `--verify-diagnostics` (verifier and pass errors) or `--parsing-diagnostics` (parse
errors) the same line goes to stdout, processing goes on with the next `// -----` chunk, and
the exit code is 0, as in xdsl-opt. On a graph of 10^4 ops or more, a progress bar (passes
run, the sequential-scope search's budget spent) is drawn on stderr while stdout is a terminal;
`--quiet` turns it off. Each method below overrides xDSL's only where xDSL's
cannot keep that contract, and says why.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from typing import IO

from xdsl.dialects.builtin import Builtin, ModuleOp
from xdsl.passes import ModulePass, PassPipeline
from xdsl.printer import Printer
from xdsl.universe import Universe
from xdsl.utils.exceptions import ArgSpecParseError, DiagnosticException
from xdsl.xdsl_opt_main import xDSLOptMain

from tw_passes import UPSTREAM_PASSES
from tw_tools.cli import (SourceMap, ToolError, add_quiet, allowed_passes, last_line,
                          located_parse, one_line, progress_bar, run_tool, verify_located,
                          version_line)
from twdialect.dialect import TW

PROG = "tw-opt"

# Input extensions read as tw IR text without `--frontend mlir` ("" for a file with none, such
# as /dev/stdin or a process substitution).
MLIR_EXTENSIONS = ("mlir", "")

# The tw dialect and tw's own passes, for stock `xdsl-opt` (which has the upstream ones).
TW_UNIVERSE = Universe(
    all_dialects={"tw": lambda: TW},
    all_passes={name: factory for name, factory in allowed_passes().items()
                if name not in UPSTREAM_PASSES})


class TwOptMain(xDSLOptMain):
    """xDSLOptMain restricted to builtin + tw, with tw passes and one-line errors."""

    # `--version` (xDSL's own action, which fills in {xdsl_version}): `tw-opt 0.2.0 (xdsl ...)`.
    version_format = version_line(PROG) + " (xdsl {xdsl_version})"

    def __init__(self, description: str = "tw modular optimizer driver",
                 args: Sequence[str] | None = None):
        self.source = SourceMap("stdin")  # where the ops of the chunk being processed start
        self.running: ModulePass | None = None  # the pass being applied, for its errors
        self.started = time.perf_counter()  # when it started, for --time-passes
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

    # -- registration: only what keeps tw IR -----------------------------------------------

    def register_all_dialects(self) -> None:
        # xdsl-opt registers every dialect it knows, whose ops tw passes cannot handle.
        self.ctx.register_dialect("builtin", lambda: Builtin)
        for name, factory in TW_UNIVERSE.all_dialects.items():
            self.ctx.register_dialect(name, factory)

    def register_all_passes(self) -> None:
        for name, factory in allowed_passes().items():
            self.register_pass(name, factory)

    def register_all_targets(self) -> None:
        # Only MLIR text: the other upstream targets print other dialects' assembly.
        super().register_all_targets()
        for name in [n for n in self.available_targets if n != "mlir"]:
            del self.available_targets[name]

    def register_all_frontends(self) -> None:
        # xDSL's frontend records no op locations, and stops at the first parse error with a
        # multi-line message; this one records where each op starts, for later errors.
        def parse_mlir(stream: IO[bytes]) -> ModuleOp:
            text = stream.read()
            if isinstance(text, bytes):
                text = text.decode("utf-8", errors="replace")
            return located_parse(self.ctx, text, self.source, not self.args.no_implicit_module)

        self.available_frontends["mlir"] = parse_mlir

    def register_all_arguments(self, arg_parser: argparse.ArgumentParser) -> None:
        super().register_all_arguments(arg_parser)

        def usage_error(message: str):
            raise ToolError(f"{message} (see {PROG} --help)")

        # argparse would print the usage block and exit 2; keep the one-line contract.
        arg_parser.error = usage_error  # type: ignore[method-assign]
        add_quiet(arg_parser)

    # -- the pipeline: one-line errors, located verification --------------------------------

    def setup_pipeline(self) -> None:
        try:
            super().setup_pipeline()
        except ArgSpecParseError as e:
            raise ToolError(f"bad pass pipeline {self.args.passes!r}: {last_line(e)}") from None
        except Exception as e:  # noqa: BLE001 - xDSL raises bare ValueErrors for spec problems
            message = one_line(e)
            if message.startswith("Unrecognized passes"):
                message += f" (tw-opt knows: {', '.join(sorted(self.available_passes))})"
            raise ToolError(f"bad pass pipeline {self.args.passes!r}: {message}") from None
        # xDSL's callback between passes verifies with `module.verify()`, whose error holds
        # the whole module and no location; tw-opt's names and locates the failing op.
        self.pipeline = PassPipeline(self.pipeline.passes, self.between_passes)

    def between_passes(self, done: ModulePass | None, module: ModuleOp,
                       upcoming: ModulePass | None) -> None:
        """What xDSL's callback does (timing, verifying, printing), errors located."""
        if self.args.time_passes and done is not None:
            print(f"Pass {done.name} took {time.perf_counter() - self.started} seconds")
        if not self.args.disable_verify:
            self.verify(module, done)
        if done is not None and upcoming is not None and self.args.print_between_passes:
            print(f"IR after {done.name}:")
            Printer(stream=sys.stdout).print_op(module)
            print("\n\n\n")
        self.running = upcoming
        self.started = time.perf_counter()
        self._report_progress(done)

    def _report_progress(self, done: ModulePass | None) -> None:
        """The "passes" stage for the progress bar: `done` is None before a chunk's first
        pass (`apply_passes` has loaded the progress module)."""
        from tw_lowering.progress import report

        self.passes_run = 0 if done is None else self.passes_run + 1
        report("passes", self.passes_run, len(self.pipeline.passes))

    def verify(self, module: ModuleOp, after: ModulePass | None) -> None:
        """Verify, locating the failing op; after a pass, also check that every op it left is
        one tw-opt can parse (so the printed output always reads back in)."""
        verify_located(module, self.source, after.name if after is not None else None)
        if after is None:
            return
        for op in module.walk():
            if self.ctx.get_optional_op(op.name) is None:
                raise ToolError(f"pass '{after.name}' left a '{op.name}' op, which is not tw IR "
                                "(tw-opt could not read its output back)", diagnostic=True)

    def apply_passes(self, prog: ModuleOp) -> None:
        # A pass may raise anything; xDSL lets it escape as a traceback.
        try:
            with progress_bar(self.args.quiet, prog):
                super().apply_passes(prog)
        except ToolError:
            raise  # a located verifier error from between_passes
        except Exception as e:  # noqa: BLE001 - a failing pass must not print a traceback
            text = one_line(e) or type(e).__name__
            if not isinstance(e, (ValueError, DiagnosticException)):
                text = f"{type(e).__name__}: {text}"
            # `e.op`: a TwError's own, or the op xDSL's pattern driver reported it at.
            name = self.running.name if self.running is not None else "?"
            raise ToolError(f"pass '{name}' failed: {text}",
                            self.source.locate(getattr(e, "op", None)),
                            diagnostic=True) from None

    # -- input, output and the loop over chunks ----------------------------------------------

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

    def parse_chunk(self, chunk, file_extension: str, start_offset: int = 0):
        self.source = SourceMap(self.get_input_name(), start_offset)
        return super().parse_chunk(chunk, file_extension, start_offset)

    def run(self) -> None:
        """xDSL's loop over `// -----` chunks, with a chunk's error as one located line.

        xDSL's `run` prints the exception itself under the diagnostics flags (a multi-line
        diagnostic with the module in it) and lets other exceptions escape; tw-opt's errors are
        ToolErrors, printed as one line on stdout under the flag that covers them, else
        raised (tools/cli.py prints them on stderr)."""
        chunks, file_extension = self.prepare_input()
        output = self.prepare_output()
        try:
            for i, (chunk, offset) in enumerate(chunks):
                with chunk:
                    if i > 0:
                        output.write("// -----\n")
                    try:
                        module = self.parse_chunk(chunk, file_extension, offset)
                        if module is not None:
                            self.apply_passes(module)
                            output.write(self.output_resulting_program(module))
                        output.flush()
                    except ToolError as e:
                        if not (self.args.verify_diagnostics if e.diagnostic
                                else self.args.parsing_diagnostics):
                            raise
                        print(f"{PROG}: error: {e.line()}", flush=True)
        finally:
            if output is not sys.stdout:
                output.close()


def main(args: Sequence[str] | None = None) -> int:
    """Console entry point: 0 on success; on any error one stderr line and SystemExit(1)."""
    return run_tool(PROG, lambda: TwOptMain(args=args).run())


if __name__ == "__main__":
    raise SystemExit(main())
