"""What each rewrite pass (and the default pipeline) does to graphs: one JSON line per case.

    python bench/passes_effect.py                 # every case, compiled stats included
    python bench/passes_effect.py --no-compile    # graph-level figures only
    python bench/passes_effect.py --only balance  # cases whose name contains "balance"
    python bench/passes_effect.py --only NONE --timing-ops 10000 100000   # run time, scaling
    python bench/passes_effect.py --examples-only                 # the token programs only
    python bench/passes_effect.py --only example/adder/default    # one program, one pipeline

Each line: {"case", "pipeline", "graph", "before": {...}, "after": {...}, "pass_seconds"}, where
before/after hold ops (ops in the graph body, outputs excluded), floor (critical-path floor in
layers of the graph as it stands: a library op counts its two-chain worst case), slots (last
sublayer slot of the floor) and, when the lowering is compiled, layers, compiled_floor (the
floor after decompose, what the lowering measures layers against), heads, neurons,
graph_params and allocated_params. Timing lines: {"timing", "pipeline",
"ops", "seconds"}.

CASES is a table of (name, pipeline, graph factory, compile geometry); add rows for new passes.

Examples. `--examples-only` runs just the bundled token programs (examples.PROGRAMS), each
under every pipeline of PIPELINES plus `horizontal-fuse` and `select-tree-to-pwl2d,default`
(select-tree-to-pwl2d, then the default pipeline), as cases "example/<program>/<pipeline>".
They compile at the geometry bench/suite.py uses for the program (its d, d_head, d_hidden).
Graph form: a program's graph is built directly from primitives (embedding, pos_encoding,
literal, attn, concat, mlp; no library op) and is compiled as built: `compile` without a
pipeline hands it to the lowering unchanged. So it is already "decomposed" (decompose and
select-tree-to-pwl2d find nothing to rewrite) and already hand-optimised (each stage is one
MLP or one layer of heads; layers == floor). Every pass is measured on that built graph, the
very form the suite compiles; the question is whether a pass still finds anything to gain
there and keeps the program intact. Exactness: the same random prompts per program
(--prompts, default 50) are checked with examples.token_program.matches_reference (one
teacher-forced forward pass per prompt) on the compiled model before and after the pass;
before/after hold `exact` (fraction right, compiled model) and `oracle_exact` (fraction right
through the tw interpreter, also in --no-compile mode), and the line's `exact` is true only
when every prompt is still answered right after the pass (compiled model; the oracle with
--no-compile).
Example lines add "program", "geometry" and "prompts"; a pass that raises gives "pass_error".
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tw_passes import run_pipeline  # noqa: E402
from tw_passes.decompose import DecomposeError  # noqa: E402
from tw_passes.optimize import DEFAULT_SPEC  # noqa: E402
from twdialect import ops as tw  # noqa: E402
from twdialect.analysis import critical_path  # noqa: E402
from twdialect.interp import find_graph  # noqa: E402
from twdialect.random_graphs import chain_loop, layered_graph, random_graph  # noqa: E402
from twdialect.random_graphs import select_tree_depth4 as select_tree_depth4_on  # noqa: E402

# --------------------------------------------------------------------------------------
# Graphs
# --------------------------------------------------------------------------------------


def serial_sum(n: int = 64, width: int = 2):
    """x0 + x1 + ... + x(n-1) folded left: n-1 adds in a row."""
    with tw.Graph() as g:
        xs = [tw.input(f"x{i}", width, (-1.0, 1.0)) for i in range(n)]
        s = xs[0]
        for x in xs[1:]:
            s = tw.add(s, x)
        tw.output("s", s)
    return g.module


def serial_linear_sums(n: int = 16, width: int = 2):
    """The same fold written with tw.sum (a linear over a concat per step)."""
    with tw.Graph() as g:
        xs = [tw.input(f"x{i}", width, (-1.0, 1.0)) for i in range(n)]
        s = xs[0]
        for x in xs[1:]:
            s = tw.sum([s, x])
        tw.output("s", s)
    return g.module


def weighted_sum_of_products(n: int = 32):
    """A sum of n MLP outputs (single-use writers): adds accumulate, nothing to balance."""
    rng = np.random.default_rng(0)
    with tw.Graph() as g:
        x = tw.input("x", 2, (-1.0, 1.0))
        terms = [tw.mlp(x, rng.normal(size=(2, 2)), None, rng.normal(size=(2, 2))) for _ in range(n)]
        s = terms[0]
        for t in terms[1:]:
            s = tw.add(s, t)
        tw.output("s", s)
    return g.module


def affine_chain(n: int = 8):
    """n scalar affine ops in a row (add_const / multiply_const / negate)."""
    steps = [lambda u: tw.add_const(u, 0.5), lambda u: tw.multiply_const(u, 1.5), tw.negate]
    with tw.Graph() as g:
        v = tw.input("x", 1, (-1.0, 1.0))
        for i in range(n):
            v = steps[i % 3](v)
        tw.output("y", v)
    return g.module


def bottleneck(width: int = 64):
    """width -> 1 -> width: fusing would turn 2*width parameters into width*width."""
    with tw.Graph() as g:
        x = tw.input("x", width, (-1.0, 1.0))
        tw.output("y", tw.linear(tw.linear(x, np.ones((width, 1))), np.ones((1, width))))
    return g.module


def fanout_affine(readers: int = 4):
    """A small linear read by several linears and by an output."""
    rng = np.random.default_rng(1)
    with tw.Graph() as g:
        x = tw.input("x", 2, (-1.0, 1.0))
        a = tw.linear(x, rng.normal(size=(2, 2)), rng.normal(size=2))
        tw.output("a", a)
        for i in range(readers):
            tw.output(f"r{i}", tw.linear(a, rng.normal(size=(2, 1))))
    return g.module


def concat_of_affines(n: int = 6):
    """subtract / add_scaled over linears: a linear reading a concat of linears."""
    with tw.Graph() as g:
        xs = [tw.input(f"x{i}", 2, (-1.0, 1.0)) for i in range(n)]
        scaled = [tw.multiply_const(x, float(i + 1)) for i, x in enumerate(xs)]
        tw.output("s", tw.linear(tw.concat(scaled), np.vstack([np.eye(2)] * n)))
    return g.module


def scalar_negates(n: int = 16, shared_input: bool = False):
    """n independent scalar negates (one input each, or all of one input): one slot."""
    with tw.Graph() as g:
        xs = [tw.input(f"x{i}", 1, (-2.0, 2.0)) for i in range(1 if shared_input else n)]
        for i in range(n):
            tw.output(f"y{i}", tw.negate(xs[0 if shared_input else i]))
    return g.module


def attention_family(n: int = 4, d_v: int = 2):
    """n attentions with one query/key and Wq/Wk, each reading a different value."""
    rng = np.random.default_rng(3)
    with tw.Graph() as g:
        p = tw.pos_encoding(2, max_len=64)
        x = tw.input("x", 3, (-1.0, 1.0))
        k = tw.concat(p, x)
        wq, wk = rng.uniform(-1, 1, (5, 2)), rng.uniform(-1, 1, (5, 2))
        for i in range(n):
            v = tw.concat(tw.slice(x, i % 3, 3 - i % 3), tw.slice(x, 0, i % 3)) if i % 3 else x
            tw.output(f"o{i}", tw.attn(k, k, v, wq, wk, rng.uniform(-1, 1, (3, d_v)),
                                       rng.uniform(-1, 1, (d_v, 2))))
    return g.module


def select_tree_depth4():
    """A depth-4 select tree on two scalars (compares of x and y, constant / pwl / affine
    leaves): compare + 4 select chains before, one piecewise_linear_2d after."""
    with tw.Graph() as g:
        x = tw.input("x", 1, (-4.0, 4.0))
        y = tw.input("y", 1, (-3.0, 3.0))
        a = tw.select(tw.compare(x, -1.0), tw.linear(x, [[2.0]], [1.0]), tw.literal([3.0]))
        b = tw.select(tw.compare(y, -2.0), tw.piecewise_linear(y, [-1, 0, 1], [0, 2, -1]),
                      tw.literal([-1.0]))
        c = tw.select(tw.compare(y, 1.0), a, b)
        e = tw.select(tw.compare(x, 2.5, 0.25), c, tw.literal([7.0]))
        tw.output("d", tw.select(tw.compare(x, 0.5), e,
                                 tw.linear(tw.concat(x, y), [[1.0], [-0.5]])))
    return g.module


def select_tree_depth4_integer():
    """The depth-4 tree on two integer scalars (inputs declared `integer`, 0..9): the table
    decomposes to one MLP chain (the integer-lattice form, twdialect/contracts.py)."""
    return select_tree_depth4_on(integer=True)


def bulge_loop(n_iter: int = 32, wide: int = 128, seed: int = 0):
    """32 independent iterations x -> wide/4 -> wide -> wide/4 -> scalar: narrow when admitted,
    wide in the middle, so admitting many at once crowds the residual stream."""
    return chain_loop(n_iter, [wide // 4, wide, wide // 4], seed)


def wide_loop(n_iter: int = 32, wide: int = 32, depth: int = 3, seed: int = 0):
    """An unrolled loop built with tw.sequential_scope: each iteration runs `depth` mlps of
    width `wide` on x and narrows to a scalar; all iterations are independent."""
    return chain_loop(n_iter, [wide] * depth, seed)


def attention_inputs():
    """Linears computing an attention head's query, key (biased) and value."""
    rng = np.random.default_rng(3)
    with tw.Graph() as g:
        x = tw.input("x", 4, (-1.0, 1.0))
        pos = tw.pos_encoding(2, max_len=64)
        q = tw.linear(x, rng.normal(size=(4, 2)))
        k = tw.linear(x, rng.normal(size=(4, 2)), rng.normal(size=2))
        v = tw.linear(x, rng.normal(size=(4, 4)))
        tw.output("o", tw.attn(q, tw.concat(pos, k), v, rng.normal(size=(2, 2)),
                               rng.normal(size=(4, 2)), np.eye(4), np.eye(4)))
    return g.module


def random_primitives(seed: int = 0, n_ops: int = 60):
    return random_graph(seed, n_ops, library=False)


def layered(n_ops: int = 2000):
    return layered_graph(n_ops, seed=0)[0]


def library_mix(seed: int = 0, n_ops: int = 40):
    return random_graph(seed, n_ops, library=True)


@dataclass(frozen=True)
class Case:
    name: str
    pipeline: str
    graph: Callable[[], object]
    d: int = 256
    d_head: int = 16
    program: str = ""  # a bundled token program (examples.PROGRAMS): run_example measures it


PIPELINES = {
    "canonicalize": "canonicalize",
    "fuse-linears": "fuse-linears",
    "fuse-linears{allow-inflate=true}": "fuse-linears{allow-inflate=true}",
    "fuse-linears{fanout=false}": "fuse-linears{fanout=false}",
    "balance-sums": "balance-sums",
    "default": DEFAULT_SPEC,
}

# (pass, graph) cases. Targeted cases first, then synthetic graphs under every pipeline.
CASES: list[Case] = [
    Case("balance/serial_sum_64", "balance-sums", serial_sum, d=512),
    Case("balance/serial_linear_sums_16", "balance-sums", serial_linear_sums),
    Case("balance/accumulating_sum_32", "balance-sums", weighted_sum_of_products),
    Case("fuse/affine_chain_8", "fuse-linears", affine_chain),
    Case("fuse/bottleneck_64", "fuse-linears", bottleneck),
    Case("fuse/bottleneck_64_inflate", "fuse-linears{allow-inflate=true}", bottleneck),
    Case("fuse/fanout_4", "fuse-linears", fanout_affine),
    Case("fuse/fanout_4_off", "fuse-linears{fanout=false}", fanout_affine),
    Case("fuse/concat_of_affines_6", "fuse-linears", concat_of_affines),
    Case("fuse/serial_linear_sums_16", "fuse-linears,canonicalize", serial_linear_sums),
    Case("fuse/attention_inputs", "fuse-linears", attention_inputs),
    Case("default/serial_sum_64", DEFAULT_SPEC, serial_sum, d=512),
    Case("default/affine_chain_8", DEFAULT_SPEC, affine_chain),
]
# horizontal-fuse, select-tree-to-pwl2d, sequential-scope (docs/passes.md quotes these).
CASES += [
    Case("hfuse/negates_16", "horizontal-fuse", scalar_negates, d=64),
    Case("hfuse/negates_16_shared_input", "horizontal-fuse",
         lambda: scalar_negates(16, shared_input=True), d=64),
    Case("hfuse/attention_family_4", "horizontal-fuse", attention_family, d=64),
    Case("select/depth4_tree_2_scalars", "select-tree-to-pwl2d", select_tree_depth4, d=64),
    Case("select/depth4_tree_2_integer_scalars", "select-tree-to-pwl2d",
         select_tree_depth4_integer, d=64),
    Case("scope/loop32_w32_auto", "sequential-scope{batch-size=auto d=1024}", wide_loop, d=1024),
    Case("scope/loop32_w32_auto_headroom2",
         "sequential-scope{batch-size=auto d=1024 headroom=2}", wide_loop, d=1024),
]
CASES += [Case(f"scope/loop32_w32_K{k}", f"sequential-scope{{batch-size={k}}}", wide_loop, d=1024)
          for k in (1, 2, 4, 8, 16, 24, 31)]
CASES += [Case("scope/loop32_bulge128_auto", "sequential-scope{batch-size=auto d=1024}",
               bulge_loop, d=1024)]
CASES += [Case(f"scope/loop32_bulge128_K{k}", f"sequential-scope{{batch-size={k}}}", bulge_loop,
               d=1024) for k in (1, 4, 8, 16)]
for _spec_name, _spec in PIPELINES.items():
    CASES.append(Case(f"{_spec_name}/layered_2000", _spec, layered, d=2048, d_head=16))
    CASES.append(Case(f"{_spec_name}/random_60_x20", _spec, lambda: None))
CASES.append(Case("default/library_40_x10", DEFAULT_SPEC, lambda: None))

# The bundled token programs under every pipeline above, horizontal-fuse, and
# select-tree-to-pwl2d ahead of the default (it must see selects before decompose lowers them).
EXAMPLE_PIPELINES = dict(PIPELINES)
EXAMPLE_PIPELINES["horizontal-fuse"] = "horizontal-fuse"
EXAMPLE_PIPELINES["select-tree-to-pwl2d,default"] = "select-tree-to-pwl2d," + DEFAULT_SPEC
EXAMPLE_PROMPTS = 50  # random prompts per program for the exactness check
EXAMPLE_SEED = 2026


def example_cases() -> list[Case]:
    import tw_examples as examples

    return [Case(f"example/{prog}/{spec_name}", spec, lambda: None, program=prog)
            for prog in examples.PROGRAMS for spec_name, spec in EXAMPLE_PIPELINES.items()]


CASES += example_cases()

# Candidate orders measured against the default (docs/passes.md quotes the results).
ORDER_CANDIDATES = [
    DEFAULT_SPEC,
    "decompose,fuse-linears,balance-sums,cse,dce",
    "decompose,cse,canonicalize,fuse-linears,balance-sums,canonicalize,dce",
    "decompose,canonicalize,balance-sums,fuse-linears,canonicalize,cse,dce",
    "decompose,canonicalize,fuse-linears,balance-sums,canonicalize,fuse-linears,cse,dce",
    "decompose,canonicalize,fuse-linears,balance-sums,horizontal-fuse,canonicalize,cse,dce",
    "select-tree-to-pwl2d,decompose,canonicalize,fuse-linears,balance-sums,canonicalize,cse,dce",
]

# --------------------------------------------------------------------------------------
# Measurement
# --------------------------------------------------------------------------------------


def graph_figures(module) -> dict:
    g = find_graph(module)
    body = [op for op in g.block.ops if op.name != "tw.output"]
    cp = critical_path(g)
    return {"ops": len(body), "floor": cp.floor,
            "slots": max(cp.ready.values()) + 1 if cp.ready else 0}


def compile_with_figures(module, d: int, d_head: int, d_hidden: int | None = None):
    """(figures, compiled model or None when the lowering refused the graph)."""
    from tw_lowering import compile

    try:
        ct = compile(module, d=d, d_head=d_head, d_hidden=d_hidden)
    except Exception as e:  # noqa: BLE001 - report, keep measuring the other cases
        return {"compile_error": f"{type(e).__name__}: {str(e)[:160]}"}, None
    s = ct.stats
    return {"layers": s.n_layers, "compiled_floor": s.floor, "heads": int(sum(s.heads_per_layer)),
            "neurons": int(sum(s.neurons_per_layer)), "graph_params": int(s.graph_params),
            "allocated_params": int(s.allocated_params)}, ct


def compiled_figures(module, d: int, d_head: int) -> dict:
    return compile_with_figures(module, d, d_head)[0]


def measure(module, pipeline: str, compiled: bool, d: int, d_head: int) -> dict:
    before = graph_figures(module)
    if compiled:
        before.update(compiled_figures(module, d, d_head))
    t0 = time.perf_counter()
    try:
        run_pipeline(module, pipeline)
    except DecomposeError as e:  # float32 cannot keep a library op's contract: refused
        return {"before": before, "refused": str(e)[:200]}
    seconds = time.perf_counter() - t0
    after = graph_figures(module)
    if compiled:
        after.update(compiled_figures(module, d, d_head))
    return {"before": before, "after": after, "pass_seconds": round(seconds, 4)}


def _example_prompts(program, n: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    return [program.sample(rng) for _ in range(n)]


def _example_figures(program, prompts: list[str], compiled: bool) -> dict:
    """Graph (and compiled) figures of program.module as it is now, with the fraction of
    `prompts` answered exactly by the oracle and by the compiled model."""
    from tw_examples.token_program import matches_reference, oracle_runner

    fig = graph_figures(program.module)
    oracle = oracle_runner(program)
    fig["oracle_exact"] = _fraction(program, prompts, oracle, matches_reference)
    if compiled:
        geo = program.geometry
        figures, ct = compile_with_figures(program.module, geo.d, geo.d_head, geo.d_hidden)
        fig.update(figures)
        fig["exact"] = 0.0 if ct is None else \
            _fraction(program, prompts, ct.run, matches_reference)
    return fig


def _fraction(program, prompts, runner, check) -> float:
    ok = 0
    for q in prompts:
        try:
            ok += bool(check(program, q, runner))
        except Exception:  # noqa: BLE001 - a model that cannot run a prompt got it wrong
            pass
    return round(ok / len(prompts), 4) if prompts else 1.0


@functools.cache
def _example_before(name: str, compiled: bool, n_prompts: int, seed: int) -> dict:
    """The unchanged program's figures (the same for every pipeline: measured once)."""
    import tw_examples as examples

    program = examples.load(name)
    return _example_figures(program, _example_prompts(program, n_prompts, seed), compiled)


def run_example(name: str, pipeline: str, compiled: bool = True,
                n_prompts: int = EXAMPLE_PROMPTS, seed: int = EXAMPLE_SEED) -> dict:
    """Figures of token program `name` before and after `pipeline` (a spec or a key of
    EXAMPLE_PIPELINES), on its graph as built, compiled at the suite's geometry, with the
    exactness check on `n_prompts` random prompts (see the module docstring)."""
    import tw_examples as examples

    spec = EXAMPLE_PIPELINES.get(pipeline, pipeline)
    program = examples.load(name)
    geo = program.geometry
    prompts = _example_prompts(program, n_prompts, seed)
    row = {"program": name, "prompts": n_prompts,
           "geometry": {"d": geo.d, "d_head": geo.d_head, "d_hidden": geo.d_hidden},
           "before": dict(_example_before(name, compiled, n_prompts, seed))}
    t0 = time.perf_counter()
    try:
        run_pipeline(program.module, spec)
    except Exception as e:  # noqa: BLE001 - a pass that fails on a program is a finding
        row.update({"pass_error": f"{type(e).__name__}: {str(e)[:160]}", "after": {},
                    "pass_seconds": round(time.perf_counter() - t0, 4), "exact": False})
        return row
    row["pass_seconds"] = round(time.perf_counter() - t0, 4)
    row["after"] = after = _example_figures(program, prompts, compiled)
    row["exact"] = after.get("exact" if compiled else "oracle_exact") == 1.0
    return row


def _sum_dicts(rows: list[dict]) -> dict:
    out: dict = {}
    for row in rows:
        for k, v in row.items():
            if isinstance(v, (int, float)):
                out[k] = out.get(k, 0) + v
            else:
                out.setdefault("errors", []).append(v)
    return out


def run_case(case: Case, compiled: bool) -> dict:
    if case.program:
        return run_example(case.program, case.pipeline, compiled)
    if case.name.endswith("_x20") or case.name.endswith("_x10"):
        # Aggregates over seeds: sums of every figure.
        count = 20 if case.name.endswith("_x20") else 10
        make = (lambda s: library_mix(s)) if "library" in case.name else \
            (lambda s: random_primitives(s))
        results = [measure(make(seed), case.pipeline, compiled, case.d, case.d_head)
                   for seed in range(count)]
        kept = [r for r in results if "refused" not in r]  # (decompose refused the others)
        return {"before": _sum_dicts([r["before"] for r in kept]),
                "after": _sum_dicts([r["after"] for r in kept]),
                "pass_seconds": round(sum(r["pass_seconds"] for r in kept), 4),
                "graphs": len(kept), "refused": count - len(kept)}
    return measure(case.graph(), case.pipeline, compiled, case.d, case.d_head)


def timing(n_ops: int, pipelines: list[str]) -> list[dict]:
    rows = []
    for spec in pipelines:
        module, build_s = layered_graph(n_ops, seed=0)
        ops = graph_figures(module)["ops"]
        t0, c0 = time.perf_counter(), time.process_time()
        run_pipeline(module, spec)
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
        # CPU seconds of this process are the steadier figure on a shared machine.
        rows.append({"timing": True, "pipeline": spec, "ops": ops,
                     "ops_after": graph_figures(module)["ops"],
                     "seconds": round(seconds, 3), "cpu_seconds": round(cpu, 3),
                     "cpu_us_per_op": round(cpu / ops * 1e6, 1),
                     "build_seconds": round(build_s, 3)})
    return rows


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--no-compile", action="store_true", help="graph-level figures only")
    ap.add_argument("--only", default="", help="run cases whose name contains this")
    ap.add_argument("--timing-ops", type=int, nargs="*", default=[],
                    help="also time each pass on layered graphs of these sizes (e.g. 10000 100000)")
    ap.add_argument("--orders-only", action="store_true", help="skip the case table")
    ap.add_argument("--examples-only", action="store_true",
                    help="only the bundled token programs (cases example/<program>/<pipeline>)")
    ap.add_argument("--prompts", type=int, default=EXAMPLE_PROMPTS,
                    help="random prompts per program for the examples' exactness check")
    ap.add_argument("--orders", action="store_true",
                    help="also compare candidate pipeline orders on the synthetic graphs")
    args = ap.parse_args(argv)
    compiled = not args.no_compile
    for case in [] if args.orders_only else CASES:
        if args.only and args.only not in case.name:
            continue
        if args.examples_only and not case.program:
            continue
        row = {"case": case.name, "pipeline": case.pipeline}
        row.update(run_example(case.program, case.pipeline, compiled, args.prompts)
                   if case.program else run_case(case, compiled))
        print(json.dumps(row, sort_keys=True), flush=True)
    if args.orders or args.orders_only:
        for spec in ORDER_CANDIDATES:
            for name, make in (("layered_2000", layered), ("random_60_x20", None),
                               ("library_40_x10", None)):
                if make is None:
                    row = run_case(Case(f"order/{name}", spec, lambda: None), compiled)
                else:
                    row = measure(make(), spec, compiled, 2048, 16)
                print(json.dumps({"order": spec, "graph": name, **row}, sort_keys=True),
                      flush=True)
    specs = ["canonicalize", "fuse-linears", "balance-sums", "horizontal-fuse",
             "select-tree-to-pwl2d", "sequential-scope", "decompose", DEFAULT_SPEC]
    for n_ops in args.timing_ops:
        for row in timing(n_ops, specs):
            print(json.dumps(row, sort_keys=True), flush=True)


if __name__ == "__main__":
    main()
