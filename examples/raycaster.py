"""raycaster: a small DOOM-style raycaster over a fixed 2D grid map, written with the ops
library, with its own plain-Python reference.

One camera state per position (so a batch of states is one sequence), the input "cam":

    (px, py, fx, fy)   integers; (px, py) the camera position in sub-cell units (SUB per map
                       cell, so cell (i, j) covers [SUB i, SUB (i + 1)) x [SUB j, SUB (j + 1)));
                       (fx, fy) the forward vector, e.g. a row of `direction_table()`
                       (round(8 (cos a, sin a)) for 16 angles), any integers in [-8, 8].

Per screen column c (0 <= c < n) the ray direction is d_c = n F + (2c - n + 1) F_perp with
F = (fx, fy) and F_perp = (-fy, fx) (a 90-degree field of view), and the ray is marched in
`steps` fixed steps, unrolled: sample k (1 <= k <= steps) lies at

    X_k = Q px + k d_c.x,  Y_k = Q py + k d_c.y      (Q = 4 n: about a quarter cell a step)

in units of 1/(Q SUB) of a cell, in the map cell (floor(X_k / (Q SUB)), floor(Y_k / (Q SUB)))
clamped to the map (outside counts as the nearest border cell). The outputs, per column:

    "step":   the first k whose sample lies in a wall cell, steps + 1 when none does;
    "wall":   the wall's type (the map character's digit, 1..9), 0 when none;
    "height": the wall's screen height round(HEIGHT_SCALE / k) (0 when none), the integer a
              renderer draws (a perpendicular distance in steps: the march advances along F
              by the same amount in every column, so there is no fisheye to correct).

Every value the graph computes is an integer (sample coordinates: linear in integer inputs;
cells: staircases of integers; map lookups and selects of integers), so the oracle is exact
and the compiled model matches it after rounding. The graph: per column and step a linear
(the sample), two staircases (`tw.piecewise_linear`, the cell), a linear (the cell key) and
a `tw.map_to_table` (hit flag and wall type), many parallel chains; then per column a serial
fold over the steps (from the last to the first, `tw.select` keeps the nearest hit), and a
`tw.map_to_table` from the step to the height; columns joined by concats.

The outputs declare no `margin`: the static float32 estimate (`lowering/precision.py`, first
order, blind to integrality) puts these integer chains far beyond 0.5 (the staircases' hidden
values reach |X| ~ 10^3..10^4 and the select fold multiplies the bound at every step), while
the compiled model is exact on them (tests/test_raycaster.py).
"""

from __future__ import annotations

import numpy as np

from twdialect import ops as tw

SUB = 8            # sub-cell units per map cell (camera positions)
F_MAX = 8          # |fx|, |fy| <= F_MAX
HEIGHT_SCALE = 64  # height = round(HEIGHT_SCALE / step)

# '#'/'1'..'9': walls (type 1 for '#'); '.': empty. Indexed map[j][i] for cell (i, j).
DEFAULT_MAP = (
    "########",
    "#......#",
    "#.22..3#",
    "#.2....#",
    "#....4.#",
    "#.5....#",
    "#......#",
    "########",
)
SMALL_MAP = (
    "######",
    "#....#",
    "#.2..#",
    "#..3.#",
    "#....#",
    "######",
)


def direction_table(n_angles: int = 16) -> np.ndarray:
    """round(F_MAX (cos a, sin a)) for n_angles angles: integer forward vectors."""
    a = 2 * np.pi * np.arange(n_angles) / n_angles
    return np.round(F_MAX * np.stack([np.cos(a), np.sin(a)], axis=1))


def _wall_types(grid) -> np.ndarray:
    """types[i, j] for cell (i, j): 0 empty, 1..9 a wall."""
    h, w = len(grid), len(grid[0])
    assert all(len(row) == w for row in grid), "map rows must be equally long"
    t = np.zeros((w, h), dtype=np.int64)
    for j, row in enumerate(grid):
        for i, ch in enumerate(row):
            t[i, j] = 0 if ch == "." else 1 if ch == "#" else int(ch)
    border = np.concatenate([t[0], t[-1], t[:, 0], t[:, -1]])
    assert (border > 0).all(), "the map's border must be walls"
    return t


def _heights(steps: int) -> list[float]:
    """Screen height per step 1..steps (then 0 for 'no hit', step steps + 1)."""
    return [float(np.floor(HEIGHT_SCALE / k + 0.5)) for k in range(1, steps + 1)] + [0.0]


def _staircase(x, n_cells: int, unit: int):
    """floor(x / unit) clamped to [0, n_cells - 1], exact for integer x."""
    bps, vals = [], []
    for m in range(1, n_cells):
        bps += [m * unit - 1.0, m * unit]
        vals += [m - 1.0, float(m)]
    return tw.piecewise_linear(x, bps, vals)


def build(n_columns: int = 64, map=DEFAULT_MAP, steps: int = 28):  # noqa: A002
    """(module, reference) for a raycaster of `n_columns` columns and `steps` march steps."""
    types = _wall_types(map)
    w, h = types.shape
    n, q = n_columns, 4 * n_columns
    unit = q * SUB
    offsets = [2 * c - n + 1 for c in range(n)]
    heights = _heights(steps)
    keys = list(range(w * h))
    table = [[1.0 if types[k // h, k % h] else -1.0, float(types[k // h, k % h])] for k in keys]
    lo, hi = -float(F_MAX), float(SUB * (max(w, h) - 1))

    with tw.Graph("main") as g:
        cam = tw.input("cam", 4, value_range=(lo, hi), integer=True)
        step_cols, wall_cols, height_cols = [], [], []
        for c in range(n):
            # the sample at step k: [X_k, Y_k] = [q px + k dx, q py + k dy],
            # d = n F + o F_perp = (n fx - o fy, n fy + o fx)
            o = offsets[c]
            hits = []
            for k in range(1, steps + 1):
                m = np.array([[q, 0.0], [0.0, q], [k * n, k * o], [-k * o, k * n]])
                xy = tw.linear(cam, m)
                cx = _staircase(tw.slice(xy, 0, 1), w, unit)
                cy = _staircase(tw.slice(xy, 1, 1), h, unit)
                key = tw.linear(tw.concat(cx, cy), [[float(h)], [1.0]])
                hits.append(tw.map_to_table(key, keys, table, default=[-1.0, 0.0]))
            # nearest hit: fold from the last step to the first
            state = tw.literal([float(steps + 1), 0.0])
            for k in range(steps, 0, -1):
                hk = hits[k - 1]
                here = tw.concat(tw.literal([float(k)]), tw.slice(hk, 1, 1))
                state = tw.select(tw.slice(hk, 0, 1), here, state)
            step = tw.slice(state, 0, 1)
            step_cols.append(step)
            wall_cols.append(tw.slice(state, 1, 1))
            height_cols.append(tw.map_to_table(step, list(range(1, steps + 2)),
                                               heights))
        tw.output("step", tw.concat(step_cols))
        tw.output("wall", tw.concat(wall_cols))
        tw.output("height", tw.concat(height_cols))

    def reference(inputs) -> dict:
        """The same in plain numpy: int64 arithmetic, floor division, clamped cells."""
        cams = np.asarray(inputs["cam"], dtype=np.float64)
        assert np.all(cams == np.round(cams)), "cam must be integers"
        cams = cams.astype(np.int64)
        out = {k: np.zeros((len(cams), n)) for k in ("step", "wall", "height")}
        for p, (px, py, fx, fy) in enumerate(cams):
            for c, o in enumerate(offsets):
                dx, dy = n * fx - o * fy, n * fy + o * fx
                hit_k, hit_t = steps + 1, 0
                for k in range(1, steps + 1):
                    i = min(max((q * px + k * dx) // unit, 0), w - 1)
                    j = min(max((q * py + k * dy) // unit, 0), h - 1)
                    if types[i, j]:
                        hit_k, hit_t = k, int(types[i, j])
                        break
                out["step"][p, c] = hit_k
                out["wall"][p, c] = hit_t
                out["height"][p, c] = heights[hit_k - 1]
        return out

    return g.module, reference


def sample(rng: np.random.Generator, map=DEFAULT_MAP, n: int = 20,  # noqa: A002
           n_angles: int = 16) -> dict:
    """n random camera states: positions in empty cells, forward vectors from the table."""
    types = _wall_types(map)
    free = np.argwhere(types == 0)
    cells = free[rng.integers(0, len(free), n)]
    pos = cells * SUB + rng.integers(0, SUB, (n, 2))
    dirs = direction_table(n_angles)[rng.integers(0, n_angles, n)]
    return {"cam": np.concatenate([pos, dirs], axis=1).astype(np.float64)}


def n_ops(module) -> int:
    return len(list(module.walk()))


if __name__ == "__main__":
    import time

    from twdialect import evaluate

    for kw in ({"n_columns": 4, "map": SMALL_MAP, "steps": 6}, {}):
        t = time.time()
        mod, ref = build(**kw)
        print(kw, "ops", n_ops(mod), f"{time.time() - t:.1f}s")
        xs = sample(np.random.default_rng(0), kw.get("map", DEFAULT_MAP), 5)
        got, want = evaluate(mod, xs), ref(xs)
        print({k: float(np.abs(np.asarray(got[k]) - want[k]).max()) for k in want})
