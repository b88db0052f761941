"""The keyword query syntax (docs/sql-api.md, "Query syntax"), in SQL and through the CLI.

Flags and options are what people look up in manual pages: a term starting with ``--`` is
searched for, never excluded; a quoted ``"-delete"`` finds the flag; a single ``-word``
excludes the word (websearch syntax). Malformed input is answered, never an error.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from pgrag.cli import main
from pgrag.db import connect

DOCS = {
    "find.txt": "find -delete deletes the files it found; find -print prints their names.",
    "locate.txt": "locate finds files by name from a database, faster than a walk.",
    "tar.txt": "tar --exclude=PATTERN leaves out the files matching PATTERN; "
    "--no-recursion keeps tar in the named folder.",
    "git.txt": "git commit --amend rewrites the last commit with the staged changes.",
    "rm.txt": "rm removes files; rm -i asks before every delete.",
}


@pytest.fixture
def pages(db: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """DOCS as ready one-chunk documents of tenant ``default`` (no embeddings: keyword only)."""
    monkeypatch.delenv("PGRAG_TENANT", raising=False)
    with connect(db) as conn:
        for uri, text in DOCS.items():
            row = conn.execute(
                "insert into pgrag.documents (tenant_id, title, source_type, source_uri, status,"
                " chunk_count) values ('default', %s, 'text', %s, 'ready', 1) returning id",
                (uri, uri),
            ).fetchone()
            assert row is not None
            conn.execute(
                "insert into pgrag.chunks (tenant_id, document_id, chunk_index, content,"
                " content_sha256) values ('default', %s, 0, %s, %s)",
                (row[0], text, hashlib.sha256(text.encode()).hexdigest()),
            )
        conn.commit()
    return db


def keyword_search(dsn: str, query: str) -> list[str]:
    """The sources keyword_search returns for ``query``, best first, as tenant default."""
    with connect(dsn) as conn:
        conn.execute("select pgrag.set_request_tenant('default')")
        rows = conn.execute(
            "select source_uri from keyword_search(%s, 10) order by rank", (query,)
        ).fetchall()
    return [r[0] for r in rows]


def keyword_query(dsn: str, query: str) -> tuple[str | None, str | None, list[str]]:
    """pgrag.keyword_query's positive and negative tsqueries (as text) and its lexemes."""
    with connect(dsn) as conn:
        row = conn.execute(
            "select positive::text, negative::text, lexemes"
            " from pgrag.keyword_query(%s, 'english')",
            (query,),
        ).fetchone()
    assert row is not None
    return row[0], row[1], sorted(row[2])


def cli_search(dsn: str, query: str, *args: str) -> list[str]:
    result = CliRunner().invoke(
        main, ["--dsn", dsn, "search", query, "--mode", "keyword", "--json", *args]
    )
    assert result.exit_code == 0, result.output
    return [hit["source_uri"] for hit in json.loads(result.output)]


def test_a_single_dash_excludes_the_word(pages: str) -> None:
    found = keyword_search(pages, "find -delete")
    assert found == ["locate.txt"]  # find.txt holds "delete"


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("tar --exclude option", "tar.txt"),
        ("--exclude", "tar.txt"),
        ("--no-recursion", "tar.txt"),
        ("git --amend", "git.txt"),
        ("commit --amend", "git.txt"),
    ],
)
def test_a_double_dash_flag_is_searched_for_never_excluded(
    pages: str, query: str, expected: str
) -> None:
    assert keyword_search(pages, query)[:1] == [expected]
    assert keyword_query(pages, query)[1] is None  # no negative part


def test_a_quoted_single_dash_flag_finds_the_flag(pages: str) -> None:
    found = keyword_search(pages, '"-delete"')
    assert found[:1] == ["find.txt"] or set(found[:2]) == {"find.txt", "rm.txt"}
    assert "find.txt" in keyword_search(pages, 'find "-delete"')


def test_a_flag_parses_to_the_lexemes_its_chunk_holds(pages: str) -> None:
    with connect(pages) as conn:
        row = conn.execute(
            "select pgrag.chunk_fts('english', '--no-recursion')::text,"
            " (pgrag.keyword_query('--no-recursion', 'english')).positive::text"
        ).fetchone()
    assert row == ("'no-recurs':1 'recurs':3", "'no-recurs' <2> 'recurs'")


@pytest.mark.parametrize(
    ("query", "positive", "negative"),
    [
        ("x - y", "'x' | 'y'", None),  # a dash attached to no word excludes nothing
        ("x -- y", "'x' | 'y'", None),
        ("- -y", None, "'y'"),
        ("-(-y)", "'y'", None),  # an even number of negations cancels out
        ('x --"b c"', "'x' | 'b' <-> 'c'", None),
        ('x -"b c"', "'x'", "'b' <-> 'c'"),
        ("x or -y", "'x'", "'y'"),
    ],
)
def test_dashes_parse_as_documented(
    db: str, query: str, positive: str | None, negative: str | None
) -> None:
    assert keyword_query(db, query)[:2] == (positive, negative)


def test_an_identifier_after_two_dashes_is_searched_whole(db: str) -> None:
    _, negative, lexemes = keyword_query(db, "--ERR-4471")
    assert negative is None and "err-4471" in lexemes
    assert keyword_query(db, "-ERR-4471")[0] is None  # one dash: excluded, as before


@pytest.mark.parametrize(
    "query",
    ['"find -delete', '"', '""', "-", "--", "---", "- -", "-delete", "-find -tar", "(-", '-"'],
)
def test_malformed_input_is_answered_never_an_error(pages: str, query: str) -> None:
    found = keyword_search(pages, query)
    if query == '"find -delete':  # an unclosed quote runs to the end: one phrase
        assert found == ["find.txt"]
    else:  # nothing to look for (only exclusions, or no word): no rows
        assert found == []


def test_a_quoted_phrase_is_required_in_keyword_search(pages: str) -> None:
    assert set(keyword_search(pages, "files it found tar")) >= {"find.txt", "tar.txt"}
    assert keyword_search(pages, '"files it found" tar') == ["find.txt"]


def test_or_joins_alternative_phrases(pages: str) -> None:
    found = keyword_search(pages, '"files it found" OR "named folder" rm')
    assert sorted(found) == ["find.txt", "tar.txt"]


@pytest.mark.parametrize(
    ("query", "required"),
    [
        ("tar --exclude x-ray", None),  # no quote: nothing required, BM25 as before
        ('"b c" d', "'b' <-> 'c'"),
        ('a "b c" OR "d e" f', "'b' <-> 'c' | 'd' <-> 'e'"),
        ('"b c" OR d', "'b' <-> 'c' | 'd'"),
        ('"b c" "d e"', "'b' <-> 'c' & 'd' <-> 'e'"),
        ('-"b c" d', None),  # an excluded phrase requires nothing
        ('"the" d', None),  # stop words only
        ('"unclosed b', "'unclos' <-> 'b'"),
        ("OR", None),
        ('"b" OR', "'b'"),
    ],
)
def test_what_quoted_phrases_require_parses_as_documented(
    db: str, query: str, required: str | None
) -> None:
    with connect(db) as conn:
        row = conn.execute(
            "select pgrag.keyword_required(%s, 'english')::text", (query,)
        ).fetchone()
    assert row == (required,)


@pytest.mark.parametrize("query", ["OR", "OR OR", '"files" OR', "- OR -", '"" OR ""', '-"x" OR'])
def test_malformed_or_and_quotes_are_answered_never_an_error(pages: str, query: str) -> None:
    found = keyword_search(pages, query)
    expected = {"locate.txt", "find.txt", "tar.txt", "rm.txt"} if "files" in query else set()
    assert sorted(found) == sorted(expected)


def test_the_cli_passes_the_query_as_it_is(pages: str) -> None:
    assert cli_search(pages, "find -delete") == ["locate.txt"]
    assert cli_search(pages, "tar --exclude option")[:1] == ["tar.txt"]
    assert "find.txt" in cli_search(pages, '"-delete"')


def test_hybrid_search_applies_the_same_syntax(pages: str, local_embedder: Any) -> None:
    with connect(pages) as conn:
        for chunk_id, content in conn.execute("select id, content from pgrag.chunks").fetchall():
            conn.execute(
                "update pgrag.chunks set embedding = %s where id = %s",
                (local_embedder.embed([content])[0], chunk_id),
            )
        conn.execute(
            "update pgrag.embedding_config set model = %s, provider = 'local'",
            (local_embedder.model_name,),
        )
        conn.commit()
    result = CliRunner().invoke(
        main, ["--dsn", pages, "search", "tar --exclude", "--json", "-k", "1"]
    )
    assert result.exit_code == 0, result.output
    (top,) = json.loads(result.output)
    assert top["source_uri"] == "tar.txt" and top["keyword_rank"] == 1


def test_hybrid_search_ranks_the_chunks_holding_a_phrase_first(
    pages: str, local_embedder: Any
) -> None:
    with connect(pages) as conn:
        for chunk_id, content in conn.execute("select id, content from pgrag.chunks").fetchall():
            conn.execute(
                "update pgrag.chunks set embedding = %s where id = %s",
                (local_embedder.embed([content])[0], chunk_id),
            )
        conn.execute(
            "update pgrag.embedding_config set model = %s, provider = 'local'",
            (local_embedder.model_name,),
        )
        conn.commit()
    result = CliRunner().invoke(
        main, ["--dsn", pages, "search", 'delete files "named folder"', "--json", "-k", "5"]
    )
    assert result.exit_code == 0, result.output
    hits = json.loads(result.output)
    assert hits[0]["source_uri"] == "tar.txt" and len(hits) == 5  # others still follow


def test_the_query_syntax_has_one_home_in_the_docs() -> None:
    docs = Path(__file__).resolve().parents[1] / "docs"
    sql_api = (docs / "sql-api.md").read_text()
    assert "## Query syntax" in sql_api
    assert "sql-api.md#query-syntax" in (docs / "cli.md").read_text()
