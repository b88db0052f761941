"""A tenant's large first load: the row-by-row path against the bulk path, in one run.

Both load the same synthetic corpus (``latency.py``'s: SciFact abstracts with real MiniLM
embeddings, rotated and jittered copies, ``CHUNKS_PER_DOC`` chunks per document) with
precomputed embeddings, the way ``pgrag ingest`` loads: documents inserted, chunks COPYed
(binary) into the session's staging table, then one swap per batch of documents, into a
fresh database each:

* ``row_by_row``: ``pgrag.replace_document_chunks`` per batch (every row enters the shared HNSW
  graph as it is inserted), then ``pgrag.isolate_tenants`` (the tenant's own graph, as
  ``pgrag ingest`` ends a load);
* ``bulk``: ``pgrag.bulk_replace_document_chunks`` per batch (rows kept out of the shared
  graph and listed in the BM25 backlog), then ``pgrag.finish_bulk_load`` (the BM25 postings in
  one sorted pass, the tenant's own graph built once); with ``--jobs N`` (default 2) N
  connections swap batches concurrently (documents dealt out in turn), as N loaders would.

The floor: the same database parses every chunk once more (``pgrag.chunk_fts``, what the
generated column ``chunks.fts`` computes per row, on one core): no load through PostgreSQL's
text search can be faster per core than that. The graph floor: pgvector builds the tenant's
HNSW graph over a bare table of the same embeddings; parsing on every core and then that
build is the fastest any load that keeps PostgreSQL's text search and a graph can be here.

Rows/s counts the whole load (documents, COPY, swaps and the final index). Then the SciFact
queries run as the tenant on both databases and their top 10 are compared (source_uri,
chunk_index, score): with ``pgrag.exact_search_max_rows`` above the corpus (exact vector arm:
must be identical, it checks the data), and as configured (each database's HNSW graph is its
own build: approximate, so the overlap is reported, and each path's recall@10 against its own
exact top 10). Results (100k chunks) are quoted in docs/benchmarks.md, "Large first loads".

    python benchmarks/first_load.py [--size 100000] [--batch-docs 500] [--jobs 2]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import psycopg.sql
from psycopg.types.json import Jsonb

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import latency  # noqa: E402

from pgrag.db import connect, set_request_tenant  # noqa: E402
from pgrag.ingest.load import create_stage_table, index_bulk_backlog  # noqa: E402
from pgrag.testing import drop_database, fresh_database, server  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "first_load.json"
TENANT = "big"


def load(
    dsn: str,
    texts: list[str],
    vectors: np.ndarray,
    batch_docs: int,
    bulk: bool,
    jobs: int = 1,
    phase: Callable[[dict[str, Any]], None] = lambda done: None,
) -> dict[str, Any]:
    """Load the corpus as one tenant (``jobs`` connections swapping batches concurrently, the
    batches dealt out in turn); seconds per phase and rows/s (``phase`` gets the phases done
    so far as each one ends: a long run that is stopped still tells them)."""
    n = len(texts)
    ndocs = (n + latency.CHUNKS_PER_DOC - 1) // latency.CHUNKS_PER_DOC
    starts = list(range(0, ndocs, batch_docs))
    if bulk:
        with connect(dsn, autocommit=True) as conn:
            row = conn.execute("select pgrag.bulk_load_applies(%s)", (TENANT,)).fetchone()
            assert row and row[0], "bulk_load_applies: expected a first load by the owner"
    wal0 = wal_lsn(dsn)
    t0 = time.perf_counter()
    with ThreadPoolExecutor(jobs) as pool:
        parts = list(
            pool.map(
                lambda j: load_batches(dsn, texts, vectors, starts[j::jobs], batch_docs, bulk),
                range(jobs),
            )
        )
    copy_s = max(c for c, _ in parts)
    swap_s = max(s for _, s in parts)
    wal1 = wal_lsn(dsn)
    phase({"seconds_documents_and_copy": round(copy_s, 1), "seconds_swaps": round(swap_s, 1)})
    postings_s = 0.0
    if bulk:  # the BM25 postings on ``jobs`` connections, as pgrag ingest and import do
        t = time.perf_counter()
        index_bulk_backlog(dsn, TENANT, jobs)
        postings_s = time.perf_counter() - t
    wal2 = wal_lsn(dsn)
    phase(
        {
            "seconds_documents_and_copy": round(copy_s, 1),
            "seconds_swaps": round(swap_s, 1),
            "seconds_postings": round(postings_s, 1),
            "wal_mb_load": round((wal1 - wal0) / 1e6),
            "wal_mb_postings": round((wal2 - wal1) / 1e6),
        }
    )
    with connect(dsn, autocommit=True) as conn:
        t = time.perf_counter()
        if bulk:
            conn.execute("select pgrag.finish_bulk_load(%s)", (TENANT,))
        else:
            conn.execute("select pgrag.isolate_tenants(tenants => array[%s])", (TENANT,))
        index_s = time.perf_counter() - t
        total = time.perf_counter() - t0
        own = conn.execute(
            "select to_regclass('pgrag.' || pgrag.tenant_index_name(%s)) is not null", (TENANT,)
        ).fetchone()
    wal3 = wal_lsn(dsn)
    return {
        "rows": n,
        "jobs": jobs,
        "seconds_total": round(total, 1),
        "seconds_documents_and_copy": round(copy_s, 1),
        "seconds_swaps": round(swap_s, 1),
        "seconds_postings": round(postings_s, 1),
        "seconds_graph": round(index_s, 1),
        "seconds_finish": round(postings_s + index_s, 1),
        "wal_mb_load": round((wal1 - wal0) / 1e6),
        "wal_mb_postings": round((wal2 - wal1) / 1e6),
        "wal_mb_graph": round((wal3 - wal2) / 1e6),
        "rows_per_s": round(n / total),
        "rows_per_s_swaps_only": round(n / swap_s),
        "own_graph": bool(own and own[0]),
    }


def wal_lsn(dsn: str) -> int:
    """The server's WAL position in bytes (what each phase wrote: the difference)."""
    with connect(dsn, autocommit=True) as conn:
        row = conn.execute("select pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()
    return int(row[0]) if row else 0


def load_batches(
    dsn: str, texts: list[str], vectors: np.ndarray, starts: list[int], batch_docs: int, bulk: bool
) -> tuple[float, float]:
    """One loader: documents, COPY and one swap per batch of documents starting at ``starts``;
    (seconds in documents and COPY, seconds in swaps)."""
    n = len(texts)
    per = latency.CHUNKS_PER_DOC
    ndocs = (n + per - 1) // per
    swap = "bulk_replace_document_chunks" if bulk else "replace_document_chunks"
    copy_s = swap_s = 0.0
    with connect(dsn, autocommit=True) as conn:
        columns = create_stage_table(conn)  # (name, type oid): the row order below
        names = ", ".join(n for n, _ in columns)
        copy_sql = f"copy pgrag_stage ({names}) from stdin (format binary)"
        for first in starts:
            docs = range(first, min(first + batch_docs, ndocs))
            t = time.perf_counter()
            with conn.transaction():
                ids = [
                    r[0]
                    for r in conn.execute(
                        "insert into pgrag.documents (tenant_id, title, source_type, source_uri,"
                        " status) select %s, 'doc ' || g, 'text', 'synthetic:' || g, 'processing'"
                        " from unnest(%s::int[]) as g order by g returning id",
                        (TENANT, list(docs)),
                    ).fetchall()
                ]
                counts = []
                with conn.cursor() as cur, cur.copy(copy_sql) as copy:
                    copy.set_types([oid for _, oid in columns])
                    for doc_id, d in zip(ids, docs, strict=True):
                        rows = range(d * per, min(d * per + per, n))
                        counts.append(len(rows))
                        for i, c in enumerate(rows):
                            digest = hashlib.sha256(texts[c].encode()).hexdigest()
                            copy.write_row(
                                (
                                    doc_id,
                                    i,
                                    texts[c],
                                    vectors[c],
                                    None,
                                    [],
                                    "english",
                                    100,
                                    digest,
                                    0,
                                    Jsonb({}),
                                )
                            )
            copy_s += time.perf_counter() - t
            t = time.perf_counter()
            with conn.transaction():
                conn.execute(
                    f"select pgrag.{swap}('pg_temp.pgrag_stage'::regclass, %s, %s::int8[],"
                    " %s::text[], %s::text[], %s::text[], %s::jsonb[], %s::int4[], 'm')",
                    (
                        TENANT,
                        ids,
                        [f"doc {d}" for d in docs],
                        ["text"] * len(ids),
                        ["x"] * len(ids),
                        [Jsonb({})] * len(ids),
                        counts,
                    ),
                )
            swap_s += time.perf_counter() - t
    return copy_s, swap_s


def parse_floor(dsn: str, sample: int = 5000) -> dict[str, Any]:
    """Chunks/s at which one core computes ``pgrag.chunk_fts`` (the generated column
    ``chunks.fts``) and plain ``to_tsvector`` over a sample of the loaded chunks."""
    out: dict[str, Any] = {"sample": sample}
    with connect(dsn, autocommit=True) as conn:
        for name, expr in (
            ("chunk_fts", "pgrag.chunk_fts(c.language, c.content)"),
            ("to_tsvector", "to_tsvector(c.language, c.content)"),
        ):
            t = time.perf_counter()
            conn.execute(
                f"select sum(length({expr})) from (select language, content from pgrag.chunks"
                " where tenant_id = %s order by id limit %s) as c",
                (TENANT, sample),
            )
            out[f"{name}_chunks_per_s_one_core"] = round(sample / (time.perf_counter() - t))
        row = conn.execute(
            "select count(*) from pgrag.bm25_postings where tenant_id = %s", (TENANT,)
        ).fetchone()
        out["postings"] = row[0] if row else None
    return out


def bare_parse_floor(admin: str, texts: list[str], sample: int = 5000) -> dict[str, Any]:
    """:func:`parse_floor` before any load: the same functions over the first ``sample``
    texts of the corpus, passed as an array to a database of their own (a long run that is
    stopped before its load ends still has its ceiling's parse part)."""
    dsn = fresh_database(admin, "first_load_parse_floor")
    sample = min(sample, len(texts))
    out: dict[str, Any] = {"sample": sample, "measured": "before the load"}
    try:
        with connect(dsn, autocommit=True) as conn:
            for name, expr in (
                ("chunk_fts", "pgrag.chunk_fts('english'::regconfig, t)"),
                ("to_tsvector", "to_tsvector('english'::regconfig, t)"),
            ):
                t = time.perf_counter()
                conn.execute(
                    f"select sum(length({expr})) from unnest(%s::text[]) as t", (texts[:sample],)
                )
                out[f"{name}_chunks_per_s_one_core"] = round(sample / (time.perf_counter() - t))
    finally:
        drop_database(admin, dsn)
    return out


def bare_vector_table(conn: psycopg.Connection[Any], name: str, vectors: np.ndarray) -> None:
    """An unlogged table ``public.<name>`` of ``vectors`` alone (one column, ``embedding``),
    loaded by binary COPY."""
    table = psycopg.sql.Identifier("public", name)
    conn.execute(
        psycopg.sql.SQL("create unlogged table {} (embedding vector({}))").format(
            table, psycopg.sql.Literal(int(vectors.shape[1]))
        )
    )
    copy_sql = psycopg.sql.SQL("copy {} (embedding) from stdin (format binary)").format(table)
    with conn.cursor() as cur, cur.copy(copy_sql) as copy:
        copy.set_types(["vector"])
        for v in vectors:
            copy.write_row((v,))


def bare_graph_floor(admin: str, vectors: np.ndarray) -> float:
    """Seconds pgvector takes to build an HNSW graph over a bare table of ``vectors`` alone
    (loaded by COPY into a database of its own, dropped after), as :func:`graph_floor` but
    measured before any load (at 1M chunks the disk holds one load, not a load and a copy)."""
    dsn = fresh_database(admin, "first_load_graph_floor")
    try:
        with connect(dsn, autocommit=True) as conn:
            bare_vector_table(conn, "graph_floor", vectors)
            conn.execute("set maintenance_work_mem = '1GB'")
            conn.execute("set max_parallel_maintenance_workers = 2")
            t = time.perf_counter()
            conn.execute(
                "create index on public.graph_floor using hnsw (embedding vector_cosine_ops)"
            )
            return time.perf_counter() - t
    finally:
        drop_database(admin, dsn)


def graph_floor(
    dsn: str,
    parse_per_s_one_core: int,
    size: int,
    seconds: float | None = None,
    measured_by_load: bool = False,
) -> dict[str, Any]:
    """Seconds pgvector takes to build the tenant's HNSW graph over a bare table of just its
    embeddings (default m and ef_construction, as ``pgrag.isolate_tenant`` builds it; 1 GB of
    maintenance_work_mem and 2 parallel workers): the graph build no bulk load can skip. With
    the parse floor, the fastest any load through PostgreSQL's text search and an HNSW graph
    can be on this machine: every chunk parsed once on all cores, then the graph."""
    cores = os.cpu_count() or 1
    if seconds is not None:  # measured before the load (bare_graph_floor)
        floor_s = size / (cores * parse_per_s_one_core) + seconds
        return {
            "hnsw_build_s": round(seconds, 1),
            "hnsw_build_chunks_per_s": round(size / seconds),
            "parse_on_all_cores_then_graph_chunks_per_s": round(size / floor_s),
            "measured": "the bulk load's own build"
            if measured_by_load
            else "before the load, on a bare table in its own database",
        }
    with connect(dsn, autocommit=True) as conn:
        conn.execute("drop table if exists public.graph_floor")
        conn.execute(
            "create unlogged table public.graph_floor as"
            " select embedding from pgrag.chunks where tenant_id = %s",
            (TENANT,),
        )
        conn.execute("set maintenance_work_mem = '1GB'")
        conn.execute("set max_parallel_maintenance_workers = 2")
        t = time.perf_counter()
        conn.execute("create index on public.graph_floor using hnsw (embedding vector_cosine_ops)")
        seconds = time.perf_counter() - t
        conn.execute("drop table public.graph_floor")
    floor_s = size / (cores * parse_per_s_one_core) + seconds
    return {
        "hnsw_build_s": round(seconds, 1),
        "hnsw_build_chunks_per_s": round(size / seconds),
        "parse_on_all_cores_then_graph_chunks_per_s": round(size / floor_s),
    }


def top10(dsn: str, queries: list[str], qvecs: np.ndarray, exact: bool) -> list[list[Any]]:
    calls = [
        "select source_uri, chunk_index, score from public.hybrid_search(%s, %s, 10)",
        "select source_uri, chunk_index, score from public.keyword_search(%s, 10)",
        "select source_uri, chunk_index, similarity from public.vector_search(%s, 10)",
    ]
    out = []
    with connect(dsn) as conn:
        for text, vec in zip(queries, qvecs, strict=True):
            for i, call in enumerate(calls):
                with conn.transaction():
                    if exact:
                        conn.execute("set local pgrag.exact_search_max_rows = 100000000")
                    set_request_tenant(conn, TENANT)
                    args = [(text, vec), (text,), (vec,)][i]
                    rows = conn.execute(call, args).fetchall()
                out.append([(u, c, round(s, 9)) for u, c, s in rows])
    return out


def same_top10(x: list[Any], y: list[Any]) -> bool:
    """The same ranking up to ties: the same scores in order, and the same results above the
    last score (results tied at the cut may differ: neither path breaks ties, and the
    synthetic corpus has many, copies with the same words)."""
    if [r[2] for r in x] != [r[2] for r in y]:
        return False
    cut = x[-1][2] if x else None
    return {r for r in x if r[2] != cut} == {r for r in y if r[2] != cut}


def compare(a: list[list[Any]], b: list[list[Any]]) -> dict[str, Any]:
    names = ["hybrid_search", "keyword_search", "vector_search"]
    result: dict[str, Any] = {}
    for j, name in enumerate(names):
        pairs = list(zip(a[j::3], b[j::3], strict=True))
        same = sum(same_top10(x, y) for x, y in pairs)
        overlap = np.mean([len({r[:2] for r in x} & {r[:2] for r in y}) / 10 for x, y in pairs])
        result[name] = {
            "queries": len(pairs),
            "same_top10_up_to_ties": same,
            "mean_overlap_at_10": round(float(overlap), 4),
        }
    return result


def costs(result: dict[str, Any], paths: list[str]) -> dict[str, Any]:
    """Where the bulk path's time goes against the ceiling: the parse every chunk needs
    (at the measured rate, on all cores) inside the swaps, the rest of the swaps (heap and
    index writes, per-row triggers, staging), the postings and the graph build, each in
    seconds and the graph build's excess over the bare-table build."""
    if "bulk" not in paths:
        return {}
    b, size = result["bulk"], result["size"]
    cores = result["machine"]["cpus"] or 1
    parse = size / (cores * result["parse_floor"]["chunk_fts_chunks_per_s_one_core"])
    floor_graph = result["graph_floor"]["hnsw_build_s"]
    return {
        "ceiling_s": round(parse + floor_graph, 1),
        "parse_s_all_cores": round(parse, 1),
        "documents_and_copy_s": b["seconds_documents_and_copy"],
        "swaps_beyond_parse_s": round(b["seconds_swaps"] - parse, 1),
        "postings_s": b["seconds_postings"],
        "graph_s": b["seconds_graph"],
        "graph_beyond_bare_build_s": round(b["seconds_graph"] - floor_graph, 1),
        "seventy_percent_budget_s": round((parse + floor_graph) / 0.7, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size", type=int, default=100_000, help="chunks loaded")
    parser.add_argument("--batch-docs", type=int, default=500, help="documents per swap")
    parser.add_argument("--queries", type=int, default=300, help="SciFact queries compared")
    parser.add_argument(
        "--jobs", type=int, default=2, help="concurrent loading connections of the bulk path"
    )
    parser.add_argument("--base-docs", type=int, default=1000)
    parser.add_argument(
        "--paths", default="row_by_row,bulk", help="the loads, in order (row_by_row, bulk)"
    )
    parser.add_argument(
        "--no-compare", action="store_true", help="skip comparing the top 10 of both loads"
    )
    parser.add_argument(
        "--graph-floor-from-load",
        action="store_true",
        help="take the bulk load's own graph build as the graph floor (1M: a second build "
        "of the same graph does not fit the time; at 100k the two were within 3 percent)",
    )
    parser.add_argument(
        "--parse-floor-first",
        action="store_true",
        help="measure the parse floor before loading, on the corpus' first texts",
    )
    parser.add_argument(
        "--graph-floor-first",
        action="store_true",
        help="measure the graph floor on a bare table before loading (large sizes: the disk "
        "then never holds a load and a copy of its embeddings at once)",
    )
    parser.add_argument(
        "--setting",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a server setting for the run (ALTER SYSTEM, then reload), e.g. max_wal_size=8GB",
    )
    parser.add_argument("--admin-dsn", help="superuser DSN of a server with pgvector")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    texts, queries = latency.load_scifact()
    texts = texts[: args.base_docs]
    queries = queries[: args.queries]
    vectors = latency.embed_cached("scifact-corpus", [t[: latency.EMBED_CHARS] for t in texts])
    qvecs = latency.embed_cached("scifact-queries", queries)
    s_texts, s_vecs = latency.synthetic(args.size, texts, vectors, np.random.default_rng(42))
    result: dict[str, Any] = {
        "command": "python benchmarks/first_load.py " + " ".join(sys.argv[1:]),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "measured_at": time.strftime("%Y-%m-%dT%H:%M", time.gmtime()),
        "size": args.size,
        "batch_docs": args.batch_docs,
        "chunks_per_doc": latency.CHUNKS_PER_DOC,
    }
    with server(args.admin_dsn, "pgrag-first-load-") as admin:
        with psycopg.connect(admin, autocommit=True) as conn:
            row = conn.execute(
                "select version(), (select extversion from pg_extension where extname = 'vector')"
            ).fetchone()
            result["server"] = list(row) if row else None
            for setting in args.setting:
                name, value = setting.split("=", 1)
                conn.execute(
                    psycopg.sql.SQL("alter system set {} = {}").format(
                        psycopg.sql.Identifier(name), psycopg.sql.Literal(value)
                    )
                )
                conn.execute("select pg_reload_conf()")
            result["settings"] = dict(s.split("=", 1) for s in args.setting)
        dsns = {}
        paths = [p for p in args.paths.split(",") if p]
        bare = None
        if args.parse_floor_first:
            result["parse_floor"] = bare_parse_floor(admin, s_texts)
            print(f"   parse floor: {result['parse_floor']}", flush=True)
        if args.graph_floor_first:
            print("== graph floor on a bare table", flush=True)
            bare = bare_graph_floor(admin, s_vecs)
            print(f"   {bare:.1f} s", flush=True)
        for path in paths:
            dsns[path] = fresh_database(admin, f"first_load_{path}")
            print(f"== {path}: loading {args.size} chunks", flush=True)
            bulk = path == "bulk"
            jobs = args.jobs if bulk else 1

            def phase(done: dict[str, Any], path: str = path) -> None:
                result[path] = {"partial": True, **done}
                print(f"   {done}", flush=True)
                args.out.write_text(json.dumps(result, indent=2) + "\n")

            result[path] = load(dsns[path], s_texts, s_vecs, args.batch_docs, bulk, jobs, phase)
            print(f"   {result[path]}", flush=True)
            if "parse_floor" not in result and (path == "bulk" or path == paths[-1]):
                # right after the bulk load, in the same conditions
                result["parse_floor"] = parse_floor(dsns[path])
                print(f"   parse floor: {result['parse_floor']}", flush=True)
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(result, indent=2) + "\n")  # partial, rewritten below
        last = dsns["bulk" if "bulk" in dsns else paths[-1]]
        if args.graph_floor_from_load:
            bare = result["bulk"]["seconds_graph"]
        result["graph_floor"] = graph_floor(
            last,
            result["parse_floor"]["chunk_fts_chunks_per_s_one_core"],
            args.size,
            bare,
            args.graph_floor_from_load,
        )
        print(f"   graph floor: {result['graph_floor']}", flush=True)
        result["machine"]["load_avg_at_end"] = list(os.getloadavg())
        ceiling = result["graph_floor"]["parse_on_all_cores_then_graph_chunks_per_s"]
        for path in paths:
            result[path]["fraction_of_ceiling"] = round(result[path]["rows_per_s"] / ceiling, 3)
        result["costs"] = costs(result, paths)
        args.out.write_text(json.dumps(result, indent=2) + "\n")
        if "row_by_row" in dsns and "bulk" in dsns:
            result["speedup"] = round(
                result["bulk"]["rows_per_s"] / result["row_by_row"]["rows_per_s"], 2
            )
            print(f"== bulk / row_by_row: {result['speedup']}x", flush=True)
        if args.no_compare or len(dsns) < 2:
            for dsn in dsns.values():
                drop_database(admin, dsn)
            args.out.write_text(json.dumps(result, indent=2) + "\n")
            print(f"wrote {args.out}")
            return
        print("== comparing top 10", flush=True)
        exact = {p: top10(d, queries, qvecs, True) for p, d in dsns.items()}
        walked = {p: top10(d, queries, qvecs, False) for p, d in dsns.items()}
        result["same_results_exact"] = compare(exact["row_by_row"], exact["bulk"])
        result["same_results_default"] = compare(walked["row_by_row"], walked["bulk"])
        # Each database's graph is its own build: how close each path's walk is to the exact
        # top 10 (mean_overlap_at_10 here is recall@10 against the exact scan).
        result["default_against_exact"] = {p: compare(exact[p], walked[p]) for p in dsns}
        keys = ("same_results_exact", "same_results_default", "default_against_exact")
        print(json.dumps({k: result[k] for k in keys}))
        for dsn in dsns.values():
            drop_database(admin, dsn)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
