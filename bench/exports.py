"""Exports benchmark: for each model and format, export time, peak memory, file size (padded
stock layout vs tw's trimmed store) and run speed in the stock tool beside tw's own runtime.
One JSON object per line.

    python3 bench/exports.py                                  # token programs, 10^3 / 10^4
    python3 bench/exports.py --sizes 100000 --formats transformers --programs ""
    python3 bench/exports.py --device cuda                    # run speed on a GPU

Models: the bundled token programs and layered random graphs whose inputs are one token
input (`layered_graph(tokens=...)`), compiled at d=2048, d_head=32, d_hidden=8192 with
`pipeline="default"`. Each (model, format) runs in its own process, so `peak_rss_mb` is that
process's peak: compile alone (`compile_rss_mb`), then compile + export (`export_rss_mb`);
the export holds a layer at a time, so the difference is about one layer. Run speed: the
median over `--repeats` of a full forward over `--positions` tokens, for the export in its
stock tool and for tw's runtime (`ct.run`), and their ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FORMATS = ("transformers", "tlens", "onnx", "gguf")
GENERATIONS = 10  # random prompts per token program whose greedy answers are compared


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def build(case: str):
    """(module, geometry, vocab, end, token ids for a forward) of a case name."""
    import tw_examples as examples

    if case.startswith("layered_"):
        from twdialect.random_graphs import layered_graph

        module, _ = layered_graph(int(case.split("_")[1]), tokens=64)
        return module, (2048, 32, 8192), None, None, "default"
    p = examples.load(case)
    g = p.geometry
    return p.module, (g.d, g.d_head, g.d_hidden), p.vocab, p.end, None


def median_seconds(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def stock_runner(fmt: str, path: str, device: str):
    """A function ids -> logits running the export in its stock tool."""
    import torch

    if fmt == "transformers":
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(path).to(device).eval()

        def run(ids):
            with torch.inference_mode():
                out = model(torch.as_tensor(ids, device=device)[None]).logits
            return out[0].float().cpu().numpy()
        return run
    if fmt == "tlens":
        from tw_lowering.export.tlens import load_tlens

        model = load_tlens(path, device=device)

        def run(ids):
            with torch.inference_mode():
                return model(torch.as_tensor(ids, device=device)[None])[0].float().cpu().numpy()
        return run
    if fmt == "onnx":
        from tw_lowering.export.onnx import load_onnx

        model = load_onnx(path)
        return lambda ids: np.concatenate(list(model.run({"tokens": np.asarray(ids, np.int64)})
                                               .values()), axis=1)
    if fmt == "gguf":
        from tw_lowering.export.gguf import load_gguf

        model = load_gguf(path)
        return lambda ids: model.logits(list(map(int, ids)))
    raise ValueError(fmt)


def one(case: str, fmt: str, positions: int, repeats: int, device: str) -> dict:
    """Compile `case`, export it as `fmt`, run both: one result row (in this process)."""
    import tw_lowering as lowering
    from tw_lowering.export import export

    module, (d, dh, dhid), vocab, end, pipeline = build(case)
    t = time.perf_counter()
    ct = lowering.compile(module, d=d, d_head=dh, d_hidden=dhid, pipeline=pipeline)
    row = {"case": case, "format": fmt, "n_layers": ct.n_layers,
           "compile_seconds": round(time.perf_counter() - t, 3),
           "compile_rss_mb": round(peak_rss_mb(), 1)}
    out = tempfile.mkdtemp(prefix="tw-export-")
    try:
        target = os.path.join(out, "model.gguf" if fmt == "gguf" else "model")
        options = {"vocab": vocab, "end": end} if fmt in ("transformers", "gguf") else {}
        t = time.perf_counter()
        report = export(ct, target, fmt, **options)
        row["export_seconds"] = round(time.perf_counter() - t, 3)
        row["export_rss_mb"] = round(peak_rss_mb(), 1)
        size = (os.path.getsize(target) if os.path.isfile(target) else
                sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(target) for f in fs))
        # (stock formats report their padded layout; onnx stores tw's trimmed blocks)
        row.update(bytes=size, file_params=report.get("padded_params", report.get("params")),
                   trimmed_params=ct.stored_params(), geometry=report.get("geometry"))
        if positions:
            from tw_lowering.export.stock import StockPlan

            n = min(positions, StockPlan(ct).geometry.n_ctx)
            vocab_n = ct.contract.specs[0].vocab if ct.contract.specs else 1
            ids = np.random.default_rng(0).integers(0, max(1, vocab_n), n)
            run = stock_runner(fmt, target, device)
            import torch

            ct_dev = ct.to(device)
            feeds = {"tokens": ids}
            stock = run(ids)
            ours = np.concatenate([v for v in ct_dev.run(feeds).values()], axis=1)
            width = min(stock.shape[1], ours.shape[1])
            row["max_abs_diff"] = float(np.abs(stock[:, :width] - ours[:, :width]).max())
            row["positions"] = n
            row["stock_forward_ms"] = 1e3 * median_seconds(lambda: run(ids), repeats)
            row["tw_forward_ms"] = 1e3 * median_seconds(lambda: ct_dev.run(feeds), repeats)
            row["stock_over_tw"] = row["stock_forward_ms"] / row["tw_forward_ms"]
            if vocab is not None:  # a token program: greedy generations, export vs tw-run
                import tw_examples as examples
                from tw_examples.token_program import generate

                p = examples.load(case)
                rng = np.random.default_rng(1)
                prompts = [p.sample(rng) for _ in range(GENERATIONS)]
                v = len(p.vocab)
                same = [generate(p, q, lambda inp: {"logits": run(inp["tokens"])[:, :v]})
                        == generate(p, q, ct_dev.run) for q in prompts]
                row["generations_identical"] = f"{sum(same)}/{len(same)}"
            row["device"] = device if device != "cuda" else torch.cuda.get_device_name()
    finally:
        shutil.rmtree(out, ignore_errors=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--programs", default="adder,calculator,sort_digits",
                    help="bundled programs (comma-separated; '' for none)")
    ap.add_argument("--sizes", default="1000,10000", help="layered token graphs, ops")
    ap.add_argument("--formats", default=",".join(FORMATS))
    ap.add_argument("--positions", type=int, default=64, help="tokens in a timed forward (0: "
                    "no run)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--one", nargs=2, metavar=("CASE", "FORMAT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        row = one(*args.one, args.positions, args.repeats, args.device)
        print(json.dumps(row, sort_keys=True), flush=True)
        return
    cases = [c for c in args.programs.split(",") if c]
    cases += [f"layered_{int(s)}" for s in args.sizes.split(",") if s]
    for case in cases:
        for fmt in args.formats.split(","):
            cmd = [sys.executable, os.path.abspath(__file__), "--one", case, fmt,
                   "--positions", str(args.positions), "--repeats", str(args.repeats),
                   "--device", args.device]
            res = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
            lines = res.stdout.strip().splitlines()
            if res.returncode or not lines:
                err = (res.stderr.strip().splitlines() or ["no output"])[-1]
                print(json.dumps({"case": case, "format": fmt, "error": err[:300]}), flush=True)
            else:
                print(lines[-1], flush=True)


if __name__ == "__main__":
    sys.path.insert(0, ROOT)
    main()
