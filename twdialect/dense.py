"""Bytes-backed dense f32 attributes <-> numpy.

Weights always travel as `DenseIntOrFPElementsAttr` whose payload is the raw little-endian
f32 buffer; building or reading one never touches per-element Python objects.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from xdsl.dialects.builtin import BytesAttr, DenseIntOrFPElementsAttr, TensorType, f32


@functools.lru_cache(maxsize=4096)
def _tensor_type(shape: tuple[int, ...]) -> TensorType:
    return TensorType(f32, shape)


def dense(values) -> DenseIntOrFPElementsAttr:
    """A dense f32 attribute holding `values` (any array-like, any rank >= 1)."""
    a = np.ascontiguousarray(np.asarray(values, dtype="<f4"))
    if a.ndim == 0:
        a = a.reshape(1)
    # Both parameters are correct by construction (an f32 tensor type of the array's shape and
    # its raw bytes), so skip the IRDL re-verification, which dominates graph-building time.
    attr = DenseIntOrFPElementsAttr.__new__(DenseIntOrFPElementsAttr)
    object.__setattr__(attr, "type", _tensor_type(a.shape))
    object.__setattr__(attr, "data", BytesAttr(a.tobytes()))
    return attr


def as_dense(values) -> DenseIntOrFPElementsAttr:
    """`values` as a dense f32 attribute: an attribute passes through (a pass moving weights
    from op to op), anything else is stored by `dense`. What the ops' typed constructors take."""
    return values if isinstance(values, DenseIntOrFPElementsAttr) else dense(values)


def to_numpy(attr: DenseIntOrFPElementsAttr, dtype=np.float64) -> np.ndarray:
    """The attribute's values as a numpy array of its declared shape (a copy in `dtype`)."""
    shape = tuple(attr.get_shape() or ())
    raw = attr.data.data
    n = math.prod(shape)
    a = np.frombuffer(raw, "<f4")
    if a.size != n:  # a splat parsed from text stores a single element
        a = np.full(n, a[0], dtype="<f4")
    return a.reshape(shape).astype(dtype)


def shape_of(attr: DenseIntOrFPElementsAttr) -> tuple[int, ...]:
    return tuple(attr.get_shape() or ())
