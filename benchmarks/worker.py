"""The document queue's worker against ``pgrag ingest``, every figure from ONE run.

Figures:
  * throughput: the same SciFact abstracts (first ``--limit``, default 1,000) loaded by
    ``ingest_documents`` (what ``pgrag ingest`` runs) and by ``pgrag worker --once`` after
    submitting them with ``public.submit_document``, with the same warmed-up local model, in
    fresh databases, in the order ingest, worker, worker, ingest (``--rounds`` pairs): the
    ratio of the mean chunks/s is the figure (goal: the worker within 10 % of ingest);
  * submission: documents/s of ``submit_document`` (one transaction per document);
  * claim overhead: ``pgrag.claim_documents`` alone on a queue of the same size, per document
    claimed, at batch 64 (the worker's default) and batch 1;
  * queue latency: a running worker (waiting on NOTIFY) and small documents submitted one at a
    time at ``--rate`` per second: submit commit -> document ready, p50 / p95 (both times read
    from the server's clock).

    PGRAG_HOME=/tmp/pgrag-bench .venv/bin/python benchmarks/worker.py

Writes benchmarks/results/worker.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from common import admin_url, latency_summary

from pgrag.db import connect, set_request_tenant
from pgrag.ingest import ingest_documents
from pgrag.pipeline.embedders import LocalEmbedder
from pgrag.pipeline.extract import ExtractedDocument
from pgrag.testing import drop_database, fresh_database
from pgrag.worker import QueueWorker, WorkerOptions

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "scifact" / "corpus.jsonl"
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "worker.json"
TENANT = "bench"
GOAL_PCT = 10.0


def load_corpus(path: Path, limit: int) -> list[tuple[str, str]]:
    """(source_uri, text) per abstract: title, blank line, abstract (as benchmarks/ingest.py)."""
    docs = []
    with path.open() as f:
        for line in f:
            row = json.loads(line)
            docs.append((f"scifact:{row['_id']}", row["title"] + "\n\n" + row["text"]))
            if len(docs) >= limit:
                break
    return docs


def submit(dsn: str, docs: list[tuple[str, str]]) -> float:
    """Submit every document (one transaction each, as clients do); seconds taken."""
    started = time.perf_counter()
    with connect(dsn, autocommit=True) as conn:
        for uri, text in docs:
            with conn.transaction():
                set_request_tenant(conn, TENANT)
                conn.execute("select public.submit_document(%s, %s)", (uri, text))
    return time.perf_counter() - started


def chunks_of(dsn: str) -> list[tuple[Any, ...]]:
    with connect(dsn) as conn:
        return conn.execute(
            "select d.source_uri, c.chunk_index, c.content from pgrag.chunks c "
            "join pgrag.documents d on d.tenant_id = c.tenant_id and d.id = c.document_id "
            "order by 1, 2"
        ).fetchall()


def run_ingest(admin: str, docs: list[tuple[str, str]], embedder: LocalEmbedder) -> dict:
    dsn = fresh_database(admin, "pgrag_bench_worker_ingest")
    extracted = [ExtractedDocument.from_text(u, t) for u, t in docs]
    summary = ingest_documents(dsn, extracted, tenant=TENANT, embedder=embedder)
    assert summary.documents_failed == 0, summary
    result = {
        "seconds": summary.seconds,
        "chunks": summary.chunks_written,
        "chunks_per_s": summary.chunks_written / summary.seconds,
        "signature": chunks_of(dsn),
    }
    drop_database(admin, dsn)
    return result


def run_worker(
    admin: str, docs: list[tuple[str, str]], embedder: LocalEmbedder, batch: int
) -> dict:
    dsn = fresh_database(admin, "pgrag_bench_worker_queue")
    submit_s = submit(dsn, docs)
    worker = QueueWorker(dsn, WorkerOptions(once=True, batch=batch), embedder=embedder)
    summary = worker.run()
    assert summary.documents_done == len(docs) and summary.documents_failed == 0, summary
    result = {
        "seconds": summary.seconds,
        "chunks": summary.chunks_written,
        "chunks_per_s": summary.chunks_written / summary.seconds,
        "submit_docs_per_s": len(docs) / submit_s,
        "batches": summary.batches,
        "signature": chunks_of(dsn),
    }
    drop_database(admin, dsn)
    return result


def claim_overhead(admin: str, docs: list[tuple[str, str]], batch: int) -> dict[str, float]:
    """``claim_documents`` alone, until the queue is empty: ms per document claimed."""
    dsn = fresh_database(admin, "pgrag_bench_worker_claims")
    submit(dsn, docs)
    claimed = 0
    seconds = 0.0
    with connect(dsn, autocommit=True) as conn:
        conn.execute("select 1")
        while True:
            started = time.perf_counter()
            n = len(
                conn.execute(
                    "select 1 from pgrag.claim_documents('bench', %s, '1 hour')", (batch,)
                ).fetchall()
            )
            seconds += time.perf_counter() - started
            if not n:
                break
            claimed += n
    drop_database(admin, dsn)
    assert claimed == len(docs)
    return {"ms_per_document": round(seconds * 1000 / claimed, 3), "batch": batch}


def queue_latency(
    admin: str, docs: list[tuple[str, str]], embedder: LocalEmbedder, rate: float
) -> dict[str, Any]:
    """Submit -> ready with a worker waiting on NOTIFY, one small document at a time."""
    dsn = fresh_database(admin, "pgrag_bench_worker_latency")
    worker = QueueWorker(dsn, WorkerOptions(poll=5.0), embedder=embedder)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    time.sleep(2)  # listening
    submitted: dict[str, Any] = {}
    with connect(dsn, autocommit=True) as conn:
        for uri, text in docs:
            with conn.transaction():
                set_request_tenant(conn, TENANT)
                conn.execute("select public.submit_document(%s, %s)", (uri, text))
                row = conn.execute("select now()").fetchone()
            submitted[uri] = row[0] if row else None
            time.sleep(1 / rate)
        deadline = time.monotonic() + 300
        while True:
            row = conn.execute(
                "select count(*) from pgrag.documents where status = 'ready'"
            ).fetchone()
            if row and row[0] == len(docs):
                break
            assert time.monotonic() < deadline, "the worker did not finish"
            time.sleep(0.1)
        ready = dict(conn.execute("select source_uri, updated_at from pgrag.documents"))
    worker.stop()
    worker.cancel.set()
    thread.join(timeout=30)
    drop_database(admin, dsn)
    ms = [(ready[u] - submitted[u]).total_seconds() * 1000 for u in submitted]
    return {"documents": len(docs), "rate_per_s": rate, **latency_summary(ms)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--dsn", default=os.environ.get("PGRAG_DSN"), help="admin DSN; default: embedded"
    )
    p.add_argument("--data", type=Path, default=DEFAULT_DATA)
    p.add_argument("--limit", type=int, default=1000, help="abstracts (default 1,000)")
    p.add_argument("--rounds", type=int, default=1, help="ingest/worker pairs, ABBA order")
    p.add_argument("--batch", type=int, default=64, help="the worker's --batch")
    p.add_argument("--latency-docs", type=int, default=100)
    p.add_argument("--rate", type=float, default=5.0, help="submissions per second (latency)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = p.parse_args(argv)
    admin = admin_url(args.dsn)
    docs = load_corpus(args.data, args.limit)
    embedder = LocalEmbedder()
    embedder.embed(["warm up the model"])  # model load is excluded from every figure

    ingest_runs: list[dict] = []
    worker_runs: list[dict] = []
    for r in range(args.rounds):
        order = ("ingest", "worker") if r % 2 == 0 else ("worker", "ingest")
        for which in (*order, *reversed(order)):
            if which == "ingest":
                run = run_ingest(admin, docs, embedder)
                ingest_runs.append(run)
            else:
                run = run_worker(admin, docs, embedder, args.batch)
                worker_runs.append(run)
            print(f"{which:<7} {run['chunks_per_s']:7.1f} chunks/s ({run['seconds']:.1f} s)")
    same = all(w["signature"] == ingest_runs[0]["signature"] for w in worker_runs)
    ingest_rate = statistics.fmean(r["chunks_per_s"] for r in ingest_runs)
    worker_rate = statistics.fmean(r["chunks_per_s"] for r in worker_runs)
    ratio = worker_rate / ingest_rate
    print(
        f"worker / ingest: {ratio:.3f} ({(ratio - 1) * 100:+.1f} %; goal within {GOAL_PCT:.0f} %);"
        f" same chunks: {same}"
    )
    submit_rate = statistics.fmean(r["submit_docs_per_s"] for r in worker_runs)
    print(f"submit_document: {submit_rate:.0f} documents/s")
    claims = [claim_overhead(admin, docs, b) for b in (args.batch, 1)]
    for c in claims:
        print(f"claim_documents, batch {c['batch']}: {c['ms_per_document']} ms per document")
    small = [(f"small:{i}", f"Small note {i} about tide pools.") for i in range(args.latency_docs)]
    latency = queue_latency(admin, small, embedder, args.rate)
    print(
        f"queue latency (submit -> ready), {latency['documents']} small documents at "
        f"{args.rate:g}/s: p50 {latency['p50_ms']} ms, p95 {latency['p95_ms']} ms"
    )
    result = {
        "benchmark": "worker",
        "command": "PGRAG_HOME=/tmp/pgrag-bench .venv/bin/python benchmarks/worker.py"
        + (f" --limit {args.limit}" if args.limit != 1000 else "")
        + (f" --rounds {args.rounds}" if args.rounds != 1 else ""),
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_avg_at_end": [round(x, 2) for x in os.getloadavg()],
        },
        "corpus": {"documents": len(docs), "chunks": ingest_runs[0]["chunks"]},
        "embedder": embedder.model_name,
        "embedder_backend": embedder.backend,
        "worker_batch": args.batch,
        "order": "ingest, worker, worker, ingest per round",
        "ingest_chunks_per_s": [round(r["chunks_per_s"], 1) for r in ingest_runs],
        "worker_chunks_per_s": [round(r["chunks_per_s"], 1) for r in worker_runs],
        "worker_vs_ingest": round(ratio, 3),
        "worker_vs_ingest_pct": round((ratio - 1) * 100, 1),
        "goal_within_pct": GOAL_PCT,
        "same_chunks_as_ingest": same,
        "submit_documents_per_s": round(submit_rate, 1),
        "claim_overhead": claims,
        "queue_latency": latency,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
