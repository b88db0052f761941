"""Typed wrappers around pgrag's SQL retrieval functions, and the searches the commands run.

Every ranking decision (BM25, fusion, windowing, MMR, thresholds, the context block) happens in
SQL (``sql/idempotent/027-api.sql`` and the files it calls); this module only computes the query
embedding, passes named arguments, acts as the caller's tenant, and turns rows into dataclasses.

Three layers, each calling the one before:

* :func:`search` and :func:`build_context`: one SQL call as a tenant, given an embedding (or an
  embedder).
* :func:`search_text` and :func:`context_text`: the query embedded through the
  query-embedding cache (:class:`pgrag.query_cache.QueryEmbeddings`), searched again once when
  a re-embed switched models meanwhile.
* :func:`run_search` and :func:`run_context`: what ``pgrag search`` and ``pgrag ask`` run, and
  what any other client that wants the same behaviour calls: the above, then the side effects
  of a search (query-embedding usage recorded, the search logged when the operator turned the
  search log on) and, when nothing was found, why the tenant cannot answer anything.

With a re-ranker (:mod:`pgrag.rerank`: a cross-encoder or a re-rank API, which run outside the
database), :func:`run_search` and :func:`run_context` fetch more candidates, have them scored
(:func:`rerank_hits`) and keep the best; ``ask``'s context is then built in SQL from them in the
re-ranker's order (``public.build_context_for``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from pgrag import tracing
from pgrag.db import tenant_transaction
from pgrag.documents import tenant_is_empty
from pgrag.errors import ConfigError, from_database_error
from pgrag.pipeline.embedders import Embedder, embedder_for_database
from pgrag.query_cache import QueryEmbeddings
from pgrag.rerank import RerankSettings, checked_scores, rerank
from pgrag.search_log import LogMode, log_search

if TYPE_CHECKING:
    from pgrag.browse import Suggestion

API_SCHEMA = "public"
"""Schema of the client-facing functions (what PostgREST exposes and psql calls unqualified)."""

Mode = Literal["hybrid", "vector", "keyword"]
MODES: tuple[Mode, ...] = ("hybrid", "vector", "keyword")
TypoMode = Literal["off", "suggest", "fix"]
TYPO_MODES: tuple[TypoMode, ...] = ("off", "suggest", "fix")
Fusion = Literal["rrf", "weighted", "zscore"]
FUSIONS: tuple[Fusion, ...] = ("rrf", "weighted", "zscore")


@dataclass(frozen=True)
class SearchFilters:
    """Filters applied inside each search arm (never after fusion)."""

    document_ids: Sequence[int] | None = None
    metadata: dict[str, Any] | None = None
    source_types: Sequence[str] | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None

    def arguments(self) -> dict[str, Any]:
        """The filters as named SQL arguments (unset ones omitted so SQL defaults apply)."""
        args: dict[str, Any] = {}
        if self.document_ids:
            args["document_ids"] = list(self.document_ids)
        if self.metadata is not None:
            args["metadata_filter"] = Jsonb(self.metadata)
        if self.source_types:
            args["source_types"] = list(self.source_types)
        if self.created_after is not None:
            args["created_after"] = self.created_after
        if self.created_before is not None:
            args["created_before"] = self.created_before
        return args


@dataclass(frozen=True)
class SearchOptions:
    """How to search: which function, how many rows, and its tuning parameters.

    ``None`` means "the SQL function's default"; only set values are sent.
    """

    mode: Mode = "hybrid"
    limit: int = 10
    fusion: Fusion | None = None
    rrf_k: int | None = None
    vector_weight: float | None = None
    keyword_weight: float | None = None
    candidate_count: int | None = None
    window: int = 0
    mmr_lambda: float | None = None
    min_score: float | None = None
    language: str | None = None
    ef_search: int | None = None
    k1: float | None = None
    b: float | None = None
    filters: SearchFilters = field(default_factory=SearchFilters)
    offset: int = 0
    """Rows of the ranking skipped (a page: SQL's match_offset, 0 - 1000)."""

    def validate(self) -> None:
        if self.mode not in MODES:
            raise ConfigError(f"unknown search mode {self.mode!r}: use one of {', '.join(MODES)}.")
        if self.limit < 1:
            raise ConfigError("the result count (-k/--limit) must be at least 1.")
        if self.mode != "hybrid":
            hybrid_only = {
                "--window": self.window,
                "--mmr": self.mmr_lambda,
                "--fusion": self.fusion,
            }
            used = [name for name, value in hybrid_only.items() if value]
            if used:
                verb = "applies" if len(used) == 1 else "apply"
                raise ConfigError(
                    f"{', '.join(used)} only {verb} to hybrid search: add --mode hybrid."
                )
        if self.mode == "keyword" and self.min_score is not None:
            raise ConfigError(
                "--min-score is a cosine-similarity floor for vector and hybrid search; "
                "BM25 scores have no fixed scale."
            )
        if self.mmr_lambda is not None and not 0.0 <= self.mmr_lambda <= 1.0:
            raise ConfigError("--mmr takes a lambda between 0 (diverse) and 1 (relevant).")
        if self.window < 0:
            raise ConfigError("--window must be 0 or more neighbouring chunks.")
        if self.offset < 0:
            raise ConfigError("--offset and --page must not be negative.")


@dataclass(frozen=True)
class SearchHit:
    """One result row: the chunk, where it comes from, and why it ranks where it does."""

    rank: int
    score: float
    chunk_id: int
    document_id: int
    chunk_index: int
    title: str
    source_uri: str
    source_type: str
    page: int | None
    heading_path: list[str]
    content: str
    vector_rank: int | None = None
    vector_score: float | None = None
    keyword_rank: int | None = None
    keyword_score: float | None = None
    first_chunk_index: int | None = None
    """The chunks ``content`` spans: a window (hybrid search with ``window``) runs from
    ``first_chunk_index`` to ``last_chunk_index``; without one both are ``chunk_index``."""
    last_chunk_index: int | None = None
    fused_rank: int | None = None
    """With a re-ranker: the rank the search gave the hit (``rank`` is then its re-ranked
    rank, ``rerank_rank``, and ``rerank_score`` the re-ranker's score); else None."""
    rerank_rank: int | None = None
    rerank_score: float | None = None

    def as_dict(self) -> dict[str, Any]:
        """The hit's fields; the re-ranking ones only when a re-ranker ordered it."""
        data = asdict(self)
        if self.rerank_score is None:
            for name in ("fused_rank", "rerank_rank", "rerank_score"):
                del data[name]
        return data


@dataclass(frozen=True)
class Context:
    """What ``build_context`` returns: a ``[Source N]`` block and the list of its sources."""

    context: str
    sources: list[dict[str, Any]]

    @property
    def empty(self) -> bool:
        return not self.context.strip() or not self.sources


def query_embedder(conn: psycopg.Connection[Any]) -> Embedder:
    """The embedder of the model recorded in the database (so queries match stored vectors)."""
    return embedder_for_database(conn)


def embed_query(embedder: Embedder, text: str) -> np.ndarray:
    return np.asarray(embedder.embed([text])[0], dtype=np.float32)


def _call(
    conn: psycopg.Connection[Any], function: str, args: dict[str, Any], tenant: str
) -> list[dict[str, Any]]:
    """``select * from <api>.<function>(name => value, ...)`` as ``tenant``, rows as dicts."""
    named = sql.SQL(", ").join(
        sql.SQL("{} => {}").format(sql.Identifier(name), sql.Placeholder(name)) for name in args
    )
    query = sql.SQL("select * from {}.{}({})").format(
        sql.Identifier(API_SCHEMA), sql.Identifier(function), named
    )
    from psycopg.rows import dict_row

    try:
        with (
            tracing.span("retrieve", {"pgrag.tenant": tenant, "pgrag.function": function}),
            tenant_transaction(conn, tenant),
            conn.cursor(row_factory=dict_row) as cur,
        ):
            cur.execute(query, args)
            rows = cur.fetchall()
            tracing.annotate({"pgrag.rows": len(rows)})
            return rows
    except psycopg.Error as exc:
        # 22023: an argument outside the range the SQL function documents (the SQL checks it
        # and its message names the argument and the range): errors.SQLSTATE_ERRORS.
        error = from_database_error(exc)
        if error is None:
            raise
        raise error from exc


def _without_none(args: dict[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in args.items() if value is not None}


def search_arguments(
    options: SearchOptions, query_text: str, query_embedding: np.ndarray | None
) -> tuple[str, dict[str, Any]]:
    """The SQL function and the named arguments a search with ``options`` sends."""
    options.validate()
    filters = options.filters.arguments()
    if options.mode == "vector":
        return "vector_search", _without_none(
            {
                "query_embedding": query_embedding,
                "match_count": options.limit,
                "min_similarity": options.min_score,
                "ef_search": options.ef_search,
                **filters,
                "match_offset": options.offset or None,
            }
        )
    if options.mode == "keyword":
        return "keyword_search", _without_none(
            {
                "query_text": query_text,
                "match_count": options.limit,
                "language": options.language,
                "k1": options.k1,
                "b": options.b,
                **filters,
                "match_offset": options.offset or None,
            }
        )
    return "hybrid_search", _without_none(
        {
            "query_text": query_text,
            "query_embedding": query_embedding,
            "match_count": options.limit,
            "fusion": options.fusion,
            "rrf_k": options.rrf_k,
            "vector_weight": options.vector_weight,
            "keyword_weight": options.keyword_weight,
            "candidate_count": options.candidate_count,
            "window_size": options.window or None,
            "mmr_lambda": options.mmr_lambda,
            "min_score": options.min_score,
            "language": options.language,
            "ef_search": options.ef_search,
            **filters,
            "match_offset": options.offset or None,
        }
    )


def _hit(row: dict[str, Any], mode: Mode) -> SearchHit:
    common = {
        "rank": int(row["rank"]),
        "chunk_id": int(row["chunk_id"]),
        "document_id": int(row["document_id"]),
        "chunk_index": int(row["chunk_index"]),
        "title": row["title"] or "",
        "source_uri": row["source_uri"] or "",
        "source_type": row["source_type"] or "",
        "page": row["page"],
        "heading_path": list(row["heading_path"] or []),
        "content": row["content"] or "",
        # hybrid_search names the chunks of its window; one chunk is its own span
        "first_chunk_index": int(row.get("first_chunk_index", row["chunk_index"])),
        "last_chunk_index": int(row.get("last_chunk_index", row["chunk_index"])),
    }
    if mode == "vector":
        similarity = float(row["similarity"])
        return SearchHit(
            score=similarity, vector_rank=common["rank"], vector_score=similarity, **common
        )
    if mode == "keyword":
        score = float(row["score"])
        return SearchHit(score=score, keyword_rank=common["rank"], keyword_score=score, **common)

    def opt_float(value: Any) -> float | None:
        return None if value is None else float(value)

    def opt_int(value: Any) -> int | None:
        return None if value is None else int(value)

    return SearchHit(
        score=float(row["score"]),
        vector_rank=opt_int(row.get("vector_rank")),
        vector_score=opt_float(row.get("vector_score")),
        keyword_rank=opt_int(row.get("keyword_rank")),
        keyword_score=opt_float(row.get("keyword_score")),
        **common,
    )


def search(
    conn: psycopg.Connection[Any],
    query_text: str,
    options: SearchOptions,
    *,
    tenant: str,
    query_embedding: np.ndarray | None = None,
    embedder: Embedder | None = None,
) -> list[SearchHit]:
    """Run one search as ``tenant``; embeds ``query_text`` unless an embedding is given."""
    options.validate()
    if options.mode != "keyword" and query_embedding is None:
        query_embedding = embed_query(embedder or query_embedder(conn), query_text)
    function, args = search_arguments(options, query_text, query_embedding)
    return [_hit(row, options.mode) for row in _call(conn, function, args, tenant)]


@dataclass(frozen=True)
class ContextOptions:
    """Parameters of ``build_context`` (``None`` = the SQL default)."""

    token_budget: int | None = None
    limit: int | None = None
    min_score: float | None = None
    window: int = 0
    mmr_lambda: float | None = None
    filters: SearchFilters = field(default_factory=SearchFilters)


def build_context(
    conn: psycopg.Connection[Any],
    query_text: str,
    options: ContextOptions,
    *,
    tenant: str,
    query_embedding: np.ndarray | None = None,
    embedder: Embedder | None = None,
) -> Context:
    """The ``[Source N]`` context block and its sources for ``query_text``, as ``tenant``."""
    if options.mmr_lambda is not None and not 0.0 <= options.mmr_lambda <= 1.0:
        raise ConfigError("--mmr takes a lambda between 0 (diverse) and 1 (relevant).")
    if query_embedding is None:
        query_embedding = embed_query(embedder or query_embedder(conn), query_text)
    args = _without_none(
        {
            "query_text": query_text,
            "query_embedding": query_embedding,
            "token_budget": options.token_budget,
            "match_count": options.limit,
            "min_score": options.min_score,
            "window_size": options.window or None,
            "mmr_lambda": options.mmr_lambda,
            **options.filters.arguments(),
        }
    )
    rows = _call(conn, "build_context", args, tenant)
    if not rows:
        return Context("", [])
    sources = rows[0]["sources"]
    if isinstance(sources, str):
        sources = json.loads(sources)
    return Context(rows[0]["context"] or "", list(sources or []))


def search_text(
    conn: psycopg.Connection[Any],
    query_text: str,
    options: SearchOptions,
    *,
    tenant: str,
    queries: QueryEmbeddings,
) -> tuple[list[SearchHit], float]:
    """Search ``query_text`` as ``tenant``, embedding it through ``queries`` (the
    query-embedding cache, then the model); returns the hits and the search call's latency (ms).

    When the database switched embedding models between the embedding and the search (a
    re-embed's switch, ``pgrag reembed``), the query is embedded again with the new model and
    searched again, once: a query embedding of the previous model would fail on another
    dimension, or rank the new embeddings badly on the same one."""
    for attempt in (1, 2):
        vector = None if options.mode == "keyword" else queries.embed(query_text)
        started = time.perf_counter()
        try:
            hits = search(conn, query_text, options, tenant=tenant, query_embedding=vector)
        except (ConfigError, psycopg.errors.DataException):
            if vector is None or attempt == 2 or queries.still_current(conn):
                raise
            queries.switch_to_database_model()
            continue
        latency = (time.perf_counter() - started) * 1000.0
        if vector is None or attempt == 2 or queries.still_current(conn):
            return hits, latency
        queries.switch_to_database_model()
    raise AssertionError("unreachable")


def context_text(
    conn: psycopg.Connection[Any],
    query_text: str,
    options: ContextOptions,
    *,
    tenant: str,
    queries: QueryEmbeddings,
) -> tuple[Context, float]:
    """:func:`build_context` for ``query_text``, embedded through ``queries``, with the same
    protection against a model switch as :func:`search_text`; the context and its latency (ms)."""
    for attempt in (1, 2):
        vector = queries.embed(query_text)
        started = time.perf_counter()
        try:
            ctx = build_context(conn, query_text, options, tenant=tenant, query_embedding=vector)
        except (ConfigError, psycopg.errors.DataException):
            if attempt == 2 or queries.still_current(conn):
                raise
            queries.switch_to_database_model()
            continue
        latency = (time.perf_counter() - started) * 1000.0
        if attempt == 2 or queries.still_current(conn):
            return ctx, latency
        queries.switch_to_database_model()
    raise AssertionError("unreachable")


# -- the searches the commands run -------------------------------------------------------------


@dataclass(frozen=True)
class SearchRun:
    """What :func:`run_search` found: the hits, the search call's latency (ms), and when there
    is no hit, why the tenant cannot answer anything (else None)."""

    hits: list[SearchHit]
    latency_ms: float
    tenant_empty: str | None = None
    rerank_ms: float | None = None
    """The re-ranker's time (ms) when one ordered the hits."""
    suggestion: Suggestion | None = None
    """With ``typos`` "suggest" or "fix": the query with its unknown words corrected."""
    searched: str | None = None
    """The text searched: the query as given, or (``typos="fix"``) as corrected."""


@dataclass(frozen=True)
class ContextRun:
    """What :func:`run_context` found: the context, the ``build_context`` call's latency (ms),
    and when the context is empty, why the tenant cannot answer anything (else None)."""

    context: Context
    latency_ms: float
    tenant_empty: str | None = None


def run_search(
    reader: psycopg.Connection[Any],
    query_text: str,
    options: SearchOptions,
    *,
    tenant: str,
    writer: psycopg.Connection[Any] | None = None,
    reranking: RerankSettings | None = None,
    typos: TypoMode = "off",
) -> SearchRun:
    """Search ``query_text`` as ``tenant`` the way ``pgrag search`` does.

    ``typos``: "off" searches the text as given; "suggest" also asks ``suggest_query`` for
    the closest words of the tenant's vocabulary to words it has no postings for; "fix"
    searches the corrected text instead (the embedding, cache, usage and log are the
    corrected text's).

    The search reads from ``reader`` (e.g. a hot standby); its side writes (query-embedding
    cache, usage, search log) go to ``writer`` (default: ``reader``) and never fail it
    (:func:`after_search`). With ``reranking``, the search fetches ``reranking.top``
    candidates (at least ``options.limit``) and the re-ranker keeps the best ``options.limit``
    of them (:func:`rerank_hits`); the logged latency includes the re-ranker's."""
    suggestion = None
    if typos != "off":
        from pgrag.browse import suggest  # (pgrag.browse builds on this module)

        suggestion = suggest(reader, query_text, tenant=tenant, language=options.language)
        if typos == "fix":
            query_text = suggestion.suggested_query
    queries = QueryEmbeddings(writer or reader, tenant)
    fetch = (
        options if reranking is None else replace(options, limit=max(options.limit, reranking.top))
    )
    hits, latency_ms = search_text(reader, query_text, fetch, tenant=tenant, queries=queries)
    rerank_ms = None
    if reranking is not None:
        hits, rerank_ms = rerank_hits(query_text, hits, reranking, options.limit)
        latency_ms += rerank_ms
    empty = after_search(
        reader,
        queries,
        tenant=tenant,
        mode=options.mode,
        query_text=query_text,
        latency_ms=latency_ms,
        rows=len(hits),
        top_score=hits[0].score if hits else None,
        found=bool(hits),
    )
    return SearchRun(hits, latency_ms, empty, rerank_ms, suggestion, query_text)


def rerank_hits(
    query_text: str, hits: Sequence[SearchHit], reranking: RerankSettings, keep: int
) -> tuple[list[SearchHit], float]:
    """The best ``keep`` of the first ``reranking.top`` hits by the re-ranker's scores of
    their text, and the re-ranker's time (ms)."""
    candidates = list(hits[: reranking.top])
    started = time.perf_counter()
    reranker = reranking.reranker
    attributes = {"pgrag.rerank.model": reranker.name, "pgrag.candidates": len(candidates)}
    with tracing.span("rerank", attributes):
        scores = reranker.score(query_text, [hit.content for hit in candidates])
        scores = checked_scores(reranker.name, scores, len(candidates))
    elapsed = (time.perf_counter() - started) * 1000.0
    if not candidates:
        return [], elapsed
    return rerank(candidates, scores, keep), elapsed


def run_context(
    reader: psycopg.Connection[Any],
    query_text: str,
    options: ContextOptions,
    *,
    tenant: str,
    writer: psycopg.Connection[Any] | None = None,
    reranking: RerankSettings | None = None,
    queries: QueryEmbeddings | None = None,
) -> ContextRun:
    """The context for ``query_text`` as ``tenant``, the way ``pgrag ask`` builds it: as
    :func:`run_search`, with ``build_context`` (logged as mode ``context``).

    With ``reranking``: hybrid search fetches ``reranking.top`` candidates (the same filters,
    MMR and cosine floor), the re-ranker orders them, and ``build_context_for`` builds the
    block from them in that order (windows, budget and ``limit`` as ``build_context``); each
    source's score is then the re-ranker's. ``queries``: the query embeddings to use (e.g. the
    answer cache's, which embedded the question already), else new ones on ``writer``."""
    queries = queries or QueryEmbeddings(writer or reader, tenant)
    if reranking is None:
        ctx, latency_ms = context_text(reader, query_text, options, tenant=tenant, queries=queries)
    else:
        ctx, latency_ms = _reranked_context(reader, query_text, options, tenant, queries, reranking)
    top = ctx.sources[0].get("score") if ctx.sources else None
    empty = after_search(
        reader,
        queries,
        tenant=tenant,
        mode="context",
        query_text=query_text,
        latency_ms=latency_ms,
        rows=len(ctx.sources),
        top_score=float(top) if isinstance(top, int | float) else None,
        found=not ctx.empty,
    )
    return ContextRun(ctx, latency_ms, empty)


CONTEXT_MIN_SCORE = 0.3
"""``build_context``'s default cosine floor, applied to the candidates of a re-ranked context so
that ``pgrag ask`` answers (or says it found nothing) alike with and without a re-ranker."""


def _reranked_context(
    reader: psycopg.Connection[Any],
    query_text: str,
    options: ContextOptions,
    tenant: str,
    queries: QueryEmbeddings,
    reranking: RerankSettings,
) -> tuple[Context, float]:
    """The context of :func:`run_context` with a re-ranker, and its latency (ms)."""
    floor = CONTEXT_MIN_SCORE if options.min_score is None else options.min_score
    candidates = SearchOptions(
        mode="hybrid",
        limit=reranking.top,
        mmr_lambda=options.mmr_lambda,
        min_score=floor,
        filters=options.filters,
    )
    hits, latency_ms = search_text(reader, query_text, candidates, tenant=tenant, queries=queries)
    ranked, rerank_ms = rerank_hits(query_text, hits, reranking, len(hits) or 1)
    if not ranked:
        return Context("", []), latency_ms + rerank_ms
    args = _without_none(
        {
            "chunk_ids": [hit.chunk_id for hit in ranked],
            "scores": [hit.rerank_score for hit in ranked],
            "token_budget": options.token_budget,
            "match_count": options.limit,
            "window_size": options.window or None,
        }
    )
    started = time.perf_counter()
    rows = _call(reader, "build_context_for", args, tenant)
    latency_ms += rerank_ms + (time.perf_counter() - started) * 1000.0
    sources = rows[0]["sources"] if rows else []
    if isinstance(sources, str):
        sources = json.loads(sources)
    return Context(rows[0]["context"] or "" if rows else "", list(sources or [])), latency_ms


def after_search(
    reader: psycopg.Connection[Any],
    queries: QueryEmbeddings,
    *,
    tenant: str,
    mode: LogMode,
    query_text: str,
    latency_ms: float,
    rows: int,
    top_score: float | None,
    found: bool,
) -> str | None:
    """What follows every search of a command, in this order: the query embeddings' usage
    recorded (cache hits, model calls) and the search logged (when the operator turned the
    search log on), both on ``queries``' connection and failure-tolerant; then, when the search
    found nothing, why ``tenant`` cannot answer anything (no document, none ready: read on
    ``reader``), else None."""
    queries.record_usage()
    log_search(queries.primary, tenant, mode, latency_ms, rows, top_score, query_text)
    return None if found else tenant_is_empty(reader, tenant)
