"""Retrieval quality on BEIR-format data: nDCG@10, recall@10/100, MRR@10 and latency per mode.

The corpus is ingested into a tenant of its own through the normal ingestion API (later runs
re-use it: unchanged documents are skipped), each query runs through the same SQL functions
``pgrag search`` calls, chunk hits are folded into document rankings (a document ranks at its
best chunk), and the metrics come from ``pytrec_eval`` (the trec_eval implementation).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import numpy as np
import psycopg

from pgrag.embedders import Embedder
from pgrag.errors import ConfigError
from pgrag.progress import ProgressMode
from pgrag.search import SearchHit, SearchOptions, search

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

METRIC_NAMES = ("ndcg@10", "recall@10", "recall@100", "mrr@10")


@dataclass
class BeirDataset:
    """A BEIR-format dataset: corpus, the judged queries, and their relevance judgements."""

    name: str
    path: Path
    corpus: dict[str, tuple[str, str]]  # doc id -> (title, text)
    queries: dict[str, str]  # query id -> text, judged queries only, file order
    qrels: dict[str, dict[str, int]]  # query id -> doc id -> relevance

    def uri(self, doc_id: str) -> str:
        return f"beir:{self.name}/{doc_id}"

    def doc_id(self, uri: str) -> str | None:
        prefix = f"beir:{self.name}/"
        return uri[len(prefix) :] if uri.startswith(prefix) else None


def _jsonl(path: Path) -> Iterator[dict[str, Any]]:
    with path.open(encoding="utf-8") as fh:
        for number, line in enumerate(fh, 1):
            if line.strip():
                try:
                    yield json.loads(line)
                except json.JSONDecodeError as exc:
                    raise ConfigError(f"{path}:{number}: not valid JSON ({exc.msg}).") from exc


def load_qrels(path: Path) -> dict[str, dict[str, int]]:
    """``query-id<TAB>corpus-id<TAB>score`` lines (a header line is skipped)."""
    qrels: dict[str, dict[str, int]] = {}
    with path.open(encoding="utf-8") as fh:
        for number, line in enumerate(fh, 1):
            parts = line.rstrip("\n").split("\t")
            if not line.strip() or (number == 1 and parts[0] == "query-id"):
                continue
            if len(parts) < 3:
                raise ConfigError(f"{path}:{number}: expected query-id, corpus-id and score.")
            try:
                qrels.setdefault(parts[0], {})[parts[1]] = int(parts[2])
            except ValueError as exc:
                raise ConfigError(
                    f"{path}:{number}: the score {parts[2]!r} is no integer."
                ) from exc
    return qrels


def load_beir(
    path: Path, qrels_file: Path | None = None, limit_queries: int | None = None
) -> BeirDataset:
    """Read ``corpus.jsonl``, ``queries.jsonl`` and ``qrels/test.tsv`` (or ``qrels_file``)."""
    path = Path(path)
    corpus_file, queries_file = path / "corpus.jsonl", path / "queries.jsonl"
    qrels_file = qrels_file or path / "qrels" / "test.tsv"
    for required in (corpus_file, queries_file, qrels_file):
        if not required.is_file():
            raise ConfigError(
                f"{required} is missing: a BEIR dataset folder holds corpus.jsonl, "
                "queries.jsonl and qrels/test.tsv (or pass --qrels FILE)."
            )
    corpus = {
        str(row["_id"]): (str(row.get("title") or ""), str(row.get("text") or ""))
        for row in _jsonl(corpus_file)
    }
    qrels = load_qrels(qrels_file)
    queries = {
        str(row["_id"]): str(row["text"])
        for row in _jsonl(queries_file)
        if str(row["_id"]) in qrels
    }
    if limit_queries is not None:
        queries = dict(list(queries.items())[:limit_queries])
    qrels = {qid: judged for qid, judged in qrels.items() if qid in queries}
    if not queries:
        raise ConfigError(f"no query in {queries_file} has a judgement in {qrels_file}.")
    return BeirDataset(path.resolve().name, path, corpus, queries, qrels)


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


def trec_run(
    rankings: dict[str, list[str]], depth: int | None = None
) -> dict[str, dict[str, float]]:
    """Rankings as a trec run: distinct, decreasing scores so no tie-breaking reorders them."""
    run: dict[str, dict[str, float]] = {}
    for qid, docs in rankings.items():
        docs = docs[:depth] if depth else docs
        run[qid] = {doc: float(len(docs) - i) for i, doc in enumerate(docs)}
    return run


def metrics(qrels: dict[str, dict[str, int]], rankings: dict[str, list[str]]) -> dict[str, float]:
    """nDCG@10, recall@10, recall@100 and MRR@10 averaged over every judged query.

    Computed by ``pytrec_eval``; a query with no result counts as 0 (trec_eval would skip it).
    """
    import pytrec_eval

    def per_query(measures: set[str], run: dict[str, dict[str, float]]) -> dict[str, Any]:
        run = {qid: docs for qid, docs in run.items() if docs}
        return pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(run) if run else {}

    full = per_query({"ndcg_cut.10", "recall.10", "recall.100"}, trec_run(rankings))
    # MRR@10: reciprocal rank over the first 10 documents only.
    top10 = per_query({"recip_rank"}, trec_run(rankings, depth=10))
    names = {"ndcg@10": "ndcg_cut_10", "recall@10": "recall_10", "recall@100": "recall_100"}
    n = len(qrels)
    out = {
        name: sum(full.get(qid, {}).get(key, 0.0) for qid in qrels) / n
        for name, key in names.items()
    }
    out["mrr@10"] = sum(top10.get(qid, {}).get("recip_rank", 0.0) for qid in qrels) / n
    return out


@dataclass
class ModeResult:
    """One mode's figures and the rankings behind them."""

    mode: str
    metrics: dict[str, float]
    latencies_ms: list[float]
    rankings: dict[str, list[str]] = field(repr=False)

    def as_dict(self) -> dict[str, Any]:
        lat = np.asarray(self.latencies_ms, dtype=float)
        return {
            **{k: round(v, 4) for k, v in self.metrics.items()},
            "latency_p50_ms": round(float(np.percentile(lat, 50)), 2) if lat.size else None,
            "latency_p95_ms": round(float(np.percentile(lat, 95)), 2) if lat.size else None,
            "queries": len(self.rankings),
        }


def embed_queries(embedder: Embedder, dataset: BeirDataset) -> dict[str, np.ndarray]:
    """Every query's embedding, computed once in batches (not part of the measured latency)."""
    ids = list(dataset.queries)
    vectors = embedder.embed([dataset.queries[qid] for qid in ids])
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
) -> ModeResult:
    """Run every query in ``mode``: a ranked pass of ``fetch`` chunks for the metrics, then
    (when ``latency_k`` is set) a timed pass asking for ``latency_k`` rows, as applications do.
    Latency is the database round trip of one search call (query embedding excluded)."""

    def one(qid: str, limit: int) -> tuple[list[SearchHit], float]:
        start = time.perf_counter()
        hits = search(
            conn,
            dataset.queries[qid],
            replace(options, limit=limit),
            tenant=tenant,
            query_embedding=embeddings[qid],
        )
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
    return ModeResult(mode, metrics(dataset.qrels, rankings), latencies, rankings)


def ingest_dataset(
    dsn: str,
    dataset: BeirDataset,
    *,
    tenant: str,
    embedder: Embedder,
    progress: bool | ProgressMode,
) -> Any:
    """Load the corpus into ``tenant`` through the ingestion API (unchanged docs are skipped)."""
    from pgrag.extract import ExtractedDocument
    from pgrag.ingest import ingest_documents

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
