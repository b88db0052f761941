"""Ingestion: documents in, chunks with embeddings out, incrementally, atomically, with COPY.

How a run works (one main thread, one loading thread, two connections):

1. Documents are read in groups. One query per group fetches what the database holds for them;
   a document whose content hash and chunking settings are unchanged (and status ``ready``) is
   skipped: it is never chunked, and the model is never loaded for it.
2. New documents are inserted as ``processing`` (committed, so operators see the work in
   progress); documents being refreshed stay ``ready`` with their previous chunks, so search
   never loses them. Then they are chunked as a stream.
3. Chunks are embedded in batches. Only chunks whose sha256 is not already stored for the same
   document are embedded; the others are staged without an embedding and take the stored one
   at commit (``--force`` embeds everything).
4. The loading thread COPYs each batch (binary, pgvector's binary format) into a session-local
   staging table while the main thread embeds the next batch. When a document's last chunk is
   staged, one transaction replaces its chunks, sets it ``ready`` and clears its staging rows;
   several small documents share one such transaction. Readers never see half a document.

Progress (:mod:`pgrag.progress`) counts documents as their swap commits and chunks as they are
embedded. Ctrl-C stops a run within about a second (the local model embeds a batch in slices
and checks between them) and raises :class:`Interrupted`, saying what was kept.

A run killed at any point leaves committed documents whole, new in-flight ones ``processing``
with no chunks and refreshed ones ``ready`` with their previous chunks; their stored hash is
the previous one (or none), so the next run picks them up again. Staged rows live in a
temporary table that dies with the connection.
"""

from __future__ import annotations

import contextlib
import json
import queue
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from pgrag.chunking import Chunk, default_sizes, make_chunker, token_counter
from pgrag.db import DEFAULT_TENANT, connect, set_request_tenant
from pgrag.embedders import Embedder, get_embedder, read_embedding_config
from pgrag.errors import (
    ConfigError,
    EmbeddingConfigError,
    ExtractionError,
    Interrupted,
    NothingToDo,
    PgragError,
)
from pgrag.extract import (
    EXTENSIONS,
    Block,
    ExtractedDocument,
    discover_paths,
    extract,
    source_type_for,
)
from pgrag.progress import Progress, ProgressMode

__all__ = [
    "Block",
    "ExtractedDocument",
    "IngestOptions",
    "IngestSummary",
    "ingest_documents",
    "ingest_paths",
]

GROUP_DOCS = 64  # documents looked up together
BATCH_CHUNKS = 64  # chunks embedded, COPYed and committed together (progress moves per batch)
QUEUE_DEPTH = 2  # batches between the embedding thread and the loading thread
LOCAL_EMBED_SLICE = 8  # chunks the local model embeds between two checks for Ctrl-C

STAGE_COLUMNS = (
    "document_id",
    "chunk_index",
    "content",
    "embedding",
    "page",
    "heading_path",
    "language",
    "token_count",
    "content_sha256",
    "overlap_chars",
    "metadata",
)
STAGE_TYPES = [
    "int8",
    "int4",
    "text",
    "vector",
    "int4",
    "text[]",
    "text",
    "int4",
    "text",
    "int4",
    "jsonb",
]


def create_stage_table(conn: psycopg.Connection[Any]) -> None:
    """Create this session's staging table ``pg_temp.pgrag_stage`` (columns ``STAGE_COLUMNS``),
    which ``pgrag.replace_document_chunks`` reads."""
    row = conn.execute(
        "select n.nspname from pg_catalog.pg_extension e "
        "join pg_catalog.pg_namespace n on n.oid = e.extnamespace where e.extname = 'vector'"
    ).fetchone()
    vector = sql.Identifier(row[0] if row else "public", "vector")
    conn.execute(
        sql.SQL(
            "create temp table pgrag_stage (document_id int8 not null, chunk_index int4 "
            "not null, content text not null, embedding {}, page int4, heading_path text[] "
            "not null, language text not null, token_count int4 not null, content_sha256 "
            "text not null, overlap_chars int4 not null, metadata jsonb not null)"
        ).format(vector)
    )


@dataclass
class IngestOptions:
    """How to chunk and whether to redo work.

    ``chunk_size``/``overlap`` default to the chunker's and the model's defaults (tokens:
    at most 512, inside the model's window; words: 500/50 when the model reads that much).
    ``switch_model`` records a different embedding model than the database holds and marks
    every stored embedding for re-embedding (see docs/ingest.md); it implies ``force``.
    ``metadata`` is merged into every document's metadata (over the extractor's, e.g. Markdown
    front matter); a re-ingest with other metadata updates it without re-embedding.
    """

    chunker: str = "tokens"
    chunk_size: int | None = None
    overlap: int | None = None
    force: bool = False
    language: str = "english"
    switch_model: bool = False
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class IngestSummary:
    documents_new: int = 0
    documents_changed: int = 0
    documents_unchanged: int = 0
    documents_failed: int = 0
    documents_removed: int = 0
    tenant_isolated: bool = False
    chunks_written: int = 0
    chunks_embedded: int = 0
    chunks_reused: int = 0
    seconds: float = 0.0
    failures: list[tuple[str, str]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["seconds"] = round(self.seconds, 3)
        data["failures"] = [{"uri": u, "reason": r} for u, r in self.failures]
        return data


@dataclass
class _Failed:
    """A source that could not even be opened (from ingest_paths)."""

    uri: str
    source_type: str
    reason: str


@dataclass
class _Doc:
    source: ExtractedDocument
    doc_id: int
    is_new: bool
    old_shas: set[str]
    n_chunks: int = 0


def _reason(uri: str, message: str) -> str:
    """The reason part of ``uri: reason`` messages."""
    prefix = f"{uri}: "
    return message[len(prefix) :] if message.startswith(prefix) else message


# -- loading thread ----------------------------------------------------------------------------


class _Worker(threading.Thread):
    """A pipeline stage: a bounded inbox, handled in order on its own thread.

    An error stops the stage's work (it keeps draining so producers never block) and is
    raised to whoever puts into it next or waits for it to finish.
    """

    def __init__(self, name: str) -> None:
        super().__init__(name=name, daemon=True)
        self.inbox: queue.Queue[tuple[str, Any]] = queue.Queue(maxsize=QUEUE_DEPTH)
        self.error: BaseException | None = None
        self.cancelled = False

    def put(self, kind: str, payload: Any) -> None:
        while True:
            if self.error is not None:
                raise self.error
            try:
                self.inbox.put((kind, payload), timeout=0.2)
                return
            except queue.Full:
                if not self.is_alive():
                    raise PgragError(f"{self.name} stopped unexpectedly") from self.error

    def stop(self, cancel: bool = False) -> None:
        """Queue the end of work (``cancel``: skip whatever is still queued)."""
        self.cancelled = self.cancelled or cancel
        while self.is_alive():
            try:
                self.inbox.put(("stop", None), timeout=0.2)
                return
            except queue.Full:
                if self.cancelled:  # a cancelled worker leaves at its next message
                    return
                continue

    def finish(self) -> None:
        self.stop()
        self.join()
        self.close()
        if self.error is not None:
            raise self.error

    def close(self) -> None:
        pass

    def handle(self, kind: str, payload: Any) -> None:
        getattr(self, f"_do_{kind}")(payload)

    def run(self) -> None:
        try:
            while True:
                kind, payload = self.inbox.get()
                if kind == "stop" or self.cancelled:
                    return
                self.handle(kind, payload)
        except BaseException as exc:
            self.error = exc
            while True:  # drain (so producers never block) until told to stop, or cancelled
                try:
                    if self.inbox.get(timeout=0.2)[0] == "stop":
                        return
                except queue.Empty:
                    if self.cancelled:
                        return


class _Loader(_Worker):
    """Owns the loading connection: COPYs batches to staging and swaps documents in."""

    def __init__(
        self, dsn: str, tenant: str, model: str, provider: str, on_commit: Any = None
    ) -> None:
        super().__init__("pgrag-loader")
        self.on_commit = on_commit
        self.tenant = tenant
        self.model = model
        self.provider = provider
        self.conn = connect(dsn, autocommit=True)
        self.model_recorded = False
        create_stage_table(self.conn)

    def close(self) -> None:
        self.conn.close()

    def _do_stage(self, rows: list[tuple[Any, ...]]) -> None:
        copy_sql = sql.SQL("copy pgrag_stage ({}) from stdin (format binary)").format(
            sql.SQL(", ").join(sql.Identifier(c) for c in STAGE_COLUMNS)
        )
        with self.conn.transaction(), self.conn.cursor() as cur, cur.copy(copy_sql) as copy:
            copy.set_types(STAGE_TYPES)
            for row in rows:
                copy.write_row(row)

    def _do_fail(self, payload: tuple[int, str]) -> None:
        doc_id, message = payload
        with self.conn.transaction():
            set_request_tenant(self.conn, self.tenant)
            self.conn.execute("delete from pgrag_stage where document_id = %s", (doc_id,))
            self.conn.execute(
                "update pgrag.documents set status = 'error', error = %s "
                "where tenant_id = %s and id = %s",
                (message, self.tenant, doc_id),
            )

    def _do_commit(self, payload: tuple[list[tuple[Any, ...]], list[Any]]) -> None:
        docs, done = payload
        self._commit(docs)
        if self.on_commit is not None:
            self.on_commit(done)

    def _commit(self, docs: list[tuple[Any, ...]]) -> None:
        t = self.tenant
        with self.conn.transaction():
            set_request_tenant(self.conn, t)
            try:
                self.conn.execute(
                    "select pgrag.replace_document_chunks('pg_temp.pgrag_stage'::regclass, %s,"
                    " %s::int8[], %s::text[], %s::text[], %s::text[], %s::jsonb[], %s::int4[], %s)",
                    (
                        t,
                        [d[0] for d in docs],
                        [d[1] for d in docs],
                        [d[2] for d in docs],
                        [d[3] for d in docs],
                        [Jsonb(d[4]) for d in docs],
                        [d[5] for d in docs],
                        self.model,
                    ),
                )
            except psycopg.Error as exc:
                if exc.sqlstate == "PR001":
                    raise PgragError(
                        "a document changed in the database while it was being ingested "
                        "(another ingest of the same source?): run pgrag ingest again."
                    ) from exc
                if exc.sqlstate == "PR002":
                    raise EmbeddingConfigError(
                        "another ingest recorded a different embedding model meanwhile; "
                        "mixing models is refused."
                    ) from exc
                raise
            if not self.model_recorded:
                self.conn.execute(
                    "update pgrag.embedding_config set model = %s, provider = %s "
                    "where model is null",
                    (self.model, self.provider),
                )
                row = self.conn.execute(
                    "select model, provider from pgrag.embedding_config"
                ).fetchone()
                if row and (row[0], row[1]) != (self.model, self.provider):
                    raise EmbeddingConfigError(
                        f"another ingest recorded {row[1]}:{row[0]} as this database's model "
                        "meanwhile; mixing models is refused."
                    )
                self.model_recorded = True


# -- the run ------------------------------------------------------------------------------------


class _Run:
    def __init__(
        self,
        dsn: str,
        tenant: str,
        embedder: Embedder | None,
        options: IngestOptions,
        progress: bool | ProgressMode,
        total: int | None,
    ) -> None:
        self.dsn = dsn
        self.tenant = tenant
        self.options = replace(options)  # --switch-model turns force on for this run only
        self.summary = IngestSummary()
        self.conn = connect(dsn, autocommit=True)
        try:
            self._setup(embedder, progress, total)
        except BaseException:
            self.conn.close()
            raise

    def _setup(
        self, embedder: Embedder | None, progress: bool | ProgressMode, total: int | None
    ) -> None:
        options = self.options
        self.embedder, switch = self._check_embedder(embedder)
        sizes = default_sizes(options.chunker, self.embedder.max_tokens)
        self.chunk_size = options.chunk_size or sizes[0]
        if options.overlap is not None:
            self.overlap = options.overlap
        elif options.chunk_size:
            self.overlap = self.chunk_size // (8 if options.chunker == "tokens" else 10)
        else:
            self.overlap = sizes[1]
        if options.chunker == "tokens" and self.chunk_size > self.embedder.max_tokens - 2:
            raise ConfigError(
                f"--chunk-size {self.chunk_size} exceeds what {self.embedder.model_name} reads "
                f"({self.embedder.max_tokens} tokens): its chunks would be truncated."
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
        self.loader: _Loader | None = None
        self.embedding: _Embedding | None = None
        self.seen: set[str] = set()
        self.batch: list[tuple[_Doc, Chunk]] = []
        self.completed: list[_Doc] = []
        self.in_flight: dict[int, _Doc] = {}
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
                "select pgrag.text_search_config_allowed(%s::regconfig)", (self.options.language,)
            ).fetchone()
        except psycopg.Error as exc:
            raise ConfigError(
                f"unknown text-search language {self.options.language!r}: choose one of "
                "select cfgname from pg_ts_config (e.g. english, simple, german)."
            ) from exc
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
                f"embeddings but this database holds {dims}: use a database installed with "
                f"pgrag migrate --dims {embedder.dims}, or a model of {dims} dimensions."
            )
        if model is not None and (provider, model) != (embedder.provider, embedder.model_name):
            if not self.options.switch_model:
                raise EmbeddingConfigError(
                    f"this database holds embeddings of {provider}:{model}; "
                    f"{embedder.provider}:{embedder.model_name} would mix models. Keep "
                    f"--embedder {provider} --model {model}, or re-embed everything with "
                    "pgrag ingest --switch-model (then re-ingest every source), "
                    "or use a new database."
                )
            return embedder, True
        return embedder, False

    def _switch_model(self, embedder: Embedder) -> None:
        """Record a new model; every stored embedding is cleared and every document pending."""
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

    def run(self, items: Iterable[ExtractedDocument | _Failed]) -> IngestSummary:
        started = self.started
        try:
            with self.progress:
                group: list[ExtractedDocument | _Failed] = []
                for item in items:
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
        except KeyboardInterrupt as exc:
            in_flight = len(self.in_flight)
            self._abort(exc)
            raise Interrupted(self._interrupted_message(in_flight)) from exc
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
        interrupted = isinstance(exc, KeyboardInterrupt)
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
        if not ids and not self.seen:
            return

        def mark(conn: psycopg.Connection[Any]) -> None:
            # In-flight documents, and any new one of this run whose insert committed just as
            # the run was interrupted (before it was registered as in flight).
            with conn.transaction():
                set_request_tenant(conn, self.tenant)
                conn.execute(
                    "update pgrag.documents set status = 'error', error = %s "
                    "where tenant_id = %s and (id = any(%s) or source_uri = any(%s)) "
                    "and status = 'processing'",
                    (f"ingest aborted: {message}", self.tenant, ids, list(self.seen)),
                )

        try:
            mark(self.conn)
        except Exception:  # the main connection was interrupted mid-statement: use another
            with contextlib.suppress(Exception), connect(self.dsn, autocommit=True) as conn:
                mark(conn)

    def _ensure_workers(self) -> _Embedding:
        if self.embedding is None:
            loader = _Loader(
                self.dsn,
                self.tenant,
                self.embedder.model_name,
                self.embedder.provider,
                self._committed,
            )
            loader.start()
            self.loader = loader
            self.embedding = _Embedding(self, loader)
            self.embedding.start()
        return self.embedding

    def _group(self, group: list[ExtractedDocument | _Failed]) -> None:
        uris = [g.uri for g in group]
        with self.conn.transaction():
            set_request_tenant(self.conn, self.tenant)
            rows = self.conn.execute(
                "select source_uri, id, content_sha256, status, metadata "
                "from pgrag.documents where tenant_id = %s and source_uri = any(%s)",
                (self.tenant, uris),
            ).fetchall()
        existing = {r[0]: r[1:] for r in rows}
        todo: list[ExtractedDocument] = []
        relabel: list[tuple[int, dict[str, Any]]] = []
        for item in group:
            if item.uri in self.seen:
                self._fail_new(item.uri, item.source_type, "listed twice in this run")
                continue
            self.seen.add(item.uri)
            if isinstance(item, _Failed):
                self._fail_new(item.uri, item.source_type, item.reason)
                continue
            old = existing.get(item.uri)
            if (
                old is not None
                and not self.options.force
                and old[1] == item.content_sha256
                and old[2] == "ready"
                and (old[3] or {}).get("ingest") == self.settings
            ):
                metadata = self.stored_metadata(item)
                if old[3] == metadata:
                    self.summary.documents_unchanged += 1
                else:  # same content and chunking, other metadata: no need to re-embed
                    relabel.append((old[0], metadata))
                    self.summary.documents_changed += 1
                self.progress.advance(1, item.uri[-60:])
                continue
            todo.append(item)
        if relabel:
            with self.conn.transaction():
                set_request_tenant(self.conn, self.tenant)
                self.conn.execute(
                    "update pgrag.documents as d set metadata = v.m "
                    "from unnest(%s::int8[], %s::jsonb[]) as v(id, m) "
                    "where d.tenant_id = %s and d.id = v.id",
                    ([i for i, _ in relabel], [Jsonb(m) for _, m in relabel], self.tenant),
                )
        if not todo:
            return
        # New documents appear as processing, with no chunks yet; documents being refreshed
        # stay ready and searchable (their previous version) until their swap commits.
        with self.conn.transaction():
            set_request_tenant(self.conn, self.tenant)
            marked = self.conn.execute(
                """
                insert into pgrag.documents (tenant_id, title, source_type, source_uri, status)
                select %s, t, s, u, 'processing'
                  from unnest(%s::text[], %s::text[], %s::text[]) as v(t, s, u)
                on conflict (tenant_id, source_uri)
                do update set error = null,
                    status = case when pgrag.documents.status = 'ready' then 'ready'
                                  else 'processing' end
                returning source_uri, id
                """,
                (
                    self.tenant,
                    [d.title for d in todo],
                    [d.source_type for d in todo],
                    [d.uri for d in todo],
                ),
            ).fetchall()
        ids = dict(marked)
        old_shas: dict[int, set[str]] = {}
        reuse_ids = [ids[d.uri] for d in todo if d.uri in existing and not self.options.force]
        if reuse_ids:
            with self.conn.transaction():
                set_request_tenant(self.conn, self.tenant)
                for doc_id, sha in self.conn.execute(
                    "select distinct document_id, content_sha256 from pgrag.chunks "
                    "where tenant_id = %s and document_id = any(%s) and embedding is not null",
                    (self.tenant, reuse_ids),
                ).fetchall():
                    old_shas.setdefault(doc_id, set()).add(sha)
        for source in todo:
            doc_id = ids[source.uri]
            old = existing.get(source.uri)
            doc = _Doc(source, doc_id, old is None or old[1] is None, old_shas.get(doc_id, set()))
            self.in_flight[doc_id] = doc
            self._document(doc)

    def _fail_new(self, uri: str, source_type: str | None, reason: str) -> None:
        """Record a source that failed before it had a row (or was listed twice)."""
        reason = _reason(uri, reason)
        self.summary.documents_failed += 1
        self.summary.failures.append((uri, reason))
        self.progress.advance(1, uri[-60:])
        if reason == "listed twice in this run":
            return
        stype = source_type if source_type in ("pdf", "markdown", "html", "text", "url") else "text"
        with self.conn.transaction():
            set_request_tenant(self.conn, self.tenant)
            self.conn.execute(
                """
                insert into pgrag.documents (tenant_id, source_type, source_uri, status, error)
                values (%s, %s, %s, 'error', %s)
                on conflict (tenant_id, source_uri)
                do update set status = 'error', error = excluded.error
                """,
                (self.tenant, stype, uri, reason),
            )

    def _document(self, doc: _Doc) -> None:
        """Chunk one document into the current batch (flushing full batches as it goes)."""
        try:
            for chunk in self.chunker.chunks(doc.source.blocks):
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

    def _fail(self, doc: _Doc, message: str) -> None:
        reason = _reason(doc.source.uri, message)
        self.batch = [(d, c) for d, c in self.batch if d is not doc]
        self.summary.documents_failed += 1
        self.summary.failures.append((doc.source.uri, reason))
        self.in_flight.pop(doc.doc_id, None)
        self._ensure_workers().put("fail", (doc.doc_id, reason))
        self.progress.advance(1, doc.source.uri[-60:])

    def stored_metadata(self, source: ExtractedDocument) -> dict[str, Any]:
        """The metadata a document is stored with: the extractor's, ``--metadata``, settings."""
        merged = {**source.metadata, **self.options.metadata, "ingest": self.settings}
        normalised: dict[str, Any] = json.loads(json.dumps(merged, default=str))
        return normalised

    def _committed(self, done: list[_Doc]) -> None:
        """Called by the loader after the swap of ``done`` committed."""
        summary = self.summary
        for d in done:
            self.in_flight.pop(d.doc_id, None)
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


class _Embedding(_Worker):
    """Embeds batches (only chunks whose text is new) and forwards them to the loader.

    Running it beside the chunker (main thread) and the loader overlaps CPU-bound embedding
    with extraction, chunking and database work.
    """

    def __init__(self, run: _Run, loader: _Loader) -> None:
        super().__init__("pgrag-embedding")
        self.r = run
        self.loader = loader

    def _do_fail(self, payload: tuple[int, str]) -> None:
        self.loader.put("fail", payload)

    def _do_stage(self, batch: list[tuple[_Doc, Chunk]]) -> None:
        force = self.r.options.force
        summary = self.r.summary
        need: dict[str, int] = {}  # text -> row in the embedding matrix
        texts: list[str] = []
        for doc, chunk in batch:
            fresh = force or chunk.sha256 not in doc.old_shas
            if fresh and chunk.content not in need:
                need[chunk.content] = len(texts)
                texts.append(chunk.content)
        vectors = self._embed(texts) if texts else None
        rows = []
        for doc, chunk in batch:
            pos = need.get(chunk.content)
            if vectors is None or pos is None or (not force and chunk.sha256 in doc.old_shas):
                vector = None
                summary.chunks_reused += 1
            else:
                vector = vectors[pos]
            rows.append(
                (
                    doc.doc_id,
                    chunk.index,
                    chunk.content,
                    vector,
                    chunk.page,
                    list(chunk.heading_path),
                    chunk.language,
                    chunk.token_count,
                    chunk.sha256,
                    chunk.overlap_chars,
                    chunk.metadata,
                )
            )
        self.loader.put("stage", rows)

    def _embed(self, texts: list[str]) -> Any:
        """Embed ``texts``; the local model works in slices so Ctrl-C stops it within ~1 s."""
        import numpy as np

        embedder = self.r.embedder
        step = LOCAL_EMBED_SLICE if embedder.provider == "local" else max(len(texts), 1)
        parts = []
        for start in range(0, len(texts), step):
            if self.cancelled:
                raise PgragError("ingest cancelled")
            part = texts[start : start + step]
            parts.append(embedder.embed(part))
            self.r.summary.chunks_embedded += len(part)
            self.r.progress.count("chunks embedded", len(part))
        return np.concatenate(parts) if len(parts) > 1 else parts[0]

    def _do_commit(self, done: list[_Doc]) -> None:
        rows = [
            (
                d.doc_id,
                d.source.title,
                d.source.source_type,
                d.source.content_sha256,
                self.r.stored_metadata(d.source),
                d.n_chunks,
            )
            for d in done
        ]
        self.loader.put("commit", (rows, done))


# -- public entry points ------------------------------------------------------------------------


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
    return _Run(dsn, tenant, embedder, options, progress, total).run(documents)


def _open_sources(sources: Iterable[str]) -> Iterator[ExtractedDocument | _Failed]:
    for source in sources:
        try:
            yield extract(source)
        except ExtractionError as exc:
            uri = source if source.startswith(("http://", "https://")) else _abspath(source)
            stype = "url" if uri.startswith("http") else (source_type_for(source) or "text")
            yield _Failed(uri, stype, str(exc))


def _abspath(path: str) -> str:
    from pathlib import Path

    return str(Path(path).resolve())


def ingest_paths(
    dsn: str,
    paths: Sequence[str],
    *,
    glob: str | None = None,
    tenant: str = DEFAULT_TENANT,
    embedder: Embedder | None = None,
    options: IngestOptions | None = None,
    progress: bool | ProgressMode = False,
    prune: bool = False,
) -> IngestSummary:
    """Ingest files, folders (walked recursively, ``glob`` to filter) and http(s) URLs.

    ``prune``: afterwards remove the tenant's documents stored under one of the folders whose
    file no longer exists (one transaction). Raises :class:`NothingToDo` when no file matches
    (and nothing was pruned).
    """
    from pathlib import Path

    for p in paths:
        if not p.startswith(("http://", "https://")) and not Path(p).exists():
            raise ConfigError(f"{p}: no such file or folder")
    folders = [Path(p).resolve() for p in paths if not p.startswith("http") and Path(p).is_dir()]
    if prune and not folders:
        raise ConfigError("--prune removes documents of deleted files under a folder: name one.")
    sources = list(discover_paths(paths, glob))
    options = options or IngestOptions()
    if sources:
        run = _Run(dsn, tenant, embedder, options, progress, len(sources))
        summary = run.run(_open_sources(sources))
    else:
        summary = IngestSummary()
    if prune:
        from pgrag.documents import delete_documents, missing_under

        with connect(dsn, autocommit=True) as conn:
            ids = sorted({i for folder in folders for i in missing_under(conn, tenant, folder)})
            if ids:
                summary.documents_removed = len(delete_documents(conn, tenant, document_ids=ids))
    if not sources and not summary.documents_removed:
        raise NothingToDo(_nothing_found(paths, glob))
    return summary


def isolate_large_tenant(dsn: str, tenant: str) -> bool:
    """Give ``tenant`` its own HNSW graph once it outgrows the exact path; True if done now.

    ``pgrag.isolate_tenants`` decides (more than ``pgrag.exact_search_max_rows`` chunks and no
    graph yet) and builds the index, so a neighbour's data never slows or skews this tenant's
    vector search (docs/security.md, "Tenant isolation in the vector index"). Only the owner of
    ``pgrag.chunks`` may build indexes: for any other role this is left to the operator.
    """
    with connect(dsn, autocommit=True) as conn:
        owner = conn.execute(
            "select pg_catalog.pg_has_role(c.relowner, 'USAGE') from pg_catalog.pg_class as c "
            "where c.oid = 'pgrag.chunks'::regclass"
        ).fetchone()
        if not (owner and owner[0]):
            return False
        return bool(
            conn.execute(
                "select 1 from pgrag.isolate_tenants(tenants => array[%s]::text[])", (tenant,)
            ).fetchone()
        )


def _nothing_found(paths: Sequence[str], glob: str | None) -> str:
    where = ", ".join(paths)
    if glob:
        return f"no file matches --glob {glob!r} in {where}: nothing to ingest."
    known = " ".join(sorted(EXTENSIONS))
    return (
        f"no supported file in {where} (extensions {known}): nothing to ingest. "
        "Pass --glob to choose files by name."
    )
