"""The reliability harness's `rasp` surface (`fuzz_harness.py`): program files run through
`tw-rasp` as a console script, each one a random RASP program (tests/test_rasp_fuzz.py's
generator) written as a file, then left as it is or broken: a setting of the wrong type or size,
the file exiting or raising (at its top level, in `program()`, in a RASP function tw calls
while translating), no program, a syntax error, text cut or mangled at random, or input tokens
outside the vocabulary or too many.

Outcomes: a run that ends with exit 1 and one `tw-rasp: error:` line is a clean refusal; a
traceback, another exit code, several lines or an "internal error" is a masked crash (the CLI
contract, `judge_cli`); a broken file that tw-rasp runs anyway (exit 0), or a sound file whose
decoded answer differs from RASP's own evaluation (`rasp.evaluate`, causally masked for a
causal program; numbers within 1e-4), is a wrong answer. Mangled text may run or be refused,
under the contract. Everything is drawn from the case's generator, so a case replays exactly.
"""

from __future__ import annotations

import builtins
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
BOS = "BOS"
HEADER = "from tracr.rasp import rasp\n"
TOLERANCE = 1e-4

# Settings of the wrong type or size: (name, value as written); tw-rasp must refuse each.
BAD_SETTINGS = (
    ("vocab", "5"), ("vocab", "None"), ("vocab", "'abc'"), ("vocab", "[[1], [2]]"),
    ("vocab", "{1: 2}"), ("vocab", "set()"), ("vocab", "{float('nan'), 1}"),
    ("vocab", "set(range(5000))"), ("vocab", "object()"),
    ("max_seq_len", "2.5"), ("max_seq_len", "'5'"), ("max_seq_len", "0"), ("max_seq_len", "-1"),
    ("max_seq_len", "10**7"), ("max_seq_len", "10**30"), ("max_seq_len", "True"),
    ("max_seq_len", "[4]"), ("max_seq_len", "float('inf')"),
    ("causal", "'no'"), ("causal", "2"), ("causal", "None"), ("causal", "[]"),
    ("compiler_bos", "[1]"), ("compiler_bos", "{}"), ("compiler_bos", "float('nan')"),
    ("compiler_bos", "TOKEN"), ("compiler_pad", "TOKEN"), ("compiler_pad", "'BOS'"),
)
# Code that breaks the file: tw-rasp must refuse it. {K} takes an exit argument, {E} an
# exception class.
EXITS = ("0", "1", "3", "", "'bye'", "None", "-1", "256")
EXCEPTIONS = ("RuntimeError", "ValueError", "KeyError", "TypeError", "ZeroDivisionError",
              "MemoryError", "RecursionError", "AttributeError", "GeneratorExit", "OSError",
              "SystemExit", "StopIteration", "AssertionError", "ImportError", "IndexError")
BREAKS = (
    "import sys\nsys.exit({K})\n",
    "raise {E}('boom')\n",
    "raise {E}\n",
    "import no_such_module_for_tw_rasp\n",
    "def _f(n):\n    return _f(n + 1)\n_f(0)\n",
    "assert False, 'the file says no'\n",
)
# Ways to break the program itself (the file's `program` replaced), and what must come of it:
# "refuse"; "either" (the translation reads a RASP function that raises an Exception as giving
# no value there, as tracr's value sets do, so the file may run); "base" (refuse where {E} is
# no Exception: it passes through the translation, as `sys.exit` does).
BAD_PROGRAMS = (
    ("import sys\nprogram = rasp.Map(lambda x: sys.exit({K}), program)\n", "refuse"),
    ("def _boom(x):\n    raise {E}('in a map')\nprogram = rasp.Map(_boom, program)\n", "base"),
    ("_p = program\ndef program():\n    raise {E}('in program()')\n", "refuse"),
    ("_p = program\ndef program():\n    import sys\n    sys.exit({K})\n", "refuse"),
    ("program = 5\n", "refuse"),
    ("program = None\n", "refuse"),
    ("program = 'rasp.tokens'\n", "refuse"),
    ("_p = program\ndef program(x):\n    return _p\n", "refuse"),
    ("_p = program\ndef program():\n    return [_p]\n", "refuse"),
    ("program = rasp.Map(lambda x: [x], program)\n", "refuse"),
    ("program = rasp.Map(lambda x: object(), program)\n", "either"),
)
KINDS = ("sound", "sound", "sound", "setting", "break", "program", "tokens", "mangle")


def make_payload(rng: np.random.Generator) -> dict:
    """A case: the file's text, tw-rasp's argv, what must come of it ("answer", "refuse",
    "either"), and for a sound file the program's source and input (the reference)."""
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))
    from test_rasp_fuzz import generate

    prog = generate(int(rng.integers(1 << 20)))
    vocab = sorted(prog.vocab, key=str)
    settings = {"vocab": repr(set(prog.vocab)), "max_seq_len": str(prog.max_seq_len),
                "causal": str(prog.causal), "compiler_bos": repr(BOS)}
    program = prog.source()
    tokens = [vocab[int(k)] for k in rng.integers(len(vocab),
                                                  size=int(rng.integers(1, prog.max_seq_len + 1)))]
    kind = KINDS[int(rng.integers(len(KINDS)))]
    expect, extra, before = "answer", "", ""
    if kind == "setting":
        name, value = BAD_SETTINGS[int(rng.integers(len(BAD_SETTINGS)))]
        settings[name] = value.replace("TOKEN", repr(vocab[0]))
        expect = "refuse"
    elif kind == "break":
        code = _filled(BREAKS[int(rng.integers(len(BREAKS)))], rng)
        if rng.random() < 0.5:
            before = code
        else:
            extra = code
        expect = "refuse"
    elif kind == "program":
        template, expect = BAD_PROGRAMS[int(rng.integers(len(BAD_PROGRAMS)))]
        extra = _filled(template, rng)
        if expect == "base":  # (the exception the map raises)
            raised = getattr(builtins, extra.split("raise ", 1)[1].split("(", 1)[0])
            expect = "either" if issubclass(raised, Exception) else "refuse"
    elif kind == "tokens":
        tokens = _bad_tokens(rng, vocab, prog.max_seq_len)
        expect = "refuse"
    text = HEADER + before + program + "\n" + extra + "".join(
        f"{k} = {v}\n" for k, v in settings.items())
    if kind == "mangle":
        text = _mangled(text, rng)
        expect = "either"
    argv = ["prog.py", *[str(t) for t in tokens], "--json"]
    if rng.random() < 0.5:
        argv.append("--oracle")
    return {"kind": kind, "expect": expect, "file": text, "argv": argv, "program": program,
            "tokens": tokens, "causal": prog.causal}


def _filled(template: str, rng: np.random.Generator) -> str:
    return template.format(K=EXITS[int(rng.integers(len(EXITS)))],
                           E=EXCEPTIONS[int(rng.integers(len(EXCEPTIONS)))])


def _bad_tokens(rng: np.random.Generator, vocab: list, max_seq_len: int) -> list:
    """Input tokens tw-rasp must refuse: one outside the vocabulary, or too many."""
    if rng.random() < 0.5:
        return [vocab[0]] * (max_seq_len + 1 + int(rng.integers(3)))
    outside = ("zz", "9", "-1", "2.5", "", "BOS ", "None")
    bad = next(w for w in outside[int(rng.integers(len(outside))):] + outside
               if w not in {str(v) for v in vocab})
    return [vocab[0], bad]


def _mangled(text: str, rng: np.random.Generator) -> str:
    """The file's text cut short, or a character deleted, doubled or replaced."""
    i = int(rng.integers(len(text)))
    how = int(rng.integers(4))
    if how == 0:
        return text[:i]
    if how == 1:
        return text[:i] + text[i + 1:]
    if how == 2:
        return text[:i] + text[i] + text[i:]
    return text[:i] + "()[]{}:=,.'\"\\#x0 \n"[int(rng.integers(18))] + text[i + 1:]


def run(payload: dict, time_limit: float, judge) -> tuple[str, str, str]:
    """Run tw-rasp on the payload's file (a console script: a fresh interpreter) and judge it:
    the CLI contract (`judge(tool, exit code, stderr)`), then what the case expects."""
    with tempfile.TemporaryDirectory(prefix="twfuzz") as tmp:
        Path(tmp, "prog.py").write_text(payload["file"], errors="surrogateescape")
        code = "import sys\nfrom tw_tools.tw_rasp import main\nsys.exit(main())\n"
        env = dict(os.environ, PYTHONPATH=str(HERE.parent), PYTHONWARNINGS="ignore")
        try:
            proc = subprocess.run([sys.executable, "-c", code, *payload["argv"]], cwd=tmp,
                                  env=env, capture_output=True, timeout=max(1.0, time_limit - 5))
        except subprocess.TimeoutExpired:
            return "hang", "rasp", f"tw-rasp did not exit within {time_limit - 5:.0f} s"
        except ValueError as e:  # a NUL byte in argv cannot be passed at all
            return "clean_error", "rasp", f"argv not passable: {e}"
    stderr = proc.stderr.decode("utf-8", "replace")
    outcome, _, detail = judge("tw-rasp", proc.returncode, stderr)
    stage = f"rasp/{payload['kind']}"
    if outcome != "accepted":
        return outcome, stage, detail
    if payload["expect"] == "refuse":
        return "wrong_answer", stage, "tw-rasp ran a file or input it must refuse"
    if payload["expect"] == "either":
        return "accepted", stage, ""
    return _check_answer(payload, proc.stdout.decode("utf-8", "replace"), stage)


def _check_answer(payload: dict, stdout: str, stage: str) -> tuple[str, str, str]:
    """A sound file's answer against RASP's own evaluation of its program."""
    try:
        decoded = json.loads(stdout.strip().splitlines()[-1])["decoded"]
    except (ValueError, KeyError, IndexError):
        return "wrong_answer", stage, f"no JSON answer on stdout: {stdout[-200:]!r}"
    wanted = _reference(payload)
    if decoded[:1] != [BOS] or len(decoded) != len(payload["tokens"]) + 1:
        return "wrong_answer", stage, f"decoded {decoded!r} for {payload['tokens']!r}"
    for i, (got, want) in enumerate(zip(decoded[1:], wanted)):
        if want is not None and not _agrees(got, _as_json(want[0])):
            return "wrong_answer", stage, (f"position {i + 1}: tw-rasp {got!r}, RASP "
                                           f"{want[0]!r} (input {payload['tokens']!r})")
    return "accepted", stage, ""


def _reference(payload: dict) -> list:
    """RASP's value at each position ((value,), or None where RASP gives none: an input the
    program has no meaning for), as tests/test_rasp_fuzz.py computes it."""
    from test_rasp_fuzz import _wanted
    from tracr.rasp import rasp

    scope = {"rasp": rasp}
    exec(payload["program"], scope)  # noqa: S102 - the generator's own source
    return _wanted(scope["program"], list(payload["tokens"]), payload["causal"], {})


def _as_json(value):
    """A RASP value as tw-rasp's --json writes it (tuples as lists, others by str)."""
    return json.loads(json.dumps(value, default=str))


def _agrees(got, want) -> bool:
    """One position, by tests/test_rasp_fuzz.py's rule: equal values; a float within
    TOLERANCE of a number (a numerical True reads as 1); a numerical None reads as 0."""
    if want is None:
        return got is None or (isinstance(got, float) and abs(got) < TOLERANCE)
    if isinstance(got, float) and isinstance(want, (int, float)):
        return abs(got - float(want)) < TOLERANCE
    return got == want
