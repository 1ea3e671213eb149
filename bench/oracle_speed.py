"""Oracle speed: microseconds per op of `twdialect.evaluate` on random layered graphs.

    python bench/oracle_speed.py [--sizes 1000 10000] [--positions 8] [--repeats 3]

Prints one JSON line per size with the median over repeats.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    ap.add_argument("--positions", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    from twdialect import evaluate
    from twdialect.interp import find_graph
    from twdialect.random_graphs import layered_graph, sample_inputs

    for n in args.sizes:
        module, _ = layered_graph(n)
        n_ops = len(list(find_graph(module).block.ops))
        feeds = sample_inputs(module, args.positions)
        times = []
        for _ in range(args.repeats):
            t = time.perf_counter()
            evaluate(module, feeds)
            times.append(time.perf_counter() - t)
        med = statistics.median(times)
        print(json.dumps({"n_ops": n_ops, "positions": args.positions, "seconds": round(med, 4),
                          "us_per_op": round(med / n_ops * 1e6, 2)}), flush=True)


if __name__ == "__main__":
    main()
