"""Connecting to PostgreSQL with errors a user can act on."""

from __future__ import annotations

import re
from typing import Any

import psycopg

from pgrag.errors import DatabaseUnreachable

_PASSWORD = re.compile(r"(://[^:/@]*:)[^@]*@")


def redact(dsn: str) -> str:
    """Return ``dsn`` with any password replaced by ``***``."""
    redacted = _PASSWORD.sub(r"\1***@", dsn)
    return re.sub(r"(password=)\S+", r"\1***", redacted)


def connect(dsn: str, *, autocommit: bool = False, **kwargs: Any) -> psycopg.Connection[Any]:
    """Open a connection, turning connection failures into :class:`DatabaseUnreachable`."""
    kwargs.setdefault("connect_timeout", 10)
    try:
        conn = psycopg.connect(dsn, autocommit=autocommit, **kwargs)
    except psycopg.OperationalError as exc:
        # libpq's message: the reason, then often a tab-indented hint; keep both on one line.
        reason = " ".join(part.strip() for part in str(exc).splitlines() if part.strip())
        reason = reason or type(exc).__name__
        end = "" if reason.endswith((".", "?", "!")) else "."
        raise DatabaseUnreachable(
            f"cannot connect to the database {redact(dsn)}: {reason}{end} "
            "Check --dsn / PGRAG_DSN, or omit them to use the embedded database."
        ) from exc
    register_vector_if_installed(conn)
    return conn


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

    row = conn.execute(
        "select n.nspname from pg_catalog.pg_extension e "
        "join pg_catalog.pg_namespace n on n.oid = e.extnamespace where e.extname = 'vector'"
    ).fetchone()
    if row is not None:
        schema = str(row[0])
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
    return row is not None


DEFAULT_TENANT = "default"


def set_request_tenant(conn: psycopg.Connection[Any], tenant: str) -> None:
    """Act as ``tenant`` for the rest of the current transaction.

    Calls ``pgrag.set_request_tenant``, which puts the tenant into ``request.jwt.claims``
    (transaction-local, as PostgREST does for a verified JWT) at the claim path the database's
    ``pgrag.tenant_claim`` names, so SQL functions and row-level security see the same tenant
    whether called by the CLI or over RPC. Outside a transaction it lasts one statement.
    """
    conn.execute("select pgrag.set_request_tenant(%s)", (tenant,))
