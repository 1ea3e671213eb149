"""`tw-run`: compile a bundled token program and run it on a prompt.

    tw-run adder "123+456="          # prints 579, then the model's size and compile time
    tw-run calculator "5-17=" --d 2048
    tw-run caesar "3:hello" --oracle # the reference interpreter instead of the compiled model
    tw-run --list

    tw-run calculator -- -5+3=       # a prompt that starts with '-' (`-5+3=` alone works too)

For a program of 10^4 ops or more, a progress bar of the compile's stages is drawn on stderr
while stdout is a terminal; `--quiet` turns it off.

Error contract (tools/cli.py): an unknown program, a prompt the program cannot take (characters
outside its vocabulary, the wrong shape, too long), a bad flag or option value (`--d 0`, a
`--d` that is not a multiple of `--d-head`) or a geometry the graph does not fit ends the run
with exit code 1 and exactly one line on stderr, `tw-run: error: <message>`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence

from tw_tools.cli import ArgumentParser, ToolError, bounded_int, one_line, protect_dash_words, restore
from tw_tools.cli import add_quiet, add_version, compiled_info, progress_bar, run_tool, size_line

PROG = "tw-run"
GEOMETRY_OPTIONS = ("--d", "--d-head", "--d-hidden")


def _parser() -> ArgumentParser:
    from tw_lowering.machine import MAX_DIM

    p = ArgumentParser(prog=PROG, description="Run a bundled token program.")
    add_version(p, PROG)
    p.add_argument("words", nargs="*", metavar="PROGRAM PROMPT",
                   help="program name (see --list) and the text fed to the model; a prompt "
                        "that starts with '-' may follow '--'")
    p.add_argument("--list", action="store_true", help="list the bundled programs")
    p.add_argument("--oracle", action="store_true",
                   help="run the reference interpreter instead of compiling")
    p.add_argument("--d", type=bounded_int("--d", 3, MAX_DIM),
                   help="residual width (default: the program's)")
    p.add_argument("--d-head", type=bounded_int("--d-head", 1, MAX_DIM),
                   help="head width, a divisor of d (default: the program's)")
    p.add_argument("--d-hidden", type=bounded_int("--d-hidden", 0, 4 * MAX_DIM),
                   help="MLP width (default: the program's)")
    p.add_argument("--json", action="store_true", help="one JSON object instead of text")
    add_quiet(p)
    p.unrecognized_hint = ("a prompt that starts with '-' goes after '--', as in "
                           "tw-run PROGRAM -- -PROMPT; options go before the '--'")
    return p


def _parse_args(argv: Sequence[str] | None):
    import sys

    argv = list(sys.argv[1:] if argv is None else argv)
    protected, saved = protect_dash_words(argv, GEOMETRY_OPTIONS)
    args = _parser().parse_intermixed_args(protected)
    args.words = restore(args.words, saved)
    if len(args.words) > 2:
        extra = " ".join(repr(w) for w in args.words[2:])
        after_dashes = (" and everything after '--' is positional: options go before it"
                        if "--" in argv else "")
        raise ToolError(f"too many arguments: {extra} (tw-run PROGRAM PROMPT: quote a prompt "
                        f"that holds spaces{after_dashes})")
    args.program, args.prompt = (args.words + [None, None])[:2]
    return args


def _geometry(args, geo) -> tuple[int, int, int]:
    """The requested geometry (the program's where not given), checked with the option names."""
    d = geo.d if args.d is None else args.d
    d_head = geo.d_head if args.d_head is None else args.d_head
    d_hidden = geo.d_hidden if args.d_hidden is None else args.d_hidden
    if d % d_head:
        def source(given):
            return "" if given is not None else " (the program's default)"

        raise ToolError(f"--d {d}{source(args.d)} is not a multiple of --d-head {d_head}"
                        f"{source(args.d_head)}: choose a head width that divides d")
    return d, d_head, d_hidden


def run(argv: Sequence[str] | None = None) -> int:
    import tw_examples as examples
    from tw_examples.token_program import PromptError, generate, oracle_runner

    args = _parse_args(argv)
    if args.list:
        for name in examples.ALL_PROGRAMS:
            print(f"{name:18s} {examples.load(name).description}")
        return 0
    if args.program is None or args.prompt is None:
        raise ToolError("usage: tw-run PROGRAM PROMPT (tw-run --list shows the programs)")
    try:
        program = examples.load(args.program)
    except KeyError:
        raise ToolError(f"unknown program {args.program!r} (known: "
                        f"{', '.join(examples.ALL_PROGRAMS)})") from None
    try:
        program.encode(args.prompt)  # reject a bad prompt before compiling
    except PromptError as e:
        raise ToolError(one_line(e)) from None

    d, d_head, d_hidden = _geometry(args, program.geometry)
    info: dict = {"program": program.name, "prompt": args.prompt}
    if args.oracle:
        runner = oracle_runner(program)
        info["backend"] = "oracle"
    else:
        from tw_lowering import GeometryError, LoweringError, compile  # noqa: A004

        start = time.perf_counter()
        try:
            with progress_bar(args.quiet, program.module):
                model = compile(program.module, d=d, d_head=d_head, d_hidden=d_hidden)
        except (GeometryError, LoweringError) as e:
            raise ToolError(f"{program.name} does not compile at d={d} d_head={d_head} "
                            f"d_hidden={d_hidden}: {one_line(e)}") from None
        wall = time.perf_counter() - start
        runner = model.run
        s = model.stats
        # the compiler's own phases (passes, schedule, weights, module), without first imports
        info.update(compiled_info(s, sum(s.seconds.values()) if s.seconds else wall))
    answer = generate(program, args.prompt, runner)
    info["answer"] = answer
    if args.json:
        print(json.dumps(info, sort_keys=True))
        return 0
    print(answer)
    if args.oracle:
        print(f"# {program.name}: reference interpreter (not compiled)")
    else:
        print(f"# {program.name}: {size_line(info)}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point: 0 on success; on any error one stderr line and SystemExit(1)."""
    return run_tool(PROG, lambda: run(argv))


if __name__ == "__main__":
    raise SystemExit(main())
