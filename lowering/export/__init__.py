"""Exports: a compiled model written in formats that stock tools load and run exactly.

    from tw_lowering.export import export
    export(ct, "out/adder-hf", "transformers", vocab="0123456789+=.")   # a compiled model
    export(module, "out/g.onnx", "onnx", d=256, d_head=16)              # or a graph + geometry

| format | writer | loads it |
|---|---|---|
| `transformers` | `lowering/export/hf.py` | `AutoModelForCausalLM.from_pretrained` (GPT-2) |
| `tlens` | `lowering/export/tlens.py` | TransformerLens `HookedTransformer` |
| `onnx` | `lowering/export/onnx.py` | onnxruntime (with a KV cache) |
| `gguf` | `lowering/export/gguf.py` | llama.cpp (llama-cpp-python) |
| `llama` | `lowering/export/llama.py` | `AutoModelForCausalLM.from_pretrained` (Llama: swish / gated MLPs, rotary heads) |

`stock.py` lays a compiled model out as a stock transformer (one geometry for all layers,
normalizations made exact identities), `streaming.py` writes weights a layer at a time,
`metadata.py` records and checks where an export came from. `docs/exports.md` says what each
format can express and how exact it is: every format is a causal decoder, so a model with
full-mask heads (`tw.attn ... mask full`) is refused; a `tw.pos_table` rides in the position
embedding (GPT-2's wpe, TransformerLens' W_pos, GGUF's position table, an ONNX Gather).
"""

from __future__ import annotations

from importlib import import_module

from tw_lowering.export.metadata import ExportError, check_causal, check_unrotated
from tw_lowering.export.metadata import check_relu_mlps

FORMATS = {
    "transformers": ("tw_lowering.export.hf", "export_transformers"),
    "tlens": ("tw_lowering.export.tlens", "export_tlens"),
    "onnx": ("tw_lowering.export.onnx", "export_onnx"),
    "gguf": ("tw_lowering.export.gguf", "export_gguf"),
    "llama": ("tw_lowering.export.llama", "export_llama"),
}
# the extra that installs each stock library an export imports, when not "export"
EXTRAS = {"llama_cpp": "llama"}
TW_PACKAGES = ("tw_lowering", "tw_passes", "tw_tools", "tw_examples", "twdialect")
# formats that carry rotary heads and swish / gated MLP lanes (the others refuse them up front)
SWIGLU_ROPE_FORMATS = ("onnx", "llama")


def export(model, path, format: str, *, d: int | None = None, d_head: int | None = None,  # noqa: A002
           d_hidden: int | None = None, pipeline: str | None = None, graph: str = "main",
           **options) -> dict:
    """Write `model` (a CompiledTransformer, or a module / tw.graph compiled here with the
    geometry `d`, `d_head`, `d_hidden` and `pipeline`, the default pipeline unless given) to
    `path` in `format` (see FORMATS);
    `options` go to the format's writer. Returns the writer's report (sizes, parameter counts,
    seconds)."""
    from tw_lowering.model import CompiledTransformer

    if not isinstance(format, str) or format not in FORMATS:
        raise ExportError(f"export: unknown format {format!r} (known: {', '.join(FORMATS)})")
    if not isinstance(model, CompiledTransformer):
        if d is None or d_head is None:
            raise ExportError("export: a graph needs its geometry: give d and d_head (and "
                              "d_hidden), or pass a compiled model")
        from tw_lowering import compile as compile_graph

        model = compile_graph(model, d=d, d_head=d_head, d_hidden=d_hidden,
                              pipeline="default" if pipeline is None else pipeline, graph=graph)
    elif (d, d_head, d_hidden, pipeline) != (None, None, None, None):
        raise ExportError("export: the model is already compiled; d, d_head, d_hidden and "
                          "pipeline apply to a graph only")
    if str(model.dtype) != "torch.float32":  # (every format's stock kernels run float32)
        raise ExportError(f"export: the model runs in {str(model.dtype).removeprefix('torch.')}"
                          f"; the {format} format stores float32 weights, so its stock tool "
                          "would not compute what this model does: export a float32 compile "
                          "(ct.to(torch.float32) converts this one)")
    check_causal(model, format)  # (before the writer's own library is even imported)
    if format not in SWIGLU_ROPE_FORMATS:  # (ONNX rotates q and k itself, llama checks)
        check_unrotated(model, format)
    if format not in SWIGLU_ROPE_FORMATS:  # (ONNX computes swish and gated lanes, llama checks)
        check_relu_mlps(model, format)
    module_name, fn = FORMATS[format]
    try:  # (a writer imports its stock library at its module's import or when it runs)
        writer = getattr(import_module(module_name), fn)
        return writer(model, path, **options)
    except ImportError as e:
        if (e.name or "").split(".")[0] in TW_PACKAGES:  # (tw's own: a bug, not an extra)
            raise
        raise missing_library(e, format) from None


def missing_library(e: ImportError, format: str) -> ExportError:  # noqa: A002
    """The one-line ExportError for a stock library that `format`'s writer could not
    import: its name and the extra that installs it (pyproject.toml), rather than a raw
    ModuleNotFoundError from inside the writer."""
    top = (e.name or "").split(".")[0] or "a stock library"
    if isinstance(e, ModuleNotFoundError):
        why = "which is not installed"
    else:  # (installed, but too old or broken: "cannot import name ...")
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        why = f"which does not import ({first})"
    return ExportError(f"export: the {format} export needs {top!r}, {why}: "
                       f"pip install 'tw-compiler[{EXTRAS.get(top, 'export')}]'")


__all__ = ["export", "ExportError", "FORMATS", "missing_library"]
