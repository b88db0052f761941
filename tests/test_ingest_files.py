"""Ingesting real files end to end: the CLI, bad input, incremental edits, kill -9."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner
from plugins.sample_files import (
    HTML,
    MARKDOWN,
    make_corrupt_pdf,
    make_encrypted_pdf,
    make_report_pdf,
    make_scanned_pdf,
)
from pytest_httpserver import HTTPServer

import pgrag.ingest.run
from pgrag.cli import main
from pgrag.db import connect
from pgrag.ingest import ingest_paths
from pgrag.pipeline.embedders import LocalEmbedder
from pgrag.testing import create_database, drop_database

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def shared_model(monkeypatch: pytest.MonkeyPatch, local_embedder: LocalEmbedder) -> LocalEmbedder:
    """Let the CLI use the session's already loaded real model instead of loading another."""
    monkeypatch.setattr(pgrag.ingest.run, "get_embedder", lambda *a, **k: local_embedder)
    return local_embedder


def rows(dsn: str, query: str, *params: Any) -> list[tuple[Any, ...]]:
    with connect(dsn) as conn:
        return conn.execute(query, params or None).fetchall()


def make_corpus(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    make_report_pdf(folder / "report.pdf")
    (folder / "install.md").write_text(MARKDOWN)
    (folder / "web").mkdir(exist_ok=True)
    (folder / "web" / "guide.html").write_text(HTML)
    (folder / "legacy.txt").write_bytes("Crème brûlée, déjà vu: a naïve façade.\n".encode("cp1252"))
    return folder


def test_cli_ingests_a_folder_reports_each_bad_input_and_reruns_embed_nothing(
    db: str,
    tmp_path: Path,
    httpserver: HTTPServer,
    shared_model: LocalEmbedder,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> None:
    corpus = make_corpus(tmp_path / "corpus")
    make_encrypted_pdf(corpus / "locked.pdf")
    make_corrupt_pdf(corpus / "broken.pdf")
    make_scanned_pdf(corpus / "scan.pdf")
    (corpus / "empty.md").write_bytes(b"")
    (corpus / "photo.txt").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(200))
    httpserver.expect_request("/page").respond_with_data(HTML, content_type="text/html")
    httpserver.expect_request("/gone").respond_with_data("missing", status=404)
    # The slow URL gets a server of its own: the test server answers one request at a time, so
    # a shared one would hold /page back behind /slow. The timeout leaves /page ample headroom
    # while the embedding thread keeps both cores busy.
    slow_server = HTTPServer()
    slow_server.start()
    request.addfinalizer(slow_server.clear)
    request.addfinalizer(slow_server.stop)
    slow_server.expect_request("/slow").respond_with_handler(
        lambda request: time.sleep(3) or "late"  # type: ignore[func-returns-value]
    )
    monkeypatch.setenv("PGRAG_HTTP_TIMEOUT", "1.5")
    args = ["--dsn", db, "ingest", str(corpus), httpserver.url_for("/page")]
    args += [httpserver.url_for("/gone"), slow_server.url_for("/slow")]

    result = CliRunner().invoke(main, [*args, "--json"])

    assert result.exit_code == 1, result.output
    summary = json.loads(result.stdout)
    reasons = {Path(f["uri"]).name: f["reason"] for f in summary["failures"]}
    assert reasons == {
        "locked.pdf": "encrypted PDF (password protected): decrypt it first",
        "broken.pdf": reasons["broken.pdf"],
        "scan.pdf": "PDF has no extractable text (scanned images?): run OCR on it first, "
        "e.g. ocrmypdf",
        "empty.md": "empty file",
        "photo.txt": "binary content, not text (NUL or control bytes)",
        "gone": "HTTP 404 NOT FOUND",
        "slow": "timed out after 1.5 s",
    }
    assert reasons["broken.pdf"].startswith("corrupt or unreadable PDF")
    assert summary["documents_new"] == 5 and summary["documents_failed"] == 7

    # PDF chunks carry their page; the table page keeps the table whole.
    pdf = rows(
        db,
        "select c.page, c.heading_path, c.content from pgrag.chunks c join pgrag.documents d "
        "on d.id = c.document_id where d.source_type = 'pdf' order by c.chunk_index",
    )
    assert [p for p, _, _ in pdf] == [1, 2, 3]
    assert pdf[1][1] == ["Chapter 2", "Results"]
    assert "| Metric | Value | Unit |\n|---|---|---|\n| Latency | 12 | ms |" in pdf[1][2]
    # Markdown chunks carry their heading path.
    paths = {
        tuple(r[0])
        for r in rows(
            db,
            "select c.heading_path from pgrag.chunks c join pgrag.documents d "
            "on d.id = c.document_id where d.source_type = 'markdown'",
        )
    }
    assert {("Install",), ("Install", "Linux"), ("Install", "Linux", "Debian")} <= paths
    assert ("Install", "macOS") in paths
    docs = dict(
        rows(db, "select source_uri, status || ':' || coalesce(error, '') from pgrag.documents")
    )
    assert docs[str((corpus / "locked.pdf").resolve())].startswith("error:encrypted PDF")
    assert docs[httpserver.url_for("/page")] == "ready:"
    legacy = rows(db, "select content from pgrag.chunks where content like 'Crème%'")
    assert legacy == [("Crème brûlée, déjà vu: a naïve façade.",)]

    # Second run: nothing is embedded; the human summary has one line per failure.
    calls = shared_model.calls
    again = CliRunner().invoke(main, args)
    assert again.exit_code == 1
    assert "documents: 0 new, 0 changed, 5 unchanged, 7 failed" in again.stdout
    assert "chunks:    0 written, 0 embedded, 0 reused" in again.stdout
    assert f"failed: {(corpus / 'locked.pdf').resolve()}: encrypted PDF" in again.stderr
    assert shared_model.calls == calls


def test_unreachable_database_is_one_line_and_exit_1(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# A\n\ntext\n")
    result = CliRunner().invoke(
        main, ["--dsn", "postgresql://nobody@127.0.0.1:1/none", "ingest", str(tmp_path)]
    )
    assert result.exit_code == 1
    assert result.output.startswith("Error: cannot connect to the database")
    assert len(result.output.strip().splitlines()) == 1


SECTIONS = {
    "Alpha": [
        f"Alpha paragraph {p}. " + "It has several sentences about the alpha topic. " * 12
        for p in range(4)
    ],
    "Beta": [
        f"Beta paragraph {p}. " + "It says more about the beta subject here. " * 12
        for p in range(4)
    ],
    "Gamma": [
        f"Gamma paragraph {p}. " + "Gamma facts follow one after the other. " * 12 for p in range(4)
    ],
}


def write_sections(path: Path, sections: dict[str, list[str]]) -> None:
    path.write_text(
        "\n\n".join(f"# {name}\n\n" + "\n\n".join(paras) for name, paras in sections.items())
    )


def test_editing_one_paragraph_reembeds_only_the_chunks_whose_text_changed(
    db: str, tmp_path: Path, local_embedder: LocalEmbedder
) -> None:
    doc = tmp_path / "notes.md"
    write_sections(doc, SECTIONS)
    first = ingest_paths(db, [str(doc)], embedder=local_embedder)
    before = dict(rows(db, "select content_sha256, embedding::text from pgrag.chunks"))
    edited = {k: list(v) for k, v in SECTIONS.items()}
    edited["Beta"][2] = "Beta paragraph 2 was rewritten entirely. It is now short."
    write_sections(doc, edited)
    texts = local_embedder.texts_embedded

    second = ingest_paths(db, [str(doc)], embedder=local_embedder)

    after = dict(rows(db, "select content_sha256, embedding::text from pgrag.chunks"))
    new_shas = set(after) - set(before)
    assert second.documents_changed == 1 and second.chunks_written == len(after)
    assert second.chunks_embedded == len(new_shas) == local_embedder.texts_embedded - texts
    assert 1 <= len(new_shas) <= 3 < first.chunks_written
    assert second.chunks_reused == len(after) - len(new_shas)
    assert all(after[sha] == before[sha] for sha in set(after) & set(before))
    indexes = rows(db, "select chunk_index from pgrag.chunks order by 1")
    assert [i for (i,) in indexes] == list(range(len(after)))


def consistent_state(dsn: str) -> list[tuple[Any, ...]]:
    """Every document is whole: ready ones have exactly chunk_count chunks numbered 0..n-1."""
    docs = rows(
        dsn,
        "select d.status, d.chunk_count, count(c.id), coalesce(max(c.chunk_index) + 1, 0), "
        "count(c.id) filter (where c.embedding is null) from pgrag.documents d "
        "left join pgrag.chunks c on c.document_id = d.id group by d.tenant_id, d.id",
    )
    for status, chunk_count, n, top, nulls in docs:
        assert nulls == 0
        if status == "ready":
            assert chunk_count == n == top
        else:
            assert status == "processing" and n == 0
    return docs


def snapshot(dsn: str) -> list[tuple[Any, ...]]:
    return rows(
        dsn,
        "select d.source_uri, d.status, c.chunk_index, c.content_sha256, c.page, c.heading_path, "
        "c.overlap_chars, c.token_count from pgrag.chunks c join pgrag.documents d "
        "on d.id = c.document_id order by 1, 3",
    )


def test_kill_9_mid_ingest_then_rerun_equals_a_clean_run(
    db: str, pg_admin_dsn: str, template_db: str, tmp_path: Path, local_embedder: LocalEmbedder
) -> None:
    corpus = tmp_path / "many"
    corpus.mkdir()
    for i in range(60):
        (corpus / f"doc{i:03d}.md").write_text(
            f"# Document {i}\n\n"
            + "\n\n".join(
                f"Paragraph {p} of document {i}. " + "Filler sentence here. " * 20 for p in range(2)
            )
        )
    script = (
        "import sys, pgrag.ingest, pgrag.ingest.run as m\n"
        "m.BATCH_CHUNKS = 4; m.GROUP_DOCS = 4\n"  # many small commits, so a kill lands mid-run
        "pgrag.ingest.ingest_paths(sys.argv[1], [sys.argv[2]])\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.Popen([sys.executable, "-c", script, db, str(corpus)], env=env, cwd=REPO)
    try:
        deadline = time.monotonic() + 120
        ready = 0
        while time.monotonic() < deadline and proc.poll() is None:
            ready = rows(db, "select count(*) from pgrag.documents where status = 'ready'")[0][0]
            if ready >= 5:
                break
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    states = consistent_state(db)
    assert ready >= 5 and sum(1 for s in states if s[0] == "ready") < 60

    resumed = ingest_paths(db, [str(corpus)], embedder=local_embedder)

    clean_db = create_database(pg_admin_dsn, template=template_db)
    try:
        clean = ingest_paths(clean_db, [str(corpus)], embedder=local_embedder)
        assert clean.documents_new == 60
        assert resumed.documents_unchanged + resumed.documents_new + resumed.documents_changed == 60
        assert snapshot(db) == snapshot(clean_db)
        consistent_state(db)
    finally:
        drop_database(pg_admin_dsn, clean_db)


def test_changing_the_model_is_refused_with_how_to_reembed(
    db: str, tmp_path: Path, local_embedder: LocalEmbedder
) -> None:
    (tmp_path / "a.md").write_text("# A\n\nSome text.\n")
    ingest_paths(db, [str(tmp_path)], embedder=local_embedder)
    with psycopg.connect(db) as conn:
        conn.execute("update pgrag.embedding_config set model = 'other/model-384'")
    from pgrag.errors import EmbeddingConfigError

    with pytest.raises(EmbeddingConfigError, match="--switch-model"):
        ingest_paths(db, [str(tmp_path)], embedder=local_embedder)


def test_switch_model_reembeds_this_run_and_leaves_the_rest_pending(
    db: str, tmp_path: Path, local_embedder: LocalEmbedder
) -> None:
    from pgrag.ingest import IngestOptions

    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / f"{name}.md").write_text(f"# {name}\n\nText of {name}. More text.\n")
    ingest_paths(db, [str(tmp_path)], embedder=local_embedder)
    with psycopg.connect(db) as conn:  # as if another model had produced these embeddings
        conn.execute("update pgrag.embedding_config set provider = 'openai', model = 'old'")

    switched = ingest_paths(
        db, [str(tmp_path / "a")], embedder=local_embedder, options=IngestOptions(switch_model=True)
    )

    assert switched.chunks_embedded == switched.chunks_written == 1
    assert rows(db, "select provider, model from pgrag.embedding_config") == [
        ("local", local_embedder.model_name)
    ]
    state = rows(
        db,
        "select d.title, d.status, bool_and(c.embedding is not null) from pgrag.documents d "
        "join pgrag.chunks c on c.document_id = d.id group by d.tenant_id, d.id order by 1",
    )
    assert state == [("a", "ready", True), ("b", "pending", False)]
    rest = ingest_paths(db, [str(tmp_path / "b")], embedder=local_embedder)
    assert rest.chunks_embedded == 1 and rest.documents_failed == 0
    consistent_state(db)
