"""torchwright graphs (the anchor compiler's node API, `torchwright==0.2.0`) as tw graphs.

    from torchwright.graph import InputNode, Linear, ReLU
    from tw_frontends.torchwright import from_torchwright
    x = InputNode("x", 2, value_range=(-4.0, 4.0))
    module = from_torchwright(ReLU(Linear(x, W)))      # a tw module: evaluate, pass, compile

Node for node: InputNode -> `tw.input` (its declared value range), Embedding -> `tw.embedding`
(the tokenizer's ids index the table), LiteralValue -> `tw.literal`, Linear -> `tw.linear`,
ReLU -> `tw.relu`, Add -> `tw.add`, Concatenate -> `tw.concat`, FFN -> `tw.mlp` (relu or swish
lanes, gated where the node has an up projection), Attn -> `tw.attn` (causal, rotary with the
node's RoPE base and rotary width: torchwright rotates every head). ValueLogger nodes are
dropped (the value passes through); a node's attached checks are metadata and are not
translated. Any other node kind is a TorchwrightError naming it.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import SSAValue

from twdialect import ops as tw
from twdialect.errors import TwError

Value = SSAValue


class TorchwrightError(TwError):
    """A torchwright graph (a node, named) that the frontend cannot translate, and why."""


def _array(t) -> np.ndarray:
    return t.detach().cpu().double().numpy() if hasattr(t, "detach") else np.asarray(t, float)


def _label(node) -> str:
    name = getattr(node, "name", "") or ""
    return f"{type(node).__name__}{f' {name!r}' if name else ''}"


class _Translator:
    def __init__(self):
        import torchwright.graph as g

        self.g = g
        self.memo: dict[int, Value] = {}
        self.input_names: dict[str, int] = {}

    def value(self, node) -> Value:
        """The tw value of `node`, its inputs first (iteratively: graphs are deep)."""
        stack = [(node, False)]
        while stack:
            n, expanded = stack.pop()
            if id(n) in self.memo:
                continue
            if not expanded:
                stack.append((n, True))
                stack.extend((i, False) for i in reversed(list(n.inputs))
                             if id(i) not in self.memo)
                continue
            with tw.annotate(_label(n)):
                self.memo[id(n)] = self.node(n, [self.memo[id(i)] for i in n.inputs])
        return self.memo[id(node)]

    def node(self, n, ins: list[Value]) -> Value:
        g = self.g
        if isinstance(n, g.InputNode):
            name = n.name or f"input{len(self.input_names)}"
            if self.input_names.setdefault(name, id(n)) != id(n):
                raise TorchwrightError(f"{_label(n)}: two InputNodes are named {name!r}")
            lo, hi = n.declared_value_range
            return tw.input(name, len(n), (float(lo), float(hi)))
        if isinstance(n, g.Embedding):
            return tw.embedding(n.input_name, _array(n.table))
        if isinstance(n, g.LiteralValue):
            return tw.literal(_array(n.value))
        if isinstance(n, g.Linear):
            return tw.linear(ins[0], _array(n.output_matrix), _array(n.output_bias))
        if isinstance(n, g.ReLU):
            return tw.relu(ins[0])
        if isinstance(n, g.Add):
            return tw.add(ins[0], ins[1])
        if isinstance(n, g.Concatenate):
            return tw.concat(*ins)
        if isinstance(n, g.ValueLogger):
            return ins[0]
        if isinstance(n, g.FFN):
            return self.ffn(n, ins[0])
        if isinstance(n, g.Attn):
            return self.attn(n, ins)
        raise TorchwrightError(f"{_label(n)}: no tw translation for this node kind")

    def ffn(self, n, x: Value) -> Value:
        kwargs = {}
        if n.activation != "relu":
            kwargs["activation"] = n.activation
        if n.up_proj is not None:
            kwargs["up"] = _array(n.up_proj).T
            kwargs["up_bias"] = _array(n.up_bias)
        return tw.mlp(x, _array(n.gate_proj).T, _array(n.gate_bias), _array(n.out_proj),
                      _array(n.out_bias), **kwargs)

    def attn(self, n, ins: list[Value]) -> Value:
        return tw.attn(ins[0], ins[1], ins[2], _array(n.query_matrix), _array(n.key_matrix),
                       _array(n.value_matrix), _array(n.output_matrix),
                       rope=(float(n.rope_base), int(n.rope_d_rot)))


def from_torchwright(output, name: str = "out", outputs: Mapping[str, object] | None = None,
                     graph: str = "main") -> ModuleOp:
    """A tw module holding graph `graph`: `output` (a torchwright Node) as the output `name`,
    or every node of `outputs` ({name: node}) as outputs of those names."""
    try:
        import torchwright.graph  # noqa: F401
    except ImportError:  # pragma: no cover - exercised where torchwright is absent
        raise TorchwrightError("the torchwright frontend needs torchwright: pip install "
                               "'tw-compiler[torchwright]'") from None
    wanted = dict(outputs) if outputs is not None else {name: output}
    t = _Translator()
    with tw.Graph(graph) as g:
        for out_name, node in wanted.items():
            if not isinstance(node, t.g.Node):
                raise TorchwrightError(f"output {out_name!r} must be a torchwright Node, got "
                                       f"{type(node).__name__}")
            tw.output(out_name, t.value(node))
    return g.module
