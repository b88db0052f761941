"""One bad document fails alone; Ctrl-C at any moment ends with the whole message, no document
left ``processing``, and what it calls searchable searchable in every arm (a first load too);
progress counts chunks; the summary's chunk figures add up.

The Ctrl-C tests run ``pgrag ingest`` as a subprocess and send it SIGINT, as a terminal does.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from pgrag.cli import main
from pgrag.db import connect, set_request_tenant
from pgrag.ingest import IngestOptions, ingest_documents, sources
from pgrag.pipeline.embedders import LocalEmbedder
from pgrag.pipeline.extract import Block, ExtractedDocument, LazyBlocks

TOTAL = 130  # one-chunk documents: two batches of 64 and a bit (the first commits early)


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def corpus(folder: Path, n: int = TOTAL) -> Path:
    """``n`` one-chunk documents, each with a word of its own (``zorblN``)."""
    for i in range(n):
        text = (
            f"Section {i} explains how widget zorbl{i} is configured, deployed and monitored "
            "in production, with the ports, certificates and backups it needs. "
        ) * 3
        write(folder, f"doc{i:03d}.md", f"# Widget {i}\n\n{text}\n")
    return folder


def states(dsn: str) -> dict[str, tuple[str, str | None, int, int]]:
    """source_uri -> (status, error, chunk_count, chunks stored)."""
    with connect(dsn) as conn:
        rows = conn.execute(
            "select source_uri, status, error, chunk_count, (select count(*) from pgrag.chunks c"
            " where c.tenant_id = d.tenant_id and c.document_id = d.id)"
            " from pgrag.documents d where tenant_id = 'default'"
        ).fetchall()
    return {r[0]: (r[1], r[2], r[3], r[4]) for r in rows}


def pgrag_env(dsn: str) -> dict[str, str]:
    return {
        **os.environ,
        "PGRAG_DSN": dsn,
        "PGRAG_PROGRESS_INTERVAL": "0",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }


class Run:
    """``pgrag ingest FOLDER --progress`` in a subprocess, its stderr read as it comes."""

    def __init__(self, dsn: str, folder: Path, *args: str) -> None:
        pgrag = Path(sys.executable).with_name("pgrag")
        self.proc = subprocess.Popen(
            [str(pgrag), "ingest", str(folder), "--progress", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=pgrag_env(dsn),
        )
        self.lines: list[str] = []
        self.reader = threading.Thread(
            target=lambda: self.lines.extend(self.proc.stderr or []), daemon=True
        )
        self.reader.start()
        self.started = time.monotonic()

    def wait_for(self, pattern: str, timeout: float = 240) -> bool:
        """Until a stderr line matches ``pattern`` (False if the run ended first)."""
        deadline = time.monotonic() + timeout
        while not any(re.search(pattern, line) for line in list(self.lines)):
            if self.proc.poll() is not None:
                return False
            assert time.monotonic() < deadline, "".join(self.lines)
            time.sleep(0.02)
        return True

    def interrupt(self, times: int = 1) -> None:
        for i in range(times):
            if i:
                time.sleep(0.05)
            self.proc.send_signal(signal.SIGINT)

    def end(self) -> tuple[int, str]:
        self.proc.wait(timeout=120)
        self.reader.join(timeout=10)
        return self.proc.returncode, "".join(self.lines)


def committed(lines: str) -> str:
    return r"\b[1-9]\d*/" + lines + " documents"


# -- one bad document fails alone ------------------------------------------------------------------


def test_a_source_whose_reader_raises_any_error_fails_alone(
    db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "docs"
    write(folder, "good1.md", "# Ports\n\nThe widget service listens on port 8443.\n")
    write(folder, "good2.md", "# TLS\n\nRotate the certificate with widgetctl cert rotate.\n")
    bad = write(folder, "bad.md", "---\ndate: 2024-13-45\n---\n# Bad date\n\nSome text.\n")

    # What PyYAML raised for that date before the extractor read dates as text: whatever a
    # reader raises on one source (not only pgrag's errors) must fail that source alone.
    def extract(source: str) -> ExtractedDocument:
        if source.endswith("bad.md"):
            raise ValueError("month must be in 1..12")
        return real_extract(source)

    real_extract = sources.extract
    monkeypatch.setattr(sources, "extract", extract)
    result = CliRunner().invoke(main, ["--dsn", db, "ingest", str(folder)])

    assert result.exit_code == 1, result.output
    assert "documents: 2 new, 0 changed, 0 unchanged, 1 failed" in result.stdout
    failed = [line for line in result.stderr.splitlines() if line.startswith("failed: ")]
    assert failed == [f"failed: {bad}: ValueError: month must be in 1..12"], result.stderr
    state = states(db)
    assert state[str(bad)][:2] == ("error", "ValueError: month must be in 1..12")
    assert sorted(s[0] for uri, s in state.items() if uri != str(bad)) == ["ready", "ready"]


def raising_blocks(error: BaseException, after: int) -> LazyBlocks:
    """A document's block stream that raises ``error`` (as a parser would) after ``after``
    blocks of text."""

    def produce() -> Iterator[Block]:
        for i in range(after):
            yield Block(f"Paragraph {i} of a document its parser gives up on, part way through.")
        raise error

    return LazyBlocks(produce)


@pytest.mark.parametrize(
    "error", [RecursionError("maximum recursion depth exceeded"), MemoryError(), KeyError("x")]
)
def test_any_error_while_reading_a_document_fails_it_alone_and_the_run_goes_on(
    db: str, local_embedder: Any, error: BaseException
) -> None:
    good = [
        ExtractedDocument.from_text(uri=f"good:{i}", text=f"# Good {i}\n\nWidget {i} works.")
        for i in range(2)
    ]
    # Far enough into the document that some of its chunks were handed on already.
    bad = ExtractedDocument(
        uri="bad:1", title="bad", source_type="text", blocks=raising_blocks(error, 150)
    )
    bad.content_sha256 = "0" * 64

    summary = ingest_documents(
        db,
        [good[0], bad, good[1]],
        embedder=local_embedder,
        options=IngestOptions(chunk_size=20, overlap=0),
    )

    reason = f"{type(error).__name__}: {error}".rstrip(": ")
    assert summary.documents_new == 2 and summary.documents_failed == 1
    assert summary.failures == [("bad:1", reason)]
    assert states(db)["bad:1"] == ("error", reason, 0, 0)
    assert [states(db)[f"good:{i}"][0] for i in range(2)] == ["ready", "ready"]


# -- the summary's figures add up --------------------------------------------------------------


def test_chunks_written_are_embedded_reused_or_repeated_and_the_summary_says_which(
    db: str, tmp_path: Path, local_embedder: Any
) -> None:
    same = "The widget restarts itself every night at two."
    path = write(
        tmp_path,
        "notes.txt",
        f"{same}\n\nPorts are listed in the service file.\n\n{same}\n\nLogs go to the journal.\n",
    )
    args = ["--dsn", db, "ingest", str(path), "--chunk-size", "16", "--overlap", "0"]

    first = CliRunner().invoke(main, [*args, "--json"])
    # Both copies changed alike: one embedding for the two; the other two chunks kept theirs.
    path.write_text(path.read_text().replace("night at two", "day at six"))
    second = CliRunner().invoke(main, args)

    summary = json.loads(first.stdout)
    assert (summary["chunks_written"], summary["chunks_embedded"]) == (4, 3)
    assert (summary["chunks_repeated"], summary["chunks_reused"]) == (1, 0)
    assert "chunks:    4 written, 1 embedded, 2 reused, 1 repeated (the same text as" in (
        second.stdout
    ), second.output


# -- progress counts chunks ------------------------------------------------------------------


def test_progress_of_a_single_large_file_moves_with_its_chunks(
    db: str, tmp_path: Path, local_embedder: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    paragraphs = [
        f"Paragraph {i} says how gadget {i} is wired to relay {i * 7} in cabinet {i % 9}."
        for i in range(150)
    ]
    path = write(tmp_path, "long.txt", "\n\n".join(paragraphs) + "\n")
    monkeypatch.setenv("PGRAG_PROGRESS_INTERVAL", "0")

    result = CliRunner().invoke(
        main,
        ["--dsn", db, "ingest", str(path), "--progress", "--chunk-size", "24", "--overlap", "0"],
    )

    assert result.exit_code == 0, result.output
    [(_, _, written, _)] = states(db).values()
    lines = [line for line in result.stderr.splitlines() if line.startswith("ingest: ")]
    counts = [
        (int(m[1]), m[2] == "~", int(m[3]))
        for line in lines
        if "0/1 documents" in line
        and (m := re.match(r"ingest: (\d+)/(~?)(\d+) chunks embedded", line))
    ]
    done = sorted({c[0] for c in counts})
    # While the one document is in progress, the chunks embedded advance ...
    assert len(done) >= 4 and done[-1] >= written - 8, result.stderr
    # ... against an estimate of its chunks made before it was all read, then the real count.
    estimates = [total for _, estimated, total in counts if estimated]
    assert estimates and all(0.5 * written <= e <= 2 * written for e in estimates)
    assert counts[-1][1:] == (False, written)
    assert any("left" in line for line in lines if "0/1 documents" in line)


def json_events(stderr: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]


def test_progress_json_events_carry_chunks_embedded_and_written_and_an_eta(
    db: str, tmp_path: Path, local_embedder: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = corpus(tmp_path / "many", 100)  # two batches: 64, then 36
    monkeypatch.setenv("PGRAG_PROGRESS_INTERVAL", "0")

    result = CliRunner().invoke(main, ["--dsn", db, "ingest", str(folder), "--progress-json"])

    assert result.exit_code == 0, result.output
    events = json_events(result.stderr)
    running = [e for e in events if not e["done"]]
    assert any(e["chunks_written"] and e["chunks_written"] < 100 for e in running), events
    timed = [e for e in running if e["left_s"] is not None]
    assert timed and all(e["eta"] and e["chunks_per_s"] > 0 for e in timed)
    ends = [datetime.fromisoformat(e["eta"]) for e in timed]
    assert all(end.tzinfo is not None for end in ends)
    last = events[-1]
    assert last["done"] and (last["left_s"], last["eta"]) == (None, None)
    assert last["chunks_done"] == last["chunks_embedded"] == last["chunks_written"] == 100


def test_the_time_left_is_the_chunks_not_yet_written_at_the_chunk_rate(
    db: str, tmp_path: Path, local_embedder: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    paragraphs = [
        f"Paragraph {i} says how gadget {i} is wired to relay {i * 7} in cabinet {i % 9}."
        for i in range(150)
    ]
    path = write(tmp_path, "long.txt", "\n\n".join(paragraphs) + "\n")
    monkeypatch.setenv("PGRAG_PROGRESS_INTERVAL", "0")
    args = ["ingest", str(path), "--progress-json", "--chunk-size", "24", "--overlap", "0"]

    result = CliRunner().invoke(main, ["--dsn", db, *args])

    assert result.exit_code == 0, result.output
    timed = [e for e in json_events(result.stderr) if e["left_s"] is not None]
    # one document, not done until the end: a document count would give no estimate at all
    assert len([e for e in timed if e["documents"] == 0]) >= 3, timed
    for e in timed:
        pending = e["chunks_total"] - e["chunks_written"]
        assert e["left_s"] == pytest.approx(pending / e["chunks_per_s"], rel=0.02, abs=0.2), e
    assert timed[-1]["left_s"] < timed[0]["left_s"]


# -- Ctrl-C ------------------------------------------------------------------------------------


def search_as(dsn: str, sql: str, args: tuple[Any, ...]) -> list[str]:
    with connect(dsn) as conn:
        set_request_tenant(conn, "default")
        return [r[0] for r in conn.execute(sql, args).fetchall()]


def test_documents_kept_by_an_interrupted_first_load_are_searchable_in_every_arm(
    db: str, tmp_path: Path, local_embedder: Any
) -> None:
    folder = corpus(tmp_path / "many")
    run = Run(db, folder)
    assert run.wait_for(committed(str(TOTAL)))
    run.interrupt()
    status, err = run.end()

    assert status == 130, err
    errors = [line for line in err.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "all searchable" in errors[0], err
    state = states(db)
    ready = sorted(uri for uri, s in state.items() if s[0] == "ready")
    assert ready and len(ready) < TOTAL
    uri = ready[0]
    word = f"zorbl{int(Path(uri).stem[3:])}"
    with connect(db) as conn:
        (content,) = conn.execute(
            "select c.content from pgrag.chunks c join pgrag.documents d on d.id = c.document_id"
            " where d.source_uri = %s",
            (uri,),
        ).fetchone() or ("",)
    [vector] = local_embedder.embed([content])
    keyword = search_as(db, "select source_uri from public.keyword_search(%s, 5)", (word,))
    nearest = search_as(db, "select source_uri from public.vector_search(%s, 5)", (vector,))
    hybrid = search_as(db, "select source_uri from public.hybrid_search(%s, %s, 5)", (word, vector))
    with connect(db) as conn:
        set_request_tenant(conn, "default")
        (chunks,) = conn.execute(
            "select chunk_count from pgrag.tenant_stats('default')"
        ).fetchone() or (None,)
    assert keyword[:1] == [uri] and nearest[:1] == [uri] and hybrid[:1] == [uri]
    assert chunks == sum(state[u][3] for u in ready) == len(ready)


@pytest.mark.parametrize(
    ("after", "wait", "signals"),
    [
        ("ingest: ", 0.0, 1),  # the first progress line
        ("ingest: ", 0.4, 1),
        (committed(str(TOTAL)), 0.0, 1),  # just after a commit
        (committed(str(TOTAL)), 0.15, 1),
        (committed(str(TOTAL)), 0.0, 2),  # Ctrl-C twice
    ],
)
def test_every_interruption_ends_with_the_whole_message_and_no_document_processing(
    db: str, tmp_path: Path, after: str, wait: float, signals: int
) -> None:
    folder = corpus(tmp_path / "many")
    run = Run(db, folder)
    if after:
        assert run.wait_for(after)
    time.sleep(wait)
    run.interrupt(signals)
    status, err = run.end()

    assert status == 130, err
    assert "Traceback" not in err
    errors = [line for line in err.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, err
    assert (
        errors[0].startswith("Error: interrupted ") and "Run the same command again" in (errors[0])
    ), err
    state = states(db)
    assert not [uri for uri, s in state.items() if s[0] == "processing"]
    assert all(s[2] == s[3] > 0 for s in state.values() if s[0] == "ready")
    assert all(s[3] == 0 and s[1] for s in state.values() if s[0] != "ready")
    if "Kept: " in errors[0]:
        kept = int(errors[0].split("Kept: ")[1].split()[0])
        assert kept == sum(s[0] == "ready" for s in state.values())


def test_a_long_document_interrupted_keeps_its_embeddings_for_the_next_run(
    db: str, tmp_path: Path
) -> None:
    paragraphs = [
        f"Paragraph {i} says how gadget {i} is wired to relay {i * 7} in cabinet {i % 9}."
        for i in range(320)
    ]
    path = write(tmp_path, "long.txt", "\n\n".join(paragraphs) + "\n")
    chunking = ("--chunk-size", "24", "--overlap", "0")
    run = Run(db, path, *chunking)
    # Two batches of the document staged (and saved), most of it still to embed.
    assert run.wait_for(r"ingest: (1[3-9]\d|2[0-4]\d)/\S+ chunks embedded .* 0/1 documents")
    run.interrupt()
    status, err = run.end()
    with connect(db) as conn:
        (saved,) = conn.execute(
            "select count(distinct content_sha256) from pgrag.saved_embeddings"
        ).fetchone() or (0,)

    rerun = CliRunner().invoke(main, ["--dsn", db, "ingest", str(path), "--json", *chunking])

    assert status == 130, err
    assert "the embeddings made so far for the 1 long one(s) among them are kept" in err
    assert saved >= 128
    summary = json.loads(rerun.stdout)
    assert summary["documents_new"] == 1 and summary["chunks_written"] == 320
    assert summary["chunks_reused"] == saved
    assert summary["chunks_embedded"] == 320 - saved - summary["chunks_repeated"]
    with connect(db) as conn:
        left = conn.execute("select count(*) from pgrag.saved_embeddings").fetchone()
        rows = conn.execute(
            "select content, embedding from pgrag.chunks where chunk_index < 4 order by chunk_index"
        ).fetchall()
    assert left == (0,) and states(db)[str(path)][:1] == ("ready",)
    # Each of the first chunks holds the embedding of its own text, not of a neighbour's (int8
    # embeddings move a little with the batch they are made in: compare, do not match).
    fresh = LocalEmbedder(for_documents=True).embed([c for c, _ in rows])  # as pgrag ingest
    stored = np.array([e.to_list() for _, e in rows])
    assert (fresh @ stored.T).argmax(axis=0).tolist() == list(range(len(rows)))
