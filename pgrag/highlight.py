"""Highlights of search results: ``public.highlight`` called for the rows a search returned.

The marking, escaping and snippet choice happen in SQL (``sql/idempotent/040-highlights.sql``);
this module passes the hits' chunk ids, as the caller's tenant, and renders a snippet's marks
for a terminal.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import click
import psycopg
from psycopg.rows import dict_row

from pgrag.db import tenant_transaction
from pgrag.errors import from_database_error

MAX_CHUNKS = 100
"""public.highlight's bound on chunk ids per call (docs/security.md)."""
START_MARK = "<mark>"
STOP_MARK = "</mark>"


@dataclass(frozen=True)
class Highlight:
    """A chunk's snippet (HTML-escaped, matches between ``<mark>`` and ``</mark>``) and every
    match in its content as ``[start, end]`` character offsets (from 0, end excluded)."""

    snippet: str
    matches: list[list[int]]


def highlight(
    conn: psycopg.Connection[Any],
    chunk_ids: Sequence[int],
    query_text: str,
    *,
    tenant: str,
    max_chars: int | None = None,
    language: str | None = None,
) -> dict[int, Highlight]:
    """``public.highlight`` for the first ``MAX_CHUNKS`` of ``chunk_ids`` as ``tenant``:
    {chunk id: Highlight} for the chunks the tenant may see."""
    args: dict[str, Any] = {"chunk_ids": list(chunk_ids)[:MAX_CHUNKS], "query_text": query_text}
    named = "chunk_ids => %(chunk_ids)s, query_text => %(query_text)s"
    if max_chars is not None:
        args["max_chars"] = max_chars
        named += ", max_chars => %(max_chars)s"
    if language is not None:
        args["language"] = language
        named += ", language => %(language)s"
    try:
        with tenant_transaction(conn, tenant), conn.cursor(row_factory=dict_row) as cur:
            cur.execute(f"select * from public.highlight({named})", args)
            rows = cur.fetchall()
    except psycopg.Error as exc:
        error = from_database_error(exc)
        if error is None:
            raise
        raise error from exc
    return {
        int(row["chunk_id"]): Highlight(row["snippet"] or "", list(row["matches"] or []))
        for row in rows
    }


_MARKED = re.compile(re.escape(START_MARK) + "(.*?)" + re.escape(STOP_MARK), re.DOTALL)


def terminal_text(snippet: str) -> str:
    """A snippet for a terminal: HTML references decoded, matches bold (an escaped snippet
    holds no other ``<``, so the marks are the only tags)."""
    out: list[str] = []
    last = 0
    for match in _MARKED.finditer(snippet):
        out.append(html.unescape(snippet[last : match.start()]))
        out.append(click.style(html.unescape(match.group(1)), bold=True, fg="yellow"))
        last = match.end()
    out.append(html.unescape(snippet[last:]))
    return "".join(out)
