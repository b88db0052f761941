"""Evaluating search modes: every judged query in each mode, its metrics and latency.

The corpus is ingested into a tenant of its own through the normal ingestion API (later runs
re-use it: unchanged documents are skipped), each query runs through the same SQL functions
``pgrag search`` calls, chunk hits are folded into document rankings (a document ranks at its
best chunk), and the metrics come from ``pytrec_eval`` (the trec_eval implementation).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import psycopg

from pgrag.errors import ConfigError
from pgrag.eval.dataset import BeirDataset
from pgrag.eval.metrics import mean_metrics, per_query_metrics
from pgrag.pipeline.embedders import Embedder
from pgrag.progress import ProgressMode
from pgrag.search import SearchHit, SearchOptions, rerank_hits, search

if TYPE_CHECKING:
    from pgrag.rerank import RerankSettings

if TYPE_CHECKING:
    from pgrag.ingest import IngestSummary
    from pgrag.query_cache import QueryEmbeddings

# Named modes: each is one SearchOptions preset (limit is set by the evaluator).
EVAL_MODES: dict[str, SearchOptions] = {
    "keyword": SearchOptions(mode="keyword"),
    "vector": SearchOptions(mode="vector"),
    "hybrid": SearchOptions(mode="hybrid"),  # the SQL default: weighted fusion
    "hybrid-rrf": SearchOptions(mode="hybrid", fusion="rrf"),
    "hybrid-equal": SearchOptions(mode="hybrid", fusion="weighted", vector_weight=1.0),
    "hybrid-window": SearchOptions(mode="hybrid", window=1),
    "hybrid-mmr": SearchOptions(mode="hybrid", mmr_lambda=0.7),
}
DEFAULT_EVAL_MODES: tuple[str, ...] = ("keyword", "vector", "hybrid", "hybrid-rrf")

DEFAULT_FETCH = 100
"""Chunks fetched per query for the quality metrics (recall@100 needs 100 documents)."""
DEFAULT_LATENCY_K = 10
"""Rows per query in the timed pass (what an application asks for)."""


def parse_mode(spec: str) -> tuple[str, SearchOptions]:
    """``name`` or ``name:field=value,...`` (e.g. ``hybrid:rrf_k=20,candidate_count=200``)."""
    name, _, overrides = spec.partition(":")
    if name not in EVAL_MODES:
        raise ConfigError(f"unknown eval mode {name!r}: use one of {', '.join(EVAL_MODES)}.")
    options = EVAL_MODES[name]
    if not overrides:
        return name, options
    types = {f.name: f.type for f in fields(SearchOptions)}
    changes: dict[str, Any] = {}
    for item in overrides.split(","):
        key, _, raw = item.partition("=")
        key = key.strip().replace("-", "_")
        if key not in types or key in ("mode", "limit", "filters") or not raw:
            raise ConfigError(f"eval mode {spec!r}: {key!r} is no tunable search option.")
        kind = str(types[key])
        value: Any = raw
        if "int" in kind:
            value = int(raw)
        elif "float" in kind:
            value = float(raw)
        changes[key] = value
    options = replace(options, **changes)
    options.validate()
    return spec, options


def document_ranking(dataset: BeirDataset, hits: Sequence[SearchHit]) -> list[str]:
    """Document ids in rank order, each at its best chunk's rank (later chunks dropped)."""
    ranking: list[str] = []
    seen: set[str] = set()
    for hit in sorted(hits, key=lambda h: h.rank):
        doc_id = dataset.doc_id(hit.source_uri)
        if doc_id is not None and doc_id not in seen:
            seen.add(doc_id)
            ranking.append(doc_id)
    return ranking


@dataclass
class ModeResult:
    """One mode's figures and the rankings behind them."""

    mode: str
    metrics: dict[str, float]
    latencies_ms: list[float]
    rankings: dict[str, list[str]] = field(repr=False)
    per_query: dict[str, dict[str, float]] = field(default_factory=dict, repr=False)

    def as_dict(self) -> dict[str, Any]:
        lat = np.asarray(self.latencies_ms, dtype=float)
        return {
            **{k: round(v, 4) for k, v in self.metrics.items()},
            "latency_p50_ms": round(float(np.percentile(lat, 50)), 2) if lat.size else None,
            "latency_p95_ms": round(float(np.percentile(lat, 95)), 2) if lat.size else None,
            "queries": len(self.rankings),
        }


def embed_queries(
    embedder: Embedder, dataset: BeirDataset, queries: QueryEmbeddings | None = None
) -> dict[str, np.ndarray]:
    """Every query's embedding, computed once in batches (not part of the measured latency).

    With ``queries`` (the query-embedding cache of the eval's tenant) queries embedded before
    are read back and the model embeds only the others."""
    ids = list(dataset.queries)
    texts = [dataset.queries[qid] for qid in ids]
    vectors = queries.embed_many(texts) if queries is not None else embedder.embed(texts)
    return {qid: np.asarray(vectors[i], dtype=np.float32) for i, qid in enumerate(ids)}


def run_mode(
    conn: psycopg.Connection[Any],
    dataset: BeirDataset,
    mode: str,
    options: SearchOptions,
    *,
    tenant: str,
    embeddings: dict[str, np.ndarray],
    fetch: int = DEFAULT_FETCH,
    latency_k: int | None = DEFAULT_LATENCY_K,
    advance: Callable[[], None] | None = None,
    reranking: RerankSettings | None = None,
) -> ModeResult:
    """Run every query in ``mode``: a ranked pass of ``fetch`` chunks for the metrics, then
    (when ``latency_k`` is set) a timed pass asking for ``latency_k`` rows, as applications do.
    Latency is the database round trip of one search call (query embedding excluded).

    With ``reranking``, the first ``reranking.top`` chunks of each search are re-ordered by
    the re-ranker (the rest keep their order behind them), and the timed pass fetches
    ``reranking.top`` candidates and re-ranks them: its latency includes the re-ranker's."""

    def one(qid: str, limit: int) -> tuple[list[SearchHit], float]:
        start = time.perf_counter()
        query = dataset.queries[qid]
        if reranking is not None:
            limit = max(limit, reranking.top)
        hits = search(
            conn,
            query,
            replace(options, limit=limit),
            tenant=tenant,
            query_embedding=embeddings[qid],
        )
        if reranking is not None:
            # the re-ranked head keeps ranks 1..top, the tail its ranks after them
            head, _ = rerank_hits(query, hits, reranking, reranking.top)
            hits = head + hits[reranking.top :]
        return hits, (time.perf_counter() - start) * 1000.0

    first = next(iter(dataset.queries))
    one(first, latency_k or fetch)  # warm caches and plans before timing
    rankings: dict[str, list[str]] = {}
    latencies: list[float] = []
    for qid in dataset.queries:
        hits, ms = one(qid, fetch)
        rankings[qid] = document_ranking(dataset, hits)
        if latency_k is None:
            latencies.append(ms)
        if advance:
            advance()
    if latency_k is not None:
        for qid in dataset.queries:
            latencies.append(one(qid, latency_k)[1])
            if advance:
                advance()
    per_query = per_query_metrics(dataset.qrels, rankings)  # once: folds re-weigh these
    return ModeResult(mode, mean_metrics(per_query), latencies, rankings, per_query)


def ingest_dataset(
    dsn: str,
    dataset: BeirDataset,
    *,
    tenant: str,
    embedder: Embedder,
    progress: bool | ProgressMode,
) -> IngestSummary:
    """Load the corpus into ``tenant`` through the ingestion API (unchanged docs are skipped)."""
    from pgrag.ingest import ingest_documents
    from pgrag.pipeline.extract import ExtractedDocument

    documents = (
        ExtractedDocument.from_text(
            uri=dataset.uri(doc_id),
            title=title,
            text=f"{title}\n\n{text}" if title else text,
            metadata={"beir_id": doc_id},
        )
        for doc_id, (title, text) in dataset.corpus.items()
    )
    return ingest_documents(
        dsn,
        documents,
        tenant=tenant,
        embedder=embedder,
        progress=progress,
        total=len(dataset.corpus),
    )
