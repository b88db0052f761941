"""Retrieval quality on BEIR-format data: nDCG@10, recall@10/100, MRR@10 and latency per mode.

Used by ``pgrag eval`` and ``benchmarks/beir.py``. ``dataset`` reads a BEIR folder; ``run`` ingests
its corpus into a tenant of its own through the normal ingestion API, runs every judged query in
each mode through the SQL functions ``pgrag search`` calls and folds chunk hits into document
rankings (a document ranks at its best chunk); ``metrics`` scores the rankings with
``pytrec_eval``, which comes with the ``eval`` extra (``pip install 'pgrag-sql[eval]'``).

A team's own golden question set (``pgrag eval --golden``) lives in ``golden`` (the file),
``golden_retrieval`` (hit rate, MRR and recall at k per mode), ``judges`` and
``golden_answers`` (RAGAS-style answer metrics judged by the chat endpoint) and
``golden_report`` (means, thresholds, JSON).
"""

from pgrag.eval.dataset import BeirDataset, load_beir, load_qrels
from pgrag.eval.folds import CrossValidation, assign_folds, cross_validate
from pgrag.eval.metrics import (
    METRIC_NAMES,
    mean_metrics,
    metrics,
    per_query_metrics,
    trec_eval,
    trec_run,
)
from pgrag.eval.run import (
    DEFAULT_EVAL_MODES,
    DEFAULT_FETCH,
    DEFAULT_LATENCY_K,
    EVAL_MODES,
    ModeResult,
    document_ranking,
    embed_queries,
    ingest_dataset,
    parse_mode,
    run_mode,
)

__all__ = [
    "DEFAULT_EVAL_MODES",
    "DEFAULT_FETCH",
    "DEFAULT_LATENCY_K",
    "EVAL_MODES",
    "METRIC_NAMES",
    "BeirDataset",
    "CrossValidation",
    "ModeResult",
    "assign_folds",
    "cross_validate",
    "document_ranking",
    "embed_queries",
    "ingest_dataset",
    "load_beir",
    "load_qrels",
    "mean_metrics",
    "metrics",
    "parse_mode",
    "per_query_metrics",
    "run_mode",
    "trec_eval",
    "trec_run",
]
