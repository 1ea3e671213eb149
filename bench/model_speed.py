"""Speed of compiled models: a full forward and KV-cache stepping, on CPU and (if present) CUDA.

    python bench/model_speed.py [--ops 10000] [--positions 64] [--repeats 5]

One JSON line per (graph, device): medians over repeats of the full forward over `positions`
positions and of one generate step (after a prompt of positions/2), with layers and params.
Graphs: the calculator token program and a random layered graph of `--ops` primitives.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
import torch


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _median_time(fn, repeats: int, device: str) -> float:
    fn()
    _sync(device)
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def cases(n_ops: int, positions: int):
    from examples import calculator
    from twdialect.random_graphs import layered_graph, sample_inputs

    prog = calculator.build()
    ids = np.array([prog.vocab.index(c) for c in prog.normalize("123*456=")])
    # (its positions stop at max_len: the graph's promise, checked at run time)
    ids = np.resize(ids, min(positions, prog.max_len))
    yield "calculator", prog.module, prog.geometry, {"tokens": ids}
    module, _ = layered_graph(n_ops)
    geometry = type("G", (), {"d": 2048, "d_head": 32, "d_hidden": 8192})
    yield f"layered_{n_ops}", module, geometry, sample_inputs(module, positions)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, default=10000)
    ap.add_argument("--positions", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    from lowering import compile

    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    for name, module, geo, feeds in cases(args.ops, args.positions):
        ct = compile(module, d=geo.d, d_head=geo.d_head, d_hidden=geo.d_hidden)
        positions = len(next(iter(feeds.values())))
        half = {k: v[: positions // 2] for k, v in feeds.items()}
        nxt = {k: v[positions // 2] for k, v in feeds.items()}
        for device in devices:
            ct.to(device)
            full = _median_time(lambda: ct.run(feeds), args.repeats, device)
            step = _median_time(lambda: ct.generate(half, 1, lambda _o: nxt), args.repeats, device)
            prefill = _median_time(lambda: ct.run(half), args.repeats, device)
            print(json.dumps({
                "graph": name, "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
                "n_layers": ct.stats.n_layers, "allocated_params": ct.stats.allocated_params,
                "positions": positions, "forward_s": round(full, 5),
                "one_step_s": round(max(step - prefill, 0.0), 5),
            }), flush=True)


if __name__ == "__main__":
    main()
