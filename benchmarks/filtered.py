"""Tenant-filtered vector search: does RLS after an HNSW scan starve results? One run compares:

  * ``hnsw post-filter``: a plain ``order by embedding <=> q limit k`` as the tenant (RLS on,
    ``hnsw.iterative_scan = off``): the tenant filter is applied after the index scan;
  * ``hnsw relaxed_order``: the same query with pgvector 0.8 iterative scans (relaxed order);
  * ``vector_search``: pgrag's ``public.vector_search`` called as the tenant, as PostgREST does
    (``SET LOCAL ROLE authenticated`` + ``request.jwt.claims``), with its defaults;
  * ``vector_search (exact_search_max_rows=0)``: the same with the function's exact-search
    shortcut for small tenants disabled, so it runs its iterative-scan query (what a tenant above
    the threshold gets); the planner may still pick the tenant btree for a 1 % tenant;
  * ``hybrid_search``: ``public.hybrid_search`` as the tenant (rows returned, short of k,
    latency; its vector arm's recall is what vector_search measures).

Noisy neighbour (``--victim-rows``, ``--cluster-rows``): a tenant of 3,000 (and 20,000) chunks
is added and searched with ``vector_search`` alone, then again after another tenant loads an
adversarial cluster of 20,000 chunks packed around the embeddings of the queries asked (the first
``--cluster-queries``, 1,000 chunks each, every one nearer its query than any of the tenant's
rows; each query asked 3 times); recall@k against the tenant's exact top-k and p50 are compared.
Before a measurement the tenant is isolated with ``pgrag.isolate_tenant`` when the schema has
that function (``--no-isolate`` to skip), as an operator would.

Data: 100 tenants x 1,000 chunks = 100k chunks (1 % visible per tenant), 384 dimensions:
1,000 real all-MiniLM-L6-v2 embeddings of SciFact documents as cluster centres, each chunk a
centre plus Gaussian noise (renormalised), tenants drawn at random so every tenant spans the
clusters. Loaded with binary COPY; the HNSW index is built after loading. Queries: embeddings
of SciFact test queries, each asked as a random tenant. Truth: exact top-k of that tenant
(sequential scan, no index).

    PGRAG_HOME=/tmp/pgrag-tenancy-dev .venv/bin/python benchmarks/filtered.py

Writes benchmarks/results/filtered.json and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import psycopg
from common import SCIFACT, admin_url, percentile

from pgrag.db import connect, set_request_tenant
from pgrag.testing import dsn_for, fresh_database

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATA = SCIFACT
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "filtered.json"
DIMS = 384
GOAL_RECALL = 0.95


def load_texts(data: Path, n_docs: int, n_queries: int, seed: int) -> tuple[list[str], list[str]]:
    corpus = [json.loads(line) for line in (data / "corpus.jsonl").open()]
    queries = [json.loads(line) for line in (data / "queries.jsonl").open()]
    test_ids: set[str] = set()
    qrels = data / "qrels" / "test.tsv"
    if qrels.exists():
        for line in qrels.open().read().splitlines()[1:]:
            test_ids.add(line.split("\t")[0])
    rng = random.Random(seed)
    docs = rng.sample(corpus, min(n_docs, len(corpus)))
    pool = [q for q in queries if not test_ids or q["_id"] in test_ids]
    qs = rng.sample(pool, min(n_queries, len(pool)))
    return [f"{d.get('title', '')}. {d['text']}" for d in docs], [q["text"] for q in qs]


def embed(texts: list[str]) -> np.ndarray:
    from pgrag.pipeline.embedders import LocalEmbedder

    return np.asarray(LocalEmbedder().embed(texts), dtype=np.float32)


def load(
    dsn: str,
    centres: np.ndarray,
    titles: list[str],
    tenants: int,
    per_tenant: int,
    noise: float,
    seed: int,
) -> dict[str, float]:
    """Documents (10 per tenant) and chunks with binary COPY; HNSW built after the load."""
    rng = np.random.default_rng(seed)
    n = tenants * per_tenant
    centre_of = rng.integers(0, len(centres), n)
    vectors = centres[centre_of] + rng.normal(0, noise, (n, DIMS)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    tenant_of = rng.permutation(np.repeat(np.arange(tenants), per_tenant))
    docs_per_tenant = 10
    timings: dict[str, float] = {}
    with connect(dsn) as conn:
        conn.execute("set maintenance_work_mem = '1GB'")
        conn.execute("set max_parallel_maintenance_workers = 2")
        conn.execute("drop index pgrag.chunks_embedding_hnsw")
        with conn.cursor().copy(
            "copy pgrag.documents (tenant_id, id, title, source_type, source_uri, status) "
            "from stdin"
        ) as copy:
            for t in range(tenants):
                for d in range(docs_per_tenant):
                    doc_id = t * docs_per_tenant + d + 1
                    copy.write_row((f"t{t:03d}", doc_id, f"doc {d}", "text", f"t{t}/d{d}", "ready"))
        started = time.perf_counter()
        counters = [0] * tenants
        with conn.cursor().copy(
            "copy pgrag.chunks (tenant_id, id, document_id, chunk_index, content, embedding, "
            "content_sha256) from stdin (format binary)"
        ) as copy:
            copy.set_types(["text", "int8", "int8", "int4", "text", "vector", "text"])
            for i in range(n):
                t = int(tenant_of[i])
                k = counters[t]
                counters[t] += 1
                doc_id = t * docs_per_tenant + (k % docs_per_tenant) + 1
                copy.write_row(
                    (
                        f"t{t:03d}",
                        i + 1,
                        doc_id,
                        k // docs_per_tenant,
                        titles[int(centre_of[i])],
                        vectors[i],
                        f"{i:064x}",
                    )
                )
        timings["copy_s"] = time.perf_counter() - started
        conn.commit()
        started = time.perf_counter()
        # The shared graph as sql/incremental/012-bulk-loading.sql defines it.
        conn.execute(
            "create index chunks_embedding_hnsw on pgrag.chunks using hnsw"
            " (embedding vector_cosine_ops) where embedding is not null and in_shared_graph"
        )
        conn.commit()
        timings["hnsw_build_s"] = time.perf_counter() - started
        conn.execute("analyze pgrag.chunks")
        conn.execute("analyze pgrag.documents")
        conn.commit()
    return timings


# -- one query per method -------------------------------------------------------------------------

Query = Callable[[psycopg.Connection[Any], str, np.ndarray, str, int], list[int]]


def as_tenant(conn: psycopg.Connection[Any], tenant: str) -> None:
    """What PostgREST does for a request with a verified JWT of this tenant (the claims
    through pgrag.set_request_tenant, transaction-local; then the role)."""
    set_request_tenant(conn, tenant)
    conn.execute("set local role authenticated")


def q_exact(
    conn: psycopg.Connection[Any], tenant: str, emb: np.ndarray, _t: str, k: int
) -> list[int]:
    # Sorting a computed column (not the operator expression) keeps the HNSW index out.
    rows = conn.execute(
        "select id from (select id, embedding <=> %s as d from pgrag.chunks "
        "where tenant_id = %s offset 0) s order by d, id limit %s",
        (emb, tenant, k),
    ).fetchall()
    return [r[0] for r in rows]


def q_plain(iterative: str) -> Query:
    def run(
        conn: psycopg.Connection[Any], tenant: str, emb: np.ndarray, _t: str, k: int
    ) -> list[int]:
        as_tenant(conn, tenant)
        conn.execute(f"set local hnsw.iterative_scan = {iterative}")
        rows = conn.execute(
            "select id from pgrag.chunks where embedding is not null "
            "order by embedding <=> %s limit %s",
            (emb, k),
        ).fetchall()
        return [r[0] for r in rows]

    return run


def q_overfetch(ef_search: int, fetch: int) -> Query:
    """Iterative relaxed-order scan for ``fetch`` rows, re-ranked exactly, top k kept."""

    def run(
        conn: psycopg.Connection[Any], tenant: str, emb: np.ndarray, _t: str, k: int
    ) -> list[int]:
        as_tenant(conn, tenant)
        conn.execute("set local hnsw.iterative_scan = relaxed_order")
        conn.execute(f"set local hnsw.ef_search = {int(ef_search)}")
        # Keep the HNSW plan: with a larger LIMIT the planner may prefer tenant btree + sort
        # (exact), which would measure the exact path instead.
        conn.execute("set local enable_sort = off")
        rows = conn.execute(
            "select id from (select id, embedding <=> %s as d from pgrag.chunks "
            "where embedding is not null order by embedding <=> %s limit %s) s "
            "order by d, id limit %s",
            (emb, emb, fetch, k),
        ).fetchall()
        return [r[0] for r in rows]

    return run


def q_vector_search(exact_max: int | None, ef_search: int | None = None) -> Query:
    def run(
        conn: psycopg.Connection[Any], tenant: str, emb: np.ndarray, _t: str, k: int
    ) -> list[int]:
        as_tenant(conn, tenant)
        if exact_max is not None:
            conn.execute(
                "select set_config('pgrag.exact_search_max_rows', %s, true)", (str(exact_max),)
            )
        rows = conn.execute(
            "select chunk_id from public.vector_search(query_embedding := %s, "
            "match_count := %s, ef_search := %s)",
            (emb, k, ef_search),
        ).fetchall()
        return [r[0] for r in rows]

    return run


def q_hybrid(
    conn: psycopg.Connection[Any], tenant: str, emb: np.ndarray, text: str, k: int
) -> list[int]:
    as_tenant(conn, tenant)
    rows = conn.execute(
        "select chunk_id from public.hybrid_search(query_text := %s, query_embedding := %s, "
        "match_count := %s)",
        (text, emb, k),
    ).fetchall()
    return [r[0] for r in rows]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--dsn", default=os.environ.get("PGRAG_DSN"), help="superuser DSN of a server")
    p.add_argument("--database", default="pgrag_bench_filtered")
    p.add_argument("--data", type=Path, default=DEFAULT_DATA)
    p.add_argument("--tenants", type=int, default=100)
    p.add_argument("--per-tenant", type=int, default=1000)
    p.add_argument("--centres", type=int, default=1000)
    p.add_argument("--noise", type=float, default=0.03, help="std of the Gaussian per dimension")
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("-k", type=int, default=10)
    p.add_argument(
        "--big-share",
        type=float,
        default=0.1,
        help="also measure one tenant holding this share of all rows (0 to skip)",
    )
    p.add_argument(
        "--victim-rows",
        default="3000,20000",
        help="noisy-neighbour rows: sizes of the searched tenant, comma-separated ('' to skip)",
    )
    p.add_argument("--cluster-rows", type=int, default=20000, help="the neighbour's cluster")
    p.add_argument("--cluster-queries", type=int, default=20, help="queries the cluster targets")
    p.add_argument(
        "--neighbour-only",
        action="store_true",
        help="measure only the noisy-neighbour rows (written to the output file alone)",
    )
    p.add_argument(
        "--no-isolate", action="store_true", help="do not call pgrag.isolate_tenant (if present)"
    )
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--reuse", action="store_true", help="keep the loaded database if present")
    p.add_argument("-o", "--output", type=Path, default=DEFAULT_OUT)
    p.add_argument(
        "--cache",
        type=Path,
        default=Path(os.environ.get("TMPDIR", "/tmp")) / "pgrag-bench-cache",
        help="folder for the computed embeddings (re-used by later runs)",
    )
    args = p.parse_args(argv)

    admin = admin_url(args.dsn)
    dsn = dsn_for(admin, args.database)

    doc_texts, query_texts = load_texts(args.data, args.centres, args.queries, args.seed)
    started = time.perf_counter()
    cache = args.cache / f"filtered-{args.centres}-{args.queries}-{args.seed}.npz"
    if cache.exists():
        saved = np.load(cache)
        centres, queries = saved["centres"], saved["queries"]
    else:
        centres = embed(doc_texts)
        queries = embed(query_texts)
        cache.parent.mkdir(parents=True, exist_ok=True)
        np.savez(cache, centres=centres, queries=queries)
    embed_s = time.perf_counter() - started
    titles = [t.split(". ")[0][:200] for t in doc_texts]

    timings: dict[str, float] = {"embed_s": embed_s}
    exists = False
    if args.reuse:
        try:
            with psycopg.connect(dsn) as c:
                row = c.execute("select count(*) from pgrag.chunks").fetchone()
                exists = bool(row and row[0] == args.tenants * args.per_tenant)
        except psycopg.Error:
            exists = False
        if exists:
            restore_big_tenant(dsn)  # left over by an interrupted run
    if not exists:
        fresh_database(admin, args.database, dims=DIMS)
        timings |= load(dsn, centres, titles, args.tenants, args.per_tenant, args.noise, args.seed)

    rng = random.Random(args.seed)
    asked = [(f"t{rng.randrange(args.tenants):03d}", i) for i in range(len(query_texts))]
    methods: dict[str, Query] = {
        "hnsw post-filter (iterative_scan off)": q_plain("off"),
        "hnsw relaxed_order": q_plain("relaxed_order"),
        "hnsw relaxed_order ef 100, top 40 re-ranked": q_overfetch(100, 40),
        "hnsw relaxed_order ef 400, top 10": q_overfetch(400, 10),
        "vector_search": q_vector_search(None),
        "vector_search (exact_search_max_rows=0)": q_vector_search(0),
        "vector_search (exact_search_max_rows=0, ef_search 200)": q_vector_search(0, 200),
        "hybrid_search": q_hybrid,
    }
    results: dict[str, dict[str, Any]] = {}
    big: dict[str, dict[str, Any]] = {}
    if args.neighbour_only:
        methods = {}
        args.big_share = 0
    with connect(dsn) as conn:
        results = measure(conn, methods, asked, queries, query_texts, args.k) if methods else {}
        versions = conn.execute(
            "select version(), (select extversion from pg_extension where extname = 'vector')"
        ).fetchone()
    if args.big_share > 0:
        # One tenant holding big_share of all rows (above the function's exact-search
        # threshold, so vector_search takes its iterative-scan path); restored afterwards.
        moved = move_rows_to_big_tenant(dsn, args.big_share)
        try:
            with connect(dsn) as conn:
                big_asked = [("big", i) for i in range(len(query_texts))]
                big_methods = {k: v for k, v in methods.items() if k != "hybrid_search"}
                big = measure(conn, big_methods, big_asked, queries, query_texts, args.k)
                for r in big.values():
                    r["tenant_rows"] = moved
        finally:
            restore_big_tenant(dsn)
    neighbour: dict[str, dict[str, Any]] = {}
    for size in [int(v) for v in args.victim_rows.split(",") if v.strip()]:
        neighbour |= noisy_neighbour(
            dsn,
            centres,
            queries[: args.cluster_queries],
            query_texts[: args.cluster_queries],
            size,
            args.cluster_rows,
            args.noise,
            args.k,
            args.seed,
            isolate=not args.no_isolate,
        )
    assert versions is not None

    # hybrid fuses keyword and vector ranks: its recall against exact *vector* truth is not a
    # quality figure, only short-of-k and isolation are.
    if "hybrid_search" in results:
        results["hybrid_search"]["recall_at_k"] = None
    out = {
        "benchmark": "tenant-filtered vector search through RLS",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": "PGRAG_HOME=/tmp/pgrag-tenancy-dev .venv/bin/python benchmarks/filtered.py "
        + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count()},
        "postgres": versions[0],
        "pgvector": versions[1],
        "data": {
            "tenants": args.tenants,
            "chunks": args.tenants * args.per_tenant,
            "visible_per_tenant": args.per_tenant,
            "visible_share": 1 / args.tenants,
            "dims": DIMS,
            "centres": len(centres),
            "noise_std": args.noise,
            "queries": len(asked),
            "k": args.k,
        },
        "timings_s": {k: round(v, 2) for k, v in timings.items()},
        "goal": {"recall_at_k": GOAL_RECALL, "short_of_k_share": 0.0},
        "results": results,
        "big_tenant": {
            "share": args.big_share,
            "results": big,
        },
        "noisy_neighbour": {
            "cluster_rows": args.cluster_rows,
            "cluster_queries": args.cluster_queries,
            "results": neighbour,
        },
        "notes": [
            "noisy_neighbour: the searched tenant's rows are drawn like every tenant's; the "
            "neighbour's cluster is cluster_rows chunks spread evenly over the embeddings of the "
            "cluster_queries queries asked (noise std 0.005 per dimension), so every query has a "
            "dense foreign cluster nearer than the tenant's own rows; each query asked 3 times",
            "plain queries include 'embedding is not null' so the partial HNSW index applies; "
            "the tenant filter is the RLS policy, applied after the index scan",
            "recall is against the exact top-k of the tenant (sequential scan, no index)",
            "hybrid_search recall is not reported: it fuses BM25 and vector ranks, so exact "
            "vector truth does not apply; its short-of-k share and isolation are",
            "rows_of_other_tenants counts returned rows of another tenant (must be 0)",
        ],
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(out, indent=2) + "\n")

    print(
        f"{args.tenants} tenants, {args.tenants * args.per_tenant} chunks, "
        f"{len(asked)} queries, k={args.k} (PostgreSQL {str(versions[0]).split()[1]}, "
        f"pgvector {versions[1]})"
    )
    print(f"{'method':<58} {'recall@k':>9} {'short':>7} {'foreign':>8} {'p50 ms':>8} {'p95 ms':>8}")
    for name, r in results.items():
        rec = "-" if r["recall_at_k"] is None else f"{r['recall_at_k']:.3f}"
        print(
            f"{name:<58} {rec:>9} {r['short_of_k_share']:>7.1%} {r['rows_of_other_tenants']:>8} "
            f"{r['p50_ms']:>8.1f} {r['p95_ms']:>8.1f}"
        )
    if big:
        print(f"one tenant with {args.big_share:.0%} of the rows:")
        for name, r in big.items():
            print(
                f"  {name:<56} {r['recall_at_k']:>9.3f} {r['short_of_k_share']:>7.1%} "
                f"{r['rows_of_other_tenants']:>8} {r['p50_ms']:>8.1f} {r['p95_ms']:>8.1f}"
            )
    if neighbour:
        print(f"noisy neighbour ({args.cluster_rows} foreign chunks packed around the queries):")
        for name, r in neighbour.items():
            print(
                f"  {name:<56} {r['recall_at_k']:>9.3f} {r['short_of_k_share']:>7.1%} "
                f"{r['rows_of_other_tenants']:>8} {r['p50_ms']:>8.1f} {r['p95_ms']:>8.1f}"
            )
    print(f"wrote {args.output}")
    return 0


def measure(
    conn: psycopg.Connection[Any],
    methods: dict[str, Query],
    asked: list[tuple[str, int]],
    queries: np.ndarray,
    query_texts: list[str],
    k: int,
) -> dict[str, dict[str, Any]]:
    """Recall@k against the tenant's exact top-k, short-of-k share, isolation and latency."""
    _tenant_cache.clear()
    truth = {}
    for tenant, i in asked:
        truth[(tenant, i)] = q_exact(conn, tenant, queries[i], query_texts[i], k)
        conn.rollback()
    results: dict[str, dict[str, Any]] = {}
    for name, fn in methods.items():
        recalls, lat, short, foreign = [], [], 0, 0
        tenant, i = asked[0]  # warm-up
        fn(conn, tenant, queries[i], query_texts[i], k)
        conn.rollback()
        for tenant, i in asked:
            t0 = time.perf_counter()
            got = fn(conn, tenant, queries[i], query_texts[i], k)
            lat.append((time.perf_counter() - t0) * 1000)
            conn.rollback()
            exp = truth[(tenant, i)]
            short += len(got) < min(k, len(exp))
            recalls.append(len(set(got) & set(exp)) / len(exp) if exp else 1.0)
            own = set(exp)
            foreign += sum(1 for g in got if g not in own and not _same_tenant(conn, g, tenant))
            conn.rollback()
        results[name] = {
            "recall_at_k": round(statistics.fmean(recalls), 4),
            "short_of_k_share": round(short / len(asked), 4),
            "rows_of_other_tenants": foreign,
            "p50_ms": round(percentile(lat, 50), 2),
            "p95_ms": round(percentile(lat, 95), 2),
        }
    return results


def move_rows_to_big_tenant(dsn: str, share: float) -> int:
    """Give tenant 'big' every (1/share)-th chunk (documents copied so keys hold)."""
    step = max(1, round(1 / share))
    with connect(dsn) as conn:
        conn.execute(
            "insert into pgrag.documents (tenant_id, id, title, source_type, source_uri, status) "
            "select 'big', id, title, source_type, 'big/' || source_uri, status "
            "from pgrag.documents where tenant_id <> 'big'"
        )
        moved = conn.execute(
            "update pgrag.chunks set tenant_id = 'big' where id %% %s = 0", (step,)
        ).rowcount
        conn.commit()
        conn.execute("analyze pgrag.chunks")
        conn.commit()
    return moved


def restore_big_tenant(dsn: str) -> None:
    with connect(dsn) as conn:
        conn.execute(
            "update pgrag.chunks "
            "set tenant_id = 't' || lpad(((document_id - 1) / 10)::text, 3, '0') "
            "where tenant_id = 'big'"
        )
        conn.execute("delete from pgrag.documents where tenant_id = 'big'")
        conn.commit()
        conn.execute("analyze pgrag.chunks")
        conn.commit()


def add_tenant(dsn: str, tenant: str, vectors: np.ndarray, first_id: int, docs: int = 10) -> None:
    """Documents and chunks of one tenant (binary COPY, through the live HNSW indexes)."""
    with connect(dsn) as conn:
        with conn.cursor().copy(
            "copy pgrag.documents (tenant_id, id, title, source_type, source_uri, status) "
            "from stdin"
        ) as copy:
            for d in range(docs):
                copy.write_row(
                    (tenant, first_id + d, f"doc {d}", "text", f"{tenant}/d{d}", "ready")
                )
        with conn.cursor().copy(
            "copy pgrag.chunks (tenant_id, id, document_id, chunk_index, content, embedding, "
            "content_sha256) from stdin (format binary)"
        ) as copy:
            copy.set_types(["text", "int8", "int8", "int4", "text", "vector", "text"])
            for i, v in enumerate(vectors):
                copy.write_row(
                    (tenant, first_id + i, first_id + i % docs, i // docs, "x", v, f"{i:064x}")
                )
        conn.commit()
        conn.execute("analyze pgrag.chunks")
        conn.execute("analyze pgrag.documents")
        conn.commit()


def drop_tenant(dsn: str, tenant: str) -> None:
    with connect(dsn) as conn:
        conn.execute("delete from pgrag.chunks where tenant_id = %s", (tenant,))
        conn.execute("delete from pgrag.documents where tenant_id = %s", (tenant,))
        conn.commit()
        if conn.execute("select to_regprocedure('pgrag.share_tenant(text)')").fetchone()[0]:
            conn.execute("select pgrag.share_tenant(%s)", (tenant,))
            conn.commit()
        conn.execute("analyze pgrag.chunks")
        conn.commit()


def isolate_if_possible(dsn: str, tenant: str) -> bool:
    with connect(dsn) as conn:
        if not conn.execute("select to_regprocedure('pgrag.isolate_tenant(text)')").fetchone()[0]:
            return False
        conn.execute("select pgrag.isolate_tenant(%s)", (tenant,))
        conn.commit()
    return True


def noisy_neighbour(
    dsn: str,
    centres: np.ndarray,
    queries: np.ndarray,
    query_texts: list[str],
    size: int,
    cluster_rows: int,
    noise: float,
    k: int,
    seed: int,
    *,
    isolate: bool,
) -> dict[str, dict[str, Any]]:
    """vector_search of a tenant of ``size`` chunks, alone and next to an adversarial cluster."""
    rng = np.random.default_rng(seed + size)
    own = centres[rng.integers(0, len(centres), size)] + rng.normal(0, noise, (size, DIMS))
    own = (own / np.linalg.norm(own, axis=1, keepdims=True)).astype(np.float32)
    per_query = max(1, cluster_rows // len(queries))
    packed = np.repeat(queries, per_query, axis=0)[:cluster_rows]
    packed = packed + rng.normal(0, 0.005, packed.shape)
    packed = (packed / np.linalg.norm(packed, axis=1, keepdims=True)).astype(np.float32)
    victim, adversary = "victim", "neighbour"
    drop_tenant(dsn, victim)
    drop_tenant(dsn, adversary)
    add_tenant(dsn, victim, own, 10_000_000)
    isolated = isolate and isolate_if_possible(dsn, victim)
    asked = [(victim, i) for _ in range(3) for i in range(len(queries))]
    methods: dict[str, Query] = {"vector_search": q_vector_search(None)}
    out: dict[str, dict[str, Any]] = {}
    try:
        with connect(dsn) as conn:
            alone = measure(conn, methods, asked, queries, query_texts, k)["vector_search"]
        add_tenant(dsn, adversary, packed, 20_000_000)
        with connect(dsn) as conn:
            near = measure(conn, methods, asked, queries, query_texts, k)["vector_search"]
    finally:
        drop_tenant(dsn, adversary)
        drop_tenant(dsn, victim)
    label = f"tenant of {size:,} chunks"
    for name, r in ((f"{label}, alone", alone), (f"{label}, next to the cluster", near)):
        out[name] = r | {"tenant_rows": size, "isolated": isolated}
    out[f"{label}, next to the cluster"]["p50_vs_alone"] = round(
        near["p50_ms"] / max(alone["p50_ms"], 1e-9), 2
    )
    return out


_tenant_cache: dict[int, str] = {}


def _same_tenant(conn: psycopg.Connection[Any], chunk_id: int, tenant: str) -> bool:
    if chunk_id not in _tenant_cache:
        row = conn.execute(
            "select tenant_id from pgrag.chunks where id = %s", (chunk_id,)
        ).fetchone()
        _tenant_cache[chunk_id] = row[0] if row else ""
    return _tenant_cache[chunk_id] == tenant


if __name__ == "__main__":
    sys.exit(main())
