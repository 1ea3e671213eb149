"""The depth/width curve of the bundled programs and layered random graphs (`lowering.sweep`):
per width, from the smallest d that fits to the width where the layers reach the floor, the
layers, heads, neurons, stock parameters and scheduling time. One JSON object per line.

    python3 bench/width_sweep.py                       # primitive + library programs, 10^3/10^4
    python3 bench/width_sweep.py --sizes 100000 --programs ""
    python3 bench/width_sweep.py --programs raycaster --sizes ""   # the bundled 10^4-op workload

The summary line of each case also gives, at its smallest width, the columns the best order
needs at once (`peak`) against the proven lower bound (`lower_bound`) and the free columns
there, for the graph that compiles there (`graph`: the pipeline's, or what stands in for it).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def cases(programs: list[str], sizes: list[int]):
    """(name, module, d_head, pipeline) of each case."""
    import tw_examples.library
    import tw_examples.primitive
    from twdialect.random_graphs import layered_graph

    for name in programs:
        if name.startswith("raycaster"):  # examples/raycaster.py: "raycaster" (23,561 ops),
            from tw_examples import raycaster  # "raycaster_small" (441)

            small = dict(n_columns=4, map=raycaster.SMALL_MAP, steps=8)
            module, _ = raycaster.build(**(small if name.endswith("_small") else {}))
            yield name, module, 16, "default"
            continue
        if name.startswith("renderer"):  # examples/primitive/renderer.py, torchwright style:
            from tw_examples.primitive import renderer  # "renderer" (3,801 ops), "_small" (521)

            yield name, renderer.build(small=name.endswith("_small")).module, 16, "default"
            continue
        kind, _, prog = name.rpartition("/")
        package = {"primitive": tw_examples.primitive, "library": tw_examples.library}[kind]
        p = package.load(prog)
        yield name, p.module, p.geometry.d_head, "default"
    for n in sizes:
        module, _ = layered_graph(n)
        yield f"layered_{n}", module, 32, "default"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--programs", default="primitive/calculator,primitive/fibonacci,"
                    "primitive/adder,library/calculator,library/sort_digits,raycaster_small,"
                    "renderer_small,renderer",
                    help="comma-separated; also 'raycaster' (23,561 ops: a few minutes)")
    ap.add_argument("--sizes", default="1000,10000")
    ap.add_argument("--quiet", action="store_true", help="no progress bar (drawn on stderr "
                    "while stdout is a terminal)")
    args = ap.parse_args()
    programs = [p for p in args.programs.split(",") if p]
    sizes = [int(s) for s in args.sizes.split(",") if s]
    from tw_lowering.progress import terminal_progress, track

    with terminal_progress(args.quiet):
        for case in track(cases(programs, sizes), "cases", len(programs) + len(sizes)):
            sweep_case(*case)


def sweep_case(name: str, module, d_head: int, pipeline) -> None:
    """The case's curve, one JSON line a width, then one line of its summary."""
    from tw_lowering.sweep import width_sweep

    t = time.perf_counter()
    curve = width_sweep(module, d_head, pipeline=pipeline)
    total = time.perf_counter() - t
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    for p in curve:
        print(json.dumps({"case": name, **p.as_dict()}, sort_keys=True), flush=True)
    print(json.dumps({"case": name, "points": len(curve), "smallest_d": curve[0].d,
                      **minimum(module, d_head, pipeline, curve[0].d),
                      "floor_at_d": curve[-1].d if curve[-1].n_layers <= curve[-1].floor
                      else None, "sweep_seconds": round(total, 2),
                      "peak_rss_mb": round(rss, 1)}, sort_keys=True), flush=True)


def minimum(module, d_head: int, pipeline, d: int) -> dict:
    """At the smallest width: the columns the best order needs at once (`peak`) against the
    proven lower bound (`lower_bound`, columns no order beats) and the free columns there, of
    the graph that compiles there (`graph`: the pipeline's, or the one standing in for it:
    `Schedule.note`)."""
    from tw_lowering import check_pipeline, prepare, pressure_of
    from tw_lowering.machine import Machine
    from tw_lowering.tasks import TaskGraph
    from twdialect.interp import find_graph

    passes = check_pipeline("width_sweep", pipeline)
    pressure = pressure_of(module, TaskGraph(find_graph(prepare(module, passes))), passes)
    m = Machine(d=d, d_head=d_head)
    used = pressure if pressure.fits(m, alternatives=False) else \
        next(a for a in pressure.alternatives() if a.fits(m, alternatives=False))
    return {"free_columns": m.free_columns, "peak": used.choice.best(m).peak,
            "lower_bound": used.lower_bound(m).columns, "graph": used.note or "pipeline"}


if __name__ == "__main__":
    main()
