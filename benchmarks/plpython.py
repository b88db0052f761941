"""Text search inside the database (PL/Python) against embedding on the client, in ONE run.

On a PostgreSQL with PL/Python and pgrag installed for the server's Python (by default a
throwaway Debian PostgreSQL 15 made by the tests' helpers, tests/plugins/pgservers.py, which
needs root; or ``--dsn`` to a server set up as docs/install.md says), a database gets the first
``--docs`` SciFact abstracts through pgrag's ingester, then for each SciFact test query, the
three kinds interleaved, over one connection as a tenant (row level security applies):

  * ``text``: ``hybrid_search_text(query, 10)``: the server embeds the query (PL/Python, model
    already loaded in that backend) and runs hybrid_search;
  * ``client``: the query embedded in this process by pgrag's own model (ONNX Runtime, its
    default threads), then ``hybrid_search(query, embedding, 10)``: what ``pgrag search`` does;
  * ``sql``: ``hybrid_search`` with the embedding computed beforehand (the floor: no model).

Then ``--backends`` new connections, each timing its first ``hybrid_search_text`` (the backend
loads the model) and its second, and reading the backend's resident memory (VmRSS of
/proc/<pid>/status, this machine's server only) after connecting, after a first
``hybrid_search`` (no model) and after the model is loaded. The query-embedding cache is empty
throughout: every ``text`` call embeds.

    .venv/bin/python benchmarks/plpython.py          # as root: makes its own PostgreSQL 15

Writes benchmarks/results/plpython.json. The machine is shared: compare the kinds by their
ratio within this one run, not by absolute times.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
from common import SCIFACT, latency_summary
from psycopg.conninfo import make_conninfo

from pgrag.db import connect, set_request_tenant
from pgrag.eval.dataset import BeirDataset, load_beir
from pgrag.eval.run import ingest_dataset
from pgrag.install.migrator import Migrator
from pgrag.pipeline.embedders import LocalEmbedder
from pgrag.testing import create_database, drop_database

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATA = SCIFACT
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "plpython.json"
TENANT = "scifact"


@contextlib.contextmanager
def throwaway_server() -> Iterator[tuple[str, dict[str, Any]]]:
    """A Debian PostgreSQL 15 with PL/Python, pgvector and pgrag for its Python (as root)."""
    sys.path.insert(0, str(ROOT / "tests"))
    from plugins.pgservers import (  # the tests' helpers: installs what is missing
        PLPYTHON_PACKAGES,
        Steps,
        ensure_pg15,
        ensure_pgvector,
        install_pgrag,
        make_plpython_venv,
        start_pg15_plpython,
    )

    steps = Steps(say=lambda line: print(f"[server] {line}", file=sys.stderr))
    ensure_pg15(steps, PLPYTHON_PACKAGES)
    ensure_pgvector(steps)
    venv = make_plpython_venv(prefix="pgrag-bench-plpython-", steps=steps)
    try:
        install_pgrag(venv)
        server = start_pg15_plpython(venv, steps)
        try:
            yield server.dsn, {"server": "throwaway Debian PostgreSQL 15", "setup_s": steps.times}
        finally:
            server.cluster.remove()
    finally:
        import shutil

        shutil.rmtree(venv.path.parent, ignore_errors=True)


def rss_kb(pid: int) -> int | None:
    """Resident memory of a process of this machine, in kB (None when not readable)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def as_tenant(conn: Any) -> None:
    set_request_tenant(conn, TENANT)
    conn.execute("set local role authenticated")


def timed_query(conn: Any, query: str, args: tuple[Any, ...]) -> float:
    """Milliseconds of one statement in its own transaction, as the tenant."""
    started = time.perf_counter()
    with conn.transaction():
        as_tenant(conn)
        rows = conn.execute(query, args).fetchall()
    elapsed = (time.perf_counter() - started) * 1000.0
    assert rows, query
    return elapsed


TEXT_SQL = "select chunk_id, score from public.hybrid_search_text(%s, 10)"
HYBRID_SQL = "select chunk_id, score from public.hybrid_search(%s, %s, 10)"


def bench_warm(dsn: str, queries: list[str], embedder: LocalEmbedder) -> dict[str, Any]:
    vectors = embedder.embed(queries)  # the `sql` floor's embeddings, computed beforehand
    times: dict[str, list[float]] = {"text": [], "client": [], "sql": []}
    same_top = 0
    with connect(dsn) as conn:
        timed_query(conn, TEXT_SQL, (queries[0],))  # this backend loads the model now
        for query, vector in zip(queries, vectors, strict=True):
            times["text"].append(timed_query(conn, TEXT_SQL, (query,)))
            started = time.perf_counter()
            embedding = embedder.embed([query])[0]
            embed_ms = (time.perf_counter() - started) * 1000.0
            times["client"].append(embed_ms + timed_query(conn, HYBRID_SQL, (query, embedding)))
            times["sql"].append(timed_query(conn, HYBRID_SQL, (query, vector)))
            with conn.transaction():
                as_tenant(conn)
                text_top = conn.execute(TEXT_SQL, (query,)).fetchall()
                client_top = conn.execute(HYBRID_SQL, (query, embedding)).fetchall()
            same_top += [r[0] for r in text_top] == [r[0] for r in client_top]
    summary = {kind: latency_summary(ms) for kind, ms in times.items()}
    return {
        **summary,
        "text_over_client_p50": round(summary["text"]["p50_ms"] / summary["client"]["p50_ms"], 2),
        "text_over_sql_p50": round(summary["text"]["p50_ms"] / summary["sql"]["p50_ms"], 2),
        "client_over_sql_p50": round(summary["client"]["p50_ms"] / summary["sql"]["p50_ms"], 2),
        "queries_with_the_same_10_rows": same_top,
    }


def bench_new_backends(dsn: str, queries: list[str], backends: int) -> dict[str, Any]:
    first, second, rss = [], [], []
    for i in range(backends):
        query = queries[i % len(queries)]
        with connect(dsn) as conn:
            (pid,) = conn.execute("select pg_backend_pid()").fetchone()  # type: ignore[misc]
            conn.rollback()
            connected = rss_kb(pid)
            with conn.transaction():
                as_tenant(conn)
                vector = conn.execute("select embedding from pgrag.chunks limit 1").fetchone()[0]  # type: ignore[index]
                conn.execute(HYBRID_SQL, (query, vector)).fetchall()
            searched = rss_kb(pid)
            first.append(timed_query(conn, TEXT_SQL, (query,)))
            loaded = rss_kb(pid)
            second.append(timed_query(conn, TEXT_SQL, (queries[(i + 1) % len(queries)],)))
            if None not in (connected, searched, loaded):
                rss.append((connected, searched, loaded))
    out: dict[str, Any] = {
        "backends": backends,
        "first_call": latency_summary(first),
        "second_call": latency_summary(second),
    }
    if rss:
        arr = np.asarray(rss, dtype=np.float64) / 1024.0
        out["rss_mb"] = {
            "after_connect_p50": round(float(np.median(arr[:, 0])), 1),
            "after_hybrid_search_p50": round(float(np.median(arr[:, 1])), 1),
            "after_model_load_p50": round(float(np.median(arr[:, 2])), 1),
            "model_load_delta_p50": round(float(np.median(arr[:, 2] - arr[:, 1])), 1),
        }
    return out


def subset(dataset: BeirDataset, docs: int, queries: int | None) -> BeirDataset:
    corpus = dict(list(dataset.corpus.items())[:docs])
    kept = dict(list(dataset.queries.items())[:queries] if queries else dataset.queries.items())
    return BeirDataset(dataset.name, dataset.path, corpus, kept, dataset.qrels)


def run(dsn: str, args: argparse.Namespace) -> dict[str, Any]:
    admin = make_conninfo(dsn, dbname="postgres")
    db = create_database(admin)
    try:
        Migrator(db).migrate(384)
        with connect(db) as conn:
            variant = conn.execute(
                "select l.lanname from pg_proc p join pg_language l on l.oid = p.prolang "
                "where p.oid = 'pgrag.compute_query_embedding(text)'::regprocedure"
            ).fetchone()
            version = conn.execute("select current_setting('server_version')").fetchone()
        if not variant or variant[0] != "plpython3u":
            raise SystemExit(f"{dsn}: the server has no PL/Python variant ({variant})")
        dataset = subset(load_beir(args.data), args.docs, args.queries)
        embedder = LocalEmbedder()
        started = time.perf_counter()
        ingested = ingest_dataset(db, dataset, tenant=TENANT, embedder=embedder, progress=False)
        print(f"ingest: {ingested} in {time.perf_counter() - started:.1f} s", file=sys.stderr)
        with connect(db) as conn:
            chunks = conn.execute("select count(*) from pgrag.chunks").fetchone()
            cached = conn.execute("select count(*) from pgrag.query_embeddings").fetchone()
        queries = list(dataset.queries.values())
        warm = bench_warm(db, queries, embedder)
        cold = bench_new_backends(db, queries, args.backends)
        with connect(db) as conn:
            cached_after = conn.execute("select count(*) from pgrag.query_embeddings").fetchone()
        assert cached == cached_after == (0,), "the cache must stay empty: every call embeds"
        return {
            "server_version": version[0] if version else None,
            "documents": len(dataset.corpus),
            "chunks": chunks[0] if chunks else None,
            "queries": len(queries),
            "warm": warm,
            "new_backend": cold,
        }
    finally:
        drop_database(admin, db)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", help="a server with PL/Python and pgrag for its Python")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="BEIR SciFact folder")
    parser.add_argument("--docs", type=int, default=1000, help="abstracts to ingest")
    parser.add_argument("--queries", type=int, help="test queries to run (default all)")
    parser.add_argument("--backends", type=int, default=8, help="new connections timed")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    started = datetime.now(UTC)
    with contextlib.ExitStack() as stack:
        if args.dsn:
            dsn, server = args.dsn, {"server": "--dsn"}
        else:
            dsn, server = stack.enter_context(throwaway_server())
        figures = run(dsn, args)
    result = {
        "benchmark": "plpython",
        "command": "benchmarks/plpython.py " + " ".join(argv or sys.argv[1:]),
        "started": started.isoformat(timespec="seconds"),
        "machine": {
            "cpus": os.cpu_count(),
            "load_avg": os.getloadavg(),
            "python": platform.python_version(),
        },
        **server,
        **figures,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    warm, cold = figures["warm"], figures["new_backend"]
    print(json.dumps({"warm": warm, "new_backend": cold}, indent=2))
    print(
        f"hybrid_search_text p50 {warm['text']['p50_ms']} ms vs client embedding + hybrid_search "
        f"{warm['client']['p50_ms']} ms ({warm['text_over_client_p50']}x); first call in a new "
        f"backend p50 {cold['first_call']['p50_ms']} ms; model in a backend "
        f"+{cold.get('rss_mb', {}).get('model_load_delta_p50')} MB RSS; wrote {args.out}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
