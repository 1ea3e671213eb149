"""How a stage reads another's value (`_Reads`): through the narrowest columns that give what it
needs (feature columns of the token embedding, position tables of the indices, a line or
parabola in the index), and by folding a matrix into the op that made the value (`_times`)."""

from __future__ import annotations

import numpy as np

from twdialect import ops as tw
from twdialect.dense import to_numpy
from twdialect.dialect import (AttnOp, ConcatOp, EmbeddingOp, LinearOp, MlpOp, PosTableOp, SliceOp,
                               width_of)
from twdialect.point_tables import emit_steps, interpolation_mlp, step_mlps, within

from tw_frontends.rasp.limits import CLEAN, _FeaturesNoNarrower, rasp
from tw_frontends.rasp.nodes import Value
from tw_frontends.rasp.built import _is_read, _through_linear
from tw_frontends.rasp.tables import _affine, _parabola, _unit_columns


class _Reads:
    """Reading a value narrower, or through the op that made it."""

    def _times(self, v: Value, m: np.ndarray, tolerance: float) -> Value | None:
        """v @ m, made by v's own op with its output matrix times m (v is then dead code),
        where nothing else reads v and that op is a table of steps (planned again for the new
        rows, within `tolerance`, no deeper), a linear, a ReLU MLP or an attention head; else
        None (a separate `tw.linear` would cost a sublayer)."""
        op = v.owner
        if v.uses:
            return None
        if v in self.tables:
            x, points, rows, depth = self.tables[v]
            rows, tolerance = rows @ m, np.full(m.shape[1], tolerance / 4)
            affine = _affine(points, rows)
            if affine is not None:  # (a one-hot of a number, read as a code of it)
                return tw.linear(x, [[affine[0]]], [affine[1]])
            line = interpolation_mlp(points, rows)
            if within(points, rows, line, tolerance):
                return tw.mlp(x, *line)
            plan = step_mlps(points, rows, tolerance)
            return emit_steps(x, rows, plan) if len(plan) <= depth else None
        if isinstance(op, LinearOp):
            x, w, b = _through_linear(v)
            return tw.linear(x, w @ m, b @ m)
        if isinstance(op, PosTableOp):
            return tw.pos_table(to_numpy(op.table, np.float64) @ m)
        if isinstance(op, MlpOp) and op.act is None and op.up is None:
            b2 = np.zeros(width_of(v)) if op.b2 is None else to_numpy(op.b2, np.float64)
            return tw.mlp(op.x, to_numpy(op.w1, np.float64),
                          None if op.b1 is None else to_numpy(op.b1, np.float64),
                          to_numpy(op.w2, np.float64) @ m, b2 @ m)
        if isinstance(op, AttnOp) and op.rope_base is None:
            # the head reads what its output needs: wv wo m, through narrow token columns
            value, wv = self._narrow_value(op.value, to_numpy(op.wv, np.float64)
                                           @ to_numpy(op.wo, np.float64) @ m)
            return tw.attn(op.query, op.key, value, to_numpy(op.wq, np.float64),
                           to_numpy(op.wk, np.float64), wv, np.eye(m.shape[1]),
                           mask="causal" if op.mask is None else op.mask.data)
        return None

    def _narrow_value(self, value: Value, wv: np.ndarray) -> tuple[Value, np.ndarray]:
        """(value, wv) with the value concat's first part read narrower (`_narrow_read`)."""
        concat = value.owner
        parts = list(concat.operands) if isinstance(concat, ConcatOp) else [value]
        n = width_of(parts[0])
        x, w = self._narrow_read(parts[0], wv[:n])
        if x is parts[0]:
            return value, wv
        return tw.concat(x, *parts[1:]), np.vstack([w, wv[n:]])

    def _narrow_read(self, x: Value, mat: np.ndarray) -> tuple[Value, np.ndarray]:
        """(x, mat), or narrower columns and their matrix where x is the token or the indices
        one-hot and mat reads fewer columns than it: the token embedding's feature columns
        (`_token_columns`), a position table of mat's rows (free)."""
        if mat.shape[1] >= width_of(x):
            return x, mat
        if x is self.tokens_onehot:
            return self._token_columns(mat) or (x, mat)
        if x is self.indices_onehot and self.narrow_indices:
            self.narrowed_indices = True
            return self._position_columns(mat), np.eye(mat.shape[1])
        return x, mat

    def _index_columns(self, mat: np.ndarray, tolerance=None) -> tuple:
        """`_from_source`'s read of indices one-hot @ mat: its columns that are lines or
        parabolas in the index (`_parabola`, within `tolerance`) from the machine's position
        and constant columns and one shared table of the index squared (`_index_squares`),
        the others from a position table of their own."""
        cols = mat.shape[1]
        tolerances = [None] * cols if tolerance is None else \
            np.broadcast_to(tolerance, (cols,)).tolist()
        fits = [_parabola(mat[:, j], tol) for j, tol in enumerate(tolerances)]
        rest = [j for j, fit in enumerate(fits) if fit is None]
        if len(rest) == cols:
            return self._position_columns(mat), np.eye(cols), np.zeros(cols), np.zeros(cols)
        # a i^2 + b i + c at index i = p - 1: a (p - 1)^2 + b p + (c - b), exact at BOS too
        parts = [tw.pos_encoding(1, self.max_seq_len + 1), self.one]
        squares = any(fit is not None and fit[0] != 0 for fit in fits)
        if squares:
            parts.append(self._index_squares())
        w = np.zeros((len(parts) + len(rest), cols))
        at_bos = np.zeros(cols)
        for j, fit in enumerate(fits):
            if fit is not None:
                a, b, c = fit
                w[0, j], w[1, j] = b, c - b
                if squares:
                    w[2, j] = a
                at_bos[j] = a + c - b
        if rest:
            parts.append(self._position_columns(mat[:, rest]))
            w[len(parts) - 1 + np.arange(len(rest)), rest] = 1.0
        return tw.concat(*parts), w, np.zeros(cols), at_bos

    def _index_squares(self) -> Value:
        """One position table of (p - 1)^2 (the index squared; 1 at BOS), shared by every
        read of the indices that is a parabola in the index (a nearest-key head's k^2 and
        its queries' lift)."""
        if self.squares is None or self.squares.owner not in self.graph.ops:
            p = np.arange(self.max_seq_len + 1, dtype=float)
            self.squares = tw.pos_table(((p - 1) ** 2)[:, None])
        return self.squares

    def _position_columns(self, mat: np.ndarray) -> Value:
        """indices one-hot @ mat, as a position table (BOS's row zero, as the one-hot's)."""
        table = np.zeros((self.max_seq_len + 1, mat.shape[1]))
        table[1:] = mat  # position p holds index p - 1
        return tw.pos_table(table)

    def _token_columns(self, mat: np.ndarray) -> tuple[Value, np.ndarray] | None:
        """(x, W) with x W = tokens one-hot @ mat, x the token embedding's feature columns:
        mat's columns up to scale, each added where no earlier read asked for it (None where
        this translation reads the one-hot itself). A zero mat reads the constant column
        while there are no features. `_FeaturesNoNarrower` once the features would be as
        many as the one-hot's columns."""
        if not self.token_features:
            return None
        units, scales = _unit_columns(mat)
        w_at = []  # (feature, column of mat, scale)
        for i, (col, scale) in enumerate(zip(np.ascontiguousarray(units.T), scales)):
            if scale != 0.0:
                j = self.feature_index.setdefault(col.tobytes(), len(self.feature_columns))
                if j == len(self.feature_columns):
                    self.feature_columns.append(col)
                    if len(self.feature_columns) >= len(self.vocab):
                        raise _FeaturesNoNarrower()
                w_at.append((j, i, scale))
        self.features_read = True
        if not self.feature_columns:
            return self.one, np.zeros((1, mat.shape[1]))
        w = np.zeros((len(self.feature_columns), mat.shape[1]))
        for j, i, scale in w_at:
            w[j, i] = scale
        return self._features(len(self.feature_columns)), w

    def _features(self, k: int) -> Value:
        """The first k feature columns of the token embedding: a slice past the table's
        width while the graph is built (`_embed_features` widens the table), 0 at BOS."""
        if k not in self.feature_slices or \
                self.feature_slices[k].owner not in self.graph.ops:
            v = len(self.vocab)
            view = self.graph.append(SliceOp(self.embedding, v + 2, k)).results[0]
            self.at_bos[view] = np.zeros((1, k))
            self.feature_slices[k] = view
        return self.feature_slices[k]

    def _embed_features(self, graph) -> None:
        """The token embedding with the feature columns the reads asked for (0 at BOS and
        pad), where the program reads the one-hot only through them; else
        `_FeaturesNoNarrower` (its columns serve every read: `translate` builds again
        without)."""
        if not self.feature_columns:
            return
        if _is_read(self.tokens_onehot):
            raise _FeaturesNoNarrower()
        old = self.embedding.owner
        table = to_numpy(old.table, np.float64)
        features = np.stack(self.feature_columns, axis=1)
        table = np.hstack([table, np.vstack([features, np.zeros((2, features.shape[1]))])])
        new = EmbeddingOp(old.input_name.data, table)
        graph.body.block.insert_op_before(new, old)
        old.results[0].replace_all_uses_with(new.results[0])
        graph.body.block.erase_op(old)
        self.embedding = new.results[0]

    def _from_source(self, onehot: Value, mat: np.ndarray, tolerance) -> tuple | None:
        """(x, W, bias, at_bos) with x W + bias = onehot @ mat, x read from what made the
        one-hot: the token embedding's feature columns (`_token_columns`) or a position table
        for the indices (free), or a line of the number a table read (`_affine_read`), or a
        table of steps beside the one-hot's, over the same input and no deeper (the same
        neurons; the one-hot itself is then dead code unless something else reads it).
        `tolerance`: the float32 error the reader accepts in each column (default: CLEAN,
        the one-hot's own). None where neither applies."""
        cols = mat.shape[1]
        if onehot is self.tokens_onehot:
            picked = self._token_columns(mat)
            return None if picked is None else (picked[0], picked[1], np.zeros(cols),
                                                np.zeros(cols))
        if onehot is self.indices_onehot:
            return self._index_columns(mat, tolerance)
        if isinstance(onehot.owner, PosTableOp):  # (a width that is the position)
            table = tw.pos_table(to_numpy(onehot.owner.table, np.float64) @ mat)
            self._sync()
            return table, np.eye(cols), np.zeros(cols), self.at_bos[table][0]
        if onehot not in self.tables:
            return None
        # columns scaled to at most 1 in the table (its float32 error is then the one-hot's)
        scale = np.maximum(np.abs(mat).max(axis=0), np.finfo(np.float64).tiny)
        tol = None if tolerance is None else tolerance / scale
        x, points, rows, depth = self.tables[onehot]
        line = self._affine_read(x, points, rows @ mat, tolerance)
        if line is not None:
            return line
        scaled = rows @ (mat / scale)
        plan = step_mlps(points, scaled, tol)
        if len(plan) > depth:  # deeper than the one-hot's own table
            return None
        read = emit_steps(x, scaled, plan)
        self.table_errors[read] = plan.error
        self._sync()
        return read, np.diag(scale), np.zeros(cols), self.at_bos[read][0] * scale

    def _affine_read(self, x: Value, points: np.ndarray, rows: np.ndarray,
                     tolerance) -> tuple | None:
        """`_from_source`'s (x, W, bias, at_bos) where every column of a table's rows is a
        line through its points (length's one-hot read as length - index): a linear map of
        the table's number x, where x's error times the slope keeps within `tolerance`
        (default: CLEAN of the column's largest entry). None otherwise."""
        error = self.errors.get(x)
        if width_of(x) != 1 or error is None or points.size < 2:
            return None
        lines = [_affine(points, rows[:, [j]]) for j in range(rows.shape[1])]
        if any(line is None for line in lines):
            return None
        slope, intercept = (np.array([line[i] for line in lines]) for i in (0, 1))
        if not slope.any():  # (a constant: the table of steps makes it a literal)
            return None
        allowed = CLEAN * np.maximum(1.0, np.abs(rows).max(axis=0)) if tolerance is None \
            else np.broadcast_to(tolerance, slope.shape)
        if np.any(error * np.abs(slope) > allowed):
            return None
        self._sync()
        return x, slope[None, :], intercept, self.at_bos[x][0] * slope + intercept

    def _sides(self, leaves: list, side: str) -> list:
        out, seen = [], set()
        for leaf in leaves:
            if isinstance(leaf, rasp.ConstantSelector):
                s = rasp.indices
            else:
                s = getattr(leaf, side)
            if s.unique_id not in seen:
                seen.add(s.unique_id)
                out.append(s)
        return out
