"""The Llama export: a stock Llama checkpoint (`LlamaForCausalLM`), loadable with
`AutoModelForCausalLM.from_pretrained(path)` and `AutoTokenizer.from_pretrained(path)`, no
remote code: what a model with swish / gated MLPs and rotary heads (a SwiGLU/RoPE machine,
`tw.mlp act swish up`, `tw.attn rope`) is.

Llama's machine is tw's with these differences, each made exact or refused with its reason:

* **RMSNorm** before every sublayer and before the LM head: an identity, as the stock plan
  makes LayerNorm one without the twins (RMSNorm subtracts no mean): `rms_norm_eps` is the
  plan's certified power of four (var + eps rounds to eps over every row the value ranges
  allow), every norm's weight its square root, a power of two.
* **Head width** one that every engine's kernels take and whose square root is a power of
  two (`ENGINE_HEAD_DIMS`: 64 or 256; vLLM's CPU kernels take no narrower head), and
  **attention scaling** by head_dim^-1/2 undone by q_proj (and its bias) times
  sqrt(head_dim), a power of two: every score is bit-identical to tw's.
* **Rotary embeddings on every head**, one `rope_theta`, whole heads (Llama pairs dim j with
  j + H/2 at theta^(-2j/H), H the head width). A tw rotary head of `dims` dimensions (planes
  (p, p + dims/2) at base^(-2p/dims)) sits in Llama's planes j = p * H/dims, where the
  exponent 2j/H equals 2p/dims exactly: so H must be a multiple of dims (any power of two
  up to 256 works), and every rotary head must share (base, dims). A model none of whose
  heads rotate rides on rope_theta = 1e300: Llama's frequencies are then 1 (plane 0) and
  exactly 0 (every other plane: theta^x overflows float32), so its q.k dims are laid in the
  planes that never turn (all but dims 0 and H/2), cos = 1 and sin = 0 exactly. Refused,
  naming the op: a model mixing rotary and unrotated heads, two rotary (base, dims) pairs, a
  partially rotary head. HF and vLLM round the rotation angle to float32 (tw rounds cos / sin
  of the float64 angle), an error of ~position * 2^-24 radians on rotary heads.
* **No position embedding**: a graph with `tw.pos_encoding` or `tw.pos_table`, or a sublayer
  that reads the position index (position-local head work), is refused (Llama's residual
  has no position column). The constant column rides in every token's embedding row.
* **One MLP activation**, `hidden_act = "silu"` (the only one vLLM's Llama takes): a swish
  neuron is SiLU itself; a relu neuron is carried as SiLU(S_n z) / S_n with a per-neuron power
  of two S_n (gate_proj's row times S_n, down_proj's column over S_n; `stock.relu_scales`):
  exact wherever |S_n z| >= 17 (and z = 0), within SILU_GAP / S_n (times the lane's gate and
  outgoing weight) elsewhere; the bound per MLP sublayer is recorded in the metadata
  (`silu_error_bounds`), as the GGUF export records GELU's. Every lane is gated on Llama
  (up_proj): a lane tw does not gate reads up = 1 (a zero column, bias 1), which `mlp_bias`
  carries.
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
from dataclasses import dataclass

import numpy as np

from tw_lowering.export.hf import _rows_padded, load_checked, write_checkpoint
from tw_lowering.export.metadata import ExportError, check_causal
from tw_lowering.export.metadata import export_metadata
from tw_lowering.export.stock import (ENGINE_HEAD_DIMS, StockPlan, _kept_dims, end_id,
                                      relu_scales, token_strings)
from twdialect.dialect import describe as describe_op
from tw_lowering.export.streaming import Tensor, ensure_space

FORMAT = "llama"
ACT = "silu"  # Llama's one MLP activation (the only one vLLM's Llama takes)
# max over x of |SiLU(x) - relu(x)| (0.2785 at x = -1.2785), with room for float32 rounding;
# tests/test_export_llama_vllm_form.py re-derives it from torch's float32 SiLU.
SILU_GAP = 0.28
# rope_theta of a model whose heads never turn: theta^(-2j/H) is 0 in float32 for every plane
# but j = 0 (its base overflows float32), so cos = 1 and sin = 0 exactly there.
UNTURNED_THETA = 1e300


def export_llama(ct, path, vocab: str | Sequence[str] | None = None, end: str | None = None,
                 n_positions: int | None = None, norm_eps: float | None = None,
                 prompt_rules=None, tensor_parallel: int = 1) -> dict:
    """Write compiled model `ct` to directory `path` as a Llama checkpoint with its tokenizer.

    `vocab`, `end`, `n_positions`, `norm_eps`, `prompt_rules`, `tensor_parallel`: as for the
    transformers export (the token strings by id, the end token, `max_position_embeddings`,
    an RMSNorm constant to use instead of the smallest certified one, the tokenizer's prompt
    rewrites, the number of devices the heads and MLP width must split over). Refuses,
    with one line naming the reason, a model Llama cannot carry exactly (see the module
    docstring)."""
    t0 = time.perf_counter()
    rope = rotary_layout(ct)
    check_no_positions(ct)
    plan = StockPlan(ct, n_ctx=n_positions, fmt=FORMAT, rotary=True, gated=True,
                     head_dims=lambda e: e == rope.head_dim, divisible_width=True,
                     shards=tensor_parallel)
    g = plan.geometry
    tokens = token_strings(vocab, g.vocab, "llama export")
    tokens += [f"<{i}>" for i in range(len(tokens), max(g.vocab, g.n_out))]
    eos = end_id(end, tokens, "llama export")
    eps = plan.norm_eps(norm_eps)
    scales, bounds = relu_scales(plan, SILU_GAP, "export_llama", "SiLU's cut-off 17",
                                 "export to transformers, tlens or onnx, which carry ReLU")
    ensure_space(path, 4 * _params(g), plan.trimmed_params(), "llama export")
    os.makedirs(path, exist_ok=True)
    meta = export_metadata(
        ct, FORMAT, g.as_dict(), norm_eps=repr(eps), rope_theta=rope.theta, hidden_act=ACT,
        rope_dims=rope.dims, q_prescale=g.q_prescale,
        ffn_scale_log2=[[int(k.min()), int(k.max())] if len(k) else [] for k in scales],
        silu_error_bounds=bounds,
        exactness="swish neurons are SiLU; a relu neuron's pre-activation z with |z| >= "
                  "17/S is exact, a smaller nonzero one may move an MLP sublayer's output by "
                  "at most tw.silu_error_bounds[layer]")
    size = write_checkpoint(path, _config(g, eps, rope.theta, eos, meta),
                            _groups(plan, eps, rope, scales), meta, tokens, eos, g.n_ctx,
                            rules=prompt_rules)
    return {"format": FORMAT, "path": str(path), "bytes": size, "padded_params": _params(g),
            "trimmed_params": plan.trimmed_params(), "geometry": g.as_dict(), "norm_eps": eps,
            "rope_theta": rope.theta, "hidden_act": ACT,
            "silu_error_bound": float(sum(bounds)), "seconds": time.perf_counter() - t0}


# -- what Llama can carry -------------------------------------------------------------------


@dataclass(frozen=True)
class RotaryLayout:
    """How tw's heads sit in Llama's rotary heads: `theta` (rope_theta), `dims` (tw's rotary
    width; 0 when no head rotates), `head_dim` (H, the export's head width) and `slots`, the
    Llama head dim that each of tw's q.k dims (in the runtime's order) lands in."""

    theta: float
    dims: int
    head_dim: int
    slots: tuple[int, ...]


def rotary_layout(ct) -> RotaryLayout:
    """The one rotary layout every head of `ct` fits (see the module docstring), or an
    ExportError naming the op that Llama's rotate-every-head-whole attention cannot carry."""
    check_causal(ct, FORMAT)
    ops = _attn_ops(ct)
    if not ops:
        raise ExportError("export_llama: the model has no attention head, so no rope_theta "
                          "to write (Llama's config needs one; export to onnx)")
    ropes = {op: _rope_of(op) for op in ops}

    def describe(op) -> str:  # (the op, and which attn of the graph it is: hints may be absent)
        return f"{describe_op(op)} (tw.attn #{ops.index(op) + 1} of {len(ops)})"

    rotary = [op for op in ops if ropes[op] is not None]
    plain = [op for op in ops if ropes[op] is None]
    if rotary and plain:
        raise ExportError(f"export_llama: attention op {describe(plain[0])} has no rotary "
                          f"embedding while {describe(rotary[0])} rotates with base "
                          f"{ropes[rotary[0]][0]:g}; Llama turns every head with one "
                          "rope_theta (export to onnx, which carries both)")
    heads = sum(layer.attn.n_heads for layer in ct.layers)
    kept = max((_kept_dims(layer.attn) for layer in ct.layers if layer.attn.n_heads), default=0)
    qk = max((len(layer.attn.qk_dims) for layer in ct.layers if layer.attn.n_heads), default=0)
    if not rotary:
        if ct.rope_heads:  # (no tw.attn rotates, yet the runtime turns a head: a bug)
            raise ExportError("export_llama: the runtime rotates heads no tw.attn declares")
        h = _engine_width(max(kept, qk + 2), "the model's heads")
        plane = h // 2
        slots = tuple(j for j in range(h) if j not in (0, plane))[:qk]
        return RotaryLayout(UNTURNED_THETA, 0, h, slots)
    pairs = sorted({ropes[op] for op in rotary})
    if len(pairs) != 1:
        other = next(op for op in rotary if ropes[op] != ropes[rotary[0]])
        raise ExportError(f"export_llama: attention ops {describe(rotary[0])} and "
                          f"{describe(other)} rotate with different (base, dims) "
                          f"{ropes[rotary[0]][:2]} and {ropes[other][:2]}; Llama has one "
                          "rope_theta and rotates whole heads (export to onnx)")
    (base, dims, d_qk), = pairs
    if dims != d_qk:
        raise ExportError(f"export_llama: attention op {describe(rotary[0])} rotates {dims} of "
                          f"its {d_qk} q.k dimensions (partial rotary); Llama rotates whole "
                          "heads (export to onnx)")
    if ct.rope_heads < heads:  # (position-local head work: heads that read the position)
        n = heads - ct.rope_heads
        raise ExportError(f"export_llama: the model has {n} attention head{'s' * (n > 1)} "
                          "without rotary embeddings (position-local head work, which reads "
                          "the position column); Llama rotates every head (export to onnx, "
                          "which carries both)")
    h = _engine_width(max(kept, dims), f"the rotary width {dims}", lambda e: e % dims == 0)
    half, step = dims // 2, h // dims
    slots = tuple((c % half) * step + (h // 2 if c >= half else 0) for c in range(dims))
    return RotaryLayout(float(base), dims, h, slots)


def _engine_width(need: int, what: str, fits=lambda e: True) -> int:
    """The narrowest head width in ENGINE_HEAD_DIMS of at least `need` that `fits`."""
    for e in ENGINE_HEAD_DIMS:
        if e >= need and fits(e):
            return e
    raise ExportError(f"export_llama: {what} needs {need} head dimensions, and no head width "
                      "the engines take whose square root is a power of two "
                      f"({', '.join(map(str, ENGINE_HEAD_DIMS))}; a rotary width must divide "
                      "it) fits them; export to onnx")


def _attn_ops(ct):
    from twdialect.dialect import AttnOp

    if ct.schedule is None:
        raise ExportError("export_llama: the model carries no schedule (build it with "
                          "tw_lowering.compile); its heads' rotary embeddings are unknown")
    return [op for op in ct.schedule.tg.graph.block.ops if isinstance(op, AttnOp)]


def _rope_of(op) -> tuple[float, int, int] | None:
    """(base, dims, q.k width) of a rotary attn op, None for one without rotation."""
    from twdialect.dense import shape_of
    from twdialect.dialect import attn_rope

    rope = attn_rope(op)
    if rope is None:
        return None
    return float(rope[0]), int(rope[1]), int(shape_of(op.wq)[1])


def check_no_positions(ct) -> None:
    """Refuse position sources, and any sublayer that reads the position index: Llama adds no
    position embedding, so the residual's position features (and tw's position column)
    cannot be given."""
    kinds = sorted({s.kind for s in ct.sources if s.kind in ("pos", "pos_table")})
    if kinds:
        ops = {"pos": "tw.pos_encoding", "pos_table": "tw.pos_table"}
        raise ExportError("export_llama: the graph reads " + " and ".join(ops[k] for k in kinds)
                          + "; Llama has no position embedding, only rotary heads (export to "
                          "transformers or onnx)")
    pos = ct.machine.POS_COL
    for i, layer in enumerate(ct.layers):
        for kind, sub in (("attention", layer.attn), ("MLP", layer.mlp)):
            if pos in sub.read.tolist():
                raise ExportError(f"export_llama: layer {i}'s {kind} reads the position "
                                  "index, which Llama's residual does not hold (no position "
                                  "embedding; export to transformers or onnx)")


# -- the checkpoint -------------------------------------------------------------------------


def _params(g) -> int:
    """Parameters of the Llama layout: per layer q, k, v, o and gate, up, down with their
    biases and two norms, plus the token table, the final norm and the LM head."""
    d, hd, m, v = g.d_model, g.n_heads * g.head_dim, g.d_mlp, max(g.vocab, g.n_out)
    per_layer = 3 * (d * hd + hd) + hd * d + d + 2 * (d * m + m) + m * d + d + 2 * d
    return g.n_layers * per_layer + v * d + d + v * d


def _config(g, eps: float, theta: float, eos: int | None, meta: dict) -> dict:
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "vocab_size": max(g.vocab, g.n_out), "hidden_size": g.d_model,
        "intermediate_size": g.d_mlp, "num_hidden_layers": g.n_layers,
        "num_attention_heads": g.n_heads, "num_key_value_heads": g.n_heads,
        "head_dim": g.head_dim, "hidden_act": ACT, "max_position_embeddings": g.n_ctx,
        "rms_norm_eps": eps, "rope_parameters": {"rope_type": "default", "rope_theta": theta},
        "rope_theta": theta, "attention_bias": True, "mlp_bias": True,
        "attention_dropout": 0.0, "tie_word_embeddings": False, "use_cache": True,
        "pretraining_tp": 1, "bos_token_id": eos, "eos_token_id": eos, "pad_token_id": eos,
        "torch_dtype": "float32", "dtype": "float32",
        "tw": {k[len("tw."):]: v for k, v in meta.items()},
    }


def _groups(plan: StockPlan, eps: float, rope: RotaryLayout, scales: list[np.ndarray]):
    """(tensors, maker) per group: the token table, then one layer at a time, then the head.
    q and k dims move to their rotary slots (`rope.slots`), relu neurons take their scales."""
    g = plan.geometry
    d, hd, m = g.d_model, g.n_heads * g.head_dim, g.d_mlp
    gain = np.full(d, math.sqrt(eps), np.float32)  # a power of two: eps is a power of four
    q_scale = np.float32(g.q_prescale)  # undoes Llama's head_dim^-1/2
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
            for key in ("W_Q", "W_K", "b_Q", "b_K"):
                w[key] = _in_slots(w[key], rope.slots)
            s = np.ones(m)
            s[: len(scales[i])] = np.exp2(scales[i].astype(np.float64))

            def heads(key):  # (n_heads, d_model, head_dim) -> nn.Linear's (out, in)
                return w[key].transpose(0, 2, 1).reshape(hd, d)

            out = {"self_attn.q_proj.weight": heads("W_Q") * q_scale,
                   "self_attn.k_proj.weight": heads("W_K"),
                   "self_attn.v_proj.weight": heads("W_V"),
                   "self_attn.o_proj.weight": w["W_O"].reshape(hd, d).T,
                   "self_attn.q_proj.bias": w["b_Q"].ravel() * q_scale,
                   "self_attn.k_proj.bias": w["b_K"].ravel(),
                   "self_attn.v_proj.bias": w["b_V"].ravel(), "self_attn.o_proj.bias": w["b_O"],
                   "mlp.gate_proj.weight": (w["W_in"].astype(np.float64) * s).T,
                   "mlp.gate_proj.bias": w["b_in"].astype(np.float64) * s,
                   "mlp.up_proj.weight": wu.T, "mlp.up_proj.bias": bu,
                   "mlp.down_proj.weight": (w["W_out"].astype(np.float64) / s[:, None]).T,
                   "mlp.down_proj.bias": w["b_out"],
                   "input_layernorm.weight": gain, "post_attention_layernorm.weight": gain}
            return {p + k: np.ascontiguousarray(a, np.float32) for k, a in out.items()}

        yield [Tensor(p + k, s) for k, s in shapes.items()], make
    yield ([Tensor("model.norm.weight", (d,)), Tensor("lm_head.weight", (v, d))],
           lambda: {"model.norm.weight": gain,
                    "lm_head.weight": _rows_padded(plan.unembedding().T, v)})


def _in_slots(a: np.ndarray, slots: tuple[int, ...]) -> np.ndarray:
    """a (..., head_dim) with its first len(slots) head dims moved to `slots` (the rest of a
    q or k head is zero: the runtime keeps no q.k dims beyond them)."""
    if not len(slots):
        return np.zeros_like(a)
    if np.any(a[..., len(slots):]):
        raise ExportError("export_llama: a head keeps q.k dimensions beyond its rotary "
                          "layout (a bug: please report it)")
    out = np.zeros_like(a)
    out[..., list(slots)] = a[..., : len(slots)]
    return out


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
