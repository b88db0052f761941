"""Figures per tenant for operators (``pgrag stats``), read from SQL.

``pgrag.tenant_stats`` computes them (documents by state, chunks, the queue when installed,
tokens, query-embedding cache hits, cost, searches logged), ``pgrag.answer_cache_stats`` the
semantic answer cache's entries and hit rate, and ``pgrag.usage_costs`` the usage per model with
its cost; this module only turns their rows into dataclasses.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import date, datetime
from decimal import Decimal
from typing import Any

import psycopg
from psycopg.rows import dict_row


@dataclass
class TenantStats:
    """One tenant's row of ``pgrag.tenant_stats``."""

    tenant_id: str
    documents: dict[str, int]
    document_count: int
    chunk_count: int
    queue: dict[str, Any] | None
    embedding_tokens: int
    query_embeddings: int
    cache_hits: int
    cache_hit_rate: float | None
    chat_input_tokens: int
    chat_output_tokens: int
    cost: Decimal
    unpriced_models: list[str] = field(default_factory=list)
    searches_logged: int = 0
    answer_cache: AnswerCacheStats | None = None
    """The semantic answer cache's figures, when the tenant has any."""

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["cost"] = float(self.cost)
        if self.answer_cache is not None and self.answer_cache.since is not None:
            data["answer_cache"]["since"] = self.answer_cache.since.isoformat()
        return data


@dataclass
class AnswerCacheStats:
    """One tenant's row of ``pgrag.answer_cache_stats``: entries held; lookups, hits and
    stale entries removed since the first lookup (``since``)."""

    entries: int
    lookups: int
    hits: int
    stale: int
    hit_rate: float | None
    since: datetime | None


@dataclass
class ModelUsage:
    """Usage of one tenant, operation and model (``pgrag.usage_costs``)."""

    tenant_id: str
    operation: str
    provider: str
    model: str
    requests: int
    input_tokens: int
    output_tokens: int
    cache_hits: int
    cost: Decimal | None
    priced: bool

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["cost"] = None if self.cost is None else float(self.cost)
        return data


def tenant_stats(
    conn: psycopg.Connection[Any], tenant: str | None = None, since: date | None = None
) -> list[TenantStats]:
    """Every tenant's figures (or ``tenant``'s), usage from ``since`` (a UTC day) on."""
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute("select * from pgrag.tenant_stats(%s, %s)", (tenant, since)).fetchall()
    caches = answer_cache_stats(conn, tenant)
    return [TenantStats(**row, answer_cache=caches.get(row["tenant_id"])) for row in rows]


def answer_cache_stats(
    conn: psycopg.Connection[Any], tenant: str | None = None
) -> dict[str, AnswerCacheStats]:
    """The answer cache's figures per tenant (``pgrag.answer_cache_stats``); none on a
    database without the cache."""
    if conn.execute("select to_regprocedure('pgrag.answer_cache_stats(text)')").fetchone() in (
        None,
        (None,),
    ):
        return {}
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute("select * from pgrag.answer_cache_stats(%s)", (tenant,)).fetchall()
    return {row.pop("tenant_id"): AnswerCacheStats(**row) for row in rows}


def usage_costs(
    conn: psycopg.Connection[Any], tenant: str | None = None, since: date | None = None
) -> list[ModelUsage]:
    """Usage per tenant, operation and model with its cost, from ``since`` on."""
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(
            "select * from pgrag.usage_costs(since => %s, tenant => %s)", (since, tenant)
        ).fetchall()
    return [ModelUsage(**row) for row in rows]
