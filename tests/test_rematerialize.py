"""`rematerialize` (lowering/rematerialize.py): a clone of a cheap writer for its later readers
keeps the oracle's values, lowers the best order's peak or is taken back, and the lowering
uses it where the width needs it."""

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tw_lowering as lowering
from tw_lowering.machine import GeometryError, Machine
from tw_lowering.fit import Pressure
from tw_lowering.schedule import smallest_fitting_d
from tw_lowering.tasks import TaskGraph
from tw_lowering.rematerialize import RematerializePass
from pass_checks import run_and_compare
from twdialect import evaluate, parse_module
from twdialect.interp import find_graph
from twdialect.random_graphs import random_graph

EXAMPLE = (Path(__file__).parent / "filecheck" / "passes" / "rematerialize.mlir").read_text()


def _peak(module) -> int:
    p = Pressure(TaskGraph(find_graph(module)), rematerialize=False)
    return p.choice.best(Machine(4096, 16)).peak


def test_the_clone_lowers_the_peak_and_keeps_the_values():
    module = parse_module(EXAMPLE)
    before = _peak(module)
    run_and_compare(module, "rematerialize", 4)
    assert _peak(module) < before
    assert RematerializePass().run_on_graph(None, find_graph(module)) == 0  # nothing left


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10_000))
def test_random_graphs_keep_their_values_and_never_peak_higher(seed):
    module = random_graph(seed, n_ops=30, max_width=6, library=False)
    before = _peak(module)
    run_and_compare(module, "rematerialize", 5, seed)
    assert _peak(module) <= before


def test_graphs_with_library_ops_are_left_alone():
    module = random_graph(3, n_ops=20, library=True)
    text = str(module)
    run_and_compare(module, "rematerialize", 3)
    assert str(module) == text or "tw.compare" not in text


def test_the_lowering_recomputes_where_the_width_needs_it():
    module = parse_module(EXAMPLE)
    tg = TaskGraph(find_graph(module))
    at = (lambda d: Machine(d, 1, 64))
    assert smallest_fitting_d(tg, at(8), at=at) == 16  # 20 without the clone
    assert smallest_fitting_d(
        tg, at(8), at=at, pressure=Pressure(tg, rematerialize=False)) == 20
    ct = lowering.compile(module, d=16, d_head=1, d_hidden=64, pipeline="none")
    xs = {"x": np.random.default_rng(0).uniform(-1, 1, (5, 2))}
    np.testing.assert_allclose(ct.run(xs)["y"], evaluate(module, xs)["y"], atol=1e-5)
    assert len(list(find_graph(module).block.ops)) == 8  # the user's graph is not touched
    with pytest.raises(GeometryError, match="recomputing cheap values .*, 14; smallest d "
                                            r"that fits \(d_head=1, d_hidden=64\): 16"):
        lowering.compile(module, d=15, d_head=1, d_hidden=64, pipeline="none")


def test_bad_options_are_refused_before_any_change():
    from tw_passes import PassOptionError, run_pipeline

    module = parse_module(EXAMPLE)
    for spec in ("rematerialize{rounds=-1}", "rematerialize{d=10 d-head=3}"):
        with pytest.raises(PassOptionError):
            run_pipeline(module, spec)
    assert str(module) == str(parse_module(EXAMPLE))
