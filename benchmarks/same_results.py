"""Same rows and scores before and after a change to pgrag's SQL, for every SciFact test query.

A change that restructures the search functions must not change what they return. This loads
the SciFact abstracts into a database installed from the ``sql/`` of a git revision (version A,
``--base``), runs every test claim through every search function as several callers, keeps every
row, then upgrades the same database to this checkout's ``sql/`` (version B: ``pgrag migrate``,
which replaces the idempotent tier; the rows, the HNSW graphs and the statistics stay) and runs
the same calls again. Each row of B must equal A's row, column by column, in the same order.

Data (``benchmarks/latency.py``'s SciFact loader and cached MiniLM vectors, so nothing is embedded
after the first run): tenant ``scifact`` holds the 5,183 abstracts, 10 chunks per document, in the
shared graph; tenant ``isolated`` the same rows with a graph of its own (``pgrag.isolate_tenant``);
tenant ``small`` the first 200 abstracts, below ``pgrag.exact_search_max_rows`` (an exact scan),
published (what ``anon`` searches). Callers: each tenant through row-level security (an
authenticator role, the tenant's claims by ``pgrag.set_request_tenant``, role ``authenticated``,
as a PostgREST request), ``scifact`` also with filters (``source_types``: the arms' filtered
forms) and with a ``document_ids`` filter (the exact scan by key), and without a tenant:
``service_role``, ``anon`` and the owner (a psql session without claims). Functions:
``vector_search``, ``keyword_search``, ``hybrid_search`` (weighted and RRF fusion, window 1, MMR),
``chunk_windows`` and ``build_context`` (default, and window 1 with MMR). An error is a result
too: A and B must raise the same SQLSTATE and message.

Comparison: every column exactly, except double precision values (scores), which may differ by
at most 1e-12: a restructured statement may evaluate the same formula in another order (a sum
of arm scores, a min-max normalisation), which changes the last bits of a double (about 1e-16
relative); any difference that matters moves a row or exceeds that. The report gives, per
function, the calls compared, the calls identical to the bit, the calls within the tolerance and
the largest score difference; the exit status is 1 when any call differs.

    .venv/bin/python benchmarks/same_results.py                   # 66a3615 against this checkout
    .venv/bin/python benchmarks/same_results.py --base main --queries 50
    .venv/bin/python benchmarks/same_results.py --citus           # a Citus coordinator + 2 workers
    .venv/bin/python benchmarks/same_results.py --citus --queries 30 --no-tenant-queries 5

``--citus`` starts (unless ``--citus-dsn`` names one) a coordinator and two workers of the
PostgreSQL 15 with Citus and pgvector the Citus tests build (tests/plugins/pgservers.py; build it
once with ``pytest tests/test_citus.py``), installs A with ``pgrag migrate --citus``'s engine and
upgrades with ``pgrag migrate --citus`` (``--citus-dsn``: a coordinator whose database has the
citus and vector extensions and no pgrag yet).

On 2 shared cores: about 8 minutes on one server (21,600 calls per version). With ``--citus``
about 20 minutes for the tenants' 13,500 calls per version, and 30 more for the 8,100 calls per
version without a tenant (``--no-tenant-queries 20``: 2 more).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import platform
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
from psycopg.conninfo import make_conninfo

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests"))

from citus import AUTHENTICATOR, ensure_authenticator  # noqa: E402
from common import insert_ready_document, sql_versions  # noqa: E402
from latency import CHUNKS_PER_DOC, EMBED_CHARS, embed_cached, load_scifact  # noqa: E402
from sql_ab import sql_of_revision  # noqa: E402

from pgrag.db import connect, set_request_tenant  # noqa: E402
from pgrag.install.citus import migrate_citus  # noqa: E402
from pgrag.install.migrator import Migrator  # noqa: E402
from pgrag.testing import create_database, drop_database, server  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "same_results.json"
DEFAULT_BASE = "66a3615"  # the revision before the search core was restructured
TOLERANCE = 1e-12
SMALL_CHUNKS = 200
# Text values longer than this are kept as a digest: the rows of every call stay in memory.
LONG_TEXT = 80


@dataclass(frozen=True)
class Caller:
    """Who calls: a tenant through RLS (``tenant``), an API role without a tenant (``role``), or
    the owner (neither); ``filters`` is SQL appended to every call's arguments."""

    name: str
    tenant: str | None = None
    role: str | None = None
    filters: str = ""


CALLERS = (
    Caller("tenant scifact (shared graph)", tenant="scifact"),
    Caller(
        "tenant scifact, source_types filter",
        tenant="scifact",
        filters=", source_types => array['text', 'markdown']",
    ),
    Caller(
        "tenant scifact, document_ids filter",
        tenant="scifact",
        filters=", document_ids => %(doc_ids)s",
    ),
    Caller("tenant isolated (own graph)", tenant="isolated"),
    Caller("tenant small (exact scan)", tenant="small"),
    Caller("service_role, no tenant", role="service_role"),
    Caller("anon (public documents)", role="anon"),
    Caller("owner, no claims"),
)

CALLS = {
    "vector_search": "select * from public.vector_search(%(e)s, 10{f})",
    "keyword_search": "select * from public.keyword_search(%(q)s, 10{f})",
    "hybrid_search weighted": "select * from public.hybrid_search(%(q)s, %(e)s, 10{f})",
    "hybrid_search rrf": (
        "select * from public.hybrid_search(%(q)s, %(e)s, 10, fusion => 'rrf'{f})"
    ),
    "hybrid_search window 1": (
        "select * from public.hybrid_search(%(q)s, %(e)s, 10, window_size => 1{f})"
    ),
    "hybrid_search mmr": (
        "select * from public.hybrid_search(%(q)s, %(e)s, 10, mmr_lambda => 0.7{f})"
    ),
    "chunk_windows": (
        "select * from public.chunk_windows(array(select h.chunk_id from"
        " public.hybrid_search(%(q)s, %(e)s, 10{f}) h order by h.rank), 1)"
    ),
    "build_context": "select * from public.build_context(%(q)s, %(e)s{f})",
    "build_context window 1 + mmr": (
        "select * from public.build_context(%(q)s, %(e)s, window_size => 1, mmr_lambda => 0.7{f})"
    ),
}

Results = dict[tuple[str, str], list[Any]]


# -- comparison ----------------------------------------------------------------------------------


def normal(value: Any) -> Any:
    """A result value as compared and kept: long texts as a digest, containers recursively."""
    if isinstance(value, str) and len(value) > LONG_TEXT:
        return "sha256:" + hashlib.sha256(value.encode()).hexdigest()[:20]
    if isinstance(value, (list, tuple)):
        return [normal(v) for v in value]
    if isinstance(value, dict):
        return {k: normal(v) for k, v in value.items()}
    return value


def difference(a: Any, b: Any) -> float | None:
    """The largest absolute difference between the floats of ``a`` and ``b``, which are otherwise
    equal (0.0 when identical); None when they differ in anything but a float's value."""
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return 0.0 if math.isnan(a) and math.isnan(b) else None
        return 0.0 if a == b else abs(a - b)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b):
            return None
        worst = 0.0
        for x, y in zip(a, b, strict=True):
            d = difference(x, y)
            if d is None:
                return None
            worst = max(worst, d)
        return worst
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return None
        return difference([a[k] for k in a], [b[k] for k in a])
    return 0.0 if type(a) is type(b) and a == b else None


@dataclass
class Tally:
    """One function's comparison over every caller and query."""

    compared: int = 0
    identical: int = 0
    within_tolerance: int = 0
    errors: int = 0  # calls that raised (the same error in A and B counts as identical)
    empty: int = 0  # calls that returned no rows in A
    empty_by_caller: dict[str, int] = field(default_factory=dict)
    rows: int = 0  # rows A returned
    max_abs_score_difference: float = 0.0
    differing: list[dict[str, Any]] = field(default_factory=list)

    def add(self, caller: str, query: int, a: Any, b: Any) -> None:
        self.compared += 1
        self.errors += isinstance(a, dict) and "error" in a
        if a == []:
            self.empty += 1
            self.empty_by_caller[caller] = self.empty_by_caller.get(caller, 0) + 1
        self.rows += len(a) if isinstance(a, list) else 0
        d = difference(a, b)
        if d is not None:
            self.max_abs_score_difference = max(self.max_abs_score_difference, d)
        if d == 0.0:
            self.identical += 1
        elif d is not None and d <= TOLERANCE:
            self.within_tolerance += 1
        elif len(self.differing) < 5:
            self.differing.append({"caller": caller, "query": query, "A": a, "B": b})
        else:
            self.differing.append({"caller": caller, "query": query})

    @property
    def ok(self) -> bool:
        return self.identical + self.within_tolerance == self.compared


def compare(a: Results, b: Results) -> dict[str, Tally]:
    tallies = {name: Tally() for name in CALLS}
    for (caller, name), rows in a.items():
        for i, (x, y) in enumerate(zip(rows, b[(caller, name)], strict=True)):
            tallies[name].add(caller, i, x, y)
    return tallies


# -- servers, data, calls ------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """Where the database lives and how to install and upgrade it."""

    dsn: str  # superuser DSN of the database
    citus: bool
    what: str

    def install(self, root: Path) -> None:
        if self.citus:
            migrate_citus(self.dsn, root=root)
        else:
            Migrator(self.dsn, root=root).migrate()

    def upgrade(self) -> list[str]:
        done = migrate_citus(self.dsn) if self.citus else Migrator(self.dsn).migrate()
        return done.applied


@contextmanager
def target(args: argparse.Namespace) -> Iterator[Target]:
    """A new database on a throwaway embedded server (or ``--admin-dsn``), or with ``--citus``
    the coordinator's ``postgres`` database of a throwaway cluster (or ``--citus-dsn``)."""
    if args.citus and args.citus_dsn:
        yield Target(args.citus_dsn, True, "given Citus coordinator")
        return
    if args.citus:
        from plugins.pgservers import Steps, prepare_pg15, start_citus_cluster

        steps = Steps(say=lambda line: print(f"[servers] {line}", file=sys.stderr))
        prepare_pg15(steps, "same_results.py --citus", citus=True)
        cluster = start_citus_cluster(steps)
        try:
            yield Target(cluster.coordinator_dsn, True, f"{cluster.version.split(' on ')[0]}")
        finally:
            cluster.remove()
        return
    with server(args.admin_dsn, "pgrag-same-results-") as admin:
        dsn = create_database(admin, "same_results")
        try:
            yield Target(dsn, False, "one server")
        finally:
            drop_database(admin, dsn)


def load_tenants(dsn: str, texts: list[str], vectors: np.ndarray) -> dict[str, int]:
    """Tenants ``scifact``, ``isolated`` (its own graph) and ``small`` (published); chunks each."""
    layout = {"scifact": len(texts), "isolated": len(texts), "small": SMALL_CHUNKS}
    with connect(dsn) as conn:
        for tenant, n in layout.items():
            for d, start in enumerate(range(0, n, CHUNKS_PER_DOC)):
                rows = range(start, min(start + CHUNKS_PER_DOC, n))
                insert_ready_document(
                    conn,
                    tenant,
                    f"scifact://{tenant}/{d}",
                    ((texts[i], vectors[i]) for i in rows),
                    title=texts[start].split(". ", 1)[0][:120],
                )
                if d % 50 == 49:
                    conn.commit()
            conn.commit()
        conn.execute("update pgrag.documents set is_public = true where tenant_id = 'small'")
        conn.commit()
        conn.execute("select pgrag.isolate_tenant('isolated')")
        conn.commit()
    with connect(dsn, autocommit=True) as conn:
        conn.execute(
            "analyze pgrag.documents, pgrag.chunks, pgrag.bm25_postings, pgrag.bm25_lexicon,"
            " pgrag.corpus_stats"
        )
    return layout


def first_document_ids(dsn: str, tenant: str, n: int = 30) -> list[int]:
    with connect(dsn) as conn:
        return [
            int(r[0])
            for r in conn.execute(
                "select id from pgrag.documents where tenant_id = %s order by id limit %s",
                (tenant, n),
            )
        ]


def run_all(
    dsn: str,
    queries: list[str],
    qvecs: np.ndarray,
    doc_ids: list[int],
    label: str,
    no_tenant_queries: int,
) -> Results:
    """Every call of every caller for every query (the callers without a tenant: the first
    ``no_tenant_queries``), one connection per caller, as a pool's; each result normalised by
    :func:`normal`, or the error it raised."""
    results: Results = {}
    for caller in CALLERS:
        started = time.perf_counter()
        n = len(queries) if caller.tenant else min(no_tenant_queries, len(queries))
        via = dsn if caller.tenant is None and caller.role is None else None
        with connect(via or make_conninfo(dsn, user=AUTHENTICATOR)) as conn:
            for name, template in CALLS.items():
                statement = template.format(f=caller.filters)
                out = results.setdefault((caller.name, name), [])
                for q, e in zip(queries[:n], qvecs[:n], strict=True):
                    out.append(one_call(conn, caller, statement, q, e, doc_ids))
        print(
            f"  {label}: {caller.name}: {len(CALLS) * n} calls in "
            f"{time.perf_counter() - started:.0f} s",
            flush=True,
        )
    return results


def one_call(
    conn: psycopg.Connection[Any],
    caller: Caller,
    statement: str,
    q: str,
    e: np.ndarray,
    doc_ids: list[int],
) -> Any:
    try:
        with conn.transaction():
            if caller.tenant is not None:
                set_request_tenant(conn, caller.tenant)
                conn.execute("set local role authenticated")
            elif caller.role is not None:
                conn.execute(f"set local role {caller.role}")
            rows = conn.execute(statement, {"q": q, "e": e, "doc_ids": doc_ids}).fetchall()
            return normal(rows)
    except psycopg.Error as exc:
        return {"error": exc.sqlstate, "message": exc.diag.message_primary}


# -- report --------------------------------------------------------------------------------------


def report(tallies: dict[str, Tally]) -> None:
    print(
        f"\n{'function':30s}{'compared':>10s}{'identical':>11s}{'within 1e-12':>14s}"
        f"{'rows':>8s}{'empty':>7s}{'errors':>8s}{'max |diff|':>12s}"
    )
    for name, t in tallies.items():
        print(
            f"{name:30s}{t.compared:>10d}{t.identical:>11d}{t.within_tolerance:>14d}"
            f"{t.rows:>8d}{t.empty:>7d}{t.errors:>8d}{t.max_abs_score_difference:>12.3g}"
            + ("" if t.ok else f"   DIFFERENT: {t.compared - t.identical - t.within_tolerance}")
        )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--base", default=DEFAULT_BASE, help=f"version A (default {DEFAULT_BASE})")
    parser.add_argument("--queries", type=int, default=300, help="SciFact test claims (max 300)")
    parser.add_argument("--citus", action="store_true", help="on a Citus coordinator + 2 workers")
    parser.add_argument("--citus-dsn", help="with --citus: a coordinator's superuser DSN")
    parser.add_argument(
        "--admin-dsn", help="superuser DSN of a server with pgvector (default: embedded)"
    )
    parser.add_argument(
        "--no-tenant-queries",
        type=int,
        help="claims the callers without a tenant run (default: all); with --citus such a"
        " search reads every shard (about 0.15 s a call), so a quick check may take fewer",
    )
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    no_tenant_queries = args.queries if args.no_tenant_queries is None else args.no_tenant_queries
    out = args.out or RESULTS.with_name("same_results-citus.json" if args.citus else RESULTS.name)

    versions = sql_versions(args.base)
    texts, queries = load_scifact()
    queries = queries[: args.queries]
    vectors = embed_cached("scifact-corpus", [t[:EMBED_CHARS] for t in texts])
    qvecs = embed_cached("scifact-queries", load_scifact()[1])[: len(queries)]
    print(f"A = sql/ of {versions['A']}, B = sql/ of this {versions['B']}", flush=True)

    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp, target(args) as where:
        where.install(sql_of_revision(args.base, Path(tmp)))
        ensure_authenticator(where.dsn)
        t = time.perf_counter()
        layout = load_tenants(where.dsn, texts, vectors)
        print(f"  loaded {layout} in {time.perf_counter() - t:.0f} s", flush=True)
        with psycopg.connect(where.dsn) as conn:
            row = conn.execute("select version()").fetchone()
            server_version = str(row[0]) if row else ""
        doc_ids = first_document_ids(where.dsn, "scifact")
        a = run_all(where.dsn, queries, qvecs, doc_ids, "A", no_tenant_queries)
        applied = where.upgrade()
        print(f"  upgraded to B: {len(applied)} files applied", flush=True)
        b = run_all(where.dsn, queries, qvecs, doc_ids, "B", no_tenant_queries)
    tallies = compare(a, b)
    report(tallies)
    ok = all(t.ok for t in tallies.values())
    result = {
        "what": "rows and scores of every search function, version A against B, same database",
        "command": "python benchmarks/same_results.py " + " ".join(sys.argv[1:]),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "server": server_version,
        "where": where.what,
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "versions": versions,
        "upgrade_applied": applied,
        "tenants": layout,
        "queries": len(queries),
        "queries_without_tenant": min(no_tenant_queries, len(queries)),
        "callers": [c.name for c in CALLERS],
        "tolerance": TOLERANCE,
        "seconds": round(time.perf_counter() - started),
        "same": ok,
        "functions": {
            name: {
                "compared": t.compared,
                "identical": t.identical,
                "within_tolerance": t.within_tolerance,
                "rows": t.rows,
                "empty": t.empty,
                "empty_by_caller": t.empty_by_caller,
                "errors": t.errors,
                "max_abs_score_difference": t.max_abs_score_difference,
                "differing": t.differing,
            }
            for name, t in tallies.items()
        },
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1, default=str) + "\n")
    print(f"{'same rows and scores' if ok else 'DIFFERENT results'}; wrote {out}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
