"""Retrieval quality on BEIR-format data (``pgrag eval``, ``benchmarks/beir.py``)."""

from pgrag.eval.run import (
    DEFAULT_EVAL_MODES,
    DEFAULT_FETCH,
    DEFAULT_LATENCY_K,
    EVAL_MODES,
    METRIC_NAMES,
    BeirDataset,
    ModeResult,
    document_ranking,
    embed_queries,
    ingest_dataset,
    load_beir,
    load_qrels,
    metrics,
    parse_mode,
    run_mode,
    trec_run,
)

__all__ = [
    "DEFAULT_EVAL_MODES",
    "DEFAULT_FETCH",
    "DEFAULT_LATENCY_K",
    "EVAL_MODES",
    "METRIC_NAMES",
    "BeirDataset",
    "ModeResult",
    "document_ranking",
    "embed_queries",
    "ingest_dataset",
    "load_beir",
    "load_qrels",
    "metrics",
    "parse_mode",
    "run_mode",
    "trec_run",
]
