"""Random tw graphs for differential tests and benchmarks.

`random_graph` mixes every primitive (and optionally every library op) with small weights so
values stay bounded; `sample_inputs` draws inputs inside the declared ranges. `layered_graph`
builds the big synthetic graphs of bench/compile_scaling.py.
"""

from __future__ import annotations

import numpy as np

from twdialect import ops as tw
from twdialect.dialect import InputOp, width_of

PRIMITIVES = ("linear", "relu", "add", "concat", "literal", "attn", "mlp", "slice")
LIBRARY = ("compare", "select", "clamp", "piecewise_linear", "piecewise_linear_2d")


def _w(rng: np.random.Generator, rows: int, cols: int) -> np.ndarray:
    # Entries in [-1, 1] / rows: each output is bounded by the input bound (no blow-up).
    return np.round(rng.uniform(-1.0, 1.0, (rows, cols)) / rows, 3)


def random_graph(seed: int, n_ops: int = 12, max_width: int = 4, library: bool = True,
                 kinds: tuple[str, ...] | None = None, n_inputs: int = 2,
                 value_range: float = 4.0, name: str = "main", embedding: bool = False,
                 full_attn: float = 0.0, pos_table: bool = False, rope: float = 0.0,
                 ffn: float = 0.0):
    """A random graph of about `n_ops` ops over `n_inputs` inputs; returns its module.

    `full_attn`: the probability that an attn op gets a full (bidirectional) mask instead of
    the causal one; `pos_table`: add a `tw.pos_table` source (64 rows of small values and a
    position counter); `rope`: the probability that an attn op gets a rotary position embedding
    (d_qk 2 or 4, every or the first two components rotated, a base from 10 to 5e5); `ffn`:
    the probability that an mlp gets a swish activation, a gate (an up projection and
    bias), or both (a third each). Each leaves the graphs of every seed unchanged where it is
    off."""
    rng = np.random.default_rng(seed)
    kinds = kinds or (PRIMITIVES + (LIBRARY if library else ()))
    with tw.Graph(name) as g:
        vals = [tw.input(f"in{i}", int(rng.integers(1, max_width + 1)),
                         value_range=(-value_range, value_range)) for i in range(n_inputs)]
        if "attn" in kinds:
            vals.append(tw.pos_encoding(int(rng.integers(1, 4)), max_len=64))
        if embedding:  # a token input: ids select rows of a small table
            vals.append(tw.embedding("tokens", np.round(rng.uniform(-2, 2, (
                int(rng.integers(2, 8)), int(rng.integers(1, max_width + 1)))), 3)))
        if pos_table:  # per-position rows: a counter column and small values
            w = int(rng.integers(1, max_width + 1))
            table = np.round(rng.uniform(-2, 2, (64, w)), 3)
            table[:, 0] = np.arange(64) / 16.0
            vals.append(tw.pos_table(table))

        def pick():
            # Prefer recent values so graphs get deep, not just wide.
            k = len(vals)
            return vals[int(min(k - 1, abs(rng.normal(k - 1, k / 2))))]

        def scalar(v):
            return v if width_of(v) == 1 else tw.linear(v, _w(rng, width_of(v), 1) + 0.5 / width_of(v))

        for _ in range(n_ops):
            kind = kinds[int(rng.integers(len(kinds)))]
            x = pick()
            w = width_of(x)
            out_w = int(rng.integers(1, max_width + 1))
            if kind == "linear":
                bias = np.round(rng.uniform(-1, 1, out_w), 3) if rng.random() < 0.5 else None
                v = tw.linear(x, _w(rng, w, out_w), bias)
            elif kind == "relu":
                v = tw.relu(x)
            elif kind == "add":
                y = pick()
                if width_of(y) != w:
                    y = tw.linear(y, _w(rng, width_of(y), w))
                v = tw.add(x, y)
            elif kind == "concat":
                v = tw.concat(x, pick())
            elif kind == "slice":
                if w < 2:
                    continue
                start = int(rng.integers(0, w - 1))
                v = tw.slice(x, start, int(rng.integers(1, w - start + 1)))
            elif kind == "literal":
                v = tw.literal(np.round(rng.uniform(-2, 2, out_w), 3))
            elif kind == "attn":
                q, k = pick(), pick()
                d_qk = int(rng.integers(1, 3))
                mask = "full" if full_attn and rng.random() < full_attn else "causal"
                turn = None
                if rope and rng.random() < rope:  # (no draws at all where rope is off)
                    d_qk = int(rng.choice([2, 4]))
                    turn = (float(rng.choice([10.0, 100.0, 1e4, 5e5])),
                            int(rng.choice([2, d_qk])))
                v = tw.attn(q, k, x, _w(rng, width_of(q), d_qk) * 2, _w(rng, width_of(k), d_qk) * 2,
                            _w(rng, w, out_w), np.eye(out_w), mask=mask, rope=turn)
            elif kind == "mlp":
                h = int(rng.integers(1, 6))
                w1, b1 = _w(rng, w, h), np.round(rng.uniform(-0.5, 0.5, h), 3)
                w2 = _w(rng, h, out_w)
                b2 = np.round(rng.uniform(-0.5, 0.5, out_w), 3) if rng.random() < 0.5 else None
                act, up, ub = "relu", None, None
                if ffn and rng.random() < ffn:  # (no draws at all where ffn is off)
                    kind_of = int(rng.integers(3))  # swish, gated relu, gated swish
                    act = "relu" if kind_of == 1 else "swish"
                    if kind_of:
                        up = _w(rng, w, h) * 2
                        ub = np.round(rng.uniform(-1, 1, h), 3) if rng.random() < 0.5 else None
                v = tw.mlp(x, w1, b1, w2, b2, activation=act, up=up, up_bias=ub)
            elif kind == "compare":
                v = tw.compare(x, float(np.round(rng.uniform(-1, 1), 2)))
            elif kind == "select":
                c = tw.compare(scalar(pick()), float(np.round(rng.uniform(-0.5, 0.5), 2)))
                y = pick()
                if width_of(y) != w:
                    y = tw.linear(y, _w(rng, width_of(y), w))
                v = tw.select(c, x, y)
            elif kind == "clamp":
                lo = float(np.round(rng.uniform(-2, 0), 2))
                v = tw.clamp(x, lo, lo + float(np.round(rng.uniform(0.1, 3), 2)))
            elif kind == "piecewise_linear":
                n = int(rng.integers(2, 6))
                bp = np.sort(np.round(rng.uniform(-3, 3, n), 2))
                if np.any(np.diff(bp) <= 0):
                    bp = np.linspace(-3, 3, n)
                v = tw.piecewise_linear(scalar(x), bp, np.round(rng.uniform(-2, 2, (n, out_w)), 3))
            elif kind == "piecewise_linear_2d":
                nx, ny = int(rng.integers(2, 4)), int(rng.integers(2, 4))
                v = tw.piecewise_linear_2d(scalar(x), scalar(pick()), np.linspace(-2, 2, nx),
                                           np.linspace(-1.5, 1.5, ny),
                                           np.round(rng.uniform(-2, 2, (nx, ny, out_w)), 3))
            else:
                raise ValueError(f"unknown op kind {kind!r}")
            vals.append(v)
        # Every value without a use becomes an output, so nothing is dead.
        used = {o for v in vals for use in v.uses for o in [use.operation]}
        n_out = 0
        for v in vals:
            if not v.uses and not isinstance(v.owner, InputOp):
                tw.output(f"out{n_out}", v)
                n_out += 1
        if n_out == 0:
            tw.output("out0", vals[-1])
        del used
    return g.module


def sample_inputs(module, n_positions: int, seed: int = 0, graph: str = "main") -> dict:
    """Inputs that keep the graph's promises: numbers drawn uniformly inside each input's
    declared range (integers for an `integer` input), token ids in [0, vocab) for embeddings.

    A graph without inputs gets {} (its callers pass `n_positions` to the oracle and model).
    Ranges as wide as float64 allows are sampled without overflow (lo + (hi - lo) * u would
    overflow to inf beyond 8.9e307)."""
    from twdialect.dense import shape_of
    from twdialect.dialect import EmbeddingOp
    from twdialect.interp import find_graph

    rng = np.random.default_rng(seed)
    feeds = {}
    for op in find_graph(module, graph).block.ops:
        if isinstance(op, InputOp):
            lo, hi = op.range.bounds
            shape = (n_positions, width_of(op.out))
            if op.integer is not None:
                feeds[op.input_name.data] = _uniform_integers(rng, lo, hi, shape)
            else:
                u = rng.uniform(0.0, 1.0, shape)
                feeds[op.input_name.data] = lo * (1.0 - u) + hi * u
        elif isinstance(op, EmbeddingOp):
            feeds[op.input_name.data] = rng.integers(0, shape_of(op.table)[0], n_positions)
    return feeds


# Integers beyond 2^53 are not all representable in float64 (the oracle's number type).
_EXACT_INTEGERS = float(2 ** 53)


def _uniform_integers(rng: np.random.Generator, lo: float, hi: float, shape) -> np.ndarray:
    """Integers drawn uniformly in [lo, hi] (clipped to +-2^53), as float64."""
    first = int(np.ceil(max(lo, -_EXACT_INTEGERS)))
    last = int(np.floor(min(hi, _EXACT_INTEGERS)))
    return rng.integers(first, last + 1, shape).astype(np.float64)


def layered_graph(n_ops: int, seed: int = 0, layer_width: int = 64, value_width: int = 4,
                  attn_every: int = 8, name: str = "main", tokens: int = 0):
    """A big random layered graph of primitives: `layer_width` ops per level, each reading
    values of the previous one or two levels (linears, mlp chains, adds, relus, some attention).
    `tokens` > 0: the four inputs are slices of one token input (`tw.embedding("tokens")`, a
    random table of that many rows in [-1, 1]) instead of four real inputs, as a language
    model's export takes them. Returns (module, build_seconds)."""
    import time

    rng = np.random.default_rng(seed)
    t0 = time.perf_counter()
    with tw.Graph(name, verify=False) as g:
        pos = tw.pos_encoding(2, max_len=4096)
        if tokens:
            table = rng.uniform(-1.0, 1.0, (tokens, 4 * value_width))
            emb = tw.embedding("tokens", table)
            prev = [tw.slice(emb, i * value_width, value_width) for i in range(4)]
        else:
            prev = [tw.input(f"in{i}", value_width, value_range=(-1.0, 1.0)) for i in range(4)]
        older = prev
        count = 0
        level = 0
        eye = np.eye(value_width)
        while count < n_ops:
            cur = []
            for j in range(layer_width):
                if count >= n_ops:
                    break
                x = prev[int(rng.integers(len(prev)))]
                r = rng.random()
                if level % attn_every == attn_every - 1 and j % 4 == 0:
                    k = tw.concat(pos, x)
                    v = tw.attn(k, k, x, _w(rng, value_width + 2, 2), _w(rng, value_width + 2, 2),
                                eye, eye)
                elif r < 0.35:
                    v = tw.linear(x, _w(rng, value_width, value_width), rng.uniform(-0.1, 0.1, value_width))
                elif r < 0.7:
                    v = tw.mlp(x, _w(rng, value_width, 8), rng.uniform(-0.2, 0.2, 8),
                               _w(rng, 8, value_width))
                elif r < 0.85:
                    y = older[int(rng.integers(len(older)))]
                    v = tw.add(x, y)
                else:
                    v = tw.relu(x)
                cur.append(v)
                count += 1
            older, prev = prev, cur
            level += 1
        for i, v in enumerate(prev):
            tw.output(f"out{i}", v)
    return g.module, time.perf_counter() - t0


def chain_loop(n_iter: int, widths: list[int], seed: int = 0, d_in: int = 4,
               scoped: bool = True, name: str = "loop"):
    """`n_iter` independent iterations reading input x (width `d_in`): a chain of mlps of the
    given widths, then a linear to a scalar; output "y" concatenates the scalars. `scoped`
    builds them with `tw.sequential_scope` (tagged iterations for `sequential-scope`).
    widths [32, 32, 32] is a flat loop; [32, 128, 32] bulges (narrow when an iteration starts,
    wide in the middle: the shape that crowds the residual when many start at once)."""
    rng = np.random.default_rng(seed)
    with tw.Graph("main") as g:
        x = tw.input("x", d_in, (-1.0, 1.0))

        def body():
            h, w = x, d_in
            for i, w2 in enumerate(widths):
                bias = rng.uniform(-0.1, 0.1, w2) if i == 0 else None
                h = tw.mlp(h, rng.uniform(-1, 1, (w, w2)) / w, bias, np.eye(w2))
                w = w2
            return tw.linear(h, rng.uniform(-1, 1, (w, 1)) / w)

        bodies = [body] * n_iter
        tw.output("y", tw.concat(tw.sequential_scope(bodies, name) if scoped
                                 else [b() for b in bodies]))
    return g.module


def select_tree_depth4(integer: bool = False):
    """A depth-4 select tree over compares of two scalars x, y in [0, 9] with constant,
    piecewise-linear and affine leaves (`integer`: the inputs are declared integer)."""
    with tw.Graph() as g:
        x = tw.input("x", 1, (0.0, 9.0), integer=integer)
        y = tw.input("y", 1, (0.0, 9.0), integer=integer)
        a = tw.select(tw.compare(x, 2.0), tw.linear(x, [[2.0]], [1.0]), tw.literal([3.0]))
        b = tw.select(tw.compare(y, 3.0), tw.piecewise_linear(y, [1, 4, 6], [0, 2, -1]),
                      tw.literal([-1.0]))
        c = tw.select(tw.compare(y, 6.0), a, b)
        e = tw.select(tw.compare(x, 7.0), c, tw.literal([7.0]))
        tw.output("d", tw.select(tw.compare(x, 4.0), e,
                                 tw.linear(tw.concat(x, y), [[1.0], [-0.5]])))
    return g.module
