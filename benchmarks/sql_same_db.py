"""Two versions of the search arms and fusion in one database, timed inside the server.

``sql_ab.py`` times version A and version B in two databases, copies of one. When the two working
sets do not fit in ``shared_buffers`` together (the embedded server's 128 MB, BM25 postings of
10,000 chunks and more), each version's calls evict the other's pages, and a run measured up to
1.15x between the copies for SQL that timed the same in one database. This script has no second
database: it loads a corpus into a database with this checkout's SQL (B), installs version A's
``pgrag.vector_candidates``, ``pgrag.keyword_candidates``, ``pgrag.fused_candidates`` and
``public.hybrid_search`` beside B's under the suffix ``_a`` (their calls of each other renamed too;
everything else they call is B's), and times each call inside the server (a PL/pgSQL timer around
``EXECUTE``), A and B alternating query by query, as tenant ``t0`` through row-level security. Rows
are compared too. A's bodies must still run on B's schema, which holds while no incremental
migration separates the versions.

    .venv/bin/python benchmarks/sql_same_db.py --base 66a3615 --size 10000 --queries 300
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from common import percentile, sql_versions  # noqa: E402
from latency import EMBED_CHARS, embed_cached, load, load_scifact, synthetic  # noqa: E402
from sql_ab import sql_of_revision  # noqa: E402

from pgrag.db import connect, set_request_tenant  # noqa: E402
from pgrag.testing import fresh_database, server  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "sql_same_db-10k.json"
FUNCTIONS = ("vector_candidates", "keyword_candidates", "fused_candidates", "hybrid_search")
CALLS = {
    "vector arm, 40 candidates": "select count(*) from pgrag.vector_candidates{v}($2, 40)",
    "keyword arm, 40 candidates": "select count(*) from pgrag.keyword_candidates{v}($1, 40)",
    "hybrid candidates (weighted), 10 of 40": (
        "select count(*) from pgrag.fused_candidates{v}($1, $2, 10, 40)"
    ),
    "hybrid candidates (rrf), 10 of 40": (
        "select count(*) from pgrag.fused_candidates{v}($1, $2, 10, 40, 'rrf')"
    ),
    "hybrid_search, 10": "select count(*) from public.hybrid_search{v}($1, $2, 10)",
}
TIMER = """
create function pg_temp.timed(stmt text, q text, e @extschema@.vector) returns double precision
language plpgsql as $$
declare
    t timestamptz := clock_timestamp();
    n bigint;
begin
    execute stmt into n using q, e;
    return extract(epoch from clock_timestamp() - t) * 1000;
end
$$;
create function pg_temp.result(stmt text, q text, e @extschema@.vector) returns text
language plpgsql as $$
declare
    r text;
begin
    execute format('select coalesce(json_agg(r)::text, %L) from (%s) as r', '[]', stmt)
    into r using q, e;
    return r;
end
$$"""


def functions_of_revision(root: Path, vector_schema: str) -> str:
    """Version A's definitions of FUNCTIONS, renamed with the suffix ``_a``."""
    text = "\n".join(p.read_text() for p in sorted((root / "idempotent").glob("*.sql")))
    bodies = [
        m.group(0)
        for name in FUNCTIONS
        for m in re.finditer(
            rf"^create or replace function (?:pgrag|public)\.{name}\(.*?^\$\$;", text, re.S | re.M
        )
    ]
    assert len(bodies) == len(FUNCTIONS), "a function of version A was not found"
    renamed = re.sub(rf"\b({'|'.join(FUNCTIONS)})\b", r"\1_a", "\n".join(bodies))
    return renamed.replace("@extschema:vector@", vector_schema)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--base", default="main", help="git revision of version A (default main)")
    parser.add_argument("--size", type=int, default=10_000, help="chunks (default 10,000)")
    parser.add_argument("--queries", type=int, default=300, help="queries per function")
    parser.add_argument("--rounds", type=int, default=2, help="times each query is timed")
    parser.add_argument("--admin-dsn", help="superuser DSN of a server with pgvector")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    texts, queries = load_scifact()
    texts = texts[:1000]
    queries = queries[: args.queries]
    vectors = embed_cached("scifact-corpus", [t[:EMBED_CHARS] for t in texts])
    qvecs = embed_cached("scifact-queries", queries)
    s_texts, s_vecs = synthetic(args.size, texts, vectors, np.random.default_rng(42))
    result: dict[str, object] = {
        "command": "python benchmarks/sql_same_db.py " + " ".join(sys.argv[1:]),
        "versions": sql_versions(args.base),
        "size": args.size,
        "queries": len(queries),
        "rounds": args.rounds,
    }
    functions: dict[str, object] = {}
    with tempfile.TemporaryDirectory() as tmp, server(args.admin_dsn, "pgrag-same-db-") as admin:
        dsn = fresh_database(admin)
        print(f"  loaded: {load(dsn, s_texts, s_vecs, tenants=1)}", flush=True)
        with connect(dsn, autocommit=True) as conn:
            schema = conn.execute(
                "select n.nspname from pg_extension e join pg_namespace n"
                " on n.oid = e.extnamespace where e.extname = 'vector'"
            ).fetchone()[0]
            conn.execute("set search_path = pg_catalog, pg_temp")
            conn.execute(functions_of_revision(sql_of_revision(args.base, Path(tmp)), schema))
            conn.execute(TIMER.replace("@extschema@", schema))
            with conn.transaction():
                set_request_tenant(conn, "t0")
                for name, template in CALLS.items():
                    a, b = template.format(v="_a"), template.format(v="")
                    params = [(q, str(e.tolist())) for q, e in zip(queries, qvecs, strict=True)]
                    rows = "select pg_temp.result(%s, %s, %s)"
                    differ = sum(
                        conn.execute(rows, (a.replace("count(*)", "*"), *p)).fetchone()
                        != conn.execute(rows, (b.replace("count(*)", "*"), *p)).fetchone()
                        for p in params
                    )
                    ms: dict[str, list[float]] = {"A": [], "B": []}
                    for i in range(args.rounds * len(params)):
                        p = params[i % len(params)]
                        order = ("A", "B") if (i + i // len(params)) % 2 == 0 else ("B", "A")
                        for v in order:
                            stmt = a if v == "A" else b
                            row = conn.execute("select pg_temp.timed(%s, %s, %s)", (stmt, *p))
                            ms[v].append(row.fetchone()[0])
                    entry = {
                        v: {
                            "p50_ms": round(percentile(ms[v], 50), 4),
                            "p95_ms": round(percentile(ms[v], 95), 4),
                        }
                        for v in ("A", "B")
                    }
                    ratio50 = entry["B"]["p50_ms"] / entry["A"]["p50_ms"]
                    ratio95 = entry["B"]["p95_ms"] / entry["A"]["p95_ms"]
                    functions[name] = {
                        **entry,
                        "ratio_p50": round(ratio50, 3),
                        "ratio_p95": round(ratio95, 3),
                        "differ": differ,
                    }
                    print(
                        f"  {name:40s} A p50 {entry['A']['p50_ms']:7.3f} | B p50"
                        f" {entry['B']['p50_ms']:7.3f} | B/A {ratio50:.3f} / {ratio95:.3f}"
                        f"  differ {differ}",
                        flush=True,
                    )
    result["functions"] = functions
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
