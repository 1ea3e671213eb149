"""The depth/width curve (`lowering.sweep`, `tw-stats --sweep-d`): its first point is the
smallest d that fits, each point is what `compile` gives at that width, every wider width fits
too, and a target depth or parameter budget picks a point."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import tw_examples.primitive as primitive
import tw_lowering as lowering
from tw_lowering.machine import GeometryError
from tw_lowering.sweep import WidthPoint, pick_width, width_sweep
from twdialect import print_module

D_HEAD = 8


@pytest.fixture(scope="module")
def calculator():
    """The primitive calculator: written node by node, it has residual pressure."""
    return primitive.load("calculator").module


@pytest.fixture(scope="module")
def curve(calculator):
    return width_sweep(calculator, D_HEAD)


def test_first_point_is_the_smallest_width_that_fits(calculator, curve):
    first = curve[0]
    lowering.compile(calculator, d=first.d, d_head=D_HEAD)
    with pytest.raises(GeometryError):
        lowering.compile(calculator, d=first.d - D_HEAD, d_head=D_HEAD)


def test_each_point_is_what_compile_gives(calculator, curve):
    for p in (curve[0], curve[-1]):
        ct = lowering.compile(calculator, d=p.d, d_head=D_HEAD)
        assert (ct.n_layers, ct.stats.floor) == (p.n_layers, p.floor)
        assert sum(ct.stats.heads_per_layer) == p.heads
        assert sum(ct.stats.neurons_per_layer) == p.neurons
        assert ct.allocated_params() == p.params


def test_the_series_ends_at_the_floor(curve):
    assert curve[-1].n_layers == curve[-1].floor
    assert all(p.n_layers > p.floor for p in curve[:-1])
    assert [p.d for p in curve] == sorted({p.d for p in curve})


def test_every_wider_width_fits(calculator, curve):
    """Feasibility is monotone in d: each width from the smallest on fits."""
    widths = range(curve[0].d, curve[0].d + 12 * D_HEAD, D_HEAD)
    assert [p.d for p in width_sweep(calculator, D_HEAD, widths=widths)] == list(widths)


def test_given_widths_that_do_not_fit_are_left_out(calculator, curve):
    got = width_sweep(calculator, D_HEAD, widths=[curve[0].d - D_HEAD, curve[0].d])
    assert [p.d for p in got] == [curve[0].d]


def _p(d, layers, params):
    return WidthPoint(d, 4, 4 * d, layers, 2, 0, 0, params, 0.0)


def test_pick_width_for_a_depth_or_a_budget():
    curve = [_p(16, 9, 100), _p(24, 6, 200), _p(32, 4, 400), _p(48, 4, 700)]
    assert pick_width(curve, max_layers=6).d == 24  # the narrowest that is shallow enough
    assert pick_width(curve, max_layers=3) is None
    assert pick_width(curve, max_params=450).d == 32  # the shallowest within budget
    assert pick_width(curve, max_layers=9, max_params=150).d == 16
    assert pick_width(curve, max_params=50) is None


def test_a_d_max_below_the_smallest_is_refused(calculator, curve):
    with pytest.raises(GeometryError, match=f"smallest d that fits at d_head={D_HEAD} is "
                                            f"{curve[0].d}"):
        width_sweep(calculator, D_HEAD, d_max=curve[0].d - D_HEAD)


def test_tw_stats_sweep(tmp_path, calculator, curve):
    path = tmp_path / "calc.mlir"
    path.write_text(print_module(calculator))
    cmd = [sys.executable, "-m", "tw_tools.tw_stats", str(path), "--sweep-d", "--d-head",
           str(D_HEAD)]
    res = subprocess.run(cmd + ["--json"], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    rows = [json.loads(line) for line in res.stdout.splitlines()]
    assert [(r["d"], r["n_layers"]) for r in rows] == [(p.d, p.n_layers) for p in curve]
    res = subprocess.run(cmd + ["--d-max", "8"], capture_output=True, text=True)
    assert res.returncode == 1 and res.stderr.count("\n") == 1
    assert "above d_max=8" in res.stderr


def test_width_for_a_depth_is_the_narrowest_width_that_is_shallow_enough(calculator, curve):
    """Between the curve's points too: every narrower width (one d_head at a time) is deeper
    than the target."""
    from tw_lowering.sweep import width_for

    target = curve[0].n_layers - 1  # the smallest width is too deep
    if target < curve[-1].floor:
        pytest.skip("the curve starts at its floor")
    got = width_for(calculator, D_HEAD, max_layers=target, curve=curve)
    assert got.n_layers <= target
    assert got.d <= pick_width(curve, max_layers=target).d
    narrower = width_sweep(calculator, D_HEAD, widths=range(curve[0].d, got.d, D_HEAD))
    assert all(p.n_layers > target for p in narrower)
    assert width_for(calculator, D_HEAD, max_layers=curve[-1].floor - 1, curve=curve) is None


def test_tw_stats_picks_a_width_or_says_why_none(tmp_path, calculator, curve):
    path = tmp_path / "calc.mlir"
    path.write_text(print_module(calculator))
    cmd = [sys.executable, "-m", "tw_tools.tw_stats", str(path), "--sweep-d", "--d-head",
           str(D_HEAD)]
    res = subprocess.run(cmd + ["--max-layers", str(curve[-1].floor)], capture_output=True,
                         text=True)
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[-1].startswith("pick: d=")
    res = subprocess.run(cmd + ["--max-layers", str(curve[-1].floor - 1)], capture_output=True,
                         text=True)
    assert res.returncode == 1 and res.stderr.count("\n") == 1
    assert f"the critical-path floor {curve[-1].floor}" in res.stderr


@pytest.mark.parametrize("seed", [32, 35, 49])
def test_a_sweep_without_stand_ins_starts_where_the_graph_itself_fits(seed):
    """The default pipeline widens these graphs (tests/test_pressure.py), so the graph as
    written stands in for them at narrower widths; a sweep asked for the graph itself
    (`stand_ins=False`, as the RASP frontend's search for the fewest layers) starts at the
    narrowest width where the pipeline's graph fits, and there it is scheduled as itself."""
    from tw_lowering.machine import Machine
    from tw_lowering.sweep import Sweep
    from twdialect.random_graphs import random_graph

    module = random_graph(seed, n_ops=40, max_width=6, library=True)
    with_stand_ins = Sweep(module, "default")
    itself = Sweep(module, "default", stand_ins=False)
    d, d_alt = itself.smallest(2), with_stand_ins.smallest(2)
    assert d > d_alt
    assert itself.pressure.fits(Machine(d=d, d_head=2), alternatives=False)
    assert not itself.pressure.fits(Machine(d=d - 2, d_head=2), alternatives=False)
    assert itself.point(d, 2).note == ""
    assert with_stand_ins.point(d_alt, 2).note != ""


def test_a_sweep_without_stand_ins_takes_them_where_the_graph_fits_nowhere():
    from tw_lowering.sweep import Sweep
    from twdialect.random_graphs import random_graph

    module = random_graph(32, n_ops=40, max_width=6, library=True)
    expected = Sweep(module, "default").smallest(2)
    itself = Sweep(module, "default", stand_ins=False)
    real = itself.pressure.fits  # (the graph itself made to fit no width)
    itself.pressure.fits = lambda m, alternatives=True: alternatives and real(m, True)
    assert itself.smallest(2) == expected


@pytest.mark.parametrize("seed", [3, 32, 35, 49])
def test_searches_at_other_mlp_widths_only_skip_widths_that_do_not_fit(seed):
    """A sweep's search for the smallest width starts above the widths that another MLP width
    at least as large already failed (`Sweep._fails_below`); each answer is still what a
    fresh sweep finds, and one d_head narrower does not fit."""
    from tw_lowering.machine import Machine
    from tw_lowering.sweep import Sweep
    from twdialect.random_graphs import random_graph

    module = random_graph(seed, n_ops=40, max_width=6, library=True)
    shared = Sweep(module, "default", stand_ins=False)
    for hidden in (None, 64, 16, 8, 6, 4):
        fresh = Sweep(module, "default", stand_ins=False)
        try:
            want = fresh.smallest(2, hidden)
        except GeometryError:
            with pytest.raises(GeometryError):
                shared.smallest(2, hidden)
            continue
        assert shared.smallest(2, hidden) == want
        assert not shared.pressure.fits(Machine(d=want - 2, d_head=2, d_hidden=hidden),
                                        alternatives=False)
