"""The target machine, described once: the scheduler and the weight writer both read it.

A residual stream of width `d` per position; each layer is an attention sublayer
(`x += sum_h heads + b_o`, heads of width `d_head`, causal softmax, no 1/sqrt scaling) then an
MLP sublayer (`x += W2 relu(W1 x + b1) + b2`). A few residual columns belong to the machine:
a constant 1 (so every literal and bias folds into a weight row) and the position index
(which makes a head attend to its own position: logits G*j over j <= i peak at j = i with gap G).
A SwiGLU/RoPE machine for Llama-family exports would be another `Machine` with another
activation and position scheme; the schedule's resource model does not change.
"""

from __future__ import annotations

from twdialect.errors import TwError
from dataclasses import dataclass


class GeometryError(TwError):
    """The graph does not fit the requested geometry; the message names the binding resource."""


@dataclass(frozen=True)
class Machine:
    d: int
    d_head: int
    d_hidden: int
    activation: str = "relu"
    position_scheme: str = "index"  # the position index lives in a residual column
    bias: bool = True  # attention output and MLP layers carry biases
    self_attend_gain: float = 64.0  # logit gap between a position and the previous one

    # Machine columns (fixed; see module docstring).
    CONST_COL = 0
    POS_COL = 1
    RESERVED = 2

    def __post_init__(self):
        if self.d_head < 1 or self.d < 1 or self.d_hidden < 0:
            raise GeometryError(f"bad geometry d={self.d} d_head={self.d_head} "
                                f"d_hidden={self.d_hidden}")
        if self.d % self.d_head:
            raise GeometryError(f"d={self.d} must be a multiple of d_head={self.d_head}")
        if self.d <= self.RESERVED:
            raise GeometryError(f"d={self.d} leaves no residual columns (the machine reserves "
                                f"{self.RESERVED})")
        if self.activation != "relu" or self.position_scheme != "index":
            raise GeometryError("only the ReLU machine with an index position column exists")

    @property
    def n_heads(self) -> int:
        return self.d // self.d_head

    @property
    def free_columns(self) -> int:
        return self.d - self.RESERVED

    def layer_capacity(self) -> int:
        """Parameters of one full layer (the seed's formula)."""
        return 4 * self.d * self.d + 2 * self.d * self.d_hidden + self.d_hidden + self.d

    def head_params(self) -> int:
        return 4 * self.d * self.d_head

    def neuron_params(self) -> int:
        return 2 * self.d + 1
