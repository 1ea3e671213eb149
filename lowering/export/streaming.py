"""Writing a weights file a layer at a time.

`safetensors.numpy.save_file` takes every tensor at once; a 10^5-op graph's stock layout does
not fit beside its compile. The safetensors format is an 8-byte little-endian header length,
a JSON header of {name: {dtype, shape, data_offsets}} (plus "__metadata__", str -> str), and
the tensors' bytes in header order, so the header is written first from the shapes alone and
each tensor's bytes follow as its producer makes them.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

DTYPES = {np.dtype(np.float32): "F32", np.dtype(np.int64): "I64", np.dtype(np.float64): "F64"}


@dataclass(frozen=True)
class Tensor:
    name: str
    shape: tuple[int, ...]
    dtype: np.dtype = np.dtype(np.float32)

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize


def write_safetensors(path, groups: Iterable[tuple[Sequence[Tensor], Callable[[], Mapping[str, np.ndarray]]]],
                      metadata: Mapping[str, str] | None = None) -> int:
    """Write `path` from `groups`: (the tensors a group holds, a function making their arrays);
    the functions are called one after another, so only one group's arrays are alive at a
    time. Returns the file's size in bytes. Deterministic: the same groups give the same
    bytes."""
    groups = list(groups)
    header: dict[str, object] = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    at = 0
    for tensors, _ in groups:
        for t in tensors:
            header[t.name] = {"dtype": DTYPES[np.dtype(t.dtype)], "shape": list(t.shape),
                              "data_offsets": [at, at + t.nbytes]}
            at += t.nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # (the data starts 8-byte aligned)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for tensors, make in groups:
            arrays = make()
            for t in tensors:
                a = np.ascontiguousarray(arrays[t.name], t.dtype)
                if a.shape != tuple(t.shape):
                    raise AssertionError(f"{t.name}: made {a.shape}, declared {t.shape}")
                f.write(a.tobytes())
            del arrays
    return 8 + len(text) + at


def ensure_space(path, nbytes: int, trimmed_params: int, where: str) -> None:
    """Refuse, before writing a byte, an export larger than the free space where it goes (a
    stock layout pads every layer to the widest: 10^5 ops compiled at d=2048 is ~260 GB)."""
    import os
    import shutil

    from lowering.export.metadata import ExportError

    folder = os.path.dirname(os.path.abspath(os.fspath(path))) or "."
    while not os.path.isdir(folder):
        folder = os.path.dirname(folder)
    free = shutil.disk_usage(folder).free
    if nbytes > free:
        raise ExportError(f"{where}: the stock layout needs {nbytes / 1e9:.3g} GB ({nbytes // 4} "
                          f"float32 parameters; tw's trimmed model stores {trimmed_params}) and "
                          f"{free / 1e9:.3g} GB are free there; compile at a smaller d, or "
                          "export to onnx (trimmed)")
