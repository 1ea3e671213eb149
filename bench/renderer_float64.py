"""The DOOM-style renderer (examples/primitive/renderer.py) compiled in float32 and in float64
at residual widths 1024 and 2048: how many answer positions each model gets right, beside the
oracle. One JSON line per width, then a summary line.

An answer position is a column token of a sequence: `--scenes` consistent scenes
(`renderer.sample_scene`, every column token present) and as many arbitrary in-range ones
(every field a random integer in [0, 15]: inconsistent BSPs, garbage rows); it is right when
every output there, rounded, equals the renderer's plain-Python reference (every output is an
integer). The oracle (`twdialect.evaluate`, float64) is scored the same way, and each model's
largest |model - oracle| over every output and position is reported beside its count.

    python3 bench/renderer_float64.py [--scenes 16] [--widths 1024,2048] [--seed 0] [--device cuda]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def right_positions(got: dict, want: dict, first: int) -> np.ndarray:
    """(column tokens,) bool: every output, rounded, equals the reference at that token."""
    ok = None
    for name, w in want.items():
        g = np.round(np.asarray(got[name], np.float64)[first:])
        row_ok = (g == w[first:]).all(axis=1)
        ok = row_ok if ok is None else ok & row_ok
    return ok


def scenes(renderer, n: int, seed: int) -> list[dict]:
    """n consistent scenes and n arbitrary in-range sequences, every column token present."""
    from tw_examples.primitive import renderer as R

    rng = np.random.default_rng(seed)
    lay = renderer.layout
    consistent = [R.sample_scene(lay, rng, lay.col_tokens) for _ in range(n)]
    arbitrary = [{"scene": rng.integers(0, R.GRID + 1, size=(lay.max_len, R.FIELDS)
                                        ).astype(np.float64)} for _ in range(n)]
    return consistent + arbitrary


def score(outputs: list[dict], refs: list[dict], first: int, oracle: list[dict] | None = None
          ) -> tuple[int, list[int], float]:
    """Positions right over a batch's `outputs`, the indices (sequence * tokens + token) of the
    wrong ones, and the largest |output - oracle| (0 without `oracle`)."""
    right, wrong, at, worst = 0, [], 0, 0.0
    for i, (got, want) in enumerate(zip(outputs, refs)):
        ok = right_positions(got, want, first)
        right += int(ok.sum())
        wrong += [at + int(j) for j in np.nonzero(~ok)[0]]
        at += len(ok)
        if oracle is not None:
            worst = max([worst] + [float(np.abs(np.asarray(got[k], np.float64) - v).max())
                                   for k, v in oracle[i].items()])
    return right, wrong, worst


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenes", type=int, default=16)
    ap.add_argument("--widths", default="1024,2048")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--pipeline", default="default")
    ap.add_argument("--device", default="cpu", help="where the models run (cpu, cuda)")
    args = ap.parse_args()

    import tw_lowering as lowering
    from tw_examples.primitive import renderer as R
    from twdialect import evaluate

    r = R.build()
    first = r.layout.first_column
    batch = scenes(r, args.scenes, args.seed)
    refs = [r.reference(xs) for xs in batch]
    total = sum(len(x["scene"]) - first for x in batch)
    t = time.perf_counter()
    oracle = [evaluate(r.module, xs) for xs in batch]
    oracle_s = time.perf_counter() - t
    oracle_right, oracle_wrong, _ = score(oracle, refs, first)
    summary = {"graph": r.name, "answer_positions": total, "oracle_right": oracle_right,
               "oracle_wrong": oracle_wrong, "oracle_seconds": round(oracle_s, 2)}
    for d in (int(w) for w in args.widths.split(",")):
        row = {"d": d, "device": args.device, "d_head": r.d_head, "d_hidden": 4 * d,
               "pipeline": args.pipeline,
               "answer_positions": total, "oracle_right": oracle_right}
        for dtype in ("float32", "float64"):
            t = time.perf_counter()
            ct = lowering.compile(r.module, d=d, d_head=r.d_head, d_hidden=4 * d,
                                  pipeline=args.pipeline, dtype=dtype).to(args.device)
            compile_s = time.perf_counter() - t
            t = time.perf_counter()
            outputs = [ct.run(xs) for xs in batch]
            run_s = time.perf_counter() - t
            right, wrong, worst = score(outputs, refs, first, oracle)
            row["layers"] = ct.n_layers
            row[dtype] = {"right": right, "wrong": wrong, "max_abs_vs_oracle": worst,
                          "compile_seconds": round(compile_s, 2), "run_seconds": round(run_s, 2)}
        print(json.dumps(row), flush=True)
        summary[f"d{d}"] = {k: row[k]["right"] for k in ("float32", "float64")}
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
