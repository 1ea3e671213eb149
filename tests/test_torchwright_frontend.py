"""The torchwright frontend: tw's oracle against torchwright's own reference evaluation
(`Node.compute`, in float64) on graphs built with its nodes and its relu and swiglu op
libraries, then the compiled model against the oracle."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchwright",
                    reason="the torchwright frontend's tests need tw-compiler[torchwright]")
from torchwright.graph import (  # noqa: E402
    FFN, Add, Attn, Concatenate, Embedding, InputNode, Linear, LiteralValue, ReLU,
    ValueLogger, fresh_graph_session,
)

from torchwright.graph.misc import Placeholder  # noqa: E402

from tw_lowering import compile  # noqa: E402
from twdialect import evaluate  # noqa: E402
from tw_frontends.torchwright import TorchwrightError, from_torchwright  # noqa: E402


@pytest.fixture(autouse=True)
def float64_reference():
    """torchwright's evaluation in float64, on weights float32 holds exactly (what tw stores)."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    with fresh_graph_session():
        yield
    torch.set_default_dtype(old)


def w(rng, *shape, scale=1.0):
    return torch.tensor(rng.normal(0, scale, shape).astype(np.float32).astype(np.float64))


def reference(node, n, feeds):
    return node.compute(n, {k: torch.tensor(v) for k, v in feeds.items()}).numpy()


def agree(node, feeds, n, d=64, d_head=16, compiled=True):
    module = from_torchwright(node)
    ours = evaluate(module, feeds)["out"]
    theirs = reference(node, n, feeds)
    scale = max(1.0, float(np.abs(theirs).max()))
    # torchwright rounds RoPE's angles to float32; without rotary heads the two agree to fp64
    assert np.abs(ours - theirs).max() <= 2e-6 * scale
    if compiled:
        ct = compile(module, d=d, d_head=d_head, pipeline="default")
        got = ct.run(feeds)["out"]
        assert np.abs(got - ours).max() <= 1e-4 * scale
    return module


@pytest.mark.parametrize("seed", range(6))
def test_random_node_graphs(seed):
    rng = np.random.default_rng(seed)
    x = InputNode("x", 3, value_range=(-2.0, 2.0))
    h = ReLU(Linear(x, w(rng, 3, 4), w(rng, 4)))
    act = "swish" if seed % 2 else "relu"
    gated = dict(up_proj=w(rng, 5, 4), up_bias=w(rng, 5)) if seed % 3 == 0 else {}
    f = FFN(h, w(rng, 5, 4), w(rng, 5), w(rng, 5, 2), w(rng, 2), activation=act, **gated)
    a = Attn(x, h, Concatenate([f, LiteralValue(torch.tensor([1.0]))]), w(rng, 3, 4),
             w(rng, 4, 4), w(rng, 3, 3), w(rng, 3, 3))
    y = Add(ValueLogger(a, "a") if seed == 5 else a, Linear(x, w(rng, 3, 3)))
    xs = rng.uniform(-2, 2, (7, 3))
    agree(y, {"x": xs}, 7)


def test_embedding_tokens():
    rng = np.random.default_rng(1)
    emb = Embedding(["a", "b", "c"], d_embed=4, table=w(rng, 4, 4), input_name="tok")
    y = Linear(ReLU(emb), w(rng, 4, 2))
    ids = np.array([0, 2, 1, 3, 1])
    module = from_torchwright(y)
    ours = evaluate(module, {"tok": ids})["out"]
    theirs = y.compute(5, {"tok": torch.tensor(ids)}).numpy()
    assert np.abs(ours - theirs).max() < 1e-9


@pytest.mark.parametrize("family", ["relu", "swiglu"])
def test_op_library_graphs(family):
    """Graphs built with torchwright's op libraries (compare, min, abs, piecewise_linear,
    clamp from the relu or swiglu family; linear ops) translate exactly."""
    import importlib

    ops = importlib.import_module(f"torchwright.ops.{family}.arithmetic_ops")
    from torchwright.ops.linear import add_const, multiply_const, subtract

    x = InputNode("x", 1, value_range=(-4.0, 4.0))
    y = InputNode("y", 1, value_range=(-4.0, 4.0))
    parts = [ops.abs(x), ops.min(x, y), ops.clamp(subtract(x, y), -1.0, 1.0),
             multiply_const(add_const(x, 0.5), 2.0)]
    out = Concatenate(parts)
    rng = np.random.default_rng(2)
    feeds = {"x": rng.uniform(-4, 4, (9, 1)), "y": rng.uniform(-4, 4, (9, 1))}
    agree(out, feeds, 9, d=128, d_head=16)


def test_rotary_heads_match_torchwright():
    rng = np.random.default_rng(3)
    x = InputNode("x", 4, value_range=(-1.0, 1.0))
    a = Attn(x, x, x, w(rng, 4, 8), w(rng, 4, 8), w(rng, 4, 4), w(rng, 4, 4),
             rope_base=10000.0, rope_d_rot=6)
    module = agree(a, {"x": rng.uniform(-1, 1, (11, 4))}, 11)
    heads = [op for op in module.walk() if op.name == "tw.attn"]
    assert heads and all(op.rope == (10000.0, 6) for op in heads)


def test_unknown_node_kind_is_named():
    x = InputNode("x", 1, value_range=(0.0, 1.0))
    with pytest.raises(TorchwrightError, match="Placeholder"):
        from_torchwright(Add(x, Placeholder(1)))


def test_two_inputs_with_one_name_are_refused():
    a = InputNode("x", 1, value_range=(0.0, 1.0))
    b = InputNode("x", 1, value_range=(0.0, 1.0))
    with pytest.raises(TorchwrightError, match="two InputNodes are named 'x'"):
        from_torchwright(Add(a, b))


def test_several_outputs():
    x = InputNode("x", 2, value_range=(-1.0, 1.0))
    module = from_torchwright(None, outputs={"r": ReLU(x), "n": Linear(x, -torch.eye(2))})
    out = evaluate(module, {"x": np.array([[0.5, -0.5]])})
    assert out["r"].tolist() == [[0.5, 0.0]] and out["n"].tolist() == [[-0.5, 0.5]]
