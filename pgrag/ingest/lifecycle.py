"""The document lifecycle as a loader sees it: every state change is a SQL function.

A run (:class:`~pgrag.ingest.run.IngestRun`) decides what to do with each source and produces
chunks; what that does to the documents is a :class:`Lifecycle`:

* :class:`IngestLifecycle` (``pgrag ingest``): ``pgrag.begin_documents`` (new documents
  ``processing``, refreshed ones stay ``ready``), ``pgrag.relabel_documents``,
  ``pgrag.fail_sources`` / ``pgrag.fail_documents`` / ``pgrag.abort_documents`` (``error``) and
  ``pgrag.replace_document_chunks`` (the swap to ``ready``);
* :class:`pgrag.worker.jobs.QueueLifecycle` (``pgrag worker``): the same swap behind
  ``pgrag.complete_documents``, which swaps in only what the worker still holds at the version
  it processed, and the queue's retries (``pgrag.fail_attempts``).

Python never writes ``pgrag.documents`` or ``pgrag.document_queue`` itself. Each method runs in
a transaction acting as the run's tenant (``pgrag.db.tenant_transaction``), except ``fail`` and
``swap``, which the loading stage calls inside its own transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import psycopg
from psycopg.types.json import Jsonb

from pgrag.db import tenant_transaction
from pgrag.errors import from_database_error
from pgrag.pipeline.extract import ExtractedDocument

STAGE = "pg_temp.pgrag_stage"


@dataclass
class FailedSource:
    """A source that could not even be opened, or be fetched (``retryable``: a later attempt
    may succeed, e.g. a timeout or an HTTP 503)."""

    uri: str
    source_type: str
    reason: str
    retryable: bool = False


@dataclass(frozen=True)
class SwapRow:
    """What the swap records about one document (the arrays of ``replace_document_chunks``)."""

    doc_id: int
    title: str
    source_type: str
    content_sha256: str
    metadata: dict[str, Any]
    n_chunks: int


class Lifecycle(Protocol):
    """The state changes a run makes to its documents (see the module docstring)."""

    def begin(
        self, conn: psycopg.Connection[Any], tenant: str, sources: Sequence[ExtractedDocument]
    ) -> dict[str, int]:
        """Mark ``sources`` as being loaded; their document ids by uri."""
        ...

    def unchanged(self, conn: psycopg.Connection[Any], tenant: str, uris: Sequence[str]) -> None:
        """Sources found unchanged (nothing to do to the stored document)."""
        ...

    def relabel(
        self,
        conn: psycopg.Connection[Any],
        tenant: str,
        relabel: Sequence[tuple[int, dict[str, Any], str]],
    ) -> None:
        """Unchanged sources with new metadata: (document id, metadata, uri)."""
        ...

    def fail_sources(
        self, conn: psycopg.Connection[Any], tenant: str, failed: Sequence[FailedSource]
    ) -> None:
        """Sources that failed before they were loaded."""
        ...

    def fail(self, conn: psycopg.Connection[Any], doc_id: int, reason: str) -> None:
        """A document that failed while being loaded (inside the caller's transaction)."""
        ...

    def swap(
        self, conn: psycopg.Connection[Any], tenant: str, rows: Sequence[SwapRow], model: str
    ) -> set[int]:
        """Swap the staged chunks of ``rows`` in (inside the caller's transaction); the ids of
        documents that were not swapped in (superseded meanwhile)."""
        ...

    def abort(
        self,
        conn: psycopg.Connection[Any],
        tenant: str,
        ids: Sequence[int],
        uris: Sequence[str],
        message: str,
    ) -> None:
        """The run stopped: documents still being loaded (by id, or by uri for those whose
        row was just made)."""
        ...


def call(conn: psycopg.Connection[Any], statement: str, params: Sequence[Any]) -> list[Any]:
    """Run one lifecycle function; pgrag's SQLSTATEs become pgrag's exceptions."""
    try:
        return conn.execute(statement, params).fetchall()
    except psycopg.Error as exc:  # PR001, PR002: errors.SQLSTATE_ERRORS
        error = from_database_error(exc)
        if error is None:
            raise
        raise error from exc


def record_embedding_model(conn: psycopg.Connection[Any], provider: str, model: str) -> None:
    """``pgrag.record_embedding_model``: the first load records the model (PR002 if another)."""
    call(conn, "select pgrag.record_embedding_model(%s, %s)", (provider, model))


class IngestLifecycle:
    """``pgrag ingest``: documents keyed by their source uri, no queue."""

    def begin(
        self, conn: psycopg.Connection[Any], tenant: str, sources: Sequence[ExtractedDocument]
    ) -> dict[str, int]:
        with tenant_transaction(conn, tenant):
            rows = call(
                conn,
                "select source_uri, document_id from pgrag.begin_documents(%s, %s, %s)",
                (
                    [d.uri for d in sources],
                    [d.title for d in sources],
                    [d.source_type for d in sources],
                ),
            )
        return {str(u): int(i) for u, i in rows}

    def unchanged(self, conn: psycopg.Connection[Any], tenant: str, uris: Sequence[str]) -> None:
        return None

    def relabel(
        self,
        conn: psycopg.Connection[Any],
        tenant: str,
        relabel: Sequence[tuple[int, dict[str, Any], str]],
    ) -> None:
        with tenant_transaction(conn, tenant):
            call(
                conn,
                "select pgrag.relabel_documents(%s::int8[], %s::jsonb[])",
                ([i for i, _, _ in relabel], [Jsonb(m) for _, m, _ in relabel]),
            )

    def fail_sources(
        self, conn: psycopg.Connection[Any], tenant: str, failed: Sequence[FailedSource]
    ) -> None:
        with tenant_transaction(conn, tenant):
            call(
                conn,
                "select pgrag.fail_sources(%s, %s, %s)",
                (
                    [f.uri for f in failed],
                    [f.source_type for f in failed],
                    [f.reason for f in failed],
                ),
            )

    def fail(self, conn: psycopg.Connection[Any], doc_id: int, reason: str) -> None:
        call(conn, "select pgrag.fail_documents(%s::int8[], %s)", ([doc_id], [reason]))

    def swap(
        self, conn: psycopg.Connection[Any], tenant: str, rows: Sequence[SwapRow], model: str
    ) -> set[int]:
        call(
            conn,
            "select pgrag.replace_document_chunks(%s::regclass, %s, %s::int8[], %s::text[],"
            " %s::text[], %s::text[], %s::jsonb[], %s::int4[], %s)",
            (STAGE, tenant, *swap_arrays(rows), model),
        )
        return set()

    def abort(
        self,
        conn: psycopg.Connection[Any],
        tenant: str,
        ids: Sequence[int],
        uris: Sequence[str],
        message: str,
    ) -> None:
        with tenant_transaction(conn, tenant):
            call(
                conn,
                "select pgrag.abort_documents(%s::int8[], %s::text[], %s)",
                (list(ids), list(uris), f"ingest aborted: {message}"),
            )


def swap_arrays(rows: Sequence[SwapRow]) -> tuple[list[Any], ...]:
    """The per-document arrays the swap functions take, in their argument order."""
    return (
        [r.doc_id for r in rows],
        [r.title for r in rows],
        [r.source_type for r in rows],
        [r.content_sha256 for r in rows],
        [Jsonb(r.metadata) for r in rows],
        [r.n_chunks for r in rows],
    )
