"""Connecting to PostgreSQL with errors a user can act on."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

from pgrag import tracing
from pgrag.errors import ConfigError, DatabaseUnreachable, ReplicaLagging

_PASSWORD = re.compile(r"(://[^:/@]*:)[^@]*@")


def redact(dsn: str) -> str:
    """Return ``dsn`` with any password replaced by ``***``."""
    redacted = _PASSWORD.sub(r"\1***@", dsn)
    return re.sub(r"(password=)\S+", r"\1***", redacted)


def one_line(message: str) -> str:
    """``message`` (e.g. libpq's reason, then a tab-indented hint) joined on one line."""
    return " ".join(part.strip() for part in message.splitlines() if part.strip())


DSN_SOURCES = "--dsn / PGRAG_DSN / DATABASE_URL"
DSN_HINT = "Check --dsn / PGRAG_DSN, or omit them to use the embedded database."


def connect(
    dsn: str,
    *,
    autocommit: bool = False,
    sources: str = DSN_SOURCES,
    hint: str = DSN_HINT,
    **kwargs: Any,
) -> psycopg.Connection[Any]:
    """Open a connection, turning connection failures into :class:`DatabaseUnreachable`.

    ``sources`` names where the connection string came from and ``hint`` what to check when
    the server cannot be reached (the read replica's are ``READ_DSN_SOURCES``/``READ_DSN_HINT``).
    """
    kwargs.setdefault("connect_timeout", 10)
    try:
        conn = psycopg.connect(dsn, autocommit=autocommit, **kwargs)
    except psycopg.ProgrammingError as exc:  # libpq could not parse the connection string
        raise ConfigError(
            f"invalid connection string ({one_line(str(exc))}): use a URL such as "
            "postgresql://user@localhost:5432/dbname or key=value pairs (host=... dbname=...) "
            f"in {sources}."
        ) from exc
    except psycopg.OperationalError as exc:
        # libpq's message: the reason, then often a tab-indented hint; keep both on one line.
        reason = one_line(str(exc)) or type(exc).__name__
        end = "" if reason.endswith((".", "?", "!")) else "."
        raise DatabaseUnreachable(
            f"cannot connect to the database {redact(dsn)}: {reason}{end} {hint}"
        ) from exc
    tracing.trace_connection(conn)  # each statement a span, when tracing is on
    register_vector_if_installed(conn)
    return conn


# The schema pgvector is installed in: public, ``extensions`` on Supabase, or wherever an
# administrator put it. Every lookup (Python and the install SQL) uses this query.
VECTOR_SCHEMA_SQL = (
    "select n.nspname from pg_catalog.pg_extension as e "
    "join pg_catalog.pg_namespace as n on n.oid = e.extnamespace where e.extname = 'vector'"
)


def vector_schema(conn: psycopg.Connection[Any]) -> str | None:
    """The schema pgvector is installed in, or None when this database lacks the extension."""
    row = conn.execute(VECTOR_SCHEMA_SQL).fetchone()
    return str(row[0]) if row else None


def register_vector_if_installed(conn: psycopg.Connection[Any]) -> bool:
    """Register pgvector's types on ``conn`` when the extension exists in its database.

    Works wherever pgvector lives (``public``, or ``extensions`` on Supabase), whether or not
    that schema is on the connection's search_path.
    """
    from pgvector.psycopg.halfvec import register_halfvec_info
    from pgvector.psycopg.sparsevec import register_sparsevec_info
    from pgvector.psycopg.vector import register_vector_info
    from psycopg import sql
    from psycopg.types import TypeInfo

    schema = vector_schema(conn)
    if schema is not None:
        for name, register in (
            ("vector", register_vector_info),
            ("halfvec", register_halfvec_info),
            ("sparsevec", register_sparsevec_info),
        ):
            info = TypeInfo.fetch(conn, sql.Identifier(schema, name))
            if info is not None:
                register(conn, info)
    if not conn.autocommit:
        conn.rollback()
    return schema is not None


READ_DSN_SOURCES = "--read-dsn / PGRAG_READ_DSN"
READ_DSN_HINT = (
    "Check --read-dsn / PGRAG_READ_DSN (the server searches read from, e.g. a hot standby), "
    "or omit them to read from --dsn."
)


def wait_for_replay(
    writer: psycopg.Connection[Any], reader: psycopg.Connection[Any], timeout: float = 60.0
) -> str | None:
    """Read your writes on a hot standby: wait until ``reader`` (a standby) has replayed the
    WAL ``writer`` (its primary) has written so far; return that position.

    Returns None at once when ``reader`` is not in recovery (a primary, or a server that
    replicates otherwise): there is no position to wait for. Raises :class:`ReplicaLagging`
    after ``timeout`` seconds.
    """
    row = reader.execute("select pg_catalog.pg_is_in_recovery()").fetchone()
    if not row or not row[0]:
        return None
    written = writer.execute("select pg_catalog.pg_current_wal_lsn()::text").fetchone()
    assert written is not None
    target = str(written[0])
    deadline = time.monotonic() + timeout
    while True:
        got = reader.execute(
            "select coalesce(pg_catalog.pg_last_wal_replay_lsn() >= %s::pg_lsn, false), "
            "pg_catalog.pg_last_wal_replay_lsn()::text",
            (target,),
        ).fetchone()
        assert got is not None
        if got[0]:
            return target
        if time.monotonic() > deadline:
            raise ReplicaLagging(
                f"the read replica has replayed WAL up to {got[1]} after {timeout:.0f} s, "
                f"short of the primary's {target} that holds the writes just made: check its "
                "replication (pg_stat_replication on the primary), or omit --read-dsn."
            )
        time.sleep(0.05)


DEFAULT_TENANT = "default"


def set_request_tenant(conn: psycopg.Connection[Any], tenant: str) -> None:
    """Act as ``tenant`` for the rest of the current transaction.

    Calls ``pgrag.set_request_tenant``, which puts the tenant into ``request.jwt.claims``
    (transaction-local, as PostgREST does for a verified JWT) at the claim path the database's
    ``pgrag.tenant_claim`` names, so SQL functions and row-level security see the same tenant
    whether called by the CLI or over RPC. Outside a transaction it lasts one statement.
    Python code acts as a tenant through :func:`tenant_transaction`, which calls this.
    """
    conn.execute("select pgrag.set_request_tenant(%s)", (tenant,))


@contextmanager
def tenant_transaction(
    conn: psycopg.Connection[Any], tenant: str
) -> Iterator[psycopg.Connection[Any]]:
    """A transaction acting as ``tenant``: the one way Python code works on a tenant's rows.

    Contract:

    * Opens ``conn.transaction()``: a transaction, or a savepoint when one is already open on
      ``conn`` (the acting tenant then lasts until the outer transaction ends).
    * Its first statement is :func:`set_request_tenant`, so every statement of the block runs
      with ``tenant``'s claims: pgrag's SQL functions, policies and write limits see ``tenant``
      (``pgrag.current_tenant_id()``) as for a PostgREST request of that tenant, on a Citus
      coordinator on its workers too. Nothing else about the session changes (role,
      search_path).
    * Commits when the block ends, rolls back (to the savepoint) when it raises, and re-raises;
      the claims are transaction-local, so they never outlive the transaction (a pooled server
      connection never carries them to the next client).
    * Yields ``conn``. A blank or null ``tenant`` raises 22023 (``pgrag.set_request_tenant``).
    """
    with conn.transaction():
        set_request_tenant(conn, tenant)
        yield conn


def database_error_message(exc: psycopg.Error) -> str:
    """One line for a database error pgrag did not anticipate: what failed and what to do.

    Chosen by SQLSTATE; 22023 (invalid_parameter_value, raised by pgrag's own SQL argument
    checks) and pgrag's PR codes print the server's message as it is.
    """
    diag = exc.diag
    code = exc.sqlstate or ""
    message = one_line(diag.message_primary or str(exc)) or type(exc).__name__
    hint = one_line(diag.message_hint or "")
    if code == "42704" and "text search configuration" in message:
        return (
            f"{message}: pass --language with one of the server's configurations "
            "(select cfgname from pg_ts_config: english, simple, german, ...)."
        )
    if code == "22023" or code.startswith("PR"):
        return f"{message}{'. ' + hint if hint else ''}"
    if code in ("42P01", "42883", "3F000"):  # undefined table / function / schema
        return (
            f"{message}: pgrag is not installed in this database, or is out of date; "
            "run pgrag migrate."
        )
    if code == "42501":
        return (
            f"{message}: the connecting role lacks a privilege; connect as a role pgrag's "
            "grants cover (docs/security.md) or as the database owner."
        )
    if code == "57014":
        return (
            f"{message}: the statement timed out or was cancelled; retry, or raise "
            "statement_timeout."
        )
    if code.startswith("08") or (isinstance(exc, psycopg.OperationalError) and not code):
        return (
            f"lost the connection to the database ({message}); check that the server is up "
            "and retry."
        )
    if code.startswith("40"):
        return f"{message}: a concurrent transaction conflicted; run the command again."
    if code.startswith("53"):
        return f"{message}: the server is out of resources (disk, memory or connections)."
    if code.startswith("22"):
        return f"invalid value: {message}{'. ' + hint if hint else ''}"
    if not code:
        return f"database client error: {message}"
    return f"database error {code}: {message}{'. ' + hint if hint else ''}"
