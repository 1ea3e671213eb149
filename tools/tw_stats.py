"""`tw-stats`: compile a tw graph for a geometry and print its report.

    tw-stats graph.mlir --d 256 --d-head 16 [--d-hidden 1024] [-p default] [--json]
                        [--probe N]

The report: layers against the critical-path floor, per-layer ops / heads / neurons /
residual occupancy with fill, parameters (graph / allocated / capacity), a per-annotation
breakdown and stage times. `--probe N` runs the compiled model beside the oracle on N positions
of inputs drawn inside the declared ranges and names the first op whose value diverges.
Bad input gives one line on stderr and exit code 1.
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="tw-stats", description=__doc__.splitlines()[0])
    ap.add_argument("file", help="tw IR file ('-' for stdin)")
    ap.add_argument("--d", type=int, default=256, help="residual width")
    ap.add_argument("--d-head", type=int, default=16)
    ap.add_argument("--d-hidden", type=int, default=None, help="MLP neurons per layer (4*d)")
    ap.add_argument("-p", "--pipeline", default=None, help="passes before lowering ('default')")
    ap.add_argument("--graph", default="main")
    ap.add_argument("--json", action="store_true", help="print the stats as one JSON line")
    ap.add_argument("--probe", type=int, default=0, metavar="N",
                    help="compare with the oracle on N positions of random in-range inputs")
    ap.add_argument("--error-estimate", action="store_true",
                    help="print the static fp32 error estimate of the outputs (value ranges)")
    args = ap.parse_args(argv)
    try:
        text = sys.stdin.read() if args.file == "-" else open(args.file).read()
        from twdialect import parse_module

        module = parse_module(text)
        from lowering import compile

        ct = compile(module, d=args.d, d_head=args.d_head, d_hidden=args.d_hidden,
                     pipeline=args.pipeline, graph=args.graph)
        print(ct.stats.to_json() if args.json else ct.stats.report())
        if args.error_estimate:
            from lowering.precision import max_relative_output_error

            print(f"error estimate: outputs within {max_relative_output_error(ct.schedule):.3g} "
                  "of max(1, |output|)")
        if args.probe:
            from lowering.probe import probe
            from twdialect.random_graphs import sample_inputs

            prepared = ct.schedule.tg.graph
            feeds = sample_inputs(prepared, args.probe)
            print(f"probe: {probe(ct, prepared, feeds)}")
    except (KeyboardInterrupt, BrokenPipeError):
        return 1
    except Exception as e:  # noqa: BLE001 - every failure is one line for the user
        msg = " ".join(str(e).split("\n")[0].split()) or type(e).__name__
        print(f"tw-stats: error: {msg}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
