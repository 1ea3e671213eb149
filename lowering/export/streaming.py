"""Writing a weights file a layer at a time.

`safetensors.numpy.save_file` takes every tensor at once; a 10^5-op graph's stock layout does
not fit beside its compile. The safetensors format is an 8-byte little-endian header length,
a JSON header of {name: {dtype, shape, data_offsets}} (plus "__metadata__", str -> str), and
the tensors' bytes in header order, so the header is written first from the shapes alone and
each tensor's bytes follow as its producer makes them.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import struct
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from tw_lowering.export.metadata import (PLACEHOLDER, ExportError, check_digests, digest,
                                         digests_json, file_digests, recorded_digests, show)

HEADER_LIMIT = 100 << 20  # (a safetensors header larger than this is not one of ours)
DIGESTS_KEY = "tw.tensor_sha256"  # the header's {tensor name: sha256} record
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
                      metadata: Mapping[str, str] | None = None,
                      digests: dict[str, str] | None = None) -> int:
    """Write `path` from `groups`: (the tensors a group holds, a function making their arrays);
    the functions are called one after another, so only one group's arrays are alive at a
    time. Returns the file's size in bytes. Deterministic: the same groups give the same
    bytes. With `digests` (a dict, filled here with {tensor name: sha256 of its bytes}), the
    header's metadata records them too (DIGESTS_KEY): written as a placeholder of the same
    length first, rewritten in place once every tensor is written (one pass, no array kept)."""
    groups = list(groups)
    header: dict[str, object] = {}
    names = [t.name for tensors, _ in groups for t in tensors]
    if metadata or digests is not None:
        header["__metadata__"] = {str(k): str(v) for k, v in (metadata or {}).items()}
    if digests is not None:
        header["__metadata__"][DIGESTS_KEY] = digests_json(dict.fromkeys(names, PLACEHOLDER))
    at = 0
    for tensors, _ in groups:
        for t in tensors:
            header[t.name] = {"dtype": DTYPES[np.dtype(t.dtype)], "shape": list(t.shape),
                              "data_offsets": [at, at + t.nbytes]}
            at += t.nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # (the data starts 8-byte aligned)
    made = {}
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for tensors, make in groups:
            arrays = make()
            for t in tensors:
                a = np.ascontiguousarray(arrays[t.name], t.dtype)
                if a.shape != tuple(t.shape):
                    raise AssertionError(f"{t.name}: made {a.shape}, declared {t.shape}")
                if a.dtype.byteorder == ">":  # (safetensors is little-endian)
                    a = a.astype(a.dtype.newbyteorder("<"))
                made[t.name] = digest(a)
                f.write(a.tobytes())
            del arrays
        if digests is not None:
            header["__metadata__"][DIGESTS_KEY] = digests_json({n: made[n] for n in names})
            final = json.dumps(header, separators=(",", ":")).encode()
            final += b" " * (len(text) - len(final))
            if len(final) != len(text):
                raise AssertionError("the digest record changed the header's length")
            f.seek(8)
            f.write(final)
            digests.update(made)
    return 8 + len(text) + at


def ensure_space(path, nbytes: int, trimmed_params: int, where: str) -> None:
    """Refuse, before writing a byte, an export larger than the free space where it goes (a
    stock layout pads every layer to the widest: 10^5 ops compiled at d=2048 is ~260 GB)."""
    folder = os.path.dirname(os.path.abspath(os.fspath(path))) or "."
    while not os.path.isdir(folder):
        folder = os.path.dirname(folder)
    free = shutil.disk_usage(folder).free
    if nbytes > free:
        raise ExportError(f"{where}: the stock layout needs {nbytes / 1e9:.3g} GB ({nbytes // 4} "
                          f"float32 parameters; tw's trimmed model stores {trimmed_params}) and "
                          f"{free / 1e9:.3g} GB are free there; compile at a smaller d, or "
                          "export to onnx (trimmed)")


def read_safetensors_header(weights_path, where: str) -> tuple[dict[str, str], dict[str, tuple]]:
    """(metadata, {tensor name: shape}) from the header of a file `write_safetensors` wrote,
    every entry checked for the dtype tw writes and for lying inside the file; anything else
    is one ExportError line naming `where`."""
    meta, shapes, _ = _read_header(weights_path, where)
    return meta, shapes


def _read_header(weights_path, where: str):
    """(metadata, {name: shape}, [(name, start, end)] absolute byte regions) of the header."""
    file_name = os.path.basename(os.fspath(weights_path))
    try:
        size = os.path.getsize(weights_path)
        with open(weights_path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            if n > min(HEADER_LIMIT, size - 8):
                raise ValueError("header length")
            header = json.loads(f.read(n))
        if not isinstance(header, dict):
            raise ValueError("header")
    except (OSError, ValueError, struct.error, RecursionError) as e:
        raise ExportError(f"{where}: no readable {file_name} ({e.__class__.__name__})") from None
    meta = header.pop("__metadata__", None) or {}
    shapes, regions, end = {}, [], 0
    for name, entry in header.items():
        try:
            ok = (isinstance(entry, dict) and entry.get("dtype") == "F32"
                  and isinstance(entry.get("shape"), list)
                  and all(type(s) is int and s >= 0 for s in entry["shape"]))
            offsets = entry.get("data_offsets") if ok else None
            ok = (isinstance(offsets, list) and len(offsets) == 2
                  and all(type(o) is int for o in offsets) and 0 <= offsets[0] <= offsets[1]
                  and offsets[1] - offsets[0] == 4 * math.prod(entry["shape"]))
        except (TypeError, ValueError, OverflowError):
            ok = False
        if not ok:
            raise ExportError(f"{where}: {file_name} entry {show(name)} is not a float32 tensor "
                              "as tw writes them")
        shapes[name] = tuple(entry["shape"])
        regions.append((name, 8 + n + offsets[0], 8 + n + offsets[1]))
        end = max(end, offsets[1])
    if 8 + n + end != size:
        raise ExportError(f"{where}: {file_name} is {size} bytes, its header describes "
                          f"{8 + n + end}")
    spans = sorted((a, b) for _, a, b in regions)
    if any(b > c for (_, b), (c, _) in zip(spans, spans[1:])):
        raise ExportError(f"{where}: {file_name}'s tensors overlap (a damaged header)")
    if not isinstance(meta, dict):
        meta = {}
    return {str(k): str(v) for k, v in meta.items()}, shapes, regions


def check_safetensors(weights_path, meta: Mapping[str, str], where: str,
                      file_sha256: str | None = None) -> str:
    """Hash `weights_path` (one pass) and refuse it, naming the tensor, when a tensor's bytes
    differ from the header's record (`meta[DIGESTS_KEY]`), or, with `file_sha256` (recorded
    beside it), when any byte of the file does. Returns the file's sha256."""
    file_name = os.path.basename(os.fspath(weights_path))
    recorded = recorded_digests(meta.get(DIGESTS_KEY), where, file_name)
    _, _, regions = _read_header(weights_path, where)
    try:
        whole, found = file_digests(weights_path, regions)
    except OSError as e:
        raise ExportError(f"{where}: cannot read {file_name} ({e.__class__.__name__})") from None
    check_digests(recorded, found, where, file_name)
    if file_sha256 is not None and whole != file_sha256:
        raise ExportError(f"{where}: {file_name} changed since it was exported (sha256 "
                          f"recorded {show(file_sha256[:12], quote=False)}..., found "
                          f"{whole[:12]}...; its tensors are as recorded, its header is not); "
                          "export it again")
    return whole
