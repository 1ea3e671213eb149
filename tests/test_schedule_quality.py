"""Scheduler quality: dead code costs nothing, feasibility is monotone in d, and the layers
stay near the critical-path floor where the residual does not bind."""

import numpy as np
import pytest

from tw_lowering import GeometryError, compile
from tw_lowering.machine import Machine
from tw_lowering.schedule import schedule, smallest_fitting_d
from tw_lowering.tasks import TaskGraph
from twdialect import ops as tw
from twdialect.interp import find_graph
from twdialect.random_graphs import random_graph


def _with_dead_code():
    with tw.Graph("main") as g:
        x = tw.input("x", 2, value_range=(-1.0, 1.0))
        a = tw.linear(x, np.eye(2))
        b = tw.relu(a)
        dead = tw.relu(tw.linear(b, np.eye(2)))
        tw.linear(dead, np.eye(2))  # read by nothing
        tw.output("y", b)
    return g.module


def test_dead_code_gives_no_false_slack():
    """Deadlines count back from the outputs: the dead tail must not let `a` slip a layer."""
    module = _with_dead_code()
    ct = compile(module, d=16, d_head=2, d_hidden=64)
    assert ct.stats.n_layers == ct.stats.floor == 1


@pytest.mark.parametrize("seed", range(0, 120, 3))
def test_no_pipeline_equals_dce_first(seed):
    module = random_graph(seed, 25, library=False)
    a = compile(module, d=512, d_head=8, d_hidden=1024, pipeline="none")
    b = compile(module, d=512, d_head=8, d_hidden=1024, pipeline="dce")
    assert a.stats.n_layers == b.stats.n_layers
    assert a.stats.n_layers == a.stats.floor


def _fits(tg, d):
    try:
        schedule(tg, Machine(d, 4, 64), suggest=False)
        return True
    except GeometryError:
        return False


# Seeds 24, 26, 29, 45, 55 used to fit at some d and stall at a wider one.
@pytest.mark.parametrize("seed", [24, 26, 29, 45, 55, 3, 7])
def test_feasibility_is_monotone_in_d(seed):
    tg = TaskGraph(find_graph(random_graph(seed, 40, library=False, max_width=6)))
    fits = [_fits(tg, d) for d in range(8, 132, 4)]
    assert True in fits
    first = fits.index(True)
    assert all(fits[first:]), [8 + 4 * i for i, f in enumerate(fits) if i > first and not f]


def test_a_stall_reports_the_smallest_fitting_d():
    tg = TaskGraph(find_graph(random_graph(24, 40, library=False, max_width=6)))
    fit = smallest_fitting_d(tg, Machine(8, 4, 64))
    assert fit is not None and _fits(tg, fit)
    with pytest.raises(GeometryError, match=f"smallest d that fits .*: {fit}"):
        schedule(tg, Machine(fit - 4, 4, 64))
