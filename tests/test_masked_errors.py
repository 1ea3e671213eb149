"""Misuse that used to escape as a raw Python exception, now one deliberate line each:
`generate` with a feedback that is not a function of one argument (oracle and compiled model),
`compile_rasp_to_model` with arguments of the wrong type or size (`vocab=None`,
`max_seq_len=10**7`, which asked numpy for 728 TiB), `tw-rasp` on a program file that exits,
raises, has a bad setting or a syntax error, and hostile text in the names the HTML report
embeds (`<!--<script>` kept the page from drawing: tests/test_report_browser.py opens it).

Every bad case is a TwError (an EvaluationError, a RaspError, a tool's one stderr line) whose
message names the argument, the setting or the file."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tw_lowering
from twdialect import generate
from twdialect import ops as tw
from twdialect.errors import TwError
from twdialect.inputs import EvaluationError

ROOT = Path(__file__).resolve().parent.parent
NAN = float("nan")


# -- generate: the feedback and the step count -------------------------------------------------


@pytest.fixture(scope="module")
def small():
    """(module, compiled model, a good prompt, a good feedback) of a one-input graph."""
    with tw.Graph("main") as g:
        x = tw.input("x", 1, (-4.0, 4.0))
        tw.output("y", tw.relu(x))
    ct = tw_lowering.compile(g.module, d=16, d_head=4)
    return g.module, ct, {"x": np.array([[1.0]])}, lambda out: {"x": [0.5]}


@pytest.fixture(scope="module")
def small_onnx(small, tmp_path_factory):
    """The small model exported to ONNX and loaded back (its own generate)."""
    pytest.importorskip("onnxruntime", reason="the ONNX door needs onnxruntime")
    from tw_lowering.export import export
    from tw_lowering.export.onnx import load_onnx

    path = tmp_path_factory.mktemp("onnx") / "small.onnx"
    export(small[1], path, "onnx")
    return load_onnx(path)


def _generators(small, onnx=None):
    """generate's doors: the oracle, the model, the model's batch, and an ONNX export's."""
    module, ct, prompt, _ = small
    doors = {
        "oracle": lambda **kw: generate(module, prompt, **kw),
        "model": lambda **kw: ct.generate(prompt, **kw),
        "batch": lambda **kw: ct.generate_batch([prompt], **kw),
    }
    if onnx is not None:
        doors["onnx"] = lambda **kw: onnx.generate(prompt, **kw)
    return doors


class TakesTwo:
    def __call__(self, a, b):
        return {"x": [0.5]}


BAD_FEEDBACK = [
    (5, "feedback must be a function of the last outputs.*got int 5"),
    (None, "feedback must be a function of the last outputs.*got NoneType"),
    ("x", "feedback must be a function.*got str"),
    ({"x": [0.5]}, "feedback must be a function.*got dict .*a mapping of inputs: wrap it"),
    (np.zeros(2), "feedback must be a function.*got ndarray"),
    (lambda: {"x": [0.5]}, r"feedback must take one argument, the last outputs, but <lambda>\(\)"),
    (lambda a, b: {"x": [0.5]}, r"feedback must take one argument.*<lambda>\(a, b\)"),
    (TakesTwo(), r"feedback must take one argument.*TakesTwo\(a, b\)"),
]


@pytest.mark.parametrize("door", ["oracle", "model", "batch", "onnx"])
@pytest.mark.parametrize("feedback, message", BAD_FEEDBACK,
                         ids=[f"feedback{k}" for k in range(len(BAD_FEEDBACK))])
def test_generate_refuses_a_feedback_that_is_not_a_function_of_one_argument(request, small, door,
                                                                            feedback, message):
    """`generate(..., feedback=5)` was Python's TypeError "'int' object is not callable" at the
    first step; now one EvaluationError line naming `feedback`, before any work, even for
    steps=0 (where it would never be called: the call is wrong either way)."""
    onnx = request.getfixturevalue("small_onnx") if door == "onnx" else None
    for steps in (2, 0):
        with pytest.raises(EvaluationError, match="^generate: " + message) as info:
            _generators(small, onnx)[door](steps=steps, feedback=feedback)
        assert "\n" not in str(info.value)


@pytest.mark.parametrize("door", ["oracle", "model", "batch"])
def test_generate_takes_callables_of_one_argument(small, door):
    """What is not misuse stays accepted: a function with defaults or *args, a bound method,
    a callable object."""
    class Feed:
        def __call__(self, outputs, scale=1.0):
            return {"x": [0.5 * scale]}

        def method(self, outputs):
            return {"x": [0.25]}

    run = _generators(small)[door]
    for feedback in (lambda out, k=1: {"x": [0.5]}, lambda *a: {"x": [0.5]}, Feed(),
                     Feed().method):
        out = run(steps=2, feedback=feedback)
        out = out[0] if isinstance(out, list) else out
        assert out["y"].shape == (3, 1)
    out = run(steps=0, feedback=lambda o: dict(x=[0.0]))
    out = out[0] if isinstance(out, list) else out
    assert out["y"].shape == (1, 1)


@pytest.mark.parametrize("door", ["oracle", "model", "batch"])
@pytest.mark.parametrize("steps, message", [
    (-1, "steps must be a non-negative integer, got -1"),
    (2.5, "steps must be a non-negative integer, got 2.5"),
    ("3", "steps must be a non-negative integer, got '3'"),
    (None, "steps must be a non-negative integer, got None"),
    (True, "steps must be a non-negative integer, got True"),
    (NAN, "steps must be a non-negative integer, got nan"),
    (10**30, "steps must be at most 65536"),
])
def test_generate_refuses_bad_steps(small, door, steps, message):
    feedback = small[3]
    with pytest.raises(EvaluationError, match="^generate: " + re.escape(message)):
        _generators(small)[door](steps=steps, feedback=feedback)


def test_an_exception_inside_the_feedback_is_the_callers_own(small):
    """The feedback's own error passes through as it is (it is the caller's code, with its
    own traceback), not hidden behind a message of tw's."""
    def broken(outputs):
        return {"x": outputs["nope"]}

    for run in _generators(small).values():
        with pytest.raises(KeyError, match="nope"):
            run(steps=1, feedback=broken)


# -- compile_rasp_to_model: tracr's arguments ------------------------------------------------

try:
    from tracr.rasp import rasp
except ImportError:  # (the generate and report cases run without it)
    rasp = None
needs_tracr = pytest.mark.skipif(rasp is None,
                                 reason="the RASP cases need tw-compiler[rasp] (tracr)")

from tw_frontends.rasp.compiler import MAX_SEQ_LEN, MAX_VOCAB, check_arguments  # noqa: E402
from twdialect.dialect import MAX_WIDTH  # noqa: E402
from tw_frontends.rasp.translator import RaspError  # noqa: E402

GOOD = dict(vocab={1, 2, 3}, max_seq_len=4, compiler_bos="BOS")

BAD_RASP = [
    ("vocab", None, "vocab must be a set of tokens .*got NoneType None"),
    ("vocab", 5, "vocab must be a set of tokens .*got int 5"),
    ("vocab", "abc", "vocab must be a set of tokens .*got str 'abc'"),
    ("vocab", {1: 2}, "vocab must be a set of tokens .*got dict"),
    ("vocab", set(), "vocab must not be empty"),
    ("vocab", [[1], [2]], r"vocab holds list \[1\], which is not hashable"),
    ("vocab", {1, NAN}, "vocab holds nan, which equals no token"),
    ("vocab", set(range(MAX_VOCAB + 1)), rf"vocab has {MAX_VOCAB + 1:,} tokens: the token "
                                         rf"table would be .*at most {MAX_VOCAB:,} tokens"),
    ("max_seq_len", 10**7, r"max_seq_len=10,000,000 needs a position table of 10,000,001 x "
                           r"10,000,001 \(728 TiB as float64\), wider than a tw table may be "
                           rf"\({MAX_WIDTH:,} columns, MAX_WIDTH\): max_seq_len is at most "
                           rf"{MAX_SEQ_LEN:,}"),
    ("max_seq_len", 10**30, r"max_seq_len=1e\+30 needs a position table"),
    ("max_seq_len", MAX_SEQ_LEN + 1, f"max_seq_len={MAX_SEQ_LEN + 1:,} needs a position "
                                     "table .*at most"),
    ("max_seq_len", 0, "max_seq_len must be a positive integer, got int 0"),
    ("max_seq_len", -3, "max_seq_len must be a positive integer, got int -3"),
    ("max_seq_len", 2.5, "max_seq_len must be a positive integer, got float 2.5"),
    ("max_seq_len", 4.0, "max_seq_len must be a positive integer, got float 4.0"),
    ("max_seq_len", "4", "max_seq_len must be a positive integer, got str '4'"),
    ("max_seq_len", None, "max_seq_len must be a positive integer, got NoneType"),
    ("max_seq_len", True, "max_seq_len must be a positive integer, got bool True"),
    ("causal", "no", "causal must be True or False, got str 'no'"),
    ("causal", None, "causal must be True or False"),
    ("causal", 2, "causal must be True or False, got int 2"),
    ("compiler_bos", [1], r"compiler_bos is list \[1\], which is not hashable"),
    ("compiler_bos", NAN, "compiler_bos is nan, which equals no token"),
    ("compiler_bos", 2, "compiler_bos: the BOS/pad token 2 must not be in the vocabulary"),
    ("compiler_pad", {}, "compiler_pad is dict {}, which is not hashable"),
    ("compiler_pad", 1.0, "compiler_pad: the BOS/pad token 1.0 must not be in the vocabulary"),
    ("compiler_pad", "BOS", "compiler_bos and compiler_pad are both str 'BOS'"),
    ("mlp_exactness", None, "mlp_exactness must be a positive integer"),
    ("mlp_exactness", 0, "mlp_exactness must be a positive integer.*got int 0"),
    ("mlp_exactness", 2.5, "mlp_exactness must be a positive integer.*got float 2.5"),
    ("mlp_exactness", True, "mlp_exactness must be a positive integer.*got bool True"),
]


@needs_tracr
@pytest.mark.parametrize("arg, bad, message", BAD_RASP,
                         ids=[f"{a}-{k}" for k, (a, _, _) in enumerate(BAD_RASP)])
def test_compile_rasp_to_model_refuses_bad_arguments_naming_them(arg, bad, message):
    """`vocab=None` was a TypeError and `max_seq_len=10**7` a MemoryError asking for 728 TiB;
    `max_seq_len=2.5`, `causal="no"` and an unhashable BOS compiled. Each is one RaspError
    line naming the argument, raised before anything is built (the huge tables are refused
    from their size, never allocated: this test runs in well under a second)."""
    program = rasp.Map(lambda x: x + 1, rasp.tokens)
    kwargs = dict(GOOD, **{arg: bad})
    with pytest.raises(RaspError, match="^compile_rasp_to_model: " + message) as info:
        tw_lowering.compile_rasp_to_model(program, **kwargs)
    assert "\n" not in str(info.value)


@needs_tracr
@pytest.mark.parametrize("arg, bad", [("d_head", "x"), ("d_head", 0), ("d_head", 2.5)])
def test_compile_rasp_to_model_refuses_a_bad_d_head(arg, bad):
    """d_head="x" was a TypeError in the width search, d_head=0 silently the default."""
    program = rasp.Map(lambda x: x + 1, rasp.tokens)
    with pytest.raises(TwError, match="compile_rasp_to_model: d_head"):
        tw_lowering.compile_rasp_to_model(program, **GOOD, **{arg: bad})


@needs_tracr
def test_good_rasp_arguments_still_compile():
    """The checks refuse only misuse: numpy integers, a list or frozenset vocabulary, None as
    a token, the longest max_seq_len a table holds (checked, not compiled here)."""
    program = rasp.Map(lambda x: x + 1, rasp.tokens)
    model = tw_lowering.compile_rasp_to_model(program, [1, 2, 3], np.int64(3),
                                              np.bool_(False), compiler_bos=None,
                                              mlp_exactness=np.int32(7))
    assert model.apply([None, 1, 3]).decoded == [None, 2, 4]
    checked = check_arguments(frozenset("ab"), MAX_SEQ_LEN, True, "BOS", "PAD")
    assert checked.max_seq_len == MAX_SEQ_LEN and checked.vocab == {"a", "b"} and checked.causal


# -- tw-rasp: a program file that exits, raises or sets a setting wrong --------------------


def _file(tmp_path, body: str, name: str = "prog.py") -> Path:
    f = tmp_path / name
    f.write_text("from tracr.rasp import rasp\n" + body)
    return f


PROGRAM = "program = rasp.Map(lambda x: x + 1, rasp.tokens)\n"
SETTINGS = "vocab = {1, 2}\nmax_seq_len = 3\n"

BAD_FILES = [
    # (what the file holds, what the line must say after "tw-rasp: error: <file>")
    (PROGRAM + "vocab = 5\nmax_seq_len = 3\n",
     ": vocab must be a set of tokens .*got int 5"),
    (PROGRAM + "vocab = 'abc'\nmax_seq_len = 3\n", ": vocab must be a set of tokens"),
    (PROGRAM + "vocab = [[1], [2]]\nmax_seq_len = 3\n", r": vocab holds list \[1\]"),
    (PROGRAM + "vocab = {1, float('nan')}\nmax_seq_len = 3\n", ": vocab holds nan"),
    (PROGRAM + "vocab = {1, 2}\nmax_seq_len = 2.5\n",
     ": max_seq_len must be a positive integer, got float 2.5"),
    (PROGRAM + "vocab = {1, 2}\nmax_seq_len = '5'\n",
     ": max_seq_len must be a positive integer, got str '5'"),
    (PROGRAM + "vocab = {1, 2}\nmax_seq_len = 10**7\n",
     r": max_seq_len=10,000,000 needs a position table .*728 TiB"),
    (PROGRAM + SETTINGS + "causal = 'no'\n", ": causal must be True or False, got str 'no'"),
    (PROGRAM + SETTINGS + "compiler_bos = [1]\n", r": compiler_bos is list \[1\], which is not hashable"),
    (PROGRAM + SETTINGS + "compiler_bos = 'X'\ncompiler_pad = 'X'\n",
     ": compiler_bos and compiler_pad are both str 'X'"),
    ("import sys\nsys.exit(3)\n", r":3: the file exited \(sys.exit\(3\)\)"),
    ("import sys\nsys.exit(0)\n", r":3: the file exited \(sys.exit\(0\)\)"),
    ("import sys\nsys.exit()\n", r":3: the file exited \(sys.exit\(\)\)"),
    ("raise SystemExit('bye')\n", r":2: the file exited \(sys.exit\('bye'\)\)"),
    (PROGRAM + SETTINGS + "raise RuntimeError('boom')\n",
     ":5: the file raised RuntimeError: boom"),
    ("def f():\n    return 1 / 0\nf()\n", ":3: the file raised ZeroDivisionError"),
    ("raise GeneratorExit()\n", ":2: the file raised GeneratorExit: [(]no message[)]"),
    ("import missing_module_xyz\n", ":2: the file raised ModuleNotFoundError"),
    ("program = rasp.Map(lambda x: x + , rasp.tokens)\n", ":2: syntax error: invalid syntax"),
    ("x = (\n", ":2: syntax error: '[(]' was never closed"),
    ("import sys\n" + "program = rasp.Map(lambda x: sys.exit(4), rasp.tokens)\n" + SETTINGS,
     r":3: the program exited \(sys.exit\(4\)\)"),
    ("def program():\n    raise SystemExit(5)\n" + SETTINGS,
     r":3: program\(\) exited \(sys.exit\(5\)\)"),
    ("def program():\n    return {}['k']\n" + SETTINGS,
     r":3: program\(\) raised KeyError: 'k'"),
    ("def program(x):\n    return x\n" + SETTINGS, r": program\(\) raised TypeError"),
    ("program = 5\n" + SETTINGS, ": `program` is int, not a RASP SOp"),
    ("def program():\n    return None\n" + SETTINGS, r": program\(\) returns NoneType"),
    ("class Bad:\n    def __eq__(self, o):\n        raise ValueError('eq')\n"
     "    def __hash__(self):\n        raise ValueError('hash')\n" + PROGRAM +
     "vocab = {1}\nmax_seq_len = 3\ncompiler_bos = Bad()\n",
     ":6: the settings raised ValueError: hash"),
]


def _tw_rasp(argv, capsys):
    """tw-rasp in this process: (exit code, stdout, stderr)."""
    from tw_tools.tw_rasp import main

    try:
        code = main([str(a) for a in argv])
    except SystemExit as e:
        code = e.code
    out = capsys.readouterr()
    return code, out.out, out.err


@needs_tracr
@pytest.mark.parametrize("body, message", BAD_FILES,
                         ids=[f"file{k}" for k in range(len(BAD_FILES))])
def test_tw_rasp_program_file_errors_are_one_line_naming_the_file(tmp_path, capsys, body,
                                                                  message):
    """`vocab = 5` was "internal error: TypeError", `sys.exit(3)` exit code 3 and no message,
    `sys.exit(0)` exit 0 with no output, `max_seq_len = 2.5` silently 2, `causal = "no"`
    silently causal: now exit 1 and one line naming the file (and the line its own code
    raised at)."""
    f = _file(tmp_path, body)
    code, out, err = _tw_rasp([f, "1"], capsys)
    lines = err.strip().splitlines()
    assert code == 1 and len(lines) == 1, (code, err)
    assert "internal error" not in lines[0], lines[0]
    assert re.match(rf"tw-rasp: error: {re.escape(str(f))}({message})", lines[0]), lines[0]


@pytest.mark.parametrize("settings, want", [
    ("vocab = [1, 2]\nmax_seq_len = 3\n", "['BOS', 2, 3]"),
    ("import numpy as np\nvocab = np.arange(1, 3)\nmax_seq_len = np.int64(3)\n",
     "['BOS', 2, 3]"),
    ("VOCAB = frozenset({1, 2})\nMAX_SEQ_LEN = 3\ncausal = True\n", "['BOS', 2, 3]"),
    ("vocab = {1, 2}\nmax_seq_len = 3\ncompiler_bos = 0\n", "[0, 2, 3]"),
])
@needs_tracr
def test_tw_rasp_takes_good_settings(tmp_path, capsys, settings, want):
    """The checks refuse only misuse: lists, numpy arrays and integers, capitals, a number
    as BOS."""
    f = _file(tmp_path, PROGRAM + settings)
    code, out, err = _tw_rasp([f, "1", "2", "--oracle"], capsys)
    assert code == 0 and out.splitlines()[0] == want, err


@needs_tracr
def test_tw_rasp_restores_what_the_file_changed(tmp_path, capsys):
    """A file that lowers the recursion limit does not break tw's own translation."""
    f = _file(tmp_path, "import sys\nsys.setrecursionlimit(60)\n" + PROGRAM + SETTINGS)
    code, out, err = _tw_rasp([f, "1", "2", "--oracle"], capsys)
    assert code == 0 and out.splitlines()[0] == "['BOS', 2, 3]", err
    assert sys.getrecursionlimit() > 60


def test_tw_rasp_unreadable_files(tmp_path, capsys):
    for path, message in [(tmp_path / "missing.py", "no such file"),
                          (tmp_path, "it is a folder")]:
        code, _, err = _tw_rasp([path], capsys)
        assert code == 1 and err.strip() == f"tw-rasp: error: cannot read {path}: {message}" \
            + ("" if message == "no such file" else ", not a Python file")
    f = tmp_path / "binary.py"
    f.write_bytes(b"\xff\xfe\x00 bad")
    code, _, err = _tw_rasp([f], capsys)
    assert code == 1 and len(err.strip().splitlines()) == 1 and str(f) in err


@needs_tracr
def test_tw_rasp_refusals_of_the_translation_name_the_file(tmp_path, capsys):
    """A RASP construct tw refuses is located at the program file."""
    f = _file(tmp_path, "program = rasp.Map(lambda x: [x], rasp.tokens)\n" + SETTINGS)
    code, _, err = _tw_rasp([f, "1"], capsys)
    assert code == 1 and err.startswith(f"tw-rasp: error: {f}: a map gave [1], which is not "
                                        "hashable")


@needs_tracr
def test_tw_rasp_exits_and_bad_settings_as_a_console_script(tmp_path):
    """The issue's two cases through a real interpreter: the exit code is 1 (not the file's
    3) and stderr is the one line (no library's log line beside it)."""
    seqmap = "program = rasp.SequenceMap(lambda x, y: x + y, rasp.tokens, rasp.tokens)\n"
    for body, message, token in [
            (PROGRAM + "vocab = 5\nmax_seq_len = 3\n", "vocab must be a set", "1"),
            ("import sys\nsys.exit(3)\n", "the file exited (sys.exit(3))", "1"),
            # tracr's absl WARNING for a SequenceMap of one SOp twice was a second line
            (seqmap + SETTINGS, "token 7 is not in the vocabulary", "7")]:
        f = _file(tmp_path, body)
        r = subprocess.run([sys.executable, "-m", "tw_tools.tw_rasp", str(f), token],
                           capture_output=True, text=True, timeout=300)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 1 and len(lines) == 1 and message in lines[0], r.stderr
        assert r.stdout == ""


# -- the report: hostile names stay text ------------------------------------------------------


def test_report_page_embeds_hostile_names_as_data():
    """No `<`, `>` or `&` inside a script element (so no "</script", "<!--", "<script"), the
    embedded JSON reads back as the data, and the title holds the graph's name escaped.
    (Chromium draws the page: tests/test_report_browser.py.)"""
    import html

    from report_checks import hostile_graph, script_texts
    from tw_lowering.report import render_report, report_data

    ct, feeds, locations, bad = hostile_graph()
    page = render_report(ct, feeds, locations=locations)
    scripts = script_texts(page)
    assert len(scripts) == 2 and len(re.findall(r"<script\b", page, re.I)) == 2
    data_text, code_text = scripts
    assert not re.search(r"[<>&\u2028\u2029]", data_text)
    assert json.loads(data_text) == json.loads(json.dumps(report_data(ct, feeds,
                                                                      locations=locations)))
    assert "twReport" in code_text and code_text.rstrip().endswith("})();")
    data = json.loads(data_text)
    assert data["graph"] == "g" + bad
    assert {"tw.output \"out" + bad + "\"", "tw.output \"out2" + bad + "\""} <= \
        set(data["ops"]["name"])
    assert any(n.startswith("tw.input \"in" + bad) for n in data["ops"]["name"])
    assert any(n.startswith("tw.embedding \"tok" + bad) for n in data["ops"]["name"])
    assert "ann" + bad in data["ops"]["ann"]
    assert any(loc.startswith("file" + bad) for loc in data["ops"]["loc"])
    title = re.search(r"<title>(.*?)</title>", page, re.S).group(1)
    assert html.unescape(title) == "tw compile report: @g" + bad
