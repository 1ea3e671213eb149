"""Compile-time scaling on random layered graphs of primitives (10^3, 10^4, 10^5 ops).

    python bench/compile_scaling.py [--sizes 1000 10000 100000] [--d 2048] [--check]

Each size runs in a fresh process and prints one JSON line: seconds per stage (build the graph
in-process, passes/decompose, schedule, weights, torch module), the peak resident memory
after each stage (MB, cumulative process peak), layers, floor and layers/floor. `--check`
also runs the compiled model against the oracle on 4 positions.
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import subprocess
import sys
import time


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def run_one(n_ops: int, d: int, d_head: int, d_hidden: int, check: bool, seed: int) -> dict:
    import torch  # noqa: F401 - import cost is not a compile stage

    from tw_lowering.machine import Machine
    from tw_lowering.materialize import materialize
    from tw_lowering.model import CompiledTransformer
    from tw_lowering.schedule import schedule
    from tw_lowering.stats import make_stats
    from tw_lowering.tasks import TaskGraph
    from twdialect.interp import find_graph
    from twdialect.random_graphs import layered_graph

    rec: dict = {"n_ops": n_ops, "d": d, "d_head": d_head, "d_hidden": d_hidden, "seed": seed,
                 "seconds": {}, "peak_mb": {"start": round(_peak_mb(), 1)}}
    t = time.perf_counter()
    module, _ = layered_graph(n_ops, seed=seed)
    graph = find_graph(module)
    rec["seconds"]["build"] = time.perf_counter() - t
    rec["peak_mb"]["build"] = round(_peak_mb(), 1)
    machine = Machine(d, d_head, d_hidden)
    gc.disable()  # as lowering.compile does
    t = time.perf_counter()
    tg = TaskGraph(graph)
    sched = schedule(tg, machine)
    rec["seconds"]["schedule"] = time.perf_counter() - t
    rec["peak_mb"]["schedule"] = round(_peak_mb(), 1)
    t = time.perf_counter()
    weights, sources, outputs = materialize(sched)
    rec["seconds"]["weights"] = time.perf_counter() - t
    rec["peak_mb"]["weights"] = round(_peak_mb(), 1)
    t = time.perf_counter()
    stats = make_stats(sched, weights)
    model = CompiledTransformer(machine, weights, sources, outputs, stats, sched)
    rec["seconds"]["module"] = time.perf_counter() - t
    rec["peak_mb"]["module"] = round(_peak_mb(), 1)
    rec["seconds"]["build_to_weights"] = sum(rec["seconds"][k] for k in ("build", "schedule", "weights"))
    rec["seconds"] = {k: round(v, 3) for k, v in rec["seconds"].items()}
    rec.update(n_layers=stats.n_layers, floor=stats.floor,
               layers_over_floor=round(stats.n_layers / stats.floor, 4),
               graph_params=stats.graph_params, allocated_params=stats.allocated_params,
               max_heads=max(stats.heads_per_layer), max_neurons=max(stats.neurons_per_layer),
               max_occupancy=max(stats.occupancy_per_layer), cancels=stats.cancels)
    if check:
        import numpy as np

        from twdialect import evaluate
        from twdialect.random_graphs import sample_inputs

        feeds = sample_inputs(module, 4, seed)
        got, want = model.run(feeds), evaluate(module, feeds)
        rec["max_rel_error"] = max(float(np.abs(got[k] - want[k]).max() / max(1, np.abs(want[k]).max()))
                                   for k in want)
    return rec


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000])
    ap.add_argument("--d", type=int, default=2048)
    ap.add_argument("--d-head", type=int, default=32)
    ap.add_argument("--d-hidden", type=int, default=8192)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--quiet", action="store_true", help="no progress bar (drawn on stderr "
                    "while stdout is a terminal)")
    ap.add_argument("--one", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        from tw_lowering.progress import terminal_progress

        with terminal_progress(args.quiet):  # the schedule and weights stages of one size
            rec = run_one(args.one, args.d, args.d_head, args.d_hidden, args.check, args.seed)
        print(json.dumps(rec, sort_keys=True), flush=True)
        return
    for n in args.sizes:  # a fresh process per size: peak memory is that size's alone
        cmd = [sys.executable, __file__, "--one", str(n), "--d", str(args.d), "--d-head",
               str(args.d_head), "--d-hidden", str(args.d_hidden), "--seed", str(args.seed)]
        if args.check:
            cmd.append("--check")
        if args.quiet:
            cmd.append("--quiet")
        subprocess.run(cmd, check=True)


if __name__ == "__main__":
    main()
