"""Two versions of pgrag's SQL on the same data: per-function latency, interleaved, in one run.

For a change to the SQL functions (a release that rewrites bodies), this answers "is a single
server slower now?" on this noisy shared machine. The corpus is loaded into a database installed
from a git revision's ``sql/`` (version A, default ``main``), which is then copied twice (``CREATE
DATABASE ... TEMPLATE``: the same rows and index pages; an HNSW graph built twice differs): one
copy is timed as A, the other upgraded to this checkout's ``sql/`` (version B). Every query of
every function then runs on both, once untimed (pages read, plans made, rows compared), then timed,
alternately (A then B, then B then A for the next query), through one long-lived connection per
database (as a pool's), as tenant ``t0`` through row-level security (the claims of
``pgrag.set_request_tenant``, or with ``--claims supabase`` a Supabase Auth access token's, then
role ``authenticated``, as a PostgREST request runs; with ``--claims none``, as the connecting
owner without a tenant, as the README's psql example searches). Results must be equal; the ratios
B/A of p50 and p95 are what to quote. With ``--isolated N`` the server holds N tenants with graphs
of their own (``pgrag.isolate_tenant``): ``t0``, whose vector search then walks its own graph, and
N - 1 tenants of 20 chunks (each graph one more index on ``pgrag.chunks`` for every plan made;
``benchmarks/isolated_tenants.py`` measures that growth).

Corpus (``--corpus``): a single-tenant corpus of ``benchmarks/latency.py`` (real MiniLM
vectors of SciFact abstracts plus noise, binary COPY, HNSW built after), ``copies`` (default: the
abstracts re-used with variations) or ``mixed`` (each chunk random SciFact sentences, as long as a
random abstract: no duplicate chunks; the vectors stay those of ``copies``).

    .venv/bin/python benchmarks/sql_ab.py                       # main against this checkout
    .venv/bin/python benchmarks/sql_ab.py --base main --size 10000 --queries 100
    .venv/bin/python benchmarks/sql_ab.py --size 100000 --corpus mixed --queries 300
    .venv/bin/python benchmarks/sql_ab.py --isolated 300    # t0 and 299 small tenants isolated
    .venv/bin/python benchmarks/sql_ab.py --queries 300 --rounds 3   # 900 calls per function

A change to how rows are stored (incremental 015's storage of embeddings) takes effect only
for rows written after it: ``--rewrite`` rewrites ``pgrag.chunks`` in both databases after B's
migration (``VACUUM FULL``), so B's rows take the new layout; each database then has an HNSW
graph of its own build, and vector results may differ in a few rows.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
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

from common import latency_summary, sql_versions, supabase_token_fields  # noqa: E402
from latency import (  # noqa: E402
    EMBED_CHARS,
    embed_cached,
    load,
    load_scifact,
    mixed_corpus,
    synthetic,
)

from pgrag.db import connect, set_request_tenant  # noqa: E402
from pgrag.install.migrator import Migrator  # noqa: E402
from pgrag.testing import create_database, drop_database, server  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "sql_ab.json"
TENANT = "t0"

CALLS = {
    "vector_search": "select * from public.vector_search(%(e)s, 10)",
    "vector arm, 40 candidates": "select * from pgrag.vector_candidates(%(e)s, 40)",
    "keyword_search": "select * from public.keyword_search(%(q)s, 10)",
    "keyword arm, 40 candidates": "select * from pgrag.keyword_candidates(%(q)s, 40)",
    "hybrid_search": "select * from public.hybrid_search(%(q)s, %(e)s, 10)",
    "hybrid_search rrf": "select * from public.hybrid_search(%(q)s, %(e)s, 10, fusion => 'rrf')",
    "hybrid_search window 1 + mmr": (
        "select * from public.hybrid_search(%(q)s, %(e)s, 10, window_size => 1, mmr_lambda => 0.7)"
    ),
    "chunk_windows": "select * from public.chunk_windows(%(ids)s, 1)",
    "build_context": "select * from public.build_context(%(q)s, %(e)s)",
}


def install(admin: str, name: str, root: Path) -> str:
    dsn = create_database(admin, name)
    Migrator(dsn, root=root).migrate()
    return dsn


def sql_of_revision(revision: str, into: Path) -> Path:
    """``sql/`` of a git revision, extracted into ``into``; the folder holding its tiers."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", revision, "sql"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into / "sql"


# --claims none: no claims and no role switch, the connecting user (the owner) searching
# without a tenant, as the README's psql example does.
WITHOUT_TENANT = ""


def as_tenant(conn: psycopg.Connection[Any], claims: str | None) -> None:
    """The tenant's claims for this transaction (``claims``, a JSON text, or else those of
    ``pgrag.set_request_tenant``), then its role: rows through RLS. With ``WITHOUT_TENANT``,
    nothing: the connecting user without a tenant."""
    if claims == WITHOUT_TENANT:
        return
    if claims is None:
        set_request_tenant(conn, TENANT)
    else:
        conn.execute("select set_config('request.jwt.claims', %s, true)", (claims,))
    conn.execute("set local role authenticated")


def supabase_claims(dsn: str) -> str:
    """A Supabase Auth access token's claims with the tenant where ``pgrag.set_request_tenant``
    puts it (the database's ``pgrag.tenant_claim``), as JSON text."""
    with connect(dsn) as conn, conn.transaction():
        set_request_tenant(conn, TENANT)
        row = conn.execute(
            "select (%s::jsonb || current_setting('request.jwt.claims')::jsonb)::text",
            (json.dumps(supabase_token_fields()),),
        ).fetchone()
    assert row is not None
    return str(row[0])


def call(
    conn: psycopg.Connection[Any], query: str, params: dict[str, Any], claims: str | None = None
) -> tuple[float, list[tuple[Any, ...]]]:
    with conn.transaction():
        as_tenant(conn, claims)
        t = time.perf_counter()
        rows = conn.execute(query, params).fetchall()
        return (time.perf_counter() - t) * 1000, rows


def isolate(dsn: str, count: int, vectors: np.ndarray) -> str:
    """Tenant t0 with a graph of its own and ``count - 1`` small tenants isolated beside it."""
    from isolated_tenants import isolate_more

    t = time.perf_counter()
    with connect(dsn) as conn:
        conn.execute("set maintenance_work_mem = '512MB'")
        conn.execute("select pgrag.isolate_tenant(%s)", (TENANT,))
        conn.commit()
        isolate_more(conn, 1, count, vectors)
        conn.execute("analyze pgrag.chunks, pgrag.documents")
        conn.commit()
    return f"{count} isolated tenants ({TENANT} included) in {time.perf_counter() - t:.0f} s"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--base", default="main", help="git revision of version A (default main)")
    parser.add_argument("--size", type=int, default=10_000, help="chunks (default 10,000)")
    parser.add_argument("--queries", type=int, default=100, help="queries per function")
    parser.add_argument("--base-docs", type=int, default=1000)
    parser.add_argument(
        "--corpus",
        choices=["copies", "mixed"],
        default="copies",
        help="copies: rotated copies of the abstracts (default); mixed: chunks of random sentences",
    )
    parser.add_argument(
        "--admin-dsn", help="superuser DSN of a server with pgvector (default: embedded)"
    )
    parser.add_argument(
        "--rewrite",
        action="store_true",
        help="rewrite pgrag.chunks in both databases after B's migration (VACUUM FULL, as"
        " docs/install.md advises after a storage change such as incremental 015): each"
        " rebuilds its HNSW graph, so vector results may differ slightly",
    )
    parser.add_argument(
        "--claims",
        choices=["minimal", "supabase", "none"],
        default="minimal",
        help="each request's JWT claims: minimal (those of pgrag.set_request_tenant, default),"
        " supabase (a Supabase Auth access token's fields, about 700 bytes) or none (no"
        " claims, as the connecting owner: a search without a tenant, as from psql)",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="times each query is timed per version (default 1): more samples, less noise",
    )
    parser.add_argument(
        "--isolated",
        type=int,
        default=0,
        metavar="N",
        help="N isolated tenants on the server: tenant t0 gets a graph of its own and N - 1"
        " tenants of 20 chunks one each (benchmarks/isolated_tenants.py's), before B is copied",
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    texts, queries = load_scifact()
    texts = texts[: args.base_docs]
    queries = queries[: args.queries]
    vectors = embed_cached("scifact-corpus", [t[:EMBED_CHARS] for t in texts])
    qvecs = embed_cached("scifact-queries", queries)
    rng = np.random.default_rng(42)
    s_texts, s_vecs = synthetic(args.size, texts, vectors, rng)
    if args.corpus == "mixed":
        s_texts = mixed_corpus(args.size, rng)
    versions = sql_versions(args.base)
    print(
        f"A = sql/ of {versions['A']}, B = sql/ of this {versions['B']}; "
        f"{args.corpus} corpus, {args.size} chunks",
        flush=True,
    )

    result: dict[str, Any] = {
        "command": "python benchmarks/sql_ab.py " + " ".join(sys.argv[1:]),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "versions": versions,
        "size": args.size,
        "corpus": args.corpus,
        "rewrite": args.rewrite,
        "claims": args.claims,
        "isolated_tenants": args.isolated,
        "queries": len(queries),
        "rounds": args.rounds,
        "functions": {},
    }
    with tempfile.TemporaryDirectory() as tmp, server(args.admin_dsn, "pgrag-sql-ab-") as admin:
        with psycopg.connect(admin) as conn:
            row = conn.execute("select version()").fetchone()
            result["server"] = row[0] if row else None
        # Both timed databases are copies of the loaded one (CREATE DATABASE ... TEMPLATE): the
        # same rows, the same index pages (an HNSW graph built twice differs); B then gets this
        # checkout's SQL. A copy read against the database it was copied from measured 1.04-1.13
        # for identical SQL (the vector arm at 10k), so A is timed on a copy too.
        loaded = install(admin, "sql_ab_loaded", sql_of_revision(args.base, Path(tmp)))
        dsns = {"loaded": loaded, "A": loaded}
        claims = (
            supabase_claims(dsns["A"])
            if args.claims == "supabase"
            else WITHOUT_TENANT
            if args.claims == "none"
            else None
        )
        try:
            print(f"  A loaded: {load(dsns['A'], s_texts, s_vecs, tenants=1)}", flush=True)
            if args.isolated:
                print(f"  A: {isolate(dsns['A'], args.isolated, vectors)}", flush=True)
            dsns["A"] = create_database(admin, "sql_ab_a", template="sql_ab_loaded")
            dsns["B"] = create_database(admin, "sql_ab_b", template="sql_ab_loaded")
            print(f"  B migrated: {Migrator(dsns['B']).migrate().applied}", flush=True)
            if args.rewrite:
                for dsn in (dsns["A"], dsns["B"]):
                    with connect(dsn, autocommit=True) as conn:
                        conn.execute("set maintenance_work_mem = '1GB'")
                        conn.execute("set max_parallel_maintenance_workers = 2")
                        conn.execute("vacuum (full, analyze) pgrag.chunks")
                print("  pgrag.chunks rewritten in A and B", flush=True)
            # The copy (and a rewrite) leave B's pages dirty in shared buffers: until a
            # checkpoint writes them, B's first functions would pay for evicting them (a run
            # of vector_search measured B/A 1.5 with its SQL unchanged before this).
            with connect(admin, autocommit=True) as conn:
                conn.execute("checkpoint")
            conns = {name: connect(dsns[name]) for name in ("A", "B")}
            with conns["A"] as a, conns["B"] as b:
                ids = [
                    [
                        r[0]
                        for r in a.execute(
                            "select id from pgrag.chunks where tenant_id = %s "
                            "order by embedding <=> %s limit 8",
                            (TENANT, v),
                        )
                    ]
                    for v in qvecs
                ]
                a.commit()
                for fname, query in CALLS.items():
                    # Untimed first, every query once on each version: neither then pays in the
                    # timed calls for reading pages (B's were only copied, A's were just written:
                    # a first run measured B/A 1.13 for the first function with the same SQL) or
                    # for planning. The rows are compared here.
                    differ = 0
                    for j in range(len(queries)):
                        params = {"q": queries[j], "e": qvecs[j], "ids": ids[j]}
                        differ += (
                            call(a, query, params, claims)[1] != call(b, query, params, claims)[1]
                        )
                    ms: dict[str, list[float]] = {"A": [], "B": []}
                    for i in range(args.rounds * len(queries)):
                        j = i % len(queries)
                        params = {"q": queries[j], "e": qvecs[j], "ids": ids[j]}
                        # A first on even calls; a query in the next round gets the other order
                        order = ("A", "B") if (i + i // len(queries)) % 2 == 0 else ("B", "A")
                        for name in order:
                            ms[name].append(call(a if name == "A" else b, query, params, claims)[0])
                    # Each call of B against the call of A next to it (same query, same moment):
                    # the median of these ratios is steadier on a busy machine than p50 / p50.
                    paired = float(np.median(np.divide(ms["B"], ms["A"])))
                    sa, sb = latency_summary(ms["A"]), latency_summary(ms["B"])
                    entry = {
                        "A": sa,
                        "B": sb,
                        "ratio_p50": round(sb["p50_ms"] / sa["p50_ms"], 3),
                        "ratio_p95": round(sb["p95_ms"] / sa["p95_ms"], 3),
                        "median_paired_ratio": round(paired, 3),
                        "queries_with_different_rows": differ,
                    }
                    result["functions"][fname] = entry
                    print(
                        f"  {fname:30s} A p50 {sa['p50_ms']:7.2f} p95 {sa['p95_ms']:7.2f} | "
                        f"B p50 {sb['p50_ms']:7.2f} p95 {sb['p95_ms']:7.2f} | "
                        f"B/A {entry['ratio_p50']:.2f} / {entry['ratio_p95']:.2f}"
                        f" (paired {paired:.2f})"
                        f"  differ {differ}",
                        flush=True,
                    )
        finally:
            for dsn in set(dsns.values()):
                drop_database(admin, dsn)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
