"""The index decoder's model as flat arrays (`lowering/fast_decode.py`): every layer as CSC/CSR
lists over residual columns (`flatten`), each head's plan over its compiled dims, and the
residual as slots (`_slots`): who reads what, so a position recomputes only what changed, and
the MLP units whose sums a decoder may remember by the value of the one slot they read
(`_units`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from twdialect.errors import TwError

KIND_SCAN, KIND_POSITION, KIND_MATCH = 0, 1, 2
MAX_CLASS_DIMS = 4


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
    e_memo: np.ndarray | None = None  # (which write entries a memoized unit gives)
    memo: tuple | None = None  # (IndexDecoder._memo: the units' memo, shared)
    proven: tuple | None = None  # (IndexDecoder._proven_keys: (capacity, per head))


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
    names = set(b.parts) | _INT_PARTS | _F64_PARTS | _DT_PARTS
    arrays = {name: b.array(name, np.int64 if name in _INT_PARTS else
                            np.float64 if name in _F64_PARTS else dt) for name in names}
    arrays.update(ints)
    return Flat(arrays, heads, plans)


_DT_PARTS = {"q_val", "k_val", "v_val", "o_val", "o_bias", "n_val", "b1", "w_val", "b2"}
_F64_PARTS = {"pa0", "pa1", "pa2", "mt_sigma", "mt_step", "mt_rec", "mt_const"}
_INT_PARTS = {"q_ptr", "q_end", "q_row", "k_ptr", "k_end", "k_row", "v_ptr", "v_end", "v_row",
              "head_q", "head_dq", "head_v", "head_nv", "head_kind",
              "o_ptr", "o_end", "o_row", "o_write", "m_read", "n_ptr", "n_end", "n_idx",
              "w_ptr", "w_end", "w_neuron", "nw_ptr", "nw_end",
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
    """One MLP as CSR by neuron over its read columns, CSC of W2 by written column and CSR of
    W2 by neuron over written columns."""
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
    n0 = row["n0"]
    # W2 by written column: (global neuron, weight), neurons ascending
    ptr, neu, val = _csc(np.arange(n) + n0, w2, m.n_write)
    b.lists("w", ptr, neu, val, dt, items_name="w_neuron")
    # W2 by neuron: the written columns (global write ids)
    w0 = row["w0"]
    ptr, col, _ = _csc(np.arange(m.n_write) + w0, w2.T.copy(), n)
    b.lists("nw", ptr, col, items_name="nw_col")


# --------------------------------------------------------------------------------------
# The residual as slots: what lets a position skip what did not change
# --------------------------------------------------------------------------------------


def _readers(keys: np.ndarray, items: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """CSR (ptr of n + 1, items) of the distinct (key, item) pairs, items ascending per key."""
    if not len(keys):
        return np.zeros(n + 1, np.int64), np.zeros(0, np.int64)
    pairs = np.unique(np.stack([keys, items]).astype(np.int64), axis=1)
    return (np.searchsorted(pairs[0], np.arange(n + 1)).astype(np.int64),
            np.ascontiguousarray(pairs[1]))


def _spans(ptr: np.ndarray, end: np.ndarray, first: int, count: int) -> slice:
    """The entries of lists first..first+count-1 (`_Builder.lists` keeps them contiguous)."""
    if not count:
        return slice(0, 0)
    return slice(int(ptr[first]), int(end[first + count - 1]))


def _slots(a: dict, d: int) -> dict:
    """The residual as slots. Slot c < d is input column c; write entry e (e < NA: attention
    output column e of `o_write`; NA + w: MLP write w of `m_write`) makes slot d + e, its
    column after that sublayer (its previous slot `e_src` plus its sum `delta`). Every read
    names the slot its column holds where it reads; `fin` the last slot of each column. And
    who reads each slot: heads' queries (`rq`), keys (`rk`), values (`rv`), neurons (`rn`), the
    next write of the column (`succ`); who reads each head answer dim (`ov`): so a position
    recomputes only what one of its inputs changed (`_forward`)."""
    layers = a["layers"]
    na, nm = len(a["o_ptr"]), len(a["m_write"])
    cur = np.arange(d, dtype=np.int64)
    out = {f"{k}_slot": np.zeros(len(a[f"{k}_row"]), np.int64) for k in "qkv"}
    out["n_slot"] = np.zeros(len(a["n_idx"]), np.int64)
    out["e_src"], out["e_list"] = np.zeros(na + nm, np.int64), np.zeros(na + nm, np.int64)
    out["list_base"] = np.zeros(max(2 * len(layers), 1), np.int64)
    out["n_layer"] = np.zeros(len(a["b1"]), np.int64)
    readers = {"q": [], "k": [], "v": []}
    for li, (h0, h1, o0, nwa, r0, nr, n0, nn, w0, nw) in enumerate(layers):
        for g in range(h0, h1):
            for k, first, count in (("q", a["head_q"][g], a["head_dq"][g]),
                                    ("k", a["head_q"][g], a["head_dq"][g]),
                                    ("v", a["head_v"][g], a["head_nv"][g])):
                span = _spans(a[f"{k}_ptr"], a[f"{k}_end"], first, count)
                out[f"{k}_slot"][span] = cur[a[f"{k}_row"][span]]
                readers[k].append((out[f"{k}_slot"][span], np.full(span.stop - span.start, g)))
        _write(out, cur, a["o_write"][o0:o0 + nwa], o0, 2 * li, d)
        span = _spans(a["n_ptr"], a["n_end"], n0, nn)
        read_slot = cur[a["m_read"][r0:r0 + nr]]
        out["n_slot"][span] = read_slot[a["n_idx"][span] - r0]
        out["n_layer"][n0:n0 + nn] = li
        _write(out, cur, a["m_write"][w0:w0 + nw], na + w0, 2 * li + 1, d)
    s = d + na + nm
    cat = (lambda parts, i: np.concatenate([p[i] for p in parts]) if parts
           else np.zeros(0, np.int64))
    for k in "qkv":
        out[f"r{k}_ptr"], out[f"r{k}_g"] = _readers(cat(readers[k], 0), cat(readers[k], 1), s)
    _units(a, out, na)
    neuron = np.repeat(np.arange(len(a["b1"])), a["n_end"] - a["n_ptr"])
    alone = out["n_unit"][neuron] < 0  # (a unit's neurons are flagged through their unit)
    out["rn_ptr"], out["rn_n"] = _readers(out["n_slot"][alone], neuron[alone], s)
    out["ru_ptr"], out["ru_u"] = _readers(out["u_slot"], np.arange(len(out["u_slot"])), s)
    out["succ"] = np.full(s, -1, np.int64)
    out["succ"][out["e_src"]] = np.arange(na + nm)
    entry = np.repeat(np.arange(na), a["o_end"] - a["o_ptr"])
    out["ov_ptr"], out["ov_col"] = _readers(a["o_row"], entry, len(a["v_ptr"]))
    out["fin"] = cur
    return out


MIN_UNIT = 3  # neurons: a smaller unit is recomputed faster than looked up


def _units(a: dict, out: dict, na: int) -> None:
    """Units: one MLP's neurons grouped by the write entries they share (connected
    components). A unit of at least MIN_UNIT neurons that all read one slot gives its sums as
    a function of that slot's value alone: the decoder remembers them by value (`_run`'s
    memo), which is exact (the same function of the same bits). Per unit its slot, neurons
    (`u_n`), write entries (`u_e`); per layer its units (`u_lptr`); per neuron its unit or -1
    (`n_unit`); per write entry whether a unit gives its sum (`e_memo`)."""
    n_slot, w_neuron = out["n_slot"], a["w_neuron"]
    n_unit = np.full(len(a["b1"]), -1, np.int64)
    e_memo = np.zeros(len(a["o_ptr"]) + len(a["m_write"]), np.uint8)
    slot, nptr, neurons, eptr, entries, lptr = [], [0], [], [0], [], [0]
    for li, (_, _, _, _, _, _, n0, nn, w0, nw) in enumerate(a["layers"]):
        parent = list(range(nn))

        def root(i):
            while parent[i] != i:
                parent[i] = parent[parent[i]]
                i = parent[i]
            return i
        for c in range(w0, w0 + nw):
            ns = w_neuron[a["w_ptr"][c]:a["w_end"][c]] - n0
            for j in ns[1:]:
                parent[root(int(j))] = root(int(ns[0]))
        groups: dict[int, list[int]] = {}
        for i in range(nn):
            groups.setdefault(root(i), []).append(n0 + i)
        for members in groups.values():
            reads = np.unique(np.concatenate([n_slot[a["n_ptr"][n]:a["n_end"][n]]
                                              for n in members]))
            cols = np.unique(np.concatenate([a["nw_col"][a["nw_ptr"][n]:a["nw_end"][n]]
                                             for n in members]))
            if len(members) < MIN_UNIT or len(reads) != 1 or not len(cols):
                continue
            n_unit[members] = len(slot)
            e_memo[na + cols] = 1
            slot.append(int(reads[0]))
            neurons.extend(members)
            nptr.append(len(neurons))
            entries.extend((na + cols).tolist())
            eptr.append(len(entries))
        lptr.append(len(slot))
    arr = (lambda xs: np.asarray(xs, np.int64))
    out.update(u_slot=arr(slot), u_nptr=arr(nptr), u_n=arr(neurons), u_eptr=arr(eptr),
               u_e=arr(entries), u_lptr=arr(lptr), n_unit=n_unit, e_memo=e_memo)


def _write(out: dict, cur: np.ndarray, cols: np.ndarray, e0: int, lst: int, d: int) -> None:
    """Write entries e0.. (one sublayer's, list `lst`) onto columns `cols`: each entry's
    previous slot, and the column's slot from now on."""
    if len(np.unique(cols)) != len(cols):
        raise TwError("index decoder: a sublayer writes one residual column twice")
    e = np.arange(e0, e0 + len(cols))
    out["e_src"][e] = cur[cols]
    out["e_list"][e] = lst
    out["list_base"][lst] = e0
    cur[cols] = d + e


# --------------------------------------------------------------------------------------
# The compiled step
# --------------------------------------------------------------------------------------

def flat_of(ct) -> Flat:
    """`flatten(ct)`, kept on the model (its weights do not change)."""
    flat = getattr(ct, "_flat_index", None)
    if flat is None or flat[0] is not ct._np_dtype:
        flat = (ct._np_dtype, flatten(ct))
        ct._flat_index = flat
    return flat[1]
