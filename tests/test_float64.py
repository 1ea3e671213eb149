"""A float64 model: `compile(..., dtype="float64")` and `ct.to(torch.float64)` run every
sublayer in float64 with the weight writer's float64 sums, match the oracle far tighter than
float32 can (and where float32 cannot at all: integers past 2^24), step with the KV cache as
they run, and are refused by the float32 export formats. The GPU tests skip without CUDA."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tw_lowering as lowering
from tw_lowering.probe import probe
from twdialect import ArgumentError, TwError, evaluate
from twdialect import ops as tw
from twdialect.random_graphs import random_graph, sample_inputs

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
TIGHT = 1e-9  # float64's relative tolerance here; float32 rounds at ~6e-8 a step
# The graph as written: the default pipeline's folds store their products in the graph's
# float32 weights (twdialect/rounding.py lets them move an output by 1e-6 of its scale), so
# the tight comparisons compile without it; `test_float64_after_the_default_pipeline`
# holds the folded graph to the folds' own tolerance.
AS_WRITTEN = dict(pipeline="none")


def max_rel_error(got: dict, want: dict) -> float:
    """The largest |got - want| / max(1, |want|) over outputs (each output's own scale)."""
    assert got.keys() == want.keys()
    return max((float(np.abs(np.asarray(got[k], np.float64) - want[k]).max(initial=0.0))
                / max(1.0, float(np.abs(want[k]).max(initial=0.0)))) for k in want)


def primitive_graph(seed: int, **kw):
    """A random graph of primitives only (no library op's ramp: the oracle is the model's
    exact meaning), with every source and sublayer kind the runtime has."""
    opts = dict(library=False, embedding=True, pos_table=seed % 2 == 0, rope=0.4, ffn=0.4)
    opts.update(kw)
    return random_graph(seed, 30, **opts)


def big_integers():
    """Integer sums past 2^24 (float32 keeps only every other integer there) through a head
    reading the previous position, an MLP chain and adds: the float64 oracle keeps them."""
    with tw.Graph("main") as g:
        a = tw.input("a", 1, value_range=(2.0 ** 24, 2.0 ** 25), integer=True)
        b = tw.input("b", 2, value_range=(0, 7), integer=True)
        s = tw.linear(tw.concat(a, b), [[1.0], [1.0], [-1.0]], bias=[3.0])  # a + b0 - b1 + 3
        prev = tw.attn(s, s, s, [[0.0]], [[0.0]], [[1.0]], [[1.0]])  # mean of s over j <= i
        hinge = tw.relu(tw.linear(s, [[1.0]], bias=[-(2.0 ** 24)]))
        tw.output("sum", s)
        tw.output("hinge", tw.linear(hinge, [[1.0]], bias=[1.0]))
        tw.output("mean_plus", tw.add(prev, tw.slice(b, 0, 1)))
    return g.module


def folded_literal():
    """A linear of a value, a literal and the value again: the literal's product folds into
    the bias and the value's two rows into one weight, each summed in float64 to a number
    float32 cannot hold (0.1 + 1/3 * 0.7; 0.5 + 0.3)."""
    with tw.Graph("main") as g:
        x = tw.input("x", 2, value_range=(-4, 4))
        y = tw.linear(tw.concat(x, tw.literal([1 / 3]), x),
                      [[0.5, 1.0], [0.25, -1.0], [0.7, 0.3], [0.3, 0.1], [0.1, 0.7]],
                      bias=[0.1, 0.2])
        tw.output("y", tw.relu(y))
    return g.module


def stepper(feeds: dict, start: int):
    """A feedback function that feeds positions start, start+1, ... of `feeds`."""
    it = iter(range(start, len(next(iter(feeds.values())))))

    def feedback(_last):
        i = next(it)
        return {k: v[i] for k, v in feeds.items()}
    return feedback


@pytest.mark.parametrize("seed", range(8))
def test_float64_matches_oracle_to_1e9(seed):
    module = primitive_graph(seed)
    feeds = sample_inputs(module, 11, seed)
    ct = lowering.compile(module, d=128, d_head=8, d_hidden=512, dtype="float64", **AS_WRITTEN)
    assert ct.dtype == torch.float64
    assert all(t.dtype == torch.float64 for t in ct.buffers() if t.is_floating_point())
    assert max_rel_error(ct.run(feeds), evaluate(module, feeds)) <= TIGHT


@pytest.mark.parametrize("seed", range(4))
def test_float64_after_the_default_pipeline(seed):
    """The default pipeline folds linears and mlps into products stored as float32: the float64
    model computes the folded graph to 1e-9 and the oracle's graph within the folds' bound."""
    from tw_lowering import prepare
    from twdialect.rounding import TOLERANCE

    module = primitive_graph(seed)
    feeds = sample_inputs(module, 11, seed)
    ct = lowering.compile(module, d=128, d_head=8, d_hidden=512, dtype="float64")
    got = ct.run(feeds)
    assert max_rel_error(got, evaluate(prepare(module, "default"), feeds)) <= TIGHT
    assert max_rel_error(got, evaluate(module, feeds)) <= TOLERANCE


def test_float32_loses_integers_past_2_24_where_float64_keeps_them():
    module = big_integers()
    rng = np.random.default_rng(0)
    odd = rng.integers(2 ** 24, 2 ** 25, (9, 1)) | 1  # float32 holds none of them
    feeds = {"a": odd.astype(np.float64), "b": rng.integers(0, 8, (9, 2)).astype(np.float64)}
    want = evaluate(module, feeds)
    got32 = lowering.compile(module, d=32, d_head=4, d_hidden=64).run(feeds)
    ct = lowering.compile(module, d=32, d_head=4, d_hidden=64, dtype="float64")
    got64 = ct.run(feeds)
    assert max(np.abs(got32[k] - want[k]).max() for k in want) >= 1.0
    stepped = ct.generate({k: v[:3] for k, v in feeds.items()}, 6, stepper(feeds, 3))
    for got in (got64, stepped):  # (and step by step, with the KV cache in float64)
        for k in ("sum", "hinge"):  # integers: exact
            np.testing.assert_array_equal(got[k], want[k], err_msg=k)
        np.testing.assert_allclose(got["mean_plus"], want["mean_plus"], rtol=1e-14)


def test_to_float64_writes_the_float64_sums_again():
    """ct.to(torch.float64) of a float32 compile is the float64 compile, buffer for buffer
    (not the float32 numbers widened: the folded literal's bias differs), and back to float32
    it is the float32 compile again, byte for byte."""
    module = folded_literal()
    geometry = dict(d=32, d_head=4, d_hidden=64, **AS_WRITTEN)
    c32 = lowering.compile(module, **geometry)
    c64 = lowering.compile(module, **geometry, dtype="float64")
    widened = [t.double() for t in c32.buffers()]
    ct = lowering.compile(module, **geometry).to(torch.float64)
    assert ct.dtype == torch.float64 and ct.stats.dtype == "float64"
    pairs = list(zip(ct.buffers(), c64.buffers(), strict=True))
    assert all(a.dtype == b.dtype and torch.equal(a, b) for a, b in pairs)
    differs = [not torch.equal(a, w) for a, w in zip(c64.buffers(), widened, strict=True)]
    names = [n for (n, _), d in zip(c64.named_buffers(), differs, strict=True) if d]
    assert any(n.endswith(("w_qkv", "w_o", "w1", "w2")) for n in names), names  # a weight
    assert any(n.endswith(("b_o", "b1", "b2")) for n in names), names  # and a bias
    feeds = sample_inputs(module, 5)
    want = evaluate(module, feeds)
    assert max_rel_error(ct.run(feeds), want) <= TIGHT
    ct.to("float32")  # (a name works too)
    assert ct.dtype == torch.float32
    assert all(a.dtype == b.dtype and torch.equal(a, b)
               for a, b in zip(ct.buffers(), c32.buffers(), strict=True))
    assert ct.run(feeds)["y"].tobytes() == c32.run(feeds)["y"].tobytes()
    assert ct.double() is ct and ct.dtype == torch.float64
    assert ct.to("cpu", torch.float32).dtype == torch.float32


def test_to_float64_without_a_schedule_casts_the_weights():
    """A model built from its parts alone (no schedule) casts its float32 weights."""
    from tw_lowering.materialize import materialize
    from tw_lowering.model import CompiledTransformer

    module = primitive_graph(3)
    c32 = lowering.compile(module, d=128, d_head=8, d_hidden=512, **AS_WRITTEN)
    weights, sources, outputs = materialize(c32.schedule)
    bare = CompiledTransformer(c32.machine, weights, sources, outputs).to(torch.float64)
    assert bare.dtype == torch.float64
    feeds = sample_inputs(module, 9, 3)
    got, want = bare.run(feeds), c32.run(feeds)
    assert max_rel_error(got, want) <= 1e-5  # the same float32 weights, float64 arithmetic


@pytest.mark.parametrize("seed", range(4))
def test_float64_generate_and_decoder_equal_run(seed):
    from tw_lowering.decode import Decoder
    from twdialect.inputs import check_feedback

    module = primitive_graph(seed)
    ct = lowering.compile(module, d=128, d_head=8, d_hidden=512).to(torch.float64)
    full = [sample_inputs(module, 12, s) for s in range(3)]
    want = [ct.run(f) for f in full]
    got = ct.generate({k: v[:4] for k, v in full[0].items()}, 8, stepper(full[0], 4))
    assert max_rel_error(got, want[0]) <= 1e-12
    lengths = (2, 5, 3)
    dec = Decoder(ct, 3, 12)
    assert all(c is None or c.dtype == torch.float64 for c in dec.caches)
    rows = [[r] for r in dec.prefill(ct.check_batch(
        [{k: v[:n] for k, v in f.items()} for f, n in zip(full, lengths)]))]
    for _ in range(7):
        nxt = [check_feedback(ct.contract, {k: v[p] for k, v in f.items()}, int(p))
               for f, p in zip(full, dec.positions)]
        for r, o in zip(rows, dec.step(nxt)):
            r.append(o)
    for n, r, w in zip(lengths, rows, want):
        got = {k: np.concatenate([p[k] for p in r]) for k in r[0]}
        assert max_rel_error(got, {k: v[: n + 7] for k, v in w.items()}) <= 1e-12


def test_float64_full_mask_heads_run_batched():
    """Full-mask heads and padded batches (the second attention call, its key mask)."""
    module = random_graph(4, 30, library=False, full_attn=1.0)
    ct = lowering.compile(module, d=128, d_head=8, d_hidden=512, dtype="float64", **AS_WRITTEN)
    assert ct.full_heads
    batch = [sample_inputs(module, n, n) for n in (4, 9, 6)]
    for feeds, got in zip(batch, ct.run_batch(batch)):
        assert max_rel_error(got, evaluate(module, feeds)) <= TIGHT


def test_float64_probe_and_trace():
    module = primitive_graph(5)
    ct = lowering.compile(module, d=128, d_head=8, d_hidden=512, dtype="float64", **AS_WRITTEN)
    feeds = sample_inputs(module, 7, 5)
    residuals, logits = ct.trace(ct.embed(feeds)[0])
    assert all(r.dtype == torch.float64 for r in residuals + logits)
    report = probe(ct, module, feeds, atol=TIGHT)
    assert report.first_divergence is None and report.checked > 0, str(report)


def test_stats_report_the_dtype():
    module = primitive_graph(1)
    ct = lowering.compile(module, d=128, d_head=8, d_hidden=512, dtype="float64")
    assert ct.stats.dtype == "float64" and "float64" in ct.stats.report()
    assert '"dtype": "float64"' in ct.stats.to_json()
    ct.to(torch.float32)
    assert ct.stats.dtype == "float32" and "float32" in ct.stats.report()


@pytest.mark.parametrize("bad", ["float16", "double", torch.float16, torch.int64, np.int32,
                                 None, 2.5])
def test_dtype_is_checked_with_one_line(bad):
    module = primitive_graph(0)
    with pytest.raises(ArgumentError) as e:
        lowering.compile(module, d=128, d_head=8, dtype=bad)
    assert str(e.value).startswith("compile: dtype must be") and "\n" not in str(e.value)
    ct = lowering.compile(module, d=128, d_head=8)
    if bad is not None:  # (to(None) is torch's "nothing to change")
        with pytest.raises(ArgumentError) as e:
            ct.to(bad)
        assert str(e.value).startswith("to: ") and "\n" not in str(e.value)
    for cast in (ct.half, ct.bfloat16):
        with pytest.raises(TwError):
            cast()
    assert ct.dtype == torch.float32


def test_exports_refuse_a_float64_model():
    from tw_lowering.export import FORMATS, ExportError, export

    ct = lowering.compile(primitive_graph(0, rope=0.0, ffn=0.0), d=128, d_head=8,
                          dtype="float64")
    for fmt in FORMATS:
        with pytest.raises(ExportError) as e:
            export(ct, f"unused-path.{fmt}", fmt)
        assert "float64" in str(e.value) and "\n" not in str(e.value)


# -- GPU -------------------------------------------------------------------------------------

@cuda
@pytest.mark.parametrize("seed", range(4))
def test_cuda_float64_matches_oracle_and_cpu(seed):
    module = primitive_graph(seed)
    feeds = sample_inputs(module, 11, seed)
    ct = lowering.compile(module, d=128, d_head=8, d_hidden=512, dtype="float64", **AS_WRITTEN)
    cpu = ct.run(feeds)
    ct.to("cuda")
    assert ct.device.type == "cuda" and ct.dtype == torch.float64
    want = evaluate(module, feeds)
    for _ in range(3):  # (the third run replays the captured forward)
        got = ct.run(feeds)
        assert max_rel_error(got, want) <= TIGHT
        assert max_rel_error(got, cpu) <= TIGHT
    assert ct._forward_graphs


@cuda
def test_cuda_to_device_and_dtype_together():
    module = big_integers()
    ct = lowering.compile(module, d=32, d_head=4, d_hidden=64).to("cuda", torch.float64)
    assert ct.device.type == "cuda" and ct.dtype == torch.float64
    feeds = {"a": np.full((5, 1), 2.0 ** 24 + 1), "b": np.ones((5, 2))}
    want = evaluate(module, feeds)
    got = ct.run(feeds)
    for k in ("sum", "hinge"):
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)
    np.testing.assert_allclose(got["mean_plus"], want["mean_plus"], rtol=1e-14)


@cuda
@pytest.mark.parametrize("compiled", [False, True])
def test_cuda_float64_graph_decoder_equals_run(compiled):
    """The CUDA-graph step (and the inductor-compiled step) in float64."""
    from model_checks import decode_staggered

    module = primitive_graph(2, pos_table=False)
    ct = lowering.compile(module, d=128, d_head=8, d_hidden=512, dtype="float64",
                          **AS_WRITTEN).to("cuda")
    dec, runs = decode_staggered(ct, module, compiled)
    assert dec._graphs and not dec.exact
    for f, n, got in runs:
        want = evaluate(module, {k: v[: n + 12] for k, v in f.items()})
        assert max_rel_error(got, want) <= TIGHT


def test_decompose_bounds_the_compile_dtype_rounding():
    """A tent over a wide non-integer range: float32's hinge rounding is refused (naming the
    op and float32), float64's fits; the float64 model matches the oracle there."""
    from tw_passes.decompose import DecomposeError

    with tw.Graph() as g:
        x = tw.input("x", 1, (-3000.0, 3000.0))
        tw.output("y", tw.piecewise_linear(x, [2.0, 3.0, 4.0], [0.0, 1.0, 0.0]))
    with pytest.raises(TwError, match=r"'tw.piecewise_linear' in @main: float32 rounding"):
        lowering.compile(g.module, d=16, d_head=4)
    ct = lowering.compile(g.module, d=16, d_head=4, dtype="float64")
    xs = np.array([[-3000.0], [2.5], [3.0], [3.25], [2999.75]])
    got = ct.run({"x": xs})["y"][:, 0]
    assert np.allclose(got, [0.0, 0.5, 1.0, 0.75, 0.0], atol=1e-9)
    with pytest.raises(DecomposeError, match="dtype must be one of float32, float64"):
        from tw_passes.decompose import DecomposePass
        DecomposePass(dtype="float16").check_options()
