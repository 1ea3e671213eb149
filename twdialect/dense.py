"""Bytes-backed dense f32 attributes <-> numpy.

Weights always travel as `DenseIntOrFPElementsAttr` whose payload is the raw little-endian
f32 buffer; building or reading one never touches per-element Python objects.
"""

from __future__ import annotations

import numpy as np
from xdsl.dialects.builtin import BytesAttr, DenseIntOrFPElementsAttr, TensorType, f32


def dense(values) -> DenseIntOrFPElementsAttr:
    """A dense f32 attribute holding `values` (any array-like, any rank >= 1)."""
    a = np.ascontiguousarray(np.asarray(values, dtype="<f4"))
    if a.ndim == 0:
        a = a.reshape(1)
    return DenseIntOrFPElementsAttr(TensorType(f32, a.shape), BytesAttr(a.tobytes()))


def to_numpy(attr: DenseIntOrFPElementsAttr, dtype=np.float64) -> np.ndarray:
    """The attribute's values as a numpy array of its declared shape (a copy in `dtype`)."""
    shape = tuple(attr.get_shape() or ())
    raw = attr.data.data
    n = int(np.prod(shape, dtype=np.int64))
    a = np.frombuffer(raw, "<f4")
    if a.size != n:  # a splat parsed from text stores a single element
        a = np.full(n, a[0], dtype="<f4")
    return a.reshape(shape).astype(dtype)


def shape_of(attr: DenseIntOrFPElementsAttr) -> tuple[int, ...]:
    return tuple(attr.get_shape() or ())
