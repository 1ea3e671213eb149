"""`tw-machine`: compile a firebrand machine with tw and run it greedily to its halt.

    tw-machine counter 3                  # tw's demo: history(0) + 1 until --upper (15)
    tw-machine fibonacci 1 1 --modulus 10 # tw's demo: (history(0) + history(1)) mod M until 0
    tw-machine gcd 12 18                  # firebrand's bundled machines: gcd A B,
    tw-machine histogram 0 2 1 2          #   histogram C..., stack push:3 pop ..., life,
    tw-machine stack push:3 push:4 pop    #   arithmetic TEXT
    tw-machine counter 3 --json

Prints the tokens (the prefix, then the generated ones), then one `#` line: the steps taken,
whether the machine halted, the model's layers and size, and tokens per second of the
KV-cache decode. `--json`: one JSON object instead.

    tw-machine rv32 prog.elf [--ram 8192] # firebrand's RV32IM machine running a bare-metal ELF

`rv32` loads the ELF (`tw_frontends.firebrand.rv32.load_elf`), compiles firebrand's RV32IM interpreter
with tw (or loads the compile cached by an earlier run: `RV32.cache_path`; `--no-cache`
compiles again), runs the program to its exit call and prints its console output, then one
`#` line:
exit code, instructions, tokens, tokens per second, and the model's layers and size.
`--max-steps` bounds the instructions there (default: none, the context bounds the run).

Error contract (tools/cli.py): a bad argument, an input the machine's encoder refuses, a
construct tw cannot translate, a prefix and step count beyond max_context, or a next value
outside the machine's alphabet ends the run with exit code 1 and one line on stderr,
`tw-machine: error: <message>`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence

from tw_tools.cli import ArgumentParser, ToolError, add_version, bounded_int, run_tool

PROG = "tw-machine"
DEMOS = ("counter", "fibonacci")
BUNDLED = ("gcd", "histogram", "stack", "life", "arithmetic")
NAMES = DEMOS + BUNDLED + ("rv32",)
DEFAULT_STEPS = 100


def _parser() -> ArgumentParser:
    from tw_lowering.fast_decode import DECODERS
    from tw_lowering.machine import MAX_DIM

    p = ArgumentParser(prog=PROG, description="Compile a firebrand machine with tw and run it.")
    add_version(p, PROG)
    p.add_argument("name", help=f"the machine: {', '.join(NAMES)}")
    p.add_argument("args", nargs="*", help="the machine's inputs (see the module docstring)")
    p.add_argument("--max-steps", type=bounded_int("--max-steps", 0, 1 << 20),
                   help=f"the most tokens to generate (default {DEFAULT_STEPS}); rv32: the most "
                        "instructions (default: until the program exits)")
    p.add_argument("--max-context", type=bounded_int("--max-context", 1, 1 << 20),
                   help="the longest sequence compiled for (default: the machine's limit)")
    p.add_argument("--upper", type=bounded_int("--upper", 1, 4095), default=15,
                   help="counter: its halt value and alphabet's top (default 15)")
    p.add_argument("--modulus", type=bounded_int("--modulus", 2, 4096), default=10,
                   help="fibonacci: the modulus (default 10)")
    p.add_argument("--d", type=bounded_int("--d", 3, MAX_DIM),
                   help="residual width (default: the narrowest that reaches the fewest layers)")
    p.add_argument("--d-head", type=bounded_int("--d-head", 1, MAX_DIM),
                   help="head width (default 16)")
    p.add_argument("--ram", type=bounded_int("--ram", 256, 1 << 25), default=8192,
                   help="rv32: RAM bytes (a multiple of 4; default 8192)")
    p.add_argument("--no-cache", action="store_true",
                   help="rv32: compile again instead of loading the cached compile")
    p.add_argument("--decoder", choices=DECODERS, default="auto",
                   help="auto (default): the compiled index decoder where it applies, else "
                        "torch's KV-cache decoder; index or torch: that one")
    p.add_argument("--json", action="store_true", help="one JSON object instead of text")
    return p


def _ints(name: str, words: Sequence[str], count: int | None = None) -> list[int]:
    if count is not None and len(words) != count:
        raise ToolError(f"{name} takes {count} integer{'s' if count > 1 else ''}, got "
                        f"{len(words)}")
    try:
        return [int(w) for w in words]
    except ValueError:
        bad = next(w for w in words if not w.lstrip("-").isdigit())
        raise ToolError(f"{name}: {bad!r} is not an integer") from None


def build(name: str, words: Sequence[str], args) -> tuple:
    """(firebrand.ir.Machine, prefix) for a machine name and its input words."""
    try:
        import firebrand  # noqa: F401
    except ImportError:
        raise ToolError("tw-machine needs firebrand (pip install firebrand)") from None
    from firebrand.ir import Machine, history

    if name not in NAMES:
        raise ToolError(f"unknown machine {name!r} (known: {', '.join(NAMES)})")
    try:
        return _build(name, words, args, Machine, history)
    except (ValueError, TypeError) as e:  # firebrand's encoders refuse with ValueError
        raise ToolError(f"{name}: {e}") from None


def _build(name, words, args, Machine, history):  # noqa: N803 - firebrand's class
    if name == "counter":
        (start,) = _ints(name, words, 1)
        return Machine(history(0) + 1, lower=0, upper=args.upper, halt_values=(args.upper,)), [start]
    if name == "fibonacci":
        a, b = _ints(name, words, 2)
        m = args.modulus
        return Machine((history(0) + history(1)) % m, lower=0, upper=m - 1, halt_values=(0,),
                       min_prefix=2), [a, b]
    if name == "gcd":
        from firebrand.machines.gcd import gcd_machine

        a, b = _ints(name, words, 2)
        seq = gcd_machine(value_limit=max(15, a, b), max_context=args.max_context or 1024)
        return seq.lower_machine(), list(seq.initialize(a=a, b=b, result=0))
    if name == "histogram":
        from firebrand.machines.histogram import HistogramSpec

        cats = _ints(name, words)
        spec = HistogramSpec(cells=max([3, *(c + 1 for c in cats)]), capacity=max(8, len(cats)))
        return spec.machine(), list(spec.encode(cats))
    if name == "stack":
        from firebrand.machines.stack import POP, PUSH, StackSpec

        program = []
        for w in words:
            op, _, arg = w.partition(":")
            if op.lower() == "pop" and not arg:
                program.append((POP, 0))
            elif op.lower() == "push" and arg.isdigit():
                program.append((PUSH, int(arg)))
            else:
                raise ToolError(f"stack: {w!r} is not a command (push:N or pop)")
        spec = StackSpec()
        return spec.machine(), list(spec.encode(program))
    if name == "life":
        from firebrand.machines.life import GLIDER, LifeSpec, place

        if words:
            raise ToolError("life takes no inputs (it runs a glider on an 8x8 grid)")
        spec = LifeSpec(width=8, height=8, generations=2)
        return spec.machine(), list(spec.encode(place(spec, GLIDER)))
    from firebrand.machines.arithmetic import ArithmeticSpec, encode_text  # arithmetic

    text = " ".join(words)
    if not text:
        raise ToolError("arithmetic takes a text, e.g. '12+34='")
    return ArithmeticSpec().machine(), encode_text(list(text))


def run_rv32(args) -> int:
    """`tw-machine rv32 prog.elf`: load, compile, run, print the console and a `#` line."""
    from tw_frontends.firebrand.rv32 import RV32, load_elf

    if len(args.args) != 1:
        raise ToolError(f"rv32 takes one ELF file, got {len(args.args)} arguments")
    path = args.args[0]
    try:
        with open(path, "rb") as f:
            elf = f.read()
    except OSError as e:
        raise ToolError(f"rv32: cannot read {path}: {e.strerror}") from None
    if args.ram % 4:
        raise ToolError(f"--ram must be a multiple of 4, got {args.ram}")
    load_elf(elf, args.ram)  # a bad ELF is refused before the compile
    options = {k: v for k, v in (("d", args.d), ("d_head", args.d_head)) if v is not None}
    rv = RV32(ram_bytes=args.ram, max_context=args.max_context, cache=not args.no_cache,
              **options)
    t0 = time.perf_counter()
    cm = rv.compiled
    compile_s = time.perf_counter() - t0
    res = rv.run(elf, max_instructions=args.max_steps, decoder=args.decoder)
    s = cm.stats
    if args.json:
        print(json.dumps(dict(machine="rv32", console=res.console, exit_code=res.exit_code,
                              halted=res.halted, instructions=res.instructions,
                              tokens=res.tokens, tokens_per_s=round(res.tokens_per_s, 1),
                              compile_seconds=round(compile_s, 4), ram=args.ram,
                              cached=rv.loaded_from_cache,
                              max_context=rv.max_context, decoder=cm.decoder_used,
                              **s.as_dict()), sort_keys=True))
        return 0
    print(res.console, end="" if res.console.endswith("\n") or not res.console else "\n")
    ended = f"exit {res.exit_code}" if res.halted else "stopped (no exit)"
    print(f"# {ended}; {res.instructions} instructions, {res.tokens} tokens, "
          f"{res.tokens_per_s:.1f} tokens/s ({cm.decoder_used} decoder); {s.layers} layers "
          f"(floor {s.floor}), "
          f"d={s.residual}, {s.heads} heads, {s.neurons} neurons, {s.params} params; "
          + (f"loaded the cached compile in {compile_s:.2f} s" if rv.loaded_from_cache
             else f"compiled in {compile_s:.2f} s"))
    return 0


def run(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.name == "rv32":
        return run_rv32(args)
    if args.max_steps is None:
        args.max_steps = DEFAULT_STEPS
    machine, prefix = build(args.name, args.args, args)
    from tw_frontends.firebrand import compile_machine

    t0 = time.perf_counter()
    cm = compile_machine(machine, max_context=args.max_context, d=args.d, d_head=args.d_head)
    compile_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    tokens = cm.generate(prefix, args.max_steps, args.decoder)
    gen_s = time.perf_counter() - t1
    steps = len(tokens) - len(prefix)
    halted = tokens[-1] in machine.halt_values
    s = cm.stats
    rate = steps / gen_s if gen_s > 0 else 0.0
    if args.json:
        print(json.dumps(dict(machine=args.name, tokens=tokens, prefix_length=len(prefix),
                              steps=steps, halted=halted, tokens_per_s=round(rate, 1),
                              compile_seconds=round(compile_s, 4), max_context=cm.max_context,
                              decoder=getattr(cm, "decoder_used", "torch"), **s.as_dict()),
                         sort_keys=True))
        return 0
    print(" ".join(str(t) for t in tokens))
    print(f"# {steps} steps ({'halted' if halted else 'not halted'}), {s.layers} layers "
          f"(floor {s.floor}), d={s.residual} d_head={s.d_head} d_hidden={s.d_hidden}, "
          f"{s.heads} heads, {s.neurons} neurons, {s.params} params; {rate:.1f} tokens/s "
          f"({getattr(cm, 'decoder_used', 'torch')} decoder); "
          f"compiled in {compile_s:.3f} s")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point: 0 on success; on any error one stderr line and SystemExit(1)."""
    return run_tool(PROG, lambda: run(argv))


if __name__ == "__main__":
    raise SystemExit(main())
