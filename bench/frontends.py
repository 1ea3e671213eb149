"""RASP programs compiled by tw and by tracr, side by side, in one run (JSON lines).

    python3 bench/frontends.py                     # tracr's lib programs at lengths 5, 10, 20, 50
    python3 bench/frontends.py --lengths 5,10 --programs sort,hist
    python3 bench/frontends.py --no-tracr          # tw alone (tracr compiles take seconds to minutes)
    python3 bench/frontends.py --tracr-timeout 120 # give up on a tracr row after 120 s (default 600)
    python3 bench/frontends.py --torchwright       # graphs built with torchwright's ops, tw beside
                                                   # torchwright's greedy and CP-SAT compiles
                                                   # (bench/frontends_torchwright.py)

One line per (program, length): tw's layers, floor, residual width, heads, neurons, params
(allocated in the stock layout, stored by tw's trimmed runtime, non-zero; each counts the
token and position tables too, `params_embedding` of the allocated ones, as tracr's counts its
token_embed and pos_embed), compile time (after
a warm-up compile, so no first-import cost) and exactness on inputs (every input up to length
5 where there are at most 5,000 of them, else a seeded sample), beside tracr's own compile of
the same program (layers, d_model, heads used, params allocated and non-zero, compile time,
exactness of its compiled model on the same inputs); then a summary line with the ratios.

Exactness: the share of inputs whose every position equals `rasp.evaluate` (numbers within
1e-4; positions where the evaluator gives None are not compared, as tracr's own tests do,
since tracr's model cannot output None). tracr's model is run by a float32 numpy forward pass
written from its assembled weights (`tracr_forward`: embeddings, attention with logits scaled
by 1/sqrt(key_size) and its causal mask, ReLU MLPs, the output space's read-out), checked
against `model.apply` on two inputs per program (the check is in the output:
`tracr.forward_checked`).

tracr's side runs in a worker process with a wall-clock limit per row (`--tracr-timeout SECONDS`,
default 600; 0 = no limit): its compile and the exactness run of its model (`tracr_row`) must
answer within the limit, else the worker is killed, the row's `tracr` is
`{"error": "timeout: no result after N s", "timeout_s": N}` and the run goes on with the next row
(tracr's compiles of shuffle_dyck and shuffle_dyck2 at max_seq_len 50 run for over 20 minutes).
A program that timed out is not tried by tracr at longer lengths: those rows' `tracr` is
`{"skipped": "timed out at max_seq_len M", "timeout_s": N}` (this replaces the former
`--tracr-cap`, which could only skip after a slow compile had finished). The summary counts
both (`tracr_timeouts`, `tracr_skipped`); ratios are over the rows where both sides compiled.

Fairness of the timings: each row's tracr compile runs in a fresh worker process
(multiprocessing's 'spawn' context, safe with JAX's threads, unlike 'fork') that first
compiles a warm-up program of its own (imports, JAX's first-call costs, outside every timing),
so every row starts from the same warmed-up state, whatever ran before it. A long-lived worker
(`--tracr-shared-worker`, the former default) keeps JAX's compilation caches from row to row,
and then a row's time depends on the order of the rows: tracr compiles a model of a shape it
compiled before (hist after length at the same max_seq_len: the same d_model and layers) in
about 0.02 s instead of about 2 s. The limit is counted from the moment the row is handed to a
warmed-up worker, so the warm-up is never part of it; `compile_s` is timed inside the worker
around tracr's compile alone. tw's side runs in the main process after a warm-up compile of its
own; its `compile_s` is the median of `--tw-repeats` compiles (default 5; tw's caches that
outlive a compile, of attribute types and of mean sets, moved no median beyond noise when
cleared before every compile), the model of the last one is the one measured.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import logging
import multiprocessing
import random
import statistics
import sys
import time
import warnings

import numpy as np

BOS, PAD = "BOS", "PAD"
SAMPLE = 200  # inputs per (program, length) when not exhaustive
EXHAUSTIVE_MAX = 5000


def inputs_for(vocab, n: int, seed: int) -> tuple[list[list], bool]:
    vals = sorted(vocab, key=str)
    if n <= 5 and sum(len(vals) ** k for k in range(1, n + 1)) <= EXHAUSTIVE_MAX:
        return [list(p) for k in range(1, n + 1) for p in itertools.product(vals, repeat=k)], True
    rng = random.Random(seed)
    xs = [[rng.choice(vals) for _ in range(rng.randint(1, n))] for _ in range(SAMPLE)]
    return xs + [[rng.choice(vals) for _ in range(n)] for _ in range(SAMPLE // 10)], False


def agrees(got, want) -> bool:
    if want is None:
        return True
    if isinstance(got, (float, np.floating)) or isinstance(want, float):
        try:
            return abs(float(got) - float(want)) < 1e-4
        except (TypeError, ValueError):
            return False
    return got == want


def exact_share(outs: list[list], program, xs: list[list]) -> float:
    from tracr.rasp import rasp

    ok = total = 0
    for x, got in zip(xs, outs):
        try:
            want = rasp.evaluate(program, x)
        except Exception:  # noqa: BLE001 - no meaning for this input
            continue
        total += 1
        ok += all(agrees(g, w) for g, w in zip(got, want))
    return round(ok / total, 4) if total else 1.0


def tw_row(program, vocab, n: int, xs: list[list], repeats: int = 1) -> dict:
    import torch

    from tw_lowering import compile_rasp_to_model

    times = []
    for _ in range(repeats):
        gc.collect()  # the last compile's garbage is not this one's (both sides, as timeit does)
        t = time.perf_counter()
        model = compile_rasp_to_model(program, vocab, n, compiler_bos=BOS, compiler_pad=PAD)
        times.append(time.perf_counter() - t)
    seconds = statistics.median(times)
    s, ct = model.stats, model.compiled
    tables = [src.table for src in ct.sources if src.kind in ("embedding", "pos_table")]
    nonzero = sum(int(torch.count_nonzero(b)) for layer in ct.layers
                  for _, b in layer.named_buffers() if b.is_floating_point())
    nonzero += sum(int(np.count_nonzero(t)) for t in tables)
    embedding = embedding_params(ct, n + 1)
    outs = [o.decoded[1:] for o in model.apply_batch([[BOS, *x] for x in xs])]
    return dict(layers=s.n_layers, floor=s.floor, d=s.d, d_head=s.d_head, d_hidden=s.d_hidden,
                heads=int(sum(s.heads_per_layer)), neurons=int(sum(s.neurons_per_layer)),
                params_allocated=ct.allocated_params() + embedding, params_embedding=embedding,
                params_stored=ct.stored_params() + sum(t.size for t in tables),
                params_nonzero=nonzero, compile_s=round(seconds, 4), compile_repeats=repeats,
                exact=exact_share(outs, program, xs))


def embedding_params(ct, positions: int) -> int:
    """The stock layout's token and position tables (GPT-2's wte and wpe, tracr's token_embed
    and pos_embed): every token table's rows and a row per position (BOS and max_seq_len
    tokens, as tracr's, read or not), d columns each."""
    tokens = sum(src.table.shape[0] for src in ct.sources if src.kind == "embedding")
    return (tokens + positions) * ct.machine.d


def tracr_forward(model, program):
    """tracr's compiled model as float32 numpy (one jit per length otherwise): the decoded
    outputs of a batch of equal-length token lists [BOS, *x]."""
    cfg, labels = model.model_config, model.residual_labels
    p = {k: {kk: np.asarray(v, np.float32) for kk, v in d.items()} for k, d in model.params.items()}
    enc = getattr(model.output_encoder, "encoding_map", None)
    if enc is not None:
        read = np.zeros((len(labels), len(enc)), np.float32)
        for val, j in enc.items():
            read[labels.index(f"{program.label}:{val}"), j] = 1.0
    else:
        read = np.zeros((len(labels), 1), np.float32)
        read[labels.index(program.label), 0] = 1.0
    heads, key = cfg.num_heads, cfg.key_size

    def lin(x, name):
        return x @ p[name]["w"] + p[name]["b"]

    def forward(tokens: list[list]) -> list[list]:
        ids = np.array([model.input_encoder.encode(t) for t in tokens])
        b, t = ids.shape
        x = p["token_embed"]["embeddings"][ids] + p["pos_embed"]["embeddings"][np.arange(t)][None]
        for i in range(cfg.num_layers):
            pre = f"transformer/layer_{i}/attn/"
            q, k, v = (lin(x, pre + w).reshape(b, t, heads, key) for w in ("query", "key", "value"))
            logits = np.einsum("bthd,bshd->bhts", q, k) / np.float32(np.sqrt(key))
            if cfg.causal:
                logits = np.where(np.tril(np.ones((t, t), bool)), logits, -1e30)
            w = np.exp(logits - logits.max(-1, keepdims=True))
            w /= w.sum(-1, keepdims=True)
            x = x + lin(np.einsum("bhts,bshd->bthd", w, v).reshape(b, t, heads * key),
                        pre + "linear")
            pre = f"transformer/layer_{i}/mlp/"
            x = x + lin(np.maximum(lin(x, pre + "linear_1"), 0), pre + "linear_2")
        out = x @ read
        rows = out.argmax(-1) if enc is not None else out[..., 0]
        return [model.output_encoder.decode(r.tolist())[1:] for r in rows]

    return forward


def tracr_row(program, vocab, n: int, xs: list[list]) -> dict:
    from tracr.compiler import compiling

    gc.collect()
    t = time.perf_counter()
    model = compiling.compile_rasp_to_model(program, vocab, n, compiler_bos=BOS,
                                            compiler_pad=PAD)
    seconds = time.perf_counter() - t
    cfg, params = model.model_config, model.params
    alloc = int(sum(np.size(v) for d in params.values() for v in d.values()))
    nonzero = int(sum(np.count_nonzero(np.asarray(v)) for d in params.values() for v in d.values()))
    heads_used = 0
    for i in range(cfg.num_layers):
        q = np.asarray(params[f"transformer/layer_{i}/attn/query"]["w"])
        heads_used += sum(bool(np.any(q[:, h * cfg.key_size:(h + 1) * cfg.key_size]))
                          for h in range(cfg.num_heads))
    forward = tracr_forward(model, program)
    checked = all(forward([[BOS, *x]])[0] == model.apply([BOS, *x]).decoded[1:]
                  for x in (xs[0], xs[-1]))
    by_len: dict[int, list[int]] = {}
    for i, x in enumerate(xs):
        by_len.setdefault(len(x), []).append(i)
    outs: list = [None] * len(xs)
    for _, idx in sorted(by_len.items()):
        for i, o in zip(idx, forward([[BOS, *xs[i]] for i in idx])):
            outs[i] = o
    return dict(layers=cfg.num_layers, d_model=len(model.residual_labels), heads=heads_used,
                mlp_hidden=cfg.mlp_hidden_size, params_allocated=alloc, params_nonzero=nonzero,
                compile_s=round(seconds, 3), exact=exact_share(outs, program, xs),
                forward_checked=checked)


def warm_program():
    """A program of its own for warm-ups: tracr's jit caches would favour a program measured
    later."""
    from tracr.rasp import rasp

    return rasp.numerical(rasp.Map(lambda x: x + 1, rasp.tokens))


def _quiet() -> None:
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)


def _tracr_worker(conn) -> None:
    """The worker process: warm up, say "ready", then answer (name, n, xs) with tracr_row's
    dict (or {"error": ...}) until it receives None."""
    _quiet()
    from tw_examples.rasp import LIB_PROGRAMS

    tracr_row(warm_program(), {0, 1}, 2, [[0], [1]])
    conn.send("ready")
    while (job := conn.recv()) is not None:
        name, n, xs = job
        try:
            program, vocab = LIB_PROGRAMS[name](n)
            row = tracr_row(program, vocab, n, xs)
        except Exception as e:  # noqa: BLE001 - tracr's refusal is a result
            row = {"error": f"{type(e).__name__}: {str(e)[:200]}"}
        conn.send(row)


class TracrWorker:
    """tracr's side in a worker process (see the module docstring): `row` hands one (program,
    length) to it and waits at most `timeout` seconds (0: no limit) for the answer; on timeout
    the worker is killed and the next `row` starts (and warms up) a new one. `shared`: one
    worker serves every row in turn (its JAX caches kept from row to row); else each row has a
    fresh one."""

    def __init__(self, timeout: float, shared: bool = False):
        self.timeout = timeout
        self.shared = shared
        self.ctx = multiprocessing.get_context("spawn")
        self.proc = self.conn = None

    def _start(self) -> None:
        parent, child = self.ctx.Pipe()
        self.proc = self.ctx.Process(target=_tracr_worker, args=(child,), daemon=True)
        self.proc.start()
        child.close()
        self.conn = parent
        self.conn.recv()  # "ready" once warmed up; EOFError if it died warming up

    def _kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.join()
            self.conn.close()
        self.proc = self.conn = None

    def row(self, name: str, n: int, xs: list[list]) -> dict:
        try:
            if self.proc is None:
                self._start()
            self.conn.send((name, n, xs))
            if not self.conn.poll(self.timeout or None):
                self._kill()
                return {"error": f"timeout: no result after {self.timeout:g} s",
                        "timeout_s": self.timeout}
            answer = self.conn.recv()
            if "compile_s" in answer:
                answer["worker"] = "shared" if self.shared else "fresh"
            if not self.shared:
                self.close()
            return answer
        except (EOFError, OSError):  # the worker died (out of memory, a crash in JAX)
            code = None
            if self.proc is not None:
                self.proc.join(5)
                code = self.proc.exitcode
            self._kill()
            return {"error": f"tracr worker died (exit code {code})"}

    def close(self) -> None:
        if self.proc is not None:
            try:
                self.conn.send(None)
                self.proc.join(10)
            finally:
                self._kill()


def torchwright_arguments(ap: argparse.ArgumentParser) -> None:
    """The options of the torchwright section (`--torchwright`)."""
    ap.add_argument("--torchwright", action="store_true",
                    help="graphs built with torchwright's ops: tw beside torchwright's compiler")
    ap.add_argument("--graphs", default=None, help="torchwright section: comma-separated graphs")
    ap.add_argument("--prompts", type=int, default=None,
                    help="torchwright section: prompts per graph that is not exhaustive")
    ap.add_argument("--no-cpsat", action="store_true",
                    help="torchwright section: torchwright's greedy compile only")


def torchwright_section(ap: argparse.ArgumentParser, args) -> int:
    """`--torchwright`: bench/frontends_torchwright.py on the chosen graphs."""
    import frontends_torchwright as section
    from tw_examples.torchwright_graphs import PROGRAMS

    names = args.graphs.split(",") if args.graphs else list(PROGRAMS)
    for name in names:
        if name not in PROGRAMS:
            ap.error(f"unknown graph {name!r} (known: {', '.join(PROGRAMS)})")
    warnings.filterwarnings("ignore")
    return section.main(names, args.prompts or section.PROMPTS, not args.no_cpsat)


def summarize(rows: list[dict]) -> dict:
    """The summary line: exactness, layers, and the tracr / tw ratios over the rows where
    both sides compiled (params: allocated, and over what tw stores; compile seconds)."""
    both = [r for r in rows if "layers" in r.get("tracr", {})]
    summary = {
        "summary": True, "rows": len(rows),
        "tw_exact_everywhere": all(r["tw"]["exact"] == 1.0 for r in rows),
        "tracr_exact_rows": sum(r["tracr"]["exact"] == 1.0 for r in both),
        "compared_rows": len(both),
        "fewer_layers_rows": sum(r["tw"]["layers"] < r["tracr"]["layers"] for r in both),
        "no_more_layers_rows": sum(r["tw"]["layers"] <= r["tracr"]["layers"] for r in both),
        "tracr_timeouts": sum("error" in r.get("tracr", {}) and "timeout_s" in r["tracr"]
                              for r in rows),
        "tracr_skipped": sum("skipped" in r.get("tracr", {}) for r in rows),
        # how the timings were taken (rows saved before these fields: a shared worker, one
        # tw compile)
        "tracr_worker": ",".join(sorted({r["tracr"].get("worker", "shared") for r in both})),
        "tw_compile_repeats": ",".join(sorted({str(r["tw"].get("compile_repeats", 1))
                                               for r in rows})),
    }
    if both:
        alloc = [r["tracr"]["params_allocated"] / r["tw"]["params_allocated"] for r in both]
        stored = [r["tracr"]["params_allocated"] / r["tw"]["params_stored"] for r in both]
        nz = [r["tracr"]["params_nonzero"] / r["tw"]["params_nonzero"] for r in both]
        speed = [r["tracr"]["compile_s"] / r["tw"]["compile_s"] for r in both]
        summary.update(
            params_ratio_min=round(min(alloc), 2), params_ratio_median=round(statistics.median(alloc), 2),
            stored_ratio_min=round(min(stored), 2),
            stored_ratio_median=round(statistics.median(stored), 2),
            nonzero_ratio_min=round(min(nz), 2), nonzero_ratio_median=round(statistics.median(nz), 2),
            compile_speedup_min=round(min(speed), 1),
            compile_speedup_median=round(statistics.median(speed), 1),
            params_ratio_10x_rows=sum(r >= 10 for r in alloc),
            stored_ratio_10x_rows=sum(r >= 10 for r in stored),
            compile_speedup_100x_rows=sum(r >= 100 for r in speed))
    return summary


def markdown(rows: list[dict]) -> str:
    """The rows as docs/frontends.md's table (one line a row; tracr's cells blank where it
    timed out, was skipped or refused), then the summary line (`summarize`)."""
    head = ("| program | n | tw layers | tw d | tw params alloc / nonzero | tw s | tw exact | "
            "tracr layers | tracr d | tracr params alloc / nonzero | tracr s | tracr exact | "
            "params ratio | speedup |")
    out = [head, "|" + "---|" * head.count(" | ") + "---|"]
    for r in rows:
        tw, tr = r["tw"], r.get("tracr", {})
        cells = [r["program"], r["max_seq_len"], tw["layers"], tw["d"],
                 f"{tw['params_allocated']} / {tw['params_nonzero']}", f"{tw['compile_s']:.3f}",
                 tw["exact"]]
        if "layers" in tr:
            cells += [tr["layers"], tr["d_model"],
                      f"{tr['params_allocated']} / {tr['params_nonzero']}",
                      f"{tr['compile_s']:.1f}", tr["exact"],
                      f"{tr['params_allocated'] / tw['params_allocated']:.1f}x",
                      f"{tr['compile_s'] / tw['compile_s']:.0f}x"]
        else:
            why = tr.get("error") or tr.get("skipped") or "not run"
            cells += [why, "", "", "", "", "", ""]
        out.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(out) + "\n\n" + json.dumps(summarize(rows), sort_keys=True) + "\n"


def main(argv=None) -> int:
    from tw_examples.rasp import LIB_PROGRAMS

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lengths", default="5,10,20,50")
    ap.add_argument("--programs", default=",".join(LIB_PROGRAMS))
    ap.add_argument("--no-tracr", action="store_true", help="tw alone")
    ap.add_argument("--tracr-timeout", type=float, default=600.0, metavar="SECONDS",
                    help="wall-clock limit per tracr row (compile and exactness run), 0 = none;"
                         " a program that timed out is skipped by tracr at longer lengths")
    ap.add_argument("--table", metavar="JSONL", default=None,
                    help="print the markdown table and summary of saved JSON lines, run nothing")
    ap.add_argument("--tracr-shared-worker", action="store_true",
                    help="one tracr worker for every row, its JAX caches kept from row to row "
                         "(a row's time then depends on the rows before it)")
    ap.add_argument("--tw-repeats", type=int, default=5, metavar="N",
                    help="tw compiles per row; compile_s is their median")
    torchwright_arguments(ap)
    args = ap.parse_args(argv)
    if args.torchwright:
        return torchwright_section(ap, args)
    if args.table:
        with open(args.table) as f:
            saved = [json.loads(line) for line in f if line.strip()]
        print(markdown([r for r in saved if "program" in r]), end="")
        return 0
    _quiet()
    lengths = [int(x) for x in args.lengths.split(",")]
    names = args.programs.split(",")
    for name in names:
        if name not in LIB_PROGRAMS:
            ap.error(f"unknown program {name!r} (known: {', '.join(LIB_PROGRAMS)})")
    if args.tracr_timeout < 0:
        ap.error("--tracr-timeout must be >= 0")
    if args.tw_repeats < 1:
        ap.error("--tw-repeats must be >= 1")
    # warm-up: imports and first-call costs, outside every timing (tracr's in its worker)
    tw_row(warm_program(), {0, 1}, 2, [[0]])
    tracr = None if args.no_tracr else TracrWorker(args.tracr_timeout, args.tracr_shared_worker)
    rows, timed_out = [], {}  # program -> shortest length at which tracr timed out
    try:
        for name in names:
            for n in lengths:
                program, vocab = LIB_PROGRAMS[name](n)
                xs, exhaustive = inputs_for(vocab, n, seed=n)
                row = {"program": name, "max_seq_len": n, "inputs": len(xs),
                       "exhaustive": exhaustive,
                       "tw": tw_row(program, vocab, n, xs, args.tw_repeats)}
                if tracr is not None:
                    if name in timed_out and n > timed_out[name]:
                        row["tracr"] = {"skipped": f"timed out at max_seq_len {timed_out[name]}",
                                        "timeout_s": args.tracr_timeout}
                    else:
                        row["tracr"] = tracr.row(name, n, xs)
                        if "timeout_s" in row["tracr"]:
                            timed_out[name] = min(n, timed_out.get(name, n))
                rows.append(row)
                print(json.dumps(row, sort_keys=True), flush=True)
    finally:
        if tracr is not None:
            tracr.close()
    print(json.dumps(summarize(rows), sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
