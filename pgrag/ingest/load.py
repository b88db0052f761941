"""Loading: the staging table, COPY into it, the atomic swap of documents, the tenant's index.

The loading stage (a :class:`~pgrag.ingest.workers.Worker` with its own connection) COPYs
each embedded batch (binary, pgvector's binary format) into the session-local staging table
``pgrag.create_stage()`` makes. When a document's last chunk is staged, one transaction (the
lifecycle's swap: ``pgrag.replace_document_chunks``, or ``pgrag.complete_documents`` for the
worker) replaces its chunks, sets it ``ready`` and clears its staging rows; several small
documents share one such transaction. Readers never see half a document; staged rows die with
the connection.

A tenant's first load by ``pgrag ingest`` (or ``pgrag import``, which swaps through
:func:`swap_documents` too) as the owner of ``pgrag.chunks`` takes the bulk path
(``pgrag.bulk_load_applies``): the same swap through ``pgrag.bulk_replace_document_chunks``,
which keeps the rows out of the shared HNSW graph, and at the end of the run
``pgrag.finish_bulk_load`` builds the tenant's own graph once (docs/ingest.md, "Large first
loads").
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, ClassVar

import psycopg
from psycopg import sql

from pgrag.db import connect, tenant_transaction
from pgrag.errors import LockWaitTooLong
from pgrag.ingest.lifecycle import (
    STAGE,
    IngestLifecycle,
    Lifecycle,
    SwapRow,
    call,
    record_embedding_model,
    swap_arrays,
)
from pgrag.ingest.plan import Doc
from pgrag.ingest.workers import Worker
from pgrag.usage import Operation, Usage, record_usage, relay_server_warnings, warn


def create_stage_table(conn: psycopg.Connection[Any]) -> list[tuple[str, int]]:
    """Create this session's staging table ``pg_temp.pgrag_stage`` with ``pgrag.create_stage()``
    (the one definition of its columns, which ``pgrag.replace_document_chunks`` reads) and
    return its columns in order, as (name, type oid) for binary COPY."""
    conn.execute("select pgrag.create_stage()")
    rows = conn.execute(
        "select a.attname, a.atttypid from pg_catalog.pg_attribute as a "
        "where a.attrelid = %s::regclass and a.attnum > 0 and not a.attisdropped "
        "order by a.attnum",
        (STAGE,),
    ).fetchall()
    return [(str(name), int(oid)) for name, oid in rows]


def stage_copy_sql(columns: Sequence[tuple[str, int]]) -> sql.Composed:
    """The binary COPY into this session's staging table, of ``columns`` in their order."""
    return sql.SQL("copy {} ({}) from stdin (format binary)").format(
        sql.Identifier("pg_temp", "pgrag_stage"),
        sql.SQL(", ").join(sql.Identifier(name) for name, _ in columns),
    )


def bulk_load_applies(conn: psycopg.Connection[Any], tenant: str) -> bool:
    """May this load of ``tenant`` take the bulk path (``pgrag.bulk_load_applies``: the
    caller owns ``pgrag.chunks`` and the tenant has no chunk yet)? Asked once, before the
    first swap: the loads after it (the tenant then has chunks) take the ordinary one."""
    row = conn.execute("select pgrag.bulk_load_applies(%s)", (tenant,)).fetchone()
    return bool(row and row[0])


def swap_documents(
    conn: psycopg.Connection[Any],
    tenant: str,
    rows: Sequence[SwapRow],
    model: str,
    lifecycle: Lifecycle,
    bulk: bool,
) -> set[int]:
    """Swap staged documents in, inside the caller's transaction (acting as ``tenant``): the
    bulk path's ``pgrag.bulk_replace_document_chunks`` (rows left out of the shared graph and
    of the BM25 index until ``pgrag.finish_bulk_load``) or the lifecycle's own swap. The ids
    the lifecycle did not swap in (none on the bulk path)."""
    if not bulk:
        return lifecycle.swap(conn, tenant, rows, model)
    call(
        conn,
        "select pgrag.bulk_replace_document_chunks(%s::regclass, %s, %s::int8[],"
        " %s::text[], %s::text[], %s::text[], %s::jsonb[], %s::int4[], %s)",
        (STAGE, tenant, *swap_arrays(rows), model),
    )
    return set()


class Loader(Worker):
    """Owns the loading connection: COPYs batches to staging and swaps documents in.

    Batches arrive as rows keyed by column name; the staging table's own column order (read
    from the catalog) decides the COPY. ``on_commit(done, superseded)`` is called after each
    swap committed, with the ids the lifecycle did not swap in.
    """

    spans: ClassVar[dict[str, str]] = {"stage": "load", "commit": "load", "fail": "load"}

    def __init__(
        self,
        dsn: str,
        tenant: str,
        model: str,
        provider: str,
        lifecycle: Lifecycle,
        on_commit: Callable[[list[Doc], set[int]], None] | None = None,
        operation: Operation = "ingest",
    ) -> None:
        super().__init__("pgrag-loader")
        self.on_commit = on_commit
        self.operation = operation
        self.tenant = tenant
        self.model = model
        self.provider = provider
        self.lifecycle = lifecycle
        self.conn = connect(dsn, autocommit=True)
        self.model_recorded = False
        self.columns = create_stage_table(self.conn)
        # Decided once, before the first swap: a first load of the tenant by the owner, through
        # pgrag ingest's lifecycle (the worker's swap is pgrag.complete_documents).
        self.bulk = False
        # pgrag ingest saves the embeddings of documents spanning several batches as it stages
        # them (pgrag.save_embeddings: the owner's), so an interrupted run keeps them.
        self.save = False
        if isinstance(lifecycle, IngestLifecycle):
            self.bulk = bulk_load_applies(self.conn, tenant)
            row = self.conn.execute(
                "select pg_catalog.has_function_privilege("
                "'pgrag.save_embeddings(regclass, text, bigint[], integer[], integer[])',"
                " 'execute')"
            ).fetchone()
            self.save = bool(row and row[0])

    def close(self) -> None:
        self.conn.close()

    def _do_stage(
        self, payload: tuple[Sequence[dict[str, Any]], int, int, dict[int, list[int]]]
    ) -> None:
        rows, tokens, requests, saved = payload
        names = [name for name, _ in self.columns]
        with tenant_transaction(self.conn, self.tenant):
            with self.conn.cursor() as cur, cur.copy(stage_copy_sql(self.columns)) as copy:
                copy.set_types([oid for _, oid in self.columns])
                for row in rows:
                    copy.write_row([row[name] for name in names])
            # The batch's embedding tokens, in the same transaction: counted once, even when
            # the run is killed (staged rows and usage commit together).
            record_usage(
                self.conn,
                self.tenant,
                Usage(self.operation, self.provider, self.model, tokens, 0, requests),
            )
            if saved and self.save:  # a long document's embeddings, kept if the run stops
                ids = list(saved)
                first, last = [saved[i][0] for i in ids], [saved[i][1] for i in ids]
                call(
                    self.conn,
                    "select pgrag.save_embeddings(%s::regclass, %s, %s::int8[], %s::int4[],"
                    " %s::int4[])",
                    (STAGE, self.model, ids, first, last),
                )

    def _do_fail(self, payload: tuple[int, str]) -> None:
        doc_id, message = payload
        with tenant_transaction(self.conn, self.tenant):
            self.conn.execute("delete from pg_temp.pgrag_stage where document_id = %s", (doc_id,))
            self.lifecycle.fail(self.conn, doc_id, message)

    def _do_commit(self, payload: tuple[list[SwapRow], list[Doc]]) -> None:
        rows, done = payload
        superseded = self._commit(rows)
        if self.on_commit is not None:
            self.on_commit(done, superseded)

    def _commit(self, rows: list[SwapRow]) -> set[int]:
        with tenant_transaction(self.conn, self.tenant):
            superseded = swap_documents(
                self.conn, self.tenant, rows, self.model, self.lifecycle, self.bulk
            )
            if not self.model_recorded:
                record_embedding_model(self.conn, self.provider, self.model)
                self.model_recorded = True
        return superseded


# How long each connection of a parallel index pass waits for a lock. The connections wait for
# each other in Python, where PostgreSQL's deadlock detector cannot see: were another session's
# DDL queued on pgrag.chunks between their lock requests, they would wait forever without it.
PASS_LOCK_TIMEOUT = "30s"
PASS_LOCK = 0x70677261  # advisory lock key space of the index pass ("pgra"), with the tenant's hash


def index_bulk_backlog(dsn: str, tenant: str, jobs: int | None = None) -> int:
    """:func:`index_pass` under the tenant's :func:`end_of_load_lock`, with every table lock it
    waits for bounded by ``PASS_LOCK_TIMEOUT``."""
    try:
        with end_of_load_lock(dsn, tenant):
            return index_pass(dsn, tenant, jobs)
    except psycopg.errors.LockNotAvailable as exc:
        raise LockWaitTooLong(
            f"the keyword index of tenant {tenant!r}'s bulk load waited over {PASS_LOCK_TIMEOUT} "
            "for a lock another session holds on pgrag's tables (a migration or a long write?): "
            "run the same command again when it is done; what was indexed is kept"
        ) from exc


def pass_connection(dsn: str, autocommit: bool = False) -> psycopg.Connection[Any]:
    """A connection of the index pass: its lock waits bounded (``PASS_LOCK_TIMEOUT``)."""
    conn = connect(dsn, autocommit=autocommit)
    conn.execute("select pg_catalog.set_config('lock_timeout', %s, false)", (PASS_LOCK_TIMEOUT,))
    if not autocommit:
        conn.commit()
    return conn


@contextmanager
def end_of_load_lock(dsn: str, tenant: str) -> Iterator[None]:
    """One end of a load of ``tenant`` at a time (its keyword index pass, its graph): two
    imports or ingests of one tenant ending together would write the same postings and name
    the same index. Waits for the tenant's advisory lock (``PASS_LOCK``), held by a connection
    of its own until the block ends; the second then finds what the first left, usually
    nothing to do."""
    with connect(dsn, autocommit=True) as lock:
        lock.execute(
            "select pg_catalog.pg_advisory_lock(%s, pg_catalog.hashtext(%s))", (PASS_LOCK, tenant)
        )
        yield


def index_pass(dsn: str, tenant: str, jobs: int | None = None) -> int:
    """Write the BM25 index of the chunks a bulk load of ``tenant`` left in the backlog (the
    first half of ``pgrag.finish_bulk_load``), so keyword search and ``pgrag stats`` see them;
    how many chunks it indexed. For an interrupted first load: the graph build, the second
    half, can wait for the next run.

    On ``jobs`` connections (default: one per core, at most 4): the first locks
    ``pgrag.chunks`` against writes; each writes the postings of one range of words
    (``pgrag.bulk_load_lexeme_bounds``, ``pgrag.index_bulk_load_lexemes``) in its own part of
    the postings index; the others commit, then the first closes the backlog
    (``pgrag.close_bulk_load_backlog``) and commits. Stopped anywhere, what committed is kept
    and the next pass (``pgrag.index_bulk_load_backlog``) writes only what is missing. The
    caller holds the tenant's :func:`end_of_load_lock`."""
    jobs = jobs or min(4, os.cpu_count() or 1)
    with pass_connection(dsn, autocommit=True) as conn:
        row = conn.execute(
            "select pgrag.bulk_load_lexeme_bounds(%s, %s)", (tenant, jobs)
        ).fetchone()
        bounds: list[str | None] | None = row[0] if row else None
        if not bounds:  # one connection: nothing listed, or no parallel work wanted
            row = conn.execute("select pgrag.index_bulk_load_backlog(%s)", (tenant,)).fetchone()
            return int(row[0]) if row and row[0] is not None else 0
    ranges = list(zip([None, *bounds], [*bounds, None], strict=True))
    conns = [pass_connection(dsn) for _ in ranges]
    try:
        conns[0].execute("lock table pgrag.chunks in share mode")

        def part(i: int) -> None:
            conns[i].execute(
                "select pgrag.index_bulk_load_lexemes(%s, %s, %s)", (tenant, *ranges[i])
            )

        pool = ThreadPoolExecutor(len(ranges))
        try:
            list(pool.map(part, range(len(ranges))))
        except BaseException:  # Ctrl-C, or a part failed: stop the others' statements
            for c in conns:
                c.cancel()
            raise
        finally:
            pool.shutdown()
        for other in conns[1:]:
            other.commit()
        row = conns[0].execute("select pgrag.close_bulk_load_backlog(%s)", (tenant,)).fetchone()
        conns[0].commit()
    finally:
        for c in conns:
            c.close()
    return int(row[0]) if row and row[0] is not None else 0


def bulk_backlog(dsn: str, tenant: str) -> int | None:
    """Chunks of ``tenant`` a bulk load left without their keyword index (None: unknown)."""
    try:
        with connect(dsn, autocommit=True) as conn:
            row = conn.execute(
                "select count(*) from pgrag.bm25_backlog where tenant_id = %s and chunk_id > 0",
                (tenant,),
            ).fetchone()
    except psycopg.Error:
        return None
    return int(row[0]) if row else None


def graph_memory_advice(
    conn: psycopg.Connection[Any], rows: int, dims: int | None = None
) -> str | None:
    """One line for the operator when an HNSW graph of ``rows`` chunks (of ``dims`` dimensions;
    None: the installed ones) outgrows the memory its build is given (``pgrag.graph_build_memory``:
    what it needs, up to 1 GB unless the session gives more): pgvector then finishes it on disk,
    several times slower. None when it fits."""
    got = conn.execute(
        "select pgrag.graph_memory_needed(%s, %s), "
        "pg_catalog.pg_size_bytes(pgrag.graph_build_memory(%s, %s))",
        (rows, dims, rows, dims),
    ).fetchone()
    if got is None or got[0] <= got[1]:
        return None
    needed, given = int(got[0]), int(got[1])
    return (
        f"its graph of {rows:,} chunks needs about {needed / 2**30:.1f} GB to build in memory "
        f"and is given {given / 2**30:.1f} GB, so pgvector finishes it on disk, several times "
        "slower; give index builds more when the server has the memory, e.g. "
        f"PGOPTIONS='-c maintenance_work_mem={-(-needed // 2**30)}GB' for the command "
        '(docs/ingest.md, "Graphs larger than 1 GB")'
    )


def isolate_large_tenant(dsn: str, tenant: str) -> bool:
    """Give ``tenant`` its own HNSW graph once it outgrows the exact path; True if done now.

    First ``pgrag.finish_bulk_load`` ends a bulk load of the tenant (this run's, or one an
    interrupted run left): its own graph built over all its rows, or a small load's rows put
    into the shared graph; a no-op otherwise. Then ``pgrag.isolate_tenants`` decides (more than
    ``pgrag.exact_search_max_rows`` chunks and no graph yet) and builds the index, so a
    neighbour's data never slows or skews this tenant's vector search (docs/security.md,
    "Tenant isolation in the vector index"). Only the owner of ``pgrag.chunks`` may build
    indexes: for any other role this is left to the operator.
    """
    with connect(dsn, autocommit=True) as conn:
        owner = conn.execute(
            "select pg_catalog.pg_has_role(c.relowner, 'USAGE') from pg_catalog.pg_class as c "
            "where c.oid = 'pgrag.chunks'::regclass"
        ).fetchone()
        if not (owner and owner[0]):
            return False
        relay_server_warnings(conn)  # e.g. a graph built on one process (pgrag.build_graph)
        # The keyword index first, in its own transactions: an interrupted graph build keeps it.
        index_bulk_backlog(dsn, tenant)
        with end_of_load_lock(dsn, tenant):
            rows = conn.execute(
                "select pgrag.tenant_chunk_count(%s) where pgrag.own_graph_keyed(%s) is null",
                (tenant, tenant),
            ).fetchone()
            advice = graph_memory_advice(conn, rows[0]) if rows else None
            if advice:  # before the build, which may then take many minutes
                warn(f"tenant {tenant!r}: {advice}")
            built = conn.execute("select pgrag.finish_bulk_load(%s)", (tenant,)).fetchone()
            if built and built[0] is not None:
                return True
            return bool(
                conn.execute(
                    "select 1 from pgrag.isolate_tenants(tenants => array[%s]::text[])", (tenant,)
                ).fetchone()
            )
