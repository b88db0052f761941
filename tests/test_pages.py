"""Pages (docs/sql-api.md, "Pages"): match_offset gives rows match_offset + 1 onwards of the
same ranking, in a total order, so that pages never skip or repeat a row."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

from pgrag.cli import main
from pgrag.db import connect

# Twelve chunks of the same text (equal BM25 scores and distances: ties) and twelve distinct.
TEXTS = ["Copy files in binary format with the copy tool."] * 12 + [
    f"Note {i}: the copy command number {i} writes {'binary ' * (i % 3)}output." for i in range(12)
]


@pytest.fixture
def corpus(db: str, local_embedder: Any, monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """TEXTS as one ready document of tenant ``default``; returns the query embedding."""
    monkeypatch.delenv("PGRAG_TENANT", raising=False)
    vectors = local_embedder.embed(TEXTS)
    with connect(db) as conn:
        (doc,) = conn.execute(
            "insert into pgrag.documents (tenant_id, title, source_type, source_uri, status,"
            " chunk_count) values ('default', 'copy', 'text', 'copy.txt', 'ready', %s)"
            " returning id",
            (len(TEXTS),),
        ).fetchone() or (None,)
        for i, (text, vector) in enumerate(zip(TEXTS, vectors, strict=True)):
            conn.execute(
                "insert into pgrag.chunks (tenant_id, document_id, chunk_index, content,"
                " embedding, content_sha256) values ('default', %s, %s, %s, %s, %s)",
                (doc, i, text, vector, hashlib.sha256(f"{i}{text}".encode()).hexdigest()),
            )
        conn.execute(
            "update pgrag.embedding_config set model = %s, provider = 'local'",
            (local_embedder.model_name,),
        )
        conn.commit()
    return [float(x) for x in local_embedder.embed(["binary copy"])[0]]


CALLS = {
    "keyword_search": "select chunk_id, rank from keyword_search('binary copy', %(k)s{extra})",
    "vector_search": "select chunk_id, rank from vector_search(%(e)s::vector, %(k)s{extra})",
    "hybrid_search": "select chunk_id, rank from hybrid_search('binary copy', %(e)s::vector, %(k)s,"
    " candidate_count => 40{extra})",
}


def rows(dsn: str, function: str, k: int, emb: list[float], offset: int | None = None) -> list[Any]:
    extra = "" if offset is None else ", match_offset => %(o)s"
    with connect(dsn) as conn:
        conn.execute("select pgrag.set_request_tenant('default')")
        return conn.execute(
            CALLS[function].format(extra=extra), {"k": k, "e": str(emb), "o": offset}
        ).fetchall()


@pytest.mark.parametrize("function", list(CALLS))
def test_pages_concatenate_to_one_big_call(db: str, corpus: list[float], function: str) -> None:
    pages = [row for page in range(3) for row in rows(db, function, 8, corpus, page * 8)]
    assert pages == rows(db, function, 24, corpus)
    assert [rank for _, rank in pages] == list(range(1, 25))  # rank counts from the first row


def test_equal_keyword_scores_are_ordered_by_chunk_id(db: str, corpus: list[float]) -> None:
    with connect(db) as conn:
        conn.execute("select pgrag.set_request_tenant('default')")
        got = conn.execute(
            "select chunk_id, score from keyword_search('binary copy', 24)"
        ).fetchall()
    assert got == sorted(got, key=lambda r: (-r[1], r[0]))
    scores = [score for _, score in got]
    assert max(scores.count(s) for s in scores) >= 12  # the twelve equal chunks tie


def test_an_offset_past_the_last_row_returns_nothing(db: str, corpus: list[float]) -> None:
    assert rows(db, "keyword_search", 10, corpus, 1000) == []


@pytest.mark.parametrize("offset", [-1, 1001])
def test_the_offset_is_bounded(db: str, corpus: list[float], offset: int) -> None:
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="match_offset"):
        rows(db, "keyword_search", 10, corpus, offset)


def test_the_cli_pages_and_returns_the_next_offset(db: str, corpus: list[float]) -> None:
    def page(*args: str) -> dict[str, Any]:
        result = CliRunner().invoke(
            main, ["--dsn", db, "search", "binary copy", "--mode", "keyword", "--json", *args]
        )
        assert result.exit_code == 0, result.output
        out: dict[str, Any] = json.loads(result.output)
        return out

    second = page("-k", "5", "--page", "2")
    assert [hit["rank"] for hit in second["hits"]] == [6, 7, 8, 9, 10]
    assert (second["offset"], second["next_offset"]) == (5, 10)
    last = page("-k", "5", "--offset", "20")
    assert len(last["hits"]) == 4 and last["next_offset"] is None
