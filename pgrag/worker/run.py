"""``pgrag worker``: claim queued documents, process them in batches, wake on NOTIFY.

One process runs ``concurrency`` slots (threads). Each slot claims a batch with
``pgrag.claim_documents`` (``FOR UPDATE SKIP LOCKED``, so workers never share a document) and
runs each tenant's part of it through the ingest pipeline (:mod:`pgrag.worker.jobs`). Beside
the slots:

* a listener (``LISTEN pgrag_queue``) wakes idle slots when a document is queued; without a
  notification they look again after ``poll`` seconds, or when ``pgrag.next_claim_at()`` says
  a retry or an expired lease comes due;
* a keeper renews the leases this process holds every third of the lease, so a batch that takes
  longer than the lease is not taken away, while a killed worker's documents return to the
  queue once their lease runs out.

Documents are extracted and chunked in a child process per slot, under a time and a memory
limit (:mod:`pgrag.worker.sandbox`); only embedding and loading happen here.

Failures: a document fails alone. One that cannot be read, or is over a limit, fails for good
(``error`` with the reason); any other exception while fetching or extracting it is a failed
attempt of that document (retried, up to ``queue_settings.max_attempts``). A batch that fails as
a whole because of the environment (the embedding endpoint, the database connection) is a failed
attempt for each of its documents, retried by the queue after a growing delay; for any other
reason its documents are run again one by one, so that only the one at fault fails. What a
tenant reads of such a failure names no endpoint or server path (:func:`tenant_reason`); the
operator's log line has the details. A lost database connection is reconnected with backoff. A
configuration error (model or dimension mismatch, pgrag not installed, no extraction process)
releases the batch and stops the worker.

Stopping: :meth:`QueueWorker.stop` (SIGTERM or SIGINT in the CLI) stops claiming at once; the
current batches get ``stop_timeout`` seconds to finish, then are cancelled and what they had not
committed is released (back to the queue, the attempt given back). A second signal cancels at
once. ``once``: exit when no document is due (retries due later stay queued).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, cast

import psycopg

from pgrag import tracing
from pgrag.db import connect, one_line, tenant_transaction
from pgrag.errors import (
    Cancelled,
    ConfigError,
    DatabaseUnreachable,
    EmbeddingConfigError,
    EmbeddingError,
    MissingExtra,
    NotInstalled,
    PgragError,
)
from pgrag.ingest.options import IngestOptions
from pgrag.ingest.run import IngestRun
from pgrag.pipeline.embedders import Embedder, LocalEmbedder, embedder_for_database
from pgrag.progress import Progress
from pgrag.worker.fetch import FetchLimits, load_allowlist
from pgrag.worker.jobs import (
    DONE,
    FAILED,
    RELEASED,
    RETRY,
    SUPERSEDED,
    UNCHANGED,
    Job,
    PreparedChunker,
    QueueLifecycle,
    WorkerSummary,
    claim,
    fail_jobs,
    job_sources,
    release,
)
from pgrag.worker.sandbox import ChunkSpec, DocumentLimits, DocumentSandbox, scrub, tokenizer_spec

CHANNEL = "pgrag_queue"
# Errors no retry fixes: the worker stops (after giving its batch back).
FATAL = (ConfigError, EmbeddingConfigError, NotInstalled, MissingExtra)


@dataclass
class WorkerOptions:
    """How a worker runs (the CLI's options)."""

    concurrency: int = 1
    batch: int = 64
    lease: float = 60.0  # seconds
    poll: float = 5.0  # seconds between looks without a notification
    stop_timeout: float = 5.0  # seconds a stopping worker lets its batches finish
    once: bool = False
    ingest: IngestOptions = field(default_factory=IngestOptions)
    fetch: FetchLimits = field(default_factory=FetchLimits)
    document: DocumentLimits = field(default_factory=DocumentLimits)


def new_worker_id() -> str:
    """host:pid:random, unique per process (leases are held by it)."""
    return f"{socket.gethostname()[:80]}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class QueueWorker:
    """Processes the document queue of the database ``dsn`` (see the module docstring).

    ``say`` receives one line per event worth telling an operator (a failed document, a lost
    connection); ``progress`` counts finished documents and embedded chunks. The embedding tokens
    of each batch are recorded per tenant and model as operation ``worker`` (``pgrag.record_usage``,
    in the transaction that stages the batch, as ``pgrag ingest`` records ``ingest``).
    """

    def __init__(
        self,
        dsn: str,
        options: WorkerOptions | None = None,
        *,
        embedder: Embedder | None = None,
        progress: Progress | None = None,
        say: Callable[[str], None] | None = None,
        worker_id: str | None = None,
    ) -> None:
        self.dsn = dsn
        self.options = options or WorkerOptions()
        if not 1 <= self.options.batch <= 1000:
            raise ConfigError(f"--batch must be between 1 and 1000 (got {self.options.batch}).")
        if not 1 <= self.options.lease <= 86400:
            raise ConfigError(f"--lease must be between 1 and 86400 s (got {self.options.lease}).")
        self.worker_id = worker_id or new_worker_id()
        self.progress = progress or Progress("worker", None, "off")
        self.say = say or (lambda line: None)
        self.summary = WorkerSummary()
        self.stopping = threading.Event()  # no new claims
        self.cancel = threading.Event()  # abandon the current batches
        self.fatal: BaseException | None = None
        self.signalled = False  # stopped by SIGTERM/SIGINT
        self._wake: list[threading.Event] = []
        self._busy = 0
        self._busy_lock = threading.Lock()
        self._embedder = embedder
        self._timer: threading.Timer | None = None
        self._sandboxes: list[DocumentSandbox] = []

    # -- control ---------------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop claiming; cancel the current batches after ``stop_timeout`` (at once when
        called a second time)."""
        if self.stopping.is_set():
            self.cancel.set()
        self.stopping.set()
        for event in self._wake:
            event.set()
        if self._timer is None:
            self._timer = threading.Timer(self.options.stop_timeout, self.cancel.set)
            self._timer.daemon = True
            self._timer.start()

    def run(self) -> WorkerSummary:
        """Run until stopped (or, with ``once``, until nothing is due); the summary."""
        started = time.perf_counter()
        self._check_database()
        restore = self._install_signals()
        threads = [
            threading.Thread(target=self._listen, name="pgrag-listener", daemon=True),
            threading.Thread(target=self._keep_leases, name="pgrag-leases", daemon=True),
        ]
        slots = []
        for i in range(self.options.concurrency):
            self._wake.append(threading.Event())
            slots.append(threading.Thread(target=self._slot, args=(i,), name=f"pgrag-slot-{i}"))
        try:
            with self.progress:
                for t in [*threads, *slots]:
                    t.start()
                for t in slots:
                    while t.is_alive():
                        t.join(timeout=0.2)
        finally:
            self.stopping.set()
            self.cancel.set()
            if self._timer is not None:
                self._timer.cancel()
            with contextlib.suppress(Exception), connect(self.dsn, autocommit=True) as conn:
                release(conn, self.worker_id)  # anything left (normally nothing)
            for sandbox in self._sandboxes:
                sandbox.close(kill=True)
            restore()
        self.summary.seconds = time.perf_counter() - started
        if self.fatal is not None:
            raise self.fatal
        return self.summary

    def _install_signals(self) -> Callable[[], None]:
        if threading.current_thread() is not threading.main_thread():
            return lambda: None

        def handler(signum: int, frame: FrameType | None) -> None:
            self.signalled = True
            name = signal.Signals(signum).name
            if self.stopping.is_set():
                self.say(f"{name} again: cancelling the current batch now")
            else:
                self.say(
                    f"{name}: stopping (no new claims; the current batch has "
                    f"{self.options.stop_timeout:g} s to finish, else it is released)"
                )
            self.stop()

        previous = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}

        def restore() -> None:
            for s, h in previous.items():
                signal.signal(s, h)

        return restore

    def _check_database(self) -> None:
        """Fail fast on what no retry fixes: pgrag missing or too old, no embedder."""
        with connect(self.dsn, autocommit=True) as conn:
            try:
                conn.execute("select pgrag.next_claim_at()")
            except psycopg.errors.UndefinedFunction as exc:
                raise NotInstalled(
                    "this database has no document queue: run pgrag migrate (incremental 011)."
                ) from exc
            except psycopg.errors.UndefinedTable as exc:
                raise NotInstalled("pgrag is not installed here: run pgrag migrate.") from exc
            if self._embedder is None:
                self._embedder = embedder_for_database(conn, for_documents=True)
        # The checks every batch's run makes (model and dimension, language, chunk size), once
        # now: a worker that cannot work says so at start, not at its first document.
        run = IngestRun(self.dsn, "-", self._embedder, self.options.ingest, False, None)
        run.conn.close()
        spec = ChunkSpec(
            run.options.chunker,
            run.chunk_size,
            run.overlap,
            run.options.language,
            run.embedder.max_tokens,
            tokenizer_spec(run.embedder),
        )
        # One extraction process per slot; the first starts now (its environment is checked).
        self._sandboxes = [
            DocumentSandbox(spec, self.options.document) for _ in range(self.options.concurrency)
        ]
        self._sandboxes[0].start()
        # Load a local model now, not while holding the leases of a first batch.
        if isinstance(self._embedder, LocalEmbedder):
            self._embedder.load()

    # -- the slots -------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A connection, retried with backoff while the database is unreachable."""
        delay = 0.2
        while True:
            try:
                conn = connect(self.dsn, autocommit=True)
                break
            except DatabaseUnreachable as exc:
                if self.stopping.is_set():
                    raise
                self.say(f"database unreachable, retrying in {delay:.1f} s: {exc}")
                time.sleep(delay)
                delay = min(delay * 2, 5.0)
        try:
            yield conn
        finally:
            with contextlib.suppress(Exception):
                conn.close()

    def _slot(self, index: int) -> None:
        wake = self._wake[index]
        while not self.stopping.is_set():
            try:
                with self._connection() as conn:
                    self._claim_loop(conn, wake, self._sandboxes[index])
                return
            except DatabaseUnreachable:
                return  # stopping while the database is away
            except psycopg.OperationalError as exc:
                self.say(f"lost the database connection ({one_line(str(exc))}); reconnecting")
                time.sleep(0.5)
            except BaseException as exc:  # a bug or a fatal error: stop the whole worker
                self.fatal = self.fatal or exc
                self.stop()
                self.cancel.set()
                return

    def _claim_loop(
        self, conn: psycopg.Connection[Any], wake: threading.Event, sandbox: DocumentSandbox
    ) -> None:
        while not self.stopping.is_set():
            wake.clear()
            jobs = claim(conn, self.worker_id, self.options.batch, self.options.lease)
            if not jobs:
                if self.options.once:
                    return
                wake.wait(self._idle_seconds(conn))
                continue
            with self.summary.lock:
                self.summary.claimed += len(jobs)
                self.summary.batches += 1
            with self._busy_lock:
                self._busy += 1
            try:
                self._process(jobs, sandbox)
            finally:
                with self._busy_lock:
                    self._busy -= 1

    def _idle_seconds(self, conn: psycopg.Connection[Any]) -> float:
        row = conn.execute(
            "select extract(epoch from pgrag.next_claim_at() - clock_timestamp())"
        ).fetchone()
        due = float(row[0]) if row and row[0] is not None else self.options.poll
        return max(0.05, min(self.options.poll, due + 0.05))

    # -- one batch -------------------------------------------------------------------------------

    def _process(self, jobs: list[Job], sandbox: DocumentSandbox) -> None:
        """Run each tenant's jobs through the pipeline, then settle what is left."""
        by_tenant: dict[str, list[Job]] = {}
        for job in jobs:
            by_tenant.setdefault(job.tenant, []).append(job)
        for tenant, tenant_jobs in by_tenant.items():
            attributes = {
                "pgrag.tenant": tenant,
                "pgrag.worker.id": self.worker_id,
                "pgrag.jobs": len(tenant_jobs),
                "pgrag.document.ids": [job.document_id for job in tenant_jobs],
            }
            with tracing.root("pgrag worker job", attributes):
                self._process_tenant(tenant, tenant_jobs, sandbox)

    def _process_tenant(
        self, tenant: str, tenant_jobs: list[Job], sandbox: DocumentSandbox
    ) -> None:
        """One tenant's jobs of a batch: run, then settle (one by one when the batch failed
        and one document may be the cause)."""
        if self.cancel.is_set():
            self._settle(tenant_jobs, None)  # released
            return
        error = self._run_tenant(tenant, tenant_jobs, sandbox)
        if error is not None:
            tracing.record_error(error)
        left = [j for j in tenant_jobs if j.outcome is None]
        if error is None or len(left) < 2 or self._whole_batch(error):
            self._settle(tenant_jobs, error)
            return
        # One document's data may have failed the batch: each alone, so that the others
        # complete and only that one fails.
        self.say(
            f"a batch of {tenant} failed ({one_line(str(error))}): "
            f"retrying its {len(left)} document(s) one by one"
        )
        self._settle([j for j in tenant_jobs if j.outcome is not None], None)
        for job in left:
            if self.cancel.is_set():
                self._settle([job], None)  # released
            else:
                self._settle([job], self._run_tenant(tenant, [job], sandbox))

    @staticmethod
    def _whole_batch(error: BaseException) -> bool:
        """Whether ``error`` is the environment's (every document of the batch would fail
        alike: stopping, the embedding service, the database connection)."""
        environment = (EmbeddingError, DatabaseUnreachable, psycopg.OperationalError)
        return isinstance(error, (Cancelled, *FATAL, *environment))

    def _run_tenant(
        self, tenant: str, jobs: list[Job], sandbox: DocumentSandbox
    ) -> BaseException | None:
        """Ingest ``jobs`` of ``tenant``; the error that stopped the run, if any."""
        embedder = self._embedder
        assert embedder is not None
        try:
            with connect(self.dsn, autocommit=True) as conn:
                rules = load_allowlist(conn)
            run = IngestRun(
                self.dsn,
                tenant,
                embedder,
                self.options.ingest,
                self.progress,
                None,
                lifecycle=QueueLifecycle(self.worker_id, jobs),
                cancel=self.cancel,
                operation="worker",
            )
            # Documents arrive extracted and chunked by the sandbox (pgrag.worker.sandbox).
            run.chunker = cast(Any, PreparedChunker())
            sources = job_sources(jobs, rules, self.options.fetch, sandbox, self.cancel)
            result = run.ingest(sources)
            with self.summary.lock:
                self.summary.chunks_written += result.chunks_written
                self.summary.chunks_embedded += result.chunks_embedded
                self.summary.chunks_reused += result.chunks_reused
        except Cancelled as exc:
            return exc  # settled: released
        except FATAL as exc:
            self.fatal = self.fatal or exc
            self.stop()
            self.cancel.set()
            return exc
        except Exception as exc:  # a failed attempt for what the run left (never fatal)
            return exc
        return None

    def _settle(self, jobs: list[Job], error: BaseException | None) -> None:
        """Record outcomes; give back (stopping, fatal) or fail (retry later) what the run left."""
        left = [j for j in jobs if j.outcome is None]
        if left:
            if error is None or isinstance(error, (Cancelled, *FATAL)) or self.cancel.is_set():
                self._release(left)
            else:
                self._fail_left(left, error)
        for job in jobs:
            self._count(job)

    def _release(self, jobs: list[Job]) -> None:
        try:
            with self._connection() as conn:
                release(conn, self.worker_id, jobs)
        except (psycopg.Error, PgragError) as exc:
            self.say(
                f"could not release {len(jobs)} document(s) ({one_line(str(exc))}): "
                "they return to the queue when their lease ends"
            )
        for job in jobs:
            job.outcome = RELEASED

    def _fail_left(self, jobs: list[Job], error: BaseException) -> None:
        message = tenant_reason(error)
        self.say(f"{len(jobs)} document(s) failed an attempt: {one_line(str(error)) or message}")
        by_tenant: dict[str, list[Job]] = {}
        for job in jobs:
            by_tenant.setdefault(job.tenant, []).append(job)
        delay = 0.2
        while True:
            try:
                with self._connection() as conn:
                    for tenant, tenant_jobs in by_tenant.items():
                        with tenant_transaction(conn, tenant):
                            fail_jobs(
                                conn,
                                self.worker_id,
                                tenant,
                                tenant_jobs,
                                [message] * len(tenant_jobs),
                                [True] * len(tenant_jobs),
                            )
                return
            except psycopg.OperationalError:
                if self.stopping.is_set():
                    break
                time.sleep(delay)
                delay = min(delay * 2, 5.0)
            except (psycopg.Error, PgragError) as exc:
                self.say(f"could not record a failed attempt ({one_line(str(exc))})")
                break
        for job in jobs:  # their lease runs out: the queue retries them
            job.outcome = job.outcome or RETRY
            job.reason = job.reason or message

    def _count(self, job: Job) -> None:
        s = self.summary
        with s.lock:
            if job.outcome == DONE:
                s.documents_done += 1
            elif job.outcome == UNCHANGED:
                s.documents_unchanged += 1
            elif job.outcome == SUPERSEDED:
                s.documents_superseded += 1
            elif job.outcome == RELEASED:
                s.documents_released += 1
            elif job.outcome in (RETRY, FAILED):
                if job.outcome == RETRY:
                    s.documents_retrying += 1
                else:
                    s.documents_failed += 1
                s.failures.append(
                    {
                        "tenant": job.tenant,
                        "document_id": job.document_id,
                        "uri": job.source_uri,
                        "reason": job.reason,
                        "final": job.outcome == FAILED,
                        "attempts": job.attempts,
                    }
                )
        if job.outcome in (RETRY, FAILED):
            where = f"{job.tenant}/{job.source_uri}"
            if job.outcome == FAILED:
                self.say(f"failed: {where}: {job.reason} (attempt {job.attempts}, gave up)")
            else:
                self.say(f"retrying: {where}: {job.reason} (attempt {job.attempts})")

    # -- helpers -----------------------------------------------------------------------------------

    def _listen(self) -> None:
        while not self.stopping.is_set():
            try:
                with connect(self.dsn, autocommit=True) as conn:
                    conn.execute(f"listen {CHANNEL}")
                    while not self.stopping.is_set():
                        for _ in conn.notifies(timeout=1.0, stop_after=1):
                            for event in self._wake:
                                event.set()
            except (psycopg.Error, PgragError):
                time.sleep(1.0)  # polling covers the gap

    def _keep_leases(self) -> None:
        interval = max(self.options.lease / 3, 0.2)
        while not self.cancel.wait(interval):
            if not self._busy:
                continue
            with (
                contextlib.suppress(psycopg.Error, PgragError),
                connect(self.dsn, autocommit=True) as conn,
            ):
                conn.execute(
                    "select pgrag.renew_leases(%s, make_interval(secs => %s))",
                    (self.worker_id, self.options.lease),
                )


def tenant_reason(error: BaseException) -> str:
    """What a tenant reads of a failure of a whole run (its document's stored error): what
    happens next, not where (the worker's log has the details for the operator)."""
    if isinstance(error, EmbeddingError):
        return "the embedding service failed; the document is retried automatically"
    if isinstance(error, (DatabaseUnreachable, psycopg.OperationalError)):
        return "the database connection was lost; the document is retried automatically"
    if isinstance(error, psycopg.Error):
        detail = scrub(error.diag.message_primary or type(error).__name__)
        return f"could not be stored ({detail}); fix the document and submit it again"
    detail = scrub(f"{type(error).__name__}: {error}")
    return f"could not be processed ({detail}); the document is retried automatically"
