"""Highlights (docs/sql-api.md, "Highlights"): public.highlight marks a query's words in the
chunks a search returned, HTML-escaped, with their offsets, for psql, PostgREST and the CLI."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

from pgrag.cli import main
from pgrag.db import connect

TEXTS = {
    "script.md": "Never paste <script>alert('x')</script> & friends into the runner's page.",
    "running.md": "The service was running for days; it runs again after a restart.",
    "parts.md": "Order part V-ZQX41-7 from the catalogue before the old one fails.",
    "plain.md": "Tomato plants need at least six hours of direct sunlight every day.",
}


@pytest.fixture
def pages(db: str, local_embedder: Any, monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """TEXTS as ready one-chunk documents of tenant ``default`` with real embeddings (the
    first one public); returns {uri: chunk id}."""
    monkeypatch.delenv("PGRAG_TENANT", raising=False)
    ids: dict[str, int] = {}
    with connect(db) as conn:
        for n, (uri, text) in enumerate(TEXTS.items()):
            (doc,) = conn.execute(
                "insert into pgrag.documents (tenant_id, title, source_type, source_uri, status,"
                " is_public, chunk_count) values ('default', %s, 'markdown', %s, 'ready', %s, 1)"
                " returning id",
                (uri, uri, n == 0),
            ).fetchone() or (None,)
            (ids[uri],) = conn.execute(
                "insert into pgrag.chunks (tenant_id, document_id, chunk_index, content,"
                " embedding, content_sha256) values ('default', %s, 0, %s, %s, %s) returning id",
                (
                    doc,
                    text,
                    local_embedder.embed([text])[0],
                    hashlib.sha256(text.encode()).hexdigest(),
                ),
            ).fetchone() or (None,)
        conn.execute(
            "update pgrag.embedding_config set model = %s, provider = 'local'",
            (local_embedder.model_name,),
        )
        conn.commit()
    return ids


@contextmanager
def request(dsn: str, role: str, tenant: str | None = None) -> Iterator[psycopg.Connection[Any]]:
    """One PostgREST request: the role and its claims, local to a transaction."""
    claims: dict[str, Any] = {"role": role}
    if tenant is not None:
        claims |= {"sub": f"user-of-{tenant}", "tenant_id": tenant}
    with connect(dsn) as conn, conn.transaction(force_rollback=True):
        conn.execute(f"set local role {role}")
        conn.execute("select set_config('request.jwt.claims', %s, true)", (json.dumps(claims),))
        yield conn


def highlight(
    dsn: str, ids: list[int], query: str, **args: Any
) -> dict[int, tuple[str, list[Any]]]:
    named = "".join(f", {k} => %({k})s" for k in args)
    with request(dsn, "authenticated", "default") as conn:
        rows = conn.execute(
            f"select chunk_id, snippet, matches from highlight(%(ids)s, %(q)s{named})",
            {"ids": ids, "q": query, **args},
        ).fetchall()
    return {r[0]: (r[1], r[2]) for r in rows}


def marked(snippet: str) -> list[str]:
    return re.findall(r"<mark>(.*?)</mark>", snippet)


def test_text_around_the_marks_is_html_escaped(db: str, pages: dict[str, int]) -> None:
    ((snippet, _),) = highlight(db, [pages["script.md"]], "runner page").values()
    assert (
        "<script>" not in snippet and "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in snippet
    )
    assert "&amp; friends" in snippet
    assert re.sub(r"</?mark>", "", snippet).count("<") == 0  # only the marks are tags


def test_stemmed_forms_of_a_query_word_are_marked(db: str, pages: dict[str, int]) -> None:
    ((snippet, _),) = highlight(db, [pages["running.md"]], "run").values()
    assert marked(snippet) == ["running", "runs"]


def test_offsets_point_at_the_matched_words_in_content(db: str, pages: dict[str, int]) -> None:
    ((_, matches),) = highlight(db, [pages["running.md"]], "run restart").values()
    content = TEXTS["running.md"]
    assert [content[s:e] for s, e in matches] == ["running", "runs", "restart"]


def test_an_identifier_is_marked_by_any_of_its_parts(db: str, pages: dict[str, int]) -> None:
    ((snippet, _),) = highlight(db, [pages["parts.md"]], "ZQX41").values()
    assert marked(snippet) == ["V-ZQX41-7"]


def test_a_vector_only_hit_gets_its_opening_without_marks(db: str, pages: dict[str, int]) -> None:
    ((snippet, matches),) = highlight(db, [pages["plain.md"]], "gardening", max_chars=30).values()
    assert matches == [] and snippet.startswith("Tomato plants need") and snippet.endswith("…")
    assert len(snippet) <= 31


def test_the_snippet_is_the_window_around_the_matches(db: str, pages: dict[str, int]) -> None:
    ((snippet, _),) = highlight(db, [pages["plain.md"]], "sunlight", max_chars=30).values()
    assert snippet.startswith("…") and "<mark>sunlight</mark>" in snippet


def test_marks_are_inserted_as_given(db: str, pages: dict[str, int]) -> None:
    ((snippet, _),) = highlight(
        db, [pages["running.md"]], "restart", start_mark="[[", stop_mark="]]"
    ).values()
    assert "[[restart]]" in snippet


def test_excluded_words_and_hidden_chunks_are_not_highlighted(
    db: str, pages: dict[str, int]
) -> None:
    ((snippet, _),) = highlight(db, [pages["running.md"]], "run -restart").values()
    assert marked(snippet) == ["running", "runs"]
    with request(db, "anon") as conn:  # anon sees the public document only
        rows = conn.execute(
            "select chunk_id from highlight(%s, 'page')", (list(pages.values()),)
        ).fetchall()
    assert rows == [(pages["script.md"],)]


@pytest.mark.parametrize(
    ("args", "argument"),
    [
        ({"max_chars": 19}, "max_chars"),
        ({"start_mark": "x" * 65}, "start_mark"),
        ({"ids": list(range(101))}, "chunk_ids"),
    ],
)
def test_highlight_arguments_are_bounded(
    db: str, pages: dict[str, int], args: dict[str, Any], argument: str
) -> None:
    ids = args.pop("ids", [pages["plain.md"]])
    with pytest.raises(psycopg.errors.InvalidParameterValue, match=argument):
        highlight(db, ids, "x", **args)


def test_the_cli_shows_and_returns_highlights(db: str, pages: dict[str, int]) -> None:
    result = CliRunner().invoke(
        main, ["--dsn", db, "search", "run", "--mode", "keyword", "--highlight", "--json"]
    )
    assert result.exit_code == 0, result.output
    (hit,) = json.loads(result.output)
    assert marked(hit["snippet"]) == ["running", "runs"]
    assert [hit["content"][s:e] for s, e in hit["matches"]] == ["running", "runs"]
    shown = CliRunner().invoke(main, ["--dsn", db, "search", "run", "--highlight"])
    assert shown.exit_code == 0 and "running" in shown.output and "<mark>" not in shown.output
