"""Batched decoding with a static KV cache: one prefill, then one step per position.

The cache is preallocated, (batch, heads, capacity, 2 head dims) per attention sublayer, so a
step has fixed shapes: it writes each sequence's k/v at that sequence's own position (prompts
may differ in length) and attends over a *bucket* of the cache (a power-of-two prefix that
covers every position so far), with a mask hiding each sequence's positions beyond its own.
A step is therefore one CUDA graph per bucket on a GPU (captured on first use, replayed after;
at most BUCKETS of them), optionally of the `torch.compile(fullgraph=True)`-compiled step.
Inputs are copied into the graph's static buffers; only the output columns come back. The
cache and the masks are in the model's dtype (float32, or float64: `ct.to(torch.float64)`).

A non-finite value reaching a row (unchecked inputs, a poisoned prompt) makes the decoder
recompute everything so far with the exact attention rule (`lowering.model.attend`) and stay
exact: the fast kernel may let a masked position's nan into earlier rows.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from tw_lowering.model import CompiledTransformer, additive_mask, attend, cuda_graph, finite_rows
from twdialect.errors import TwError
from twdialect.inputs import CheckedInputs

MIN_BUCKET = 64
BUCKETS = 6  # cache prefixes a step may attend over: capacity / 2^k, k < BUCKETS
FIRST_ALLOCATION = 256  # positions a cache starts with (then doubling, up to the capacity)


class DecodeError(TwError):
    """A decoder asked for more than it was built for (batch size, capacity)."""


def bucket_sizes(capacity: int) -> list[int]:
    """The cache prefixes steps attend over: capacity, capacity/2, ... (at least MIN_BUCKET, at
    most BUCKETS of them), so attending costs at most twice the positions written."""
    sizes = [capacity]
    while len(sizes) < BUCKETS and sizes[-1] // 2 >= MIN_BUCKET:
        sizes.append(sizes[-1] // 2)
    return sorted(sizes)


class Decoder:
    """KV-cache decoding of `batch` sequences of up to `capacity` positions with a compiled
    model. `prefill(prompts)` then `step(next inputs)`, each returning every sequence's output
    rows ({name: float64 (n, width)}); `step_tensors` is the on-device step (benchmarks)."""

    def __init__(self, ct: CompiledTransformer, batch: int, capacity: int,
                 cuda_graphs: bool | None = None, compile: bool | str = False):  # noqa: A002
        ct.check_stepwise("decoder")
        if batch < 1 or capacity < 1:
            raise DecodeError(f"decoder: batch and capacity must be >= 1, got {batch}, {capacity}")
        self.ct, self.batch, self.capacity = ct, batch, capacity
        self.device = dev = ct.device
        self.cuda_graphs = dev.type == "cuda" if cuda_graphs is None else bool(cuda_graphs)
        self.positions = np.zeros(batch, np.int64)  # the next position of each sequence
        self.history: list[list[CheckedInputs]] = [[] for _ in range(batch)]
        self.exact = False
        self._step_fn = self._step
        if compile:  # True: inductor; or a torch.compile backend's name
            _allow_recompiles(BUCKETS + capacity.bit_length())
            self._step_fn = torch.compile(self._step, fullgraph=True, dynamic=False,
                                          backend="inductor" if compile is True else compile)
        self._static = None  # step inputs the CUDA graphs read
        self.caches: list[torch.Tensor | None] = [None] * len(ct.layers)
        self.allocated = 0
        self._reserve(min(capacity, FIRST_ALLOCATION))

    def _reserve(self, n: int) -> None:
        """Make the cache hold at least n positions (at most `capacity`): it starts small and
        doubles, so a long `steps` costs memory only as far as the sequences get. Growing
        copies the cache and drops the captured graphs (they point at the old one)."""
        if n <= self.allocated:
            return
        size = min(self.capacity, max(n, 2 * self.allocated))
        dev, ct = self.device, self.ct
        old, self.allocated = self.caches, size
        self.caches = [_cache(layer.attn, self.batch, size, dev, ct.dtype) for layer in ct.layers]
        for new, was in zip(self.caches, old):
            if new is not None and was is not None:
                new[:, :, : was.shape[2]] = was
        self.pos_table = ct.position_table(size)
        self.buckets = bucket_sizes(size)
        self._graphs: dict[int, tuple] = {}
        self._key_positions = torch.arange(size, device=dev)
        # per head count h: the row of (sequence, head) at position 0 in a flat cache
        seq = torch.arange(self.batch, device=dev)[:, None]
        self._row_base = {h: (seq * h + torch.arange(h, device=dev)) * size
                          for h in sorted({layer.attn.n_heads for layer in ct.layers
                                           if layer.attn.active})}

    # -- prefill ------------------------------------------------------------------------
    @torch.inference_mode()
    def prefill(self, prompts: Sequence[CheckedInputs]) -> list[dict[str, np.ndarray]]:
        """Run the prompts (one per sequence, lengths may differ) and fill the cache."""
        if len(prompts) != self.batch:
            raise DecodeError(f"decoder: built for a batch of {self.batch}, got {len(prompts)}")
        lengths = np.array([p.n_positions for p in prompts])
        if lengths.max() > self.capacity:
            raise DecodeError(f"decoder: a prompt of {lengths.max()} positions exceeds the "
                              f"capacity {self.capacity}")
        self.history = [[p] for p in prompts]
        self.positions = lengths.copy()
        self._reserve(int(lengths.max()))
        cols, finite = self._prefill(prompts, self.exact)
        if not finite.all():
            self.exact = True
            cols, _ = self._prefill(prompts, True)
        return [self.ct.read_outputs(cols[i, :n]) for i, n in enumerate(lengths)]

    def _prefill(self, prompts, exact: bool):
        ct, b = self.ct, self.batch
        n = max(p.n_positions for p in prompts)
        pos = torch.arange(n, device=self.device).expand(b, n)
        x = ct.residual(ct.feeds(prompts, n), pos, self.pos_table).view(b * n, -1)
        for layer, cache in zip(ct.layers, self.caches):
            layer.forward(x, b, n, exact, cache)
        lengths = torch.as_tensor([p.n_positions for p in prompts], device=self.device)
        valid = torch.arange(n, device=self.device)[None, :] < lengths[:, None]
        finite = finite_rows(x).view(b, n) | ~valid
        return ct.output_columns(x).view(b, n, -1).cpu().numpy(), finite.cpu().numpy()

    # -- steps --------------------------------------------------------------------------
    @torch.inference_mode()
    def step(self, inputs: Sequence[CheckedInputs]) -> list[dict[str, np.ndarray]]:
        """One position more for every sequence: `inputs` (one checked position each) are fed
        at each sequence's next position; returns each sequence's new output row."""
        if len(inputs) != self.batch:
            raise DecodeError(f"decoder: built for a batch of {self.batch}, got {len(inputs)}")
        if int(self.positions.max()) >= self.capacity:
            raise DecodeError(f"decoder: the cache holds {self.capacity} positions; it is full")
        self._reserve(int(self.positions.max()) + 1)
        for h, i in zip(self.history, inputs):
            h.append(i)
        feeds = self.ct.feeds(inputs, 1)
        pos = torch.tensor(self.positions, device=self.device)  # (a copy: positions move on)
        self.positions += 1
        bucket = self._bucket()
        if self.exact:
            cols, _ = self._step(feeds, pos, bucket, True)
            return self._rows(cols.cpu().numpy())
        cols, finite = self.step_tensors(feeds, pos, bucket)
        cols, finite = cols.cpu().numpy(), finite.cpu().numpy()
        if not finite.all():  # recompute the whole history with the exact rule
            self.exact = True
            everything = [_concat(h) for h in self.history]
            cols, _ = self._prefill(everything, True)
            cols = cols[np.arange(self.batch), self.positions - 1][:, None]
        return self._rows(cols)

    def _rows(self, cols: np.ndarray) -> list[dict[str, np.ndarray]]:
        return [self.ct.read_outputs(c) for c in cols]

    def _bucket(self, rows_used: int | None = None) -> int:
        """The smallest bucket holding `rows_used` cache rows (default: every position so far,
        the step's own included: positions have already moved on)."""
        need = int(self.positions.max()) if rows_used is None else rows_used
        return next(b for b in self.buckets if b >= need)

    @torch.inference_mode()
    def step_tensors(self, feeds: dict[str, torch.Tensor], pos: torch.Tensor,
                     bucket: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The step on device tensors (feeds {name: (batch, 1, ...)}, pos (batch,) the positions
        written): output columns (batch, 1, k) and finite rows (batch, 1). On a CUDA device with
        graphs on, the inputs are copied into static buffers and the bucket's graph replayed
        (the returned tensors are overwritten by the next step). `bucket`: the cache prefix to
        attend over (default: the smallest covering pos; pass it to spare a device sync)."""
        if bucket is None:
            bucket = self._bucket(int(pos.max()) + 1)
        if not self.cuda_graphs:
            return self._step_fn(feeds, pos, bucket, False)
        if self._static is None:
            self._static = ({k: v.clone() for k, v in feeds.items()}, pos.clone())
        static_feeds, static_pos = self._static
        for k, v in feeds.items():
            static_feeds[k].copy_(v, non_blocking=True)
        static_pos.copy_(pos, non_blocking=True)
        if bucket not in self._graphs:
            self._graphs[bucket] = self._capture(bucket)
        graph, out = self._graphs[bucket]
        graph.replay()
        return out

    def _capture(self, bucket: int):
        """Capture the step for one bucket as a CUDA graph. The warm-up runs write the same k/v
        the step writes (a step is idempotent until positions move)."""
        feeds, pos = self._static
        with torch.cuda.device(self.device):
            return cuda_graph(lambda: self._step_fn(feeds, pos, bucket, False))

    def _step(self, feeds: dict[str, torch.Tensor], pos: torch.Tensor, bucket: int,
              exact: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """One position for every sequence (pure tensor code: traced by torch.compile and
        captured by CUDA graphs)."""
        ct, b = self.ct, self.batch
        at = pos.unsqueeze(1)
        x = ct.residual(feeds, at, self.pos_table).view(b, -1)
        # key j is visible to a sequence at position p when j <= p
        visible = (self._key_positions[:bucket] <= at).view(b, 1, 1, bucket)
        mask = None if exact else additive_mask(visible, ct.dtype)
        rows = {h: (base + at).view(-1) for h, base in self._row_base.items()}
        for layer, cache in zip(ct.layers, self.caches):
            a = layer.attn
            if cache is None:
                a.forward(x, b, 1)
            else:
                h, e = a.n_heads, a.head_dim
                q, kv = a.project(x, pos)  # (rotary heads: each sequence's own position)
                cache.view(-1, 2 * e).index_copy_(0, rows[h], kv.reshape(b * h, 2 * e))
                keys = cache.narrow(2, 0, bucket)  # (narrow: cheaper than slicing, per call)
                out = attend(q.view(b, h, 1, e), keys.narrow(3, 0, e), keys.narrow(3, e, e),
                             visible, exact, mask)
                a.update(x, out.reshape(b, h * e))
            layer.mlp.forward(x)
        return ct.output_columns(x).view(b, 1, -1), finite_rows(x).view(b, 1)


def _cache(attn, batch: int, capacity: int, device, dtype=torch.float32) -> torch.Tensor | None:
    """One attention sublayer's keys and values, (batch, heads, capacity, 2 head_dim) in the
    model's `dtype` (each head's k and v side by side, as the projection gives them), or None
    where it has no heads or writes nothing."""
    if not attn.active:
        return None
    return torch.zeros(batch, attn.n_heads, capacity, 2 * attn.head_dim, device=device,
                       dtype=dtype)


def _concat(parts: list[CheckedInputs]) -> CheckedInputs:
    """One sequence's prompt and fed-back positions as one input set."""
    return CheckedInputs({k: np.concatenate([np.asarray(p.values[k]) for p in parts])
                          for k in parts[0].values}, sum(p.n_positions for p in parts))


def _allow_recompiles(n: int) -> None:
    """torch.compile specializes the step per bucket: let it keep that many versions."""
    import torch._dynamo.config as cfg

    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(cfg, name):
            setattr(cfg, name, max(getattr(cfg, name), 8 * n))
