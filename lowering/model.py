"""The compiled artifact: a standard transformer as a `torch.nn.Module`, batched.

Each layer is `x = x + Attn(x)` (softmax, scale 1, output bias; causal heads, and full-mask
heads where the graph has `tw.attn ... mask full`: a second attention call) then
`x = x + W2 relu(W1 x + b1) + b2`, with per-layer head counts and hidden widths trimmed to
what the schedule uses. `forward` takes the residual stream as (batch, positions, d); the
layers add into its (batch * positions, d) rows in place.

Weights are stored *trimmed dense*: a sublayer keeps only the residual columns it reads (a
gather), the fused QKV / W1 block over them, and the columns it writes (an index_add). A
compiled layer reads a few dozen of d columns, so the model stores 2-3% of the stock layout's
entries (the layered benchmark graphs), needs no sparse formats (no per-call conversion,
`torch.compile(fullgraph=True)` traces it) and `Layer.dense_weights()` still gives the
standard matrices. Heads keep only the head dimensions some head uses (a self-attention
head's q has one entry). `docs/runtime.md` says why each choice.

`run` / `run_batch` evaluate whole sequences; `generate` / `generate_batch` step with the
static KV cache of `lowering/decode.py` and match `run` on the same sequences to the model's
round-off. A model runs in float32 (the default) or float64 (`compile(dtype="float64")`,
`ct.to(torch.float64)`): every weight, the residual, the position tables, attention and the
KV cache in that dtype, the float64 weights the sums the weight writer made before any
rounding (`ct.to` writes them again from the schedule). Attention uses `scaled_dot_product_attention(scale=1)`; where a row comes out
non-finite, the rows are recomputed with the exact rule of `weighted_values` (a masked
position's inf or nan must not reach earlier positions, as in the oracle).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from tw_lowering.machine import Machine
from tw_lowering.materialize import LayerWeights, Matrix, OutputSlot, SourceSlot, position_rows
from twdialect import ArgumentError
from twdialect.inputs import (
    CheckedInputs,
    EvaluationError,
    InputContract,
    InputSpec,
    check_feedback,
    check_generate,
    check_inputs,
)


def _index(values) -> torch.Tensor:
    return torch.as_tensor(np.asarray(values, np.int64))


def _tensor(a: np.ndarray, dtype=np.float32) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a, dtype))


def _used(*index_arrays) -> np.ndarray:
    parts = [np.asarray(a, np.int64) for a in index_arrays if len(a)]
    return np.unique(np.concatenate(parts)) if parts else np.zeros(0, np.int64)


def _block(m: Matrix, row_of: np.ndarray, col_of: np.ndarray, shape) -> np.ndarray:
    """The entries of `m` whose row and column survive trimming, as a dense (rows, cols) block;
    `row_of`/`col_of` map old indices to new ones (-1: dropped, only where the other factor of
    every product it enters is zero). In the dtype of `m`'s values."""
    out = np.zeros(shape, m.vals.dtype)
    r, c = row_of[m.rows], col_of[m.cols]
    keep = (r >= 0) & (c >= 0)
    out[r[keep], c[keep]] = m.vals[keep]
    return out


# A matrix-vector kernel (one output column) sums each dot product in strided SIMD lanes;
# a decomposed staircase's hinges telescope only when summed in order, as the matrix kernels
# do: floor_int on [-20, 20] rounds 1.2e-4 off through a one-column product, 6e-8 through two.
# So every summing projection keeps at least two output columns (zeros, sliced off).
MIN_OUT = 2


def _padded(block: np.ndarray) -> np.ndarray:
    """`block` with zero columns appended up to MIN_OUT (see there)."""
    if 0 < block.shape[1] < MIN_OUT:
        block = np.concatenate([block, np.zeros((block.shape[0], MIN_OUT - block.shape[1]),
                                                block.dtype)], axis=1)
    return block


def affine(a: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ w + b with the bias added last, on every device: the decomposed constructions keep
    a cancelling pair of hinges exact only when their difference is formed before the bias
    (2 * 9600001 - 2 * 9600000 - 1 is 1 that way, 0 bias-first). cuBLAS adds the bias in its
    epilogue; a CPU addmm may start the accumulator with it, so the CPU adds it after."""
    if a.is_cuda:
        return torch.addmm(b, a, w)
    return (a @ w).add_(b)


def _position_map(keep: np.ndarray, size: int) -> np.ndarray:
    out = np.full(size, -1, np.int64)
    out[keep] = np.arange(len(keep))
    return out


# Head dimensions are kept in multiples of this (zero dimensions added, as d_head allows): the
# fused attention kernels need q, k and v widths divisible by 4 in float32, and otherwise
# fall back to several kernels.
HEAD_ALIGN = 4


def _aligned(dims: set[int], d_head: int) -> list[int]:
    """`dims` (at least one) plus unused dimensions up to a multiple of HEAD_ALIGN."""
    dims = set(dims) or {0}
    spare = (j for j in range(d_head) if j not in dims)
    while len(dims) % HEAD_ALIGN and len(dims) < d_head:
        dims.add(next(spare))
    return sorted(dims)


class Attention(nn.Module):
    """Trimmed attention on the (positions, d) residual: gather `read`, fused QKV, SDPA, W_o,
    index_add into `write`.

    Heads keep `head_dim` dimensions: those where some head has both a q and a k weight, or
    both a v and an output weight (a dropped one only ever multiplies a zero weight), padded
    to HEAD_ALIGN. The fused projection gives q, then per head its k and v side by side: the
    KV cache stores that part as it is, (batch, heads, capacity, 2 head_dim)."""

    def __init__(self, w: LayerWeights, d: int, d_head: int):
        super().__init__()
        self.d, self.d_head = d, d_head
        self.n_heads = h = w.n_heads
        # rotary heads rotate head dims 0..dims-1 in planes (p, p + dims/2): all are kept
        rope = w.head_rope() if h else np.zeros((0, 2))
        rot_dims = int(rope[:, 1].max(initial=0))
        qk = _aligned({c % d_head for c in set(w.wq.cols.tolist()) & set(w.wk.cols.tolist())}
                      | set(range(rot_dims)), d_head)
        v = _aligned({c % d_head for c in set(w.wv.cols.tolist()) & set(w.wo.rows.tolist())},
                     d_head)
        self.head_dim = e = max(len(qk), len(v))
        qk, v = _widened(qk, e, d_head), _widened(v, e, d_head)
        read = _used(w.wq.rows, w.wk.rows, w.wv.rows) if h else np.zeros(0, np.int64)
        write = _used(w.wo.cols if h else [], np.nonzero(w.bo)[0])
        row_of = _position_map(read, d)
        head, dim = np.divmod(np.arange(h * d_head), d_head)
        qk_at = _position_map(np.array(qk, np.int64), d_head)[dim]
        v_at = _position_map(np.array(v, np.int64), d_head)[dim]
        q_col = np.where(qk_at >= 0, head * e + qk_at, -1)
        k_col = np.where(qk_at >= 0, h * e + head * 2 * e + qk_at, -1)
        v_col = np.where(v_at >= 0, h * e + head * 2 * e + e + v_at, -1)
        shape = (len(read), 3 * h * e)
        wqkv = (_block(w.wq, row_of, q_col, shape) + _block(w.wk, row_of, k_col, shape)
                + _block(w.wv, row_of, v_col, shape))
        o_row = np.where(v_at >= 0, head * e + v_at, -1)  # heads' outputs: (heads, head_dim)
        dt = w.dtype
        self.register_buffer("read", _index(read))
        self.register_buffer("w_qkv", _tensor(wqkv, dt))
        self.register_buffer("write", _index(write))
        self.register_buffer("w_o", _tensor(_padded(_block(w.wo, o_row, _position_map(write, d),
                                                           (h * e, len(write)))), dt))
        self.register_buffer("b_o", _tensor(_padded(w.bo[write][None])[0], dt))
        self.register_buffer("qk_dims", _index(qk), persistent=False)
        self.register_buffer("v_dims", _index(v), persistent=False)
        self.n_write = len(write)
        self.active = bool(h) and self.n_write > 0
        # per head: its lookup (lowering/index_heads.py), read by the index decoders
        from tw_lowering.index_heads import SCAN

        self.plans = tuple(w.head_plans) if len(w.head_plans) == h else (SCAN,) * h
        # Per-head mask kinds: full-mask heads (every query sees the whole sequence) run as a
        # second attention call beside the causal ones; a layer without them keeps the one
        # causal call (`is_causal`), unchanged.
        full = w.head_is_full() if h else np.zeros(0, bool)
        self.n_full = int(full.sum())
        if self.n_full:
            causal_idx, full_idx = np.nonzero(~full)[0], np.nonzero(full)[0]
            order = np.argsort(np.concatenate([causal_idx, full_idx]), kind="stable")
            self.register_buffer("causal_heads", _index(causal_idx), persistent=False)
            self.register_buffer("full_heads", _index(full_idx), persistent=False)
            self.register_buffer("head_order", _index(order), persistent=False)
        self._rope_tables(rope, qk, dt)

    def _rope_tables(self, rope: np.ndarray, qk: list[int], dtype=np.float32) -> None:
        """Per rotary head and kept head dim: its plane's frequency base^(-2p/dims) (float64;
        0 where the dim is not rotated), its partner in the plane (rotate_half: dim c < dims/2
        pairs with c + dims/2, signs -1 and +1) and whether it turns at all. A layer without
        rotary heads keeps none of this and projects exactly as before."""
        rot = np.nonzero(rope[:, 1] > 0)[0]
        self.n_rope = len(rot)
        if not self.n_rope:
            return
        e = self.head_dim
        at = _position_map(np.array(qk, np.int64), self.d_head)
        freq = np.zeros((len(rot), e))
        partner = np.tile(np.arange(e), (len(rot), 1))
        sign = np.zeros((len(rot), e), dtype)
        for r, head in enumerate(rot):
            base, dims = float(rope[head, 0]), int(rope[head, 1])
            half = dims // 2
            for i, c in enumerate(qk[:e]):
                if c >= dims:
                    continue
                p = c % half
                freq[r, i] = base ** (-2.0 * p / dims)
                partner[r, i] = at[c + half if c < half else c - half]
                sign[r, i] = -1.0 if c < half else 1.0
        self.register_buffer("rope_heads", _index(rot), persistent=False)
        self.register_buffer("rope_freq", torch.from_numpy(freq), persistent=False)
        self.register_buffer("rope_partner", _index(partner + np.arange(len(rot))[:, None] * e
                                                     ).reshape(-1), persistent=False)
        self.register_buffer("rope_sign", _tensor(sign, dtype), persistent=False)
        self.register_buffer("rope_turns", torch.from_numpy(sign != 0), persistent=False)

    def _turn(self, y: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """y (n, rotary heads, head_dim) rotated by each row's absolute position: cos and sin
        of the angle pos * freq computed in float64, rounded to the model's dtype (torchwright
        rounds the angle itself to float32, tw the result only); unrotated dims pass
        unchanged."""
        ang = positions.to(torch.float64)[:, None, None] * self.rope_freq
        cos, sin = torch.cos(ang).to(y.dtype), torch.sin(ang).to(y.dtype)
        partner = y.reshape(y.shape[0], -1).index_select(1, self.rope_partner).view_as(y)
        return torch.where(self.rope_turns, y * cos + partner * (sin * self.rope_sign), y)

    def rotate(self, q: torch.Tensor, kv: torch.Tensor, positions: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """q (n, heads * head_dim) and kv (n, heads * 2 head_dim) with the rotary heads' q and
        k rotated by `positions` (n,), the rows' absolute positions; v is never rotated."""
        n, h, e = q.shape[0], self.n_heads, self.head_dim
        qh, kvh = q.view(n, h, e), kv.view(n, h, 2 * e)
        heads = self.rope_heads
        qh = qh.index_copy(1, heads, self._turn(qh.index_select(1, heads), positions))
        kvr = kvh.index_select(1, heads)
        kvr = torch.cat([self._turn(kvr[..., :e], positions), kvr[..., e:]], -1)
        kvh = kvh.index_copy(1, heads, kvr)
        return qh.reshape(n, h * e), kvh.reshape(n, 2 * h * e)

    def project(self, x: torch.Tensor, positions: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """q (n, heads * head_dim) and kv (n, heads * 2 head_dim) of residual rows x, the
        rotary heads' q and k rotated by `positions` (n,): each row's absolute position (a
        layer with rotary heads needs them)."""
        qkv = x.index_select(1, self.read) @ self.w_qkv
        q, kv = qkv.split([self.n_heads * self.head_dim, 2 * self.n_heads * self.head_dim], 1)
        if self.n_rope:
            q, kv = self.rotate(q, kv, positions)
        return q, kv

    def sequences(self, x: torch.Tensor, b: int, t: int, exact: bool = False,
                  valid: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Attention over b whole sequences of t positions (x: (b * t, d)): the heads' outputs
        (b * t, heads * head_dim) and the keys and values (b, heads, t, 2 head_dim). Causal
        heads see keys j <= i; full-mask heads see every key of their sequence, `valid` (b, t)
        bool saying which positions are real where sequences are padded (None: all are)."""
        h, e = self.n_heads, self.head_dim
        positions = None
        if self.n_rope:  # whole sequences start at position 0
            positions = torch.arange(t, device=x.device).repeat(b)
        q, kv = self.project(x, positions)
        q = q.view(b, t, h, e).transpose(1, 2)
        kv = kv.view(b, t, h, 2 * e).transpose(1, 2)
        if not self.n_full:
            out = attend(q, kv[..., :e], kv[..., e:], None, exact)
        else:
            out = self._mixed(q, kv, t, exact, valid)
        return out.transpose(1, 2).reshape(b * t, h * e), kv

    def _mixed(self, q, kv, t: int, exact: bool, valid: torch.Tensor | None) -> torch.Tensor:
        """A layer with full-mask heads: one call for the causal heads (is_causal), one for
        the full ones over the real keys of each sequence, the heads put back in order."""
        e = self.head_dim
        parts = []
        if self.n_full < self.n_heads:
            qc, kvc = q.index_select(1, self.causal_heads), kv.index_select(1, self.causal_heads)
            parts.append(attend(qc, kvc[..., :e], kvc[..., e:], None, exact))
        if valid is None:
            keys = torch.ones(1, 1, 1, t, dtype=torch.bool, device=q.device)
        else:
            keys = valid.view(valid.shape[0], 1, 1, t)
        qf, kvf = q.index_select(1, self.full_heads), kv.index_select(1, self.full_heads)
        parts.append(attend(qf, kvf[..., :e], kvf[..., e:], keys, exact))
        return torch.cat(parts, 1).index_select(1, self.head_order)

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """q k^T (heads, t, t) of one whole sequence x (t, d), unscaled as the heads use them,
        at -inf where a head cannot see the key (a causal head's later positions)."""
        t, h, e = x.shape[0], self.n_heads, self.head_dim
        if not self.active:
            return x.new_zeros(h, t, t)
        q, kv = self.project(x, torch.arange(t, device=x.device) if self.n_rope else None)
        q = q.view(t, h, e).transpose(0, 1)
        k = kv.view(t, h, 2 * e)[..., :e].transpose(0, 1)
        visible = torch.ones(h, t, t, dtype=torch.bool, device=x.device).tril()
        if self.n_full:
            visible[self.full_heads] = True
        return (q @ k.transpose(-1, -2)).masked_fill(~visible, float("-inf"))

    def update(self, x: torch.Tensor, heads_out: torch.Tensor | None) -> torch.Tensor:
        """x (n, d) with this sublayer's output added into its columns."""
        c = self.n_write
        if not c:
            return x
        if heads_out is None:  # no heads: the output bias alone
            return x.index_add_(1, self.write, self.b_o[:c].expand(x.shape[0], c))
        delta = affine(heads_out, self.w_o, self.b_o)
        return x.index_add_(1, self.write, delta if delta.shape[1] == c else delta[:, :c])

    def forward(self, x: torch.Tensor, b: int, t: int, exact: bool = False,
                cache: torch.Tensor | None = None, valid: torch.Tensor | None = None
                ) -> torch.Tensor:
        """x (b * t, d) plus this sublayer, over b whole sequences of t positions; the keys and
        values also go to positions 0..t-1 of `cache` when given (a decoder's prefill);
        `valid`: see `sequences`."""
        if not self.active:
            return self.update(x, None)
        heads_out, kv = self.sequences(x, b, t, exact, valid)
        if cache is not None:
            cache[:, :, :t] = kv
        return self.update(x, heads_out)


def _widened(dims: list[int], n: int, d_head: int) -> list[int]:
    """`dims` plus unused dimensions up to n (q/k and v share one head width)."""
    taken = set(dims)  # (a list's `in` made this quadratic in d_head)
    spare = [j for j in range(d_head) if j not in taken]
    return sorted(dims + spare[: n - len(dims)])


def attend(q, k, v, visible: torch.Tensor | None, exact: bool,
           mask: torch.Tensor | None = None) -> torch.Tensor:
    """Softmax(q k^T) v, unscaled, over keys `visible` to each query ((b, 1, t, s) bool, or
    (b, 1, 1, s) for full-mask heads; None: causal over whole sequences; `mask`: the same as
    an additive float mask, made once for every layer), by the fused kernel.

    The fused kernel may let a masked key's inf or nan into a row (0 * nan); the caller sees
    the row come out non-finite and recomputes with `exact`: the same kernel over keys and
    values whose non-finite entries are zeroed (a row that sees none of them gets the very
    same numbers), and the oracle's rule (`weighted_values`) for the rows that do see one."""
    if visible is not None and mask is None:
        mask = additive_mask(visible, q.dtype)
    if not exact:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                              is_causal=visible is None, scale=1.0)
    bad_k, bad_v = ~torch.isfinite(k).all(-1), ~torch.isfinite(v).all(-1)  # (b, h, s)
    fast = attend(q, torch.where(bad_k[..., None], 0.0, k), torch.where(bad_v[..., None], 0.0, v),
                  visible, False, mask)
    if visible is None:
        t, s = q.shape[-2], k.shape[-2]
        visible = torch.ones(t, s, dtype=torch.bool, device=q.device).tril(s - t)
    sees_bad = (visible & (bad_k | bad_v)[..., None, :]).any(-1) | ~torch.isfinite(q).all(-1)
    if not bool(sees_bad.any()):
        return fast
    logits = q @ k.transpose(-1, -2)  # no 1/sqrt(d_head): the graph's attention is unscaled
    p = torch.softmax(logits.masked_fill(~visible, float("-inf")), dim=-1)
    return torch.where(sees_bad[..., None], weighted_values(p, v), fast)


def additive_mask(visible: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """0 where visible, -inf elsewhere, in the queries' `dtype` (what the fused kernel takes
    without converting)."""
    return torch.where(visible, torch.zeros((), dtype=dtype, device=visible.device),
                       float("-inf"))


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


class Mlp(nn.Module):
    """Trimmed MLP: gather `read`, relu(x W1 + b1) W2 + b2, index_add into `write`.

    A layer with swish or gated neurons (tw.mlp act swish / up) computes lanes
    act(z) * up instead: z = x W1 + b1, act = relu or silu per neuron (`swish` mask), up =
    x Wu + bu for gated neurons and exactly 1 (bu = 1, a zero Wu column) for the rest. An
    all-relu layer without gated neurons keeps the plain path (`plain`)."""

    def __init__(self, w: LayerWeights, d: int):
        super().__init__()
        self.d = d
        self.n_neurons = n = w.n_neurons
        self.plain = w.plain_mlp
        gated = w.wu is not None
        read = _used(w.w1.rows, w.wu.rows if gated else [])
        write = _used(w.w2.cols if n else [], np.nonzero(w.b2)[0])
        everyone = np.arange(n, dtype=np.int64)
        dt = w.dtype
        self.register_buffer("read", _index(read))
        self.register_buffer("w1", _tensor(_padded(_block(w.w1, _position_map(read, d), everyone,
                                                          (len(read), n))), dt))
        self.register_buffer("b1", _tensor(_padded(w.b1[None])[0], dt))
        self.register_buffer("write", _index(write))
        self.register_buffer("w2", _tensor(_padded(np.concatenate([_block(
            w.w2, everyone, _position_map(write, d), (n, len(write))), np.zeros(
                (len(self.b1) - n, len(write)), dt)])), dt))  # (rows of padded neurons)
        self.register_buffer("b2", _tensor(_padded(w.b2[write][None])[0], dt))
        self.n_write = len(write)
        padded = len(self.b1)
        # swish: (padded neurons,) bool, or None for an all-relu layer; wu/bu: None unless
        # some neuron is gated (padded neurons: relu, up 1; their W2 rows are zero anyway).
        self.n_swish = int(w.swish.sum()) if len(w.swish) else 0
        self.n_gated = 0
        swish = np.zeros(padded, bool)
        swish[:len(w.swish)] = w.swish[:n] if len(w.swish) else False
        self.register_buffer("swish", torch.from_numpy(swish) if self.n_swish else None)
        if gated:
            bu = np.ones(padded, dt)
            bu[:n] = w.bu
            wu = _block(w.wu, _position_map(read, d), everyone, (len(read), n))
            self.n_gated = int(np.count_nonzero((wu != 0).any(axis=0) | (w.bu != 1.0)))
            self.register_buffer("wu", _tensor(np.concatenate(
                [wu, np.zeros((len(read), padded - n), dt)], axis=1), dt))
            self.register_buffer("bu", _tensor(bu, dt))
        else:
            self.register_buffer("wu", None)
            self.register_buffer("bu", None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (n, d) plus this sublayer."""
        c = self.n_write
        if not c:
            return x
        if not self.n_neurons:
            return x.index_add_(1, self.write, self.b2[:c].expand(x.shape[0], c))
        a = x.index_select(1, self.read)
        if not self.plain:
            hidden = self.lanes(a)
        elif a.is_cuda:  # relu in the matrix kernel's epilogue, after the bias
            hidden = torch._addmm_activation(self.b1, a, self.w1)
        else:
            hidden = torch.relu_(affine(a, self.w1, self.b1))
        out = affine(hidden, self.w2, self.b2)
        return x.index_add_(1, self.write, out if out.shape[1] == c else out[:, :c])


    def lanes(self, a: torch.Tensor) -> torch.Tensor:
        """act(z) * up over the read columns `a`: relu or silu per neuron, times the up
        projection where the layer has gated neurons."""
        z = affine(a, self.w1, self.b1)
        if self.swish is None:
            hidden = torch.relu(z)
        else:
            hidden = torch.where(self.swish, F.silu(z), torch.relu(z))
        if self.wu is not None:
            hidden = hidden * affine(a, self.wu, self.bu)
        return hidden


class Layer(nn.Module):
    def __init__(self, w: LayerWeights, machine: Machine):
        super().__init__()
        self.attn = Attention(w, machine.d, machine.d_head)
        self.mlp = Mlp(w, machine.d)

    def forward(self, x: torch.Tensor, b: int, t: int, exact: bool = False,
                cache: torch.Tensor | None = None, valid: torch.Tensor | None = None
                ) -> torch.Tensor:
        """x (b * t, d) plus this layer, over b whole sequences of t positions (`cache`,
        `valid`: see `Attention.forward`)."""
        return self.mlp(self.attn(x, b, t, exact, cache, valid))

    def dense_weights(self) -> dict[str, torch.Tensor]:
        """This layer in the stock layout (nn.Linear's (out, in) weights over all d columns,
        heads of width d_head): wq, wk, wv, wo, bo, w1, b1, w2, b2; and where the MLP is not
        plain relu, swish (per neuron) and the gated lanes' wu, bu."""
        a, m = self.attn, self.mlp
        d, dh, h, e = a.d, a.d_head, a.n_heads, a.head_dim
        dev = a.w_qkv.device
        zeros = functools.partial(torch.zeros, device=dev, dtype=a.w_qkv.dtype)
        out = {}
        head = torch.arange(h, device=dev)[:, None]
        at = {"wq": head * e, "wk": h * e + head * 2 * e, "wv": h * e + head * 2 * e + e}
        for name, dims in (("wq", a.qk_dims), ("wk", a.qk_dims), ("wv", a.v_dims)):
            full = zeros(d, h * dh)
            cols = (head * dh + dims[None, :]).reshape(-1)
            block = a.w_qkv[:, (at[name] + torch.arange(e, device=dev)[None, :]).reshape(-1)]
            full[a.read[:, None], cols[None, :]] = block
            out[name] = full.T.contiguous()
        wo = zeros(h * dh, d)
        rows = (head * dh + a.v_dims[None, :]).reshape(-1)
        ca, cm, n = len(a.write), len(m.write), m.n_neurons
        wo[rows[:, None], a.write[None, :]] = a.w_o[:, :ca]
        out["wo"] = wo.T.contiguous()
        out["bo"] = zeros(d).index_copy(0, a.write, a.b_o[:ca])
        w1 = zeros(d, n)
        w1[m.read] = m.w1[:, :n]
        w2 = zeros(n, d)
        w2[:, m.write] = m.w2[:n, :cm]
        out.update(w1=w1.T.contiguous(), b1=m.b1[:n].clone(), w2=w2.T.contiguous(),
                   b2=zeros(d).index_copy(0, m.write, m.b2[:cm]))
        if m.swish is not None:  # (n,) bool: swish neurons (relu elsewhere)
            out["swish"] = m.swish[:n].clone()
        if m.wu is not None:  # gated lanes: act(z) * (x wu + bu), bu = 1 where not gated
            wu = zeros(d, n)
            wu[m.read] = m.wu[:, :n]
            out.update(wu=wu.T.contiguous(), bu=m.bu[:n].clone())
        return out


def _contract_of(schedule, sources: list[SourceSlot]) -> InputContract:
    """The compiled graph's declared input contract; from the source slots alone (widths and
    vocabularies, no ranges) when the model was built without its schedule."""
    if schedule is not None:
        return InputContract.of(schedule.tg.graph)
    tables = [s.table.shape[0] for s in sources if s.kind == "pos_table"]
    return InputContract(tuple(
        InputSpec(s.name, s.kind, len(s.cols) if s.kind == "input" else 1,
                  vocab=s.table.shape[0] if s.table is not None else 0)
        for s in sources if s.kind in ("input", "embedding")),
        table_len=min(tables) if tables else None)


class CompiledTransformer(nn.Module):
    """A compiled tw graph. `run(inputs)` has the contract of `twdialect.evaluate`: the same
    inputs are accepted or refused with the same message (`twdialect.inputs.check_inputs`),
    since the contract is read from the compiled graph's own declarations."""

    def __init__(self, machine: Machine, weights: list[LayerWeights], sources: list[SourceSlot],
                 outputs: list[OutputSlot], stats=None, schedule=None,
                 contract: InputContract | None = None):
        super().__init__()
        self.machine = machine
        self.outputs = outputs
        self.stats = stats
        self.schedule = schedule
        self.contract = contract or _contract_of(schedule, sources)
        self._pos_table: torch.Tensor | None = None
        self._forward_graphs: dict[tuple, tuple] = {}
        self._shapes_seen: dict[tuple, int] = {}
        self._build(weights, sources, _dtype_of(weights, sources))

    def _build(self, weights: list[LayerWeights], sources: list[SourceSlot], dtype) -> None:
        """The layers and the input stage's tables from `weights` and `sources`, stored in
        `dtype` (np.float32 or np.float64), on the CPU; what `to` redoes for another dtype."""
        machine = self.machine
        self._np_dtype = np.dtype(dtype)
        self.layers = nn.ModuleList(Layer(w, machine) for w in weights)
        self.sources = sources
        # (plain Python for traced code: torch.compile guards on numpy arrays it touches)
        self._source_plan = [(s.kind, s.name, len(s.cols)) for s in sources]
        # the most positions a graph's own position tables hold (None: no such table)
        self.position_rows = min((len(s.table) for s in sources if s.kind == "pos_table"),
                                 default=None)
        for i, s in enumerate(sources):  # (device copies: the residual is built on the device)
            self.register_buffer(f"source_cols_{i}", _index(s.cols), persistent=False)
            if s.kind in ("embedding", "pos_table"):
                self.register_buffer(f"source_table_{i}", _tensor(s.table, dtype),
                                     persistent=False)
        blank = np.zeros(machine.d, dtype)
        blank[machine.CONST_COL] = 1.0
        self.register_buffer("blank_row", _tensor(blank, dtype), persistent=False)
        self.register_buffer("out_rows", _index(np.concatenate(
            [o.rows for o in self.outputs]) if self.outputs else []), persistent=False)
        self._pos_table = None
        self._forward_graphs, self._shapes_seen = {}, {}
        if self.stats is not None:
            self.stats.dtype = self._np_dtype.name
        # full-mask heads anywhere: the model runs on whole sequences only (no KV-cache steps),
        # and a padded batch tells those heads which positions are real
        self.full_heads = sum(layer.attn.n_full for layer in self.layers)
        # rotary heads (tw.attn rope ...): their q and k turn by absolute position
        self.rope_heads = sum(layer.attn.n_rope for layer in self.layers)
        # swish and gated neurons (tw.mlp act swish / up): not the stock relu MLP
        self.swish_neurons = sum(layer.mlp.n_swish for layer in self.layers)
        self.gated_neurons = sum(layer.mlp.n_gated for layer in self.layers)

    @property
    def n_layers(self) -> int:
        return len(self.layers)

    @property
    def dtype(self) -> torch.dtype:
        """What every sublayer computes in: torch.float32 (the default) or torch.float64."""
        return TORCH_DTYPES[self._np_dtype.name]

    def to(self, *args, **kwargs):
        """`nn.Module.to` (a device, a dtype, or both: `ct.to("cuda", torch.float64)`), where a
        dtype is the model's: torch.float32 or torch.float64 (or their names), and changing it
        writes the weights again in it from the schedule (a float64 model gets the weight
        writer's float64 sums, not float32 numbers widened). A model built without its
        schedule casts its weights. Anything else is one ArgumentError."""
        device, dtype, non_blocking = _parse_to(args, kwargs)
        if dtype is not None and dtype != self._np_dtype:
            where = self.device
            self._redo_in(dtype)
            device = where if device is None else device
        if device is not None:
            try:
                super().to(device=device, non_blocking=non_blocking)
            except (RuntimeError, AssertionError) as e:  # (a device this machine lacks)
                first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                raise ArgumentError(f"to: cannot move the model to {device}: {first}") from None
        return self

    def double(self):
        """The model in float64 (`to(torch.float64)`)."""
        return self.to(torch.float64)

    def float(self):  # noqa: A003
        """The model in float32 (`to(torch.float32)`)."""
        return self.to(torch.float32)

    def half(self):
        raise ArgumentError("half: a compiled model runs in float32 or float64 only; float16 "
                            "cannot hold its exact constructions")

    def bfloat16(self):
        raise ArgumentError("bfloat16: a compiled model runs in float32 or float64 only; "
                            "bfloat16 cannot hold its exact constructions")

    def _redo_in(self, dtype: np.dtype) -> None:
        """The layers and tables in `dtype`, on the CPU: written again from the schedule where
        the model has it (the weight writer's float64 sums, rounded once for float32, exactly
        as a compile in that dtype writes them), else its own weights cast."""
        if self.schedule is not None:
            from tw_lowering.materialize import materialize

            weights, sources, _ = materialize(self.schedule, dtype)
            self._build(weights, sources, dtype)
            return
        self._np_dtype = np.dtype(dtype)
        if self.stats is not None:
            self.stats.dtype = self._np_dtype.name
        torch_dtype = TORCH_DTYPES[self._np_dtype.name]
        for mod in self.modules():
            for name, buf in mod._buffers.items():  # (rope_freq stays float64: it is angles)
                if buf is not None and buf.is_floating_point() and name != "rope_freq":
                    mod._buffers[name] = buf.to(torch_dtype)
        self.sources = [SourceSlot(s.kind, s.name, s.cols, None if s.table is None else
                                   s.table.astype(dtype), s.pos_width) for s in self.sources]
        self._pos_table, self._forward_graphs, self._shapes_seen = None, {}, {}

    def _apply(self, fn, *args, **kwargs):
        # (moving the weights leaves captured graphs pointing at the old ones)
        self._forward_graphs, self._shapes_seen = {}, {}
        return super()._apply(fn, *args, **kwargs)

    @property
    def device(self) -> torch.device:
        """Where the weights live (`ct.to("cuda")` moves the model; inputs follow)."""
        return self.out_rows.device

    # -- the input stage ------------------------------------------------------------------
    def position_table(self, n: int) -> torch.Tensor:
        """pos_encoding features (computed in float64, stored in the model's dtype, without the
        machine's position column) for positions 0..n-1 or more, on the model's device. Kept, and grown
        to the next power of two when a longer one is asked for."""
        width = max((s.pos_width for s in self.sources if s.kind == "pos"), default=1)
        t = self._pos_table
        if t is None or t.shape[0] < n or t.device != self.device or t.dtype != self.dtype:
            size = max(64, 1 << max(0, n - 1).bit_length())
            with torch.inference_mode(False):  # (an ordinary tensor, whoever asks first)
                self._pos_table = _tensor(position_rows(0, size, width)[:, 1:],
                                          self._np_dtype).to(self.device)
        return self._pos_table

    def residual(self, feeds: Mapping[str, torch.Tensor], positions: torch.Tensor,
                 pos_table: torch.Tensor) -> torch.Tensor:
        """The residual stream before layer 0, built on the device: `positions` (b, t) absolute
        positions, `pos_table` from `position_table` (covering them), `feeds` {name: (b, t,
        width) values in the model's dtype, or (b, t) int64 token ids}."""
        m = self.machine
        n = positions.numel()
        flat = positions.reshape(n)
        x = self.blank_row.expand(n, m.d).clone()  # zeros but the constant column's 1
        x.select(1, m.POS_COL).copy_(flat)  # (copy_ converts; cheaper than item assignment)
        for i, (kind, name, width) in enumerate(self._source_plan):
            cols = getattr(self, f"source_cols_{i}")
            if kind == "pos":
                rows = pos_table.index_select(0, flat)[:, :width]
            elif kind == "pos_table":  # the graph's own table: row i at position i
                rows = getattr(self, f"source_table_{i}").index_select(0, flat)
            elif kind == "embedding":
                rows = getattr(self, f"source_table_{i}").index_select(0, feeds[name].reshape(n))
            else:
                rows = feeds[name].reshape(n, width)
            x.index_copy_(1, cols, rows)
        return x.view(*positions.shape, m.d)

    def feeds(self, checked: Sequence[CheckedInputs], n: int | None = None
              ) -> dict[str, torch.Tensor]:
        """Checked inputs of a batch as device tensors padded to `n` positions (padding repeats
        the last position: values the graph accepts, in rows nothing earlier reads)."""
        n = n or max(c.n_positions for c in checked)
        out = {}
        for spec in self.contract.specs:
            rows = []
            for c in checked:
                a = np.asarray(c.values[spec.name])
                pad = n - len(a)
                rows.append(np.concatenate([a, np.repeat(a[-1:], pad, axis=0)]) if pad else a)
            stacked = np.stack(rows)
            out[spec.name] = (torch.from_numpy(stacked.astype(np.int64)) if spec.kind == "embedding"
                              else torch.from_numpy(stacked.astype(self._np_dtype)))
            out[spec.name] = out[spec.name].to(self.device, non_blocking=True)
        return out

    def embed(self, inputs: Mapping[str, np.ndarray] | CheckedInputs, start: int = 0,
              on_out_of_range: str = "error", n_positions: int | None = None) -> torch.Tensor:
        """The residual stream (1, n, d) before layer 0 for positions start..start+n-1. `inputs`
        are checked against the graph's contract (see `run`) unless already checked."""
        if not isinstance(inputs, CheckedInputs):
            inputs = check_inputs(self.contract, inputs, on_out_of_range, n_positions, start)
        n = inputs.n_positions
        pos = torch.arange(start, start + n, device=self.device).unsqueeze(0)
        return self.residual(self.feeds([inputs]), pos, self.position_table(start + n))

    def output_columns(self, x: torch.Tensor) -> torch.Tensor:
        """The residual columns the outputs read (gathered on the device)."""
        return x.index_select(-1, self.out_rows)

    def read_outputs(self, cols: np.ndarray) -> dict[str, np.ndarray]:
        """{name: float64 (n, width)} from one sequence's output columns (as `output_columns`
        gives them, on the host); a literal component's scale is applied in float64."""
        plan = self.__dict__.get("_output_plan")
        if plan is None or plan[0] is not self.outputs:  # (one multiply, then views)
            spans, at = [], 0
            for o in self.outputs:
                spans.append((o.name, at, at + len(o.rows)))
                at += len(o.rows)
            scale = (np.concatenate([np.asarray(o.scale, np.float64).reshape(-1)
                                     for o in self.outputs]) if self.outputs else np.zeros(0))
            plan = self.__dict__["_output_plan"] = (self.outputs, spans, scale)
        scaled = np.asarray(cols, np.float64) * plan[2]
        return {name: scaled[:, a:b] for name, a, b in plan[1]}

    # -- running ----------------------------------------------------------------------
    @torch.no_grad()
    def forward(self, x: torch.Tensor, exact: bool = False, valid: torch.Tensor | None = None
                ) -> torch.Tensor:
        """The residual after every layer, for whole sequences x (b, t, d) (position 0 first;
        x itself is left alone). `valid` (b, t) bool: the real positions of padded sequences,
        which full-mask heads need (None: every position is real; causal heads never look at
        the padding after a sequence). Traceable: `torch.compile(ct, fullgraph=True)`."""
        b, t, d = x.shape
        rows = x.reshape(b * t, d).clone()  # the sublayers add into the residual in place
        for layer in self.layers:
            layer(rows, b, t, exact, None, valid)
        return rows.view(b, t, d)

    @torch.no_grad()
    def trace(self, x: torch.Tensor) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """One whole sequence x (t, d) through the model a sublayer at a time: the residual
        after every sublayer (attention, then MLP, per layer; copies) and every attention
        sublayer's logits (`Attention.logits`, taken from the residual it reads)."""
        x = x.clone()
        t = x.shape[0]
        residuals, logits = [], []
        for layer in self.layers:
            logits.append(layer.attn.logits(x))
            layer.attn(x, 1, t)
            residuals.append(x.clone())
            layer.mlp(x)
            residuals.append(x.clone())
        return residuals, logits

    @torch.inference_mode()
    def graphed_forward(self, x: torch.Tensor, valid: torch.Tensor | None = None
                        ) -> torch.Tensor:
        """`forward`, replayed as a CUDA graph on a GPU once a shape comes back (the eager pass
        is bound by launching ~10 kernels a layer: 21 ms for 92 layers on an H100, whatever
        the positions). The result is overwritten by the next call of the same shape. At most
        FORWARD_GRAPHS shapes are kept; elsewhere this is `forward`."""
        if x.device.type != "cuda":
            return self.forward(x, valid=valid)
        key = tuple(x.shape) if valid is None else (tuple(x.shape), "valid")
        graphs = self._forward_graphs
        if key not in graphs:
            self._shapes_seen[key] = self._shapes_seen.get(key, 0) + 1
            if self._shapes_seen[key] < 2:
                return self.forward(x, valid=valid)
            if len(graphs) >= FORWARD_GRAPHS:
                graphs.pop(next(iter(graphs)))
            static = x.clone()
            static_valid = None if valid is None else valid.clone()
            graphs[key] = (static, static_valid,
                           *cuda_graph(lambda: self.forward(static, valid=static_valid)))
        static, static_valid, graph, out = graphs.pop(key)
        graphs[key] = (static, static_valid, graph, out)  # (most recently used last)
        static.copy_(x)
        if valid is not None:
            static_valid.copy_(valid)
        graph.replay()
        return out

    def run(self, inputs: Mapping[str, np.ndarray], n_positions: int | None = None,
            on_out_of_range: str = "error") -> dict[str, np.ndarray]:
        """The outputs at every position, as `twdialect.evaluate` gives them: inputs outside
        the graph's promises raise a one-line EvaluationError; `on_out_of_range="clamp"`
        clamps values into their declared ranges, `"unchecked"` feeds them as they are (the
        match with the oracle is then not promised)."""
        return self.run_batch([inputs], n_positions, on_out_of_range)[0]

    @torch.inference_mode()  # (cheaper than no_grad for small ops: ~20% of a CPU step)
    def run_batch(self, batch: Sequence[Mapping[str, np.ndarray]], n_positions: int | None = None,
                  on_out_of_range: str = "error") -> list[dict[str, np.ndarray]]:
        """`run` on a batch of sequences (their lengths may differ), in one forward pass: the
        sequences are padded to the longest and each one's outputs cut to its length."""
        checked = self.check_batch(batch, on_out_of_range, n_positions)
        lengths = [c.n_positions for c in checked]
        n = max(lengths)
        if self.device.type == "cuda":  # (shapes repeat, so the forward's CUDA graphs do)
            n = max(16, 1 << (n - 1).bit_length())
            if self.position_rows is not None:  # (no padding past a position table's rows)
                n = min(n, self.position_rows)
        pos = torch.arange(n, device=self.device).expand(len(checked), n)
        x0 = self.residual(self.feeds(checked, n), pos, self.position_table(n))
        valid = None  # (full-mask heads must not see a shorter sequence's padding)
        if self.full_heads and any(length < n for length in lengths):
            valid = pos < torch.as_tensor(lengths, device=self.device)[:, None]
        x = self.graphed_forward(x0, valid)
        cols, finite = self.output_columns(x), finite_rows(x)
        cols, finite = cols.cpu().numpy(), finite.cpu().numpy()
        out = []
        for i, length in enumerate(lengths):
            if not finite[i, :length].all():  # a non-finite value: the exact attention rule
                v = None if valid is None else valid[i: i + 1]
                cols[i] = self.output_columns(self.forward(x0[i: i + 1], exact=True,
                                                           valid=v))[0].cpu()
            out.append(self.read_outputs(cols[i, :length]))
        return out

    def check_batch(self, batch, on_out_of_range: str = "error", n_positions: int | None = None
                    ) -> list[CheckedInputs]:
        """Each sequence of a batch checked against the contract (`check_inputs`)."""
        listlike = isinstance(batch, Sequence) and not isinstance(batch, (str, bytes))
        if not listlike or not len(batch):
            got = f"an empty {type(batch).__name__}" if listlike else type(batch).__name__
            raise EvaluationError("a batch must be a non-empty list of input mappings (one per "
                                  f"sequence), got {got}")
        return [b if isinstance(b, CheckedInputs)
                else check_inputs(self.contract, b, on_out_of_range, n_positions) for b in batch]

    def generate(self, inputs: Mapping[str, np.ndarray], steps: int,
                 feedback: Callable[[dict[str, np.ndarray]], Mapping[str, object]],
                 on_out_of_range: str = "error", n_positions: int | None = None,
                 decoder: str = "auto") -> dict[str, np.ndarray]:
        """Prefill `inputs`, then `steps` times feed `feedback(last outputs)` back as the next
        position, with a KV cache. Same contract as `twdialect.generate`: every step's inputs
        are checked, fed-back reals stay real, a bad feedback is one line. `decoder`: see
        `generate_batch`."""
        return self.generate_batch([inputs], steps, feedback, on_out_of_range, n_positions,
                                   decoder)[0]

    def generate_batch(self, prompts: Sequence[Mapping[str, np.ndarray]], steps: int,
                       feedback: Callable[[dict[str, np.ndarray]], Mapping[str, object]],
                       on_out_of_range: str = "error", n_positions: int | None = None,
                       decoder: str = "auto") -> list[dict[str, np.ndarray]]:
        """`generate` for a batch of prompts (lengths may differ): one prefill, then one batched
        decode step per position, `feedback` called on each sequence's last outputs.

        `decoder`: "index" (the compiled index decoder, `lowering/fast_decode.py`: exact-index
        heads, one compiled call per position, one sequence at a time), "torch" (the batched
        KV-cache `Decoder`), or "auto": the index decoder where it applies (numba present, a
        CPU model without rotary, full-mask, swish or gated units), else torch."""
        from tw_lowering.fast_decode import DECODERS, torch_reason

        self.check_stepwise("generate")
        steps = check_generate(steps, feedback)
        checked = self.check_batch(prompts, on_out_of_range, n_positions)
        if decoder not in DECODERS:
            raise ArgumentError(f"generate: decoder must be 'auto', 'index' or 'torch', got "
                                f"{decoder!r}")
        why = torch_reason(self, decoder, unchecked=on_out_of_range == "unchecked")
        if decoder == "index" and why:
            raise EvaluationError(f"generate: the index decoder does not apply: {why}")
        self.decoder_used = "torch" if why else "index"
        if why:
            return self._generate_with(None, checked, steps, feedback, on_out_of_range)
        from tw_lowering.fast_decode import IndexDecoder, IndexDecoders, IndexMismatch

        try:
            return self._generate_with(IndexDecoders(
                [IndexDecoder(self, c.n_positions + steps) for c in checked]), checked, steps,
                feedback, on_out_of_range)
        except IndexMismatch:  # (a key off its head's plan: torch does the batch again)
            self.decoder_used = "index, then torch"
            return self._generate_with(None, checked, steps, feedback, on_out_of_range)

    def _generate_with(self, dec, checked, steps, feedback, on_out_of_range):
        from tw_lowering.decode import Decoder

        if dec is None:
            dec = Decoder(self, len(checked), max(c.n_positions for c in checked) + steps)
        rows = [[r] for r in dec.prefill(checked)]
        for _ in range(steps):
            nxt = [check_feedback(self.contract, feedback({k: v[-1] for k, v in r[-1].items()}),
                                  int(p), on_out_of_range)
                   for r, p in zip(rows, dec.positions)]
            for r, o in zip(rows, dec.step(nxt)):
                r.append(o)
        return [{k: np.concatenate([p[k] for p in r], axis=0) for k in r[0]} for r in rows]

    def decoder(self, batch: int, capacity: int, cuda_graphs: bool | None = None,
                compile: bool = False):  # noqa: A002
        """A batched decoder with a static KV cache of `capacity` positions
        (`lowering.decode.Decoder`): `prefill`, then `step`, each one CUDA graph on a GPU."""
        from tw_lowering.decode import Decoder

        return Decoder(self, batch, capacity, cuda_graphs=cuda_graphs, compile=compile)

    def check_stepwise(self, what: str) -> None:
        """Refuse step-by-step running (generate, a KV-cache decoder) of a model with full-mask
        heads: one line saying why."""
        if self.full_heads:
            raise EvaluationError(
                f"{what}: the model has {self.full_heads} full-mask attention head"
                f"{'s' if self.full_heads > 1 else ''} (tw.attn mask full): a head's output at "
                "a position depends on later positions, so the model runs on whole sequences "
                "only (use run / run_batch)")

    # -- sizes ------------------------------------------------------------------------
    def allocated_params(self) -> int:
        """Entries of every weight matrix and bias in the stock layout (all d columns, heads of
        width d_head), as the stats count them."""
        d, dh = self.machine.d, self.machine.d_head
        total = 0
        for layer in self.layers:
            hw = layer.attn.n_heads * dh
            n = layer.mlp.n_neurons
            total += 4 * d * hw + d + 2 * d * n + n + d
        return total

    def stored_params(self) -> int:
        """Entries this runtime actually stores (and a forward pass reads): the trimmed
        blocks and biases."""
        return sum(t.numel() for layer in self.layers for name, t in layer.named_buffers()
                   if t.is_floating_point())

    # -- the compile report -----------------------------------------------------------
    def report(self, path, inputs: Mapping[str, np.ndarray] | None = None,
               n_positions: int | None = None, locations=None) -> None:
        """Write the compile report, one self-contained HTML page, to `path`
        (`lowering/report.py`; docs/report.md). With `inputs` (or `n_positions` for a graph
        without inputs) every value's error against the oracle is shown too."""
        from tw_lowering.report import write_report

        if self.schedule is None:
            raise EvaluationError("report: the model was built without its schedule (compile "
                                  "it with tw_lowering.compile)")
        write_report(self, path, inputs, n_positions, locations)


FORWARD_GRAPHS = 4
TORCH_DTYPES = {"float32": torch.float32, "float64": torch.float64}


def _dtype_of(weights: list[LayerWeights], sources: list[SourceSlot]) -> np.dtype:
    """The dtype a model's weights were written in (float32 where nothing says)."""
    for w in weights:
        return w.dtype
    for s in sources:
        if s.table is not None:
            return s.table.dtype
    return np.dtype(np.float32)


def _parse_to(args: tuple, kwargs: dict) -> tuple[object, np.dtype | None, bool]:
    """`to`'s arguments as (device or None, model dtype or None, non_blocking): torch's own
    reading (`Tensor.to`'s forms), plus a dtype given by name ("float64"); a dtype other than
    float32 / float64, or arguments torch cannot read, are one ArgumentError."""
    from tw_lowering.materialize import DTYPES, check_dtype

    args = list(args)
    # (torch reads a float as a dtype, to(2.5) is float64, and a bool as a device ordinal)
    for a in [*args[:1], kwargs.get("device"), kwargs.get("dtype")]:
        if isinstance(a, (bool, float, complex)):
            raise ArgumentError(f"to: expected a device and/or a dtype (torch.float32 or "
                                f"torch.float64), got {a!r}")
    if args and isinstance(args[-1], str) and args[-1] in DTYPES:
        kwargs = {**kwargs, "dtype": TORCH_DTYPES[args.pop()]}
    if isinstance(kwargs.get("dtype"), str):
        kwargs = {**kwargs, "dtype": TORCH_DTYPES.get(kwargs["dtype"], kwargs["dtype"])}
    try:
        device, dtype, non_blocking, _ = torch._C._nn._parse_to(*args, **kwargs)
    except (TypeError, RuntimeError, ValueError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ArgumentError(f"to: expected a device and/or a dtype (torch.float32 or "
                            f"torch.float64): {first}") from None
    return device, None if dtype is None else check_dtype("to", dtype), non_blocking


def cuda_graph(fn) -> tuple[torch.cuda.CUDAGraph, object]:
    """fn captured as a CUDA graph (after warm-up runs on a side stream), and its output."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    return graph, out


def finite_rows(x: torch.Tensor) -> torch.Tensor:
    """(b, t) bool: the rows of residual x that hold only finite numbers. A non-finite value
    anywhere in attention reaches the residual (x only ever has values added to it), so a
    finite final row means the fast kernels and the exact rule agree on it. (x - x is 0 where
    x is finite and nan where not: three cheap passes, where isfinite is a composite.)"""
    return (x - x).sum(dim=-1) == 0

