"""renderer: a small DOOM-style renderer written in primitives, torchwright style (node by
node with `prims` helpers: every nonlinear step one Linear -> ReLU -> Linear sandwich, every
read one `tw.attn` on the positional code), with its own plain-Python reference, exact.

It is the project's stand-in for a held-out renderer graph of the torchwright kind (a
DOOM-style raycaster: BSP walk, wall sort, texture sampling), against which the scheduler is
measured at residual widths 1024, 2048 and 4096.

The sequence (one input "scene", n x 6 integers in [0, 15], and the position code (j, j^2)):

    positions 0 .. S-1          wall segments   (x1, y1, x2, y2, tex, light); segment s lies
                                                in BSP leaf s // spl (spl = S / 2^depth)
    positions S .. S+NN-1       BSP nodes       (x1, y1, x2, y2, 0, 0): node n (heap order:
                                                children 2n+1 "front", 2n+2 "back") splits by
                                                the line through (x1, y1) -> (x2, y2); front is
                                                its left side, cross(B - A, P - A) >= 0
    position  C0 = S+NN         camera          (px, py, angle, 0, 0, 0)
    positions C0+1 ..           column tokens   (zeros): column token t renders the K screen
                                                columns c = t K + k, k = 0..K-1

Every column token computes, per screen column, in integer arithmetic only:

* the camera (one read of the camera token) and the ray: ray index
  r = (4 angle + c - NCOL/2) mod 64 (a mod sandwich), direction D = DIRS[r] (a 2-output
  integer table, round(8 (cos, sin)) of 64 angles);
* the BSP walk: each node's splitter is read (one head per node), the camera's side of it is
  a sign test on a cross product (two quarter-square multiplies and a compare); every leaf's
  front-to-back rank is linear in those sides, and for each rank r the leaf holding it is
  found by matching ranks (an `equals`-style sandwich per rank), giving the positions of its
  segments: the segments are then read in BSP order, each by a head whose query is that
  computed position (S heads);
* per segment and column, the ray/segment intersection: with E = B - A, W = A - P,
  denom = cross(D, E), t_num = cross(W, E), u_num = cross(W, D) (quarter-square multiply
  sandwiches; t_num is shared by the K columns), a sign flip making denom >= 0 (compare +
  select), the hit test denom >= 1, t_num >= 1, 0 <= u_num <= denom (a 4-wide compare and
  an all-true fold), the distance proxy dq = min(KD, floor(Q t_num / denom)) (a staircase
  of KD steps on Q t_num - j denom, Q = 16, KD = 31) and the sort key
  rank * (KD + 1) + dq, plus 2^depth (KD + 1) for a miss (one linear);
* the wall sort: a serial select fold over the S candidates in BSP order keeps the smallest
  key (ties: the earlier one): front-to-back by leaf, nearest first inside a leaf (a compare
  and a 5-wide select per candidate);
* texture sampling: the winning segment's (tex, light) are read by a head at its position;
  the texture column tu = min(TS - 1, floor(TS u_num / denom)) (a staircase), a TS-wide
  one-hot bank of tu, one TS x TV texture table per texture id (a linear each), gated by a
  one-hot of the texture id and summed: the TV texels of column tu; shading
  shade = clamp(light + 1 - dq // 4, 1, 16), texel * shade // 16 (a multiply and a floor
  division per texel); the perpendicular depth perp = dq * COS[c - NCOL/2] // 16 (fisheye
  correction, COS = round(16 cos)), the wall height H(perp) = min(64, 128 // (2 perp + 1))
  and its half height in screen rows hh = ceil(H HS / 128) (one 2-output integer table);
* the pixel column: for each of the HS screen rows y what it shows, row_code(y, hh) (a
  texture row 0..TV-1 on the wall, stretched over its 2 hh rows; TV for the ceiling, TV + 1
  for the floor: one HS-output integer table of hh), a one-hot of every row's code (one
  HS (TV + 2)-wide sandwich) and the gather of the shaded texels into the HS pixels (one
  sandwich of cond_gate lanes), ceiling / floor colours 2 / 5.

Outputs (each n x K; "texels" n x (K TV) and "pixels" n x (K HS), column k's block at
k TV, k HS), at a column token, for each of its columns:

    "height"  H(perp)                 0 when the ray hits nothing
    "texture" the wall's texture id   -1 when nothing is hit
    "wall"    the wall's segment index (its position)   -1 when nothing is hit
    "depth"   perp                    -1 when nothing is hit
    "texu"    tu                      0 when nothing is hit
    "texels"  the shaded texels       0 when nothing is hit
    "pixels"  the screen column       ceiling / floor colours when nothing is hit

and 0 everywhere at the scene, node and camera positions (every output is gated by "is a
column token"). Every value the graph computes (hidden lanes included) is an integer below
2^15 in magnitude at every position (the ranges hold for any input in the declared range, not
only at column tokens of consistent scenes), so the oracle equals the reference up to the
heads' softmax leakage (the reads use gain 40: ~4e-18 per neighbour; measured: 0) and the
compiled model equals it after rounding.

`sample` draws consistent scenes: a BSP of alternating vertical / horizontal splitters over
the 16 x 16 map, the segments of each leaf inside its rectangle, so that front-to-back leaf
order is a true visibility order (the graph and the reference do not rely on it).

Sizes (measured, `op_counts`; ops counted as len(list(module.walk())), builtin.module and
tw.graph included):

    build()            S=16 (depth 3: 7 nodes, 8 leaves of 2), K=3 columns x 4 column tokens,
                       TS=32, 4 textures, TV=4, HS=16: 3,801 ops: 669 relus, 1,658 linears,
                       27 attns (16 segment + 7 node + 1 camera + 3 wall reads), 838 concats,
                       571 slices, 27 literals; max_len 28. Default pipeline, d_head 16,
                       d_hidden 4 d (scheduler as of writing): smallest d 272 (67 layers),
                       d 512: 55, d 1024: 49, d 2048 and 4096: 48 = the floor.
    build(small=True)  S=4 (depth 2: 3 nodes, 4 leaves of 1), K=1 x 2 column tokens, TS=8,
                       2 textures, TV=2, HS=4: 521 ops: 87 relus, 218 linears, 9 attns;
                       max_len 10; compiles at d=256 (28 layers, floor 24), not at d=128.

More pressure at wide residuals: raise cols_per_token, screen_rows and tex_size (the one-hot
banks are HS (TV + 2) and TS wide per column): K=4, HS=32, TS=64 is 4,893 ops, 871 relus,
28 attns, 51 layers at d 1024 (floor 48).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from twdialect import ops as tw

from tw_examples.primitive import prims as P
from tw_examples.primitive.synthetic import Synthetic

Value = tw.Value

GRID = 15          # coordinates (and every scene field) are integers in [0, GRID]
N_DIRS = 64        # ray directions
DIR_SCALE = 8      # DIRS = round(DIR_SCALE (cos, sin))
VIEW_STEP = 4      # camera angle a in [0, 15] looks along ray index VIEW_STEP a
Q = 16             # depth proxy: floor(Q t) (t the ray parameter, |D| ~ 8)
KD = 31            # depth proxy clipped to [0, KD]
COS_SCALE = 16     # fisheye factors round(COS_SCALE cos)
H_SCALE = 128      # height = min(H_MAX, H_SCALE // (2 perp + 1))
H_MAX = 64
SHADE_DIV = 4      # shade = clamp(light + 1 - dq // SHADE_DIV, 1, 16)
CEIL_COLOR = 2     # pixel values above / below the wall
FLOOR_COLOR = 5
TEX_SEED = 2024    # the texture tables (graph constants)
READ_GAIN = 40.0   # position heads: leakage exp(-40) per neighbour

FIELDS = 6         # scene row: x1, y1, x2, y2, tex, light
DEFAULT = dict(n_segments=16, bsp_depth=3, cols_per_token=3, col_tokens=4, tex_size=32,
               n_textures=4, tex_rows=4, screen_rows=16)
SMALL = dict(n_segments=4, bsp_depth=2, cols_per_token=1, col_tokens=2, tex_size=8,
             n_textures=2, tex_rows=2, screen_rows=4)
OUTPUTS = ("height", "texture", "wall", "depth", "texu", "texels", "pixels")


# --------------------------------------------------------------------------------------
# Constants shared by the graph and the reference (tables, not graph code)
# --------------------------------------------------------------------------------------


def directions() -> np.ndarray:
    """DIRS[r] = round(8 (cos, sin)(2 pi r / 64)): integer ray directions, never (0, 0)."""
    a = 2 * np.pi * np.arange(N_DIRS) / N_DIRS
    return np.round(DIR_SCALE * np.stack([np.cos(a), np.sin(a)], axis=1)).astype(np.int64)


def fisheye(o: int) -> int:
    """round(16 cos) of the angle between a column's ray and the view direction."""
    return int(round(COS_SCALE * np.cos(2 * np.pi * o / N_DIRS)))


def wall_height(perp: int) -> int:
    return min(H_MAX, H_SCALE // (2 * perp + 1))


def half_height(perp: int, rows: int) -> int:
    """The wall's half height in screen rows: ceil(height rows / 128) (at most rows / 2)."""
    return -(-(wall_height(perp) * rows) // (2 * H_MAX))


def row_code(y: int, hh: int, rows: int, tex_rows: int) -> int:
    """What screen row y of a column shows when the wall spans the hh rows either side of
    the middle: texture row 0..tex_rows-1 on the wall (stretched), tex_rows above it
    (ceiling), tex_rows + 1 below it (floor)."""
    top = rows // 2 - hh
    if y < top:
        return tex_rows
    if y >= rows // 2 + hh:
        return tex_rows + 1
    return (y - top) * tex_rows // (2 * hh)


def background(y: int, rows: int) -> int:
    return CEIL_COLOR if y < rows // 2 else FLOOR_COLOR


def textures(n_textures: int, tex_size: int, tex_rows: int) -> np.ndarray:
    """TEX[t, u, v]: integer texels in [0, 15] (fixed by TEX_SEED)."""
    return np.random.default_rng(TEX_SEED).integers(0, 16, size=(n_textures, tex_size, tex_rows))


@dataclass(frozen=True)
class Layout:
    n_segments: int
    bsp_depth: int
    cols_per_token: int
    col_tokens: int
    tex_size: int
    n_textures: int
    tex_rows: int
    screen_rows: int

    @property
    def n_leaves(self) -> int:
        return 2 ** self.bsp_depth

    @property
    def spl(self) -> int:  # segments per leaf
        return self.n_segments // self.n_leaves

    @property
    def n_nodes(self) -> int:
        return self.n_leaves - 1

    @property
    def camera(self) -> int:  # the camera token's position
        return self.n_segments + self.n_nodes

    @property
    def first_column(self) -> int:
        return self.camera + 1

    @property
    def n_columns(self) -> int:
        return self.col_tokens * self.cols_per_token

    @property
    def max_len(self) -> int:
        return self.first_column + self.col_tokens

    def leaf_bits(self, leaf: int) -> list[int]:
        """The path of a leaf from the root, MSB first: 0 = front child, 1 = back child."""
        return [(leaf >> (self.bsp_depth - 1 - i)) & 1 for i in range(self.bsp_depth)]

    def leaf_path(self, leaf: int) -> list[int]:
        """The nodes (heap indices) on the path from the root to a leaf."""
        nodes, n = [], 0
        for b in self.leaf_bits(leaf):
            nodes.append(n)
            n = 2 * n + 1 + b
        return nodes


# --------------------------------------------------------------------------------------
# Local helpers (sandwiches built with prims.Lanes; prims has no vector-valued table,
# one-hot bank, variable-denominator staircase or rank match)
# --------------------------------------------------------------------------------------


def integer_table2(x: Value, lo: int, hi: int, fns: list[Callable[[int], float]]) -> Value:
    """[fn(x) for fn in fns] on the integers lo..hi (constant outside): one sandwich, one lane
    per integer breakpoint where some output's slope changes."""
    pts = np.arange(lo, hi + 1)
    ys = np.array([[fn(int(p)) for fn in fns] for p in pts], dtype=np.float64)
    slopes = np.vstack([np.zeros(len(fns)), np.diff(ys, axis=0), np.zeros(len(fns))])
    L = P.Lanes([x], len(fns))
    w = L.var(x)
    for k, b in enumerate(pts):
        ds = slopes[k + 1] - slopes[k]
        if np.any(ds != 0.0):
            L.lane(w, -float(b), ds)
    return L.emit(ys[0])


def one_hot(x: Value, n: int) -> Value:
    """[x == m] (0/1) for m = 0..n-1, n wide, x an integer: relu(x-m+1) - 2 relu(x-m) +
    relu(x-m-1) per m (shared lanes merge: n + 2 lanes)."""
    L = P.Lanes([x], n)
    w = L.var(x)
    for m in range(n):
        e = np.zeros(n)
        e[m] = 1.0
        L.lane(w, 1.0 - m, e)
        L.lane(w, -float(m), -2.0 * e)
        L.lane(w, -m - 1.0, e)
    return L.emit()


def ratio_floor(num: Value, den: Value, scale: int, top: int) -> Value:
    """#{j in 1..top : scale num - j den >= 0} for integers num, den: min(top,
    floor(scale num / den)) where den >= 1 and num >= 0. 2 lanes per step, one sandwich."""
    L = P.Lanes([num, den], 1)
    for j in range(1, top + 1):
        P._step_lanes(L, scale * L.var(num) - j * L.var(den), 0.0, np.array([1.0]))
    return L.emit()


def leaf_at_rank(ranks: Value, r: int, lay: Layout) -> Value:
    """The positions of the segments of the leaf whose front-to-back rank is r (spl wide):
    sum_leaf (leaf spl + m) [rank_leaf == r], one equals-style sandwich."""
    L = P.Lanes([ranks], lay.spl)
    for leaf in range(lay.n_leaves):
        w = L.var(ranks, leaf)
        out = leaf * lay.spl + np.arange(lay.spl, dtype=np.float64)
        L.lane(w, 1.0 - r, out)
        L.lane(w, -float(r), -2.0 * out)
        L.lane(w, -r - 1.0, out)
    return L.emit()


def one_hot_bank(x: Value, n: int) -> Value:
    """one_hot of every component of x (width(x) n wide, component j's flags at j n ..):
    one sandwich."""
    w_x = tw.width(x)
    L = P.Lanes([x], w_x * n)
    for j in range(w_x):
        w = L.var(x, j)
        for m in range(n):
            e = np.zeros(w_x * n)
            e[j * n + m] = 1.0
            L.lane(w, 1.0 - m, e)
            L.lane(w, -float(m), -2.0 * e)
            L.lane(w, -m - 1.0, e)
    return L.emit()


def gather_rows(flags: Value, texels: Value, rows: int, tex_rows: int, bound: float) -> Value:
    """Pixel y = texels[v] where flag (y, v) is set (v < tex_rows; texels in [0, bound]),
    CEIL_COLOR / FLOOR_COLOR where flag (y, tex_rows) / (y, tex_rows + 1) is: one sandwich,
    a cond_gate01 pair of lanes per (y, v)."""
    n = tex_rows + 2
    L = P.Lanes([flags, texels], rows)
    M = float(bound)
    for y in range(rows):
        e = np.zeros(rows)
        e[y] = 1.0
        for v in range(tex_rows):
            f = L.var(flags, y * n + v)
            L.lane(L.var(texels, v) + 2.0 * M * f, -M, e)
            L.lane(f, 0.0, -M * e)
        L.lane(L.var(flags, y * n + tex_rows), 0.0, CEIL_COLOR * e)
        L.lane(L.var(flags, y * n + tex_rows + 1), 0.0, FLOOR_COLOR * e)
    return L.emit()


def read(pos: P.Pos, scene: Value, fields: range, target: Value | None,
         offset: float = 0.0) -> Value:
    """The scene fields at position target + offset: one head."""
    wv = np.zeros((FIELDS, len(fields)))
    for k, f in enumerate(fields):
        wv[f, k] = 1.0
    return P.attend_to_position(pos, scene, target, offset=offset, wv=wv, gain=READ_GAIN)


def cross(a: Value, b: Value, c: Value, d: Value, ra, rb, rc, rd) -> Value:
    """a b - c d: two quarter-square multiplies and a subtract."""
    return P.subtract(P.multiply_int(a, b, ra, rb), P.multiply_int(c, d, rc, rd))


# --------------------------------------------------------------------------------------
# The graph
# --------------------------------------------------------------------------------------


def build_graph(lay: Layout):
    S, K, TS, NT, TV = (lay.n_segments, lay.cols_per_token, lay.tex_size, lay.n_textures,
                        lay.tex_rows)
    HS = lay.screen_rows
    NR = lay.n_leaves
    G = GRID
    R = DIR_SCALE
    dirs = directions()
    TEX = textures(NT, TS, TV)
    big_miss = NR * (KD + 1)  # a miss's key penalty: above every hit's key
    key_top = 2 * big_miss
    half = lay.n_columns // 2
    with tw.Graph("main") as g:
        scene = tw.input("scene", FIELDS, value_range=(0.0, float(G)), integer=True)
        pos = P.pos_encoding(lay.max_len)
        i = pos.index
        is_col = P.compare(i, lay.first_column)

        # camera: one read of the camera token
        cam = read(pos, scene, range(0, 3), None, offset=lay.camera)
        px, py, angle = (tw.slice(cam, k, 1) for k in range(3))

        # BSP walk: the camera's side of every splitter, each leaf's front-to-back rank
        sides = []
        for n in range(lay.n_nodes):
            node = read(pos, scene, range(0, 4), None, offset=S + n)
            rel = P.linear(tw.concat(node, px, py),  # (bx - ax, by - ay, px - ax, py - ay)
                           np.array([[-1, 0, -1, 0], [0, -1, 0, -1], [1, 0, 0, 0],
                                     [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]], float))
            ux, uy, qx, qy = (tw.slice(rel, k, 1) for k in range(4))
            c = cross(ux, qy, uy, qx, (-G, G), (-G, G), (-G, G), (-G, G))
            sides.append(P.compare(c, 0))  # +1: the camera is on the front side
        rank_m = np.zeros((lay.n_nodes, NR))
        rank_b = np.zeros(NR)
        for leaf in range(NR):
            for level, (n, b) in enumerate(zip(lay.leaf_path(leaf), lay.leaf_bits(leaf))):
                wgt = 2 ** (lay.bsp_depth - 1 - level)
                # [leaf goes to the far child] = b ? front01 : 1 - front01, front01 = (s+1)/2
                sgn = 0.5 if b else -0.5
                rank_m[n, leaf] += wgt * sgn
                rank_b[leaf] += wgt * 0.5
        ranks = P.linear(tw.concat(sides), rank_m, rank_b)

        # the segments, read in BSP order (front-to-back leaves, slots in order)
        slots = []  # (rank, position value, E=(ex, ey), W=(wx, wy), t_num)
        for r in range(NR):
            where = leaf_at_rank(ranks, r, lay)
            for m in range(lay.spl):
                p = tw.slice(where, m, 1)
                seg = read(pos, scene, range(0, 4), p)
                ew = P.linear(tw.concat(seg, px, py),  # (ex, ey, wx, wy)
                              np.array([[-1, 0, 1, 0], [0, -1, 0, 1], [1, 0, 0, 0],
                                        [0, 1, 0, 0], [0, 0, -1, 0], [0, 0, 0, -1]], float))
                ex, ey, wx, wy = (tw.slice(ew, k, 1) for k in range(4))
                tnum = cross(wx, ey, wy, ex, (-G, G), (-G, G), (-G, G), (-G, G))
                slots.append((r, p, ex, ey, wx, wy, tnum))

        columns = []
        for k in range(K):
            # the ray of column c = (i - first_column) K + k
            ray = P.linear(tw.concat(angle, i), np.array([[VIEW_STEP], [K]], float),
                           [float(k - half - K * lay.first_column)])
            lo = -half - K * lay.first_column + k
            hi = VIEW_STEP * G + K * (lay.max_len - 1) + k - half - K * lay.first_column
            r_idx = P.mod_const(ray, N_DIRS, lo, hi)
            d = integer_table2(r_idx, 0, N_DIRS - 1,
                               [lambda z: float(dirs[z, 0]), lambda z: float(dirs[z, 1])])
            dx, dy = tw.slice(d, 0, 1), tw.slice(d, 1, 1)

            best = None
            for (r, p, ex, ey, wx, wy, tnum) in slots:
                denom = cross(dx, ey, dy, ex, (-R, R), (-G, G), (-R, R), (-G, G))
                unum = cross(wx, dy, wy, dx, (-G, G), (-R, R), (-G, G), (-R, R))
                v = tw.concat(tnum, unum, denom)
                v = P.select(P.compare(denom, 0), v, P.negate(v), 2 * G * G)
                tn, un, den = (tw.slice(v, q, 1) for q in range(3))
                tests = P.compare(P.linear(v, np.array([[0, 1, 0, 0], [0, 0, 1, -1],
                                                        [1, 0, 0, 1]], float),
                                           [-1.0, -1.0, 0.0, 0.0]), 0)
                hit = P.bool_all_true([tw.slice(tests, q, 1) for q in range(4)])
                dq = ratio_floor(tn, den, Q, KD)
                key = P.dot([dq, hit], [1.0, -0.5 * big_miss], r * (KD + 1) + 0.5 * big_miss)
                cand = tw.concat(key, dq, un, den, p)
                if best is None:
                    best = cand
                else:
                    bkey = tw.slice(best, 0, 1)
                    better = P.compare_sum([bkey, key], [1.0, -1.0], 1)  # key < best key
                    best = P.select(better, cand, best, key_top)
            bkey, dq, un, den, pstar = (tw.slice(best, q, 1) for q in range(5))
            visible = P.compare(bkey, big_miss, true=-1.0, false=1.0)

            # texture sampling
            wall = read(pos, scene, range(4, 6), pstar)
            tex, light = tw.slice(wall, 0, 1), tw.slice(wall, 1, 1)
            tu = ratio_floor(un, den, TS, TS - 1)
            bank = one_hot(tu, TS)
            which = one_hot(tex, NT)
            texel = P.sum_nodes([P.cond_gate01(tw.slice(which, t, 1), P.linear(bank, TEX[t]), 15)
                                 for t in range(NT)])
            shade = P.clamp(P.subtract(P.add_const(light, 1),
                                       P.floor_div_const(dq, SHADE_DIV, 0, KD)), 1, 16)
            shaded = [P.floor_div_const(
                P.multiply_int(tw.slice(texel, v, 1), shade, (0, 15), (1, 16)), 16, 0, 240)
                for v in range(TV)]

            # fisheye-corrected depth and the wall height
            o = P.linear(i, [[float(K)]], [float(k - half - K * lay.first_column)])  # c - NCOL/2
            cos_o = P.integer_table(o, -half, lay.n_columns - 1 - half, fisheye)
            cmin = min(fisheye(z) for z in range(-half, lay.n_columns - half))
            perp = P.floor_div_const(P.multiply_int(dq, cos_o, (0, KD), (cmin, COS_SCALE)),
                                     COS_SCALE, 0, KD * COS_SCALE)
            hts = integer_table2(perp, 0, KD, [wall_height, lambda z: half_height(z, HS)])
            height, hh = tw.slice(hts, 0, 1), tw.slice(hts, 1, 1)

            # the column's pixels: what each screen row shows, a one-hot per row, the texels
            codes = integer_table2(hh, 0, HS // 2, [lambda h, y=y: row_code(y, h, HS, TV)
                                                    for y in range(HS)])
            pixels = gather_rows(one_hot_bank(codes, TV + 2), tw.concat(shaded), HS, TV, 15)

            # gate by "the ray hits a wall": height, tex+1, pstar+1, perp+1, tu, texels,
            # pixels - background
            fields = tw.concat([height, tex, pstar, perp, tu] + shaded + [pixels])
            shift = np.array([0.0, 1.0, 1.0, 1.0, 0.0] + [0.0] * TV
                             + [-background(y, HS) for y in range(HS)])
            gated = P.cond_gate(visible, P.add_const(fields, shift), H_MAX)
            columns.append(P.add_const(gated, -shift))

        bound = max(H_MAX, S + 1, TS, KD + 2)
        allc = P.cond_gate(is_col, tw.concat(columns), bound)
        nf = 5 + TV + HS
        for f, name in enumerate(("height", "texture", "wall", "depth", "texu")):
            tw.output(name, tw.concat([tw.slice(allc, k * nf + f, 1) for k in range(K)]))
        tw.output("texels", tw.concat([tw.slice(allc, k * nf + 5, TV) for k in range(K)]))
        tw.output("pixels", tw.concat([tw.slice(allc, k * nf + 5 + TV, HS) for k in range(K)]))
    return g.module


# --------------------------------------------------------------------------------------
# The reference (plain Python integers; shares only the constant tables)
# --------------------------------------------------------------------------------------


def reference_outputs(lay: Layout, inputs: dict) -> dict[str, np.ndarray]:
    scene = np.asarray(inputs["scene"]).astype(np.int64)
    n = scene.shape[0]
    K, TV, TS, NT, S = (lay.cols_per_token, lay.tex_rows, lay.tex_size, lay.n_textures,
                        lay.n_segments)
    dirs = directions()
    TEX = textures(NT, TS, TV)
    half = lay.n_columns // 2
    HS = lay.screen_rows
    out = {name: np.zeros((n, K)) for name in OUTPUTS[:5]}
    out["texels"] = np.zeros((n, K * TV))
    out["pixels"] = np.zeros((n, K * HS))
    for i in range(lay.first_column, n):
        px, py, a = (int(z) for z in scene[lay.camera, :3])
        front = []
        for node in range(lay.n_nodes):
            ax, ay, bx, by = (int(z) for z in scene[S + node, :4])
            front.append((bx - ax) * (py - ay) - (by - ay) * (px - ax) >= 0)
        # front-to-back leaf order: at each node visit the camera's side first
        order = []

        def walk(node, depth, leaf):
            if depth == lay.bsp_depth:
                order.append(leaf)
                return
            near, far = (0, 1) if front[node] else (1, 0)
            for b in (near, far):
                walk(2 * node + 1 + b, depth + 1, 2 * leaf + b)

        walk(0, 0, 0)
        for k in range(K):
            c = (i - lay.first_column) * K + k
            ddx, ddy = (int(z) for z in dirs[(VIEW_STEP * a + c - half) % N_DIRS])
            best = None
            for rank, leaf in enumerate(order):
                for m in range(lay.spl):
                    s = leaf * lay.spl + m
                    ax, ay, bx, by = (int(z) for z in scene[s, :4])
                    ex, ey, wx, wy = bx - ax, by - ay, ax - px, ay - py
                    den = ddx * ey - ddy * ex
                    tn = wx * ey - wy * ex
                    un = wx * ddy - wy * ddx
                    if den < 0:
                        den, tn, un = -den, -tn, -un
                    if den >= 1 and tn >= 1 and 0 <= un <= den:
                        dq = min(KD, (Q * tn) // den)
                        cand = ((rank, dq), s, dq, un, den)
                        if best is None or cand[0] < best[0]:
                            best = cand
            if best is None:
                out["texture"][i, k] = out["wall"][i, k] = out["depth"][i, k] = -1
                out["pixels"][i, k * HS:(k + 1) * HS] = [background(y, HS) for y in range(HS)]
                continue
            _, s, dq, un, den = best
            tex, light = int(scene[s, 4]), int(scene[s, 5])
            tu = min(TS - 1, (TS * un) // den)
            perp = dq * fisheye(c - half) // COS_SCALE
            shade = min(16, max(1, light + 1 - dq // SHADE_DIV))
            texels = TEX[tex, tu] if 0 <= tex < NT else np.zeros(TV, dtype=np.int64)
            out["height"][i, k] = wall_height(perp)
            out["texture"][i, k] = tex
            out["wall"][i, k] = s
            out["depth"][i, k] = perp
            out["texu"][i, k] = tu
            shaded = (texels * shade) // 16
            out["texels"][i, k * TV:(k + 1) * TV] = shaded
            hh = half_height(perp, HS)
            for y in range(HS):
                code = row_code(y, hh, HS, TV)
                out["pixels"][i, k * HS + y] = (shaded[code] if code < TV else
                                                CEIL_COLOR if code == TV else FLOOR_COLOR)
    return out


# --------------------------------------------------------------------------------------
# Scenes
# --------------------------------------------------------------------------------------


def sample_scene(lay: Layout, rng: np.random.Generator, n_col_tokens: int | None = None
                 ) -> dict[str, np.ndarray]:
    """A consistent scene: alternating vertical / horizontal axis-aligned splitters over the
    map (front = the lower coordinate side), each leaf's segments inside its rectangle, a
    random camera; then 1..col_tokens column tokens (all of them unless n_col_tokens)."""
    G = GRID
    S = lay.n_segments
    n_cols = (int(rng.integers(1, lay.col_tokens + 1)) if n_col_tokens is None
              else n_col_tokens)
    rows = np.zeros((lay.first_column + n_cols, FIELDS), dtype=np.int64)
    rects = {0: (0, 0, G, G)}
    for node in range(lay.n_nodes):
        x0, y0, x1, y1 = rects[node]
        level = int(np.floor(np.log2(node + 1)))
        if level % 2 == 0:  # vertical splitter x = a, directed up: front is x <= a
            a = int(rng.integers(x0 + 1, x1)) if x1 - x0 >= 2 else x0
            rows[S + node, :4] = (a, y0, a, y1)
            rects[2 * node + 1], rects[2 * node + 2] = (x0, y0, a, y1), (a, y0, x1, y1)
        else:  # horizontal splitter y = b, directed towards -x: front is y <= b
            b = int(rng.integers(y0 + 1, y1)) if y1 - y0 >= 2 else y0
            rows[S + node, :4] = (x1, b, x0, b)
            rects[2 * node + 1], rects[2 * node + 2] = (x0, y0, x1, b), (x0, b, x1, y1)
        if rows[S + node, 0] == rows[S + node, 2] and rows[S + node, 1] == rows[S + node, 3]:
            rows[S + node, 2] += 1 if rows[S + node, 2] < G else -1  # keep a line
    for leaf in range(lay.n_leaves):
        x0, y0, x1, y1 = rects[lay.n_nodes + leaf] if lay.n_nodes else (0, 0, G, G)
        for m in range(lay.spl):
            while True:
                a = rng.integers([x0, y0], [x1 + 1, y1 + 1])
                b = rng.integers([x0, y0], [x1 + 1, y1 + 1])
                if (a != b).any():
                    break
            rows[leaf * lay.spl + m] = (*a, *b, rng.integers(0, lay.n_textures),
                                        rng.integers(0, G + 1))
    rows[lay.camera, :3] = (*rng.integers(0, G + 1, size=2), rng.integers(0, 16))
    return {"scene": rows.astype(np.float64)}


# --------------------------------------------------------------------------------------
# The benchmark object
# --------------------------------------------------------------------------------------


@dataclass
class Renderer(Synthetic):
    reference: Callable[[dict], dict] = field(default=None)
    layout: Layout = field(default=None)


def op_counts(module) -> dict[str, int]:
    """{"ops": len(list(module.walk())), "relu", "linear", "attn", ...}: op counts by kind."""
    ops = list(module.walk())
    counts = {"ops": len(ops)}
    for op in ops:
        kind = op.name.split(".")[-1]
        counts[kind] = counts.get(kind, 0) + 1
    return counts


def build(n_segments: int | None = None, bsp_depth: int | None = None,
          cols_per_token: int | None = None, col_tokens: int | None = None,
          tex_size: int | None = None, n_textures: int | None = None,
          tex_rows: int | None = None, screen_rows: int | None = None,
          small: bool = False) -> Renderer:
    """The renderer graph (defaults: DEFAULT, or SMALL with small=True; any argument given
    overrides). n_segments must be a multiple of 2^bsp_depth."""
    base = dict(SMALL if small else DEFAULT)
    given = dict(n_segments=n_segments, bsp_depth=bsp_depth, cols_per_token=cols_per_token,
                 col_tokens=col_tokens, tex_size=tex_size, n_textures=n_textures,
                 tex_rows=tex_rows, screen_rows=screen_rows)
    base.update({k: v for k, v in given.items() if v is not None})
    lay = Layout(**base)
    if lay.bsp_depth < 1 or lay.n_segments % lay.n_leaves or lay.spl < 1:
        raise ValueError(f"n_segments={lay.n_segments} must be a positive multiple of "
                         f"2^bsp_depth={lay.n_leaves} (bsp_depth >= 1)")
    if not (1 <= lay.n_textures <= GRID + 1 and 2 <= lay.tex_size <= 64 and lay.tex_rows >= 1
            and lay.cols_per_token >= 1 and lay.col_tokens >= 1 and lay.screen_rows >= 2
            and lay.screen_rows % 2 == 0):
        raise ValueError(f"bad renderer size {base}")
    module = build_graph(lay)
    name = "renderer/small" if small else "renderer"
    name += "/" + "-".join(f"{v}" for v in base.values())
    d = 256 if small else 1024
    return Renderer(name=name, module=module, sample=lambda rng: sample_scene(lay, rng),
                    d=d, d_head=16, d_hidden=4 * d,
                    reference=lambda inputs: reference_outputs(lay, inputs), layout=lay)
