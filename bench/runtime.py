"""Speed of the compiled runtime beside the same weights as a stock dense transformer.

    python bench/runtime.py [--sizes 1000,10000,100000] [--positions 64,512,2048]
                            [--batches 1,8,64] [--devices cpu,cuda] [--steps 20] [--repeats 5]
                            [--dense-max-ops 10000] [--compile-max-ops 10000]

One JSON line per (graph, device, measurement). Graphs: the calculator and adder token
programs and layered random graphs of each `--sizes` ops (`pipeline="default"`, d=2048,
d_head=32, d_hidden=8192). Measurements, medians over `--repeats`:

* ``forward``: a full forward at each of `--positions` (capped at a token program's max_len),
  batch 1, from the residual on the device to the residual after the last layer: eager
  (``tw_s``) and, on CUDA, replayed as a CUDA graph (``tw_graph_s``); ``run_s`` is `ct.run`
  end to end (input checks, residual build, forward, copy back).
* ``decode``: one decode step at each batch size, after a 32-position prompt, replaying the
  step at a fixed position (a step is idempotent): tokens/s = batch / step time. On CUDA the
  step is a CUDA graph (``tw_graph``), also of the torch.compile'd step (``tw_compiled``,
  graphs up to `--compile-max-ops`), and eager (``tw_eager``). ``kernels`` counts the kernels
  one step launches (torch.profiler, eager), ``bytes`` the weight and KV-cache bytes a step
  reads, ``floor_s`` bytes / the device's measured copy bandwidth, and ``floor_ratio``.
* ``forward_dense`` / ``decode_dense``: the same weights laid out as a stock transformer
  (nn.Linear over all d columns, fused QKV, `scaled_dot_product_attention(scale=1)`, a
  preallocated KV cache), eager and as a CUDA graph, in two shapes: ``trimmed`` (every layer
  with the most heads and neurons any layer uses) and ``machine`` (the compile geometry:
  d / d_head heads, d_hidden neurons), for graphs up to `--dense-max-ops` ops (CPU:
  `--cpu-dense-max-ops`); ``matches`` checks its outputs against tw's.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

PROMPT = 32


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def median_time(fn, repeats: int, dev: torch.device, inner: int = 1) -> float:
    """Median seconds of one call of fn (each sample averages `inner` calls), after a warm-up."""
    fn()
    _sync(dev)
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(inner):
            fn()
        _sync(dev)
        times.append((time.perf_counter() - t) / inner)
    return statistics.median(times)


def copy_bandwidth(dev: torch.device) -> float:
    """Bytes/s of a large device-to-device copy (read + write counted): the memory floor."""
    n = (1 << 28) if dev.type == "cuda" else (1 << 25)
    a = torch.empty(n, dtype=torch.float32, device=dev)
    b = torch.empty_like(a)
    t = median_time(lambda: b.copy_(a), 5, dev)
    return 2 * a.numel() * 4 / t


def count_kernels(fn, dev: torch.device) -> int | None:
    """Kernels fn launches on the GPU (memcpy/memset excluded)."""
    if dev.type != "cuda":
        return None
    from torch.profiler import ProfilerActivity, profile

    fn()
    _sync(dev)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        _sync(dev)
    return sum(1 for e in prof.events() if e.device_type.name == "CUDA"
               and not e.name.lower().startswith(("memcpy", "memset")))


# -- the stock dense model ---------------------------------------------------------------

class DenseTransformer(nn.Module):
    """The compiled weights as a stock transformer, built on `dev`: every layer has `heads`
    heads and `neurons` neurons (zero-padded; "trimmed": the most any layer uses, "machine":
    the compile geometry d / d_head and d_hidden), nn.Linear projections over all d columns,
    fused QKV, SDPA with scale 1, a preallocated KV cache written at the step's position."""

    def __init__(self, ct, shape: str, dev):
        super().__init__()
        m = ct.machine
        self.d, self.dh = m.d, m.d_head
        if shape == "machine":
            self.h, self.n = m.d // m.d_head, m.d_hidden
        else:
            self.h = max(1, max(layer.attn.n_heads for layer in ct.layers))
            self.n = max(1, max(layer.mlp.n_neurons for layer in ct.layers))
        self.qkv, self.o, self.fc1, self.fc2 = (nn.ModuleList() for _ in range(4))
        hd = self.h * self.dh
        for layer in ct.layers:
            w = layer.dense_weights()
            lins = (nn.Linear(self.d, 3 * hd, bias=False, device=dev),
                    nn.Linear(hd, self.d, device=dev), nn.Linear(self.d, self.n, device=dev),
                    nn.Linear(self.n, self.d, device=dev))
            with torch.no_grad():
                for lin in lins:
                    lin.weight.zero_()
                    if lin.bias is not None:
                        lin.bias.zero_()
                qkv, o, fc1, fc2 = lins
                k = w["wq"].shape[0]
                for i, name in enumerate(("wq", "wk", "wv")):
                    qkv.weight[i * hd: i * hd + k] = w[name]
                o.weight[:, :k] = w["wo"]
                o.bias.copy_(w["bo"])
                used = w["w1"].shape[0]
                fc1.weight[:used] = w["w1"]
                fc1.bias[:used] = w["b1"]
                fc2.weight[:, :used] = w["w2"]
                fc2.bias.copy_(w["b2"])
            for mod, lin in zip((self.qkv, self.o, self.fc1, self.fc2), lins):
                mod.append(lin.requires_grad_(False))

    def caches(self, batch: int, capacity: int, dev):
        return [torch.zeros(2, batch, self.h, capacity, self.dh, device=dev) for _ in self.qkv]

    @torch.no_grad()
    def forward(self, x: torch.Tensor, caches=None, pos: torch.Tensor | None = None,
                bucket: int = 0) -> torch.Tensor:
        b, t, _ = x.shape
        hd = self.h * self.dh
        visible = None
        if caches is not None:
            visible = (torch.arange(bucket, device=x.device)[None, :] <= pos[:, None])[:, None, None]
            rows = torch.arange(b, device=x.device)
        for i in range(len(self.qkv)):
            q, k, v = self.qkv[i](x).view(b, t, 3, self.h, self.dh).permute(2, 0, 3, 1, 4)
            if caches is not None:
                caches[i][0][rows, :, pos] = k[:, :, 0]
                caches[i][1][rows, :, pos] = v[:, :, 0]
                k, v = caches[i][0][:, :, :bucket], caches[i][1][:, :, :bucket]
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=visible,
                                               is_causal=visible is None, scale=1.0)
            x = x + self.o[i](a.transpose(1, 2).reshape(b, t, hd))
            x = x + self.fc2[i](torch.relu(self.fc1[i](x)))
        return x


def capture(fn, dev):
    """fn as a replayable CUDA graph."""
    from tw_lowering.model import cuda_graph

    with torch.cuda.device(dev):
        return cuda_graph(fn)[0].replay


# -- cases ---------------------------------------------------------------------------------

def cases(sizes):
    from tw_examples import adder, calculator
    from twdialect.random_graphs import layered_graph, sample_inputs

    for mod, text in ((calculator, "123*456="), (adder, "123+456=")):
        prog = mod.build()
        ids = np.array([prog.vocab.index(c) for c in prog.normalize(text)])
        g = prog.geometry
        yield (mod.__name__.split(".")[-1], prog.module, (g.d, g.d_head, g.d_hidden),
               lambda n, ids=ids: {"tokens": np.resize(ids, n)}, prog.max_len)
    for n_ops in sizes:
        module, _ = layered_graph(n_ops)
        yield (f"layered_{n_ops}", module, (2048, 32, 8192),
               lambda n, module=module: sample_inputs(module, n, 0), 1 << 20)


ROWS: list[dict] = []


def emit(**row) -> None:
    ROWS.append(row)
    print(json.dumps(row), flush=True)


def summary(rows: list[dict]) -> list[dict]:
    """Ratios within one run: dense time / tw time (each the faster of eager and CUDA graph,
    or torch.compile'd and graphed), per graph, device, size and shape."""
    out = []
    for r in rows:
        if r["kind"] == "forward_dense":
            tw = next(t for t in rows if t["kind"] == "forward" and t["graph"] == r["graph"]
                      and t["device"] == r["device"] and t["positions"] == r["positions"])
            out.append(dict(kind="summary", what="forward", graph=r["graph"],
                            device=r["device"], positions=r["positions"], shape=r["shape"],
                            dense_over_tw=round(min(r["dense_s"], r.get(
                                "dense_graph_s", float("inf"))) / min(tw["tw_s"], tw.get(
                                "tw_graph_s", float("inf"))), 2)))
        if r["kind"] == "decode_dense":
            tw = next(t for t in rows if t["kind"] == "decode" and t["graph"] == r["graph"]
                      and t["device"] == r["device"] and t["batch"] == r["batch"])
            best = min(tw.get(k, float("inf")) for k in ("tw_eager_s", "tw_graph_s",
                                                          "tw_compiled_s"))
            dense = r.get("dense_graph_s", r["dense_eager_s"])
            out.append(dict(kind="summary", what="decode", graph=r["graph"], device=r["device"],
                            batch=r["batch"], shape=r["shape"],
                            dense_over_tw=round(dense / best, 2)))
    return out


def bench_case(name, module, geometry, feeds_of, max_len, args, devices):
    from tw_lowering import compile

    t = time.perf_counter()
    ct = compile(module, d=geometry[0], d_head=geometry[1], d_hidden=geometry[2],
                 pipeline="default")
    n_ops = sum(1 for _ in module.walk())  # (the graph as written, before the pipeline)
    info = dict(graph=name, n_layers=ct.n_layers, floor=ct.stats.floor,
                stored_params=ct.stored_params(), allocated_params=ct.allocated_params(),
                compile_s=round(time.perf_counter() - t, 2))
    emit(kind="model", **info)
    for dev_name in devices:
        dev = torch.device(dev_name)
        ct.to(dev)
        label = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
        bw = copy_bandwidth(dev)
        limit = args.dense_max_ops if dev.type == "cuda" else args.cpu_dense_max_ops
        shapes = [sh for sh in args.dense_shapes if n_ops <= limit]
        for n in sorted({min(p, max_len) for p in args.positions}):
            feeds = feeds_of(n)
            x0 = ct.embed(feeds)
            row = dict(kind="forward", graph=name, device=label, torch=torch.__version__,
                       positions=n, tw_s=median_time(lambda: ct.forward(x0), args.repeats, dev),
                       run_s=median_time(lambda: ct.run(feeds), args.repeats, dev))
            if dev.type == "cuda":  # the forward as a CUDA graph (captured on a shape's return)
                ct.graphed_forward(x0)
                row["tw_graph_s"] = median_time(lambda: ct.graphed_forward(x0), args.repeats, dev)
            emit(**row)
        for b in args.batches:
            bench_decode(ct, None, name, feeds_of, max_len, b, dev, label, bw, args, n_ops)
        for shape in shapes:  # one dense model at a time (the machine-shaped one is large)
            dense = DenseTransformer(ct, shape, dev)
            for n in sorted({min(p, max_len) for p in args.positions}):
                x0 = ct.embed(feeds_of(n))
                want = ct.output_columns(ct.forward(x0))
                got = ct.output_columns(dense(x0))
                row = dict(kind="forward_dense", graph=name, device=label, shape=shape,
                           positions=n,
                           matches=bool(torch.allclose(got, want, atol=1e-3, rtol=1e-4)),
                           dense_s=median_time(lambda: dense(x0), args.repeats, dev))
                if dev.type == "cuda":
                    row["dense_graph_s"] = median_time(capture(lambda: dense(x0), dev),
                                                       args.repeats, dev)
                emit(**row)
            for b in args.batches:
                bench_decode(ct, dense, name, feeds_of, max_len, b, dev, label, bw, args, n_ops,
                             shape)
            del dense
            if dev.type == "cuda":
                torch.cuda.empty_cache()
        ct.to("cpu")


def bench_decode(ct, dense, name, feeds_of, max_len, batch, dev, label, bw, args, n_ops,
                 shape=None):
    from tw_lowering.decode import Decoder

    prompt = min(PROMPT, max_len - 1)
    capacity = min(max_len, prompt + args.steps + 1)
    checked = ct.check_batch([feeds_of(prompt + 1)] * batch)
    first = [type(c)({k: v[:prompt] for k, v in c.values.items()}, prompt) for c in checked]
    nxt = [type(c)({k: v[prompt:] for k, v in c.values.items()}, 1) for c in checked]
    row = dict(kind="decode" if dense is None else "decode_dense", graph=name, device=label,
               torch=torch.__version__, batch=batch, position=prompt)
    if dense is not None:
        return bench_dense_decode(ct, dense, shape, row, checked, prompt, capacity, dev, args)
    variants = [("tw_eager", False, False)]
    if dev.type == "cuda":
        variants.append(("tw_graph", True, False))
        if n_ops <= args.compile_max_ops and batch in args.compile_batches:
            variants.append(("tw_compiled", True, True))
    for key, graphs, comp in variants:
        dec = Decoder(ct, batch, capacity, cuda_graphs=graphs, compile=comp)
        dec.prefill(first)
        feeds = ct.feeds(nxt, 1)
        pos = torch.full((batch,), prompt, device=dev)
        bucket = next(b for b in dec.buckets if b > prompt)
        step = (lambda dec=dec, feeds=feeds, pos=pos, bucket=bucket:
                dec.step_tensors(feeds, pos, bucket))
        t0 = time.perf_counter()
        step()
        row[f"{key}_first_s"] = round(time.perf_counter() - t0, 3)  # capture / compile
        s = median_time(step, args.repeats, dev, inner=args.steps)
        row[f"{key}_s"] = s
        row[f"{key}_tokens_per_s"] = round(batch / s, 1)
        if key == "tw_eager":
            row["kernels"] = count_kernels(step, dev)
            weights = 4 * ct.stored_params()
            cache = sum(4 * c[:, :, :bucket].numel() for c in dec.caches if c is not None)
            row["bytes"] = weights + cache
            row["floor_s"] = row["bytes"] / bw
        if key == "tw_graph":
            row["floor_ratio"] = round(s / row["floor_s"], 1)
    emit(**row)


def bench_dense_decode(ct, dense, shape, row, checked, prompt, capacity, dev, args):
    from tw_lowering.decode import bucket_sizes

    batch = len(checked)
    nxt = [type(c)({k: v[prompt:] for k, v in c.values.items()}, 1) for c in checked]
    caches = dense.caches(batch, capacity, dev)
    x = ct.residual(ct.feeds(nxt, 1), torch.full((batch, 1), prompt, device=dev),
                    ct.position_table(capacity))
    pos = torch.full((batch,), prompt, device=dev)
    bucket = next(b for b in bucket_sizes(capacity) if b > prompt)
    step = lambda: dense(x, caches, pos, bucket)  # noqa: E731
    row.update(shape=shape, dense_bytes=4 * sum(p.numel() for p in dense.parameters()),
               dense_eager_s=median_time(step, args.repeats, dev, inner=args.steps),
               dense_kernels=count_kernels(step, dev))
    if dev.type == "cuda":
        replay = capture(step, dev)
        row["dense_graph_s"] = median_time(replay, args.repeats, dev, inner=args.steps)
    emit(**row)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ints = lambda s: [int(v) for v in s.split(",") if v]  # noqa: E731
    ap.add_argument("--sizes", type=ints, default=[1000, 10000, 100000])
    ap.add_argument("--positions", type=ints, default=[64, 512, 2048])
    ap.add_argument("--batches", type=ints, default=[1, 8, 64])
    ap.add_argument("--devices", default=None, help="default: cpu, and cuda if present")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--dense-max-ops", type=int, default=20000)
    ap.add_argument("--cpu-dense-max-ops", type=int, default=2000)
    ap.add_argument("--dense-shapes", type=lambda s: s.split(","), default=["trimmed", "machine"])
    ap.add_argument("--compile-max-ops", type=int, default=20000)
    ap.add_argument("--compile-batches", type=ints, default=[1, 8, 64],
                    help="batch sizes the torch.compile'd step is measured at")
    ap.add_argument("--graphs", default=None, help="only graphs whose name contains this")
    args = ap.parse_args()
    devices = (args.devices.split(",") if args.devices else
               ["cpu"] + (["cuda"] if torch.cuda.is_available() else []))
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    for case in cases(args.sizes):
        if args.graphs and args.graphs not in case[0]:
            continue
        bench_case(*case, args, devices)
    for row in summary(ROWS):
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
