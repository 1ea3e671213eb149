"""`tw-run`: compile a bundled token program and run it on a prompt.

    tw-run adder "123+456="          # prints 579, then the model's size and compile time
    tw-run calculator "5-17=" --d 2048
    tw-run caesar "3:hello" --oracle # the reference interpreter instead of the compiled model
    tw-run --list

Error contract: an unknown program, a prompt the program cannot take (characters outside its
vocabulary, the wrong shape, too long) or a geometry the graph does not fit ends the run with
exit code 1 and exactly one line on stderr, `tw-run: error: <message>`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence

PROG = "tw-run"


class ToolError(Exception):
    pass


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="Run a bundled token program.")
    p.add_argument("program", nargs="?", help="program name (see --list)")
    p.add_argument("prompt", nargs="?", help="the text fed to the model")
    p.add_argument("--list", action="store_true", help="list the bundled programs")
    p.add_argument("--oracle", action="store_true",
                   help="run the reference interpreter instead of compiling")
    p.add_argument("--d", type=int, help="residual width (default: the program's)")
    p.add_argument("--d-head", type=int, help="head width (default: the program's)")
    p.add_argument("--d-hidden", type=int, help="MLP width (default: the program's)")
    p.add_argument("--json", action="store_true", help="one JSON object instead of text")
    return p


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__


def run(argv: Sequence[str] | None = None) -> int:
    import examples
    from examples.token_program import PromptError, generate, oracle_runner

    args = _parser().parse_args(argv)
    if args.list:
        for name in examples.PROGRAMS:
            print(f"{name:18s} {examples.load(name).description}")
        return 0
    if args.program is None or args.prompt is None:
        raise ToolError("usage: tw-run PROGRAM PROMPT (tw-run --list shows the programs)")
    try:
        program = examples.load(args.program)
    except KeyError:
        raise ToolError(f"unknown program {args.program!r} (known: "
                        f"{', '.join(examples.PROGRAMS)})") from None
    try:
        program.encode(args.prompt)  # reject a bad prompt before compiling
    except PromptError as e:
        raise ToolError(_one_line(e)) from None

    geo = program.geometry
    d = args.d or geo.d
    d_head = args.d_head or geo.d_head
    d_hidden = args.d_hidden or geo.d_hidden
    info: dict = {"program": program.name, "prompt": args.prompt}
    if args.oracle:
        runner = oracle_runner(program)
        info["backend"] = "oracle"
    else:
        from lowering import GeometryError, LoweringError, compile  # noqa: A004

        start = time.perf_counter()
        try:
            model = compile(program.module, d=d, d_head=d_head, d_hidden=d_hidden)
        except (GeometryError, LoweringError) as e:
            raise ToolError(f"{program.name} does not compile at d={d} d_head={d_head} "
                            f"d_hidden={d_hidden}: {_one_line(e)}") from None
        wall = time.perf_counter() - start
        runner = model.run
        s = model.stats
        # the compiler's own phases (passes, schedule, weights, module), without first imports
        seconds = sum(s.seconds.values()) if s.seconds else wall
        info.update(backend="compiled", n_layers=s.n_layers, floor=s.floor, d=d, d_head=d_head,
                    d_hidden=d_hidden, allocated_params=s.allocated_params,
                    heads=int(sum(s.heads_per_layer)), neurons=int(sum(s.neurons_per_layer)),
                    compile_seconds=round(seconds, 4))
    answer = generate(program, args.prompt, runner)
    info["answer"] = answer
    if args.json:
        print(json.dumps(info, sort_keys=True))
        return 0
    print(answer)
    if args.oracle:
        print(f"# {program.name}: reference interpreter (not compiled)")
    else:
        print(f"# {program.name}: {info['n_layers']} layers (floor {info['floor']}), d={d} "
              f"d_head={d_head} d_hidden={d_hidden}, {info['heads']} heads, "
              f"{info['neurons']} neurons, {info['allocated_params']} allocated params; "
              f"compiled in {info['compile_seconds']:.3f} s")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point: exit code 0 on success, 1 (one stderr line) on any error."""
    try:
        code = run(argv)
    except ToolError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr, flush=True)
        sys.exit(1)
    except SystemExit:
        raise
    except KeyboardInterrupt:
        print(f"{PROG}: error: interrupted", file=sys.stderr, flush=True)
        sys.exit(130)
    except BaseException as e:  # noqa: BLE001 - never show a traceback to the user
        print(f"{PROG}: error: internal error: {type(e).__name__}: {_one_line(e)}",
              file=sys.stderr, flush=True)
        sys.exit(1)
    return code


if __name__ == "__main__":
    sys.exit(main())
