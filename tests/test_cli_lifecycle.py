"""A document's life through the CLI: metadata in, removal out, and saying when nothing happened.

Also long work: progress that moves when stderr is not a terminal, and Ctrl-C during a real
ingest that stops within about two seconds, says what was kept and leaves no half document.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from pgrag.cli import main
from pgrag.db import connect
from pgrag.ingest import ingest_paths
from pgrag.pipeline.extract import extract_path
from pgrag.testing import create_database, drop_database

REPO = Path(__file__).resolve().parents[1]


def invoke(dsn: str, *args: str, input: str | None = None) -> Any:
    return CliRunner().invoke(main, ["--dsn", dsn, *args], input=input)


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    folder = tmp_path / "docs"
    write(folder, "tls.md", "# TLS\n\nRotate the certificate with widgetctl cert rotate.\n")
    write(folder, "ports.md", "# Ports\n\nThe widget service listens on port 8443.\n")
    write(
        folder,
        "sub/backup.md",
        "# Backups\n\nNightly backups of the widget database go to the vault at 02:00.\n",
    )
    return folder


def documents(dsn: str, tenant: str = "default") -> dict[str, dict[str, Any]]:
    with connect(dsn) as conn:
        rows = conn.execute(
            "select source_uri, id, status, chunk_count, metadata, "
            "(select count(*) from pgrag.chunks c where c.tenant_id = d.tenant_id "
            " and c.document_id = d.id) from pgrag.documents d where tenant_id = %s",
            (tenant,),
        ).fetchall()
    return {
        r[0]: {"id": r[1], "status": r[2], "chunk_count": r[3], "metadata": r[4], "chunks": r[5]}
        for r in rows
    }


def keyword_titles(dsn: str, query: str, *extra: str) -> list[str]:
    result = invoke(dsn, "search", query, "--mode", "keyword", "--json", *extra)
    assert result.exit_code in (0, 3), result.output
    return [hit["title"] for hit in json.loads(result.stdout)]


# -- metadata -------------------------------------------------------------------------------------


def test_front_matter_becomes_metadata_and_is_not_indexed_as_text(
    db: str, tmp_path: Path, local_embedder: Any
) -> None:
    path = write(
        tmp_path,
        "runbook.md",
        "---\ntitle: Pager runbook\nteam: ops\nreviewed: 2024-05-01\ntags: [pager, oncall]\n---\n"
        "# Paging\n\nAcknowledge the page within five minutes.\n",
    )
    assert extract_path(path).metadata["team"] == "ops"
    ingest_paths(db, [str(path)], embedder=local_embedder)
    doc = documents(db)[str(path)]
    assert doc["metadata"]["team"] == "ops"
    assert doc["metadata"]["tags"] == ["pager", "oncall"]
    assert doc["metadata"]["reviewed"] == "2024-05-01"  # a YAML date, stored as text
    with connect(db) as conn:
        contents = [r[0] for r in conn.execute("select content from pgrag.chunks")]
    assert contents and not any("reviewed" in c or "tags:" in c for c in contents)
    assert keyword_titles(db, "Acknowledge", "--metadata", '{"team": "ops"}') == ["Pager runbook"]


def test_a_dash_line_that_is_not_front_matter_stays_text(tmp_path: Path) -> None:
    path = write(tmp_path, "rule.md", "---\nNo closing rule: this is text.\n\n# Next\n\nMore.\n")
    doc = extract_path(path)
    assert "team" not in doc.metadata
    assert any("this is text" in b.text for b in doc.blocks)


def test_ingest_metadata_option_tags_documents_and_search_filters_on_it(
    db: str, docs: Path, local_embedder: Any
) -> None:
    ingest_paths(db, [str(docs)], embedder=local_embedder)
    result = invoke(db, "ingest", str(docs / "ports.md"), "--metadata", '{"team": "ops"}')
    assert result.exit_code == 0, result.output
    assert "0 new, 1 changed" in result.output and "0 embedded" in result.output
    assert documents(db)[str(docs / "ports.md")]["metadata"]["team"] == "ops"
    assert keyword_titles(db, "widget", "--metadata", '{"team":"ops"}') == ["Ports"]
    # the same metadata again: nothing to do
    result = invoke(db, "ingest", str(docs / "ports.md"), "--metadata", '{"team": "ops"}')
    assert "0 changed, 1 unchanged" in result.output


def test_ingest_metadata_must_be_a_json_object(db: str, docs: Path) -> None:
    result = invoke(db, "ingest", str(docs), "--metadata", '["ops"]')
    assert result.exit_code == 2
    assert "Invalid value for '--metadata': takes a JSON object" in result.output


def test_readme_metadata_example_works_as_written(db: str, local_embedder: Any) -> None:
    ingest_paths(db, [str(REPO / "samples")], embedder=local_embedder)
    result = invoke(
        db,
        "search",
        "release steps",
        "--metadata",
        '{"team":"ops"}',
        "--source-type",
        "markdown",
        "--window",
        "1",
    )
    assert result.exit_code == 0, result.output
    assert result.output.startswith("1. Release process")
    assert "Freeze the main branch" in result.output


# -- removal --------------------------------------------------------------------------------------


def test_delete_by_path_asks_and_removes_the_document_and_its_chunks(
    db: str, docs: Path, local_embedder: Any
) -> None:
    ingest_paths(db, [str(docs)], embedder=local_embedder)
    target = str(docs / "tls.md")
    refused = invoke(db, "delete", target, input="n\n")
    assert refused.exit_code == 1 and "nothing deleted" in refused.output
    assert target in documents(db)
    result = invoke(db, "delete", target, input="y\n")
    assert result.exit_code == 0, result.output
    assert "deleted 1 document(s)" in result.output
    assert target not in documents(db) and len(documents(db)) == 2
    assert keyword_titles(db, "certificate") == []


def test_delete_by_id_glob_and_folder(db: str, docs: Path, local_embedder: Any) -> None:
    ingest_paths(db, [str(docs)], embedder=local_embedder)
    ids = {uri: d["id"] for uri, d in documents(db).items()}
    dry = invoke(db, "delete", "--glob", "*/sub/*", "--dry-run")
    assert dry.exit_code == 0 and "would delete 1 document(s)" in dry.output
    assert len(documents(db)) == 3
    result = invoke(db, "delete", "--id", str(ids[str(docs / "ports.md")]), "--yes", "--json")
    assert [d["source_uri"] for d in json.loads(result.output)["deleted"]] == [
        str(docs / "ports.md")
    ]
    result = invoke(db, "delete", str(docs / "sub"), "--yes")
    assert result.exit_code == 0 and "deleted 1 document(s)" in result.output
    assert list(documents(db)) == [str(docs / "tls.md")]


def test_delete_matching_nothing_says_so_with_exit_3(
    db: str, docs: Path, local_embedder: Any
) -> None:
    result = invoke(db, "delete", "--glob", "*.pdf", "--yes")
    assert result.exit_code == 3
    assert result.output.startswith("Error: nothing is ingested yet")
    ingest_paths(db, [str(docs)], embedder=local_embedder)
    result = invoke(db, "delete", "--glob", "*.pdf", "--yes")
    assert result.exit_code == 3
    assert (
        result.output.strip() == "Error: no document of tenant 'default' matches: nothing deleted."
    )
    result = invoke(db, "delete", "--glob", "*.md", "--yes", "--tenant", "acme")
    assert result.exit_code == 3 and "tenant 'acme' has no documents" in result.output


def stats(dsn: str) -> dict[str, Any]:
    """BM25 statistics, independent of chunk ids: what scores are computed from."""
    with connect(dsn) as conn:
        corpus = conn.execute(
            "select tenant_id, language, sum(chunk_count), sum(token_count) "
            "from pgrag.corpus_stats group by 1, 2 "
            "having sum(chunk_count) <> 0 or sum(token_count) <> 0 order by 1, 2"
        ).fetchall()
        lexicon = conn.execute(
            "select tenant_id, lexeme, sum(df) from pgrag.bm25_lexicon group by 1, 2 "
            "having sum(df) <> 0 order by 1, 2"
        ).fetchall()
        postings = conn.execute(
            "select tenant_id, lexeme, tf, doc_len from pgrag.bm25_postings order by 1, 2, 3, 4"
        ).fetchall()
    scores = {}
    for query in ("widget", "certificate rotate", "backups vault port"):
        result = invoke(dsn, "search", query, "--mode", "keyword", "--json")
        scores[query] = sorted(
            (h["source_uri"], round(h["score"], 9)) for h in json.loads(result.stdout or "[]")
        )
    return {"corpus": corpus, "lexicon": lexicon, "postings": postings, "scores": scores}


@pytest.fixture
def fresh_db(pg_admin_dsn: str, template_db: str) -> Any:
    dsn = create_database(pg_admin_dsn, template=template_db)
    yield dsn
    drop_database(pg_admin_dsn, dsn)


def test_bm25_statistics_after_delete_equal_a_fresh_ingest(
    db: str, fresh_db: str, docs: Path, local_embedder: Any
) -> None:
    ingest_paths(db, [str(docs)], embedder=local_embedder)
    assert invoke(db, "delete", str(docs / "ports.md"), "--yes").exit_code == 0
    (docs / "ports.md").unlink()
    ingest_paths(fresh_db, [str(docs)], embedder=local_embedder)
    after_delete, fresh = stats(db), stats(fresh_db)
    assert after_delete["corpus"] and after_delete["postings"]
    assert after_delete == fresh


def test_ingest_prune_removes_documents_of_deleted_files_atomically(
    db: str, fresh_db: str, docs: Path, local_embedder: Any
) -> None:
    ingest_paths(db, [str(docs)], embedder=local_embedder)
    outside = write(docs.parent, "elsewhere/keep.md", "# Keep\n\nThis one lives elsewhere.\n")
    ingest_paths(db, [str(outside)], embedder=local_embedder)
    (docs / "sub" / "backup.md").unlink()
    shutil.rmtree(docs / "sub")
    result = invoke(db, "ingest", str(docs), "--prune")
    assert result.exit_code == 0, result.output
    assert "2 unchanged, 0 failed, 1 removed" in result.output
    assert set(documents(db)) == {str(docs / "tls.md"), str(docs / "ports.md"), str(outside)}
    ingest_paths(fresh_db, [str(docs), str(outside)], embedder=local_embedder)
    assert stats(db) == stats(fresh_db)
    # every file gone: the prune is the work done, not "nothing to ingest"
    for path in docs.glob("*.md"):
        path.unlink()
    result = invoke(db, "ingest", str(docs), "--prune", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["documents_removed"] == 2
    assert set(documents(db)) == {str(outside)}


def test_more_documents_than_one_sql_call_takes_are_removed_in_one_go(db: str) -> None:
    from pgrag.documents import DELETE_BATCH, delete_documents

    with connect(db, autocommit=True) as conn:
        ids = [
            r[0]
            for r in conn.execute(
                "insert into pgrag.documents (tenant_id, title, source_type, source_uri, status) "
                "select 'default', '', 'text', 'doc-' || g, 'ready' "
                "from generate_series(1, %s) as g returning id",
                (DELETE_BATCH + 1,),
            ).fetchall()
        ]

        removed = delete_documents(conn, "default", document_ids=ids)

        assert len(removed) == DELETE_BATCH + 1
        assert conn.execute("select count(*) from pgrag.documents").fetchone() == (0,)


def test_prune_needs_a_folder(db: str, docs: Path) -> None:
    result = invoke(db, "ingest", str(docs / "tls.md"), "--prune")
    assert result.exit_code == 1 and "--prune" in result.output


# -- saying when nothing happened -----------------------------------------------------------------


def test_a_folder_without_supported_files_says_so_with_exit_3(db: str, tmp_path: Path) -> None:
    write(tmp_path, "empty/picture.png", "not really")
    result = invoke(db, "ingest", str(tmp_path / "empty"))
    assert result.exit_code == 3
    assert result.output.startswith("Error: no supported file in ")
    assert "--glob" in result.output and result.output.count("\n") == 1


def test_a_glob_matching_nothing_says_so_with_exit_3(db: str, docs: Path) -> None:
    result = invoke(db, "ingest", str(docs), "--glob", "*.rst")
    assert result.exit_code == 3
    assert (
        result.output.strip()
        == f"Error: no file matches --glob '*.rst' in {docs}: nothing to ingest."
    )


def test_search_and_ask_before_any_ingest_say_so_with_exit_3(db: str) -> None:
    for command in ("search", "ask"):
        result = invoke(db, command, "what is the widget port?")
        assert result.exit_code == 3, result.output
        assert result.output.strip() == (
            "Error: nothing is ingested yet: run pgrag ingest PATH first "
            "(e.g. pgrag ingest samples/)."
        )


def test_search_of_an_unknown_tenant_says_so_with_exit_3(
    db: str, docs: Path, local_embedder: Any
) -> None:
    ingest_paths(db, [str(docs)], embedder=local_embedder)
    result = invoke(db, "search", "widget", "--mode", "keyword", "--tenant", "acme")
    assert result.exit_code == 3
    assert "tenant 'acme' has no documents: check --tenant / PGRAG_TENANT" in result.output
    # a known tenant with no match is not an error
    result = invoke(db, "search", "zyzzyva", "--mode", "keyword")
    assert result.exit_code == 0 and result.output.strip() == "No relevant information found."


# -- progress and Ctrl-C ---------------------------------------------------------------------------


def many_documents(folder: Path, n: int) -> Path:
    """``n`` one-chunk documents."""
    for i in range(n):
        text = (
            f"Section {i} explains how widget {i} is configured, deployed and monitored in "
            "production, with the ports, certificates and backups it needs. "
        ) * 3
        write(folder, f"doc{i:03d}.md", f"# Widget {i}\n\n{text}\n")
    return folder


def test_progress_lines_when_stderr_is_not_a_terminal(
    db: str, tmp_path: Path, local_embedder: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = many_documents(tmp_path / "many", 6)
    monkeypatch.setenv("PGRAG_PROGRESS_INTERVAL", "0")
    result = CliRunner().invoke(main, ["--dsn", db, "ingest", str(folder), "--progress"])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stderr.splitlines() if line.startswith("ingest: ")]
    assert any("/6 chunks embedded" in line for line in lines), result.stderr
    assert any("/6 documents" in line for line in lines)
    assert lines[-1].startswith(
        "ingest: 6/6 chunks embedded (100 %), 6 written, 6/6 documents (100 %)"
    )
    assert "documents: 6 new" in result.stdout  # the summary stays on stdout


def test_progress_json_gives_one_event_per_line_for_scripts(
    db: str, tmp_path: Path, local_embedder: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = many_documents(tmp_path / "many", 6)
    monkeypatch.setenv("PGRAG_PROGRESS_INTERVAL", "0")
    args = ["--dsn", db, "ingest", str(folder), "--progress-json", "--json"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    events = [json.loads(line) for line in result.stderr.splitlines() if line.startswith("{")]
    assert events and all(e["event"] == "progress" and e["label"] == "ingest" for e in events)
    assert any(not e["done"] and e["chunks_embedded"] is not None for e in events)
    last = events[-1]
    assert last["done"] is True and last["left_s"] is None
    assert (last["documents"], last["documents_total"]) == (6, 6)
    assert last["chunks_embedded"] == last["chunks_total"] == 6
    assert json.loads(result.stdout)["documents_new"] == 6  # the summary stays on stdout


def test_ctrl_c_during_a_real_ingest_stops_fast_says_what_was_kept_and_leaves_no_half_document(
    db: str, tmp_path: Path
) -> None:
    total = 130  # two batches of 64 chunks and a bit: the first commits early
    folder = many_documents(tmp_path / "many", total)
    env = {
        **os.environ,
        "PGRAG_DSN": db,
        "PGRAG_PROGRESS_INTERVAL": "0",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }
    pgrag = Path(sys.executable).with_name("pgrag")
    proc = subprocess.Popen(
        [str(pgrag), "ingest", str(folder), "--progress"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr or []), daemon=True)
    reader.start()
    deadline = time.monotonic() + 240
    # Interrupt once some documents are committed and most are still to do.
    while not any(re.search(r"\b[1-9]\d*/130 documents", line) for line in lines):
        assert proc.poll() is None and time.monotonic() < deadline, "".join(lines)
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    sent = time.monotonic()
    proc.wait(timeout=30)
    stopped_after = time.monotonic() - sent
    reader.join(timeout=10)
    err = "".join(lines)
    errors = [line for line in lines if line.startswith("Error:")]
    assert proc.returncode == 130, err
    assert stopped_after < 2.5, f"took {stopped_after:.1f} s to stop"
    assert "Traceback" not in err
    assert len(errors) == 1 and errors[0].startswith("Error: interrupted after "), err
    assert "Kept: " in errors[0] and "Run the same command again" in errors[0]
    kept = int(errors[0].split("Kept: ")[1].split()[0])
    assert 0 < kept < total

    # No half document: every document is either ready with all its chunks, or has none.
    state = documents(db)
    ready = {uri: d for uri, d in state.items() if d["status"] == "ready"}
    assert len(ready) == kept
    assert all(d["chunks"] == d["chunk_count"] > 0 for d in ready.values())
    assert all(d["chunks"] == 0 for d in state.values() if d["status"] != "ready")
    assert all(d["status"] == "error" for d in state.values() if d["status"] != "ready")

    # A re-run finishes the work and skips what was kept.
    rerun = subprocess.run(
        [str(pgrag), "ingest", str(folder), "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert rerun.returncode == 0, rerun.stderr
    summary = json.loads(rerun.stdout)
    assert summary["documents_unchanged"] == kept
    assert summary["documents_new"] + summary["documents_changed"] == total - kept
    assert all(d["status"] == "ready" for d in documents(db).values())
