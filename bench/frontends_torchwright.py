"""Graphs built with torchwright's own ops, compiled by tw and by torchwright (greedy and CP-SAT)
at the same geometry, in one run (JSON lines). The `--torchwright` section of
bench/frontends.py:

    python3 bench/frontends.py --torchwright                    # every graph
    python3 bench/frontends.py --torchwright --graphs caesar,adder --prompts 20
    python3 bench/frontends.py --torchwright --no-cpsat         # tw and torchwright's greedy

The graphs are `tw_examples.torchwright_graphs.PROGRAMS` (torchwright's swiglu op library and
rotary offset / recency / content heads). Each is compiled at its (d, d_head), d_hidden = d:
by tw (`from_torchwright`, then `compile(pipeline="default")`), by torchwright's
`compile_headless` with `optimize=0` (its greedy scheduler) and `optimize=1` (CP-SAT, its
60-second budget; the solver's status rides along).

One line per graph: for each compiler its layers, heads, MLP neurons (tw) or used hidden slots
(torchwright), params (the compiled model's weight entries, stored: tw's stock-layout count,
torchwright's trimmed tensors; and non-zero), compile seconds (tw: translation and compile,
after a warm-up compile), and exactness on the same prompts (every prompt where the program
says its prompts are exhaustive, else a seeded sample): `answers`, the share of prompts whose
teacher-forced answer decodes to the plain-Python reference's tokens, and `max_dev`, the
largest deviation of the compiled output from torchwright's own reference evaluation of the
graph over the answer positions; for tw also `oracle_max_dev` (tw's oracle against
torchwright's reference, all positions) and `vs_oracle_max_dev` (tw's compiled model against
its oracle, all positions: tw's contract is 1e-4 relative to magnitude). A summary line
follows.
"""

from __future__ import annotations

import json
import time
import warnings

import numpy as np

PROMPTS = 50  # prompts per graph when its prompts are not exhaustive
CPSAT_LEVEL = 1  # torchwright's optimize level for CP-SAT (a 60 s budget)


def prompts_for(program, n: int, seed: int) -> list[list[str]]:
    """Every prompt of an exhaustive program, else `n` distinct seeded ones."""
    rng = np.random.default_rng(seed)
    pool = program.prompts(rng)
    if program.exhaustive or len(pool) <= n:
        return pool
    return [pool[i] for i in rng.choice(len(pool), n, replace=False)]


class Case:
    """One graph, its prompts and torchwright's reference outputs, shared by every compiler."""

    def __init__(self, program, n_prompts: int, seed: int):
        from tw_examples.torchwright_graphs import reference

        self.program = program
        self.output, self.embedding = program.build()
        self.feeds = []
        for prompt in prompts_for(program, n_prompts, seed):
            answer = program.expected(prompt)
            ids, first = program.feed(self.embedding, prompt, answer)
            self.feeds.append((ids, first, answer, reference(self.output, ids)))

    def exactness(self, run) -> dict:
        """`answers` and `max_dev` of a compiled model (`run(ids) -> (n, d_embed)`)."""
        from tw_examples.torchwright_graphs import decode

        right, dev = 0, 0.0
        for ids, first, answer, ref in self.feeds:
            got = np.asarray(run(ids), dtype=np.float64)
            window = slice(first, first + len(answer))
            right += decode(self.embedding, got[window]) == answer
            dev = max(dev, float(np.abs(got[window] - ref[window]).max()))
        return {"answers": round(right / len(self.feeds), 4), "max_dev": dev}


def nonzero(tensors) -> int:
    import torch

    return sum(int(torch.count_nonzero(t)) for t in tensors)


def tw_row(case: Case) -> dict:
    import twdialect
    from tw_examples.torchwright_graphs import TOKENS
    from tw_lowering import compile  # noqa: A004
    from tw_frontends.torchwright import from_torchwright

    p = case.program
    start = time.perf_counter()
    module = from_torchwright(case.output)
    translated = time.perf_counter()
    ct = compile(module, d=p.d, d_head=p.d_head, d_hidden=p.d, pipeline="default")
    done = time.perf_counter()
    s = ct.stats
    buffers = [b for layer in ct.layers for _, b in layer.named_buffers() if b.is_floating_point()]

    def run(ids):
        return ct.run({TOKENS: ids})["out"]

    oracle_dev = vs_oracle = 0.0
    for ids, _, _, ref in case.feeds:
        ours = twdialect.evaluate(module, {TOKENS: ids})["out"]
        oracle_dev = max(oracle_dev, float(np.abs(ours - ref).max()))
        scale = max(1.0, float(np.abs(ours).max()))
        vs_oracle = max(vs_oracle, float(np.abs(run(ids) - ours).max()) / scale)
    return dict(layers=s.n_layers, floor=s.floor, heads=int(sum(s.heads_per_layer)),
                neurons=int(sum(s.neurons_per_layer)), params=int(s.allocated_params),
                params_nonzero=nonzero(buffers), translate_s=round(translated - start, 3),
                compile_s=round(done - start, 3), **case.exactness(run),
                oracle_max_dev=oracle_dev, vs_oracle_max_dev=vs_oracle)


def torchwright_tensors(net) -> list:
    """The weight tensors of torchwright's compiled layers (attention Q/K/V/O, gate, up, down)."""
    out = []
    for layer in net.layers:
        a = layer.attn.attn
        out += [a.query_matrix, a.key_matrix, a.value_matrix, a.output_matrix]
        for proj in (layer.mlp.gate_proj, layer.mlp.up_proj, layer.mlp.down_proj):
            out += [proj.output_matrix, proj.output_bias]
    return out


def torchwright_row(case: Case, optimize: int) -> dict:
    import torch
    from torchwright import compile_headless
    from tw_examples.torchwright_graphs import TOKENS

    p = case.program
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c = compile_headless(case.output, d=p.d, d_head=p.d_head, d_hidden=p.d,
                             optimize=optimize, device="cpu")
    seconds = time.perf_counter() - start
    tensors = torchwright_tensors(c.net)

    def run(ids):
        inputs = c.build_prefill({TOKENS: torch.tensor(ids, dtype=torch.float32)[:, None]},
                                 len(ids))
        with torch.no_grad():
            return c(inputs).double().numpy()

    row = dict(layers=c.n_layers, heads=sum(layer.attn.attn.n_heads for layer in c.net.layers),
               slots=sum(int((layer.mlp.gate_proj.output_matrix != 0).any(dim=0).sum())
                         for layer in c.net.layers),
               params=sum(t.numel() for t in tensors), params_nonzero=nonzero(tensors),
               compile_s=round(seconds, 3), **case.exactness(run))
    stats = getattr(c.net, "cpsat_solve_stats", None)
    if optimize and stats is not None:
        row.update(solver=stats.status_name, solver_bound=stats.best_objective_bound)
    return row


def warm_up() -> None:
    """Imports and first-call costs, outside every timing (a small graph of its own)."""
    from tw_examples.torchwright_graphs import PROGRAMS

    case = Case(PROGRAMS["binary_increment"], 1, 0)
    tw_row(case)
    torchwright_row(case, 0)


def summary(rows: list[dict]) -> dict:
    both = [r for r in rows if "torchwright_cpsat" in r]
    out = {"summary": True, "graphs": len(rows),
           "tw_answers_everywhere": all(r["tw"]["answers"] == 1.0 for r in rows),
           "tw_vs_oracle_max_dev": max(r["tw"]["vs_oracle_max_dev"] for r in rows)}
    if both:
        out.update(
            cpsat_compared=len(both),
            tw_at_most_cpsat=sum(r["tw"]["layers"] <= r["torchwright_cpsat"]["layers"]
                                 for r in both),
            tw_fewer_than_cpsat=sum(r["tw"]["layers"] < r["torchwright_cpsat"]["layers"]
                                    for r in both))
    return out


def main(names: list[str], n_prompts: int, cpsat: bool, seed: int = 2026) -> int:
    from tw_examples.torchwright_graphs import PROGRAMS

    warm_up()
    rows = []
    for name in names:
        p = PROGRAMS[name]
        case = Case(p, n_prompts, seed)
        row = {"graph": name, "d": p.d, "d_head": p.d_head, "d_hidden": p.d,
               "prompts": len(case.feeds), "exhaustive": p.exhaustive,
               "tw": tw_row(case), "torchwright_greedy": torchwright_row(case, 0)}
        if cpsat:
            row["torchwright_cpsat"] = torchwright_row(case, CPSAT_LEVEL)
        rows.append(row)
        print(json.dumps(row, sort_keys=True), flush=True)
    print(json.dumps(summary(rows), sort_keys=True), flush=True)
    return 0
