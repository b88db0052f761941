"""A run: chunking on the main thread, beside the embedding and loading stages.

Documents are read in groups of ``GROUP_DOCS``; each group is planned (:mod:`.plan`) and the
documents to load are chunked as a stream into batches of ``BATCH_CHUNKS`` chunks, handed to
the embedding stage (:mod:`.workers`), which hands them to the loading stage (:mod:`.load`).
Progress (:mod:`pgrag.progress`) counts documents as their swap commits and chunks as they are
embedded. Ctrl-C raises :class:`Interrupted`, saying what was kept; any other failure marks the
documents in flight as failed and is raised. What each step does to the documents is the run's
:class:`~pgrag.ingest.lifecycle.Lifecycle` (SQL functions): ``pgrag ingest``'s by default,
the queue's for ``pgrag worker``, which also passes its own progress and a ``cancel`` event
(set: the run stops as after Ctrl-C, raising :class:`~pgrag.errors.Cancelled`).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

import psycopg

from pgrag.chunking import Chunk, chunk_settings, make_chunker, token_counter
from pgrag.db import DEFAULT_TENANT, connect, one_line
from pgrag.embedders import Embedder, get_embedder, read_embedding_config
from pgrag.errors import (
    Cancelled,
    ConfigError,
    EmbeddingConfigError,
    ExtractionError,
    Interrupted,
)
from pgrag.extract import ExtractedDocument
from pgrag.ingest.lifecycle import FailedSource, IngestLifecycle, Lifecycle
from pgrag.ingest.load import Loader, isolate_large_tenant
from pgrag.ingest.options import IngestOptions, IngestSummary
from pgrag.ingest.plan import LISTED_TWICE, Doc, Planner, failure_reason
from pgrag.ingest.workers import EmbeddingStage
from pgrag.progress import Progress, ProgressMode
from pgrag.usage import Operation

GROUP_DOCS = 64  # documents looked up together
BATCH_CHUNKS = 64  # chunks embedded, COPYed and committed together (progress moves per batch)


class IngestRun:
    """One run over a stream of sources: planning, chunking on this thread, the embedding and
    loading stages on theirs, then the summary."""

    def __init__(
        self,
        dsn: str,
        tenant: str,
        embedder: Embedder | None,
        options: IngestOptions,
        progress: bool | ProgressMode | Progress,
        total: int | None,
        *,
        lifecycle: Lifecycle | None = None,
        cancel: threading.Event | None = None,
        operation: Operation = "ingest",
    ) -> None:
        self.dsn = dsn
        self.tenant = tenant
        self.options = replace(options)  # --switch-model turns force on for this run only
        self.summary = IngestSummary()
        self.lifecycle: Lifecycle = lifecycle or IngestLifecycle()
        self.cancel = cancel
        self.operation = operation  # whose embedding tokens (pgrag.record_usage)
        self.conn = connect(dsn, autocommit=True)
        try:
            self._setup(embedder, progress, total)
        except BaseException:
            self.conn.close()
            raise

    def _setup(
        self, embedder: Embedder | None, progress: bool | ProgressMode | Progress, total: int | None
    ) -> None:
        options = self.options
        self.embedder, switch = self._check_embedder(embedder)
        self.chunk_size, self.overlap = chunk_settings(
            options.chunker,
            self.embedder.max_tokens,
            self.embedder.model_name,
            options.chunk_size,
            options.overlap,
        )
        self.counter = token_counter(self.embedder)
        self.chunker = make_chunker(
            options.chunker,
            self.counter,
            self.chunk_size,
            self.overlap,
            options.language,
            max_tokens=self.embedder.max_tokens - 2,
        )
        self.settings = {
            "chunker": options.chunker,
            "chunk_size": self.chunk_size,
            "overlap": self.overlap,
            "language": options.language,
        }
        self.planner = Planner(self.conn, self.tenant, options, self.settings, self.lifecycle)
        self.loader: Loader | None = None
        self.embedding: EmbeddingStage | None = None
        self.batch: list[tuple[Doc, Chunk]] = []
        self.completed: list[Doc] = []
        self.in_flight: dict[int, Doc] = {}
        self.own_progress = not isinstance(progress, Progress)
        if isinstance(progress, Progress):
            self.progress = progress
        else:
            mode: ProgressMode = (
                progress if isinstance(progress, str) else ("auto" if progress else "off")
            )
            self.progress = Progress("ingest", total, mode)
        self.started = time.perf_counter()
        if switch:
            self._switch_model(self.embedder)

    # -- configuration checks ------------------------------------------------------------------

    def _check_embedder(self, embedder: Embedder | None) -> tuple[Embedder, bool]:
        """The embedder to use, and whether it replaces the recorded model (--switch-model)."""
        dims, model, provider = read_embedding_config(self.conn)
        try:
            row = self.conn.execute(
                "select pgrag.text_search_config_allowed("
                "pgrag.text_search_config('--language', %s))",
                (self.options.language,),
            ).fetchone()
        except psycopg.Error as exc:  # 22023: the message lists the configurations
            raise ConfigError(one_line(exc.diag.message_primary or str(exc))) from exc
        if not (row and row[0]):
            raise ConfigError(
                f"text-search language {self.options.language!r} is not allowed for stored "
                "chunks: use one of pg_catalog's (e.g. english, simple, german), or list it in "
                "pgrag.text_search_configs (docs/security.md, Restore)."
            )
        if embedder is None:
            embedder = (
                get_embedder(provider, model, dims) if provider else get_embedder(None, None, dims)
            )
        if embedder.dims != dims:
            raise EmbeddingConfigError(
                f"{embedder.provider}:{embedder.model_name} makes {embedder.dims}-dimension "
                f"embeddings but this database holds {dims}: switch every tenant's embeddings "
                f"to it online with pgrag reembed --model {embedder.model_name} --dims "
                f"{embedder.dims}, or use a model of {dims} dimensions."
            )
        if model is not None and (provider, model) != (embedder.provider, embedder.model_name):
            if not self.options.switch_model:
                raise EmbeddingConfigError(
                    f"this database holds embeddings of {provider}:{model}; "
                    f"{embedder.provider}:{embedder.model_name} would mix models. Keep "
                    f"--embedder {provider} --model {model}, switch every tenant's embeddings "
                    f"online with pgrag reembed --model {embedder.model_name} (searches keep "
                    "working), or offline with pgrag ingest --switch-model (clears every "
                    "embedding; then re-ingest every source)."
                )
            return embedder, True
        return embedder, False

    def _switch_model(self, embedder: Embedder) -> None:
        """Record a new model; every stored embedding is cleared and every document pending."""
        running = self.conn.execute(
            "select provider || ':' || model from pgrag.reembeds where status = 'running'"
        ).fetchone()
        if running:
            raise EmbeddingConfigError(
                f"a re-embed to {running[0]} is running (pgrag reembed): let it finish, or "
                "cancel it with pgrag reembed --cancel, before --switch-model."
            )
        with self.conn.transaction():
            self.conn.execute(
                "update pgrag.embedding_config set model = %s, provider = %s",
                (embedder.model_name, embedder.provider),
            )
            self.conn.execute("update pgrag.chunks set embedding = null")
            self.conn.execute(
                "update pgrag.documents set status = 'pending', content_sha256 = null"
            )
        self.options.force = True

    # -- main loop -----------------------------------------------------------------------------

    def ingest(self, items: Iterable[ExtractedDocument | FailedSource]) -> IngestSummary:
        """Ingest ``items`` (``GROUP_DOCS`` at a time) and return the run's summary."""
        started = self.started
        shown = self.progress if self.own_progress else contextlib.nullcontext()
        try:
            with shown:
                group: list[ExtractedDocument | FailedSource] = []
                for item in items:
                    self._check_cancel()
                    group.append(item)
                    if len(group) >= GROUP_DOCS:
                        self._group(group)
                        group = []
                if group:
                    self._group(group)
                self._flush()
            if self.embedding is not None and self.loader is not None:
                embedding, self.embedding = self.embedding, None
                embedding.finish()  # everything embedded and handed to the loader
                loader, self.loader = self.loader, None
                loader.finish()  # everything committed
                self.summary.bulk_load = loader.bulk
        except KeyboardInterrupt as exc:
            in_flight = len(self.in_flight)
            self._abort(exc)
            raise Interrupted(self._interrupted_message(in_flight)) from exc
        except Cancelled as exc:
            self._abort(exc)
            raise
        except BaseException as exc:
            self._abort(exc)
            raise
        finally:
            self.conn.close()
        self.summary.tenant_isolated = isolate_large_tenant(self.dsn, self.tenant)
        self.summary.seconds = time.perf_counter() - started
        return self.summary

    def _interrupted_message(self, in_flight: int) -> str:
        s = self.summary
        loaded = s.documents_new + s.documents_changed
        return (
            f"interrupted after {time.perf_counter() - self.started:.1f} s. Kept: {loaded} "
            f"document(s) loaded by this run ({s.chunks_written} chunks) and "
            f"{s.documents_unchanged} unchanged, all searchable; {in_flight} in progress were "
            "rolled back (none is half loaded: new ones are marked error, changed ones keep "
            "their previous version). Run the same command again to finish: finished documents "
            "are skipped, the rest are ingested."
        )

    def _abort(self, exc: BaseException) -> None:
        """Mark in-flight documents as failed (best effort) and stop the loader.

        On Ctrl-C the loader (database work, short) is waited for; the embedding thread only
        briefly: it is cancelled and stops after its current slice, writing nothing more."""
        interrupted = isinstance(exc, (KeyboardInterrupt, Cancelled))
        for worker in (self.embedding, self.loader):
            if worker is not None:
                worker.stop(cancel=True)
        for worker, wait in ((self.loader, 10), (self.embedding, 0.5 if interrupted else 60)):
            if worker is not None:
                worker.join(timeout=wait)
                with contextlib.suppress(Exception):
                    worker.close()
        self.embedding = self.loader = None
        if isinstance(exc, KeyboardInterrupt):
            message = "interrupted (Ctrl-C)"
        else:
            message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        ids = list(self.in_flight)
        seen = list(self.planner.seen)
        if not ids and not seen:
            return

        def mark(conn: psycopg.Connection[Any]) -> None:
            # In-flight documents, and any new one of this run whose row committed just as
            # the run was interrupted (before it was registered as in flight).
            self.lifecycle.abort(conn, self.tenant, ids, seen, message)

        try:
            mark(self.conn)
        except Exception:  # the main connection was interrupted mid-statement: use another
            with contextlib.suppress(Exception), connect(self.dsn, autocommit=True) as conn:
                mark(conn)

    def _ensure_workers(self) -> EmbeddingStage:
        if self.embedding is None:
            loader = Loader(
                self.dsn,
                self.tenant,
                self.embedder.model_name,
                self.embedder.provider,
                self.lifecycle,
                self._committed,
                self.operation,
            )
            loader.start()
            self.loader = loader
            self.embedding = EmbeddingStage(
                loader,
                self.embedder,
                self.options,
                self.summary,
                self.progress,
                self.planner.stored_metadata,
                self.cancel,
            )
            self.embedding.start()
        return self.embedding

    def _group(self, group: list[ExtractedDocument | FailedSource]) -> None:
        """Plan a group of sources (:mod:`pgrag.ingest.plan`) and chunk those to load."""
        plan = self.planner.plan(group)
        for failed in plan.failed:
            self._fail_new(failed)
        if plan.unchanged:
            self.lifecycle.unchanged(self.conn, self.tenant, plan.unchanged)
        for uri in plan.unchanged:
            self.summary.documents_unchanged += 1
            self.progress.advance(1, uri[-60:])
        for _, _, uri in plan.relabel:
            self.summary.documents_changed += 1
            self.progress.advance(1, uri[-60:])
        if plan.relabel:
            self.planner.relabel(plan.relabel)
        if not plan.load:
            return
        for doc in self.planner.start_loading(plan):
            self.in_flight[doc.doc_id] = doc
            self._document(doc)

    def _fail_new(self, failed: FailedSource) -> None:
        """Record a source that failed before it had a row (or was listed twice)."""
        uri = failed.uri
        reason = failure_reason(uri, failed.reason)
        self.summary.documents_failed += 1
        self.summary.failures.append((uri, reason))
        self.progress.advance(1, uri[-60:])
        if reason != LISTED_TWICE:
            self.planner.record_failure(replace(failed, reason=reason))

    def _document(self, doc: Doc) -> None:
        """Chunk one document into the current batch (flushing full batches as it goes)."""
        try:
            for chunk in self.chunker.chunks(doc.source.blocks):
                self._check_cancel()
                self.batch.append((doc, chunk))
                doc.n_chunks += 1
                if len(self.batch) >= BATCH_CHUNKS:
                    self._flush()
            if doc.n_chunks == 0:
                raise ExtractionError(doc.source.empty_message)
        except ExtractionError as exc:
            self._fail(doc, str(exc))
            return
        self.completed.append(doc)

    def _fail(self, doc: Doc, message: str) -> None:
        reason = failure_reason(doc.source.uri, message)
        self.batch = [(d, c) for d, c in self.batch if d is not doc]
        self.summary.documents_failed += 1
        self.summary.failures.append((doc.source.uri, reason))
        self.in_flight.pop(doc.doc_id, None)
        self._ensure_workers().put("fail", (doc.doc_id, reason))
        self.progress.advance(1, doc.source.uri[-60:])

    def _check_cancel(self) -> None:
        if self.cancel is not None and self.cancel.is_set():
            raise Cancelled("cancelled: the worker is stopping")

    def _committed(self, done: list[Doc], superseded: set[int]) -> None:
        """Called by the loader after the swap of ``done`` committed (``superseded``: the ids
        the lifecycle did not swap in, because a newer version was submitted meanwhile)."""
        summary = self.summary
        for d in done:
            self.in_flight.pop(d.doc_id, None)
            if d.doc_id in superseded:
                self.progress.advance(1, d.source.uri[-60:])
                continue
            if d.is_new:
                summary.documents_new += 1
            else:
                summary.documents_changed += 1
            summary.chunks_written += d.n_chunks
            self.progress.advance(1, d.source.uri[-60:])

    def _flush(self) -> None:
        """Hand the current batch to the embedding stage, then the completed documents."""
        batch, self.batch = self.batch, []
        embedder = self._ensure_workers()
        if batch:
            embedder.put("stage", batch)
        if self.completed:
            done, self.completed = self.completed, []
            embedder.put("commit", done)


def ingest_documents(
    dsn: str,
    documents: Iterable[ExtractedDocument],
    *,
    tenant: str = DEFAULT_TENANT,
    embedder: Embedder | None = None,
    options: IngestOptions | None = None,
    progress: bool | ProgressMode = False,
    total: int | None = None,
) -> IngestSummary:
    """Chunk, embed and load ``documents`` (keyed by ``uri`` within ``tenant``).

    Raises :class:`EmbeddingConfigError` (model or dimension mismatch) before writing anything,
    and :class:`EmbeddingError` when the embedding backend fails for good; per-document
    problems are reported in the summary's ``failures`` and the run goes on.
    """
    options = options or IngestOptions()
    total = len(documents) if isinstance(documents, Sequence) else total
    return IngestRun(dsn, tenant, embedder, options, progress, total).ingest(documents)
