"""Residual pressure and the minimum width (`lowering/pressure.py`, `lowering.schedule`).

The minimum width is the smallest d whose free columns hold the peak of the best order found;
these tests hold it to what it claims: exact on small graphs (against every order), never
below the proven lower bound, met (that width compiles, exactly, and one column less is
refused naming the same cut), and monotone (every wider width fits)."""

import itertools

import numpy as np
import pytest

import tw_lowering as lowering
from tw_lowering import prepare
from tw_lowering.machine import GeometryError, Machine
from tw_lowering.pressure import (
    LiveModel,
    OrderChoice,
    exact_order,
    lower_bound,
    pressure_of,
    reuse_view,
    walk,
)
from tw_lowering.fit import Pressure
from tw_lowering.schedule import schedule, smallest_fitting_d
from tw_lowering.tasks import TaskGraph
from twdialect import evaluate
from twdialect import ops as tw
from twdialect.interp import find_graph
from twdialect.random_graphs import random_graph, sample_inputs

PRIMITIVE = ("linear", "relu", "add", "concat", "literal", "attn", "mlp", "slice")


def _task_graph(module, pipeline=None) -> TaskGraph:
    return TaskGraph(find_graph(prepare(module, pipeline)))


def _all_orders_peak(model: LiveModel, machine: Machine) -> int:
    """The least peak over every topological order, by brute force."""
    preds = {t: set(model.predecessors(t)) for t in model.tasks}
    best = None
    for perm in itertools.permutations(model.tasks):
        seen: set[int] = set()
        ok = True
        for t in perm:
            if not preds[t] <= seen:
                ok = False
                break
            seen.add(t)
        if ok:
            peak = pressure_of(model, walk(model, list(perm)), machine).peak
            best = peak if best is None else min(best, peak)
    return best


@pytest.mark.parametrize("seed", range(12))
def test_exact_order_is_the_least_peak_of_all_orders_and_bounds_hold(seed):
    module = random_graph(seed, n_ops=7, max_width=5, library=False, kinds=PRIMITIVE)
    tg = _task_graph(module)
    model = LiveModel(tg)
    if len(model.tasks) > 7:
        pytest.skip("too many tasks to enumerate")
    machine = Machine(d=64, d_head=2, d_hidden=64)
    brute = _all_orders_peak(model, machine)
    exact = pressure_of(model, walk(model, exact_order(model, machine)), machine).peak
    assert exact == brute
    best = OrderChoice(model).best(machine)
    assert best.peak == brute  # the choice runs the exact search on graphs this small
    bound = lower_bound(model, machine, model.tasks)
    assert bound.columns <= brute


@pytest.mark.parametrize("seed", range(12))
def test_one_choice_is_exact_at_every_machine_of_a_width_search(seed):
    """The exact search shares its machine-independent steps across machines, and machines
    with one `reuse_view` share its answer: at narrow machines (few heads, few neurons: reuse
    binds) one OrderChoice asked in turn still gives every machine its least peak."""
    module = random_graph(seed, n_ops=7, max_width=5, library=False, kinds=PRIMITIVE)
    model = LiveModel(_task_graph(module))
    if len(model.tasks) > 7:
        pytest.skip("too many tasks to enumerate")
    choice = OrderChoice(model)
    machines = [Machine(d=d, d_head=dh, d_hidden=h) for dh in (1, 2) for d in (4, 6, 10)
                for h in (1, 2, 3, 5, 8, None)]
    views = {}
    for machine in machines:
        brute = _all_orders_peak(model, machine)
        assert choice.best(machine).peak == brute, machine
        views.setdefault(reuse_view(model, machine), set()).add(brute)
    assert all(len(peaks) == 1 for peaks in views.values())


def _minimum(module, d_head=2, d_hidden=None, pipeline=None):
    tg = _task_graph(module, pipeline)
    at = (lambda d: Machine(d=d, d_head=d_head, d_hidden=d_hidden))
    return tg, smallest_fitting_d(tg, at(8 * d_head), at=at)


@pytest.mark.parametrize("seed", range(16))
def test_random_graphs_fit_from_the_minimum_on_and_match_the_oracle_there(seed):
    module = random_graph(seed, n_ops=40, max_width=6, library=False)
    tg, d_min = _minimum(module, d_hidden=64)
    fits = []
    for d in range(max(4, d_min - 6), d_min + 14, 2):
        try:
            schedule(tg, Machine(d=d, d_head=2, d_hidden=64), suggest=False)
            fits.append(True)
        except GeometryError:
            fits.append(False)
            assert d < d_min
    assert fits == sorted(fits)  # monotone: once a width fits, every wider one does
    ct = lowering.compile(module, d=d_min, d_head=2, d_hidden=64)
    xs = sample_inputs(module, 6, seed)
    got, want = ct.run(xs), evaluate(module, xs)
    for k in want:
        scale = max(1.0, float(np.abs(want[k]).max()))
        np.testing.assert_allclose(got[k], want[k], atol=1e-4 * scale, rtol=0, err_msg=k)


def _join(n_chains=6, width=5, join_reads_x=False):
    """Parallel chains from x, each widening to `width` and narrowing to 1, joined by one
    linear (which may read x too): the chains' results are all live at the join in every
    order."""
    rng = np.random.default_rng(0)
    with tw.Graph("main") as g:
        x = tw.input("x", 2, value_range=(-1.0, 1.0))
        outs = []
        for _ in range(n_chains):
            h = tw.mlp(x, rng.uniform(-1, 1, (2, 4)), None, rng.uniform(-1, 1, (4, width)))
            outs.append(tw.mlp(h, rng.uniform(-1, 1, (width, 4)), None,
                               rng.uniform(-1, 1, (4, 1))))
        if join_reads_x:
            outs.append(x)
        tw.output("y", tw.linear(tw.concat(*outs), np.ones((len(outs) + join_reads_x, 1))))
    return g.module


def test_the_reported_minimum_is_met_and_one_column_less_names_the_same_cut():
    module = _join()
    tg, d_min = _minimum(module, d_head=1, d_hidden=64)
    ct = lowering.compile(module, d=d_min, d_head=1, d_hidden=64, pipeline="none")
    xs = sample_inputs(module, 4, 0)
    np.testing.assert_allclose(ct.run(xs)["y"], evaluate(module, xs)["y"], atol=1e-5)
    messages = []
    for d in (d_min - 1, d_min - 2):
        with pytest.raises(GeometryError) as e:
            lowering.compile(module, d=d, d_head=1, d_hidden=64, pipeline="none")
        messages.append(str(e.value))
    peak = d_min - Machine.RESERVED
    for m in messages:
        assert f"the best order found needs {peak} at once" in m
        assert f"smallest d that fits (d_head=1, d_hidden=64): {d_min}" in m
    cut = [m.split("needs", 1)[1].split(";")[0] for m in messages]
    assert cut[0] == cut[1]  # the same live set binds one and two columns short


def test_a_refusal_says_so_when_the_minimum_is_proven():
    """At the join every chain's result and x are live whatever the order: the bound meets
    the peak, and the refusal says no order needs fewer. (Where the chains' source dies at the
    last chain's first step instead, the other chains' values are live beside it in every
    order too, but the bound does not see that disjunction: it says 8 where 9 is exact.)"""
    module = _join(n_chains=8, width=1, join_reads_x=True)
    tg, d_min = _minimum(module, d_head=1, d_hidden=64)
    with pytest.raises(GeometryError, match=r"no order needs fewer \("):
        lowering.compile(module, d=d_min - 1, d_head=1, d_hidden=64, pipeline="none")


def test_the_best_order_never_grows_with_the_width():
    """More heads and neurons only allow more reuse: the peak is non-increasing in d."""
    module = random_graph(3, n_ops=60, max_width=8, library=False)
    p = Pressure(_task_graph(module))
    peaks = [p.choice.best(Machine(d=d, d_head=2, d_hidden=2 * d)).peak
             for d in range(8, 80, 2)]
    assert all(a >= b for a, b in zip(peaks, peaks[1:]))


def test_the_order_gate_never_stalls_at_the_minimum_whatever_the_spread():
    from tw_lowering.schedule import Scheduler, Setup

    for seed in range(6):
        module = random_graph(100 + seed, n_ops=50, max_width=6, library=False)
        tg, d_min = _minimum(module, d_hidden=64)
        machine = Machine(d=d_min, d_head=2, d_hidden=64)
        p = Pressure(tg)
        best = p.choice.best(machine)
        setup = Setup(tg, machine, p.model)
        for spread in (0.0, 0.5, 4.0, 1000.0):
            sched = Scheduler(tg, machine, gate=best, spread=spread, setup=setup).run()
            assert max(sched.occupancy) <= d_min


def test_a_wide_loop_fits_far_below_its_greedy_width_and_stays_exact():
    """Twelve iterations with a 32-wide middle step: the minimum is about one iteration's
    worth of columns, where the plain greedy scheduler needed room for many at once."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from test_sequential_scope import bulge_loop

    module = bulge_loop(12, 32)
    tg, d_min = _minimum(module, d_head=16)
    assert d_min <= 64
    ct = lowering.compile(module, d=d_min, d_head=16)
    xs = sample_inputs(module, 3, 0)
    np.testing.assert_allclose(ct.run(xs)["y"], evaluate(module, xs)["y"], atol=1e-5)


@pytest.mark.parametrize("seed", [32, 35, 49, 53, 62])
def test_the_default_pipeline_never_turns_a_graph_that_fits_into_a_refused_one(seed):
    """These graphs' pipelines widen what is live at once (measured: their smallest d grows
    by 2-8 columns); where the pipeline's graph does not fit, the graph as written stands in,
    so the smallest width that fits is never above the unoptimised one's."""
    from tw_lowering import pressure_of

    module = random_graph(seed, n_ops=40, max_width=6, library=True)
    at = (lambda d: Machine(d=d, d_head=2))
    plain = _task_graph(module)
    tuned = _task_graph(module, "default")
    d_plain = smallest_fitting_d(plain, at(8), at=at)
    d_tuned = smallest_fitting_d(tuned, at(8), at=at,
                                 pressure=pressure_of(module, tuned, ("default",)))
    assert d_tuned <= d_plain
    ct = lowering.compile(module, d=d_plain, d_head=2, pipeline="default")
    xs = sample_inputs(module, 4, seed)
    # (against the decomposed graph: a library op keeps its ideal meaning only to its contract)
    got, want = ct.run(xs), evaluate(prepare(module, None), xs)
    for k in want:
        scale = max(1.0, float(np.abs(want[k]).max()))
        np.testing.assert_allclose(got[k], want[k], atol=1e-4 * scale, rtol=0, err_msg=k)
