"""Removing documents (``pgrag delete``, ``pgrag ingest --prune``) and asking what a tenant holds.

The removal itself is ``pgrag.delete_documents`` in SQL (one transaction, BM25 statistics
kept by the chunk triggers); this module turns paths and globs into its arguments.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from pgrag.db import tenant_transaction
from pgrag.errors import ConfigError
from pgrag.pipeline.extract import is_url

DELETE_BATCH = 10_000  # document ids per call of pgrag.delete_documents (its limit)


@dataclass(frozen=True)
class RemovedDocument:
    document_id: int
    source_uri: str
    chunk_count: int


def like_escape(text: str) -> str:
    """``text`` as a literal inside a LIKE pattern (backslash is LIKE's default escape)."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def glob_to_like(pattern: str) -> str:
    """A shell-style glob as a LIKE pattern: ``*`` (also ``**``) is ``%``, ``?`` is ``_``.

    ``*`` matches across ``/``. A relative pattern (not starting with ``/``, ``*``, ``?`` or a
    URL scheme) is taken relative to the current folder, as ingest stores absolute paths.
    """
    if any(c in pattern for c in "[]"):
        raise ConfigError(f"--glob {pattern!r}: only * and ? are supported in removal patterns.")
    if not (pattern.startswith(("/", "*", "?")) or is_url(pattern)):
        pattern = f"{Path.cwd()}/{pattern}"
    return "".join("%" if c == "*" else "_" if c == "?" else like_escape(c) for c in pattern)


def path_criteria(items: Sequence[str]) -> tuple[list[str], list[str]]:
    """(source URIs, LIKE patterns) for paths and URLs as ingest stored them.

    A local path is made absolute; a folder (existing, or written with a trailing ``/``) also
    matches every document under it.
    """
    uris: list[str] = []
    patterns: list[str] = []
    for item in items:
        if is_url(item):
            uris.append(item)
            continue
        p = Path(item).resolve()
        uris.append(str(p))
        if p.is_dir() or item.endswith("/"):
            patterns.append(like_escape(str(p).rstrip("/")) + "/%")
    return uris, patterns


def delete_documents(
    conn: psycopg.Connection[Any],
    tenant: str,
    *,
    document_ids: Sequence[int] | None = None,
    source_uris: Sequence[str] | None = None,
    patterns: Sequence[str] | None = None,
    dry_run: bool = False,
) -> list[RemovedDocument]:
    """Remove (or with ``dry_run`` list) ``tenant``'s matching documents, in one transaction.

    ``pgrag.delete_documents`` takes at most ``DELETE_BATCH`` ids a call: more ids (a prune of
    a large source) are removed by several calls in the same transaction."""
    ids = list(document_ids) if document_ids else []
    batches: list[list[int] | None] = [
        ids[i : i + DELETE_BATCH] for i in range(0, len(ids), DELETE_BATCH)
    ] or [None]
    rows: list[Any] = []
    with tenant_transaction(conn, tenant):
        for n, batch in enumerate(batches):
            first = n == 0  # the URIs and patterns go with the first call
            rows += conn.execute(
                "select * from pgrag.delete_documents(document_ids => %s, source_uris => %s, "
                "source_uri_patterns => %s, dry_run => %s)",
                (
                    batch,
                    list(source_uris) if source_uris and first else None,
                    list(patterns) if patterns and first else None,
                    dry_run,
                ),
            ).fetchall()
    return [RemovedDocument(int(r[0]), str(r[1]), int(r[2])) for r in rows]


def missing_under(conn: psycopg.Connection[Any], tenant: str, folder: Path) -> list[int]:
    """Ids of ``tenant``'s documents stored under ``folder`` whose file no longer exists."""
    with tenant_transaction(conn, tenant):
        rows = conn.execute(
            "select id, source_uri from pgrag.documents where tenant_id = %s "
            "and source_uri like %s",
            (tenant, like_escape(str(folder).rstrip("/")) + "/%"),
        ).fetchall()
    return [int(i) for i, uri in rows if not Path(uri).exists()]


def tenant_is_empty(conn: psycopg.Connection[Any], tenant: str) -> str | None:
    """Why ``tenant`` cannot answer anything (no documents at all, none ready), else None."""
    with tenant_transaction(conn, tenant):
        ready, total = conn.execute(
            "select count(*) filter (where status = 'ready'), count(*) "
            "from pgrag.documents where tenant_id = %s",
            (tenant,),
        ).fetchone() or (0, 0)
        if ready:
            return None
        if total:
            return (
                f"tenant {tenant!r} has no ready document ({total} failed or still in progress): "
                "see the errors in pgrag.documents and run pgrag ingest again."
            )
        anything = conn.execute("select exists (select 1 from pgrag.documents)").fetchone()
    if anything and anything[0]:
        return (
            f"tenant {tenant!r} has no documents: check --tenant / PGRAG_TENANT, or ingest "
            f"into it with pgrag ingest PATH --tenant {tenant}."
        )
    return "nothing is ingested yet: run pgrag ingest PATH first (e.g. pgrag ingest samples/)."
