"""Replica lag: how long after a commit on the primary a hot standby's search finds the document.

A throwaway embedded PostgreSQL 18 primary with pgrag installed, and a streaming hot standby of it
(``pg_basebackup -R``, started by the tests' own helper ``tests/plugins/pgservers.py``). A probe
commits one document with one chunk on the primary (as the owner, so the BM25 triggers run as
for any load) and then searches the standby as the tenant (``keyword_search`` in a PostgREST-style
transaction) every millisecond until the chunk is found: the time from the commit's return to the
first search that finds it is the lag a client sees. Two phases:

* ``idle``: nothing else runs (--probes probes, 0.2 s apart);
* ``during ingest``: the same probes while ``pgrag ingest`` loads SciFact abstracts into another
  tenant of the primary (embedding them with the local model on the same machine);

plus the primary's own view, ``pg_stat_replication.replay_lag``, sampled during each phase.
Output ``benchmarks/results/replica.json``.

    .venv/bin/python benchmarks/replica.py
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # the tests' standby helper (plugins/pgservers.py)

import latency  # noqa: E402  (SciFact texts, as the other benchmarks read them)
from common import latency_summary, percentile  # noqa: E402
from plugins.pgservers import start_hot_standby  # noqa: E402

from pgrag.db import connect, set_request_tenant  # noqa: E402
from pgrag.ingest import ingest_paths  # noqa: E402
from pgrag.testing import dsn_for, fresh_database, temporary_cluster  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "replica.json"
TENANT = "lag-probe"


def probe(primary: psycopg.Connection[Any], standby: psycopg.Connection[Any], n: int) -> float:
    """Commit document ``n`` on the primary; ms until the standby's search finds it."""
    word = f"probeword{n:06d}"
    (doc_id,) = primary.execute(
        "insert into pgrag.documents (tenant_id, title, source_type, source_uri, status,"
        " chunk_count) values (%s, %s, 'text', %s, 'ready', 1) returning id",
        (TENANT, word, f"probe://{n}"),
    ).fetchone()  # type: ignore[misc]
    primary.execute(
        "insert into pgrag.chunks (tenant_id, document_id, chunk_index, content,"
        " content_sha256, token_count) values (%s, %s, 0, %s, md5(%s), 3)",
        (TENANT, doc_id, f"lag probe {word}", word),
    )
    primary.commit()
    committed = time.perf_counter()
    while True:
        with standby.transaction():
            set_request_tenant(standby, TENANT)  # the claims, then the role, as a request
            standby.execute("set local role authenticated")
            found = standby.execute(
                "select 1 from public.keyword_search(%s, 1)", (word,)
            ).fetchone()
        if found:
            return (time.perf_counter() - committed) * 1000.0
        time.sleep(0.001)


def sample_replay_lag(primary_dsn: str, stop: threading.Event, out: list[float]) -> None:
    with psycopg.connect(primary_dsn, autocommit=True) as conn:
        while not stop.wait(0.1):
            row = conn.execute(
                "select extract(epoch from replay_lag) * 1000 from pg_stat_replication"
            ).fetchone()
            if row and row[0] is not None:
                out.append(float(row[0]))


def phase(primary_dsn: str, db: str, standby_db: str, probes: int) -> dict[str, Any]:
    lags: list[float] = []
    replay: list[float] = []
    stop = threading.Event()
    sampler = threading.Thread(target=sample_replay_lag, args=(primary_dsn, stop, replay))
    sampler.start()
    try:
        with connect(db) as primary, connect(standby_db, autocommit=False) as standby:
            start = int(time.time() * 1000) % 1_000_000
            for i in range(probes):
                lags.append(probe(primary, standby, start + i))
                time.sleep(0.2)
    finally:
        stop.set()
        sampler.join()
    return {
        "probes": probes,
        "visible_after_ms": {**latency_summary(lags), "max_ms": round(max(lags), 2)},
        "replay_lag_samples": len(replay),
        "replay_lag_ms": {
            "p50_ms": round(percentile(replay, 50), 2) if replay else None,
            "p95_ms": round(percentile(replay, 95), 2) if replay else None,
            "max_ms": round(max(replay), 2) if replay else None,
        },
    }


def show(name: str, r: dict[str, Any]) -> None:
    v, p = r["visible_after_ms"], r["replay_lag_ms"]
    print(
        f"  {name:14s} visible on the standby after p50 {v['p50_ms']} / p95 {v['p95_ms']}"
        f" / max {v['max_ms']} ms; replay_lag p50 {p['p50_ms']} / p95 {p['p95_ms']} ms",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--probes", type=int, default=50)
    parser.add_argument("--ingest-docs", type=int, default=400)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    all_texts, _ = latency.load_scifact()
    result: dict[str, Any] = {
        "command": "python benchmarks/replica.py " + " ".join(sys.argv[1:]),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
    }
    with temporary_cluster("pgrag-replica-") as primary_dsn:
        db = fresh_database(primary_dsn, "replica_lag")
        standby = start_hot_standby(primary_dsn)
        try:
            standby.wait_for_replay(timeout=60)
            standby_db = dsn_for(standby.dsn, str(conninfo_to_dict(db)["dbname"]))
            with psycopg.connect(primary_dsn, autocommit=True) as conn:
                result["server"] = conn.execute("show server_version").fetchone()[0]  # type: ignore[index]
                result["settings"] = dict(
                    conn.execute(
                        "select name, setting from pg_settings where name in ("
                        "'synchronous_commit', 'wal_writer_delay',"
                        " 'max_standby_streaming_delay', 'hot_standby_feedback')"
                    ).fetchall()
                )
            result["idle"] = phase(primary_dsn, db, standby_db, args.probes)
            show("idle", result["idle"])

            folder = Path(tempfile.mkdtemp(prefix="pgrag-replica-docs-"))
            for i, text in enumerate(all_texts[: args.ingest_docs]):
                (folder / f"abstract-{i:05d}.txt").write_text(text + "\n")
            summary: dict[str, Any] = {}

            def ingest() -> None:
                started = time.perf_counter()
                s = ingest_paths(db, [str(folder)], tenant="bulk")
                summary.update(s.as_dict(), wall_s=round(time.perf_counter() - started, 1))

            loader = threading.Thread(target=ingest)
            loader.start()
            deadline = time.monotonic() + 300
            with psycopg.connect(db, autocommit=True) as conn:  # wait until chunks arrive
                while not conn.execute(
                    "select 1 from pgrag.chunks where tenant_id = 'bulk' limit 1"
                ).fetchone():
                    if not loader.is_alive() or time.monotonic() > deadline:
                        raise RuntimeError("the ingest did not start")
                    time.sleep(0.5)
            result["during_ingest"] = phase(primary_dsn, db, standby_db, args.probes)
            result["during_ingest"]["ingest_still_running_at_end"] = loader.is_alive()
            show("during ingest", result["during_ingest"])
            loader.join()
            result["ingest"] = summary
        finally:
            standby.remove()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
