"""The reference interpreter: the oracle that defines what every tw op means.

Values are float64 numpy arrays shaped (n_positions, width). Library ops are evaluated by
their *ideal* meaning (select picks exactly, compare is a hard step); `decompose` lowers them
to primitives under the contracts in `twdialect/contracts.py`. Inputs are checked against the
graph's declared promises by `twdialect.inputs.check_inputs`, the same check the compiled model
makes, so the two accept and refuse the same inputs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue

from twdialect.dense import to_numpy
from twdialect.dialect import (
    AddOp,
    AttnOp,
    ClampOp,
    CompareOp,
    ConcatOp,
    EmbeddingOp,
    GraphOp,
    InputOp,
    LinearOp,
    LiteralOp,
    MlpOp,
    OutputOp,
    PiecewiseLinear2dOp,
    PiecewiseLinearOp,
    PosEncodingOp,
    ReluOp,
    SelectOp,
    SliceOp,
    AfterOp,
    describe,
    width_of,
)
from twdialect.inputs import (  # noqa: F401 (EvaluationError is re-exported)
    CheckedInputs,
    EvaluationError,
    InputContract,
    check_feedback,
    check_inputs,
    check_steps,
)


def find_graph(module: ModuleOp | GraphOp, graph: str = "main") -> GraphOp:
    if isinstance(module, GraphOp):
        return module
    if not isinstance(graph, str):
        raise EvaluationError(f"graph must be the name of a tw.graph (a str), got "
                              f"{type(graph).__name__}")
    if not isinstance(module, ModuleOp):
        raise EvaluationError(f"module must be a builtin ModuleOp or a tw.graph, got "
                              f"{type(module).__name__}")
    graphs = [op for op in module.body.block.ops if isinstance(op, GraphOp)]
    for g in graphs:
        if g.sym_name.data == graph:
            return g
    if len(graphs) == 1 and graph == "main":
        return graphs[0]
    names = ", ".join("@" + g.sym_name.data for g in graphs) or "none"
    raise EvaluationError(f"no graph @{graph} in the module (graphs: {names})")


def position_features(n: int, width: int) -> np.ndarray:
    """The `tw.pos_encoding` table for positions 0..n-1: [i, i*i, sin/cos pairs]."""
    i = np.arange(n, dtype=np.float64)
    cols = [i]
    if width >= 2:
        cols.append(i * i)
    n_trig = width - 2
    for k in range(max(0, n_trig)):
        pair = k // 2
        freq = 1.0 / (10000.0 ** (2 * pair / max(1, n_trig)))
        cols.append(np.sin(i * freq) if k % 2 == 0 else np.cos(i * freq))
    return np.stack(cols[:width], axis=1)


def causal_attention(q, k, v, wq, wk, wv, wo) -> np.ndarray:
    logits = (q @ wq) @ (k @ wk).T
    n = logits.shape[0]
    logits = np.where(np.tri(n, dtype=bool), logits, -np.inf)
    logits -= logits.max(axis=1, keepdims=True)
    p = np.exp(logits)
    p /= p.sum(axis=1, keepdims=True)
    return weighted_values(p, v @ wv) @ wo


def weighted_values(p: np.ndarray, v: np.ndarray) -> np.ndarray:
    """p @ v where a position with zero weight contributes exactly 0, whatever v holds there.

    Plain p @ v turns 0 * nan into nan, so one non-finite value at a later (masked) position
    would spoil every earlier output; causality must not depend on what later positions hold.
    Where a non-finite value has positive weight, the result is what IEEE sums give (nan, or
    the infinity's sign). The compiled model's attention applies the same rule."""
    finite = np.isfinite(v)
    if finite.all():
        return p @ v
    out = p @ np.where(finite, v, 0.0)
    seen = (p > 0).astype(np.float64)
    plus, minus = seen @ (v == np.inf), seen @ (v == -np.inf)
    nan = (seen @ np.isnan(v) > 0) | ((plus > 0) & (minus > 0))
    out = np.where(plus > 0, np.inf, np.where(minus > 0, -np.inf, out))
    return np.where(nan, np.nan, out)


def pwl_1d(x: np.ndarray, bp: np.ndarray, values: np.ndarray) -> np.ndarray:
    """x (n,) -> (n, O): interpolation through (bp, values), constant outside."""
    return np.stack([np.interp(x, bp, values[:, j]) for j in range(values.shape[1])], axis=1)


def pwl_2d(x: np.ndarray, y: np.ndarray, xs, ys, table) -> np.ndarray:
    """Triangulated interpolation (cells split along their rising diagonal), inputs clamped."""
    x = np.clip(x, xs[0], xs[-1])
    y = np.clip(y, ys[0], ys[-1])
    i = np.clip(np.searchsorted(xs, x, side="right") - 1, 0, len(xs) - 2)
    j = np.clip(np.searchsorted(ys, y, side="right") - 1, 0, len(ys) - 2)
    u = ((x - xs[i]) / (xs[i + 1] - xs[i]))[:, None]
    v = ((y - ys[j]) / (ys[j + 1] - ys[j]))[:, None]
    t00, t10, t01, t11 = table[i, j], table[i + 1, j], table[i, j + 1], table[i + 1, j + 1]
    lower = t00 + u * (t10 - t00) + v * (t11 - t10)  # u >= v
    upper = t00 + v * (t01 - t00) + u * (t11 - t01)  # u < v
    return np.where(u >= v, lower, upper)


def _p(op: Operation, name: str) -> np.ndarray:
    return to_numpy(op.properties[name])


def _opt(op: Operation, name: str, n: int) -> np.ndarray:
    a = op.properties.get(name)
    return to_numpy(a) if a is not None else np.zeros(n)


def evaluate_op(op: Operation, args: list[np.ndarray], n: int, feeds: Mapping) -> np.ndarray:
    """The ideal value of one op given its operand values (each (n, width))."""
    match op:
        case LinearOp():
            m = _p(op, "weight")
            return args[0] @ m + _opt(op, "bias", m.shape[1])
        case AddOp():
            return args[0] + args[1]
        case ReluOp():
            return np.maximum(args[0], 0.0)
        case ConcatOp():
            return np.concatenate(args, axis=1)
        case SliceOp():
            start = op.start.value.data
            return args[0][:, start:start + width_of(op.out)]
        case AfterOp():
            return args[0]
        case LiteralOp():
            return np.broadcast_to(_p(op, "value"), (n, width_of(op.out))).copy()
        case MlpOp():
            w1, w2 = _p(op, "w1"), _p(op, "w2")
            h = np.maximum(args[0] @ w1 + _opt(op, "b1", w1.shape[1]), 0.0)
            return h @ w2 + _opt(op, "b2", w2.shape[1])
        case AttnOp():
            return causal_attention(*args, _p(op, "wq"), _p(op, "wk"), _p(op, "wv"), _p(op, "wo"))
        case CompareOp():
            return np.where(args[0] >= op.threshold.value.data, 1.0, -1.0)
        case SelectOp():
            return np.where(args[0] > 0, args[1], args[2])
        case ClampOp():
            return np.clip(args[0], op.lo.value.data, op.hi.value.data)
        case PiecewiseLinearOp():
            return pwl_1d(args[0][:, 0], _p(op, "breakpoints"), _p(op, "values"))
        case PiecewiseLinear2dOp():
            return pwl_2d(args[0][:, 0], args[1][:, 0], _p(op, "xs"), _p(op, "ys"), _p(op, "table"))
        case InputOp() | EmbeddingOp():
            return feeds[op.input_name.data]
        case PosEncodingOp():
            return position_features(n, width_of(op.out))
    raise EvaluationError(f"{describe(op)}: the interpreter has no meaning for this op")


def _feeds(graph: GraphOp, checked: CheckedInputs) -> dict[str, np.ndarray]:
    """The source values: inputs as checked, token ids looked up in their tables."""
    feeds = dict(checked.values)
    for op in graph.block.ops:
        if isinstance(op, EmbeddingOp):
            name = op.input_name.data
            feeds[name] = _p(op, "table")[checked.values[name]]
    return feeds


def _values(graph: GraphOp, checked: CheckedInputs) -> dict[SSAValue, np.ndarray]:
    feeds = _feeds(graph, checked)
    n = checked.n_positions
    values: dict[SSAValue, np.ndarray] = {}
    for op in graph.block.ops:
        if isinstance(op, OutputOp):
            continue
        values[op.results[0]] = evaluate_op(op, [values[v] for v in op.operands], n, feeds)
    return values


def _outputs(graph: GraphOp, checked: CheckedInputs) -> dict[str, np.ndarray]:
    values = _values(graph, checked)
    return {op.output_name.data: values[op.value] for op in graph.block.ops
            if isinstance(op, OutputOp)}


def evaluate_values(module, inputs: Mapping[str, np.ndarray], graph: str = "main",
                    n_positions: int | None = None, on_out_of_range: str = "error"
                    ) -> dict[SSAValue, np.ndarray]:
    """Every SSA value of the graph (the probe compares compiled values against these).
    Inputs are checked as by `evaluate`."""
    g = find_graph(module, graph)
    return _values(g, check_inputs(g, inputs, on_out_of_range, n_positions))


def evaluate(module, inputs: Mapping[str, np.ndarray], graph: str = "main",
             n_positions: int | None = None, on_out_of_range: str = "error"
             ) -> dict[str, np.ndarray]:
    """Run graph `graph` of `module` on `inputs` ({name: (n_positions, width)}; token inputs
    take integer ids shaped (n_positions,)). Returns {output name: (n_positions, width)}.

    The inputs must keep the graph's promises (`twdialect.inputs`): every input present and no
    other, finite, integer where declared `integer`, inside the declared range, token ids in
    the vocabulary, at least one position; anything else raises a one-line EvaluationError.
    `on_out_of_range="clamp"` clamps values into their declared ranges instead of refusing
    them; `"unchecked"` feeds values as they are. `n_positions` is needed only by a graph
    without inputs."""
    g = find_graph(module, graph)
    return _outputs(g, check_inputs(g, inputs, on_out_of_range, n_positions))


def generate(module, inputs: Mapping[str, np.ndarray], steps: int,
             feedback: Callable[[dict[str, np.ndarray]], Mapping[str, object]],
             graph: str = "main", on_out_of_range: str = "error",
             n_positions: int | None = None) -> dict[str, np.ndarray]:
    """Autoregressive oracle: after the prompt `inputs`, `steps` times feed
    `feedback(last_outputs) -> next inputs` (each output one position, a (width,) array; the
    feedback gives every input for one position: a (width,) array, a number for a width-1
    input, a token id for a token input) as a new position. Returns the outputs at every
    position.

    Fed-back values are checked like the prompt (`on_out_of_range` as in `evaluate`) and kept
    as they are: a real value stays real; an `integer` input or a token id that is not an
    integer is refused, never rounded. A feedback that returns nothing, or misses, misnames or
    misshapes an input, is refused with a line saying what it returned. `n_positions` is the
    prompt length of a graph without inputs."""
    g = find_graph(module, graph)
    steps = check_steps(steps)
    contract = InputContract.of(g)
    checked = check_inputs(contract, inputs, on_out_of_range, n_positions)
    outputs = _outputs(g, checked)
    for _ in range(steps):
        row = check_feedback(contract, feedback({k: v[-1] for k, v in outputs.items()}),
                             checked.n_positions, on_out_of_range)
        checked = CheckedInputs({k: np.concatenate([v, row.values[k]], axis=0)
                                 for k, v in checked.values.items()}, checked.n_positions + 1)
        outputs = _outputs(g, checked)
    return outputs
