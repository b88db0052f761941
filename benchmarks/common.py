"""Helpers the benchmark scripts share (run them as ``python benchmarks/NAME.py``).

Databases are created, installed and dropped with :mod:`pgrag.testing`, the helpers the tests
use; a throwaway server is ``pgrag.testing.server``.
"""

from __future__ import annotations

import os
import statistics
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
from psycopg.conninfo import make_conninfo

ROOT = Path(__file__).resolve().parent.parent
# The evaluation data and vendored sources (data/scifact/, vendor/): PGRAG_SHARED_DIR, else a
# folder named shared beside the clone (as the tests find it).
SHARED = Path(os.environ.get("PGRAG_SHARED_DIR") or ROOT.parent / "shared")
SCIFACT = SHARED / "data" / "scifact"


def database_url(dsn: str | None) -> str:
    """``dsn`` (``--dsn`` / ``PGRAG_DSN``), else pgrag's embedded database, started on demand
    (as the ``pgrag`` command does)."""
    if dsn:
        return dsn
    from pgrag.local_server import EmbeddedCluster

    return EmbeddedCluster().start()


def admin_url(dsn: str | None) -> str:
    """The server of :func:`database_url`, connected to its ``postgres`` database (for creating
    and dropping the benchmark's own databases)."""
    return make_conninfo(database_url(dsn), dbname="postgres")


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile, linearly interpolated (numpy's default, as ``pgrag eval``)."""
    return float(np.percentile(np.asarray(values), q)) if values else float("nan")


def latency_summary(ms: list[float]) -> dict[str, float]:
    """p50, p95 and mean of latencies in milliseconds, rounded to 0.01 ms."""
    return {
        "p50_ms": round(percentile(ms, 50), 2),
        "p95_ms": round(percentile(ms, 95), 2),
        "mean_ms": round(statistics.fmean(ms), 2),
    }


def supabase_token_fields() -> dict[str, Any]:
    """The fields of a Supabase Auth access token (about 700 bytes as JSON, the size that matters
    for parsing them), which PostgREST puts into ``request.jwt.claims`` for a signed-in user;
    the tenant is added where ``pgrag.set_request_tenant`` puts it."""
    return {
        "aud": "authenticated",
        "exp": 1_790_000_000,
        "iat": 1_789_996_400,
        "iss": "https://abcdefghijklmnopqrst.supabase.co/auth/v1",
        "sub": "0b3c7f3e-1111-4222-8333-444455556666",
        "email": "someone@example.com",
        "phone": "",
        "app_metadata": {"provider": "email", "providers": ["email"]},
        "user_metadata": {
            "email": "someone@example.com",
            "email_verified": True,
            "full_name": "Some One Somebody",
            "phone_verified": False,
            "sub": "0b3c7f3e-1111-4222-8333-444455556666",
        },
        "role": "authenticated",
        "aal": "aal1",
        "amr": [{"method": "password", "timestamp": 1_789_990_000}],
        "session_id": "9d1c2b3a-aaaa-4bbb-8ccc-ddddeeeeffff",
        "is_anonymous": False,
    }


def short_revision(revision: str) -> str:
    """The short hash of a git revision of this checkout."""
    return subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", revision],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


def sql_versions(base: str) -> dict[str, str]:
    """The two versions a comparison of pgrag's SQL names: A, the ``sql/`` of git revision
    ``base``, and B, this checkout's (saying so when ``sql/`` has uncommitted changes)."""
    dirty = subprocess.run(
        ["git", "-C", str(ROOT), "status", "--porcelain", "sql"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    changed = " + uncommitted changes" if dirty else ""
    return {
        "A": f"{base} ({short_revision(base)})",
        "B": f"checkout ({short_revision('HEAD')}{changed})",
    }


def insert_ready_document(
    conn: psycopg.Connection[Any],
    tenant: str,
    uri: str,
    chunks: Iterable[tuple[str, Any]],
    title: str = "bench",
) -> int:
    """A ready text document of ``tenant`` with ``chunks`` ((content, embedding) in order),
    the chunks by binary COPY; its id. The caller commits."""
    row = conn.execute(
        "insert into pgrag.documents (tenant_id, title, source_type, source_uri, status)"
        " values (%s, %s, 'text', %s, 'ready') returning id",
        (tenant, title, uri),
    ).fetchone()
    assert row is not None
    with conn.cursor().copy(
        "copy pgrag.chunks (tenant_id, document_id, chunk_index, content, embedding,"
        " token_count, content_sha256) from stdin (format binary)"
    ) as cp:
        cp.set_types(["text", "int8", "int4", "text", "vector", "int4", "text"])
        for index, (content, embedding) in enumerate(chunks):
            cp.write_row((tenant, row[0], index, content, embedding, 64, f"{uri}#{index}"))
    return int(row[0])
