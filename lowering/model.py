"""The compiled artifact: a standard transformer as a `torch.nn.Module`.

Each layer is `x = x + Attn(x)` (causal softmax, scale 1, output bias) then
`x = x + W2 relu(W1 x + b1) + b2`, with per-layer head counts and hidden widths trimmed to
what the schedule uses. `run` evaluates a whole sequence; `generate` steps autoregressively
with a KV cache and matches `run` on the same sequence to fp32 round-off.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping

import numpy as np
import torch
from torch import nn

from lowering.machine import Machine
from lowering.materialize import LayerWeights, Matrix, OutputSlot, SourceSlot, position_rows
from twdialect.inputs import (
    CheckedInputs,
    InputContract,
    InputSpec,
    check_feedback,
    check_inputs,
    check_steps,
)


SPARSE_BELOW = 0.02  # store a projection sparse when under 2% of its entries are non-zero
SPARSE_MIN_SIZE = 1 << 16


class Projection(nn.Module):
    """x @ w + b, laid out like nn.Linear (`weight` is (out, in)).

    Big, nearly empty matrices (most of a compiled layer) are kept as sparse (COO) tensors so a
    10^5-op graph compiles in little memory; `dense_weight()` always gives the real matrix."""

    def __init__(self, w: Matrix, b: np.ndarray | None):
        super().__init__()
        n_in, n_out = w.shape
        size = n_in * n_out
        self.sparse = size >= SPARSE_MIN_SIZE and w.nnz < SPARSE_BELOW * size
        if self.sparse:
            idx = torch.from_numpy(np.stack([w.cols, w.rows]))
            with warnings.catch_warnings():  # some torch versions warn even when asked not to check
                warnings.simplefilter("ignore", UserWarning)
                t = torch.sparse_coo_tensor(idx, torch.from_numpy(w.vals), (n_out, n_in),
                                            check_invariants=False)
            self.register_buffer("weight", t.coalesce())
        else:
            self.weight = nn.Parameter(torch.from_numpy(np.ascontiguousarray(w.dense().T)),
                                       requires_grad=False)
        self.bias = (nn.Parameter(torch.from_numpy(np.ascontiguousarray(b)), requires_grad=False)
                     if b is not None else None)

    def dense_weight(self) -> torch.Tensor:
        return self.weight.to_dense() if self.sparse else self.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.sparse:
            y = torch.sparse.mm(self.weight, x.T).T
            return y + self.bias if self.bias is not None else y
        return nn.functional.linear(x, self.weight, self.bias)


def _linear(w: Matrix, b: np.ndarray | None) -> Projection:
    """A projection computing x @ w + b."""
    return Projection(w, b)


class Attention(nn.Module):
    def __init__(self, w: LayerWeights, d_head: int):
        super().__init__()
        self.d_head = d_head
        self.n_heads = w.wq.shape[1] // d_head
        self.q_proj = _linear(w.wq, None)
        self.k_proj = _linear(w.wk, None)
        self.v_proj = _linear(w.wv, None)
        self.o_proj = _linear(w.wo, w.bo)

    def forward(self, x: torch.Tensor, cache: list | None, start: int) -> torch.Tensor:
        n = x.shape[0]
        if self.n_heads == 0:
            return self.o_proj.bias.expand(n, -1)
        h, dh = self.n_heads, self.d_head
        q = self.q_proj(x).view(n, h, dh).transpose(0, 1)
        k = self.k_proj(x).view(n, h, dh).transpose(0, 1)
        v = self.v_proj(x).view(n, h, dh).transpose(0, 1)
        if cache is not None:
            if cache[0] is not None:
                k = torch.cat([cache[0], k], dim=1)
                v = torch.cat([cache[1], v], dim=1)
            cache[0], cache[1] = k, v
        logits = q @ k.transpose(1, 2)  # no 1/sqrt(d_head): the graph's attention is unscaled
        m = k.shape[1]
        qpos = torch.arange(start, start + n, device=x.device).unsqueeze(1)
        kpos = torch.arange(m, device=x.device).unsqueeze(0) + (m - (start + n))
        logits = logits.masked_fill(kpos > qpos, float("-inf"))
        p = torch.softmax(logits, dim=-1)
        out = weighted_values(p, v).transpose(0, 1).reshape(n, h * dh)
        return self.o_proj(out)


def weighted_values(p: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """p @ v where a position with zero weight (every masked-out one) contributes exactly 0.

    Plain p @ v makes 0 * nan = nan, so one non-finite value at a later position would turn
    every earlier output into nan; outputs must not depend on later positions, whatever they
    hold. Non-finite values with positive weight give what IEEE sums give (nan, or the
    infinity's sign): the rule of the oracle's `twdialect.interp.weighted_values`."""
    finite = torch.isfinite(v)
    if bool(finite.all()):
        return p @ v
    out = p @ torch.where(finite, v, torch.zeros_like(v))
    seen = (p > 0).to(v.dtype)
    plus = seen @ (v == float("inf")).to(v.dtype)
    minus = seen @ (v == float("-inf")).to(v.dtype)
    nan = ((seen @ torch.isnan(v).to(v.dtype)) > 0) | ((plus > 0) & (minus > 0))
    inf = torch.full_like(out, float("inf"))
    out = torch.where(plus > 0, inf, torch.where(minus > 0, -inf, out))
    return torch.where(nan, torch.full_like(out, float("nan")), out)


def _contract_of(schedule, sources: list[SourceSlot]) -> InputContract:
    """The compiled graph's declared input contract; from the source slots alone (widths and
    vocabularies, no ranges) when the model was built without its schedule."""
    if schedule is not None:
        return InputContract.of(schedule.tg.graph)
    return InputContract(tuple(
        InputSpec(s.name, s.kind, len(s.cols) if s.kind == "input" else 1,
                  vocab=s.table.shape[0] if s.table is not None else 0)
        for s in sources if s.kind != "pos"))


class Mlp(nn.Module):
    def __init__(self, w: LayerWeights):
        super().__init__()
        self.n_neurons = w.w1.shape[1]
        self.fc1 = _linear(w.w1, w.b1)
        self.fc2 = _linear(w.w2, w.b2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.n_neurons == 0:
            return self.fc2.bias.expand(x.shape[0], -1)
        return self.fc2(torch.relu(self.fc1(x)))


class Layer(nn.Module):
    def __init__(self, w: LayerWeights, d_head: int):
        super().__init__()
        self.attn = Attention(w, d_head)
        self.mlp = Mlp(w)

    def forward(self, x, cache, start):
        x = x + self.attn(x, cache, start)
        return x + self.mlp(x)


class CompiledTransformer(nn.Module):
    """A compiled tw graph. `run(inputs)` has the contract of `twdialect.evaluate`: the same
    inputs are accepted or refused with the same message (`twdialect.inputs.check_inputs`),
    since the contract is read from the compiled graph's own declarations."""

    def __init__(self, machine: Machine, weights: list[LayerWeights], sources: list[SourceSlot],
                 outputs: list[OutputSlot], stats=None, schedule=None,
                 contract: InputContract | None = None):
        super().__init__()
        self.machine = machine
        self.layers = nn.ModuleList(Layer(w, machine.d_head) for w in weights)
        self.sources = sources
        self.outputs = outputs
        self.stats = stats
        self.schedule = schedule
        self.contract = contract or _contract_of(schedule, sources)
        self.snapshots: list[torch.Tensor] | None = None

    @property
    def n_layers(self) -> int:
        return len(self.layers)

    # -- the input stage ------------------------------------------------------------------
    def embed(self, inputs: Mapping[str, np.ndarray] | CheckedInputs, start: int = 0,
              on_out_of_range: str = "error", n_positions: int | None = None) -> torch.Tensor:
        """The residual stream before layer 0 for positions start..start+n-1. `inputs` are
        checked against the graph's contract (see `run`) unless already checked."""
        if not isinstance(inputs, CheckedInputs):
            inputs = check_inputs(self.contract, inputs, on_out_of_range, n_positions, start)
        m = self.machine
        n = inputs.n_positions
        x = np.zeros((n, m.d), np.float32)
        x[:, m.CONST_COL] = 1.0
        x[:, m.POS_COL] = np.arange(start, start + n)
        for s in self.sources:
            if s.kind == "pos":
                x[:, s.cols] = position_rows(start, n, s.pos_width)[:, 1:]
            elif s.kind == "embedding":
                x[:, s.cols] = s.table[inputs.values[s.name]]
            else:
                x[:, s.cols] = inputs.values[s.name]
        return torch.from_numpy(x).to(self.device)

    @property
    def device(self) -> torch.device:
        """Where the weights live (`ct.to("cuda")` moves the model; inputs follow)."""
        for t in self.buffers():
            return t.device
        for t in self.parameters():
            return t.device
        return torch.device("cpu")

    def read_outputs(self, x: torch.Tensor) -> dict[str, np.ndarray]:
        xn = x.detach().cpu().numpy().astype(np.float64)
        return {o.name: xn[:, o.rows] * o.scale for o in self.outputs}

    # -- running ----------------------------------------------------------------------
    @torch.no_grad()
    def forward(self, x: torch.Tensor, caches: list | None = None, start: int = 0,
                record: bool = False) -> torch.Tensor:
        snaps = [] if record else None
        for i, layer in enumerate(self.layers):
            x = layer(x, caches[i] if caches is not None else None, start)
            if record:
                snaps.append(x.clone())
        if record:
            self.snapshots = snaps
        return x

    def run(self, inputs: Mapping[str, np.ndarray], n_positions: int | None = None,
            on_out_of_range: str = "error") -> dict[str, np.ndarray]:
        """The outputs at every position, as `twdialect.evaluate` gives them: inputs outside
        the graph's promises raise a one-line EvaluationError; `on_out_of_range="clamp"`
        clamps values into their declared ranges, `"unchecked"` feeds them as they are (the
        match with the oracle is then not promised)."""
        return self.read_outputs(self.forward(self.embed(inputs, 0, on_out_of_range,
                                                         n_positions)))

    def generate(self, inputs: Mapping[str, np.ndarray], steps: int,
                 feedback: Callable[[dict[str, np.ndarray]], Mapping[str, object]],
                 on_out_of_range: str = "error", n_positions: int | None = None
                 ) -> dict[str, np.ndarray]:
        """Prefill `inputs`, then `steps` times feed `feedback(last outputs)` back as the next
        position, with a KV cache. Same contract as `twdialect.generate`: every step's inputs
        are checked, fed-back reals stay real, a bad feedback is one line."""
        steps = check_steps(steps)
        caches = [[None, None] for _ in self.layers]
        x = self.forward(self.embed(inputs, 0, on_out_of_range, n_positions), caches, 0)
        pos = x.shape[0]
        rows = [self.read_outputs(x)]
        for _ in range(steps):
            nxt = check_feedback(self.contract, feedback({k: v[-1] for k, v in rows[-1].items()}),
                                 pos, on_out_of_range)
            x = self.forward(self.embed(nxt, pos), caches, pos)
            pos += 1
            rows.append(self.read_outputs(x))
        return {k: np.concatenate([r[k] for r in rows], axis=0) for k in rows[0]}

    # -- sizes ------------------------------------------------------------------------
    def allocated_params(self) -> int:
        """Entries of every weight matrix and bias as laid out (dense count, sparse or not)."""
        total = 0
        for mod in self.modules():
            if isinstance(mod, Projection):
                total += mod.weight.shape[0] * mod.weight.shape[1]
                total += mod.bias.numel() if mod.bias is not None else 0
        return total
