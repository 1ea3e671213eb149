"""Benchmark suite for the bundled token programs: one JSON line per program.

    python bench/suite.py                 # every program, 500 random prompts each
    python bench/suite.py --prompts 100 --programs adder calculator --oracle

Each line: the geometry (the anchor's where it published one), compiled layers against the
critical-path floor, heads / neurons / allocated parameters, compile seconds, and the
fraction of random prompts answered exactly (greedy output == the plain-Python reference,
checked in one teacher-forced forward pass per prompt, see `matches_reference`), with the
anchor compiler's layer counts beside ours.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tw_examples as examples  # noqa: E402
from tw_examples.token_program import matches_reference, oracle_runner  # noqa: E402
from twdialect.analysis import critical_path  # noqa: E402
from twdialect.interp import find_graph  # noqa: E402


def measure(name: str, n_prompts: int, seed: int, with_oracle: bool) -> dict:
    from tw_lowering import compile  # noqa: A004

    program = examples.load(name)
    geo = program.geometry
    rng = np.random.default_rng(seed)
    prompts = [program.sample(rng) for _ in range(n_prompts)]
    start = time.perf_counter()
    model = compile(program.module, d=geo.d, d_head=geo.d_head, d_hidden=geo.d_hidden)
    wall = time.perf_counter() - start
    s = model.stats
    start = time.perf_counter()
    exact = sum(matches_reference(program, q, model.run) for q in prompts)
    run_seconds = time.perf_counter() - start
    row = {
        "program": name,
        "d": geo.d, "d_head": geo.d_head, "d_hidden": geo.d_hidden,
        "n_layers": s.n_layers, "floor": s.floor,
        "graph_floor": critical_path(find_graph(program.module)).n_layers,
        "n_layers_over_floor": round(s.n_layers / s.floor, 4) if s.floor else None,
        "heads": int(sum(s.heads_per_layer)), "neurons": int(sum(s.neurons_per_layer)),
        "heads_per_layer": list(map(int, s.heads_per_layer)),
        "neurons_per_layer": list(map(int, s.neurons_per_layer)),
        "allocated_params": int(s.allocated_params), "graph_params": int(s.graph_params),
        "compile_seconds": round(sum(s.seconds.values()) if s.seconds else wall, 4),
        "compile_wall_seconds": round(wall, 4),
        "prompts": n_prompts, "exact": exact / n_prompts,
        "run_seconds": round(run_seconds, 2),
        "anchor_layers_greedy": program.anchor.greedy,
        "anchor_layers_cpsat": program.anchor.cpsat,
        "anchor_d": program.anchor.d,
    }
    if with_oracle:
        oracle = oracle_runner(program)
        row["oracle_exact"] = sum(matches_reference(program, q, oracle) for q in prompts) / n_prompts
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--programs", nargs="*", default=list(examples.PROGRAMS))
    ap.add_argument("--prompts", type=int, default=500)
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--oracle", action="store_true", help="also measure the oracle's exactness")
    ap.add_argument("--quiet", action="store_true", help="no progress bar (drawn on stderr "
                    "while stdout is a terminal)")
    args = ap.parse_args(argv)
    from tw_lowering.progress import terminal_progress, track

    with terminal_progress(args.quiet):
        for name in track(args.programs, "programs"):
            print(json.dumps(measure(name, args.prompts, args.seed, args.oracle),
                             sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
