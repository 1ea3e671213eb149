"""What every export records about where it came from, and the check a loader makes.

An export carries, as flat string key/values (the one shape every format can hold: a
safetensors header, an ONNX model's metadata_props, GGUF key/values, a config's "tw" entry):

* `tw.version`: the tw that wrote it;
* `tw.graph_sha256`: the compiled graph's printed IR, hashed (a loader given the graph can
  tell a stale export from a fresh one);
* `tw.machine`: the compile geometry (d, d_head, d_hidden) as JSON;
* `tw.geometry`: the export's own geometry (layers, d_model, heads, head_dim, d_mlp, ...);
* `tw.output_error_bounds`: per graph output, tw's static float32 error bound (absolute), as
  JSON; the export's own extra rounding is stated beside it where a format adds some;
* `tw.format`: which writer made it, and any keys that writer adds (`tw.*`).

`check_metadata(meta, ...)` is what every tw loader runs before it trusts a file.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping

from twdialect.errors import TwError

PREFIX = "tw."


class ExportError(TwError):
    """An export that cannot be written as asked (the message names the reason and what would
    work), or a file whose tw metadata does not check out."""


def check_causal(ct, fmt: str) -> None:
    """Refuse a model with full-mask heads: every format here is a causal decoder (one mask
    for every head; GPT-2, TransformerLens and llama.cpp have no per-head mask, and the ONNX
    graph's KV cache steps position by position), and none would run such a head as tw does."""
    _refuse_heads(ct, fmt, "full_heads", "full-mask", "tw.attn mask full",
                  "is a causal decoder, which cannot carry a bidirectional head exactly")


def check_unrotated(ct, fmt: str) -> None:
    """Refuse a model with rotary heads (tw.attn rope) in a format without per-head rotary
    embeddings: GPT-2 (transformers, GGUF gpt2) and TransformerLens's GPT-2 layout add learned
    absolute positions and rotate nothing. The Llama writer carries a model whose every head
    is rotary with one base and dims (`llama.rotary_width` checks it), and the ONNX writer
    builds its own attention and carries any rotation."""
    _refuse_heads(ct, fmt, "rope_heads", "rotary", "tw.attn rope",
                  "has no rotary position embeddings (export to onnx or llama, which "
                  "carry them)")


def _refuse_heads(ct, fmt: str, count: str, kind: str, ir: str, why: str) -> None:
    """One line refusing a model that holds `ct.<count>` heads of a kind `fmt` cannot carry."""
    n = getattr(ct, count, 0)
    if n:
        raise ExportError(f"export_{fmt}: the model has {n} {kind} attention head"
                          f"{'s' if n > 1 else ''} ({ir}); the {fmt} format {why}")


def check_relu_mlps(ct, fmt: str) -> None:
    """Refuse a model with swish or gated neurons (tw.mlp act swish / up) in a format whose
    MLP is one stock activation (relu, or GGUF's gelu) without a gate: GPT-2 (transformers,
    GGUF gpt2) and TransformerLens's GPT-2 layout. The ONNX writer builds its own MLP and
    carries them."""
    swish, gated = getattr(ct, "swish_neurons", 0), getattr(ct, "gated_neurons", 0)
    if swish or gated:
        what = " and ".join(w for w in (f"{swish} swish" if swish else "",
                                         f"{gated} gated" if gated else "") if w)
        raise ExportError(f"export_{fmt}: the model has {what} MLP neurons (tw.mlp act swish / "
                          f"up); the {fmt} format's MLP has one stock activation and no gate "
                          "(export to onnx or llama, which carry them)")


def tw_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tw")
    except PackageNotFoundError:  # (a source tree run without installing)
        return "0.1.0+source"


def graph_sha256(graph) -> str:
    """sha256 of the graph's printed IR: the same graph prints the same text."""
    from io import StringIO

    from xdsl.printer import Printer

    buf = StringIO()
    Printer(stream=buf).print_op(graph)
    return hashlib.sha256(buf.getvalue().encode()).hexdigest()


def export_metadata(ct, fmt: str, geometry: Mapping, **extra) -> dict[str, str]:
    """The metadata of an export of compiled model `ct` (which must carry its schedule) by
    writer `fmt`, with the export's `geometry` and any `extra` keys (JSON-encoded unless str)."""
    from tw_lowering.precision import output_errors

    if ct.schedule is None:
        raise ExportError("export: the model carries no schedule (build it with "
                          "tw_lowering.compile); its graph hash and error bounds are unknown")
    m = ct.machine
    bounds = {name: err for name, (err, _) in output_errors(ct.schedule).items()}
    meta = {
        "tw.version": tw_version(),
        "tw.format": fmt,
        "tw.graph_sha256": graph_sha256(ct.schedule.tg.graph),
        "tw.machine": json.dumps({"d": m.d, "d_head": m.d_head, "d_hidden": m.d_hidden},
                                 sort_keys=True),
        "tw.geometry": json.dumps(dict(geometry), sort_keys=True),
        "tw.output_error_bounds": json.dumps(bounds, sort_keys=True),
    }
    for key, value in extra.items():
        meta[PREFIX + key] = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return meta


def check_metadata(meta: Mapping[str, str], fmt: str | None = None, graph=None,
                   geometry: Mapping | None = None, where: str = "export") -> dict:
    """Check an export's tw metadata before trusting it; returns it decoded ({key without the
    prefix: value}, JSON values parsed). Refuses (ExportError, one line naming `where`):
    missing keys, another tw major.minor version, another format than `fmt`, another graph
    than `graph` (hash), a geometry that disagrees with the file's own (`geometry`)."""
    need = ("tw.version", "tw.format", "tw.graph_sha256", "tw.machine", "tw.geometry",
            "tw.output_error_bounds")
    missing = [k for k in need if k not in meta]
    if missing:
        raise ExportError(f"{where}: not a tw export (missing metadata {', '.join(missing)})")
    ours, theirs = tw_version().split(".")[:2], str(meta["tw.version"]).split(".")[:2]
    if ours != theirs:
        raise ExportError(f"{where}: written by tw {meta['tw.version']}, this is tw "
                          f"{tw_version()}; export it again")
    if fmt is not None and meta["tw.format"] != fmt:
        raise ExportError(f"{where}: a {meta['tw.format']!r} export, expected {fmt!r}")
    if graph is not None and graph_sha256(graph) != meta["tw.graph_sha256"]:
        raise ExportError(f"{where}: exported from another graph (sha256 "
                          f"{meta['tw.graph_sha256'][:12]}...); export this one again")
    decoded = {}
    for key, value in meta.items():
        if not key.startswith(PREFIX):
            continue
        try:
            decoded[key[len(PREFIX):]] = json.loads(value)
        except (TypeError, ValueError):
            decoded[key[len(PREFIX):]] = value
    if geometry is not None:
        recorded = decoded["geometry"]
        off = {k: (recorded.get(k), v) for k, v in geometry.items() if recorded.get(k) != v}
        if off:
            what = ", ".join(f"{k}: metadata {a}, file {b}" for k, (a, b) in sorted(off.items()))
            raise ExportError(f"{where}: metadata and weights disagree ({what})")
    return decoded
