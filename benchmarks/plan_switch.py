"""A search's latency call by call in one session, on a server with many tenants: does it change
after the fifth call? One run, two versions of pgrag's SQL.

PL/pgSQL keeps each statement's plan for the session; under PostgreSQL's default
``plan_cache_mode`` (``auto``) a statement is planned with the call's values five times, then
the plan cache may keep one generic plan, which knows neither the tenant nor how many hits come
(with many tenants, a tenant's rows look as few as the average tenant's). A function that sets
no mode runs with its caller's. docs/benchmarks.md, "A search's plans do not depend on its
caller".

Each version (A: the ``sql/`` of a git revision, ``--base``; B: this checkout's) gets a database
of its own with the same rows: tenant ``t0`` holds ``--documents`` documents of
``--chunks-per-document`` chunks (SciFact abstracts with their real MiniLM vectors), and
``--tenants`` other tenants one chunk each. Then, through one connection (as a pool's session),
as ``t0`` through row-level security, each function is called ``--calls`` times in a row with
the same arguments, each call in its own transaction. Reported per function and version: the
median of calls 1-5, the median of the later calls, and their ratio.

    PGRAG_SHARED_DIR=../shared .venv/bin/python benchmarks/plan_switch.py --base a610624
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from common import insert_ready_document, short_revision  # noqa: E402
from latency import EMBED_CHARS, embed_cached, load_scifact  # noqa: E402
from sql_ab import install, sql_of_revision  # noqa: E402

from pgrag.db import connect, set_request_tenant  # noqa: E402
from pgrag.testing import drop_database, server  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "plan_switch.json"
CALLS = {
    "vector_search": "select chunk_id from public.vector_search(%(e)s, 10)",
    "keyword_search": "select chunk_id from public.keyword_search(%(q)s, 10)",
    "hybrid_search": "select chunk_id from public.hybrid_search(%(q)s, %(e)s, 10)",
    "chunk_windows": "select chunk_ids from public.chunk_windows(%(ids)s, 1)",
    "build_context": "select context from public.build_context(%(q)s, %(e)s, window_size => 1)",
}


def load_tenants(
    dsn: str, texts: list[str], vectors: np.ndarray, documents: int, per_document: int, others: int
) -> None:
    """t0's documents of per_document chunks, then one chunk for each of the other tenants."""
    with connect(dsn) as conn:
        specs = [("t0", i, per_document) for i in range(documents)]
        specs += [(f"s{i}", documents + i, 1) for i in range(others)]
        for tenant, number, chunks in specs:
            first = number * per_document
            insert_ready_document(
                conn,
                tenant,
                f"bench://{tenant}/{number}",
                (
                    (texts[k % len(texts)], vectors[k % len(texts)])
                    for k in range(first, first + chunks)
                ),
                title=f"document {number}",
            )
        conn.execute("analyze")
        conn.commit()


def calls_in_one_session(dsn: str, params: dict[str, Any], calls: int) -> dict[str, list[float]]:
    """Milliseconds of each call, function by function, all through one connection."""
    out: dict[str, list[float]] = {}
    with connect(dsn) as conn:
        with conn.transaction():
            set_request_tenant(conn, "t0")
            conn.execute("set local role authenticated")
            params["ids"] = [r[0] for r in conn.execute(CALLS["hybrid_search"], params).fetchall()]
        conn.commit()
        for name, query in CALLS.items():
            out[name] = []
            for _ in range(calls):
                with conn.transaction():
                    set_request_tenant(conn, "t0")
                    conn.execute("set local role authenticated")
                    t = time.perf_counter()
                    conn.execute(query, params).fetchall()
                    out[name].append(round((time.perf_counter() - t) * 1000, 2))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--base", default="main", help="git revision of version A (default main)")
    parser.add_argument("--documents", type=int, default=200, help="t0's documents (default 200)")
    parser.add_argument("--chunks-per-document", type=int, default=5)
    parser.add_argument("--tenants", type=int, default=300, help="other tenants (default 300)")
    parser.add_argument("--calls", type=int, default=10, help="calls per function (default 10)")
    parser.add_argument("--admin-dsn", help="superuser DSN of a server with pgvector")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    if args.calls < 6:
        parser.error("--calls must be at least 6 (the plan cache decides after five)")

    texts, queries = load_scifact()
    texts = [t[:EMBED_CHARS] for t in texts]
    vectors = embed_cached("scifact-corpus", texts)
    qvec = embed_cached("scifact-queries", queries)[0]
    params: dict[str, Any] = {"q": queries[0], "e": qvec}
    result: dict[str, Any] = {
        "command": "python benchmarks/plan_switch.py " + " ".join(sys.argv[1:]),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "documents": args.documents,
        "chunks_per_document": args.chunks_per_document,
        "other_tenants": args.tenants,
        "calls": args.calls,
        "versions": {},
    }
    with (
        server(args.admin_dsn, "pgrag-plan-switch-") as admin,
        tempfile.TemporaryDirectory() as tmp,
    ):
        roots = {"A": sql_of_revision(args.base, Path(tmp)), "B": ROOT / "sql"}
        for version, sql_root in roots.items():
            dsn = install(admin, f"plan_switch_{version.lower()}", sql_root)
            try:
                load_tenants(
                    dsn, texts, vectors, args.documents, args.chunks_per_document, args.tenants
                )
                ms = calls_in_one_session(dsn, dict(params), args.calls)
            finally:
                drop_database(admin, dsn)
            label = args.base if version == "A" else "checkout"
            entry: dict[str, Any] = {"sql": label, "functions": {}}
            for name, times in ms.items():
                first, later = statistics.median(times[:5]), statistics.median(times[5:])
                entry["functions"][name] = {
                    "ms_per_call": times,
                    "median_calls_1_5": first,
                    "median_later_calls": later,
                    "later_over_first": round(later / first, 2),
                }
                print(
                    f"  {version} ({label}) {name:15s} calls 1-5 {first:8.2f} ms,"
                    f" later {later:10.2f} ms ({later / first:.2f}x)",
                    flush=True,
                )
            result["versions"][version] = entry
    result["versions"]["B"]["sql"] = f"checkout ({short_revision('HEAD')})"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
