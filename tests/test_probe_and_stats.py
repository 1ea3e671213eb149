"""The probe names the first diverging op; tw-stats reports and fails in one line."""

import subprocess
import sys

import numpy as np
import torch

from tw_lowering import compile
from tw_lowering.probe import probe
from twdialect import ops as tw
from twdialect import print_module
from twdialect.random_graphs import random_graph, sample_inputs


def _chain():
    with tw.Graph("main") as g:
        x = tw.input("x", 2, value_range=(-1, 1))
        with tw.annotate("first"):
            a = tw.mlp(x, np.eye(2), None, np.eye(2), [0.5, 0.5])
        with tw.annotate("second"):
            b = tw.mlp(a, np.eye(2), None, np.eye(2))
        tw.output("b", b)
    return g.module


def test_probe_is_silent_on_a_correct_model():
    for seed in range(10):
        module = random_graph(seed, 25, library=False)
        ct = compile(module, d=96, d_head=8, d_hidden=256)
        report = probe(ct, module, sample_inputs(module, 5, seed))
        assert report.first_divergence is None and report.checked > 0, str(report)


def test_probe_names_the_op_a_corrupted_weight_breaks():
    module = _chain()
    ct = compile(module, d=16, d_head=4, d_hidden=16)
    feeds = {"x": np.random.default_rng(0).uniform(-1, 1, (4, 2))}
    assert probe(ct, module, feeds).first_divergence is None
    with torch.no_grad():
        ct.layers[1].mlp.b2 += 0.25  # layer 1's MLP writes the second mlp
    report = probe(ct, module, feeds)
    assert report.first_divergence is not None and "[second]" in report.first_divergence
    assert report.layer == 1 and report.sublayer == "mlp"
    assert abs(report.max_error - 0.25) < 1e-5


def test_stats_report_per_layer_and_annotation():
    ct = compile(_chain(), d=16, d_head=4, d_hidden=16)
    text = ct.stats.report()
    assert "layers 2 (floor 2, ratio 1.000)" in text
    assert "first" in text and "second" in text
    assert ct.stats.per_annotation["first"]["neurons"] == 2
    assert ct.stats.ops_per_layer == [1, 1]


def _tw_stats(*args, stdin=None):
    return subprocess.run([sys.executable, "-m", "tw_tools.tw_stats", *args], input=stdin,
                          capture_output=True, text=True)


def test_tw_stats_cli(tmp_path):
    path = tmp_path / "g.mlir"
    path.write_text(print_module(_chain()))
    ok = _tw_stats(str(path), "--d", "16", "--d-head", "4", "--d-hidden", "16", "--probe", "4")
    assert ok.returncode == 0, ok.stderr
    assert "layers 2 (floor 2" in ok.stdout and "probe: no divergence" in ok.stdout
    js = _tw_stats(str(path), "--d", "16", "--d-head", "4", "--json")
    assert js.returncode == 0 and '"n_layers": 2' in js.stdout
    for bad in ([str(tmp_path / "missing.mlir")], [str(path), "--d", "2", "--d-head", "2"]):
        r = _tw_stats(*bad)
        assert r.returncode == 1 and "Traceback" not in r.stderr
        assert len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith("tw-stats: error:")
