"""What a search page shows around its results: facets and "did you mean".

Both are SQL functions (``public.search_facets``, ``public.suggest_query``, docs/sql-api.md);
this module calls them as a tenant and turns rows into dataclasses, for ``pgrag facets``,
``pgrag suggest`` and any caller that wants a correction before searching
(:func:`suggest`, then search :attr:`Suggestion.suggested_query` when
:attr:`Suggestion.changed`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from pgrag.db import tenant_transaction
from pgrag.errors import from_database_error
from pgrag.search import API_SCHEMA, SearchFilters


@dataclass(frozen=True)
class FacetValue:
    """One value of a facet: how many matching documents have it, and the search arguments
    (``filter``: source_types, created_after/created_before or metadata_filter) that narrow a
    search to exactly those documents."""

    facet: str
    value: str
    documents: int
    filter: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Correction:
    """A query word without postings and the closest word of the tenant's vocabulary."""

    word: str
    suggestion: str
    similarity: float
    edits: int


@dataclass(frozen=True)
class Suggestion:
    """The query with its unknown words replaced (``query_text`` itself when none is)."""

    query_text: str
    suggested_query: str
    corrections: list[Correction] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.corrections)

    def as_dict(self) -> dict[str, Any]:
        return {
            "query": self.query_text,
            "suggested_query": self.suggested_query,
            "corrections": [asdict(c) for c in self.corrections],
        }


def _rows(
    conn: psycopg.Connection[Any], function: str, args: dict[str, Any], tenant: str
) -> list[dict[str, Any]]:
    """``select * from public.<function>(name => value, ...)`` as ``tenant``."""
    named = sql.SQL(", ").join(
        sql.SQL("{} => {}").format(sql.Identifier(name), sql.Placeholder(name)) for name in args
    )
    query = sql.SQL("select * from {}.{}({})").format(
        sql.Identifier(API_SCHEMA), sql.Identifier(function), named
    )
    try:
        with tenant_transaction(conn, tenant), conn.cursor(row_factory=dict_row) as cur:
            cur.execute(query, args)
            return cur.fetchall()
    except psycopg.Error as exc:
        error = from_database_error(exc)  # 22023: an argument out of its documented range
        if error is None:
            raise
        raise error from exc


def facets(
    conn: psycopg.Connection[Any],
    query_text: str | None,
    *,
    tenant: str,
    metadata_keys: Sequence[str] = (),
    max_values: int | None = None,
    language: str | None = None,
    filters: SearchFilters | None = None,
) -> list[FacetValue]:
    """The facets of ``query_text`` (blank: of every document passing ``filters``) as
    ``tenant``: source_type, month, and metadata.<key> for each of ``metadata_keys``."""
    args: dict[str, Any] = {"query_text": query_text or None}
    if metadata_keys:
        args["metadata_keys"] = list(metadata_keys)
    if max_values is not None:
        args["max_values"] = max_values
    if language is not None:
        args["language"] = language
    args |= (filters or SearchFilters()).arguments()
    return [
        FacetValue(r["facet"], r["value"], int(r["documents"]), dict(r["filter"] or {}))
        for r in _rows(conn, "search_facets", args, tenant)
    ]


def suggest(
    conn: psycopg.Connection[Any],
    query_text: str,
    *,
    tenant: str,
    language: str | None = None,
    min_similarity: float | None = None,
) -> Suggestion:
    """ "Did you mean" for ``query_text`` as ``tenant``: its words without postings replaced by
    the closest words of the tenant's own vocabulary."""
    args: dict[str, Any] = {"query_text": query_text}
    if language is not None:
        args["language"] = language
    if min_similarity is not None:
        args["min_similarity"] = min_similarity
    rows = _rows(conn, "suggest_query", args, tenant)
    row: dict[str, Any] = rows[0] if rows else {"suggested_query": query_text, "corrections": []}
    corrections = [
        Correction(str(c["word"]), str(c["suggestion"]), float(c["similarity"]), int(c["edits"]))
        for c in row["corrections"] or []
    ]
    return Suggestion(query_text, row["suggested_query"] or query_text, corrections)
