"""pgrag worker end to end: real database, real local model, documents submitted through SQL.

Fetching submitted URLs (and refusing to) is tests/test_worker_fetch.py; kills, concurrent
workers, a flaky embedding endpoint and a database restart are tests/test_worker_reliability.py.
"""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from typing import Any

import numpy as np
from plugins.queue import (
    chunk_signature,
    cli_env,
    documents_by_uri,
    pgrag_command,
    queue_states,
    short_documents,
    submit_texts,
)

from pgrag.db import connect
from pgrag.ingest import ExtractedDocument, ingest_documents
from pgrag.pipeline.embedders import LocalEmbedder
from pgrag.search import SearchOptions, search
from pgrag.worker import QueueWorker, WorkerOptions

MARKDOWN = """---
team: ops
---
# Release process

## Tagging

Releases are tagged from main after the checks pass. The quokka mascot signs every tag.

## Rollback

A rollback redeploys the previous tag; nothing is rebuilt.
"""
HTML = (
    "<html><head><title>Kitchen guide</title></head><body><nav>menu</nav><main>"
    "<h1>Kitchen</h1><p>The espresso machine is descaled every Friday.</p></main></body></html>"
)


def run_once(db: str, embedder: Any, **options: Any) -> Any:
    return QueueWorker(db, WorkerOptions(once=True, **options), embedder=embedder).run()


def test_submitted_documents_become_ready_and_searchable(
    db: str, local_embedder: LocalEmbedder
) -> None:
    submit_texts(db, "acme", [("guide/release.md", MARKDOWN)], "markdown", {"source": "wiki"})
    submit_texts(db, "acme", [("guide/kitchen.html", HTML)], "html")
    submit_texts(db, "acme", [("notes/plain.txt", "Plain notes about the parking garage.")])

    summary = run_once(db, local_embedder)

    assert (summary.claimed, summary.documents_done, summary.documents_failed) == (3, 3, 0)
    docs = documents_by_uri(db, "acme")
    assert {u: (d["status"], d["queue_state"]) for u, d in docs.items()} == {
        "guide/release.md": ("ready", None),
        "guide/kitchen.html": ("ready", None),
        "notes/plain.txt": ("ready", None),
    }
    assert queue_states(db) == {}
    with connect(db) as conn:
        title, source_type, metadata = conn.execute(
            "select title, source_type, metadata from pgrag.documents "
            "where source_uri = 'guide/release.md'"
        ).fetchone() or (None, None, None)
        hits = search(
            conn,
            "who signs the release tags?",
            SearchOptions(limit=1),
            tenant="acme",
            query_embedding=np.asarray(local_embedder.embed(["who signs the release tags?"])[0]),
        )
    assert (title, source_type) == ("Release process", "markdown")
    assert metadata["team"] == "ops" and metadata["source"] == "wiki"
    assert hits and hits[0].source_uri == "guide/release.md" and "quokka" in hits[0].content


def test_the_worker_loads_the_same_chunks_as_ingest(db: str, local_embedder: LocalEmbedder) -> None:
    docs = [("guide/release.md", MARKDOWN), ("notes/plain.txt", "Plain notes. " * 300)]
    ingest_documents(
        db,
        [ExtractedDocument.from_text(u, t, source_type="markdown") for u, t in docs],
        tenant="by-ingest",
        embedder=local_embedder,
    )
    submit_texts(db, "by-worker", docs, "markdown")

    run_once(db, local_embedder)

    assert chunk_signature(db, "by-worker") == chunk_signature(db, "by-ingest")
    assert len(chunk_signature(db, "by-worker")) > 3


def test_content_changed_while_queued_is_processed_with_the_latest_content(
    db: str, local_embedder: LocalEmbedder
) -> None:
    submit_texts(db, "acme", [("notes/a.txt", "The first draft mentions a walrus.")])
    with connect(db, autocommit=True) as conn:  # another worker is busy with version 1 ...
        conn.execute("select * from pgrag.claim_documents('busy-worker', 10, '1 hour')")
    submit_texts(db, "acme", [("notes/a.txt", "The final text mentions a pelican.")])

    summary = run_once(db, local_embedder)  # ... when version 2 arrives

    assert summary.documents_done == 1
    assert [c[2] for c in chunk_signature(db, "acme")] == ["The final text mentions a pelican."]
    with connect(db) as conn:
        conn.execute("select pgrag.set_request_tenant('acme')")
        stale = conn.execute(  # the busy worker finishes version 1 last: nothing is swapped
            "select completed from pgrag.complete_documents('busy-worker', pgrag.create_stage(),"
            " array[1]::int8[], array[1], array['T'], array['text'], array['x'],"
            " array['{}'::jsonb], array[1], 'm')"
        ).fetchall()
    assert stale == [(False,)]
    assert [c[2] for c in chunk_signature(db, "acme")] == ["The final text mentions a pelican."]


def test_an_unchanged_resubmission_is_not_embedded_again(db: str) -> None:
    embedder = LocalEmbedder()
    submit_texts(db, "acme", short_documents(3))
    run_once(db, embedder)
    calls = embedder.calls

    submit_texts(db, "acme", short_documents(3))
    summary = run_once(db, embedder)

    assert (summary.documents_unchanged, summary.chunks_embedded) == (3, 0)
    assert embedder.calls == calls
    assert queue_states(db) == {}


def test_a_document_without_text_fails_for_good_with_the_reason(
    db: str, local_embedder: LocalEmbedder
) -> None:
    submit_texts(db, "acme", [("empty.txt", "   \n\n  "), ("fine.txt", "Some real text here.")])

    summary = run_once(db, local_embedder)

    assert (summary.documents_done, summary.documents_failed) == (1, 1)
    docs = documents_by_uri(db, "acme")
    assert docs["empty.txt"]["status"] == "error"
    assert docs["empty.txt"]["error"] == "no extractable text"
    assert (docs["empty.txt"]["queue_state"], docs["empty.txt"]["attempts"]) == ("failed", 1)
    assert docs["fine.txt"]["status"] == "ready"


def test_the_cli_prints_a_json_summary_and_exits_1_when_a_document_failed(db: str) -> None:
    submit_texts(db, "acme", [("empty.txt", ""), ("fine.txt", "Some real text here.")])

    done = subprocess.run(
        [pgrag_command(), "worker", "--once", "--json"],
        capture_output=True,
        text=True,
        env=cli_env(db),
        timeout=300,
    )

    assert done.returncode == 1, done.stderr
    summary = json.loads(done.stdout)
    assert (summary["documents_done"], summary["documents_failed"]) == (1, 1)
    assert summary["failures"][0]["uri"] == "empty.txt" and summary["failures"][0]["final"]
    assert "failed: acme/empty.txt: no extractable text (attempt 1, gave up)" in done.stderr
    assert "Traceback" not in done.stderr


def test_an_idle_worker_wakes_on_notify_and_sigterm_stops_it(db: str) -> None:
    proc = subprocess.Popen(
        [pgrag_command(), "worker", "--poll", "600", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cli_env(db),
    )
    try:
        time.sleep(8)  # started and waiting (the poll interval alone would take 10 minutes)
        assert proc.poll() is None, proc.communicate()
        submitted = time.monotonic()
        submit_texts(db, "acme", [("late.txt", "Submitted while the worker waits.")])
        while documents_by_uri(db, "acme")["late.txt"]["status"] != "ready":
            assert time.monotonic() - submitted < 60, "the notification did not wake the worker"
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert json.loads(out)["documents_done"] == 1
    assert "SIGTERM: stopping" in err


def test_sigterm_releases_the_current_batch_within_seconds(db: str) -> None:
    # Long documents in one batch: the worker is still at work when the signal comes, half a
    # second after the claim (after 2 s, the int8 embedder had finished the batch in 1 of 3 runs
    # on an idle machine, and there was nothing left to release).
    text = " ".join(f"Sentence {i} about lighthouses and tides." for i in range(400))
    submit_texts(db, "acme", [(f"long-{i}.txt", f"{i}. {text}") for i in range(40)])
    proc = subprocess.Popen(
        [pgrag_command(), "worker", "--batch", "40", "--stop-timeout", "1", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cli_env(db),
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr or []), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 240
        while queue_states(db).get("processing", 0) == 0:
            assert proc.poll() is None and time.monotonic() < deadline, "".join(lines)
            time.sleep(0.1)
        time.sleep(0.5)  # extracting and embedding
        proc.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        proc.wait(timeout=60)
        took = time.monotonic() - sent
        out = proc.stdout.read() if proc.stdout else ""
    finally:
        proc.kill()
    reader.join(timeout=10)
    assert proc.returncode == 0, "".join(lines)
    assert took < 5, f"took {took:.1f} s to stop"
    summary = json.loads(out)
    states = queue_states(db)
    assert "processing" not in states  # nothing left leased by the stopped worker
    assert states.get("queued", 0) == summary["documents_released"] > 0
    docs = documents_by_uri(db, "acme").values()
    assert all(d["attempts"] == 0 for d in docs if d["queue_state"] == "queued")
    assert all(d["status"] == "pending" for d in docs if d["queue_state"] == "queued")
    assert all(d["chunks"] == d["chunk_count"] > 0 for d in docs if d["status"] == "ready")
