"""The compiled model on a CUDA device matches the CPU model and the oracle (skipped without CUDA)."""

import numpy as np
import pytest
import torch

from lowering import compile
from twdialect import evaluate
from twdialect.random_graphs import layered_graph, random_graph, sample_inputs

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


@pytest.mark.parametrize("seed", range(20))
def test_cuda_matches_oracle_and_cpu(seed):
    module = random_graph(seed, 30, library=True, embedding=True)
    feeds = sample_inputs(module, 9, seed)
    # (GPU against CPU: decompose's float32 check against the oracle is not the point here)
    ct = compile(module, d=128, d_head=8, d_hidden=512, pipeline="decompose{tolerance=1.0e30}")
    cpu = ct.run(feeds)
    ct.to("cuda")
    gpu = ct.run(feeds)
    for k in cpu:
        scale = max(1.0, float(np.abs(cpu[k]).max()))
        np.testing.assert_allclose(gpu[k], cpu[k], atol=1e-5 * scale)


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
