"""Every op of the dialect has a rule in every analysis that applies to it.

Each analysis is a table of per-op rules (`OpRules` in `twdialect/interp.py`): the oracle,
value ranges, integrality, the library ops' decomposition costs and exact regions. The
lowering keeps a rule per writer op kind (`lowering/rules.py`, `RULES`) and a case per op in
its task graph (`lowering/tasks.py`, `CASES`). A new op class that one of them misses fails
here, naming the (analysis, op) pair, instead of failing on the first graph that uses it.
"""

from __future__ import annotations

import numpy as np
import pytest

from tw_lowering.rules import RULES
from tw_lowering.tasks import CASES, LoweringError, TaskGraph
from twdialect import dialect as d
from twdialect import ops as tw
from twdialect.contracts import DECOMPOSITION_COST, EXACT_REGION
from twdialect.dialect import LIBRARY_OPS, TW_OPS
from twdialect.interp import ORACLE, evaluate_values
from twdialect.random_graphs import sample_inputs
from twdialect.ranges import INTEGRALITY, RANGES, integer_components, value_ranges

# The graph holds the walk and an output defines no value: every other op defines one value,
# and each analysis of values has a rule for it.
VALUE_OPS = tuple(cls for cls in TW_OPS if cls not in (d.GraphOp, d.OutputOp))
VALUE_ANALYSES = {"oracle": ORACLE, "value ranges": RANGES, "integrality": INTEGRALITY}
LIBRARY_ANALYSES = {"decomposition cost": DECOMPOSITION_COST, "exact region": EXACT_REGION}


def _sources():
    x = tw.input("x", 2, (-1.0, 1.0))
    y = tw.input("y", 2, (-2.0, 2.0))
    s = tw.input("s", 1, (0.0, 3.0), integer=True)
    return x, y, s


# One small use of each op class: (x, y, s) -> a value made by that class.
SAMPLES = {
    d.InputOp: lambda x, y, s: x,
    d.OutputOp: lambda x, y, s: y,
    d.EmbeddingOp: lambda x, y, s: tw.embedding("tokens", [[0.0, 1.0], [1.0, 0.0], [2.0, 2.0]]),
    d.PosEncodingOp: lambda x, y, s: tw.pos_encoding(4, 16),
    d.PosTableOp: lambda x, y, s: tw.pos_table(np.eye(16)[:, :3]),
    d.LiteralOp: lambda x, y, s: tw.literal([1.0, -2.0]),
    d.LinearOp: lambda x, y, s: tw.linear(x, [[1.0, 2.0], [3.0, 4.0]], [0.5, 0.0]),
    d.ReluOp: lambda x, y, s: tw.relu(x),
    d.AddOp: lambda x, y, s: tw.add(x, y),
    d.ConcatOp: lambda x, y, s: tw.concat(x, s),
    d.AttnOp: lambda x, y, s: tw.attn(x, y, x, np.eye(2), np.eye(2), np.eye(2), np.eye(2)),
    d.MlpOp: lambda x, y, s: tw.mlp(x, [[1.0, -1.0], [0.5, 2.0]], [0.0, 1.0], [[1.0], [-1.0]]),
    d.SliceOp: lambda x, y, s: tw.slice(x, 1, 1),
    d.AfterOp: lambda x, y, s: tw.after(x, s),
    d.CompareOp: lambda x, y, s: tw.compare(x, 0.0),
    d.SelectOp: lambda x, y, s: tw.select(tw.compare(s, 1.5), x, y),
    d.ClampOp: lambda x, y, s: tw.clamp(x, -0.5, 0.5),
    d.PiecewiseLinearOp: lambda x, y, s: tw.piecewise_linear(s, [0.0, 1.0, 3.0], [0.0, 2.0, 1.0]),
    d.PiecewiseLinear2dOp: lambda x, y, s: tw.piecewise_linear_2d(
        s, tw.slice(x, 0, 1), [0.0, 3.0], [-1.0, 1.0], [[0.0, 1.0], [2.0, 3.0]]),
}


def sample_graph(cls) -> d.GraphOp:
    """A graph whose output is made by an op of class `cls`."""
    with tw.Graph("main") as g:
        tw.output("out", SAMPLES[cls](*_sources()))
    return g.op


def _name(cls) -> str:
    return cls.name


def test_every_op_class_has_a_sample():
    missing = [cls.name for cls in TW_OPS if cls is not d.GraphOp and cls not in SAMPLES]
    assert not missing, f"(tests/test_op_coverage.py SAMPLES, op) missing for {missing}"


@pytest.mark.parametrize("cls", VALUE_OPS, ids=_name)
@pytest.mark.parametrize("analysis", VALUE_ANALYSES)
def test_value_analyses_have_a_rule(analysis, cls):
    assert VALUE_ANALYSES[analysis].covers(cls), f"no rule for ({analysis}, {cls.name})"


@pytest.mark.parametrize("cls", VALUE_OPS, ids=_name)
def test_value_analyses_run_on_a_sample(cls):
    """The rules do not only exist: each runs on a graph using the op."""
    g = sample_graph(cls)
    assert any(type(op) is cls for op in g.block.ops), f"SAMPLES[{cls.name}] makes no {cls.name}"
    inputs = sample_inputs(g, 3)
    values = evaluate_values(g, inputs)
    boxes = value_ranges(g)
    integers = integer_components(g)
    for op in g.block.ops:
        if type(op) is cls:
            v = op.results[0]
            lo, hi = boxes[v]
            assert np.all(lo <= values[v]) and np.all(values[v] <= hi), f"(value ranges, {cls.name})"
            known = integers[v]
            assert np.all(values[v][:, known] == np.round(values[v][:, known])), \
                f"(integrality, {cls.name})"


@pytest.mark.parametrize("cls", TW_OPS, ids=_name)
@pytest.mark.parametrize("analysis", LIBRARY_ANALYSES)
def test_contracts_cover_exactly_the_library_ops(analysis, cls):
    covered = LIBRARY_ANALYSES[analysis].covers(cls)
    if cls in LIBRARY_OPS:
        assert covered, f"no rule for ({analysis}, {cls.name})"
    else:
        assert not covered, f"({analysis}, {cls.name}): a contract for an op decompose keeps"


@pytest.mark.parametrize("cls", [c for c in VALUE_OPS + (d.OutputOp,) if c not in LIBRARY_OPS],
                         ids=_name)
def test_lowering_knows_each_primitive_view_and_source(cls):
    """`lowering/tasks.py` builds the task graph of a graph using the op, and
    `lowering/rules.py` has a cost and writer rule for every task it makes."""
    try:
        tasks = TaskGraph(sample_graph(cls)).tasks
    except LoweringError as e:
        pytest.fail(f"(lowering/tasks.py, {cls.name}): {e}")
    for t in tasks:
        assert type(t.op) in RULES, f"(lowering/rules.py, {t.op.name}): no cost/writer/error rule"


def test_lowering_cases_are_exactly_the_ops_it_accepts():
    """`lowering/tasks.py` CASES has one case per primitive, view, source and sink, and none
    for a library op (those reach the lowering only through `decompose`)."""
    accepted = {c for c in TW_OPS if c is not d.GraphOp and c not in LIBRARY_OPS}
    missing = sorted(c.name for c in accepted - set(CASES))
    extra = sorted(c.name for c in set(CASES) - accepted)
    assert not missing, f"(lowering/tasks.py CASES, op) missing for {missing}"
    assert not extra, f"lowering/tasks.py CASES has a case for ops it must refuse: {extra}"


@pytest.mark.parametrize("cls", LIBRARY_OPS, ids=_name)
def test_lowering_refuses_library_ops_by_name(cls):
    """Library ops reach the lowering only through `decompose`: the task graph names them."""
    with pytest.raises(LoweringError, match="decompose"):
        TaskGraph(sample_graph(cls))


@pytest.mark.parametrize("cls", VALUE_OPS, ids=_name)
def test_literal_folding_is_the_oracle_on_position_local_ops(cls):
    """`canonicalize` folds an op of literals by the oracle's rule, for the position-local
    primitives and views only: attention mixes positions, sources read the run."""
    from tw_passes import run_pipeline
    from twdialect.canonicalization import FOLDABLE_OPS
    from twdialect.interp import evaluate

    if cls in FOLDABLE_OPS:
        assert cls not in (d.AttnOp, d.PosEncodingOp) + d.SOURCE_OPS + LIBRARY_OPS
    if cls not in d.PRIMITIVE_OPS + d.VIEW_OPS or cls is d.LiteralOp:
        return
    with tw.Graph("main") as g:
        a, b = tw.literal([1.5, -2.0]), tw.literal([0.25, 3.0])
        tw.output("out", SAMPLES[cls](a, b, tw.literal([2.0])))
    before = evaluate(g.module, {}, n_positions=3)["out"]
    run_pipeline(g.module, "canonicalize")
    kinds = {type(op) for op in g.op.block.ops} - {d.OutputOp}
    assert kinds == ({d.LiteralOp} if cls in FOLDABLE_OPS else {d.LiteralOp, cls}), cls.name
    assert np.array_equal(evaluate(g.module, {}, n_positions=3)["out"],
                          before.astype(np.float32).astype(np.float64))
