"""The TransformerLens export: a directory of `config.json` (TransformerLens config fields plus
the tw metadata under "tw") and `model.safetensors` (HookedTransformer's state-dict names and
shapes), loaded by `load_tlens` as a TransformerLens model whose every residual read, head and
neuron is hookable (`run_with_cache`).

TransformerLens 4 removed `HookedTransformer`; its replacement for a model built from a config
rather than a Hugging Face checkpoint is `TransformerBridge.boot_native` (TransformerLens's own
"native" transformer: split Q/K/V/O, standard positions, optional norms), and its
`convert_tl_checkpoint` reads HookedTransformer's state-dict format (`embed.W_E`,
`blocks.{i}.attn.W_Q` of shape (n_heads, d_model, d_head), ...). So the file keeps the format
interpretability tools know, and `load_tlens` loads it through TransformerLens's own converter
with a strict state-dict load, no weight processing (no LayerNorm folding, no centering).

tw's machine maps onto that model with no approximation:

* **No normalization** (`normalization_type=None`: every norm is an identity), **relu** MLPs,
  standard learned positions (the position table is tw's constant 1, position index and
  pos_encoding features), untied unembedding with a zero bias.
* **Attention scaling.** tw's attention is unscaled. TransformerLens 4's native attention
  divides the scores by `attn_scale` when `use_attn_scale` is set, by sqrt(d_head) otherwise,
  and refuses `attn_scale=1` for heads wider than 1. So the config says `use_attn_scale=True,
  attn_scale=2.0` and W_Q is stored times 2: a power of two, so (2q).k / 2 is q.k exactly (the
  same config and weights mean the same model to HookedTransformer, whose `attn_scale` has the
  same meaning). `hook_q` therefore holds 2q; everything else is tw's values.
* **Columns.** The residual is `StockPlan`'s (`lowering/export/stock.py`, no twins): the tw
  columns something uses, in tw's order, so `plan.residual(x)` maps tw's residual onto
  `hook_resid_*` and `tw_columns` names each export column's tw column.

The tw metadata (`lowering/export/metadata.py`) is in the safetensors header and, with the
sha256 of the weights file, in the config's "tw" entry; `load_tlens` checks both before it
builds anything (a foreign, stale or edited export is refused in one line).
"""

from __future__ import annotations

import hashlib
import json
import os
import time

import numpy as np

from tw_lowering.export.metadata import (CONFIG_ONLY, PREFIX, SELF_KEY, ExportError,
                                         check_config, check_metadata, check_sealed_json,
                                         config_record, digests_json, export_metadata, graph_of,
                                         read_config, sealed_json, show)
from tw_lowering.export.prompts import rules_metadata
from tw_lowering.export.stock import StockGeometry, StockPlan
from tw_lowering.export.streaming import (DIGESTS_KEY, Tensor, check_safetensors, ensure_space,
                                       read_safetensors_header, write_safetensors)

FORMAT = "tlens"
CONFIG = "config.json"
WEIGHTS = "model.safetensors"
# The scores' divisor; W_Q is stored times this (a power of two: the product is exact).
ATTN_SCALE = 2.0


# -- writing --------------------------------------------------------------------------------
def export_tlens(ct, path, n_positions: int | None = None, prompt_rules=None) -> dict:
    """Write compiled model `ct` to directory `path` (created if missing) as a TransformerLens
    model: `config.json` and `model.safetensors`, one layer in memory at a time.

    `n_positions`: the position table's length, the longest sequence the model takes
    (default: the graph's pos_encoding max_len, else 1024). `prompt_rules`: a token program's
    prompt rewrites, recorded only (`tw.prompt_rules`: the model takes token ids). Returns the
    report: `files` {name: bytes}, `bytes`, `padded_params` (the stock layout's parameters),
    `trimmed_params` (what tw's runtime stores), `geometry`, `seconds`."""
    t0 = time.perf_counter()
    plan = StockPlan(ct, n_ctx=n_positions, fmt="tlens")
    g = plan.geometry
    outputs = [{"name": n, "start": a, "width": w} for n, a, w in plan.output_names()]
    meta = export_metadata(ct, FORMAT, g.as_dict(), outputs=outputs,
                           attn_scale=repr(ATTN_SCALE),
                           tw_columns=plan.tw_columns.tolist())
    meta.update(rules_metadata(prompt_rules, "tlens export"))
    ensure_space(path, 4 * g.params(), plan.trimmed_params(), "tlens export")
    os.makedirs(path, exist_ok=True)
    config_path, weights_path = os.path.join(path, CONFIG), os.path.join(path, WEIGHTS)
    if os.path.exists(config_path):  # (a crash below must not leave an old config beside)
        os.remove(config_path)
    name = getattr(getattr(ct.schedule.tg.graph, "sym_name", None), "data", "main")
    config = {**tl_config(g), "model_name": f"tw-{name}"}
    meta[PREFIX + "config"] = json.dumps(config_record(config), sort_keys=True)
    digests: dict[str, str] = {}
    size = write_safetensors(weights_path, _groups(plan), {"format": "pt", **meta}, digests)
    meta[DIGESTS_KEY] = digests_json(digests)
    tw = {k[len(PREFIX):]: v for k, v in meta.items()}
    tw["weights_sha256"] = _sha256(weights_path)
    config["tw"] = tw
    with open(config_path, "w") as f:
        f.write(sealed_json(config))
    files = {CONFIG: os.path.getsize(config_path), WEIGHTS: size}
    return {"format": FORMAT, "path": str(path), "files": files, "bytes": sum(files.values()),
            "padded_params": g.params(), "trimmed_params": ct.stored_params(),
            "geometry": g.as_dict(), "seconds": time.perf_counter() - t0}


def tl_config(g: StockGeometry) -> dict:
    """The TransformerLens config fields of an export of geometry `g` (each one a field of
    TransformerLens 4's `TransformerBridgeConfig`; `TransformerBridgeConfig.from_dict` of
    the whole config.json also gives it)."""
    return {
        "n_layers": g.n_layers, "d_model": g.d_model, "n_heads": g.n_heads,
        "d_head": g.head_dim, "d_mlp": g.d_mlp, "d_vocab": g.vocab, "d_vocab_out": g.n_out,
        "n_ctx": g.n_ctx, "act_fn": "relu", "normalization_type": None, "final_rms": False,
        "attn_only": False, "gated_mlp": False, "parallel_attn_mlp": False,
        "use_attn_scale": True, "attn_scale": ATTN_SCALE,
        "scale_attn_by_inverse_layer_idx": False, "attn_scores_soft_cap": -1.0,
        "output_logits_soft_cap": -1.0, "n_key_value_heads": None,
        "positional_embedding_type": "standard", "attention_dir": "causal",
        "default_prepend_bos": False, "tokenizer_prepends_bos": False,
        "tokenizer_name": None, "architecture": "TransformerLensNative",
    }


def _tensors(g: StockGeometry) -> list[list[Tensor]]:
    """The state dict HookedTransformer would have for geometry `g` (parameters only: the
    causal mask and IGNORE buffers are the model's own), grouped as written: the tables,
    each layer, the unembedding."""
    d, nh, e, m = g.d_model, g.n_heads, g.head_dim, g.d_mlp
    groups = [[Tensor("embed.W_E", (g.vocab, d)), Tensor("pos_embed.W_pos", (g.n_ctx, d))]]
    for i in range(g.n_layers):
        a, p = f"blocks.{i}.attn.", f"blocks.{i}.mlp."
        groups.append([Tensor(a + "W_Q", (nh, d, e)), Tensor(a + "W_K", (nh, d, e)),
                       Tensor(a + "W_V", (nh, d, e)), Tensor(a + "W_O", (nh, e, d)),
                       Tensor(a + "b_Q", (nh, e)), Tensor(a + "b_K", (nh, e)),
                       Tensor(a + "b_V", (nh, e)), Tensor(a + "b_O", (d,)),
                       Tensor(p + "W_in", (d, m)), Tensor(p + "b_in", (m,)),
                       Tensor(p + "W_out", (m, d)), Tensor(p + "b_out", (d,))])
    groups.append([Tensor("unembed.W_U", (d, g.n_out)), Tensor("unembed.b_U", (g.n_out,))])
    return groups


def _groups(plan: StockPlan):
    g = plan.geometry
    tensors = _tensors(g)
    yield tensors[0], lambda: {"embed.W_E": plan.embedding(),
                               "pos_embed.W_pos": plan.positions()}
    for i in range(g.n_layers):
        def make(i=i):
            w = plan.layer(i)
            wq = w["W_Q"] * np.float32(ATTN_SCALE)
            if not np.isfinite(wq).all():
                raise ExportError(f"tlens export: layer {i}'s query weights reach "
                                  f"{float(np.abs(w['W_Q']).max()):.3g}; times the attention "
                                  f"scale {ATTN_SCALE:g} they leave float32")
            a, p = f"blocks.{i}.attn.", f"blocks.{i}.mlp."
            out = {a + k: w[k] for k in ("W_K", "W_V", "W_O", "b_Q", "b_K", "b_V", "b_O")}
            out[a + "W_Q"] = wq
            out.update({p + k: w[k] for k in ("W_in", "b_in", "W_out", "b_out")})
            return out

        yield tensors[1 + i], make
    yield tensors[-1], lambda: {"unembed.W_U": plan.unembedding(),
                                "unembed.b_U": np.zeros(g.n_out, np.float32)}


def _sha256(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


# -- reading --------------------------------------------------------------------------------
def load_tlens(path, graph=None, device: str = "cpu"):
    """The export at directory `path` as a TransformerLens model (TransformerLens 4: a
    `TransformerBridge` over its native transformer; `run_with_cache(tokens)` gives every
    `blocks.{i}.hook_resid_pre/mid/post`, head and neuron), on `device`, in eval mode.

    Checked before anything is built, each refusal one line (ExportError): the tw metadata
    of the weights file (`check_metadata`: format, tw version, the graph's hash when `graph`
    is given (a tw.graph op, or the CompiledTransformer it was exported from), the geometry
    against the tensors' shapes), the config's copy of it and its fields, and the weights
    file's sha256 against the config's."""
    where = str(path)
    config, raw = _read_config(path, where)
    weights_path = os.path.join(path, WEIGHTS)
    meta, shapes = read_safetensors_header(weights_path, where)
    recorded = check_metadata(meta, FORMAT, where=where)["geometry"]
    if not isinstance(recorded, dict):
        raise ExportError(f"{where}: {WEIGHTS}'s tw.geometry is not a geometry")
    geometry = _geometry_of(shapes, recorded, where)
    check_metadata(meta, FORMAT, _graph_of(graph), geometry.as_dict(), where=where)
    _check_config(config, meta, geometry, where)
    check_config(config, check_metadata(meta, FORMAT, where=where).get("config"), where, CONFIG)
    check_safetensors(weights_path, meta, where, config["tw"]["weights_sha256"])
    check_sealed_json(raw, config["tw"].get(SELF_KEY), where, CONFIG)
    return _build(config, geometry, weights_path, device, where)


def _graph_of(graph):
    """A graph to hash: a CompiledTransformer stands for the graph it was compiled from."""
    return graph_of(graph, "load_tlens")


def _read_config(path, where: str) -> tuple[dict, bytes]:
    if not os.path.isdir(path):
        raise ExportError(f"{where}: not a directory (a tlens export is a directory holding "
                          f"{CONFIG} and {WEIGHTS})")
    return read_config(os.path.join(path, CONFIG), where)


def _geometry_of(shapes: dict[str, tuple], recorded, where: str) -> StockGeometry:
    """The geometry the tensors have, every tensor of the state dict present with its shape
    (a missing, extra or misshapen tensor is refused). Head and MLP sizes come from the
    metadata's `recorded` geometry only where no layer holds them (a model of no layers)."""
    try:
        vocab, d = shapes["embed.W_E"]
        n_ctx = shapes["pos_embed.W_pos"][0]
        n_out = shapes["unembed.W_U"][1]
        if "blocks.0.attn.W_Q" in shapes:
            nh, _, e = shapes["blocks.0.attn.W_Q"]
            m = shapes["blocks.0.mlp.W_in"][1]
        else:
            nh, e, m = (int(recorded[k]) for k in ("n_heads", "head_dim", "d_mlp"))
    except (KeyError, ValueError, IndexError, TypeError):
        raise ExportError(f"{where}: {WEIGHTS} is not a TransformerLens state dict as tw "
                          "writes it (embed.W_E, pos_embed.W_pos, blocks.0, unembed.W_U)") from None
    n_layers = 0
    while f"blocks.{n_layers}.attn.W_Q" in shapes:
        n_layers += 1
    g = StockGeometry(n_layers=n_layers, d_model=d, n_heads=nh, head_dim=e, d_mlp=m,
                      vocab=vocab, n_out=n_out, n_ctx=n_ctx)
    want = {t.name: tuple(t.shape) for group in _tensors(g) for t in group}
    if want != shapes:
        off = sorted(set(want) ^ set(shapes)) or sorted(k for k in want if want[k] != shapes[k])
        raise ExportError(f"{where}: {WEIGHTS} does not hold the state dict of its own "
                          f"geometry ({off[0]}: {shapes.get(off[0])}, expected "
                          f"{want.get(off[0])})")
    return g


def _check_config(config: dict, meta: dict[str, str], g: StockGeometry, where: str) -> None:
    """config.json's tw entry is the weights' metadata, and its model fields are the ones an
    export of this geometry writes (an edited activation, scale or size is refused)."""
    tw = config["tw"]
    theirs = {PREFIX + k: v for k, v in tw.items() if k not in CONFIG_ONLY}
    ours = {k: v for k, v in meta.items() if k.startswith(PREFIX)}
    if theirs != ours or not isinstance(tw.get("weights_sha256"), str):
        off = sorted(k for k in set(theirs) | set(ours) if theirs.get(k) != ours.get(k))
        what = off[0] if off else "tw.weights_sha256"
        raise ExportError(f"{where}: {CONFIG} and {WEIGHTS} come from different exports "
                          f"({what} differs); export it again")
    for key, value in tl_config(g).items():
        if key not in config or config[key] != value or type(config[key]) is not type(value):
            raise ExportError(f"{where}: {CONFIG} has {key}={config.get(key)!r}, the weights "
                              f"were written for {value!r}")


def _build(config: dict, g: StockGeometry, weights_path: str, device, where: str):
    try:
        import torch
        from safetensors.torch import load_file
        from transformer_lens import TransformerBridge, TransformerBridgeConfig
        from transformer_lens.utilities.tl_checkpoint_conversion import convert_tl_checkpoint
    except ImportError as e:
        raise ExportError(f"{where}: loading a tlens export needs {e.name!r} "
                          "(TransformerLens 4): pip install transformer-lens") from None
    fields = tl_config(g)
    fields.update(model_name=str(config.get("model_name") or "tw"), init_weights=False,
                  device=str(device))
    try:
        cfg = TransformerBridgeConfig(**fields)
        with torch.random.fork_rng(devices=[]):  # (the unused default init draws random numbers)
            bridge = TransformerBridge.boot_native(cfg, device=device)
        state = convert_tl_checkpoint(load_file(weights_path, device="cpu"), cfg)
        result = bridge.load_state_dict(state, strict=True)
    except Exception as e:  # noqa: BLE001 (a checked file still fails: one line, not theirs)
        raise ExportError(f"{where}: TransformerLens cannot load it ({type(e).__name__}: "
                          f"{show(str(e), quote=False, limit=160)})") from None
    if result.missing_keys or result.unexpected_keys:  # (strict raises first; kept as a guard)
        raise ExportError(f"{where}: the state dict does not fit TransformerLens's model "
                          f"(missing {result.missing_keys[:3]}, unexpected "
                          f"{result.unexpected_keys[:3]})")
    return bridge.eval()


__all__ = ["export_tlens", "load_tlens", "tl_config", "ATTN_SCALE"]
