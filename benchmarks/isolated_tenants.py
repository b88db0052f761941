"""How a server's number of isolated tenants costs each search: one run, several counts.

``pgrag.isolate_tenant`` gives a tenant an HNSW graph of its own, a partial index on
``pgrag.chunks`` (``WHERE hashtextextended(tenant_id, 0) = <the tenant's key>``); ``pgrag
ingest`` gives one to every tenant above ``pgrag.exact_search_max_rows`` (2,000 chunks by
default). The planner considers every index of a table whenever it plans a query on it, and
some statements of a search are planned at every call (a tenant's walk of its own graph, whose
index's predicate names the tenant's key as a constant; the keyword arm's; the windows'), so
each isolated tenant adds a little to every such
search. This measures how much, for each function a client calls.

Tenant ``t0`` holds ``--size`` chunks of ``benchmarks/latency.py``'s synthetic SciFact corpus
and its own graph; other tenants of 20 chunks each are isolated until the server holds each
count of ``--counts`` isolated tenants. At each count, as ``t0`` through row-level security
(the claims of ``pgrag.set_request_tenant``, role ``authenticated``), interleaved query by
query: the vector arm (40 candidates, as ``hybrid_search`` asks), ``vector_search``,
``keyword_search`` and ``hybrid_search`` (k = 10), ``chunk_windows`` (the query's hybrid top 10,
window 1), ``build_context`` (window 1) and a plain HNSW top 40 of ``t0``'s graph (the tenant
written into the query, so a prepared statement keeps its plan); without a tenant, as
``service_role`` (every tenant's rows) the vector arm, ``hybrid_search`` and a plain HNSW top 40
of the shared graph, and as ``anon`` (``t0``'s documents are published) the vector arm,
``vector_search`` and a plain HNSW top 40 of the public graph; as tenant ``small`` (200 chunks,
not isolated: its vector search is an exact scan) ``vector_search`` and ``hybrid_search``; and
the planner's time for a plain query of one chunk by key (``EXPLAIN (SUMMARY)``), what any query
on ``pgrag.chunks`` pays when it is planned.

With ``--base REV`` the same rows go into a second database installed from the ``sql/`` of git
revision REV (version A) and both versions are timed, interleaved call by call (B: this
checkout's ``sql/``); the results give B / A per function and count.

    PGRAG_SHARED_DIR=../shared .venv/bin/python benchmarks/isolated_tenants.py --base main
    .venv/bin/python benchmarks/isolated_tenants.py --size 10000 --counts 1 100 300 --queries 100
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from common import insert_ready_document, latency_summary, short_revision  # noqa: E402
from latency import EMBED_CHARS, embed_cached, load, load_scifact, synthetic  # noqa: E402
from sql_ab import install, sql_of_revision  # noqa: E402

from pgrag.db import connect, set_request_tenant  # noqa: E402
from pgrag.testing import drop_database, fresh_database, server  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "isolated_tenants.json"
SMALL_TENANT_CHUNKS = 20
CALLS = {
    "vector arm, 40 candidates": "select chunk_id from pgrag.vector_candidates(%(e)s, 40)",
    "plain HNSW of t0's graph, top 40": (
        "select id from pgrag.chunks where embedding is not null and tenant_id = 't0'"
        " and hashtextextended(tenant_id, 0) = hashtextextended('t0', 0)"
        " order by embedding <=> %(e)s limit 40"
    ),
    "vector_search": "select chunk_id from public.vector_search(%(e)s, 10)",
    "keyword_search": "select chunk_id from public.keyword_search(%(q)s, 10)",
    "hybrid_search": "select chunk_id from public.hybrid_search(%(q)s, %(e)s, 10)",
    "chunk_windows": "select chunk_ids from public.chunk_windows(%(ids)s, 1)",
    "build_context": "select context from public.build_context(%(q)s, %(e)s, window_size => 1)",
    # Without a tenant (a backend's service_role, the owner): every tenant's rows.
    "vector arm, 40 candidates, service_role": (
        "select chunk_id from pgrag.vector_candidates(%(e)s, 40)"
    ),
    "hybrid_search, service_role": "select chunk_id from public.hybrid_search(%(q)s, %(e)s, 10)",
    "plain HNSW of the shared graph, top 40, service_role": (
        "select id from pgrag.chunks where embedding is not null and in_shared_graph"
        " order by embedding <=> %(e)s limit 40"
    ),
    # anon: the public documents (t0's are published), through RLS.
    "vector arm, 40 candidates, anon": "select chunk_id from pgrag.vector_candidates(%(e)s, 40)",
    "vector_search, anon": "select chunk_id from public.vector_search(%(e)s, 10)",
    "plain HNSW of the public graph, top 40, anon": (
        "select id from pgrag.chunks where embedding is not null and is_public"
        " order by embedding <=> %(e)s limit 40"
    ),
}
ROLES_WITHOUT_TENANT = ("service_role", "anon")
# A tenant below pgrag.exact_search_max_rows, not isolated (as pgrag ingest leaves it): its
# vector search scans its rows exactly.
SMALL_TENANT = "small"
CALLS["vector_search, small"] = CALLS["vector_search"]
CALLS["hybrid_search, small"] = CALLS["hybrid_search"]


def timed(conn: psycopg.Connection[Any], query: str, params: dict[str, Any], name: str) -> float:
    """One request as tenant t0 through RLS (or, for a call whose name ends in a role of
    ROLES_WITHOUT_TENANT, as that role without a tenant; in SMALL_TENANT, as that tenant);
    milliseconds of the call alone."""
    with conn.transaction():
        suffix = name.rsplit(", ", 1)[-1]
        if suffix in ROLES_WITHOUT_TENANT:
            conn.execute(f"set local role {suffix}")
        else:
            set_request_tenant(conn, SMALL_TENANT if suffix == SMALL_TENANT else "t0")
            conn.execute("set local role authenticated")
        t = time.perf_counter()
        conn.execute(query, params).fetchall()
        return (time.perf_counter() - t) * 1000


def planning_ms(conn: psycopg.Connection[Any], repeats: int = 30) -> float:
    """Median planning time of a query of one chunk by key (EXPLAIN's own figure)."""
    times = []
    for i in range(repeats):
        plan = conn.execute(
            "explain (summary, costs off) select * from pgrag.chunks"
            " where tenant_id = 't0' and id = %s",
            (i + 1,),
        ).fetchall()
        found = re.search(r"Planning Time: ([0-9.]+) ms", "\n".join(r[0] for r in plan))
        assert found, plan
        times.append(float(found.group(1)))
    conn.rollback()
    return round(float(np.median(times)), 3)


def isolate_more(conn: psycopg.Connection[Any], have: int, want: int, vectors: np.ndarray) -> None:
    """Small tenants s<have>.. s<want - 1>, each loaded and given its own graph."""
    for i in range(have, want):
        tenant = f"s{i}"
        insert_ready_document(
            conn,
            tenant,
            f"bench://small/{i}",
            (
                (
                    f"small tenant {i} chunk {j}",
                    vectors[(i * SMALL_TENANT_CHUNKS + j) % len(vectors)],
                )
                for j in range(SMALL_TENANT_CHUNKS)
            ),
            title="small",
        )
        conn.execute("select pgrag.isolate_tenant(%s)", (tenant,))
        conn.commit()


def prepare(dsn: str, texts: list[str], vectors: np.ndarray) -> dict[str, float]:
    """t0's chunks loaded and published (anon's searches), and its own graph built; the small
    tenant's 200 chunks (10 documents) loaded."""
    loaded = load(dsn, texts, vectors, tenants=1)
    with connect(dsn) as conn:
        for d in range(10):
            insert_ready_document(
                conn,
                SMALL_TENANT,
                f"bench://small-tenant/{d}",
                ((texts[d * 20 + j], vectors[d * 20 + j]) for j in range(20)),
                title="small tenant",
            )
        conn.execute("update pgrag.documents set is_public = true where tenant_id = 't0'")
        conn.commit()
        conn.execute("analyze pgrag.chunks, pgrag.documents")
        conn.execute("set maintenance_work_mem = '512MB'")
        conn.execute("select pgrag.isolate_tenant('t0')")
        conn.commit()
    return loaded


def measure(
    conns: dict[str, psycopg.Connection[Any]], queries: list[str], qvecs: np.ndarray
) -> dict[str, dict[str, list[float]]]:
    """Every call of CALLS as t0, for each query, the versions and functions interleaved (each
    first in turn); milliseconds per version and function."""
    names = list(CALLS)
    base = [{"q": q, "e": v} for q, v in zip(queries, qvecs, strict=True)]
    params: dict[str, list[dict[str, Any]]] = {}
    for version, conn in conns.items():
        params[version] = [dict(p) for p in base]
        for p in params[version]:  # chunk_windows' hits: the query's hybrid top 10
            with conn.transaction():
                set_request_tenant(conn, "t0")
                conn.execute("set local role authenticated")
                p["ids"] = [r[0] for r in conn.execute(CALLS["hybrid_search"], p).fetchall()]
        for p in params[version][:10]:  # warm-up: plans and pages
            for n in names:
                timed(conn, CALLS[n], p, n)
    ms: dict[str, dict[str, list[float]]] = {v: {n: [] for n in names} for v in conns}
    versions = list(conns)
    for j in range(len(base)):
        turn = j % len(names)
        for n in names[turn:] + names[:turn]:
            for v in versions[j % len(versions) :] + versions[: j % len(versions)]:
                ms[v][n].append(timed(conns[v], CALLS[n], params[v][j], n))
    return ms


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size", type=int, default=10_000, help="t0's chunks (default 10,000)")
    parser.add_argument(
        "--counts",
        type=int,
        nargs="+",
        default=[1, 100, 300, 1000],
        help="isolated tenants on the server, t0 included (default 1 100 300 1000)",
    )
    parser.add_argument("--queries", type=int, default=200, help="queries per count (max 300)")
    parser.add_argument(
        "--base",
        help="also time the sql/ of this git revision (version A) in a second database with "
        "the same rows, interleaved with this checkout's (version B)",
    )
    parser.add_argument("--admin-dsn", help="superuser DSN of a server with pgvector")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    texts, all_queries = load_scifact()
    queries = all_queries[: args.queries]
    vectors = embed_cached("scifact-corpus", [t[:EMBED_CHARS] for t in texts])
    qvecs = embed_cached("scifact-queries", all_queries)[: len(queries)]
    s_texts, s_vecs = synthetic(args.size, texts, vectors, np.random.default_rng(42))
    result: dict[str, Any] = {
        "command": "python benchmarks/isolated_tenants.py " + " ".join(sys.argv[1:]),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "t0_chunks": args.size,
        "small_tenant_chunks": SMALL_TENANT_CHUNKS,
        "queries": len(queries),
        "versions": {"B": f"checkout ({short_revision('HEAD')})"},
        "counts": {},
    }
    if args.base:
        result["versions"]["A"] = f"{args.base} ({short_revision(args.base)})"
    dsns: dict[str, str] = {}
    conns: dict[str, psycopg.Connection[Any]] = {}
    with (
        server(args.admin_dsn, "pgrag-isolated-") as admin,
        tempfile.TemporaryDirectory() as tmp,
    ):
        try:
            if args.base:
                dsns["A"] = install(admin, "isolated_a", sql_of_revision(args.base, Path(tmp)))
            dsns["B"] = fresh_database(admin, "isolated_tenants")
            for version, dsn in dsns.items():
                print(f"  {version}: t0 loaded: {prepare(dsn, s_texts, s_vecs)}", flush=True)
            conns.update({v: connect(dsn) for v, dsn in dsns.items()})
            version_row = conns["B"].execute("select version()").fetchone()
            result["server"] = version_row[0] if version_row else None
            have = 1
            for count in sorted(args.counts):
                entry: dict[str, Any] = {}
                for version, conn in conns.items():
                    t = time.perf_counter()
                    isolate_more(conn, have, count, vectors)
                    conn.execute("analyze pgrag.chunks, pgrag.documents")
                    conn.commit()
                    indexes = conn.execute(
                        "select count(*) from pg_index where indrelid = 'pgrag.chunks'::regclass"
                    ).fetchone()
                    entry[version] = {
                        "indexes_on_chunks": indexes[0] if indexes else None,
                        "isolating_s": round(time.perf_counter() - t, 1),
                    }
                    conn.execute("checkpoint")
                    conn.commit()
                have = count
                ms = measure(conns, queries, qvecs)
                for version, conn in conns.items():
                    e = entry[version]
                    e["planning_ms_chunk_by_key"] = planning_ms(conn)
                    e["functions"] = {n: latency_summary(t) for n, t in ms[version].items()}
                    arm = e["functions"]["vector arm, 40 candidates"]["p50_ms"]
                    plain = e["functions"]["plain HNSW of t0's graph, top 40"]["p50_ms"]
                    e["arm_over_plain_p50"] = round(arm / plain, 2)
                    e["arm_over_plain_p50_service_role"] = round(
                        e["functions"]["vector arm, 40 candidates, service_role"]["p50_ms"]
                        / e["functions"]["plain HNSW of the shared graph, top 40, service_role"][
                            "p50_ms"
                        ],
                        2,
                    )
                    e["arm_over_plain_p50_anon"] = round(
                        e["functions"]["vector arm, 40 candidates, anon"]["p50_ms"]
                        / e["functions"]["plain HNSW of the public graph, top 40, anon"]["p50_ms"],
                        2,
                    )
                    print(
                        f"  {version} {count:5d} isolated tenants"
                        f" ({e['indexes_on_chunks']} indexes): planning a chunk by key"
                        f" {e['planning_ms_chunk_by_key']:.3f} ms; "
                        + "; ".join(f"{n} p50 {e['functions'][n]['p50_ms']:.2f}" for n in CALLS)
                        + f"; arm / plain {e['arm_over_plain_p50']:.2f}",
                        flush=True,
                    )
                if "A" in entry:
                    entry["B_over_A_p50"] = {
                        n: round(
                            entry["B"]["functions"][n]["p50_ms"]
                            / entry["A"]["functions"][n]["p50_ms"],
                            2,
                        )
                        for n in CALLS
                    }
                    print(f"  B / A p50 at {count}: {entry['B_over_A_p50']}", flush=True)
                result["counts"][str(count)] = entry
                args.out.parent.mkdir(parents=True, exist_ok=True)
                args.out.write_text(json.dumps(result, indent=2) + "\n")
        finally:
            for conn in conns.values():
                conn.close()
            for dsn in dsns.values():
                drop_database(admin, dsn)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
