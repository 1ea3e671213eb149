"""Attention heads for selectors (`_Heads`: one head's queries, keys and logits; `_HeadReads`:
how a side of a selector is read: its one-hot, a table of keys, or through the number itself
where the predicate compares numbers)."""

from __future__ import annotations

import functools

import numpy as np

from twdialect import ops as tw
from twdialect.dialect import width_of

from tw_frontends.rasp.limits import GAIN, RaspError, _label, rasp
from tw_frontends.rasp.numbers import _NONE, _ordered
from tw_frontends.rasp.nodes import Encoded, Value
from tw_frontends.rasp.built import _summed, _through_linear, _wider_only_for
from tw_frontends.rasp.float32 import _read_error
from tw_frontends.rasp.tables import _one_hot_rows
from tw_frontends.rasp.keys import (MAX_DIGITS, _exact, _factor, _key_tolerance, _nearest_key,
                                    _query_tolerance)
from tw_frontends.rasp.values import (_conjuncts, _leaves, _root_or_constant, _selection,
                                      _tuple_at_root, _without_prefix)


class _Heads:
    """One attention head per selector: its queries, keys and logits."""

    def _joint_of(self, sops: list, selector) -> tuple[Encoded, list[tuple]]:
        """The one-hot over the value tuples of a selector's keys (or queries) `sops`: where
        they are all functions of one categorical root (`_root`), a table of the tuples the
        root's values give (Select(indices, ...) & Select(indices - 1, ...): n tuples, a
        linear map of the indices' one-hot, where `joint` would take n^2 of them, a neuron
        each; the sops themselves are not translated); else `joint`."""
        roots = {id(r): r for r in (_root_or_constant(s, self.roots) for s in sops)
                 if r is not None}
        if len(sops) > 1 and len(roots) == 1:
            root = next(iter(roots.values()))
            enc = self.sop(root)
            outs = [_tuple_at_root(sops, root, r) for r in enc.space or ()]
            tuples = _ordered(o for o in outs if o is not _NONE)
            if not enc.numerical and tuples:
                self._check_size(selector, len(tuples), "value combinations")
                rows = _one_hot_rows(outs, tuples, len(tuples))
                none = enc.maybe_none or any(o is _NONE for o in outs)
                return self.encoded(tw.linear(enc.value, rows), False, tuples, none,
                                    noisy=enc.noisy, error=_read_error(enc.error, rows)), tuples
        parts = [self.as_categorical(self.sop(s), s) for s in sops]
        for s, part in zip(sops, parts):
            if not part.space:
                raise RaspError(f"{_label(s)}: None at every position, read by a selector "
                                "(RASP's Select raises on a None key or query)")
        return self.joint(parts, selector)

    def _length(self, expr) -> Encoded:  # (not causal: validate.py)
        return self._count_all(rasp.is_numerical(expr), prefix=False)

    def _count_all(self, numerical: bool, prefix: bool) -> Encoded:
        """The width of a selector that picks every key it sees: the query's position p
        (index + 1) where it sees a prefix (a causal mask, or `indices <= indices`), a
        position table; else the length, the largest position, which one head reads off the
        key of largest p (logits GAIN p: the next one weighs e^-GAIN of it), where the width
        through BOS's share takes a table of n + 1 steps and a one-hot of them."""
        n = self.max_seq_len
        if prefix:  # (a categorical use reads its one-hot as a position table: `_from_source`)
            p = np.arange(n + 1)
            if numerical:
                return self.encoded(tw.pos_table(p[:, None].astype(float)), True,
                                    list(range(1, n + 1)), noisy=False)
            return self.encoded(tw.pos_table(np.eye(n + 1)[p, 1:]), False,
                                list(range(1, n + 1)), noisy=False)
        # the machine's position column p (BOS at 0) is the key and the value; the query
        # 2 p - 1 gives a query at p > 0 logits GAIN (2 p - 1) p' at key p', largest at the
        # last key, and BOS's, -GAIN p', largest at BOS's own key (BOS reads 0)
        pos = tw.pos_encoding(1, n + 1)
        length = tw.attn(tw.concat(pos, self.one), pos, pos, GAIN * np.array([[2.0], [-1.0]]),
                         [[1.0]], [[1.0]], [[1.0]], mask="full")
        # (logits are whole multiples of GAIN, the others' weights underflow: one rounding)
        return self.encoded(length, True, list(range(1, n + 1)), noisy=True,
                            error=2.0 ** -23 * n)

    # -- selectors ---------------------------------------------------------------------
    def head(self, selector, value: Encoded | None, bos_weight: float, wo: np.ndarray,
             value_sop=None) -> Value:
        """One attention head over `selector`: keys and queries one-hot (joint where the
        selector reads several SOps, or an And's conjuncts' logits summed where that joint
        would be a one-hot of value tuples: `_summed_parts`), logits GAIN * [selected] +
        bos_weight * GAIN at the BOS key, BOS queries pinned to BOS; it reads concat(value,
        BOS flag) (the flag alone for None) through `wo`. A key, query or value that is a
        `tw.linear` of another value is read through its matrix (folded into the head's
        projections), so a Map feeding a selector costs nothing of its own. `value_sop`: the
        RASP SOp the head averages (an Aggregate's), None for a SelectorWidth."""
        selector, prefix = _without_prefix(selector)
        parts = self._summed_parts(selector)
        if parts is None:
            nk, q_read, k_read = self._joint_reads(selector, value, bos_weight, value_sop)
        else:
            nk, q_read, k_read = self._summed_reads(parts)
        # query [q, 1, bos] -> (q - bos cq) A | bos_weight GAIN + lift + GAIN bos
        q_in, q_w, q_bias, q_bos = q_read
        wq = np.vstack([q_w, q_bias[None, :], -q_bos[None, :]])
        # the constant 1: BOS's fallback logit, above all but one of a sum's parts (a key
        # every part selects has GAIN times their number: `_summed_reads`)
        above = len(parts) - 1 if parts else 0
        wq[-2, nk] += (bos_weight + above) * GAIN
        wq[-1, nk] += GAIN  # BOS queries attend to BOS
        # key [k, 1, bos] -> (k - bos ck) B | bos
        k_in, k_w, k_bias, k_bos = k_read
        wk = np.vstack([np.hstack([k_w, np.zeros((k_w.shape[0], 1))]),
                        np.append(k_bias, 0.0)[None, :], np.append(-k_bos, 1.0)[None, :]])
        query = tw.concat(q_in, self.one, self.bos_flag)
        key = tw.concat(k_in, self.one, self.bos_flag)
        mask = "causal" if self.causal or prefix else "full"
        if mask == "causal" and q_in is self.one:
            # every query but BOS's reads the same (a TRUE selector's), and BOS's sees only
            # BOS: one dimension, the key's logit under that query
            wk, wq = wk @ (wq[0] + wq[-2])[:, None], np.ones((1, 1))
            query = self.one
        if value is None:
            v, wv = self.bos_flag, np.eye(1)
        else:  # value [v, 1, bos] -> v | bos
            v_in, v_mat, v_bias = _through_linear(value.value)
            v_in, v_mat = self._narrow_read(v_in, v_mat)
            w = v_mat.shape[1]
            v = tw.concat(v_in, self.one, self.bos_flag)
            wv = np.zeros((v_mat.shape[0] + 2, w + 1))
            wv[:-2, :w], wv[-2, :w], wv[-1, w] = v_mat, v_bias, 1.0
        return tw.attn(query, key, v, wq, wk, wv, wo, mask=mask)

    def _summed_parts(self, selector) -> list | None:
        """The conjuncts of an And whose keys (or queries) would need a one-hot of their
        value tuples (`joint`: |X| |Y| columns and an MLP a layer before the head), where
        each conjunct alone needs none: the head then sums their logits (`_summed_reads`).
        None where that does not apply."""
        parts = _conjuncts(selector)
        if len(parts) < 2:
            return None
        sides = [[self._sides(_leaves(p), side) for side in ("keys", "queries")] for p in parts]
        if any(self._needs_product(s) for pair in sides for s in pair):
            return None
        whole = [self._sides(_leaves(selector), side) for side in ("keys", "queries")]
        return parts if any(self._needs_product(s) for s in whole) else None

    def _needs_product(self, sops: list) -> bool:
        """Whether `_joint_of` reads these SOps through a one-hot of their value tuples
        (`joint`), not one SOp's one-hot nor a table over one root's values."""
        roots = {id(r) for r in (_root_or_constant(s, self.roots) for s in sops) if r is not None}
        return len(sops) > 1 and len(roots) != 1

    def _summed_reads(self, parts: list) -> tuple:
        """(head dims, query read, key read) of an And's conjuncts as a sum of their logits:
        conjunct i gives GAIN at its selected (query, key) pairs through its own one-hots
        (`_factor`), so a key every conjunct selects has GAIN times their number and any
        other at least GAIN less, as a plain head's unselected key (and BOS's fallback logit
        sits as far below: `head`). The one-hots of tokens x indices (|X| |Y| columns, an MLP
        to make them) become |X| + |Y| columns: count_earlier_equal at length 50, 2 layers
        and d 494 -> 1 layer. The reads as `_read`'s, one value a column block."""
        factors = []
        for part in parts:
            leaves = _leaves(part)
            keys, queries = self._sides(leaves, "keys"), self._sides(leaves, "queries")
            k_enc, k_tuples = self._joint_of(keys, part)
            q_enc, q_tuples = self._joint_of(queries, part)
            pred = _selection(part, k_tuples, q_tuples,
                              {s.unique_id: i for i, s in enumerate(keys)},
                              {s.unique_id: i for i, s in enumerate(queries)})
            factors.append((q_enc, k_enc, *_factor(GAIN * pred)))
        nk = sum(a.shape[1] for _, _, a, _ in factors)
        q_reads, k_reads, at = [], [], 0
        for q_enc, k_enc, a, b in factors:
            dims = a.shape[1]
            aq, bk = np.zeros((a.shape[0], nk + 1)), np.zeros((b.shape[0], nk))
            aq[:, at: at + dims], bk[:, at: at + dims] = a, b
            q_reads.append(self._read(q_enc, aq))
            k_reads.append(self._read(k_enc, bk))
            at += dims
        return nk, _summed(q_reads), _summed(k_reads)

    def _joint_reads(self, selector, value: Encoded | None, bos_weight: float,
                     value_sop) -> tuple:
        """(head dims, query read, key read) of a selector through the one-hots of its keys'
        and queries' value tuples (`_joint_of`), read through the key's number where that
        applies (`_through_number`); the query's matrix has a last column of BOS's `lift`."""
        leaves = _leaves(selector)
        keys, queries = self._sides(leaves, "keys"), self._sides(leaves, "queries")
        k_enc, k_tuples = self._joint_of(keys, selector)
        q_enc, q_tuples = self._joint_of(queries, selector)
        k_slot = {s.unique_id: i for i, s in enumerate(keys)}
        q_slot = {s.unique_id: i for i, s in enumerate(queries)}
        pred = _selection(selector, k_tuples, q_tuples, k_slot, q_slot)
        # logits = q pred k^T = (q A)(k B)^T through the narrower side's distinct rows, or
        # through the key's number where every query selects one key value (_nearest_key);
        # BOS's logit is bos_weight GAIN, plus `lift` (per query class) in the latter.
        # A noisy key's number moves its logit a little (`_key_tolerance`), so keys of one
        # value no longer share the softmax evenly: that is exact only where they hold one
        # value to average (`ValueSets.determines`) and the key's number is read from a table
        # A SelectorWidth reads BOS's share, so its head goes through the key's number only
        # from exact one-hots, where BOS's logit keeps the share's precision
        # (`_nearest_key`'s `bos_error`: 1 / (64 n), a sixteenth of the width table's plateau)
        width = value is None
        shared = len(keys) == 1 and value_sop is not None and not self.causal and \
            self._key_table(k_enc) and self.sets.determines(keys[0], value_sop)
        keys_values = k_enc.space if len(keys) == 1 and not k_enc.maybe_none and \
            (not k_enc.noisy or shared) and \
            (not width or (_exact(k_enc) and _exact(q_enc))) else None
        bos_error = 1 / (64 * self.max_seq_len) if width else None
        a, b, lift, k_read, q_read = self._through_number(
            pred, keys_values, bos_weight, bos_error, k_enc, q_enc, width)
        nk = a.shape[1]
        a = np.hstack([a, np.zeros((a.shape[0], 1)) if lift is None else lift[:, None]])
        return nk, q_read or self._read(q_enc, a), k_read or self._read(k_enc, b)


class _HeadReads:
    """How a selector's side is read: one-hot, key table or the number itself."""

    def _through_number(self, pred, keys_values, bos_weight, bos_error, k_enc, q_enc,
                        width: bool) -> tuple:
        """(A, B, lift, key read, query read) of a head's logits q A (k B)^T: through the key's
        number (`_nearest_key`) in the fewest digits whose noisy key and tabled query can be
        read from their tables' sources within the head's tolerances (a number of many
        values asks its tables for a precision of 1 / values^2: at 90 ranks, 4e-6 of the
        largest row, which one MLP of steps cannot keep; its digits ask 1 / radix^2);
        else the fewest digits reading the query through its one-hot; else a noisy key's
        digits through its one-hot where the one-hot's error keeps them within tolerance
        (both keep the one-hot, wide, in the residual); else the keys one-hot (`_factor`: as
        many head dimensions as key values). A read None is the plain one (`_read` with no
        tolerance: that of a one-hot)."""
        @functools.cache
        def near(digits: int):  # (asked again by the second loop)
            return _nearest_key(pred, keys_values, bos_weight, bos_error, digits, extend)

        # (a query read off the indices: lines and parabolas in the index are free)
        extend = _through_linear(q_enc.value)[0] is self.indices_onehot

        def candidates():  # (digits, (A, B, lift)), fewest digits first
            return ((d, near(d)) for d in range(1, MAX_DIGITS + 1) if near(d) is not None)

        def query(digits, a, b, lift):  # (its features [A | lift], their tolerance)
            return np.hstack([a, lift[:, None]]), \
                None if width else _query_tolerance(b, lift, digits)

        fallback = None
        for digits, (a, b, lift) in candidates():
            k_read = None
            if k_enc.noisy:
                k_read = self._read(k_enc, b, _key_tolerance(b, q_enc.noisy, digits),
                                    need_source=True)
                if k_read is None:  # its table would be deeper
                    continue
            aq, tolerance = query(digits, a, b, lift)
            q_read = self._read(q_enc, aq, tolerance, need_source=True)
            if q_read is not None or not self._narrows(q_enc, aq):
                if fallback is not None and fallback[3] is not None:
                    self._erase(fallback[3][0].owner)  # (its key table, read by nothing)
                return a, b, lift, k_read, q_read
            if fallback is None:  # the fewest digits, through the query's one-hot
                fallback = a, b, lift, k_read, self._read(q_enc, aq, tolerance)
            elif k_read is not None:
                self._erase(k_read[0].owner)
        if fallback is not None:
            return fallback
        for digits, (a, b, lift) in candidates() if k_enc.noisy else ():
            k_read = self._through_one_hot(k_enc, b, _key_tolerance(b, q_enc.noisy, digits))
            if k_read is not None:
                return a, b, lift, k_read, self._read(q_enc, *query(digits, a, b, lift))
        return (*_factor(GAIN * pred), None, None, None)

    def _through_one_hot(self, enc: Encoded, mat: np.ndarray, tolerance) -> tuple | None:
        """`_read`'s (x, W, bias, at_bos) of `mat` of a tabled one-hot, read through the
        one-hot itself where its table's float32 error times mat stays within `tolerance`
        per column (`_read_error`'s bound); else None."""
        x, m, bias = _through_linear(enc.value)
        error = self.table_errors.get(x)
        through = m @ mat
        if error is None or np.any(error * np.abs(through).sum(axis=0) > tolerance):
            return None
        return x, through, bias @ mat, enc.bos @ mat

    def _narrows(self, enc: Encoded, mat: np.ndarray) -> bool:
        """Whether reading `mat` of a one-hot needs fewer columns than the one-hot has (so a
        read from its source could leave the one-hot out of the residual)."""
        x, m, _ = _through_linear(enc.value)
        return mat.shape[1] < width_of(x)

    def _read(self, enc: Encoded, mat: np.ndarray, tolerance=None,
              need_source: bool = False) -> tuple | None:
        """(x, W, bias, at_bos) with (enc - [BOS] enc at BOS) @ mat = x W + bias - [BOS]
        at_bos: how a head reads `mat` of a one-hot (through any `tw.linear` that made it,
        folded in). Where mat is narrower than the one-hot, its rows are read from the
        one-hot's own source (`_from_source`); else through the one-hot (None instead where
        `need_source`: the reader cannot take the one-hot's float32 error times mat)."""
        x, m, bias = _through_linear(enc.value)
        if _wider_only_for(x, enc.value):
            x, m, bias = enc.value, np.eye(enc.width), np.zeros(enc.width)
        through, shift = m @ mat, bias @ mat
        if not enc.maybe_none and len(through) and not np.any(through - through[0]):
            # every value reads the same (a TRUE selector's keys): the constant column
            return self.one, through[:1], shift, through[0] + shift
        if through.shape[1] < width_of(x):
            source = self._from_source(x, through, tolerance)
            if source is not None:
                read, w, bias, at_bos = source
                return read, w, shift + bias, at_bos + shift
        if need_source:
            return None
        return x, through, shift, enc.bos @ mat

    def _key_table(self, enc: Encoded) -> bool:
        """Whether the one-hot is a table of steps (through any `tw.linear`), which a head can
        read again as other columns within a tolerance of its own (`_from_source`)."""
        return _through_linear(enc.value)[0] in self.tables
