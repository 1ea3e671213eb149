"""The compiled model on a CUDA device matches the CPU model and the oracle (skipped without CUDA)."""

import numpy as np
import pytest
import torch

from tw_lowering import compile
from twdialect import evaluate
from twdialect.random_graphs import layered_graph, random_graph, sample_inputs

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


@pytest.mark.parametrize("seed", range(20))
def test_cuda_matches_oracle_and_cpu(seed):
    """The GPU model against the oracle as test_lowering holds the CPU one (1e-4 of the output,
    or its static float32 bound), and against the CPU model where float32 keeps the answer:
    a graph decompose refuses is skipped (with the check off, seed 14's outputs have static
    bounds up to inf and the two devices' summation orders differ by 1e-4)."""
    from tw_lowering.precision import output_errors
    from twdialect.contracts import contract_mask
    from tw_passes.decompose import DecomposeError

    module = random_graph(seed, 30, library=True, embedding=True)
    feeds = sample_inputs(module, 9, seed)
    try:
        ct = compile(module, d=128, d_head=8, d_hidden=512)
    except DecomposeError:
        pytest.skip("float32 cannot keep an op's contract over its ranges")
    mask = contract_mask(module, feeds)
    want = evaluate(module, feeds)
    cpu = ct.run(feeds)
    ct.to("cuda")
    gpu = ct.run(feeds)
    bounds = output_errors(ct.schedule)
    for k in cpu:
        scale = max(1.0, float(np.abs(want[k]).max()))
        bound = bounds[k][0] if np.isfinite(bounds[k][0]) else 0.0
        np.testing.assert_allclose(gpu[k][mask], want[k][mask], atol=max(1e-4 * scale, bound))
        np.testing.assert_allclose(gpu[k], cpu[k], atol=max(1e-5 * scale, 2 * bound))


def test_cuda_big_sparse_model_and_kv_cache():
    module, _ = layered_graph(5000)
    feeds = sample_inputs(module, 6)
    ct = compile(module, d=2048, d_head=32, d_hidden=8192).to("cuda")
    want = evaluate(module, feeds)
    got = ct.run(feeds)
    it = iter(range(3, 6))

    def feedback(_last):
        i = next(it)
        return {k: v[i] for k, v in feeds.items()}

    stepped = ct.generate({k: v[:3] for k, v in feeds.items()}, 3, feedback)
    for k in want:
        scale = max(1.0, float(np.abs(want[k]).max()))
        np.testing.assert_allclose(got[k], want[k], atol=1e-4 * scale)
        np.testing.assert_allclose(stepped[k], got[k], atol=1e-5 * scale)


def _stepper(feeds, start):
    it = iter(range(start, len(next(iter(feeds.values())))))

    def feedback(_last):
        i = next(it)
        return {k: v[i] for k, v in feeds.items()}
    return feedback


@pytest.mark.parametrize("compiled", [False, True])
def test_cuda_graph_decoder_matches_run_batched(compiled):
    """Prompts of different lengths, decoded as one batch through the CUDA-graph step (and the
    inductor-compiled step captured as a graph) give what run gives, with no recompiles."""
    from torch._dynamo.utils import counters

    from model_checks import decode_staggered

    module = random_graph(5, 40, library=True, embedding=True)
    ct = compile(module, d=256, d_head=8, d_hidden=512,
                 pipeline="decompose{tolerance=1.0e30}").to("cuda")
    dec, runs = decode_staggered(ct, module, compiled)
    assert len(dec._graphs) == 1 and not dec.exact
    if compiled:
        assert counters["stats"]["unique_graphs"] == 1
    for f, n, got in runs:
        want = ct.run({k: v[: n + 12] for k, v in f.items()})
        for k in want:
            scale = max(1.0, float(np.abs(want[k]).max()))
            np.testing.assert_allclose(got[k], want[k], atol=1e-5 * scale)


def test_cuda_forward_compiles_with_fullgraph_inductor():
    module, _ = layered_graph(300)
    feeds = sample_inputs(module, 64)
    ct = compile(module, d=512, d_head=16, d_hidden=2048).to("cuda")
    x0 = ct.embed(feeds)
    torch._dynamo.reset()
    fast = torch.compile(ct, fullgraph=True)
    torch.testing.assert_close(fast(x0), ct.forward(x0), atol=1e-4, rtol=1e-5)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_cuda_poison_in_a_later_position_leaves_earlier_rows_alone():
    """The fused attention kernel may turn a masked key's nan into nan rows; the runtime then
    recomputes with the exact rule, on the GPU as on the CPU."""
    module = random_graph(2, 30, library=False)
    ct = compile(module, d=128, d_head=8, d_hidden=256).to("cuda")
    feeds = sample_inputs(module, 7, 1)
    name = next(iter(feeds))
    bad = {k: v.copy() for k, v in feeds.items()}
    bad[name][-1] = np.nan
    kw = {"on_out_of_range": "unchecked"}
    clean = ct.run(feeds)
    for k, v in ct.run(bad, **kw).items():
        np.testing.assert_array_equal(v[:-1], clean[k][:-1])
    stepped = ct.generate({k: v[:4] for k, v in bad.items()}, 3, _stepper(bad, 4), **kw)
    for k, v in stepped.items():
        np.testing.assert_allclose(v[:-1], clean[k][:-1], atol=1e-5 * max(1, np.abs(clean[k]).max()))


def test_cuda_forward_graphs_replay_what_eager_gives():
    """run pads positions to a power of two on a GPU and replays a captured forward once a
    shape comes back; moving the model drops the graphs."""
    module, _ = layered_graph(500)
    ct = compile(module, d=512, d_head=16, d_hidden=2048).to("cuda")
    feeds = [sample_inputs(module, n, n) for n in (20, 27, 20, 31)]
    want = [ct.to("cpu").run(f) for f in feeds]
    ct.to("cuda")
    for _ in range(3):
        for f, w in zip(feeds, want):
            got = ct.run(f)
            for k in w:
                scale = max(1.0, float(np.abs(w[k]).max()))
                np.testing.assert_allclose(got[k], w[k], atol=1e-5 * scale)
    assert list(ct._forward_graphs) == [(1, 32, 512)]  # 20, 27 and 31 positions: one shape
    ct.to("cpu")
    assert not ct._forward_graphs


def test_cuda_graph_decoder_grows_its_cache():
    """Crossing the first allocation re-allocates the cache and recaptures the graphs."""
    from tw_lowering.decode import FIRST_ALLOCATION
    from twdialect import ops as tw

    with tw.Graph("main") as g:
        x = tw.input("x", 2, value_range=(-1, 1))
        a = tw.attn(x, x, x, np.eye(2), np.eye(2), np.eye(2), [[1.0], [-1.0]])
        tw.output("y", tw.relu(tw.add(a, tw.slice(x, 0, 1))))
    ct = compile(g.module, d=32, d_head=4, d_hidden=32).to("cuda")
    n = FIRST_ALLOCATION + 40
    feeds = {"x": np.random.default_rng(9).uniform(-1, 1, (n, 2))}
    got = ct.generate({"x": feeds["x"][:3]}, n - 3, _stepper(feeds, 3))["y"]
    np.testing.assert_allclose(got, ct.run(feeds)["y"], atol=1e-5)
