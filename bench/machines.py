"""Machines benchmark: firebrand's machines compiled by firebrand's own compiler
(`firebrand.compile_machine`) and by tw's (`tw_lowering.compile_machine`) side by side in one
run: each model's size, compile seconds, whether its greedy generation equals
`firebrand.reference.run` token for token, and its tokens per second. One JSON object per
machine line (sort_keys).

    python3 bench/machines.py                          # counter, fibonacci, gcd, histogram,
                                                       #   stack, life, arithmetic
    python3 bench/machines.py --machines stack,life --max-steps 100 --repeats 5

Each machine is built as `tw-machine` builds it (`tw_tools.tw_machine.build`, firebrand's own
constructors and encoders for the bundled ones) from the inputs in INPUTS. Both compilers get
the same max_context (`--max-context`, else the machine's context_limit, else tw's
DEFAULT_CONTEXT, 256), and every generation (both models and the reference) takes
`min(--max-steps, max_context - prefix length)` steps at most, stopping at a halt value.

Per row, tw: `tw_layers`, `tw_floor`, `tw_residual` (d), `tw_d_head`, `tw_d_hidden`,
`tw_heads`, `tw_neurons`, `tw_params` (`CompiledMachine.stats`: stock-layout entries of the
attention and MLP weights and biases), `tw_compile_seconds`, `tw_exact`, `tw_tokens_per_s`
(`CompiledMachine.generate`, tw's KV-cache decoder). firebrand, as its `Transformer.config`
names them: `firebrand_layers` (its `layers`: the FFN stages), `firebrand_heads`,
`firebrand_width` (its d_model: residual columns); counted from its schedule and weights:
`firebrand_attention_stages` (attention sublayers), `firebrand_blocks` (attention + FFN
pairs, the unit of tw's layer), `firebrand_neurons` (the FFN stages' hidden columns),
`firebrand_params` (entries of the head_* and ff_* matrices; no embedding/unembedding, no
biases: it has none); `firebrand_compile_seconds`, `firebrand_exact`,
`firebrand_tokens_per_s` (`Transformer.generate`, its Python KV-cache backend). tokens/s: the
generated steps over the median of `--repeats` generate calls. `exact`: every compiler that
compiled the machine generates the reference's tokens. A compiler that refuses the machine
leaves its columns null and its one-line message in `error` (tw) or `firebrand_error`.
Expected today: every machine exact in both; firebrand refuses counter (its inferred output
range exceeds the alphabet). The RV32IM machine has a benchmark of its own (bench/rv32.py).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import types
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The inputs each machine is built from (tw-machine's words; tools/tw_machine.py).
INPUTS = {
    "counter": ["3"],
    "fibonacci": ["1", "1"],
    "gcd": ["12", "18"],
    "histogram": ["0", "2", "1", "2"],
    "stack": ["push:3", "push:4", "pop"],
    "life": [],
    "arithmetic": ["12+34="],
}
TW_KEYS = ("layers", "floor", "residual", "d_head", "d_hidden", "heads", "neurons", "params")
FB_KEYS = ("layers", "heads", "width", "attention_stages", "blocks", "neurons", "params")


def _line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _timed_generate(generate, prefix, steps: int, repeats: int):
    """(tokens, tokens per second): the generated steps over the median seconds."""
    times, tokens = [], None
    for _ in range(max(1, repeats)):
        t0 = time.perf_counter()
        tokens = generate(list(prefix), steps)
        times.append(time.perf_counter() - t0)
    n = len(tokens) - len(prefix)
    sec = statistics.median(times)
    return tokens, round(n / sec, 1) if sec > 0 else None


def firebrand_stats(model) -> dict:
    """The sizes of a firebrand `Transformer`: its config's layers / heads / width, and counts
    from its schedule and weights."""
    c, w = model.config, model.weights
    schedule = c.get("schedule") or []
    attention = sum(1 for s in schedule if s["kind"] == "attention")
    blocks, last = 0, None
    for s in schedule:  # a block: an attention sublayer and the FFN after it (either may be absent)
        if s["kind"] == "attention" or last != "attention":
            blocks += 1
        last = s["kind"]
    if not schedule:  # pack=False / version 1: every head before every FFN stage
        attention, blocks = int(c["heads"] > 0), int(c["layers"]) + int(c["heads"] > 0)
    neurons = sum(int(v.shape[1]) for k, v in w.items() if k.startswith("ff_") and k.endswith("_in"))
    params = sum(int(v.shape[0]) * int(v.shape[1]) for k, v in w.items()
                 if k.startswith(("ff_", "head_")))
    return {"layers": int(c["layers"]), "heads": int(c["heads"]), "width": int(c["width"]),
            "attention_stages": attention, "blocks": blocks, "neurons": neurons,
            "params": params}


def run_machine(name: str, *, words=None, max_steps: int = 200, max_context: int | None = None,
                repeats: int = 3, upper: int = 15, modulus: int = 10) -> dict:
    """One row: `name` built from `words` (default INPUTS[name]), compiled by firebrand and by
    tw, each generation checked against firebrand.reference.run."""
    import firebrand
    from firebrand import reference

    import tw_lowering.model  # noqa: F401 - torch imported before any clock starts
    from tw_frontends.firebrand import compile_machine
    from tw_lowering.machines import DEFAULT_CONTEXT
    from tw_tools.tw_machine import build

    words = INPUTS[name] if words is None else list(words)
    ns = types.SimpleNamespace(upper=upper, modulus=modulus, max_context=max_context)
    machine, prefix = build(name, words, ns)
    limit = machine.context_limit
    ctx = max_context if max_context is not None else (limit if limit is not None
                                                       else DEFAULT_CONTEXT)
    steps = max(0, min(max_steps, ctx - len(prefix)))
    ref = reference.run(machine, prefix, steps)
    row = {"machine": name, "inputs": " ".join(words), "prefix_length": len(prefix),
           "max_context": ctx, "max_steps": steps, "steps": len(ref) - len(prefix),
           "halted": ref[-1] in machine.halt_values, "error": None, "firebrand_error": None}
    row.update({f"tw_{k}": None for k in TW_KEYS + ("compile_seconds", "exact",
                                                    "tokens_per_s")})
    row.update({f"firebrand_{k}": None for k in FB_KEYS + ("compile_seconds", "exact",
                                                          "tokens_per_s")})

    try:
        t0 = time.perf_counter()
        fb = firebrand.compile_machine(machine, max_context=ctx)
        row["firebrand_compile_seconds"] = round(time.perf_counter() - t0, 4)
        row.update({f"firebrand_{k}": v for k, v in firebrand_stats(fb).items()})
        toks, rate = _timed_generate(fb.generate, prefix, steps, repeats)
        row["firebrand_exact"], row["firebrand_tokens_per_s"] = toks == ref, rate
    except Exception as e:  # noqa: BLE001 - a refusal is a result: one line in the row
        row["firebrand_error"] = _line(e)

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # float32 PrecisionWarnings on history reads
            t0 = time.perf_counter()
            cm = compile_machine(machine, max_context=ctx)
            row["tw_compile_seconds"] = round(time.perf_counter() - t0, 4)
            row.update({f"tw_{k}": getattr(cm.stats, k) for k in TW_KEYS})
            toks, rate = _timed_generate(cm.generate, prefix, steps, repeats)
        row["tw_exact"], row["tw_tokens_per_s"] = toks == ref, rate
    except Exception as e:  # noqa: BLE001
        row["error"] = _line(e)

    ran = [row[k] for k in ("tw_exact", "firebrand_exact") if row[k] is not None]
    row["exact"] = all(ran) if ran else None
    return row


def main(argv=None) -> None:
    from tw_tools.tw_machine import NAMES

    known = [n for n in NAMES if n != "rv32"]
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--machines", default=",".join(known),
                    help=f"comma-separated, of {', '.join(known)} (default: all)")
    ap.add_argument("--max-steps", type=int, default=200,
                    help="the most generated tokens (also bounded by the context)")
    ap.add_argument("--max-context", type=int, default=None,
                    help="both compilers' max_context (default: the machine's context_limit, "
                         "else 256)")
    ap.add_argument("--repeats", type=int, default=3, help="generate calls timed (median)")
    ap.add_argument("--upper", type=int, default=15, help="counter's halt value")
    ap.add_argument("--modulus", type=int, default=10, help="fibonacci's modulus")
    args = ap.parse_args(argv)
    sys.path.insert(0, ROOT)
    for name in filter(None, args.machines.split(",")):
        if name not in INPUTS:
            ap.error(f"unknown machine {name!r} (known: {', '.join(known)})")
        row = run_machine(name, max_steps=args.max_steps, max_context=args.max_context,
                          repeats=args.repeats, upper=args.upper, modulus=args.modulus)
        print(json.dumps(row, sort_keys=True), flush=True)


if __name__ == "__main__":
    main()
