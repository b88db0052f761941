"""Claimed documents (:class:`Job`), what happened to each, and the queue's lifecycle.

A worker claims jobs with ``pgrag.claim_documents`` and runs each tenant's jobs through the
ingest pipeline (:class:`~pgrag.ingest.run.IngestRun`) with a :class:`QueueLifecycle`: the
pipeline plans, chunks, embeds and stages exactly as ``pgrag ingest`` does, and every state
change goes to the queue's SQL functions (``complete_documents``, ``skip_documents``,
``fail_attempts``), which act only on documents this worker still holds at the version it
claimed. Each job reaches the pipeline already extracted and chunked by the slot's sandbox
(:func:`prepare_job`, :class:`PreparedChunker`), or as a failed source with its reason.
Whatever a run leaves without an outcome (it was cancelled, or failed as a whole) is settled by
the worker afterwards: released when stopping, else a failed attempt to retry.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from pgrag import tracing
from pgrag.db import tenant_transaction
from pgrag.errors import ExtractionError, FetchFailed
from pgrag.ingest.lifecycle import STAGE, FailedSource, SwapRow, call, swap_arrays
from pgrag.pipeline.chunking import Chunk
from pgrag.pipeline.extract import Block, ExtractedDocument
from pgrag.worker.fetch import FetchLimits, FetchRule, fetch
from pgrag.worker.sandbox import DocumentSandbox, DocumentSource, Failure, scrub

# What a job ended as in this worker (None: not settled yet).
DONE, UNCHANGED, SUPERSEDED, RETRY, FAILED, RELEASED = (
    "done",
    "unchanged",
    "superseded",
    "retry",
    "failed",
    "released",
)


@dataclass
class Job:
    """A claimed document: a row of ``pgrag.claim_documents``, and its outcome here."""

    tenant: str
    document_id: int
    version: int
    source_uri: str
    source_type: str
    content: str | None
    title: str | None
    metadata: dict[str, Any]
    attempts: int
    outcome: str | None = None
    reason: str | None = None
    retry_at: Any = None
    # What the sandbox made of it (kept: a batch that fails is retried document by document).
    prepared: ExtractedDocument | FailedSource | None = None


@dataclass
class WorkerSummary:
    """What a worker did (``pgrag worker --json``)."""

    claimed: int = 0
    documents_done: int = 0
    documents_unchanged: int = 0
    documents_superseded: int = 0
    documents_retrying: int = 0
    documents_failed: int = 0
    documents_released: int = 0
    chunks_written: int = 0
    chunks_embedded: int = 0
    chunks_reused: int = 0
    batches: int = 0
    seconds: float = 0.0
    failures: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def as_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "lock"}
        data["seconds"] = round(self.seconds, 3)
        data["failures"] = [dict(f) for f in self.failures]
        return data


def claim(conn: psycopg.Connection[Any], worker_id: str, n: int, lease_seconds: float) -> list[Job]:
    """``pgrag.claim_documents``: up to ``n`` documents leased to ``worker_id``."""
    rows = conn.execute(
        "select tenant_id, document_id, version, source_uri, source_type, content, title,"
        " metadata, attempts from pgrag.claim_documents(%s, %s, make_interval(secs => %s))",
        (worker_id, n, lease_seconds),
    ).fetchall()
    return [Job(*row) for row in rows]


def release(conn: psycopg.Connection[Any], worker_id: str, jobs: Sequence[Job] = ()) -> int:
    """``pgrag.release_documents``: give ``jobs`` (all this worker holds when empty) back."""
    if jobs:
        row = conn.execute(
            "select pgrag.release_documents(%s, %s::text[], %s::int8[])",
            (worker_id, [j.tenant for j in jobs], [j.document_id for j in jobs]),
        ).fetchone()
    else:
        row = conn.execute("select pgrag.release_documents(%s)", (worker_id,)).fetchone()
    return int(row[0]) if row else 0


def fail_jobs(
    conn: psycopg.Connection[Any],
    worker_id: str,
    tenant: str,
    jobs: Sequence[Job],
    reasons: Sequence[str],
    retryable: Sequence[bool],
) -> None:
    """``pgrag.fail_attempts`` for ``jobs`` of ``tenant`` (in the caller's transaction, acting
    as the tenant); sets each job's outcome (retry or failed) from what the database did."""
    rows = call(
        conn,
        "select document_id, state, next_attempt_at from pgrag.fail_attempts(%s, %s::int8[],"
        " %s::int4[], %s::text[], %s::bool[])",
        (
            worker_id,
            [j.document_id for j in jobs],
            [j.version for j in jobs],
            list(reasons),
            list(retryable),
        ),
    )
    result = {int(r[0]): (str(r[1]), r[2]) for r in rows}
    for job, reason in zip(jobs, reasons, strict=True):
        state, retry_at = result.get(job.document_id, (None, None))
        job.reason = reason
        job.retry_at = retry_at
        job.outcome = RETRY if state == "queued" else FAILED if state == "failed" else SUPERSEDED


class QueueLifecycle:
    """The lifecycle of one tenant's claimed jobs (see the module docstring)."""

    def __init__(self, worker_id: str, jobs: Sequence[Job]) -> None:
        self.worker_id = worker_id
        self.by_uri = {j.source_uri: j for j in jobs}
        self.by_id = {j.document_id: j for j in jobs}

    def begin(
        self, conn: psycopg.Connection[Any], tenant: str, sources: Sequence[ExtractedDocument]
    ) -> dict[str, int]:
        # The claim made them processing already.
        return {d.uri: self.by_uri[d.uri].document_id for d in sources}

    def _skip(
        self,
        conn: psycopg.Connection[Any],
        tenant: str,
        jobs: list[Job],
        metadatas: list[dict[str, Any]] | None,
    ) -> None:
        with tenant_transaction(conn, tenant):
            rows = call(
                conn,
                "select document_id, completed from pgrag.skip_documents(%s, %s::int8[],"
                " %s::int4[], %s::jsonb[])",
                (
                    self.worker_id,
                    [j.document_id for j in jobs],
                    [j.version for j in jobs],
                    None if metadatas is None else [Jsonb(m) for m in metadatas],
                ),
            )
        completed = {int(r[0]) for r in rows if r[1]}
        for job in jobs:
            job.outcome = UNCHANGED if job.document_id in completed else SUPERSEDED

    def unchanged(self, conn: psycopg.Connection[Any], tenant: str, uris: Sequence[str]) -> None:
        self._skip(conn, tenant, [self.by_uri[u] for u in uris], None)

    def relabel(
        self,
        conn: psycopg.Connection[Any],
        tenant: str,
        relabel: Sequence[tuple[int, dict[str, Any], str]],
    ) -> None:
        self._skip(conn, tenant, [self.by_id[i] for i, _, _ in relabel], [m for _, m, _ in relabel])

    def fail_sources(
        self, conn: psycopg.Connection[Any], tenant: str, failed: Sequence[FailedSource]
    ) -> None:
        jobs = [self.by_uri[f.uri] for f in failed if f.uri in self.by_uri]
        if not jobs:
            return
        with tenant_transaction(conn, tenant):
            fail_jobs(
                conn,
                self.worker_id,
                tenant,
                jobs,
                [f.reason for f in failed if f.uri in self.by_uri],
                [f.retryable for f in failed if f.uri in self.by_uri],
            )

    def fail(self, conn: psycopg.Connection[Any], doc_id: int, reason: str) -> None:
        job = self.by_id[doc_id]
        fail_jobs(conn, self.worker_id, job.tenant, [job], [reason], [False])

    def swap(
        self, conn: psycopg.Connection[Any], tenant: str, rows: Sequence[SwapRow], model: str
    ) -> set[int]:
        ids, titles, types, shas, metadatas, counts = swap_arrays(rows)
        result = call(
            conn,
            "select document_id, completed from pgrag.complete_documents(%s, %s::regclass,"
            " %s::int8[], %s::int4[], %s::text[], %s::text[], %s::text[], %s::jsonb[],"
            " %s::int4[], %s)",
            (
                self.worker_id,
                STAGE,
                ids,
                [self.by_id[r.doc_id].version for r in rows],
                titles,
                types,
                shas,
                metadatas,
                counts,
                model,
            ),
        )
        superseded = {int(r[0]) for r in result if not r[1]}
        for row in rows:
            job = self.by_id[row.doc_id]
            job.outcome = SUPERSEDED if row.doc_id in superseded else DONE
        return superseded

    def abort(
        self,
        conn: psycopg.Connection[Any],
        tenant: str,
        ids: Sequence[int],
        uris: Sequence[str],
        message: str,
    ) -> None:
        return None  # the worker settles what the run left (release or retry)


class PreparedBlocks:
    """The chunks the sandbox made of a document, where the pipeline expects its blocks."""

    def __init__(self, chunks: list[Chunk]) -> None:
        self.chunks = chunks

    def __iter__(self) -> Iterator[Block]:
        return iter(())


class PreparedChunker:
    """The run's chunker for prepared documents: their chunks as the sandbox cut them."""

    def chunks(self, blocks: Iterable[Block]) -> Iterator[Chunk]:
        assert isinstance(blocks, PreparedBlocks)
        return iter(blocks.chunks)


def prepare_job(
    job: Job,
    rules: list[FetchRule],
    limits: FetchLimits,
    sandbox: DocumentSandbox,
    cancel: threading.Event | None = None,
) -> ExtractedDocument | FailedSource:
    """``job`` fetched (a URL, if allowed), then extracted and chunked by the sandbox; or why
    not, as a failed source (never raises for a document)."""
    uri = job.source_uri
    try:
        if job.content is not None:
            source = DocumentSource(uri, job.source_type, job.title, job.metadata, job.content)
        else:
            got = fetch(uri, rules, limits)
            source = DocumentSource(
                uri,
                job.source_type,
                job.title,
                job.metadata,
                data=got.data,
                content_type=got.content_type,
                charset=got.charset,
            )
    except FetchFailed as exc:
        return FailedSource(uri, job.source_type, str(exc), exc.retryable)
    except Exception as exc:  # anything else a fetch raised is this document's attempt
        detail = scrub(f"{type(exc).__name__}: {exc}", uri)
        return FailedSource(uri, job.source_type, f"could not be fetched ({detail})", True)
    result = sandbox.prepare(source, cancel)
    if isinstance(result, Failure):
        return FailedSource(uri, job.source_type, result.reason, result.retryable)
    return ExtractedDocument(
        uri=result.uri,
        title=result.title,
        source_type=result.source_type,
        blocks=PreparedBlocks(result.chunks),
        metadata=result.metadata,
        content_sha256=result.content_sha256,
        empty_message=result.empty_message,
    )


def job_sources(
    jobs: Sequence[Job],
    rules: list[FetchRule],
    limits: FetchLimits,
    sandbox: DocumentSandbox,
    cancel: threading.Event | None = None,
) -> Iterator[ExtractedDocument | FailedSource]:
    """Each job as a document to plan (prepared once per claim: see :func:`prepare_job`)."""
    for job in jobs:
        if job.prepared is None:
            attributes = {
                "pgrag.document.id": job.document_id,
                "pgrag.document.uri": job.source_uri,
            }
            with tracing.span("extract", attributes):  # fetched, extracted and chunked
                job.prepared = prepare_job(job, rules, limits, sandbox, cancel)
                if isinstance(job.prepared, FailedSource):
                    tracing.record_error(ExtractionError(job.prepared.reason))
        yield job.prepared
