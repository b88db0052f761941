"""Part numbers, error codes and versions are found by any of their parts, in BM25 keyword search
and in hybrid search, on fresh installs and on installations upgraded from before the fix."""

from __future__ import annotations

import hashlib
from typing import Any

import psycopg
import pytest

from pgrag.db import connect
from pgrag.install.migrator import Migrator
from pgrag.search import SearchOptions, search

DOCS = {
    "pump.txt": "The pump V-ZQX41-7 was replaced after the seal failed during the spring test.",
    "billing.txt": "Billing stops with ERR-4471 when the invoice total is negative.",
    "release.txt": "Version v2.3.1 fixes the cache eviction bug reported by operators.",
    "other.txt": "The weather report mentions rain, wind and a cold front on Tuesday.",
}

QUERIES = [
    ("ZQX41-7", "pump.txt"),
    ("V-ZQX41-7", "pump.txt"),
    ("zqx41", "pump.txt"),
    ("ZQX", "pump.txt"),
    ("41-7", "pump.txt"),
    ("V-ZQX41", "pump.txt"),
    ("ERR-4471", "billing.txt"),
    ("4471", "billing.txt"),
    ("err", "billing.txt"),
    ("v2.3.1", "release.txt"),
    ("2.3.1", "release.txt"),
    ("2.3", "release.txt"),
    ("v2.3", "release.txt"),
    ("what does error ERR-4471 mean?", "billing.txt"),
]


def seed(dsn: str, embedder: Any | None = None) -> None:
    with connect(dsn) as conn:
        for uri, text in DOCS.items():
            row = conn.execute(
                "insert into pgrag.documents (tenant_id, title, source_type, source_uri, status,"
                " chunk_count) values ('t', %s, 'text', %s, 'ready', 1) returning id",
                (uri, uri),
            ).fetchone()
            assert row is not None
            conn.execute(
                "insert into pgrag.chunks (tenant_id, document_id, chunk_index, content,"
                " embedding, content_sha256) values ('t', %s, 0, %s, %s, %s)",
                (
                    row[0],
                    text,
                    embedder.embed([text])[0] if embedder else None,
                    hashlib.sha256(text.encode()).hexdigest(),
                ),
            )


def keyword(dsn: str, query: str) -> list[str]:
    with connect(dsn) as conn:
        hits = search(conn, query, SearchOptions(mode="keyword"), tenant="t")
    return [h.source_uri for h in hits]


@pytest.mark.parametrize(("query", "expected"), QUERIES)
def test_keyword_search_finds_an_identifier_by_any_part(db: str, query: str, expected: str) -> None:
    seed(db)
    assert keyword(db, query)[:1] == [expected]


@pytest.mark.parametrize(("query", "expected"), QUERIES[:1] + QUERIES[6:8] + QUERIES[10:11])
def test_hybrid_search_ranks_the_identifier_first(
    db: str, local_embedder: Any, query: str, expected: str
) -> None:
    seed(db, local_embedder)
    with connect(db) as conn:
        hits = search(
            conn, query, SearchOptions(mode="hybrid"), tenant="t", embedder=local_embedder
        )
    assert hits[0].source_uri == expected
    assert hits[0].keyword_rank == 1


def test_an_excluded_identifier_excludes_its_documents(db: str) -> None:
    seed(db)
    assert keyword(db, "ERR-4471 OR v2.3.1")[:2] in (
        ["billing.txt", "release.txt"],
        ["release.txt", "billing.txt"],
    )
    assert keyword(db, "invoice fixes -ERR-4471") == ["release.txt"]


def test_identifiers_do_not_match_other_identifiers_sharing_a_prefix(db: str) -> None:
    seed(db)
    assert keyword(db, "ZQX41-8") == []
    assert keyword(db, "ERR-4472") == []
    assert keyword(db, "2.3.2") == []


def test_chunk_tsvector_holds_the_identifier_parts(conn: psycopg.Connection[Any]) -> None:
    row = conn.execute("select pgrag.chunk_fts('english', 'Pump V-ZQX41-7 failed')").fetchone()
    assert row is not None
    lexemes = set(row[0].replace("'", "").split())
    lexemes = {x.split(":")[0] for x in lexemes}
    assert {"v-zqx41-7", "zqx41-7", "zqx41", "zqx", "41-7", "v-zqx41", "pump", "fail"} <= lexemes


def bm25_state(conn: psycopg.Connection[Any]) -> tuple[Any, ...]:
    postings = conn.execute(
        "select lexeme, count(*), sum(tf), sum(doc_len) from pgrag.bm25_postings"
        " group by lexeme order by lexeme"
    ).fetchall()
    lexicon = conn.execute(
        "select lexeme, sum(df) from pgrag.bm25_lexicon group by lexeme having sum(df) <> 0"
        " order by lexeme"
    ).fetchall()
    stats = conn.execute(
        "select language, sum(chunk_count), sum(token_count) from pgrag.corpus_stats"
        " group by language order by language"
    ).fetchall()
    return postings, lexicon, stats


def test_an_upgraded_installation_gets_its_tsvectors_and_postings_recomputed(
    empty_db: str, db: str
) -> None:
    # An installation from before the fix: the column as it was, without pgrag.chunk_fts, and
    # the identifier-lexemes migration not applied yet (the functions tier is today's).
    Migrator(empty_db).migrate()
    with psycopg.connect(empty_db, autocommit=True) as conn:
        conn.execute(
            "alter table pgrag.chunks alter column fts set expression as"
            " (to_tsvector(language, content))"
        )
        conn.execute("drop function pgrag.chunk_fts(regconfig, text)")
        conn.execute(
            "delete from pgrag.schema_migrations"
            " where name = 'incremental/007-identifier-lexemes.sql'"
        )
    seed(empty_db)
    assert keyword(empty_db, "ZQX41-7") == []

    Migrator(empty_db).migrate()

    assert keyword(empty_db, "ZQX41-7") == ["pump.txt"]
    assert keyword(empty_db, "2.3.1") == ["release.txt"]
    # The BM25 tables equal those of a fresh install that loaded the same chunks.
    seed(db)
    with psycopg.connect(empty_db) as upgraded, psycopg.connect(db) as fresh:
        assert bm25_state(upgraded) == bm25_state(fresh)
