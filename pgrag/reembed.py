"""Switching the embedding model without downtime: the client side of ``pgrag reembed``.

Everything about the switch is SQL (``sql/idempotent/030-reembed.sql`` and
``033-reembed-switch.sql``): ``pgrag.reembed_start`` records the target, ``pgrag.reembed_claim``
hands out chunks waiting for their new embedding (``FOR UPDATE SKIP LOCKED``, so any number of
processes share the work and a killed one's batch is claimed again), ``pgrag.reembed_store`` keeps
the new vectors beside the old ones, and ``pgrag.reembed_switch`` makes them the database's in one
transaction. This module only loops: claim, embed with the new model, store and record the tokens,
commit; then switch. Searches keep answering with the old model until the switch commits.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import psycopg

from pgrag.db import connect, one_line
from pgrag.errors import EmbeddingConfigError, ModelSwitchError, from_database_error
from pgrag.ingest.load import graph_memory_advice
from pgrag.pipeline.embedders import Embedder
from pgrag.progress import Progress, ProgressMode
from pgrag.usage import Usage, record_usage, relay_server_warnings, warn

DEFAULT_BATCH = 64
POLL_SECONDS = 1.0  # wait between looks at a queue whose last chunks other processes hold


@dataclass
class ReembedStatus:
    """The latest re-embed, as ``pgrag.reembed_status()`` reports it."""

    reembed_id: int
    status: str
    model: str
    provider: str
    dims: int
    from_model: str | None
    from_provider: str | None
    from_dims: int
    started_at: Any
    finished_at: Any
    chunk_count: int | None
    embedded: int | None
    waiting: int | None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ReembedSummary:
    """What one ``reembed`` run did."""

    reembed_id: int
    model: str
    provider: str
    dims: int
    from_model: str | None
    from_provider: str | None
    from_dims: int
    joined: bool = False  # another process had started this re-embed
    chunks_embedded: int = 0  # by this process
    tokens: int = 0  # by this process
    switched: bool = False  # the database now holds the new model (by this process or another)
    switched_here: bool = False
    cancelled: bool = False
    chunk_count: int | None = None
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["seconds"] = round(self.seconds, 3)
        return data


def _raise_mapped(exc: psycopg.Error) -> None:
    """Raise the pgrag error a re-embed SQL error means (PR201-PR203 and 22023 carry the
    server's message), if it means one; other database errors stay themselves (the CLI
    explains them by SQLSTATE)."""
    mapped = from_database_error(exc)
    if mapped is not None:
        raise mapped from exc


def reembed_status(conn: psycopg.Connection[Any]) -> ReembedStatus | None:
    """The latest re-embed (None when none ever ran)."""
    row = conn.execute("select * from pgrag.reembed_status()").fetchone()
    if not conn.autocommit:
        conn.rollback()
    return None if row is None else ReembedStatus(*row)


def cancel_reembed(conn: psycopg.Connection[Any]) -> bool:
    """Cancel the running re-embed (False when none runs); the database keeps its model."""
    with conn.transaction():
        row = conn.execute("select pgrag.reembed_cancel()").fetchone()
    return bool(row and row[0])


def _split(tokens: int, weights: dict[str, int]) -> dict[str, int]:
    """``tokens`` shared out in proportion to ``weights`` (summing exactly to ``tokens``)."""
    total = sum(weights.values()) or 1
    out: dict[str, int] = {}
    given = 0
    keys = list(weights)
    for key in keys[:-1]:
        out[key] = tokens * weights[key] // total
        given += out[key]
    out[keys[-1]] = tokens - given
    return out


class Reembedder:
    """One process's share of a re-embed to ``embedder``'s model, on its own connection."""

    def __init__(
        self,
        dsn: str,
        embedder: Embedder,
        *,
        batch_size: int = DEFAULT_BATCH,
        poll_seconds: float = POLL_SECONDS,
    ) -> None:
        self.dsn = dsn
        self.embedder = embedder
        self.batch_size = batch_size
        self.poll_seconds = poll_seconds
        self.conn = connect(dsn, autocommit=True)
        relay_server_warnings(self.conn)  # e.g. a graph built on one process (pgrag.build_graph)
        self.advised = False

    def close(self) -> None:
        self.conn.close()

    def start(self) -> ReembedSummary:
        """Start the re-embed (or join the same one, started by another process)."""
        e = self.embedder
        try:
            with self.conn.transaction():
                row = self.conn.execute(
                    "select * from pgrag.reembed_start(%s, %s, %s)",
                    (e.model_name, e.provider, e.dims),
                ).fetchone()
        except psycopg.Error as exc:
            _raise_mapped(exc)
            raise
        assert row is not None
        reembed_id, started, from_model, from_provider, from_dims = row
        return ReembedSummary(
            reembed_id,
            e.model_name,
            e.provider,
            e.dims,
            from_model,
            from_provider,
            from_dims,
            joined=not started,
        )

    def batch(self, summary: ReembedSummary) -> int:
        """Claim, embed, store and record one batch in one transaction; chunks stored (0: none
        could be claimed). ``ModelSwitchError`` when the re-embed ended meanwhile."""
        try:
            return self._batch(summary)
        except psycopg.Error as exc:
            _raise_mapped(exc)
            raise

    def _batch(self, summary: ReembedSummary) -> int:
        e = self.embedder
        with self.conn.transaction():
            rows = self.conn.execute(
                "select tenant_id, chunk_id, content, content_sha256 from pgrag.reembed_claim(%s)",
                (self.batch_size,),
            ).fetchall()
            if not rows:
                return 0
            before = e.tokens_used
            vectors = e.embed([r[2] for r in rows])
            if vectors.shape[1] != e.dims:
                raise EmbeddingConfigError(
                    f"{e.provider}:{e.model_name} returned {vectors.shape[1]}-dimension "
                    f"embeddings, not {e.dims}."
                )
            tokens = e.tokens_used - before
            self.conn.execute(
                "select pgrag.reembed_store(%s, %s, %s, %s, %s)",
                (
                    e.model_name,
                    [r[0] for r in rows],
                    [r[1] for r in rows],
                    [r[3] for r in rows],
                    list(vectors),
                ),
            )
            # Tokens per tenant, in proportion to their texts' length (a batch is mostly one
            # tenant: the claim takes chunks in tenant order); the total is the model's count.
            weights: dict[str, int] = {}
            for tenant, _, content, _ in rows:
                weights[tenant] = weights.get(tenant, 0) + max(len(content), 1)
            for tenant, share in _split(tokens, weights).items():
                record_usage(self.conn, tenant, Usage("reembed", e.provider, e.model_name, share))
        summary.chunks_embedded += len(rows)
        summary.tokens += tokens
        return len(rows)

    def largest_graph(self) -> int:
        """Chunks of the largest HNSW graph the switch builds: the shared one, or a tenant's own."""
        row = self.conn.execute(
            "select greatest((select count(*) from pgrag.chunks where in_shared_graph), "
            "(select coalesce(max(pgrag.tenant_chunk_count(s.tenant_id)), 0) "
            "from (select distinct tenant_id from pgrag.corpus_stats) as s))"
        ).fetchone()
        return int(row[0]) if row else 0

    def switch(self) -> tuple[bool, int, int | None]:
        """``pgrag.reembed_switch()``: (switched, chunks still waiting, chunks switched). Says
        first (once) when the largest graph it builds will not fit its build's memory."""
        if not self.advised:
            self.advised = True
            advice = graph_memory_advice(self.conn, self.largest_graph(), self.embedder.dims)
            if advice:  # before the switch, which may then take many minutes
                warn(f"the switch to {self.embedder.model_name}: {advice}")
        with self.conn.transaction():
            row = self.conn.execute(
                "select switched, waiting, chunk_count from pgrag.reembed_switch()"
            ).fetchone()
        assert row is not None
        return bool(row[0]), int(row[1] or 0), row[2]

    def run(
        self,
        summary: ReembedSummary,
        *,
        switch: bool = True,
        on_batch: Callable[[int], None] | None = None,
    ) -> ReembedSummary:
        """Work until no chunk waits, then switch (unless ``switch`` is false)."""
        while True:
            try:
                n = self._batch(summary)
                if n:
                    if on_batch is not None:
                        on_batch(n)
                    continue
                status = reembed_status(self.conn)
                if status is None or status.reembed_id != summary.reembed_id:
                    raise ModelSwitchError(
                        "the re-embed this run worked on is gone (another re-embed started "
                        "since?): see pgrag reembed --status."
                    )
                if status.status != "running":
                    summary.switched = status.status == "switched"
                    summary.cancelled = status.status == "cancelled"
                    summary.chunk_count = status.chunk_count
                    return summary
                if status.waiting:  # the last chunks are claimed by other processes
                    time.sleep(self.poll_seconds)
                    continue
                if not switch:
                    return summary
                switched, _waiting, count = self.switch()
            except psycopg.Error as exc:
                if exc.sqlstate == "PR202":  # switched or cancelled by another process
                    status = reembed_status(self.conn)
                    if status is not None and status.reembed_id == summary.reembed_id:
                        summary.switched = status.status == "switched"
                        summary.cancelled = status.status == "cancelled"
                        summary.chunk_count = status.chunk_count
                        return summary
                _raise_mapped(exc)
                raise
            if switched:
                summary.switched = summary.switched_here = True
                summary.chunk_count = count
                return summary
            # Chunks written since the last claim were queued by the switch: embed them.

    def tidy(self) -> None:
        """After a switch: fresh planner statistics for the new column, space of the old row
        versions marked reusable (best effort: only the table's owner may)."""
        try:
            self.conn.execute("vacuum (analyze) pgrag.chunks")
        except psycopg.Error as exc:
            warn(f"vacuum analyze pgrag.chunks skipped ({one_line(str(exc))})")


def reembed(
    dsn: str,
    embedder: Embedder,
    *,
    batch_size: int = DEFAULT_BATCH,
    switch: bool = True,
    progress: ProgressMode = "off",
    poll_seconds: float = POLL_SECONDS,
) -> ReembedSummary:
    """Re-embed every tenant's chunks with ``embedder`` and switch the database to its model.

    Starts the re-embed, or joins it when another process started the same one (the work is
    shared); resumes where a killed run stopped. Returns when the database holds the new model
    (switched by this process or another), when the re-embed was cancelled, or, with
    ``switch=False``, when every chunk has its new embedding.
    """
    started = time.perf_counter()
    worker = Reembedder(dsn, embedder, batch_size=batch_size, poll_seconds=poll_seconds)
    try:
        summary = worker.start()
        status = reembed_status(worker.conn)
        total = status.chunk_count if status else None
        with Progress("reembed", total, progress, unit="chunks") as bar:
            if status is not None and status.embedded:
                bar.advance(status.embedded)
            summary = worker.run(summary, switch=switch, on_batch=bar.advance)
        if summary.switched_here:
            worker.tidy()
    finally:
        with contextlib.suppress(Exception):
            worker.close()
    summary.seconds = time.perf_counter() - started
    return summary
