"""`tw-rasp`: compile a RASP program (tracr's language) from a Python file and run it.

    tw-rasp reverse.py 1 2 3                   # prints ['BOS', 3, 2, 1] and the model's size
    tw-rasp reverse.py 1 2 3 --oracle          # the reference interpreter on the translated graph
    tw-rasp sort.py --emit-mlir > sort.mlir    # the tw IR, for tw-opt / tw-stats
    tw-rasp hist.py a b a --json

The file defines the program as a module-level RASP SOp named `program` (another name with
`--program NAME`, or a function of no arguments returning it; without either, the one
module-level SOp that no other one there reads), and may define `vocab` (or `VOCAB`, and so on),
`max_seq_len`, `causal`, `compiler_bos` and `compiler_pad`, which the options
`--vocab 1,2,3`, `--max-seq-len N`, `--causal`, `--bos` and `--pad` override. Input tokens are
words matched against the vocabulary by their text (`1` is the number 1 when the vocabulary
holds numbers); trailing pad tokens pad the input, and decode as the pad token.

Error contract (tools/cli.py): an unreadable file, a file that raises or exits (`sys.exit`,
at its top level, in `program()` or in a RASP function tw calls while translating), a syntax
error, no program in it, a setting of the wrong type or size (`vocab = 5`, `max_seq_len = 2.5`,
`causal = "no"`: `tw_frontends.rasp.compiler.check_arguments`), a token outside the vocabulary, too many
tokens, or a RASP construct tw refuses ends the run with exit code 1 and one line on stderr,
`tw-rasp: error: <message>`, naming the file (and the line, where the file's own code raised).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import runpy
import sys
from collections.abc import Iterator, Sequence

from tw_tools.cli import (ArgumentParser, ToolError, add_version, bounded_int, compiled_info,
                          one_line, positive_float, run_tool, size_line)
from twdialect.errors import TwError

PROG = "tw-rasp"


def _parser() -> ArgumentParser:
    from tw_lowering.machine import MAX_DIM
    from tw_frontends.rasp.compiler import MAX_SEQ_LEN

    p = ArgumentParser(prog=PROG, description="Compile a RASP program and run it.")
    add_version(p, PROG)
    p.add_argument("file", help="a Python file defining the RASP program")
    p.add_argument("tokens", nargs="*", help="the input tokens (after BOS), one word each")
    p.add_argument("--program", default=None,
                   help="the name of the program (an SOp, or a function returning one)")
    p.add_argument("--vocab", help="the vocabulary, comma-separated (default: the file's)")
    p.add_argument("--max-seq-len", type=bounded_int("--max-seq-len", 1, MAX_SEQ_LEN),
                   help="the longest input (default: the file's)")
    p.add_argument("--causal", action="store_true", default=None,
                   help="causal attention (default: the file's `causal`, else full)")
    p.add_argument("--bos", help="the BOS token (default: the file's compiler_bos, else BOS)")
    p.add_argument("--pad", help="the pad token (default: the file's compiler_pad, else "
                                 "tracr's compiler_pad); input tokens equal to it are padding")
    p.add_argument("--oracle", action="store_true",
                   help="run the reference interpreter instead of compiling")
    p.add_argument("--emit-mlir", action="store_true",
                   help="print the translated tw IR and stop")
    p.add_argument("--d", type=bounded_int("--d", 3, MAX_DIM),
                   help="residual width (default: the narrowest that reaches the floor)")
    p.add_argument("--d-head", type=bounded_int("--d-head", 1, MAX_DIM),
                   help="head width (default: the narrowest that holds every selector)")
    p.add_argument("--atol", type=positive_float("--atol"), default=None,
                   help="how far a numerical output may be from RASP's value (default 1e-4); "
                        "values float32 cannot keep within it are refused")
    p.add_argument("--json", action="store_true", help="one JSON object instead of text")
    return p


def _load(args) -> dict:
    """The program and its settings: the file's, overridden by the options, checked."""
    from tw_frontends.rasp.compiler import check_arguments

    try:
        from tracr.rasp import rasp
    except ImportError:
        raise ToolError("the RASP frontend needs tracr: pip install 'tw-compiler[rasp]'") from None

    scope = _run_file(args.file)
    name = args.program or ("program" if "program" in scope else _only_program(args.file, scope))
    if name not in scope:
        raise ToolError(f"{args.file} defines no `{name}` (name the program with "
                        "--program NAME)")
    program = scope[name]
    if callable(program) and not hasattr(program, "unique_id"):
        with _user_code(args.file, f"{name}()", owned=True):
            program = program()
    if not isinstance(program, rasp.SOp):
        made = f"{name}() returns" if program is not scope[name] else f"`{name}` is"
        raise ToolError(f"{args.file}: {made} {type(program).__name__}, not a RASP SOp (the "
                        "program: an expression of tracr's rasp)")
    scope = {k.lower(): v for k, v in scope.items() if k.isupper()} | scope  # VOCAB too
    vocab = scope.get("vocab")
    if args.vocab is not None:
        vocab = {_word(w, _words_of(vocab)) for w in args.vocab.split(",") if w != ""}
    if vocab is None or (isinstance(vocab, (set, frozenset, list, tuple)) and not vocab):
        raise ToolError(f"no vocabulary: define `vocab` in {args.file} or pass --vocab")
    max_seq_len = args.max_seq_len or scope.get("max_seq_len")
    if max_seq_len is None:
        raise ToolError(f"no max_seq_len: define it in {args.file} or pass --max-seq-len")
    causal = scope.get("causal", False) if args.causal is None else True
    bos = args.bos if args.bos is not None else scope.get("compiler_bos", "BOS")
    pad = args.pad if args.pad is not None else scope.get("compiler_pad", "compiler_pad")
    with _user_code(args.file, "the settings"):  # (a token's own __hash__ or __eq__ runs)
        checked = check_arguments(vocab, max_seq_len, causal, bos, pad, where=args.file)
    return dict(program=program, vocab=set(checked.vocab), max_seq_len=checked.max_seq_len,
                causal=checked.causal, bos=bos, pad=pad)


def _run_file(file: str) -> dict:
    """The program file's top-level names, after running it: an unreadable file, a syntax
    error, and an exception or a `sys.exit` the file raises are one error line each. The
    interpreter's recursion limit is put back afterwards (a file may change it)."""
    if not os.path.exists(file):
        raise ToolError(f"cannot read {file}: no such file")
    if os.path.isdir(file):
        raise ToolError(f"cannot read {file}: it is a folder, not a Python file")
    try:
        with open(file, "rb") as f:
            source = f.read()
        compile(source, file, "exec", dont_inherit=True)  # (its syntax, apart from its run)
    except SyntaxError as e:  # (a ValueError for NUL bytes, on some versions)
        raise ToolError(f"{file}:{e.lineno}: syntax error: {one_line(e.msg)}") from None
    except (OSError, ValueError) as e:
        raise ToolError(f"cannot read {file}: {one_line(e)}") from None
    # tracr logs through absl (a SequenceMap of one SOp twice: a WARNING on stderr), which
    # would add lines to the one a failing run may print: only absl's errors pass
    logging.getLogger("absl").setLevel(logging.ERROR)
    limit = sys.getrecursionlimit()
    try:
        with _user_code(file, "the file", owned=True):
            return runpy.run_path(file, run_name="__tw_rasp__")
    finally:
        sys.setrecursionlimit(limit)


@contextlib.contextmanager
def _user_code(file: str, what: str, owned: bool = False) -> Iterator[None]:
    """Run code that calls into the program file: its top level and `program()` (`owned`:
    every exception there is the file's), or tw's translation, which calls the program's RASP
    functions. A `SystemExit` is one error line (tw itself never exits there), and so is any
    other exception raised inside the file's own code, naming the line. An exception raised
    in tw's own code passes on: a deliberate error is its one line already, anything else is
    tw's bug, which `run_tool` shows as an internal error. KeyboardInterrupt passes on (exit
    130, as an interrupt)."""
    try:
        yield
    except (TwError, KeyboardInterrupt):
        raise
    except SystemExit as e:
        raise ToolError(f"{file}{_file_line(e, file)}: {what} exited "
                        f"(sys.exit({_exit_code(e)})): a program file defines the program and "
                        "its settings, it does not exit") from None
    except BaseException as e:  # noqa: BLE001 - the user's code: one line, never a traceback
        if owned or _file_line(e, file):
            raise _raised(file, what, e) from None
        raise


def _raised(file: str, what: str, e: BaseException) -> ToolError:
    """The error line for exception `e` raised by the file's code."""
    return ToolError(f"{file}{_file_line(e, file)}: {what} raised {type(e).__name__}: "
                     f"{one_line(e) or '(no message)'}")


def _file_line(e: BaseException, file: str) -> str:
    """":LINE" of the innermost frame of `e`'s traceback that runs the file's code, or ""."""
    target = os.path.realpath(file)
    line = ""
    tb = e.__traceback__
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename
        if name == file or os.path.realpath(name) == target:
            line = f":{tb.tb_lineno}"
        tb = tb.tb_next
    return line


def _exit_code(e: SystemExit) -> str:
    """The argument of the `sys.exit` call, as written (empty for none)."""
    return "" if e.code is None else repr(e.code)


def _words_of(vocab) -> list:
    """The file's vocabulary, as far as it is a collection of tokens (for matching words)."""
    if isinstance(vocab, (set, frozenset, list, tuple)):
        return list(vocab)
    return []


def _only_program(file: str, scope: dict) -> str:
    """The name of the one RASP SOp of the file's top level that no other one there reads
    (the program, where the file names its steps too); an error naming the candidates where
    there are several or none."""
    from tracr.rasp import rasp

    sops = {k: v for k, v in scope.items() if isinstance(v, rasp.SOp) and not k.startswith("_")
            and not isinstance(v, (rasp.TokensType, rasp.IndicesType))}
    read: set[int] = set()
    for sop in sops.values():
        stack = list(sop.children)
        while stack:
            c = stack.pop()
            if id(c) not in read:
                read.add(id(c))
                stack.extend(c.children)
    last = sorted(k for k, v in sops.items() if id(v) not in read)
    if len(last) == 1:
        return last[0]
    found = f"defines the RASP SOps {', '.join(last)}" if last else "defines no `program`"
    raise ToolError(f"{file} {found} (name the program with --program NAME)")


def _word(text: str, vocab) -> object:
    """A word as a vocabulary value: the one whose text it is, else a number, else itself."""
    for v in vocab:
        if str(v) == text:
            return v
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def run(argv: Sequence[str] | None = None) -> int:
    from twdialect import print_module
    from tw_frontends.rasp.translator import RaspError, translate

    args = _parser().parse_intermixed_args(argv)
    spec = _load(args)
    tokens = [_word(w, spec["vocab"]) for w in args.tokens]
    with _user_code(args.file, "the program"):  # (its RASP functions run as it is translated)
        try:
            rg = translate(spec["program"], spec["vocab"], spec["max_seq_len"], spec["causal"],
                           spec["bos"], spec["pad"], atol=args.atol)
        except RaspError as e:  # (the program's construct tw refuses: the file is the place)
            raise ToolError(one_line(e), location=args.file) from None
    if args.emit_mlir:
        print(print_module(rg.module), end="")
        return 0
    rg.token_ids([spec["bos"], *tokens])  # a bad input is named before compiling
    info: dict = {"tokens": tokens}
    if args.oracle:
        from tw_frontends.rasp.compiler import RaspModel

        out = RaspModel(rg, None, {}).evaluate([spec["bos"], *tokens])
        info["backend"] = "oracle"
    else:
        from tw_lowering import GeometryError, LoweringError
        from tw_frontends.rasp.compiler import compile_rasp_to_model

        try:
            with _user_code(args.file, "the program"):
                model = compile_rasp_to_model(spec["program"], spec["vocab"],
                                              spec["max_seq_len"], spec["causal"], spec["bos"],
                                              spec["pad"], d=args.d, d_head=args.d_head,
                                              atol=args.atol)
        except (GeometryError, LoweringError) as e:
            raise ToolError(f"the program does not compile: {one_line(e)}") from None
        out = model.apply([spec["bos"], *tokens])
        info.update(compiled_info(model.stats, model.seconds["total"]))
    info["decoded"] = out.decoded
    if args.json:
        print(json.dumps(info, sort_keys=True, default=str))
        return 0
    print(out.decoded)
    if not args.oracle:
        print(f"# {size_line(info)}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point: 0 on success; on any error one stderr line and SystemExit(1)."""
    return run_tool(PROG, lambda: run(argv))


if __name__ == "__main__":
    raise SystemExit(main())
