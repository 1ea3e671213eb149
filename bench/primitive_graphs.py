"""torchwright-style graphs written in primitives: one JSON line per graph x pipeline.

    python bench/primitive_graphs.py                        # everything, 50 prompts each
    python bench/primitive_graphs.py --quick                # fewer prompts, small synthetics
    python bench/primitive_graphs.py --only primitive/adder --prompts 20
    python bench/primitive_graphs.py --only adder           # primitive/ and library/ adder

Cases:
* `primitive/<program>`: the token programs of examples/primitive (every nonlinear step a
  tw.linear -> tw.relu -> tw.linear sandwich, every attention helper one tw.attn reading the
  position features; no tw.mlp, no library op);
* `library/<program>`: the library-only programs of examples/library (a name whose module
  does not exist yet is skipped);
* `synthetic/<generator>/...`: examples/primitive/synthetic graphs (sandwich chains,
  attention reading a positional input, parallel chains joined by concat, serial folds).

Each case is compiled with `pipeline=None` (the graph as built) and `pipeline="default"`, at
the anchor's geometry for a primitive program (d, d_head, d_hidden = d; ANCHOR_GEOMETRY), at
the hand-tuned program's geometry for a library program (whose line also carries the
hand-tuned program's layers, heads and neurons there, default pipeline), or at the synthetic
graph's own. A line holds: ops (ops in the graph body as built, outputs excluded),
floor and layers (`ct.stats`), smallest_d (the smallest multiple of d_head, at the same d_head
and d_hidden, at which the schedule fits: `lowering.schedule.smallest_fitting_d`) and the
layers there (layers_at_smallest_d), heads, neurons,
allocated_params and graph_params, compile_seconds (the compiler's phases), and exactness:
for programs the fraction of N random prompts (`--prompts`) whose compiled greedy answer is
the reference (`matches_reference`, one teacher-forced pass each) and the same through the
oracle; for synthetic graphs the fraction of N random inputs where the compiled outputs match
the oracle (atol 1e-4 relative to magnitude). A geometry that does not fit gives `error`
(the GeometryError's one-line message) and smallest_d instead of the compiled figures; the
anchor compiler's layer counts (greedy / CP-SAT, published for its example of the same name)
ride along for programs, and for the primitive programs also its layers on the very same
graph (ANCHOR_SAME_GRAPH).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tw_examples.token_program import matches_reference, oracle_runner  # noqa: E402

PIPELINES = (None, "default")

# The anchor's example widths (d, d_head); d_hidden = d. balanced_parens has no anchor
# example; it uses the Caesar/Fibonacci width.
ANCHOR_GEOMETRY = {
    "adder": (256, 16), "binary_increment": (512, 16), "caesar": (512, 16),
    "fibonacci": (512, 16), "sort_digits": (384, 32), "calculator": (1024, 16),
    "balanced_parens": (512, 16),
}
# The anchor compiler's layers for the example of the same name at that width
# (greedy, CP-SAT); calculator: calculator_simple (measured at d_head 32).
ANCHOR_LAYERS = {
    "adder": (18, 14), "binary_increment": (20, 16), "caesar": (9, 7), "fibonacci": (9, 7),
    "sort_digits": (26, 24), "calculator": (29, 22), "balanced_parens": (None, None),
}


# The anchor compiler (0.2.0) on the SAME primitive graphs, translated node for node (each
# sandwich one relu FFN, each tw.attn one head with its q.k in the unrotated tail), compiled
# at the same widths, greedy and CP-SAT (every CP-SAT solve OPTIMAL; all 50/50 exact).
ANCHOR_SAME_GRAPH = {
    "adder": (16, 11), "binary_increment": (9, 8), "caesar": (5, 5), "fibonacci": (24, 17),
    "balanced_parens": (11, 11), "sort_digits": (9, 7), "calculator": (32, 27),
}


@dataclass
class Case:
    name: str
    kind: str  # "primitive" | "library" | "synthetic"
    build: Callable[[], object]  # -> TokenProgram or Synthetic


def cases(quick: bool) -> list[Case]:
    import tw_examples.primitive as prim
    from tw_examples.primitive import synthetic

    out = []
    for name in prim.PROGRAMS:
        out.append(Case(f"primitive/{name}", "primitive", lambda n=name: prim.load(n)))
    try:
        import tw_examples.library as lib
        names = lib.PROGRAMS
    except ImportError:
        names = ()
    for name in names:
        if importlib.util.find_spec(f"tw_examples.library.{name}") is None:
            continue
        out.append(Case(f"library/{name}", "library", lambda n=name: lib.load(n)))
    for syn in synthetic.default_suite(quick):
        out.append(Case(f"synthetic/{syn.name}", "synthetic", lambda s=syn: s))
    return out


def selected(name: str, only: list[str] | None) -> bool:
    if not only:
        return True
    short = name.split("/", 1)[1]
    return any(name == s or short == s or name.startswith(s.rstrip("/") + "/") for s in only)


def count_ops(module) -> int:
    from twdialect.interp import find_graph

    return sum(1 for op in find_graph(module).block.ops if op.name != "tw.output")


def smallest_d(module, pipeline, d: int, d_head: int, d_hidden: int) -> tuple:
    """(the smallest multiple of d_head, same d_head and d_hidden, at which the schedule fits,
    the layers there): `lowering.schedule.smallest_fitting_d`, an exact bisection; (None,
    None) when nothing up to 64x d fits."""
    from tw_lowering import Machine, prepare
    from tw_lowering.schedule import schedule, smallest_fitting_d
    from tw_lowering.tasks import TaskGraph
    from twdialect.interp import find_graph

    tg = TaskGraph(find_graph(prepare(module, pipeline)))
    machine = Machine(d=d, d_head=d_head, d_hidden=d_hidden)
    fit = smallest_fitting_d(tg, machine)
    if fit is None:
        return None, None
    return fit, schedule(tg, Machine(d=fit, d_head=d_head, d_hidden=d_hidden)).n_layers


def hand_tuned(program: str, d: int, d_head: int, d_hidden: int) -> dict:
    """The bundled hand-tuned program of that name at the same geometry (default pipeline)."""
    import tw_examples as examples
    from tw_lowering import compile  # noqa: A004

    ct = compile(examples.load(program).module, d=d, d_head=d_head, d_hidden=d_hidden,
                 pipeline="default")
    s = ct.stats
    return {"hand_tuned_layers": s.n_layers, "hand_tuned_heads": int(sum(s.heads_per_layer)),
            "hand_tuned_neurons": int(sum(s.neurons_per_layer))}


def exactness(case: Case, obj, run, n: int, seed: int) -> float:
    rng = np.random.default_rng(seed)
    if case.kind == "synthetic":
        import twdialect

        good = 0
        for _ in range(n):
            inputs = obj.sample(rng)
            ref = twdialect.evaluate(obj.module, inputs)
            got = run(inputs)
            good += all(np.allclose(np.asarray(got[k]), ref[k], rtol=1e-4, atol=1e-4)
                        for k in ref)
        return good / n
    prompts = [obj.sample(rng) for _ in range(n)]
    return sum(matches_reference(obj, q, run) for q in prompts) / n


def measure(case: Case, obj, pipeline, n_prompts: int, seed: int, search: bool) -> dict:
    from tw_lowering import GeometryError, compile  # noqa: A004

    module = obj.module
    if case.kind == "synthetic":
        d, d_head, d_hidden = obj.d, obj.d_head, obj.d_hidden
    elif case.kind == "library":  # beside the hand-tuned program, at its geometry
        g = obj.geometry
        d, d_head, d_hidden = g.d, g.d_head, g.d_hidden
    else:
        program = case.name.split("/", 1)[1]
        d, d_head = ANCHOR_GEOMETRY.get(program, (obj.geometry.d, obj.geometry.d_head))
        d_hidden = d
    row = {"case": case.name, "kind": case.kind, "pipeline": pipeline or "none",
           "d": d, "d_head": d_head, "d_hidden": d_hidden, "ops": count_ops(module)}
    if case.kind != "synthetic":
        g, c = ANCHOR_LAYERS.get(case.name.split("/", 1)[1], (None, None))
        row["anchor_layers_greedy"], row["anchor_layers_cpsat"] = g, c
    if case.kind == "primitive":
        g, c = ANCHOR_SAME_GRAPH.get(case.name.split("/", 1)[1], (None, None))
        row["anchor_same_graph_greedy"], row["anchor_same_graph_cpsat"] = g, c
    if case.kind == "library":
        row.update(hand_tuned(case.name.split("/", 1)[1], d, d_head, d_hidden))
    start = time.perf_counter()
    try:
        ct = compile(module, d=d, d_head=d_head, d_hidden=d_hidden, pipeline=pipeline)
    except GeometryError as e:
        row["compile_wall_seconds"] = round(time.perf_counter() - start, 3)
        row["error"] = str(e).splitlines()[0]
        row["smallest_d"], row["layers_at_smallest_d"] = \
            smallest_d(module, pipeline, d, d_head, d_hidden) if search else (None, None)
        return row
    wall = time.perf_counter() - start
    s = ct.stats
    row.update({
        "floor": s.floor, "layers": s.n_layers,
        "heads": int(sum(s.heads_per_layer)), "neurons": int(sum(s.neurons_per_layer)),
        "allocated_params": int(s.allocated_params), "graph_params": int(s.graph_params),
        "compiled_ops": s.n_ops,
        "compile_seconds": round(sum(s.seconds.values()) if s.seconds else wall, 3),
        "compile_wall_seconds": round(wall, 3),
    })
    if search:
        row["smallest_d"], row["layers_at_smallest_d"] = \
            smallest_d(module, pipeline, d, d_head, d_hidden)
    row["prompts"] = n_prompts
    row["exact"] = exactness(case, obj, ct.run, n_prompts, seed)
    if case.kind != "synthetic":
        row["oracle_exact"] = exactness(case, obj, oracle_runner(obj), n_prompts, seed)
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", action="append", help="a case name, a program name, or a "
                    "prefix such as synthetic/serial_fold (repeatable)")
    ap.add_argument("--prompts", type=int, default=None,
                    help="random prompts / inputs per case (default 50, 10 with --quick)")
    ap.add_argument("--quick", action="store_true",
                    help="small synthetic graphs, 10 prompts, no smallest-d search")
    ap.add_argument("--no-search", action="store_true", help="skip the smallest-d search")
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--quiet", action="store_true", help="no progress bar (drawn on stderr "
                    "while stdout is a terminal)")
    args = ap.parse_args(argv)
    n = args.prompts if args.prompts is not None else (10 if args.quick else 50)
    search = not (args.quick or args.no_search)
    from tw_lowering.progress import terminal_progress

    with terminal_progress(args.quiet):
        run_cases([c for c in cases(args.quick) if selected(c.name, args.only)], n, args.seed,
                  search)
    return 0


def run_cases(chosen: list[Case], n: int, seed: int, search: bool) -> None:
    """One JSON line per case and pipeline (a build error: one line saying so)."""
    from tw_lowering.progress import track

    for case in track(chosen, "cases"):
        try:
            obj = case.build()
        except Exception as e:  # a program another helper is still writing
            print(json.dumps({"case": case.name, "kind": case.kind,
                              "build_error": f"{type(e).__name__}: {e}".splitlines()[0]}),
                  flush=True)
            continue
        for pipeline in PIPELINES:
            print(json.dumps(measure(case, obj, pipeline, n, seed, search), sort_keys=True),
                  flush=True)


if __name__ == "__main__":
    sys.exit(main())
