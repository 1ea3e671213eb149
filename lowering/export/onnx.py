"""ONNX export of a compiled model: the runtime's trimmed layers as a stock ONNX graph with a
KV cache, weights streamed to an external data file, and a loader that checks tw's metadata.

`export_onnx(ct, path)` writes a directory `path` holding `model.onnx` (the graph, ~KB) and
`model.onnx.data` (every weight, written a layer at a time: nothing but the compiled model and
one array is held while writing; a one-element tensor stays in model.onnx, where onnxruntime's
constant sharing may lend it to a shape input that must be readable at load). The graph is built node by node with `onnx.helper` (no
tracing), so two exports of one model are byte-identical. onnxruntime's CPU provider runs it
with default session options and gives `ct.run`'s numbers to float32 round-off.

**Inputs** (batch and new positions are dynamic; the first new position is the past length):

* each graph input by name: token ids int64 (batch, new) for a `tw.embedding`, float32
  (batch, new, width) for a `tw.input`;
* `past_kv_<L>` float32 (batch, heads, past, 2 head_dim) per layer L whose attention sublayer
  runs heads (each head's keys then values side by side, the runtime's cache layout); past may
  be 0 (prefill is the same graph, onnxruntime takes zero-sized inputs);
* `position_offset` int64 scalar, the first new position, only in a model without such layers;
* `new_positions` int64 scalar, the count of new positions, only in a graph without inputs
  (batch 1).

**Outputs**: each graph output by name, float32 (batch, new, width), a literal component's
scale applied (`CompiledTransformer.read_outputs`), then `present_kv_<L>` (past and the new
keys and values).

**The graph**, per sublayer exactly the runtime's computation on the (batch, new, d) residual:
Gather the `read` columns, MatMul by the fused QKV block, split q / kv, concatenate the past,
q k^T with scale 1 plus a causal mask over absolute positions (a query at p sees keys <= p),
Softmax, @ v, MatMul by W_o, Add the bias *after* the product (`lowering.model.affine`: a
cancelling hinge pair stays exact only that way), slice off the MIN_OUT padding columns and
ScatterElements(reduction="add") into the `write` columns. The MLP likewise (MatMul W1, Add
b1, Relu, MatMul W2, Add b2; a layer with swish neurons takes Where(swish, z Sigmoid(z),
Relu(z)), one with gated neurons multiplies by MatMul Wu, Add bu: the runtime's lanes). The stored blocks are the runtime's own, padded zero columns
included (a one-column product goes to a matrix-vector kernel that sums in another order).
Products stay 3-D: onnxruntime fuses MatMul + Add into Gemm only for 2-D products (its Gemm
adds the bias last as well, measured, but another runtime's need not).

The residual is built in the graph: the constant-1 column, the position column, the
pos_encoding features (the runtime's table: float64 computed, float32 stored, `n_positions`
rows), the rows of each `tw.pos_table` (Gather at the positions), embedding rows and real
inputs, concatenated and placed by one column Gather. A model with full-mask heads is refused
(the KV-cache graph steps position by position: a bidirectional head has no such form).
Rotary heads (`tw.attn ... rope`) are carried: per layer with some, q and the new keys turn
by their absolute positions before the past is joined (x cos + (x R) sin, R a per-head
signed partner matrix, the angles' cos and sin computed in float64 and cast to float32, as
the runtime does; the cache holds turned keys).

Not carried over: the runtime's exact recomputation of rows that see a non-finite value
(`lowering.model.attend`): here a masked position's inf or nan spreads as IEEE arithmetic
makes it. Inputs the contract accepts keep every value finite.

`load_onnx(path, graph=None)` opens it with onnxruntime, checks the metadata
(`lowering.export.metadata.check_metadata`: format, version, the graph hash when `graph` is
given, the file's KV geometry against the recorded one) and offers `run` and `generate` with
`CompiledTransformer`'s contract (inputs checked by `twdialect.inputs.check_inputs`).
"""

from __future__ import annotations

import hashlib
import os
import time
from collections import Counter
from collections.abc import Callable, Mapping

import numpy as np

from tw_lowering.export.metadata import (
    PLACEHOLDER,
    ExportError,
    check_causal,
    check_file,
    check_metadata,
    digest,
    digests_json,
    export_metadata,
    recorded_digests,
    tw_version,
)
from tw_lowering.export.prompts import rules_metadata
from tw_lowering.progress import report

MODEL_FILE = "model.onnx"
DATA_FILE = "model.onnx.data"
OPSET = 18  # ScatterElements(reduction="add") needs 16, Split's sizes as an input 13
IR_VERSION = 8  # the IR of opset 18 (onnx 1.13): loadable by older runtimes too
ALIGN = 64  # byte alignment of every tensor in the data file
INLINE_MAX = 1  # tensors of at most this many elements stay in model.onnx (`_Builder.weight`)
MAX_POSITIONS = 1 << 24  # float32 holds every position index below this exactly
RESERVED = ("position_offset", "new_positions")
MODEL_KEY = "tw.model_sha256"  # model.onnx's own sha256, read with its value as PLACEHOLDER


# -- the graph writer ----------------------------------------------------------------------


class _Builder:
    """Nodes and initializers in order; weights go straight to the data file."""

    def __init__(self, data):
        from onnx import TensorProto, helper, numpy_helper

        self.helper, self.numpy_helper, self.TensorProto = helper, numpy_helper, TensorProto
        self.nodes, self.inits = [], []
        self.data, self.offset = data, 0
        self.floats = 0
        self.digests, self.data_hash = {}, hashlib.sha256()  # (what the loader checks)

    def const(self, name: str, array) -> str:
        """A small constant (shapes, indices of one element, scalars), kept in the graph."""
        self.inits.append(self.numpy_helper.from_array(np.asarray(array), name))
        return name

    def weight(self, name: str, array) -> str:
        """An array written to the data file now (aligned), referenced by offset; one of at
        most one element stays in the graph (`INLINE_MAX`: onnxruntime's constant sharing
        merges equal one-element initializers, and a shape input such as Unsqueeze's axes
        that it points at an external one cannot be read at load)."""
        a = np.asarray(array)
        a = np.ascontiguousarray(a, a.dtype.newbyteorder("<"))
        if a.dtype.kind == "f":
            self.floats += a.size
        if a.size <= INLINE_MAX:  # (model.onnx's own sha256 covers it)
            return self.const(name, a)
        pad = (-self.offset) % ALIGN
        self.data.write(b"\0" * pad)
        self.data_hash.update(b"\0" * pad)
        self.offset += pad
        t = self.TensorProto()
        t.name = name
        t.data_type = self.helper.np_dtype_to_tensor_dtype(a.dtype)
        t.dims.extend(a.shape)
        t.data_location = self.TensorProto.EXTERNAL
        for key, value in (("location", DATA_FILE), ("offset", str(self.offset)),
                           ("length", str(a.nbytes))):
            entry = t.external_data.add()
            entry.key, entry.value = key, value
        self.data.write(a.tobytes())
        self.data_hash.update(a.tobytes())
        self.digests[name] = digest(a)
        self.offset += a.nbytes
        self.inits.append(t)
        return name

    def op(self, op_type: str, inputs, name: str, n_out: int = 1, outputs=None, **attrs):
        """One node named `name`; its output(s) are named after it unless `outputs` given."""
        outs = list(outputs) if outputs else (
            [name] if n_out == 1 else [f"{name}:{i}" for i in range(n_out)])
        self.nodes.append(self.helper.make_node(op_type, list(inputs), outs, name=name, **attrs))
        return outs[0] if len(outs) == 1 else outs


def _numpy(t) -> np.ndarray:
    return t.detach().cpu().numpy()


def _check_n_positions(n_positions, max_len) -> int | None:
    if n_positions is None:
        return max_len
    if isinstance(n_positions, bool) or not isinstance(n_positions, (int, np.integer)) \
            or not 1 <= n_positions <= MAX_POSITIONS:
        raise ExportError(f"export_onnx: n_positions must be a whole number in [1, "
                          f"{MAX_POSITIONS}], got {n_positions!r}")
    return int(n_positions)


def _check_names(ct, kv_layers) -> None:
    """Graph inputs and outputs become ONNX value names: they must not meet each other or the
    names the export uses itself."""
    taken = set(RESERVED) | {f"{p}_kv_{i}" for i in kv_layers for p in ("past", "present")}
    seen: dict[str, str] = {}
    for kind, name in ([("input", s.name) for s in ct.contract.specs]
                       + [("output", o.name) for o in ct.outputs]):
        if not name or name in taken or name.startswith("/") or name in seen:
            why = (f"is also an {seen[name]}" if name in seen else
                   "is empty" if not name else "is a name the ONNX graph uses itself")
            raise ExportError(f"export_onnx: {kind} name {name!r} {why}; rename it in the graph")
        seen[name] = kind


def export_onnx(ct, path, n_positions: int | None = None, prompt_rules=None) -> dict:
    """Write compiled model `ct` as an ONNX model with a KV cache into directory `path`
    (`model.onnx` and its weights `model.onnx.data`; see the module docstring). `n_positions`:
    the positions the pos_encoding table covers (default: the graph's max_len; a graph without
    pos_encoding features has no table and no limit but its own). `prompt_rules`: a token
    program's prompt rewrites, recorded only (`tw.prompt_rules`: the model takes token ids).
    Returns {"format", "path", "files" ({name: bytes}), "bytes" (both files), "params"
    (floats stored: the runtime's trimmed blocks, `trimmed_params`, plus the embedding and
    position tables), "dense_params" (the stock layout's count, `ct.allocated_params()`),
    "seconds"}."""
    check_causal(ct, "onnx")
    import onnx
    from onnx import TensorProto, helper

    start_time = time.perf_counter()
    m = ct.machine
    d = m.d
    kv_layers = [i for i, layer in enumerate(ct.layers) if layer.attn.active]
    _check_names(ct, kv_layers)
    pos_width = max((s.pos_width for s in ct.sources if s.kind == "pos"), default=1)
    # (without a feature table nothing limits the positions but the graph's own contract)
    n_pos = _check_n_positions(n_positions, ct.contract.max_len if pos_width > 1 else None)
    if pos_width > 1 and n_pos is None:
        raise ExportError("export_onnx: the graph reads pos_encoding features but declares no "
                          "max_len; pass n_positions")
    heads = {i: (ct.layers[i].attn.n_heads, ct.layers[i].attn.head_dim) for i in kv_layers}
    specs = ct.contract.specs
    meta = export_metadata(ct, "onnx", _geometry(ct, heads, n_pos), inputs={
        "specs": [_spec_json(s) for s in specs], "max_len": ct.contract.max_len,
        "table_len": ct.contract.table_len},
        outputs=[[o.name, len(o.rows)] for o in ct.outputs],
        positions="past_kv" if kv_layers else "position_offset", opset=OPSET)
    meta.update(rules_metadata(prompt_rules, "export_onnx"))
    path = os.fspath(path)
    if os.path.exists(path) and not os.path.isdir(path):
        raise ExportError(f"export_onnx: {path!r} is a file; the ONNX export is a directory "
                          "(model.onnx and model.onnx.data)")
    os.makedirs(path, exist_ok=True)
    model_path, data_path = os.path.join(path, MODEL_FILE), os.path.join(path, DATA_FILE)

    inputs, outputs = [], []
    with open(data_path, "wb") as data:
        b = _Builder(data)
        one_i = b.const("/one_i64", np.array(1, np.int64))
        one_1 = b.const("/one_1d", np.array([1], np.int64))

        # -- positions: the first new one is the past length ----------------------------
        for s in specs:
            if s.kind == "embedding":
                inputs.append(helper.make_tensor_value_info(s.name, TensorProto.INT64,
                                                            ["batch", "new"]))
            else:
                inputs.append(helper.make_tensor_value_info(s.name, TensorProto.FLOAT,
                                                            ["batch", "new", s.width]))
        if specs:
            carrier = specs[0].name
            bn = b.op("Shape", [carrier], "/batch_new", start=0, end=2)
            new = b.op("Squeeze", [b.op("Shape", [carrier], "/new_1d", start=1, end=2)], "/new")
        else:
            inputs.append(helper.make_tensor_value_info("new_positions", TensorProto.INT64, []))
            new = "new_positions"
            bn = b.op("Concat", [one_1, b.op("Reshape", [new, one_1], "/new_1d")], "/batch_new",
                      axis=0)
        for i in kv_layers:
            h, e = heads[i]
            inputs.append(helper.make_tensor_value_info(f"past_kv_{i}", TensorProto.FLOAT,
                                                        ["batch", h, "past", 2 * e]))
        if kv_layers:
            offset = b.op("Squeeze", [b.op("Shape", [f"past_kv_{kv_layers[0]}"], "/past_1d",
                                           start=2, end=3)], "/past")
        else:
            inputs.append(helper.make_tensor_value_info("position_offset", TensorProto.INT64, []))
            offset = "position_offset"
        total = b.op("Add", [offset, new], "/total")
        positions = b.op("Range", [offset, total, one_i], "/positions")  # (new,)
        bn1 = b.op("Concat", [bn, one_1], "/batch_new_1", axis=0)  # Expand target (b, n, 1)

        # -- the residual before layer 0 ------------------------------------------------
        axis0 = b.const("/axis0", np.array([0], np.int64))
        new_1 = b.op("Concat", [b.op("Unsqueeze", [new, axis0], "/new_1d_"), one_1], "/new_by_1",
                     axis=0)
        ones = b.op("ConstantOfShape", [new_1], "/ones", value=helper.make_tensor(
            "one", TensorProto.FLOAT, [1], [1.0]))
        zeros = b.op("ConstantOfShape", [new_1], "/zeros", value=helper.make_tensor(
            "zero", TensorProto.FLOAT, [1], [0.0]))
        posf = b.op("Unsqueeze", [b.op("Cast", [positions], "/positions_f", to=TensorProto.FLOAT),
                                  one_1], "/pos_col")
        shared = [ones, zeros, posf]
        at = {"one": 0, "zero": 1, "pos": 2}
        width = 3
        if pos_width > 1:
            from tw_lowering.materialize import position_rows

            table = np.asarray(position_rows(0, n_pos, pos_width)[:, 1:], np.float32)
            shared.append(b.op("Gather", [b.weight("pos_table", table), positions],
                               "/pos_features", axis=0))
            at["table"] = width
            width += table.shape[1]
        for k, s in enumerate(ct.sources):  # the graph's own position tables: row p at p
            if s.kind == "pos_table":
                shared.append(b.op("Gather", [b.weight(f"pos_table_{k}", s.table.astype(
                    np.float32)), positions], f"/pos_table_{k}", axis=0))
                at[f"pos_table_{k}"] = width
                width += s.table.shape[1]
        pieces = [b.op("Expand", [b.op("Concat", shared, "/shared", axis=1), bn1],
                       "/shared_rows")]
        perm = np.full(d, at["zero"], np.int64)
        perm[m.CONST_COL], perm[m.POS_COL] = at["one"], at["pos"]
        for k, s in enumerate(ct.sources):  # (in order: a later source overwrites, as there)
            cols = np.asarray(s.cols, np.int64)
            if s.kind == "pos":
                if len(cols):
                    perm[cols] = at["table"] + np.arange(len(cols))
                continue
            if s.kind == "pos_table":
                perm[cols] = at[f"pos_table_{k}"] + np.arange(len(cols))
                continue
            if s.kind == "embedding":
                pieces.append(b.op("Gather", [b.weight(f"embedding_{k}", s.table.astype(
                    np.float32)), s.name], f"/embed_{k}", axis=0))
            else:
                pieces.append(s.name)
            perm[cols] = width + np.arange(len(cols))
            width += len(cols)
        x = b.op("Gather", [b.op("Concat", pieces, "/sources", axis=2),
                            b.weight("residual_columns", perm)], "/x0", axis=2)

        if kv_layers:  # 0 where a query at absolute position p may see key j (j <= p)
            zero_i = b.const("/zero_i64", np.array(0, np.int64))
            keys = b.op("Range", [zero_i, total, one_i], "/key_positions")
            visible = b.op("LessOrEqual", [
                b.op("Unsqueeze", [keys, axis0], "/keys_row"),
                b.op("Unsqueeze", [positions, one_1], "/queries_col")], "/visible")
            mask = b.op("Where", [visible, b.const("/zero_f", np.array(0.0, np.float32)),
                                  b.const("/ninf_f", np.array(-np.inf, np.float32))], "/mask")

        # -- the layers, streamed --------------------------------------------------------
        def product(a, w, bias, name):
            return b.op("Add", [b.op("MatMul", [a, w], f"{name}_mm"), bias], name)

        def gather(read, name):
            read = np.asarray(read, np.int64)
            if not len(read):  # a product over no columns: one zero row over the constant
                read = np.array([m.CONST_COL], np.int64)
            return b.op("Gather", [x, b.weight(f"{name}.read", read)], f"/{name}/in", axis=2)

        def place(delta, write, pad_width, name):
            """x with delta (b, n, pad_width) added into the `write` columns."""
            c = len(write)
            if pad_width != c:
                delta = b.op("Slice", [delta, b.const(f"/{name}/s0", np.array([0], np.int64)),
                                       b.const(f"/{name}/s1", np.array([c], np.int64)),
                                       b.const(f"/{name}/s2", np.array([2], np.int64))],
                             f"/{name}/delta")
            index = b.op("Expand", [b.weight(f"{name}.write", np.asarray(write, np.int64)), bn1],
                         f"/{name}/index")
            return b.op("ScatterElements", [x, index, delta], f"/{name}/out", axis=2,
                        reduction="add")

        def rows_if_empty(w, read):
            return w if len(read) else np.zeros((1, w.shape[1]), np.float32)

        for i, layer in enumerate(ct.layers):
            report("export", i, len(ct.layers))
            a, mlp = layer.attn, layer.mlp
            name = f"layers.{i}.attn"
            if a.active:
                h, e = heads[i]
                read = _numpy(a.read)
                qkv = b.op("MatMul", [gather(read, name), b.weight(
                    f"{name}.w_qkv", rows_if_empty(_numpy(a.w_qkv), read))], f"/{name}/qkv")
                q, kv = b.op("Split", [qkv, b.const(f"/{name}/split_sizes", np.array(
                    [h * e, 2 * h * e], np.int64))], f"/{name}/split", n_out=2, axis=2)
                q = b.op("Transpose", [b.op("Reshape", [q, b.const(
                    f"/{name}/q_shape", np.array([0, 0, h, e], np.int64))],
                    f"/{name}/q_heads")], f"/{name}/q", perm=[0, 2, 1, 3])
                kv = b.op("Transpose", [b.op("Reshape", [kv, b.const(
                    f"/{name}/kv_shape", np.array([0, 0, h, 2 * e], np.int64))],
                    f"/{name}/kv_heads")], f"/{name}/kv", perm=[0, 2, 1, 3])
                if a.n_rope:  # rotary heads: q and the new keys turn by absolute position
                    q, kv = _rotate(b, a, q, kv, positions, name)
                present = b.op("Concat", [f"past_kv_{i}", kv], f"/{name}/present", axis=2,
                               outputs=[f"present_kv_{i}"])
                outputs.append(helper.make_tensor_value_info(present, TensorProto.FLOAT,
                                                             ["batch", h, "total", 2 * e]))
                k, v = b.op("Split", [present, b.const(f"/{name}/kv_split", np.array(
                    [e, e], np.int64))], f"/{name}/k_v", n_out=2, axis=3)
                logits = b.op("MatMul", [q, b.op("Transpose", [k], f"/{name}/k_t",
                                                 perm=[0, 1, 3, 2])], f"/{name}/logits")
                p = b.op("Softmax", [b.op("Add", [logits, mask], f"/{name}/masked")],
                         f"/{name}/p", axis=-1)
                heads_out = b.op("Reshape", [b.op("Transpose", [b.op(
                    "MatMul", [p, v], f"/{name}/pv")], f"/{name}/pv_t", perm=[0, 2, 1, 3]),
                    b.const(f"/{name}/o_shape", np.array([0, 0, h * e], np.int64))],
                    f"/{name}/heads")
                w_o = _numpy(a.w_o)
                delta = product(heads_out, b.weight(f"{name}.w_o", w_o),
                                b.weight(f"{name}.b_o", _numpy(a.b_o)), f"/{name}/delta_pad")
                x = place(delta, _numpy(a.write), w_o.shape[1], name)
            elif a.n_write:  # no heads: the output bias alone
                c = a.n_write
                x = place(b.op("Expand", [b.weight(f"{name}.b_o", _numpy(a.b_o)[:c]), bn1],
                               f"/{name}/bias"), _numpy(a.write), c, name)
            name = f"layers.{i}.mlp"
            if mlp.n_write and mlp.n_neurons:
                read = _numpy(mlp.read)
                src = gather(read, name)
                pre = product(src, b.weight(f"{name}.w1", rows_if_empty(_numpy(mlp.w1), read)),
                              b.weight(f"{name}.b1", _numpy(mlp.b1)), f"/{name}/pre")
                hidden = b.op("Relu", [pre], f"/{name}/hidden")
                if mlp.swish is not None:  # swish neurons: z * sigmoid(z), relu elsewhere
                    silu = b.op("Mul", [pre, b.op("Sigmoid", [pre], f"/{name}/sigmoid")],
                                f"/{name}/silu")
                    hidden = b.op("Where", [b.weight(f"{name}.swish", _numpy(mlp.swish)), silu,
                                            hidden], f"/{name}/act")
                if mlp.wu is not None:  # gated neurons: times x Wu + bu (1 elsewhere)
                    up = product(src, b.weight(f"{name}.wu", rows_if_empty(_numpy(mlp.wu), read)),
                                 b.weight(f"{name}.bu", _numpy(mlp.bu)), f"/{name}/up")
                    hidden = b.op("Mul", [hidden, up], f"/{name}/lanes")
                w2 = _numpy(mlp.w2)
                delta = product(hidden, b.weight(f"{name}.w2", w2),
                                b.weight(f"{name}.b2", _numpy(mlp.b2)), f"/{name}/delta_pad")
                x = place(delta, _numpy(mlp.write), w2.shape[1], name)
            elif mlp.n_write:
                c = mlp.n_write
                x = place(b.op("Expand", [b.weight(f"{name}.b2", _numpy(mlp.b2)[:c]), bn1],
                               f"/{name}/bias"), _numpy(mlp.write), c, name)

        report("export", len(ct.layers), len(ct.layers))
        # -- outputs ---------------------------------------------------------------------
        graph_outputs = []
        for k, o in enumerate(ct.outputs):
            rows = b.weight(f"output_{k}.columns", np.asarray(o.rows, np.int64))
            scale = np.asarray(o.scale, np.float64)
            if np.all(scale == 1.0):
                b.op("Gather", [x, rows], f"/output_{k}", axis=2, outputs=[o.name])
            else:
                cols = b.op("Gather", [x, rows], f"/output_{k}/columns", axis=2)
                b.op("Mul", [cols, b.weight(f"output_{k}.scale", scale.astype(np.float32))],
                     f"/output_{k}", outputs=[o.name])
            graph_outputs.append(helper.make_tensor_value_info(
                o.name, TensorProto.FLOAT, ["batch", "new", len(o.rows)]))
        data_bytes = b.offset

    made = Counter([t.name for t in b.inits] + [o for n in b.nodes for o in n.output]
                   + [s.name for s in specs])
    clash = sorted(k for k, n in made.items() if n > 1)
    if clash:
        raise ExportError(f"export_onnx: the name {clash[0]!r} (a graph input or output) is a "
                          "name the ONNX graph uses itself; rename it in the graph")
    graph = helper.make_graph(b.nodes, "tw", inputs, graph_outputs + outputs, b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="tw", producer_version=tw_version())
    model.ir_version = IR_VERSION
    meta = {**meta, "tw.data_sha256": b.data_hash.hexdigest(),
            "tw.tensor_sha256": digests_json(b.digests), MODEL_KEY: PLACEHOLDER}
    helper.set_model_props(model, meta)
    blob = _sealed(model.SerializeToString(deterministic=True))
    with open(model_path, "wb") as f:
        f.write(blob)
    onnx.checker.check_model(model_path)
    files = {MODEL_FILE: len(blob), DATA_FILE: data_bytes}
    return {"format": "onnx", "path": path, "files": files, "bytes": sum(files.values()),
            "params": b.floats, "trimmed_params": ct.stored_params(),
            "dense_params": ct.allocated_params(), "seconds": time.perf_counter() - start_time}


def _seal(value: str) -> bytes:
    """The serialized metadata entry {MODEL_KEY: value} (StringStringEntryProto: key field 1,
    value field 2, both length-delimited): where model.onnx holds its own sha256."""
    key = MODEL_KEY.encode()
    return b"\x0a" + bytes([len(key)]) + key + b"\x12" + bytes([len(value)]) + value.encode()


def _sealed(blob: bytes) -> bytes:
    """`blob` (a model whose MODEL_KEY is PLACEHOLDER) with that value replaced by the sha256
    of `blob` itself: any later change of a byte of model.onnx is seen by the loader."""
    if blob.count(_seal(PLACEHOLDER)) != 1:
        raise AssertionError("model.onnx's digest entry is not where it was put")
    return blob.replace(_seal(PLACEHOLDER), _seal(hashlib.sha256(blob).hexdigest()))


def _rope_arrays(a) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The runtime's rotary tables of attention sublayer `a` (`Attention._rope_tables`) over
    all its heads, for q (h, 1, e) and for the k-then-v rows (h, 1, 2e): float64 frequencies
    (0: not rotated) and per head the (width, width) matrix taking a row to its sign-folded
    rotate_half partners (zero for unrotated dims, so they pass exactly)."""
    h, e = a.n_heads, a.head_dim
    heads = _numpy(a.rope_heads)
    freq = np.zeros((h, 1, 2 * e))
    freq[heads, 0, :e] = _numpy(a.rope_freq)
    mix = np.zeros((h, 2 * e, 2 * e), np.float32)
    partner = _numpy(a.rope_partner).reshape(len(heads), e) % e
    sign = _numpy(a.rope_sign)
    for r, head in enumerate(heads):
        mix[head, partner[r], np.arange(e)] = sign[r]
    return freq[:, :, :e], mix[:, :e, :e], freq, mix


def _rotate(b, a, q, kv, positions, name):
    """q (batch, h, new, e) and kv (batch, h, new, 2e) with the rotary heads' q and k turned
    by `positions` (new,): x cos + (x R) sin, cos and sin of the float64 angles rounded to
    float32, as `lowering.model.Attention.rotate` computes them."""
    from onnx import TensorProto

    fq, mq, fkv, mkv = _rope_arrays(a)
    pos = b.op("Unsqueeze", [b.op("Cast", [positions], f"/{name}/rope_pos", to=TensorProto.DOUBLE),
                             b.const(f"/{name}/rope_axis", np.array([1], np.int64))],
               f"/{name}/rope_pos_col")  # (new, 1)
    out = []
    for x, freq, mix, tag in ((q, fq, mq, "q"), (kv, fkv, mkv, "kv")):
        ang = b.op("Mul", [pos, b.weight(f"{name}.rope_freq_{tag}", freq)],
                   f"/{name}/rope_ang_{tag}")  # (h, new, width)
        cos = b.op("Cast", [b.op("Cos", [ang], f"/{name}/rope_cos64_{tag}")],
                   f"/{name}/rope_cos_{tag}", to=TensorProto.FLOAT)
        sin = b.op("Cast", [b.op("Sin", [ang], f"/{name}/rope_sin64_{tag}")],
                   f"/{name}/rope_sin_{tag}", to=TensorProto.FLOAT)
        turned = b.op("Mul", [b.op("MatMul", [x, b.weight(f"{name}.rope_mix_{tag}", mix)],
                                   f"/{name}/rope_partner_{tag}"), sin],
                      f"/{name}/rope_turn_{tag}")
        out.append(b.op("Add", [b.op("Mul", [x, cos], f"/{name}/rope_keep_{tag}"), turned],
                        f"/{name}/rope_{tag}"))
    return out[0], out[1]


def _geometry(ct, heads: Mapping[int, tuple[int, int]], n_pos) -> dict:
    """What the export's shapes are: the loader checks the KV part against the file."""
    return {"n_layers": ct.n_layers, "d_model": ct.machine.d, "n_positions": n_pos,
            "kv_layers": {str(i): [h, e] for i, (h, e) in heads.items()}}


def _finite_or_none(x: float):
    return float(x) if np.isfinite(x) else None


def _spec_json(s) -> dict:
    return {"name": s.name, "kind": s.kind, "width": s.width, "lo": _finite_or_none(s.lo),
            "hi": _finite_or_none(s.hi), "integer": s.integer, "vocab": s.vocab}


def _contract_of(recorded):
    from twdialect.inputs import InputContract, InputSpec

    def bound(v, default):
        return default if v is None else float(v)

    try:
        specs = tuple(InputSpec(s["name"], s["kind"], int(s["width"]),
                                bound(s["lo"], -np.inf), bound(s["hi"], np.inf),
                                bool(s["integer"]), int(s["vocab"]))
                      for s in recorded["specs"])
        return InputContract(specs, recorded["max_len"], recorded.get("table_len"))
    except (KeyError, TypeError, ValueError):
        raise ExportError("onnx export: its recorded input contract (tw.inputs) is malformed; "
                          "export it again") from None


# -- the loader ----------------------------------------------------------------------------


class OnnxModel:
    """An exported model run by onnxruntime (CPU). `run` and `generate` have the contract of
    `CompiledTransformer.run` / `generate` (one sequence; inputs checked the same way, outputs
    {name: float64 (n, width)})."""

    def __init__(self, path, graph=None, providers=None):
        import onnxruntime as ort

        path = os.fspath(path)
        model_file = os.path.join(path, MODEL_FILE) if os.path.isdir(path) else path
        self.where = f"onnx export {path}"
        if not os.path.isfile(model_file):
            raise ExportError(f"{self.where}: no {MODEL_FILE} there (export_onnx writes a "
                              f"directory with {MODEL_FILE} and {DATA_FILE})")
        if graph is not None and getattr(graph, "schedule", None) is not None:
            graph = graph.schedule.tg.graph  # (a CompiledTransformer: its compiled graph)
        verify_onnx(model_file, graph, self.where)
        try:
            self.session = ort.InferenceSession(model_file,
                                                providers=providers or ["CPUExecutionProvider"])
        except Exception as e:  # noqa: BLE001 (onnxruntime raises its own classes)
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise ExportError(f"{self.where}: onnxruntime cannot load it ({first})") from None
        self.path = path
        meta = self.session.get_modelmeta().custom_metadata_map
        self.kv = {}
        for i in self.session.get_inputs():
            if i.name.startswith("past_kv_"):
                h, two_e = i.shape[1], i.shape[3]
                self.kv[int(i.name[len("past_kv_"):])] = (h, two_e // 2)
        self.meta = check_metadata(meta, "onnx", graph, geometry={"kv_layers": {
            str(k): [h, e] for k, (h, e) in self.kv.items()}}, where=self.where)
        if graph is not None:
            from twdialect.inputs import InputContract

            self.contract = InputContract.of(graph)
        else:
            self.contract = _contract_of(self.meta.get("inputs"))
        try:
            self.n_positions = self.meta["geometry"].get("n_positions")
            self.outputs = [str(n) for n, _ in self.meta["outputs"]]
        except (AttributeError, KeyError, TypeError, ValueError):
            raise ExportError(f"{self.where}: its metadata (tw.geometry, tw.outputs) is "
                              "malformed; export it again") from None
        names = [o.name for o in self.session.get_outputs()]
        feeds = {s.name for s in self.contract.specs}
        want = feeds | {f"past_kv_{k}" for k in self.kv} | (
            set() if self.kv else {"position_offset"}) | (set() if feeds else {"new_positions"})
        got = {i.name for i in self.session.get_inputs()}
        if want != got or names[: len(self.outputs)] != self.outputs:
            raise ExportError(f"{self.where}: its inputs/outputs ({', '.join(sorted(got))}) do "
                              "not match its metadata; export it again")

    # -- one forward over new positions ------------------------------------------------
    def _forward(self, checked, start: int, past: Mapping[int, np.ndarray] | None):
        n = checked.n_positions
        if self.n_positions is not None and start + n > self.n_positions:
            raise ExportError(f"{self.where}: positions up to {start + n - 1} asked for; the "
                              f"export covers {self.n_positions} (export_onnx(..., "
                              f"n_positions=...) for more)")
        feeds = {}
        for s in self.contract.specs:
            a = np.asarray(checked.values[s.name])
            feeds[s.name] = (a.astype(np.int64) if s.kind == "embedding"
                             else a.astype(np.float32).reshape(n, s.width))[None]
        if not self.contract.specs:
            feeds["new_positions"] = np.array(n, np.int64)
        if self.kv:
            for k, (h, e) in self.kv.items():
                feeds[f"past_kv_{k}"] = (past[k] if past is not None
                                         else np.zeros((1, h, 0, 2 * e), np.float32))
        else:
            feeds["position_offset"] = np.array(start, np.int64)
        got = self.session.run(None, feeds)
        outs = {name: np.asarray(v[0], np.float64) for name, v in zip(self.outputs, got)}
        present = dict(zip(self.kv, got[len(self.outputs):]))
        return outs, present

    def run(self, inputs: Mapping[str, np.ndarray], n_positions: int | None = None,
            on_out_of_range: str = "error") -> dict[str, np.ndarray]:
        """The outputs at every position of one sequence ({name: float64 (n, width)})."""
        from twdialect.inputs import check_inputs

        checked = check_inputs(self.contract, inputs, on_out_of_range, n_positions)
        return self._forward(checked, 0, None)[0]

    def generate(self, inputs: Mapping[str, np.ndarray], steps: int,
                 feedback: Callable[[dict[str, np.ndarray]], Mapping[str, object]],
                 on_out_of_range: str = "error", n_positions: int | None = None
                 ) -> dict[str, np.ndarray]:
        """Prefill `inputs`, then `steps` times feed `feedback(last outputs)` back as the next
        position through the KV cache (`CompiledTransformer.generate`'s contract)."""
        from twdialect.inputs import check_feedback, check_generate, check_inputs

        steps = check_generate(steps, feedback)
        checked = check_inputs(self.contract, inputs, on_out_of_range, n_positions)
        outs, past = self._forward(checked, 0, None)
        rows, at = [outs], checked.n_positions
        for _ in range(steps):
            nxt = check_feedback(self.contract, feedback({k: v[-1] for k, v in rows[-1].items()}),
                                 at, on_out_of_range)
            outs, past = self._forward(nxt, at, past)
            rows.append(outs)
            at += 1
        return {k: np.concatenate([r[k] for r in rows], axis=0) for k in rows[0]}


def verify_onnx(model_file: str, graph, where: str) -> dict:
    """Refuse, one ExportError line naming the file and what differs, an ONNX export that is
    not what tw wrote, before onnxruntime reads it: model.onnx's tw metadata
    (`check_metadata`, its KV geometry against the graph's past_kv inputs), model.onnx's own
    sha256 (MODEL_KEY: an edited node, initializer or attribute), each external tensor's
    sha256 in the data file (naming the tensor) and the data file's (another graph's data,
    damage in the padding). Returns the decoded metadata."""
    name = os.path.basename(model_file)
    try:
        from google.protobuf.message import DecodeError
        from onnx import ModelProto
    except ImportError as e:
        raise ExportError(f"{where}: loading an onnx export needs {e.name!r}: pip install "
                          "'tw-compiler[export]'") from None
    try:
        with open(model_file, "rb") as f:
            blob = f.read()
        model = ModelProto()
        model.ParseFromString(blob)
        props = {p.key: p.value for p in model.metadata_props}
        kv = {}
        for i in model.graph.input:
            if i.name.startswith("past_kv_"):
                dims = i.type.tensor_type.shape.dim
                kv[str(int(i.name[len("past_kv_"):]))] = [dims[1].dim_value,
                                                           dims[3].dim_value // 2]
    except (OSError, DecodeError, ValueError, IndexError, RuntimeError) as e:
        raise ExportError(f"{where}: {name} is not a readable ONNX model "
                          f"({type(e).__name__}); onnxruntime cannot load it") from None
    meta = check_metadata(props, "onnx", graph, geometry={"kv_layers": kv},
                          where=f"{where} {name}")
    recorded = props.get(MODEL_KEY)
    if not isinstance(recorded, str) or len(recorded) != 64 or blob.count(_seal(recorded)) != 1:
        raise ExportError(f"{where}: {name} carries no readable sha256 of itself "
                          f"({MODEL_KEY}; not a tw export of this version, or a damaged one); "
                          "export it again")
    found = hashlib.sha256(blob.replace(_seal(recorded), _seal(PLACEHOLDER))).hexdigest()
    if found != recorded:
        raise ExportError(f"{where}: {name} changed since it was exported (sha256 recorded "
                          f"{recorded[:12]}..., found {found[:12]}...: an edited node, "
                          "initializer or attribute); export it again")
    _verify_data(model, props, os.path.dirname(model_file), where)
    return meta


def _verify_data(model, props: Mapping[str, str], folder: str, where: str) -> None:
    """The data file's tensors and bytes against model.onnx's records (model.onnx itself
    already checked, so its initializers' offsets are tw's)."""
    regions = []
    try:
        for t in model.graph.initializer:
            ext = {e.key: e.value for e in t.external_data}
            if ext:
                if ext.get("location") != DATA_FILE:
                    raise ValueError(ext.get("location"))
                start = int(ext["offset"])
                regions.append((t.name, start, start + int(ext["length"])))
    except (KeyError, ValueError):
        raise ExportError(f"{where}: {MODEL_FILE}'s external tensors are not where tw puts them "
                          f"(in {DATA_FILE}, at an offset and length); export it again") from None
    tensors = recorded_digests(props.get("tw.tensor_sha256"), where, MODEL_FILE)
    whole = props.get("tw.data_sha256")
    check_file(os.path.join(folder, DATA_FILE), regions, tensors, whole, where, DATA_FILE,
               f"no readable {DATA_FILE} beside {MODEL_FILE}", "its padding")


def load_onnx(path, graph=None) -> OnnxModel:
    """Open an ONNX export (`export_onnx`'s directory, or its model.onnx) with onnxruntime and
    check its tw metadata; with `graph` (the compiled tw.graph, or the CompiledTransformer), a
    file exported from another graph is refused."""
    return OnnxModel(path, graph)

