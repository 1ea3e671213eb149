"""The weight writer: a Schedule becomes per-layer weight arrays, sized to what each layer uses.

Every task writes a few rows/columns of its layer's matrices through its op kind's rule
(`lowering/rules.py`), collected as coordinate lists and summed into dense arrays once per
layer (`lowering/layer.py`). The heads and neurons written per layer are checked against the
schedule's plan.

Weights come out in the model's dtype: the rules' coordinates are float64 and summed in
float64, then a float32 model rounds each sum once, where a float64 model keeps it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tw_lowering.layer import LayerBuilder, LayerWeights, Matrix, component_rows  # noqa: F401 (re-exported)
from tw_lowering.progress import report
from tw_lowering.rules import write_cancel, write_task
from tw_lowering.schedule import Schedule
from tw_lowering.tasks import Task
from twdialect.analysis import ATTN, is_attention_slot, layer_of
from twdialect.dense import to_numpy
from twdialect.interp import position_features


# The dtypes a compiled model runs in (`compile(dtype=...)`, `CompiledTransformer.to`).
DTYPES = {"float32": np.dtype(np.float32), "float64": np.dtype(np.float64)}


def check_dtype(fn: str, dtype) -> np.dtype:
    """`dtype` as the numpy dtype a model runs in: "float32" or "float64", or the numpy or
    torch dtype of either; anything else is one ArgumentError naming `fn`'s argument."""
    from twdialect import ArgumentError

    name = dtype if isinstance(dtype, str) else None
    if isinstance(dtype, type) and dtype in (np.float32, np.float64):
        name = np.dtype(dtype).name
    elif isinstance(dtype, np.dtype):
        name = dtype.name
    elif type(dtype).__module__ == "torch" and type(dtype).__name__ == "dtype":
        name = str(dtype).removeprefix("torch.")  # (torch.float32 -> "float32"; no torch import)
    if name not in DTYPES:
        raise ArgumentError(f"{fn}: dtype must be \"float32\" or \"float64\" (or "
                            f"torch.float32 / torch.float64), got {dtype!r}")
    return DTYPES[name]


@dataclass
class SourceSlot:
    kind: str  # "input", "embedding", "pos" (pos_encoding) or "pos_table"
    name: str
    cols: np.ndarray
    table: np.ndarray | None = None  # embedding table; a pos_table's (L, W) rows
    pos_width: int = 0  # full pos_encoding width (its first component is the machine column)


@dataclass
class OutputSlot:
    name: str
    rows: np.ndarray  # residual column per component (the constant column for literals)
    scale: np.ndarray  # multiplier per component (1, or the literal's value)


def materialize(sched: Schedule, dtype=np.float32
                ) -> tuple[list[LayerWeights], list[SourceSlot], list[OutputSlot]]:
    """Per-layer weights, source slots and output slots of `sched`, weights and source
    tables in `dtype` (np.float32, or np.float64 for a float64 model)."""
    m = sched.machine
    tg = sched.tg
    layers = [LayerBuilder(m) for _ in range(sched.n_layers)]
    # The group's literal addends ride on the bias of its first-placed writer.
    first_writer: dict[int, int] = {}
    for t in tg.tasks:
        if sched.slot[t.tid] >= 0:
            g = t.out_group
            cur = first_writer.get(g)
            if cur is None or (sched.slot[t.tid], t.tid) < (sched.slot[cur], cur):
                first_writer[g] = t.tid
    by_slot = sorted((s, t.index, t.tid) for t in tg.tasks if (s := sched.slot[t.tid]) >= 0)

    def extra_bias(t: Task):
        grp = tg.groups[t.out_group]
        return grp.bias if grp.bias is not None and first_writer[t.out_group] == t.tid else None

    # Attn ops take whole heads first in each layer, then pooled head work packs after them.
    attn_first = sorted(by_slot, key=lambda e: (tg.tasks[e[2]].kind != ATTN,) + e)
    for done, (s, _, tid) in enumerate(attn_first, 1):
        t = tg.tasks[tid]
        write_task(layers[layer_of(s)], m, sched.cols, tg, t, extra_bias(t), is_attention_slot(s))
        report("weights", done, len(attn_first))
    for s, g in sched.cancels:
        write_cancel(layers[layer_of(s)], sched.cols[g], is_attention_slot(s),
                     sched.cancel_signs[g])
    _check_plan(sched, layers)
    weights = [layer.finish(dtype) for layer in layers]
    return weights, _sources(sched, dtype), _outputs(sched)


def _check_plan(sched: Schedule, layers: list[LayerBuilder]) -> None:
    """The written layers use exactly the heads and neurons the schedule planned (one cost
    model: `lowering/rules.py`); a mismatch is a compiler bug, never the user's."""
    for i, layer in enumerate(layers):
        planned = (sched.attn_heads[i], sched.neurons[i])
        written = (layer.heads_used, layer.neurons)
        if planned != written:
            raise AssertionError(f"layer {i}: the schedule planned (heads, neurons) = {planned}, "
                                 f"the weight writer wrote {written}")


def _sources(sched: Schedule, dtype=np.float32) -> list[SourceSlot]:
    from twdialect.dialect import EmbeddingOp, InputOp, PosTableOp

    out = []
    for g in sched.tg.sources:
        grp = sched.tg.groups[g]
        op = grp.source
        if isinstance(op, InputOp):
            out.append(SourceSlot("input", op.input_name.data, sched.cols[g]))
        elif isinstance(op, EmbeddingOp):
            out.append(SourceSlot("embedding", op.input_name.data, sched.cols[g],
                                  table=to_numpy(op.table, dtype)))
        elif isinstance(op, PosTableOp):
            out.append(SourceSlot("pos_table", "", sched.cols[g],
                                  table=to_numpy(op.table, dtype)))
        else:
            out.append(SourceSlot("pos", "", sched.cols[g], pos_width=grp.width + 1))
    return out


def _outputs(sched: Schedule) -> list[OutputSlot]:
    out = []
    for name, v in sched.tg.outputs:
        rows, scale = component_rows(sched.machine, sched.cols, sched.tg.refs[v])
        out.append(OutputSlot(name, rows, scale))
    return out


def position_rows(start: int, n: int, width: int) -> np.ndarray:
    """pos_encoding features for absolute positions start..start+n-1 (all columns)."""
    return position_features(start + n, width)[start:]
