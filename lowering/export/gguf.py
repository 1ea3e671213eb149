"""GGUF export: a compiled model as llama.cpp's `gpt2` architecture, run by llama.cpp
(llama-cpp-python) exactly up to float32 round-off.

    from tw_lowering.export.gguf import export_gguf, load_gguf
    export_gguf(ct, "adder.gguf", vocab="0123456789+=.", end=".")
    m = load_gguf("adder.gguf", graph=ct.schedule.tg.graph)
    m.logits([1, 2, 10, 3, 4, 11])          # (n, n_out) at every position
    m.generate([1, 2, 10, 3, 4, 11], 8, end_id=12)

Why `gpt2`, and how each of its differences from tw's machine is made exact (llama.cpp's
`src/models/gpt2.cpp`, `llm_graph_context::build_norm/build_qkv/build_attn_mha/build_ffn`, and
ggml's CPU kernels; see docs/exports.md, "GGUF (llama.cpp)"):

* **Layout.** gpt2 is the llama.cpp architecture with everything tw needs and nothing in the
  way: learned absolute positions (`position_embd`, no RoPE), biases on the fused QKV, the
  attention output and both FFN matrices, an untied LM head (`output`), pre-norm LayerNorms
  with bias. Its tensors tie the head width to the residual (`attn_qkv` is {n_embd, 3 n_embd},
  `attn_output` {n_embd, n_embd}), so the plan uses `tied_width=True`. Heads are at least 4
  wide (`runnable_head_dim`: llama.cpp aborts the process on heads of width 1), so a model
  without heads rides on heads of width 4 or more whose weights are zero.
* **Attention scale.** gpt2 applies softmax(kq * 1/sqrtf(head_dim)) (`ggml_soft_max_ext`);
  tw's attention is unscaled. With head_dim a power of four, sqrt(head_dim) is a power of two,
  so W_Q (and b_Q) pre-multiplied by it give bit-identical scores.
* **Activation.** gpt2's FFN is GELU (`ggml_gelu`). ggml's CPU GELU returns x itself for
  x >= 10 and exactly 0 for x <= -10 (an fp16 table only in between). ReLU is positively
  homogeneous, so every neuron n gets a power of two S_n: ffn_up (W_in, b_in) times S_n,
  ffn_down's row times 1/S_n. A pre-activation z with |S_n z| >= 10 then goes through exactly
  as relu(z) does in tw (power-of-two scaling commutes with float32 rounding in the normal
  range); z = 0 gives GELU(0) = 0 exactly. Only 0 < |z| < 10/S_n can differ, by at most
  GELU_GAP/S_n times the neuron's outgoing weight. S_n is as large as float32 allows with
  room (S_n * (bound on |z|) <= 2^96, |W_out| / S_n >= 2^-100, S_n <= 2^64), so that window
  is ~1e-18 wide; the resulting bound per MLP sublayer is recorded in the metadata.
* **Normalization.** Every LayerNorm (`ggml_norm`: float32 mean, variance summed in double,
  rounded to float, then 1/sqrtf(variance + eps)) is an exact identity on what the sublayers
  read: `StockPlan(twins=True)` with gain sqrt(eps), bias 0 and the certified power-of-four
  eps, which gpt2 reads from `gpt2.attention.layer_norm_epsilon` as a float32 (every power of
  four up to 4^62 is one).
* **Run time.** K/V cache in F32 (`type_k`/`type_v`; the default F16 would round K and V) and
  flash attention off (it casts K and V to F16); the loader does both.

Tensors are F32 only and are written a layer at a time (GGUFWriter: tensor infos first, then
each tensor's bytes as its layer is built).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import time

import numpy as np

from tw_lowering.export.metadata import (PLACEHOLDER, ExportError, check_config, check_file,
                                         check_metadata, config_record, digests_json,
                                         export_metadata, file_digests, graph_of,
                                         recorded_digests, show)
from tw_lowering.export.stock import (StockPlan, end_id, power_of_four, relu_scales,
                                      token_strings)
from tw_lowering.export.streaming import ensure_space

ARCH = "gpt2"
# max over x in (-10, 10) of |ggml's table GELU(x) - relu(x)|: 0.1700 for the tanh GELU (at
# x ~ -0.75) plus the fp16 rounding of x and of the table's value (< 0.0055 + 0.0049 below 10);
# tests/test_export_gguf.py re-derives it from an emulation of the table.
GELU_GAP = 0.2
GELU_CUTOFF = 10.0  # ggml: x >= 10 -> x, x <= -10 -> 0
GGML_TYPE_F32 = 0
TOKEN_NORMAL, TOKEN_UNUSED = 1, 5
SPACE = "\u2581"  # SentencePiece's space, so llama.cpp's own tokenizer maps ' ' to it
DIGESTS_KEY = "tw.tensor_sha256"  # {tensor name: sha256}, filled in after the tensors
FILE_KEY = "tw.file_sha256"  # the file's own sha256, read with this value as PLACEHOLDER


def runnable_head_dim(e: int) -> bool:
    """Head widths the export may use: a power of four (sqrt(head_dim), q's pre-scale, is
    then a power of two) other than 1. llama.cpp's gpt2 graph aborts the whole process
    (GGML_ASSERT(ggml_can_mul_mat)) on heads of width 1, which the cheapest tied geometry
    would otherwise pick for a model without heads (d_model heads of one column) or with
    one-column heads; a model without heads rides on heads of width 4 or more whose
    weights are zero (softmax over zero scores times zero values adds 0)."""
    return e >= 4 and power_of_four(e)


def export_gguf(ct, path, n_positions: int | None = None, vocab=None, end=None,
                norm_eps: float | None = None, name: str | None = None, prompt_rules=None,
                **kw) -> dict:
    """Write compiled model `ct` to `path` as a GGUF file of llama.cpp's gpt2 architecture.

    `n_positions`: positions the position table covers (default: the graph's pos_encoding
    max_len, else 1024). `vocab`: the token strings (a str of characters, or a list of
    strings), one per row of the graph's token table (default "<0>", "<1>", ...). `end`: the
    end token (a vocab entry or an id), recorded as the tokenizer's EOS. `norm_eps`: a
    LayerNorm constant to use instead of the smallest certified one (it is checked).
    `prompt_rules`: (pattern, replacement) rewrites of a typed prompt (a bundled program's
    PROMPT_RULES), recorded as `tw.prompt_rules` (llama.cpp's tokenizer cannot apply them;
    `load_gguf`'s model does, on a prompt given as text).
    Returns {"path", "bytes", "n_positions", "params" (stock layout), "trimmed_params" (tw's
    own), "seconds", "norm_eps", "gelu_error_bound" (the sum of the per-layer bounds)}."""
    if kw:
        raise ExportError(f"export gguf: unknown option(s) {', '.join(sorted(kw))} (known: "
                          "n_positions, vocab, end, norm_eps, name, prompt_rules)")
    import gguf

    t0 = time.perf_counter()
    plan = StockPlan(ct, twins=True, tied_width=True, head_dims=runnable_head_dim,
                     n_ctx=n_positions, fmt="gguf")
    g = plan.geometry
    eps = plan.norm_eps(norm_eps)
    if not math.isfinite(float(np.float32(eps))) or float(np.float32(eps)) != eps:
        raise ExportError(f"export gguf: norm constant {eps:.6g} is not a float32")
    tokens = _token_strings(vocab, g.vocab)
    n_tok = max(g.vocab, g.n_out)  # llama.cpp's vocabulary: the token ids and the LM head width
    tokens += [f"<tw:unused {i}>" for i in range(len(tokens), n_tok)]
    end_id = _end_id(end, tokens[: g.vocab])
    q_gain = float(g.q_prescale)
    scales, gelu_bounds = _ffn_scales(plan)

    meta = export_metadata(
        ct, "gguf", g.as_dict(), norm_eps=eps, gguf_vocab=n_tok, outputs=plan.output_names(),
        end_id=end_id, q_prescale=q_gain,
        ffn_scale_log2=[[int(s.min()), int(s.max())] if len(s) else [] for s in scales],
        gelu_error_bounds=gelu_bounds,
        exactness="every pre-activation z with |z| >= 10/S is exact; smaller nonzero ones may "
                  "move an MLP sublayer's output by at most tw.gelu_error_bounds[layer]")

    from tw_lowering.export.prompts import rules_metadata

    meta.update(rules_metadata(prompt_rules, "export gguf",
                               [t.replace(SPACE, " ") for t in tokens[: g.vocab]]))
    ensure_space(path, 4 * g.params(), plan.trimmed_params(), "export gguf")
    w = gguf.GGUFWriter(os.fspath(path), ARCH)
    w.add_name(name or "tw export")
    w.add_context_length(g.n_ctx)
    w.add_embedding_length(g.d_model)
    w.add_feed_forward_length(g.d_mlp)
    w.add_block_count(g.n_layers)
    w.add_head_count(g.n_heads)
    w.add_head_count_kv(g.n_heads)
    w.add_layer_norm_eps(eps)
    w.add_file_type(0)  # ALL_F32
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * n_tok)
    w.add_token_types([TOKEN_NORMAL] * g.vocab + [TOKEN_UNUSED] * (n_tok - g.vocab))
    w.add_add_bos_token(False)
    w.add_add_eos_token(False)
    w.add_add_space_prefix(False)
    if end_id is not None:
        w.add_eos_token_id(end_id)
    config = {  # (what the key/values above are: the loader compares each, `tw.config`)
        f"{ARCH}.context_length": g.n_ctx, f"{ARCH}.embedding_length": g.d_model,
        f"{ARCH}.feed_forward_length": g.d_mlp, f"{ARCH}.block_count": g.n_layers,
        f"{ARCH}.attention.head_count": g.n_heads, f"{ARCH}.attention.head_count_kv": g.n_heads,
        f"{ARCH}.attention.layer_norm_epsilon": eps, "general.architecture": ARCH,
        "general.file_type": 0, "tokenizer.ggml.model": "llama", "tokenizer.ggml.pre": "default",
        "tokenizer.ggml.tokens": tokens, "tokenizer.ggml.scores": [0.0] * n_tok,
        "tokenizer.ggml.token_type": [TOKEN_NORMAL] * g.vocab + [TOKEN_UNUSED] * (n_tok - g.vocab),
        "tokenizer.ggml.add_bos_token": False, "tokenizer.ggml.add_eos_token": False,
        "tokenizer.ggml.add_space_prefix": False}
    if end_id is not None:
        config["tokenizer.ggml.eos_token_id"] = end_id
    meta["tw.config"] = json.dumps(config_record(config), sort_keys=True)
    meta[DIGESTS_KEY] = digests_json({n: PLACEHOLDER for n, _ in tensor_infos(g, n_tok)})
    meta[FILE_KEY] = PLACEHOLDER
    for key, value in meta.items():
        w.add_string(key, value)

    try:
        _write_tensors(w, plan, n_tok, eps, q_gain, scales)
        w.close()
        _seal(path)
    except BaseException:
        w.close()  # (a second close does nothing)
        with contextlib.suppress(OSError):
            os.remove(path)
        raise
    return {"path": os.fspath(path), "bytes": os.path.getsize(path), "n_positions": g.n_ctx,
            "params": g.params(), "trimmed_params": ct.stored_params(),
            "seconds": time.perf_counter() - t0,
            "norm_eps": eps, "gelu_error_bound": float(sum(gelu_bounds))}


def tensor_infos(g, n_tok: int) -> list[tuple[str, tuple[int, ...]]]:
    """(name, shape) of every tensor of an export of geometry `g`, in the file's order."""
    dm = g.d_model
    infos = [("token_embd.weight", (n_tok, dm)), ("position_embd.weight", (g.n_ctx, dm))]
    for i in range(g.n_layers):
        p = f"blk.{i}."
        infos += [(p + "attn_norm.weight", (dm,)), (p + "attn_norm.bias", (dm,)),
                  (p + "attn_qkv.weight", (3 * dm, dm)), (p + "attn_qkv.bias", (3 * dm,)),
                  (p + "attn_output.weight", (dm, dm)), (p + "attn_output.bias", (dm,)),
                  (p + "ffn_norm.weight", (dm,)), (p + "ffn_norm.bias", (dm,)),
                  (p + "ffn_up.weight", (g.d_mlp, dm)), (p + "ffn_up.bias", (g.d_mlp,)),
                  (p + "ffn_down.weight", (dm, g.d_mlp)), (p + "ffn_down.bias", (dm,))]
    return infos + [("output_norm.weight", (dm,)), ("output_norm.bias", (dm,)),
                    ("output.weight", (n_tok, dm))]


def _write_tensors(w, plan: StockPlan, n_tok: int, eps: float, q_gain: float,
                   scales: list[np.ndarray]) -> None:
    """Tensor infos, then each tensor's bytes, a layer at a time (see the module docstring)."""
    g = plan.geometry
    dm = g.d_model
    f32 = np.dtype(np.float32)
    for tname, shape in tensor_infos(g, n_tok):
        w.add_tensor_info(tname, shape, f32, int(np.prod(shape)) * 4)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()

    gain = np.full(dm, math.sqrt(eps), np.float32)  # (a power of two: eps is a power of four)
    zero = np.zeros(dm, np.float32)

    def put(shape, a):
        a = np.ascontiguousarray(a, np.float32)
        if a.shape != tuple(shape):
            raise AssertionError(f"made {a.shape}, declared {shape}")
        w.write_tensor_data(a)

    emb = np.zeros((n_tok, dm), np.float32)
    emb[: g.vocab] = plan.embedding()
    put((n_tok, dm), emb)
    del emb
    put((g.n_ctx, dm), plan.positions())
    for i in range(g.n_layers):
        L = plan.layer(i)
        s = np.zeros(g.d_mlp, np.float64)
        s[: len(scales[i])] = scales[i]
        s = np.exp2(s)
        qkv = np.concatenate([  # rows h * head_dim + e, as ggml_view_3d splits the fused output
            (L["W_Q"] * q_gain).transpose(0, 2, 1).reshape(-1, dm),
            L["W_K"].transpose(0, 2, 1).reshape(-1, dm),
            L["W_V"].transpose(0, 2, 1).reshape(-1, dm)])
        qkv_b = np.concatenate([L["b_Q"].reshape(-1) * q_gain, L["b_K"].reshape(-1),
                                L["b_V"].reshape(-1)])
        put((dm,), gain)
        put((dm,), zero)
        put((3 * dm, dm), qkv)
        put((3 * dm,), qkv_b)
        del qkv
        put((dm, dm), L["W_O"].reshape(-1, dm).T)
        put((dm,), L["b_O"])
        put((dm,), gain)
        put((dm,), zero)
        put((g.d_mlp, dm), (L["W_in"].astype(np.float64) * s).T)
        put((g.d_mlp,), L["b_in"].astype(np.float64) * s)
        put((dm, g.d_mlp), (L["W_out"].astype(np.float64) / s[:, None]).T)
        put((dm,), L["b_out"])
        del L
    put((dm,), gain)
    put((dm,), zero)
    head = np.zeros((n_tok, dm), np.float32)
    head[: g.n_out] = plan.unembedding().T
    put((n_tok, dm), head)


def _token_strings(vocab, n: int) -> list[str]:
    """`token_strings`, spaces as SentencePiece's (llama.cpp's tokenizer maps ' ' to it)."""
    tokens = token_strings(vocab, n, "export gguf")
    out = [t.replace(" ", SPACE) for t in tokens]
    return out if len(set(out)) == len(out) else tokens


def _end_id(end, vocab: list[str]) -> int | None:
    return end_id(end, vocab, "export gguf", lambda t: (t, t.replace(" ", SPACE)))


def _ffn_scales(plan: StockPlan) -> tuple[list[np.ndarray], list[float]]:
    """Per layer: log2 S_n of each neuron and the bound on how far GELU can move that MLP
    sublayer's output from relu's (`stock.relu_scales` with GELU's gap)."""
    return relu_scales(plan, GELU_GAP, "export gguf", "GELU's cut-off 10",
                       "export to a format with ReLU (transformers, tlens, onnx)")


# -- loading ----------------------------------------------------------------------------


def _seal(path) -> None:
    """Fill in, in place, the records written as placeholders of their final length: each
    tensor's sha256 (DIGESTS_KEY), then the file's own (FILE_KEY, hashed with its value
    still the placeholder, as the loader reads it)."""
    layout = _read(path, "export gguf")
    _, found = file_digests(path, layout.tensors)
    value = digests_json({name: found[name] for name, _, _ in layout.tensors}).encode()
    at, length = layout.spans[DIGESTS_KEY]
    if len(value) != length:
        raise AssertionError("the tensor digests' record changed length")
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(value)
        f.flush()
        whole, _ = file_digests(path)
        f.seek(layout.spans[FILE_KEY][0])
        f.write(whole.encode())


class _Layout:
    """What a loader reads of a GGUF file: its tw.* values (str), its other key/values
    ({key: contents}), its tensors' byte regions [(name, start, end)] and where each tw.*
    string value lies ({key: (offset, length)})."""

    def __init__(self, meta, fields, tensors, spans):
        self.meta, self.fields, self.tensors, self.spans = meta, fields, tensors, spans


def _read(path, where: str) -> _Layout:
    """The file's layout, or one ExportError line: GGUFReader's own errors on a damaged file
    (IndexError, ValueError, a short memmap...) never escape."""
    import gguf

    try:
        reader = gguf.GGUFReader(os.fspath(path))
        meta, fields, spans = {}, {}, {}
        for key, field in reader.fields.items():
            value = field.contents()
            if key.startswith("tw."):
                meta[key] = value if isinstance(value, str) else str(value)
                if isinstance(value, str) and len(field.parts) == 5:  # (key, type, length, value)
                    spans[key] = (int(field.offset) + sum(int(p.nbytes) for p in field.parts[:4]),
                                  int(field.parts[4].nbytes))
            else:
                fields[key] = value
        tensors = [(str(t.name), int(t.data_offset), int(t.data_offset) + int(t.n_bytes))
                   for t in reader.tensors]
    except OSError as e:
        raise ExportError(f"{where}: cannot read {os.fspath(path)!r} "
                          f"({show(e.strerror or str(e), quote=False)})") from None
    except Exception:  # noqa: BLE001 (the reader's errors on a damaged file are many)
        raise ExportError(f"{where}: cannot read {os.fspath(path)!r} as a GGUF file (damaged, "
                          "truncated or not GGUF: its key/values or tensor infos do not "
                          "parse); export it again") from None
    return _Layout(meta, fields, tensors, spans)


def read_gguf_metadata(path) -> tuple[dict[str, str], dict]:
    """(the file's tw.* key/values as strings, its gpt2 hyperparameters)."""
    layout = _read(path, "load gguf")
    return layout.meta, _hyperparameters(layout.fields)


def _hyperparameters(fields: dict) -> dict:
    hp = {k: v for k, v in fields.items()
          if k.startswith(ARCH + ".") or k == "general.architecture"}
    tokens = fields.get("tokenizer.ggml.tokens")
    hp["token_count"] = len(tokens) if isinstance(tokens, list) else None
    return hp


def check_gguf(path, graph=None) -> dict:
    """A tw GGUF export's metadata, checked (`check_metadata`: tw version, format, `graph`'s
    hash when given: the tw.graph or the CompiledTransformer; the geometry against the file's
    own hyperparameters), then every key/value llama.cpp reads against the recorded ones
    (`tw.config`), each tensor's sha256 (naming the tensor) and the file's own (any other
    byte); decoded. Each refusal is one ExportError line naming the file."""
    where = f"load gguf {os.fspath(path)}"
    layout = _read(path, where)
    meta, hp = layout.meta, _hyperparameters(layout.fields)
    if not meta:
        raise ExportError(f"{where}: not a tw export (no tw metadata)")
    if hp.get("general.architecture") != ARCH:
        raise ExportError(f"{where}: architecture {show(hp.get('general.architecture'))}, "
                          f"expected {ARCH!r}")
    try:
        n_heads = int(hp[f"{ARCH}.attention.head_count"])
        d_model = int(hp[f"{ARCH}.embedding_length"])
        geometry = {"n_layers": int(hp[f"{ARCH}.block_count"]), "d_model": d_model,
                    "n_heads": n_heads, "head_dim": d_model // n_heads,
                    "d_mlp": int(hp[f"{ARCH}.feed_forward_length"]),
                    "n_ctx": int(hp[f"{ARCH}.context_length"])}
    except (KeyError, TypeError, ValueError, ZeroDivisionError, OverflowError) as e:
        raise ExportError(f"{where}: hyperparameter {show(str(e), quote=False)} missing or "
                          "malformed") from None
    if n_heads <= 0 or n_heads * geometry["head_dim"] != d_model \
            or not runnable_head_dim(geometry["head_dim"]):  # (llama.cpp would abort)
        raise ExportError(f"{where}: {n_heads} heads over embedding width {d_model}: a head "
                          "geometry llama.cpp cannot run (heads of width 4, 16, 64, ...); "
                          "export it again")
    decoded = check_metadata(meta, "gguf", graph=graph_of(graph, where), geometry=geometry,
                             where=where)
    if hp["token_count"] != decoded.get("gguf_vocab"):
        raise ExportError(f"{where}: metadata and weights disagree (gguf_vocab: metadata "
                          f"{show(decoded.get('gguf_vocab'))}, file {hp['token_count']})")
    check_config(layout.fields, decoded.get("config"), where, "its key/values", extra_ok=True)
    _check_bytes(path, layout, where)
    return decoded


def _check_bytes(path, layout: _Layout, where: str) -> None:
    """Each tensor's sha256 against DIGESTS_KEY, then the whole file's against FILE_KEY."""
    name = os.path.basename(os.fspath(path))
    recorded = recorded_digests(layout.meta.get(DIGESTS_KEY), where, name)
    own = layout.meta.get(FILE_KEY)
    if not isinstance(own, str) or len(own) != 64 or FILE_KEY not in layout.spans \
            or layout.spans[FILE_KEY][1] != 64:
        raise ExportError(f"{where}: {name} carries no readable sha256 of itself ({FILE_KEY}; "
                          "not a tw export of this version, or a damaged one); export it again")
    check_file(path, layout.tensors, recorded, own, where, name, f"cannot read {name}",
               "a key/value or the padding", blank=layout.spans[FILE_KEY])


def load_gguf(path, graph=None, n_threads: int | None = None, verbose: bool = False
              ) -> GGUFModel:
    """Open a tw GGUF export with llama.cpp (llama-cpp-python) after checking its tw metadata
    (`check_gguf`; `graph`: refuse a file exported from another graph)."""
    meta = check_gguf(path, graph)
    try:
        return GGUFModel(os.fspath(path), meta, n_threads=n_threads, verbose=verbose)
    except ImportError as e:
        raise ExportError(f"load gguf {os.fspath(path)}: running a GGUF export needs "
                          f"{e.name!r}: pip install 'tw-compiler[llama]'") from None
    except Exception as e:  # noqa: BLE001 (llama.cpp's binding raises ValueError and more)
        raise ExportError(f"load gguf {os.fspath(path)}: llama.cpp cannot load it "
                          f"({type(e).__name__}: {show(str(e), quote=False)})") from None


class GGUFModel:
    """A tw GGUF export run by llama.cpp: logits at every position, greedy generation, and
    `__call__(inputs) -> {"logits": ...}` in the shape of tw's runners. Wherever token ids are
    taken, a str is a prompt as typed: `tokenize` applies the export's prompt rules
    (`tw.prompt_rules`, which llama.cpp's own tokenizer cannot), then llama.cpp's tokenizer."""

    def __init__(self, path: str, meta: dict, n_threads: int | None = None,
                 verbose: bool = False):
        from llama_cpp import Llama

        self.meta = meta
        g = meta["geometry"]
        self.n_ctx, self.vocab, self.n_out = int(g["n_ctx"]), int(g["vocab"]), int(g["n_out"])
        self.end_id = meta.get("end_id")
        rules = meta.get("prompt_rules")
        if rules is not None:
            from tw_lowering.export.prompts import check_rules

            rules = check_rules(rules, where=f"load gguf {path}")
        self.prompt_rules = rules or ()
        self.llm = Llama(model_path=path, n_ctx=self.n_ctx, n_batch=min(self.n_ctx, 512),
                         n_ubatch=min(self.n_ctx, 512), logits_all=True, flash_attn=False,
                         type_k=GGML_TYPE_F32, type_v=GGML_TYPE_F32, n_gpu_layers=0,
                         n_threads=n_threads, n_threads_batch=n_threads, verbose=verbose)

    def tokenize(self, prompt: str) -> list[int]:
        """The token ids of `prompt` as a user types it (`12*34=`): the export's prompt rules
        (a bundled program's normalisation: `012*034=`), then llama.cpp's own tokenizer."""
        from tw_lowering.export.prompts import apply_rules

        text = apply_rules(self.prompt_rules, prompt)
        return list(self.llm.tokenize(text.encode(), add_bos=False, special=False))

    def _ids(self, ids) -> list[int]:
        if isinstance(ids, str):
            ids = self.tokenize(ids)
        ids = [int(t) for t in np.asarray(ids, np.int64).reshape(-1)]
        if not ids:
            raise ExportError("gguf model: give at least one token")
        bad = [t for t in ids if not 0 <= t < self.vocab]
        if bad:
            raise ExportError(f"gguf model: token id {bad[0]} outside the vocabulary "
                              f"[0, {self.vocab})")
        return ids

    def _fits(self, n: int) -> None:
        if n > self.n_ctx:
            raise ExportError(f"gguf model: {n} positions, the export covers {self.n_ctx} "
                              "(export with a larger n_positions)")

    def logits(self, token_ids) -> np.ndarray:
        """(n, n_out) float32: the model's outputs at every position of `token_ids`."""
        ids = self._ids(token_ids)
        self._fits(len(ids))
        self.llm.reset()
        self.llm.eval(ids)
        return np.array(self.llm.scores[: len(ids), : self.n_out], np.float32)

    def __call__(self, inputs) -> dict[str, np.ndarray]:
        return {"logits": self.logits(inputs["tokens"] if isinstance(inputs, dict) else inputs)}

    def generate(self, token_ids, max_new: int, end_id: int | None = None) -> list[int]:
        """Greedy: prefill `token_ids`, then append the argmax of the last position's outputs
        (through llama.cpp's KV cache) until `end_id` (default: the export's end token;
        not included) or `max_new` tokens."""
        ids = self._ids(token_ids)
        end_id = self.end_id if end_id is None else end_id
        self.llm.reset()
        self.llm.eval(ids)
        n, out = len(ids), []
        for _ in range(int(max_new)):
            tok = int(np.argmax(self.llm.scores[n - 1, : self.n_out]))
            if tok == end_id:
                break
            out.append(tok)
            if len(out) == max_new:
                break
            if tok >= self.vocab:
                raise ExportError(f"gguf model: output column {tok} won the argmax but is not a "
                                  f"token (vocabulary of {self.vocab})")
            self._fits(n + 1)
            self.llm.eval([tok])
            n += 1
        return out

    def close(self) -> None:
        llm, self.llm = self.llm, None
        if llm is not None:
            llm.close()

