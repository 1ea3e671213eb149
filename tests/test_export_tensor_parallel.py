"""`tensor_parallel=N` on the transformers and Llama exports: heads and MLP width padded (zero
heads, zero neurons) to multiples of N, so `vllm serve --tensor-parallel-size N` can split
them, and the model computes what it did (transformers' logits equal up to float32
rounding, the same argmax). vLLM itself
splitting them: tests/test_serving_vllm.py."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

import tw_examples as examples  # noqa: E402
from tw_lowering import compile  # noqa: A004, E402
from tw_lowering.export import ExportError, export  # noqa: E402
from tw_lowering.export.hf import load_transformers  # noqa: E402
from tw_lowering.export.llama import load_llama  # noqa: E402


def _compiled(name):
    p = examples.load(name)
    g = p.geometry
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return p, compile(p.module, d=g.d, d_head=g.d_head, d_hidden=g.d_hidden)


CASES = [("calculator", "transformers", "n_head", "n_inner", load_transformers),
         ("rotary_adder", "llama", "num_attention_heads", "intermediate_size", load_llama)]


@pytest.mark.parametrize("name, fmt, heads, width, load", CASES)
@pytest.mark.parametrize("n", [2, 3, 4])
def test_heads_and_mlp_split_evenly_and_compute_the_same(tmp_path, name, fmt, heads, width,
                                                         load, n):
    p, ct = _compiled(name)
    export(ct, tmp_path / "one", fmt, vocab=p.vocab, end=p.end)
    export(ct, tmp_path / "split", fmt, vocab=p.vocab, end=p.end, tensor_parallel=n)
    one = json.loads((tmp_path / "one" / "config.json").read_text())
    split = json.loads((tmp_path / "split" / "config.json").read_text())
    assert split[heads] % n == 0 and split[width] % n == 0
    assert split[heads] >= one[heads] and split[width] >= one[width]
    rng = np.random.default_rng(n)
    ids = [p.encode(p.sample(rng)).tolist() for _ in range(3)]
    models = [load(tmp_path / k)[0] for k in ("one", "split")]
    for x in ids:
        with torch.no_grad():
            a, b = (m(torch.tensor([x])).logits[0].numpy() for m in models)
        # (a wider layout sums in other blocks: equal to float32's rounding, same argmax)
        assert np.abs(a - b).max() <= 1e-5 * max(1.0, float(np.abs(a).max()))
        assert np.array_equal(a.argmax(axis=1), b.argmax(axis=1))


def test_a_bad_size_is_one_line(tmp_path):
    p, ct = _compiled("adder")
    for bad in (0, -2, 2.0, True, 5000):
        with pytest.raises(ExportError, match="tensor_parallel must be a whole number from 1"):
            export(ct, tmp_path / "x", "transformers", tensor_parallel=bad)
