"""``pgrag import`` of untrusted files: whatever a row holds, it is refused alone with its
reason (or the file in one line), in bounded memory, and the other documents are imported."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest
from click.testing import CliRunner
from test_import import (  # the same real database, embeddings and summary as the other tests
    TEXTS,
    backlog,
    chunk_count,
    chunks,
    lone_row,
    run,
    summary,
    vectors,
)

from pgrag.cli import main
from pgrag.db import tenant_transaction
from pgrag.importer import ImportOptions, import_source, mapping, sources
from pgrag.importer import run as importer_run
from pgrag.importer.sources import open_file
from pgrag.ingest import load
from pgrag.pipeline.embedders import LOCAL_MODEL_NAME

__all__ = ["vectors"]  # the fixture, imported for these tests
MODEL = ("--model", LOCAL_MODEL_NAME)
NO_PAGE = "not a page number: give a whole number or leave it out"


def good_lines(vectors: list[np.ndarray]) -> list[bytes]:
    """Three documents: kb/a.md of two rows, and two rows without a source."""
    lines = []
    for i, (text, vec) in enumerate(zip(TEXTS, vectors, strict=True)):
        record = {"content": text, "embedding": [float(x) for x in vec]}
        if i < 2:
            record["source_uri"] = "kb/a.md"
        lines.append(json.dumps(record).encode() + b"\n")
    return lines


def with_bad_line(tmp_path: Path, vectors: list[np.ndarray], bad: bytes) -> Path:
    """The good rows with ``bad`` (one line) after them."""
    path = tmp_path / "rows.jsonl"
    path.write_bytes(b"".join(good_lines(vectors)) + bad + b"\n")
    return path


def refused_alone(db: str, path: Path) -> str:
    """Import ``path``; assert line 5 alone was refused and the rest imported; its reason."""
    result = run(db, str(path), *MODEL)
    assert result.exit_code == 1, result.output
    s = summary(result)
    assert (s["documents_new"], s["chunks_imported"], s["documents_refused"]) == (3, 4, 1)
    assert [r["row"] for r in s["refused"]] == ["line 5"]
    reason: str = s["refused"][0]["reason"]
    return reason


def embedding_json(vectors: list[np.ndarray]) -> str:
    return json.dumps([float(x) for x in vectors[0]])


def test_metadata_nested_ten_thousand_deep_refuses_its_row_alone(
    db: str, vectors: list[np.ndarray], tmp_path: Path
) -> None:
    deep = "[" * 10_000 + "]" * 10_000
    emb = embedding_json(vectors)
    bad = f'{{"content": "deep", "embedding": {emb}, "metadata": {{"a": {deep}}}}}'

    reason = refused_alone(db, with_bad_line(tmp_path, vectors, bad.encode()))

    assert reason == "not JSON that can be read: nested too deeply"


def test_a_line_that_is_not_utf8_refuses_its_row_alone_naming_the_encoding(
    db: str, vectors: list[np.ndarray], tmp_path: Path
) -> None:
    bad = f'{{"content": "caf\xe9", "embedding": {embedding_json(vectors)}}}'.encode("latin-1")

    reason = refused_alone(db, with_bad_line(tmp_path, vectors, bad))

    assert reason == "not UTF-8 text (byte 0xe9 at column 17): export the file as UTF-8"


def test_a_utf16_file_fails_in_one_line_naming_the_conversion(
    db: str, conn: psycopg.Connection[Any], vectors: list[np.ndarray], tmp_path: Path
) -> None:
    path = tmp_path / "export.jsonl"
    path.write_bytes(b"".join(good_lines(vectors)).decode().encode("utf-16"))

    result = CliRunner().invoke(main, ["--dsn", db, "import", str(path), *MODEL])

    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        f"Error: {path}: UTF-16 text; import reads UTF-8 JSONL: convert it first "
        f"(iconv -f UTF-16 -t UTF-8 {path} > export.utf8.jsonl)."
    ]
    assert conn.execute("select count(*) from pgrag.documents").fetchone() == (0,)


def test_a_utf8_byte_order_mark_costs_no_row(
    db: str, vectors: list[np.ndarray], tmp_path: Path
) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + b"".join(good_lines(vectors)))

    s = summary(run(db, str(path), *MODEL))

    assert (s["documents_new"], s["chunks_imported"], s["refused"]) == (3, 4, [])


@pytest.mark.parametrize(
    ("field", "value", "reason"),
    [
        ("content", '"\\ud800 lone"', "content holds a lone surrogate (not valid Unicode)"),
        ("metadata", '{"k": "a\\u0000b"}', "metadata holds a NUL character"),
        ("metadata", '{"\\udfff": 1}', "metadata holds a lone surrogate (not valid Unicode)"),
        ("title", '"T\\u0000"', "title holds a NUL character"),
        ("source_uri", '"kb/\\u0000"', "source_uri holds a NUL character"),
    ],
)
def test_text_postgres_cannot_store_refuses_its_row_alone(
    db: str, vectors: list[np.ndarray], tmp_path: Path, field: str, value: str, reason: str
) -> None:
    content = "" if field == "content" else '"content": "stored?", '
    bad = f'{{{content}"embedding": {embedding_json(vectors)}, "{field}": {value}}}'

    assert refused_alone(db, with_bad_line(tmp_path, vectors, bad.encode())) == reason


@pytest.mark.parametrize(
    ("values", "reason"),
    [
        ({"content": 42}, "content is a number, not text"),
        ({"content": ["a", "b"]}, "content is a list, not text"),
        ({"embedding": "[0.1, 0.2]"}, "embedding is text, not a list of numbers"),
        ({"embedding": ["0.1"] * 384}, "embedding holds text, not only numbers"),
        ({"embedding": [True] * 384}, "embedding holds a boolean, not only numbers"),
        ({"embedding": [0.1] * 383 + [None]}, "embedding holds a null"),
        ({"embedding": [[0.1]] * 384}, "embedding holds a list, not only numbers"),
        (
            {"embedding": [0.0] * 384},
            "embedding is all zeros (it has no direction for cosine distance)",
        ),
        (
            {"embedding": [1e39] * 384},
            "embedding holds NaN, infinity or a number beyond 4-byte floats",
        ),
        ({"metadata": "not json"}, "metadata is text that is not JSON"),
        ({"metadata": [1, 2]}, "metadata is a list, not an object"),
        (
            {"metadata": {"n": float("nan")}},
            "metadata holds NaN or infinity, which JSON cannot store",
        ),
        (
            {"metadata": {"blob": "x" * 10_001}},
            "metadata larger than 10,000 bytes as JSON (10,013)",
        ),
        ({"page": "three"}, f"page is text 'three', {NO_PAGE}"),
        ({"page": -1}, f"page is a number '-1', {NO_PAGE}"),
        ({"title": {"a": 1}}, "title is not text"),
        ({"id": {"a": 1}}, "id is an object, not text"),
        ({"source_uri": ["kb"]}, "source_uri is a list, not text"),
    ],
)
def test_a_value_of_the_wrong_type_refuses_its_row_saying_what_is_wrong(
    db: str, vectors: list[np.ndarray], tmp_path: Path, values: dict[str, Any], reason: str
) -> None:
    record = {"content": "a row", "embedding": [float(x) for x in vectors[0]], **values}

    assert (
        refused_alone(db, with_bad_line(tmp_path, vectors, json.dumps(record).encode())) == reason
    )


def test_a_refused_row_refuses_the_other_rows_of_its_document(
    db: str, conn: psycopg.Connection[Any], vectors: list[np.ndarray], tmp_path: Path
) -> None:
    bad = {"content": "third part", "embedding": [1.0] * 383 + [None], "source_uri": "kb/a.md"}
    path = with_bad_line(tmp_path, vectors, json.dumps(bad).encode())

    s = summary(run(db, str(path), *MODEL))

    assert (s["documents_new"], s["documents_refused"], s["chunks_imported"]) == (2, 1, 2)
    assert "kb/a.md" not in {r[0] for r in chunks(conn)}


def test_content_longer_than_a_chunk_is_refused_alone(
    db: str, vectors: list[np.ndarray], tmp_path: Path
) -> None:
    record = {"content": "word " * 20_001, "embedding": [float(x) for x in vectors[0]]}

    reason = refused_alone(db, with_bad_line(tmp_path, vectors, json.dumps(record).encode()))

    assert reason.startswith("content longer than 100,000 characters (a whole document")


def test_a_40_mb_line_is_refused_unread_in_bounded_memory(
    db: str, vectors: list[np.ndarray], tmp_path: Path
) -> None:
    record = {"content": "word " * 8_000_000, "embedding": [float(x) for x in vectors[0]]}
    path = with_bad_line(tmp_path, vectors, json.dumps(record).encode())

    tracemalloc.start()
    try:
        rows = list(open_file(path).rows)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()

    assert [r.problem for r in rows if r.problem] == ["line longer than 4 MiB: a chunk is smaller"]
    assert peak < 24 * 2**20  # a few reads of 4 MiB, never the 40 MB line
    assert refused_alone(db, path) == "line longer than 4 MiB: a chunk is smaller"


def test_refused_rows_beyond_the_first_hundred_are_counted_not_listed(
    db: str, vectors: list[np.ndarray], tmp_path: Path
) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_bytes(b"".join(good_lines(vectors)) + b"not json\n" * 150)

    s = summary(run(db, str(path), *MODEL))
    text = CliRunner().invoke(main, ["--dsn", db, "import", str(path), "--dry-run"])

    assert (s["documents_new"], s["documents_refused"]) == (3, 150)
    assert (len(s["refused"]), s["refusals_not_listed"]) == (100, 50)
    assert [r["row"] for r in s["refused"]][-1] == "line 104"
    assert text.exit_code == 1
    assert text.stderr.count("refused: ") == 101
    assert text.stderr.splitlines()[-1] == (
        "refused: 50 more, not listed (the first 100 refusals are)"
    )


def rows_of(
    source: str, count: int, text: str = "part", metadata: dict[str, Any] | None = None
) -> Iterator[sources.SourceRow]:
    """``count`` rows of ``source``, each of its own text (``text`` and its number), made one at
    a time (4-dimension embeddings)."""
    for i in range(count):
        vector = np.ones(4, np.float32)
        yield sources.SourceRow("", f"{text}{i}", vector, dict(metadata or {}), source=source)


def read_documents(rows: Iterator[sources.SourceRow]) -> list[mapping.ImportDoc]:
    source = sources.Source("test", "jsonl", "test", [], {}, rows)
    return list(mapping.documents(source, 4, {}, mapping.DimensionTally()))


def test_a_source_of_exactly_the_row_bound_is_one_document_and_one_row_more_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(mapping, "MAX_DOCUMENT_ROWS", 3)

    docs = read_documents(itertools.chain(rows_of("a.md", 3), rows_of("big.md", 4)))

    kept = [(d.uri, len(d.chunks), d.rows_read) for d in docs]
    assert kept == [("a.md", 3, 3), ("big.md", 0, 4)]
    assert (docs[0].refused, len(docs[1].refused)) == ([], 1)
    assert docs[1].refused[0][1].startswith("4 rows under one source, more than 3: ")


def test_a_source_whose_chunks_outgrow_the_memory_bound_is_refused_in_bounded_memory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(mapping, "MAX_DOCUMENT_BYTES", 2**20)

    tracemalloc.start()
    try:
        docs = read_documents(rows_of("big.md", 400, "x" * 50_000))  # 20 MB of text
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()

    assert [(d.uri, d.chunks, d.rows_read) for d in docs] == [("big.md", [], 400)]
    assert docs[0].refused[0][1] == (
        "400 rows under one source, whose chunks hold more than about 1 MB: a document is "
        "loaded whole, in one transaction; give its parts sources of their own"
    )
    assert peak < 4 * 2**20


def test_shared_chunk_metadata_too_large_for_a_document_is_left_to_the_chunks() -> None:
    shared = {"k": "m" * 9_980}  # within a chunk's 10,000 bytes, not with the import's key

    (doc,) = read_documents(rows_of("a.md", 2, metadata=shared))

    assert (doc.refused, doc.metadata) == ([], {"import": {}})
    assert [c.metadata for c in doc.chunks] == [shared, shared]


def test_a_source_of_more_rows_than_a_document_may_hold_is_refused_alone(
    db: str,
    conn: psycopg.Connection[Any],
    vectors: list[np.ndarray],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(mapping, "MAX_DOCUMENT_ROWS", 3)
    record = {"content": "part", "embedding": [float(x) for x in vectors[0]], "source_uri": "big"}
    path = tmp_path / "rows.jsonl"
    path.write_bytes(b"".join(good_lines(vectors)) + (json.dumps(record).encode() + b"\n") * 5)

    s = summary(run(db, str(path), *MODEL))

    assert (s["documents_new"], s["chunks_imported"], s["rows_read"]) == (3, 4, 9)
    assert s["refused"] == [
        {
            "row": "",
            "document": "big",
            "reason": "5 rows under one source, more than 3: a document is loaded whole, in one "
            "transaction; give its parts sources of their own",
        }
    ]
    assert "big" not in {r[0] for r in chunks(conn)}


def test_a_folder_given_as_the_file_says_it_is_a_folder(db: str, tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["--dsn", db, "import", str(tmp_path), *MODEL])

    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        f"Error: {tmp_path}: a folder; import reads one .jsonl or .parquet file."
    ]


def test_rows_without_an_id_keep_their_documents_when_a_line_is_added_before_them(
    db: str, vectors: list[np.ndarray], tmp_path: Path
) -> None:
    path = tmp_path / "rows.jsonl"
    lines = good_lines(vectors)
    path.write_bytes(b"".join(lines))
    assert summary(run(db, str(path), *MODEL))["documents_new"] == 3
    added = {"content": "A new first row.", "embedding": [float(x) for x in vectors[3]]}
    path.write_bytes(json.dumps(added).encode() + b"\n" + b"".join(lines))

    s = summary(run(db, str(path), "--prune"))

    assert (s["documents_new"], s["documents_unchanged"], s["documents_removed"]) == (1, 3, 0)


def test_rows_of_the_same_text_without_an_id_are_documents_of_their_own(
    db: str, conn: psycopg.Connection[Any], vectors: list[np.ndarray], tmp_path: Path
) -> None:
    path = tmp_path / "rows.jsonl"
    row = json.dumps({"content": TEXTS[2], "embedding": [float(x) for x in vectors[2]]})
    path.write_text(f"{row}\n{row}\n")

    s = summary(run(db, str(path), *MODEL))

    assert (s["documents_new"], s["refused"]) == (2, [])
    assert [r[0] for r in chunks(conn)] == [
        lone_row(path, TEXTS[2]),
        f"{lone_row(path, TEXTS[2])}-2",
    ]


def test_a_batch_the_database_refuses_is_written_one_document_at_a_time(
    db: str, conn: psycopg.Connection[Any], vectors: list[np.ndarray], tmp_path: Path
) -> None:
    # A rule of this database that no check of the import knows (23514, check violation).
    conn.execute("alter table pgrag.chunks add constraint no_secrets check (content <> 'secret')")
    conn.commit()
    secret = {"content": "secret", "embedding": [float(x) for x in vectors[1]]}
    path = with_bad_line(tmp_path, vectors, json.dumps(secret).encode())

    s = summary(run(db, str(path), *MODEL))

    assert (s["documents_new"], s["chunks_imported"], s["documents_refused"]) == (3, 4, 1)
    assert s["refused"] == [
        {
            "row": "",
            "document": lone_row(path, "secret"),
            "reason": 'the database refused it: new row for relation "chunks" violates check '
            'constraint "no_secrets"',
        }
    ]
    assert len({r[0] for r in chunks(conn)}) == 3


def test_a_source_longer_than_2048_bytes_is_refused_before_the_database_sees_it(
    db: str, vectors: list[np.ndarray], tmp_path: Path
) -> None:
    # 2,000 characters of 4 bytes: within the bound in characters, not in bytes (the bound of
    # pgrag.documents.source_uri, which its unique index could not hold either).
    wide = "".join(chr(0x20000 + i) for i in range(2000))
    record = {"content": "wide", "embedding": [float(x) for x in vectors[1]], "source_uri": wide}
    path = with_bad_line(tmp_path, vectors, json.dumps(record).encode())

    dry = summary(run(db, str(path), *MODEL, "--dry-run"))
    reason = refused_alone(db, path)

    assert reason == "source longer than 2048 characters or 2048 bytes"
    assert dry["refused"][0]["reason"] == reason
    assert dry["refused"][0]["document"] == wide[:200] + "..."


def lone_rows(tmp_path: Path, vectors: list[np.ndarray], n: int) -> Path:
    path = tmp_path / "many.jsonl"
    with path.open("w") as handle:
        for i in range(n):
            vec = [float(x) for x in vectors[i % 4]]
            handle.write(json.dumps({"content": f"{TEXTS[i % 4]} ({i})", "embedding": vec}) + "\n")
    return path


def test_a_bulk_import_stopped_by_an_error_leaves_its_documents_keyword_searchable(
    db: str,
    conn: psycopg.Connection[Any],
    vectors: list[np.ndarray],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(importer_run, "BATCH_DOCUMENTS", 20)
    batch = importer_run.Importer._batch
    calls = []

    def lose_the_server_at_the_third(self: Any, docs: Any, progress: Any) -> None:
        calls.append(1)
        if len(calls) == 3:
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        batch(self, docs, progress)

    monkeypatch.setattr(importer_run.Importer, "_batch", lose_the_server_at_the_third)
    options = ImportOptions(tenant="acme", model=LOCAL_MODEL_NAME)

    with pytest.raises(psycopg.OperationalError):
        import_source(db, open_file(lone_rows(tmp_path, vectors, 100)), options)

    with tenant_transaction(conn, "acme"):
        found = conn.execute("select count(*) from keyword_search('invoices', 50)").fetchone()
    assert chunk_count(conn, "acme") == 40 and found == (10,)
    assert backlog(conn, "acme") == (0, 40)  # keyword index written; graph left for next run


def test_an_import_removes_the_sorted_runs_a_killed_import_left(
    db: str, vectors: list[np.ndarray], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(sources, "RUN_BYTES", 20_000)  # a few rows a run: the file spills
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    left = tmp_path / f"pgrag-import-{dead.pid}-abc"
    left.mkdir()
    (left / "run-1").write_bytes(b"x" * 1000)
    mine = tmp_path / "pgrag-import-notapid-x"
    mine.mkdir()

    s = summary(run(db, str(lone_rows(tmp_path, vectors, 40)), *MODEL))

    assert s["documents_new"] == 40
    assert sorted(p.name for p in tmp_path.glob("pgrag-import-*")) == [mine.name]


def test_an_import_that_stops_before_reading_removes_its_sorted_runs(
    db: str, vectors: list[np.ndarray], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(sources, "RUN_BYTES", 20_000)
    path = lone_rows(tmp_path, vectors, 40)

    result = CliRunner().invoke(main, ["--dsn", db, "import", str(path)])  # no model recorded

    assert result.exit_code == 1 and "--model" in result.output
    assert list(tmp_path.glob("pgrag-import-*")) == []


def test_without_a_model_the_message_names_one_of_the_installations_dimension(
    db: str, vectors: list[np.ndarray], tmp_path: Path
) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_bytes(b"".join(good_lines(vectors)))

    result = CliRunner().invoke(main, ["--dsn", db, "import", str(path)])

    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        "Error: this installation has no embedding model recorded yet: name the model that made "
        f"these embeddings with --model NAME (e.g. --model {LOCAL_MODEL_NAME}, if it made these "
        "384-dimension ones)."
    ]


def test_the_bundled_models_short_name_imports_as_its_recorded_name(
    db: str, conn: psycopg.Connection[Any], vectors: list[np.ndarray], tmp_path: Path
) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_bytes(b"".join(good_lines(vectors)))

    s = summary(run(db, str(path), "--model", "all-MiniLM-L6-v2"))

    assert (s["model"], s["documents_new"]) == (LOCAL_MODEL_NAME, 3)
    assert conn.execute("select model from pgrag.embedding_config").fetchone() == (
        LOCAL_MODEL_NAME,
    )


def test_a_dry_run_reports_the_bulk_path_the_import_would_take(
    db: str, vectors: list[np.ndarray], tmp_path: Path
) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_bytes(b"".join(good_lines(vectors)))

    dry = summary(run(db, str(path), *MODEL, "--dry-run"))
    real = summary(run(db, str(path), *MODEL))

    assert (dry["bulk_load"], real["bulk_load"]) == (True, True)


def table_with(conn: psycopg.Connection[Any], vectors: list[np.ndarray], columns: str = "") -> None:
    """Table kb (id, content, embedding float8[], ``columns``) of the four good rows."""
    more = f", {columns}" if columns else ""
    conn.execute(f"create table kb (id int primary key, content text, embedding float8[]{more})")
    for i, (text, vec) in enumerate(zip(TEXTS, vectors, strict=True)):
        conn.execute(
            "insert into kb (id, content, embedding) values (%s, %s, %s)",
            (i, text, [float(x) for x in vec]),
        )


def test_table_rows_the_checks_refuse_are_refused_alone(
    db: str, conn: psycopg.Connection[Any], vectors: list[np.ndarray]
) -> None:
    table_with(conn, vectors)
    conn.execute("insert into kb values (10, 'zero', array_fill(0::real, array[384]))")
    conn.execute("insert into kb values (11, 'hole', array_fill(null::real, array[384]))")
    conn.execute("insert into kb values (12, repeat('w ', 60000), %s)", ([0.1] * 384,))
    conn.commit()

    s = summary(run(db, "--table", "kb", *MODEL))

    assert {r["row"]: r["reason"][:40] for r in s["refused"]} == {
        "10": "embedding is all zeros (it has no direct",
        "11": "embedding holds a null",
        "12": "content longer than 100,000 characters (",
    }
    assert (s["documents_new"], s["chunks_imported"]) == (4, 4)


def test_a_table_rows_metadata_nested_five_thousand_deep_refuses_its_row_alone(
    db: str, conn: psycopg.Connection[Any], vectors: list[np.ndarray]
) -> None:
    table_with(conn, vectors, "metadata jsonb")
    conn.execute(
        "insert into kb values (9, 'deep', %s, "
        "('{\"a\": ' || repeat('[', 5000) || repeat(']', 5000) || '}')::jsonb)",
        ([0.1] * 384,),
    )
    conn.commit()

    s = summary(run(db, "--table", "kb", *MODEL))

    assert s["refused"] == [
        {"row": "9", "document": "public.kb#9", "reason": "metadata is nested too deeply"}
    ]
    assert (s["documents_new"], s["chunks_imported"]) == (4, 4)


def test_prune_with_a_collection_keeps_the_other_collections_documents(
    db: str, conn: psycopg.Connection[Any], vectors: list[np.ndarray]
) -> None:
    conn.execute("create table langchain_pg_collection (uuid uuid primary key, name varchar)")
    conn.execute(
        "create table langchain_pg_embedding (id varchar primary key, collection_id uuid, "
        "embedding vector, document varchar, cmetadata jsonb, custom_id varchar)"
    )
    conn.execute(
        "insert into langchain_pg_collection values "
        "('00000000-0000-0000-0000-00000000000a', 'A'), "
        "('00000000-0000-0000-0000-00000000000b', 'B')"
    )
    for i, (text, vec) in enumerate(zip(TEXTS, vectors, strict=True)):
        conn.execute(
            "insert into langchain_pg_embedding values (%s, %s, %s, %s, '{}', null)",
            (f"r{i}", f"00000000-0000-0000-0000-00000000000{'ab'[i % 2]}", vec, text),
        )
    conn.commit()
    table = ("--table", "langchain_pg_embedding")
    assert summary(run(db, *table, "--collection", "B", *MODEL))["documents_new"] == 2

    s = summary(run(db, *table, "--collection", "A", "--prune"))

    assert (s["documents_new"], s["documents_removed"]) == (2, 0)
    assert len(chunks(conn)) == 4


def test_a_file_named_another_way_is_the_same_source(
    db: str,
    vectors: list[np.ndarray],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_bytes(b"".join(good_lines(vectors)))
    monkeypatch.chdir(tmp_path)
    assert summary(run(db, "rows.jsonl", *MODEL))["documents_new"] == 3

    s = summary(run(db, str(tmp_path / "." / "rows.jsonl"), "--prune"))

    assert (s["documents_unchanged"], s["documents_new"], s["documents_removed"]) == (3, 0, 0)


def test_prune_removes_nothing_when_a_line_could_not_be_tied_to_its_document(
    db: str, conn: psycopg.Connection[Any], vectors: list[np.ndarray], tmp_path: Path
) -> None:
    path = tmp_path / "rows.jsonl"
    lines = good_lines(vectors)
    path.write_bytes(b"".join(lines))
    assert summary(run(db, str(path), *MODEL))["documents_new"] == 3
    path.write_bytes(b"".join(lines[:2]) + lines[2][:40] + b"\n" + lines[3])  # line 3 cut short

    result = run(db, str(path), "--prune")

    s = summary(result)
    assert (s["documents_refused"], s["documents_removed"]) == (1, 0)
    assert s["prune_skipped"] == (
        "1 rows could not be read far enough to tell their document (line 3): nothing removed; "
        "fix them and run again"
    )
    assert len(chunks(conn)) == 4


def test_a_line_named_like_an_earlier_rows_id_still_stops_prune_as_unreadable(
    db: str, vectors: list[np.ndarray], tmp_path: Path
) -> None:
    path = tmp_path / "rows.jsonl"
    named = {"id": "line 2", "content": TEXTS[0], "embedding": [float(x) for x in vectors[0]]}
    path.write_bytes(json.dumps(named).encode() + b"\nnot json\n")  # line 2 is FILE#line 2 too

    s = summary(run(db, str(path), *MODEL, "--prune"))

    assert (s["documents_new"], [r["row"] for r in s["refused"]]) == (1, ["line 2"])
    assert s["refused"][0]["reason"].startswith("not JSON")
    assert s["prune_skipped"] is not None


def test_parquet_metadata_dates_and_decimals_are_kept_as_text(
    db: str, conn: psycopg.Connection[Any], vectors: list[np.ndarray], tmp_path: Path
) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    import datetime
    import decimal

    meta = {
        "at": datetime.datetime(2026, 3, 1, 12, 30),
        "day": datetime.date(2026, 3, 1),
        "price": decimal.Decimal("9.90"),
    }
    records = [
        {"content": t, "embedding": [float(x) for x in v], "metadata": meta}
        for t, v in zip(TEXTS, vectors, strict=True)
    ]
    path = tmp_path / "rows.parquet"
    pq.write_table(pa.Table.from_pylist(records), path)

    s = summary(run(db, str(path), *MODEL))

    assert (s["documents_new"], s["refused"]) == (4, [])
    assert chunks(conn)[0][3] == {"at": "2026-03-01T12:30:00", "day": "2026-03-01", "price": "9.90"}


def test_parquet_values_python_cannot_hold_refuse_their_rows_alone(
    db: str, vectors: list[np.ndarray], tmp_path: Path
) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    emb = [[float(x) for x in v] for v in vectors]
    table = pa.table(
        {
            "content": TEXTS,
            "embedding": emb,
            # year 300,000 is a valid Parquet timestamp and no Python datetime
            "metadata": pa.array(
                [{"at": 0}, {"at": 0}, {"at": 0}, {"at": 9_000_000_000_000}],
                pa.struct([("at", pa.timestamp("s"))]),
            ),
            "tag": pa.array([b"a", b"b", b"c", b"d"]),
        }
    )
    path = tmp_path / "rows.parquet"
    pq.write_table(table, path)

    s = summary(run(db, str(path), *MODEL))

    assert [r["row"] for r in s["refused"]] == ["row 4"]
    assert s["refused"][0]["reason"].startswith("a value cannot be read (")
    assert s["documents_new"] == 3


def test_parquet_metadata_holding_bytes_refuses_its_row_alone(
    db: str, vectors: list[np.ndarray], tmp_path: Path
) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    records = [
        {
            "content": t,
            "embedding": [float(x) for x in v],
            "metadata": {"raw": b"x" if i == 3 else None},
        }
        for i, (t, v) in enumerate(zip(TEXTS, vectors, strict=True))
    ]
    path = tmp_path / "rows.parquet"
    pq.write_table(pa.Table.from_pylist(records), path)

    s = summary(run(db, str(path), *MODEL))

    assert [r["reason"] for r in s["refused"]] == [
        "metadata holds a value JSON cannot store (Object of type bytes is not JSON serializable)"
    ]
    assert s["documents_new"] == 3


def test_a_table_rows_values_the_import_cannot_read_refuse_that_row_alone(
    db: str, conn: psycopg.Connection[Any], vectors: list[np.ndarray]
) -> None:
    table_with(conn, vectors, "page numeric, source_uri text")
    huge = [1e300] * 384
    conn.execute("insert into kb values (7, 'page', %s, 1e30, 'kb/p.md')", ([0.1] * 384,))
    conn.execute("insert into kb values (8, 'huge', %s, 1, 'kb/h.md')", (huge,))
    conn.execute("insert into kb values (9, 'blank', %s, 1, '   ')", ([0.2] * 384,))
    conn.commit()

    s = summary(run(db, "--table", "kb", *MODEL))

    assert {r["row"]: r["reason"] for r in s["refused"]} == {
        "8": "embedding holds NaN, infinity or a number beyond 4-byte floats"
    }
    pages = dict(
        conn.execute(
            "select d.source_uri, c.page from pgrag.chunks as c join pgrag.documents as d "
            "on d.id = c.document_id where c.content in ('page', 'blank')"
        ).fetchall()
    )
    assert pages == {"kb/p.md": None, "public.kb#9": 1}  # no page 1e30; a blank source is none


def test_a_table_whose_metadata_is_text_is_one_line_naming_the_cast(
    db: str, conn: psycopg.Connection[Any], vectors: list[np.ndarray]
) -> None:
    table_with(conn, vectors, "metadata text")
    conn.commit()

    result = CliRunner().invoke(main, ["--dsn", db, "import", "--table", "kb", *MODEL])

    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        "Error: public.kb.metadata is text, not json or jsonb: import a view that casts it "
        "(metadata::jsonb as metadata, once every row holds a JSON object), or one without it."
    ]


def test_a_table_whose_embedding_cannot_be_cast_is_one_line_naming_the_view(
    db: str, conn: psycopg.Connection[Any]
) -> None:
    conn.execute("create table kb (id int primary key, content text, embedding jsonb)")
    conn.execute("insert into kb values (1, 'a', '[1, 2, 3]')")
    conn.commit()

    result = CliRunner().invoke(main, ["--dsn", db, "import", "--table", "kb", *MODEL])

    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "Error: public.kb cannot be read as pgrag reads it"
    )
    assert "select embedding::vector as embedding" in lines[0]


def test_a_llamaindex_node_whose_content_is_not_json_imports_in_id_order(
    db: str, conn: psycopg.Connection[Any], vectors: list[np.ndarray]
) -> None:
    conn.execute(
        "create table data_kb (id bigserial primary key, text varchar, metadata_ json, "
        "node_id varchar, embedding vector(384))"
    )
    for i, (text, vec) in enumerate(zip(TEXTS, vectors, strict=True)):
        meta = {"doc_id": "d1", "_node_content": "{not json" if i == 1 else '{"start_char_idx": 5}'}
        conn.execute(
            "insert into data_kb (text, metadata_, node_id, embedding) values (%s, %s, %s, %s)",
            (text, json.dumps(meta), f"n{i}", vec),
        )
    conn.commit()

    s = summary(run(db, "--table", "data_kb", *MODEL))

    assert (s["documents_new"], s["chunks_imported"], s["refused"]) == (1, 4, [])


def test_metadata_waiting_to_be_sorted_is_held_as_its_json_text(
    vectors: list[np.ndarray], tmp_path: Path
) -> None:
    # 8 KB of JSON that Python holds in some 130 KB: 2,000 such rows would take 260 MB.
    heavy = {"x": [[] for _ in range(2000)]}
    emb = [float(x) for x in vectors[0]]
    path = tmp_path / "heavy.jsonl"
    with path.open("w") as handle:
        for i in range(2000):
            handle.write(
                json.dumps({"content": f"row {i}", "embedding": emb, "metadata": heavy}) + "\n"
            )

    tracemalloc.start()
    try:
        source = open_file(path)
        peak = tracemalloc.get_traced_memory()[1]
        first = next(iter(source.rows))
    finally:
        tracemalloc.stop()
        source.close()

    assert peak < 64 * 2**20
    assert first.metadata == heavy


def test_a_keyword_index_pass_waits_for_another_pass_of_the_same_tenant(
    db: str, conn: psycopg.Connection[Any]
) -> None:
    conn.autocommit = True
    conn.execute("select pg_advisory_lock(%s, hashtext('acme'))", (load.PASS_LOCK,))
    done: list[int] = []
    other = threading.Thread(target=lambda: done.append(load.index_bulk_backlog(db, "acme")))
    other.start()
    waiting = None
    for _ in range(100):  # until the pass waits for the lock (at most 10 s)
        waiting = conn.execute(
            "select count(*) from pg_stat_activity where wait_event = 'advisory'"
        ).fetchone()
        if waiting == (1,):
            break
        time.sleep(0.1)

    conn.execute("select pg_advisory_unlock(%s, hashtext('acme'))", (load.PASS_LOCK,))
    other.join(30)

    assert waiting == (1,) and done == [0]
