"""Can BM25 top-k at 100k chunks read fewer postings? The exact scan against three strategies.

pgrag's keyword arm (``keyword_search``) scores every posting of every query lexeme: exact, but
its cost grows with the postings a query touches. This script measures three ways of reading
fewer (``benchmarks/sql/bm25_pruning.sql``; not installed by pgrag), each returning exact BM25
scores for the rows it returns, on the queries and corpora of ``benchmarks/latency.py``:

* ``impact``: the m highest-impact postings of each lexeme (an impact-ordered expression index),
  then the best partial sums completed by primary-key probes;
* ``rare``: every posting of the rarest lexemes within a budget, then completion likewise;
* ``maxscore``: exact. The rarest lexemes within a budget give partial sums; the other lexemes
  are probed one at a time, only for chunks that can still reach the k-th best given each
  lexeme's largest term part; when that cannot prove the top k, the exact scan answers;
  ``maxscore-bail`` runs the exact scan at once when over 2,000 chunks would be probed first.

Two floors bound any evaluation that visits every posting from below: ``read`` visits those of the
query's lexemes and only counts them; ``group`` also groups them by chunk (no formula). For
context, the same run times the other parts of a hybrid query: the vector arm
(``pgrag.vector_candidates``, k candidates) and ``hybrid_search`` itself (match_count 10).

For each strategy: p50 / p95 latency and recall@k against the exact top k (a returned row counts
when its exact score reaches the k-th best exact score, so tied duplicates count as found), k =
40 (what ``hybrid_search`` asks each arm for). Two 100k-chunk corpora in one tenant: ``copies``
(the latency corpus: 1,000 SciFact abstracts, 100 rotated copies each) and ``mixed`` (each chunk
a random draw of SciFact sentences, as long as a random abstract: no duplicate chunks).

    .venv/bin/python benchmarks/bm25_pruning.py                  # writes results JSON
    .venv/bin/python benchmarks/bm25_pruning.py --size 20000 --queries 50
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import latency  # noqa: E402
from common import latency_summary  # noqa: E402

from pgrag.db import connect, set_request_tenant  # noqa: E402
from pgrag.testing import drop_database, fresh_database, server  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "bm25_pruning.json"
STRATEGIES_SQL = ROOT / "benchmarks" / "sql" / "bm25_pruning.sql"
STRATEGIES: list[tuple[str, str | None, int]] = [
    ("exact (keyword_search)", None, 0),
    ("impact, m 300", "impact", 300),
    ("impact, m 3000", "impact", 3000),
    ("rare, budget 10k", "rare", 10_000),
    ("rare, budget 20k", "rare", 20_000),
    ("maxscore (exact), 10k", "maxscore", 10_000),
    ("maxscore (exact), 20k", "maxscore", 20_000),
    ("maxscore, bail 2k, 10k", "maxscore-bail", 10_000),
    ("maxscore, bail 2k, 20k", "maxscore-bail", 20_000),
    ("floor: read postings", "read", 0),
    ("floor: read + group", "group", 0),
]
# Floors return no BM25 scores (no recall); "read" returns the number of postings a query reads.
FLOORS = {"read", "group"}


def run_strategy(
    dsn: str, queries: list[str], k: int, strategy: str | None, param: int
) -> tuple[list[float], list[list[tuple[int, float]]]]:
    if strategy is None:
        query, args = "select chunk_id, score from public.keyword_search(%s, %s)", ()
    else:
        query = "select chunk_id, score from pgrag_bench.keyword(%s, %s, %s, %s)"
        args = (strategy, param)
    ms: list[float] = []
    rows: list[list[tuple[int, float]]] = []
    with connect(dsn) as conn:
        for i, q in enumerate(queries[:10] + queries):  # the first 10: warm-up
            with conn.transaction():
                set_request_tenant(conn, "t0")
                t = time.perf_counter()
                got = conn.execute(query, (q, k, *args)).fetchall()
                elapsed = (time.perf_counter() - t) * 1000
            if i >= 10:
                ms.append(elapsed)
                rows.append([(int(r[0]), float(r[1])) for r in got])
    return ms, rows


def run_hybrid_parts(
    dsn: str, queries: list[str], qvecs: np.ndarray, k: int
) -> dict[str, dict[str, float]]:
    """p50/p95 of the vector arm (k candidates) and of hybrid_search (10 rows), as tenant t0."""
    calls = {
        f"vector arm (k {k})": (
            "select * from pgrag.vector_candidates(%s, %s)",
            lambda q, v: (v, k),
        ),
        "hybrid_search (10 rows)": (
            "select * from public.hybrid_search(%s, %s, 10)",
            lambda q, v: (q, v),
        ),
    }
    out = {}
    with connect(dsn) as conn:
        for label, (query, args) in calls.items():
            ms: list[float] = []
            pairs = list(zip(queries, qvecs, strict=True))
            for i, (q, v) in enumerate(pairs[:10] + pairs):  # the first 10: warm-up
                with conn.transaction():
                    set_request_tenant(conn, "t0")
                    t = time.perf_counter()
                    conn.execute(query, args(q, v)).fetchall()
                    elapsed = (time.perf_counter() - t) * 1000
                if i >= 10:
                    ms.append(elapsed)
            out[label] = latency_summary(ms)
    return out


def recall(exact: list[list[tuple[int, float]]], got: list[list[tuple[int, float]]]) -> float:
    """Mean over queries of the share of the exact top k matched by a row scoring as high."""
    shares = []
    for truth, rows in zip(exact, got, strict=True):
        if not truth:
            continue
        kth = truth[-1][1]
        shares.append(min(len(truth), sum(1 for _, s in rows if s >= kth - 1e-9)) / len(truth))
    return float(np.mean(shares))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("-k", type=int, default=40)
    parser.add_argument("--corpus", choices=["copies", "mixed", "both"], default="both")
    parser.add_argument("--admin-dsn", help="superuser DSN of a server with pgvector")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    base, queries = latency.load_scifact()
    base = base[:1000]
    queries = queries[: args.queries]
    vectors = latency.embed_cached("scifact-corpus", [t[: latency.EMBED_CHARS] for t in base])
    qvecs = latency.embed_cached("scifact-queries", queries)
    result: dict[str, Any] = {
        "command": "python benchmarks/bm25_pruning.py " + " ".join(sys.argv[1:]),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "size": args.size,
        "k": args.k,
        "queries": len(queries),
        "corpora": {},
    }
    corpora = ["copies", "mixed"] if args.corpus == "both" else [args.corpus]
    with server(args.admin_dsn, "pgrag-latency-") as admin:
        for name in corpora:
            rng = np.random.default_rng(42)
            texts, vecs = latency.synthetic(args.size, base, vectors, rng)
            if name == "mixed":
                texts = latency.mixed_corpus(args.size, rng)
            database = f"bm25_pruning_{name}"
            dsn = fresh_database(admin, database)
            loaded = latency.load(dsn, texts, vecs, tenants=1)
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("set maintenance_work_mem = '1GB'")
                conn.execute(STRATEGIES_SQL.read_text())
                conn.execute("vacuum analyze pgrag.bm25_postings")
            print(f"\n== {name}: {args.size} chunks, {loaded['postings']} postings", flush=True)
            entry: dict[str, Any] = {"postings": loaded["postings"], "strategies": {}}
            exact: list[list[tuple[int, float]]] = []
            for label, strategy, param in STRATEGIES:
                ms, rows = run_strategy(dsn, queries, args.k, strategy, param)
                if strategy is None:
                    exact = rows
                s = entry["strategies"][label] = latency_summary(ms)
                if strategy == "read":
                    s["postings_read_p50"] = int(np.median([r[0][1] for r in rows if r]))
                    extra = f"  postings read p50 {s['postings_read_p50']}"
                elif strategy in FLOORS:
                    extra = ""
                else:
                    s[f"recall_at_{args.k}"] = round(recall(exact, rows), 4)
                    extra = f"  recall@{args.k} {s[f'recall_at_{args.k}']:.3f}"
                print(
                    f"  {label:24s} p50 {s['p50_ms']:7.2f} ms  p95 {s['p95_ms']:7.2f} ms{extra}",
                    flush=True,
                )
            entry["hybrid_parts"] = run_hybrid_parts(dsn, queries, qvecs, args.k)
            for label, s in entry["hybrid_parts"].items():
                print(
                    f"  {label:24s} p50 {s['p50_ms']:7.2f} ms  p95 {s['p95_ms']:7.2f} ms",
                    flush=True,
                )
            result["corpora"][name] = entry
            drop_database(admin, dsn)
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
