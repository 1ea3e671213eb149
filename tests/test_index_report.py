"""The heads' lookups are visible where a user looks: `Stats.report()` (tw-stats), the stats'
JSON and the HTML compile report; and CI runs the index decoder (numba present)."""

import os

import numpy as np
import pytest

from tw_lowering import compile
from twdialect import ops as tw
from twdialect.library.attention import attend_mean_where, attend_to_offset


def _model():
    with tw.Graph("main") as g:
        x = tw.input("x", 1, value_range=(-4.0, 4.0))
        pos = tw.pos_encoding(2, 64)
        prev = attend_to_offset(pos, x, 2)
        valid = tw.literal([1.0])
        mean = attend_mean_where(tw.linear(valid, [[1.0]]), x)
        tw.output("prev", prev)
        tw.output("mean", mean)
    return compile(g.module, d=32, d_head=4)


def test_stats_name_every_heads_lookup():
    ct = _model()
    kinds = [h["kind"] for h in ct.stats.index_heads]
    assert "position" in kinds and "scan" in kinds
    text = ct.stats.report()
    assert "position reads" in text and "attention" in text
    assert "attention (" in text  # the attended head says why
    assert ct.stats.to_dict()["index_heads"] == ct.stats.index_heads


def test_report_page_lists_the_heads(tmp_path):
    from tw_lowering.report import render_report

    ct = _model()
    page = render_report(ct)
    assert 'data-kind="position"' in page and 'data-kind="scan"' in page
    assert "exact-index heads" in page


def test_ci_has_the_index_decoder():
    from tw_lowering.fast_decode import available

    if os.environ.get("CI"):
        assert available() is None, available()
    elif available() is not None:
        pytest.skip(available())


def test_unchecked_inputs_take_the_torch_decoder():
    """The heads' plans are proven over the declared ranges: generate with unchecked inputs
    runs the torch decoder (and says so), and asking for the index decoder is one line."""
    from tw_lowering.fast_decode import available
    from twdialect.inputs import EvaluationError

    if available() is not None:
        pytest.skip(available())
    ct = _model()
    x = np.linspace(-3, 3, 6)[:, None]
    ct.generate({"x": x}, 2, lambda o: {"x": [0.5]})
    assert ct.decoder_used == "index"
    ct.generate({"x": x}, 2, lambda o: {"x": [0.5]}, on_out_of_range="unchecked")
    assert ct.decoder_used == "torch"
    with pytest.raises(EvaluationError, match="unchecked inputs"):
        ct.generate({"x": x}, 2, lambda o: {"x": [0.5]}, on_out_of_range="unchecked",
                    decoder="index")
