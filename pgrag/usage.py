"""Token usage: what every caller of a model records, through ``pgrag.record_usage`` in SQL.

The SQL function is the one writer of ``pgrag.token_usage`` (per tenant, day, operation and
model, as sharded counters); this module only calls it as the tenant. Document embeddings are
recorded by the ingester (``ingest``), ``pgrag reembed`` (``reembed``) and the document
queue's worker (``worker``: the same loader as ``ingest``, which records each batch's tokens in
the transaction that stages it); query embeddings and query-cache hits by
``pgrag search``/``ask``/``eval`` (``query``, with the sentence embeddings of ``ask --check
local``); chat completions by ``pgrag ask`` and its ``--check llm`` judge (``chat``).
Cost is computed in SQL too (``pgrag.usage_costs``, with the operator's ``pgrag.model_prices``).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Literal

import psycopg

from pgrag.db import connect, one_line, tenant_transaction

Operation = Literal["ingest", "worker", "reembed", "query", "chat"]


@dataclass(frozen=True)
class Usage:
    """One record of usage: what a model did for one tenant."""

    operation: Operation
    provider: str
    model: str
    input_tokens: int = 0
    output_tokens: int = 0
    requests: int = 1
    cache_hits: int = 0

    @property
    def empty(self) -> bool:
        return not (self.input_tokens or self.output_tokens or self.requests or self.cache_hits)


def record_usage(conn: psycopg.Connection[Any], tenant: str, usage: Usage) -> None:
    """Add ``usage`` to ``tenant``'s figures (``pgrag.record_usage``).

    Runs in the caller's transaction when one is open (the ingester records a batch's tokens
    in the transaction that stages it), else in one of its own.
    """
    if usage.empty:
        return
    with tenant_transaction(conn, tenant):
        conn.execute(
            "select pgrag.record_usage(%s, %s, %s, %s, %s, %s, %s)",
            (
                usage.operation,
                usage.provider,
                usage.model,
                usage.input_tokens,
                usage.output_tokens,
                usage.requests,
                usage.cache_hits,
            ),
        )


def record_embedding_usage(
    conn: psycopg.Connection[Any],
    tenant: str,
    operation: Operation,
    provider: str,
    model: str,
    tokens: int,
    requests: int = 1,
) -> None:
    """Record document embeddings: the call ``pgrag worker`` makes after embedding a batch of
    ``tenant``'s chunks (``operation`` ``"worker"``) with ``tokens`` input tokens."""
    record_usage(conn, tenant, Usage(operation, provider, model, tokens, 0, requests))


def warn(message: str) -> None:
    """One line on stderr for a side effect that failed without failing the command."""
    print(f"pgrag: warning: {message}", file=sys.stderr, flush=True)


def relay_server_warnings(conn: psycopg.Connection[Any]) -> None:
    """From now on, print pgrag's own warnings the server sends on ``conn`` (``raise warning
    'pgrag: ...'``, e.g. a graph built on one process) as :func:`warn` lines, with their hint:
    psycopg drops notices unless a handler takes them."""

    def relay(diagnostic: psycopg.errors.Diagnostic) -> None:
        message = diagnostic.message_primary or ""
        if diagnostic.severity_nonlocalized == "WARNING" and message.startswith("pgrag: "):
            hint = f"; {diagnostic.message_hint}" if diagnostic.message_hint else ""
            warn(message.removeprefix("pgrag: ") + hint)

    conn.add_notice_handler(relay)


def record_usage_quietly(dsn: str | psycopg.Connection[Any], tenant: str, usage: Usage) -> bool:
    """:func:`record_usage` on ``dsn`` (a connection string, or an open connection), never
    raising: a search must not fail because its usage could not be written (e.g. the primary
    is unreachable). Says why on stderr and returns False then."""
    if usage.empty:
        return True
    try:
        if isinstance(dsn, str):
            with connect(dsn, autocommit=True) as conn:
                record_usage(conn, tenant, usage)
        else:
            record_usage(dsn, tenant, usage)
    except Exception as exc:  # the search succeeded; only its accounting failed
        warn(f"usage not recorded ({one_line(str(exc)) or type(exc).__name__})")
        return False
    return True
