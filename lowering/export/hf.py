"""The transformers export: a stock GPT-2 checkpoint (`GPT2LMHeadModel`), loadable with
`AutoModelForCausalLM.from_pretrained(path)` and `AutoTokenizer.from_pretrained(path)`, no
remote code.

GPT-2's machine is tw's with three differences, each made exact:

* **LayerNorm** before every sublayer and before the LM head: made an identity by the stock
  plan's twin columns and certified norm constant (`lowering/export/stock.py`): the config's
  `layer_norm_epsilon` is a power of four above the residual's variance bound * 2^24 and
  every norm's weight is its square root.
* **Attention scaling**: GPT-2 scales q.k by 1/sqrt(head_dim) (transformers, and vLLM, which
  ignores `scale_attn_weights`), and tw's attention is unscaled: the head width is one that
  every engine's kernels take and whose square root is a power of two (`ENGINE_HEAD_DIMS`:
  64 or 256), and W_Q and b_Q are pre-multiplied by sqrt(head_dim) (8 or 16), so every
  score is bit-identical to tw's.
* **Activation**: `activation_function="relu"`.

The learned position table is tw's position features (the constant 1, the position index, the
pos_encoding features), the token table tw's embedding, and the untied LM head reads the
output columns. A character tokenizer (`tokenizers` WordLevel, one token per character) for
the program's vocabulary is saved beside it. Weights are written a layer at a time
(`lowering/export/streaming.py`); the tw metadata sits in the config (`"tw"`) and in the
safetensors header.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Sequence

import numpy as np

from tw_lowering.export.metadata import (CONFIG_ONLY, PREFIX, SELF_KEY, ExportError,
                                         check_config, check_digests, check_metadata,
                                         check_sealed_json, config_record, digests_json,
                                         export_metadata, file_digests, graph_of, read_config,
                                         recorded_digests, sealed_json, show)
from tw_lowering.export.stock import StockPlan, end_id, engine_head_dim, token_strings
from tw_lowering.export.streaming import (DIGESTS_KEY, Tensor, check_safetensors, ensure_space,
                                       read_safetensors_header, write_safetensors)

FORMAT = "transformers"
CONFIG = "config.json"
WEIGHTS = "model.safetensors"


def export_transformers(ct, path, vocab: str | Sequence[str] | None = None,
                        end: str | None = None, n_positions: int | None = None,
                        norm_eps: float | None = None, prompt_rules=None,
                        tensor_parallel: int = 1) -> dict:
    """Write compiled model `ct` to directory `path` as a GPT-2 checkpoint with its tokenizer.

    `vocab`: the token strings by id (a str: one character each; default "<0>", "<1>", ...);
    `end`: the end token (generation's eos); `n_positions`: the position table's length
    (default: the graph's pos_encoding max_len); `norm_eps`: a LayerNorm constant to use
    instead of the smallest certified one (refused, naming that one, if it cannot be
    certified); `tensor_parallel`: heads and MLP width padded to multiples of it
    (zero heads and neurons), for `vllm serve --tensor-parallel-size` N; `prompt_rules`: (pattern, replacement) rewrites the tokenizer applies to a
    prompt before splitting it (a bundled program's PROMPT_RULES: `export/prompts.py`)."""
    t0 = time.perf_counter()
    plan = transformers_plan(ct, n_positions, tensor_parallel)
    g = plan.geometry
    tokens = token_strings(vocab, g.vocab, "transformers export")
    # (a causal LM's logits are over its own token ids: where the graph's outputs and its token
    # input differ in width, the narrower side is padded with zero rows: ids nothing embeds,
    # logits that read nothing; the metadata's geometry keeps both widths)
    tokens += [f"<{i}>" for i in range(len(tokens), max(g.vocab, g.n_out))]
    eos = end_id(end, tokens, "transformers export")
    eps = plan.norm_eps(norm_eps)
    ensure_space(path, 4 * g.params(), plan.trimmed_params(), "transformers export")
    os.makedirs(path, exist_ok=True)
    meta = export_metadata(ct, FORMAT, g.as_dict(), norm_eps=repr(eps), twins=int(
        (plan.twin_col >= 0).sum()), q_prescale=g.q_prescale)
    size = write_checkpoint(path, _config(g, eps, eos, meta), _groups(plan, eps), meta,
                            tokens, eos, g.n_ctx, rules=prompt_rules)
    return {"format": FORMAT, "path": str(path), "bytes": size,
            "padded_params": g.params(), "trimmed_params": plan.trimmed_params(),
            "geometry": g.as_dict(), "norm_eps": eps, "seconds": time.perf_counter() - t0}


def transformers_plan(ct, n_positions: int | None = None, shards: int = 1) -> StockPlan:
    """The stock layout of the GPT-2 export: twin columns (LayerNorm made exact), the head
    width tied to the residual (d_model = n_heads * head_dim, as GPT-2 derives it) and one of
    ENGINE_HEAD_DIMS; heads and MLP width multiples of `shards` (tensor parallelism)."""
    return StockPlan(ct, twins=True, tied_width=True, n_ctx=n_positions, fmt=FORMAT,
                     head_dims=engine_head_dim, shards=shards)


def _config(g, eps: float, eos: int | None, meta: dict) -> dict:
    return {
        "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
        "vocab_size": max(g.vocab, g.n_out), "n_positions": g.n_ctx, "n_embd": g.d_model,
        "n_layer": g.n_layers, "n_head": g.n_heads, "n_inner": g.d_mlp,
        "activation_function": "relu", "layer_norm_epsilon": eps,
        "scale_attn_weights": True, "scale_attn_by_inverse_layer_idx": False,
        "reorder_and_upcast_attn": False, "resid_pdrop": 0.0, "embd_pdrop": 0.0,
        "attn_pdrop": 0.0, "tie_word_embeddings": False, "use_cache": True,
        "bos_token_id": eos, "eos_token_id": eos, "pad_token_id": eos,
        "torch_dtype": "float32", "dtype": "float32",
        "tw": {k[len("tw."):]: v for k, v in meta.items()},
    }


def _groups(plan: StockPlan, eps: float):
    """(tensors, maker) per group: the tables first, then one layer at a time, then the head."""
    g = plan.geometry
    d, hd = g.d_model, g.n_heads * g.head_dim
    gain = np.full(d, np.sqrt(eps), np.float32)  # a power of two: eps is a power of four
    zero = np.zeros(d, np.float32)
    q_gain = float(g.q_prescale)
    v = max(g.vocab, g.n_out)
    yield ([Tensor("transformer.wte.weight", (v, d)),
            Tensor("transformer.wpe.weight", (g.n_ctx, d))],
           lambda: {"transformer.wte.weight": _rows_padded(plan.embedding(), v),
                    "transformer.wpe.weight": plan.positions()})
    for i in range(g.n_layers):
        p = f"transformer.h.{i}."
        names = [(p + "ln_1.weight", (d,)), (p + "ln_1.bias", (d,)),
                 (p + "attn.c_attn.weight", (d, 3 * hd)), (p + "attn.c_attn.bias", (3 * hd,)),
                 (p + "attn.c_proj.weight", (hd, d)), (p + "attn.c_proj.bias", (d,)),
                 (p + "ln_2.weight", (d,)), (p + "ln_2.bias", (d,)),
                 (p + "mlp.c_fc.weight", (d, g.d_mlp)), (p + "mlp.c_fc.bias", (g.d_mlp,)),
                 (p + "mlp.c_proj.weight", (g.d_mlp, d)), (p + "mlp.c_proj.bias", (d,))]

        def make(i=i, p=p):
            w = plan.layer(i)
            heads = [w[k].transpose(1, 0, 2).reshape(d, hd) for k in ("W_Q", "W_K", "W_V")]
            heads[0] = heads[0] * q_gain  # (undoes the engine's 1/sqrt(head_dim) exactly)
            return {p + "ln_1.weight": gain, p + "ln_1.bias": zero,
                    p + "attn.c_attn.weight": np.concatenate(heads, axis=1),
                    p + "attn.c_attn.bias": np.concatenate([w["b_Q"].ravel() * q_gain,
                                                            w["b_K"].ravel(),
                                                            w["b_V"].ravel()]),
                    p + "attn.c_proj.weight": w["W_O"].reshape(hd, d),
                    p + "attn.c_proj.bias": w["b_O"],
                    p + "ln_2.weight": gain, p + "ln_2.bias": zero,
                    p + "mlp.c_fc.weight": w["W_in"], p + "mlp.c_fc.bias": w["b_in"],
                    p + "mlp.c_proj.weight": w["W_out"], p + "mlp.c_proj.bias": w["b_out"]}

        yield [Tensor(n, s) for n, s in names], make
    yield ([Tensor("transformer.ln_f.weight", (d,)), Tensor("transformer.ln_f.bias", (d,)),
            Tensor("lm_head.weight", (v, d))],
           lambda: {"transformer.ln_f.weight": gain, "transformer.ln_f.bias": zero,
                    "lm_head.weight": _rows_padded(plan.unembedding().T, v)})


def _rows_padded(a: np.ndarray, n: int) -> np.ndarray:
    """a with zero rows appended up to n rows."""
    out = np.zeros((n,) + a.shape[1:], np.float32)
    out[: a.shape[0]] = a
    return out


# Files beside a checkpoint that transformers may read (weights, configs, tokenizer parts,
# chat templates): one tw did not write is refused, as it could change the answers.
READ_BY_TRANSFORMERS = re.compile(r".*\.(json|safetensors|bin|pt|pth|h5|msgpack|model|jinja|"
                                  r"gguf)|merges\.txt|vocab\.txt")


def _check_no_foreign_files(path, written: set[str], where: str) -> None:
    """Refuse a file in the export's folder that tw did not write and transformers reads."""
    try:
        names = sorted(os.listdir(path))
    except OSError as e:
        raise ExportError(f"{where}: cannot list the export's folder ({e.strerror})") from None
    for name in names:
        if name not in written and READ_BY_TRANSFORMERS.fullmatch(name) \
                and os.path.isfile(os.path.join(path, name)):
            raise ExportError(f"{where}: holds {show(name)}, which tw did not write and "
                              "transformers would read; remove it or export again")


def _write_tokenizer(path, tokens: list[str], eos: int | None, n_ctx: int,
                     rules=None) -> list[str]:
    """One token per character (or per given token string): WordLevel over the vocabulary,
    split into single characters when every token is one, joined back without spaces; with
    `rules` (checked prompt rules), a normalizer that rewrites the prompt first, as the
    program's `normalize` does. Returns the names of the files written."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    unk = tokens[eos] if eos is not None else tokens[0]
    tok = Tokenizer(models.WordLevel({t: i for i, t in enumerate(tokens)}, unk_token=unk))
    if all(len(t) == 1 for t in tokens):
        tok.pre_tokenizer = pre_tokenizers.Split(Regex("(?m)."), behavior="isolated")
    else:  # (longest tokens first, so "<10>" is not read as "<1" "0>")
        alts = "|".join(re.escape(t) for t in sorted(tokens, key=len, reverse=True))
        tok.pre_tokenizer = pre_tokenizers.Split(Regex(alts), behavior="isolated")
    tok.decoder = decoders.Fuse()
    if rules:
        from tw_lowering.export.prompts import tokenizer_normalizer

        tok.normalizer = tokenizer_normalizer(rules)
    special = {} if eos is None else {"eos_token": tokens[eos], "pad_token": tokens[eos]}
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, model_max_length=n_ctx,
                                   clean_up_tokenization_spaces=False, **special)
    return [os.path.basename(os.fspath(f)) for f in fast.save_pretrained(path)
            if os.path.isfile(f)]


def write_checkpoint(path, config: dict, groups, meta: dict, tokens, eos, n_ctx: int,
                     rules=None) -> int:
    """A transformers checkpoint in `path`: generation_config.json (greedy, ending at `eos`),
    model.safetensors (the tensors of `groups`, with tw's metadata, the config's fields
    (`tw.config`) and each tensor's sha256), the tokenizer, then config.json, whose "tw" entry
    is that metadata plus each other file's sha256 (`files_sha256`); returns the safetensors
    file's size. The one writer of every transformers architecture tw exports. `rules`: the
    prompt rules, checked, put in the tokenizer and recorded (`tw.prompt_rules`)."""
    meta = {**meta, PREFIX + "config": json.dumps(config_record(config), sort_keys=True)}
    if rules:
        from tw_lowering.export.prompts import check_rules, rules_json

        rules = check_rules(rules, tokens, f"{meta.get(PREFIX + 'format', 'export')} export")
        meta[PREFIX + "prompt_rules"] = rules_json(rules)
    config_path = os.path.join(path, CONFIG)
    if os.path.exists(config_path):  # (a crash below must not leave an old config beside)
        os.remove(config_path)
    files = ["generation_config.json", WEIGHTS]
    with open(os.path.join(path, files[0]), "w") as f:
        json.dump({"do_sample": False, "eos_token_id": eos, "pad_token_id": eos,
                   "bos_token_id": eos, "max_length": n_ctx}, f, indent=2, sort_keys=True)
    digests: dict[str, str] = {}
    size = write_safetensors(os.path.join(path, WEIGHTS), groups, {"format": "pt", **meta},
                             digests)
    meta[DIGESTS_KEY] = digests_json(digests)
    files += [f for f in _write_tokenizer(path, tokens, eos, n_ctx, rules)
              if f not in files + [CONFIG]]
    tw = {k[len(PREFIX):]: v for k, v in meta.items()}
    tw["files_sha256"] = {f: file_digests(os.path.join(path, f))[0] for f in sorted(files)}
    with open(config_path, "w") as f:
        f.write(sealed_json({**config, "tw": tw}))
    return size


def load_transformers(path, graph=None, device: str = "cpu"):
    """The export at `path` as (model, tokenizer), checked first (`load_checked`)."""
    return load_checked(path, FORMAT, lambda config: {
        "n_layers": config.get("n_layer"), "d_model": config.get("n_embd"),
        "n_heads": config.get("n_head"), "d_mlp": config.get("n_inner"),
        "n_ctx": config.get("n_positions")}, graph, device)


def load_checked(path, fmt: str, geometry_of, graph=None, device: str = "cpu"):
    """A transformers export at `path` (format `fmt`) as (model, tokenizer), after
    `check_checkpoint`: the one loader of every transformers architecture tw writes. Whatever
    transformers still raises on a checked export is one ExportError line too."""
    where = str(path)
    check_checkpoint(path, fmt, geometry_of, graph_of(graph, where), where)
    try:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        model = AutoModelForCausalLM.from_pretrained(path, dtype="float32").to(device).eval()
        return model, AutoTokenizer.from_pretrained(path)
    except ImportError as e:
        raise ExportError(f"{where}: loading a {fmt} export needs {e.name!r}: pip install "
                          "'tw-compiler[export]'") from None
    except Exception as e:  # noqa: BLE001 (transformers raises many classes; none may escape)
        raise ExportError(f"{where}: transformers cannot load it ({type(e).__name__}: "
                          f"{show(str(e), quote=False, limit=160)})") from None


def check_checkpoint(path, fmt: str, geometry_of, graph=None, where: str = "export") -> dict:
    """Refuse, one ExportError line naming the file and what differs, a transformers export
    that is not what tw wrote: config.json's tw metadata (`check_metadata`; `geometry_of(config)`
    reads the geometry in the architecture's own config names), the weights header's copy of
    it, every config field against the recorded ones (an edited activation or norm constant),
    each tensor's sha256 (naming the tensor) and each file's. Returns the decoded metadata."""
    config, raw = read_config(os.path.join(path, CONFIG), where)
    tw = config["tw"]
    cfg_meta = {PREFIX + str(k): v for k, v in tw.items() if k not in CONFIG_ONLY}
    check_metadata(cfg_meta, fmt, graph, geometry_of(config), where=f"{where} {CONFIG}")
    weights = os.path.join(path, WEIGHTS)
    meta, _ = read_safetensors_header(weights, where)
    decoded = check_metadata(meta, fmt, graph, geometry_of(config), where=where)
    off = sorted(k for k in set(meta) | set(cfg_meta)
                 if k.startswith(PREFIX) and meta.get(k) != cfg_meta.get(k))
    if off:
        raise ExportError(f"{where}: {CONFIG} and {WEIGHTS} come from different exports "
                          f"({off[0]} differs); export it again")
    check_config(config, decoded.get("config"), where, CONFIG)
    files = recorded_digests(tw.get("files_sha256"), where, f"{CONFIG}'s tw.files_sha256")
    if WEIGHTS not in files:
        raise ExportError(f"{where}: {CONFIG} records no sha256 of {WEIGHTS}; export it again")
    check_safetensors(weights, meta, where, files[WEIGHTS])
    found = {}
    for name in files:
        if name != WEIGHTS and os.path.isfile(os.path.join(path, name)):
            try:
                found[name] = file_digests(os.path.join(path, name))[0]
            except OSError as e:
                raise ExportError(f"{where}: cannot read {name} ({type(e).__name__})") from None
    check_digests({k: v for k, v in files.items() if k != WEIGHTS}, found, where,
                  "the export", kind="file")
    _check_no_foreign_files(path, set(files) | {CONFIG}, where)
    check_sealed_json(raw, tw.get(SELF_KEY), where, CONFIG)
    return decoded
