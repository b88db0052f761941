"""Latency of pgrag's SQL retrieval functions on synthetic corpora of 10k and 100k chunks.

Corpus: the first --base-docs (default 1,000) SciFact abstracts
(``../shared/data/scifact/corpus.jsonl``) re-used with variations (sentences rotated per copy),
10 chunks per document, 384-dimension vectors = the real all-MiniLM-L6-v2 embedding of the source
abstract (its first 600 characters) plus small Gaussian noise (re-normalised), so only the base
abstracts are embedded, once (cached in $PGRAG_BENCH_CACHE, default /tmp/pgrag-bench).
Loaded with binary COPY; the HNSW index is
rebuilt after loading. Queries: the SciFact test claims (text and real embedding).

Two corpora (``--corpus``): ``copies`` (above) and ``mixed`` (each chunk random SciFact
sentences, as long as a random abstract: no duplicate chunks; the single layout only).
Two layouts per size, each in its own database of a throwaway embedded cluster (or --admin-dsn):

* ``single``: every chunk in one tenant; p50/p95 of vector_search, keyword_search, hybrid_search
  (its default weighted fusion, and RRF) and hybrid_search with window_size 1 and MMR, called
  as that tenant; keyword_search and hybrid_search again with the keyword arm's pruning off
  (``pgrag.keyword_pruning = off``: every posting scored) and a check that both give identical
  rows and scores on every query; the vector arm (40 candidates) against plain HNSW queries
  (top 40, top 10); and the peers of ``benchmarks/beir.py`` (the Supabase guide's hybrid RRF,
  ``ts_rank`` with OR semantics) in the same run. Then the vector arm and vector_search against
  plain HNSW queries of the same graph again, called in turn for every query (interleaved, so
  that a busy machine slows all alike; ``--vector-only`` runs these alone): with the tenant in
  the shared graph, then in a graph of its own (``pgrag.isolate_tenant``, as ``pgrag ingest``
  does for a tenant above ``pgrag.exact_search_max_rows``).
* ``tenants``: the same chunks spread over 100 tenants (1 % each); vector_search called as one
  tenant: p50/p95, recall@10 against exact search and short results, for pgrag's default path
  (exact scan for small tenants), the HNSW iterative-scan path (forced with
  pgrag.exact_search_max_rows = 0) and a plain HNSW query filtered after the index scan.

    .venv/bin/python benchmarks/latency.py                 # 10k and 100k, writes results JSON
    .venv/bin/python benchmarks/latency.py --sizes 10000 --queries 100
    .venv/bin/python benchmarks/latency.py --sizes 100000 --layouts single --vector-only \
        --out benchmarks/results/latency-vector.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from common import SCIFACT, latency_summary  # noqa: E402

from pgrag.db import connect, set_request_tenant  # noqa: E402
from pgrag.testing import drop_database, fresh_database, server  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

DATA = SCIFACT
CACHE = Path(os.environ.get("PGRAG_BENCH_CACHE", Path(tempfile.gettempdir()) / "pgrag-bench"))
RESULTS = ROOT / "benchmarks" / "results" / "latency.json"
VECTOR_RESULTS = ROOT / "benchmarks" / "results" / "latency-vector.json"
CHUNKS_PER_DOC = 10
NOISE = 0.01  # per-dimension standard deviation (noise vector norm about 0.2 before re-normalising)
TENANTS = 100
EMBED_CHARS = 600


def load_scifact() -> tuple[list[str], list[str]]:
    docs = [json.loads(line) for line in (DATA / "corpus.jsonl").open()]
    texts = [(d["title"] + ". " + d["text"]).strip() for d in docs]
    qrels = [line.split("\t")[0] for line in (DATA / "qrels" / "test.tsv").open()][1:]
    queries = {
        (q := json.loads(line))["_id"]: q["text"] for line in (DATA / "queries.jsonl").open()
    }
    return texts, [queries[qid] for qid in dict.fromkeys(qrels)]


def embed_cached(name: str, texts: list[str]) -> np.ndarray:
    """Real MiniLM embeddings of ``texts``, cached on disk by content hash."""
    digest = hashlib.sha256("\x00".join(texts).encode()).hexdigest()[:16]
    path = CACHE / f"{name}-{digest}.npy"
    if path.exists():
        return np.load(path)
    from pgrag.pipeline.embedders import LocalEmbedder

    t = time.perf_counter()
    vectors = np.asarray(LocalEmbedder().embed(texts), dtype=np.float32)
    print(f"  embedded {len(texts)} {name} texts in {time.perf_counter() - t:.0f} s", flush=True)
    CACHE.mkdir(parents=True, exist_ok=True)
    np.save(path, vectors)
    return vectors


def variant(text: str, copy: int) -> str:
    """The ``copy``-th variation of an abstract: its sentences rotated (copy 0 = the original)."""
    sentences = re.split(r"(?<=\.)\s+", text)
    if copy == 0 or len(sentences) < 2:
        return text
    k = copy % len(sentences)
    return " ".join(sentences[k:] + sentences[:k])


def mixed_corpus(size: int, rng: np.random.Generator) -> list[str]:
    """``size`` chunks of random SciFact sentences, each about as long as a random abstract."""
    docs = [json.loads(line) for line in (DATA / "corpus.jsonl").open()]
    texts = [(d["title"] + ". " + d["text"]).strip() for d in docs]
    sentences = [s for t in texts for s in re.split(r"(?<=\.)\s+", t) if s]
    out = []
    for _ in range(size):
        target = len(texts[rng.integers(len(texts))])
        parts: list[str] = []
        length = 0
        while length < target:
            sentence = sentences[rng.integers(len(sentences))]
            parts.append(sentence)
            length += len(sentence) + 1
        out.append(" ".join(parts))
    return out


def synthetic(
    n: int, texts: list[str], vectors: np.ndarray, rng: np.random.Generator
) -> tuple[list[str], np.ndarray]:
    base = np.arange(n) % len(texts)
    out_texts = [variant(texts[b], i // len(texts)) for i, b in enumerate(base)]
    noisy = vectors[base] + rng.normal(0, NOISE, (n, vectors.shape[1])).astype(np.float32)
    noisy /= np.linalg.norm(noisy, axis=1, keepdims=True)
    # Copy 0 keeps the exact embedding of the original abstract.
    first = np.arange(n) < len(texts)
    noisy[first] = vectors[base[first]]
    return out_texts, noisy.astype(np.float32)


def load(dsn: str, texts: list[str], vectors: np.ndarray, tenants: int) -> dict[str, float]:
    """Documents and chunks by binary COPY (tenant i % tenants); HNSW rebuilt after loading."""
    n = len(texts)
    n_docs = (n + CHUNKS_PER_DOC - 1) // CHUNKS_PER_DOC
    t0 = time.perf_counter()
    with connect(dsn) as conn:
        conn.execute("drop index pgrag.chunks_embedding_hnsw")
        with conn.cursor().copy(
            "copy pgrag.documents (tenant_id, id, title, source_type, source_uri, status)"
            " from stdin (format binary)"
        ) as cp:
            cp.set_types(["text", "int8", "text", "text", "text", "text"])
            for d in range(n_docs):
                cp.write_row(
                    (f"t{d % tenants}", d + 1, f"doc {d}", "text", f"bench://{d}", "ready")
                )
        conn.commit()
        batch = 10_000
        for start in range(0, n, batch):
            with conn.cursor().copy(
                "copy pgrag.chunks (tenant_id, document_id, chunk_index, content, embedding,"
                " token_count, content_sha256) from stdin (format binary)"
            ) as cp:
                cp.set_types(["text", "int8", "int4", "text", "vector", "int4", "text"])
                for i in range(start, min(start + batch, n)):
                    d = i // CHUNKS_PER_DOC
                    cp.write_row(
                        (
                            f"t{d % tenants}",
                            d + 1,
                            i % CHUNKS_PER_DOC,
                            texts[i],
                            vectors[i],
                            len(texts[i]) // 4,
                            "x",
                        )
                    )
            conn.commit()
        t_copy = time.perf_counter() - t0
        conn.execute("set maintenance_work_mem = '1GB'")
        conn.execute("set max_parallel_maintenance_workers = 2")
        # The shared graph as sql/incremental/012-bulk-loading.sql defines it.
        conn.execute(
            "create index chunks_embedding_hnsw on pgrag.chunks using hnsw"
            " (embedding vector_cosine_ops) where embedding is not null and in_shared_graph"
        )
        conn.commit()
        t_index = time.perf_counter() - t0 - t_copy
        conn.autocommit = True
        for table in ("documents", "chunks", "bm25_postings", "corpus_stats"):
            conn.execute(f"vacuum analyze pgrag.{table}")
        postings = conn.execute("select count(*) from pgrag.bm25_postings").fetchone()
    return {
        "copy_and_bm25_s": round(t_copy, 1),
        "chunks_per_s": round(n / t_copy),
        "hnsw_build_s": round(t_index, 1),
        "postings": int(postings[0]) if postings else 0,
    }


def timed(
    conn: psycopg.Connection[Any],
    tenant: str,
    query: str,
    params: tuple[Any, ...],
    settings: dict[str, str] | None = None,
) -> tuple[float, list[tuple[Any, ...]]]:
    with conn.transaction():
        set_request_tenant(conn, tenant)
        for name, value in (settings or {}).items():
            conn.execute("select set_config(%s, %s, true)", (name, value))
        t = time.perf_counter()
        rows = conn.execute(query, params).fetchall()
        return (time.perf_counter() - t) * 1000, rows


# The peers' SQL as benchmarks/beir.py runs it (explicit tenant filter, as the connecting user).
from beir import SUPABASE_RRF, TS_RANK_OR  # noqa: E402

FULL_SCAN = {"pgrag.keyword_pruning": "off"}
PLAIN_HNSW = (
    "select id from pgrag.chunks where embedding is not null and in_shared_graph"
    " order by embedding <=> %s limit {k}"
)


def bench_single(
    dsn: str, queries: list[str], qvecs: np.ndarray, k: int, peer_queries: int
) -> dict[str, Any]:
    """p50/p95 of pgrag's functions, their parts and the peers (on the first ``peer_queries``
    queries), called as tenant t0."""
    peer = lambda q, v: {"tenant": "t0", "text": q, "embedding": v, "limit": k}  # noqa: E731
    calls: dict[str, tuple[str, Any, dict[str, str] | None]] = {
        "vector_search": (
            "select chunk_id from public.vector_search(%s, %s)",
            lambda q, v: (v, k),
            None,
        ),
        "keyword_search": (
            "select chunk_id from public.keyword_search(%s, %s)",
            lambda q, v: (q, k),
            None,
        ),
        "keyword_search, full scan": (
            "select chunk_id from public.keyword_search(%s, %s)",
            lambda q, v: (q, k),
            FULL_SCAN,
        ),
        "hybrid_search": (
            "select chunk_id from public.hybrid_search(%s, %s, %s)",
            lambda q, v: (q, v, k),
            None,
        ),
        "hybrid_search, full scan": (
            "select chunk_id from public.hybrid_search(%s, %s, %s)",
            lambda q, v: (q, v, k),
            FULL_SCAN,
        ),
        "hybrid_search_rrf": (
            "select chunk_id from public.hybrid_search(%s, %s, %s, fusion => 'rrf')",
            lambda q, v: (q, v, k),
            None,
        ),
        "hybrid_search_window1_mmr": (
            "select chunk_id from public.hybrid_search(%s, %s, %s, window_size => 1,"
            " mmr_lambda => 0.7)",
            lambda q, v: (q, v, k),
            None,
        ),
        "build_context": (
            "select context from public.build_context(%s, %s)",
            lambda q, v: (q, v),
            None,
        ),
        "vector arm, 40 candidates": (
            "select chunk_id from pgrag.vector_candidates(%s, 40)",
            lambda q, v: (v,),
            None,
        ),
        "plain HNSW, top 40": (PLAIN_HNSW.format(k=40), lambda q, v: (v,), None),
        "plain HNSW, top 10": (PLAIN_HNSW.format(k=k), lambda q, v: (v,), None),
        "peer: supabase guide RRF": (SUPABASE_RRF, peer, None),
        "peer: pg ts_rank OR": (TS_RANK_OR, peer, None),
    }
    out: dict[str, Any] = {}
    with connect(dsn) as conn:
        for name, (query, args, settings) in calls.items():
            for q, v in zip(queries[:10], qvecs[:10], strict=True):  # warm-up
                timed(conn, "t0", query, args(q, v), settings)
            ms, short = [], 0
            n = peer_queries if name.startswith("peer:") else len(queries)
            for q, v in zip(queries[:n], qvecs[:n], strict=True):
                t, rows = timed(conn, "t0", query, args(q, v), settings)
                ms.append(t)
                short += len(rows) < (1 if name == "build_context" else k)
            out[name] = {**latency_summary(ms), "short_results": short, "queries": n}
            print(
                f"    {name:28s} p50 {out[name]['p50_ms']:7.2f} ms"
                f"  p95 {out[name]['p95_ms']:7.2f} ms",
                flush=True,
            )
        out["same_as_full_scan"] = same_as_full_scan(conn, queries, qvecs, k)
    print(f"    same as the full scan: {out['same_as_full_scan']}", flush=True)
    return out


PLAIN_HNSW_OWN = (
    "select id from pgrag.chunks where embedding is not null and tenant_id = 't0'"
    " order by embedding <=> %s limit {k}"
)


def bench_vector_interleaved(dsn: str, qvecs: np.ndarray, k: int) -> dict[str, Any]:
    """The vector arm (40 candidates) and vector_search (k) against plain HNSW queries of the
    same graph (top 40, top k), called as tenant t0 in turn for every query (each first as
    often as the others), so that a busy machine slows all alike: first with t0 in the shared graph,
    then with a graph of its own (pgrag.isolate_tenant, as pgrag ingest does for a tenant above
    pgrag.exact_search_max_rows). The plain queries run at the default hnsw.ef_search (40);
    the arm widens it for these graphs (twice match_count in the shared graph, 100 in an own
    graph), so a plain query at the arm's ef_search is timed as well."""
    arm = "select chunk_id from pgrag.vector_candidates(%s, 40)"
    search = f"select chunk_id from public.vector_search(%s, {k})"
    graphs: dict[str, dict[str, tuple[str, dict[str, str] | None]]] = {
        "shared graph": {
            "vector arm, 40 candidates": (arm, None),
            "plain HNSW, top 40": (PLAIN_HNSW.format(k=40), None),
            "plain HNSW, top 40, arm's ef_search": (
                PLAIN_HNSW.format(k=40),
                {"hnsw.ef_search": "80", "hnsw.iterative_scan": "relaxed_order"},
            ),
            "vector_search": (search, None),
            f"plain HNSW, top {k}": (PLAIN_HNSW.format(k=k), None),
        },
        "own graph": {
            "vector arm, 40 candidates": (arm, None),
            "plain HNSW, top 40": (PLAIN_HNSW_OWN.format(k=40), None),
            "plain HNSW, top 40, arm's ef_search": (
                PLAIN_HNSW_OWN.format(k=40),
                {"hnsw.ef_search": "100", "hnsw.iterative_scan": "relaxed_order"},
            ),
            "vector_search": (search, None),
            f"plain HNSW, top {k}": (PLAIN_HNSW_OWN.format(k=k), None),
        },
    }
    out: dict[str, Any] = {}
    with connect(dsn) as conn:
        for graph, calls in graphs.items():
            if graph == "own graph":
                conn.execute("set maintenance_work_mem = '1GB'")
                conn.execute("select pgrag.isolate_tenant('t0')")
                conn.commit()
                conn.execute("analyze pgrag.chunks")
                conn.commit()
            names = list(calls)
            for v in qvecs[:10]:  # warm-up
                for query, settings in calls.values():
                    timed(conn, "t0", query, (v,), settings)
            ms: dict[str, list[float]] = {n: [] for n in names}
            for j, v in enumerate(qvecs):
                # Each call in turn goes first: the first walk of a query vector reads the
                # graph's pages into shared buffers, the others find them there.
                turn = j % len(names)
                for n in names[turn:] + names[:turn]:
                    query, settings = calls[n]
                    ms[n].append(timed(conn, "t0", query, (v,), settings)[0])
            out[graph] = {n: {**latency_summary(ms[n]), "queries": len(ms[n])} for n in names}
            for n in names:
                print(
                    f"    {graph}: {n:36s} p50 {out[graph][n]['p50_ms']:7.2f} ms"
                    f"  p95 {out[graph][n]['p95_ms']:7.2f} ms",
                    flush=True,
                )
    return out


def same_as_full_scan(
    conn: psycopg.Connection[Any], queries: list[str], qvecs: np.ndarray, k: int
) -> dict[str, int]:
    """Queries whose rows (and scores) are identical with the keyword arm's pruning on (the
    default) and off (every posting scored): keyword_search at k and 40, hybrid_search at k."""
    calls = {
        f"keyword_search k={k}": (
            "select chunk_id, score from public.keyword_search(%s, %s)",
            lambda q, v: (q, k),
        ),
        "keyword_search k=40": (
            "select chunk_id, score from public.keyword_search(%s, 40)",
            lambda q, v: (q,),
        ),
        f"hybrid_search k={k}": (
            "select chunk_id, score from public.hybrid_search(%s, %s, %s)",
            lambda q, v: (q, v, k),
        ),
    }
    out = {"queries": len(queries)}
    for name, (query, args) in calls.items():
        same = 0
        for q, v in zip(queries, qvecs, strict=True):
            _, full = timed(conn, "t0", query, args(q, v), FULL_SCAN)
            _, pruned = timed(conn, "t0", query, args(q, v))
            same += full == pruned
        out[name] = same
    return out


def bench_tenants(
    dsn: str, vectors: np.ndarray, qvecs: np.ndarray, k: int, tenants: int
) -> dict[str, Any]:
    n = len(vectors)
    doc_of_chunk = np.arange(n) // CHUNKS_PER_DOC
    tenant_of_chunk = doc_of_chunk % tenants
    paths = {
        "default (exact scan for small tenants)": (
            "select chunk_id from public.vector_search(%s, %s)",
            {},
        ),
        "hnsw iterative relaxed_order": (
            "select chunk_id from public.vector_search(%s, %s)",
            {"pgrag.exact_search_max_rows": "0"},
        ),
        "plain hnsw, tenant filtered after the scan": (
            "select c.id from pgrag.chunks c where c.tenant_id = pgrag.current_tenant_id()"
            " order by c.embedding <=> %s limit %s",
            {"hnsw.iterative_scan": "off"},
        ),
    }
    out: dict[str, Any] = {}
    with connect(dsn) as conn:
        ids = conn.execute("select id, chunk_index, document_id from pgrag.chunks").fetchall()
        # chunk id -> row number in the generated arrays
        pos = {cid: (doc - 1) * CHUNKS_PER_DOC + idx for cid, idx, doc in ids}
        for name, (query, settings) in paths.items():
            ms, recalls, short = [], [], 0
            for j, v in enumerate(qvecs):
                tenant = j % tenants
                t, rows = timed(conn, f"t{tenant}", query, (v, k), settings)
                ms.append(t)
                mask = np.flatnonzero(tenant_of_chunk == tenant)
                sims = vectors[mask] @ v
                truth = set(mask[np.argsort(-sims)[:k]].tolist())
                got = {pos[r[0]] for r in rows}
                recalls.append(len(got & truth) / k)
                short += len(rows) < k
            out[name] = {
                **latency_summary(ms),
                "recall_at_10": round(statistics.fmean(recalls), 4),
                "short_results": short,
                "queries": len(qvecs),
            }
            print(
                f"    {name:45s} p50 {out[name]['p50_ms']:7.2f} ms"
                f"  p95 {out[name]['p95_ms']:7.2f} ms"
                f"  recall@10 {out[name]['recall_at_10']:.3f}  short {short}",
                flush=True,
            )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--queries", type=int, default=300, help="queries per function (max 300)")
    parser.add_argument(
        "--base-docs",
        type=int,
        default=1000,
        help="distinct SciFact abstracts re-used (embedded once)",
    )
    parser.add_argument(
        "--admin-dsn", help="superuser DSN of a server with pgvector (default: embedded)"
    )
    parser.add_argument(
        "--corpus",
        nargs="+",
        choices=["copies", "mixed"],
        default=["copies", "mixed"],
        help="copies: rotated copies of the abstracts (both layouts); mixed: chunks of random"
        " SciFact sentences, no duplicates (single tenant only)",
    )
    parser.add_argument(
        "--layouts",
        nargs="+",
        choices=["single", "tenants"],
        default=["single", "tenants"],
        help="single: one tenant holds every chunk; tenants: 100 tenants (copies corpus only)",
    )
    parser.add_argument(
        "--peer-queries",
        type=int,
        default=300,
        help="queries for the peers' rows (they take seconds each at 100k chunks)",
    )
    parser.add_argument(
        "--vector-only",
        action="store_true",
        help="single layout: only the vector arm and vector_search against plain HNSW,"
        " interleaved, in the shared graph and in the tenant's own graph",
    )
    parser.add_argument(
        "--out",
        type=Path,
        help=f"results file (default {RESULTS.name}, with --vector-only {VECTOR_RESULTS.name})",
    )
    args = parser.parse_args()
    if args.out is None:
        args.out = VECTOR_RESULTS if args.vector_only else RESULTS

    texts, queries = load_scifact()
    texts = texts[: args.base_docs]
    queries = queries[: args.queries]
    print(f"SciFact: {len(texts)} abstracts, {len(queries)} queries", flush=True)
    # The model reads at most 256 word pieces; embedding the first 600 characters keeps the
    # one-off embedding affordable on a 2-core machine (the stored text stays whole).
    vectors = embed_cached("scifact-corpus", [t[:EMBED_CHARS] for t in texts])
    qvecs = embed_cached("scifact-queries", queries)
    rng = np.random.default_rng(42)
    result: dict[str, Any] = {
        "command": "python benchmarks/latency.py " + " ".join(sys.argv[1:]),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "k": 10,
        "sizes": {},
    }
    with server(args.admin_dsn, "pgrag-latency-") as admin:
        with psycopg.connect(admin) as conn:
            row = conn.execute(
                "select version(), (select extversion from pg_extension where extname = 'vector')"
            ).fetchone()
            result["server"] = row[0] if row else None
        for corpus in args.corpus:
            for size in args.sizes:
                print(f"\n== {corpus}, {size} chunks", flush=True)
                s_texts, s_vecs = synthetic(size, texts, vectors, rng)
                if corpus == "mixed":
                    s_texts = mixed_corpus(size, rng)
                entry: dict[str, Any] = {}
                if "single" in args.layouts:
                    dsn = fresh_database(admin, f"latency_single_{corpus}_{size}")
                    entry["load_single"] = load(dsn, s_texts, s_vecs, tenants=1)
                    print(f"  single tenant loaded: {entry['load_single']}", flush=True)
                    if not args.vector_only:
                        entry["single_tenant"] = bench_single(
                            dsn, queries, qvecs, 10, args.peer_queries
                        )
                    # Last: it gives the tenant a graph of its own.
                    entry["vector_interleaved"] = bench_vector_interleaved(dsn, qvecs, 10)
                    drop_database(admin, dsn)
                if corpus == "copies" and "tenants" in args.layouts:
                    dsn = fresh_database(admin, f"latency_tenants_{size}")
                    entry["load_tenants"] = load(dsn, s_texts, s_vecs, tenants=TENANTS)
                    print(f"  {TENANTS} tenants loaded: {entry['load_tenants']}", flush=True)
                    entry["tenant_filtered_vector"] = bench_tenants(dsn, s_vecs, qvecs, 10, TENANTS)
                    drop_database(admin, dsn)
                # "copies" keeps the key of earlier results files: the size alone.
                result["sizes"][str(size) if corpus == "copies" else f"{corpus} {size}"] = entry
                args.out.parent.mkdir(parents=True, exist_ok=True)
                args.out.write_text(json.dumps(result, indent=2) + "\n")

    interleaved = {s: e for s, e in result["sizes"].items() if "vector_interleaved" in e}
    for size, e in interleaved.items():
        for graph, rows in e["vector_interleaved"].items():
            for label, (a, b) in {
                "vector arm / plain HNSW 40": ("vector arm, 40 candidates", "plain HNSW, top 40"),
                "vector arm / plain HNSW 40 at the arm's ef_search": (
                    "vector arm, 40 candidates",
                    "plain HNSW, top 40, arm's ef_search",
                ),
                "vector_search / plain HNSW 10": ("vector_search", "plain HNSW, top 10"),
            }.items():
                print(
                    f"{size} {graph}, interleaved: {label}:"
                    f" p50 {rows[a]['p50_ms'] / rows[b]['p50_ms']:.2f}"
                    f" p95 {rows[a]['p95_ms'] / rows[b]['p95_ms']:.2f}"
                )
    singles = {s: e for s, e in result["sizes"].items() if "single_tenant" in e}
    if not singles:
        print(f"\nwrote {args.out}")
        return
    print("\nfunction                        " + "".join(f"{s:>22}" for s in singles))
    names = [n for n in next(iter(singles.values()))["single_tenant"] if n != "same_as_full_scan"]
    for name in names:
        cells = "".join(
            f"{e['single_tenant'][name]['p50_ms']:>10.2f}"
            f" / {e['single_tenant'][name]['p95_ms']:>7.2f}"
            for e in singles.values()
        )
        print(f"{name:32s}{cells}   (p50 / p95 ms)")
    ratios = {
        "hybrid_search / full scan": ("hybrid_search", "hybrid_search, full scan"),
        "keyword_search / full scan": ("keyword_search", "keyword_search, full scan"),
        "supabase guide / hybrid_search": ("peer: supabase guide RRF", "hybrid_search"),
        "ts_rank OR / keyword_search": ("peer: pg ts_rank OR", "keyword_search"),
        "vector_search / plain HNSW 10": ("vector_search", "plain HNSW, top 10"),
        "vector arm / plain HNSW 40": ("vector arm, 40 candidates", "plain HNSW, top 40"),
    }
    for label, (a, b) in ratios.items():
        cells = "".join(
            f"{e['single_tenant'][a]['p50_ms'] / e['single_tenant'][b]['p50_ms']:>10.2f}"
            f" / {e['single_tenant'][a]['p95_ms'] / e['single_tenant'][b]['p95_ms']:>7.2f}"
            for e in singles.values()
        )
        print(f"{label:32s}{cells}   (ratio at p50 / p95)")
    for size, e in singles.items():
        print(f"same as the full scan, {size}: {e['single_tenant']['same_as_full_scan']}")
    tenant_sizes = [e for e in result["sizes"].values() if "tenant_filtered_vector" in e]
    for name in tenant_sizes[0]["tenant_filtered_vector"] if tenant_sizes else []:
        cells = "".join(
            f"{e['tenant_filtered_vector'][name]['p50_ms']:>8.2f}"
            f" r{e['tenant_filtered_vector'][name]['recall_at_10']:.2f}"
            for e in tenant_sizes
        )
        print(f"tenant 1%: {name[:30]:30s}{cells}")
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
