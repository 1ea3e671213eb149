"""Long traces on the CPU: the index decoder (`lowering/fast_decode.py`) against firebrand's C
decoder, its cost per token as the position grows, and generate against the torch decoder.
JSON, one object per line (sort_keys).

    python3 bench/long_traces.py                       # everything (~4 min on 2 cores, 1.2 GB)
    python3 bench/long_traces.py --quick               # hello and fib, a 2^15 context, the
                                                       # 10^3-op layered graph (under a minute)
    python3 bench/long_traces.py --parts rv32 --programs fib,crc
    python3 bench/long_traces.py --parts flat --long-context 262144 --window 4096

Times are CPU seconds (`time.process_time`, every thread of the process) around the decode
only: compiles, model packing, decoder construction and numba's first-call JIT are outside the
clocks (one warm-up run of each decoder comes first). Three parts (`--parts`, run in the
order given; default generate, rv32, flat):

* ``rv32`` (firebrand's RV32IM machine, `RV32Spec(ram_bytes=--ram)` at its default context,
  compiled by tw, cache on unless `--no-cache`): a ``rv32_machine`` line (the model, compile
  seconds), then one ``rv32`` line per bundled C program (`--programs`): instructions, prompt
  and generated tokens, console, exit code; tw's rate (``tw_tokens_per_cpu_s``: generated
  tokens / CPU seconds of `IndexDecoder.run_machine` over the prompt and the generation,
  ``tw_generate_tokens_per_cpu_s`` the generation alone, ``tw_run_tokens_per_cpu_s`` the
  user's path `RV32.run`, host checks included), firebrand's C decoder on the same prompt in
  the same process (``firebrand_tokens_per_cpu_s``, `fastrt_generate` alone, the model packed
  beforehand), ``ratio`` = tw's rate / firebrand's, and ``exact``: tw's whole trace (the index
  decoder's) equals firebrand's token for token (``exact_run``: `RV32.run`'s trace too).
* ``flat``: the cost per token as the position grows. The RV32 machine at
  `RV32Spec(ram_bytes=--long-ram, max_context=--long-context)` (halved until tw and firebrand
  both compile it: ``max_context`` is the one used, ``refused`` says why larger ones were not)
  runs a checksum loop (a C program written to a temp folder, its iteration count set from two
  short firebrand runs so it halts near the context's end), driven through
  `IndexDecoder.run_machine` in segments. One ``flat_window`` line per window of `--window`
  positions centred on 10^3, 10^4, 10^5, 10^6 (as far as the trace reaches; the window at
  10^3 is at most 10^3 wide; ``phase``: prompt, generate, or mixed): ms per position. Then a
  ``flat`` line: the trace (tokens, halted, console checked against the checksum computed in
  Python, ``exact`` against firebrand's C decoder), ``max_min_ratio`` of the windows' ms per
  token and ``within_1_5x`` (``max_min_ratio_generate``: over the windows past the prompt
  alone), the decoder's state at the reached length
  (``state_bytes_at_reached``: the fixed arrays plus the per-position rows (values, keys)
  filled; ``state_bytes_allocated``: all arrays at full capacity; ``table_entries``: the
  match-head hash table), answers by index and by attention, generated tokens per CPU second
  of tw (prompt included in the time, as in ``rv32``) and of firebrand, and the process's
  peak RSS.
* ``generate``: token programs from examples/ (`--token-programs`, a sampled prompt each,
  greedy feedback for the reference answer's length plus the end token) and layered random
  graphs of `--sizes` ops (`twdialect.random_graphs.layered_graph`, d=2048, d_head=32,
  d_hidden=8192, `--prompt` positions then `--steps` steps fed sampled inputs). One
  ``generate`` line each: ms per generated token (whole generate / steps, median of
  `--repeats` rounds, each calling generate back to back for at least 0.2 CPU seconds: a
  generate of a millisecond timed once is mostly cold caches; CPU and wall) of today's
  `ct.generate` with the torch `Decoder` (on
  ``torch_threads`` threads: `--torch-threads`, default 1; with several, a core taken by
  another process makes torch's steps wait on each other, 10x and more on 2 cores) and of
  `IndexDecoder` prefill/step in `generate_batch`'s loop (one thread), ``ratio`` = torch
  CPU ms / index CPU ms (``wall_ratio``: the same in wall time),
  ``identical``: a token program's fed-back tokens are the same (``tokens_equal``), a layered
  graph's outputs agree value for value (``values_close``: every output within
  1e-4 * max(1, |value|), also given for token programs, whose logits reach thousands and
  differ by float32 rounding where the two decoders sum in different orders),
  ``max_abs_diff``, and ``answer_ok`` (the token program's text equals its reference).

A part that cannot run (firebrand, numba or the RISC-V cross compiler missing, a model the
index decoder does not take) prints a line with ``skipped``: why.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import importlib
import inspect
import json
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
import warnings

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROGRAMS = ("fib", "crc", "sieve", "sort", "divide", "collatz", "hello")
TOKEN_PROGRAMS = ("calculator", "adder", "fibonacci", "sort_digits", "caesar")
LAYERED_GEOMETRY = (2048, 32, 8192)
TOL = 1e-4

CHECKSUM_C = r"""/* A long trace: ITERS rounds of FNV-style mixing, then a checksum. */
#include "tw_rt.h"
#define ITERS %(iters)du
static u32 table[16];

int main(void) {
    u32 h = 2166136261u;
    for (u32 i = 0; i < ITERS; i++) {
        h = (h ^ i) * 16777619u;
        table[i & 15] += h;
    }
    u32 s = 0;
    for (int k = 0; k < 16; k++) s ^= table[k];
    tw_puts("sum "); tw_puthex(s); tw_puts("\n");
    return (int)(s & 127);
}
"""


OUT = sys.stdout  # the JSON lines' stream (main sends anything else printed to stderr)


def emit(**row) -> dict:
    print(json.dumps(row, sort_keys=True), file=OUT, flush=True)
    return row


def _error(e: BaseException) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0] if text else ''}"


def _rate(tokens: int, seconds: float) -> float | None:
    return round(tokens / seconds, 1) if seconds > 0 else None


def _checksum(iters: int) -> tuple[str, int]:
    """The checksum program's console line and exit code, computed here."""
    mask = 0xFFFFFFFF
    h, table = 2166136261, [0] * 16
    for i in range(iters):
        h = ((h ^ i) * 16777619) & mask
        table[i & 15] = (table[i & 15] + h) & mask
    s = 0
    for t in table:
        s ^= t
    return f"sum {s:08x}\n", s & 127


# -- the two machine decoders ----------------------------------------------------------

class FirebrandC:
    """firebrand's compiled C decoder (`firebrand.fast`) with its model packed once, so the
    clock holds `fastrt_generate` alone (`Transformer.generate(backend="c")` packs per call)."""

    def __init__(self, fm):
        from firebrand import fast

        self.fast, self.lib = fast, fast.library()
        self.packed = fast._Packed(fm)
        self.max_context = int(fm.config["max_context"])

    def run(self, prompt: list[int], max_steps: int | None = None) -> tuple[list[int], float]:
        """(the whole trace, CPU seconds) of a greedy run from `prompt` (to a halt, or to the
        context's end)."""
        n = len(prompt)
        steps = self.max_context - n if max_steps is None else min(max_steps,
                                                                     self.max_context - n)
        buf = np.zeros(n + steps, np.int32)
        buf[:n] = prompt
        t0 = time.process_time()
        length = self.lib.fastrt_generate(ctypes.byref(self.packed.model),
                                          buf.ctypes.data_as(self.fast._I32), n, steps)
        dt = time.process_time() - t0
        if length < 0:
            raise RuntimeError(f"firebrand's C decoder: "
                               f"{self.fast.ERRORS.get(length, f'error {length}')}")
        return buf[:length].astype(np.int64).tolist(), dt


class TwMachineRun:
    """A firebrand machine compiled by tw, run by `IndexDecoder.run_machine` over positions
    [0, capacity) (ids[p] = token - lower, as `CompiledMachine._index_values` lays them out),
    in segments the caller times."""

    def __init__(self, cm, prompt: list[int], capacity: int):
        from tw_lowering.fast_decode import IndexDecoder

        m = cm.machine
        self.lower, self.upper, self.halts = m.lower, m.upper, list(m.halt_values)
        self.capacity, self.n = int(capacity), len(prompt)
        self.dec = IndexDecoder(cm.compiled, self.capacity)
        self.ids = np.zeros(self.capacity + 1, np.int64)
        self.ids[:self.n] = np.asarray(prompt, np.int64) - self.lower
        self.status, self.position = 0, 0  # position: the next position to process

    def segment(self, stop: int) -> tuple[int, float]:
        """Process positions position..stop-1 (fewer where the machine halts): (positions
        processed, CPU seconds)."""
        if self.status != 0 or self.position >= stop:
            return 0, 0.0
        start = self.position
        t0 = time.process_time()
        status, nxt = self.dec.run_machine(self.ids, self.n, start, stop, self.lower, self.upper,
                                           self.halts)
        dt = time.process_time() - t0
        self.status, self.position = status, nxt
        if status == 2:
            raise RuntimeError(f"index decoder: the value at position {nxt} "
                               f"({int(self.ids[nxt]) + self.lower}) is outside the alphabet")
        return nxt - start, dt  # (halted at nxt: positions start..nxt-1 ran)

    def trace(self) -> list[int]:
        end = self.position + 1 if self.status == 1 else min(self.position + 1, self.capacity)
        return (self.ids[:end] + self.lower).tolist()


def _state_bytes(dec, capacity: int, reached: int) -> dict:
    """The decoder's arrays: allocated, and at `reached` positions (arrays with one row per
    position counted up to `reached`), and the match table's entries (keys held)."""
    state = dec.state_objects
    arrays = [a for a in state if isinstance(a, np.ndarray)]
    per_pos = sum(a[0].nbytes for a in arrays if a.ndim and a.shape[0] == capacity)
    fixed = sum(a.nbytes for a in arrays if not (a.ndim and a.shape[0] == capacity))
    entries = dec.stats()["table_entries"]
    return dict(state_bytes_allocated=fixed + per_pos * capacity,
                state_bytes_per_position=per_pos,
                state_bytes_at_reached=fixed + per_pos * reached, table_entries=entries)


def _peak_rss_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1)


def _machine_prereqs() -> str | None:
    """Why the RV32 parts cannot run, or None."""
    try:
        import firebrand  # noqa: F401
    except ImportError:
        return "firebrand is not installed"
    from tw_examples.rv32 import GCC, have_gcc
    from tw_lowering.fast_decode import available

    if not have_gcc():
        return f"{GCC} not found"
    if not shutil.which("cc"):
        return "no C compiler (cc) for firebrand's C decoder"
    return available()


# -- part 1: the bundled programs ----------------------------------------------------------

def part_rv32(args) -> None:
    why = _machine_prereqs()
    if why:
        emit(kind="rv32", skipped=why)
        return
    import firebrand
    from tw_examples.rv32 import build
    from tw_frontends.firebrand.rv32 import RV32, load_elf

    rv = RV32(ram_bytes=args.ram, cache=not args.no_cache)
    t0 = time.perf_counter()
    cm = rv.compiled
    tw_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    fm = firebrand.compile_machine(cm.machine)
    fb_s = time.perf_counter() - t0
    fb = FirebrandC(fm)
    emit(kind="rv32_machine", ram_bytes=args.ram, max_context=rv.max_context,
         dtype=str(cm.compiled._np_dtype), tw_compile_seconds=round(tw_s, 2),
         tw_loaded_from_cache=rv.loaded_from_cache, firebrand_compile_seconds=round(fb_s, 2),
         **{f"tw_{k}": v for k, v in cm.stats.as_dict().items()},
         firebrand_layers=fm.config["layers"], firebrand_width=fm.config["width"])

    tmp = tempfile.mkdtemp()
    try:
        elfs = [(n, build(n, os.path.join(tmp, f"{n}.elf"), args.ram)) for n in args.programs]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for i, (name, elf) in enumerate(elfs):
        try:
            _rv32_program(rv, cm, fb, name, elf, warm=i == 0)
        except Exception as e:  # noqa: BLE001 - one line saying what failed, then the next
            emit(kind="rv32", program=name, error=_error(e))


def _rv32_program(rv, cm, fb, name: str, elf: bytes, warm: bool) -> None:
    from tw_frontends.firebrand.rv32 import load_elf

    cap = rv.max_context
    image, entry = load_elf(elf, rv.ram_bytes)
    prompt = rv.prompt(image, entry)
    n = len(prompt)
    if warm:  # numba's first call, firebrand's library, rv.run's path: outside the clocks
        w = TwMachineRun(cm, prompt, min(cap, n + 256))
        w.segment(w.capacity)
        fb.run(prompt, 256)
        rv.run(elf, max_instructions=8)
    ref, fb_cpu = fb.run(prompt)
    run = TwMachineRun(cm, prompt, cap)
    _, pre = run.segment(n - 1)  # the prompt (positions 0..n-2 generate nothing)
    _, gen = run.segment(cap)
    trace = run.trace()
    st = run.dec.stats()
    del run
    t0 = time.process_time()
    res = rv.run(elf)
    run_cpu = time.process_time() - t0
    got = rv.result(trace, image, n)
    tokens, fb_tokens = len(trace) - n, len(ref) - n
    emit(kind="rv32", program=name, ram_bytes=rv.ram_bytes, max_context=cap, prompt_tokens=n,
         instructions=got.instructions, tokens=tokens, console=got.console,
         exit_code=got.exit_code, halted=got.halted,
         tw_cpu_s=round(pre + gen, 4), tw_tokens_per_cpu_s=_rate(tokens, pre + gen),
         tw_generate_tokens_per_cpu_s=_rate(tokens, gen),
         tw_run_tokens_per_cpu_s=_rate(res.tokens, run_cpu),
         tw_run_decoder=getattr(cm, "decoder_used", None),
         firebrand_cpu_s=round(fb_cpu, 4), firebrand_tokens_per_cpu_s=_rate(fb_tokens, fb_cpu),
         ratio=round(tokens * fb_cpu / ((pre + gen) * fb_tokens), 4)
         if pre + gen > 0 and fb_cpu > 0 and fb_tokens > 0 else None,
         exact=trace == ref, exact_run=res.trace == ref,
         indexed=st["indexed"], attended=st["attended"])


# -- part 2: flatness --------------------------------------------------------------------

def _long_machine(args):
    """(RV32, CompiledMachine, FirebrandC, refusals) at the largest context <= --long-context
    (halving) that both compilers accept."""
    import firebrand
    from tw_frontends.firebrand.rv32 import RV32

    ctx, refused = args.long_context, []
    while ctx >= 2048:
        try:
            rv = RV32(ram_bytes=args.long_ram, max_context=ctx, cache=not args.no_cache)
            cm = rv.compiled
            fb = FirebrandC(firebrand.compile_machine(cm.machine))
            return rv, cm, fb, refused
        except Exception as e:  # noqa: BLE001 - refused (a MachineError, ValueError, ...)
            first = str(e).splitlines()[0] if str(e) else ""
            refused.append(f"{ctx}: {type(e).__name__}: {first}")
        ctx //= 2
    return None, None, None, refused


def _checksum_elf(rv, fb, tmp: str, iters: int) -> tuple[bytes, list[int], list[int], float]:
    from tw_examples.rv32 import build
    from tw_frontends.firebrand.rv32 import load_elf

    src = os.path.join(tmp, "checksum.c")
    with open(src, "w") as f:
        f.write(CHECKSUM_C % {"iters": iters})
    elf = build([src], os.path.join(tmp, "checksum.elf"), rv.ram_bytes)
    image, entry = load_elf(elf, rv.ram_bytes)
    prompt = rv.prompt(image, entry)
    ref, cpu = fb.run(prompt)
    return image, prompt, ref, cpu


def part_flat(args) -> None:
    why = _machine_prereqs()
    if why:
        emit(kind="flat", skipped=why)
        return
    try:
        _flat(args)
    except Exception as e:  # noqa: BLE001 - one line saying what failed
        emit(kind="flat", error=_error(e))


def _flat(args) -> None:
    rv, cm, fb, refused = _long_machine(args)
    if rv is None:
        emit(kind="flat", skipped="no context accepted", refused=refused)
        return
    ctx = rv.max_context
    tmp = tempfile.mkdtemp()
    try:
        # the loop's cost from two short runs, then the count that ends near the context's end
        _, _, a, _ = _checksum_elf(rv, fb, tmp, 64)
        _, _, b, _ = _checksum_elf(rv, fb, tmp, 128)
        per = (len(b) - len(a)) / 64
        base = len(a) - 64 * per
        target = ctx - max(1024, ctx // 64)
        iters = max(1, int((target - base) // per))
        image, prompt, ref, fb_cpu = _checksum_elf(rv, fb, tmp, iters)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    n = len(prompt)
    # warm-up (numba's first call for this dtype), on a short decoder
    w = TwMachineRun(cm, prompt, min(ctx, n + 256))
    w.segment(w.capacity)
    del w
    end = len(ref) - 1 if rv.spec.halted(ref) else ctx  # positions a full run processes
    windows = []
    for k in range(3, 7):  # generated positions around 10^k (past the prompt: a machine's
        p = 10 ** k          # prompt runs only what its stored keys need, a cheaper kind of step)
        width = min(args.window, p)
        lo = max(p - width // 2, n)
        hi = lo + width
        if hi <= end:
            windows.append((p, lo, hi))
    run = TwMachineRun(cm, prompt, ctx)
    total_cpu, rows = 0.0, []
    for p, lo, hi in windows:
        _, dt = run.segment(lo)
        total_cpu += dt
        done, dt = run.segment(hi)
        total_cpu += dt
        if done == 0:
            break
        phase = "prompt" if hi <= n - 1 else "generate" if lo >= n - 1 else "mixed"
        rows.append(emit(kind="flat_window", position=p, start=lo, stop=lo + done,
                         phase=phase, ms_per_token=round(1e3 * dt / done, 5)))
    _, dt = run.segment(ctx)
    total_cpu += dt
    trace = run.trace()
    reached = run.position
    got = rv.result(trace, image, n)
    want_console, want_exit = _checksum(iters)
    ms = [r["ms_per_token"] for r in rows]
    ratio = round(max(ms) / min(ms), 3) if ms else None
    ms_gen = [r["ms_per_token"] for r in rows if r["phase"] == "generate"]
    st = run.dec.stats()
    emit(kind="flat", max_context_requested=args.long_context, max_context=ctx,
         refused=refused, ram_bytes=rv.ram_bytes, program=f"checksum loop, {iters} iterations",
         prompt_tokens=n, tokens=len(trace) - n, reached=reached, halted=got.halted,
         instructions=got.instructions, console=got.console,
         console_ok=got.console == want_console and got.exit_code == want_exit,
         exact=trace == ref, windows={str(r["position"]): r["ms_per_token"] for r in rows},
         max_min_ratio=ratio, within_1_5x=ratio is not None and ratio <= 1.5,
         max_min_ratio_generate=round(max(ms_gen) / min(ms_gen), 3) if ms_gen else None,
         tw_tokens_per_cpu_s=_rate(len(trace) - n, total_cpu),
         firebrand_tokens_per_cpu_s=_rate(len(ref) - n, fb_cpu), window=args.window,
         indexed=st["indexed"], attended=st["attended"],
         attended_heads=len(st["attended_by_head"]),
         **_state_bytes(run.dec, ctx, reached), peak_rss_mb=_peak_rss_mb())
    del run


# -- part 3: generate, torch decoder against the index decoder ------------------------------

def _cases(args):
    """(name, module, geometry, inputs, steps, make_feedback, extra) per graph."""
    for name in args.token_programs:
        mod = importlib.import_module(f"tw_examples.{name}")
        prog = mod.build()
        text = prog.sample(np.random.default_rng(0))
        ids = prog.encode(text)
        ref = prog.reference(text)
        steps = min(len(ref) + 1, prog.max_answer, prog.max_len - len(ids))
        g = prog.geometry
        yield (name, prog.module, (g.d, g.d_head, g.d_hidden), {"tokens": ids}, steps,
               lambda: (lambda out: {"tokens": int(np.argmax(out["logits"]))}),
               dict(prog=prog, text=text, ref=ref))
    for n_ops in args.sizes:
        from twdialect.random_graphs import layered_graph, sample_inputs

        module, _ = layered_graph(n_ops)
        full = sample_inputs(module, args.prompt + args.steps, 0)

        def make(full=full):
            at = [args.prompt]

            def back(_out):
                i = at[0]
                at[0] += 1
                return {k: v[i] for k, v in full.items()}
            return back
        yield (f"layered_{n_ops}", module, LAYERED_GEOMETRY,
               {k: v[:args.prompt] for k, v in full.items()}, args.steps, make, {})


def _torch_generate(ct, inputs, steps, feedback):
    """Today's `ct.generate` with the torch `Decoder` (asked for by name where generate
    chooses among decoders)."""
    if "decoder" in inspect.signature(ct.generate).parameters:
        return ct.generate(inputs, steps, feedback, decoder="torch")
    return ct.generate(inputs, steps, feedback)


def _index_generate(ct, inputs, steps, feedback):
    """`generate_batch`'s loop (one sequence) on `IndexDecoder`."""
    from tw_lowering.fast_decode import IndexDecoder
    from twdialect.inputs import check_feedback

    (checked,) = ct.check_batch([inputs], "error", None)
    dec = IndexDecoder(ct, checked.n_positions + steps)
    rows = [dec.prefill([checked])[0]]
    for _ in range(steps):
        nxt = check_feedback(ct.contract, feedback({k: v[-1] for k, v in rows[-1].items()}),
                             int(dec.positions[0]), "error")
        rows.append(dec.step([nxt])[0])
    return {k: np.concatenate([r[k] for r in rows], axis=0) for k in rows[0]}


def _timed(fn, repeats: int, least: float = 0.2):
    """(last result, median CPU s, median wall s) per call over `repeats` rounds after one
    warm-up; a round calls fn back to back for at least `least` CPU seconds (a generate of a
    millisecond timed once is mostly cold caches and the clock's grain)."""
    out = fn()
    cpu, wall = [], []
    for _ in range(repeats):
        time.sleep(0.05)  # torch's idle worker threads spin a while: not on this clock
        c, w, n = time.process_time(), time.perf_counter(), 0
        while n == 0 or time.process_time() - c < least:
            out = fn()
            n += 1
        cpu.append((time.process_time() - c) / n)
        wall.append((time.perf_counter() - w) / n)
    return out, statistics.median(cpu), statistics.median(wall)


def part_generate(args) -> None:
    from tw_lowering.fast_decode import available

    why = available()
    for case in _cases(args):
        try:
            _generate_case(args, why, *case)
        except Exception as e:  # noqa: BLE001 - one line saying what failed, then the next
            emit(kind="generate", graph=case[0], error=_error(e))


def _generate_case(args, why, name, module, geo, inputs, steps, make_feedback, extra) -> None:
    from tw_lowering import compile
    from tw_lowering.fast_decode import supports

    t0 = time.perf_counter()
    ct = compile(module, d=geo[0], d_head=geo[1], d_hidden=geo[2], pipeline="default")
    import torch

    row = dict(kind="generate", graph=name, n_layers=ct.n_layers, dtype=str(ct._np_dtype),
               torch_threads=torch.get_num_threads(),
               compile_s=round(time.perf_counter() - t0, 2),
               prompt_tokens=int(len(next(iter(inputs.values())))), steps=steps,
               repeats=args.repeats)
    reason = why or supports(ct)
    if reason:
        emit(**row, skipped=f"index decoder: {reason}")
        return
    want, t_cpu, t_wall = _timed(lambda: _torch_generate(ct, inputs, steps, make_feedback()),
                                 args.repeats)
    got, i_cpu, i_wall = _timed(lambda: _index_generate(ct, inputs, steps, make_feedback()),
                                args.repeats)
    diff, close = 0.0, set(got) == set(want)
    for k in want:
        a, b = np.asarray(got.get(k), np.float64), np.asarray(want[k], np.float64)
        if a.shape != b.shape:
            close = False
            continue
        d = np.abs(a - b)
        diff = max(diff, float(d.max(initial=0.0)))
        close &= bool(np.all(d <= TOL * np.maximum(1.0, np.abs(b))))
    row.update(torch_ms_per_token=round(1e3 * t_cpu / steps, 4),
               index_ms_per_token=round(1e3 * i_cpu / steps, 4),
               torch_wall_ms_per_token=round(1e3 * t_wall / steps, 4),
               index_wall_ms_per_token=round(1e3 * i_wall / steps, 4),
               ratio=round(t_cpu / i_cpu, 2) if i_cpu > 0 else None,
               wall_ratio=round(t_wall / i_wall, 2) if i_wall > 0 else None,
               max_abs_diff=diff)
    row["values_close"] = bool(close)
    row["identical"] = bool(close)
    if "prog" in extra:  # a token program: identical means the same tokens
        n = row["prompt_tokens"]
        toks = [np.argmax(o["logits"][n - 1:], axis=1).tolist() for o in (want, got)]
        row["identical"] = row["tokens_equal"] = toks[0] == toks[1]
        prog = extra["prog"]
        end = prog.vocab.index(prog.end)
        ans = toks[1][:toks[1].index(end)] if end in toks[1] else toks[1]
        row["answer_ok"] = prog.decode(ans) == extra["ref"]
        row["prompt"] = extra["text"]
    emit(**row)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    names = lambda s: [v for v in s.split(",") if v]  # noqa: E731
    ints = lambda s: [int(v) for v in s.split(",") if v]  # noqa: E731
    p.add_argument("--quick", action="store_true",
                   help="hello and fib, a 2^15 context with 1024-position windows, two token "
                        "programs, the 10^3-op layered graph, 16 steps, one repeat")
    p.add_argument("--parts", type=names, default=["generate", "rv32", "flat"],
                   help="run in the order given (default: generate first, in a fresh process)")
    p.add_argument("--programs", type=names, default=None,
                   help=f"bundled RV32 programs (default: {','.join(PROGRAMS)})")
    p.add_argument("--ram", type=int, default=8192, help="RAM of the rv32 part's machine")
    p.add_argument("--long-context", type=int, default=None, help="default 2^20 (quick 2^15)")
    p.add_argument("--long-ram", type=int, default=1024, help="RAM of the flat part's machine")
    p.add_argument("--window", type=int, default=None, help="positions per window "
                                                            "(default 8192, quick 1024)")
    p.add_argument("--token-programs", type=names, default=None,
                   help=f"default: {','.join(TOKEN_PROGRAMS)}")
    p.add_argument("--sizes", type=ints, default=None, help="layered graphs' ops "
                                                            "(default 1000,10000)")
    p.add_argument("--prompt", type=int, default=32, help="layered graphs' prompt positions")
    p.add_argument("--steps", type=int, default=None, help="layered graphs' steps (default 64)")
    p.add_argument("--repeats", type=int, default=None, help="default 3 (quick 1)")
    p.add_argument("--no-cache", action="store_true", help="compile the RV32 machines afresh")
    p.add_argument("--torch-threads", type=int, default=1,
                   help="torch's intra-op threads (default 1, as the index decoder; 0: torch's "
                        "own choice, whose CPU time swells when another process holds a core)")
    args = p.parse_args(argv)
    q = args.quick
    pick = lambda v, full, quick: v if v is not None else (quick if q else full)  # noqa: E731
    args.programs = pick(args.programs, list(PROGRAMS), ["hello", "fib"])
    args.long_context = pick(args.long_context, 1 << 20, 1 << 15)
    args.window = pick(args.window, 8192, 1024)
    args.token_programs = pick(args.token_programs, list(TOKEN_PROGRAMS),
                               ["calculator", "sort_digits"])
    args.sizes = pick(args.sizes, [1000, 10000], [1000])
    args.steps = pick(args.steps, 64, 16)
    args.repeats = pick(args.repeats, 3, 1)
    sys.path.insert(0, ROOT)
    warnings.simplefilter("ignore")
    import torch

    import tw_lowering.model  # noqa: F401 - torch imported before any clock starts

    threads = torch.get_num_threads()
    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)
    global OUT
    OUT = sys.stdout
    try:
        with contextlib.redirect_stdout(sys.stderr):  # stdout: the JSON lines only
            for part in args.parts:
                {"rv32": part_rv32, "flat": part_flat, "generate": part_generate}[part](args)
    finally:
        torch.set_num_threads(threads)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
