"""`tw-export`: compile a bundled token program or a .mlir graph and write it in a format that
stock tools load.

    tw-export adder -f transformers -o out/adder-hf      # GPT-2 checkpoint + tokenizer
    tw-export calculator -f onnx -o out/calc-onnx         # ONNX with a KV cache
    tw-export graph.mlir --d 64 --d-head 8 -f tlens -o out/g-tl
    tw-export adder -f gguf -o out/adder.gguf             # llama.cpp

A bundled program brings its geometry, vocabulary (its characters; the end token is
generation's eos) and prompt rules (the tokenizers pad and complete a prompt as tw-run does:
`tw_lowering.export.prompts`); a .mlir file needs `--d` and `--d-head`. `-o`'s missing parent
folders are created (as the directory formats create their own folder); a parent that is a
file, or one that cannot be created, is refused naming it. Prints the writer's report (one
JSON object with `--json`). A stock library of the export extra that is missing is named with
the install line (`pip install 'tw-compiler[export]'`, llama.cpp's `'tw-compiler[llama]'`).
For a graph of 10^4 ops or more, a progress bar (compile stages, layers written) is drawn on
stderr while stdout is a terminal; `--quiet` turns it off.
Error contract (tools/cli.py): any error is one stderr line, `tw-export: error: <message>`, and
exit code 1.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence

from tw_tools.cli import ArgumentParser, ToolError, bounded_int, check_pipeline_names, one_line
from tw_tools.cli import add_quiet, add_version, parse_file, progress_bar, run_tool

PROG = "tw-export"


def _parser() -> ArgumentParser:
    from tw_lowering.export import FORMATS
    from tw_lowering.machine import MAX_DIM

    p = ArgumentParser(prog=PROG, description="Export a compiled model for stock tools.")
    add_version(p, PROG)
    p.add_argument("source", help="a bundled program name (tw-run --list) or a .mlir file")
    p.add_argument("-f", "--format", required=True, choices=sorted(FORMATS),
                   help="what to write")
    p.add_argument("-o", "--output", required=True, help="where to write it")
    p.add_argument("--d", type=bounded_int("--d", 3, MAX_DIM), help="residual width")
    p.add_argument("--d-head", type=bounded_int("--d-head", 1, MAX_DIM), help="head width")
    p.add_argument("--d-hidden", type=bounded_int("--d-hidden", 0, 4 * MAX_DIM),
                   help="MLP width")
    p.add_argument("-p", "--pipeline", default="default",
                    help="passes before lowering: 'default' (the default), 'none' for the "
                         "graph as written, or a spec such as 'canonicalize,cse'")
    p.add_argument("--graph", default="main", help="the tw.graph of a .mlir file")
    p.add_argument("--n-positions", type=bounded_int("--n-positions", 1, 1 << 20),
                   help="positions the export takes (default: the graph's pos_encoding max_len, "
                   "or its pos_table's rows)")
    p.add_argument("--tensor-parallel", type=bounded_int("--tensor-parallel", 1, 1024),
                   default=None, help="transformers, llama: pad heads and MLP width to multiples "
                   "of N, for vllm serve --tensor-parallel-size N")
    p.add_argument("--json", action="store_true", help="one JSON object")
    add_quiet(p)
    return p


def _source(args):
    """(module, geometry, vocab, end, prompt rules) of a bundled program or a .mlir file."""
    import tw_examples as examples

    if args.source in examples.ALL_PROGRAMS:
        program = examples.load(args.source)
        geo = program.geometry
        d = geo.d if args.d is None else args.d
        d_head = geo.d_head if args.d_head is None else args.d_head
        d_hidden = geo.d_hidden if args.d_hidden is None else args.d_hidden
        return (program.module, (d, d_head, d_hidden), program.vocab, program.end,
                program.prompt_rules)
    if not os.path.exists(args.source) and not args.source.endswith(".mlir"):
        raise ToolError(f"{args.source!r} is neither a bundled program (known: "
                        f"{', '.join(examples.ALL_PROGRAMS)}) nor a file")
    if args.d is None or args.d_head is None:
        raise ToolError("a .mlir graph needs its geometry: give --d and --d-head")
    return parse_file(args.source), (args.d, args.d_head, args.d_hidden), None, None, None


# The extra that installs each stock library an export imports (pyproject.toml).
EXTRAS = {"llama_cpp": "llama"}


def _missing(e: ImportError, fmt: str) -> ToolError:
    """A stock library the export needs is not installed: the line that installs it."""
    top = (e.name or "").split(".")[0] or "a stock library"
    extra = EXTRAS.get(top, "export")
    return ToolError(f"the {fmt} export needs {top!r}, which is not installed: "
                     f"pip install 'tw-compiler[{extra}]'")


def _output_parent(output: str) -> None:
    """Create `-o`'s missing parent folders, or refuse naming the one in the way."""
    parent = os.path.dirname(os.path.abspath(output))
    if os.path.isdir(parent):
        return
    at = parent
    while at and not os.path.exists(at):
        at = os.path.dirname(at)
    if at and not os.path.isdir(at):
        raise ToolError(f"-o {output}: {at} is a file, not a folder")
    try:
        os.makedirs(parent, exist_ok=True)
    except OSError as e:
        raise ToolError(f"-o {output}: cannot create the folder {parent} "
                        f"({e.strerror or type(e).__name__})") from None


def run(argv: Sequence[str] | None = None) -> int:
    from tw_lowering import GeometryError, LoweringError, compile  # noqa: A004

    args = _parser().parse_args(argv)
    try:
        from tw_lowering.export import export
    except ImportError as e:
        raise _missing(e, args.format) from None
    if args.pipeline:
        check_pipeline_names(args.pipeline)
    if args.tensor_parallel is not None and args.format not in ("transformers", "llama"):
        raise ToolError(f"--tensor-parallel applies to the transformers and llama formats "
                        f"(vLLM's), not {args.format}")
    module, (d, d_head, d_hidden), vocab, end, rules = _source(args)
    if d % d_head:
        raise ToolError(f"--d {d} is not a multiple of --d-head {d_head}")
    with progress_bar(args.quiet, module):
        try:
            model = compile(module, d=d, d_head=d_head, d_hidden=d_hidden,
                            pipeline=args.pipeline, graph=args.graph)
        except (GeometryError, LoweringError) as e:
            raise ToolError(f"{args.source} does not compile at d={d} d_head={d_head} "
                            f"d_hidden={d_hidden}: {one_line(e)}") from None
        options = {"n_positions": args.n_positions, "prompt_rules": rules}
        if args.format in ("transformers", "gguf", "llama"):
            options.update(vocab=vocab, end=end)
        if args.tensor_parallel is not None:
            options["tensor_parallel"] = args.tensor_parallel
        _output_parent(args.output)
        try:
            report = export(model, args.output, args.format, **options)
        except ImportError as e:
            raise _missing(e, args.format) from None
        except OSError as e:  # (a read-only folder, a full disk, -o naming a folder for gguf)
            where = e.filename or args.output
            raise ToolError(f"-o {args.output}: cannot write {where} "
                            f"({e.strerror or type(e).__name__})") from None
    report = {k: v for k, v in report.items() if isinstance(v, (int, float, str, dict, list))}
    if args.json:
        print(json.dumps(report, sort_keys=True))
    else:
        sizes = ", ".join(f"{k} {v}" for k, v in sorted(report.items())
                          if k in ("bytes", "padded_params", "trimmed_params"))
        print(f"wrote {args.format} export to {args.output} ({sizes}; "
              f"{report.get('seconds', 0.0):.2f} s)")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point: 0 on success; on any error one stderr line and SystemExit(1)."""
    return run_tool(PROG, lambda: run(argv))


if __name__ == "__main__":
    raise SystemExit(main())
