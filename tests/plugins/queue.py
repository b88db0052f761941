"""The document queue for the worker tests: submitting, reading the queue, running workers.

Helpers: ``submit_texts`` (many inline documents, as a tenant, one transaction),
``queue_states``, ``documents_by_uri``, ``chunk_signature`` (what a clean run must reproduce),
``drain`` (a worker in a thread until the queue is empty), ``pgrag_command`` / ``cli_env``
(``pgrag`` as a subprocess), ``short_documents`` (a corpus of small texts).
Fixture ``fast_retries``: a database whose queue retries after 0.1 s.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from psycopg.types.json import Jsonb

from pgrag.db import connect, set_request_tenant
from pgrag.pipeline.embedders import Embedder
from pgrag.worker import QueueWorker, WorkerOptions, WorkerSummary

WORDS = [
    "river",
    "stone",
    "cloud",
    "lantern",
    "meadow",
    "harbour",
    "violin",
    "copper",
    "orchard",
    "glacier",
    "signal",
    "compass",
    "thistle",
    "ember",
    "quarry",
    "falcon",
    "saffron",
    "tundra",
    "beacon",
    "marble",
]


def short_documents(n: int, prefix: str = "doc") -> list[tuple[str, str]]:
    """``n`` short, distinct texts (one chunk each): (source_uri, text)."""
    docs = []
    for i in range(n):
        words = [WORDS[(i * 7 + k * 3) % len(WORDS)] for k in range(12)]
        docs.append((f"{prefix}-{i:04d}", f"Note {i}. " + " ".join(words) + f" number {i}."))
    return docs


def submit_texts(
    dsn: str,
    tenant: str,
    docs: Sequence[tuple[str, str]],
    source_type: str = "text",
    metadata: dict[str, Any] | None = None,
) -> list[int]:
    """Submit ``docs`` (uri, content) with ``public.submit_document`` acting as ``tenant``."""
    ids = []
    with connect(dsn) as conn:
        set_request_tenant(conn, tenant)
        for uri, content in docs:
            row = conn.execute(
                "select document_id from public.submit_document(%s, %s, %s, null, %s)",
                (uri, content, source_type, Jsonb(metadata or {})),
            ).fetchone()
            assert row is not None
            ids.append(int(row[0]))
        conn.commit()
    return ids


def submit_url(dsn: str, tenant: str, url: str) -> int:
    with connect(dsn) as conn:
        set_request_tenant(conn, tenant)
        row = conn.execute("select document_id from public.submit_document(%s)", (url,)).fetchone()
        conn.commit()
    assert row is not None
    return int(row[0])


def queue_states(dsn: str) -> dict[str, int]:
    """Queue rows per state (completed documents have none)."""
    with connect(dsn) as conn:
        return dict(
            conn.execute("select state, count(*) from pgrag.document_queue group by 1").fetchall()
        )


def documents_by_uri(dsn: str, tenant: str) -> dict[str, dict[str, Any]]:
    """Each document of ``tenant``: status, error, chunk_count and the chunks it really has."""
    with connect(dsn) as conn:
        rows = conn.execute(
            "select d.source_uri, d.status, d.error, d.chunk_count, "
            "(select count(*) from pgrag.chunks c where c.tenant_id = d.tenant_id "
            "and c.document_id = d.id), q.state, q.attempts, q.last_error "
            "from pgrag.documents d left join pgrag.document_queue q "
            "on q.tenant_id = d.tenant_id and q.document_id = d.id where d.tenant_id = %s",
            (tenant,),
        ).fetchall()
    keys = ("status", "error", "chunk_count", "chunks", "queue_state", "attempts", "last_error")
    return {r[0]: dict(zip(keys, r[1:], strict=True)) for r in rows}


def chunk_signature(dsn: str, tenant: str) -> list[tuple[Any, ...]]:
    """Every chunk of ``tenant``: (source_uri, chunk_index, content, token_count), sorted."""
    with connect(dsn) as conn:
        return conn.execute(
            "select d.source_uri, c.chunk_index, c.content, c.token_count from pgrag.chunks c "
            "join pgrag.documents d on d.tenant_id = c.tenant_id and d.id = c.document_id "
            "where c.tenant_id = %s order by 1, 2",
            (tenant,),
        ).fetchall()


def drain(
    dsn: str,
    embedder: Embedder,
    options: WorkerOptions | None = None,
    timeout: float = 300.0,
) -> WorkerSummary:
    """Run a worker (in a thread, waking on NOTIFY and retries) until no document is queued or
    processing, then stop it; its summary. Fails after ``timeout`` seconds."""
    options = options or WorkerOptions(poll=0.2)
    worker = QueueWorker(dsn, options, embedder=embedder)
    done: dict[str, Any] = {}

    def run() -> None:
        try:
            done["summary"] = worker.run()
        except BaseException as exc:
            done["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    try:
        while True:
            states = queue_states(dsn)
            if not states.get("queued") and not states.get("processing"):
                break
            assert thread.is_alive(), done.get("error")
            assert time.monotonic() < deadline, f"the queue did not drain: {states}"
            time.sleep(0.2)
    finally:
        worker.stop()
        worker.cancel.set()
        thread.join(timeout=30)
    if "error" in done:
        raise done["error"]
    summary: WorkerSummary = done["summary"]
    return summary


def pgrag_command() -> str:
    """The ``pgrag`` console script of this interpreter's environment."""
    return str(Path(sys.executable).with_name("pgrag"))


def cli_env(dsn: str, **more: str) -> dict[str, str]:
    """The environment of a ``pgrag`` subprocess on ``dsn`` (offline model, this code first)."""
    root = str(Path(__file__).resolve().parents[2])
    path = os.environ.get("PYTHONPATH", "")
    return {
        **os.environ,
        "PGRAG_DSN": dsn,
        "PYTHONPATH": root if not path else f"{root}{os.pathsep}{path}",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "PGRAG_PROGRESS_INTERVAL": "0",
        **more,
    }


@pytest.fixture
def fast_retries(db: str) -> Iterator[str]:
    """``db`` whose queue retries a failed attempt after 0.1 s (doubling, at most 1 s)."""
    with connect(db) as conn:
        conn.execute(
            "update pgrag.queue_settings set retry_delay = '0.1 s', retry_delay_max = '1 s'"
        )
        conn.commit()
    yield db
