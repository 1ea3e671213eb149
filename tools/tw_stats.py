"""`tw-stats`: compile a tw graph for a geometry and print its report.

    tw-stats graph.mlir --d 256 --d-head 16 [--d-hidden 1024] [-p default] [--json]
                        [--probe N] [--html report.html]
    tw-stats graph.mlir --sweep-d --d-head 16 [-p default] [--d-max 4096] [--json]
                        [--max-layers N] [--max-params N]

The report: layers against the critical-path floor, per-layer ops / heads / neurons /
residual occupancy with fill, parameters (graph / allocated / capacity), a per-annotation
breakdown and stage times. `--probe N` runs the compiled model beside the oracle on N positions
of inputs that keep the graph's promises (numbers inside the declared ranges, integers where
declared, token ids inside the vocabulary; at most the graph's `max_len` positions) and names
the first op whose value diverges. `--html PATH` also writes the compile report, one
self-contained HTML page (`lowering/report.py`, docs/report.md: the summary, what each pass
changed, per-layer use, the residual map, the critical path, why ops sit late, a per-op table
with each op's .mlir line and, with `--probe N`, its error against the oracle).
`--sweep-d` prints the depth/width curve instead
(`lowering.sweep`): per width, from the smallest d that fits to the width where the layers
reach the floor, the layers, heads, neurons and stock parameters; with `--max-layers N` (or
`--max-params N`) it also picks the narrowest d with at most N layers (or the shallowest
within N parameters). For a graph of 10^4 ops or more, a progress bar of the compile's
stages is drawn on stderr while stdout is a terminal; `--quiet` turns it off.

Error contract (tools/cli.py, as tw-opt): a bad flag or option value, an unreadable file, a
parse or verifier error (located `file:line:col`), a graph that does not fit the geometry:
exactly one line on stderr, `tw-stats: error: ...`, and exit code 1.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from tw_tools.cli import ArgumentParser, SourceMap, ToolError, bounded_int, check_pipeline_names
from tw_tools.cli import add_quiet, add_version, parse_file, progress_bar, run_tool

PROG = "tw-stats"
MAX_PROBE_POSITIONS = 1 << 14  # the probe keeps a residual snapshot per sublayer per position


def _parser() -> ArgumentParser:
    from tw_lowering.machine import MAX_DIM

    ap = ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    add_version(ap, PROG)
    ap.add_argument("file", help="tw IR file ('-' for stdin)")
    ap.add_argument("--d", type=bounded_int("--d", 3, MAX_DIM), default=256,
                    help="residual width")
    ap.add_argument("--d-head", type=bounded_int("--d-head", 1, MAX_DIM), default=16,
                    help="head width, a divisor of d")
    ap.add_argument("--d-hidden", type=bounded_int("--d-hidden", 0, 4 * MAX_DIM), default=None,
                    help="MLP neurons per layer (4*d)")
    ap.add_argument("-p", "--pipeline", default="default",
                    help="passes before lowering: 'default' (the default), 'none' for the "
                         "graph as written, or a spec such as 'canonicalize,cse'")
    ap.add_argument("--graph", default="main")
    ap.add_argument("--json", action="store_true", help="print the stats as one JSON line")
    ap.add_argument("--probe", type=bounded_int("--probe", 0, MAX_PROBE_POSITIONS), default=0,
                    metavar="N",
                    help="compare with the oracle on N positions of random in-range inputs")
    ap.add_argument("--html", default=None, metavar="PATH",
                    help="also write the compile report, one self-contained HTML page (with "
                         "--probe N: each value's error against the oracle)")
    ap.add_argument("--error-estimate", action="store_true",
                    help="print the static fp32 error estimate of the outputs (value ranges)")
    ap.add_argument("--sweep-d", action="store_true",
                    help="the depth/width curve instead of one report: layers, heads, neurons "
                         "and params from the smallest d that fits to the width where the "
                         "layers reach the floor (--d-head fixed; --d-hidden fixed if given)")
    ap.add_argument("--d-max", type=bounded_int("--d-max", 3, MAX_DIM), default=None,
                    help="with --sweep-d: the widest d to try (default 64x the smallest)")
    ap.add_argument("--max-layers", type=bounded_int("--max-layers", 1, 1 << 30), default=None,
                    help="with --sweep-d: also pick the narrowest d with at most this many "
                         "layers")
    ap.add_argument("--max-params", type=bounded_int("--max-params", 1, 1 << 62), default=None,
                    help="with --sweep-d: also pick the shallowest d within this many stock "
                         "parameters")
    add_quiet(ap)
    return ap


def _check_geometry(args) -> None:
    if args.d % args.d_head:
        raise ToolError(f"--d {args.d} is not a multiple of --d-head {args.d_head}: choose a "
                        "head width that divides d")


def _probe_inputs(prepared, args) -> tuple[dict, int]:
    """Sampled inputs for args.probe positions (at most the graph's max_len), and that count."""
    from twdialect.inputs import InputContract
    from twdialect.interp import find_graph
    from twdialect.random_graphs import sample_inputs

    graph = find_graph(prepared, args.graph)
    longest = InputContract.of(graph).longest  # (pos_encoding max_len, pos_table rows)
    n = min([args.probe] + ([longest] if longest is not None else []))
    return sample_inputs(prepared, n, graph=args.graph), n


def _probe_line(ct, prepared, args) -> str:
    """Run the probe on args.probe positions (at most the graph's max_len) of sampled inputs."""
    from tw_lowering.probe import probe

    feeds, n = _probe_inputs(prepared, args)
    report = probe(ct, prepared, feeds, graph=args.graph, n_positions=None if feeds else n)
    capped = f" ({n} positions: the graph's max_len)" if n < args.probe else ""
    return f"probe: {report}{capped}"


def _check_html_path(args) -> None:
    """Refuse --html where the page cannot be written, before the compile, not after it."""
    import os

    if args.html is None:
        return
    if args.sweep_d:
        raise ToolError("--html reports one compile: it does not go with --sweep-d")
    folder = os.path.dirname(args.html) or "."
    if os.path.isdir(args.html):
        raise ToolError(f"cannot write {args.html}: it is a directory")
    if not os.path.isdir(folder):
        raise ToolError(f"cannot write {args.html}: no such directory")


def _write_html(ct, args, locations) -> None:
    """The compile report to args.html; with --probe, each value's error on sampled inputs."""
    from tw_lowering.report import write_report

    feeds, n = _probe_inputs(ct.schedule.tg.graph, args) if args.probe else (None, None)
    try:
        write_report(ct, args.html, feeds, n if args.probe and not feeds else None, locations)
    except OSError as e:
        raise ToolError(f"cannot write {args.html}: {e.strerror or type(e).__name__}") from None


def _error_lines(sched) -> list[str]:
    """One line per output: its static float32 error estimate, its magnitude, its margin."""
    from tw_lowering.precision import output_errors, output_margins

    margins = output_margins(sched.tg.graph)
    lines = []
    for name, (err, mag) in output_errors(sched).items():
        line = f"error estimate: \"{name}\" within {err:.3g} (|{name}| <= {mag:.3g})"
        if name in margins:
            verdict = "ok" if err <= margins[name] else "EXCEEDS it"
            line += f"; margin {margins[name]:g}: {verdict}"
        lines.append(line)
    return lines


def run(argv: Sequence[str] | None) -> int:
    args = _parser().parse_args(argv)
    _check_geometry(args)
    if args.pipeline and args.pipeline != "default":
        check_pipeline_names(args.pipeline)
    _check_html_path(args)
    source = SourceMap("stdin" if args.file == "-" else args.file)
    module = parse_file(args.file, source)
    if args.sweep_d:
        return _sweep(module, args)

    from tw_lowering import compile  # noqa: A004
    from tw_lowering.report import source_locations

    # (names values after their lines, before the passes: see source_locations)
    locations = source_locations(source.positions(), source.name) if args.html else None
    # (with --error-estimate the margins are reported below instead of refused)
    with progress_bar(args.quiet, module):
        ct = compile(module, d=args.d, d_head=args.d_head, d_hidden=args.d_hidden,
                     pipeline=args.pipeline, graph=args.graph,
                     on_margin="ignore" if args.error_estimate else "error",
                     trace_passes=args.html is not None)
    print(ct.stats.to_json() if args.json else ct.stats.report())
    if args.error_estimate:
        for line in _error_lines(ct.schedule):
            print(line)
    if args.probe:
        print(_probe_line(ct, ct.schedule.tg.graph, args))
    if args.html:
        _write_html(ct, args, locations)
    return 0


def _sweep(module, args) -> int:
    """Print the depth/width curve (`lowering.sweep.width_sweep`), one line or JSON object a
    width."""
    import json

    from tw_lowering.sweep import width_sweep

    with progress_bar(args.quiet, module):
        curve = width_sweep(module, args.d_head, d_hidden=args.d_hidden,
                            pipeline=args.pipeline, graph=args.graph, d_max=args.d_max)
    for p in curve:
        if args.json:
            print(json.dumps(p.as_dict(), sort_keys=True))
        else:
            at_floor = "  (floor)" if p.n_layers <= p.floor else ""
            print(f"d={p.d:<6d} layers={p.n_layers:<4d} floor={p.floor:<4d} heads={p.heads:<5d} "
                  f"neurons={p.neurons:<6d} params={p.params}{at_floor}")
    if args.max_layers is None and args.max_params is None:
        return 0
    from tw_lowering.sweep import width_for

    pick = width_for(module, args.d_head, args.max_layers, args.max_params,
                     d_hidden=args.d_hidden, pipeline=args.pipeline, graph=args.graph,
                     curve=curve)
    target = " and ".join(t for t in (
        args.max_layers and f"at most {args.max_layers} layers",
        args.max_params and f"at most {args.max_params} parameters") if t)
    if pick is None:
        first, last = curve[0], curve[-1]
        raise ToolError(f"no width gives {target}: the fewest layers are {last.n_layers} (the "
                        f"critical-path floor {last.floor}, from d={last.d}), the fewest "
                        f"parameters {first.params} (d={first.d}, the smallest that fits)")
    if args.json:
        print(json.dumps({"pick": pick.as_dict()}, sort_keys=True))
    else:
        print(f"pick: d={pick.d} ({target}): layers={pick.n_layers} params={pick.params}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point: 0 on success; on any error one stderr line and SystemExit(1)."""
    return run_tool(PROG, lambda: run(argv))


if __name__ == "__main__":
    sys.exit(main())
