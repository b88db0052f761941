"""Helpers the benchmark scripts share (run them as ``python benchmarks/NAME.py``)."""

from __future__ import annotations

import statistics

import numpy as np
import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from pgrag.migrator import Migrator


def drop_database(admin_dsn: str, name: str) -> None:
    """Drop database ``name`` if it exists, disconnecting its sessions."""
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(name))
        )


def fresh_database(admin_dsn: str, name: str, *, dims: int = 384) -> str:
    """(Re)create database ``name``, install pgrag with ``dims``-dimension embeddings; its DSN."""
    drop_database(admin_dsn, name)
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("create database {}").format(sql.Identifier(name)))
    dsn = make_conninfo(admin_dsn, dbname=name)
    Migrator(dsn).migrate(dims)
    return dsn


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
