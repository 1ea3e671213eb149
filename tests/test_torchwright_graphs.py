"""Graphs built with torchwright's own ops (tw_examples.torchwright_graphs): each program's
graph answers its plain-Python reference under torchwright's own evaluation, tw's oracle
equals that evaluation, tw's compiled model equals its oracle and answers every prompt, in no
more layers than torchwright's CP-SAT schedule of the same graph at the same geometry."""

from __future__ import annotations

import sys

import numpy as np
import pytest

pytest.importorskip("torchwright", reason="graphs built with torchwright's ops need it")

import twdialect  # noqa: E402
from tw_examples import torchwright_graphs as graphs  # noqa: E402
from tw_examples.torchwright_graphs import PROGRAMS, TOKENS, decode, reference  # noqa: E402
from tw_lowering import compile  # noqa: A004, E402
from tw_frontends.torchwright import TorchwrightError, from_torchwright  # noqa: E402

PROMPTS = 4


@pytest.fixture(scope="module", params=sorted(PROGRAMS))
def built(request):
    program = PROGRAMS[request.param]
    output, embedding = program.build()
    module = from_torchwright(output)
    ct = compile(module, d=program.d, d_head=program.d_head, d_hidden=program.d,
                 pipeline="default")
    return program, output, embedding, module, ct


def test_every_mlp_is_swish_and_every_head_rotary(built):
    _, _, _, module, _ = built
    mlps = [op for op in module.walk() if op.name == "tw.mlp"]
    heads = [op for op in module.walk() if op.name == "tw.attn"]
    assert mlps and all(op.activation == "swish" for op in mlps)
    assert any(op.is_gated for op in mlps)
    assert heads and all(op.rope is not None for op in heads)


def test_reference_oracle_and_compiled_model_agree_and_answer(built):
    program, output, embedding, module, ct = built
    rng = np.random.default_rng(7)
    for _ in range(PROMPTS):
        prompt, answer = program.sample(rng)
        ids, first = program.feed(embedding, prompt, answer)
        theirs = reference(output, ids)
        ours = twdialect.evaluate(module, {TOKENS: ids})["out"]
        got = ct.run({TOKENS: ids})["out"]
        scale = max(1.0, float(np.abs(ours).max()))
        window = slice(first, first + len(answer))
        assert decode(embedding, theirs[window]) == answer, prompt
        # torchwright evaluates in float32 (its weights' dtype), tw's oracle in float64
        assert np.abs(ours - theirs).max() <= 1e-5 * scale
        assert np.abs(got - ours).max() <= 1e-4 * scale
        assert decode(embedding, got[window]) == answer, prompt


def test_no_more_layers_than_torchwrights_cpsat(built):
    program, _, _, _, ct = built
    greedy, cpsat = program.torchwright_layers
    assert ct.stats.n_layers <= cpsat <= greedy


def test_expected_answers():
    assert PROGRAMS["adder"].expected(["<bos>", "9", "9", "9", "+", "1", "\n"]) == \
        ["1", "0", "0", "0", "<eos>"]
    assert PROGRAMS["calculator"].expected(["<bos>", "3", "-", "1", "2", "\n"]) == \
        ["-", "9", "<eos>"]
    assert PROGRAMS["fibonacci"].expected(["<bos>", "5", "8", "\n"])[:8] == list("05081321")
    assert PROGRAMS["binary_increment"].expected(["<bos>", "1", "1", "1", "1", "\n"]) == \
        ["1", "0", "0", "0", "0", "<eos>"]


def test_without_torchwright_the_builders_say_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "torchwright.ops.swiglu", None)
    with pytest.raises(TorchwrightError, match=r"pip install 'tw-compiler\[torchwright\]'"):
        graphs.PROGRAMS["caesar"].build()


def test_bench_section_runs():
    """`bench/frontends.py --torchwright` on one graph: a row per compiler, exact, and the
    summary line."""
    import json
    import subprocess
    from pathlib import Path

    bench = Path(__file__).resolve().parents[1] / "bench" / "frontends.py"
    res = subprocess.run([sys.executable, str(bench), "--torchwright", "--graphs",
                          "binary_increment", "--no-cpsat"], capture_output=True, text=True,
                         timeout=900)
    assert res.returncode == 0, res.stderr[-2000:]
    row, summary = (json.loads(line) for line in res.stdout.strip().splitlines())
    assert row["graph"] == "binary_increment" and row["prompts"] == 16 and row["exhaustive"]
    for side in ("tw", "torchwright_greedy"):
        assert row[side]["answers"] == 1.0 and row[side]["layers"] >= 1
    assert row["tw"]["layers"] <= PROGRAMS["binary_increment"].torchwright_layers[1]
    assert row["tw"]["vs_oracle_max_dev"] <= 1e-4 and summary["tw_answers_everywhere"]
