"""Error budget: every output's static float32 error estimate (lowering/precision.py) is held
to the margin its consumer declares (`tw.output(..., margin=...)`, attribute `tw.margin`)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from tw_lowering import compile
from tw_lowering.precision import PrecisionError, check_margins, output_errors
from twdialect import evaluate
from twdialect import ops as tw
from twdialect.dialect import TwVerifyException
from twdialect.errors import TwError


def _graph(margin):
    with tw.Graph() as g:
        x = tw.input("x", 2, (-1000.0, 1000.0))
        h = tw.relu(tw.linear(x, [[0.3, -0.7], [1.1, 0.9]], [0.1, -0.2]))
        tw.output("y", tw.linear(h, [[0.5], [0.25]]), margin=margin)
        tw.output("z", tw.linear(x, [[1.0], [1.0]]))  # no margin: not checked
    return g.module


def test_estimates_bound_the_measured_error_per_output():
    ct = compile(_graph(None), d=32, d_head=8)
    est = output_errors(ct.schedule)
    assert set(est) == {"y", "z"}
    feeds = {"x": np.random.default_rng(0).uniform(-1000, 1000, (4000, 2))}
    want, got = evaluate(_graph(None), feeds), ct.run(feeds)
    for name, (bound, magnitude) in est.items():
        assert np.abs(got[name] - want[name]).max() <= bound
        assert magnitude >= np.abs(want[name]).max()


def test_a_margin_below_the_estimate_is_refused_by_name():
    ct = compile(_graph(1e-9), d=32, d_head=8, on_margin="ignore")
    with pytest.raises(PrecisionError, match='"y" may be off by .* \\(margin 1e-09\\)') as info:
        check_margins(ct.schedule)
    assert '"z"' not in str(info.value) and isinstance(info.value, TwError)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = check_margins(ct.schedule, on_margin="warn")
    assert len(caught) == 1 and '"y"' in str(caught[0].message)
    assert report["y"][1] == 1e-9 and report["y"][0] > 1e-9
    assert check_margins(ct.schedule, on_margin="ignore") == {}
    with pytest.raises(PrecisionError, match="on_margin must be"):
        check_margins(ct.schedule, on_margin="maybe")


def test_a_margin_above_the_estimate_passes():
    ct = compile(_graph(0.5), d=32, d_head=8)
    report = check_margins(ct.schedule)
    assert report["y"][0] < 0.5 == report["y"][1]


def test_margins_are_checked_where_they_are_declared():
    with tw.Graph():
        x = tw.input("x", 1, (0.0, 1.0))
        with pytest.raises(TwError, match="tw.output: margin"):
            tw.output("y", x, margin=-1.0)
    module = _graph(0.5)
    out = [op for op in module.walk() if op.name == "tw.output"][0]
    from xdsl.dialects.builtin import FloatAttr, f64

    out.attributes["tw.margin"] = FloatAttr(float("inf"), f64)
    with pytest.raises(TwVerifyException, match="tw.margin must be a positive finite float"):
        module.verify()


def test_compile_holds_outputs_to_their_margins():
    with pytest.raises(PrecisionError, match='"y" may be off by'):
        compile(_graph(1e-9), d=32, d_head=8)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ct = compile(_graph(1e-9), d=32, d_head=8, on_margin="warn")
    assert any('"y"' in str(w.message) for w in caught) and ct.stats.n_layers >= 1
    compile(_graph(1e-9), d=32, d_head=8, on_margin="ignore")
    compile(_graph(0.5), d=32, d_head=8)
    with pytest.raises(TwError, match="on_margin must be"):
        compile(_graph(0.5), d=32, d_head=8, on_margin="no")


def test_tw_stats_prints_each_outputs_estimate_and_refuses_a_missed_margin(tmp_path):
    import shutil
    import subprocess
    import sys

    path = tmp_path / "m.mlir"
    path.write_text('tw.graph @main {\n'
                    '  %0 = tw.input "x" <-1000.0, 1000.0> : !tw.vec<1>\n'
                    '  %1 = tw.linear %0 weight dense<0.3> : tensor<1x1xf32> : '
                    '!tw.vec<1> -> !tw.vec<1>\n'
                    '  tw.output "y" %1 {tw.margin = 1.0e-9 : f64} : !tw.vec<1>\n'
                    '  tw.output "z" %0 : !tw.vec<1>\n}\n')
    tool = shutil.which("tw-stats") or sys.exit("tw-stats not installed")
    report = subprocess.run([tool, str(path), "--d", "32", "--d-head", "8", "--error-estimate"],
                            capture_output=True, text=True, timeout=120)
    assert report.returncode == 0
    assert 'error estimate: "y" within' in report.stdout and "EXCEEDS it" in report.stdout
    assert 'error estimate: "z" within' in report.stdout
    refused = subprocess.run([tool, str(path), "--d", "32", "--d-head", "8"],
                             capture_output=True, text=True, timeout=120)
    assert refused.returncode == 1 and refused.stdout == ""
    assert refused.stderr.count("\n") == 1 and '"y" may be off by' in refused.stderr
