"""Verifying drafted RV32 traces (`lowering/verify.py`): one teacher-forced parallel pass of the
compiled model over a whole trace, exact-index heads answered as gathers. JSON, one object per
line (sort_keys).

    python3 bench/verify_trace.py                          # CPU: a short trace (2^14 positions)
    python3 bench/verify_trace.py --gpu --trace t.npy --elf prog.elf --ram 2048 \\
        --max-context 1048576                              # a 10^6-token trace on a GPU

The machine is firebrand's RV32IM (`RV32Spec(ram_bytes=--ram, max_context=--max-context)`,
default context: the trace's length rounded up to a power of two, at least 2^14), compiled by
tw (`RV32(cache=True)`: TW_CACHE_DIR; `--no-cache`: compiled afresh, nothing stored). The
program is `--elf`, else `--source` (C, built with `tw_examples.rv32.build`), else a checksum
loop written here and built. The draft is `--trace` (an .npy of token values, the prompt
first: made elsewhere by any drafter), else made here by `--drafter`: ``firebrand``
(firebrand's own model, its C decoder) or ``index`` (tw's CPU index decoder), cut at
`--tokens` positions (default: the whole context; 2^14 positions on the CPU).

Measured on one H200 (torch 2.11; the median of 5 runs): a 1,048,576-position trace of the
checksum loop (RAM 2048, max_context 2^20, 37 float64 layers; the draft by firebrand's C
decoder) verifies in 0.776 s, 1.35 million positions/s, first_divergence null; 90,174,517
head answers gathered and 3,019 attended (prompt queries of the three match heads); the draft
altered at position 3380 diverges at 3379; the first 16,384 positions' greedy values equal
`ct.run`'s (outputs within 1.6e-9). Today's CUDA-graph decode: 2.18 ms per token for this
model at position 4096, 0.283 ms per token for the 10^3-op layered graph (11 layers).

Lines: ``model`` (layers, d, dtype, heads by plan kind, compile or cache-load seconds);
``draft`` (who made it, its rate where made here); ``verify``: positions, generated tokens,
the device, ``verify_seconds`` (the whole `verify_trace` call: input checks, residual, every
layer, the comparison; `--repeats` runs after one warm-up on a 2^16 prefix, the median
reported, every run listed), ``tokens_per_s`` (positions / seconds),
``generated_tokens_per_s``, ``first_divergence`` (None: the model generates the whole draft
itself), ``indexed_heads`` / ``attended_heads`` ((position, head) answers by gather and by
attention) and ``attended_by_head``; ``altered`` (with `--alter K`): the draft with the token
at prompt + K changed, whose ``first_divergence`` must be prompt + K - 1 (``as_expected``);
``short_check``: the first `--check` positions verified and run by `ct.run` on the same device,
``predicted_equal`` (greedy next values) and ``max_abs_diff`` of the output; ``decode``:
today's KV-cache decode (`ct.decoder(1, capacity)`, CUDA graphs on a GPU, one step replayed
at a fixed position, median of `--decode-repeats` x `--decode-steps`): ms per token for the
RV32 model at position `--decode-position` and for a layered random graph of `--layered-ops`
ops (`twdialect.random_graphs.layered_graph`, d=2048, d_head=32, d_hidden=8192, as
bench/runtime.py), beside the verify rate. `--gpu` runs everything on the GPU (cuda).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

LOOP = r"""
/* A long-running loop: an LCG, memory traffic over a small table, a line of output every
   1024 iterations (decimal printing divides: the machine's microcoded division). */
#include "tw_rt.h"

static u32 buf[32];

int main(void) {
    u32 x = 12345, sum = 0;
    for (u32 i = 0; i < 2000000; i++) {
        x = x * 1103515245u + 12345u;
        u32 k = (x >> 16) & 31;
        buf[k] += x;
        sum ^= buf[(k + 7) & 31];
        if ((i & 1023) == 0) { tw_putu(sum & 1023); tw_puts("\n"); }
    }
    return (int)(sum & 127);
}
"""


def emit(**row) -> None:
    print(json.dumps(row, sort_keys=True, default=str), flush=True)


def _sync(dev) -> None:
    import torch

    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def _elf(args) -> tuple[str, bytes]:
    if args.elf:
        return os.path.basename(args.elf), open(args.elf, "rb").read()
    from tw_examples.rv32 import build

    with tempfile.TemporaryDirectory() as d:
        src = args.source
        if src is None:
            src = os.path.join(d, "loop.c")
            with open(src, "w") as f:
                f.write(LOOP)
        return os.path.basename(src), build([src], os.path.join(d, "prog.elf"), args.ram)


def _draft(args, rv, prompt: list[int], n: int):
    """(token values as int64, drafter, its tokens/s or None)."""
    import numpy as np

    if args.trace:
        tr = np.load(args.trace).astype(np.int64)
        if list(tr[:len(prompt)]) != prompt:
            raise SystemExit("verify_trace: the trace does not start with this program's prompt")
        return tr[:n], "file", None
    steps = n - len(prompt)
    t0 = time.perf_counter()
    if args.drafter == "firebrand":
        import shutil

        import firebrand

        fm = firebrand.compile_machine(rv.spec.machine())
        t0 = time.perf_counter()
        tr = [int(t) for t in fm.generate(prompt, max_steps=steps,
                                          backend="c" if shutil.which("cc") else "python")]
    else:
        tr = list(prompt)
        for v in rv.compiled.next_values(prompt, n, "draft", decoder="index"):
            tr.append(v)
            if len(tr) >= n or v == -1:
                break
    dt = time.perf_counter() - t0
    return np.asarray(tr, np.int64), args.drafter, (len(tr) - len(prompt)) / dt


def decode_ms(ct, feeds_of, prompt: int, steps: int, repeats: int, dev) -> dict:
    """ms per token of one KV-cache decode step (batch 1) at position `prompt`, replayed
    (a step is idempotent: it writes the same cache row), as bench/runtime.py times it."""
    from tw_lowering.decode import Decoder

    checked = ct.check_batch([feeds_of(prompt + 1)])
    first = [type(c)({k: v[:prompt] for k, v in c.values.items()}, prompt) for c in checked]
    nxt = [type(c)({k: v[prompt:] for k, v in c.values.items()}, 1) for c in checked]
    dec = Decoder(ct, 1, prompt + steps + 1, cuda_graphs=dev.type == "cuda")
    dec.prefill(first)
    import torch

    feeds = ct.feeds(nxt, 1)
    pos = torch.full((1,), prompt, device=dev)
    dec._reserve(prompt + 1)  # (the cache holds the stepped row)
    bucket = dec._bucket(prompt + 1)
    t0 = time.perf_counter()
    dec.step_tensors(feeds, pos, bucket)
    _sync(dev)
    first_s = time.perf_counter() - t0
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(steps):
            dec.step_tensors(feeds, pos, bucket)
        _sync(dev)
        times.append((time.perf_counter() - t) / steps)
    s = statistics.median(times)
    return dict(ms_per_token=round(1e3 * s, 4), tokens_per_s=round(1 / s, 1),
                first_step_s=round(first_s, 3), position=prompt, bucket=bucket,
                cuda_graphs=dec.cuda_graphs)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gpu", action="store_true", help="run on the GPU (cuda)")
    p.add_argument("--elf", default=None, help="a prebuilt RV32IM ELF")
    p.add_argument("--source", default=None, help="a C program to build (else a loop)")
    p.add_argument("--trace", default=None, help="a drafted trace (.npy of token values)")
    p.add_argument("--drafter", choices=("firebrand", "index"), default="firebrand")
    p.add_argument("--ram", type=int, default=2048)
    p.add_argument("--max-context", type=int, default=None)
    p.add_argument("--tokens", type=int, default=None, help="positions verified (default: "
                   "the whole trace / context; 2^14 on the CPU)")
    p.add_argument("--chunk", type=int, default=None)
    p.add_argument("--no-cache", action="store_true", help="compile without the cache")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--alter", type=int, default=1000,
                   help="also verify the draft with token prompt + K changed (0: skip)")
    p.add_argument("--check", type=int, default=4096,
                   help="positions checked against ct.run on the same device (0: skip)")
    p.add_argument("--layered-ops", type=int, default=1000, help="0: skip the layered graph")
    p.add_argument("--decode-position", type=int, default=4096)
    p.add_argument("--decode-steps", type=int, default=50)
    p.add_argument("--decode-repeats", type=int, default=5)
    args = p.parse_args(argv)
    sys.path.insert(0, ROOT)
    warnings.simplefilter("ignore")

    import numpy as np
    import torch

    import tw_lowering.model  # noqa: F401 - torch imported before any clock starts
    from tw_frontends.firebrand.rv32 import RV32, load_elf
    from tw_lowering.verify import verify_trace

    torch.backends.cuda.matmul.allow_tf32 = False
    dev = torch.device("cuda" if args.gpu else "cpu")
    label = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    name, elf = _elf(args)
    n_file = len(np.load(args.trace, mmap_mode="r")) if args.trace else None
    want = args.tokens or n_file or (None if args.gpu else 1 << 14)
    context = args.max_context or max(1 << 14, 1 << max(0, (want or (1 << 20)) - 1).bit_length())
    rv = RV32(ram_bytes=args.ram, max_context=context, cache=not args.no_cache)
    t0 = time.perf_counter()
    cm = rv.compiled
    compile_s = time.perf_counter() - t0
    ct = cm.compiled
    kinds: dict[str, int] = {}
    for layer in ct.layers:
        for plan in layer.attn.plans:
            kinds[plan.kind] = kinds.get(plan.kind, 0) + 1
    emit(kind="model", machine=f"RV32Spec(ram_bytes={args.ram}, max_context={context})",
         layers=ct.n_layers, d=ct.machine.d, dtype=ct._np_dtype.name, heads=kinds,
         seconds=round(compile_s, 2), cached=rv.loaded_from_cache, stored_params=ct.stored_params())
    image, entry = load_elf(elf, args.ram)
    prompt = rv.prompt(image, entry)
    n = min(want or context, context)
    draft, drafter, rate = _draft(args, rv, prompt, n)
    n = len(draft)
    emit(kind="draft", program=name, drafter=drafter, positions=n, prompt=len(prompt),
         tokens=n - len(prompt), draft_tokens_per_s=None if rate is None else round(rate, 1))

    ct.to(dev)
    warm = draft[:min(n, 1 << 16)]
    verify_trace(cm, warm, prompt_length=len(prompt), chunk=args.chunk)  # (kernels, cuBLAS)
    runs = []
    for _ in range(max(1, args.repeats)):
        _sync(dev)
        r = verify_trace(cm, draft, prompt_length=len(prompt), chunk=args.chunk)
        runs.append(r)
    secs = [r.seconds for r in runs]
    s = statistics.median(secs)
    r = runs[0]
    verify_rate = n / s
    emit(kind="verify", program=name, device=label, positions=n, tokens=n - len(prompt),
         prompt=len(prompt), verify_seconds=round(s, 4), runs=[round(x, 4) for x in secs],
         tokens_per_s=round(verify_rate, 1),
         generated_tokens_per_s=round((n - len(prompt)) / s, 1),
         first_divergence=r.first_divergence, indexed_heads=r.indexed_heads,
         attended_heads=r.attended_heads,
         attended_by_head={f"{li}.{h}": c for (li, h), c in sorted(r.attended_by_head.items())},
         chunk=args.chunk, torch=torch.__version__)
    if args.alter and len(prompt) + args.alter < n:
        k = len(prompt) + args.alter
        bad = draft.copy()
        bad[k] = (bad[k] + 1) % 256
        ra = verify_trace(cm, bad, prompt_length=len(prompt), chunk=args.chunk)
        emit(kind="altered", device=label, altered_at=k, first_divergence=ra.first_divergence,
             as_expected=ra.first_divergence == k - 1, verify_seconds=round(ra.seconds, 4))
    if args.check:
        m = min(n, args.check)
        rc = verify_trace(cm, draft[:m], prompt_length=len(prompt), keep_outputs=True,
                          chunk=args.chunk)
        out = ct.run({"tokens": draft[:m] - cm.machine.lower})
        pred = np.floor(out["next"][:, 0] + 0.5).astype(np.int64)
        emit(kind="short_check", device=label, positions=m,
             predicted_equal=bool(np.array_equal(pred, rc.predicted)),
             max_abs_diff=float(np.abs(out["next"] - rc.outputs["next"]).max()),
             first_divergence=rc.first_divergence)
    # today's KV-cache decode beside the verify rate
    pos = min(args.decode_position, n - 1 - args.decode_steps)
    row = decode_ms(ct, lambda k: {"tokens": draft[:k] - cm.machine.lower}, pos,
                    args.decode_steps, args.decode_repeats, dev)
    emit(kind="decode", graph="rv32", device=label, layers=ct.n_layers,
         verify_tokens_per_s=round(verify_rate, 1),
         verify_over_decode=round(verify_rate / row["tokens_per_s"], 1), **row)
    ct.to("cpu")
    if args.layered_ops:
        from tw_lowering import compile
        from twdialect.random_graphs import layered_graph, sample_inputs

        module, _ = layered_graph(args.layered_ops)
        t0 = time.perf_counter()
        lt = compile(module, d=2048, d_head=32, d_hidden=8192, pipeline="default")
        cs = time.perf_counter() - t0
        lt.to(dev)
        row = decode_ms(lt, lambda k: sample_inputs(module, k, 0), 32, args.decode_steps,
                        args.decode_repeats, dev)
        emit(kind="decode", graph=f"layered_{args.layered_ops}", device=label,
             layers=lt.n_layers, compile_s=round(cs, 2), verify_tokens_per_s=round(verify_rate, 1),
             verify_over_decode=round(verify_rate / row["tokens_per_s"], 1), **row)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
