"""The optional search log, written after a search (``public.log_search`` in SQL).

The search functions are read-only so that they run on a read replica; the log is a separate
call on the primary, made after the search. Whether anything is stored, and whether the query
text is, is the operator's setting in ``pgrag.settings`` (``search_log``,
``search_log_query_text``, both off by default), applied in SQL. A log that cannot be written
never fails the search.
"""

from __future__ import annotations

from typing import Any, Literal

import psycopg

from pgrag.db import one_line, tenant_transaction
from pgrag.usage import warn

LogMode = Literal["hybrid", "vector", "keyword", "context"]


def log_search(
    conn: psycopg.Connection[Any],
    tenant: str,
    mode: LogMode,
    latency_ms: float,
    rows: int,
    top_score: float | None,
    query_text: str | None = None,
) -> bool:
    """Record one search of ``tenant`` (``public.log_search``); True when stored.

    Never raises: a failure is one warning on stderr (the search itself succeeded)."""
    try:
        with tenant_transaction(conn, tenant):
            row = conn.execute(
                "select public.log_search(%s, %s, %s, %s, %s)",
                (
                    mode,
                    min(max(latency_ms, 0.0), 3_600_000.0),
                    min(rows, 1000),
                    top_score,
                    query_text[:10_000] if query_text else None,
                ),
            ).fetchone()
    except (psycopg.errors.UndefinedFunction, psycopg.errors.UndefinedTable):
        return False  # an installation without the search log
    except psycopg.Error as exc:
        warn(f"search not logged ({one_line(exc.diag.message_primary or str(exc))})")
        return False
    return bool(row and row[0])
