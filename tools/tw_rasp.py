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

Error contract (tools/cli.py): an unreadable file, a file that raises, no program in it, a
token outside the vocabulary, too many tokens, or a RASP construct tw refuses ends the run with
exit code 1 and one line on stderr, `tw-rasp: error: <message>`.
"""

from __future__ import annotations

import json
import runpy
from collections.abc import Sequence

from tw_tools.cli import (ArgumentParser, ToolError, bounded_int, compiled_info, one_line,
                          positive_float, run_tool, size_line)

PROG = "tw-rasp"


def _parser() -> ArgumentParser:
    from tw_lowering.machine import MAX_DIM

    p = ArgumentParser(prog=PROG, description="Compile a RASP program and run it.")
    p.add_argument("file", help="a Python file defining the RASP program")
    p.add_argument("tokens", nargs="*", help="the input tokens (after BOS), one word each")
    p.add_argument("--program", default=None,
                   help="the name of the program (an SOp, or a function returning one)")
    p.add_argument("--vocab", help="the vocabulary, comma-separated (default: the file's)")
    p.add_argument("--max-seq-len", type=bounded_int("--max-seq-len", 1, 4096),
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
    """The program and its settings: the file's, overridden by the options."""
    try:
        scope = runpy.run_path(args.file, run_name="__tw_rasp__")
    except FileNotFoundError:
        raise ToolError(f"cannot read {args.file}: no such file") from None
    except SyntaxError as e:
        raise ToolError(f"{args.file}:{e.lineno}: syntax error: {e.msg}") from None
    except Exception as e:  # noqa: BLE001 - the user's code: one line, never a traceback
        raise ToolError(f"{args.file} raised {type(e).__name__}: {one_line(e)}") from None
    name = args.program or ("program" if "program" in scope else _only_program(args.file, scope))
    if name not in scope:
        raise ToolError(f"{args.file} defines no `{name}` (name the program with "
                        "--program NAME)")
    program = scope[name]
    if callable(program) and not hasattr(program, "unique_id"):
        try:
            program = program()
        except Exception as e:  # noqa: BLE001
            raise ToolError(f"{args.file}: {name}() raised {type(e).__name__}: "
                            f"{one_line(e)}") from None
    scope = {k.lower(): v for k, v in scope.items() if k.isupper()} | scope  # VOCAB too
    vocab = scope.get("vocab")
    if args.vocab is not None:
        vocab = {_word(w, scope.get("vocab")) for w in args.vocab.split(",") if w != ""}
    if not vocab:
        raise ToolError(f"no vocabulary: define `vocab` in {args.file} or pass --vocab")
    max_seq_len = args.max_seq_len or scope.get("max_seq_len")
    if not max_seq_len:
        raise ToolError(f"no max_seq_len: define it in {args.file} or pass --max-seq-len")
    causal = bool(scope.get("causal", False)) if args.causal is None else True
    bos = args.bos or scope.get("compiler_bos", "BOS")
    pad = args.pad or scope.get("compiler_pad", "compiler_pad")
    return dict(program=program, vocab=set(vocab), max_seq_len=int(max_seq_len),
                causal=causal, bos=bos, pad=pad)


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
    for v in vocab or ():
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
    from twdialect.frontends.rasp import translate

    args = _parser().parse_intermixed_args(argv)
    spec = _load(args)
    tokens = [_word(w, spec["vocab"]) for w in args.tokens]
    rg = translate(spec["program"], spec["vocab"], spec["max_seq_len"], spec["causal"],
                   spec["bos"], spec["pad"], atol=args.atol)
    if args.emit_mlir:
        print(print_module(rg.module), end="")
        return 0
    rg.token_ids([spec["bos"], *tokens])  # a bad input is named before compiling
    info: dict = {"tokens": tokens}
    if args.oracle:
        from tw_lowering.rasp import RaspModel

        out = RaspModel(rg, None, {}).evaluate([spec["bos"], *tokens])
        info["backend"] = "oracle"
    else:
        from tw_lowering import GeometryError, LoweringError
        from tw_lowering.rasp import compile_rasp_to_model

        try:
            model = compile_rasp_to_model(spec["program"], spec["vocab"], spec["max_seq_len"],
                                          spec["causal"], spec["bos"], spec["pad"], d=args.d,
                                          d_head=args.d_head, atol=args.atol)
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
