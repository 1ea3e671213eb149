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

What the bytes must be (every format; `docs/exports.md`, "What a loader checks"):

* `tw.tensor_sha256`: {tensor name: sha256 of its stored bytes}, so a loader names the tensor
  that changed;
* `tw.config`: {config field: value} for every field of the stock config the writer wrote
  (config.json's fields, GGUF's hyperparameter and tokenizer key/values), a value longer than
  `SHORT_VALUE` characters of JSON recorded as "sha256:<hex>" of its canonical JSON;
* a sha256 of each whole file, so damage anywhere (a header's padding included) is refused:
  beside the tensors in config.json (`files_sha256`, tlens' `weights_sha256`), in the ONNX
  model for its data file (`tw.data_sha256`), and inside the file itself for the files that
  hold their own records (`tw.file_sha256` of a GGUF, `tw.model_sha256` of model.onnx,
  `config_sha256` in config.json's "tw" entry: the hash of the file with that value read as
  `PLACEHOLDER`).

The tensor digests of a safetensors or GGUF file are filled in after its tensors are written
(the records sit in headers that precede the data), by rewriting a placeholder of the same
length in place, so an export stays one pass over its layers and byte-identical from run to
run. `check_config`, `check_digests`, `file_digests`, `read_config` and `check_sealed_json` are
the loaders' shared checks: each refusal is one ExportError line naming the file and what
differs.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping

from twdialect.errors import TwError

PREFIX = "tw."
PLACEHOLDER = "0" * 64  # a digest's stand-in while the file it describes is written
SHORT_VALUE = 200  # a config value of longer JSON is recorded by its sha256
CHUNK = 1 << 22  # bytes read at a time while hashing
SELF_KEY = "config_sha256"  # config.json's own sha256, in its "tw" entry
# keys of config.json's "tw" entry that the weights' header does not repeat
CONFIG_ONLY = ("files_sha256", "weights_sha256", SELF_KEY)


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
    """tw's version (one source: twdialect/_version.py, installed or not)."""
    from twdialect import __version__

    return __version__


def graph_sha256(graph) -> str:
    """sha256 of the graph's printed IR: the same graph prints the same text."""
    from io import StringIO

    from xdsl.printer import Printer

    buf = StringIO()
    Printer(stream=buf).print_op(graph)
    return hashlib.sha256(buf.getvalue().encode()).hexdigest()


def graph_of(graph, where: str):
    """The graph to hash for `graph` (a tw.graph op, or the CompiledTransformer compiled from
    it; None: no graph check)."""
    if graph is None or not hasattr(graph, "schedule"):
        return graph
    if graph.schedule is None:
        raise ExportError(f"{where}: the model given as graph carries no schedule (build it "
                          "with tw_lowering.compile), so its graph is unknown; pass the tw.graph")
    return graph.schedule.tg.graph


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
    than `graph` (hash), a geometry that disagrees with the file's own (`geometry`). Values of
    any type are taken (a hand-edited file may hold null, numbers or objects where tw wrote
    strings): what is not what tw writes is refused, never an exception of another kind."""
    if not isinstance(meta, Mapping):
        raise ExportError(f"{where}: its tw metadata is {type(meta).__name__}, not key/values "
                          "(not a tw export, or a damaged one)")
    need = ("tw.version", "tw.format", "tw.graph_sha256", "tw.machine", "tw.geometry",
            "tw.output_error_bounds")
    missing = [k for k in need if k not in meta]
    if missing:
        raise ExportError(f"{where}: not a tw export (missing metadata {', '.join(missing)})")
    bad = [k for k in need if not isinstance(meta[k], str)]
    if bad:
        raise ExportError(f"{where}: metadata {bad[0]} is {show(meta[bad[0]])}, not the string "
                          "tw writes (a damaged or edited export); export it again")
    ours, theirs = tw_version().split(".")[:2], meta["tw.version"].split(".")[:2]
    if ours != theirs:
        raise ExportError(f"{where}: written by tw {show(meta['tw.version'], quote=False)}, "
                          f"this is tw {tw_version()}; export it again")
    if fmt is not None and meta["tw.format"] != fmt:
        raise ExportError(f"{where}: a {show(meta['tw.format'])} export, expected {fmt!r}")
    if graph is not None and graph_sha256(graph) != meta["tw.graph_sha256"]:
        raise ExportError(f"{where}: exported from another graph (sha256 "
                          f"{show(meta['tw.graph_sha256'][:12], quote=False)}...); export this "
                          "one again")
    decoded = {}
    for key, value in meta.items():
        if not isinstance(key, str) or not key.startswith(PREFIX):
            continue
        try:
            decoded[key[len(PREFIX):]] = json.loads(value) if isinstance(value, str) else value
        except ValueError:
            decoded[key[len(PREFIX):]] = value
    for key in ("machine", "geometry"):
        if not isinstance(decoded[key], dict):
            raise ExportError(f"{where}: metadata tw.{key} is {show(decoded[key])}, not the "
                              "JSON object tw writes (a damaged or edited export)")
    if geometry is not None:
        recorded = decoded["geometry"]
        off = {k: (recorded.get(k), v) for k, v in geometry.items() if recorded.get(k) != v}
        if off:
            what = ", ".join(f"{k}: metadata {show(a, quote=False)}, file "
                             f"{show(b, quote=False)}" for k, (a, b) in sorted(off.items()))
            raise ExportError(f"{where}: metadata and weights disagree ({what})")
    return decoded


def show(value, quote: bool = True, limit: int = 60) -> str:
    """`value` as one short line in a message: its repr (a number or, unless `quote`, a str
    as it is), whitespace collapsed, cut to `limit` characters (a hand-edited file may hold
    anything, of any length)."""
    from twdialect.errors import shortened

    return shortened(repr(value) if quote or not isinstance(value, (str, int, float))
                     else str(value), limit)


# -- digests: what the bytes and the config were when tw wrote them --------------------------


def digest(data) -> str:
    """sha256 (hex) of `data`'s bytes (bytes, a memoryview, or a C-contiguous array)."""
    return hashlib.sha256(memoryview(data).cast("B")).hexdigest()


def digests_json(digests: Mapping[str, str]) -> str:
    """The one text of a {name: sha256} record (sorted keys): a placeholder record written
    before the tensors has the same length as the final one."""
    return json.dumps(dict(digests), sort_keys=True)


def canonical(value) -> str:
    """A config value as canonical JSON (sorted keys, no spaces; numbers as JSON writes them,
    non-JSON values by their repr), so a recorded value and a found one compare by text."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=repr)


def config_record(config: Mapping, fields: Iterable[str] | None = None) -> dict:
    """{field: value} of the config fields that make the computation (default: every field
    but the "tw" entry), a value whose JSON is longer than SHORT_VALUE as "sha256:<hex>"."""
    fields = [k for k in config if k != "tw"] if fields is None else list(fields)
    out = {}
    for key in fields:
        text = canonical(config[key])
        out[key] = json.loads(text) if len(text) <= SHORT_VALUE else (
            "sha256:" + hashlib.sha256(text.encode()).hexdigest())
    return out


def check_config(found: Mapping, recorded, where: str, file: str, extra_ok: bool = False) -> None:
    """Refuse a config (`found`: {field: value}) whose fields differ from the `recorded` ones
    (`config_record` at export time), naming the first field that differs, recorded vs found;
    unless `extra_ok`, a field tw did not write (outside "tw") is refused too (the stock
    loader would read it)."""
    if not isinstance(recorded, Mapping) or not recorded:
        raise ExportError(f"{where}: {file}'s recorded config fields (tw.config) are missing "
                          "or malformed (not a tw export of this version, or a damaged one); "
                          "export it again")
    if not isinstance(found, Mapping):
        raise ExportError(f"{where}: {file} is {show(found)}, not key/values")
    for key in sorted(recorded, key=str):
        want = recorded[key]
        if key not in found:
            raise ExportError(f"{where}: {file} lacks field {key} (recorded "
                              f"{show(want, quote=False)}); export it again")
        got = config_record({key: found[key]})[key]
        if canonical(got) != canonical(want):
            raise ExportError(f"{where}: {file} field {key} is {show(got)}, tw wrote "
                              f"{show(want)} (an edited or foreign file); export it again")
    if not extra_ok:
        extra = sorted(str(k) for k in found if k != "tw" and k not in recorded)
        if extra:
            raise ExportError(f"{where}: {file} has field {show(extra[0], quote=False)}, which "
                              "tw did not write (the stock loader would read it); remove it "
                              "or export again")


def recorded_digests(value, where: str, what: str) -> dict[str, str]:
    """A {name: sha256} record as written (JSON text, or already decoded), checked for shape:
    a missing or malformed one is one ExportError line."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            value = None
    if not isinstance(value, dict) or not all(
            isinstance(k, str) and isinstance(v, str) and len(v) == 64 for k, v in value.items()):
        raise ExportError(f"{where}: {what} carries no readable sha256 record (not a tw export "
                          "of this version, or a damaged one); export it again")
    return value


def check_digests(recorded: Mapping[str, str], found: Mapping[str, str], where: str,
                  file: str, kind: str = "tensor") -> None:
    """Refuse when `found` ({name: sha256} of what is on disk, in file order) differs from
    `recorded`: one line naming `file` and the first `kind` (tensor, file) in file order that
    is changed, added or missing, with the recorded and found digests, and how many more."""
    off = [n for n in found if recorded.get(n) != found[n]]
    off += [n for n in recorded if n not in found]
    if not off:
        return
    name = off[0]
    a, b = recorded.get(name), found.get(name)
    if a is None:
        what = f"{kind} {show(name)} tw did not write"
    elif b is None:
        what = f"{kind} {show(name)} is missing"
    else:
        what = f"{kind} {show(name)}: sha256 recorded {a[:12]}..., found {b[:12]}..."
    more = f", and {len(off) - 1} more" if len(off) > 1 else ""
    raise ExportError(f"{where}: {file} changed since it was exported ({what}{more}); a "
                      "damaged or foreign file: export it again")


def read_config(config_path, where: str) -> tuple[dict, bytes]:
    """(config, its raw bytes) of a config.json whose "tw" entry is a dict, or one
    ExportError line naming the file (unreadable, not JSON, not an object, "tw" missing, null
    or of another type)."""
    file = os.path.basename(os.fspath(config_path))
    try:
        with open(config_path, "rb") as f:
            raw = f.read()
        config = json.loads(raw)
    except (OSError, ValueError, RecursionError) as e:
        raise ExportError(f"{where}: no readable {file} ({e.__class__.__name__})") from None
    if not isinstance(config, dict) or not isinstance(config.get("tw"), dict):
        tw = config.get("tw") if isinstance(config, dict) else config
        raise ExportError(f"{where}: {file} carries no tw metadata (its \"tw\" entry is "
                          f"{show(tw)}; not a tw export, or an edited one)")
    return config, raw


def sealed_json(config: Mapping) -> str:
    """`config` as config.json text (indent 2, sorted keys) whose "tw" entry carries the sha256
    of that very text (SELF_KEY), read with the value as PLACEHOLDER: an edit of any byte of
    the file (a field, tw's records, even its spacing) is then seen by `check_sealed_json`."""
    tw = {**config["tw"], SELF_KEY: PLACEHOLDER}
    text = json.dumps({**config, "tw": tw}, indent=2, sort_keys=True)
    stub = _self_entry(PLACEHOLDER)
    if text.count(stub) != 1:
        raise AssertionError("config.json's digest entry is not where it was put")
    return text.replace(stub, _self_entry(hashlib.sha256(text.encode()).hexdigest()))


def _self_entry(value: str) -> str:
    return json.dumps({SELF_KEY: value})[1:-1]


def check_sealed_json(raw: bytes, recorded, where: str, file: str) -> None:
    """Refuse config text `raw` whose bytes are not those `sealed_json` wrote (`recorded`:
    the SELF_KEY value read from it)."""
    entry = _self_entry(recorded).encode() if isinstance(recorded, str) else None
    if entry is None or len(recorded) != 64 or raw.count(entry) != 1:
        raise ExportError(f"{where}: {file} carries no readable sha256 of itself (tw.{SELF_KEY}; "
                          "not a tw export of this version, or an edited one); export it again")
    found = hashlib.sha256(raw.replace(entry, _self_entry(PLACEHOLDER).encode())).hexdigest()
    if found != recorded:
        raise ExportError(f"{where}: {file} changed since it was exported (sha256 recorded "
                          f"{recorded[:12]}..., found {found[:12]}...; its fields are as "
                          "recorded, its text is not); export it again")


def check_file(path, regions, recorded: Mapping[str, str], whole, where: str, name: str,
               unreadable: str, rest: str, blank: tuple[int, int] | None = None) -> None:
    """Refuse a weight file that is unreadable (`unreadable` says what is missing), whose
    tensors (`regions`) differ from their `recorded` sha256s, or whose whole-file sha256 is not
    `whole` (`rest` names what then changed: its padding, a key/value). One ExportError line
    naming `where` and the file `name`."""
    try:
        got, found = file_digests(path, regions, blank=blank)
    except OSError as e:
        raise ExportError(f"{where}: {unreadable} ({type(e).__name__}: "
                          f"{show(str(e), quote=False)})") from None
    check_digests(recorded, found, where, name)
    if got != whole:
        raise ExportError(f"{where}: {name} changed since it was exported (sha256 recorded "
                          f"{show(str(whole)[:12], quote=False)}..., found {got[:12]}...; its "
                          f"tensors are as recorded, {rest} is not); export it again")


def file_digests(path, regions: Iterable[tuple[str, int, int]] = (),
                 blank: tuple[int, int] | None = None) -> tuple[str, dict[str, str]]:
    """(sha256 of the whole file, {name: sha256 of bytes [start, end)} per region) in one
    pass. `blank` (offset, length): those bytes are hashed as PLACEHOLDER's characters (the
    file's own digest, recorded inside it). Regions must not overlap; OSError propagates."""
    regions = sorted((int(s), int(e), n) for n, s, e in regions)
    whole, parts = hashlib.sha256(), {}
    blank_at, blank_len = blank if blank is not None else (-1, 0)
    filler = PLACEHOLDER.encode()[:blank_len]

    def read(f, at: int, n: int, sinks) -> None:
        while n > 0:
            block = f.read(min(n, CHUNK))
            if not block:
                raise OSError(f"file ends at byte {at}")
            if blank_at < at + len(block) and at < blank_at + blank_len:
                lo = max(blank_at - at, 0)
                hi = min(blank_at + blank_len - at, len(block))
                block = block[:lo] + filler[lo + at - blank_at: hi + at - blank_at] + block[hi:]
            for h in sinks:
                h.update(block)
            at, n = at + len(block), n - len(block)

    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        at = 0
        for start, end, name in regions:
            if start < at or end > size:
                raise OSError(f"tensor {name} lies outside the file")
            read(f, at, start - at, [whole])
            h = hashlib.sha256()
            read(f, start, end - start, [whole, h])
            parts[name], at = h.hexdigest(), end
        read(f, at, size - at, [whole])
    return whole.hexdigest(), parts
