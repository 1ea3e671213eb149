"""The reference interpreter: the oracle that defines what every tw op means.

Values are float64 numpy arrays shaped (n_positions, width). Library ops are evaluated by
their *ideal* meaning (select picks exactly, compare is a hard step); `decompose` lowers them
to primitives under the contracts in `twdialect/contracts.py`. Inputs are checked against the
graph's declared promises by `twdialect.inputs.check_inputs`, the same check the compiled model
makes, so the two accept and refuse the same inputs.

It also holds what every analysis of a graph shares (as xDSL's interpreter registers `@impl`
functions per op): `OpRules`, one table of per-op rules per analysis, keyed by op class, and
`walk_graph`, the one walk that applies a table to a graph's values in order. The oracle is
the table `ORACLE`; value ranges and integrality (`twdialect.ranges`) and the library ops'
contracts (`twdialect.contracts`) are tables too, and `tests/test_op_coverage.py` checks that
each one has a rule for every op it applies to.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue

from twdialect.dense import to_numpy
from twdialect.dialect import (
    HARD,
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
    SWISH,
    mlp_activation,
    OutputOp,
    PiecewiseLinear2dOp,
    PiecewiseLinearOp,
    PosEncodingOp,
    PosTableOp,
    ReluOp,
    SelectOp,
    SliceOp,
    AfterOp,
    FULL,
    attn_mask,
    attn_rope,
    describe,
    has_full_attention,
    width_of,
)
from twdialect.inputs import (  # noqa: F401 (EvaluationError is re-exported)
    CheckedInputs,
    EvaluationError,
    InputContract,
    check_feedback,
    check_generate,
    check_inputs,
)


T = TypeVar("T")


class OpRules:
    """One analysis as a table: for each op class, the rule that gives what the analysis says
    of an op's value from what it said of the operands (`rule(op, operand facts, *context)`).

        ORACLE = OpRules("oracle", ...)
        @ORACLE.rule(ReluOp)
        def _relu(op, args, run): return np.maximum(args[0], 0.0)

    Lookup is by exact class (an xDSL op class is final; `isinstance` would be slow on big
    graphs). An op without a rule raises the analysis's own error naming the op."""

    def __init__(self, analysis: str, missing: Callable[[Operation], Exception]):
        self.analysis = analysis
        self._missing = missing
        self._rules: dict[type[Operation], Callable] = {}

    def rule(self, *op_classes: type[Operation]) -> Callable[[Callable], Callable]:
        """Register the decorated function as the rule of every class in `op_classes`."""
        def register(fn: Callable) -> Callable:
            for cls in op_classes:
                if cls in self._rules:
                    raise ValueError(f"{self.analysis}: a second rule for {cls.name}")
                self._rules[cls] = fn
            return fn
        return register

    def covers(self, op_class: type[Operation]) -> bool:
        return op_class in self._rules

    def __call__(self, op: Operation, *args):
        rule = self._rules.get(type(op))
        if rule is None:
            raise self._missing(op)
        return rule(op, *args)


def walk_graph(graph: GraphOp, visit: Callable[[Operation, list[T]], T]) -> dict[SSAValue, T]:
    """{value: visit(op, [operand facts])} for every value of `graph`, in block order (the
    verifier promises every operand is defined earlier). Outputs define no value; callers
    that need them read `graph.block.ops`."""
    facts: dict[SSAValue, T] = {}
    for op in graph.block.ops:
        if type(op) is OutputOp:
            continue
        facts[op.results[0]] = visit(op, [facts[v] for v in op.operands])
    return facts


def walk_to(value: SSAValue, facts: dict[SSAValue, T], visit: Callable[[Operation, list[T]], T]
            ) -> T:
    """`walk_graph`'s fact of `value`, computing only the ancestors `facts` lacks and keeping
    them there (a cache that grows with a graph still being built or rewritten)."""
    stack = [value]
    while stack:  # post-order over the ancestors not yet known
        top = stack[-1]
        if top in facts:
            stack.pop()
            continue
        missing = [v for v in top.owner.operands if v not in facts]
        if missing:
            stack.extend(missing)
            continue
        facts[top] = visit(top.owner, [facts[v] for v in top.owner.operands])
        stack.pop()
    return facts[value]


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
    return attention(q, k, v, wq, wk, wv, wo, "causal")


def rope_inv_freq(base: float, dims: int) -> np.ndarray:
    """(dims/2,) float64 plane frequencies base^(-2p/dims) (torchwright's `rope_inv_freq`,
    which rounds them to float32; tw keeps float64)."""
    return float(base) ** (-np.arange(0, dims, 2, dtype=np.float64) / dims)


def rope_cos_sin(positions: np.ndarray, base: float, dims: int) -> tuple[np.ndarray, np.ndarray]:
    """(P, dims) float64 cos and sin tables at absolute `positions`, rotate_half layout: the
    first and second halves carry the same angles pos * base^(-2p/dims)."""
    ang = np.asarray(positions, np.float64)[:, None] * rope_inv_freq(base, dims)[None, :]
    return np.concatenate([np.cos(ang)] * 2, 1), np.concatenate([np.sin(ang)] * 2, 1)


def apply_rope(x: np.ndarray, positions: np.ndarray, base: float, dims: int) -> np.ndarray:
    """Rows x (P, d_qk) rotated by their absolute positions over their first `dims`
    components (HF LLaMA's rotate_half: component p pairs with p + dims/2; the last
    d_qk - dims pass unchanged): torchwright's `apply_rope`, in float64."""
    cos, sin = rope_cos_sin(positions, base, dims)
    front, half = x[:, :dims], dims // 2
    rotated = front * cos + np.concatenate([-front[:, half:], front[:, :half]], 1) * sin
    return np.concatenate([rotated, x[:, dims:]], 1)


def attention(q, k, v, wq, wk, wv, wo, mask: str = "causal",
              rope: tuple[float, int] | None = None, hard: float | None = None) -> np.ndarray:
    """One head family: "causal" (a query at i sees keys j <= i) or "full" (every key of the
    sequence; a non-finite value anywhere then legitimately reaches every output). `rope`
    (base, dims): q Wq and k Wk rotated by their absolute positions first (`apply_rope`).
    `hard` (a `tw.hard` claim): a query whose top logit leads the next by less is a
    HardReadError naming it."""
    qp, kp = q @ wq, k @ wk
    if rope is not None:
        pos = np.arange(qp.shape[0])
        qp, kp = apply_rope(qp, pos, *rope), apply_rope(kp, pos, *rope)
    logits = qp @ kp.T
    n = logits.shape[0]
    if mask != FULL:
        logits = np.where(np.tri(n, dtype=bool), logits, -np.inf)
    if hard is not None:
        check_hard_gap(logits, hard)
    logits -= logits.max(axis=1, keepdims=True)
    p = np.exp(logits)
    p /= p.sum(axis=1, keepdims=True)
    return weighted_values(p, v @ wv) @ wo


class HardReadError(ValueError):
    """A `tw.hard` head's query whose top logit does not lead by the claimed gap."""


def check_hard_gap(logits: np.ndarray, gap: float) -> None:
    """Every row's largest logit leads its second by at least `gap`, up to float64 rounding
    of the logits (rows with one visible key lead by definition)."""
    if logits.shape[1] < 2:
        return
    top2 = -np.partition(-logits, 1, axis=1)[:, :2]
    with np.errstate(invalid="ignore"):
        lead = top2[:, 0] - top2[:, 1]
    slack = 8 * np.finfo(np.float64).eps * np.abs(top2[:, 0])
    bad = np.flatnonzero(~(np.isinf(top2[:, 1]) | (lead >= gap - slack)))
    if bad.size:
        i = int(bad[0])
        raise HardReadError(f"query {i}'s top logit leads the next by {lead[i]:.6g}, below the "
                            f"claimed gap {gap:g}")


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


# --------------------------------------------------------------------------------------
# The oracle's rules: the ideal value of each op, given its operands' values (each (n, width))
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    """What the oracle reads besides operand values: the number of positions and the values
    fed to the graph's sources (token ids already looked up in their tables)."""

    n_positions: int
    feeds: Mapping[str, np.ndarray]


ORACLE = OpRules("oracle", lambda op: EvaluationError(
    f"{describe(op)}: the interpreter has no meaning for this op"))


@ORACLE.rule(InputOp, EmbeddingOp)
def _fed(op: InputOp | EmbeddingOp, args, run: Run) -> np.ndarray:
    return run.feeds[op.input_name.data]


@ORACLE.rule(PosEncodingOp)
def _positions(op: PosEncodingOp, args, run: Run) -> np.ndarray:
    return position_features(run.n_positions, width_of(op.out))


@ORACLE.rule(PosTableOp)
def _position_table(op: PosTableOp, args, run: Run) -> np.ndarray:
    return _p(op, "table")[:run.n_positions].copy()  # (the input contract bounds n by L)


@ORACLE.rule(LiteralOp)
def _literal(op: LiteralOp, args, run: Run) -> np.ndarray:
    return np.broadcast_to(_p(op, "value"), (run.n_positions, width_of(op.out))).copy()


@ORACLE.rule(LinearOp)
def _linear(op: LinearOp, args, run: Run) -> np.ndarray:
    m = _p(op, "weight")
    return args[0] @ m + _opt(op, "bias", m.shape[1])


@ORACLE.rule(AddOp)
def _add(op: AddOp, args, run: Run) -> np.ndarray:
    return args[0] + args[1]


@ORACLE.rule(ReluOp)
def _relu(op: ReluOp, args, run: Run) -> np.ndarray:
    return np.maximum(args[0], 0.0)


@ORACLE.rule(ConcatOp)
def _concat(op: ConcatOp, args, run: Run) -> np.ndarray:
    return np.concatenate(args, axis=1)


@ORACLE.rule(SliceOp)
def _slice(op: SliceOp, args, run: Run) -> np.ndarray:
    start = op.start.value.data
    return args[0][:, start:start + width_of(op.out)]


@ORACLE.rule(AfterOp)
def _after(op: AfterOp, args, run: Run) -> np.ndarray:
    return args[0]


@ORACLE.rule(MlpOp)
def _mlp(op: MlpOp, args, run: Run) -> np.ndarray:
    w1, w2 = _p(op, "w1"), _p(op, "w2")
    z = args[0] @ w1 + _opt(op, "b1", w1.shape[1])
    h = swish(z) if mlp_activation(op) == SWISH else np.maximum(z, 0.0)
    if "up" in op.properties:  # a gated mlp: every lane times its up projection
        h = h * (args[0] @ _p(op, "up") + _opt(op, "ub", w1.shape[1]))
    return h @ w2 + _opt(op, "b2", w2.shape[1])


def swish(z: np.ndarray) -> np.ndarray:
    """SiLU, z * sigmoid(z), in a form that never overflows (z/2 (1 + tanh(z/2)))."""
    return 0.5 * z * (1.0 + np.tanh(0.5 * z))


@ORACLE.rule(AttnOp)
def _attn(op: AttnOp, args, run: Run) -> np.ndarray:
    hard = op.attributes.get(HARD)
    try:
        return attention(*args, _p(op, "wq"), _p(op, "wk"), _p(op, "wv"), _p(op, "wo"),
                         attn_mask(op), attn_rope(op),
                         None if hard is None else hard.value.data)
    except HardReadError as e:
        raise EvaluationError(f"{describe(op)}: declared {HARD} but {e}") from None


@ORACLE.rule(CompareOp)
def _compare(op: CompareOp, args, run: Run) -> np.ndarray:
    return np.where(args[0] >= op.threshold.value.data, 1.0, -1.0)


@ORACLE.rule(SelectOp)
def _select(op: SelectOp, args, run: Run) -> np.ndarray:
    return np.where(args[0] > 0, args[1], args[2])


@ORACLE.rule(ClampOp)
def _clamp(op: ClampOp, args, run: Run) -> np.ndarray:
    return np.clip(args[0], op.lo.value.data, op.hi.value.data)


@ORACLE.rule(PiecewiseLinearOp)
def _pwl(op: PiecewiseLinearOp, args, run: Run) -> np.ndarray:
    return pwl_1d(args[0][:, 0], _p(op, "breakpoints"), _p(op, "values"))


@ORACLE.rule(PiecewiseLinear2dOp)
def _pwl_2d(op: PiecewiseLinear2dOp, args, run: Run) -> np.ndarray:
    return pwl_2d(args[0][:, 0], args[1][:, 0], _p(op, "xs"), _p(op, "ys"), _p(op, "table"))


def evaluate_op(op: Operation, args: list[np.ndarray], n: int, feeds: Mapping) -> np.ndarray:
    """The ideal value of one op given its operand values (each (n, width)); `feeds` holds the
    sources' values by name (only a source reads it)."""
    return ORACLE(op, args, Run(n, feeds))


def _feeds(graph: GraphOp, checked: CheckedInputs) -> dict[str, np.ndarray]:
    """The source values: inputs as checked, token ids looked up in their tables."""
    feeds = dict(checked.values)
    for op in graph.block.ops:
        if isinstance(op, EmbeddingOp):
            name = op.input_name.data
            feeds[name] = _p(op, "table")[checked.values[name]]
    return feeds


def _values(graph: GraphOp, checked: CheckedInputs) -> dict[SSAValue, np.ndarray]:
    run = Run(checked.n_positions, _feeds(graph, checked))
    return walk_graph(graph, lambda op, args: ORACLE(op, args, run))


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


def check_stepwise(graph: GraphOp, what: str) -> None:
    """Refuse step-by-step generation of a graph with a full-mask head (one line, why)."""
    if has_full_attention(graph):
        op = next(o for o in graph.block.ops if type(o) is AttnOp and attn_mask(o) == FULL)
        raise EvaluationError(f"{what}: {describe(op)} has a full attention mask: its output at "
                              "a position depends on later positions, so the graph runs on whole "
                              "sequences only (use evaluate / run / run_batch)")


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
    prompt length of a graph without inputs. A graph with a full-mask `tw.attn` is refused: its
    outputs at a position depend on later positions, so it runs on whole sequences only."""
    g = find_graph(module, graph)
    check_stepwise(g, "generate")
    steps = check_generate(steps, feedback)
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
