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
import signal
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from typing import Any

import psycopg

from pgrag import tracing
from pgrag.db import DEFAULT_TENANT, connect, one_line
from pgrag.errors import (
    Cancelled,
    ConfigError,
    EmbeddingConfigError,
    ExtractionError,
    Interrupted,
)
from pgrag.ingest.lifecycle import FailedSource, IngestLifecycle, Lifecycle
from pgrag.ingest.load import Loader, bulk_backlog, index_bulk_backlog, isolate_large_tenant
from pgrag.ingest.options import IngestOptions, IngestSummary
from pgrag.ingest.plan import LISTED_TWICE, Doc, Planner, failure_reason, one_line_error
from pgrag.ingest.workers import EmbeddingStage
from pgrag.pipeline.chunking import Chunk, chunk_settings, make_chunker, token_counter
from pgrag.pipeline.embedders import Embedder, get_embedder, read_embedding_config
from pgrag.pipeline.extract import ExtractedDocument
from pgrag.pipeline.semantic_chunking import SemanticChunker, SentenceEmbedder
from pgrag.progress import Progress, ProgressMode
from pgrag.usage import Operation, Usage, record_usage

GROUP_DOCS = 64  # documents looked up together
BATCH_CHUNKS = 64  # chunks embedded, COPYed and committed together (progress moves per batch)
FORCE_AFTER = 2.0  # seconds after a Ctrl-C the run has not acted on, when a second one raises


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
        source_bytes: dict[str, int] | None = None,
    ) -> None:
        self.dsn = dsn
        self.estimate = ChunkEstimate(source_bytes or {})
        self.tenant = tenant
        self.options = replace(options)  # --switch-model turns force on for this run only
        self.summary = IngestSummary()
        self.lifecycle: Lifecycle = lifecycle or IngestLifecycle()
        # Set by a cancel from outside (pgrag worker), or by Ctrl-C (``interrupted``): the run
        # checks it between chunks, and its stages between slices and puts.
        self.own_cancel = cancel is None
        self.cancel = cancel or threading.Event()
        self.interrupted = False  # Ctrl-C (SIGINT) asked the run to stop
        self.interrupted_at = 0.0
        self.aborting = False  # the run is stopping: a Ctrl-C changes nothing
        self.finishing = False  # in the final database work: a Ctrl-C cancels the statement
        self.operation = operation  # whose embedding tokens (pgrag.record_usage)
        self.trace_context = tracing.capture()  # the command's or the worker job's span
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
        semantic = options.chunker == "semantic"
        self.sentences = SentenceEmbedder(self.embedder) if semantic else None
        self.chunker = make_chunker(
            options.chunker,
            self.counter,
            self.chunk_size,
            self.overlap,
            options.language,
            max_tokens=self.embedder.max_tokens - 2,
            embed=self.sentences.embed if self.sentences else None,
            breakpoint=options.breakpoint,
        )
        self.settings = {
            "chunker": options.chunker,
            "chunk_size": self.chunk_size,
            "overlap": self.overlap,
            "language": options.language,
        }
        if isinstance(self.chunker, SemanticChunker):  # another rule re-chunks on re-ingest
            self.settings["breakpoint"] = self.chunker.breakpoint.spec
        self.planner = Planner(self.conn, self.tenant, options, self.settings, self.lifecycle)
        if isinstance(self.lifecycle, IngestLifecycle) and not options.force:
            self.planner.saved_model = self.embedder.model_name
        self.loader: Loader | None = None
        self.bulk = False  # the loader took the bulk path (pgrag.bulk_load_applies)
        self.saving = False  # the loader saves long documents' embeddings (save_embeddings)
        self.embedding: EmbeddingStage | None = None
        self.batch: list[tuple[Doc, Chunk]] = []
        self.completed: list[Doc] = []
        self.in_flight: dict[int, Doc] = {}
        self.lock = threading.Lock()  # the summary, updated by this thread and the stages'
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
            embedder = get_embedder(provider, model if provider else None, dims, for_documents=True)
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
        with self._sigint_stops_the_run():
            try:
                self._load(items)
            finally:
                self.conn.close()
            self.finishing = True
            try:
                self.summary.tenant_isolated = isolate_large_tenant(self.dsn, self.tenant)
            except KeyboardInterrupt as exc:
                self.finishing, self.aborting = False, True
                raise Interrupted(self._finish_interrupted_message()) from exc
            self.finishing = False
        self.summary.seconds = time.perf_counter() - self.started
        return self.summary

    @contextlib.contextmanager
    def _sigint_stops_the_run(self) -> Iterator[None]:
        """Ctrl-C sets the run's cancel event rather than raising wherever the main thread is
        (mid-commit, inside the progress bar's or a queue's lock): the run stops at its next
        check, within about a second, and always with the whole message. While the run is
        finishing (database work at the end, or after an interruption), Ctrl-C raises, which
        cancels the running statement; while the run is stopping, it changes nothing. A second
        Ctrl-C more than ``FORCE_AFTER`` seconds after a first one the run has not acted on (the
        main thread waits on the database, say) raises at once. Only in the main thread, over
        Python's default handler."""
        if (
            not self.own_cancel
            or threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler
        ):
            yield
            return

        def stop(signum: int, frame: object) -> None:
            if self.finishing:
                raise KeyboardInterrupt
            if self.aborting:
                return
            now = time.monotonic()
            if self.interrupted and now - self.interrupted_at > FORCE_AFTER:
                raise KeyboardInterrupt
            if not self.interrupted:
                self.interrupted, self.interrupted_at = True, now
            self.cancel.set()

        previous = signal.signal(signal.SIGINT, stop)
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, previous)

    def _load(self, items: Iterable[ExtractedDocument | FailedSource]) -> None:
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
                    self.bulk = self.summary.bulk_load = loader.bulk
        except (KeyboardInterrupt, Cancelled) as exc:
            self.aborting = True
            if isinstance(exc, Cancelled) and not self.interrupted:
                self._abort(exc)
                raise
            in_flight = len(self.in_flight)
            saved = sum(d.long for d in self.in_flight.values()) if self.saving else 0
            self._abort(exc)
            raise Interrupted(self._interrupted_message(in_flight, saved)) from exc
        except BaseException as exc:
            self.aborting = True
            self._abort(exc)
            raise

    def late_interrupt_message(self) -> str:
        """The message for a Ctrl-C that reached the caller of :meth:`ingest` outside the
        run's own handling: as the run started (nothing read yet) or just after it ended."""
        if not self.planner.seen:
            return (
                "interrupted before any document was read: nothing was written. Run the same "
                "command again to ingest."
            )
        s = self.summary
        return (
            f"interrupted as the run ended: every document was processed "
            f"({s.documents_new + s.documents_changed} loaded, {s.documents_unchanged} "
            f"unchanged, {s.documents_failed} failed). Run the same command again to check: "
            "finished documents are skipped."
        )

    def _interrupted_message(self, in_flight: int, saved: int = 0) -> str:
        s = self.summary
        loaded = s.documents_new + s.documents_changed
        kept = (
            f"; the embeddings made so far for the {saved} long one(s) among them are kept "
            "and reused by the next run"
            if saved
            else ""
        )
        return (
            f"interrupted after {time.perf_counter() - self.started:.1f} s. Kept: {loaded} "
            f"document(s) loaded by this run ({s.chunks_written} chunks) and "
            f"{s.documents_unchanged} unchanged, {self._searchable()}; {in_flight} in progress "
            "were rolled back (none is half loaded: new ones are marked error, changed ones keep "
            f"their previous version{kept}). Run the same command again to finish: finished "
            "documents are skipped, the rest are ingested."
        )

    def _searchable(self) -> str:
        """What searches find of the documents kept, after an interrupted bulk load: its
        chunks' keyword index is written now (``pgrag.index_bulk_load_backlog``; the tenant's
        graph can wait, vector search scans rows outside every graph exactly). A second Ctrl-C
        skips it, and the message says so."""
        if not self.bulk or not (self.summary.documents_new + self.summary.documents_changed):
            return "all searchable"
        self.finishing = True
        try:
            index_bulk_backlog(self.dsn, self.tenant)
        except KeyboardInterrupt:
            return self._keyword_pending()
        except Exception as exc:  # the database went away: say what is true
            return self._keyword_pending(f" ({one_line_error(exc)})")
        finally:
            self.finishing = False
        return "all searchable"

    def _keyword_pending(self, why: str = "") -> str:
        return (
            "searchable by vector search, but not yet by keyword search nor counted by pgrag "
            f"stats: their keyword index was not written{why}. The next pgrag ingest of tenant "
            f"{self.tenant!r} writes it (or: select pgrag.finish_bulk_load('{self.tenant}'))"
        )

    def _finish_interrupted_message(self) -> str:
        s = self.summary
        loaded = s.documents_new + s.documents_changed
        pending = bulk_backlog(self.dsn, self.tenant) if self.bulk else 0
        if pending:
            what = self._keyword_pending()
        else:
            what = (
                "all searchable; the tenant's own vector index may not be built yet (vector "
                "search scans its rows exactly meanwhile, with the same results): the next "
                "pgrag ingest of the tenant builds it"
            )
            if pending is None:
                what = (
                    "all searchable by vector search; if the next pgrag ingest of the tenant "
                    "is not run, keyword search may miss this first load's chunks (select "
                    f"pgrag.finish_bulk_load('{self.tenant}') finishes it)"
                )
        return (
            f"interrupted while finishing, after {time.perf_counter() - self.started:.1f} s. "
            f"Every document was processed: {loaded} loaded by this run ({s.chunks_written} "
            f"chunks), {s.documents_unchanged} unchanged, {s.documents_failed} failed; {what}. "
            "Run the same command again to finish: finished documents are skipped."
        )

    def _abort(self, exc: BaseException) -> None:
        """Mark in-flight documents as failed (best effort) and stop the loader.

        On Ctrl-C the loader (database work, short) is waited for; the embedding thread only
        briefly: it is cancelled and stops after its current slice, writing nothing more."""
        interrupted = isinstance(exc, (KeyboardInterrupt, Cancelled))
        if self.loader is not None:
            self.bulk = self.summary.bulk_load = self.loader.bulk
        for worker in (self.embedding, self.loader):
            if worker is not None:
                worker.stop(cancel=True)
        for worker, wait in ((self.loader, 10), (self.embedding, 0.5 if interrupted else 60)):
            if worker is not None:
                worker.join(timeout=wait)
                with contextlib.suppress(Exception):
                    worker.close()
        self.embedding = self.loader = None
        if isinstance(exc, KeyboardInterrupt) or self.interrupted:
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
            with tracing.attached(self.trace_context):  # the stages' spans: the run's children
                return self._start_workers()
        return self.embedding

    def _start_workers(self) -> EmbeddingStage:
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
            loader.handled = self._written
            self.progress.chunks_written(0)  # the time left counts the chunks to write
            loader.start()
            self.loader = loader
            self.saving = loader.save
            self.embedding = EmbeddingStage(
                loader,
                self.embedder,
                self.options,
                self.summary,
                self.progress,
                self.planner.stored_metadata,
                self.cancel,
                self._failed_in_embedding,
            )
            self.embedding.start()
        return self.embedding

    def _written(self, kind: str, payload: Any) -> None:
        """Called by the loader after each message: a staged batch is in the database."""
        if kind == "stage":
            self.progress.chunks_written(len(payload[0]))

    def _group(self, group: list[ExtractedDocument | FailedSource]) -> None:
        """Plan a group of sources (:mod:`pgrag.ingest.plan`) and chunk those to load."""
        plan = self.planner.plan(group)
        loading = {id(source) for source in plan.load}
        self.estimate.skip([g.uri for g in group if id(g) not in loading])
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
        docs = self.planner.start_loading(plan)
        for doc in docs:
            self.in_flight[doc.doc_id] = doc
        for doc in docs:
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
        """Chunk one document (:meth:`_chunk`) in its ``chunk`` span."""
        attributes = {
            "pgrag.tenant": self.tenant,
            "pgrag.document.id": doc.doc_id,
            "pgrag.document.uri": doc.source.uri,
        }
        with tracing.span("chunk", attributes):
            self._chunk(doc)
            tracing.annotate({"pgrag.chunks": doc.n_chunks, "pgrag.failed": doc.failed is not None})
            if doc.failed is not None:  # this document alone: the run goes on
                tracing.record_error(ExtractionError(doc.failed))

    def _chunk(self, doc: Doc) -> None:
        """Chunk one document into the current batch (flushing full batches as it goes).

        Anything its content makes the reader, parser or chunker raise (not only pgrag's
        errors: a ValueError from a YAML date, a RecursionError, a MemoryError...) fails this
        document alone, with a one-line reason; the run goes on. Errors of the run's own
        stages (the embedder, the database), raised by a flush, stop the run."""
        chunks = iter(self.chunker.chunks(doc.source.blocks))
        while True:
            self._check_cancel()
            try:
                chunk = next(chunks, None)
                if chunk is None and doc.n_chunks == 0:
                    raise ExtractionError(doc.source.empty_message)
            except Exception as exc:  # this document's content: it fails alone
                self._fail(doc, one_line_error(exc))
                return
            if chunk is None:
                break
            self.batch.append((doc, chunk))
            doc.n_chunks += 1
            self.estimate.chunked(doc.source.uri, len(chunk.content) - chunk.overlap_chars)
            if len(self.batch) >= BATCH_CHUNKS:
                doc.long = True  # its embeddings are saved with each batch from now on
                self._flush()
        self.estimate.read(doc.source.uri)
        self.completed.append(doc)

    def _fail(self, doc: Doc, message: str) -> None:
        """``doc`` failed while being chunked: its rows are dropped, the run goes on."""
        self.estimate.read(doc.source.uri)
        if doc.failed is not None:  # the embedding stage failed it already
            return
        doc.failed = reason = failure_reason(doc.source.uri, message)
        staged = len(self.batch)
        self.batch = [(d, c) for d, c in self.batch if d is not doc]
        self.progress.forget_chunks(
            doc.n_chunks - (staged - len(self.batch)), doc.embedded + doc.repeated + doc.reused
        )
        self._ensure_workers().put("fail", (doc.doc_id, reason))
        self._count_failure(doc, reason)

    def _failed_in_embedding(self, doc: Doc, reason: str) -> None:
        """Called by the embedding stage: ``doc`` failed there (its rows are dropped)."""
        self.progress.forget_chunks(doc.n_chunks, doc.embedded + doc.repeated + doc.reused)
        self._count_failure(doc, failure_reason(doc.source.uri, reason))

    def _count_failure(self, doc: Doc, reason: str) -> None:
        with self.lock:
            self.summary.documents_failed += 1
            self.summary.failures.append((doc.source.uri, reason))
            self.in_flight.pop(doc.doc_id, None)
        self.progress.advance(1, doc.source.uri[-60:])

    def _check_cancel(self) -> None:
        if self.cancel.is_set():
            raise Cancelled("cancelled: the worker is stopping")

    def _committed(self, done: list[Doc], superseded: set[int]) -> None:
        """Called by the loader after the swap of ``done`` committed (``superseded``: the ids
        the lifecycle did not swap in, because a newer version was submitted meanwhile)."""
        summary = self.summary
        for d in done:
            with self.lock:
                self.in_flight.pop(d.doc_id, None)
                if d.doc_id not in superseded:
                    if d.is_new:
                        summary.documents_new += 1
                    else:
                        summary.documents_changed += 1
                    # Each chunk written is one of: embedded, repeated, reused.
                    summary.chunks_written += d.n_chunks
                    summary.chunks_embedded += d.embedded
                    summary.chunks_repeated += d.repeated
                    summary.chunks_reused += d.reused
            self.progress.advance(1, d.source.uri[-60:])

    def _flush(self) -> None:
        """Hand the current batch to the embedding stage, then the completed documents."""
        batch, self.batch = self.batch, []
        embedder = self._ensure_workers()
        if batch:
            self.progress.plan_chunks(len(batch), self.estimate.total())
            embedder.put("stage", batch)
        if self.completed:
            done, self.completed = self.completed, []
            embedder.put("commit", done)
        if self.sentences is not None:  # the semantic chunker's sentence embeddings
            tokens, calls = self.sentences.take_usage()
            provider, model = self.embedder.provider, self.embedder.model_name
            usage = Usage(self.operation, provider, model, tokens, 0, calls)
            record_usage(self.conn, self.tenant, usage)


class ChunkEstimate:
    """The run's chunks, estimated from its sources' sizes as they are read.

    ``source_bytes`` gives the size of each source (files: their size on disk). Chunks made so
    far per byte read so far (a document's bytes read: its whole size once chunked, else the
    new text of its chunks so far) times the bytes still to read, plus the chunks made: the
    run's chunks. None while nothing is known (no sizes, or nothing read yet).
    """

    def __init__(self, source_bytes: dict[str, int]) -> None:
        self.sizes = source_bytes
        self.left = sum(source_bytes.values())  # bytes of the sources still to load
        self.read_bytes = 0  # of sources chunked to the end
        self.current: tuple[str, int] | None = None  # (uri, chars chunked) of the one being read
        self.chunks = 0

    def skip(self, uris: Iterable[str]) -> None:
        """Sources that will not be chunked (unchanged, relabelled, failed to open)."""
        self.left -= sum(self.sizes.get(u, 0) for u in uris)

    def chunked(self, uri: str, chars: int) -> None:
        self.chunks += 1
        done = self.current[1] if self.current and self.current[0] == uri else 0
        self.current = (uri, done + max(chars, 0))

    def read(self, uri: str) -> None:
        """``uri`` is chunked to its end (or failed)."""
        size = self.sizes.get(uri, 0)
        self.read_bytes += size
        self.left -= size
        self.current = None

    def total(self) -> int | None:
        if not self.sizes:
            return None
        reading = 0
        if self.current is not None:
            reading = min(self.current[1], self.sizes.get(self.current[0], 0))
        read = self.read_bytes + reading
        if read <= 0 or self.chunks == 0:
            return None
        return self.chunks + round(max(self.left - reading, 0) * self.chunks / read)


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
