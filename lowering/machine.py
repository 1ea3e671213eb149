"""The target machine, described once: the scheduler and the weight writer both read it.

A residual stream of width `d` per position; each layer is an attention sublayer
(`x += sum_h heads + b_o`, heads of width `d_head`, softmax with no 1/sqrt scaling, each head
causal or, for a `tw.attn ... mask full`, full) then an MLP sublayer (`x += W2 relu(W1 x + b1) + b2`). A few residual columns belong to the machine:
a constant 1 (so every literal and bias folds into a weight row) and the position index
(which makes a causal head attend to its own position: logits G*j over j <= i peak at j = i
with gap G).
A SwiGLU/RoPE machine for Llama-family exports would be another `Machine` with another
activation and position scheme; the schedule's resource model does not change.

The geometry is checked where it is given: `d`, `d_head` and `d_hidden` are whole numbers
(an int, or a float with no fractional part; never a bool), `d_head` divides `d`, `d` is at
most MAX_DIM (2^20) and `d_hidden` at most 4 * MAX_DIM, so a mistyped width is a GeometryError
naming the option, not an allocation of terabytes. `d_hidden=None` means 4 * d.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

from twdialect.errors import TwError

MAX_DIM = 1 << 20  # the widest residual stream a Machine accepts (d_hidden: 4 * MAX_DIM)


class GeometryError(TwError):
    """The graph does not fit the requested geometry; the message names the binding resource."""


def whole_number(value, option: str, minimum: int, maximum: int = MAX_DIM) -> int:
    """`value` as an int in [minimum, maximum], or a GeometryError naming `option`.

    Accepts ints (numpy's too) and floats without a fractional part; bools are refused
    (`d=True` is a slip, not a width)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise GeometryError(f"{option} must be a whole number, got {value!r}")
    if isinstance(value, numbers.Integral):
        n = int(value)
    else:
        if not math.isfinite(value) or value != math.floor(value):
            raise GeometryError(f"{option} must be a whole number, got {value!r}")
        n = int(value)
    if not minimum <= n <= maximum:
        raise GeometryError(f"{option}={n} is outside [{minimum}, {maximum}]"
                            + (" (MAX_DIM)" if maximum == MAX_DIM else ""))
    return n


@dataclass(frozen=True)
class Machine:
    d: int
    d_head: int
    d_hidden: int | None = None  # None: 4 * d
    activation: str = "relu"
    position_scheme: str = "index"  # the position index lives in a residual column
    bias: bool = True  # attention output and MLP layers carry biases
    self_attend_gain: float = 64.0  # logit gap between a position and the previous one

    # Machine columns (fixed; see module docstring).
    CONST_COL = 0
    POS_COL = 1
    RESERVED = 2

    def __post_init__(self):
        # Frozen: normalise through object.__setattr__ (floats like 256.0 become ints).
        d = whole_number(self.d, "d", 1)
        object.__setattr__(self, "d", d)
        if d <= self.RESERVED:
            raise GeometryError(f"d={d} leaves no residual columns (the machine reserves "
                                f"{self.RESERVED})")
        object.__setattr__(self, "d_head", whole_number(self.d_head, "d_head", 1, d))
        d_hidden = 4 * d if self.d_hidden is None else self.d_hidden
        object.__setattr__(self, "d_hidden", whole_number(d_hidden, "d_hidden", 0, 4 * MAX_DIM))
        if not (isinstance(self.self_attend_gain, numbers.Real)
                and math.isfinite(self.self_attend_gain) and self.self_attend_gain > 0):
            raise GeometryError(f"self_attend_gain must be a positive finite number, got "
                                f"{self.self_attend_gain!r}")
        if self.d % self.d_head:
            raise GeometryError(f"d={self.d} must be a multiple of d_head={self.d_head}")
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
