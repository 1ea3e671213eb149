"""The Llama export: a stock Llama checkpoint (`LlamaForCausalLM`), loadable with
`AutoModelForCausalLM.from_pretrained(path)` and `AutoTokenizer.from_pretrained(path)`, no
remote code: what a model with swish / gated MLPs and rotary heads (a SwiGLU/RoPE machine,
`tw.mlp act swish up`, `tw.attn rope`) is.

Llama's machine is tw's with these differences, each made exact or refused with its reason:

* **RMSNorm** before every sublayer and before the LM head: an identity, as the stock plan
  makes LayerNorm one without the twins (RMSNorm subtracts no mean): `rms_norm_eps` is the
  plan's certified power of four (var + eps rounds to eps over every row the value ranges
  allow), every norm's weight its square root, a power of two.
* **Attention scaling** by head_dim^-1/2: q_proj is scaled by sqrt(head_dim) (exact for a
  head width that is a power of four, otherwise one rounding per q weight).
* **Rotary embeddings on every head**, one `rope_theta` and the whole head width (Llama pairs
  dim p with p + head_dim/2 at base^(-2p/head_dim)): so every tw head must be a rotary one
  with the same (base, dims), its dims the export's head width. Refused: a head without rope
  (including tw's position-local head work, which reads the position column), two rotary
  bases or widths, a partially rotary head (dims below its q.k width), a layer that keeps
  more head dims than the rotary width. HF rounds the rotation angle to float32 (tw rounds
  cos / sin of the float64 angle), an error of ~position * 2^-24 radians.
* **No position embedding**: the position column stays 0, so a graph with `tw.pos_encoding` or
  `tw.pos_table` is refused (nothing else reads it: every head is rotary). The constant
  column rides in every token's embedding row.
* **One MLP activation** (`hidden_act`): "silu" when every neuron is swish, "relu" when none
  is; a model mixing relu and swish neurons is refused. Every lane is gated on Llama (up_proj):
  a lane tw does not gate reads up = 1 (a zero column, bias 1), which `mlp_bias` carries.
* **Biases**: `attention_bias` and `mlp_bias` on; q, k and v biases are zero (tw's ride on the
  constant column), o_proj's is tw's output bias.

The token table is tw's embedding plus the constant column, the untied LM head reads the
output columns, the tokenizer is the GPT-2 export's (one token per character); weights are
written a layer at a time with tw's metadata in the config (`"tw"`) and the safetensors header.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Sequence

import numpy as np

from tw_lowering.export.hf import _rows_padded, load_checked, write_checkpoint
from tw_lowering.export.metadata import ExportError, check_causal
from tw_lowering.export.metadata import export_metadata
from tw_lowering.export.stock import StockPlan, _kept_dims, end_id, token_strings
from tw_lowering.export.streaming import Tensor, ensure_space

FORMAT = "llama"


def export_llama(ct, path, vocab: str | Sequence[str] | None = None, end: str | None = None,
                 n_positions: int | None = None, norm_eps: float | None = None) -> dict:
    """Write compiled model `ct` to directory `path` as a Llama checkpoint with its tokenizer.

    `vocab`, `end`, `n_positions`, `norm_eps`: as for the transformers export (the token
    strings by id, the end token, `max_position_embeddings`, an RMSNorm constant to use
    instead of the smallest certified one). Refuses, with one line naming the reason, a
    model Llama cannot carry exactly (see the module docstring)."""
    t0 = time.perf_counter()
    base, width = rotary_width(ct)
    act = hidden_act(ct)
    check_no_positions(ct)
    plan = StockPlan(ct, n_ctx=n_positions, fmt=FORMAT, rotary=True, gated=True,
                     head_dims=lambda e: e == width, divisible_width=True)
    g = plan.geometry
    tokens = token_strings(vocab, g.vocab, "llama export")
    tokens += [f"<{i}>" for i in range(len(tokens), max(g.vocab, g.n_out))]
    eos = end_id(end, tokens, "llama export")
    eps = plan.norm_eps(norm_eps)
    ensure_space(path, 4 * _params(g), plan.trimmed_params(), "llama export")
    os.makedirs(path, exist_ok=True)
    meta = export_metadata(ct, FORMAT, g.as_dict(), norm_eps=repr(eps), rope_theta=base,
                           hidden_act=act)
    size = write_checkpoint(path, _config(g, eps, base, act, eos, meta), _groups(plan, eps),
                            meta, tokens, eos, g.n_ctx)
    return {"format": FORMAT, "path": str(path), "bytes": size, "padded_params": _params(g),
            "trimmed_params": plan.trimmed_params(), "geometry": g.as_dict(), "norm_eps": eps,
            "rope_theta": base, "hidden_act": act, "seconds": time.perf_counter() - t0}


# -- what Llama can carry -------------------------------------------------------------------


def rotary_width(ct) -> tuple[float, int]:
    """(rope_theta, head_dim): the one (base, dims) every head of `ct` rotates with, or an
    ExportError naming what Llama's rotate-every-head-whole attention cannot carry."""
    check_causal(ct, FORMAT)
    heads = sum(layer.attn.n_heads for layer in ct.layers)
    if ct.rope_heads < heads:
        n = heads - ct.rope_heads
        raise ExportError(f"export_llama: the model has {n} attention head{'s' * (n > 1)} "
                          "without rotary embeddings (a tw.attn without rope, or "
                          "position-local head work, which reads the position column); Llama "
                          "rotates every head (export to onnx, which carries both)")
    ropes = sorted({_rope_of(op) for op in _attn_ops(ct)})
    if not ropes:
        raise ExportError("export_llama: the model has no attention head, so no rope_theta "
                          "to write (Llama's config needs one; export to onnx)")
    if len(ropes) != 1:
        raise ExportError(f"export_llama: the model's heads rotate with {len(ropes)} (base, "
                          f"dims) pairs {ropes}; Llama has one rope_theta and rotates whole "
                          "heads (export to onnx)")
    (base, dims, d_qk), = ropes
    if dims != d_qk:
        raise ExportError(f"export_llama: the heads rotate {dims} of their {d_qk} q.k "
                          "dimensions (partial rotary); Llama rotates whole heads (export to "
                          "onnx)")
    kept = max(_kept_dims(layer.attn) for layer in ct.layers if layer.attn.n_heads)
    if kept > dims:
        raise ExportError(f"export_llama: a layer's heads keep {kept} dimensions, wider than "
                          f"the rotary width {dims} Llama's head_dim must equal (narrow the "
                          "values a head carries, or compile with d_head equal to the rotary "
                          "width)")
    return base, dims


def _attn_ops(ct):
    from twdialect.dialect import AttnOp

    if ct.schedule is None:
        raise ExportError("export_llama: the model carries no schedule (build it with "
                          "tw_lowering.compile); its heads' rotary embeddings are unknown")
    return [op for op in ct.schedule.tg.graph.block.ops if isinstance(op, AttnOp)]


def _rope_of(op) -> tuple[float, int, int]:
    """(base, dims, q.k width) of a rotary attn op."""
    from twdialect.dense import shape_of
    from twdialect.dialect import attn_rope

    base, dims = attn_rope(op)
    return float(base), int(dims), int(shape_of(op.wq)[1])


def hidden_act(ct) -> str:
    """Llama's one MLP activation for `ct`'s neurons: "silu" (all swish), "relu" (none)."""
    total = sum(layer.mlp.n_neurons for layer in ct.layers)
    swish = ct.swish_neurons
    if 0 < swish < total:
        raise ExportError(f"export_llama: the model has {swish} swish and {total - swish} "
                          "relu MLP neurons; Llama's hidden_act is one activation for every "
                          "neuron (export to onnx, which carries both)")
    return "silu" if swish else "relu"


def check_no_positions(ct) -> None:
    """Refuse position sources: Llama adds no position embedding, so the residual's position
    features (and tw's position column) cannot be given."""
    kinds = sorted({s.kind for s in ct.sources if s.kind in ("pos", "pos_table")})
    if kinds:
        ops = {"pos": "tw.pos_encoding", "pos_table": "tw.pos_table"}
        raise ExportError("export_llama: the graph reads " + " and ".join(ops[k] for k in kinds)
                          + "; Llama has no position embedding, only rotary heads (export to "
                          "transformers or onnx)")


# -- the checkpoint -------------------------------------------------------------------------


def _params(g) -> int:
    """Parameters of the Llama layout: per layer q, k, v, o and gate, up, down with their
    biases and two norms, plus the token table, the final norm and the LM head."""
    d, hd, m, v = g.d_model, g.n_heads * g.head_dim, g.d_mlp, max(g.vocab, g.n_out)
    per_layer = 3 * (d * hd + hd) + hd * d + d + 2 * (d * m + m) + m * d + d + 2 * d
    return g.n_layers * per_layer + v * d + d + v * d


def _config(g, eps: float, base: float, act: str, eos: int | None, meta: dict) -> dict:
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "vocab_size": max(g.vocab, g.n_out), "hidden_size": g.d_model,
        "intermediate_size": g.d_mlp, "num_hidden_layers": g.n_layers,
        "num_attention_heads": g.n_heads, "num_key_value_heads": g.n_heads,
        "head_dim": g.head_dim, "hidden_act": act, "max_position_embeddings": g.n_ctx,
        "rms_norm_eps": eps, "rope_parameters": {"rope_type": "default", "rope_theta": base},
        "rope_theta": base, "attention_bias": True, "mlp_bias": True,
        "attention_dropout": 0.0, "tie_word_embeddings": False, "use_cache": True,
        "pretraining_tp": 1, "bos_token_id": eos, "eos_token_id": eos, "pad_token_id": eos,
        "torch_dtype": "float32", "dtype": "float32",
        "tw": {k[len("tw."):]: v for k, v in meta.items()},
    }


def _groups(plan: StockPlan, eps: float):
    """(tensors, maker) per group: the token table, then one layer at a time, then the head."""
    g = plan.geometry
    d, hd, m = g.d_model, g.n_heads * g.head_dim, g.d_mlp
    gain = np.full(d, math.sqrt(eps), np.float32)  # a power of two: eps is a power of four
    q_scale = np.float32(math.sqrt(g.head_dim))  # undoes Llama's head_dim^-1/2
    v = max(g.vocab, g.n_out)
    yield ([Tensor("model.embed_tokens.weight", (v, d))],
           lambda: {"model.embed_tokens.weight": _rows_padded(_token_rows(plan), v)})
    for i in range(g.n_layers):
        p = f"model.layers.{i}."
        shapes = {"self_attn.q_proj.weight": (hd, d), "self_attn.k_proj.weight": (hd, d),
                  "self_attn.v_proj.weight": (hd, d), "self_attn.o_proj.weight": (d, hd),
                  "self_attn.q_proj.bias": (hd,), "self_attn.k_proj.bias": (hd,),
                  "self_attn.v_proj.bias": (hd,), "self_attn.o_proj.bias": (d,),
                  "mlp.gate_proj.weight": (m, d), "mlp.up_proj.weight": (m, d),
                  "mlp.down_proj.weight": (d, m), "mlp.gate_proj.bias": (m,),
                  "mlp.up_proj.bias": (m,), "mlp.down_proj.bias": (d,),
                  "input_layernorm.weight": (d,), "post_attention_layernorm.weight": (d,)}

        def make(i=i, p=p):
            w = plan.layer(i)
            wu, bu, _ = plan.up(i)

            def heads(key):  # (n_heads, d_model, head_dim) -> nn.Linear's (out, in)
                return w[key].transpose(0, 2, 1).reshape(hd, d)

            out = {"self_attn.q_proj.weight": heads("W_Q") * q_scale,
                   "self_attn.k_proj.weight": heads("W_K"),
                   "self_attn.v_proj.weight": heads("W_V"),
                   "self_attn.o_proj.weight": w["W_O"].reshape(hd, d).T,
                   "self_attn.q_proj.bias": w["b_Q"].ravel() * q_scale,
                   "self_attn.k_proj.bias": w["b_K"].ravel(),
                   "self_attn.v_proj.bias": w["b_V"].ravel(), "self_attn.o_proj.bias": w["b_O"],
                   "mlp.gate_proj.weight": w["W_in"].T, "mlp.gate_proj.bias": w["b_in"],
                   "mlp.up_proj.weight": wu.T, "mlp.up_proj.bias": bu,
                   "mlp.down_proj.weight": w["W_out"].T, "mlp.down_proj.bias": w["b_out"],
                   "input_layernorm.weight": gain, "post_attention_layernorm.weight": gain}
            return {p + k: np.ascontiguousarray(a, np.float32) for k, a in out.items()}

        yield [Tensor(p + k, s) for k, s in shapes.items()], make
    yield ([Tensor("model.norm.weight", (d,)), Tensor("lm_head.weight", (v, d))],
           lambda: {"model.norm.weight": gain,
                    "lm_head.weight": _rows_padded(plan.unembedding().T, v)})


def _token_rows(plan: StockPlan) -> np.ndarray:
    """(vocab, d_model): each token's embedding row plus the constant 1 (Llama has no position
    table to carry it); the position column stays 0 (nothing reads it)."""
    const = np.zeros((1, plan.machine.d))
    const[0, plan.machine.CONST_COL] = 1.0
    return plan.embedding() + plan.residual(const)


def load_llama(path, graph=None, device: str = "cpu"):
    """The export at `path` as (model, tokenizer), its tw metadata checked first (format,
    version, graph hash when `graph` is given, geometry against the config)."""
    return load_checked(path, FORMAT, lambda config: {
        "n_layers": config.get("num_hidden_layers"), "d_model": config.get("hidden_size"),
        "n_heads": config.get("num_attention_heads"), "head_dim": config.get("head_dim"),
        "d_mlp": config.get("intermediate_size"),
        "n_ctx": config.get("max_position_embeddings")}, graph, device)
