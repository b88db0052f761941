"""nDCG@10, recall@10/100 and MRR@10 from ``pytrec_eval`` (trec_eval's code).

``pytrec_eval`` (PyPI ``pytrec-eval-terrier``) comes with the ``eval`` extra, not with a
production install: :func:`trec_eval` says in one line how to install it when it is missing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import ModuleType
from typing import Any

from pgrag.errors import MissingExtra

METRIC_NAMES = ("ndcg@10", "recall@10", "recall@100", "mrr@10")


def trec_eval() -> ModuleType:
    """The ``pytrec_eval`` module, or :class:`MissingExtra` saying how to install it."""
    try:
        import pytrec_eval
    except ImportError as exc:
        raise MissingExtra(
            "pgrag eval needs the eval extra (pytrec-eval-terrier): pip install 'pgrag-sql[eval]'."
        ) from exc
    return pytrec_eval


def trec_run(
    rankings: dict[str, list[str]], depth: int | None = None
) -> dict[str, dict[str, float]]:
    """Rankings as a trec run: distinct, decreasing scores so no tie-breaking reorders them."""
    run: dict[str, dict[str, float]] = {}
    for qid, docs in rankings.items():
        docs = docs[:depth] if depth else docs
        run[qid] = {doc: float(len(docs) - i) for i, doc in enumerate(docs)}
    return run


def per_query_metrics(
    qrels: dict[str, dict[str, int]], rankings: dict[str, list[str]]
) -> dict[str, dict[str, float]]:
    """nDCG@10, recall@10, recall@100 and MRR@10 of every judged query (query id -> name -> value).

    Computed by ``pytrec_eval``; a query with no result counts as 0 (trec_eval would skip it).
    """
    pytrec_eval = trec_eval()

    def per_query(measures: set[str], run: dict[str, dict[str, float]]) -> dict[str, Any]:
        run = {qid: docs for qid, docs in run.items() if docs}
        return pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(run) if run else {}

    full = per_query({"ndcg_cut.10", "recall.10", "recall.100"}, trec_run(rankings))
    # MRR@10: reciprocal rank over the first 10 documents only.
    top10 = per_query({"recip_rank"}, trec_run(rankings, depth=10))
    names = {"ndcg@10": "ndcg_cut_10", "recall@10": "recall_10", "recall@100": "recall_100"}
    out: dict[str, dict[str, float]] = {}
    for qid in qrels:
        row = {name: float(full.get(qid, {}).get(key, 0.0)) for name, key in names.items()}
        row["mrr@10"] = float(top10.get(qid, {}).get("recip_rank", 0.0))
        out[qid] = row
    return out


def mean_metrics(
    per_query: Mapping[str, Mapping[str, float]], qids: Iterable[str] | None = None
) -> dict[str, float]:
    """Each metric's mean over ``qids`` (default: every query of ``per_query``)."""
    chosen = list(per_query) if qids is None else list(qids)
    n = len(chosen)
    return {name: sum(per_query[q][name] for q in chosen) / n for name in METRIC_NAMES}


def metrics(qrels: dict[str, dict[str, int]], rankings: dict[str, list[str]]) -> dict[str, float]:
    """nDCG@10, recall@10, recall@100 and MRR@10 averaged over every judged query.

    Computed by ``pytrec_eval``; a query with no result counts as 0 (trec_eval would skip it).
    """
    return mean_metrics(per_query_metrics(qrels, rankings))
