"""The document queue's worker: documents any client submits (``public.submit_document``) are
claimed, fetched when they are URLs (:mod:`.fetch`, only where the operator allowed it),
chunked, embedded and swapped in by the ingest pipeline (:mod:`.jobs`), by ``pgrag worker``
(:mod:`.run`). Every state change is a SQL function (sql/idempotent/010-queue.sql to
013-queue-outcomes.sql)."""

from pgrag.worker.fetch import FetchLimits, FetchRule
from pgrag.worker.jobs import Job, WorkerSummary
from pgrag.worker.run import QueueWorker, WorkerOptions
from pgrag.worker.sandbox import DocumentLimits

__all__ = [
    "DocumentLimits",
    "FetchLimits",
    "FetchRule",
    "Job",
    "QueueWorker",
    "WorkerOptions",
    "WorkerSummary",
]
