"""The scheduler's rules one at a time, each on a graph of a few ops.

Slots: 2L is layer L's attention sublayer, 2L+1 its MLP sublayer. The expected slots are
written out as numbers, so a test fails if the rule it names changes."""

import numpy as np
import pytest

from tw_lowering.machine import GeometryError, Machine
from tw_lowering.rules import RULES, Cost, task_cost
from tw_lowering.schedule import Scheduler, schedule
from tw_lowering.tasks import TaskGraph
from twdialect import ops as tw
from twdialect.analysis import (
    ATTN,
    EITHER,
    MLP,
    PLACEMENT,
    WRITER_OPS,
    critical_path,
    latest_slot,
    next_slot,
)
from twdialect.dialect import AddOp, AttnOp, LinearOp, MlpOp, ReluOp

EYE2 = np.eye(2)


class Placed:
    """A schedule of a graph built by `build` (which returns its values by name)."""

    def __init__(self, build, d=32, d_head=2, d_hidden=64, greedy_only=False):
        with tw.Graph("main") as g:
            self.values = build()
        self.tg = TaskGraph(g.op)
        machine = Machine(d, d_head, d_hidden)
        # greedy_only: the plain greedy scheduler alone (its own rules, no order gate)
        self.sched = Scheduler(self.tg, machine).run() if greedy_only else \
            schedule(self.tg, machine)
        self._task = {t.op: t for t in self.tg.tasks}

    def slot(self, name: str) -> int:
        return self.sched.slot[self._task[self.values[name].owner].tid]

    def group(self, name: str) -> int:
        return int(self.tg.refs[self.values[name]].group[0])

    def cols(self, name: str) -> list[int]:
        return self.sched.cols[self.group(name)].tolist()

    def cost(self, name: str) -> Cost:
        return task_cost(self.tg, self._task[self.values[name].owner], self.sched.machine)


def _input(name="x", width=2, bound=1.0):
    return tw.input(name, width, value_range=(-bound, bound))


def _attn(x):
    return tw.attn(x, x, x, EYE2, EYE2, EYE2, EYE2)


# --------------------------------------------------------------------------------------
# Placement: which sublayer an op kind runs in
# --------------------------------------------------------------------------------------


def test_every_writer_op_has_one_rule_and_a_working_placement():
    assert set(RULES) == set(WRITER_OPS)
    assert {op: PLACEMENT[op] for op in WRITER_OPS} == {
        AttnOp: ATTN, MlpOp: MLP, ReluOp: MLP, LinearOp: EITHER, AddOp: EITHER}


def test_slot_parity_even_is_attention_odd_is_mlp():
    assert [next_slot(-1, k) for k in (ATTN, MLP, EITHER)] == [0, 1, 0]
    assert [next_slot(0, k) for k in (ATTN, MLP, EITHER)] == [2, 1, 1]
    assert [latest_slot(2, k) for k in (ATTN, MLP, EITHER)] == [0, 1, 1]
    assert [latest_slot(3, k) for k in (ATTN, MLP, EITHER)] == [2, 1, 2]


def _one_op(make, reader=lambda y: y, **geometry) -> Placed:
    """x -> make -> reader -> output; the op `make` builds is named "y"."""
    def build():
        y = make(_input())
        tw.output("out", reader(y))
        return {"y": y}
    return Placed(build, **geometry)


def test_an_attn_op_runs_in_an_attention_slot():
    p = _one_op(_attn)
    assert p.slot("y") == 0
    assert p.sched.attn_heads == [1] and p.sched.neurons == [0]


@pytest.mark.parametrize("make", [tw.relu, lambda x: tw.mlp(x, EYE2, np.zeros(2), EYE2)],
                         ids=["relu", "mlp"])
def test_mlp_and_relu_run_in_an_mlp_slot(make):
    p = _one_op(make)
    assert p.slot("y") == 1
    assert p.sched.attn_heads == [0] and p.sched.neurons == [2]


EITHER_OPS = pytest.mark.parametrize(
    "make", [lambda x: tw.linear(x, EYE2), lambda x: tw.add(x, _input("z"))],
    ids=["linear", "add"])


@EITHER_OPS
def test_linear_and_add_without_slack_run_as_head_work(make):
    """A relu reads it in the MLP of layer 0, so it must run in attention slot 0."""
    p = _one_op(make, tw.relu)
    assert p.slot("y") == 0
    assert p.sched.attn_heads == [1]  # 2 value dims, d_head=2: one head


@EITHER_OPS
def test_linear_and_add_with_slack_run_in_the_mlp_as_a_bypass_pair(make):
    """An attn reads it in layer 1: the MLP of layer 0 is in time, and cheaper."""
    p = _one_op(make, _attn)
    assert p.slot("y") == 1
    assert p.sched.neurons == [4, 0]  # relu(z) - relu(-z): two neurons per value dim


# --------------------------------------------------------------------------------------
# Readiness
# --------------------------------------------------------------------------------------


def test_a_value_is_readable_one_slot_after_its_writer():
    def build():
        a = _attn(_input())
        m = tw.relu(a)  # the MLP of the same layer
        b = _attn(m)  # the next layer's attention
        r = tw.relu(tw.relu(b))  # MLP after MLP: a layer apart
        tw.output("r", r)
        return {"a": a, "m": m, "b": b, "r": r}

    p = Placed(build)
    assert [p.slot(k) for k in "ambr"] == [0, 1, 2, 5]
    assert p.sched.n_layers == 3


def test_dead_code_is_never_placed():
    def build():
        x = _input()
        y = tw.relu(x)
        dead = tw.relu(y)  # read by nothing
        tw.output("y", y)
        return {"y": y, "dead": dead}

    p = Placed(build)
    assert p.slot("y") == 1 and p.slot("dead") == -1
    assert p.sched.cols[p.group("dead")] is None


def test_dead_code_sets_no_deadline():
    """Slack counts back from the outputs' floor: a dead tail must not let `a` slip into the
    MLP (where relu `b`, reading it, would have to wait a layer)."""
    def build():
        a = tw.linear(_input(), EYE2)
        b = tw.relu(a)
        tw.linear(tw.relu(tw.linear(b, EYE2)), EYE2)  # read by nothing
        tw.output("b", b)
        return {"a": a, "b": b}

    p = Placed(build)
    assert (p.slot("a"), p.slot("b")) == (0, 1)
    assert p.sched.n_layers == p.sched.floor == 1


def test_floor_equals_layers_on_a_chain():
    def build():
        v = _input()
        for _ in range(3):
            v = tw.relu(_attn(v))
        tw.output("v", v)
        return {"v": v}

    p = Placed(build)
    assert p.sched.floor == critical_path(p.tg.graph).n_layers == 3
    assert p.sched.n_layers == 3


# --------------------------------------------------------------------------------------
# Free adds
# --------------------------------------------------------------------------------------


def test_an_accumulating_add_costs_nothing_and_shares_its_addends_columns():
    def build():
        x = _input()
        a, b = tw.relu(x), tw.mlp(x, EYE2, np.zeros(2), EYE2)  # single-use writer results
        s = tw.add(a, b)
        tw.output("s", s)
        return {"a": a, "b": b, "s": s}

    p = Placed(build)
    assert p.group("s") == p.group("a") == p.group("b")
    assert len(p.tg.tasks) == 2  # no task for the add
    assert p.sched.n_layers == 1 and p.sched.neurons == [4]


def test_an_add_into_a_dying_addend_copies_only_the_other_addend():
    def build():
        x = _input()
        a = tw.relu(x)  # single use: the add writes into its columns
        s = tw.add(a, x)  # x is a source, so the add is a real task
        tw.output("s", s)
        return {"a": a, "s": s}

    p = Placed(build)
    assert p.group("s") == p.group("a")  # no new columns
    assert p.cost("s") == Cost(dims=2, neurons=4)  # copies x (2 components), not a
    assert p.slot("a") == 1 and p.slot("s") in (0, 1)  # the copy need not wait for a


# --------------------------------------------------------------------------------------
# Columns
# --------------------------------------------------------------------------------------


def _relu_chain(bound):
    """x -> mlp (scaled to [-1, 1]) -> relu -> relu -> relu: each value dies once read."""
    def build():
        x = _input(bound=bound)
        r1 = tw.mlp(x, EYE2 / bound, np.zeros(2), EYE2)
        r2 = tw.relu(r1)
        r3 = tw.relu(r2)
        r4 = tw.relu(r3)
        tw.output("y", r4)
        return {"x": x, "r1": r1, "r2": r2, "r3": r3, "r4": r4}
    return build


def test_dead_columns_are_reused_with_a_cancel_in_the_refilling_sublayer():
    p = Placed(_relu_chain(1.0), d=8)  # 6 free columns: room for three 2-wide values
    assert [p.cols(k) for k in ("x", "r1", "r2")] == [[2, 3], [4, 5], [6, 7]]
    assert p.slot("r3") == 5 and p.cols("r3") == p.cols("x")  # x died in slot 1
    assert (5, p.group("x")) in p.sched.cancels


def test_a_loud_dead_value_is_not_refilled_in_the_sublayer_that_cancels_it():
    """|x| up to 1000 next to values within 1: the refill would round the new value at
    ulp(1000), so r3 takes quiet r1's columns instead of x's."""
    p = Placed(_relu_chain(1000.0), d=8)
    assert p.cols("r3") != p.cols("x") and p.cols("r3") == p.cols("r1")
    assert all(g != p.group("x") for _, g in p.sched.cancels)


def _wide_relu():
    x, y = _input("x", 4), _input("y", 4)
    r = tw.relu(tw.concat(x, y))  # 8 wide; x and y die as it reads them
    tw.output("r", r)
    return {"r": r}


def _wide_relu_kept():
    x, y = _input("x", 4), _input("y", 4)
    r = tw.relu(tw.concat(x, y))  # 8 wide while x and y (8) stay live for o
    o = tw.linear(tw.concat(r, x, y), np.ones((16, 1)))
    tw.output("o", o)
    return {"r": r, "o": o}


def test_nothing_is_cancelled_once_nothing_is_left_to_place():
    """Under pressure, dead groups are cancelled ahead with a sublayer's spare heads, for the
    writers still to come; after the last task none will come, so the columns stay as they
    are (x, dead after the head reads it, cost two heads of cancels here)."""
    def build():
        x = _input("x", 3)
        a = tw.attn(x, x, x, np.ones((3, 1)), np.ones((3, 1)), np.ones((3, 1)), [[1.0]])
        tw.output("a", a)
        return {"x": x, "a": a}
    p = Placed(build, d=6, d_head=1, d_hidden=8)
    assert p.slot("a") == 0 and p.sched.cancels == []
    assert p.sched.attn_heads == [1]


def test_a_task_may_refill_the_columns_of_the_operands_it_reads_last():
    """x and y die as the relu reads them: a cancel in its own sublayer zeroes their columns
    while it fills them, so 8 free columns hold the whole graph."""
    p = Placed(_wide_relu, d=10)
    assert p.slot("r") == 1 and sorted(p.cols("r")) == list(range(2, 10))


def test_a_residual_stall_names_the_binding_resource_and_the_smallest_d():
    """x, y and r are live together at the relu in every order: 16 columns, the minimum."""
    with pytest.raises(GeometryError, match=r"residual width binds at d=16: 14 free columns, "
                                            r"and the best order found needs 16 at once .*"
                                            r"no order needs fewer .*"
                                            r"smallest d that fits .*: 18$"):
        Placed(_wide_relu_kept, d=16)
    assert Placed(_wide_relu_kept, d=18).slot("o") in (2, 3)


def test_new_work_may_not_take_the_last_columns_until_a_layer_stalls():
    """In the plain greedy scheduler, the relu retires no computed operand (it starts new
    work): it may not leave fewer than min(reserve, a quarter) of the columns free, until the
    schedule has been stuck for a whole layer."""
    assert Placed(_wide_relu_kept, d=18, greedy_only=True).slot("r") == 3  # 0 of 16 free
    assert Placed(_wide_relu_kept, d=26, greedy_only=True).slot("r") == 1  # 8 of 24 free


# --------------------------------------------------------------------------------------
# The per-sublayer budget
# --------------------------------------------------------------------------------------


def test_head_work_of_a_sublayer_shares_heads_d_head_dims_each():
    def build():
        x, y = _input("x", 1), _input("y", 1)
        a, b = tw.linear(x, [[1.0]]), tw.linear(y, [[2.0]])  # one value dim each
        tw.output("r", tw.relu(tw.concat(a, b)))
        return {"a": a, "b": b}

    p = Placed(build, d=8, d_head=2)
    assert p.slot("a") == p.slot("b") == 0
    assert p.sched.attn_heads == [1]  # 1 + 1 dims pack into one head of 2


def test_work_beyond_the_mlp_budget_waits_for_a_later_layer():
    def build():
        x = _input()
        a, b = tw.relu(x), tw.relu(tw.linear(x, -EYE2))
        tw.output("a", a)
        tw.output("b", b)
        return {"a": a, "b": b}

    p = Placed(build, d_hidden=2)  # one 2-neuron relu per MLP sublayer
    assert sorted((p.slot("a"), p.slot("b"))) == [1, 3]
    assert p.sched.neurons == [2, 2] and p.sched.floor == 1


def test_an_op_wider_than_the_mlp_is_refused_naming_d_hidden():
    def build():
        y = tw.mlp(_input(), np.ones((2, 8)), np.zeros(8), np.ones((8, 2)))
        tw.output("y", y)
        return {"y": y}

    with pytest.raises(GeometryError, match="needs 8 MLP neurons, d_hidden=4"):
        Placed(build, d_hidden=4)


# --------------------------------------------------------------------------------------
# The order gate (pressure-aware admission)
# --------------------------------------------------------------------------------------


def _two_chains():
    """Two independent chains from x, each 2 -> 4 -> 1, joined at the end."""
    x = _input("x", 2)
    outs, vals = [], {}
    for i in range(2):
        a = tw.mlp(x, np.ones((2, 4)), None, np.eye(4))
        b = tw.mlp(a, np.ones((4, 2)), None, np.ones((2, 1)))
        vals[f"a{i}"], vals[f"b{i}"] = a, b
        outs.append(b)
    tw.output("y", tw.linear(tw.concat(*outs), np.ones((2, 1))))
    return vals


def _gate(build, d):
    from tw_lowering.pressure import LiveModel, OrderChoice
    from tw_lowering.schedule import OrderGate

    with tw.Graph("main") as g:
        values = build()
    tg = TaskGraph(g.op)
    model = LiveModel(tg)
    machine = Machine(d, 1, 64)
    best = OrderChoice(model).best(machine)
    task = {t.op: t for t in tg.tasks}
    return OrderGate(best, model, machine.free_columns), best, tg, \
        {k: task[v.owner] for k, v in values.items()}


def test_the_gate_admits_the_orders_next_task_and_work_ahead_only_within_the_budget():
    """x (2) stays live while the first chain runs; its peak is x + a (4) + b's new column:
    7 at least. With 7 free columns, the second chain's first step (4 new columns) may not run
    ahead of the first chain; with 11 it may."""
    gate, best, tg, t = _gate(_two_chains, d=9)  # 7 free columns
    assert best.peak <= 7
    first = tg.tasks[best.order[0]]
    assert gate.front_task() == first.tid and gate.admits(first, 4, [])
    other = t["a1"] if first is t["a0"] else t["a0"]
    assert not gate.admits(other, 4, [])
    wide, *_ = _gate(_two_chains, d=13)  # 11 free columns
    assert wide.admits(other, 4, [])


def test_placing_ahead_of_the_order_raises_the_level_until_the_orders_own_write():
    gate, best, tg, t = _gate(_two_chains, d=13)
    first = tg.tasks[best.order[0]]
    other = t["a1"] if first is t["a0"] else t["a0"]
    k = gate.pos[other.tid]
    before = gate.level.copy()
    gate.placed(other, 4)
    assert (gate.level[:k] == before[:k] + 4).all()  # counted until its own turn
    assert gate.level[k] < 0  # that step has run
    assert (gate.level[k + 1:] == before[k + 1:]).all()


def test_virtual_deadlines_grow_along_the_order():
    gate, best, tg, t = _gate(_two_chains, d=13)
    latest = [0] * len(tg.tasks)
    dl = gate.deadlines(latest, span=10.0)
    assert [dl[tid] for tid in best.order] == sorted(dl[tid] for tid in best.order)
    assert gate.deadlines(latest, 0.0) == [0.0] * len(tg.tasks)
