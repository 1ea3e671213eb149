"""`tw-export`: compile a bundled token program or a .mlir graph and write it in a format that
stock tools load.

    tw-export adder -f transformers -o out/adder-hf      # GPT-2 checkpoint + tokenizer
    tw-export calculator -f onnx -o out/calc-onnx         # ONNX with a KV cache
    tw-export graph.mlir --d 64 --d-head 8 -f tlens -o out/g-tl
    tw-export adder -f gguf -o out/adder.gguf             # llama.cpp

A bundled program brings its geometry and vocabulary (its characters; the end token is
generation's eos); a .mlir file needs `--d` and `--d-head`. Prints the writer's report (one
JSON object with `--json`). For a graph of 10^4 ops or more, a progress bar (compile stages,
layers written) is drawn on stderr while stdout is a terminal; `--quiet` turns it off. Error contract (tools/cli.py): any error is one stderr line,
`tw-export: error: <message>`, and exit code 1.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence

from tw_tools.cli import ArgumentParser, ToolError, bounded_int, check_pipeline_names, one_line
from tw_tools.cli import add_quiet, parse_file, progress_bar, run_tool

PROG = "tw-export"


def _parser() -> ArgumentParser:
    from tw_lowering.export import FORMATS
    from tw_lowering.machine import MAX_DIM

    p = ArgumentParser(prog=PROG, description="Export a compiled model for stock tools.")
    p.add_argument("source", help="a bundled program name (tw-run --list) or a .mlir file")
    p.add_argument("-f", "--format", required=True, choices=sorted(FORMATS),
                   help="what to write")
    p.add_argument("-o", "--output", required=True, help="where to write it")
    p.add_argument("--d", type=bounded_int("--d", 3, MAX_DIM), help="residual width")
    p.add_argument("--d-head", type=bounded_int("--d-head", 1, MAX_DIM), help="head width")
    p.add_argument("--d-hidden", type=bounded_int("--d-hidden", 0, 4 * MAX_DIM),
                   help="MLP width")
    p.add_argument("-p", "--pipeline", default=None, help="passes before lowering ('default')")
    p.add_argument("--graph", default="main", help="the tw.graph of a .mlir file")
    p.add_argument("--n-positions", type=bounded_int("--n-positions", 1, 1 << 20),
                   help="positions the export takes (default: the graph's pos_encoding max_len, "
                   "or its pos_table's rows)")
    p.add_argument("--json", action="store_true", help="one JSON object")
    add_quiet(p)
    return p


def _source(args):
    """(module, geometry, vocab, end) of a bundled program or a .mlir file."""
    import tw_examples as examples

    if args.source in examples.ALL_PROGRAMS:
        program = examples.load(args.source)
        geo = program.geometry
        d = geo.d if args.d is None else args.d
        d_head = geo.d_head if args.d_head is None else args.d_head
        d_hidden = geo.d_hidden if args.d_hidden is None else args.d_hidden
        return program.module, (d, d_head, d_hidden), program.vocab, program.end
    if not os.path.exists(args.source) and not args.source.endswith(".mlir"):
        raise ToolError(f"{args.source!r} is neither a bundled program (known: "
                        f"{', '.join(examples.ALL_PROGRAMS)}) nor a file")
    if args.d is None or args.d_head is None:
        raise ToolError("a .mlir graph needs its geometry: give --d and --d-head")
    return parse_file(args.source), (args.d, args.d_head, args.d_hidden), None, None


def run(argv: Sequence[str] | None = None) -> int:
    from tw_lowering import GeometryError, LoweringError, compile  # noqa: A004
    from tw_lowering.export import export

    args = _parser().parse_args(argv)
    if args.pipeline:
        check_pipeline_names(args.pipeline)
    module, (d, d_head, d_hidden), vocab, end = _source(args)
    if d % d_head:
        raise ToolError(f"--d {d} is not a multiple of --d-head {d_head}")
    with progress_bar(args.quiet, module):
        try:
            model = compile(module, d=d, d_head=d_head, d_hidden=d_hidden,
                            pipeline=args.pipeline, graph=args.graph)
        except (GeometryError, LoweringError) as e:
            raise ToolError(f"{args.source} does not compile at d={d} d_head={d_head} "
                            f"d_hidden={d_hidden}: {one_line(e)}") from None
        options = {"n_positions": args.n_positions}
        if args.format in ("transformers", "gguf", "llama"):
            options.update(vocab=vocab, end=end)
        report = export(model, args.output, args.format, **options)
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
