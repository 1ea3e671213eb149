"""Shared helpers for the library tests (no tests here): build a one-output graph, run oracle
and compiled."""

import numpy as np

from twdialect import evaluate
from twdialect import ops as tw
from twdialect.analysis import critical_path
from twdialect.dialect import AttnOp, MlpOp
from twdialect.interp import find_graph

GEOMETRY = dict(d=256, d_head=16, d_hidden=4096)


def build(body):
    """body(tw) -> output value; returns the module with output "y"."""
    with tw.Graph("main") as g:
        tw.output("y", body())
    return g.module


def both(module, inputs, atol=1e-4):
    """Oracle output, after checking the compiled model agrees with it within atol."""
    from tw_lowering import compile

    want = evaluate(module, inputs)["y"]
    got = compile(module, **GEOMETRY).run(inputs)["y"]
    np.testing.assert_allclose(got, want, rtol=0, atol=atol)
    return want


def costs(module):
    """(floor in layers, MLP hidden neurons, attn ops) of the graph as built (library ops
    undecomposed count no neurons here)."""
    g = find_graph(module)
    neurons = sum(op.hidden for op in g.block.ops if isinstance(op, MlpOp))
    attns = sum(1 for op in g.block.ops if isinstance(op, AttnOp))
    return critical_path(g).n_layers, neurons, attns
