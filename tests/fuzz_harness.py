"""Fuzz harness: mutated IR, random builder graphs, Python API misuse and CLI argv, each case
classified as accepted / clean error / masked crash / hang / wrong answer.

    python3 tests/fuzz_harness.py --cases 40000 --seed 0 --findings DIR [--workers 2]
    python3 tests/fuzz_harness.py --replay DIR/ir-masked_crash-0-123.json

prints one JSON summary line (cases, accepted, clean errors, masked crashes, hangs, wrong
answers, per category, and one line per distinct failure). The run is deterministic given the
seed: case i draws everything from `numpy.random.default_rng([seed, i])`, whichever worker runs it.

Why each piece:
  * A *clean error* is one tw raises on purpose: a `TwError`, or xDSL's ParseError /
    VerifyException / DiagnosticException, with a message that says something (not empty, not
    just a location, not a laundered internal exception). Anything else escaping is a *masked
    crash*: the tools would turn it into one line, but only by hiding a bug.
  * Cases run in worker processes (fresh interpreters) under a per-case alarm, so a hang is
    reported as a hang instead of stopping the run, and a worker that dies or wedges in native
    code is replaced; workers cap their address space so a runaway allocation is a MemoryError
    (a masked crash) instead of an exhausted machine.
  * The oracle (`twdialect.interp`) is normative: a pass must keep its values and a compiled
    model must match them within 1e-4 max(1, |y|) (or the output's static error bound, where an
    op's documented contract scales with its operands' ranges), except where a library op sits
    outside its contract (`twdialect.contracts.contract_mask`).
  * Every failing case is saved (input, pipeline, outcome, message) as JSON for `--replay`.

Categories: `ir` (mutated IR text through parse, verify, a random pass pipeline, the oracle and a
small compile), `graph` (random builder graphs with large ranges, integer inputs, embeddings,
attention, library ops and scoped loops through every pass singly, the default pipeline, and
compiled at two geometries), `api` (misuses of the Python API), `cli` (random argv for tw-opt,
tw-stats and tw-run as subprocesses: exit code 0 or 1, one stderr line on error, no traceback),
`determinism` (the same graphs compiled in two interpreters with different PYTHONHASHSEED give
byte-identical IR and weights), `export` (small programs exported in every format, damaged at
random and loaded by tw's loaders: `fuzz_exports.py`), `rasp` (RASP program files, sound or
broken, through tw-rasp as a console script: exit 1 and one line, or RASP's own answer:
`fuzz_rasp.py`), `report` (graphs named with hostile text, their HTML report well-formed:
`fuzz_report.py`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import selectors
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

OUTCOMES = ("accepted", "clean_error", "masked_crash", "hang", "wrong_answer")
FAILURES = ("masked_crash", "hang", "wrong_answer")
CATEGORIES = ("ir", "graph", "api", "cli", "determinism")
# The long-run mix: mostly IR mutants (cheap), fewer of the slow categories.
DEFAULT_WEIGHTS = {"ir": 0.85, "graph": 0.05, "api": 0.08, "cli": 0.015, "determinism": 0.0005}
# Seconds a case may take before it counts as a hang (per category).
TIME_LIMITS = {"ir": 30.0, "graph": 90.0, "api": 30.0, "cli": 120.0, "determinism": 300.0}
TOLERANCE = 1e-4  # compiled / rewritten outputs within TOLERANCE * max(1, |y|) of the oracle
WORKER_MEMORY_BYTES = 6 << 30  # address space a worker may add after its imports
N_POSITIONS = 6
MAX_EVAL_WIDTH = 4096  # wider graphs are parsed, verified and rewritten, not evaluated
SMALL_GEOMETRY = dict(d=64, d_head=8, d_hidden=256)
LARGE_GEOMETRY = dict(d=256, d_head=16, d_hidden=1024)


# ======================================================================================
# Outcomes
# ======================================================================================


@dataclass
class Result:
    """What one case did. `payload` is everything `replay` needs to run it again."""

    category: str
    index: int
    seed: int
    outcome: str
    detail: str = ""
    stage: str = ""
    payload: dict = field(default_factory=dict)
    seconds: float = 0.0

    def signature(self) -> str:
        """The case's failure class: category, outcome, stage and exception text with the
        numbers and quoted names blanked (one line per distinct bug in the summary)."""
        text = re.sub(r"\"[^\"]*\"|'[^']*'|%\w+|@\w+", "S", self.detail)
        text = re.sub(r"\b0x[0-9a-f]+\b|-?\d+(\.\d+)?(e[-+]?\d+)?", "N", text)
        stage = re.sub(r"\{.*\}", "", self.stage)
        return f"{self.category}/{self.outcome}/{stage}/{text[:110]}"


class CaseTimeout(BaseException):
    """Raised by the per-case alarm; a BaseException so `except Exception` in tw lets it out."""


# Messages that say nothing: xDSL's catch-alls and a bare location.
_GENERIC = re.compile(r"^\s*(could not parse entire input!?|unexpected error|internal error.*|"
                      r"error|none|\S+:\d+:\d+:?)\s*$", re.I)
# Text of an internal exception laundered into a deliberate one.
_LAUNDERED = re.compile(r"Traceback \(most recent|internal error|\b(KeyError|IndexError|"
                        r"AttributeError|TypeError|ZeroDivisionError|OverflowError|"
                        r"RecursionError|MemoryError|UnboundLocalError|NameError|"
                        r"AssertionError|StopIteration)\b|object has no attribute|"
                        r"'NoneType' object|unsupported operand type|index out of range|unhashable")


def _clean_types() -> tuple[type, ...]:
    from xdsl.utils.exceptions import DiagnosticException, ParseError, VerifyException

    from twdialect.errors import TwError

    return (TwError, ParseError, VerifyException, DiagnosticException)


def error_message(e: BaseException) -> str:
    """The message of `e` as a user would read it (ParseError: its own message, not the
    source excerpt xDSL appends)."""
    from xdsl.utils.exceptions import ParseError

    if isinstance(e, ParseError):
        return str(getattr(e, "msg", "") or "")
    return str(e)


def classify(e: BaseException) -> tuple[str, str]:
    """(outcome, detail) of an exception that escaped a case."""
    if isinstance(e, CaseTimeout):
        return "hang", "no result within the time limit"
    name = type(e).__name__
    message = " ".join(error_message(e).split())
    detail = f"{name}: {message}"
    if not isinstance(e, _clean_types()):
        where = traceback.extract_tb(e.__traceback__)
        if where:
            last = where[-1]
            detail += f" (at {Path(last.filename).name}:{last.lineno} in {last.name})"
        return "masked_crash", detail
    if not message.strip() or _GENERIC.match(message):
        return "masked_crash", f"{detail} (message says nothing)"
    if _LAUNDERED.search(message):
        return "masked_crash", f"{detail} (an internal error behind a deliberate one)"
    return "clean_error", detail


class Failure(Exception):
    """A check of the harness failed (wrong answer, unverifiable IR after a pass...)."""

    def __init__(self, outcome: str, detail: str):
        super().__init__(detail)
        self.outcome = outcome
        self.detail = detail


# ======================================================================================
# Oracle comparison
# ======================================================================================


def sample_feeds(module, graph: str, rng: np.random.Generator, n: int = N_POSITIONS) -> dict:
    """In-range inputs: the declared bounds themselves at positions 0 and 1, then uniform
    draws; integers for inputs declared `integer`; token ids for embeddings."""
    from twdialect.dense import shape_of
    from twdialect.dialect import EmbeddingOp, InputOp, width_of
    from twdialect.interp import find_graph

    feeds = {}
    for op in find_graph(module, graph).block.ops:
        if isinstance(op, InputOp):
            lo, hi = (float(b) for b in op.range.bounds)
            w = width_of(op.out)
            u = rng.uniform(0.0, 1.0, (n, w))
            u[0], u[1 % n] = 0.0, 1.0
            with np.errstate(all="ignore"):
                x = lo * (1.0 - u) + hi * u  # no overflow for bounds near the float limit
            if op.integer is not None:
                x = np.clip(np.round(x), np.ceil(lo), np.floor(hi))
            feeds[op.input_name.data] = np.clip(x, lo, hi)
        elif isinstance(op, EmbeddingOp):
            rows = shape_of(op.table)[0]
            feeds[op.input_name.data] = rng.integers(0, max(rows, 1), n)
    return feeds


def graph_width(module) -> int:
    """Total width of every value in the module (bounds what evaluating it allocates)."""
    from twdialect.dialect import VecType

    total = 0
    for op in module.walk():
        for r in op.results:
            if isinstance(r.type, VecType):
                total += r.type.width.data if hasattr(r.type.width, "data") else int(r.type.width)
    return total


def mismatch(want: dict, got: dict, mask: np.ndarray,
             documented: dict | None = None) -> str | None:
    """None when `got` matches the oracle's `want` within TOLERANCE at the positions of
    `mask` (or, per output, within `documented[name]`: the compiled output's static error
    bound, which carries the wider contracts of ops whose rounding scales with their
    operands' declared ranges, such as select's offsets), else a description of the worst
    output."""
    if set(want) != set(got):
        return f"outputs differ: oracle {sorted(want)}, got {sorted(got)}"
    for name in sorted(want):
        w = np.asarray(want[name], dtype=np.float64)
        g = np.asarray(got[name], dtype=np.float64)
        if w.shape != g.shape:
            return f"output {name!r}: shape {g.shape}, oracle {w.shape}"
        w, g = w[mask], g[mask]
        if w.size == 0:
            continue
        same = (w == g) | (np.isnan(w) & np.isnan(g))
        finite = np.isfinite(w)
        scale = max(1.0, float(np.max(np.abs(w[finite])))) if finite.any() else 1.0
        bound = (documented or {}).get(name, 0.0)
        allowed = max(TOLERANCE * scale, bound if np.isfinite(bound) else 0.0)
        with np.errstate(all="ignore"):
            close = np.abs(g - w) <= allowed
        bad = ~(same | close)
        if bad.any():
            idx = np.argwhere(bad)[0]
            return (f"output {name!r} at {tuple(int(i) for i in idx)}: got {g[tuple(idx)]!r}, "
                    f"oracle {w[tuple(idx)]!r} (scale {scale:.3g}, allowed {allowed:.3g})")
    return None


def graph_names(module) -> list[str]:
    from twdialect.dialect import GraphOp

    return [op.sym_name.data for op in module.walk() if isinstance(op, GraphOp)]


# ======================================================================================
# Shared steps: passes, oracle and compile checks
# ======================================================================================

# Pass specs a random pipeline draws from (valid options)...
PIPELINE_STEPS = (
    "decompose", "decompose{lattice-neurons=0}", "canonicalize", "cse", "dce",
    "fuse-linears", "fuse-linears{allow-inflate=true}", "fuse-linears{fanout=false}",
    "fuse-linears{depth-inflate-params=0}", "form-mlps", "form-mlps{fanout=false}",
    "form-mlps{allow-inflate=true}", "horizontal-fuse", "horizontal-fuse{max-group=2 d-head=8}",
    "horizontal-fuse{pooled-heads=false}", "select-tree-to-pwl2d",
    "select-tree-to-pwl2d{max-breakpoints=4}", "sequential-scope{batch-size=2}",
    "sequential-scope{search-budget=300 d=64 d-head=8}", "sequential-scope{batch-size=1}",
    "balance-sums", "optimize", "lower-to-transformer{d=64 d-head=8}",
)
# ...and bad ones, which must be refused with a clean error naming the pass or option.
BAD_PIPELINE_STEPS = (
    "decompose{lattice-neurons=-5}", "fuse-linears{max-duplicate-params=-1}",
    "fuse-linears{depth-inflate-params=x}", "form-mlps{bogus=1}", "horizontal-fuse{d-head=0}",
    "horizontal-fuse{max-group=0}", "select-tree-to-pwl2d{max-breakpoints=-1}",
    "sequential-scope{batch-size=0}", "sequential-scope{batch-size=foo}",
    "sequential-scope{d=0}", "sequential-scope{headroom=0}", "sequential-scope{d-head=99999}",
    "sequential-scope{d=99999999999999999999}", "lower-to-transformer{d=0}",
    "lower-to-transformer{d=8 d-head=16}", "lower-to-transformer{graph=nope}",
    'optimize{pipeline="optimize"}', 'optimize{pipeline="bogus-pass"}', "no-such-pass",
    "fuse-linears{", "cse}", "dce{x=1}", "fuse-linears{allow-inflate=maybe}",
    "lower-to-transformer{d=-64 d-head=8}",
)
# Every pass run singly on each random graph (tw's own, and the upstream ones the default
# pipeline uses).
SINGLE_PASSES = (
    "decompose", "canonicalize", "fuse-linears", "form-mlps", "horizontal-fuse",
    "select-tree-to-pwl2d", "sequential-scope{search-budget=2000}", "sequential-scope{batch-size=2}",
    "balance-sums", "cse", "dce", "optimize",
)


def random_pipeline(rng: np.random.Generator) -> str:
    n = int(rng.integers(1, 5))
    steps = [PIPELINE_STEPS[int(rng.integers(len(PIPELINE_STEPS)))] for _ in range(n)]
    if rng.random() < 0.06:
        steps.insert(int(rng.integers(len(steps) + 1)),
                     BAD_PIPELINE_STEPS[int(rng.integers(len(BAD_PIPELINE_STEPS)))])
    return ",".join(steps)


def apply_pipeline(module, spec: str) -> None:
    """Run `spec` pass by pass as tw-opt does, verifying after each; a pass that leaves IR
    which does not verify (or uses a value before defining it) is a bug, not a clean error."""
    from tw_passes import parse_pipeline
    from twdialect import make_context
    from twdialect.analysis import first_use_before_def
    from twdialect.dialect import GraphOp

    ctx = make_context()
    pipeline = parse_pipeline(spec)
    for module_pass in pipeline.passes:
        module_pass.apply(ctx, module)
        try:
            module.verify()
        except Exception as e:  # noqa: BLE001 - any verifier failure here is the pass's
            raise Failure("masked_crash", f"IR after pass '{module_pass.name}' does not "
                          f"verify: {type(e).__name__}: {' '.join(str(e).split())[:300]}") from None
        for g in module.walk():
            if isinstance(g, GraphOp) and (bad := first_use_before_def(g.block)) is not None:
                raise Failure("masked_crash", f"IR after pass '{module_pass.name}': {bad.name} "
                              "reads a value before it is defined")


def check_same(want: dict, got: dict, mask: np.ndarray, what: str,
               documented: dict | None = None) -> None:
    if (why := mismatch(want, got, mask, documented)) is not None:
        raise Failure("wrong_answer", f"{what}: {why}")


def compile_and_check(module, graph: str, feeds: dict, want: dict, mask: np.ndarray,
                      geometry: dict, pipeline: str | None) -> str:
    """Compile `module` at `geometry`; the model must match the oracle within contract, or the
    compile must fail cleanly (then its message is returned)."""
    from tw_lowering import compile  # noqa: A004

    try:
        ct = compile(module, graph=graph, pipeline=pipeline, **geometry)
    except Exception as e:  # noqa: BLE001 - classified below
        outcome, detail = classify(e)
        if outcome != "clean_error":
            raise Failure(outcome, f"compile: {detail}") from None
        return detail
    from tw_lowering.precision import output_errors

    got = ct.run(feeds, n_positions=N_POSITIONS)
    documented = {name: bound for name, (bound, _) in output_errors(ct.schedule).items()}
    check_same(want, got, mask, f"compiled at d={geometry['d']} d_head={geometry['d_head']} "
               f"pipeline={pipeline}", documented)
    return ""


# ======================================================================================
# Category `ir`: mutated IR text
# ======================================================================================

_TOKEN = re.compile(r'"(?:[^"\\\n]|\\.)*"|-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|[%@#!^]?[A-Za-z_][\w.$]*'
                    r"|//[^\n]*|\s+|.", re.S)
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
EXTREME_NUMBERS = ("0", "-1", "1", "0.0", "-0.0", "1e38", "3.5e38", "-1e38", "1e308", "-1e308",
                   "1.0e309", "nan", "inf", "-inf", "0x7FC00000", "9223372036854775808",
                   "18446744073709551616", "-9223372036854775809", "1e-45", "5e-324", "1e6",
                   "-1e6", "1000000.5", "4294967296", "2147483647", "65536", "0.1", "1e-300")
HUGE_WIDTHS = ("0", "-1", "1", "65536", "1000000", "2147483648", "9223372036854775808",
               "99999999999999999999999")
TYPE_FLIPS = {"f32": ("f64", "i32", "complex<f32>", "f16", "bf16", "i1", "index", "si8"),
              "!tw.vec": ("tensor", "!tw.vecc", "vector", "!tw.range", "!tw.vec<1>")}
NON_ASCII = ("é", "\u202e", "\x00", "😀", "\ufeff", "\u0301", "Ω", "\x7f", "\u2028", "\udcff")
BRACKETS = '"{}[]()<>'


def _tw_op_names() -> list[str]:
    from twdialect.dialect import TW

    return sorted(op.name for op in TW.operations)


def split_chunks(text: str) -> list[str]:
    """The `// -----` chunks of a FileCheck file (each one a seed)."""
    return [c for c in re.split(r"^// -----\s*$", text, flags=re.M) if c.strip()]


def build_corpus() -> list[str]:
    """Seed texts: every FileCheck chunk, printed random graphs (with and without library ops,
    embeddings, large ranges) and the bundled examples' graphs."""
    import tw_examples as examples
    from twdialect import print_module
    from twdialect.random_graphs import random_graph

    corpus: list[str] = []
    for path in sorted((ROOT / "tests" / "filecheck").rglob("*.mlir")):
        if "Output" in path.parts:
            continue
        corpus.extend(split_chunks(path.read_text(errors="replace")))
    corpus_dir = ROOT / "tests" / "fuzz_corpus"
    if corpus_dir.is_dir():
        for path in sorted(corpus_dir.glob("*.mlir")):
            corpus.extend(split_chunks(path.read_text(errors="replace")))
    for s in range(12):
        corpus.append(print_module(random_graph(s, n_ops=10, library=s % 2 == 0,
                                                embedding=s % 3 == 0,
                                                value_range=10.0 ** (s % 7))))
    for s in range(6):
        corpus.append(print_module(fuzz_graph(np.random.default_rng([9999, s]))))
    for name in examples.PROGRAMS:
        corpus.append(print_module(examples.load(name).module))
    return corpus


_CORPUS: list[str] | None = None


def corpus() -> list[str]:
    global _CORPUS
    if _CORPUS is None:
        _CORPUS = build_corpus()
    return _CORPUS


def _pick(rng: np.random.Generator, seq):
    return seq[int(rng.integers(len(seq)))]


def _tokens(text: str) -> list[str]:
    return _TOKEN.findall(text)


def _significant(tokens: list[str]) -> list[int]:
    return [i for i, t in enumerate(tokens) if not t.isspace() and not t.startswith("//")]


def mutate_tokens(text: str, rng: np.random.Generator, kind: str) -> str:
    """Delete, duplicate or swap tokens."""
    toks = _tokens(text)
    idx = _significant(toks)
    if not idx:
        return text
    i = _pick(rng, idx)
    if kind == "delete":
        toks[i] = ""
    elif kind == "duplicate":
        toks[i] = toks[i] + " " + toks[i]
    else:
        j = _pick(rng, idx)
        toks[i], toks[j] = toks[j], toks[i]
    return "".join(toks)


def mutate_number(text: str, rng: np.random.Generator) -> str:
    matches = list(_NUMBER.finditer(text))
    if not matches:
        return text
    m = _pick(rng, matches)
    return text[:m.start()] + _pick(rng, EXTREME_NUMBERS) + text[m.end():]


def mutate_width(text: str, rng: np.random.Generator) -> str:
    matches = list(re.finditer(r"(vec<|tensor<)(\d+)", text))
    if not matches:
        return text
    m = _pick(rng, matches)
    return text[:m.start(2)] + _pick(rng, HUGE_WIDTHS) + text[m.end(2):]


def mutate_type(text: str, rng: np.random.Generator) -> str:
    key = _pick(rng, sorted(TYPE_FLIPS))
    spots = [m.start() for m in re.finditer(re.escape(key), text)]
    if not spots:
        return text
    at = _pick(rng, spots)
    return text[:at] + _pick(rng, TYPE_FLIPS[key]) + text[at + len(key):]


def mutate_bracket(text: str, rng: np.random.Generator) -> str:
    """Unbalance quotes and brackets: drop one, or insert a stray one."""
    spots = [i for i, c in enumerate(text) if c in BRACKETS]
    if spots and rng.random() < 0.6:
        at = _pick(rng, spots)
        return text[:at] + text[at + 1:]
    at = int(rng.integers(len(text) + 1))
    return text[:at] + _pick(rng, BRACKETS) + text[at:]


def mutate_insert_text(text: str, rng: np.random.Generator) -> str:
    at = int(rng.integers(len(text) + 1))
    return text[:at] + _pick(rng, NON_ASCII) + text[at:]


def mutate_op_name(text: str, rng: np.random.Generator) -> str:
    names = _tw_op_names()
    matches = list(re.finditer(r"\btw\.[a-z_0-9]+", text))
    if not matches:
        return text
    m = _pick(rng, matches)
    return text[:m.start()] + _pick(rng, names) + text[m.end():]


def mutate_drop_attribute(text: str, rng: np.random.Generator) -> str:
    """Drop an attribute dict, a range, a dense literal, a keyword clause or `integer`."""
    patterns = (r"\{[^{}\n]*\}", r"<-?[\d.e+-]+, -?[\d.e+-]+>", r"dense<[^>]*>\s*:\s*tensor<[^>]*>",
                r"\b(integer|ramp|max_len|table|weight|bias|w1|b1|w2|b2|wq|wk|wv|wo|breakpoints"
                r"|values|xs|ys)\b", r"\"[^\"\n]*\"")
    matches = list(re.finditer(_pick(rng, patterns), text))
    if not matches:
        return text
    m = _pick(rng, matches)
    return text[:m.start()] + text[m.end():]


def mutate_lines(text: str, rng: np.random.Generator) -> str:
    """Delete, duplicate, swap or move lines (use before def, duplicate names, lost outputs)."""
    lines = text.split("\n")
    if len(lines) < 2:
        return text
    i, j = int(rng.integers(len(lines))), int(rng.integers(len(lines)))
    kind = int(rng.integers(4))
    if kind == 0:
        del lines[i]
    elif kind == 1:
        lines.insert(j, lines[i])
    elif kind == 2:
        lines[i], lines[j] = lines[j], lines[i]
    else:
        lines.insert(j, lines.pop(i))
    return "\n".join(lines)


def mutate_ssa(text: str, rng: np.random.Generator) -> str:
    names = sorted(set(re.findall(r"%[\w.$]+", text)))
    if len(names) < 1:
        return text
    old = _pick(rng, names)
    new = _pick(rng, names + ["%undefined", "%0", "%" + "x" * 300])
    spots = [m.start() for m in re.finditer(re.escape(old) + r"\b", text)]
    at = _pick(rng, spots)
    return text[:at] + new + text[at + len(old):]


def mutate_nest(text: str, rng: np.random.Generator, seeds: list[str]) -> str:
    """Put a whole graph, module or region inside an op's line, or nest modules deeply."""
    lines = text.split("\n")
    at = int(rng.integers(len(lines) + 1))
    kind = int(rng.integers(4))
    if kind == 0:
        other = _pick(rng, seeds)
        block = other[other.find("tw.graph"):other.rfind("}")] if "tw.graph" in other else other
        lines.insert(at, block)
    elif kind == 1:
        lines.insert(at, "builtin.module {\n" + "\n".join(lines[at:at + 3]) + "\n}")
    elif kind == 2:
        depth = int(_pick(rng, (50, 400, 3000)))
        lines.insert(at, "builtin.module {" * depth + "}" * depth)
    else:
        lines.insert(at, "tw.graph @nested {\n" + "\n".join(lines[max(0, at - 2):at]) + "\n}")
    return "\n".join(lines)


def mutate_splice(text: str, rng: np.random.Generator, seeds: list[str]) -> str:
    """A line of another seed at a random place (an op of another graph, with its names)."""
    other = _pick(rng, seeds).split("\n")
    lines = text.split("\n")
    lines.insert(int(rng.integers(len(lines) + 1)), _pick(rng, other))
    return "\n".join(lines)


def mutate_truncate(text: str, rng: np.random.Generator) -> str:
    return text[:int(rng.integers(len(text) + 1))]


def mutate_dense(text: str, rng: np.random.Generator) -> str:
    """Change a tensor shape of a dense literal (or its element list) so they disagree."""
    matches = list(re.finditer(r"tensor<([\dx]+)x?f32>", text))
    if not matches:
        return text
    m = _pick(rng, matches)
    dims = m.group(1).split("x")
    kind = int(rng.integers(3))
    if kind == 0:
        dims = dims[::-1]
    elif kind == 1:
        dims.append(str(int(rng.integers(1, 4))))
    else:
        dims = dims[:-1] or ["0"]
    return text[:m.start(1)] + "x".join(dims) + text[m.end(1):]


MUTATIONS = ("delete", "duplicate", "swap", "number", "number", "number", "width", "type",
             "bracket", "insert", "op_name", "op_name", "drop", "drop", "lines", "ssa", "nest",
             "splice", "truncate", "dense")


# One home per mutation: name -> (text, rng, seed corpus) -> text.
MUTATORS = {
    "delete": lambda t, r, s: mutate_tokens(t, r, "delete"),
    "duplicate": lambda t, r, s: mutate_tokens(t, r, "duplicate"),
    "swap": lambda t, r, s: mutate_tokens(t, r, "swap"),
    "number": lambda t, r, s: mutate_number(t, r),
    "width": lambda t, r, s: mutate_width(t, r),
    "type": lambda t, r, s: mutate_type(t, r),
    "bracket": lambda t, r, s: mutate_bracket(t, r),
    "insert": lambda t, r, s: mutate_insert_text(t, r),
    "op_name": lambda t, r, s: mutate_op_name(t, r),
    "drop": lambda t, r, s: mutate_drop_attribute(t, r),
    "lines": lambda t, r, s: mutate_lines(t, r),
    "ssa": lambda t, r, s: mutate_ssa(t, r),
    "nest": mutate_nest,
    "splice": mutate_splice,
    "truncate": lambda t, r, s: mutate_truncate(t, r),
    "dense": lambda t, r, s: mutate_dense(t, r),
}


def mutate(text: str, rng: np.random.Generator, seeds: list[str]) -> tuple[str, list[str]]:
    """Apply 1-4 random mutations; returns the text and the mutation names."""
    applied = []
    for _ in range(int(rng.integers(1, 5))):
        kind = _pick(rng, MUTATIONS)
        applied.append(kind)
        text = MUTATORS[kind](text, rng, seeds)
    return text, applied


def make_ir_payload(rng: np.random.Generator) -> dict:
    seeds = corpus()
    text, applied = mutate(_pick(rng, seeds), rng, seeds)
    return {"text": text, "mutations": applied, "pipeline": random_pipeline(rng),
            "compile": bool(rng.random() < 0.7), "input_seed": int(rng.integers(1 << 30))}


def run_ir(payload: dict) -> tuple[str, str, str]:
    """Parse + verify + pipeline + oracle + compile; returns (outcome, stage, detail)."""
    from xdsl.parser import Parser

    from twdialect import evaluate, make_context
    from twdialect.contracts import contract_mask

    stage = "parse"
    try:
        module = Parser(make_context(), payload["text"], "fuzz.mlir").parse_module()
        stage = "verify"
        module.verify()
        names = graph_names(module)
        evaluable = bool(names) and graph_width(module) <= MAX_EVAL_WIDTH
        graph = "main" if "main" in names else (names[0] if names else "main")
        before = mask = feeds = None
        if evaluable:
            stage = "oracle"
            try:
                feeds = sample_feeds(module, graph, np.random.default_rng(payload["input_seed"]))
                before = evaluate(module, feeds, graph, n_positions=N_POSITIONS)
                mask = contract_mask(module, feeds, graph)
            except Exception as e:  # noqa: BLE001 - a clean refusal still lets the passes run
                if classify(e)[0] != "clean_error":
                    raise
                before = None
        stage = f"pipeline {payload['pipeline']}"
        apply_pipeline(module, payload["pipeline"])
        if before is not None:
            stage = "oracle after pipeline"
            after = evaluate(module, feeds, graph, n_positions=N_POSITIONS)
            check_same(before, after, mask, f"pipeline {payload['pipeline']}")
            if payload["compile"]:
                stage = "compile"
                refused = compile_and_check(module, graph, feeds, before, mask, SMALL_GEOMETRY,
                                            None)
                if refused:
                    return "accepted", stage, f"compile refused: {refused}"
        return "accepted", stage, ""
    except Failure as f:
        return f.outcome, stage, f.detail
    except BaseException as e:  # noqa: BLE001 - every escape is classified
        if isinstance(e, KeyboardInterrupt):
            raise
        outcome, detail = classify(e)
        return outcome, stage, detail


# ======================================================================================
# Category `graph`: random builder graphs
# ======================================================================================


def fuzz_graph(rng: np.random.Generator):
    """A random builder graph: inputs with ranges up to 1e6 (some integer), maybe an embedding
    and positions, primitives, attention, library ops with thresholds inside the values'
    rough scale, and sometimes a scoped loop. Returns the module."""
    from twdialect import ops as tw
    from twdialect.dialect import width_of

    scale: dict = {}  # value -> rough magnitude bound, so thresholds land inside the data

    def track(v, s):
        scale[v] = float(max(s, 1e-3))
        return v

    def w(rows, cols, gain=1.0):
        return np.round(rng.uniform(-1.0, 1.0, (rows, cols)) * gain / rows, 3)

    with tw.Graph("main") as g:
        vals = []
        for i in range(int(rng.integers(1, 4))):
            mag = float(10.0 ** rng.uniform(0, 6))
            width = int(rng.integers(1, 4))
            integer = bool(rng.random() < 0.4)
            lo = -mag if rng.random() < 0.7 else 0.0
            if integer:
                lo, mag = float(np.floor(lo)), float(np.ceil(mag))
            vals.append(track(tw.input(f"x{i}", width, (lo, mag), integer=integer), mag))
        if rng.random() < 0.4:
            rows, cols = int(rng.integers(2, 12)), int(rng.integers(1, 4))
            mag = float(10.0 ** rng.uniform(0, 4))
            table = rng.integers(-9, 10, (rows, cols)).astype(float) * (mag / 9.0)
            if rng.random() < 0.5:
                table = np.round(table)
            vals.append(track(tw.embedding("tok", table), mag))
        if rng.random() < 0.4:
            vals.append(track(tw.pos_encoding(int(rng.integers(1, 4)), max_len=64), 1.0))

        def pick():
            k = len(vals)
            return vals[int(min(k - 1, abs(rng.normal(k - 1, k / 2))))]

        def scalar(v):
            if width_of(v) == 1:
                return v
            return track(tw.linear(v, np.full((width_of(v), 1), 1.0 / width_of(v))), scale[v])

        def same_width(v, width):
            if width_of(v) == width:
                return v
            return track(tw.linear(v, w(width_of(v), width)), scale[v])

        def threshold(v):
            s = scale[v]
            t = float(np.round(rng.uniform(-s, s), 2))
            return t if rng.random() < 0.5 else float(np.round(t)) + 0.5

        def step(kind):
            x = pick()
            wx, sx = width_of(x), scale[x]
            out_w = int(rng.integers(1, 4))
            if kind == "linear":
                bias = np.round(rng.uniform(-sx, sx, out_w), 2) if rng.random() < 0.5 else None
                return track(tw.linear(x, w(wx, out_w), bias), 2 * sx)
            if kind == "relu":
                return track(tw.relu(x), sx)
            if kind == "add":
                y = same_width(pick(), wx)
                return track(tw.add(x, y), sx + scale[y])
            if kind == "concat":
                y = pick()
                return track(tw.concat(x, y), max(sx, scale[y]))
            if kind == "slice" and wx > 1:
                start = int(rng.integers(0, wx - 1))
                return track(tw.slice(x, start, int(rng.integers(1, wx - start + 1))), sx)
            if kind == "literal":
                return track(tw.literal(np.round(rng.uniform(-2, 2, out_w), 3)), 2.0)
            if kind == "attn":
                q, k = pick(), pick()
                d_qk = int(rng.integers(1, 3))
                gain = 1.0 / max(scale[q], scale[k], 1.0) ** 0.5
                return track(tw.attn(q, k, x, w(width_of(q), d_qk, gain), w(width_of(k), d_qk, gain),
                                     w(wx, out_w), np.eye(out_w)), sx)
            if kind == "mlp":
                h = int(rng.integers(1, 6))
                return track(tw.mlp(x, w(wx, h), np.round(rng.uniform(-sx, sx, h) / 2, 2),
                                    w(h, out_w)), 2 * sx)
            if kind == "compare":
                return track(tw.compare(x, threshold(x), ramp=float(_pick(rng, (0.1, 0.5, 1.0)))),
                             1.0)
            if kind == "select":
                c = pick()
                c = tw.compare(scalar(c), threshold(c))
                y = same_width(pick(), wx)
                return track(tw.select(c, x, y), max(sx, scale[y]))
            if kind == "clamp":
                lo = threshold(x)
                return track(tw.clamp(x, lo, lo + float(np.round(rng.uniform(0.1, 2 * sx + 1), 2))),
                             sx)
            if kind == "pwl":
                s = scalar(x)
                n = int(rng.integers(2, 6))
                bp = np.unique(np.round(rng.uniform(-sx, sx, n), 2))
                if len(bp) < 2:
                    bp = np.array([-sx, sx])
                return track(tw.piecewise_linear(s, bp, np.round(rng.uniform(-3, 3, (len(bp), out_w)), 2)),
                             3.0)
            if kind == "pwl2d":
                a, b = scalar(x), scalar(pick())
                nx, ny = int(rng.integers(2, 4)), int(rng.integers(2, 4))
                xs = np.linspace(-scale[a], scale[a], nx)
                ys = np.linspace(-scale[b], scale[b], ny)
                if rng.random() < 0.5:  # an integer grid (the lattice form)
                    xs, ys = np.arange(nx, dtype=float), np.arange(ny, dtype=float)
                return track(tw.piecewise_linear_2d(a, b, xs, ys,
                                                    np.round(rng.uniform(-2, 2, (nx, ny, out_w)), 2)),
                             2.0)
            if kind == "loop":
                n_iter = int(rng.integers(2, 6))

                def body(j=0):
                    h = tw.relu(tw.linear(x, w(wx, 2), np.round(rng.uniform(-1, 1, 2), 2)))
                    if rng.random() < 0.5:
                        h = tw.select(tw.compare(tw.linear(h, w(2, 1)), 0.25), h, tw.literal([0.5, -0.5]))
                    return tw.linear(h, w(2, 1))

                outs = tw.sequential_scope([body] * n_iter, f"loop{len(vals)}")
                return track(tw.concat(*outs), 2 * sx)
            return None

        kinds = ("linear", "relu", "add", "concat", "slice", "literal", "attn", "mlp", "compare",
                 "select", "clamp", "pwl", "pwl2d", "loop")
        for _ in range(int(rng.integers(3, 14))):
            v = step(_pick(rng, kinds))
            if v is not None:
                vals.append(v)
        outputs = [v for v in vals if not v.uses and v.owner.name not in ("tw.input", "tw.embedding")]
        for i, v in enumerate(outputs or [vals[-1]]):
            tw.output(f"out{i}", v)
    return g.module


def make_graph_payload(rng: np.random.Generator) -> dict:
    from twdialect import print_module

    return {"text": print_module(fuzz_graph(rng)), "input_seed": int(rng.integers(1 << 30))}


def run_graph(payload: dict) -> tuple[str, str, str]:
    """Every pass singly, the default pipeline, and two compiles against the oracle."""
    from tw_passes.optimize import DEFAULT_SPEC
    from twdialect import evaluate, parse_module
    from twdialect.contracts import contract_mask

    stage = "build"
    refusals = []
    try:
        module = parse_module(payload["text"])
        feeds = sample_feeds(module, "main", np.random.default_rng(payload["input_seed"]))
        stage = "oracle"
        want = evaluate(module, feeds, n_positions=N_POSITIONS)
        mask = contract_mask(module, feeds)
        for spec in SINGLE_PASSES + (DEFAULT_SPEC,):
            stage = f"pass {spec}"
            copy = module.clone()
            try:
                apply_pipeline(copy, spec)
            except Failure:
                raise
            except Exception as e:  # noqa: BLE001 - a pass may refuse a graph, cleanly
                outcome, detail = classify(e)
                if outcome != "clean_error":
                    raise Failure(outcome, detail) from None
                refusals.append(f"{spec}: {detail}")
                continue
            check_same(want, evaluate(copy, feeds, n_positions=N_POSITIONS), mask, f"pass {spec}")
        for geometry, pipeline in ((SMALL_GEOMETRY, "default"), (LARGE_GEOMETRY, None)):
            stage = f"compile d={geometry['d']} pipeline={pipeline}"
            if (refused := compile_and_check(module, "main", feeds, want, mask, geometry, pipeline)):
                refusals.append(f"{stage}: {refused}")
        return "accepted", stage, "; ".join(refusals)[:500]
    except Failure as f:
        return f.outcome, stage, f.detail
    except BaseException as e:  # noqa: BLE001
        if isinstance(e, KeyboardInterrupt):
            raise
        outcome, detail = classify(e)
        # A builder graph the oracle refuses is the generator's fault only when clean.
        return outcome, stage, detail


# ======================================================================================
# Category `api`: misuses of the Python API
# ======================================================================================

API_PRELUDE = """\
import numpy as np
from twdialect import ops as tw, evaluate, parse_module, print_module, generate
from tw_lowering import compile
from tw_passes import run_pipeline
nan, inf = float("nan"), float("inf")
def small():
    with tw.Graph() as g:
        x = tw.input("x", 2, (-1.0, 1.0))
        t = tw.embedding("t", [[0.0, 1.0], [2.0, 3.0]])
        tw.output("y", tw.add(x, t))
    return g.module
"""

# Each template is a body run after API_PRELUDE; {V} and {W} take a random bad value.
RASP_CALL = ("from tracr.rasp import rasp\nfrom tw_lowering import compile_rasp_to_model\n"
             "compile_rasp_to_model(rasp.Map(lambda x: x + 1, rasp.tokens), {args})")
BAD_VALUES = ("nan", "inf", "-1", "0", "2.5", "'3'", "None", "[]", "[[nan]]", "10**12", "-10**30",
              "np.zeros((0, 2))", "np.ones((2, 2, 2))", "[[1, 2], [3]]", "'abc'", "(1, 2)",
              "np.array([[1e39]])", "object()", "True", "{'a': 1}", "1e308", "2**63", "[1e400]")
BAD_STEPS = ("-1", "2.5", "'3'", "None", "nan", "[]", "0", "np.int64(2)")
API_TEMPLATES = (
    'with tw.Graph():\n    tw.input("x", {V}, (-1.0, 1.0))',
    'with tw.Graph():\n    tw.input("x", 2, ({V}, 1.0))',
    'with tw.Graph():\n    tw.input("x", 2, (-1.0, {V}))',
    'with tw.Graph():\n    tw.input("x", 1, (0.5, 0.7), integer=True)',
    'with tw.Graph():\n    tw.input({V}, 2, (-1.0, 1.0))',
    'with tw.Graph():\n    tw.input("x", 2, {V})',
    'with tw.Graph():\n    x = tw.input("x", 2, (-1.0, 1.0))\n    tw.output("y", tw.linear(x, {V}))',
    'with tw.Graph():\n    x = tw.input("x", 2, (-1.0, 1.0))\n    tw.output("y", tw.linear(x, [[1.0], [2.0]], {V}))',
    'with tw.Graph():\n    x = tw.input("x", 2, (-1.0, 1.0))\n    tw.output("y", tw.mlp(x, {V}, [0.0], [[1.0]]))',
    'with tw.Graph():\n    x = tw.input("x", 2, (-1.0, 1.0))\n    tw.output("y", tw.mlp(x, [[1.0], [1.0]], {V}, [[1.0]]))',
    'with tw.Graph():\n    x = tw.input("x", 2, (-1.0, 1.0))\n    tw.output("y", tw.mlp(x, [[1.0], [1.0]], [0.0], {V}))',
    'with tw.Graph():\n    x = tw.input("x", 2, (-1.0, 1.0))\n    tw.output("y", tw.attn(x, x, x, {V}, np.eye(2), np.eye(2), np.eye(2)))',
    'with tw.Graph():\n    x = tw.input("x", 2, (-1.0, 1.0))\n    tw.output("y", tw.attn(x, x, x, np.eye(2), np.eye(2), np.eye(2), {V}))',
    'with tw.Graph():\n    x = tw.input("x", 2, (-1.0, 1.0))\n    tw.output("y", tw.slice(x, {V}, 1))',
    'with tw.Graph():\n    x = tw.input("x", 2, (-1.0, 1.0))\n    tw.output("y", tw.slice(x, 0, {V}))',
    'with tw.Graph():\n    x = tw.input("x", 2, (-1.0, 1.0))\n    tw.output("y", tw.concat({V}))',
    'with tw.Graph():\n    x = tw.input("x", 2, (-1.0, 1.0))\n    tw.output("y", tw.concat())',
    'with tw.Graph():\n    x = tw.input("x", 2, (-1.0, 1.0))\n    y = tw.input("y", 3, (-1.0, 1.0))\n    tw.output("z", tw.add(x, y))',
    'with tw.Graph():\n    x = tw.input("x", 2, (-1.0, 1.0))\n    tw.output("y", tw.add(x, {V}))',
    'with tw.Graph():\n    x = tw.input("x", 2, (-1.0, 1.0))\n    tw.output("y", tw.compare(x, {V}))',
    'with tw.Graph():\n    x = tw.input("x", 2, (-1.0, 1.0))\n    tw.output("y", tw.compare(x, 0.0, ramp={V}))',
    'with tw.Graph():\n    x = tw.input("x", 2, (-1.0, 1.0))\n    c = tw.compare(x, 0.0)\n    tw.output("y", tw.select(c, x, tw.literal([1.0, 2.0, 3.0])))',
    'with tw.Graph():\n    x = tw.input("x", 2, (-1.0, 1.0))\n    tw.output("y", tw.select(x, x, {V}))',
    'with tw.Graph():\n    x = tw.input("x", 2, (-1.0, 1.0))\n    tw.output("y", tw.clamp(x, {V}, 1.0))',
    'with tw.Graph():\n    x = tw.input("x", 2, (-1.0, 1.0))\n    tw.output("y", tw.clamp(x, 1.0, -1.0))',
    'with tw.Graph():\n    x = tw.input("x", 1, (-1.0, 1.0))\n    tw.output("y", tw.piecewise_linear(x, {V}, [0.0, 1.0]))',
    'with tw.Graph():\n    x = tw.input("x", 1, (-1.0, 1.0))\n    tw.output("y", tw.piecewise_linear(x, [0.0, 1.0], {V}))',
    'with tw.Graph():\n    x = tw.input("x", 1, (-1.0, 1.0))\n    tw.output("y", tw.piecewise_linear(x, [1.0, 0.0], [0.0, 1.0]))',
    'with tw.Graph():\n    x = tw.input("x", 2, (-1.0, 1.0))\n    tw.output("y", tw.piecewise_linear(x, [0.0, 1.0], [0.0, 1.0]))',
    'with tw.Graph():\n    x = tw.input("x", 1, (-1.0, 1.0))\n    tw.output("y", tw.piecewise_linear_2d(x, x, [0.0, 1.0], [0.0, 1.0], {V}))',
    'with tw.Graph():\n    x = tw.input("x", 1, (-1.0, 1.0))\n    tw.output("y", tw.piecewise_linear_2d(x, x, {V}, [0.0, 1.0], np.zeros((2, 2, 1))))',
    'with tw.Graph():\n    tw.output("y", tw.embedding("t", {V}))',
    'with tw.Graph():\n    tw.output("y", tw.pos_encoding({V}))',
    'with tw.Graph():\n    tw.output("y", tw.pos_encoding(2, max_len={V}))',
    'with tw.Graph():\n    tw.output("y", tw.literal({V}))',
    'with tw.Graph():\n    x = tw.input("x", 2, (-1.0, 1.0))\n    tw.output("y", x)\n    tw.output("y", x)',
    'with tw.Graph():\n    x = tw.input("x", 2, (-1.0, 1.0))\n    y = tw.input("x", 2, (-1.0, 1.0))\n    tw.output("y", tw.add(x, y))',
    'with tw.Graph():\n    x = tw.input("x", 2, (-1.0, 1.0))\n    tw.output({V}, x)',
    'with tw.Graph():\n    x = tw.input("x", 2, (-1.0, 1.0))\ntw.relu(x)',
    'tw.input("x", 2, (-1.0, 1.0))',
    'with tw.Graph():\n    with tw.Graph():\n        tw.input("x", 2, (-1.0, 1.0))',
    'with tw.Graph():\n    x = tw.input("x", 2, (-1.0, 1.0))\n    tw.sequential_scope([lambda: {V}], "s")',
    'with tw.Graph():\n    x = tw.input("x", 2, (-1.0, 1.0))\n    tw.sequential_scope({V}, "s")',
    'with tw.Graph():\n    x = tw.input("x", 2, (-1.0, 1.0))\n    tw.output("y", tw.relu({V}))',
    'with tw.Graph() as g:\n    x = tw.input("x", 2, (-1.0, 1.0))\ncompile(g.module, d=64, d_head=8)',
    'with tw.Graph({V}) as g:\n    x = tw.input("x", 2, (-1.0, 1.0))\n    tw.output("y", x)',
    'compile(small(), d={V}, d_head=8)',
    'compile(small(), d=64, d_head={V})',
    'compile(small(), d=64, d_head=8, d_hidden={V})',
    'compile(small(), d=8, d_head=16)',
    'compile(small(), d=64, d_head=8, pipeline={V})',
    'compile(small(), d=64, d_head=8, graph={V})',
    'compile(small(), d=64, d_head=8).run({V})',
    'compile(small(), d=64, d_head=8).run({{"x": np.zeros((3, 2)), "t": {V}}})',
    'compile(small(), d=64, d_head=8).run({{"x": {V}, "t": np.zeros(3)}})',
    'evaluate(small(), {V})',
    'evaluate(small(), {{"x": np.zeros((3, 2)), "t": {V}}})',
    'evaluate(small(), {{"x": {V}, "t": np.zeros(3)}})',
    'evaluate(small(), {{"x": np.zeros((3, 2)), "t": np.zeros(4)}})',
    'evaluate(small(), {{"x": np.zeros((3, 2)), "t": np.zeros(3)}}, graph={V})',
    # Bad step counts, but not huge ones: generating 2**63 steps is a long request, not a hang.
    'generate(small(), {{"x": np.zeros((1, 2)), "t": np.zeros(1)}}, {S}, lambda o: {{"x": np.zeros(2), "t": 0}})',
    'generate(small(), {{"x": np.zeros((1, 2)), "t": np.zeros(1)}}, 2, lambda o: {V})',
    'run_pipeline(small(), {V})',
    'run_pipeline(small(), "fuse-linears{{max-duplicate-params=" + str({V}) + "}}")',
    'run_pipeline(small(), "sequential-scope{{batch-size=" + str({V}) + "}}")',
    'parse_module({V})',
    'parse_module("builtin.module {{ tw.graph @main {{ %x = tw.input \\"x\\" <" + str({V}) + ", 1.0> : !tw.vec<1> }} }}")',
    'print_module({V})',
    # generate's feedback (a function of the last outputs) and tracr's arguments
    'generate(small(), {{"x": np.zeros((1, 2)), "t": np.zeros(1)}}, 2, {V})',
    'compile(small(), d=64, d_head=8).generate({{"x": np.zeros((1, 2)), "t": np.zeros(1)}}, 1, {V})',
    'compile(small(), d=64, d_head=8).generate_batch([{{"x": np.zeros((1, 2)), "t": np.zeros(1)}}], {S}, {V})',
    RASP_CALL.format(args="{V}, 4"),
    RASP_CALL.format(args="{{1, 2}}, {V}"),
    RASP_CALL.format(args="{{1, 2}}, 4, causal={V}"),
    RASP_CALL.format(args="{{1, 2}}, 4, compiler_bos={V}"),
    RASP_CALL.format(args="{{1, 2}}, 4, compiler_pad={V}"),
    RASP_CALL.format(args="{{1, 2}}, 4, mlp_exactness={V}"),
)


def make_api_payload(rng: np.random.Generator) -> dict:
    template = _pick(rng, API_TEMPLATES)
    return {"code": template.format(V=_pick(rng, BAD_VALUES), S=_pick(rng, BAD_STEPS))}


def run_api(payload: dict) -> tuple[str, str, str]:
    """Run a misuse snippet: it may succeed (then it was no misuse) or fail cleanly."""
    namespace: dict = {}
    try:
        exec(compile(API_PRELUDE, "<prelude>", "exec"), namespace)  # noqa: S102
        exec(compile(payload["code"], "<fuzz case>", "exec"), namespace)  # noqa: S102
        return "accepted", "api", ""
    except BaseException as e:  # noqa: BLE001
        if isinstance(e, KeyboardInterrupt):
            raise
        outcome, detail = classify(e)
        return outcome, "api", detail


# ======================================================================================
# Category `cli`: random argv for the tools, run as subprocesses
# ======================================================================================

TOOLS = {"tw-opt": "tw_tools.tw_opt", "tw-stats": "tw_tools.tw_stats", "tw-run": "tw_tools.tw_run"}
BAD_INTS = ("0", "-1", "abc", "1e3", "99999999999999999999", "", "-", "2.5", "nan", "--d")
PROGRAM_NAMES = ("adder", "calculator", "binary_increment", "sort_digits", "caesar", "fibonacci",
                 "balanced_parens")


def _cli_file(rng: np.random.Generator, kind: str) -> dict:
    """A file argument: contents to write (None: the path is not created, or is a folder)."""
    seeds = corpus()
    if kind == "valid":
        return {"content": print_small_graph(rng)}
    if kind == "mutant":
        return {"content": mutate(_pick(rng, seeds), rng, seeds)[0]}
    if kind == "empty":
        return {"content": ""}
    if kind == "binary":
        return {"content": bytes(rng.integers(0, 256, 64, dtype=np.uint8)).decode("latin-1")}
    if kind == "folder":
        return {"folder": True}
    return {"missing": True}


def print_small_graph(rng: np.random.Generator) -> str:
    from twdialect import print_module
    from twdialect.random_graphs import random_graph

    return print_module(random_graph(int(rng.integers(1000)), n_ops=6))


def make_cli_payload(rng: np.random.Generator) -> dict:
    """argv for one tool: a mostly plausible command with one or two things wrong (or none)."""
    tool = _pick(rng, sorted(TOOLS))
    files = {"in.mlir": _cli_file(rng, _pick(rng, ("valid", "valid", "mutant", "empty", "binary",
                                                      "folder", "missing")))}
    argv: list[str] = []
    stdin = ""
    if tool == "tw-run":
        program = _pick(rng, PROGRAM_NAMES + ("nope", "-x", "", "adder\n"))
        prompt = _pick(rng, ("12+34=", "-5+3=", "--help", "-", "", "é", "((()", "3:abc",
                             "1" * 400, "0+0=", "--d", "101", "9,8,7", "\x00"))
        argv = [program, prompt] if rng.random() < 0.8 else [program]
        if rng.random() < 0.7:
            argv.append("--oracle")
        if rng.random() < 0.2:
            argv.append("--json")
        if rng.random() < 0.1:
            argv = ["--list"]
    else:
        argv = ["in.mlir"] if rng.random() < 0.85 else ["-"]
        if argv == ["-"]:
            stdin = files["in.mlir"].get("content", "") or ""
        if tool == "tw-opt":
            if rng.random() < 0.7:
                argv += ["-p", random_pipeline(rng)]
            for flag in ("--split-input-file", "--verify-diagnostics", "--parsing-diagnostics",
                         "--print-op-generic", "--no-implicit-module"):
                if rng.random() < 0.1:
                    argv.append(flag)
            if rng.random() < 0.3:
                argv += ["-o", _pick(rng, ("out.mlir", "folder_out", "missing_dir/out.mlir",
                                           "/proc/version/out.mlir", ""))]
                files["folder_out"] = {"folder": True}
            if rng.random() < 0.1:
                argv += ["-t", _pick(rng, ("mlir", "bogus", ""))]
        else:
            for flag in ("--d", "--d-head", "--d-hidden", "--probe"):
                if rng.random() < 0.3:
                    argv += [flag, _pick(rng, BAD_INTS + ("64", "16", "256", "3"))]
            if rng.random() < 0.3:
                argv += ["-p", _pick(rng, ("default", "bogus", "", "decompose,cse",
                                           "fuse-linears{max-duplicate-params=-1}"))]
            if rng.random() < 0.2:
                argv += ["--graph", _pick(rng, ("main", "nope", ""))]
            for flag in ("--json", "--error-estimate"):
                if rng.random() < 0.2:
                    argv.append(flag)
    # One odd thing more: a stray flag, a dangling option, a duplicated argument.
    if rng.random() < 0.4:
        extra = _pick(rng, ("--bogus", "-x", "--", "--d=", "-p", "--json=1", "in.mlir", "-h",
                            "--version", "-o"))
        argv.insert(int(rng.integers(len(argv) + 1)), extra)
    return {"tool": tool, "argv": argv, "stdin": stdin, "files": files}


def run_cli(payload: dict, timeout: float) -> tuple[str, str, str]:
    """Run the tool as a console script would; check its exit code and stderr."""
    tool = payload["tool"]
    with tempfile.TemporaryDirectory(prefix="twfuzz") as tmp:
        for name, spec in payload["files"].items():
            path = Path(tmp) / name
            if spec.get("folder"):
                path.mkdir(exist_ok=True)
            elif not spec.get("missing"):
                path.write_text(spec["content"], errors="surrogateescape")
        code = f"import sys\nfrom {TOOLS[tool]} import main\nsys.exit(main())\n"
        env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONWARNINGS="ignore")
        try:
            proc = subprocess.run([sys.executable, "-c", code, *payload["argv"]], cwd=tmp, env=env,
                                  input=payload["stdin"].encode("utf-8", "surrogateescape"),
                                  capture_output=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return "hang", "cli", f"{tool} did not exit within {timeout:.0f} s"
        except ValueError as e:  # an argv with a NUL byte cannot be passed at all
            return "clean_error", "cli", f"argv not passable: {e}"
    return judge_cli(tool, proc.returncode, proc.stderr.decode("utf-8", "replace"))


def judge_cli(tool: str, code: int, stderr: str) -> tuple[str, str, str]:
    """Exit 0 (success, --help, --version) or 1 with exactly one stderr line naming the tool;
    never 2, never a traceback or an internal error."""
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    if "Traceback" in stderr:
        return "masked_crash", "cli", f"exit {code}, traceback: {lines[-1] if lines else ''}"
    if code == 0:
        return "accepted", "cli", ""
    if code != 1:
        return "masked_crash", "cli", f"exit code {code}; stderr: {' | '.join(lines[:3])[:300]}"
    if len(lines) != 1:
        return "masked_crash", "cli", f"{len(lines)} stderr lines: {' | '.join(lines[:3])[:300]}"
    line = lines[0]
    if "internal error" in line or not line.startswith(f"{tool}: error: ") \
            or not line[len(f"{tool}: error: "):].strip():
        return "masked_crash", "cli", line[:300]
    return "clean_error", "cli", line[:300]


# ======================================================================================
# Category `determinism`: two interpreters, two hash seeds, one result
# ======================================================================================


def digest_graphs(seeds: list[int]) -> dict:
    """{seed: sha256 of the default pipeline's IR, the lowering's placement and every weight}
    (or of the compile error's message)."""
    import torch

    from tw_lowering import compile, prepare  # noqa: A004
    from tw_passes import run_pipeline
    from twdialect import print_module

    out = {}
    for s in seeds:
        module = fuzz_graph(np.random.default_rng([7777, s]))
        h = hashlib.sha256()
        try:
            prepared = prepare(module, "default")
            h.update(print_module(prepared).encode())
            placed = run_pipeline(prepared.clone(), "lower-to-transformer{d=256 d-head=16}")
            h.update(print_module(placed).encode())
            ct = compile(module, pipeline="default", **LARGE_GEOMETRY)
            for name, t in sorted(ct.state_dict().items()):
                t = t.to_dense() if t.is_sparse else t
                h.update(name.encode())
                h.update(t.detach().cpu().contiguous().numpy().tobytes())
            h.update(torch.__version__.encode())
        except Exception as e:  # noqa: BLE001 - the same refusal must come from both runs
            h.update(f"{type(e).__name__}: {e}".encode())
        out[str(s)] = h.hexdigest()
    return out


def make_determinism_payload(rng: np.random.Generator) -> dict:
    return {"graph_seeds": [int(x) for x in rng.integers(0, 1 << 20, 4)]}


def run_determinism(payload: dict, timeout: float) -> tuple[str, str, str]:
    seeds = [str(s) for s in payload["graph_seeds"]]
    procs = {}
    for hash_seed in ("1", "4242"):  # both at once: each spends most of its time importing
        env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONHASHSEED=hash_seed)
        procs[hash_seed] = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--digest", *seeds], env=env,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    digests = []
    try:
        for hash_seed, proc in procs.items():
            try:
                out, err = proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                return "hang", "determinism", f"digest run with PYTHONHASHSEED={hash_seed} timed out"
            if proc.returncode != 0:
                tail = (err.strip().splitlines() or [""])[-1]
                return "masked_crash", "determinism", f"digest run failed: {tail}"
            digests.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    differ = [s for s in seeds if digests[0][s] != digests[1][s]]
    if differ:
        return "wrong_answer", "determinism", (f"graph seeds {differ} (fuzz_graph(default_rng("
                                               "[7777, seed]))) compile differently under two "
                                               "PYTHONHASHSEED values")
    return "accepted", "determinism", ""


# ======================================================================================
# Cases and the campaign
# ======================================================================================

MAKERS = {"ir": make_ir_payload, "graph": make_graph_payload, "api": make_api_payload,
          "cli": make_cli_payload, "determinism": make_determinism_payload}

# Category `export`: damaged exports through tw's loaders (`fuzz_exports.py`: a clean refusal,
# a masked crash, or a wrong answer where a damaged export loads and answers differently).
import fuzz_exports  # noqa: E402

CATEGORIES += ("export",)
DEFAULT_WEIGHTS["export"] = 0.002
TIME_LIMITS["export"] = 120.0
MAKERS["export"] = fuzz_exports.make_payload

# Category `rasp`: program files, sound or broken, through tw-rasp as a console script
# (`fuzz_rasp.py`); category `report`: graphs named with hostile text, their HTML report
# checked to be well-formed (`fuzz_report.py`).
import fuzz_rasp  # noqa: E402
import fuzz_report  # noqa: E402

CATEGORIES += ("rasp", "report")
DEFAULT_WEIGHTS.update(rasp=0.002, report=0.01)
TIME_LIMITS.update(rasp=120.0, report=60.0)
MAKERS.update(rasp=fuzz_rasp.make_payload, report=fuzz_report.make_payload)


def plan(n_cases: int, seed: int, weights: dict[str, float] | None = None) -> list[tuple[str, int]]:
    """(category, index) of every case: deterministic given the seed."""
    weights = weights or DEFAULT_WEIGHTS
    cats = [c for c in CATEGORIES if weights.get(c, 0) > 0]
    p = np.array([weights[c] for c in cats], dtype=float)
    p /= p.sum()
    draws = np.random.default_rng([seed, 1 << 40]).choice(len(cats), size=n_cases, p=p)
    return [(cats[int(k)], i) for i, k in enumerate(draws)]


def plan_counts(counts: dict[str, int], seed: int) -> list[tuple[str, int]]:
    """A plan with exactly `counts[category]` cases of each category, interleaved in a seeded
    order (so slow categories do not all land at the end)."""
    cats = [c for c in CATEGORIES for _ in range(counts.get(c, 0))]
    order = np.random.default_rng([seed, 1 << 41]).permutation(len(cats))
    return [(cats[int(k)], i) for i, k in enumerate(order)]


def make_payload(category: str, seed: int, index: int) -> dict:
    return MAKERS[category](np.random.default_rng([seed, index]))


def run_payload(category: str, payload: dict, time_limit: float) -> tuple[str, str, str]:
    """Run one case in this process under an alarm; (outcome, stage, detail)."""
    def on_alarm(signum, frame):
        raise CaseTimeout()

    use_alarm = category not in ("cli", "determinism")  # those time out their subprocesses
    if use_alarm:
        old = signal.signal(signal.SIGALRM, on_alarm)
        signal.setitimer(signal.ITIMER_REAL, time_limit)
    try:
        with np.errstate(all="ignore"):
            if category == "ir":
                return run_ir(payload)
            if category == "graph":
                return run_graph(payload)
            if category == "api":
                return run_api(payload)
            if category == "cli":
                return run_cli(payload, time_limit)
            if category == "export":
                return fuzz_exports.run(payload, classify)
            if category == "rasp":
                return fuzz_rasp.run(payload, time_limit, judge_cli)
            if category == "report":
                return fuzz_report.run(payload, classify)
            return run_determinism(payload, time_limit)
    except CaseTimeout:
        return "hang", "", f"no result within {time_limit:.0f} s"
    finally:
        if use_alarm:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)


def run_one(category: str, seed: int, index: int, time_limits: dict) -> Result:
    started = time.perf_counter()
    try:
        payload = make_payload(category, seed, index)
    except BaseException as e:  # noqa: BLE001 - a generator failure is the harness's own bug
        if isinstance(e, KeyboardInterrupt):
            raise
        return Result(category, index, seed, "masked_crash",
                      f"harness: cannot make the case: {classify(e)[1]}", "generate")
    outcome, stage, detail = run_payload(category, payload, time_limits[category])
    return Result(category, index, seed, outcome, detail, stage, payload,
                  round(time.perf_counter() - started, 3))


# -- worker processes -----------------------------------------------------------------


def _limit_memory() -> None:
    """Cap the address space, so a runaway allocation raises MemoryError here."""
    import resource

    try:
        with open("/proc/self/status") as f:
            vm = next(int(ln.split()[1]) * 1024 for ln in f if ln.startswith("VmSize:"))
        limit = vm + WORKER_MEMORY_BYTES
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    except (OSError, ValueError, StopIteration):
        pass


def worker_main(seed: int, limits_json: str) -> None:
    """Read case lines (`category index`) on stdin, write one JSON result line per case on the
    original stdout; whatever the code under test prints goes to /dev/null."""
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    import torch

    torch.set_num_threads(1)
    import tw_lowering as lowering  # noqa: F401 - imports before the memory cap and the first alarm
    import tw_passes as passes  # noqa: F401
    import tw_tools.tw_opt  # noqa: F401

    corpus()
    _limit_memory()
    limits = json.loads(limits_json)
    protocol.write(json.dumps({"ready": True}) + "\n")
    for line in sys.stdin:
        category, index = line.split()
        protocol.write(json.dumps({"start": int(index)}) + "\n")
        result = run_one(category, seed, int(index), limits)
        protocol.write(json.dumps({"result": asdict(result)}) + "\n")


class Worker:
    """A worker interpreter running cases one at a time."""

    def __init__(self, seed: int, limits: dict):
        env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONHASHSEED="0", OMP_NUM_THREADS="1")
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--worker", "--seed", str(seed),
             "--limits", json.dumps(limits)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            env=env)
        self.ready = False
        self.current: tuple[str, int] | None = None
        self.started = 0.0
        self.buffer = b""

    def send(self, category: str, index: int) -> None:
        self.current = (category, index)
        self.started = time.monotonic()
        self.proc.stdin.write(f"{category} {index}\n".encode())
        self.proc.stdin.flush()

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()


def run_campaign(cases: list[tuple[str, int]], seed: int = 0, findings: str | Path | None = None,
                 workers: int = 2, time_limits: dict[str, float] | None = None,
                 progress: bool = False) -> dict:
    """Run the planned `cases` ((category, index) pairs, see `plan` and `plan_counts`) over
    `workers` worker processes; save each failure to `findings` (a folder) and return the
    summary."""
    limits = dict(TIME_LIMITS, **(time_limits or {}))
    n_cases = len(cases)
    todo = list(reversed(cases))
    results: list[Result] = []
    pool: list[Worker] = []
    sel = selectors.DefaultSelector()

    def start_worker() -> Worker:
        w = Worker(seed, limits)
        pool.append(w)
        sel.register(w.proc.stdout, selectors.EVENT_READ, w)
        return w

    def retire(w: Worker) -> None:
        sel.unregister(w.proc.stdout)
        pool.remove(w)
        w.kill()

    def feed(w: Worker) -> None:
        if todo:
            w.send(*todo.pop())
        else:
            retire(w)

    def lost(w: Worker, outcome: str, detail: str) -> None:
        """The worker's case ended without a result (it died or wedged): record it, replace
        the worker."""
        if w.current is not None:
            cat, idx = w.current
            results.append(Result(cat, idx, seed, outcome, detail, "worker",
                                  _payload_or_empty(cat, seed, idx)))
        retire(w)
        if todo:
            start_worker()

    for _ in range(max(1, min(workers, n_cases))):
        start_worker()
    try:
        while pool:
            for key, _ in sel.select(timeout=1.0):
                w = key.data
                chunk = os.read(w.proc.stdout.fileno(), 1 << 16)
                if not chunk:  # the worker died
                    w.proc.wait()
                    lost(w, "masked_crash", f"worker died with exit status {w.proc.returncode} "
                         "(a native crash or the memory cap)")
                    continue
                w.buffer += chunk
                while b"\n" in w.buffer:
                    line, w.buffer = w.buffer.split(b"\n", 1)
                    msg = json.loads(line)
                    if "ready" in msg:
                        w.ready = True
                        feed(w)
                    elif "result" in msg:
                        results.append(Result(**msg["result"]))
                        w.current = None
                        if progress and len(results) % 500 == 0:
                            print(f"# {len(results)} cases", file=sys.stderr, flush=True)
                        feed(w)
            for w in list(pool):  # a case wedged where the alarm cannot reach it
                if w.current is not None and \
                        time.monotonic() - w.started > 2 * limits[w.current[0]] + 30:
                    lost(w, "hang", f"no result within {2 * limits[w.current[0]] + 30:.0f} s "
                         "(the alarm did not fire)")
    finally:
        for w in list(pool):
            retire(w)
    results.sort(key=lambda r: r.index)
    if findings is not None:
        save_findings(results, Path(findings))
    return summarize(results, seed)


def _payload_or_empty(category: str, seed: int, index: int) -> dict:
    try:
        return make_payload(category, seed, index)
    except Exception:  # noqa: BLE001
        return {}


def save_findings(results: list[Result], folder: Path) -> None:
    """One JSON file per failing case (replayable), plus the IR text beside IR-like cases."""
    folder.mkdir(parents=True, exist_ok=True)
    for r in results:
        if r.outcome not in FAILURES:
            continue
        stem = f"{r.category}-{r.outcome}-{r.seed}-{r.index}"
        (folder / f"{stem}.json").write_text(json.dumps(asdict(r), indent=1, ensure_ascii=True))
        if "text" in r.payload:
            (folder / f"{stem}.mlir").write_text(r.payload["text"], errors="surrogateescape")
        elif "code" in r.payload:
            (folder / f"{stem}.py").write_text(API_PRELUDE + r.payload["code"] + "\n")


def summarize(results: list[Result], seed: int) -> dict:
    per_category: dict[str, dict[str, int]] = {}
    for r in results:
        per_category.setdefault(r.category, {o: 0 for o in OUTCOMES})[r.outcome] += 1
    total = {o: sum(c[o] for c in per_category.values()) for o in OUTCOMES}
    distinct: dict[str, dict] = {}
    for r in results:
        if r.outcome in FAILURES:
            entry = distinct.setdefault(r.signature(), {"count": 0, "example": f"{r.category}-"
                                                        f"{r.outcome}-{r.seed}-{r.index}"})
            entry["count"] += 1
    return {"seed": seed, "cases": len(results), "accepted": total["accepted"],
            "clean_errors": total["clean_error"], "masked_crashes": total["masked_crash"],
            "hangs": total["hang"], "wrong_answers": total["wrong_answer"],
            "per_category": per_category, "distinct_failures": distinct,
            "case_seconds": round(sum(r.seconds for r in results), 1)}


def replay(path: str | Path, time_limit: float | None = None) -> Result:
    """Run a saved finding again in this process."""
    saved = json.loads(Path(path).read_text())
    category = saved["category"]
    limit = time_limit or TIME_LIMITS[category]
    outcome, stage, detail = run_payload(category, saved["payload"], limit)
    return Result(category, saved["index"], saved["seed"], outcome, detail, stage, saved["payload"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="tw fuzz campaign (see the module docstring)")
    ap.add_argument("--cases", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--findings", default=None, help="folder for the failing cases")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--only", default=None,
                    help="comma-separated categories to run (default: the long-run mix)")
    ap.add_argument("--replay", default=None, help="run one saved finding (JSON) again")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--limits", default="{}", help=argparse.SUPPRESS)
    ap.add_argument("--digest", nargs="*", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker_main(args.seed, args.limits)
        return 0
    if args.digest is not None:
        print(json.dumps(digest_graphs(args.digest), sort_keys=True))
        return 0
    if args.replay:
        r = replay(args.replay)
        print(json.dumps({"outcome": r.outcome, "stage": r.stage, "detail": r.detail}))
        return 0 if r.outcome not in FAILURES else 1
    weights = None
    if args.only:
        weights = {c: DEFAULT_WEIGHTS[c] for c in args.only.split(",")}
    summary = run_campaign(plan(args.cases, args.seed, weights), args.seed, args.findings,
                           args.workers, progress=True)
    print(json.dumps(summary, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
