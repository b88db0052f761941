"""Switching the embedding model without downtime (pgrag reembed, pgrag.reembed_* in SQL).

The sample corpus is embedded by the real local model (384 dimensions) and switched to a model
of another dimension served by a local OpenAI-compatible server (256 dimensions), so the switch
changes the column's type and rebuilds every HNSW graph for real.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest
from plugins.openai_server import FakeEmbeddings, expected_embedding

from pgrag.db import connect
from pgrag.errors import EmbeddingConfigError, ModelSwitchError
from pgrag.ingest import ingest_documents
from pgrag.pipeline.embedders import LOCAL_MODEL_NAME, Embedder, LocalEmbedder, get_embedder
from pgrag.pipeline.extract import ExtractedDocument, extract_path
from pgrag.query_cache import QueryEmbeddings
from pgrag.reembed import Reembedder, cancel_reembed, reembed, reembed_status
from pgrag.search import SearchOptions, search_text

REPO = Path(__file__).resolve().parents[1]
FAKE_MODEL = "fake-embedding-model"
FAKE_DIMS = 256
QUESTIONS = [
    "what happens when an ingest is killed?",
    "how does hybrid search combine BM25 and vectors?",
    "which roles can call the search functions?",
    "how are chunks cut from a PDF?",
]
PGRAG = [sys.executable, "-c", "from pgrag.cli import main; main()"]


@pytest.fixture
def corpus(db: str, local_embedder: LocalEmbedder, tmp_path: Path) -> str:
    """The sample corpus (Markdown, HTML, the generated PDF) of tenant default, and two
    documents of tenant acme, which has an HNSW graph of its own."""
    pdf = tmp_path / "pgrag-overview.pdf"
    subprocess.run(
        [sys.executable, str(REPO / "samples" / "make_sample_pdf.py"), str(pdf)],
        check=True,
        capture_output=True,
    )
    files = [p for p in sorted((REPO / "samples").iterdir()) if p.suffix in (".md", ".html")]
    docs = [extract_path(p) for p in [*files, pdf]]
    assert not ingest_documents(db, docs, embedder=local_embedder).failures
    acme = [
        ExtractedDocument.from_text("acme/ports.md", "The widget service listens on port 8443."),
        ExtractedDocument.from_text("acme/tls.md", "Rotate the certificate with widgetctl."),
    ]
    assert not ingest_documents(db, acme, tenant="acme", embedder=local_embedder).failures
    with connect(db, autocommit=True) as conn:
        conn.execute("select pgrag.isolate_tenant('acme')")
    return db


def new_model() -> Embedder:
    return get_embedder("openai", FAKE_MODEL, FAKE_DIMS)


def chunk_embeddings(dsn: str) -> dict[int, tuple[str, np.ndarray | None]]:
    with connect(dsn) as conn:
        rows = conn.execute("select id, content, embedding from pgrag.chunks").fetchall()
    return {r[0]: (r[1], None if r[2] is None else r[2].to_numpy()) for r in rows}


def assert_every_chunk_has_its_new_embedding(dsn: str) -> None:
    """Every chunk holds the new model's embedding of its current content."""
    chunks = chunk_embeddings(dsn)
    assert chunks
    for chunk_id, (content, vector) in chunks.items():
        assert vector is not None and vector.shape == (FAKE_DIMS,), chunk_id
        cosine = float(vector @ expected_embedding(content, FAKE_DIMS))
        assert cosine > 0.9999, (chunk_id, content[:40], cosine)


def assert_switched_schema(dsn: str) -> None:
    with connect(dsn) as conn:
        assert conn.execute(
            "select model, provider, dims from pgrag.embedding_config"
        ).fetchone() == (
            FAKE_MODEL,
            "openai",
            FAKE_DIMS,
        )
        columns = dict(
            conn.execute(
                "select attname, format_type(atttypid, atttypmod) from pg_attribute "
                "where attrelid = 'pgrag.chunks'::regclass and attnum > 0 and not attisdropped"
            ).fetchall()
        )
        assert columns["embedding"] == f"vector({FAKE_DIMS})"
        assert "embedding_next" not in columns
        # Kept in the row, as incremental 015 made the column it replaced (storage main).
        assert conn.execute(
            "select attstorage from pg_attribute"
            " where attrelid = 'pgrag.chunks'::regclass and attname = 'embedding'"
        ).fetchone() == ("m",)
        graphs = dict(
            conn.execute(
                "select c.relname, pg_get_indexdef(i.indexrelid) from pg_index i "
                "join pg_class c on c.oid = i.indexrelid join pg_am a on a.oid = c.relam "
                "where i.indrelid = 'pgrag.chunks'::regclass and a.amname = 'hnsw' and i.indisvalid"
            ).fetchall()
        )
        acme = conn.execute("select pgrag.tenant_index_name('acme')").fetchone()[0]
        assert set(graphs) == {"chunks_embedding_hnsw", "chunks_public_embedding_hnsw", acme}
        assert (
            "(embedding vector_cosine_ops) WHERE ((embedding IS NOT NULL) AND in_shared_graph)"
            in graphs["chunks_embedding_hnsw"]
        )
        assert "(is_public AND (embedding IS NOT NULL))" in graphs["chunks_public_embedding_hnsw"]
        key = conn.execute("select hashtextextended('acme', 0)").fetchone()[0]
        assert f"= '{key}'::bigint) AND (embedding IS NOT NULL))" in graphs[acme]
        assert conn.execute("select pgrag.own_graph_keyed('acme')").fetchone() == (True,)
        # authenticated still writes the column (its column privileges moved with it)
        assert conn.execute(
            "select has_column_privilege('authenticated', 'pgrag.chunks', 'embedding', 'UPDATE')"
        ).fetchone() == (True,)
        assert conn.execute("select count(*) from pgrag.chunk_embeddings_next").fetchone() == (0,)
        assert conn.execute(
            "select embedding_model from pgrag.documents group by 1"
        ).fetchall() == [(FAKE_MODEL,)]


# -- the switch under load ------------------------------------------------------------------------


def test_searches_keep_answering_during_a_reembed_to_another_model_and_dimension(
    corpus: str,
    openai_embeddings: Callable[..., FakeEmbeddings],
    local_embedder: LocalEmbedder,
) -> None:
    openai_embeddings(FAKE_DIMS, delay=0.02)
    stop = threading.Event()
    results: list[tuple[str, str, int]] = []  # (mode, model of the query embedding, rows)
    errors: list[str] = []

    def searcher() -> None:
        with connect(corpus) as conn:
            queries = QueryEmbeddings(conn, "default", local_embedder, use_cache=False)
            i = 0
            while not stop.is_set():
                options = SearchOptions(mode=("hybrid", "vector")[i % 2], limit=5)
                try:
                    hits, _ = search_text(
                        conn,
                        QUESTIONS[i % len(QUESTIONS)],
                        options,
                        tenant="default",
                        queries=queries,
                    )
                    results.append((options.mode, queries.embedder.model_name, len(hits)))
                except Exception as exc:  # every failure is the test's finding
                    errors.append(repr(exc))
                i += 1

    thread = threading.Thread(target=searcher, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while len(results) < 10 and not errors and time.monotonic() < deadline:
            time.sleep(0.05)
        summary = reembed(corpus, new_model(), batch_size=4)
        after = len(results)
        while len(results) < after + 10 and not errors and time.monotonic() < deadline + 60:
            time.sleep(0.05)
    finally:
        stop.set()
        thread.join(timeout=30)

    assert errors == []
    assert [r for r in results if r[2] == 0] == []  # never an empty answer
    assert {model for _, model, _ in results} == {LOCAL_MODEL_NAME, FAKE_MODEL}
    assert {mode for mode, _, _ in results} == {"hybrid", "vector"}
    assert summary.switched and summary.switched_here and not summary.joined
    assert summary.chunk_count == summary.chunks_embedded == len(chunk_embeddings(corpus))
    assert_switched_schema(corpus)
    assert_every_chunk_has_its_new_embedding(corpus)


def test_a_reembed_killed_with_sigkill_resumes_and_finishes(
    corpus: str, openai_embeddings: Callable[..., FakeEmbeddings]
) -> None:
    openai_embeddings(FAKE_DIMS, delay=0.3)
    command = [
        *PGRAG,
        "--dsn",
        corpus,
        "reembed",
        "--model",
        FAKE_MODEL,
        "--embedder",
        "openai",
        "--dims",
        str(FAKE_DIMS),
        "--batch-size",
        "3",
        "--no-progress",
    ]
    total = len(chunk_embeddings(corpus))
    first = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    embedded = 0
    with connect(corpus, autocommit=True) as conn:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and first.poll() is None:
            status = reembed_status(conn)
            embedded = (status.embedded or 0) if status else 0
            if embedded >= 6:
                break
            time.sleep(0.05)
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
        assert first.returncode == -signal.SIGKILL
        status = reembed_status(conn)
        assert status is not None and status.status == "running"
        assert status.embedded is not None and 6 <= status.embedded < total
        killed_at = status.embedded
        # The killed run's claimed batch is free again: its transaction died with it.
        assert conn.execute(
            "select count(*) from pg_locks l join pg_class c on c.oid = l.relation "
            "where c.relname = 'chunk_embeddings_next'"
        ).fetchone() == (0,)

    resumed = subprocess.run([*command, "--json"], capture_output=True, text=True, timeout=300)

    assert resumed.returncode == 0, resumed.stderr
    summary = json.loads(resumed.stdout)
    assert summary["joined"] and summary["switched"]
    assert summary["chunks_embedded"] == total - killed_at  # nothing embedded twice
    assert summary["chunk_count"] == total
    assert_switched_schema(corpus)
    assert_every_chunk_has_its_new_embedding(corpus)


def test_chunks_written_during_a_reembed_get_embeddings_of_the_new_model(
    corpus: str, openai_embeddings: Callable[..., FakeEmbeddings], local_embedder: LocalEmbedder
) -> None:
    openai_embeddings(FAKE_DIMS)
    worker = Reembedder(corpus, new_model(), batch_size=2)
    try:
        summary = worker.start()
        assert worker.batch(summary) == 2  # acme's two chunks, claimed first
        with connect(corpus, autocommit=True) as conn:
            done = conn.execute(
                "select chunk_id from pgrag.chunk_embeddings_next where embedding is not null"
            ).fetchall()
            # A stored new embedding whose chunk is then edited in place.
            conn.execute(
                "update pgrag.chunks set content = 'Rotate the certificate every 90 days.', "
                "content_sha256 = md5('edited') where id = %s",
                (done[0][0],),
            )
            # A document removed.
            with conn.transaction():
                conn.execute("select pgrag.set_request_tenant('acme')")
                conn.execute(
                    "select * from pgrag.delete_documents(source_uris => array['acme/ports.md'])"
                )
        # Ingests go on with the model the database still records: a changed document (its
        # chunks replaced) and a new one.
        changed = ExtractedDocument.from_text(
            "acme/tls.md", "Rotate the certificate with widgetctl cert rotate, then reload."
        )
        fresh = ExtractedDocument.from_text("acme/backup.md", "Nightly backups go to the vault.")
        assert not ingest_documents(
            corpus, [changed, fresh], tenant="acme", embedder=local_embedder
        ).failures

        worker.run(summary)
    finally:
        worker.close()

    assert summary.switched_here
    assert_every_chunk_has_its_new_embedding(corpus)
    with connect(corpus) as conn:
        acme = conn.execute(
            "select content from pgrag.chunks where tenant_id = 'acme' order by content"
        ).fetchall()
    assert [r[0] for r in acme] == [
        "Nightly backups go to the vault.",
        "Rotate the certificate with widgetctl cert rotate, then reload.",
    ]


def test_a_write_that_waited_for_the_switch_cannot_store_embeddings_of_the_old_model(
    corpus: str, openai_embeddings: Callable[..., FakeEmbeddings], local_embedder: LocalEmbedder
) -> None:
    # The new model here has the old dimension: only the recorded model tells them apart.
    openai_embeddings(384)
    same_dims = get_embedder("openai", FAKE_MODEL, 384)
    worker = Reembedder(corpus, same_dims, batch_size=100)
    summary = worker.start()
    while worker.batch(summary):
        pass
    reader = connect(corpus)  # a long search transaction: the switch's last step waits for it
    reader.execute("select count(*) from pgrag.chunks")
    switched: list[Any] = []
    switch = threading.Thread(target=lambda: switched.append(worker.switch()), daemon=True)
    switch.start()
    loader = connect(corpus)
    wrote: list[BaseException | None] = []
    try:
        with connect(corpus, autocommit=True) as watch:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:  # the switch did its work, waits for the reader
                if watch.execute(
                    "select count(*) from pgrag.reembeds where status = 'running'"
                ).fetchone() == (1,) and watch.execute(
                    "select count(*) from pg_locks where relation = 'pgrag.chunks'::regclass "
                    "and mode = 'ShareRowExclusiveLock' and granted"
                ).fetchone() == (1,):
                    break
                time.sleep(0.02)
        # A loader checked the model (still the old one), embedded, and writes now: it waits
        # for the switch.
        (recorded,) = loader.execute("select model from pgrag.embedding_config").fetchone()
        assert recorded == LOCAL_MODEL_NAME
        (doc,) = loader.execute(
            "select id from pgrag.documents where tenant_id = 'acme' limit 1"
        ).fetchone()

        def write() -> None:
            try:
                loader.execute(
                    "insert into pgrag.chunks (tenant_id, document_id, chunk_index, content, "
                    "embedding, content_sha256) values ('acme', %s, 99, 'late', %s, 'late')",
                    (doc, local_embedder.embed(["late"])[0]),
                )
                loader.execute(
                    "update pgrag.documents set embedding_model = %s where id = %s",
                    (recorded, doc),
                )
                loader.commit()
                wrote.append(None)
            except BaseException as exc:
                wrote.append(exc)

        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        time.sleep(0.5)
        assert not wrote  # blocked by the switch
        reader.rollback()  # the switch completes; then the write goes on
        switch.join(timeout=60)
        writer.join(timeout=60)
    finally:
        reader.close()
        loader.close()
        worker.close()

    assert switched and switched[0][0] is True
    assert len(wrote) == 1 and isinstance(wrote[0], psycopg.Error)
    assert wrote[0].sqlstate == "PR201"
    assert "this transaction stored embeddings of sentence-transformers/all-MiniLM-L6-v2" in str(
        wrote[0]
    )
    with connect(corpus) as conn:
        assert conn.execute(
            "select count(*) from pgrag.chunks where content = 'late'"
        ).fetchone() == (0,)


def test_two_processes_share_a_reembed_and_embed_each_chunk_once(
    corpus: str, openai_embeddings: Callable[..., FakeEmbeddings]
) -> None:
    fake = openai_embeddings(FAKE_DIMS, delay=0.05)
    summaries: list[Any] = []

    model = "fake-shared-model"

    def run() -> None:
        embedder = get_embedder("openai", model, FAKE_DIMS)
        summaries.append(reembed(corpus, embedder, batch_size=3, poll_seconds=0.1))

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)

    total = len(chunk_embeddings(corpus))
    assert len(summaries) == 2 and all(s.switched for s in summaries)
    assert sum(s.switched_here for s in summaries) == 1
    assert sum(s.chunks_embedded for s in summaries) == total
    assert min(s.chunks_embedded for s in summaries) > 0  # both worked
    sent = fake.texts(model)
    assert len(sent) == total, sorted(t[:30] for t in sent)  # the endpoint embedded each once
    assert_every_chunk_has_its_new_embedding(corpus)


def test_a_claim_that_waited_for_the_switch_embeds_nothing(
    corpus: str, openai_embeddings: Callable[..., FakeEmbeddings]
) -> None:
    """The interleaving behind a rare extra batch in the test above: one process switches while
    the other starts a claim. A claim that finds the re-embed still running and then waits for
    the switch's commit must not see an emptied queue, queue every chunk again, and send a
    batch to the endpoint that the store then refuses (PR202)."""
    fake = openai_embeddings(FAKE_DIMS)
    first = Reembedder(corpus, new_model(), batch_size=100)
    second = Reembedder(corpus, new_model(), batch_size=3)
    reader = connect(corpus)  # a search transaction: the switch's last step waits for it
    gate = connect(corpus)
    switched: list[Any] = []
    late: list[Any] = []
    threads: list[threading.Thread] = []

    def waits_for_a_lock(
        watch: psycopg.Connection[Any], conn: psycopg.Connection[Any], table: str | None = None
    ) -> None:
        """Until ``conn`` waits for a lock (an exclusive one on ``table``, when given)."""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if watch.execute(
                "select count(*) from pg_locks where pid = %s and not granted and (%s::text is "
                "null or (relation = %s::regclass and mode = 'AccessExclusiveLock'))",
                (conn.info.backend_pid, table, table),
            ).fetchone() != (0,):
                return
            time.sleep(0.005)
        raise AssertionError(f"backend {conn.info.backend_pid} never waited for a lock")

    def in_thread(target: Callable[[], None]) -> None:
        thread = threading.Thread(target=target, daemon=True)
        thread.start()
        threads.append(thread)

    def gate_keeper() -> None:
        # Queued behind the switch (which holds the queue table until it commits), this lock
        # request holds back the claim below until the switch has committed.
        gate.execute("lock table pgrag.chunk_embeddings_next in access exclusive mode")
        gate.rollback()

    try:
        summary = first.start()
        while first.batch(summary):
            pass
        total = len(fake.texts(FAKE_MODEL))
        other = second.start()
        assert other.joined
        reader.execute("select count(*) from pgrag.chunks")
        with connect(corpus, autocommit=True) as watch:
            # The switch has done its work and marked the re-embed switched (not committed):
            # its exclusive lock on pgrag.chunks waits for the reader.
            in_thread(lambda: switched.append(first.switch()))
            waits_for_a_lock(watch, first.conn, "pgrag.chunks")
            in_thread(gate_keeper)
            waits_for_a_lock(watch, gate, "pgrag.chunk_embeddings_next")
            # The other process starts its next batch: the re-embed is still running.
            in_thread(lambda: late.append(second.run(other)))
            waits_for_a_lock(watch, second.conn)
            reader.rollback()  # the switch commits; then the gate opens; then the claim goes on
            for thread in threads:
                thread.join(timeout=60)
    finally:
        reader.close()
        gate.close()
        first.close()
        second.close()

    assert switched and switched[0][0] is True
    assert late and late[0].switched and not late[0].switched_here
    assert late[0].chunks_embedded == 0
    assert len(fake.texts(FAKE_MODEL)) == total  # nothing sent to the endpoint after the switch
    assert_every_chunk_has_its_new_embedding(corpus)


# -- refusals and the rest of the protocol -------------------------------------------------------


def test_only_one_target_runs_at_a_time_and_a_cancel_keeps_the_old_model(
    corpus: str, openai_embeddings: Callable[..., FakeEmbeddings]
) -> None:
    openai_embeddings(FAKE_DIMS)
    worker = Reembedder(corpus, new_model())
    other = Reembedder(corpus, get_embedder("openai", "another-model", 128))
    try:
        summary = worker.start()
        assert worker.batch(summary) > 0
        joiner = Reembedder(corpus, new_model())
        joined = joiner.start()
        joiner.close()
        assert joined.joined and joined.reembed_id == summary.reembed_id
        with pytest.raises(ModelSwitchError, match="a re-embed to openai:fake-embedding-model"):
            other.start()
        with connect(corpus, autocommit=True) as conn:
            assert cancel_reembed(conn) is True
            assert cancel_reembed(conn) is False
            status = reembed_status(conn)
            assert status is not None and status.status == "cancelled"
            assert conn.execute("select model, dims from pgrag.embedding_config").fetchone() == (
                LOCAL_MODEL_NAME,
                384,
            )
            assert conn.execute(
                "select count(*) from pg_attribute where attrelid = 'pgrag.chunks'::regclass "
                "and attname = 'embedding_next' and not attisdropped"
            ).fetchone() == (0,)
        # the cancelled run learns it at its next batch
        with pytest.raises(ModelSwitchError, match="no re-embed is running"):
            worker.batch(summary)
    finally:
        worker.close()
        other.close()


def test_the_recorded_model_cannot_be_re_embedded_onto_itself(
    corpus: str, local_embedder: LocalEmbedder
) -> None:
    worker = Reembedder(corpus, local_embedder)
    try:
        with pytest.raises(Exception, match="already holds embeddings of local:"):
            worker.start()
    finally:
        worker.close()


def test_store_refuses_another_model_or_dimension(
    corpus: str, openai_embeddings: Callable[..., FakeEmbeddings]
) -> None:
    openai_embeddings(FAKE_DIMS)
    worker = Reembedder(corpus, new_model())
    try:
        worker.start()
        with connect(corpus) as conn:
            rows = conn.execute("select * from pgrag.reembed_claim(1)").fetchall()
            args = ([rows[0][0]], [rows[0][1]], [rows[0][3]])
            with pytest.raises(psycopg.Error, match="would mix models") as mixed:
                conn.execute(
                    "select pgrag.reembed_store('other', %s, %s, %s, %s)",
                    (*args, [np.ones(FAKE_DIMS, dtype=np.float32)]),
                )
            assert mixed.value.sqlstate == "PR202"
            conn.rollback()
            conn.execute("select * from pgrag.reembed_claim(1)")
            with pytest.raises(psycopg.Error, match="non-zero vectors of 256 dimensions"):
                conn.execute(
                    "select pgrag.reembed_store(%s, %s, %s, %s, %s)",
                    (FAKE_MODEL, *args, [np.ones(384, dtype=np.float32)]),
                )
    finally:
        worker.close()


def test_after_the_switch_mixing_models_is_still_refused(
    corpus: str, openai_embeddings: Callable[..., FakeEmbeddings], local_embedder: LocalEmbedder
) -> None:
    openai_embeddings(FAKE_DIMS)
    assert reembed(corpus, new_model()).switched
    doc = ExtractedDocument.from_text("late.md", "A document embedded with the old model.")
    with pytest.raises(EmbeddingConfigError, match="but this database holds 256"):
        ingest_documents(corpus, [doc], embedder=local_embedder)
    same_dims = get_embedder("openai", "another-model", FAKE_DIMS)
    with pytest.raises(EmbeddingConfigError, match=f"holds embeddings of openai:{FAKE_MODEL}"):
        ingest_documents(corpus, [doc], embedder=same_dims)
    # and the new model ingests
    assert ingest_documents(corpus, [doc], embedder=new_model()).documents_new == 1


def test_reembed_status_and_cancel_from_the_command_line(
    corpus: str, openai_embeddings: Callable[..., FakeEmbeddings]
) -> None:
    openai_embeddings(FAKE_DIMS)
    run = [*PGRAG, "--dsn", corpus, "reembed"]
    nothing = subprocess.run([*run, "--status"], capture_output=True, text=True)
    assert nothing.returncode == 3 and "no re-embed has run" in nothing.stderr
    computed = subprocess.run(
        [*run, "--model", FAKE_MODEL, "--dims", str(FAKE_DIMS), "--no-switch"],
        capture_output=True,
        text=True,
    )
    assert computed.returncode == 0, computed.stderr
    assert "not switched yet (--no-switch)" in computed.stdout
    status = subprocess.run([*run, "--status", "--json"], capture_output=True, text=True)
    data = json.loads(status.stdout)
    assert data["status"] == "running" and data["waiting"] == 0
    assert data["embedded"] == data["chunk_count"] == len(chunk_embeddings(corpus))
    cancelled = subprocess.run([*run, "--cancel", "--yes"], capture_output=True, text=True)
    assert cancelled.returncode == 0, cancelled.stderr
    assert "cancelled" in cancelled.stdout
