"""sequential-scope: how `batch-size=auto` compares with ungated, K=1 and fixed K, per loop shape.

    python bench/scope_sweep.py            # every shape (a few minutes)
    python bench/scope_sweep.py --quick    # three shapes, no exhaustive K sweep (seconds)
    python bench/scope_sweep.py --only bulge

One JSON line per loop shape:
  shape, n (iterations), wide, depth, d (d_head 16, d_hidden 4d), ops (graph ops);
  floor        critical-path floor of the ungated graph, in layers;
  peak, rule_k the peak intermediate width of one iteration and the analytic rule's K;
  ungated, k1  layers ungated and at K=1 (null: the scheduler stalls on residual width);
  k            {K: layers} for every K in auto's candidate set;
  best_k, best the best of ungated, K=1 and the candidate set (K 0: ungated), ties to fewer gates;
  rule         layers with the analytic rule's K alone (`search-budget=0`);
  auto_k, auto the K auto chose and the layers of the auto-gated graph, compiled end to end
               (`lowering.compile`, weights included), whose outputs are checked against
               the oracle (auto_exact);
  auto_le_best auto <= best (auto is never worse than ungated, K=1 or any candidate);
  all_k        (full run, n <= 64) the best K over 1..n-1: {"k", "layers"};
  pass_s       seconds of the `sequential-scope{batch-size=auto}` pass alone (best of 3).
Candidate layers are measured with the scheduler `lowering.compile` runs (decompose if needed,
then `schedule`), without building weights. The shape "two_loops" holds two loops (a wide one
and a narrow one); there a fixed K gates both loops, and auto_k is per loop.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import twdialect.ops as tw  # noqa: E402
from tw_lowering import compile, prepare  # noqa: E402
from tw_lowering.machine import GeometryError, Machine  # noqa: E402
from tw_lowering.schedule import schedule  # noqa: E402
from tw_lowering.tasks import TaskGraph  # noqa: E402
from tw_passes import run_pipeline  # noqa: E402
from tw_lowering.sequential_scope import candidate_batch_sizes, choose_batch_sizes  # noqa: E402
from twdialect import evaluate  # noqa: E402
from twdialect.analysis import critical_path  # noqa: E402
from twdialect.interp import find_graph  # noqa: E402
from twdialect.random_graphs import chain_loop, sample_inputs  # noqa: E402

D_HEAD = 16


def loop(n_iter: int, wide: int, depth: int, shape: str = "flat", seed: int = 0):
    """`n_iter` independent iterations reading x (width 4): `depth` mlps, then a linear to a
    scalar. flat: every mlp `wide` wide; bulge: the first mlp wide/4, the second `wide`, the
    rest wide/4 (the wide value appears after the iteration started)."""
    widths = [wide] * depth if shape == "flat" else [wide // 4, wide] + [wide // 4] * (depth - 2)
    return chain_loop(n_iter, widths, seed)


def two_loops(n_iter: int = 6, seed: int = 1):
    """A loop whose middle mlp is 32 wide, then one whose middle is 4 wide, both reading x."""
    rng = np.random.default_rng(seed)
    with tw.Graph("main") as g:
        x = tw.input("x", 4, (-1.0, 1.0))

        def body(wide):
            h = tw.mlp(x, rng.uniform(-1, 1, (4, 8)) / 4, None, np.eye(8))
            h = tw.mlp(h, rng.uniform(-1, 1, (8, wide)) / 8, None, np.eye(wide))
            h = tw.mlp(h, rng.uniform(-1, 1, (wide, 8)) / wide, None, np.eye(8))
            return tw.linear(h, rng.uniform(-1, 1, (8, 1)) / 8)

        a = tw.sequential_scope([lambda: body(32)] * n_iter, "a")
        b = tw.sequential_scope([lambda: body(4)] * n_iter, "b")
        tw.output("y", tw.concat(a + b))
    return g.module


# (name, factory, d, full-only)
SHAPES = [
    ("flat_n32_w32_x3_d1024", lambda: loop(32, 32, 3), 1024, False),
    ("flat_n32_w32_x3_d768", lambda: loop(32, 32, 3), 768, True),
    ("flat_n32_w32_x3_d512", lambda: loop(32, 32, 3), 512, True),
    ("flat_n32_w64_x3_d1024", lambda: loop(32, 64, 3), 1024, True),
    ("flat_n32_w32_x6_d1024", lambda: loop(32, 32, 6), 1024, True),
    ("bulge_n32_w64_x4_d1024", lambda: loop(32, 64, 4, "bulge"), 1024, True),
    ("bulge_n32_w128_x4_d1024", lambda: loop(32, 128, 4, "bulge"), 1024, False),
    ("bulge_n32_w128_x4_d2048", lambda: loop(32, 128, 4, "bulge"), 2048, True),
    ("bulge_n12_w32_x3_d128", lambda: loop(12, 32, 3, "bulge"), 128, False),
    ("bulge_n3_w64_x3_d96", lambda: loop(3, 64, 3, "bulge"), 96, True),
    ("two_loops_n6_d128", two_loops, 128, True),
    ("flat_n256_w32_x3_d1024", lambda: loop(256, 32, 3), 1024, True),
]


def scheduled_layers(module, pipeline: str | None, d: int) -> int | None:
    """Layers the lowering's scheduler gives (None: residual stall), no weights built."""
    m = module.clone()
    if pipeline:
        run_pipeline(m, pipeline)
    g = find_graph(prepare(m))
    try:
        return schedule(TaskGraph(g), Machine(d, D_HEAD, 4 * d), suggest=False).n_layers
    except GeometryError:
        return None


def better(a: int | None, b: int | None) -> bool:
    return a is not None and (b is None or a < b)


def measure(name: str, factory, d: int, all_k: bool) -> dict:
    module = factory()
    graph = find_graph(module)
    choices = choose_batch_sizes(graph, d=d, d_head=D_HEAD)
    first = next(iter(choices.values()))
    n = first.n_iterations
    row: dict = {"shape": name, "n": n, "d": d, "ops": len(graph.block.ops),
                 "floor": critical_path(graph).n_layers}
    if len(choices) == 1:
        row.update(peak=first.peak, rule_k=first.rule_k)
    else:
        row.update(peak={s: c.peak for s, c in choices.items()},
                   rule_k={s: c.rule_k for s, c in choices.items()})
    spec = lambda k: f"sequential-scope{{batch-size={k}}}"  # noqa: E731
    row["ungated"] = scheduled_layers(module, None, d)
    row["k1"] = scheduled_layers(module, spec(1), d)
    cands = sorted({k for c in choices.values()
                    for k in candidate_batch_sizes(c.n_iterations, d, c.peak)} - {0},
                   reverse=True)
    row["k"] = {k: scheduled_layers(module, spec(k), d) for k in cands}
    best_k, best = 0, row["ungated"]
    for k in cands + [1]:
        layers = row["k1"] if k == 1 else row["k"][k]
        if better(layers, best):
            best_k, best = k, layers
    row.update(best_k=best_k, best=best)
    row["rule"] = scheduled_layers(module, f"sequential-scope{{d={d} search-budget=0}}", d)

    auto_spec = f"sequential-scope{{d={d} d-head={D_HEAD}}}"
    times = []
    for _ in range(3):
        m = factory()
        t0 = time.perf_counter()
        run_pipeline(m, auto_spec)
        times.append(time.perf_counter() - t0)
    auto_k = {s: c.k for s, c in choices.items()}
    row["auto_k"] = auto_k[next(iter(auto_k))] if len(auto_k) == 1 else auto_k
    try:
        ct = compile(module, d=d, d_head=D_HEAD, pipeline=auto_spec)
        row["auto"] = ct.stats.n_layers
        inputs = sample_inputs(module, 3, 0)
        ref, got = evaluate(module, inputs)["y"], ct.run(inputs)["y"]
        row["auto_exact"] = bool(np.allclose(got, ref, atol=1e-4))
    except GeometryError:
        row["auto"] = None
    row["auto_le_best"] = not better(best, row["auto"])
    if all_k and n <= 64:
        ks = {k: scheduled_layers(module, spec(k), d) for k in range(1, n)}
        k_best = min((k for k in ks if ks[k] is not None), key=lambda k: (ks[k], -k),
                     default=None)
        row["all_k"] = {"k": k_best, "layers": ks.get(k_best)}
    row["pass_s"] = round(min(times), 3)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="three shapes, no exhaustive K sweep")
    ap.add_argument("--only", default="", help="shapes whose name contains this")
    args = ap.parse_args()
    for name, factory, d, full_only in SHAPES:
        if (args.quick and full_only) or args.only not in name:
            continue
        print(json.dumps(measure(name, factory, d, all_k=not args.quick)), flush=True)


if __name__ == "__main__":
    main()
