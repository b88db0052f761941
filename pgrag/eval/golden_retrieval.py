"""Retrieval metrics of a golden set: hit rate@k, MRR@k and recall@k against expected sources.

Each question is searched as its tenant, in each mode, through the SQL functions ``pgrag
search`` calls (:func:`pgrag.search.search`); its chunk hits are folded into a document ranking
(a document ranks at its best chunk). A document is relevant when it matches one of the
question's expected sources or titles (:func:`pgrag.eval.golden.expected_items`); each expected
item counts once, at the first document matching it (a document matching several items stands
for the first of them not found yet), so recall@k is the share of expected
items found in the first k documents. The metrics come from ``pytrec_eval`` (``success``,
``recall`` and ``recip_rank`` over the first k documents); a question with no result scores 0.
Questions without expected sources or titles are left out of these metrics.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import psycopg

from pgrag.eval.golden import GoldenQuestion, expected_items
from pgrag.eval.metrics import trec_eval, trec_run
from pgrag.pipeline.embedders import Embedder
from pgrag.search import SearchHit, SearchOptions, rerank_hits, search

if TYPE_CHECKING:
    from pgrag.rerank import RerankSettings

RETRIEVAL_METRICS = ("hit_rate", "mrr", "recall")
DEFAULT_K = 10


@dataclass(frozen=True)
class RankedDocument:
    document_id: int
    source_uri: str
    title: str
    item: int | None  # the expected item it is the first match of, else None


@dataclass(frozen=True)
class QuestionRetrieval:
    """One question's document ranking in one mode, and its metrics at k."""

    question: GoldenQuestion
    ranking: list[RankedDocument]
    metrics: dict[str, float]

    def as_dict(self, k: int) -> dict[str, Any]:
        found = {d.item: rank for rank, d in enumerate(self.ranking, 1) if d.item is not None}
        expected = self.question.expected
        return {
            **{name: round(value, 4) for name, value in self.metrics.items()},
            "expected_ranks": {item: found.get(i) for i, item in enumerate(expected)},
            "retrieved": [d.source_uri for d in self.ranking[:k]],
        }


def document_ranking(question: GoldenQuestion, hits: Sequence[SearchHit]) -> list[RankedDocument]:
    """Distinct documents in rank order (each at its best chunk), labelled with the expected
    item each is the first match of."""
    ranking: list[RankedDocument] = []
    seen: set[int] = set()
    used: set[int] = set()
    for hit in sorted(hits, key=lambda h: h.rank):
        if hit.document_id in seen:
            continue
        seen.add(hit.document_id)
        item = next(
            (i for i in expected_items(question, hit.source_uri, hit.title) if i not in used), None
        )
        if item is not None:
            used.add(item)
        ranking.append(RankedDocument(hit.document_id, hit.source_uri, hit.title, item))
    return ranking


def retrieval_metrics(
    questions: Sequence[GoldenQuestion], rankings: dict[str, list[RankedDocument]], k: int
) -> dict[str, dict[str, float]]:
    """hit rate@k, MRR@k and recall@k of each question (by id), from ``pytrec_eval``."""
    pytrec_eval = trec_eval()
    qrels = {q.id: {f"e{i}": 1 for i in range(len(q.expected))} for q in questions}
    labelled = {
        qid: [f"e{d.item}" if d.item is not None else f"d{d.document_id}" for d in ranking]
        for qid, ranking in rankings.items()
    }
    run = {qid: docs for qid, docs in trec_run(labelled, depth=k).items() if docs}
    measures = {f"success.{k}", f"recall.{k}", "recip_rank"}
    scored = pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(run) if run else {}
    keys = {"hit_rate": f"success_{k}", "mrr": "recip_rank", "recall": f"recall_{k}"}
    return {
        q.id: {name: float(scored.get(q.id, {}).get(key, 0.0)) for name, key in keys.items()}
        for q in questions
    }


def run_retrieval(
    conn: psycopg.Connection[Any],
    questions: Sequence[GoldenQuestion],
    options: SearchOptions,
    *,
    embeddings: dict[str, np.ndarray],
    k: int = DEFAULT_K,
    fetch: int = 100,
    reranking: RerankSettings | None = None,
    advance: Callable[[], None] | None = None,
) -> list[QuestionRetrieval]:
    """Search every question (with expected items) as its tenant in one mode; the results."""
    judged = [q for q in questions if q.judged_for_retrieval]
    rankings: dict[str, list[RankedDocument]] = {}
    for q in judged:
        limit = max(fetch, k, reranking.top if reranking is not None else 0)
        hits = search(
            conn,
            q.question,
            replace(options, limit=limit),
            tenant=q.tenant,
            query_embedding=None if options.mode == "keyword" else embeddings[q.id],
        )
        if reranking is not None:
            head, _ = rerank_hits(q.question, hits, reranking, reranking.top)
            hits = head + hits[reranking.top :]
        rankings[q.id] = document_ranking(q, hits)
        if advance is not None:
            advance()
    scores = retrieval_metrics(judged, rankings, k)
    return [QuestionRetrieval(q, rankings[q.id], scores[q.id]) for q in judged]


def embed_questions(
    writer: psycopg.Connection[Any], questions: Sequence[GoldenQuestion], embedder: Embedder
) -> dict[str, np.ndarray]:
    """Every question's embedding (by id), through each tenant's query-embedding cache; the
    model's tokens are recorded as the tenant's ``query`` usage, as ``pgrag search`` does."""
    from pgrag.query_cache import QueryEmbeddings

    out: dict[str, np.ndarray] = {}
    for tenant in dict.fromkeys(q.tenant for q in questions):
        mine = [q for q in questions if q.tenant == tenant]
        queries = QueryEmbeddings(writer, tenant, embedder)
        vectors = queries.embed_many([q.question for q in mine])
        queries.record_usage()
        out.update(
            {q.id: np.asarray(v, dtype=np.float32) for q, v in zip(mine, vectors, strict=True)}
        )
    return out
