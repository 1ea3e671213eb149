"""A compiled model in a stock transformer's layout: one geometry for every layer, dense
matrices over a residual of `d_model` columns, streamed a layer at a time.

tw's runtime stores each sublayer trimmed (`lowering/model.py`); a stock architecture has the
same heads and MLP width in every layer and matrices over the whole residual. `StockPlan`
makes that layout and nothing more:

* **Columns.** The export residual keeps only the tw columns something uses (the constant and
  position columns, the sources, every column a layer reads or writes, the outputs), in tw's
  order, then the *twins* of the columns something reads (when asked for, see below), then
  zero padding up to `d_model`.
* **Geometry.** `n_heads` is the most heads any layer uses, `head_dim` the most head
  dimensions any layer keeps (each layer's q/k and v dimensions are packed to the front: q.k
  pairs a q dimension only with the same k dimension, and a v dimension only meets its own
  W_O row, so packing changes no product), `d_mlp` the most neurons. Stock formats that
  derive the head width from the residual (`d_model == n_heads * head_dim`, GPT-2) get the
  smallest such product that holds the columns; `head_dims` restricts the head width (a
  power of four keeps a pre-scaled q exact: sqrt(head_dim) is then a power of two).
* **Normalization made an identity.** A stock LayerNorm computes (x - mean) / sqrt(var +
  eps) * g + b over the whole row. A huge `eps`, a power of four, swallows the variance:
  var + eps rounds to eps exactly when var < eps * 2^-24, so rstd = eps^-1/2 and the gain
  g = eps^1/2 are powers of two and (x - mean) * rstd * g is x - mean exactly. `norm_eps()`
  certifies that bound from the value ranges (every column's largest magnitude over the
  whole run) and gives the smallest power of four that works. RMSNorm (no mean) is then an
  exact identity. LayerNorm's mean is the float32 rounding of the row's sum, which no column
  layout makes exactly 0 in every summation order (a single balance column holding minus the
  row's sum leaves a mean of ~2^-24 of the row's largest values, and every zero entry a
  sublayer reads then reads -mean: the calculator's 473*511 came out 241712). So with
  `twins=True` every column something reads has a *twin* holding its negation (every writer
  writes both), and a read takes half the difference: ((x - mean) - (-x - mean)) / 2 = x, the
  mean cancelling in each pair whatever it is; a zero entry reads exactly 0.
* **Partial columns.** A stock kernel may add a dot product's terms in any order, so an MLP
  output sum whose positive (or negative) terms could pass 2^24 is cut into groups that stay
  within it, each group but the first writing a partial column of its own that every reader
  reads as the column itself (`_plan_partials`; docs/exports.md, "Exactness under any
  summation order"). The columns go: tw columns, partial columns, twins, partials' twins.
`layer(i)` builds one layer's dense arrays on demand (float64 sums, float32 out), so a writer
holds one layer at a time beyond the compiled model.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from tw_lowering.export.metadata import ExportError, check_causal, check_unrotated
from tw_lowering.export.metadata import check_relu_mlps
from tw_lowering.materialize import position_rows
from tw_lowering.progress import report

FLOAT32_EPS = 2.0 ** -24  # unit roundoff
# The largest norm constant a float32 export may use: rstd = eps^-1/2 must leave the residual's
# small values normal (2^-62 scaling keeps everything above 2^-64 exact).
MAX_NORM_EPS = 4.0 ** 62
# The most that the positive (or the negative) terms of one MLP output sum may add up to: every
# subset sum of integers within 2^24 is a float32 integer, so such a sum is exact in any order.
SPLIT_LIMIT = 2.0 ** 24


@dataclass(frozen=True)
class StockGeometry:
    n_layers: int
    d_model: int
    n_heads: int
    head_dim: int
    d_mlp: int
    vocab: int  # token ids the embedding takes (1 when the graph has no token input)
    n_out: int  # output columns (the LM head's width)
    n_ctx: int  # positions the position table covers

    def as_dict(self) -> dict:
        return asdict(self)

    @property
    def q_prescale(self) -> int:
        """sqrt(head_dim), what W_Q and b_Q are multiplied by in a format whose attention
        scales q.k by 1/sqrt(head_dim) (GGUF, transformers, Llama): a power of two, so the
        scores stay bit-identical to tw's unscaled ones, for the power-of-four head widths
        those formats use."""
        return math.isqrt(self.head_dim)

    def params(self) -> int:
        """Parameters of the stock layout: per layer Q, K, V, O with their biases, W_in, W_out
        with theirs, plus the token and position tables and the unembedding."""
        d, hd, m = self.d_model, self.n_heads * self.head_dim, self.d_mlp
        per_layer = 3 * (d * hd + hd) + hd * d + d + d * m + m + m * d + d
        return (self.n_layers * per_layer + (self.vocab + self.n_ctx) * d
                + d * self.n_out)


class StockPlan:
    """The stock layout of compiled model `ct` (see the module docstring).

    `twins`: give every read column a negated twin (LayerNorm formats). `rotary`, `gated`:
    the format carries rotary heads and swish / gated MLP lanes (`up(i)`), so they are not
    refused here. `divisible_width`: d_model a multiple of n_heads (transformers checks it of
    a Llama config, head_dim given or not). `tied_width`: d_model must equal
    n_heads * head_dim. `head_dims`: the head widths allowed (None: any). `n_ctx`: positions
    the position table covers (default: the largest pos_encoding max_len, else 1024; at most
    the rows of the graph's `tw.pos_table`s, whose rows join the position table). A model with
    full-mask heads is refused (`check_causal`), and one with rotary heads (`check_unrotated`:
    the stock formats have learned absolute positions, no rotation), and one with swish or
    gated MLP neurons (`check_relu_mlps`: the stock MLP is relu, ungated). `shards`: the head
    count and the MLP width are padded (zero heads, zero neurons) to multiples of it, so an
    engine can split them over that many devices (tensor parallelism)."""

    def __init__(self, ct, twins: bool = False, tied_width: bool = False,
                 head_dims=None, n_ctx: int | None = None, fmt: str = "stock",
                 rotary: bool = False, gated: bool = False, divisible_width: bool = False,
                 shards: int = 1):
        self.ct = ct
        self.machine = m = ct.machine
        self.twins = twins
        check_causal(ct, fmt)
        if not rotary:  # (a format with rotary heads, llama, checks them itself)
            check_unrotated(ct, fmt)
        if not gated:  # (a format with swish and gated lanes, llama, checks them itself)
            check_relu_mlps(ct, fmt)
        self._check_sources()
        used, read = {m.CONST_COL, m.POS_COL}, set()
        for s in ct.sources:
            used.update(np.asarray(s.cols).tolist())
        for o in ct.outputs:
            read.update(np.asarray(o.rows).tolist())
        for layer in ct.layers:
            for sub in (layer.attn, layer.mlp):
                read.update(sub.read.tolist())
                used.update(sub.write[: sub.n_write].tolist())
        used |= read
        self.tw_columns = np.array(sorted(used), np.int64)  # export column k holds tw column ...
        self.export_col = np.full(m.d, -1, np.int64)
        self.export_col[self.tw_columns] = np.arange(len(self.tw_columns))
        self.twin_col = np.full(m.d, -1, np.int64)  # ... and its twin, -x, where it has one
        self._ctx = self._n_ctx(n_ctx)
        # partial columns: (layer, tw column, neuron mask) of each, export column T + j
        self._plan_partials(self._tw_bounds())
        n_main = len(self.tw_columns) + len(self.partials)
        self.partial_twin = np.full(len(self.partials), -1, np.int64)
        if twins:
            twinned = np.array(sorted(read), np.int64)
            self.twin_col[twinned] = n_main + np.arange(len(twinned))
            at = n_main + len(twinned)
            for j, (_, c, _, _) in enumerate(self.partials):
                if self.twin_col[c] >= 0:
                    self.partial_twin[j], at = at, at + 1
        n_cols = n_main + int((self.twin_col >= 0).sum()) + int((self.partial_twin >= 0).sum())
        heads = max((layer.attn.n_heads for layer in ct.layers if layer.attn.active), default=0)
        dims = max((_kept_dims(layer.attn) for layer in ct.layers if layer.attn.active),
                   default=0)
        shards = check_shards(shards, fmt)
        n_heads, head_dim, d_model = _choose_heads(max(heads, 1), max(dims, 1), n_cols,
                                                   tied_width, head_dims)
        if n_heads % shards:  # zero heads up to a multiple of the shards
            n_heads = -(-n_heads // shards) * shards
            d_model = n_heads * head_dim if tied_width else d_model
        if divisible_width:  # zero columns up to a multiple of n_heads
            d_model = -(-d_model // n_heads) * n_heads
        d_mlp = max((layer.mlp.n_neurons for layer in ct.layers), default=0)
        d_mlp = -(-max(d_mlp, 1) // shards) * shards
        self.geometry = StockGeometry(
            n_layers=len(ct.layers), d_model=d_model, n_heads=n_heads, head_dim=head_dim,
            d_mlp=d_mlp, vocab=self._vocab(), n_out=sum(len(o.rows) for o in ct.outputs),
            n_ctx=self._ctx)

    # -- what can be exported ------------------------------------------------------------
    def _check_sources(self) -> None:
        kinds = [s for s in self.ct.sources if s.kind not in ("pos", "pos_table")]
        reals = [s.name for s in kinds if s.kind == "input"]
        if reals:
            raise ExportError(f"export: input {reals[0]!r} is real-valued; a causal language "
                              "model takes token ids only (the onnx export takes real inputs)")
        if len(kinds) > 1:
            raise ExportError("export: the graph has several token inputs ("
                              + ", ".join(repr(s.name) for s in kinds) + "); a causal "
                              "language model takes one (the onnx export takes several)")
        self.token_source = kinds[0] if kinds else None

    def _vocab(self) -> int:
        return self.token_source.table.shape[0] if self.token_source is not None else 1

    def _n_ctx(self, n_ctx: int | None) -> int:
        tables = [s.table.shape[0] for s in self.ct.sources if s.kind == "pos_table"]
        if n_ctx is not None:
            if isinstance(n_ctx, bool) or not isinstance(n_ctx, int) or not 1 <= n_ctx <= 1 << 20:
                raise ExportError(f"export: n_positions must be a whole number in [1, 2^20], "
                                  f"got {n_ctx!r}")
            if tables and n_ctx > min(tables):
                raise ExportError(f"export: n_positions {n_ctx} is beyond the graph's "
                                  f"tw.pos_table, which has {min(tables)} rows")
            return n_ctx
        if tables:
            return min(tables)
        from twdialect.dialect import PosEncodingOp

        graph = self.ct.schedule.tg.graph if self.ct.schedule is not None else None
        lens = [op.max_len.value.data for op in (graph.block.ops if graph else [])
                if isinstance(op, PosEncodingOp)]
        return max(lens) if lens else 1024

    def _ranges(self):
        """The schedule's value ranges per group (`pressure.GroupRanges`), computed once for
        the partial columns and the norm constant (the schedule's own where it kept them)."""
        if getattr(self, "_group_ranges", None) is None:
            from tw_lowering.pressure import GroupRanges

            sched = self.ct.schedule
            self._group_ranges = sched.ranges or GroupRanges(sched.tg)
        return self._group_ranges

    # -- sums kept exact in any order -----------------------------------------------------
    def _tw_bounds(self) -> tuple[np.ndarray, np.ndarray] | None:
        """(lo, hi), each (tw d,): the interval each tw column's value stays in (value ranges,
        summed over the groups that share the column, as a dead value may still be there; the
        token and position tables), or None without a schedule."""
        sched, m = self.ct.schedule, self.machine
        if sched is None:
            return None
        mag = self._ranges()
        lo, hi = np.zeros(m.d, np.float64), np.zeros(m.d, np.float64)
        for g, cols in enumerate(sched.cols):
            if cols is not None and len(cols):
                cols = np.asarray(cols)
                sign = np.asarray(mag.signs(g), np.int64)
                sign = sign if len(sign) == len(cols) else np.zeros(len(cols), np.int64)
                with np.errstate(invalid="ignore"):
                    hi[cols] += np.where(sign >= 0, mag[g], 0.0)
                    lo[cols] -= np.where(sign <= 0, mag[g], 0.0)
        hi[m.CONST_COL] = max(hi[m.CONST_COL], 1.0)
        hi[m.POS_COL] = max(hi[m.POS_COL], float(self._ctx))
        for s in self.ct.sources:
            if s.kind == "pos":
                rows = position_rows(0, self._ctx, s.pos_width)[:, 1: 1 + len(s.cols)]
            elif getattr(s, "table", None) is not None and len(s.table):
                rows = s.table.astype(np.float64)
            else:
                continue
            hi[s.cols] = np.maximum(hi[s.cols], rows.max(axis=0))
            lo[s.cols] = np.minimum(lo[s.cols], rows.min(axis=0))
        return lo, hi

    def _plan_partials(self, tw_bound: np.ndarray | None) -> None:
        """Split each MLP output sum whose terms could reach past 2^24 into partial columns.

        A stock kernel adds a dot product's terms in any order (SIMD lanes, blocks, threads),
        so one of its partial sums may be any subset of the terms: the sum of every positive
        term can be formed before a negative one cancels it. A staircase of hinge pairs
        w relu(z - c + 1) - w relu(z - c) over a product z ~ 1e6 holds terms of ~1e7 whose
        total is small; added in the wrong order a partial sum passes 2^24 and the low bit of
        the (integer) result is lost. So the neurons writing one column are cut into groups
        whose positive terms and whose negative terms each stay within 2^24 (`SPLIT_LIMIT`):
        every subset sum of a group's integer terms is then exact, in any order. Group 0 stays
        in the column (with the bias), group k > 0 writes a partial column of its own, and
        every reader of the column reads its partials with the same weight (the column's value
        is their sum). Groups are packed from *balanced chunks* (`_balanced_chunks`: hinges on
        one pre-activation whose weights sum to 0), so each partial column holds a small value
        and the reads stay exact too."""
        self.partials: list[tuple[int, int, np.ndarray, float]] = []
        if tw_bound is None:
            return
        lo, hi = tw_bound
        for i, layer in enumerate(self.ct.layers):
            mlp = layer.mlp
            n, nw = int(mlp.n_neurons), int(mlp.n_write)
            if not n or not nw:
                continue
            read = _numpy(mlp.read).astype(np.int64)
            w1, b1 = _numpy(mlp.w1)[:, :n], _numpy(mlp.b1)[:n]
            with np.errstate(invalid="ignore"):  # the largest relu(z): z's upper end
                h = np.maximum(np.maximum(w1 * hi[read, None], w1 * lo[read, None]).sum(axis=0)
                               + b1, 0.0)
                mag = np.maximum(hi, -lo)
            signed = np.zeros(n, bool)  # a lane that may be negative (swish, gated)
            keys = [w1[:, k].tobytes() for k in range(n)]
            if mlp.wu is not None:
                wu, bu = _numpy(mlp.wu)[:, :n], _numpy(mlp.bu)[:n]
                with np.errstate(invalid="ignore"):
                    h = np.maximum(h, np.abs(w1).T @ mag[read] + np.abs(b1)) * (
                        np.abs(wu).T @ mag[read] + np.abs(bu))
                signed |= (wu != 0).any(axis=0) | (bu != 1.0)
                keys = [k + wu[:, j].tobytes() + bu[j].tobytes() for j, k in enumerate(keys)]
            if mlp.swish is not None:
                swish = _numpy(mlp.swish)[:n].astype(bool)
                with np.errstate(invalid="ignore"):
                    h = np.where(swish, np.maximum(h, np.abs(w1).T @ mag[read] + np.abs(b1)), h)
                signed |= swish
            if not np.isfinite(h).all():
                continue  # (no finite range: nothing to certify; the precision warning says so)
            w2, b2 = _numpy(mlp.w2)[:n, :nw], _numpy(mlp.b2)[:nw]
            write = _numpy(mlp.write)[:nw].astype(np.int64)
            for j in range(nw):
                t = h * w2[:, j]
                pos = np.where(signed, np.abs(t), np.maximum(t, 0.0))
                neg = np.where(signed, np.abs(t), np.maximum(-t, 0.0))
                if max(pos.sum(), neg.sum()) + abs(b2[j]) <= SPLIT_LIMIT:
                    continue
                chunks = _balanced_chunks(keys, b1, w2[:, j])
                groups = _pack(chunks, pos, neg, abs(b2[j]))
                for g in groups[1:]:
                    mask = np.zeros(n, bool)
                    mask[g] = True
                    bound = float(max(pos[g].sum(), neg[g].sum()))
                    self.partials.append((i, int(write[j]), mask, bound))

    def _routed(self, i: int, w2: np.ndarray, d_model: int) -> np.ndarray:
        """Layer i's W_out (neurons, tw d) in the export's columns: as `_written`, but the
        neurons of each partial group write its partial column (and twin) instead."""
        out = self._written(w2, d_model)
        for j, (layer, c, mask, _) in enumerate(self.partials):
            if layer != i:
                continue
            rows = np.zeros(out.shape[0], bool)
            rows[: len(mask)] = mask
            k = len(self.tw_columns) + j
            out[rows, k] = w2[rows, c]
            out[rows, self.export_col[c]] = 0.0
            if self.partial_twin[j] >= 0:
                out[rows, self.partial_twin[j]] = -w2[rows, c]
                out[rows, self.twin_col[c]] = 0.0
        return out

    # -- the tables ----------------------------------------------------------------------
    def _rows(self, tw_rows: np.ndarray) -> np.ndarray:
        """(n, tw d) float64 rows -> (n, d_model) float32, the twins filled in."""
        return self._written(tw_rows, self.geometry.d_model).astype(np.float32)

    def _written(self, w: np.ndarray, d_model: int) -> np.ndarray:
        """A writer's (..., tw d) output block in the export's columns (..., d_model): each
        column where it goes, its negation in the column's twin."""
        out = np.zeros(w.shape[:-1] + (d_model,), np.float64)
        out[..., self.export_col[self.tw_columns]] = w[..., self.tw_columns]
        has = np.nonzero(self.twin_col >= 0)[0]
        out[..., self.twin_col[has]] = -w[..., has]
        return out

    def _read(self, w: np.ndarray, d_model: int) -> np.ndarray:
        """A reader's (tw d, ...) weights in the export's rows (d_model, ...): half on the
        column, minus half on its twin, where it has one (see the module docstring)."""
        out = np.zeros((d_model,) + w.shape[1:], np.float64)
        half = np.where(self.twin_col >= 0, 0.5, 1.0).reshape((-1,) + (1,) * (w.ndim - 1))
        out[self.export_col[self.tw_columns]] = (w * half)[self.tw_columns]
        has = np.nonzero(self.twin_col >= 0)[0]
        out[self.twin_col[has]] = -(w * half)[has]
        for j, (_, c, _, _) in enumerate(self.partials):  # a partial is read as its column
            out[len(self.tw_columns) + j] = out[self.export_col[c]]
            if self.partial_twin[j] >= 0:
                out[self.partial_twin[j]] = out[self.twin_col[c]]
        return out

    def embedding(self) -> np.ndarray:
        """(vocab, d_model): each token's row (its table row in the token source's columns)."""
        rows = np.zeros((self.geometry.vocab, self.machine.d), np.float64)
        s = self.token_source
        if s is not None:
            rows[:, s.cols] = s.table.astype(np.float64)
        return self._rows(rows)

    def positions(self) -> np.ndarray:
        """(n_ctx, d_model): the constant 1, the position index, the pos_encoding features and
        the pos_table rows of every position (what `CompiledTransformer.residual` puts there):
        a stock model's learned position embedding carries a per-position table exactly."""
        m, n = self.machine, self.geometry.n_ctx
        rows = np.zeros((n, m.d), np.float64)
        rows[:, m.CONST_COL] = 1.0
        rows[:, m.POS_COL] = np.arange(n)
        for s in self.ct.sources:
            if s.kind == "pos":
                width = len(s.cols)
                rows[:, s.cols] = position_rows(0, n, s.pos_width)[:, 1: 1 + width]
            elif s.kind == "pos_table":
                rows[:, s.cols] = s.table[:n].astype(np.float64)
        return self._rows(rows)

    def unembedding(self) -> np.ndarray:
        """(d_model, n_out): output column k reads its residual column times its scale (a
        literal output reads the constant column)."""
        w = np.zeros((self.machine.d, self.geometry.n_out), np.float64)
        k = 0
        for o in self.ct.outputs:
            for row, scale in zip(np.asarray(o.rows).tolist(), np.asarray(o.scale).tolist()):
                w[row, k] += scale
                k += 1
        return self._read(w, self.geometry.d_model).astype(np.float32)

    def output_names(self) -> list[tuple[str, int, int]]:
        """(name, first column, width) of each graph output within the n_out columns."""
        out, at = [], 0
        for o in self.ct.outputs:
            out.append((o.name, at, len(o.rows)))
            at += len(o.rows)
        return out

    # -- the layers ----------------------------------------------------------------------
    def layer(self, i: int) -> dict[str, np.ndarray]:
        """Layer i in the stock layout, float32: W_Q, W_K, W_V (n_heads, d_model, head_dim),
        b_Q, b_K, b_V (n_heads, head_dim; zero: tw's biases ride on the constant column),
        W_O (n_heads, head_dim, d_model), b_O (d_model), W_in (d_model, d_mlp), b_in (d_mlp),
        W_out (d_mlp, d_model), b_out (d_model). Multiply x (positions, d_model) on the left.
        (Every writer but ONNX's asks for each layer once, in order: the export's progress.)"""
        g, d = self.geometry, self.machine.d
        a, mlp = self.ct.layers[i].attn, self.ct.layers[i].mlp
        nh, hd = g.n_heads, g.head_dim
        qkv = np.zeros((3, d, nh, hd))
        wo, bo = np.zeros((nh, hd, d)), np.zeros(d)
        if a.active:
            h, e = a.n_heads, a.head_dim
            w = _numpy(a.w_qkv).reshape(-1, 3 * h * e)
            rows = _numpy(a.read).astype(np.int64)
            for head in range(h):
                base = h * e + head * 2 * e
                qkv[0, rows, head, :e] = w[:, head * e: head * e + e]
                qkv[1, rows, head, :e] = w[:, base: base + e]
                qkv[2, rows, head, :e] = w[:, base + e: base + 2 * e]
            n = a.n_write
            wo[:h, :e][..., _numpy(a.write)[:n].astype(np.int64)] = (
                _numpy(a.w_o)[:, :n].reshape(h, e, n))
        if a.n_write:
            bo[_numpy(a.write)[: a.n_write].astype(np.int64)] = _numpy(a.b_o)[: a.n_write]
        w1, b1 = np.zeros((d, g.d_mlp)), np.zeros(g.d_mlp)
        w2, b2 = np.zeros((g.d_mlp, d)), np.zeros(d)
        n_neurons, n = mlp.n_neurons, mlp.n_write
        write = _numpy(mlp.write)[:n].astype(np.int64)
        if n_neurons:
            w1[_numpy(mlp.read).astype(np.int64), :n_neurons] = _numpy(mlp.w1)[:, :n_neurons]
            b1[:n_neurons] = _numpy(mlp.b1)[:n_neurons]
            w2[:n_neurons][:, write] = _numpy(mlp.w2)[:n_neurons, :n]
        if n:
            b2[write] = _numpy(mlp.b2)[:n]
        dm = g.d_model
        out = {key: self._read(qkv[j], dm).transpose(1, 0, 2)
               for j, key in enumerate(("W_Q", "W_K", "W_V"))}
        out.update(W_O=self._written(wo, dm), b_O=self._written(bo, dm),
                   W_in=self._read(w1, dm), b_in=b1, W_out=self._routed(i, w2, dm),
                   b_out=self._written(b2, dm))
        out["b_Q"], out["b_K"], out["b_V"] = (np.zeros((nh, hd)) for _ in range(3))
        report("export", i + 1, g.n_layers)
        return {k: np.ascontiguousarray(v, np.float32) for k, v in out.items()}

    def up(self, i: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Layer i's gated-lane side in the stock layout, float32: W_up (d_model, d_mlp) and
        b_up (d_mlp) with lane_j = act(x W_in + b_in)_j * (x W_up + b_up)_j (a lane that is
        not gated, or pads the layer, reads up = 1: a zero column and bias 1), and swish
        (d_mlp,) bool, the lanes whose act is swish (relu elsewhere)."""
        g, d, mlp = self.geometry, self.machine.d, self.ct.layers[i].mlp
        wu, bu = np.zeros((d, g.d_mlp)), np.ones(g.d_mlp)
        swish = np.zeros(g.d_mlp, bool)
        n = mlp.n_neurons
        if n and mlp.wu is not None:
            wu[_numpy(mlp.read).astype(np.int64), :n] = _numpy(mlp.wu)[:, :n]
            bu[:n] = _numpy(mlp.bu)[:n]
        if n and mlp.swish is not None:
            swish[:n] = _numpy(mlp.swish)[:n]
        return (np.ascontiguousarray(self._read(wu, g.d_model), np.float32),
                bu.astype(np.float32), swish)

    def residual(self, x: np.ndarray) -> np.ndarray:
        """tw's residual (..., d) in the export's columns (..., d_model), twins filled in:
        what the export's hidden states hold, to compare them with tw's."""
        x = np.asarray(x, np.float64)
        lead = x.shape[:-1]
        return self._rows(x.reshape(-1, x.shape[-1])).reshape(*lead, self.geometry.d_model)

    def collapse(self, h: np.ndarray) -> np.ndarray:
        """An export residual (..., d_model) with every partial column added into its column
        (and its twin into the column's twin) and zeroed: the form `residual` gives, so the
        export's hidden states compare with tw's whatever the partials hold."""
        h = np.array(h, np.float64, copy=True)
        for j, (_, c, _, _) in enumerate(self.partials):
            k = len(self.tw_columns) + j
            h[..., self.export_col[c]] += h[..., k]
            h[..., k] = 0.0
            if self.partial_twin[j] >= 0:
                h[..., self.twin_col[c]] += h[..., self.partial_twin[j]]
                h[..., self.partial_twin[j]] = 0.0
        return h

    # -- the normalization constant ------------------------------------------------------
    def column_bounds(self) -> np.ndarray:
        """(d_model,) the largest |value| each export column can hold at any time: over the
        groups that ever live in it, summed (a reused column may still hold a dead value while
        the next is written), from the value ranges; positions from the table itself."""
        sched = self.ct.schedule
        if sched is None:
            raise ExportError("export: the model carries no schedule (build it with "
                              "tw_lowering.compile); its value ranges are unknown")
        mag = self._ranges()
        tw_bound = np.zeros(self.machine.d, np.float64)
        for g, cols in enumerate(sched.cols):
            if cols is not None and len(cols):
                tw_bound[np.asarray(cols)] += mag[g]
        tw_bound[self.machine.CONST_COL] = max(tw_bound[self.machine.CONST_COL], 1.0)
        pos = np.abs(self.positions().astype(np.float64)).max(axis=0)
        emb = np.abs(self.embedding().astype(np.float64)).max(axis=0)
        out = np.abs(self._written(tw_bound, self.geometry.d_model))
        for j, (_, _, _, bound) in enumerate(self.partials):
            out[len(self.tw_columns) + j] = bound
            if self.partial_twin[j] >= 0:
                out[self.partial_twin[j]] = bound
        return np.maximum(out, np.maximum(pos, emb))

    def variance_bound(self) -> float:
        """An upper bound on the norm's variance (LayerNorm's mean of squares after a zero
        mean; RMSNorm's mean of squares) over every row a norm ever sees."""
        b = self.column_bounds()
        return float((b * b).sum() / self.geometry.d_model)

    def norm_eps(self, requested: float | None = None) -> float:
        """The norm constant that makes every normalization an exact identity: the smallest
        power of four with variance < eps * 2^-24 (see the module docstring). A `requested`
        constant is checked instead, and refused naming the smallest that works."""
        var = self.variance_bound()
        if not math.isfinite(var):
            raise ExportError("export: a value has no finite range, so no norm constant can be "
                              "certified; declare the inputs' ranges, or export to a format "
                              "without normalization (tlens, onnx)")
        need = var / FLOAT32_EPS
        eps = 4.0 ** max(0, math.ceil(math.log(max(need, 1.0), 4)))
        while eps <= need:  # (log rounding)
            eps *= 4.0
        if eps > MAX_NORM_EPS:
            raise ExportError(f"export: the residual's values reach {math.sqrt(var * self.geometry.d_model):.3g} "
                              f"(energy bound {var:.3g} a column), beyond what a float32 norm "
                              f"constant can swallow (at most {MAX_NORM_EPS:.3g}); declare "
                              "narrower input ranges, or export to a format without "
                              "normalization (tlens, onnx)")
        if requested is not None:
            r = float(requested)
            ok = r >= eps and math.log(r, 4) == round(math.log(r, 4)) and r <= MAX_NORM_EPS
            if not ok:
                raise ExportError(f"export: norm constant {requested!r} cannot be certified "
                                  f"(variance bound {var:.4g}; it must be a power of four "
                                  f"above variance * 2^24); the smallest that works is {eps:.6g}")
            return r
        return eps

    def trimmed_params(self) -> int:
        """What tw's own runtime stores for the same model (`stored_params`)."""
        return self.ct.stored_params()


def _numpy(t) -> np.ndarray:
    return t.detach().cpu().double().numpy() if t.is_floating_point() else t.cpu().numpy()


def _balanced_chunks(keys: list[bytes], b1: np.ndarray, w: np.ndarray) -> list[np.ndarray]:
    """The neurons with a nonzero weight w in runs that cancel: neurons that share a
    pre-activation (the same input weights, `keys`) ordered by bias, cut wherever their
    weights' running sum is back to 0 (a hinge pair relu(z - c + 1) - relu(z - c) is one
    run; its value stays within |w| whatever z is). Runs that never balance stay whole."""
    families: dict[bytes, list[int]] = {}
    for k in np.nonzero(w)[0].tolist():
        families.setdefault(keys[k], []).append(k)
    chunks = []
    for ks in families.values():
        ks.sort(key=lambda k: (-b1[k], k))
        run, total = [], 0.0
        for k in ks:
            run.append(k)
            total += w[k]
            if total == 0.0:
                chunks.append(np.array(run, np.int64))
                run = []
        if run:
            chunks.append(np.array(run, np.int64))
    return chunks


def _pack(chunks: list[np.ndarray], pos: np.ndarray, neg: np.ndarray,
          bias: float) -> list[np.ndarray]:
    """Chunks packed first fit, largest first, into groups whose positive and negative term
    bounds each stay within SPLIT_LIMIT (group 0 also carries the bias); a chunk over the
    limit alone stays a group of its own. Deterministic: ties keep the chunks' order."""
    sizes = [(float(pos[ch].sum()), float(neg[ch].sum())) for ch in chunks]
    order = sorted(range(len(chunks)), key=lambda c: (-max(sizes[c]), c))
    groups: list[list[int]] = [[]]
    room = [[bias, bias]]
    for c in order:
        cp, cq = sizes[c]
        for g, (p, q) in enumerate(room):
            if not groups[g] or (p + cp <= SPLIT_LIMIT and q + cq <= SPLIT_LIMIT):
                break
        else:
            g = len(groups)
            groups.append([])
            room.append([0.0, 0.0])
        groups[g].append(c)
        room[g][0] += cp
        room[g][1] += cq
    return [np.sort(np.concatenate([chunks[c] for c in g])) for g in groups if g]


def _kept_dims(attn) -> int:
    """Head dimensions a layer's heads really use (before the runtime's alignment padding)."""
    return int(max(len(attn.qk_dims), len(attn.v_dims)))


def _choose_heads(heads: int, dims: int, n_cols: int, tied: bool, head_dims) -> tuple[int, int, int]:
    """(n_heads, head_dim, d_model) with n_heads >= heads, head_dim >= dims, d_model >= n_cols
    and head_dim among `head_dims` (a callable or None); when `tied`, d_model = n_heads *
    head_dim, chosen to make the per-layer size (about d_model * (4 n_heads head_dim)) least."""
    allowed = head_dims or (lambda e: True)
    if not tied:
        return heads, _first_allowed(dims, allowed), n_cols
    best = None
    for e in range(dims, max(dims, n_cols) + 1):
        if not allowed(e):
            continue
        h = max(heads, -(-n_cols // e))
        d = h * e
        cost = (d * d, e)
        if best is None or cost < best[0]:
            best = (cost, (h, e, d))
    if best is None:  # (no allowed width up to n_cols: the first allowed one above)
        e = _first_allowed(max(dims, n_cols), allowed)
        return heads, e, heads * e
    return best[1]


def check_shards(shards, fmt: str) -> int:
    """A tensor-parallel size: a whole number from 1 to 1024."""
    if isinstance(shards, bool) or not isinstance(shards, int) or not 1 <= shards <= 1024:
        raise ExportError(f"export_{fmt}: tensor_parallel must be a whole number from 1 to "
                          f"1024, got {shards!r}")
    return shards


def _first_allowed(e: int, allowed, limit: int = 1 << 16) -> int:
    """The narrowest allowed head width of at least e, or an ExportError when none is (the
    serving formats' widths stop at 256)."""
    for w in range(e, max(e, limit) + 1):
        if allowed(w):
            return w
    raise ExportError(f"export: the model's heads keep {e} dimensions, wider than any head "
                      "width the format takes (the transformers and llama exports: 64 or "
                      "256); compile with a narrower d_head, or export to onnx")


# Head widths that every serving engine's attention kernels take (vLLM's CPU kernels: 32, 64,
# 80, ..., 256, 512; its GPU backends and llama.cpp take these too) and whose square root is a
# power of two, so a q pre-scaled by sqrt(head_dim) undoes the engine's 1/sqrt(head_dim)
# exactly: the head widths of the transformers and llama exports.
ENGINE_HEAD_DIMS = (64, 256)


def engine_head_dim(e: int) -> bool:
    """A head width in ENGINE_HEAD_DIMS."""
    return e in ENGINE_HEAD_DIMS


# A relu neuron carried by a smooth stock activation (GGUF's GELU, Llama's SiLU) is scaled by
# a power of two S_n: its input weights times S_n, its output weights over S_n (see
# `relu_scales`). Limits on S_n that keep every scaled value a float32 normal with room:
MAX_SCALE_LOG2 = 64  # S_n <= 2^64
RANGE_LOG2 = 96  # S_n * |z| <= 2^96 (float32 tops out at 2^128)
SMALLEST_LOG2 = -100  # |W_out| / S_n >= 2^-100 (float32 normals reach 2^-126)


def relu_scales(plan: "StockPlan", gap: float, where: str, cutoff: str,
                instead: str) -> tuple[list[np.ndarray], list[float]]:
    """Per layer: log2 S_n of each neuron, and the bound on how far the stock activation can
    move that MLP sublayer's output from relu's (max over written columns).

    relu is positively homogeneous, so act(S_n z) / S_n is relu(z) wherever act(x) equals
    relu(x) for |x| past the activation's cut-off, and S_n z (and S_n w) round exactly as z
    (and w) do (a power of two, in the normal range). Only 0 < |z| < cutoff / S_n can differ,
    by at most `gap` (max |act(x) - relu(x)|) / S_n times the lane's gate |u| (1 when ungated)
    and its outgoing weight. S_n is as large as float32 allows with room (`MAX_SCALE_LOG2`,
    `RANGE_LOG2`, `SMALLEST_LOG2`), so that window is ~1e-18 wide. A swish lane keeps S_n = 1
    (the activation is its own) and adds nothing to the bound. Refused, naming `cutoff` and
    the `instead` remedy, when a neuron's range leaves no room to scale it."""
    colb = plan.column_bounds()
    scales, bounds = [], []
    for layer in plan.ct.layers:
        mlp = layer.mlp
        n = int(mlp.n_neurons)
        if not n:
            scales.append(np.zeros(0, np.int64))
            bounds.append(0.0)
            continue
        read = mlp.read.detach().cpu().numpy().astype(np.int64)
        x = colb[plan.export_col[read]]
        w1 = np.abs(mlp.w1.detach().cpu().double().numpy()[:, :n])
        b1 = np.abs(mlp.b1.detach().cpu().double().numpy()[:n])
        w2 = np.abs(mlp.w2.detach().cpu().double().numpy()[:n, : mlp.n_write])
        relu = np.ones(n, bool)
        if mlp.swish is not None:
            relu &= ~mlp.swish.detach().cpu().numpy()[:n].astype(bool)
        gate = np.ones(n)
        if mlp.wu is not None:  # (a gated lane's output is act(z) * u: the error scales by |u|)
            wu = np.abs(mlp.wu.detach().cpu().double().numpy()[:, :n])
            gate = x @ wu + np.abs(mlp.bu.detach().cpu().double().numpy()[:n])
        z = (x @ w1 + b1) * 2.0  # (x2: the norm's rounding, spare)
        with np.errstate(divide="ignore", invalid="ignore"):
            k = np.full(n, float(MAX_SCALE_LOG2))
            k = np.minimum(k, np.floor(RANGE_LOG2 - np.log2(z)))
            smallest = np.where(w2 > 0, w2, np.inf).min(axis=1)
            k = np.minimum(k, np.floor(np.log2(smallest) - SMALLEST_LOG2))
        short = relu & (~np.isfinite(z) | (k < 4))
        if short.any():
            bad = int(np.nonzero(short)[0][0])
            raise ExportError(f"{where}: a ReLU neuron's range (bound {z[bad]:.3g}) leaves no "
                              f"room to scale it past {cutoff} in float32; {instead}")
        k = np.where(relu, k, 0).astype(np.int64)
        scales.append(k)
        with np.errstate(invalid="ignore"):
            err = np.where(relu, gap * np.exp2(-k.astype(np.float64)) * gate, 0.0) @ w2
        bounds.append(float(err.max(initial=0.0)))
    return scales, bounds


def power_of_four(e: int) -> bool:
    """Head widths whose square root is a power of two (a q pre-scaled by it stays exact)."""
    return e >= 1 and (e & (e - 1)) == 0 and (e.bit_length() - 1) % 2 == 0


def token_strings(vocab, n: int, where: str) -> list[str]:
    """The export's token strings by id: `vocab` (a str: one character each, or a list of
    non-empty distinct strings) for the graph's n token-table rows; None gives "<0>", "<1>"..."""
    if vocab is None:
        return [f"<{i}>" for i in range(n)]
    if isinstance(vocab, str):
        vocab = list(vocab)
    if not isinstance(vocab, Sequence) or not all(isinstance(t, str) and t for t in vocab):
        raise ExportError(f"{where}: vocab must be a string of characters or a list of "
                          "non-empty strings")
    if len(vocab) != n:
        raise ExportError(f"{where}: vocab has {len(vocab)} tokens, the graph's token table "
                          f"has {n} rows")
    if len(set(vocab)) != len(vocab):
        raise ExportError(f"{where}: vocab has repeated tokens")
    return list(vocab)


def end_id(end, tokens: list[str], where: str, aliases=lambda t: (t,)) -> int | None:
    """The id of the end token `end` (a token string, any of its `aliases`, or an id)."""
    if end is None:
        return None
    if isinstance(end, (int, np.integer)) and not isinstance(end, bool):
        if 0 <= int(end) < len(tokens):
            return int(end)
    elif isinstance(end, str):
        for cand in aliases(end):
            if cand in tokens:
                return tokens.index(cand)
    raise ExportError(f"{where}: end token {end!r} is not in the vocabulary (nor an id below "
                      f"{len(tokens)})")
