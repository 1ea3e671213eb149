"""RASP programs compiled with tracr's own interface: change one import, get tw's model.

    from tracr.rasp import rasp
    from tw_lowering import compile_rasp_to_model      # was: from tracr.compiler.compiling import ...
    model = compile_rasp_to_model(program, vocab={1, 2, 3}, max_seq_len=5,
                                  compiler_bos="BOS")
    model.apply(["BOS", 1, 2, 3]).decoded             # as tracr's AssembledTransformerModel
    model.module, model.compiled, model.stats         # the tw graph, the torch model, its stats

The translation (`tw_frontends.rasp.translator`) is exact by construction: every Map is a table
over its input's value set, so tracr's `mlp_exactness` has nothing to approximate (it is
checked as tracr's, a positive integer, and ignored).

Arguments are checked before any work (`check_arguments`, shared with `tw-rasp`): a wrong type
or value is one RaspError line naming the argument, and a `max_seq_len` or vocabulary whose
tables would be wider than a tw table may be (`MAX_WIDTH` columns: the position table has
max_seq_len + 1, the token table len(vocab) + 2) is refused with the size it would need, never
attempted.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from twdialect.dense import shape_of
from twdialect.dialect import AttnOp

COMPILER_BOS = "compiler_bos"
COMPILER_PAD = "compiler_pad"


# -- the arguments, checked before any work -------------------------------------------------

def _max_width() -> int:
    from twdialect.dialect import MAX_WIDTH

    return MAX_WIDTH


# The longest input and the most tokens a translation can take: its position table has
# max_seq_len + 1 columns and its token table len(vocab) + 2 (BOS and pad), and no tw table is
# wider than MAX_WIDTH (docs/dialect.md, Limits).
MAX_SEQ_LEN = _max_width() - 1
MAX_VOCAB = _max_width() - 2


@dataclass(frozen=True)
class RaspArguments:
    """tracr's arguments of a compile, checked (`check_arguments`): the vocabulary as a set."""

    vocab: frozenset
    max_seq_len: int
    causal: bool
    compiler_bos: Any
    compiler_pad: Any


def check_arguments(vocab, max_seq_len, causal=False, compiler_bos: Any = COMPILER_BOS,
                    compiler_pad: Any = COMPILER_PAD, mlp_exactness=100,
                    where: str = "compile_rasp_to_model") -> RaspArguments:
    """tracr's arguments of `compile_rasp_to_model`, checked before anything is built: each
    bad one is a RaspError line, "<where>: <argument> ...", instead of a TypeError deep in the
    translation or a MemoryError for a table no tw graph may hold. `where` names the caller
    (`tw-rasp` gives the program file)."""
    tokens = _check_vocab(vocab, where)
    n = _check_max_seq_len(max_seq_len, where)
    if not isinstance(causal, (bool, np.bool_)):
        raise _error(where, f"causal must be True or False, got {_shown(causal)}")
    for name, token in (("compiler_bos", compiler_bos), ("compiler_pad", compiler_pad)):
        _check_token(name, token, tokens, where)
    if compiler_bos == compiler_pad:
        raise _error(where, f"compiler_bos and compiler_pad are both {_shown(compiler_bos)}: "
                            "the BOS and pad tokens must differ")
    if isinstance(mlp_exactness, bool) or not isinstance(mlp_exactness, (int, np.integer)) \
            or mlp_exactness < 1:
        raise _error(where, "mlp_exactness must be a positive integer, as tracr's (tw's "
                            f"tables are exact and ignore it), got {_shown(mlp_exactness)}")
    return RaspArguments(tokens, n, bool(causal), compiler_bos, compiler_pad)


def _check_vocab(vocab, where: str) -> frozenset:
    """The vocabulary as a frozenset of hashable tokens, none of them NaN, at most MAX_VOCAB."""
    from collections.abc import Iterable, Mapping

    if isinstance(vocab, (str, bytes, Mapping)) or not isinstance(vocab, Iterable):
        raise _error(where, "vocab must be a set of tokens (numbers, strings, booleans or "
                            f"tuples), e.g. {{1, 2, 3}}, got {_shown(vocab)}")
    tokens = []
    for token in vocab:
        _check_hashable("vocab holds", token, where)
        # a numpy scalar (a vocabulary from np.arange) as the Python number it equals, so
        # that outputs decode as plain numbers
        tokens.append(token.item() if isinstance(token, np.generic) else token)
    tokens = frozenset(tokens)
    if not tokens:
        raise _error(where, "vocab must not be empty")
    if len(tokens) > MAX_VOCAB:
        rows = len(tokens) + 2
        raise _error(where, f"vocab has {len(tokens):,} tokens: the token table would be "
                            f"{rows:,} x {rows:,} ({_bytes(8 * rows * rows)} as float64), "
                            f"wider than a tw table may be ({_max_width():,} columns, "
                            f"MAX_WIDTH): at most {MAX_VOCAB:,} tokens")
    return tokens


def _check_max_seq_len(max_seq_len, where: str) -> int:
    """A positive integer (not a bool, not a float) whose position table a tw graph can hold:
    refused up front with the size it would take, never allocated."""
    if isinstance(max_seq_len, bool) or not isinstance(max_seq_len, (int, np.integer)) \
            or max_seq_len < 1:
        raise _error(where, f"max_seq_len must be a positive integer, got {_shown(max_seq_len)}")
    n = int(max_seq_len)
    if n > MAX_SEQ_LEN:
        raise _error(where, f"max_seq_len={_count(n)} needs a position table of "
                            f"{_count(n + 1)} x {_count(n + 1)} "
                            f"({_bytes(8 * (n + 1) ** 2)} as float64), wider than a tw table "
                            f"may be ({_max_width():,} columns, MAX_WIDTH): max_seq_len is at "
                            f"most {MAX_SEQ_LEN:,}")
    return n


def _check_hashable(what: str, token, where: str) -> None:
    """A token (of the vocabulary, or the BOS or pad token, `what`) is hashable and not NaN,
    which equals no token, not even itself."""
    try:
        hash(token)
    except TypeError:
        raise _error(where, f"{what} {_shown(token)}, which is not hashable: a token is a "
                            "number, string, boolean or tuple") from None
    if _is_nan(token):
        raise _error(where, f"{what} {token!r}, which equals no token (not even itself)")


def _check_token(name: str, token, vocab: frozenset, where: str) -> None:
    """The BOS or pad token: hashable, not NaN, and no token of the vocabulary."""
    _check_hashable(f"{name} is", token, where)
    if token in vocab:
        raise _error(where, f"{name}: the BOS/pad token {token!r} must not be in the "
                            "vocabulary")


def _is_nan(token) -> bool:
    return isinstance(token, (float, np.floating)) and token != token


def _shown(value, limit: int = 60) -> str:
    """A value as a message names it: its type and repr, cut to `limit` characters."""
    from twdialect.errors import shortened

    return f"{type(value).__name__} {shortened(repr(value), limit)}"


def _count(n: int) -> str:
    """A count as people read it: 10,000,001, or 1e+30 where digits would not help."""
    return f"{n:,}" if n < 10 ** 15 else f"{float(n):.3g}"


def _bytes(n: int) -> str:
    """A size as people read it: 728 TiB (2.0 KiB, 1.5e+30 EiB)."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if size < 1024 or unit == "EiB":
            return f"{n} B" if unit == "B" else f"{size:.3g} {unit}"
        size /= 1024
    return ""


def _error(where: str, message: str):
    from tw_frontends.rasp.translator import RaspError

    return RaspError(f"{where}: {message}")


@dataclass
class RaspOutput:
    """What `apply` gives: `decoded` as tracr's, and the output rows before decoding; and
    tracr's other fields (`AssembledTransformerModelOutput`), over tw's residual stream
    (d columns: `model.compiled.machine.d`), from one run of the model a sublayer at a time
    when one of them is first read: `input_embeddings` and `transformer_output` (1, T, d),
    `residuals` and `layer_outputs` (after every sublayer, attention then MLP per layer,
    and the change it made; (1, T, d) each), `attn_logits` (one (1, heads, T, T) per layer,
    unscaled as tw's heads use them, -1e30 where a head cannot see a key, as tracr masks),
    `unembedded` (the output rows, (1, T, output width)). The oracle's (`evaluate`) has no
    model to trace."""

    decoded: list
    outputs: np.ndarray  # (positions, output width) float64
    _trace: Callable[[], dict] | None = field(default=None, repr=False, compare=False)
    _traced: dict | None = field(default=None, repr=False, compare=False)

    def _field(self, name: str):
        if self._trace is None:
            raise AttributeError(f"{name}: the oracle's output has no model to trace (use "
                                 "model.apply)")
        if self._traced is None:
            self._traced = self._trace()
        return self._traced[name]

    @property
    def unembedded(self) -> np.ndarray:
        return self.outputs[None]

    input_embeddings = property(lambda self: self._field("input_embeddings"))
    residuals = property(lambda self: self._field("residuals"))
    layer_outputs = property(lambda self: self._field("layer_outputs"))
    attn_logits = property(lambda self: self._field("attn_logits"))
    transformer_output = property(lambda self: self._field("transformer_output"))


class RaspModel:
    """A compiled RASP program: `apply` as tracr's model; `module` (the tw graph as
    translated), `compiled` (the CompiledTransformer), `stats`, `rasp_graph` (how inputs are
    fed and outputs read)."""

    def __init__(self, rasp_graph, compiled, seconds: dict):
        self.rasp_graph = rasp_graph
        self.module = rasp_graph.module
        self.compiled = compiled
        self.seconds = seconds

    @property
    def stats(self):
        return self.compiled.stats

    def apply(self, tokens: Sequence) -> RaspOutput:
        """Run on one input [bos, *tokens]: the model's outputs, decoded."""
        return self.apply_batch([tokens])[0]

    def apply_batch(self, batch: Sequence[Sequence]) -> list[RaspOutput]:
        """`apply` over several inputs in one batched run."""
        rg = self.rasp_graph
        feeds = [{rg.token_input: rg.token_ids(t)} for t in batch]
        if not feeds:
            return []
        outs = self.compiled.run_batch(feeds)
        return [RaspOutput(rg.decode(o[rg.output], t), np.asarray(o[rg.output]),
                           functools.partial(self._trace, f)) for o, t, f in zip(outs, batch, feeds)]

    def _trace(self, feed: dict) -> dict:
        """RaspOutput's tracr fields for one input (numpy, float32, a batch of one)."""
        ct = self.compiled
        x0 = ct.embed(feed)[0]
        residuals, logits = ct.trace(x0)
        states = [t[None].cpu().numpy() for t in [x0, *residuals]]  # before, then after each
        return dict(
            input_embeddings=states[0], residuals=states[1:],
            layer_outputs=[b - a for a, b in zip(states, states[1:])],
            attn_logits=[np.nan_to_num(a[None].cpu().numpy(), neginf=-1e30) for a in logits],
            transformer_output=states[-1])

    def evaluate(self, tokens: Sequence) -> RaspOutput:
        """The oracle (tw's reference interpreter) on the translated graph, decoded alike."""
        from twdialect import evaluate

        rg = self.rasp_graph
        out = evaluate(self.module, {rg.token_input: rg.token_ids(tokens)})[rg.output]
        return RaspOutput(rg.decode(out, tokens), np.asarray(out))


def head_widths(module) -> list[int]:
    """The d_head to try: the widest head's query/key width, and the power of two above it
    (a head stores 4 d d_head parameters however few of its dimensions it uses, and d is a
    multiple of d_head: the first is narrower, the second may let d sit closer to what fits)."""
    widest = max((shape_of(op.wq)[1] for op in module.walk() if isinstance(op, AttnOp)),
                 default=1)
    return sorted({widest, 1 << (widest - 1).bit_length()})


def table_rows(rg) -> int:
    """Rows of the stock layout's token and position tables (vocabulary, BOS, pad; BOS and
    max_seq_len positions): d entries each, as tracr's token_embed and pos_embed."""
    return len(rg.vocab) + 2 + rg.max_seq_len + 1


def compile_rasp_to_model(program, vocab, max_seq_len: int, causal: bool = False,
                          compiler_bos: Any = COMPILER_BOS, compiler_pad: Any = COMPILER_PAD,
                          mlp_exactness: int = 100, *, atol: float | None = None,
                          d: int | None = None, d_head: int | None = None,
                          d_hidden: int | None = None,
                          pipeline: str | None = "default") -> RaspModel:
    """tracr's `compile_rasp_to_model`, compiled by tw: exact, and as narrow as fits.

    `d_head` defaults to the narrowest that holds the widest selector's keys, `d` to the
    width that stores the fewest parameters among those whose schedule reaches the fewest
    layers, with `d_hidden` 4 d, twice the widest MLP (`hidden_width`) or the neurons of the
    best of those schedules' fullest MLP sublayer, whichever stores fewer; `pipeline` is
    tw's (default: the default pipeline). A construct tw cannot compile is a RaspError
    naming the expression. `atol`: how far a numerical output may be from
    RASP's value (None: the frontend's ATOL, 1e-4); one that float32 cannot keep that close
    (values of many thousands, a softmax's mean of hundreds) is a RaspError saying so."""
    import tw_lowering.model  # noqa: F401 - torch's first import is not the compile's time
    from tw_lowering import check_pipeline, compile
    from tw_lowering.machine import whole_number
    from tw_frontends.rasp.translator import translate

    args = check_arguments(vocab, max_seq_len, causal, compiler_bos, compiler_pad,
                           mlp_exactness)  # (mlp_exactness: every map is an exact table)
    if d_head is not None:  # (d and d_hidden: the Machine names them)
        d_head = whole_number(d_head, "compile_rasp_to_model: d_head", 1)
    # the passes resolved (and their modules imported) before the clock starts, as torch is
    pipeline = check_pipeline("compile_rasp_to_model", pipeline)
    t0 = time.perf_counter()
    rg = translate(program, args.vocab, args.max_seq_len, args.causal, args.compiler_bos,
                   args.compiler_pad, atol=atol)
    t1 = time.perf_counter()
    if d is None:
        from tw_lowering.sweep import Sweep

        # the pipeline runs once for every width tried; the widths where only a stand-in of
        # the graph fits are searched only where it fits nowhere itself
        sweep = Sweep(rg.module, pipeline, stand_ins=False)
        hidden = [d_hidden] if d_hidden is not None else [None, hidden_width(sweep.tg.graph)]
        per_d = table_rows(rg)
        best = None  # (d_head, point): the fewest layers, then parameters; the first on a tie
        for dh in [d_head] if d_head else head_widths(rg.module):
            for h in hidden:
                p = _floor_point(sweep, dh, h, per_d, beat=best and best[1])
                if p is not None and (best is None or _cost(p, per_d) < _cost(best[1], per_d)):
                    best = dh, p
        # the MLP width the best schedule's fullest layer uses, where 4 d set d: three
        # tables of 120 neurons in one layer at length 60 took d 92 for their 360 neurons
        load = 8 * -(-sweep.fullest_mlp(best[1]) // 8)
        if d_hidden is None and load and load not in hidden:
            dh = best[0]
            p = _floor_point(sweep, dh, load, per_d, beat=best[1])
            if p is not None and _cost(p, per_d) < _cost(best[1], per_d):
                best = dh, p
        dh, point = best
        ct = sweep.compile(point.d, dh, d_hidden if d_hidden is not None else point.d_hidden)
    else:
        dh = d_head or head_widths(rg.module)[0]
        ct = compile(rg.module, d=d, d_head=dh, d_hidden=d_hidden, pipeline=pipeline)
    t2 = time.perf_counter()
    return RaspModel(rg, ct, {"translate": t1 - t0, "compile": t2 - t1, "total": t2 - t0})


def hidden_width(graph) -> int:
    """Twice the widest MLP of the prepared graph (a multiple of 8): room for two tables in a
    layer, without the 4 d default's idle neurons when one wide table sets d."""
    from twdialect.dialect import MlpOp

    widest = max((shape_of(op.w1)[1] for op in graph.walk() if isinstance(op, MlpOp)),
                 default=4)
    return 8 * -(-2 * widest // 8)


# Widths tried above the narrowest one at the fewest layers (times it): a little more room
# can spare the heads and neurons that cancel dead columns, and store fewer parameters.
ROOMIER = (1.125, 1.25, 1.5, 2.0)


def _cost(point, per_d: int) -> tuple[int, int]:
    """(layers, parameters stored in the stock layout, its token and position tables too)."""
    return point.n_layers, point.params + per_d * point.d


def _floor_point(sweep, d_head: int, d_hidden: int | None, per_d: int = 0, beat=None):
    """The width, among those whose schedule reaches the fewest layers, that stores the
    fewest parameters (`_cost`: per_d more a column for the token and position tables): the
    narrowest such multiple of d_head (the sweep from the narrowest width that fits, then a
    bisection below the first point there) and a few roomier ones.

    `beat`: the point of another d_hidden or d_head, which wins ties. Widths that cannot store
    fewer parameters than it, or than the best point here, at the same depth are not
    scheduled (`Sweep.least_params`, a bound that grows with d); None where no width here can
    beat it."""
    from tw_lowering.sweep import _whole, width_for

    def least(d: int, n_layers: int) -> int:
        return sweep.least_params(d, d_head, n_layers, d_hidden) + per_d * d

    def params(p) -> int:
        return _cost(p, per_d)[1]

    # beat at the floor of the graph itself: a width here wins only by fewer parameters
    if beat is not None and not beat.note and beat.n_layers <= beat.floor and \
            least(sweep.smallest(d_head, d_hidden), beat.n_layers) >= params(beat):
        return None
    curve = sweep.curve(d_head, d_hidden=d_hidden)
    fewest = curve[-1].n_layers
    if beat is not None and beat.n_layers < fewest:
        return None
    narrowest = width_for(None, d_head, max_layers=fewest, d_hidden=d_hidden,
                          curve=curve, sweep=sweep) or curve[-1]
    best = min((p for p in [narrowest, *curve] if p.n_layers == fewest),
               key=lambda p: (params(p), p.d))
    for d in sorted({_whole(narrowest.d * g, d_head) for g in ROOMIER}):
        bound = least(d, fewest)
        if (bound, d) > (params(best), best.d) or \
                (beat is not None and (fewest, bound) >= _cost(beat, per_d)):
            break  # nor can any wider width (the bound grows with d)
        p = sweep.point(d, d_head, d_hidden)
        if p is not None and p.n_layers == fewest and (params(p), p.d) < (params(best), best.d):
            best = p
    return best
