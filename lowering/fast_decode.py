"""The index decoder: long generation on the CPU at a cost per token that does not grow with t.

`IndexDecoder(ct, capacity)` runs a compiled model one position at a time, in one numba-compiled
function per position (no Python per layer), with the same `prefill` / `step` as
`lowering.decode.Decoder` (batch 1), and `run_machine` keeps the whole greedy loop of a
firebrand machine in compiled code. What makes it fast:

* **Exact-index heads** (`lowering/index_heads.py`): a position read looks its key up by the
  target position, a newest-key match in a hash table keyed by (class, integer content); each
  answer is the winner's value, which the softmax gives to float32 rounding (the proof).
  Every key is checked against its head's plan as it is written (position polynomial; integer
  content, squares, recency) and every match query is certified (its winner leads every other
  candidate and the bound on the keys not looked up by the gap `needed_gap(capacity)`); a key
  that does not fit, or a query that cannot be certified, is attended over the stored keys
  (`scan`), as is every head the plan leaves to attention. A position key that does not fit
  its polynomial stops the decoder (`IndexMismatch`): the callers then finish with the torch
  decoder, so no path gives another answer than real attention.
* **Memory**: per head, only the value dims some output reads, per position; keys only for
  match and attended heads (position reads need none).
* **Skipping unchanged MLP work**: a neuron whose inputs equal the previous position's keeps
  its activation, and an output column none of whose neurons changed keeps its sum. Each
  recomputed number is summed in one fixed order, so skipping never changes a bit.

Numbers are the model's dtype (float32 or float64), each sum in read order with the bias added
last (the torch layers add the bias last too, but their matrix kernels sum in another order: a
float32 model's outputs may differ from the torch decoder's by rounding, 0.0055 on logits of
2,730 in sort_digits; the tokens are the same). `available()` says whether numba is there (the callers fall back to the
torch decoder, saying why, where it is not); `supports(ct)` whether a model's layers fit
(relu MLPs, no rotary or full-mask heads).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from twdialect.errors import TwError

try:  # (numba is a dependency; the decoder degrades to the torch one where it is missing)
    import numba
    from numba import njit
    from numba.core import types as _nb_types
    from numba.typed import Dict as _NbDict
    _MISSING = None
except ImportError as e:  # pragma: no cover - exercised where numba is absent
    numba = None
    _MISSING = f"numba is not installed ({e})"

    def njit(*a, **k):
        return (lambda f: f) if not (len(a) == 1 and callable(a[0])) else a[0]

KIND_SCAN, KIND_POSITION, KIND_MATCH = 0, 1, 2
MAX_CLASSES = 16
MAX_CLASS_DIMS = 4
SCAN_CUTOFF = 60.0
SMALL_CLASS = 4  # a class of at most this many keys is scored key by key


class IndexMismatch(TwError):
    """A key did not fit its head's proven plan: the index decoder stops (callers fall back)."""


def available() -> str | None:
    """None where the index decoder can run, else why not (one line)."""
    return _MISSING


DECODERS = ("auto", "index", "torch")  # what generate / next_values / tw-machine take


def torch_reason(ct, decoder: str, unchecked: bool = False) -> str | None:
    """Why `decoder` (one of DECODERS) runs `ct` on the torch decoder: "asked for", what
    `supports` says, or unchecked inputs (the heads' plans are proven over the declared
    ranges); None where the index decoder runs."""
    if decoder == "torch":
        return "asked for"
    why = supports(ct)
    if not why and unchecked:
        why = "unchecked inputs: the plans are proven over the declared ranges"
    return why


def supports(ct) -> str | None:
    """None where `ct`'s layers fit the index decoder, else why not (one line)."""
    if _MISSING:
        return _MISSING
    if ct.full_heads:
        return "full-mask heads run on whole sequences only"
    if ct.rope_heads:
        return "rotary heads are not in the index decoder"
    if ct.swish_neurons or ct.gated_neurons:
        return "swish and gated neurons are not in the index decoder"
    if ct.device.type != "cpu":
        return "the index decoder runs on the CPU"
    return None


# --------------------------------------------------------------------------------------
# The model as flat arrays
# --------------------------------------------------------------------------------------


def _csc(rows: np.ndarray, vals: np.ndarray, cols: int):
    """(ptr, row, val) of a dense (rows x cols) block by column, zeros dropped, rows ascending."""
    ptr = [0]
    rr, vv = [], []
    for c in range(cols):
        nz = np.nonzero(vals[:, c])[0]
        rr.append(rows[nz])
        vv.append(vals[nz, c])
        ptr.append(ptr[-1] + len(nz))
    cat = (lambda xs, dt: np.concatenate(xs).astype(dt) if xs else np.zeros(0, dt))
    return np.array(ptr, np.int64), cat(rr, np.int64), cat(vv, vals.dtype)


class _Builder:
    """Lists of per-layer arrays joined into flat ones, with their offsets."""

    def __init__(self):
        self.parts: dict[str, list] = {}

    def add(self, name: str, values, dtype) -> int:
        part = self.parts.setdefault(name, [])
        start = sum(len(p) for p in part)
        part.append(np.asarray(values, dtype).reshape(-1))
        return start

    def lists(self, name: str, ptr: np.ndarray, items: np.ndarray, vals=None, dt=None,
              items_name: str | None = None) -> None:
        """CSC/CSR lists (`_csc`'s ptr, items, vals) appended under `name`: `{name}_ptr` and
        `{name}_end` (offsets into the joined items), the items (`items_name`, default
        `{name}_row`) and, given, `{name}_val`."""
        items_name = items_name or f"{name}_row"
        base = self.size(items_name)
        self.add(f"{name}_ptr", ptr[:-1] + base if len(ptr) > 1 else [], np.int64)
        self.add(f"{name}_end", ptr[1:] + base if len(ptr) > 1 else [], np.int64)
        self.add(items_name, items, np.int64)
        if vals is not None:
            self.add(f"{name}_val", vals, dt)

    def size(self, name: str) -> int:
        return sum(len(p) for p in self.parts.get(name, []))

    def array(self, name: str, dtype) -> np.ndarray:
        part = self.parts.get(name)
        return np.concatenate(part).astype(dtype) if part else np.zeros(0, dtype)


@dataclass
class Flat:
    """The numbers the compiled step reads (see `flatten`)."""

    arrays: dict
    n_heads: int
    plans: list
    layout: tuple | None = None  # (IndexDecoder._layout, made by the first decoder)


def flatten(ct) -> Flat:
    """Every layer of `ct` as CSC/CSR arrays over residual columns (`_step`'s layout)."""
    dt = ct._np_dtype
    b = _Builder()
    ints = {}
    heads, plans = 0, []
    layer_rows = []
    for layer in ct.layers:
        a, m = layer.attn, layer.mlp
        row = {}
        row["h0"], row["h1"] = heads, heads + (a.n_heads if a.active else 0)
        # attention: per head q, k (its dqk dims) and used v dims, as CSC over residual cols
        o_rows = {}  # (head, v dim) -> global v-dim id
        if a.active:
            read = a.read.numpy()
            w = a.w_qkv.numpy()
            h, e = a.n_heads, a.head_dim
            wo = a.w_o.numpy()[:, :a.n_write]
            kept = a.qk_dims.tolist()
            for k in range(h):
                plan = _remap(a.plans[k], kept)
                qcols = w[:, k * e: k * e + e]
                kcols = w[:, h * e + k * 2 * e: h * e + k * 2 * e + e]
                if plan.kind == "position":  # (only the dims whose products can be nonzero)
                    act = [i for i in range(e) if qcols[:, i].any() and kcols[:, i].any()] or [0]
                    qcols, kcols = qcols[:, act], kcols[:, act]
                    plan = _only(plan, act)
                dq = qcols.shape[1]
                qb, vb = b.size("q_ptr"), b.size("v_ptr")
                used = [u for u in range(e) if np.any(wo[k * e + u] != 0)
                        and np.any(w[:, h * e + k * 2 * e + e + u] != 0)]
                vcols = w[:, [h * e + k * 2 * e + e + u for u in used]] if used else \
                    np.zeros((len(read), 0), dt)
                for name, block in (("q", qcols), ("k", kcols), ("v", vcols)):
                    ptr, rr, vv = _csc(read, block, block.shape[1])
                    b.lists(name, ptr, rr, vv, dt)
                b.add("head_q", [qb], np.int64)
                b.add("head_dq", [dq], np.int64)
                b.add("head_v", [vb], np.int64)
                b.add("head_nv", [len(used)], np.int64)
                for i, u in enumerate(used):
                    o_rows[(k, u)] = vb + i
                kind = {"position": KIND_POSITION, "match": KIND_MATCH}.get(plan.kind, KIND_SCAN)
                b.add("head_kind", [kind], np.int64)
                _plan_arrays(b, plan, dq, dt)
                plans.append(plan)
            heads += h
        # the output projection by written column: (global v dim, weight); no heads: the
        # output bias alone
        row["o0"], row["nw_a"] = b.size("o_ptr"), a.n_write
        if a.n_write:
            ids = sorted(o_rows.items(), key=lambda t: t[1])
            wo_rows = (wo[[k * e + u for (k, u), _ in ids]] if ids  # (ids: a layer with heads)
                       else np.zeros((0, a.n_write), dt))
            ptr, rr, vv = _csc(np.array([g for _, g in ids], np.int64), wo_rows, a.n_write)
            b.lists("o", ptr, rr, vv, dt)
            b.add("o_write", a.write.numpy(), np.int64)
            b.add("o_bias", a.b_o.numpy()[:a.n_write], dt)
        _mlp_arrays(b, row, m, dt)
        layer_rows.append(row)
    keys = ("h0", "h1", "o0", "nw_a", "m_read0", "nr", "n0", "nn", "w0", "nw")
    ints["layers"] = np.array([[r[k] for k in keys] for r in layer_rows], np.int64).reshape(
        -1, len(keys))
    names = set(b.parts) | set(ARRAY_ORDER)
    arrays = {name: b.array(name, np.int64 if name in _INT_PARTS else
                            np.float64 if name in _F64_PARTS else dt) for name in names}
    arrays.update(ints)
    return Flat(arrays, heads, plans)


_F64_PARTS = {"pa0", "pa1", "pa2", "mt_sigma", "mt_step", "mt_rec", "mt_const"}
_INT_PARTS = {"q_ptr", "q_end", "q_row", "k_ptr", "k_end", "k_row", "v_ptr", "v_end", "v_row",
              "head_q", "head_dq", "head_v", "head_nv", "head_kind",
              "o_ptr", "o_end", "o_row", "o_write", "m_read", "n_ptr", "n_end", "n_idx",
              "r_ptr", "r_end", "r_neuron", "w_ptr", "w_end", "w_neuron", "nw_ptr", "nw_end",
              "nw_col", "m_write", "mt_ptr", "mt_vdim", "mt_sdim", "mt_cdim", "mt_cptr",
              "mt_rdim", "mt_n", "mt_cn", "head_k", "head_s", "head_need",
              "mlp_need"}


def _plan_arrays(b: _Builder, plan, dq: int, dt) -> None:
    """A head's plan: position polynomials per q dim; a match's dims."""
    pad = (lambda t: (list(t) + [0.0] * dq)[:dq])
    b.add("pa0", pad(plan.a0), np.float64)
    b.add("pa1", pad(plan.a1), np.float64)
    b.add("pa2", pad(plan.a2), np.float64)
    b.add("mt_ptr", [b.size("mt_vdim")], np.int64)
    b.add("mt_n", [len(plan.value_dims)], np.int64)
    b.add("mt_cn", [min(len(plan.class_dims), MAX_CLASS_DIMS)], np.int64)
    const = np.zeros(dq)
    for d, c in zip(plan.const_dims, plan.const):
        if d < dq:
            const[d] = c
    b.add("mt_const", const, np.float64)
    b.add("mt_vdim", plan.value_dims, np.int64)
    b.add("mt_sdim", plan.square_dims, np.int64)
    b.add("mt_sigma", plan.sigma, np.float64)
    b.add("mt_step", plan.steps, np.float64)
    b.add("mt_cptr", [b.size("mt_cdim")], np.int64)
    b.add("mt_cdim", plan.class_dims[:MAX_CLASS_DIMS], np.int64)
    b.add("mt_rdim", [plan.recency_dim], np.int64)
    b.add("mt_rec", [plan.recency], np.float64)


def _remap(plan, kept: list[int]):
    """`plan` over the compiled head's dims: the runtime keeps only head dims where both q and
    k have a weight (`Attention.qk_dims`), so plan dim kept[i] is compiled dim i; a dropped
    dim adds nothing to any score. A match that loses a value, square or recency dim is
    attended."""
    import dataclasses

    from tw_lowering.index_heads import HeadPlan

    at = {d: i for i, d in enumerate(kept)}
    e = len(kept)
    if plan.kind == "position":
        pick = (lambda t: tuple(t[d] if d < len(t) else 0.0 for d in kept))
        return dataclasses.replace(plan, dims=e, a0=pick(plan.a0), a1=pick(plan.a1),
                                   a2=pick(plan.a2))
    if plan.kind != "match":
        return plan
    need = list(plan.square_dims) + [plan.recency_dim]
    if any(d not in at for d in need):
        return HeadPlan("scan", "a match whose key dims the runtime drops")
    # a value dim dropped (its query weight is 0: the target is 0) is indexed by its square
    classes = tuple(at[d] for d in plan.class_dims if d in at)
    if len(classes) > MAX_CLASS_DIMS:  # (the certificate must see every class bonus)
        return HeadPlan("scan", f"a match of {len(classes)} class dims (the index decoder "
                        f"takes {MAX_CLASS_DIMS})")
    consts = [(at[d], c) for d, c in zip(plan.const_dims, plan.const) if d in at]
    return dataclasses.replace(
        plan, dims=e, value_dims=tuple(at.get(d, -1) for d in plan.value_dims),
        square_dims=tuple(at[d] for d in plan.square_dims), recency_dim=at[plan.recency_dim],
        class_dims=classes, const_dims=tuple(d for d, _ in consts),
        const=tuple(c for _, c in consts))


def _only(plan, dims: list[int]):
    """A position plan over its dims `dims` alone."""
    import dataclasses

    return dataclasses.replace(plan, dims=len(dims), a0=tuple(plan.a0[i] for i in dims),
                               a1=tuple(plan.a1[i] for i in dims),
                               a2=tuple(plan.a2[i] for i in dims))


def _prompt_cone(a: dict, kofs: np.ndarray, sofs: np.ndarray, n_layers: int, d: int):
    """(per head, per layer MLP) 1 where a prompt position's keys and values depend on it:
    backwards from the keys and values heads store (every head's key is read, to check or
    store it), a sublayer is needed when it writes a needed column, and then what it reads
    is needed (an MLP: all its reads; a head: its query, key and value)."""
    n_heads = len(a["head_kind"])
    head_need = np.ones(max(n_heads, 1), np.int64)
    mlp_need = np.ones(max(n_layers, 1), np.int64)
    needed = np.zeros(d, bool)
    owner = np.zeros(len(a["v_ptr"]), np.int64)
    for g in range(n_heads):
        owner[a["head_v"][g]:a["head_v"][g] + a["head_nv"][g]] = g

    def rows(name: str, g: int, count_name: str) -> np.ndarray:
        base = a["head_q"][g] if name in ("q", "k") else a["head_v"][g]
        n = a["head_dq"][g] if name in ("q", "k") else a["head_nv"][g]
        spans = [a[f"{name}_row"][a[f"{name}_ptr"][base + i]:a[f"{name}_end"][base + i]]
                 for i in range(n)]
        return np.concatenate(spans) if spans else np.zeros(0, np.int64)

    for li in reversed(range(n_layers)):
        h0, h1, o0, nwa, r0, nr, n0, nn, w0, nw = a["layers"][li]
        if nw and needed[a["m_write"][w0:w0 + nw]].any():
            needed[a["m_read"][r0:r0 + nr]] = True
        elif nw:
            mlp_need[li] = 0
        answer = set()
        for c in range(o0, o0 + nwa):
            if needed[a["o_write"][c]]:
                answer.update(owner[a["o_row"][a["o_ptr"][c]:a["o_end"][c]]].tolist())
        for g in range(h0, h1):
            needed[rows("k", g, "head_dq")] = True
            if sofs[g] >= 0:
                needed[rows("v", g, "head_nv")] = True
            if g in answer:
                needed[rows("q", g, "head_dq")] = True
                needed[rows("v", g, "head_nv")] = True
            else:
                head_need[g] = 0
    return head_need, mlp_need


def _reads_itself(a: dict, g: int) -> bool:
    """Head g is a position read with no curvature (s = b j, b > 0 proven): its winner is
    always the query's own position, so its values need no storage."""
    if a["head_kind"][g] != KIND_POSITION:
        return False
    qb, dq = a["head_q"][g], a["head_dq"][g]
    return not np.any(a["pa2"][qb:qb + dq]) and bool(np.any(a["pa1"][qb:qb + dq]))


def _mlp_arrays(b: _Builder, row: dict, m, dt) -> None:
    """One MLP as CSR by neuron over its read columns, CSC by read column over neurons, CSC
    of W2 by written column and CSR of W2 by neuron over written columns."""
    n = m.n_neurons if m.n_write else 0
    read = m.read.numpy() if n else np.zeros(0, np.int64)
    row["m_read0"] = b.add("m_read", read, np.int64)
    row["nr"] = len(read)
    row["n0"] = b.size("b1")
    row["nn"] = n
    row["w0"] = b.size("m_write")
    row["nw"] = m.n_write
    b.add("m_write", m.write.numpy(), np.int64)
    b.add("b2", m.b2.numpy()[:m.n_write], dt)
    if not n:
        # neurons none: the bias alone (an empty column sum)
        base = b.size("w_neuron")
        b.add("w_ptr", np.full(m.n_write, base), np.int64)
        b.add("w_end", np.full(m.n_write, base), np.int64)
        return
    w1 = m.w1.numpy()[:, :n]
    w2 = m.w2.numpy()[:n, :m.n_write]
    b.add("b1", m.b1.numpy()[:n], dt)
    r0 = row["m_read0"]
    # by neuron: read positions (global index into m_read) and weights, ascending
    ptr, idx, val = _csc(np.arange(len(read)) + r0, w1, n)
    b.lists("n", ptr, idx, val, dt, items_name="n_idx")
    # by read column: the neurons reading it (global neuron ids)
    n0 = row["n0"]
    ptr, neu, _ = _csc(np.arange(n) + n0, w1.T.copy(), len(read))
    b.lists("r", ptr, neu, items_name="r_neuron")
    # W2 by written column: (global neuron, weight), neurons ascending
    ptr, neu, val = _csc(np.arange(n) + n0, w2, m.n_write)
    b.lists("w", ptr, neu, val, dt, items_name="w_neuron")
    # W2 by neuron: the written columns (global write ids)
    w0 = row["w0"]
    ptr, col, _ = _csc(np.arange(m.n_write) + w0, w2.T.copy(), n)
    b.lists("nw", ptr, col, items_name="nw_col")


# --------------------------------------------------------------------------------------
# The compiled step
# --------------------------------------------------------------------------------------

ARRAY_ORDER = (
    "layers", "head_q", "head_dq", "head_v", "head_nv", "head_kind", "head_k",
    "head_s", "head_need", "mlp_need",
    "q_ptr", "q_end", "q_row", "q_val", "k_ptr", "k_end", "k_row", "k_val",
    "v_ptr", "v_end", "v_row", "v_val", "pa0", "pa1", "pa2",
    "mt_ptr", "mt_n", "mt_vdim", "mt_sdim", "mt_sigma", "mt_step", "mt_cptr", "mt_cn",
    "mt_cdim", "mt_rdim", "mt_rec", "mt_const",
    "o_ptr", "o_end", "o_row", "o_val", "o_write", "o_bias",
    "m_read", "n_ptr", "n_end", "n_idx", "n_val", "b1", "r_ptr", "r_end", "r_neuron",
    "w_ptr", "w_end", "w_neuron", "w_val", "b2", "nw_ptr", "nw_end", "nw_col", "m_write")
STATE_ORDER = ("m_prev", "hid", "m_out", "dirty_n", "dirty_w", "list_n", "list_w", "first",
               "v_store", "k_store", "table", "cls_val", "cls_n", "cls_count", "cls_pos",
               "irregular", "stats", "qbuf", "kbuf", "outv", "scans")
ERR_MISMATCH = -1


@njit(cache=True, inline="always")
def _dot(x, ptr, end, row, val, zero):
    """sum of x[row[t]] * val[t] for t in ptr..end-1, in that order, from `zero` (the
    model's dtype): every sum of the decoder, so a sum recomputed gives the same bits."""
    acc = zero
    for t in range(ptr, end):
        acc += x[row[t]] * val[t]
    return acc


@njit(cache=True, inline="always")
def _mark(item, flags, items, k):
    """Put `item` on the list `items` (k long) once: `flags` says who is on it already."""
    if flags[item] == 0:
        flags[item] = 1
        items[k] = item
        k += 1
    return k


@njit(cache=True)
def _softmax_read(g, p, kind, qbuf, dq, qb, pa0, pa1, pa2, k_store, kofs, v_store, vs, nv, outv,
                  vb):
    """Real attention of head g over keys 0..p (position heads: their keys from the
    polynomial; others: the stored keys; values v_store[:, vs:vs+nv]), written to
    outv[vb:vb+nv]. Keys more than
    SCAN_CUTOFF below the best weigh below e^-SCAN_CUTOFF of it: they are left out of the sums
    (2^-86 of the winner's weight, below any rounding of them)."""
    best = -np.inf
    scores = np.empty(p + 1)
    for j in range(p + 1):
        s = 0.0
        for d in range(dq):
            if kind == 1:
                k = pa0[qb + d] + pa1[qb + d] * j + pa2[qb + d] * j * j
            else:
                k = np.float64(k_store[j, kofs + d])
            s += np.float64(qbuf[d]) * k
        scores[j] = s
        if s > best:
            best = s
    total = 0.0
    for u in range(nv):
        outv[vb + u] = 0.0
    acc = np.zeros(max(nv, 1))
    for j in range(p + 1):
        if scores[j] - best < -SCAN_CUTOFF:
            continue
        w = math.exp(scores[j] - best)
        total += w
        for u in range(nv):
            acc[u] += w * np.float64(v_store[j, vs + u])
    for u in range(nv):
        outv[vb + u] = acc[u] / total


@njit(cache=True)
def _hash(g, c, ns, n):
    key = np.int64(g) * np.int64(1000003) + np.int64(c)
    for i in range(n):
        key = (key * np.int64(1000000007)) ^ np.int64(ns[i])
    return key


@njit(cache=True)
def _match_insert(g, p, kbuf, mt_ptr, mt_n, mt_vdim, mt_sdim, mt_sigma, mt_step, mt_cptr, mt_cn,
                  mt_cdim, mt_rdim, mt_rec, table, cls_val, cls_n, cls_count, cls_pos, irregular):
    """Key p of match head g into its class and table; a key off the plan makes the head
    irregular (attended from then on)."""
    m0, nvals = mt_ptr[g], mt_n[g]
    ns = np.empty(max(nvals, 1), np.int64)
    for i in range(nvals):
        sq = np.float64(kbuf[mt_sdim[m0 + i]])
        step = mt_step[m0 + i]
        if mt_vdim[m0 + i] < 0:  # (dropped: the square alone, in steps squared)
            n = sq / (mt_sigma[m0 + i] * step * step)
            want = sq
        else:
            kv = np.float64(kbuf[mt_vdim[m0 + i]])
            n = kv / step
            want = mt_sigma[m0 + i] * kv * kv
        if n != math.floor(n) or abs(n) > 2.0 ** 52 or abs(sq - want) > 1e-9 * max(1.0, abs(want)):
            irregular[g] = 1
            return
        ns[i] = np.int64(n)
    r = mt_rdim[g]
    if r >= 0:
        want = mt_rec[g] * p
        if abs(np.float64(kbuf[r]) - want) > 1e-9 * max(1.0, abs(want)):
            irregular[g] = 1
            return
    c0, ncd = mt_cptr[g], mt_cn[g]
    cls = -1
    for c in range(cls_n[g]):
        same = True
        for e in range(ncd):
            if cls_val[g, c, e] != np.float64(kbuf[mt_cdim[c0 + e]]):
                same = False
        if same:
            cls = c
            break
    if cls < 0:
        if cls_n[g] >= cls_val.shape[1]:
            irregular[g] = 1
            return
        cls = cls_n[g]
        cls_n[g] += 1
        for e in range(ncd):
            cls_val[g, cls, e] = kbuf[mt_cdim[c0 + e]]
    cnt = cls_count[g, cls]
    if cnt < cls_pos.shape[2]:
        cls_pos[g, cls, cnt] = p
    cls_count[g, cls] = cnt + 1
    table[_hash(g, cls, ns, nvals)] = p


@njit(cache=True)
def _match_query(g, p, qbuf, dq, k_store, kofs, mt_ptr, mt_n, mt_vdim, mt_sdim, mt_sigma,
                 mt_step, mt_cptr, mt_cn, mt_cdim, mt_rdim, mt_rec, mt_const, qb, table, cls_val,
                 cls_n, cls_count, cls_pos, need):
    """The certified winner of match head g at query p, or -1 (attend)."""
    m0, nvals = mt_ptr[g], mt_n[g]
    r = mt_rdim[g]
    if r < 0:
        return -1
    qr = np.float64(qbuf[r]) * mt_rec[g]
    if not qr > 0:
        return -1
    ns = np.empty(max(nvals, 1), np.int64)
    exact = True
    content = 0.0
    drop = np.inf
    for i in range(nvals):
        beta = np.float64(qbuf[mt_sdim[m0 + i]]) * mt_sigma[m0 + i]
        if not beta < 0:
            return -1
        qv = np.float64(qbuf[mt_vdim[m0 + i]]) if mt_vdim[m0 + i] >= 0 else 0.0
        t = -qv / (2.0 * beta)
        n = t / mt_step[m0 + i]
        if n != math.floor(n) or abs(n) > 2.0 ** 52:
            exact = False
        else:
            ns[i] = np.int64(n)
        content += qv * t + beta * t * t
        step = mt_step[m0 + i]
        drop = min(drop, -beta * step * step)
    const = 0.0
    for d in range(dq):
        const += np.float64(qbuf[d]) * mt_const[qb + d]
    c0, ncd = mt_cptr[g], mt_cn[g]
    best, second, win = -np.inf, -np.inf, -1
    for c in range(cls_n[g]):
        if cls_count[g, c] <= cls_pos.shape[2]:
            for i in range(cls_count[g, c]):
                j = cls_pos[g, c, i]
                s = 0.0
                for d in range(dq):
                    s += np.float64(qbuf[d]) * np.float64(k_store[j, kofs + d])
                if s > best:
                    second = max(second, best)
                    best, win = s, j
                else:
                    second = max(second, s)
            continue
        bonus = 0.0
        for e in range(ncd):
            bonus += np.float64(qbuf[mt_cdim[c0 + e]]) * cls_val[g, c, e]
        if not exact:  # (a key may sit less than a step from a target off the lattice)
            second = max(second, const + bonus + content + qr * p)
            continue
        second = max(second, const + bonus + content - drop + qr * p)
        key = _hash(g, c, ns, nvals)
        if key not in table:
            continue
        j = table[key]
        ok = True  # (a hash collision must not pass for the target)
        for i in range(nvals):
            d = mt_vdim[m0 + i]
            if d >= 0 and np.float64(k_store[j, kofs + d]) != ns[i] * mt_step[m0 + i]:
                ok = False
            elif d < 0 and np.float64(k_store[j, kofs + mt_sdim[m0 + i]]) != 0.0:
                ok = False
        if not ok:
            continue
        s = 0.0
        for d in range(dq):
            s += np.float64(qbuf[d]) * np.float64(k_store[j, kofs + d])
        second = max(second, s - qr)
        if s > best:
            second = max(second, best)
            best, win = s, j
        else:
            second = max(second, s)
    if win >= 0 and best - second >= need:
        return win
    return -1


@njit(cache=True)
def _forward(p, x, zero, need, light, layers, head_q, head_dq, head_v, head_nv, head_kind, head_k,
            head_s, head_need, mlp_need, q_ptr, q_end, q_row, q_val, k_ptr, k_end, k_row, k_val,
            v_ptr, v_end, v_row, v_val, pa0, pa1, pa2, mt_ptr, mt_n, mt_vdim, mt_sdim, mt_sigma,
            mt_step, mt_cptr, mt_cn, mt_cdim, mt_rdim, mt_rec, mt_const, o_ptr, o_end, o_row,
            o_val, o_write, o_bias, m_read, n_ptr, n_end, n_idx, n_val, b1, r_ptr, r_end, r_neuron,
            w_ptr, w_end, w_neuron, w_val, b2, nw_ptr, nw_end, nw_col, m_write, m_prev, hid, m_out,
            dirty_n, dirty_w, list_n, list_w, first, v_store, k_store, table, cls_val, cls_n,
            cls_count, cls_pos, irregular, stats, qbuf, kbuf, outv, scans):
    """Position p through every layer: x (d,) holds its input row and leaves as the last
    residual. `light`: only the keys and values this position stores matter (a machine's
    prompt before its last position): heads and MLPs outside their cone (`_prompt_cone`)
    are skipped. Returns 0, or ERR_MISMATCH where a position key left its polynomial."""
    for li in range(layers.shape[0]):
        h0, h1, o0, nwa = layers[li, 0], layers[li, 1], layers[li, 2], layers[li, 3]
        r0, nr, n0, nn = layers[li, 4], layers[li, 5], layers[li, 6], layers[li, 7]
        w0, nw = layers[li, 8], layers[li, 9]
        # ---- attention: every head's value written at p, then its answer
        for g in range(h0, h1):
            qb, dq, vb, nv, kind = head_q[g], head_dq[g], head_v[g], head_nv[g], head_kind[g]
            vs = head_s[g]  # (-1: a head that reads the query's own position stores nothing)
            if vs >= 0:
                for u in range(nv):
                    v_store[p, vs + u] = _dot(x, v_ptr[vb + u], v_end[vb + u], v_row, v_val,
                                              zero)
            for d in range(dq):
                qbuf[d] = _dot(x, q_ptr[qb + d], q_end[qb + d], q_row, q_val, zero)
                kbuf[d] = _dot(x, k_ptr[qb + d], k_end[qb + d], k_row, k_val, zero)
            kofs = head_k[g]
            if kofs >= 0:
                for d in range(dq):
                    k_store[p, kofs + d] = kbuf[d]
            win = -1
            if light and head_need[g] == 0:  # (nothing at this position reads its answer)
                if kind == 2 and irregular[g] == 0:
                    _match_insert(g, p, kbuf, mt_ptr, mt_n, mt_vdim, mt_sdim, mt_sigma, mt_step,
                                  mt_cptr, mt_cn, mt_cdim, mt_rdim, mt_rec, table, cls_val, cls_n,
                                  cls_count, cls_pos, irregular)
                elif kind == 1:
                    for d in range(dq):
                        want = pa0[qb + d] + pa1[qb + d] * p + pa2[qb + d] * p * p
                        if abs(np.float64(kbuf[d]) - want) > 1e-6 * max(1.0, abs(want)):
                            return ERR_MISMATCH
                for u in range(nv):
                    outv[vb + u] = zero
                continue
            if kind == 1:
                a, b = 0.0, 0.0
                for d in range(dq):
                    want = pa0[qb + d] + pa1[qb + d] * p + pa2[qb + d] * p * p
                    if abs(np.float64(kbuf[d]) - want) > 1e-6 * max(1.0, abs(want)):
                        return ERR_MISMATCH
                    a += np.float64(qbuf[d]) * pa2[qb + d]
                    b += np.float64(qbuf[d]) * pa1[qb + d]
                if a < 0:
                    t = b / (-2.0 * a)
                    if t == math.floor(t) and -a >= need:
                        win = min(max(np.int64(t), 0), p)
                elif a == 0 and b >= need:
                    win = p
            elif kind == 2:
                if irregular[g] == 0:
                    _match_insert(g, p, kbuf, mt_ptr, mt_n, mt_vdim, mt_sdim, mt_sigma, mt_step,
                                  mt_cptr, mt_cn, mt_cdim, mt_rdim, mt_rec, table, cls_val, cls_n,
                                  cls_count, cls_pos, irregular)
                if irregular[g] == 0:
                    win = _match_query(g, p, qbuf, dq, k_store, kofs, mt_ptr, mt_n, mt_vdim,
                                       mt_sdim, mt_sigma, mt_step, mt_cptr, mt_cn, mt_cdim,
                                       mt_rdim, mt_rec, mt_const, qb, table, cls_val, cls_n,
                                       cls_count, cls_pos, need)
            if win >= 0 and vs >= 0:
                stats[0] += 1
                for u in range(nv):
                    outv[vb + u] = v_store[win, vs + u]
            elif win == p:
                stats[0] += 1
                for u in range(nv):
                    outv[vb + u] = _dot(x, v_ptr[vb + u], v_end[vb + u], v_row, v_val, zero)
            elif vs < 0:
                return ERR_MISMATCH
            else:
                stats[1] += 1
                scans[g] += 1
                _softmax_read(g, p, kind, qbuf, dq, qb, pa0, pa1, pa2, k_store, kofs, v_store,
                              vs, nv, outv, vb)
        for c in range(o0, o0 + nwa):
            x[o_write[c]] += _dot(outv, o_ptr[c], o_end[c], o_row, o_val, zero) + o_bias[c]
        # ---- MLP: neurons whose inputs changed, columns whose neurons changed
        if light and mlp_need[li] == 0:  # (nothing stored at this position reads it)
            first[li] = 1
            continue
        if nn == 0:
            for c in range(w0, w0 + nw):
                x[m_write[c]] += b2[c]
            continue
        fresh = first[li] == 1
        first[li] = 0
        kn = 0
        for gi in range(r0, r0 + nr):
            val = x[m_read[gi]]
            if fresh or val != m_prev[gi]:
                m_prev[gi] = val
                for t in range(r_ptr[gi], r_end[gi]):
                    kn = _mark(r_neuron[t], dirty_n, list_n, kn)
        kw = 0
        if fresh:
            for c in range(w0, w0 + nw):
                kw = _mark(c, dirty_w, list_w, kw)
        stats[2] += kn
        stats[3] += nn
        for i in range(kn):
            n = list_n[i]
            dirty_n[n] = 0
            z = _dot(m_prev, n_ptr[n], n_end[n], n_idx, n_val, zero) + b1[n]
            hn = z if z > zero else zero
            if fresh or hn != hid[n]:
                hid[n] = hn
                for t in range(nw_ptr[n], nw_end[n]):
                    kw = _mark(nw_col[t], dirty_w, list_w, kw)
        for i in range(kw):
            c = list_w[i]
            dirty_w[c] = 0
            m_out[c] = _dot(hid, w_ptr[c], w_end[c], w_neuron, w_val, zero) + b2[c]
        for c in range(w0, w0 + nw):
            x[m_write[c]] += m_out[c]
    return 0


@njit(cache=True)
def _forward_rows(at, rows, out_rows, cols, x, zero, need, layers, head_q, head_dq, head_v,
                  head_nv, head_kind, head_k, head_s, head_need, mlp_need, q_ptr, q_end, q_row,
                  q_val, k_ptr, k_end, k_row, k_val, v_ptr, v_end, v_row, v_val, pa0, pa1, pa2,
                  mt_ptr, mt_n, mt_vdim, mt_sdim, mt_sigma, mt_step, mt_cptr, mt_cn, mt_cdim,
                  mt_rdim, mt_rec, mt_const, o_ptr, o_end, o_row, o_val, o_write, o_bias, m_read,
                  n_ptr, n_end, n_idx, n_val, b1, r_ptr, r_end, r_neuron, w_ptr, w_end, w_neuron,
                  w_val, b2, nw_ptr, nw_end, nw_col, m_write, m_prev, hid, m_out, dirty_n, dirty_w,
                  list_n, list_w, first, v_store, k_store, table, cls_val, cls_n, cls_count,
                  cls_pos, irregular, stats, qbuf, kbuf, outv, scans):
    """Positions at.. of the input rows `rows`, their output columns into `cols`: (0, -), or
    (ERR_MISMATCH, the position)."""
    for i in range(rows.shape[0]):
        for c in range(x.shape[0]):
            x[c] = rows[i, c]
        r = _forward(at + i, x, zero, need, False, layers, head_q, head_dq, head_v, head_nv,
                     head_kind, head_k, head_s, head_need, mlp_need, q_ptr, q_end, q_row, q_val,
                     k_ptr, k_end, k_row, k_val, v_ptr, v_end, v_row, v_val, pa0, pa1, pa2, mt_ptr,
                     mt_n, mt_vdim, mt_sdim, mt_sigma, mt_step, mt_cptr, mt_cn, mt_cdim, mt_rdim,
                     mt_rec, mt_const, o_ptr, o_end, o_row, o_val, o_write, o_bias, m_read, n_ptr,
                     n_end, n_idx, n_val, b1, r_ptr, r_end, r_neuron, w_ptr, w_end, w_neuron,
                     w_val, b2, nw_ptr, nw_end, nw_col, m_write, m_prev, hid, m_out, dirty_n,
                     dirty_w, list_n, list_w, first, v_store, k_store, table, cls_val, cls_n,
                     cls_count, cls_pos, irregular, stats, qbuf, kbuf, outv, scans)
        if r != 0:
            return r, at + i
        for k in range(out_rows.shape[0]):
            cols[i, k] = x[out_rows[k]]
    return 0, -1


@njit(cache=True)
def _machine(start, stop, n_prompt, tokens, blank, pos_col, emb, emb_cols, pos_rows, pos_cols,
             out_row, out_scale, lower, upper, halts, x, zero, need, arrays, state):
    """Positions start..stop-1 of a firebrand machine (token ids in `tokens`, the prompt's
    first n_prompt): each position's input row, the forward pass, and past the prompt the
    greedy next value fed back. Returns (status, next position): status 0 stopped at `stop`,
    1 halted, 2 a value outside [lower, upper] (at tokens[next]), ERR_MISMATCH."""
    for p in range(start, stop):
        for c in range(x.shape[0]):
            x[c] = blank[c]
        x[pos_col] = p
        tok = tokens[p]
        for i in range(emb_cols.shape[0]):
            x[emb_cols[i]] = emb[tok, i]
        for i in range(pos_cols.shape[0]):
            x[pos_cols[i]] = pos_rows[p, i]
        r = _forward(p, x, zero, need, p + 1 < n_prompt, *arrays, *state)
        if r != 0:
            return r, p
        if p + 1 < n_prompt:
            continue
        value = np.float64(x[out_row]) * out_scale
        v = np.int64(math.floor(value + 0.5))
        if p + 1 < tokens.shape[0]:
            tokens[p + 1] = v - lower
        if v < lower or v > upper:
            return 2, p + 1
        for h in halts:
            if v == h:
                return 1, p + 1
    return 0, stop


# --------------------------------------------------------------------------------------
# The decoder
# --------------------------------------------------------------------------------------


class IndexDecoder:
    """One sequence of up to `capacity` positions through `ct` with exact-index heads
    (module docstring). `prefill(prompt)` / `step(next input)` as `Decoder` with batch 1
    (lists of one); `stats()` the answers by index and by attention, the neurons recomputed."""

    def __init__(self, ct, capacity: int, flat: Flat | None = None):
        why = supports(ct)
        if why:
            raise TwError(f"index decoder: {why}")
        from tw_lowering.index_heads import needed_gap

        self.ct, self.capacity = ct, int(capacity)
        self.flat = flat = flat or flat_of(ct)
        a = flat.arrays
        dt = ct._np_dtype
        self.zero = dt.type(0)
        self.need = float(needed_gap(self.capacity))
        if flat.layout is None:
            flat.layout = self._layout()
        self.arrays, total_s, total_k, has_match = flat.layout
        n_heads = flat.n_heads
        cap = self.capacity
        nv = len(a["v_ptr"])
        dmax = int(max(a["head_dq"], default=1))
        self.state = (
            np.zeros(len(a["m_read"]), dt), np.zeros(len(a["b1"]), dt),
            np.zeros(len(a["m_write"]), dt), np.zeros(len(a["b1"]), np.uint8),
            np.zeros(len(a["m_write"]), np.uint8), np.zeros(len(a["b1"]), np.int64),
            np.zeros(len(a["m_write"]), np.int64), np.ones(len(ct.layers), np.uint8),
            np.zeros((cap if total_s else 1, max(total_s, 1)), dt),
            np.zeros((cap if total_k else 1, max(total_k, 1)), dt),
            _table(has_match),
            np.zeros((max(n_heads, 1), MAX_CLASSES, MAX_CLASS_DIMS)),
            np.zeros(max(n_heads, 1), np.int64), np.zeros((max(n_heads, 1), MAX_CLASSES), np.int64),
            np.zeros((max(n_heads, 1), MAX_CLASSES, SMALL_CLASS), np.int64),
            np.zeros(max(n_heads, 1), np.uint8), np.zeros(4, np.int64),
            np.zeros(max(dmax, 1), dt), np.zeros(max(dmax, 1), dt), np.zeros(max(nv, 1), dt),
            np.zeros(max(n_heads, 1), np.int64))
        self.x = np.zeros(ct.machine.d, dt)
        self._out_rows = ct.out_rows.numpy().astype(np.int64)
        self.position = 0
        self._inputs = _input_rows(ct, cap)

    def _layout(self) -> tuple:
        """(the arrays `_forward` reads, value and key dims stored per position, whether a
        match head is there): what every decoder of this model shares, made once."""
        ct, a, n_heads = self.ct, self.flat.arrays, self.flat.n_heads
        self._usable_plans()
        kofs, total_k = np.full(max(n_heads, 1), -1, np.int64), 0
        for g in range(n_heads):
            if a["head_kind"][g] != KIND_POSITION:
                kofs[g] = total_k
                total_k += int(a["head_dq"][g])
        sofs, total_s = np.full(max(n_heads, 1), -1, np.int64), 0
        for g in range(n_heads):
            if not _reads_itself(a, g):
                sofs[g] = total_s
                total_s += int(a["head_nv"][g])
        head_need, mlp_need = _prompt_cone(a, kofs, sofs, len(ct.layers), ct.machine.d)
        own = {"head_k": kofs, "head_s": sofs, "head_need": head_need, "mlp_need": mlp_need}
        return (tuple(own.get(name, a[name]) for name in ARRAY_ORDER), total_s, total_k,
                bool(np.any(a["head_kind"] == KIND_MATCH)))

    def _usable_plans(self) -> None:
        """Position heads whose scores float rounding could blur (a float32 model, large
        positions) are attended instead."""
        a = self.flat.arrays
        eps = 2.0 ** -24 if self.ct._np_dtype == np.float32 else 2.0 ** -53
        for g, plan in enumerate(self.flat.plans):
            if plan.kind == "position" and plan.magnitude * eps * 8 > plan.gap:
                a["head_kind"][g] = KIND_SCAN

    def stats(self) -> dict:
        s = self.state[STATE_ORDER.index("stats")]
        scans = self.state[STATE_ORDER.index("scans")]
        return {"indexed": int(s[0]), "attended": int(s[1]), "neurons_run": int(s[2]),
                "neurons": int(s[3]),
                "attended_by_head": {g: int(c) for g, c in enumerate(scans) if c}}

    def _rows(self, checked, at: int) -> np.ndarray:
        """Output columns of every position of `checked` fed from position `at`: the input
        rows built here, the positions run in one compiled call."""
        n = checked.n_positions
        if at + n > self.capacity:
            from tw_lowering.decode import DecodeError

            raise DecodeError(f"decoder: the cache holds {self.capacity} positions; it is full")
        rows = np.empty((n, len(self.x)), self.x.dtype)
        for i in range(n):
            self._inputs.row(checked, i, at + i, rows[i])
        out_rows = self._out_rows
        cols = np.empty((n, len(out_rows)), self.x.dtype)
        r, p = _forward_rows(at, rows, out_rows, cols, self.x, self.zero, self.need,
                             *self.arrays, *self.state)  # (one by one: numba types a tuple slowly)
        if r != 0:
            raise _mismatch(p)
        return cols

    def prefill(self, prompts) -> list[dict[str, np.ndarray]]:
        (prompt,) = prompts
        cols = self._rows(prompt, 0)
        self.position = prompt.n_positions
        return [self.ct.read_outputs(cols)]

    def step(self, inputs) -> list[dict[str, np.ndarray]]:
        (one,) = inputs
        cols = self._rows(one, self.position)
        self.position += 1
        return [self.ct.read_outputs(cols)]

    @property
    def positions(self) -> np.ndarray:
        return np.array([self.position])

    def run_machine(self, tokens: np.ndarray, n_prompt: int, start: int, stop: int,
                    lower: int, upper: int, halts) -> tuple[int, int]:
        """`_machine` over positions start..stop-1 (tokens: ids, room for stop + 1)."""
        ins = self._inputs
        r, nxt = _machine(start, stop, n_prompt, tokens, ins.blank, self.ct.machine.POS_COL,
                          ins.emb, ins.emb_cols, ins.pos_rows, ins.pos_cols,
                          int(self.ct.out_rows.numpy()[0]), float(self.ct.outputs[0].scale[0]),
                          lower, upper, np.asarray(list(halts), np.int64), self.x, self.zero,
                          self.need, self.arrays, self.state)
        if r == ERR_MISMATCH:
            raise _mismatch(nxt)
        self.position = nxt
        return r, nxt


def _mismatch(p: int) -> IndexMismatch:
    return IndexMismatch(f"index decoder: a position read's key at position {p} left its "
                         "proven polynomial")


class IndexDecoders:
    """A batch of `IndexDecoder`s (one per sequence) behind `Decoder`'s batch interface:
    `prefill` and `step` take and give one entry per sequence, each sequence's decoder in turn
    (so a generate's feedback is still called per step, in batch order)."""

    def __init__(self, decoders: list[IndexDecoder]):
        self.decoders = decoders

    def prefill(self, prompts) -> list[dict[str, np.ndarray]]:
        return [d.prefill([p])[0] for d, p in zip(self.decoders, prompts)]

    def step(self, inputs) -> list[dict[str, np.ndarray]]:
        return [d.step([i])[0] for d, i in zip(self.decoders, inputs)]

    @property
    def positions(self) -> np.ndarray:
        return np.array([d.position for d in self.decoders])


class _InputRows:
    """The residual row before layer 0 at any position, from the model's source slots (as
    `CompiledTransformer.residual` builds it): the constant column, the position column,
    position tables by position, embeddings by token id, inputs by value."""

    def __init__(self, ct, capacity: int):
        dt = ct._np_dtype
        self.blank = ct.blank_row.numpy().astype(dt)
        pos = ct.position_table(capacity).cpu().numpy()
        cols, tables, self.emb_cols, self.emb, self.sources = [], [], np.zeros(0, np.int64), \
            np.zeros((1, 0), dt), []
        for i, (kind, name, width) in enumerate(ct._source_plan):
            c = getattr(ct, f"source_cols_{i}").numpy()
            if kind == "pos":
                cols.append(c)
                tables.append(pos[:capacity, :width])
            elif kind == "pos_table":
                t = getattr(ct, f"source_table_{i}").numpy()
                rows = np.zeros((capacity, t.shape[1]), dt)
                rows[:min(capacity, len(t))] = t[:capacity]
                cols.append(c)
                tables.append(rows)
            elif kind == "embedding":
                self.sources.append((kind, name, c, getattr(ct, f"source_table_{i}").numpy()))
                if not len(self.emb_cols):
                    self.emb_cols, self.emb = c, getattr(ct, f"source_table_{i}").numpy()
            else:
                self.sources.append((kind, name, c, None))
        self.pos_cols = np.concatenate(cols).astype(np.int64) if cols else np.zeros(0, np.int64)
        self.pos_rows = (np.concatenate(tables, axis=1).astype(dt) if tables
                         else np.zeros((capacity, 0), dt))
        self.pos_col = ct.machine.POS_COL

    def row(self, checked, i: int, p: int, x: np.ndarray) -> None:
        x[:] = self.blank
        x[self.pos_col] = p
        if len(self.pos_cols):
            x[self.pos_cols] = self.pos_rows[p]
        for kind, name, cols, table in self.sources:
            v = np.asarray(checked.values[name])[i]
            x[cols] = table[int(v)] if kind == "embedding" else v


_EMPTY: list = []


def _table(needed: bool):
    """The match heads' hash table: a fresh one where the model has match heads, else one
    shared empty table (numba's typed dict costs 0.1 ms to make; nothing writes this one)."""
    if needed or not _EMPTY:
        t = _NbDict.empty(key_type=_nb_types.int64, value_type=_nb_types.int64)
        if needed:
            return t
        _EMPTY.append(t)
    return _EMPTY[0]


def _input_rows(ct, capacity: int) -> _InputRows:
    """`_InputRows` of `ct` covering `capacity` positions, kept on the model."""
    kept = getattr(ct, "_index_inputs", None)
    if kept is None or kept[0] is not ct._np_dtype or kept[1] < capacity:
        kept = (ct._np_dtype, capacity, _InputRows(ct, capacity))
        ct._index_inputs = kept
    return kept[2]


def flat_of(ct) -> Flat:
    """`flatten(ct)`, kept on the model (its weights do not change)."""
    flat = getattr(ct, "_flat_index", None)
    if flat is None or flat[0] is not ct._np_dtype:
        flat = (ct._np_dtype, flatten(ct))
        ct._flat_index = flat
    return flat[1]
