"""The index decoder's compiled step (`lowering/fast_decode.py` is the decoder around it).

`_run` takes positions one at a time through every layer of a model flattened by
`lowering/index_layout.py`: heads answered from their index (a position read by its target, a
newest-key match from a hash table, certified), attended where no index answers; only heads,
sums and neurons one of whose inputs changed since the previous position are recomputed, and
memoized units answer by the value they read. `_run_flat` is its entry from Python.

Every step is a closure over the arrays: numba passes an array argument of an inlined
function with two atomic reference counts per call, which were most of the time."""

from __future__ import annotations

import math

import numpy as np

try:  # (numba is a dependency; the decoder degrades to the torch one where it is missing)
    from numba import njit
except ImportError:  # pragma: no cover - exercised where numba is absent
    def njit(*a, **k):
        return (lambda f: f) if not (len(a) == 1 and callable(a[0])) else a[0]

SCAN_CUTOFF = 60.0


# The arrays the compiled step reads, in groups (each function unpacks the groups it needs
# by name: `A` is a tuple of the groups of ARRAY_GROUPS, `S` of STATE_GROUPS).
ARRAY_GROUPS = (
    ("layers", "mlp_need", "e_src", "e_list", "list_base", "n_layer", "fin"),
    ("head_q", "head_dq", "head_v", "head_nv", "head_kind", "head_k", "head_s", "head_need"),
    ("q_ptr", "q_end", "q_slot", "q_val", "k_ptr", "k_end", "k_slot", "k_val",
     "v_ptr", "v_end", "v_slot", "v_val", "pa0", "pa1", "pa2"),
    ("mt_ptr", "mt_n", "mt_vdim", "mt_sdim", "mt_sigma", "mt_step", "mt_cptr", "mt_cn",
     "mt_cdim", "mt_rdim", "mt_rec", "mt_const"),
    ("o_ptr", "o_end", "o_row", "o_val", "o_bias", "ov_ptr", "ov_col"),
    ("n_ptr", "n_end", "n_slot", "n_val", "b1", "w_ptr", "w_end", "w_neuron", "w_val", "b2",
     "nw_ptr", "nw_end", "nw_col"),
    ("rq_ptr", "rq_g", "rk_ptr", "rk_g", "rv_ptr", "rv_g", "rn_ptr", "rn_n", "succ"),
    ("u_slot", "u_nptr", "u_n", "u_eptr", "u_e", "u_lptr", "ru_ptr", "ru_u"))
STATE_GROUPS = (
    ("val", "delta", "e_flag", "list_e", "list_cnt", "hid", "n_flag", "list_n", "n_cnt",
     "qd", "kd", "vd"),
    ("q_cur", "k_cur", "v_cur", "outv", "h_t", "ans", "v_store", "k_store", "last_win", "vchg",
     "lazy", "kproven"),
    ("table", "tbl_used", "nsbuf", "cls_val", "cls_n", "cls_count", "cls_pos", "irregular",
     "stats", "scans"),
    ("u_flag", "list_u", "u_cnt", "memo_u", "memo_x", "memo_off", "pool", "memo_used",
     "bitbuf", "bitview"))
ARRAY_ORDER = tuple(n for grp in ARRAY_GROUPS for n in grp)
STATE_ORDER = tuple(n for grp in STATE_GROUPS for n in grp)
ERR_MISMATCH = -1
GROW = 3  # `_run`: the match table must grow before position p
SELF = -2  # a head's last winner was the query's own position


@njit(cache=True)
def _softmax_read(g, p, kind, qbuf, dq, qb, pa0, pa1, pa2, k_store, kofs, v_store, vs, nv, out):
    """Real attention of head g over keys 0..p (position heads: their keys from the
    polynomial; others: the stored keys; values v_store[:, vs:vs+nv]), written to
    out[:nv]. Keys more than
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
        out[u] = 0.0
    acc = np.zeros(max(nv, 1))
    for j in range(p + 1):
        if scores[j] - best < -SCAN_CUTOFF:
            continue
        w = math.exp(scores[j] - best)
        total += w
        for u in range(nv):
            acc[u] += w * np.float64(v_store[j, vs + u])
    for u in range(nv):
        out[u] = acc[u] / total


@njit(cache=True)
def _slot_of(table, key):
    """The row of `table` (open addressing, rows (key, position + 1), 0: empty) holding key,
    or the empty row where it goes."""
    mask = np.uint64(table.shape[0] - 1)
    h = np.uint64(key) * np.uint64(0x9E3779B97F4A7C15)
    j = (h ^ (h >> np.uint64(31))) & mask
    while table[j, 1] != 0 and table[j, 0] != key:
        j = (j + np.uint64(1)) & mask
    return np.int64(j)


@njit(cache=True)
def _rehash(old, new):
    """Every entry of the table `old` into the empty, larger `new`."""
    for j in range(old.shape[0]):
        if old[j, 1] != 0:
            k = _slot_of(new, old[j, 0])
            new[k, 0], new[k, 1] = old[j, 0], old[j, 1]


@njit(cache=True)
def _run(machine, start, stop, n_prompt, rows, out_rows, cols, tokens, M, zero, need, A, S):
    """Positions start..stop-1, one at a time, through every layer. Only heads, sums and
    neurons one of whose inputs changed since the last position are recomputed (each from its
    inputs in one fixed order: the same bits as computing all; `_slots`).

    `machine` False: position p's input row is rows[p - start], its output columns go to
    cols[p - start]. True: a firebrand machine (`M`: blank row, embeddings and their
    columns, position tables and their columns, halts, a row buffer, and (position column,
    output column, output scale, lower, upper)): the input from tokens[p], past the prompt
    (its first n_prompt) the greedy next value fed back into tokens[p + 1]; before the prompt's
    last position only the keys and values stored matter: answers and MLPs outside their
    cone (`_prompt_cone`) keep their flags for a later position.
    Returns (status, next position): status 0 went to `stop`, 1 halted, 2 a value outside
    [lower, upper] (at tokens[next]), GROW: the match table is half full before the next
    position, ERR_MISMATCH where a position key left its polynomial.

    The steps are closures over the arrays: numba passes them no array (an array argument of
    an inlined function costs two atomic reference counts per call, the bulk of the time)."""
    layers, mlp_need, e_src, e_list, list_base, n_layer, fin = A[0]
    head_q, head_dq, head_v, head_nv, kind_of, head_k, head_s, head_need = A[1]
    q_ptr, q_end, q_slot, q_val, k_ptr, k_end, k_slot, k_val = A[2][:8]
    v_ptr, v_end, v_slot, v_val, pa0, pa1, pa2 = A[2][8:]
    mt_ptr, mt_n, mt_vdim, mt_sdim, mt_sigma, mt_step, mt_cptr, mt_cn, mt_cdim, mt_rdim, \
        mt_rec, mt_const = A[3]
    o_ptr, o_end, o_row, o_val, o_bias, ov_ptr, ov_col = A[4]
    n_ptr, n_end, n_slot, n_val, b1, w_ptr, w_end, w_neuron, w_val, b2, nw_ptr, nw_end, \
        nw_col = A[5]
    rq_ptr, rq_g, rk_ptr, rk_g, rv_ptr, rv_g, rn_ptr, rn_n, succ = A[6]
    u_slot, u_nptr, u_n, u_eptr, u_e, u_lptr, ru_ptr, ru_u = A[7]
    val, delta, e_flag, list_e, list_cnt, hid, n_flag, list_n, n_cnt, qd, kd, vd = S[0]
    q_cur, k_cur, v_cur, outv, h_t, ans, v_store, k_store, last_win, vchg, lazy, kproven = S[1]
    table, tbl_used, nsbuf, cls_val, cls_n, cls_count, cls_pos, irregular, stats, scans = S[2]
    u_flag, list_u, u_cnt, memo_u, memo_x, memo_off, pool, memo_used, bitbuf, bitview = S[3]
    mask = np.uint64(memo_off.shape[0] - 1)
    blank, emb, emb_cols, pos_rows, pos_cols, halts, x, mi, in_kind, in_idx, cell, var_cols = M
    na = o_ptr.shape[0]
    d = val.shape[0] - delta.shape[0]

    def push(e, bits):
        # write entry e onto its sublayer's list once; bits: 1 its sum changed, 2 its
        # previous slot did
        if e_flag[e] == 0:
            lst = e_list[e]
            list_e[list_base[lst] + list_cnt[lst]] = e
            list_cnt[lst] += 1
        e_flag[e] |= bits

    def changed(s):
        # slot s took a new value: flag the heads and neurons reading it, the next write
        for t in range(rq_ptr[s], rq_ptr[s + 1]):
            qd[rq_g[t]] = 1
        for t in range(rk_ptr[s], rk_ptr[s + 1]):
            kd[rk_g[t]] = 1
        for t in range(rv_ptr[s], rv_ptr[s + 1]):
            vd[rv_g[t]] = 1
        for t in range(rn_ptr[s], rn_ptr[s + 1]):
            n = rn_n[t]
            if n_flag[n] == 0:
                n_flag[n] = 1
                li = n_layer[n]
                list_n[layers[li, 6] + n_cnt[li]] = n
                n_cnt[li] += 1
        for t in range(ru_ptr[s], ru_ptr[s + 1]):
            u = ru_u[t]
            if u_flag[u] == 0:
                u_flag[u] = 1
                li = n_layer[u_n[u_nptr[u]]]
                list_u[u_lptr[li] + u_cnt[li]] = u
                u_cnt[li] += 1
        if succ[s] >= 0:
            push(succ[s], 2)

    def set_input(row):
        for c in range(d):
            if row[c] != val[c]:
                val[c] = row[c]
                changed(c)

    def entries(lst):
        # the flagged write entries of one sublayer: sums whose terms changed recomputed,
        # slot = previous slot + sum
        base, cnt = list_base[lst], list_cnt[lst]
        list_cnt[lst] = 0
        for i in range(cnt):
            e = list_e[base + i]
            bits = e_flag[e]
            e_flag[e] = 0
            if bits & 1:
                acc = zero
                if e < na:
                    for t in range(o_ptr[e], o_end[e]):
                        acc += outv[o_row[t]] * o_val[t]
                    delta[e] = acc + o_bias[e]
                else:
                    c = e - na
                    for t in range(w_ptr[c], w_end[c]):
                        acc += hid[w_neuron[t]] * w_val[t]
                    delta[e] = acc + b2[c]
            new = val[e_src[e]] + delta[e]
            if new != val[d + e]:
                val[d + e] = new
                changed(d + e)

    def neurons(li):
        # layer li's flagged neurons; the write entries of those that changed flagged
        n0, cnt = layers[li, 6], n_cnt[li]
        n_cnt[li] = 0
        stats[2] += cnt
        stats[3] += layers[li, 7]
        for i in range(cnt):
            n = list_n[n0 + i]
            n_flag[n] = 0
            acc = zero
            for t in range(n_ptr[n], n_end[n]):
                acc += val[n_slot[t]] * n_val[t]
            z = acc + b1[n]
            hn = z if z > zero else zero
            if hn != hid[n]:
                hid[n] = hn
                for t in range(nw_ptr[n], nw_end[n]):
                    push(na + nw_col[t], 1)

    def set_sum(e, new):
        if new != delta[e]:
            delta[e] = new
            push(e, 2)

    def unit_sums(u):
        # unit u's neurons and then its sums, each as `neurons` and `entries` compute them
        for i in range(u_nptr[u], u_nptr[u + 1]):
            n = u_n[i]
            acc = zero
            for t in range(n_ptr[n], n_end[n]):
                acc += val[n_slot[t]] * n_val[t]
            z = acc + b1[n]
            hid[n] = z if z > zero else zero
        stats[2] += u_nptr[u + 1] - u_nptr[u]
        for i in range(u_eptr[u], u_eptr[u + 1]):
            c = u_e[i] - na
            acc = zero
            for t in range(w_ptr[c], w_end[c]):
                acc += hid[w_neuron[t]] * w_val[t]
            set_sum(u_e[i], acc + b2[c])

    def units(li):
        # layer li's flagged units: their sums by the value of the slot they read, remembered
        # (the memo: open addressing on (unit, the value's bits)) or computed and remembered
        base, cnt = u_lptr[li], u_cnt[li]
        u_cnt[li] = 0
        for i in range(cnt):
            u = list_u[base + i]
            u_flag[u] = 0
            bitbuf[0] = np.float64(val[u_slot[u]])
            bits = bitview[0]
            h = np.uint64(u + 1) * np.uint64(0x9E3779B97F4A7C15) ^ np.uint64(bits) * np.uint64(
                0xBF58476D1CE4E5B9)
            j = np.int64((h ^ (h >> np.uint64(29))) & mask)
            while memo_off[j] >= 0 and not (memo_u[j] == u and memo_x[j] == bits):
                j = np.int64((np.uint64(j) + np.uint64(1)) & mask)
            e0, ne = u_eptr[u], u_eptr[u + 1] - u_eptr[u]
            if memo_off[j] >= 0:
                stats[4] += 1
                off = memo_off[j]
                for k in range(ne):
                    set_sum(u_e[e0 + k], pool[off + k])
                continue
            unit_sums(u)
            if 2 * (memo_used[0] + 1) <= memo_off.shape[0] and memo_used[1] + ne <= pool.shape[0]:
                memo_u[j], memo_x[j], memo_off[j] = u, bits, memo_used[1]
                for k in range(ne):
                    pool[memo_used[1] + k] = delta[u_e[e0 + k]]
                memo_used[0] += 1
                memo_used[1] += ne

    def project(ptr, end, slot, wts, qb, dq, out):
        # a head's query or key dims qb..qb+dq-1 from the slots (rare enough per position
        # that its array arguments' reference counts do not matter)
        for dd in range(dq):
            acc = zero
            for t in range(ptr[qb + dd], end[qb + dd]):
                acc += val[slot[t]] * wts[t]
            out[qb + dd] = acc

    def fresh_v(g):
        # head g's value at the current position, recomputed where a slot it reads changed;
        # vchg: it changed since the head last answered with it
        vb = head_v[g]
        if vd[g]:
            vd[g] = 0
            for u in range(head_nv[g]):
                acc = zero
                for t in range(v_ptr[vb + u], v_end[vb + u]):
                    acc += val[v_slot[t]] * v_val[t]
                if acc != v_cur[vb + u]:
                    v_cur[vb + u] = acc
                    vchg[g] = 1

    def input_at(j, c):
        # input column c at position j of a machine (as the loop below builds the row)
        k = in_kind[c]
        if k == 1:
            cell[0] = j  # (the model's dtype, as the row holds it)
            return cell[0]
        if k == 2:
            return emb[tokens[j], in_idx[c]]
        if k == 3:
            return pos_rows[j, in_idx[c]]
        return blank[c]

    def value_at(g, j):
        # head g's value at position j < p into ans: stored, or (lazy) from j's input row
        vb, vs = head_v[g], head_s[g]
        for u in range(head_nv[g]):
            if lazy[g]:
                acc = zero
                for t in range(v_ptr[vb + u], v_end[vb + u]):
                    acc += input_at(j, v_slot[t]) * v_val[t]
                ans[u] = acc
            else:
                ans[u] = v_store[j, vs + u]

    def target(g):
        # a position read's winner from its query: the integer target b / (-2a) where the
        # curvature a < 0 leads by `need`, +inf (the query's own position) where a = 0 and
        # the slope b does, else NaN (attend)
        qb, a, b = head_q[g], 0.0, 0.0
        for dd in range(head_dq[g]):
            a += np.float64(q_cur[qb + dd]) * pa2[qb + dd]
            b += np.float64(q_cur[qb + dd]) * pa1[qb + dd]
        if a < 0:
            t = b / (-2.0 * a)
            if t == math.floor(t) and -a >= need:
                return t
        elif a == 0 and b >= need:
            return np.inf
        return np.nan

    def key_of(g, c, n):
        # the match table's key: head g, class c, integer targets nsbuf[:n]
        key = np.int64(g) * np.int64(1000003) + np.int64(c)
        for i in range(n):
            key = (key * np.int64(1000000007)) ^ np.int64(nsbuf[i])
        return key

    def match_insert(g, p):
        # key p of match head g into its class and table; a key off the plan makes the head
        # irregular (attended from then on)
        qb, m0, nvals = head_q[g], mt_ptr[g], mt_n[g]
        for i in range(nvals):
            sq = np.float64(k_cur[qb + mt_sdim[m0 + i]])
            step = mt_step[m0 + i]
            if mt_vdim[m0 + i] < 0:  # (dropped: the square alone, in steps squared)
                n = sq / (mt_sigma[m0 + i] * step * step)
                want = sq
            else:
                kv = np.float64(k_cur[qb + mt_vdim[m0 + i]])
                n = kv / step
                want = mt_sigma[m0 + i] * kv * kv
            if n != math.floor(n) or abs(n) > 2.0 ** 52 or abs(sq - want) > 1e-9 * max(
                    1.0, abs(want)):
                irregular[g] = 1
                return
            nsbuf[i] = np.int64(n)
        r = mt_rdim[g]
        if r >= 0:
            want = mt_rec[g] * p
            if abs(np.float64(k_cur[qb + r]) - want) > 1e-9 * max(1.0, abs(want)):
                irregular[g] = 1
                return
        c0, ncd = mt_cptr[g], mt_cn[g]
        cls = -1
        for c in range(cls_n[g]):
            same = True
            for e in range(ncd):
                if cls_val[g, c, e] != np.float64(k_cur[qb + mt_cdim[c0 + e]]):
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
                cls_val[g, cls, e] = k_cur[qb + mt_cdim[c0 + e]]
        cnt = cls_count[g, cls]
        if cnt < cls_pos.shape[2]:
            cls_pos[g, cls, cnt] = p
        cls_count[g, cls] = cnt + 1
        key = key_of(g, cls, nvals)
        j = _slot_of(table, key)
        if table[j, 1] == 0:
            tbl_used[0] += 1
        table[j, 0], table[j, 1] = key, p + 1

    def score(g, j):
        # head g's query against its stored key j
        qb, kofs, s = head_q[g], head_k[g], 0.0
        for dd in range(head_dq[g]):
            s += np.float64(q_cur[qb + dd]) * np.float64(k_store[j, kofs + dd])
        return s

    def match_query(g, p):
        # the certified winner of match head g at query p, or -1 (attend): the newest key of
        # each class at the target (or every key of a small class) scored, every other key
        # bounded by the gap its content must lose
        qb, kofs, m0, nvals, r = head_q[g], head_k[g], mt_ptr[g], mt_n[g], mt_rdim[g]
        if r < 0:
            return -1
        qr = np.float64(q_cur[qb + r]) * mt_rec[g]
        if not qr > 0:
            return -1
        exact, content, drop = True, 0.0, np.inf
        for i in range(nvals):
            beta = np.float64(q_cur[qb + mt_sdim[m0 + i]]) * mt_sigma[m0 + i]
            if not beta < 0:
                return -1
            qv = np.float64(q_cur[qb + mt_vdim[m0 + i]]) if mt_vdim[m0 + i] >= 0 else 0.0
            t = -qv / (2.0 * beta)
            n = t / mt_step[m0 + i]
            if n != math.floor(n) or abs(n) > 2.0 ** 52:
                exact = False
            else:
                nsbuf[i] = np.int64(n)
            content += qv * t + beta * t * t
            step = mt_step[m0 + i]
            drop = min(drop, -beta * step * step)
        const = 0.0
        for dd in range(head_dq[g]):
            const += np.float64(q_cur[qb + dd]) * mt_const[qb + dd]
        c0, ncd = mt_cptr[g], mt_cn[g]
        best, second, win = -np.inf, -np.inf, -1
        for c in range(cls_n[g]):
            if cls_count[g, c] <= cls_pos.shape[2]:
                for i in range(cls_count[g, c]):
                    j = cls_pos[g, c, i]
                    s = score(g, j)
                    if s > best:
                        second = max(second, best)
                        best, win = s, j
                    else:
                        second = max(second, s)
                continue
            bonus = 0.0
            for e in range(ncd):
                bonus += np.float64(q_cur[qb + mt_cdim[c0 + e]]) * cls_val[g, c, e]
            if not exact:  # (a key may sit less than a step from a target off the lattice)
                second = max(second, const + bonus + content + qr * p)
                continue
            second = max(second, const + bonus + content - drop + qr * p)
            row = _slot_of(table, key_of(g, c, nvals))
            if table[row, 1] == 0:
                continue
            j = table[row, 1] - 1
            ok = True  # (a hash collision must not pass for the target)
            for i in range(nvals):
                vdim = mt_vdim[m0 + i]
                if vdim >= 0 and np.float64(k_store[j, kofs + vdim]) != nsbuf[i] * mt_step[m0 + i]:
                    ok = False
                elif vdim < 0 and np.float64(k_store[j, kofs + mt_sdim[m0 + i]]) != 0.0:
                    ok = False
            if not ok:
                continue
            s = score(g, j)
            second = max(second, s - qr)
            if s > best:
                second = max(second, best)
                best, win = s, j
            else:
                second = max(second, s)
        if win >= 0 and best - second >= need:
            return win
        return -1

    def store(g, p):
        # head g's key and value at p: stored (a lazy head's value is read from its input row
        # when asked), the key checked against its plan (unless proven), indexed
        qb, dq, nv, kind = head_q[g], head_dq[g], head_nv[g], kind_of[g]
        if head_s[g] >= 0 and not lazy[g]:
            fresh_v(g)
            for u in range(nv):
                v_store[p, head_s[g] + u] = v_cur[head_v[g] + u]
        if kind == 1 and kproven[g]:
            return 0
        if kd[g]:
            kd[g] = 0
            project(k_ptr, k_end, k_slot, k_val, qb, dq, k_cur)
        if head_k[g] >= 0:
            for dd in range(dq):
                k_store[p, head_k[g] + dd] = k_cur[qb + dd]
        if kind == 1:
            for dd in range(dq):
                want = pa0[qb + dd] + pa1[qb + dd] * p + pa2[qb + dd] * p * p
                if abs(np.float64(k_cur[qb + dd]) - want) > 1e-6 * max(1.0, abs(want)):
                    return ERR_MISMATCH
        elif kind == 2 and irregular[g] == 0:
            match_insert(g, p)
        return 0

    def unlazy(g, p):
        # head g attends: its values at 0..p stored from the input rows, stored from now on
        if lazy[g]:
            for j in range(p):
                value_at(g, j)
                for u in range(head_nv[g]):
                    v_store[j, head_s[g] + u] = ans[u]
            lazy[g] = 0
            fresh_v(g)
            for u in range(head_nv[g]):
                v_store[p, head_s[g] + u] = v_cur[head_v[g] + u]

    def winner(g, p):
        # head g's winner at p by its index (its query recomputed where it changed); -1: attend
        qb, dq, kind = head_q[g], head_dq[g], kind_of[g]
        if qd[g]:
            qd[g] = 0
            project(q_ptr, q_end, q_slot, q_val, qb, dq, q_cur)
            if kind == 1:
                h_t[g] = target(g)
        if kind == 1:
            t = h_t[g]
            if t == t:  # (NaN: attend)
                return p if t >= p else max(np.int64(t), 0)
        elif kind == 2 and irregular[g] == 0:
            return match_query(g, p)
        return -1

    def answer(g, p):
        # head g's answer at p (its winner's value, or attention); the readers of a dim that
        # changed flagged. A winner before p whose value was the answer already, or p again
        # with an unchanged value, changes nothing.
        qb, dq, vb, nv, vs = head_q[g], head_dq[g], head_v[g], head_nv[g], head_s[g]
        win = winner(g, p)
        if win == p:
            fresh_v(g)
            if last_win[g] == SELF and vchg[g] == 0:
                stats[0] += 1
                return 0
            vchg[g] = 0
            last_win[g] = SELF
            for u in range(nv):
                ans[u] = v_cur[vb + u]
        elif win >= 0 and vs >= 0:
            if win == last_win[g]:
                stats[0] += 1
                return 0
            last_win[g] = win
            value_at(g, win)
        elif vs < 0:  # (a head storing no values found no winner)
            return ERR_MISMATCH
        else:
            stats[1] += 1
            scans[g] += 1
            unlazy(g, p)
            last_win[g] = -1
            _softmax_read(g, p, kind_of[g], q_cur[qb:qb + dq], dq, qb, pa0, pa1, pa2, k_store,
                          head_k[g], v_store, vs, nv, ans)
        if win >= 0:
            stats[0] += 1
        for u in range(nv):
            if ans[u] != outv[vb + u]:
                outv[vb + u] = ans[u]
                for t in range(ov_ptr[vb + u], ov_ptr[vb + u + 1]):
                    push(ov_col[t], 1)
        return 0

    def forward(p, light):
        for li in range(layers.shape[0]):
            for g in range(layers[li, 0], layers[li, 1]):
                if store(g, p) != 0:
                    return ERR_MISMATCH
                if light and head_need[g] == 0:  # (nothing at p reads its answer)
                    continue
                if answer(g, p) != 0:
                    return ERR_MISMATCH
            entries(2 * li)
            if light and mlp_need[li] == 0:  # (nothing stored at p reads it)
                continue
            units(li)
            neurons(li)
            entries(2 * li + 1)
        return 0

    pos_col, out_row, lower, upper = np.int64(mi[0]), np.int64(mi[1]), mi[3], mi[4]
    n_match = 0
    for g in range(kind_of.shape[0]):
        n_match += kind_of[g] == 2
    for p in range(start, stop):
        if 2 * (tbl_used[0] + n_match) > table.shape[0]:  # (the caller doubles it)
            return GROW, p
        if not machine:
            set_input(rows[p - start])
            if forward(p, False) != 0:
                return ERR_MISMATCH, p
            for k in range(out_rows.shape[0]):
                cols[p - start, k] = val[fin[out_rows[k]]]
            continue
        if p == start:
            for c in range(d):
                x[c] = blank[c]
        x[pos_col] = p
        for i in range(emb_cols.shape[0]):
            x[emb_cols[i]] = emb[tokens[p], i]
        for i in range(pos_cols.shape[0]):
            x[pos_cols[i]] = pos_rows[p, i]
        if p == start:
            set_input(x)
        else:  # (the other columns hold the blank row)
            for c in var_cols:
                if x[c] != val[c]:
                    val[c] = x[c]
                    changed(c)
        if forward(p, p + 1 < n_prompt) != 0:
            return ERR_MISMATCH, p
        if p + 1 < n_prompt:
            continue
        v = np.int64(math.floor(np.float64(val[fin[out_row]]) * mi[2] + 0.5))
        if p + 1 < tokens.shape[0]:
            tokens[p + 1] = v - np.int64(lower)
        if v < lower or v > upper:
            return 2, p + 1
        for h in halts:
            if v == h:
                return 1, p + 1
    return 0, stop


@njit(cache=True)
def _run_flat(machine, start, stop, n_prompt, rows, out_rows, cols, tokens, zero, need, layers,
              mlp_need, e_src, e_list, list_base, n_layer, fin, head_q, head_dq, head_v,
              head_nv, head_kind, head_k, head_s, head_need, q_ptr, q_end, q_slot, q_val, k_ptr,
              k_end, k_slot, k_val, v_ptr, v_end, v_slot, v_val, pa0, pa1, pa2, mt_ptr, mt_n,
              mt_vdim, mt_sdim, mt_sigma, mt_step, mt_cptr, mt_cn, mt_cdim, mt_rdim, mt_rec,
              mt_const, o_ptr, o_end, o_row, o_val, o_bias, ov_ptr, ov_col, n_ptr, n_end,
              n_slot, n_val, b1, w_ptr, w_end, w_neuron, w_val, b2, nw_ptr, nw_end, nw_col,
              rq_ptr, rq_g, rk_ptr, rk_g, rv_ptr, rv_g, rn_ptr, rn_n, succ, u_slot, u_nptr, u_n,
              u_eptr, u_e, u_lptr, ru_ptr, ru_u, val, delta, e_flag, list_e, list_cnt, hid,
              n_flag, list_n, n_cnt, qd, kd, vd, q_cur, k_cur, v_cur, outv, h_t, ans, v_store,
              k_store, last_win, vchg, lazy, kproven, table, tbl_used, nsbuf, cls_val, cls_n,
              cls_count, cls_pos, irregular, stats, scans, u_flag, list_u, u_cnt, memo_u,
              memo_x, memo_off, pool, memo_used, bitbuf, bitview, blank, emb, emb_cols,
              pos_rows, pos_cols, halts, x, mi, in_kind, in_idx, cell, var_cols):
    """`_run` with every array an argument of its own (ARRAY_GROUPS, STATE_GROUPS, then
    MACHINE_INPUTS), the way the decoder calls it: numba types a tuple of tuples of arrays
    some 100 times slower than as many arguments."""
    A = ((layers, mlp_need, e_src, e_list, list_base, n_layer, fin),
         (head_q, head_dq, head_v, head_nv, head_kind, head_k, head_s, head_need),
         (q_ptr, q_end, q_slot, q_val, k_ptr, k_end, k_slot, k_val, v_ptr, v_end, v_slot,
          v_val, pa0, pa1, pa2),
         (mt_ptr, mt_n, mt_vdim, mt_sdim, mt_sigma, mt_step, mt_cptr, mt_cn, mt_cdim, mt_rdim,
          mt_rec, mt_const),
         (o_ptr, o_end, o_row, o_val, o_bias, ov_ptr, ov_col),
         (n_ptr, n_end, n_slot, n_val, b1, w_ptr, w_end, w_neuron, w_val, b2, nw_ptr, nw_end,
          nw_col),
         (rq_ptr, rq_g, rk_ptr, rk_g, rv_ptr, rv_g, rn_ptr, rn_n, succ),
         (u_slot, u_nptr, u_n, u_eptr, u_e, u_lptr, ru_ptr, ru_u))
    S = ((val, delta, e_flag, list_e, list_cnt, hid, n_flag, list_n, n_cnt, qd, kd, vd),
         (q_cur, k_cur, v_cur, outv, h_t, ans, v_store, k_store, last_win, vchg, lazy, kproven),
         (table, tbl_used, nsbuf, cls_val, cls_n, cls_count, cls_pos, irregular, stats, scans),
         (u_flag, list_u, u_cnt, memo_u, memo_x, memo_off, pool, memo_used, bitbuf, bitview))
    M = (blank, emb, emb_cols, pos_rows, pos_cols, halts, x, mi, in_kind, in_idx, cell, var_cols)
    return _run(machine, start, stop, n_prompt, rows, out_rows, cols, tokens, M, zero, need, A,
                S)


MACHINE_INPUTS = ("blank", "emb", "emb_cols", "pos_rows", "pos_cols", "halts", "x", "mi",
                  "in_kind", "in_idx", "cell", "var_cols")
if _run_flat.py_func.__code__.co_varnames[10:_run_flat.py_func.__code__.co_argcount] != (
        ARRAY_ORDER + STATE_ORDER + MACHINE_INPUTS):  # pragma: no cover - a slip when editing
    raise ImportError("fast_decode: _run_flat's arguments must follow ARRAY_GROUPS, "
                      "STATE_GROUPS and MACHINE_INPUTS")
