"""RV32 benchmark: firebrand's RV32IM machine compiled by tw and by firebrand, side by side,
running the same bare-metal C programs. JSON, one object per line (sort_keys).

    python3 bench/rv32.py                                   # bundled programs, RAM 8192
    python3 bench/rv32.py --programs hello,crc --ram 8192 --max-context 32768
    python3 bench/rv32.py --elfs a.elf b.elf --device cuda  # prebuilt ELFs, tw on a GPU

First line ("kind": "compile"): the machine (firebrand's node count), tw's model
(`CompiledMachine.stats`: layers, floor, residual d, heads, neurons, params; compile seconds:
the median of `--compile-repeats` compiles of the same machine object by each compiler,
alternating, in one process with torch and numpy already imported, every run listed too;
`critical_path` and `critical_path_after_passes`: the graph's longest chain of MLP and attention
sublayers as translated (each library op lowered on its own: `decompose{select-trees=false}`)
and after tw's default pipeline, `twdialect.analysis.critical_path`), firebrand's
(`layers` = FFN stages, width, heads, compile seconds) and the compile-time ratio.

Then one line per program ("kind": "run"): instructions, tokens, console, exit code, tw's and
firebrand's tokens/s (firebrand: its C decoder where a C compiler is present, else its Python
one), and `exact`: tw's whole token trace equals firebrand's. Programs are built with
`tw_examples.rv32.build` (needs riscv64-unknown-elf-gcc) unless given as ELFs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _critical_paths(module, dtype: str) -> tuple[int, int]:
    from tw_lowering import prepare
    from tw_passes.optimize import DEFAULT_PIPELINE
    from twdialect.analysis import critical_path
    from twdialect.interp import find_graph

    from tw_passes.decompose import DecomposePass

    as_written = (DecomposePass(select_trees=False),)  # each op on its own, nothing fused
    before = critical_path(find_graph(prepare(module, as_written, dtype=dtype), "main"))
    after = critical_path(find_graph(prepare(module, DEFAULT_PIPELINE, dtype=dtype), "main"))
    return before.n_layers, after.n_layers


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--programs", default="hello,fib,crc,collatz,sieve",
                   help="bundled programs (tw_examples.rv32.PROGRAMS), comma separated")
    p.add_argument("--elfs", nargs="*", default=None, help="prebuilt ELFs instead")
    p.add_argument("--ram", type=int, default=8192)
    p.add_argument("--max-context", type=int, default=None)
    p.add_argument("--device", default="cpu", help="where tw's model runs (cpu, cuda)")
    p.add_argument("--no-firebrand-run", action="store_true",
                   help="compile firebrand's model but compare against nothing")
    p.add_argument("--compile-repeats", type=int, default=3,
                   help="compiles of each (alternating); the medians are reported")
    p.add_argument("--critical-path", action="store_true",
                   help="also report the critical path before and after the passes")
    args = p.parse_args(argv)
    sys.path.insert(0, ROOT)
    warnings.simplefilter("ignore")

    import firebrand
    from tw_frontends.firebrand.rv32 import RV32, load_elf
    from tw_frontends.firebrand.translator import translate

    import tw_lowering.model  # noqa: F401 - torch imported before any clock starts

    rv = RV32(ram_bytes=args.ram, max_context=args.max_context,
              device=None if args.device == "cpu" else args.device)
    machine = rv.spec.machine()
    tw_times, fb_times = [], []
    for _ in range(args.compile_repeats):  # alternating, in one process, the same machine
        t0 = time.perf_counter()
        cm = rv.compile(machine)
        tw_times.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        fm = firebrand.compile_machine(machine)
        fb_times.append(time.perf_counter() - t0)
    tw_s, fb_s = statistics.median(tw_times), statistics.median(fb_times)
    from tw_frontends.firebrand.translator import _walk  # (firebrand's nodes, as translate walks)

    row = dict(kind="compile", machine=f"RV32Spec(ram_bytes={args.ram})",
               max_context=rv.max_context, firebrand_nodes=len(_walk(machine.next_value)),
               tw_compile_seconds=round(tw_s, 3), firebrand_compile_seconds=round(fb_s, 3),
               tw_compile_runs=[round(t, 3) for t in tw_times],
               firebrand_compile_runs=[round(t, 3) for t in fb_times],
               compile_ratio=round(tw_s / fb_s, 1), device=args.device,
               **{f"tw_{k}": v for k, v in cm.stats.as_dict().items()},
               firebrand_layers=fm.config["layers"], firebrand_width=fm.config["width"],
               firebrand_heads=fm.config["heads"])
    if args.critical_path:
        module = translate(machine, max_context=rv.max_context)
        from tw_frontends.firebrand.translator import needs_float64

        dtype = "float64" if needs_float64(machine, max_context=rv.max_context) else "float32"
        row["critical_path"], row["critical_path_after_passes"] = _critical_paths(module, dtype)
    print(json.dumps(row, sort_keys=True), flush=True)

    if args.elfs is not None:
        elfs = [(os.path.basename(e), open(e, "rb").read()) for e in args.elfs]
    else:
        from tw_examples.rv32 import build

        tmp = tempfile.mkdtemp()
        elfs = [(n, build(n, os.path.join(tmp, f"{n}.elf"), args.ram))
                for n in args.programs.split(",") if n]
        shutil.rmtree(tmp, ignore_errors=True)
    backend = "c" if shutil.which("cc") else "python"
    for name, elf in elfs:
        image, entry = load_elf(elf, args.ram)
        prompt = rv.prompt(image, entry)
        res = rv.run(elf)
        out = dict(kind="run", program=name, instructions=res.instructions, tokens=res.tokens,
                   console=res.console, exit_code=res.exit_code, halted=res.halted,
                   tw_tokens_per_s=round(res.tokens_per_s, 1))
        if not args.no_firebrand_run:
            t0 = time.perf_counter()
            ref = [int(t) for t in fm.generate(prompt, max_steps=rv.max_context - len(prompt),
                                               backend=backend)]
            dt = time.perf_counter() - t0
            out.update(firebrand_backend=backend, exact=ref == res.trace,
                       firebrand_tokens_per_s=round((len(ref) - len(prompt)) / dt, 1))
        print(json.dumps(out, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
