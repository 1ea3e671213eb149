"""The index decoder: long generation on the CPU at a cost per token that does not grow with t.

`IndexDecoder(ct, capacity)` runs a compiled model one position at a time in compiled code
(`lowering/index_kernel.py`, over the arrays of `lowering/index_layout.py`), with the same
`prefill` / `step` as `lowering.decode.Decoder` (batch 1); `run_machine` keeps the whole
greedy loop of a firebrand machine in compiled code. What makes it fast:

* **Exact-index heads** (`lowering/index_heads.py`): a position read looks its key up by the
  target position, a newest-key match in a hash table keyed by (class, integer content); each
  answer is the winner's value, which the softmax gives to float32 rounding (the proof).
  Every key is checked against its head's plan as it is written (position polynomial; integer
  content, squares, recency), or once for every position when the decoder is made (a
  position key that reads only the position and its tables), and every match query is
  certified (its winner leads every other candidate and the bound on the keys not looked up
  by the gap `needed_gap(capacity)`); a key that does not fit, or a query that cannot be
  certified, is attended over the stored keys (`scan`), as is every head the plan leaves to
  attention. A position key that does not fit its polynomial stops the decoder
  (`IndexMismatch`): the callers then finish with the torch decoder, so no path gives
  another answer than real attention.
* **Only what changed is recomputed**: the residual is held as slots (a column after each
  write), and a head, neuron or sum is recomputed only where a slot it reads took a new value
  since the previous position; a head whose winner and value are those of its last answer
  changes nothing. Each recomputed number is summed in one fixed order, so skipping never
  changes a bit.
* **Memoized units**: neurons that share their sums and read one slot (a table through
  points, a comparison) give those sums by that slot's value, remembered for the model.
* **Memory**: per head, only the value dims some output reads, per position; keys only for
  match and attended heads (position reads need none); a machine's position reads whose
  values read the input alone read them from the winner's token instead of storing them.

Numbers are the model's dtype (float32 or float64), each sum in read order with the bias added
last (the torch layers add the bias last too, but their matrix kernels sum in another order: a
float32 model's outputs may differ from the torch decoder's by rounding, 0.0055 on logits of
2,730 in sort_digits; the tokens are the same). `available()` says whether numba is there
(the callers fall back to the torch decoder, saying why, where it is not); `supports(ct)`
whether a model's layers fit (relu MLPs, no rotary or full-mask heads).
"""
from __future__ import annotations

import numpy as np

from twdialect.errors import TwError

from tw_lowering.index_kernel import ARRAY_GROUPS, ERR_MISMATCH, GROW, _rehash, _run_flat
from tw_lowering.index_layout import (KIND_MATCH, KIND_POSITION, KIND_SCAN,  # noqa: F401
                                      MAX_CLASS_DIMS, Flat, _prompt_cone, _reads_itself, _slots,
                                      _spans, flat_of)

try:  # (numba is a dependency; the decoder degrades to the torch one where it is missing)
    import numba
    _MISSING = None
except ImportError as e:  # pragma: no cover - exercised where numba is absent
    numba = None
    _MISSING = f"numba is not installed ({e})"

MAX_CLASSES = 16
SMALL_CLASS = 4  # a class of at most this many keys is scored key by key
TABLE_ROWS = 1024  # the match table's first size (doubled when half full)
MEMO_BITS = 18  # the memo holds at most 2^17 (unit, value) entries


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
        self._inputs = _input_rows(ct, self.capacity)
        self.state = self._state(a, dt, total_s, total_k, has_match)
        self.x = np.zeros(ct.machine.d, dt)
        self._out_rows = ct.out_rows.numpy().astype(np.int64)
        self.position = 0
        self._args = tuple(x for grp in self.arrays + self.state for x in grp)
        self._rows_m = self._m(0.0, 0, 0, ())

    def _m(self, scale: float, lower: int, upper: int, halts) -> tuple:
        """`_run`'s machine inputs (MACHINE_INPUTS; its docstring). in_kind / in_idx: where
        each input column comes from, as `_run` builds a machine's row (0 the blank row, 1
        the position, 2 embedding column in_idx, 3 position table column in_idx)."""
        ins, dt = self._inputs, self.x.dtype
        mi = np.array([self.ct.machine.POS_COL, self._out_rows[0] if len(self._out_rows) else 0,
                       scale, lower, upper], np.float64)
        in_kind, in_idx = np.zeros(len(self.x), np.int64), np.zeros(len(self.x), np.int64)
        in_kind[self.ct.machine.POS_COL] = 1
        in_kind[ins.emb_cols], in_idx[ins.emb_cols] = 2, np.arange(len(ins.emb_cols))
        in_kind[ins.pos_cols], in_idx[ins.pos_cols] = 3, np.arange(len(ins.pos_cols))
        return (ins.blank, ins.emb.astype(dt, copy=False), ins.emb_cols,
                ins.pos_rows.astype(dt, copy=False), ins.pos_cols,
                np.asarray(list(halts), np.int64), self.x, mi, in_kind, in_idx,
                np.zeros(1, dt), np.flatnonzero(in_kind).astype(np.int64))

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
        own.update(_slots(a, ct.machine.d))
        self.flat.e_memo = own["e_memo"]
        groups = tuple(tuple(own.get(name, a.get(name)) for name in grp)
                       for grp in ARRAY_GROUPS)
        return groups, total_s, total_k, bool(np.any(a["head_kind"] == KIND_MATCH))

    def _state(self, a: dict, dt, total_s: int, total_k: int, has_match: bool) -> tuple:
        """The state groups (STATE_GROUPS), everything flagged: the first position computes
        every head, sum and neuron."""
        n_heads, cap = max(self.flat.n_heads, 1), self.capacity
        n_layers = len(self.ct.layers)
        n_entries, n_neurons = len(a["o_ptr"]) + len(a["m_write"]), len(a["b1"])
        layers = a["layers"]
        list_cnt = np.zeros(max(2 * n_layers, 1), np.int64)
        list_cnt[0:2 * n_layers:2], list_cnt[1:2 * n_layers:2] = layers[:, 3], layers[:, 9]
        units = self.arrays[7]
        flow = (np.zeros(self.ct.machine.d + n_entries, dt), np.zeros(n_entries, dt),
                (3 - self.flat.e_memo).astype(np.uint8), np.arange(n_entries, dtype=np.int64), list_cnt,
                np.zeros(n_neurons, dt), np.ones(n_neurons, np.uint8),
                np.arange(n_neurons, dtype=np.int64), layers[:, 7].copy(),
                np.ones(n_heads, np.uint8), np.ones(n_heads, np.uint8),
                np.ones(n_heads, np.uint8))
        nq, nv = max(len(a["q_ptr"]), 1), max(len(a["v_ptr"]), 1)
        head = (np.zeros(nq, dt), np.zeros(nq, dt), np.zeros(nv, dt), np.zeros(nv, dt),
                np.full(n_heads, np.nan), np.zeros(nv, dt),
                np.zeros((cap if total_s else 1, max(total_s, 1)), dt),
                np.zeros((cap if total_k else 1, max(total_k, 1)), dt),
                np.full(n_heads, -3, np.int64), np.zeros(n_heads, np.uint8),
                np.zeros(n_heads, np.uint8), self._proven_keys(a, n_heads))
        nvals = max(int(max(a["mt_n"], default=1)), 1)
        index = (np.zeros((TABLE_ROWS if has_match else 2, 2), np.int64), np.zeros(1, np.int64),
                 np.zeros(nvals, np.int64), np.zeros((n_heads, MAX_CLASSES, MAX_CLASS_DIMS)),
                 np.zeros(n_heads, np.int64), np.zeros((n_heads, MAX_CLASSES), np.int64),
                 np.zeros((n_heads, MAX_CLASSES, SMALL_CLASS), np.int64),
                 np.zeros(n_heads, np.uint8), np.zeros(6, np.int64), np.zeros(n_heads, np.int64))
        n_units = len(units[0])
        memo = (np.ones(max(n_units, 1), np.uint8), np.arange(max(n_units, 1), dtype=np.int64),
                np.diff(units[5]).astype(np.int64)) + self._memo(n_units, dt)
        return flow, head, index, memo

    def _proven_keys(self, a: dict, n_heads: int) -> np.ndarray:
        """1 for each position read whose key is its plan's polynomial at every position of
        this decoder, shown here once for all (its key reads only the position column,
        position tables and constant columns: the same at every run): the step need not
        compute and check it. Kept on the model for its largest capacity (a key proven up to
        there is proven below)."""
        kept = self.flat.proven
        if kept is not None and kept[0] >= self.capacity:
            return kept[1].copy()
        proven = np.zeros(n_heads, np.uint8)
        ins, d, dt = self._inputs, self.ct.machine.d, self.ct._np_dtype
        fixed = np.ones(d, bool)  # (the position, its tables, columns no input writes)
        for _, _, cols, _ in ins.sources:
            fixed[cols] = False
        fixed[ins.emb_cols] = False
        fixed[ins.pos_cols] = fixed[ins.pos_col] = True
        j = np.arange(self.capacity)
        rows: dict = {}
        (head_q, head_dq, _, _, kind_of, _, _, _), qkv = self.arrays[1], self.arrays[2]
        k_ptr, k_end, k_slot, k_val, pa0, pa1, pa2 = (qkv[4], qkv[5], qkv[6], qkv[7], qkv[12],
                                                      qkv[13], qkv[14])
        for g in range(len(head_q)):
            qb, dq = int(head_q[g]), int(head_dq[g])
            slots = k_slot[_spans(k_ptr, k_end, qb, dq)]
            if kind_of[g] != KIND_POSITION or np.any(slots >= d) or not np.all(fixed[slots]):
                continue
            ok = True
            for dd in range(dq):
                acc = np.zeros(self.capacity, dt)
                for t in range(k_ptr[qb + dd], k_end[qb + dd]):
                    acc = acc + self._column(int(k_slot[t]), rows) * dt.type(k_val[t])
                want = pa0[qb + dd] + pa1[qb + dd] * j + pa2[qb + dd] * j.astype(float) ** 2
                ok &= bool(np.all(np.abs(acc.astype(np.float64) - want)
                                  <= 1e-6 * np.maximum(1.0, np.abs(want))))
            proven[g] = ok
        self.flat.proven = (self.capacity, proven.copy())
        return proven

    def _lazy_values(self) -> np.ndarray:
        """1 for each position read whose value reads input columns alone: a machine's decoder
        reads it from the winner's input row (its token, position) instead of storing it."""
        (_, _, head_v, head_nv, kind_of, _, head_s, _), qkv = self.arrays[1], self.arrays[2]
        v_ptr, v_end, v_slot = qkv[8], qkv[9], qkv[10]
        lazy = np.zeros(len(self.state[1][10]), np.uint8)
        for g in range(len(head_v)):
            slots = v_slot[_spans(v_ptr, v_end, head_v[g], head_nv[g])]
            lazy[g] = (kind_of[g] == KIND_POSITION and head_s[g] >= 0
                       and bool(np.all(slots < self.ct.machine.d)))
        return lazy

    def _column(self, c: int, rows: dict) -> np.ndarray:
        """Input column c at every position of this decoder (position, tables, constant)."""
        if c not in rows:
            ins, dt = self._inputs, self.ct._np_dtype
            if c == ins.pos_col:
                rows[c] = np.arange(self.capacity).astype(dt)
            elif c in ins.pos_cols:
                rows[c] = ins.pos_rows[:self.capacity, list(ins.pos_cols).index(c)].astype(dt)
            else:
                rows[c] = np.full(self.capacity, ins.blank[c], dt)
        return rows[c]

    def _memo(self, n_units: int, dt) -> tuple:
        """The units' memo (`_run`), shared by every decoder of this model (its entries are
        functions of the weights alone): (unit, value bits) keys, pool offsets (-1: empty),
        the pool of sums, (entries, pool) used, and a float64 whose bits are read as int64."""
        memo = getattr(self.flat, "memo", None)
        if memo is None:
            size = 1 << max(4, min(MEMO_BITS, int(np.ceil(np.log2(max(n_units, 1) * 256)))))
            bits = np.zeros(1)
            memo = (np.zeros(size, np.int64), np.zeros(size, np.int64),
                    np.full(size, -1, np.int64), np.zeros(4 * size if n_units else 1, dt),
                    np.zeros(2, np.int64), bits, bits.view(np.int64))
            self.flat.memo = memo
        return memo

    def _usable_plans(self) -> None:
        """Position heads whose scores float rounding could blur (a float32 model, large
        positions) are attended instead."""
        a = self.flat.arrays
        eps = 2.0 ** -24 if self.ct._np_dtype == np.float32 else 2.0 ** -53
        for g, plan in enumerate(self.flat.plans):
            if plan.kind == "position" and plan.magnitude * eps * 8 > plan.gap:
                a["head_kind"][g] = KIND_SCAN

    def stats(self) -> dict:
        s, scans = self.state[2][8], self.state[2][9]
        return {"indexed": int(s[0]), "attended": int(s[1]), "neurons_run": int(s[2]),
                "neurons": int(s[3]), "memo_hits": int(s[4]),
                "memo_entries": int(self.state[3][7][0]),
                "table_entries": int(self.state[2][1][0]),
                "attended_by_head": {g: int(c) for g, c in enumerate(scans) if c}}

    @property
    def state_objects(self) -> list:
        """Every state array as one list (views left out): the memory it holds."""
        return [x for grp in self.state for x in grp if x.base is None]

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
        done = 0
        while True:
            r, p = _run_flat(False, at + done, at + n, 0, rows[done:], out_rows, cols[done:],
                             _NO_TOKENS, self.zero, self.need, *self._args, *self._rows_m)
            if r != GROW:
                break
            self._grow()
            done = p - at
        if r != 0:
            raise _mismatch(p)
        return cols

    def _grow(self) -> None:
        """The match table doubled (`_run` returned GROW)."""
        old = self.state[2][0]
        new = np.zeros((2 * len(old), 2), np.int64)
        _rehash(old, new)
        self.state = self.state[:2] + ((new,) + self.state[2][1:],) + self.state[3:]
        self._args = tuple(x for grp in self.arrays + self.state for x in grp)

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
        m = self._m(float(self.ct.outputs[0].scale[0]), lower, upper, halts)
        if start == 0:  # (a machine's rows are its tokens': values read from them when asked)
            self.state[1][10][:] = self._lazy_values()
        while True:
            r, nxt = _run_flat(True, start, stop, n_prompt, _NO_ROWS, self._out_rows, _NO_ROWS,
                               tokens, self.zero, self.need, *self._args, *m)
            if r != GROW:
                break
            self._grow()
            start = nxt
        if r == ERR_MISMATCH:
            raise _mismatch(nxt)
        self.position = nxt
        return r, nxt


_NO_TOKENS = np.zeros(1, np.int64)
_NO_ROWS = np.zeros((0, 0))


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


def _input_rows(ct, capacity: int) -> _InputRows:
    """`_InputRows` of `ct` covering `capacity` positions, kept on the model."""
    kept = getattr(ct, "_index_inputs", None)
    if kept is None or kept[0] is not ct._np_dtype or kept[1] < capacity:
        kept = (ct._np_dtype, capacity, _InputRows(ct, capacity))
        ct._index_inputs = kept
    return kept[2]
