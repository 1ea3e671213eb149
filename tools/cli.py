"""What tw-opt, tw-stats and tw-run share: the one-line error contract and a located parse.

The contract: a run either succeeds (exit 0) or prints exactly ONE line on stderr,
`<tool>: error: [<file>:<line>:<col>: ]<what is wrong and what to do>`, and exits 1 (130 when
interrupted). No traceback, usage block, warning or internal exception reaches the user; an
exception that is not a deliberate error (a `TwError`, `ToolError` included, or an xDSL
ParseError) still gives one line, marked `internal error`, so a bug is visible without a
traceback.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import math
import re
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation
from xdsl.parser import Parser
from xdsl.utils.exceptions import ParseError
from xdsl.utils.lexer import Span

import twdialect  # noqa: F401 - applies tw's xDSL patches (twdialect/xdsl_compat.py) first
from twdialect import __version__
from twdialect.errors import TwError

# A word longer than this in a message (a 10^5-character identifier echoed back by the parser)
# is shortened, so that the one error line stays readable.
LONG_WORD = 80


class ToolError(TwError):
    """A failure a tool finds itself (a bad argument, an unreadable file, a parse or verifier
    error): `location` is "file:line:col" or None."""

    def __init__(self, message: str, location: str | None = None, diagnostic: bool = False):
        super().__init__(message)
        self.message = message
        self.location = location
        # True for verifier/pass failures (tw-opt reports them on stdout under
        # --verify-diagnostics).
        self.diagnostic = diagnostic

    def line(self) -> str:
        return error_line(self)


def error_line(e: BaseException) -> str:
    """A deliberate error as the one line a tool prints: "[file:line:col: ]message"."""
    text = one_line(e.msg if isinstance(e, ParseError) else e) or type(e).__name__
    location = getattr(e, "location", None)
    return f"{location}: {text}" if location else text


def last_line(e: BaseException) -> str:
    """xDSL's pipeline spec errors span several lines (spec, caret, reason): the reason."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    return lines[-1] if lines else type(e).__name__


def _shorten(match: re.Match) -> str:
    word = match.group(0)
    return f"{word[:40]}...{word[-12:]} ({len(word)} characters)"


def one_line(text: object) -> str:
    """`text` on one line: its lines joined, whitespace collapsed, very long words shortened."""
    joined = " ".join(str(text).split())
    return re.sub(r"\S{%d,}" % (LONG_WORD + 1), _shorten, joined)


# -- arguments -----------------------------------------------------------------------------


class ArgumentParser(argparse.ArgumentParser):
    """argparse that reports a usage error as a ToolError (one line, exit 1) instead of
    printing the usage block and exiting 2; `--help` still prints and exits 0."""

    # Appended to "unrecognized arguments" errors (e.g. how to pass a prompt starting with '-').
    unrecognized_hint = ""

    def error(self, message: str):  # noqa: D401 - argparse's hook
        if message.startswith("unrecognized arguments") and self.unrecognized_hint:
            message += f" ({self.unrecognized_hint})"
        raise ToolError(f"{message} (see {self.prog} --help)")


def version_line(prog: str) -> str:
    """What `prog --version` prints: the tool's name and tw's version (twdialect/_version.py),
    e.g. `tw-run 0.2.0`."""
    return f"{prog} {__version__}"


def add_version(parser: argparse.ArgumentParser, prog: str) -> None:
    """`--version`: print `version_line(prog)` on stdout and exit 0 (before any other argument
    is checked, so it needs none of the tool's required ones)."""
    parser.add_argument("--version", action="version", version=version_line(prog),
                        help="print the tool's name and tw's version, then exit")


def positive_float(option: str) -> Callable[[str], float]:
    """An argparse `type` for a finite number above 0, naming `option`."""

    def convert(text: str) -> float:
        try:
            value = float(text.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"takes a number, got {text!r}") from None
        if not (math.isfinite(value) and value > 0):
            raise argparse.ArgumentTypeError(f"must be a number above 0, got {text.strip()}")
        return value

    convert.__name__ = option
    return convert


def bounded_int(option: str, minimum: int, maximum: int) -> Callable[[str], int]:
    """An argparse `type` for a whole number in [minimum, maximum], naming `option`."""

    def convert(text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"takes a whole number, got {text!r}") from None
        if not minimum <= value <= maximum:
            raise argparse.ArgumentTypeError(
                f"must be a whole number in [{minimum}, {maximum}], got {value}")
        return value

    convert.__name__ = option  # argparse names the type in some messages
    return convert


def protect_dash_words(argv: Sequence[str], value_options: Sequence[str] = ()
                       ) -> tuple[list[str], dict[str, str]]:
    """Let a positional argument start with '-' where it cannot be an option.

    argparse takes `-5+3=` for an unknown option; a word that starts with '-' followed by
    something other than a letter or '-' (no option is spelt so) is swapped for a placeholder
    that argparse reads as positional, and swapped back by `restore`. The value after one of
    `value_options` is left to argparse (`--d -3` is refused as a width, by the option's type),
    and so is everything after `--` (argparse reads it as positional already)."""
    out: list[str] = []
    saved: dict[str, str] = {}
    for i, word in enumerate(argv):
        if word == "--":
            out.extend(argv[i:])
            break
        takes_value = i > 0 and argv[i - 1] in value_options
        if len(word) > 1 and word[0] == "-" and not (word[1].isalpha() or word[1] == "-") \
                and not takes_value:
            # A NUL cannot occur in a real command-line argument, so this cannot collide.
            key = f"\0{len(saved)}"
            saved[key] = word
            word = key
        out.append(word)
    return out, saved


def restore(value, saved: dict):
    """Undo `protect_dash_words` on one parsed value (or a list of them)."""
    if isinstance(value, list):
        return [saved.get(v, v) for v in value]
    return saved.get(value, value)


# -- reading and parsing -------------------------------------------------------------------


def read_text(path: str) -> str:
    """The text of `path` ('-' is stdin), decoded as UTF-8 (undecodable bytes replaced, so
    they fail to parse at their location instead of failing to read)."""
    try:
        if path == "-":
            data = sys.stdin.buffer.read()
        else:
            with open(path, "rb") as f:
                data = f.read()
    except OSError as e:
        reason = e.strerror or type(e).__name__
        raise ToolError(f"cannot read {path}: {reason}") from None
    return data.decode("utf-8", errors="replace")


@dataclass
class SourceMap:
    """Where the ops parsed from one text start: `name` is its file, `line_offset` the lines
    before it there (a `// -----` chunk starts mid-file). Errors found later, by a verifier or
    a pass, point at their op's line through it."""

    name: str
    line_offset: int = 0
    spans: dict[Operation, Span] = field(default_factory=dict)

    def where(self, span: Span) -> str:
        loc = span.get_location()
        return f"{loc.file}:{loc.line + self.line_offset}:{loc.col}"

    def locate(self, op: Operation | None) -> str | None:
        """"file:line:col" of `op`, or None for an op that was not parsed from this text."""
        span = self.spans.get(op) if op is not None else None
        return self.where(span) if span is not None else None

    def positions(self) -> dict[Operation, tuple[int, int]]:
        """(line, column) of every op parsed from this text, as `locate` gives them, found
        in one pass over the text (`locate` counts the lines before its op each time)."""
        if not self.spans:
            return {}
        text = next(iter(self.spans.values())).input.content
        newlines = [m.start() for m in re.finditer("\n", text)]
        out = {}
        for op, span in self.spans.items():
            k = bisect.bisect_left(newlines, span.start)  # the lines before the op's start
            line_start = newlines[k - 1] + 1 if k else 0
            out[op] = (k + 1 + span.line_offset + self.line_offset, span.start - line_start + 1)
        return out


class LocatingParser(Parser):
    """A Parser that records where each op starts in a SourceMap."""

    def __init__(self, ctx: Context, text: str, source: SourceMap):
        super().__init__(ctx, text, source.name)
        self.source = source
        self.open_ops: list[Span] = []  # start spans of ops being parsed, innermost last

    def parse_operation(self) -> Operation:
        start = self._current_token.span
        self.open_ops.append(start)
        op = super().parse_operation()
        self.open_ops.pop()
        self.source.spans[op] = start
        return op


def located_parse(ctx: Context, text: str, source: SourceMap,
                  implicit_module: bool = True) -> ModuleOp:
    """Parse `text`, recording op locations in `source`; every failure is a ToolError located
    where possible (a parse error where it is, an attribute verifier failure at the op being
    parsed)."""
    if not any(line.strip() and not line.lstrip().startswith("//")
               for line in text.splitlines()):
        # xDSL's own message here is "Could not parse entire input!".
        raise ToolError("no operations in this input (an empty file or chunk)",
                        f"{source.name}:{source.line_offset + 1}:1")
    parser = None
    try:
        parser = LocatingParser(ctx, text, source)
        return parser.parse_module(implicit_module)
    except ParseError as e:
        raise ToolError(e.msg, source.where(e.span)) from None
    except Exception as e:  # noqa: BLE001 - attribute verifiers raise while parsing
        where = (source.where(parser.open_ops[-1])
                 if parser is not None and parser.open_ops else None)
        raise ToolError(one_line(e) or type(e).__name__, where) from None


def verify_located(module: ModuleOp, source: SourceMap, after: str | None = None) -> None:
    """Verify like `module.verify()`, but report the op that failed and where it is.

    Children are checked before their parent, as `Operation.verify` does. `after` names the
    pass whose result this is, for the message."""
    from twdialect.dialect import describe

    for op in module.walk(region_first=True):
        try:
            op.verify(verify_nested_ops=False)
        except Exception as e:  # noqa: BLE001 - any verifier failure is a user error
            culprit = getattr(e, "op", None) or op
            message = one_line(e)
            if not message.startswith(f"'{culprit.name}'"):
                message = f"{describe(culprit)}: {message}"
            if after is not None:
                message = f"IR after pass '{after}' does not verify: {message}"
            raise ToolError(message, source.locate(culprit), diagnostic=True) from None


def parse_file(path: str, source: SourceMap | None = None) -> ModuleOp:
    """Read, parse and verify the tw text in `path` ('-' for stdin), errors located; `source`,
    if given, records where each op starts (a new one otherwise)."""
    source = source or SourceMap("stdin" if path == "-" else path)
    module = located_parse(twdialect.make_context(), read_text(path), source)
    verify_located(module, source)
    return module


# -- running -------------------------------------------------------------------------------


@contextlib.contextmanager
def no_warnings(prog: str | None = None) -> Iterator[None]:
    """Keep library warnings (numpy's RuntimeWarning on an overflowing estimate, xDSL's
    deprecations) off stderr: the one error line must be the only line there. tw's own
    compile-time warnings (a PrecisionWarning: an output float32 cannot be shown to keep)
    are the user's to read: each is one `prog: warning: ...` line."""
    from tw_lowering.precision import PrecisionWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("ignore")
        warnings.simplefilter("always", PrecisionWarning)
        try:
            yield
        finally:
            if prog is not None:
                said = set()
                for w in caught:
                    line = one_line(w.message)
                    if issubclass(w.category, PrecisionWarning) and line not in said:
                        said.add(line)
                        with contextlib.suppress(Exception):
                            print(f"{prog}: warning: {line}", file=sys.stderr, flush=True)


def report(prog: str, line: str) -> None:
    with contextlib.suppress(Exception):
        sys.stdout.flush()
    print(f"{prog}: error: {line}", file=sys.stderr, flush=True)


def run_tool(prog: str, body: Callable[[], int | None]) -> int:
    """Run a tool's body under the contract: returns 0 on success; on any error prints one
    line and raises SystemExit(1) (130 when interrupted)."""
    try:
        with no_warnings(prog):
            code = body()
        sys.stdout.flush()
        return code or 0
    except SystemExit:
        raise  # --help and --version exit 0 through argparse
    except (TwError, ParseError) as e:
        report(prog, error_line(e))
    except KeyboardInterrupt:
        report(prog, "interrupted")
        raise SystemExit(130) from None
    except BrokenPipeError:
        # The reader went away (`| head`): nothing left to tell it; keep the exit code honest.
        with contextlib.suppress(Exception):
            sys.stdout = None  # no flush of a dead pipe at exit
        raise SystemExit(1) from None
    except MemoryError:
        report(prog, "out of memory (the input or the requested geometry is too large)")
    except BaseException as e:  # noqa: BLE001 - never show a traceback to the user
        report(prog, f"internal error: {type(e).__name__}: {one_line(e)}")
    raise SystemExit(1)


# -- progress ------------------------------------------------------------------------------


def add_quiet(parser: argparse.ArgumentParser) -> None:
    """`--quiet`: no progress bar. The bar (`lowering/progress.py`) is drawn on stderr, only
    when stdout is a terminal, and only for long work (a graph of 10^4 ops or more), so
    redirected output is the same with or without it."""
    parser.add_argument("--quiet", action="store_true",
                        help="no progress bar (one is drawn on stderr, when stdout is a "
                             "terminal, for graphs of 10^4 ops or more)")


def progress_bar(quiet: bool, module=None) -> contextlib.AbstractContextManager:
    """The tool's progress bar while its long work on `module` runs (`terminal_progress`;
    no module: work that is long by nature), or nothing."""
    from tw_lowering.progress import count_ops, terminal_progress

    return terminal_progress(quiet, None if module is None else count_ops(module))


# -- passes --------------------------------------------------------------------------------

def allowed_passes() -> dict:
    """Pass name -> factory: tw's own passes and `passes.UPSTREAM_PASSES` (nothing imported
    yet); the one list every pipeline entry point shares."""
    from tw_passes import get_all_passes

    return get_all_passes()


def check_pipeline_names(spec: str) -> None:
    """Refuse a pipeline naming a pass outside `allowed_passes()` (one line, what is known);
    'default' and 'none' name the default pipeline and no passes."""
    from xdsl.utils.arg_spec import parse_pipeline
    from xdsl.utils.exceptions import ArgSpecParseError

    if spec.strip() in ("default", "none"):
        return

    try:
        names = [p.name for p in parse_pipeline(spec)]
    except (ArgSpecParseError, Exception) as e:  # noqa: BLE001 - xDSL's spec errors vary
        raise ToolError(f"bad pass pipeline {spec!r}: {last_line(e)}") from None
    known = allowed_passes()
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ToolError(f"bad pass pipeline {spec!r}: unknown pass "
                        f"{', '.join(repr(n) for n in unknown)} (known: "
                        f"{', '.join(sorted(known))}, or 'default' or 'none')")


# -- what a compiled model reports -------------------------------------------------------------

def compiled_info(stats, seconds: float) -> dict:
    """A compiled model's size as tw-run and tw-rasp report it (text and --json alike)."""
    return dict(backend="compiled", n_layers=stats.n_layers, floor=stats.floor, d=stats.d,
                d_head=stats.d_head, d_hidden=stats.d_hidden,
                allocated_params=stats.allocated_params,
                heads=int(sum(stats.heads_per_layer)), neurons=int(sum(stats.neurons_per_layer)),
                compile_seconds=round(seconds, 4))


def size_line(info: dict) -> str:
    """`compiled_info` as one line: layers against the floor, the geometry, the size."""
    return (f"{info['n_layers']} layers (floor {info['floor']}), d={info['d']} "
            f"d_head={info['d_head']} d_hidden={info['d_hidden']}, {info['heads']} heads, "
            f"{info['neurons']} neurons, {info['allocated_params']} allocated params; "
            f"compiled in {info['compile_seconds']:.3f} s")

