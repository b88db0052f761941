"""all-MiniLM-L6-v2 on ONNX Runtime: no torch or sentence-transformers on the query path.

The model is the bundled safetensors checkpoint (a 6-layer BERT) run as an ONNX graph written
once with ``onnx.helper`` and cached under ``$PGRAG_HOME/models``. The cached file holds only
the graph (a few kilobytes); the weights are read from the safetensors file at every start and
handed to ONNX Runtime as external initializers, so nothing large is duplicated on disk and a
cold start takes a fraction of a second where importing torch and sentence-transformers takes
several (figures: docs/install.md). The graph computes what sentence-transformers computes for this
model: BERT (with ONNX Runtime's fused operators for the embeddings, attention, residual
LayerNorms and GELU), mean pooling over the attention mask, L2 normalisation.

The cache file is named after a hash of its own contents' recipe (graph version, model config)
and checked against a SHA-256 stored beside it: a missing, truncated or corrupt file is rebuilt,
and every write goes to a temporary file renamed into place (atomic on POSIX).

``precision="int8"`` runs a dynamically quantised copy instead (ONNX Runtime's
``quantize_dynamic``: the linear layers' weights stored as int8 with one scale per output
column, activations quantised per call). It is made once from the fp32 graph and its weights,
offline, and cached beside the fp32 graph with its own SHA-256 (about 58 MB, self-contained:
the weights are in the file; the word-embedding table, kept in fp32, is most of it).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

GRAPH_VERSION = 2  # bump when the graph below changes: a new cache file is written
OPSET = 18
FUSED = "com.microsoft"  # ONNX Runtime's own operators
QUANT_VERSION = 2  # bump when the quantisation recipe changes
PRECISIONS = ("fp32", "int8")


def _config(model_dir: Path) -> dict[str, Any]:
    config = json.loads((model_dir / "config.json").read_text())
    return {
        "hidden": int(config["hidden_size"]),
        "heads": int(config["num_attention_heads"]),
        "layers": int(config["num_hidden_layers"]),
        "eps": float(config["layer_norm_eps"]),
        "act": str(config["hidden_act"]),
    }


def build_graph(model_dir: Path) -> bytes:
    """The serialized ONNX graph (weights referenced by name, not included)."""
    from onnx import TensorProto, helper

    cfg = _config(model_dir)
    if cfg["act"] != "gelu":
        raise ValueError(f"unsupported activation {cfg['act']!r}")
    hidden, heads, eps = cfg["hidden"], cfg["heads"], cfg["eps"]
    nodes: list[Any] = []
    consts: list[Any] = []
    counter = [0]

    def name(prefix: str) -> str:
        counter[0] += 1
        return f"{prefix}_{counter[0]}"

    def node(op: str, inputs: list[str], domain: str = "", **attrs: Any) -> str:
        out = name(op.lower())
        nodes.append(helper.make_node(op, inputs, [out], domain=domain, **attrs))
        return out

    def const(values: Any, dtype: int = TensorProto.INT64) -> str:
        out = name("const")
        array = np.asarray(values)
        consts.append(helper.make_tensor(out, dtype, array.shape, array.flatten().tolist()))
        return out

    ids, mask = "input_ids", "attention_mask"
    # ONNX Runtime's fused BERT operators (domain com.microsoft, in every CPU build): one kernel
    # each for the embeddings with their LayerNorm, a layer's attention (Q, K and V from one
    # packed product, softmax over the unpadded tokens), the residual add with LayerNorm, and
    # bias + GELU. The same arithmetic as the plain operators (cosine 0.99999 or more), without
    # the tensors between them: 1.15-1.45x the chunks/s in one run (docs/ingest.md).
    mask32 = node("Cast", [mask], to=TensorProto.INT32)
    x, lengths = name("embedded"), name("lengths")
    nodes.append(
        helper.make_node(
            "EmbedLayerNormalization",
            [
                node("Cast", [ids], to=TensorProto.INT32),
                "",  # no segment ids: token type 0 is folded into the position embeddings
                "embeddings.word_embeddings.weight",
                "embeddings.position_and_token_type",
                "",
                "embeddings.LayerNorm.weight",
                "embeddings.LayerNorm.bias",
                mask32,
            ],
            [x, lengths],  # lengths: the attended tokens per row (padding is on the right)
            domain=FUSED,
            epsilon=eps,
        )
    )

    def add_and_norm(y: str, residual: str, prefix: str, bias: str) -> str:
        weight, beta = f"{prefix}.weight", f"{prefix}.bias"
        return node("SkipLayerNormalization", [y, residual, weight, beta, bias], FUSED, epsilon=eps)

    for i in range(cfg["layers"]):
        p = f"encoder.layer.{i}"
        qkv = [x, f"{p}.attention.self.qkv.weight_t", f"{p}.attention.self.qkv.bias", lengths]
        ctx = node("Attention", qkv, FUSED, num_heads=heads)
        attn = node("MatMul", [ctx, f"{p}.attention.output.dense.weight_t"])
        attn_out = f"{p}.attention.output"
        x = add_and_norm(attn, x, f"{attn_out}.LayerNorm", f"{attn_out}.dense.bias")
        # Exact (erf) GELU, as BERT's "gelu".
        h = node("MatMul", [x, f"{p}.intermediate.dense.weight_t"])
        gelu = node("BiasGelu", [h, f"{p}.intermediate.dense.bias"], FUSED)
        out = node("MatMul", [gelu, f"{p}.output.dense.weight_t"])
        x = add_and_norm(out, x, f"{p}.output.LayerNorm", f"{p}.output.dense.bias")

    # Mean pooling over attended tokens, then L2 normalisation (sentence-transformers' modules).
    mask_f = node("Cast", [mask], to=TensorProto.FLOAT)
    weights = node("Unsqueeze", [mask_f, const([2])])
    summed = node("ReduceSum", [node("Mul", [x, weights]), const([1])], keepdims=0)
    counts = node("ReduceSum", [mask_f, const([1])], keepdims=1)
    counts = node("Max", [counts, const([1e-9], TensorProto.FLOAT)])
    pooled = node("Div", [summed, counts])
    norm = node("ReduceL2", [pooled, const([1])], keepdims=1)
    norm = node("Max", [norm, const([1e-12], TensorProto.FLOAT)])
    nodes.append(helper.make_node("Div", [pooled, norm], ["sentence_embedding"]))

    inputs = [
        helper.make_tensor_value_info(ids, TensorProto.INT64, ["batch", "sequence"]),
        helper.make_tensor_value_info(mask, TensorProto.INT64, ["batch", "sequence"]),
    ]
    for weight_name, shape in _weight_shapes(model_dir).items():
        # A placeholder: ONNX Runtime gets the data from add_external_initializers.
        placeholder = TensorProto(name=weight_name, data_type=TensorProto.FLOAT, dims=shape)
        placeholder.data_location = TensorProto.EXTERNAL
        placeholder.external_data.add(key="location", value="model.safetensors")
        consts.append(placeholder)
    output = helper.make_tensor_value_info(
        "sentence_embedding", TensorProto.FLOAT, ["batch", hidden]
    )
    graph = helper.make_graph(nodes, "all_minilm_l6_v2", inputs, [output], initializer=consts)
    opsets = [helper.make_opsetid("", OPSET), helper.make_opsetid(FUSED, 1)]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 8
    serialized: bytes = model.SerializeToString()
    return serialized


def _weight_shapes(model_dir: Path) -> dict[str, list[int]]:
    return {key: list(value.shape) for key, value in sorted(load_weights(model_dir).items())}


def _graph_name(key: str, ndim: int) -> str | None:
    """The graph's name for a checkpoint tensor (None: not used by the sentence embedding)."""
    if key.startswith("pooler.") or key.endswith("position_ids"):
        return None
    if key.startswith("encoder.") and key.endswith(".weight") and ndim == 2:
        return key + "_t"  # linear layers: [out, in] in the checkpoint, [in, out] for MatMul
    return key


def load_weights(model_dir: Path) -> dict[str, np.ndarray]:
    """The graph's weights, read from the checkpoint's safetensors file."""
    from safetensors.numpy import load_file

    weights: dict[str, np.ndarray] = {}
    for key, value in load_file(str(model_dir / "model.safetensors")).items():
        renamed = _graph_name(key, value.ndim)
        if renamed is None:
            continue
        weights[renamed] = np.ascontiguousarray(value.T) if renamed.endswith("_t") else value
    # Every token is of type 0: its row is added to each position's.
    token_types = weights.pop("embeddings.token_type_embeddings.weight")
    positions = weights.pop("embeddings.position_embeddings.weight")
    weights["embeddings.position_and_token_type"] = positions + token_types[0]
    # Each layer's Q, K and V projections as one product ([in, 3 * out]), as Attention takes them.
    for prefix in sorted({k.rsplit(".", 2)[0] for k in weights if ".attention.self." in k}):
        for part, axis in (("weight_t", 1), ("bias", 0)):
            qkv = [weights.pop(f"{prefix}.{n}.{part}") for n in ("query", "key", "value")]
            weights[f"{prefix}.qkv.{part}"] = np.ascontiguousarray(np.concatenate(qkv, axis=axis))
    return weights


# -- the cached graph ----------------------------------------------------------------------------


def cache_path(model_dir: Path, cache_dir: Path) -> Path:
    """Where the graph of the model in ``model_dir`` is cached (named by its recipe)."""
    recipe = json.dumps(
        {"graph": GRAPH_VERSION, "opset": OPSET, "config": _config(model_dir)}, sort_keys=True
    )
    digest = hashlib.sha256(recipe.encode()).hexdigest()[:16]
    return cache_dir / f"all-minilm-l6-v2.{digest}.onnx"


def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def cached_graph(model_dir: Path, cache_dir: Path) -> tuple[bytes, Path]:
    """The graph's bytes from the cache, (re)built when missing, corrupt or from another recipe.

    Beside ``<name>.onnx`` sits ``<name>.onnx.sha256``; the graph is used only when its bytes
    hash to that value. Both files are written atomically (graph first).
    """
    path = cache_path(model_dir, cache_dir)
    checksum = path.with_name(path.name + ".sha256")
    try:
        data = path.read_bytes()
        if hashlib.sha256(data).hexdigest() == checksum.read_text().strip():
            return data, path
    except (OSError, UnicodeDecodeError):
        pass
    data = build_graph(model_dir)
    try:
        _atomic_write(path, data)
        _atomic_write(checksum, hashlib.sha256(data).hexdigest().encode() + b"\n")
    except OSError:
        pass  # a read-only PGRAG_HOME: run from memory, build again next time
    return data, path


def _verified(path: Path) -> bytes | None:
    """``path``'s bytes when they hash to the SHA-256 stored beside it, else None."""
    try:
        data = path.read_bytes()
        checksum = path.with_name(path.name + ".sha256").read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None
    return data if hashlib.sha256(data).hexdigest() == checksum else None


def _store(path: Path, data: bytes) -> None:
    """Write ``path`` and its checksum atomically; a read-only cache is not an error."""
    try:
        _atomic_write(path, data)
        _atomic_write(
            path.with_name(path.name + ".sha256"), hashlib.sha256(data).hexdigest().encode() + b"\n"
        )
    except OSError:
        pass  # a read-only PGRAG_HOME: run from memory, build again next time


def int8_cache_path(model_dir: Path, cache_dir: Path) -> Path:
    """Where the int8 copy of the model in ``model_dir`` is cached (beside the fp32 graph)."""
    fp32 = cache_path(model_dir, cache_dir)
    return fp32.with_name(fp32.name.replace(".onnx", f".int8-q{QUANT_VERSION}.onnx"))


def quantize_int8(model_dir: Path, graph: bytes) -> bytes:
    """A self-contained int8 model: the fp32 ``graph`` with its weights, dynamically quantised."""
    import onnx
    from onnx import numpy_helper
    from onnxruntime.quantization import QuantType, quantize_dynamic

    model = onnx.load_from_string(graph)
    weights = load_weights(model_dir)
    initializers = [
        numpy_helper.from_array(weights[t.name], t.name)
        if t.data_location == onnx.TensorProto.EXTERNAL
        else t
        for t in model.graph.initializer
    ]
    del model.graph.initializer[:]
    model.graph.initializer.extend(initializers)
    with tempfile.TemporaryDirectory(prefix="pgrag-int8-") as tmp:
        fp32, int8 = Path(tmp) / "fp32.onnx", Path(tmp) / "int8.onnx"
        onnx.save_model(model, str(fp32))
        # Only the linear layers (the MatMuls with a weight, and each Attention's packed Q, K and
        # V projection; the attention products and the embedding tables stay fp32), one scale
        # per output column: with one scale per tensor the embeddings' cosine to fp32's falls to
        # about 0.94, per column it stays above 0.99. (The fused operators are of ONNX Runtime's
        # own domain, which ONNX's shape inference does not know: their outputs are float32.)
        logging.disable(logging.WARNING)  # its advice to pre-process the model, on stderr
        try:
            quantize_dynamic(
                fp32,
                int8,
                op_types_to_quantize=["MatMul", "Attention"],
                per_channel=True,
                weight_type=QuantType.QInt8,
                extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
            )
        finally:
            logging.disable(logging.NOTSET)
        return int8.read_bytes()


def cached_int8_model(model_dir: Path, cache_dir: Path) -> tuple[bytes, Path]:
    """The int8 model's bytes from the cache, made (once) when missing or corrupt, from the
    fp32 graph, which is then cached too: the queries of the same installation embed in fp32
    (the default when documents embed in int8), and load it without building it."""
    path = int8_cache_path(model_dir, cache_dir)
    data = _verified(path)
    if data is None:
        graph, _ = cached_graph(model_dir, cache_dir)
        data = quantize_int8(model_dir, graph)
        _store(path, data)
    return data, path


# -- running it ----------------------------------------------------------------------------------


class OnnxSentenceEncoder:
    """Sentence embeddings of the bundled model through ONNX Runtime on the CPU.

    Tokenises as sentence-transformers does for this model (the model's own ``tokenizer.json``,
    [CLS] ... [SEP], truncated to ``max_seq_length`` word pieces including the special tokens,
    padded per batch), sorts a call's texts by length so that batches pad little, and returns
    unit-length float32 rows in the input order.
    """

    def __init__(
        self,
        model_dir: Path,
        cache_dir: Path,
        threads: int | None = None,
        precision: str = "fp32",
    ) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        self.model_dir = model_dir
        st_config = json.loads((model_dir / "sentence_bert_config.json").read_text())
        self.max_length = int(st_config["max_seq_length"])
        if precision not in PRECISIONS:
            raise ValueError(f"unknown precision {precision!r}")
        self.precision = precision
        options = ort.SessionOptions()
        options.log_severity_level = 3  # errors only
        # Idle worker threads sleep instead of spinning: the ingester overlaps embedding with
        # database work, and the machine may be shared.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        if threads is not None:  # e.g. 1 inside a PostgreSQL backend: one core per connection
            options.intra_op_num_threads = threads
        values: list[Any] = []
        if precision == "int8":
            graph, self.graph_path = cached_int8_model(model_dir, cache_dir)
        else:
            graph, self.graph_path = cached_graph(model_dir, cache_dir)
            weights = load_weights(model_dir)
            values = [ort.OrtValue.ortvalue_from_numpy(w) for w in weights.values()]
            options.add_external_initializers(list(weights), values)
        self._session = ort.InferenceSession(graph, options, providers=["CPUExecutionProvider"])
        self._keepalive = values  # ONNX Runtime borrows these buffers
        self._tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self._tokenizer.enable_truncation(max_length=self.max_length)
        self._tokenizer.no_padding()
        self.tokens_read = 0  # tokens the model read (special tokens included, after truncation)

    def encode(self, texts: list[str], batch_size: int = 64) -> np.ndarray:
        out = np.empty((len(texts), self._session.get_outputs()[0].shape[1]), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        for start in range(0, len(order), batch_size):
            rows = order[start : start + batch_size]
            encodings = self._tokenizer.encode_batch([texts[i] for i in rows])
            width = max(len(e.ids) for e in encodings)
            self.tokens_read += sum(len(e.ids) for e in encodings)
            ids = np.zeros((len(rows), width), dtype=np.int64)
            mask = np.zeros((len(rows), width), dtype=np.int64)
            for j, encoding in enumerate(encodings):
                ids[j, : len(encoding.ids)] = encoding.ids
                mask[j, : len(encoding.ids)] = 1
            (vectors,) = self._session.run(None, {"input_ids": ids, "attention_mask": mask})
            out[rows] = vectors
        return out
