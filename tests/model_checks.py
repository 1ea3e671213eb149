"""What the model tests share: outputs equal within tw's contract, an ONNX round trip."""

from __future__ import annotations

import numpy as np

import twdialect


def assert_close(got: dict, want: dict, atol: float = 1e-4) -> None:
    """Every output of `want` in `got`, within atol x max(1, |output|) (tw's fp32 contract)."""
    assert got.keys() == want.keys()
    for k in want:
        scale = max(1.0, float(np.abs(want[k]).max()))
        err = float(np.abs(got[k] - want[k]).max())
        assert err <= atol * scale, f"output {k}: error {err} (scale {scale})"


def onnx_round_trip(ct, module, feeds: dict, path):
    """Export `ct` to ONNX, load it back, and hold its run and a 3-step generation (argmax of
    `logits` fed back as the next token) to the oracle; returns the loaded model."""
    from tw_lowering.export.onnx import export_onnx, load_onnx

    export_onnx(ct, path)
    model = load_onnx(path, ct)
    assert_close(model.run(feeds), twdialect.evaluate(module, feeds))
    back = lambda out: {"tokens": int(np.argmax(out["logits"]))}  # noqa: E731
    assert_close(model.generate(feeds, 3, back), twdialect.generate(module, feeds, 3, back))
    return model


def readme_graph():
    """The README's example: y = x where x0 - x1 + 0.5 >= 0, else -x (a compare and a select:
    the compiled model follows the compare's ramp just below 0)."""
    from twdialect import ops as tw

    with tw.Graph("main") as g:
        x = tw.input("x", 2, value_range=(-8.0, 8.0))
        y = tw.select(tw.compare(tw.linear(x, [[1.0], [-1.0]], [0.5]), 0.0), x, tw.negate(x))
        tw.output("y", y)
    return g.module


def decode_staggered(ct, module, compiled: bool, steps: int = 12, lengths=(3, 7, 5),
                     positions: int = 20):
    """Three prompts of `lengths` positions decoded as one batch through the CUDA-graph step
    (`compiled`: the inductor-compiled step, its counters cleared first), `steps` more
    positions each fed from the same sampled inputs (`positions` of them per sequence).
    Returns (decoder, [(feeds, prompt length, outputs per position)])."""
    import torch
    from torch._dynamo.utils import counters

    from tw_lowering.decode import Decoder
    from twdialect.inputs import check_feedback
    from twdialect.random_graphs import sample_inputs

    full = [sample_inputs(module, positions, s) for s in range(len(lengths))]
    torch._dynamo.reset()
    counters.clear()
    dec = Decoder(ct, len(lengths), positions, cuda_graphs=True, compile=compiled)
    rows = [[r] for r in dec.prefill(ct.check_batch(
        [{k: v[:n] for k, v in f.items()} for f, n in zip(full, lengths)]))]
    for _ in range(steps):
        nxt = [check_feedback(ct.contract, {k: v[p] for k, v in f.items()}, int(p))
               for f, p in zip(full, dec.positions)]
        for r, o in zip(rows, dec.step(nxt)):
            r.append(o)
    return dec, [(f, n, {k: np.concatenate([p[k] for p in r]) for k in r[0]})
                 for f, n, r in zip(full, lengths, rows)]
