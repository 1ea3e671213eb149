"""Verifying a drafted trace: one teacher-forced parallel pass of a compiled model.

    from tw_lowering.verify import verify_trace
    r = verify_trace(cm, trace, prompt_length=len(prompt))   # cm: a CompiledMachine
    r.first_divergence      # None: the model generates every drafted token itself
    r.tokens_per_s, r.indexed_heads, r.attended_heads

A draft (a token trace made by any fast reference: the index decoder, firebrand's C decoder,
the oracle) is checked against the model in one forward pass over the whole sequence, every
position fed the draft's token (teacher forcing), layer by layer and in chunks of positions
(`chunk`) to bound memory. The result names the first position p whose greedy next value
differs from the draft's token at p + 1 (`first_divergence`; positions before the prompt's
last are not checked: the prompt is given, not generated). Where the draft agrees up to p,
the model's own greedy generation agrees up to p + 1, so a draft with None is exactly the
model's generation.

What makes it fast: the exact-index heads (`lowering/index_heads.py`) are answered as gathers,
not attention, for all positions at once:

* **position** heads: per query the curvature a = q . A2 and slope b = q . A1 of its score over
  key positions give the winner clamp(b / (-2a), 0, i) (a < 0, the target an integer, -a at
  least the gap `needed_gap(n)` asks) or i (a = 0, b >= the gap); the value row is gathered.
  Every key is checked against its polynomial first (as the index decoder does); from the
  first key that leaves it, the head is attended.
* **match** heads: each key is checked against the plan (integer content on its lattice, its
  squares, recency r j) and given its class (the class dims' values; at most MAX_CLASSES
  classes, in order of first appearance). Keys are packed into int64 codes (class, integer
  content) and sorted by (code, position); a query's newest key with its target content in a
  class is one `searchsorted` for (code, i). The certificate is `_match_query`'s
  (`lowering/fast_decode.py`): a class of at most SMALL_CLASS keys so far is scored key by key;
  a larger one contributes its found key and the bounds on every key not looked up (content
  one lattice step off the target, older equal keys one recency step down); the winner must
  lead all of them by the gap. A query whose target is not on the lattice bounds its large
  classes by the unshifted content peak (safer than the decoder's bound, same answers).
  From the first key off the plan (or the class past MAX_CLASSES) the head is attended.
* **scan** heads (and every query above that is not certified) are attended: real softmax
  attention of those queries over their causal prefix (all keys for a full-mask head), in
  the model's dtype, chunked so that a block of scores stays under ATTEND_BUDGET entries.

Projections, output projections and MLPs are the model's own sublayers (`Attention.project`,
`Attention.update`, `Mlp.forward`) on chunks of the residual, so every number outside the
answered heads is the one `ct.run` computes. `indexed_heads` / `attended_heads` count
(position, head) answers of each kind; `attended_by_head` names the heads attended and how
often. On a GPU the whole pass stays on the device; on the CPU it gives the same answers.
`run`'s recomputation of rows that come out non-finite (the exact attention rule) is not
repeated here: such a row's next value is not finite and never equals a draft token.

Measured (bench/verify_trace.py): a 1,048,576-position RV32 trace (firebrand's C decoder's
draft of a C loop, RV32Spec(ram_bytes=2048, max_context=2^20), 37 float64 layers, 83
position and 3 match heads) verifies in 0.78 s on one H200 (1.35 million positions/s; every
answer gathered but 3,019 prompt queries of the match heads), against 2.2 ms per token for
the CUDA-graph KV-cache decode of the same model.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np
import torch

from tw_lowering.fast_decode import MAX_CLASSES, SMALL_CLASS  # (the decoder's certificate)
from twdialect import ArgumentError

ATTEND_BUDGET = 1 << 24  # score entries per block of attended queries
DEFAULT_CHUNK = {"cpu": 1 << 14, "cuda": 1 << 18}


@dataclass
class VerifyResult:
    """What `verify_trace` found. `first_divergence`: the first position p (at or after the
    prompt's last position) whose greedy next value differs from the draft's token at p + 1,
    None when the whole draft agrees. `positions`: the sequence's length; `seconds` the whole
    call (input checks, the forward pass, the comparison), `tokens_per_s` positions per
    second. `indexed_heads` / `attended_heads`: (position, head) answers by gather and by
    attention; `attended_by_head` {(layer, head): answers attended}. `predicted`: the model's
    next value at every position (machines: the rounded output "next"; else `next_of`'s);
    `outputs`: every output at every position ({name: float64 (n, width)}) with
    keep_outputs."""

    first_divergence: int | None
    positions: int
    seconds: float
    tokens_per_s: float
    indexed_heads: int
    attended_heads: int
    checked_from: int = 0
    attended_by_head: dict = field(default_factory=dict, repr=False)
    predicted: np.ndarray | None = field(default=None, repr=False)
    outputs: dict | None = field(default=None, repr=False)

    def as_dict(self) -> dict:
        return dict(first_divergence=self.first_divergence, positions=self.positions,
                    seconds=self.seconds, tokens_per_s=self.tokens_per_s,
                    indexed_heads=self.indexed_heads, attended_heads=self.attended_heads,
                    checked_from=self.checked_from)


def verify_trace(model, tokens_or_inputs, *, prompt_length: int = 1,
                 next_of: Callable[[dict], np.ndarray] | None = None,
                 expected=None, chunk: int | None = None, keep_outputs: bool = False,
                 on_out_of_range: str = "error") -> VerifyResult:
    """Check a drafted trace against `model` in one teacher-forced pass (module docstring).

    `model`: a `CompiledMachine` (the draft is its token values, as `generate` returns them;
    the model's next value at p is round(output "next")), or a `CompiledTransformer` with
    `tokens_or_inputs` either its inputs ({name: array}, as `run` takes them) or a 1-D array of
    token ids for its one embedding input; `next_of(outputs)` gives the predicted next value
    at every position from the outputs ({name: float64 (n, width)}), and `expected` the
    draft's values (position p's prediction is compared with expected[p + 1]; default: the
    token ids; a machine's draft is its own expected). Positions p >= prompt_length - 1 are
    checked. `chunk`: positions per block of the projections and MLPs (default: 2^14 on the
    CPU, 2^18 on a GPU). The model runs where it lives (`ct.to("cuda")`). Inputs are checked
    as `run` checks them (`on_out_of_range`); a draft token outside a machine's alphabet is
    one ArgumentError line."""
    from tw_lowering.machines import CompiledMachine
    from twdialect.inputs import check_inputs

    t0 = time.perf_counter()
    machine = None
    if isinstance(model, CompiledMachine):
        machine, ct = model.machine, model.compiled
        values = np.asarray(tokens_or_inputs)
        if values.ndim != 1 or not len(values):
            raise ArgumentError("verify_trace: a machine's draft is a non-empty 1-D sequence of "
                                "token values")
        if not np.issubdtype(values.dtype, np.integer) and not (
                np.issubdtype(values.dtype, np.floating) and np.all(values == np.round(values))):
            raise ArgumentError("verify_trace: a machine's draft holds integer values only")
        values = values.astype(np.int64)
        bad = np.nonzero((values < machine.lower) | (values > machine.upper))[0]
        if len(bad):
            raise ArgumentError(f"verify_trace: draft token {int(bad[0])} is "
                                f"{int(values[bad[0]])}, outside the machine's alphabet "
                                f"[{machine.lower}, {machine.upper}]")
        inputs = {"tokens": values - machine.lower}
        expected = values
    else:
        ct = model
        if isinstance(tokens_or_inputs, Mapping):
            inputs = tokens_or_inputs
            if expected is None:
                raise ArgumentError("verify_trace: with inputs given as a mapping, pass "
                                    "expected= (the draft's value at every position)")
        else:
            ids = np.asarray(tokens_or_inputs)
            emb = [s for s in ct.contract.specs if s.kind == "embedding"]
            if ids.ndim != 1 or len(emb) != 1 or len(ct.contract.specs) != 1:
                raise ArgumentError("verify_trace: a 1-D token array needs a model with one "
                                    "embedding input and no other (else pass a mapping)")
            inputs = {emb[0].name: ids}
            expected = ids if expected is None else expected
        if next_of is None:
            raise ArgumentError("verify_trace: a CompiledTransformer needs next_of(outputs) -> "
                                "the predicted next value at every position")
        expected = np.asarray(expected)
    if isinstance(prompt_length, bool) or not isinstance(prompt_length, (int, np.integer)) \
            or prompt_length < 1:
        raise ArgumentError(f"verify_trace: prompt_length must be a whole number >= 1, got "
                            f"{prompt_length!r}")
    checked = check_inputs(ct.contract, inputs, on_out_of_range)
    n = checked.n_positions
    if len(expected) != n:
        raise ArgumentError(f"verify_trace: expected has {len(expected)} values for {n} "
                            "positions")
    dev = ct.device
    chunk = int(chunk or DEFAULT_CHUNK.get(dev.type, 1 << 16))
    if chunk < 1:
        raise ArgumentError(f"verify_trace: chunk must be >= 1, got {chunk}")
    with torch.inference_mode():
        run = _Pass(ct, checked, chunk)
        x = run.forward()
        cols = ct.output_columns(x)
        start = min(int(prompt_length), n) - 1
        outputs = None
        if machine is not None and next_of is None:
            at = 0
            for slot in ct.outputs:  # (the column of output "next")
                if slot.name == "next":
                    break
                at += len(slot.rows)
            v = cols[:, at].to(torch.float64) * float(slot.scale[0])
            pred_t = torch.floor(v + 0.5)
            want = torch.as_tensor(expected, device=dev, dtype=torch.float64)
            miss = torch.nonzero(pred_t[start:n - 1] != want[start + 1:]).reshape(-1)
            first = int(miss[0]) + start if len(miss) else None
            predicted = pred_t.to(torch.int64).cpu().numpy()
            if keep_outputs:
                outputs = ct.read_outputs(cols.cpu().numpy())
        else:
            outputs = ct.read_outputs(cols.cpu().numpy())  # (a machine with a next_of too)
            predicted = np.asarray(next_of(outputs)).reshape(-1)
            if len(predicted) != n:
                raise ArgumentError(f"verify_trace: next_of gave {len(predicted)} values for "
                                    f"{n} positions")
            miss = np.nonzero(predicted[start:n - 1] != np.asarray(expected)[start + 1:])[0]
            first = int(miss[0]) + start if len(miss) else None
            if not keep_outputs:
                outputs = None
    seconds = time.perf_counter() - t0
    return VerifyResult(first, n, seconds, n / seconds if seconds > 0 else 0.0,
                        run.indexed, run.attended, start, dict(run.by_head), predicted, outputs)


# --------------------------------------------------------------------------------------
# The pass
# --------------------------------------------------------------------------------------


class _Pass:
    """One teacher-forced forward pass of `ct` over `checked` (one sequence of n positions),
    the residual held whole on the model's device."""

    def __init__(self, ct, checked, chunk: int):
        from tw_lowering.index_heads import needed_gap

        self.ct, self.checked, self.chunk = ct, checked, chunk
        self.n = checked.n_positions
        self.dev = ct.device
        self.need = float(needed_gap(self.n))
        self.eps = 2.0 ** -24 if ct._np_dtype == np.float32 else 2.0 ** -53
        self.indexed = 0
        self.attended = 0
        self.by_head: dict = {}

    def _chunks(self):
        for s in range(0, self.n, self.chunk):
            yield s, min(self.n, s + self.chunk)

    def forward(self) -> torch.Tensor:
        ct, n, dev = self.ct, self.n, self.dev
        feeds = ct.feeds([self.checked], n)
        table = ct.position_table(n)
        x = torch.empty(n, ct.machine.d, dtype=ct.dtype, device=dev)
        for s, e in self._chunks():
            pos = torch.arange(s, e, device=dev).unsqueeze(0)
            x[s:e] = ct.residual({k: v[:, s:e] for k, v in feeds.items()}, pos,
                                 table).view(e - s, -1)
        del feeds
        for li, layer in enumerate(ct.layers):
            self.attention(li, layer.attn, x)
            for s, e in self._chunks():
                layer.mlp(x[s:e])
        return x

    # -- attention ----------------------------------------------------------------------
    def attention(self, li: int, attn, x: torch.Tensor) -> None:
        if not attn.active:
            for s, e in self._chunks():
                attn.update(x[s:e], None)
            return
        n, h, e = self.n, attn.n_heads, attn.head_dim
        q = torch.empty(n, h * e, dtype=x.dtype, device=x.device)
        kv = torch.empty(n, 2 * h * e, dtype=x.dtype, device=x.device)
        for s, t in self._chunks():
            pos = torch.arange(s, t, device=x.device) if attn.n_rope else None
            q[s:t], kv[s:t] = attn.project(x[s:t], pos)
        q, kv = q.view(n, h, e), kv.view(n, h, 2 * e)
        out = torch.zeros(n, h, e, dtype=x.dtype, device=x.device)
        plans = _compiled_plans(attn)
        full = set(attn.full_heads.tolist()) if attn.n_full else set()
        position = [k for k in range(h) if plans[k].kind == "position" and k not in full
                    and plans[k].magnitude * self.eps * 8 <= plans[k].gap]
        if position:
            self.position_heads(li, attn, position, plans, q, kv, out)
        for k in range(h):
            if k in position:
                continue
            win = None
            if plans[k].kind == "match" and k not in full:
                win = _match_winners(q[:, k], kv[:, k, :e], plans[k], self.need)
            self.answer(li, k, win, q[:, k], kv[:, k, :e], kv[:, k, e:], out[:, k], k in full)
        del q, kv
        out = out.view(n, h * e)
        for s, t in self._chunks():
            attn.update(x[s:t], out[s:t])

    def answer(self, li, k, win, q, keys, values, out, full: bool = False) -> None:
        """Head k's output rows `out` (n, e): the value of `win` where it is >= 0, attention
        elsewhere (every row where `win` is None)."""
        if win is None:
            rows = torch.arange(self.n, device=q.device)
        else:
            out.copy_(values[win.clamp(min=0)])
            rows = torch.nonzero(win < 0).reshape(-1)
        m = int(rows.numel())
        self.indexed += self.n - m
        if m:
            self.attend(li, k, rows, q, keys, values, out, full)

    def attend(self, li, k, rows, q, keys, values, out, full: bool = False) -> None:
        m = int(rows.numel())
        self.attended += m
        self.by_head[(li, k)] = self.by_head.get((li, k), 0) + m
        out[rows] = _attend(q[rows], rows, keys, values, full)

    def position_heads(self, li, attn, heads, plans, q, kv, out) -> None:
        """Every position read of a layer at once: winners from the curvature and slope,
        value rows gathered; queries that are not certified, and every query from a key off
        its polynomial on, are attended. Only the head dims where both q and k have a weight
        take part (as `index_layout.flatten` keeps them: the others add nothing)."""
        n, h, e, dev = self.n, attn.n_heads, attn.head_dim, q.device
        H = len(heads)
        w = attn.w_qkv.ne(0).any(0).cpu().numpy()
        qcols, kcols, owner, poly = [], [], [], []
        for i, k in enumerate(heads):
            both = w[k * e: k * e + e] & w[h * e + k * 2 * e: h * e + k * 2 * e + e]
            act = np.nonzero(both)[0] if both.any() else np.array([0])
            p = plans[k]
            for d in act:
                qcols.append(k * e + d)
                kcols.append(k * 2 * e + d)
                owner.append(i)
                poly.append((p.a0[d], p.a1[d], p.a2[d]))
        P = len(qcols)
        qcols = torch.as_tensor(qcols, device=dev)
        kcols = torch.as_tensor(kcols, device=dev)
        owner_t = torch.as_tensor(owner, device=dev)
        poly = torch.as_tensor(np.array(poly, np.float64).reshape(P, 3), device=dev)
        per_head = torch.zeros(2, P, H, dtype=torch.float64, device=dev)
        per_head[0, torch.arange(P, device=dev), owner_t] = poly[:, 1]
        per_head[1, torch.arange(P, device=dev), owner_t] = poly[:, 2]
        qf, kf = q.view(n, h * e), kv.view(n, 2 * h * e)
        # keys against their polynomials: the first one off it, per head
        first_off = torch.full((H,), n, dtype=torch.int64, device=dev)
        for s, t in self._chunks():
            j = torch.arange(s, t, device=dev, dtype=torch.float64)[:, None]
            want = poly[:, 0] + poly[:, 1] * j + poly[:, 2] * j * j
            got = kf[s:t].index_select(1, kcols).to(torch.float64)
            off = (got - want).abs() > 1e-6 * want.abs().clamp(min=1.0)  # (c, P)
            col = torch.where(off.any(0), off.to(torch.int8).argmax(0) + s, n)
            first_off = first_off.scatter_reduce(0, owner_t, col, "amin")
        values = kv[..., e:]  # (n, h, e)
        # the value dims some output reads (the others meet zero rows of W_o: left at 0)
        wo = attn.w_o.ne(0).any(1).cpu().numpy()
        vowner, vsrc, vdst = [], [], []
        for c, k in enumerate(heads):
            for d in np.nonzero(w[h * e + k * 2 * e + e: h * e + k * 2 * e + 2 * e]
                                & wo[k * e: k * e + e])[0]:
                vowner.append(c)
                vsrc.append(k * 2 * e + e + d)
                vdst.append(k * e + d)
        vowner = torch.as_tensor(vowner, dtype=torch.int64, device=dev)
        vsrc = torch.as_tensor(vsrc, dtype=torch.int64, device=dev)
        vdst = torch.as_tensor(vdst, dtype=torch.int64, device=dev)
        flat_kv, flat_out = kv.reshape(-1), out.view(n, h * e)
        bad = torch.zeros(H, dtype=torch.int64, device=dev)
        wins = torch.empty(n, H, dtype=torch.int64, device=dev)
        for s, t in self._chunks():
            qa = qf[s:t].index_select(1, qcols).to(torch.float64)  # (c, P)
            a = qa @ per_head[1]  # (c, H): the curvature, then the slope
            b = qa @ per_head[0]
            i = torch.arange(s, t, device=dev)[:, None]
            target = b / (-2.0 * a)
            concave = (a < 0) & (target == torch.floor(target)) & (-a >= self.need)
            win = torch.minimum(torch.nan_to_num(target).clamp(min=0.0), i.to(torch.float64))
            win = torch.where(concave, win.to(torch.int64), -1)
            win = torch.where((a == 0) & (b >= self.need), i, win)
            win = torch.where(i < first_off, win, -1)
            wins[s:t] = win
            bad += (win < 0).sum(0)
            if len(vsrc):
                at = win.clamp(min=0).index_select(1, vowner) * (2 * h * e) + vsrc
                flat_out[s:t].index_copy_(1, vdst, flat_kv.take(at))
        bad = bad.tolist()
        self.indexed += n * H - sum(bad)
        for c, k in enumerate(heads):
            if bad[c]:
                rows = torch.nonzero(wins[:, c] < 0).reshape(-1)
                self.attend(li, k, rows, q[:, k], kv[:, k, :e], values[:, k], out[:, k])


def _compiled_plans(attn) -> list:
    """The layer's head plans over its compiled head dims (`index_layout._remap`)."""
    from tw_lowering.index_layout import _remap

    kept = attn.qk_dims.tolist()
    return [_remap(p, kept) for p in attn.plans]


def _attend(q: torch.Tensor, rows: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
            full: bool) -> torch.Tensor:
    """Softmax attention (scale 1) of queries q (m, e) at positions `rows` (ascending) over
    keys 0..row (all keys for a full-mask head), in the model's dtype, in blocks."""
    m = q.shape[0]
    out = torch.empty(m, values.shape[1], dtype=values.dtype, device=values.device)
    n = keys.shape[0]
    at = rows.cpu().numpy()
    s = 0
    while s < m:  # a block of queries whose scores (queries x keys seen) fit the budget
        t = min(m, s + max(1, ATTEND_BUDGET // (n if full else int(at[s]) + 1)))
        last = n if full else int(at[t - 1]) + 1
        if (t - s) * last > ATTEND_BUDGET:
            t = s + max(1, ATTEND_BUDGET // last)
            last = n if full else int(at[t - 1]) + 1
        scores = q[s:t] @ keys[:last].T
        if not full:
            j = torch.arange(last, device=q.device)
            scores = scores.masked_fill(j[None, :] > rows[s:t, None], float("-inf"))
        out[s:t] = torch.softmax(scores, dim=-1) @ values[:last]
        s = t
    return out


# --------------------------------------------------------------------------------------
# Newest-key match heads
# --------------------------------------------------------------------------------------


def _match_winners(q: torch.Tensor, k: torch.Tensor, plan, need: float) -> torch.Tensor:
    """Per query i (0..n-1): the certified winner of a match head over keys 0..i, or -1
    (module docstring; `index_kernel`'s match_query certificate). q, k: (n, e)."""
    n, dev = q.shape[0], q.device
    q = q.to(torch.float64)
    k = k.to(torch.float64)
    none = torch.full((n,), -1, dtype=torch.int64, device=dev)
    r = plan.recency_dim
    if r < 0 or not plan.square_dims:
        return none
    pos = torch.arange(n, device=dev)
    posf = pos.to(torch.float64)
    # ---- keys: on the plan's lattice, squares and recency; the first off it
    regular = torch.ones(n, dtype=torch.bool, device=dev)
    ns = []
    for vd, sd, sigma, step in zip(plan.value_dims, plan.square_dims, plan.sigma,
                                   plan.steps):
        sq = k[:, sd]
        if vd < 0:
            nv = sq / (sigma * step * step)
            want = sq
        else:
            kv = k[:, vd]
            nv = kv / step
            want = sigma * kv * kv
        regular &= (nv == torch.floor(nv)) & (nv.abs() <= 2.0 ** 52) \
            & ((sq - want).abs() <= 1e-9 * want.abs().clamp(min=1.0))
        ns.append(nv)
    want = plan.recency * posf
    regular &= (k[:, r] - want).abs() <= 1e-9 * want.abs().clamp(min=1.0)
    m = n if bool(regular.all()) else int(torch.nonzero(~regular)[0])
    # ---- classes, in order of first appearance (at most MAX_CLASSES)
    cd = list(plan.class_dims)
    if cd:
        cvals, cls = torch.unique(k[:m][:, cd], dim=0, return_inverse=True)
    else:
        cvals, cls = k.new_zeros(1, 0), torch.zeros(m, dtype=torch.int64, device=dev)
    if m == 0:
        return none
    n_cls = cvals.shape[0]
    first = torch.full((n_cls,), m, dtype=torch.int64, device=dev).scatter_reduce(
        0, cls, pos[:m], "amin")
    order = torch.argsort(first)
    if n_cls > MAX_CLASSES:
        m = int(first[order[MAX_CLASSES]])
        order = order[:MAX_CLASSES]
        n_cls = MAX_CLASSES
    rank = torch.full((cvals.shape[0],), -1, dtype=torch.int64, device=dev)
    rank[order] = torch.arange(len(order), device=dev)
    cvals = cvals[order]
    cls = rank[cls[:m]]
    C = n_cls
    kk, qq = k[:m], q[:m]
    pm = pos[:m]
    # ---- per query: recency, betas, targets, the content peak and its least drop
    qr = qq[:, r] * plan.recency
    ok = qr > 0
    content = torch.zeros(m, dtype=torch.float64, device=dev)
    drop = torch.full((m,), float("inf"), dtype=torch.float64, device=dev)
    exact = torch.ones(m, dtype=torch.bool, device=dev)
    targets = []
    for vd, sd, sigma, step in zip(plan.value_dims, plan.square_dims, plan.sigma,
                                   plan.steps):
        beta = qq[:, sd] * sigma
        ok &= beta < 0
        qv = qq[:, vd] if vd >= 0 else torch.zeros_like(beta)
        t = -qv / (2.0 * beta)
        nt = t / step
        exact &= (nt == torch.floor(nt)) & (nt.abs() <= 2.0 ** 52)
        targets.append(nt)
        content += qv * t + beta * t * t
        drop = torch.minimum(drop, -beta * step * step)
    const = torch.zeros(m, dtype=torch.float64, device=dev)
    for d, c in zip(plan.const_dims, plan.const):
        const += qq[:, d] * c
    bonus = qq[:, cd] @ cvals.T if cd else torch.zeros(m, C, dtype=torch.float64, device=dev)
    # ---- each class's first SMALL_CLASS + 1 keys: scored key by key while the class holds
    # at most SMALL_CLASS keys (before its next one), looked up from then on
    order_c = torch.argsort(cls * m + pm)  # by class, then position
    starts = torch.searchsorted(cls[order_c], torch.arange(C, device=dev))
    total = torch.bincount(cls, minlength=C)
    ks = torch.arange(SMALL_CLASS + 1, device=dev)
    firsts = torch.where(ks[None, :] < total[:, None],
                         order_c[(starts[:, None] + ks[None, :]).clamp(max=m - 1)], m)
    small_pos = firsts[:, :SMALL_CLASS]  # (C, S): positions, m where the class has fewer
    large = pm[:, None] >= firsts[None, :, SMALL_CLASS]  # (m, C)
    small_s = qq @ kk[small_pos.clamp(max=m - 1).reshape(-1)].T  # (m, C * S)
    seen = (small_pos[None, :, :] <= pm[:, None, None]) & ~large[:, :, None]
    cand = torch.where(seen, small_s.view(m, C, SMALL_CLASS), float("-inf")).view(m, -1)
    del small_s, seen
    # ---- large classes: the bound on keys not looked up, and the newest exact match
    peak = const[:, None] + bonus + (content + qr * pm.to(torch.float64))[:, None]
    bound = torch.where(exact[:, None], peak - drop[:, None], peak)
    bounds = [torch.where(large, bound, float("-inf"))]
    code_k, code_q = _codes(torch.stack(ns, 1)[:m].round().to(torch.int64),
                            torch.stack(targets, 1), exact, cls, C)
    if code_k is not None:
        comp = torch.sort(code_k * m + pm).values
        want = code_q * m + pm[:, None]  # (m, C), -1 codes never match
        idx = torch.searchsorted(comp, want.reshape(-1), right=True).view(m, C) - 1
        hit = comp[idx.clamp(min=0)]
        found = (idx >= 0) & (code_q >= 0) & (torch.div(hit, m, rounding_mode="floor")
                                              == code_q) & large & exact[:, None]
        j = torch.where(found, hit % m, 0)
        s = (qq[:, None, :] * kk[j]).sum(-1)  # (m, C)
        s = torch.where(found, s, float("-inf"))
        cand = torch.cat([cand, s], 1)
        bounds.append(s - qr[:, None])
        found_j = j
    else:
        found_j = None
    top = torch.topk(cand, min(2, cand.shape[1]), dim=1)
    best = top.values[:, 0]
    second = top.values[:, 1] if cand.shape[1] > 1 else torch.full_like(best, float("-inf"))
    second = torch.maximum(second, torch.cat(bounds, 1).max(1).values)
    arg = top.indices[:, 0]
    ns_small = C * SMALL_CLASS
    from_small = arg < ns_small
    small_win = small_pos.reshape(-1)[arg.clamp(max=ns_small - 1)]
    win = small_win
    if found_j is not None:
        large_win = found_j.gather(1, (arg - ns_small).clamp(min=0)[:, None])[:, 0]
        win = torch.where(from_small, small_win, large_win)
    good = ok & torch.isfinite(best) & (best - second >= need)
    none[:m] = torch.where(good, win, -1)
    return none


def _codes(kn: torch.Tensor, qn: torch.Tensor, exact: torch.Tensor, cls: torch.Tensor, C: int):
    """int64 codes of (class, integer content): keys' (m,) and queries' (m, C) (-1: a target
    no key holds). Packed by ranges where they fit, else by unique ids of the tuples."""
    m, nv = kn.shape
    dev = kn.device
    lo, hi = kn.min(0).values, kn.max(0).values
    width = (hi - lo + 1)
    span = float(C) * float(m) * float(np.prod(width.to(torch.float64).cpu().numpy()))
    qi = torch.where(exact[:, None], qn, 0.0)
    inside = exact & ((qi >= lo.to(torch.float64)) & (qi <= hi.to(torch.float64))).all(1)
    qi = torch.where(inside[:, None], qi, lo.to(torch.float64)).to(torch.int64)
    if span < 2.0 ** 62:
        ck = torch.zeros(m, dtype=torch.int64, device=dev)
        cq = torch.zeros(m, dtype=torch.int64, device=dev)
        for d in range(nv):
            ck = ck * width[d] + (kn[:, d] - lo[d])
            cq = cq * width[d] + (qi[:, d] - lo[d])
        size = int(np.prod(width.cpu().numpy().astype(object))) if nv else 1
    else:  # ids of the content tuples, keys' and targets' together
        both = torch.cat([kn, qi[inside]], 0)
        _, ids = torch.unique(both, dim=0, return_inverse=True)
        ck = ids[:m]
        cq = torch.zeros(m, dtype=torch.int64, device=dev)
        cq[inside] = ids[m:]
        size = int(ids.max()) + 1 if ids.numel() else 1
    code_k = cls * size + ck
    code_q = torch.arange(C, device=dev)[None, :] * size + cq[:, None]
    code_q = torch.where(inside[:, None], code_q, -1)
    return code_k, code_q


__all__ = ["verify_trace", "VerifyResult"]
