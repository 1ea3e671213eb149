"""sha256 of compiled weights, one line a compile: a refactor that claims "behaviour unchanged"
must leave every line of this output as it was.

    python3 bench/weights_digest.py > before.txt          # ... change ...
    python3 bench/weights_digest.py | diff before.txt -   # no output: nothing changed
    python3 bench/weights_digest.py --sets tracr,fuzz     # only the RASP frontend's sets

The sets (`--sets`, a comma list; default all four, printed always in this order):

  programs  the bundled programs (tw_examples, its library/ and primitive/ packages), each
            compiled with no pipeline and with the default one: `NAME PIPELINE layers= DIGEST`
  layered   random layered graphs of 300 and 3000 ops (seed 1), default pipeline
  tracr     tracr's program library as the RASP tests compile it (`tw_examples.rasp.LIB_PROGRAMS`,
            each with its tests' vocabulary, `compile_rasp_to_model(..., compiler_bos="BOS")`)
            at max_seq_len 5, 10, 20 and 50: `tracr/NAME n=N layers= DIGEST io=IO`
  fuzz      the RASP fuzz campaign's random programs (tests/test_rasp_fuzz.py's `generate`,
            which tests/fuzz_rasp.py also draws from), seeds 0..FUZZ_SEEDS-1, compiled as
            its `run_program` does: `fuzz/SEED n=N[ c] layers= DIGEST io=IO` (c: causal)

DIGEST is the sha256 (first 16 hex digits) of every buffer of the compiled transformer, names
and bytes (`digest`). A RASP model is also read by its frontend's tables (the vocabulary's
order, the output's values and codes), which the weights do not hold (make_length's weights are
the same at every max_seq_len, its codes are not): IO is the sha256 of those (`io_digest`).
Where a RASP program does not compile at a size, the line says so in place of the digests,
`refused CLASS: FIRST LINE OF THE MESSAGE` (addresses blanked): a refusal is a fact a refactor
must keep too. Each RASP program is compiled as a fresh interpreter would compile it (tracr's
expression ids renumbered from 1, `_fresh_ids`): its line does not depend on the sets or
programs run before it. The output (stdout) is deterministic; each set's line count and wall
time go to stderr. `--fuzz-seeds N` runs fewer seeds for a quick look (compare like with like).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import itertools
import logging
import os
import re
import sys
import time
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

SETS = ("programs", "layered", "tracr", "fuzz")
TRACR_SIZES = (5, 10, 20, 50)
FUZZ_SEEDS = 1500  # seeds 0..1499: about 3 minutes on one core
BOS = "BOS"  # the compiler_bos of the RASP tests and the fuzz campaign


def digest(ct) -> str:
    """Every buffer of a compiled transformer, its name and bytes, hashed: any changed
    weight, shape-preserving or not, changes it (unchanged since the first sets)."""
    h = hashlib.sha256()
    for name, t in ct.named_buffers():
        h.update(name.encode())
        h.update(t.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


# RaspGraph's fields that say how tokens are fed and outputs read (the module is the weights).
IO_FIELDS = ("vocab", "max_seq_len", "causal", "bos", "pad", "numerical", "space", "output",
             "token_input", "codes", "code_shift", "code_tolerance")


def io_digest(rg) -> str:
    """What a RASP model's frontend reads besides the weights (token ids, the output's values
    and codes), hashed: a refactor could change the decoding and leave the weights as they
    were. A field the frontend no longer has hashes as missing, so that shows too."""
    import numpy as np

    h = hashlib.sha256()
    for name in IO_FIELDS:
        value = getattr(rg, name, "<missing>")
        h.update(name.encode())
        if isinstance(value, np.ndarray):
            h.update(f"{value.dtype}{value.shape}".encode())
            h.update(np.ascontiguousarray(value).tobytes())
        else:
            h.update(repr(value).encode())
    return h.hexdigest()[:16]


def line(name: str, settings: str, layers: int, rest: str) -> str:
    """One compile's line: the format the first sets have always printed (diffable)."""
    return f"{name:28s} {settings:8s} layers={layers:3d} {rest}"


def refusal(name: str, settings: str, error: BaseException) -> str:
    """A compile that raised: the error's class and first line, addresses (0x...) blanked so
    that the line is the same in every run; no traceback (its paths and line numbers change
    with any edit)."""
    lines = str(error).strip().splitlines()
    first = re.sub(r"0x[0-9a-fA-F]+", "0x?", lines[0].strip()) if lines else ""
    return f"{name:28s} {settings:8s} refused {type(error).__name__}: {first}".rstrip()


def program_lines():
    """The bundled programs, with no pipeline and the default one (the original set)."""
    import tw_examples as examples
    import tw_examples.library
    import tw_examples.primitive
    import tw_lowering as lowering

    sets = (("", examples), ("library/", tw_examples.library),
            ("primitive/", tw_examples.primitive))
    for prefix, package in sets:
        for name in package.PROGRAMS:
            p = package.load(name)
            g = p.geometry
            for pipeline in (None, "default"):
                ct = lowering.compile(p.module, d=g.d, d_head=g.d_head, d_hidden=g.d_hidden,
                                      pipeline=pipeline)
                yield line(prefix + name, str(pipeline), ct.n_layers, digest(ct))


def layered_lines():
    """Random layered graphs (seed 1) of 300 and 3000 ops: the passes at scale."""
    import tw_lowering as lowering
    from twdialect.random_graphs import layered_graph

    for n in (300, 3000):
        module, _ = layered_graph(n, seed=1)
        ct = lowering.compile(module, d=512, d_head=16, d_hidden=2048, pipeline="default")
        yield line(f"layered_{n}", "default", ct.n_layers, digest(ct))


def _fresh_ids(program) -> None:
    """Renumber tracr's expression ids as a fresh interpreter would: ids are drawn lazily from
    one process-wide counter and name the expressions in refusals (and key the frontend's
    memos), so without this a line would depend on what was compiled before it. Every
    expression the program reaches (shared ones too: tracr lib's `length`) and tracr's own
    tokens, indices and length (which a translation may read where the program does not:
    a root, a rank's tie-break) lose their cached ids and the counter restarts, so no two
    expressions can share an id."""
    from tracr.rasp import rasp

    seen, stack = set(), [program, rasp.tokens, rasp.indices, rasp.length]
    while stack:
        expr = stack.pop()
        if id(expr) in seen or not isinstance(expr, rasp.RASPExpr):
            continue
        seen.add(id(expr))
        expr.__dict__.pop("unique_id", None)
        stack.extend(expr.children)
    rasp.RASPExpr._ids = itertools.count(1)


@contextlib.contextmanager
def _quiet():
    """Precision warnings and absl's notes on stderr, thousands over the fuzz set, say nothing
    the digests do not; they are silenced while RASP programs compile (they steer nothing)."""
    absl = logging.getLogger("absl")
    level = absl.level
    absl.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        absl.setLevel(level)


def rasp_line(name: str, settings: str, build) -> str:
    """Compile `build()`'s (program, vocab, max_seq_len, causal) as the RASP tests do: the
    line with both digests, or the refusal (building it may raise too)."""
    from tw_lowering import compile_rasp_to_model

    try:
        with _quiet():
            program, vocab, n, causal = build()
            _fresh_ids(program)
            model = compile_rasp_to_model(program, vocab, n, causal=causal, compiler_bos=BOS)
    except Exception as e:  # noqa: BLE001 - every refusal is a line
        return refusal(name, settings, e)
    return line(name, settings, model.stats.n_layers,
                f"{digest(model.compiled)} io={io_digest(model.rasp_graph)}")


def tracr_lines(names=None, sizes=TRACR_SIZES):
    """tracr's library (`LIB_PROGRAMS`, or the `names` of it) at each size, size-major."""
    from tw_examples.rasp import LIB_PROGRAMS

    for n in sizes:
        for name in names or LIB_PROGRAMS:
            def build(name=name, n=n):
                program, vocab = LIB_PROGRAMS[name](n)
                return program, vocab, n, False
            yield rasp_line(f"tracr/{name}", f"n={n}", build)


def fuzz_lines(seeds=range(FUZZ_SEEDS)):
    """The fuzz campaign's program of each seed, at the seed's own max_seq_len and mask."""
    tests = os.path.join(ROOT, "tests")
    if tests not in sys.path:
        sys.path.insert(0, tests)
    from test_rasp_fuzz import generate

    for seed in seeds:
        with _quiet():  # (the generator builds SequenceMaps that absl warns of)
            prog = generate(seed)
        settings = f"n={prog.max_seq_len}" + (" c" if prog.causal else "")
        yield rasp_line(f"fuzz/{seed}", settings,
                        lambda p=prog: (p.build(), set(p.vocab), p.max_seq_len, p.causal))


def parse_args(argv=None) -> argparse.Namespace:
    """--sets (checked here, so that a misspelt set is an error, not a silently empty
    output that diffs clean against another) and --fuzz-seeds."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sets", default=",".join(SETS),
                    help=f"comma list of {', '.join(SETS)} (default: all)")
    ap.add_argument("--fuzz-seeds", type=int, default=FUZZ_SEEDS,
                    help=f"the fuzz set's seeds 0..N-1 (default {FUZZ_SEEDS})")
    args = ap.parse_args(argv)
    args.sets = [s.strip() for s in args.sets.split(",") if s.strip()]
    unknown = [s for s in args.sets if s not in SETS]
    if unknown or not args.sets:
        ap.error(f"unknown set(s) {unknown} (known: {', '.join(SETS)})")
    return args


def main(argv=None) -> None:
    """The chosen sets' lines on stdout (all that is compared), their counts and times on
    stderr (which vary)."""
    args = parse_args(argv)
    makers = {"programs": program_lines, "layered": layered_lines, "tracr": tracr_lines,
              "fuzz": lambda: fuzz_lines(range(args.fuzz_seeds))}
    for name in SETS:  # (the fixed order, whatever order --sets names them in)
        if name not in args.sets:
            continue
        t0, count = time.perf_counter(), 0
        for text in makers[name]():
            print(text, flush=True)
            count += 1
        print(f"# {name}: {count} lines, {time.perf_counter() - t0:.1f} s", file=sys.stderr,
              flush=True)


if __name__ == "__main__":
    main()
