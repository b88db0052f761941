"""Retrieval quality and latency on a BEIR dataset (default: SciFact), every mode in ONE run.

Rows:
  * pgrag's SQL functions through ``pgrag.search`` (the code ``pgrag search`` runs):
    keyword (BM25), vector, hybrid (default weighted fusion), hybrid-rrf, and extra modes;
  * Postgres full-text baselines as public guides write them, as plain SQL over the same
    chunks: ``ts_rank`` length-normalized with OR semantics, ``ts_rank_cd`` with AND semantics
    (websearch_to_tsquery), and the Supabase hybrid-search guide's RRF function body.

Quality: nDCG@10, recall@10/100, MRR@10 over documents (a document ranks at its best chunk),
from ``pytrec_eval``. Latency: p50/p95 of one query returning 10 rows, measured client-side
over the same connection (query embedding excluded; embeddings are computed once up front).

    PGRAG_HOME=/tmp/pgrag-search-dev .venv/bin/python benchmarks/beir.py

The corpus is ingested on the first run into tenant ``beir-<name>`` (a few minutes of
embedding on 2 cores); later runs re-use it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from common import SCIFACT, database_url

from pgrag import eval as ev
from pgrag.db import connect
from pgrag.pipeline.embedders import embedder_for_database
from pgrag.search import query_embedder

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATA = SCIFACT
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "beir.json"

# Reference figures on SciFact test measured on this machine (the project guide).
REFERENCE = {
    "bm25s (k1 1.5, b 0.75, English stemming + stop words)": 0.686,
    "all-MiniLM-L6-v2 exact": 0.645,
    "all-MiniLM-L6-v2 HNSW": 0.639,
    "RRF of bm25s + MiniLM in Python": 0.717,
    "ts_rank length-normalized, OR": 0.61,
    "ts_rank_cd, OR": 0.33,
    "ts_rank_cd, AND": 0.07,
    "Supabase guide RRF": 0.656,
}
TARGETS = {"keyword": (0.68, 15.0), "hybrid": (0.72, 20.0)}

# -- baselines: plain SQL as public guides write it ----------------------------------------------
# Each takes (tenant, query text, query embedding, limit) and returns (source_uri) rows in
# rank order. They run as the connecting (super)user with an explicit tenant filter.
# Guides rank a plain to_tsvector(config, content) column. pgrag's chunks.fts adds identifier
# parts as weight-A lexemes (pgrag.chunk_fts); ts_filter(fts, '{d}') is exactly the plain
# tsvector (equal on every SciFact chunk), so the baselines match and rank on that, with
# `fts @@ q` kept in front so the GIN index still narrows the rows.

TS_RANK_OR = """
with q as (
    select pg_catalog.replace(pg_catalog.plainto_tsquery('english', %(text)s)::text,
                              '&', '|')::tsquery as query
)
select d.source_uri
from pgrag.chunks c
join pgrag.documents d on d.tenant_id = c.tenant_id and d.id = c.document_id, q
where c.tenant_id = %(tenant)s and c.fts @@ q.query and ts_filter(c.fts, '{d}') @@ q.query
order by ts_rank(ts_filter(c.fts, '{d}'), q.query, 1) desc
limit %(limit)s
"""

TS_RANK_CD_AND = """
select d.source_uri
from pgrag.chunks c
join pgrag.documents d on d.tenant_id = c.tenant_id and d.id = c.document_id
where c.tenant_id = %(tenant)s and c.fts @@ websearch_to_tsquery('english', %(text)s)
  and ts_filter(c.fts, '{d}') @@ websearch_to_tsquery('english', %(text)s)
order by ts_rank_cd(ts_filter(c.fts, '{d}'), websearch_to_tsquery('english', %(text)s)) desc
limit %(limit)s
"""

# The body of the Supabase "Hybrid search" guide's function (rrf_k 50, weights 1, candidates
# least(match_count, 30) * 2 per arm, inner product on normalized embeddings).
SUPABASE_RRF = """
with full_text as (
    select c.id,
           row_number() over (
               order by ts_rank_cd(ts_filter(c.fts, '{d}'),
                                   websearch_to_tsquery('english', %(text)s)) desc
           ) as rank_ix
    from pgrag.chunks c
    where c.tenant_id = %(tenant)s and c.fts @@ websearch_to_tsquery('english', %(text)s)
      and ts_filter(c.fts, '{d}') @@ websearch_to_tsquery('english', %(text)s)
    order by rank_ix
    limit least(%(limit)s, 30) * 2
),
semantic as (
    select c.id,
           row_number() over (order by c.embedding <#> %(embedding)s) as rank_ix
    from pgrag.chunks c
    where c.tenant_id = %(tenant)s
    order by rank_ix
    limit least(%(limit)s, 30) * 2
)
select d.source_uri
from full_text
full outer join semantic on full_text.id = semantic.id
join pgrag.chunks c on c.tenant_id = %(tenant)s and c.id = coalesce(full_text.id, semantic.id)
join pgrag.documents d on d.tenant_id = c.tenant_id and d.id = c.document_id
order by coalesce(1.0 / (50 + full_text.rank_ix), 0.0) * 1
       + coalesce(1.0 / (50 + semantic.rank_ix), 0.0) * 1 desc
limit least(%(limit)s, 30)
"""

BASELINES = {
    "pg ts_rank OR (normalized)": TS_RANK_OR,
    "pg ts_rank_cd AND": TS_RANK_CD_AND,
    "supabase guide RRF": SUPABASE_RRF,
}


def run_baseline(
    conn: Any,
    dataset: ev.BeirDataset,
    statement: str,
    *,
    tenant: str,
    embeddings: dict[str, np.ndarray],
    fetch: int,
    latency_k: int,
) -> ev.ModeResult:
    def one(qid: str, limit: int) -> tuple[list[str], float]:
        params = {
            "tenant": tenant,
            "text": dataset.queries[qid],
            "embedding": embeddings[qid],
            "limit": limit,
        }
        start = time.perf_counter()
        with conn.transaction():
            rows = conn.execute(statement, params).fetchall()
        return [r[0] for r in rows], (time.perf_counter() - start) * 1000.0

    one(next(iter(dataset.queries)), latency_k)
    rankings: dict[str, list[str]] = {}
    for qid in dataset.queries:
        uris, _ = one(qid, fetch)
        seen: list[str] = []
        for uri in uris:
            doc = dataset.doc_id(uri)
            if doc is not None and doc not in seen:
                seen.append(doc)
        rankings[qid] = seen
    latencies = [one(qid, latency_k)[1] for qid in dataset.queries]
    return ev.ModeResult("", ev.metrics(dataset.qrels, rankings), latencies, rankings)


def git_head() -> str | None:
    """The checkout's commit (the SQL functions measured are the ones migrated from it)."""
    import subprocess

    try:
        out = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.stdout.strip()


def python_rrf(*runs: dict[str, list[str]], k: int = 60) -> dict[str, list[str]]:
    """Reciprocal rank fusion of document rankings (the reference fusion, done in Python)."""
    fused: dict[str, list[str]] = {}
    for qid in runs[0]:
        scores: dict[str, float] = {}
        for run in runs:
            for rank, doc in enumerate(run.get(qid, []), 1):
                scores[doc] = scores.get(doc, 0.0) + 1.0 / (k + rank)
        fused[qid] = sorted(scores, key=lambda d: (-scores[d], d))
    return fused


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="BEIR dataset folder")
    parser.add_argument("--dsn", default=os.environ.get("PGRAG_DSN"), help="default: embedded")
    parser.add_argument("--tenant", help="default beir-<dataset name>")
    parser.add_argument(
        "--mode",
        action="append",
        dest="modes",
        help="pgrag modes (repeatable; default keyword, vector, hybrid, hybrid-rrf)",
    )
    parser.add_argument("--no-baselines", action="store_true")
    parser.add_argument("--limit-queries", type=int)
    parser.add_argument("--fetch", type=int, default=ev.DEFAULT_FETCH)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--no-ingest", action="store_true")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="session setting for every query (e.g. pgrag.exact_search_max_rows=0)",
    )
    parser.add_argument(
        "--folds",
        type=int,
        metavar="N",
        help="also cross-validate the choice among the hybrid modes run (the fusion candidates): "
        "each of N query folds scores the one best on the other folds (as pgrag eval --folds)",
    )
    parser.add_argument(
        "--quality-only",
        action="store_true",
        help="skip the timed 10-row pass (latency then comes from the ranked pass)",
    )
    args = parser.parse_args(argv)

    dataset = ev.load_beir(args.data, limit_queries=args.limit_queries)
    if args.folds is not None:
        ev.assign_folds(dataset.queries, args.folds)  # a bad N fails before any work
    tenant = args.tenant or f"beir-{dataset.name}"
    dsn = database_url(args.dsn)
    # The corpus embeds as `pgrag ingest` embeds documents, the queries as `pgrag search` does
    # (the local model: int8 and fp32 by default), like `pgrag eval`.
    with connect(dsn) as conn:
        embedder = query_embedder(conn)
        documents = embedder_for_database(conn, for_documents=True)
    if not args.no_ingest:
        started = time.perf_counter()
        summary = ev.ingest_dataset(
            dsn, dataset, tenant=tenant, embedder=documents, progress=sys.stderr.isatty()
        )
        print(f"ingest: {summary} in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    started = time.perf_counter()
    embeddings = ev.embed_queries(embedder, dataset)
    embed_ms = (time.perf_counter() - started) * 1000.0 / len(dataset.queries)

    results: dict[str, dict[str, Any]] = {}
    latency_k = None if args.quality_only else ev.DEFAULT_LATENCY_K
    with connect(dsn) as conn:
        for setting in args.set:
            name, _, value = setting.partition("=")
            conn.execute("select pg_catalog.set_config(%s, %s, false)", (name, value))
        conn.commit()
        counts = conn.execute(
            "select (select count(*) from pgrag.documents where tenant_id = %(t)s),"
            " (select count(*) from pgrag.chunks where tenant_id = %(t)s),"
            " pg_catalog.current_setting('server_version'),"
            " (select extversion from pg_catalog.pg_extension where extname = 'vector')",
            {"t": tenant},
        ).fetchone()
        conn.rollback()
        assert counts is not None
        jobs: list[tuple[str, Callable[[], ev.ModeResult]]] = []
        fusion: list[str] = []  # the hybrid modes: candidates for the fusion default
        for spec in args.modes or ev.DEFAULT_EVAL_MODES:
            name, options = ev.parse_mode(spec)
            if options.mode == "hybrid":
                fusion.append(name)
            jobs.append(
                (
                    name,
                    lambda name=name, options=options: ev.run_mode(
                        conn,
                        dataset,
                        name,
                        options,
                        tenant=tenant,
                        embeddings=embeddings,
                        fetch=args.fetch,
                        latency_k=latency_k,
                    ),
                )
            )
        if not args.no_baselines:
            for name, statement in BASELINES.items():
                jobs.append(
                    (
                        name,
                        lambda statement=statement: run_baseline(
                            conn,
                            dataset,
                            statement,
                            tenant=tenant,
                            embeddings=embeddings,
                            fetch=args.fetch,
                            latency_k=latency_k or args.fetch,
                        ),
                    )
                )
        rankings: dict[str, dict[str, list[str]]] = {}
        per_query: dict[str, dict[str, dict[str, float]]] = {}
        for name, job in jobs:
            started = time.perf_counter()
            result = job()
            rankings[name] = result.rankings
            per_query[name] = result.per_query
            results[name] = result.as_dict()
            print(
                f"{name}: nDCG@10 {results[name]['ndcg@10']:.4f}, "
                f"p50 {results[name]['latency_p50_ms']} ms ({time.perf_counter() - started:.0f} s)",
                file=sys.stderr,
            )

    if "keyword" in rankings and "vector" in rankings:
        # Reference: RRF (k 60) of the two arms' document rankings, fused in Python, no latency.
        fused = python_rrf(rankings["keyword"], rankings["vector"])
        row = ev.ModeResult("", ev.metrics(dataset.qrels, fused), [], fused).as_dict()
        results["python RRF of keyword + vector documents"] = row

    cross_validation = None
    if args.folds is not None and fusion:
        # Out-of-fold figures of choosing the fusion by nDCG@10 on the other folds: what the
        # choice is worth on queries it was not made on (the full-test best is optimistic).
        cv = ev.cross_validate({name: per_query[name] for name in fusion}, args.folds)
        cross_validation = {"candidates": fusion, **cv.as_dict()}

    home = os.environ.get("PGRAG_HOME")
    precision = os.environ.get("PGRAG_LOCAL_PRECISION")  # the local model's int8 variant
    command = (
        (f"PGRAG_HOME={home} " if home and not args.dsn else "")
        + (f"PGRAG_LOCAL_PRECISION={precision} " if precision else "")
        + ".venv/bin/python benchmarks/beir.py"
        + (" " + " ".join(argv if argv is not None else sys.argv[1:])).rstrip()
    )
    report = {
        "dataset": dataset.name,
        "documents": counts[0],
        "chunks": counts[1],
        "queries": len(dataset.queries),
        "tenant": tenant,
        "embedding_model": embedder.model_name,
        # The local model's weights the corpus was (or, with --no-ingest, would be) embedded
        # with, and the queries'.
        "precision": {
            "documents": getattr(documents, "precision", None),
            "queries": getattr(embedder, "precision", None),
        },
        "query_embedding_ms_per_query": round(embed_ms, 2),
        "latency": "client-side ms of one query returning 10 rows; embedding excluded",
        "fetch_for_metrics": args.fetch,
        "session_settings": args.set,
        "postgres": counts[2],
        "pgvector": counts[3],
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": command,
        "git_head": git_head(),
        "modes": results,
        **({"cross_validation": cross_validation} if cross_validation else {}),
        "reference_ndcg@10": REFERENCE,
        "targets": {k: {"ndcg@10": q, "latency_p50_ms": ms} for k, (q, ms) in TARGETS.items()},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")

    print(
        f"\n{dataset.name}: {counts[0]} documents, {counts[1]} chunks, "
        f"{len(dataset.queries)} queries"
    )
    print(
        f"{'mode':<30}{'nDCG@10':>9}{'R@10':>8}{'R@100':>8}{'MRR@10':>8}{'p50 ms':>9}{'p95 ms':>9}"
    )

    def fmt(ms: float | None) -> str:
        return f"{ms:>9.2f}" if ms is not None else f"{'-':>9}"

    for name, row in results.items():
        print(
            f"{name:<30}{row['ndcg@10']:>9.4f}{row['recall@10']:>8.4f}{row['recall@100']:>8.4f}"
            f"{row['mrr@10']:>8.4f}{fmt(row['latency_p50_ms'])}{fmt(row['latency_p95_ms'])}"
        )
    for mode, (quality, p50) in TARGETS.items():
        if mode in results:
            row = results[mode]
            ok = row["ndcg@10"] >= quality and row["latency_p50_ms"] <= p50
            print(
                f"target {mode}: nDCG@10 >= {quality} and p50 <= {p50} ms: "
                f"{'met' if ok else 'MISSED'}"
            )
    if cross_validation and "chosen" in cross_validation:  # one candidate: nothing chosen
        cv_row = cross_validation
        print(
            f"cross-validated fusion ({cv_row['folds']} folds): chosen {cv_row['chosen']}, "
            f"out-of-fold nDCG@10 {cv_row['out_of_fold']['ndcg@10']:.4f} vs best full-test "
            f"{cv_row['best_full_test']['ndcg@10']:.4f} ({cv_row['best_full_test']['mode']}), "
            f"optimism {cv_row['optimism_ndcg@10']:+.4f}"
        )
    print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
