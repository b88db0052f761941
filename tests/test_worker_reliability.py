"""The queue under failure: workers killed with SIGKILL, four workers on
one queue, an embedding endpoint failing in bursts, the database restarted under a worker.

Each test compares with what a clean run stores, or with the submitted texts themselves (the
short documents here are one chunk each). Marked slow; ``make test`` runs them.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from plugins.pgservers import LocalCluster
from plugins.queue import (
    chunk_signature,
    cli_env,
    documents_by_uri,
    drain,
    pgrag_command,
    queue_states,
    short_documents,
    submit_texts,
)
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from pgrag.db import connect
from pgrag.install.migrator import Migrator
from pgrag.pipeline.embedders import OpenAIEmbedder
from pgrag.testing import create_database, drop_database
from pgrag.worker import QueueWorker, WorkerOptions

pytestmark = pytest.mark.slow


def worker_process(dsn: str, *args: str, log: Path | None = None) -> subprocess.Popen[str]:
    out = open(log, "a") if log else subprocess.DEVNULL  # noqa: SIM115 (closed by the process)
    return subprocess.Popen(
        [pgrag_command(), "worker", *args],
        stdout=subprocess.PIPE,
        stderr=out,
        text=True,
        env=cli_env(dsn),
    )


def leases_of(dsn: str, pid: int) -> int:
    with connect(dsn) as conn:
        row = conn.execute(
            "select count(*) from pgrag.document_queue "
            "where state = 'processing' and split_part(lease_owner, ':', 2) = %s",
            (str(pid),),
        ).fetchone()
    return int(row[0]) if row else 0


def ready(dsn: str) -> int:
    with connect(dsn) as conn:
        row = conn.execute("select count(*) from pgrag.documents where status = 'ready'").fetchone()
    return int(row[0]) if row else 0


def finish(dsn: str, timeout: float = 300) -> None:
    """``pgrag worker --once`` until the queue is empty (killed workers' leases expire first)."""
    deadline = time.monotonic() + timeout
    while queue_states(dsn):
        assert time.monotonic() < deadline, queue_states(dsn)
        done = subprocess.run(
            [pgrag_command(), "worker", "--once", "--json"],
            capture_output=True,
            text=True,
            env=cli_env(dsn),
            timeout=timeout,
        )
        assert done.returncode == 0, done.stderr
        time.sleep(0.5)


def clean_run(admin_dsn: str, template: str, docs: list[tuple[str, str]], embedder: Any) -> list:
    """The chunks an uninterrupted worker stores for ``docs`` (in a database of its own)."""
    dsn = create_database(admin_dsn, template=template)
    try:
        submit_texts(dsn, "acme", docs)
        QueueWorker(dsn, WorkerOptions(once=True), embedder=embedder).run()
        return chunk_signature(dsn, "acme")
    finally:
        drop_database(admin_dsn, dsn)


def test_kill_9_at_20_random_moments_loses_and_duplicates_nothing(
    db: str, pg_admin_dsn: str, template_db: str, local_embedder: Any, tmp_path: Path
) -> None:
    docs = short_documents(200)
    expected = clean_run(pg_admin_dsn, template_db, docs, local_embedder)
    with connect(db) as conn:  # each kill costs the documents in flight one attempt
        conn.execute("update pgrag.queue_settings set max_attempts = 50")
        conn.commit()
    submit_texts(db, "acme", docs)
    rng = random.Random(20)
    kills: list[float] = []
    ready_at_kill: list[int] = []
    log = tmp_path / "workers.log"
    while len(kills) < 20:
        proc = worker_process(db, "--batch", "2", "--lease", "2", "--poll", "0.2", log=log)
        try:
            deadline = time.monotonic() + 180
            while leases_of(db, proc.pid) == 0:  # wait for its first claim
                assert proc.poll() is None, log.read_text()[-2000:]
                assert time.monotonic() < deadline, "the worker never claimed"
                time.sleep(0.02)
            # A random moment in the worker's progress, whatever the machine's speed: after it
            # completed 0 to 4 more documents, then up to 0.3 s into the next batch.
            target = ready(db) + rng.randint(0, 4)
            while ready(db) < target:
                assert proc.poll() is None, log.read_text()[-2000:]
                assert time.monotonic() < deadline, "the worker made no progress"
                time.sleep(0.01)
            moment = rng.uniform(0.0, 0.3)
            time.sleep(moment)
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
            kills.append(moment)
        finally:
            proc.kill()
        assert queue_states(db), f"the queue emptied after {len(kills)} kills"
        ready_at_kill.append(ready(db))

    finish(db)
    print(f"\nready documents at each kill: {ready_at_kill}")

    assert len(kills) == 20
    assert 0 < ready_at_kill[-1] < 200  # the killed workers had done part of the work
    state = documents_by_uri(db, "acme")
    assert len(state) == 200
    assert all(d["status"] == "ready" for d in state.values())
    assert all(d["chunks"] == d["chunk_count"] == 1 for d in state.values())
    assert queue_states(db) == {}
    assert chunk_signature(db, "acme") == expected  # 0 lost, 0 duplicated, same content


def test_four_workers_on_one_queue_process_each_document_once(db: str) -> None:
    docs = short_documents(200)
    submit_texts(db, "acme", docs)

    procs = [worker_process(db, "--once", "--json", "--batch", "5") for _ in range(4)]
    outputs = [p.communicate(timeout=600)[0] for p in procs]

    assert [p.returncode for p in procs] == [0, 0, 0, 0]
    summaries = [json.loads(o) for o in outputs]
    assert sum(s["claimed"] for s in summaries) == 200  # no document claimed twice
    assert sum(s["documents_done"] for s in summaries) == 200
    assert sum(s["chunks_embedded"] for s in summaries) == 200  # each embedded once
    assert sum(1 for s in summaries if s["claimed"]) >= 2  # the queue really was shared
    state = documents_by_uri(db, "acme")
    assert all(d["status"] == "ready" and d["chunks"] == 1 for d in state.values())
    assert sorted(c[2] for c in chunk_signature(db, "acme")) == sorted(t for _, t in docs)


class FlakyEmbeddings:
    """An OpenAI-compatible embeddings endpoint failing in bursts: of every 10 requests the
    first two answer 429 with Retry-After, the next two 500, the fifth times out, the other
    five succeed."""

    def __init__(self) -> None:
        self.count = 0
        self.answers: list[str] = []
        self.lock = threading.Lock()

    def __call__(self, request: Request) -> Response:
        with self.lock:
            position = self.count % 10
            self.count += 1
        body = json.loads(request.data)
        if position < 2:
            self.answers.append("429")
            return Response(
                '{"error": {"message": "slow down"}}', status=429, headers={"Retry-After": "0.05"}
            )
        if position < 4:
            self.answers.append("500")
            return Response('{"error": {"message": "boom"}}', status=500)
        if position == 4:
            self.answers.append("timeout")
            time.sleep(0.8)
        else:
            self.answers.append("200")
        data = [
            {"object": "embedding", "index": i, "embedding": [((i + len(t)) % 7 + 1) / 7] * 384}
            for i, t in enumerate(body["input"])
        ]
        usage = {"prompt_tokens": 1, "total_tokens": 1}
        payload = {"object": "list", "data": data, "model": body["model"], "usage": usage}
        return Response(json.dumps(payload), content_type="application/json")


@pytest.fixture
def flaky_api(httpserver: HTTPServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[FlakyEmbeddings]:
    handler = FlakyEmbeddings()
    httpserver.expect_request("/v1/embeddings", method="POST").respond_with_handler(handler)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("OPENAI_BASE_URL", httpserver.url_for("/v1"))
    yield handler


def test_an_embedding_endpoint_failing_in_bursts_still_drains_the_queue(
    fast_retries: str, flaky_api: FlakyEmbeddings
) -> None:
    db = fast_retries
    with connect(db) as conn:
        conn.execute("update pgrag.queue_settings set max_attempts = 8")
        conn.commit()
    submit_texts(db, "acme", short_documents(60))
    embedder = OpenAIEmbedder(dims=384, max_retries=1, timeout=0.3)

    summary = drain(db, embedder, WorkerOptions(batch=5, poll=0.2), timeout=300)

    assert queue_states(db) == {}  # nothing queued, failed or stuck in processing
    state = documents_by_uri(db, "acme")
    assert len(state) == 60 and all(d["status"] == "ready" for d in state.values())
    assert summary.documents_done == 60 and summary.documents_failed == 0
    assert summary.documents_retrying > 0  # the queue retried batches the client gave up on
    assert max(f["attempts"] for f in summary.failures) < 8  # bounded: never near the cap
    assert {"429", "500", "timeout", "200"} <= set(flaky_api.answers)
    assert flaky_api.count <= 12 * 2 * 8  # batches x tries per attempt x attempts


def test_a_database_restart_under_a_running_worker_is_survived(
    restartable_cluster: LocalCluster, tmp_path: Path
) -> None:
    cluster = restartable_cluster
    with connect(cluster.dsn(), autocommit=True) as conn:
        conn.execute("create database pgrag_restart")
    dsn = cluster.dsn("pgrag_restart")
    Migrator(dsn).migrate(384)
    docs = short_documents(150)
    submit_texts(dsn, "acme", docs)
    log = tmp_path / "worker.log"
    proc = worker_process(dsn, "--batch", "5", "--poll", "0.2", "--json", log=log)
    try:
        deadline = time.monotonic() + 300
        while sum(d["status"] == "ready" for d in documents_by_uri(dsn, "acme").values()) < 10:
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(0.1)
        cluster.restart()  # pg_ctl restart -m fast: every session is cut
        restarted = time.monotonic()
        while queue_states(dsn):
            assert proc.poll() is None, log.read_text()[-2000:]
            assert time.monotonic() - restarted < 300, queue_states(dsn)
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
    err = log.read_text()
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    assert "lost the database connection" in err or "database unreachable" in err, err
    summary = json.loads(out)
    state = documents_by_uri(dsn, "acme")
    assert all(d["status"] == "ready" and d["chunks"] == 1 for d in state.values())
    assert sorted(c[2] for c in chunk_signature(dsn, "acme")) == sorted(t for _, t in docs)
    assert summary["documents_failed"] == 0
