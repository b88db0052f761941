"""``pgrag import``: rows that already have embeddings, from each source shape, on a real
database with real embeddings of the bundled model."""

from __future__ import annotations

import hashlib
import json
import os
import random
import sys
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest
from click.testing import CliRunner, Result

from pgrag.cli import main
from pgrag.db import connect, tenant_transaction
from pgrag.errors import Interrupted
from pgrag.importer import ImportOptions, import_source
from pgrag.importer import run as importer_run
from pgrag.importer.sources import open_file, pg_vectorize_model
from pgrag.pipeline.embedders import LOCAL_MODEL_NAME, vector_literal

TEXTS = [
    "Reset a forgotten password from the login page with the emailed link.",
    "Invoices are sent on the first business day of every month.",
    "The backup job copies the database to cold storage every night.",
    "Solar panels on the roof charge the battery during the day.",
]


@pytest.fixture(scope="module")
def vectors(local_embedder: Any) -> list[np.ndarray]:
    return [np.asarray(v, dtype=np.float32) for v in local_embedder.embed(TEXTS)]


def run(db: str, *args: str) -> Result:
    return CliRunner().invoke(main, ["--dsn", db, "import", *args, "--json"])


def summary(result: Result) -> dict[str, Any]:
    assert result.exit_code in (0, 1), result.output
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def make_supabase_table(conn: psycopg.Connection[Any], vectors: list[np.ndarray]) -> None:
    """The Supabase hybrid-search guide's table (plus its optional metadata column)."""
    conn.execute(
        "create table public.documents (id bigint primary key generated always as identity, "
        "content text, metadata jsonb, "
        "fts tsvector generated always as (to_tsvector('english', content)) stored, "
        "embedding vector(384))"
    )
    sources = ["guide.md", "guide.md", None, None]
    for text, vec, src in zip(TEXTS, vectors, sources, strict=True):
        meta = {"source": src, "team": "docs"} if src else {"team": "billing"}
        conn.execute(
            "insert into public.documents (content, metadata, embedding) values (%s, %s, %s)",
            (text, json.dumps(meta), vector_literal(vec)),
        )
    conn.commit()


def import_guide_table(db: str, conn: psycopg.Connection[Any], vectors: list[np.ndarray]) -> None:
    """The Supabase guide's table, imported once into the default tenant."""
    make_supabase_table(conn, vectors)
    assert run(db, "--table", "documents", "--model", LOCAL_MODEL_NAME).exit_code == 0


def lone_row(path: Path | str, text: str) -> str:
    """The document of a file's row without a source or an id: named after its text."""
    return f"{path}#sha256:{hashlib.sha256(text.encode()).hexdigest()[:16]}"


def chunks(conn: psycopg.Connection[Any], tenant: str = "default") -> list[tuple[Any, ...]]:
    return conn.execute(
        "select d.source_uri, c.chunk_index, c.content, c.metadata, c.embedding::text "
        "from pgrag.chunks as c join pgrag.documents as d on d.id = c.document_id "
        "where c.tenant_id = %s order by d.source_uri, c.chunk_index",
        (tenant,),
    ).fetchall()


def test_the_supabase_guide_table_imports_searchable_chunks_with_the_same_embeddings(
    db: str, conn: psycopg.Connection[Any], vectors: list[np.ndarray]
) -> None:
    make_supabase_table(conn, vectors)

    result = run(db, "--table", "documents", "--model", LOCAL_MODEL_NAME)

    assert result.exit_code == 0, result.output
    s = summary(result)
    assert (s["documents_new"], s["chunks_imported"], s["refused"]) == (3, 4, [])
    assert s["ignored_columns"] == {"fts": "pgrag keeps its own BM25 index of the content"}
    # every imported chunk holds the source row's embedding (cosine 1)
    same = conn.execute(
        "select min(1 - (c.embedding <=> d.embedding)) from pgrag.chunks as c "
        "join public.documents as d on d.content = c.content"
    ).fetchone()
    assert same is not None and same[0] > 0.99999
    with tenant_transaction(conn, "default"):
        hybrid = conn.execute(
            "select content from hybrid_search(%s, %s::vector, 1)",
            ("forgotten password", vector_literal(vectors[0])),
        ).fetchall()
        vector = conn.execute(
            "select content, similarity from vector_search(%s::vector, 1)",
            (vector_literal(vectors[2]),),
        ).fetchall()
        keyword = conn.execute("select content from keyword_search('invoices', 1)").fetchall()
    assert hybrid == [(TEXTS[0],)]
    assert vector[0][0] == TEXTS[2] and vector[0][1] > 0.99999
    assert keyword == [(TEXTS[1],)]


def test_a_table_of_another_database_imports_as_from_pgrags_own(
    db: str, conn: psycopg.Connection[Any], empty_db: str, vectors: list[np.ndarray]
) -> None:
    """The application's database has the Supabase guide's table and no pgrag."""
    with connect(empty_db) as app:
        app.execute("create extension vector")
        app.commit()
    with connect(empty_db) as app:
        make_supabase_table(app, vectors)

    result = run(db, "--table", "documents", "--source-dsn", empty_db, "--model", LOCAL_MODEL_NAME)

    s = summary(result)
    assert result.exit_code == 0, result.output
    assert (s["documents_new"], s["chunks_imported"], s["refused"]) == (3, 4, [])
    with connect(empty_db) as app:  # host[:port]/dbname: apart from another server's "app"
        port = "" if app.info.port == 5432 else f":{app.info.port}"
        app_name = f"{app.info.host}{port}/{app.info.dbname}"
    assert s["source"] == f"table {app_name}.public.documents (documents)"
    rows = chunks(conn)
    assert [r[2] for r in rows if r[0] == "guide.md"] == TEXTS[:2]
    assert sorted(r[0] for r in rows if r[0] != "guide.md") == [
        f"{app_name}.public.documents#3",
        f"{app_name}.public.documents#4",
    ]
    assert conn.execute("select to_regclass('public.documents')").fetchone() == (None,)


def test_a_source_database_without_pgvector_imports_embeddings_stored_as_arrays(
    db: str, conn: psycopg.Connection[Any], empty_db: str, vectors: list[np.ndarray]
) -> None:
    with connect(empty_db) as app:
        app.execute(
            "create table public.documents "
            "(id bigint primary key, content text, embedding float8[])"
        )
        for i, (text, vec) in enumerate(zip(TEXTS, vectors, strict=True)):
            app.execute(
                "insert into public.documents values (%s, %s, %s)",
                (i, text, [float(x) for x in vec]),
            )
        app.commit()

    result = run(db, "--table", "documents", "--source-dsn", empty_db, "--model", LOCAL_MODEL_NAME)

    assert result.exit_code == 0, result.output
    assert summary(result)["chunks_imported"] == 4
    same = conn.execute(
        "select min(1 - (c.embedding <=> %s::vector)) from pgrag.chunks as c where c.content = %s",
        (vector_literal(vectors[1]), TEXTS[1]),
    ).fetchone()
    assert same is not None and same[0] > 0.99999


def test_embeddings_stored_as_halfvec_import_at_half_precision(
    db: str, conn: psycopg.Connection[Any], vectors: list[np.ndarray]
) -> None:
    conn.execute(
        "create table public.documents "
        "(id bigint primary key, content text, embedding halfvec(384))"
    )
    for i, (text, vec) in enumerate(zip(TEXTS, vectors, strict=True)):
        conn.execute(
            "insert into public.documents values (%s, %s, %s::halfvec)",
            (i, text, vector_literal(vec)),
        )
    conn.commit()

    result = run(db, "--table", "documents", "--model", LOCAL_MODEL_NAME)

    assert result.exit_code == 0, result.output
    assert summary(result)["chunks_imported"] == 4
    same = conn.execute(
        "select min(1 - (c.embedding <=> d.embedding::vector)) from pgrag.chunks as c "
        "join public.documents as d on d.content = c.content"
    ).fetchone()
    assert same is not None and same[0] > 0.99999  # the stored half-precision values, as vectors


def test_a_view_naming_another_tables_columns_imports_in_the_documents_shape(
    db: str, conn: psycopg.Connection[Any], vectors: list[np.ndarray]
) -> None:
    conn.execute(
        "create table public.kb (pk int primary key, doc text, chunk text, vec vector(384))"
    )
    for i, (text, vec) in enumerate(zip(TEXTS, vectors, strict=True)):
        conn.execute(
            "insert into public.kb values (%s, %s, %s, %s)",
            (i, "manual" if i < 2 else f"note-{i}", text, vector_literal(vec)),
        )
    conn.execute(
        "create view public.kb_for_pgrag as select pk as id, doc as source_uri, "
        "chunk as content, vec as embedding from public.kb"
    )
    conn.commit()

    result = run(db, "--table", "kb_for_pgrag", "--model", LOCAL_MODEL_NAME)

    s = summary(result)
    assert result.exit_code == 0, result.output
    assert (s["documents_new"], s["chunks_imported"], s["unmapped_columns"]) == (3, 4, [])
    assert [r[2] for r in chunks(conn) if r[0] == "manual"] == TEXTS[:2]


def test_a_table_of_another_shape_is_one_line_naming_the_way_in(
    db: str, conn: psycopg.Connection[Any]
) -> None:
    conn.execute("create table public.kb (pk int primary key, chunk text, vec vector(384))")
    conn.commit()

    result = CliRunner().invoke(main, ["--dsn", db, "import", "--table", "kb"])

    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "chunk, pk, vec" in lines[0] and "create view" in lines[0]


def test_embeddings_kept_as_text_are_one_line_and_nothing_is_written(
    db: str, conn: psycopg.Connection[Any]
) -> None:
    conn.execute("create table public.documents (id int primary key, content text, embedding text)")
    conn.execute("insert into public.documents values (1, 'Some text.', '[0.1, 0.2]')")
    conn.commit()

    result = CliRunner().invoke(
        main, ["--dsn", db, "import", "--table", "documents", "--model", LOCAL_MODEL_NAME]
    )

    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "public.documents cannot be read" in lines[0], lines
    assert "embedding::vector" in lines[0]
    assert conn.execute("select count(*) from pgrag.documents").fetchone() == (0,)


def test_an_unreachable_source_database_is_one_line_naming_the_option(db: str) -> None:
    unreachable = "postgresql://nobody@127.0.0.1:1/app?connect_timeout=2"

    result = CliRunner().invoke(
        main, ["--dsn", db, "import", "--table", "documents", "--source-dsn", unreachable]
    )

    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "--source-dsn" in lines[0] and "127.0.0.1" in lines[0], lines


def test_a_missing_table_names_the_source_database(db: str, empty_db: str) -> None:
    result = CliRunner().invoke(
        main, ["--dsn", db, "import", "--table", "documents", "--source-dsn", empty_db]
    )

    assert result.exit_code == 1
    assert "no table 'documents' in the source database " in result.output


def test_source_dsn_without_a_table_is_a_usage_error(db: str, tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main, ["--dsn", db, "import", str(tmp_path / "x.jsonl"), "--source-dsn", db]
    )

    assert result.exit_code == 2 and "--source-dsn goes with --table" in result.output


def test_a_source_dsn_in_the_environment_leaves_a_file_import_alone(
    db: str, conn: psycopg.Connection[Any], vectors: list[np.ndarray], tmp_path: Path
) -> None:
    path = write_jsonl(tmp_path / "rows.jsonl", vectors)

    result = CliRunner().invoke(
        main,
        ["--dsn", db, "import", str(path), "--model", LOCAL_MODEL_NAME, "--json"],
        env={"PGRAG_IMPORT_SOURCE_DSN": "postgresql://nobody@127.0.0.1:1/app"},
    )

    assert result.exit_code == 0, result.output
    assert summary(result)["chunks_imported"] == 4


def test_rows_sharing_a_source_become_one_document_with_ordered_chunks(
    db: str, conn: psycopg.Connection[Any], vectors: list[np.ndarray]
) -> None:
    make_supabase_table(conn, vectors)

    assert run(db, "--table", "documents", "--model", LOCAL_MODEL_NAME).exit_code == 0

    rows = chunks(conn)
    assert [(r[0], r[1], r[2]) for r in rows] == [
        ("guide.md", 0, TEXTS[0]),
        ("guide.md", 1, TEXTS[1]),
        ("public.documents#3", 0, TEXTS[2]),
        ("public.documents#4", 0, TEXTS[3]),
    ]
    assert rows[0][3] == {"source": "guide.md", "team": "docs", "source_id": "1"}
    meta = conn.execute(
        "select metadata from pgrag.documents where source_uri = 'guide.md'"
    ).fetchone()
    assert meta is not None and meta[0]["team"] == "docs"


def test_a_reimport_skips_unchanged_documents_and_replaces_only_a_changed_one(
    db: str, conn: psycopg.Connection[Any], vectors: list[np.ndarray]
) -> None:
    import_guide_table(db, conn, vectors)
    kept = conn.execute("select id from pgrag.chunks where content = %s", (TEXTS[2],)).fetchone()

    again = summary(run(db, "--table", "documents"))
    conn.execute("update public.documents set content = content || ' Monthly.' where id = 2")
    conn.commit()
    changed = summary(run(db, "--table", "documents"))

    assert (again["documents_unchanged"], again["chunks_imported"]) == (3, 0)
    assert (changed["documents_changed"], changed["documents_unchanged"]) == (1, 2)
    assert changed["chunks_imported"] == 2
    assert (
        conn.execute("select id from pgrag.chunks where content = %s", (TEXTS[2],)).fetchone()
        == kept
    )
    assert conn.execute(
        "select count(*) from pgrag.chunks where content like '%%Monthly.'"
    ).fetchone() == (1,)


def test_prune_removes_the_documents_whose_rows_left_the_source(
    db: str, conn: psycopg.Connection[Any], vectors: list[np.ndarray], tmp_path: Path
) -> None:
    make_supabase_table(conn, vectors)
    other = write_jsonl(tmp_path / "other.jsonl", vectors)
    assert run(db, "--table", "documents", "--model", LOCAL_MODEL_NAME).exit_code == 0
    assert run(db, str(other)).exit_code == 0
    conn.execute("delete from public.documents where metadata ->> 'source' = 'guide.md'")
    conn.commit()

    s = summary(run(db, "--table", "documents", "--prune"))

    assert (s["documents_unchanged"], s["documents_removed"]) == (2, 1)
    # guide.md is gone; the table's other documents and the file's stay
    assert {r[0] for r in chunks(conn)} == {
        "public.documents#3",
        "public.documents#4",
        "kb/a.md",
        lone_row(other, TEXTS[2]),
        lone_row(other, TEXTS[3]),
    }


def test_prune_of_a_source_without_rows_left_removes_its_documents(
    db: str, conn: psycopg.Connection[Any], vectors: list[np.ndarray]
) -> None:
    import_guide_table(db, conn, vectors)
    conn.execute("delete from public.documents")
    conn.commit()

    s = summary(run(db, "--table", "documents", "--prune"))

    assert (s["rows_read"], s["documents_removed"]) == (0, 3)
    assert chunks(conn) == []


def test_prune_keeps_a_document_whose_rows_were_refused(
    db: str, conn: psycopg.Connection[Any], vectors: list[np.ndarray]
) -> None:
    import_guide_table(db, conn, vectors)
    conn.execute(
        "update public.documents set content = '' where metadata ->> 'source' = 'guide.md'"
    )
    conn.commit()

    result = run(db, "--table", "documents", "--prune")

    s = summary(result)
    assert result.exit_code == 1 and (s["documents_refused"], s["documents_removed"]) == (1, 0)
    assert [r[2] for r in chunks(conn) if r[0] == "guide.md"] == TEXTS[:2]  # as before


def test_prune_with_dry_run_counts_and_removes_nothing(
    db: str, conn: psycopg.Connection[Any], vectors: list[np.ndarray]
) -> None:
    import_guide_table(db, conn, vectors)
    conn.execute("delete from public.documents where metadata ->> 'source' is null")
    conn.commit()

    s = summary(run(db, "--table", "documents", "--prune", "--dry-run"))

    assert s["documents_removed"] == 2
    assert len(chunks(conn)) == 4


def test_langchain_tables_import_grouped_by_source_with_their_collection(
    db: str, conn: psycopg.Connection[Any], vectors: list[np.ndarray]
) -> None:
    conn.execute(
        "create table langchain_pg_collection (uuid uuid primary key, name varchar not null, "
        "cmetadata json)"
    )
    conn.execute(
        "create table langchain_pg_embedding (id varchar primary key, collection_id uuid "
        "references langchain_pg_collection (uuid), embedding vector, document varchar, "
        "cmetadata jsonb, custom_id varchar)"
    )
    conn.execute(
        "insert into langchain_pg_collection values "
        "('00000000-0000-0000-0000-000000000001', 'handbook', null), "
        "('00000000-0000-0000-0000-000000000002', 'other', null)"
    )
    rows = [
        ("a", 1, {"source": "hr.pdf", "page": 2, "start_index": 0}, None),
        ("b", 1, {"source": "hr.pdf", "page": 1, "start_index": 40}, None),
        ("c", 1, {}, "note-7"),
        ("d", 2, {"source": "elsewhere.pdf"}, None),
    ]
    for (rid, coll, meta, custom), text, vec in zip(rows, TEXTS, vectors, strict=True):
        conn.execute(
            "insert into langchain_pg_embedding values (%s, %s, %s::vector, %s, %s, %s)",
            (
                rid,
                f"00000000-0000-0000-0000-00000000000{coll}",
                vector_literal(vec),
                text,
                json.dumps(meta),
                custom,
            ),
        )
    conn.commit()

    result = run(
        db,
        "--table",
        "langchain_pg_embedding",
        "--collection",
        "handbook",
        "--model",
        LOCAL_MODEL_NAME,
    )

    assert result.exit_code == 0, result.output
    got = chunks(conn)
    assert [(r[0], r[1], r[2]) for r in got] == [
        ("hr.pdf", 0, TEXTS[1]),  # page 1 first
        ("hr.pdf", 1, TEXTS[0]),
        ("note-7", 0, TEXTS[2]),
    ]
    assert got[0][3]["collection"] == "handbook" and got[0][3]["page"] == 1
    pages = conn.execute("select page from pgrag.chunks order by page nulls last").fetchall()
    assert pages == [(1,), (2,), (None,)]


def test_a_llamaindex_data_table_imports_grouped_by_its_doc_id(
    db: str, conn: psycopg.Connection[Any], vectors: list[np.ndarray]
) -> None:
    conn.execute(
        "create table data_kb (id bigserial primary key, text varchar not null, "
        "metadata_ json, node_id varchar, embedding vector(384))"
    )
    metas = [
        {"doc_id": "d1", "file_name": "manual.txt", "_node_content": '{"start_char_idx": 0}'},
        {"doc_id": "d1", "file_name": "manual.txt", "_node_content": '{"start_char_idx": 90}'},
        {"ref_doc_id": "d2", "file_name": "faq.txt", "_node_type": "TextNode"},
        {},
    ]
    for i, (text, vec, meta) in enumerate(zip(TEXTS, vectors, metas, strict=True)):
        conn.execute(
            "insert into data_kb (text, metadata_, node_id, embedding) values (%s, %s, %s, %s)",
            (text, json.dumps(meta), f"node-{i}", vector_literal(vec)),
        )
    conn.commit()

    result = run(db, "--table", "data_kb", "--model", LOCAL_MODEL_NAME)

    assert result.exit_code == 0, result.output
    got = chunks(conn)
    assert [(r[0], r[1], r[2]) for r in got] == [
        ("d1", 0, TEXTS[0]),
        ("d1", 1, TEXTS[1]),
        ("d2", 0, TEXTS[2]),
        ("public.data_kb#node-3", 0, TEXTS[3]),
    ]
    assert got[2][3] == {"ref_doc_id": "d2", "file_name": "faq.txt", "source_id": "node-2"}
    titles = conn.execute("select title from pgrag.documents order by source_uri").fetchall()
    assert titles[:2] == [("manual.txt",), ("faq.txt",)]


def test_a_haystack_table_imports_grouped_by_file_in_split_order(
    db: str, conn: psycopg.Connection[Any], vectors: list[np.ndarray]
) -> None:
    # PgvectorDocumentStore's table, as pgvector-haystack creates it
    conn.execute(
        "create table haystack_documents (id varchar(128) primary key, embedding vector(384), "
        "content text, blob_data bytea, blob_meta json, blob_mime_type varchar(255), meta json)"
    )
    metas = [
        {"file_path": "manual.pdf", "source_id": "p1", "page_number": 2, "split_id": 0},
        {"file_path": "manual.pdf", "source_id": "p1", "page_number": 1, "split_id": 1},
        {"source_id": "p2", "split_id": 1, "split_idx_start": 70},
        {"source_id": "p2", "split_id": 0, "split_idx_start": 0},
    ]
    for i, (text, vec, meta) in enumerate(zip(TEXTS, vectors, metas, strict=True)):
        conn.execute(
            "insert into haystack_documents (id, embedding, content, meta) values (%s, %s, %s, %s)",
            (f"h{i}", vector_literal(vec), text, json.dumps(meta)),
        )
    conn.commit()

    s = summary(run(db, "--table", "haystack_documents", "--model", LOCAL_MODEL_NAME))

    assert (s["chunks_imported"], s["unmapped_columns"]) == (4, [])
    got = chunks(conn)
    assert [(r[0], r[1], r[2]) for r in got] == [
        ("manual.pdf", 0, TEXTS[1]),  # page 1 first
        ("manual.pdf", 1, TEXTS[0]),
        ("p2", 0, TEXTS[3]),  # the split that starts first
        ("p2", 1, TEXTS[2]),
    ]
    # the row's id is the chunk's source_id; Haystack's (the split's parent) its parent_id
    assert got[0][3] == {
        "file_path": "manual.pdf",
        "page_number": 1,
        "split_id": 1,
        "parent_id": "p1",
        "source_id": "h1",
    }
    pages = conn.execute("select page from pgrag.chunks order by page nulls last").fetchall()
    assert pages == [(1,), (2,), (None,), (None,)]


def test_a_langchain4j_table_imports_grouped_by_file_in_segment_order(
    db: str, conn: psycopg.Connection[Any], vectors: list[np.ndarray]
) -> None:
    # PgVectorEmbeddingStore's table, its metadata stored as one JSON value (the default)
    conn.execute(
        "create table embeddings (embedding_id uuid primary key, embedding vector(384), "
        "text text null, metadata json null)"
    )
    metas = [
        {"absolute_directory_path": "/srv/docs", "file_name": "faq.txt", "index": "1"},
        {"absolute_directory_path": "/srv/docs", "file_name": "faq.txt", "index": "0"},
        {"url": "https://example.com/billing", "index": "0"},
        {},
    ]
    for i, (text, vec, meta) in enumerate(zip(TEXTS, vectors, metas, strict=True)):
        conn.execute(
            "insert into embeddings values (%s, %s, %s, %s)",
            (
                f"00000000-0000-0000-0000-00000000000{i}",
                vector_literal(vec),
                text,
                json.dumps(meta),
            ),
        )
    conn.commit()

    s = summary(run(db, "--table", "embeddings", "--model", LOCAL_MODEL_NAME))

    assert (s["chunks_imported"], s["unmapped_columns"]) == (4, [])
    got = chunks(conn)
    assert [(r[0], r[1], r[2]) for r in got] == [
        ("/srv/docs/faq.txt", 0, TEXTS[1]),  # segment 0 first
        ("/srv/docs/faq.txt", 1, TEXTS[0]),
        ("https://example.com/billing", 0, TEXTS[2]),
        ("public.embeddings#00000000-0000-0000-0000-000000000003", 0, TEXTS[3]),
    ]
    titles = conn.execute("select title from pgrag.documents order by source_uri").fetchall()
    assert titles[0] == ("faq.txt",)


def test_a_spring_ai_vector_store_imports_grouped_by_file_name_in_page_order(
    db: str, conn: psycopg.Connection[Any], vectors: list[np.ndarray]
) -> None:
    # PgVectorStore's table; its PDF readers name the file and the page, nothing else
    conn.execute(
        "create table vector_store (id uuid primary key, content text, metadata json, "
        "embedding vector(384))"
    )
    metas = [
        {"file_name": "guide.pdf", "page_number": 3},
        {"file_name": "guide.pdf", "page_number": 1},
        {"file_name": "other.pdf", "page_number": 1},
        {"file_name": "guide.pdf", "page_number": 2},
    ]
    for i, (text, vec, meta) in enumerate(zip(TEXTS, vectors, metas, strict=True)):
        conn.execute(
            "insert into vector_store values (%s, %s, %s, %s)",
            (
                f"00000000-0000-0000-0000-00000000000{i}",
                text,
                json.dumps(meta),
                vector_literal(vec),
            ),
        )
    conn.commit()

    s = summary(run(db, "--table", "vector_store", "--model", LOCAL_MODEL_NAME))

    assert (s["chunks_imported"], s["unmapped_columns"]) == (4, [])
    got = chunks(conn)
    assert [(r[0], r[1], r[2]) for r in got] == [
        ("guide.pdf", 0, TEXTS[1]),
        ("guide.pdf", 1, TEXTS[3]),
        ("guide.pdf", 2, TEXTS[0]),
        ("other.pdf", 0, TEXTS[2]),
    ]
    pages = conn.execute("select page from pgrag.chunks order by page").fetchall()
    assert pages == [(1,), (1,), (2,), (3,)]


def make_pgai_store(conn: psycopg.Connection[Any], vectors: list[np.ndarray]) -> None:
    """A source table and the store and view a pgai vectorizer makes for it (its
    ``_vectorizer_create_target_table``: the source's key, chunk_seq, chunk, embedding)."""
    conn.execute("create table blog (id int primary key, title text, contents text)")
    conn.execute(
        "create table blog_contents_embeddings_store ("
        "embedding_uuid uuid not null primary key default gen_random_uuid(), "
        "id int not null, chunk_seq int not null, chunk text not null, "
        "embedding vector(384) not null, unique (id, chunk_seq), "
        "foreign key (id) references blog (id) on delete cascade)"
    )
    conn.execute(
        "create view blog_contents_embeddings as select t.embedding_uuid, t.chunk_seq, "
        "t.chunk, t.embedding, s.* from blog as s join blog_contents_embeddings_store as t "
        "on t.id = s.id"
    )
    conn.execute(
        "insert into blog values (1, 'Accounts', %s), (2, 'Backups', %s)",
        (" ".join(TEXTS[:2]), " ".join(TEXTS[2:])),
    )
    for i, (text, vec) in enumerate(zip(TEXTS, vectors, strict=True)):
        conn.execute(  # stored out of order: chunk_seq orders them
            "insert into blog_contents_embeddings_store (id, chunk_seq, chunk, embedding) "
            "values (%s, %s, %s, %s)",
            (1 + i // 2, 1 - i % 2, text, vector_literal(vec)),
        )
    conn.commit()


def test_a_pgai_store_imports_one_document_per_source_row_in_chunk_order(
    db: str, conn: psycopg.Connection[Any], vectors: list[np.ndarray]
) -> None:
    make_pgai_store(conn, vectors)

    result = run(db, "--table", "blog_contents_embeddings_store", "--model", LOCAL_MODEL_NAME)

    assert result.exit_code == 0, result.output
    assert summary(result)["unmapped_columns"] == []
    got = chunks(conn)
    store = "public.blog_contents_embeddings_store"
    assert [(r[0], r[1], r[2]) for r in got] == [
        (f"{store}#id=1", 0, TEXTS[1]),
        (f"{store}#id=1", 1, TEXTS[0]),
        (f"{store}#id=2", 0, TEXTS[3]),
        (f"{store}#id=2", 1, TEXTS[2]),
    ]
    uuids = dict(
        conn.execute("select chunk, embedding_uuid::text from blog_contents_embeddings_store")
    )
    assert got[0][3] == {"id": 1, "source_id": uuids[TEXTS[1]]}
    same = conn.execute(  # every chunk holds its store row's embedding
        "select min(1 - (c.embedding <=> t.embedding)) from pgrag.chunks as c "
        "join blog_contents_embeddings_store as t on t.chunk = c.content"
    ).fetchone()
    assert same is not None and same[0] > 0.99999
    titles = conn.execute("select title from pgrag.documents order by source_uri").fetchall()
    assert titles == [("Accounts",), ("Backups",)]


def test_a_pgai_view_is_one_line_naming_its_store_table(
    db: str, conn: psycopg.Connection[Any], vectors: list[np.ndarray]
) -> None:
    make_pgai_store(conn, vectors)

    result = CliRunner().invoke(
        main, ["--dsn", db, "import", "--table", "blog_contents_embeddings"]
    )

    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "import the store table itself" in lines[0], result.output
    assert conn.execute("select count(*) from pgrag.chunks").fetchone() == (0,)


PRODUCTS = [
    ("Password reset", "Reset a forgotten password from the login page."),
    ("Invoices", "Invoices are sent on the first business day of every month."),
    ("Backups", "The backup job copies the database to cold storage every night."),
]


def make_pg_vectorize_job(
    conn: psycopg.Connection[Any], local_embedder: Any, transformer: str
) -> list[str]:
    """A source table and what a pg_vectorize job (``table_method`` join) makes for it: its
    ``vectorize.job`` row and ``vectorize._embeddings_<job>``, each row embedded from the
    job's columns joined with ', ', as pg_vectorize does. Returns the texts embedded."""
    conn.execute("create table products (product_id int primary key, name text, about text)")
    conn.execute("create schema vectorize")
    conn.execute(
        "create table vectorize.job (job_id bigserial, name text not null unique, "
        "index_dist_type text not null default 'pgv_hsnw_cosine', transformer text not null, "
        "params jsonb not null)"
    )
    conn.execute(
        "create table vectorize._embeddings_product_search (product_id int unique not null, "
        "embeddings vector(384) not null, "
        "updated_at timestamp with time zone default now() not null, "
        "foreign key (product_id) references products (product_id) on delete cascade)"
    )
    params = {
        "schema": "public",
        "relation": "products",
        "columns": ["name", "about"],
        "primary_key": "product_id",
        "pkey_type": "integer",
        "table_method": "join",
        "schedule": "realtime",
    }
    conn.execute(
        "insert into vectorize.job (name, transformer, params) values ('product_search', %s, %s)",
        (transformer, json.dumps(params)),
    )
    texts = [f"{name}, {about}" for name, about in PRODUCTS]
    for i, ((name, about), vec) in enumerate(
        zip(PRODUCTS, local_embedder.embed(texts), strict=True), start=1
    ):
        conn.execute("insert into products values (%s, %s, %s)", (i, name, about))
        conn.execute(
            "insert into vectorize._embeddings_product_search (product_id, embeddings) "
            "values (%s, %s)",
            (i, vector_literal(np.asarray(vec, dtype=np.float32))),
        )
    conn.commit()
    return texts


def test_a_pg_vectorize_job_imports_each_source_row_with_the_model_it_names(
    db: str, conn: psycopg.Connection[Any], local_embedder: Any
) -> None:
    texts = make_pg_vectorize_job(conn, local_embedder, "sentence-transformers/all-MiniLM-L6-v2")

    result = run(db, "--table", "vectorize._embeddings_product_search")  # no --model

    assert result.exit_code == 0, result.output
    assert summary(result)["model"] == LOCAL_MODEL_NAME
    assert summary(result)["unmapped_columns"] == []
    got = chunks(conn)
    table = "vectorize._embeddings_product_search"
    assert [(r[0], r[1], r[2]) for r in got] == [
        (f"{table}#product_id={i}", 0, text) for i, text in enumerate(texts, start=1)
    ]
    assert got[0][3]["product_id"] == 1
    same = conn.execute(  # every chunk holds its row's embedding
        "select min(1 - (c.embedding <=> e.embeddings)) from pgrag.chunks as c "
        "join pgrag.documents as d on d.id = c.document_id "
        "join vectorize._embeddings_product_search as e "
        "on d.source_uri like '%%=' || e.product_id"
    ).fetchone()
    assert same is not None and same[0] > 0.99999


def test_a_pg_vectorize_table_without_its_job_is_one_line_naming_the_job(
    db: str, conn: psycopg.Connection[Any], local_embedder: Any
) -> None:
    make_pg_vectorize_job(conn, local_embedder, "sentence-transformers/all-MiniLM-L6-v2")
    conn.execute("delete from vectorize.job")
    conn.commit()

    result = CliRunner().invoke(
        main, ["--dsn", db, "import", "--table", "vectorize._embeddings_product_search"]
    )

    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "records no such job" in lines[0], result.output
    assert conn.execute("select count(*) from pgrag.chunks").fetchone() == (0,)


def test_a_pg_vectorize_job_naming_a_column_its_source_lacks_is_one_line(
    db: str, conn: psycopg.Connection[Any], local_embedder: Any
) -> None:
    make_pg_vectorize_job(conn, local_embedder, "sentence-transformers/all-MiniLM-L6-v2")
    conn.execute("alter table products drop column about")
    conn.commit()

    result = CliRunner().invoke(
        main, ["--dsn", db, "import", "--table", "vectorize._embeddings_product_search"]
    )

    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert "'product_search'" in lines[0] and "does not have (about)" in lines[0]
    assert conn.execute("select count(*) from pgrag.chunks").fetchone() == (0,)


def make_appended_pg_vectorize_job(
    conn: psycopg.Connection[Any], local_embedder: Any, embedded: int
) -> list[str]:
    """A source table and what a pg_vectorize job of ``table_method`` append makes of it: its
    ``vectorize.job`` row and two columns of the table itself, ``<job>_embeddings`` and
    ``<job>_updated_at``, filled for the first ``embedded`` rows (the others wait for
    pg_vectorize's worker). Returns the texts embedded."""
    conn.execute(
        "create table products (product_id int primary key, title text, about text, "
        "price numeric, product_search_embeddings vector(384), "
        "product_search_updated_at timestamp with time zone)"
    )
    conn.execute("create schema vectorize")
    conn.execute(
        "create table vectorize.job (job_id bigserial, name text not null unique, "
        "transformer text not null, params jsonb not null)"
    )
    params = {
        "schema": "public",
        "relation": "products",
        "columns": ["title", "about"],
        "primary_key": "product_id",
        "table_method": "append",
    }
    conn.execute(
        "insert into vectorize.job (name, transformer, params) values ('product_search', "
        "'sentence-transformers/all-MiniLM-L6-v2', %s)",
        (json.dumps(params),),
    )
    texts = [f"{title}, {about}" for title, about in PRODUCTS]
    for i, ((title, about), vec) in enumerate(
        zip(PRODUCTS, local_embedder.embed(texts), strict=True), start=1
    ):
        emb = vector_literal(np.asarray(vec, dtype=np.float32)) if i <= embedded else None
        conn.execute(
            "insert into products values (%s, %s, %s, 9.5, %s, now())", (i, title, about, emb)
        )
    conn.commit()
    return texts


def test_a_pg_vectorize_job_appending_to_its_source_imports_each_embedded_row(
    db: str, conn: psycopg.Connection[Any], local_embedder: Any
) -> None:
    texts = make_appended_pg_vectorize_job(conn, local_embedder, embedded=2)

    result = run(db, "--table", "products")  # no --model: the job names it

    assert result.exit_code == 1  # the row pg_vectorize has not embedded yet is refused
    s = summary(result)
    assert [(r["row"], r["reason"]) for r in s["refused"]] == [("3", "no embedding")]
    assert (s["model"], s["unmapped_columns"]) == (LOCAL_MODEL_NAME, ["price"])
    got = chunks(conn)
    assert [(r[0], r[2], r[3]) for r in got] == [
        (f"public.products#product_id={i}", text, {"product_id": i, "source_id": str(i)})
        for i, text in enumerate(texts[:2], start=1)
    ]
    titles = conn.execute("select title from pgrag.documents order by source_uri").fetchall()
    assert titles == [(PRODUCTS[0][0],), (PRODUCTS[1][0],)]


def test_a_table_holding_two_appended_pg_vectorize_jobs_is_one_line_naming_them(
    db: str, conn: psycopg.Connection[Any], local_embedder: Any
) -> None:
    make_appended_pg_vectorize_job(conn, local_embedder, embedded=3)
    conn.execute(
        "alter table products add column by_about_embeddings vector(384), "
        "add column by_about_updated_at timestamp with time zone"
    )
    conn.commit()

    result = CliRunner().invoke(main, ["--dsn", db, "import", "--table", "products"])

    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "(by_about, product_search)" in lines[0], result.output
    assert conn.execute("select count(*) from pgrag.chunks").fetchone() == (0,)


def test_pg_vectorize_transformers_name_the_models_pgrag_embeds_queries_with() -> None:
    assert pg_vectorize_model("sentence-transformers/all-MiniLM-L6-v2") == "all-MiniLM-L6-v2"
    assert pg_vectorize_model("openai/text-embedding-3-small") == "text-embedding-3-small"
    assert pg_vectorize_model("ollama/wizardlm2:7b") is None


def test_embeddings_of_another_dimension_are_refused_in_one_line(
    db: str, conn: psycopg.Connection[Any]
) -> None:
    conn.execute("create table small (id int primary key, content text, embedding vector(3))")
    conn.execute("insert into small values (1, 'a text', '[1,2,3]'), (2, 'more', '[3,2,1]')")
    conn.commit()

    result = CliRunner().invoke(
        main, ["--dsn", db, "import", "--table", "small", "--model", LOCAL_MODEL_NAME]
    )

    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        "Error: table public.small (documents) holds 3-dimension embeddings, this installation "
        "384 (pgrag.embedding_config): import into a database installed with pgrag migrate "
        "--dims 3."
    ]
    assert conn.execute("select count(*) from pgrag.documents").fetchone() == (0,)


def write_jsonl(path: Path, vectors: list[np.ndarray], nan_row: int | None = None) -> Path:
    with path.open("w") as handle:
        for i, (text, vec) in enumerate(zip(TEXTS, vectors, strict=True)):
            emb = [float(x) for x in vec]
            if i == nan_row:
                emb[5] = float("nan")
            record = {
                "content": text,
                "embedding": emb,
                "metadata": {"n": i},
                "source_uri": "kb/a.md" if i < 2 else None,
                "title": f"T{i}",
                "page": i + 1,
            }
            handle.write(json.dumps(record) + "\n")
    return path


def test_a_nan_embedding_refuses_its_row_alone(
    db: str, conn: psycopg.Connection[Any], vectors: list[np.ndarray], tmp_path: Path
) -> None:
    path = write_jsonl(tmp_path / "rows.jsonl", vectors, nan_row=3)

    result = run(db, str(path), "--model", LOCAL_MODEL_NAME)

    assert result.exit_code == 1
    s = summary(result)
    assert s["refused"] == [
        {
            "row": "line 4",
            "document": lone_row(path, TEXTS[3]),
            "reason": "embedding holds NaN, infinity or a number beyond 4-byte floats",
        }
    ]
    assert (s["documents_new"], s["chunks_imported"]) == (2, 3)
    assert len(chunks(conn)) == 3


def test_jsonl_and_parquet_files_import_the_same_rows(
    db: str, conn: psycopg.Connection[Any], vectors: list[np.ndarray], tmp_path: Path
) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    path = write_jsonl(tmp_path / "rows.jsonl", vectors)
    records = [json.loads(line) for line in path.read_text().splitlines()]
    for r in records:
        r["metadata"] = json.dumps(r["metadata"])
    parquet = tmp_path / "rows.parquet"
    pq.write_table(pa.Table.from_pylist(records), parquet)

    assert run(db, str(path), "--model", LOCAL_MODEL_NAME, "--tenant", "a").exit_code == 0
    assert run(db, str(parquet), "--tenant", "b").exit_code == 0

    def rows(tenant: str) -> list[tuple[Any, ...]]:
        # the same rows: a row without a source is named by its line (JSONL) or row (Parquet)
        return [(r[0].startswith("kb/"), r[1], r[2], r[3], r[4]) for r in chunks(conn, tenant)]

    assert rows("a") == rows("b") and len(rows("a")) == 4


def test_another_tenant_never_sees_imported_rows(
    db: str, conn: psycopg.Connection[Any], vectors: list[np.ndarray], tmp_path: Path
) -> None:
    path = write_jsonl(tmp_path / "rows.jsonl", vectors)
    assert run(db, str(path), "--model", LOCAL_MODEL_NAME, "--tenant", "acme").exit_code == 0

    with tenant_transaction(conn, "globex"):
        seen = conn.execute(
            "select count(*) from hybrid_search('password', %s::vector, 10)",
            (vector_literal(vectors[0]),),
        ).fetchone()
    with tenant_transaction(conn, "acme"):
        own = conn.execute(
            "select count(*) from hybrid_search('password', %s::vector, 10)",
            (vector_literal(vectors[0]),),
        ).fetchone()
    assert seen == (0,) and own is not None and own[0] > 0


def test_dry_run_maps_and_checks_but_writes_nothing(
    db: str, conn: psycopg.Connection[Any], vectors: list[np.ndarray], tmp_path: Path
) -> None:
    path = write_jsonl(tmp_path / "rows.jsonl", vectors)

    s = summary(run(db, str(path), "--model", LOCAL_MODEL_NAME, "--dry-run"))

    assert (s["dry_run"], s["documents_new"], s["chunks_imported"]) == (True, 3, 4)
    assert conn.execute("select count(*) from pgrag.documents").fetchone() == (0,)
    assert conn.execute("select model from pgrag.embedding_config").fetchone() == (None,)


def test_an_installation_without_a_model_needs_model(
    db: str, vectors: list[np.ndarray], tmp_path: Path
) -> None:
    path = write_jsonl(tmp_path / "rows.jsonl", vectors)

    result = CliRunner().invoke(main, ["--dsn", db, "import", str(path)])

    assert result.exit_code == 1
    assert "--model NAME" in result.output and len(result.output.strip().splitlines()) == 1


def test_embeddings_of_another_model_are_refused(
    db: str, conn: psycopg.Connection[Any], vectors: list[np.ndarray], tmp_path: Path
) -> None:
    path = write_jsonl(tmp_path / "rows.jsonl", vectors)
    assert run(db, str(path), "--model", LOCAL_MODEL_NAME).exit_code == 0

    result = CliRunner().invoke(
        main, ["--dsn", db, "import", str(path), "--model", "text-embedding-3-small"]
    )

    assert result.exit_code == 1
    assert "would mix models" in result.output


def test_parquet_without_pyarrow_names_the_extra_in_one_line(
    db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "rows.parquet"
    path.write_bytes(b"PAR1")
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # as if pyarrow were not installed
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)

    result = CliRunner().invoke(main, ["--dsn", db, "import", str(path)])

    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        "Error: reading Parquet needs pyarrow: pip install 'pgrag-sql[parquet]'"
    ]


def test_the_summary_lists_what_was_imported_refused_and_left_unmapped(
    db: str, vectors: list[np.ndarray], tmp_path: Path
) -> None:
    path = write_jsonl(tmp_path / "rows.jsonl", vectors)
    with path.open("a") as handle:
        handle.write(json.dumps({"content": " ", "embedding": [0.0] * 384, "lang": "en"}) + "\n")

    result = CliRunner().invoke(
        main,
        ["--dsn", db, "import", str(path), "--model", LOCAL_MODEL_NAME, "--progress"],
        env={"PGRAG_PROGRESS_INTERVAL": "0"},
    )

    assert result.exit_code == 1
    assert "import: " in result.stderr  # progress lines, on stderr
    assert f"refused: {path}#line 5 (line 5): empty content" in result.stderr
    assert "documents: 3 new, 0 changed, 0 unchanged, 0 relabelled, 1 refused" in result.stdout
    assert "unmapped:  lang (not imported)" in result.stdout


def test_an_unknown_language_is_one_line_naming_it(
    db: str, vectors: list[np.ndarray], tmp_path: Path
) -> None:
    path = write_jsonl(tmp_path / "rows.jsonl", vectors)

    result = CliRunner().invoke(
        main,
        ["--dsn", db, "import", str(path), "--model", LOCAL_MODEL_NAME, "--language", "klingon"],
    )

    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "klingon" in lines[0] and ", english, " in lines[0]


def test_a_source_without_rows_is_nothing_to_do(db: str, tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_text("\n")

    result = CliRunner().invoke(main, ["--dsn", db, "import", str(path), "--model", "m"])

    assert result.exit_code == 3
    assert len(result.output.strip().splitlines()) == 1


def test_an_older_langchain_table_keyed_by_uuid_imports_by_custom_id(
    db: str, conn: psycopg.Connection[Any], vectors: list[np.ndarray]
) -> None:
    conn.execute(
        "create table langchain_pg_embedding (uuid uuid primary key, collection_id uuid, "
        "embedding vector, document varchar, cmetadata json, custom_id varchar)"
    )
    for i, (text, vec) in enumerate(zip(TEXTS[:2], vectors[:2], strict=True)):
        conn.execute(
            "insert into langchain_pg_embedding values (%s, null, %s, %s, '{}', 'faq')",
            (f"00000000-0000-0000-0000-00000000000{i}", vector_literal(vec), text),
        )
    conn.commit()

    s = summary(run(db, "--table", "langchain_pg_embedding", "--model", LOCAL_MODEL_NAME))

    assert (s["documents_new"], s["chunks_imported"], s["unmapped_columns"]) == (1, 2, [])
    assert [(r[0], r[1]) for r in chunks(conn)] == [("faq", 0), ("faq", 1)]


def test_new_metadata_of_a_row_replaces_its_document_with_it(
    db: str, conn: psycopg.Connection[Any], vectors: list[np.ndarray]
) -> None:
    import_guide_table(db, conn, vectors)
    conn.execute("""update public.documents set metadata = metadata || '{"team": "ops"}'
                    where id = 3""")
    conn.commit()

    s = summary(run(db, "--table", "documents"))

    assert (s["documents_changed"], s["documents_unchanged"], s["chunks_imported"]) == (1, 2, 1)
    assert conn.execute(
        "select c.metadata ->> 'team', d.metadata ->> 'team' from pgrag.chunks as c "
        "join pgrag.documents as d on d.id = c.document_id where c.content = %s",
        (TEXTS[2],),
    ).fetchone() == ("ops", "ops")


def test_a_source_longer_than_a_document_uri_refuses_its_document_alone(
    db: str, conn: psycopg.Connection[Any], vectors: list[np.ndarray], tmp_path: Path
) -> None:
    path = write_jsonl(tmp_path / "rows.jsonl", vectors)
    with path.open("a") as handle:
        record = {
            "content": "far",
            "embedding": [float(x) for x in vectors[0]],
            "source_uri": "x" * 3000,
        }
        handle.write(json.dumps(record) + "\n")

    s = summary(run(db, str(path), "--model", LOCAL_MODEL_NAME))

    assert [r["reason"] for r in s["refused"]] == [
        "source longer than 2048 characters or 2048 bytes"
    ]
    assert (s["documents_new"], s["documents_refused"]) == (3, 1)


def test_the_semantic_search_guide_table_imports_body_with_its_title(
    db: str, conn: psycopg.Connection[Any], vectors: list[np.ndarray]
) -> None:
    conn.execute(
        "create table documents (id bigint primary key generated always as identity, "
        "title text not null, body text not null, embedding vector(384))"
    )
    conn.execute(
        "insert into documents (title, body, embedding) values ('Passwords', %s, %s)",
        (TEXTS[0], vector_literal(vectors[0])),
    )
    conn.commit()

    s = summary(run(db, "--table", "documents", "--model", LOCAL_MODEL_NAME))

    assert (s["chunks_imported"], s["unmapped_columns"]) == (1, [])
    assert conn.execute("select title from pgrag.documents").fetchone() == ("Passwords",)
    assert [r[2] for r in chunks(conn)] == [TEXTS[0]]


# -- files of any size and row order ------------------------------------------------------------


def many_rows(vectors: list[np.ndarray], documents: int, per_document: int) -> list[dict[str, Any]]:
    """``per_document`` rows for each of ``documents`` sources, in document order."""
    return [
        {
            "id": f"m{d}-{part}",
            "content": f"Part {part} of manual {d}: {TEXTS[part % len(TEXTS)]}",
            "embedding": [float(x) for x in vectors[(d + part) % len(vectors)]],
            "metadata": {"start_index": part * 100, "manual": d},
            "source_uri": f"kb/manual-{d}.md",
        }
        for d in range(documents)
        for part in range(per_document)
    ]


def write_rows(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_a_file_whose_document_rows_are_scattered_imports_as_a_sorted_one(
    db: str,
    conn: psycopg.Connection[Any],
    vectors: list[np.ndarray],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    records = many_rows(vectors, documents=5, per_document=8)
    scattered = records[:]
    random.Random(7).shuffle(scattered)
    sorted_file = write_rows(tmp_path / "sorted.jsonl", records)
    scattered_file = write_rows(tmp_path / "scattered.jsonl", scattered)
    # runs of a few rows: the scattered file is ordered through several temporary files
    monkeypatch.setattr("pgrag.importer.sources.RUN_BYTES", 10_000)

    first = run(db, str(sorted_file), "--model", LOCAL_MODEL_NAME, "--tenant", "a")
    second = run(db, str(scattered_file), "--tenant", "b")

    assert (summary(first)["documents_new"], summary(second)["documents_new"]) == (5, 5)
    assert chunks(conn, "a") == chunks(conn, "b") and len(chunks(conn, "a")) == 40
    parts = [r[3]["start_index"] for r in chunks(conn, "b") if r[0] == "kb/manual-3.md"]
    assert parts == [100 * i for i in range(8)]


def test_reading_a_file_holds_about_one_run_of_its_rows_in_memory(
    vectors: list[np.ndarray], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    records = many_rows(vectors, documents=300, per_document=10)  # 3,000 rows, ~25 MB
    random.Random(3).shuffle(records)
    path = write_rows(tmp_path / "big.jsonl", records)
    monkeypatch.setattr("pgrag.importer.sources.RUN_BYTES", 2**20)

    tracemalloc.start()
    try:
        source = open_file(path)
        previous: tuple[Any, ...] = ()
        count = 0
        for row in source.rows:  # in document order, as the importer reads them
            key = (row.source, row.start)
            assert key > previous
            previous, count = key, count + 1
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert count == source.rows_total == 3000
    # all the rows as read would take about 3000 x 1.5 KB of embeddings alone, and more
    assert peak < 4 * 2**20, peak


def progress_events(result: Result) -> list[dict[str, Any]]:
    return [json.loads(line) for line in result.stderr.splitlines() if line.startswith("{")]


def test_import_progress_counts_the_file_rows_read_and_the_chunks_written(
    db: str, vectors: list[np.ndarray], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_rows(tmp_path / "rows.jsonl", many_rows(vectors, documents=30, per_document=5))
    monkeypatch.setattr("pgrag.importer.run.BATCH_DOCUMENTS", 10)

    result = CliRunner().invoke(
        main,
        ["--dsn", db, "import", str(path), "--model", LOCAL_MODEL_NAME, "--progress-json"],
        env={"PGRAG_PROGRESS_INTERVAL": "0"},
    )

    assert result.exit_code == 0, result.output
    events = [e for e in progress_events(result) if e["label"] == "import"]
    # the file's rows are counted as it is read: the total is exact from the first event
    assert all((e["chunks_total"], e["chunks_total_estimated"]) == (150, False) for e in events)
    assert all(e["chunks_embedded"] is None for e in events)  # nothing is embedded
    assert sorted({e["chunks_done"] for e in events}) == [0, 50, 100, 150]  # a batch at a time
    assert any(e["left_s"] is not None for e in events), events
    assert (events[-1]["chunks_done"], events[-1]["chunks_written"]) == (150, 150)


def test_reading_an_import_file_reports_its_bytes_before_the_import(
    db: str, vectors: list[np.ndarray], tmp_path: Path
) -> None:
    path = write_rows(tmp_path / "rows.jsonl", many_rows(vectors, documents=30, per_document=5))

    result = CliRunner().invoke(
        main,
        ["--dsn", db, "import", str(path), "--model", LOCAL_MODEL_NAME, "--progress-json"],
        env={"PGRAG_PROGRESS_INTERVAL": "0"},
    )

    assert result.exit_code == 0, result.output
    labels = [e["label"] for e in progress_events(result)]
    assert labels[0] == "reading" and labels[-1] == "import"
    assert labels.index("import") > max(i for i, label in enumerate(labels) if label == "reading")
    read = [e for e in progress_events(result) if e["label"] == "reading"]
    size = path.stat().st_size
    assert read[-1]["done"] and (read[-1]["bytes"], read[-1]["bytes_total"]) == (size, size)


def test_a_table_import_counts_its_rows_against_the_catalog_estimate_until_passed(
    db: str, conn: psycopg.Connection[Any], vectors: list[np.ndarray]
) -> None:
    make_supabase_table(conn, vectors)
    conn.execute("analyze public.documents")  # the catalog now estimates 4 rows
    conn.execute(
        "insert into public.documents (content, embedding) select content || ' again', "
        "embedding from public.documents"
    )
    conn.commit()

    result = CliRunner().invoke(
        main,
        [
            "--dsn",
            db,
            "import",
            "--table",
            "documents",
            "--model",
            LOCAL_MODEL_NAME,
            "--progress-json",
        ],
        env={"PGRAG_PROGRESS_INTERVAL": "0"},
    )

    assert result.exit_code == 0, result.output
    events = [e for e in progress_events(result) if e["label"] == "import"]
    assert (events[0]["chunks_total"], events[0]["chunks_total_estimated"]) == (4, True)
    # once the rows read pass the estimate, the total is what was read: never over 100 %
    assert all(e["chunks_done"] <= e["chunks_total"] for e in events)
    assert (events[-1]["chunks_done"], events[-1]["chunks_total"]) == (8, 8)
    assert events[-1]["chunks_total_estimated"] is False


# -- the bulk path of a tenant's first import -------------------------------------------------

SCIFACT = (
    Path(os.environ.get("PGRAG_SHARED_DIR") or Path(__file__).resolve().parents[2] / "shared")
    / "data"
    / "scifact"
)
ABSTRACTS = 120
QUERIES = 30


@pytest.fixture(scope="module")
def scifact_rows(local_embedder: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A JSONL export of SciFact abstracts (two chunks each, real embeddings) and its queries'
    texts beside it (queries.json)."""
    if not (SCIFACT / "corpus.jsonl").exists():
        pytest.skip(f"SciFact not found in {SCIFACT} (set PGRAG_SHARED_DIR)")
    docs = [json.loads(line) for line in (SCIFACT / "corpus.jsonl").open()][:ABSTRACTS]
    parts = [(d["_id"], i, p) for d in docs for i, p in enumerate(halves(d["title"], d["text"]))]
    embedded = local_embedder.embed([p for _, _, p in parts])
    out = tmp_path_factory.mktemp("scifact") / "rows.jsonl"
    with out.open("w") as handle:
        for (doc, i, text), vec in zip(parts, embedded, strict=True):
            record = {
                "content": text,
                "embedding": [float(x) for x in vec],
                "source_uri": f"scifact/{doc}",
                "metadata": {"chunk_index": i},
            }
            handle.write(json.dumps(record) + "\n")
    queries = [json.loads(line)["text"] for line in (SCIFACT / "queries.jsonl").open()]
    (out.parent / "queries.json").write_text(json.dumps(queries[:QUERIES]))
    return out


def halves(title: str, text: str) -> list[str]:
    cut = text.find(". ", len(text) // 2)
    return [f"{title}. {text[: cut + 1]}", text[cut + 2 :]] if cut > 0 else [f"{title}. {text}"]


def first_lines(path: Path, n: int) -> Path:
    out = path.parent / f"first-{n}.jsonl"
    out.write_text("".join(path.read_text().splitlines(keepends=True)[:n]))
    return out


def search_all(dsn: str, tenant: str, queries: list[str], local_embedder: Any) -> list[Any]:
    """Per query: the top 10 of keyword, vector and hybrid search as (uri, chunk, score)."""
    out = []
    with connect(dsn) as conn:
        for text, vec in zip(queries, local_embedder.embed(queries), strict=True):
            with tenant_transaction(conn, tenant):
                for sql_text, args in (
                    ("select source_uri, chunk_index, score from keyword_search(%s, 10)", (text,)),
                    (
                        "select source_uri, chunk_index, similarity from vector_search(%s, 10)",
                        (vec,),
                    ),
                    (
                        "select source_uri, chunk_index, score from hybrid_search(%s, %s, 10)",
                        (text, vec),
                    ),
                ):
                    rows = conn.execute(sql_text, args).fetchall()
                    out.append([(u, c, round(float(s), 9)) for u, c, s in rows])
    return out


def backlog(conn: psycopg.Connection[Any], tenant: str) -> tuple[Any, ...] | None:
    return conn.execute(
        "select (select count(*) from pgrag.bm25_backlog where tenant_id = %(t)s),"
        " (select count(*) from pgrag.chunks where tenant_id = %(t)s and not in_shared_graph)",
        {"t": tenant},
    ).fetchone()


def chunk_count(conn: psycopg.Connection[Any], tenant: str) -> int:
    row = conn.execute("select count(*) from pgrag.chunks where tenant_id = %s", (tenant,))
    return int(row.fetchone()[0])  # type: ignore[index]


def test_a_first_import_takes_the_bulk_path_with_the_results_of_a_row_by_row_one(
    db: str, conn: psycopg.Connection[Any], scifact_rows: Path, local_embedder: Any
) -> None:
    model = ("--model", LOCAL_MODEL_NAME)
    bulk = summary(run(db, str(scifact_rows), *model, "--tenant", "bulk"))
    # Tenant "rows": one document first (a first load), then the rest by the ordinary path.
    seed = summary(run(db, str(first_lines(scifact_rows, 2)), *model, "--tenant", "rows"))
    rest = summary(run(db, str(scifact_rows), *model, "--tenant", "rows"))

    assert (bulk["bulk_load"], seed["bulk_load"], rest["bulk_load"]) == (True, True, False)
    assert rest["documents_new"] == ABSTRACTS - 1
    assert backlog(conn, "bulk") == (0, 0)  # finished: postings written, rows in a graph
    queries = json.loads((scifact_rows.parent / "queries.json").read_text())
    assert search_all(db, "bulk", queries, local_embedder) == search_all(
        db, "rows", queries, local_embedder
    )


def test_an_interrupted_bulk_import_keeps_searchable_documents_and_a_rerun_finishes(
    db: str,
    conn: psycopg.Connection[Any],
    scifact_rows: Path,
    local_embedder: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(importer_run, "BATCH_DOCUMENTS", 40)
    batch = importer_run.Importer._batch
    calls = []

    def stop_at_the_third(self: Any, docs: Any, progress: Any) -> None:
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        batch(self, docs, progress)

    monkeypatch.setattr(importer_run.Importer, "_batch", stop_at_the_third)
    options = ImportOptions(tenant="acme", model=LOCAL_MODEL_NAME)
    with pytest.raises(Interrupted, match="all searchable"):
        import_source(db, open_file(scifact_rows), options)
    kept = conn.execute(
        "select count(*) from pgrag.documents where tenant_id = 'acme' and status = 'ready'"
    ).fetchone()
    with tenant_transaction(conn, "acme"):
        found = conn.execute("select count(*) from keyword_search('cells', 50)").fetchone()
    assert kept == (80,) and found is not None and found[0] > 0
    # The keyword index written; the graph left for the next run (no row in one yet).
    assert backlog(conn, "acme") == (0, chunk_count(conn, "acme"))
    monkeypatch.setattr(importer_run.Importer, "_batch", batch)

    again = import_source(db, open_file(scifact_rows), options)

    assert (again.bulk_load, again.documents_unchanged) == (False, 80)
    assert backlog(conn, "acme") == (0, 0)
    fresh = import_source(db, open_file(scifact_rows), ImportOptions(tenant="fresh"))
    queries = json.loads((scifact_rows.parent / "queries.json").read_text())
    assert fresh.bulk_load
    assert search_all(db, "acme", queries, local_embedder) == search_all(
        db, "fresh", queries, local_embedder
    )


def test_a_corrupt_parquet_file_fails_in_one_line_and_writes_nothing(
    db: str, tmp_path: Path
) -> None:
    pytest.importorskip("pyarrow")
    path = tmp_path / "export.parquet"
    path.write_bytes(b"PAR1 cut short \x00\xff")

    result = CliRunner().invoke(main, ["--dsn", db, "import", str(path), "--model", "m"])

    assert result.exit_code == 1
    assert "not a readable Parquet file" in result.output
    assert len(result.output.strip().splitlines()) == 1
    with psycopg.connect(db) as conn:
        assert conn.execute("select count(*) from pgrag.documents").fetchone() == (0,)
