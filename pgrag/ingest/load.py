"""Loading: the staging table, COPY into it, the atomic swap of documents, the tenant's index.

The loading stage (a :class:`~pgrag.ingest.workers.Worker` with its own connection) COPYs
each embedded batch (binary, pgvector's binary format) into a session-local staging table.
When a document's last chunk is staged, one transaction (``pgrag.replace_document_chunks``)
replaces its chunks, sets it ``ready`` and clears its staging rows; several small documents
share one such transaction. Readers never see half a document; staged rows die with the
connection.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from pgrag.db import connect, set_request_tenant, vector_schema
from pgrag.errors import EmbeddingConfigError, from_database_error
from pgrag.ingest.plan import Doc
from pgrag.ingest.workers import Worker
from pgrag.usage import Operation, Usage, record_usage

STAGE_COLUMNS = (
    "document_id",
    "chunk_index",
    "content",
    "embedding",
    "page",
    "heading_path",
    "language",
    "token_count",
    "content_sha256",
    "overlap_chars",
    "metadata",
)
STAGE_TYPES = [
    "int8",
    "int4",
    "text",
    "vector",
    "int4",
    "text[]",
    "text",
    "int4",
    "text",
    "int4",
    "jsonb",
]


def create_stage_table(conn: psycopg.Connection[Any]) -> None:
    """Create this session's staging table ``pg_temp.pgrag_stage`` (columns ``STAGE_COLUMNS``),
    which ``pgrag.replace_document_chunks`` reads."""
    vector = sql.Identifier(vector_schema(conn) or "public", "vector")
    conn.execute(
        sql.SQL(
            "create temp table pgrag_stage (document_id int8 not null, chunk_index int4 "
            "not null, content text not null, embedding {}, page int4, heading_path text[] "
            "not null, language text not null, token_count int4 not null, content_sha256 "
            "text not null, overlap_chars int4 not null, metadata jsonb not null)"
        ).format(vector)
    )


class Loader(Worker):
    """Owns the loading connection: COPYs batches to staging and swaps documents in."""

    def __init__(
        self,
        dsn: str,
        tenant: str,
        model: str,
        provider: str,
        on_commit: Callable[[list[Doc]], None] | None = None,
        operation: Operation = "ingest",
    ) -> None:
        super().__init__("pgrag-loader")
        self.on_commit = on_commit
        self.operation = operation
        self.tenant = tenant
        self.model = model
        self.provider = provider
        self.conn = connect(dsn, autocommit=True)
        self.model_recorded = False
        create_stage_table(self.conn)

    def close(self) -> None:
        self.conn.close()

    def _do_stage(self, payload: tuple[list[tuple[Any, ...]], int, int]) -> None:
        rows, tokens, requests = payload
        copy_sql = sql.SQL("copy pgrag_stage ({}) from stdin (format binary)").format(
            sql.SQL(", ").join(sql.Identifier(c) for c in STAGE_COLUMNS)
        )
        with self.conn.transaction():
            with self.conn.cursor() as cur, cur.copy(copy_sql) as copy:
                copy.set_types(STAGE_TYPES)
                for row in rows:
                    copy.write_row(row)
            # The batch's embedding tokens, in the same transaction: counted once, even when
            # the run is killed (staged rows and usage commit together).
            record_usage(
                self.conn,
                self.tenant,
                Usage(self.operation, self.provider, self.model, tokens, 0, requests),
            )

    def _do_fail(self, payload: tuple[int, str]) -> None:
        doc_id, message = payload
        with self.conn.transaction():
            set_request_tenant(self.conn, self.tenant)
            self.conn.execute("delete from pgrag_stage where document_id = %s", (doc_id,))
            self.conn.execute(
                "update pgrag.documents set status = 'error', error = %s "
                "where tenant_id = %s and id = %s",
                (message, self.tenant, doc_id),
            )

    def _do_commit(self, payload: tuple[list[tuple[Any, ...]], list[Doc]]) -> None:
        docs, done = payload
        self._commit(docs)
        if self.on_commit is not None:
            self.on_commit(done)

    def _commit(self, docs: list[tuple[Any, ...]]) -> None:
        t = self.tenant
        with self.conn.transaction():
            set_request_tenant(self.conn, t)
            try:
                self.conn.execute(
                    "select pgrag.replace_document_chunks('pg_temp.pgrag_stage'::regclass, %s,"
                    " %s::int8[], %s::text[], %s::text[], %s::text[], %s::jsonb[], %s::int4[], %s)",
                    (
                        t,
                        [d[0] for d in docs],
                        [d[1] for d in docs],
                        [d[2] for d in docs],
                        [d[3] for d in docs],
                        [Jsonb(d[4]) for d in docs],
                        [d[5] for d in docs],
                        self.model,
                    ),
                )
            except psycopg.Error as exc:  # PR001, PR002: errors.SQLSTATE_ERRORS
                error = from_database_error(exc)
                if error is None:
                    raise
                raise error from exc
            if not self.model_recorded:
                self.conn.execute(
                    "update pgrag.embedding_config set model = %s, provider = %s "
                    "where model is null",
                    (self.model, self.provider),
                )
                row = self.conn.execute(
                    "select model, provider from pgrag.embedding_config"
                ).fetchone()
                if row and (row[0], row[1]) != (self.model, self.provider):
                    raise EmbeddingConfigError(
                        f"another ingest recorded {row[1]}:{row[0]} as this database's model "
                        "meanwhile; mixing models is refused."
                    )
                self.model_recorded = True


def isolate_large_tenant(dsn: str, tenant: str) -> bool:
    """Give ``tenant`` its own HNSW graph once it outgrows the exact path; True if done now.

    ``pgrag.isolate_tenants`` decides (more than ``pgrag.exact_search_max_rows`` chunks and no
    graph yet) and builds the index, so a neighbour's data never slows or skews this tenant's
    vector search (docs/security.md, "Tenant isolation in the vector index"). Only the owner of
    ``pgrag.chunks`` may build indexes: for any other role this is left to the operator.
    """
    with connect(dsn, autocommit=True) as conn:
        owner = conn.execute(
            "select pg_catalog.pg_has_role(c.relowner, 'USAGE') from pg_catalog.pg_class as c "
            "where c.oid = 'pgrag.chunks'::regclass"
        ).fetchone()
        if not (owner and owner[0]):
            return False
        return bool(
            conn.execute(
                "select 1 from pgrag.isolate_tenants(tenants => array[%s]::text[])", (tenant,)
            ).fetchone()
        )
