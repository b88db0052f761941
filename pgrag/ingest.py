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

A run killed at any point leaves committed documents whole, new in-flight ones ``processing``
with no chunks and refreshed ones ``ready`` with their previous chunks; their stored hash is
the previous one (or none), so the next run picks them up again. Staged rows live in a
temporary table that dies with the connection.
"""

from __future__ import annotations

import contextlib
import json
import queue
import sys
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
    PgragError,
)
from pgrag.extract import Block, ExtractedDocument, discover_paths, extract, source_type_for

__all__ = [
    "Block",
    "ExtractedDocument",
    "IngestOptions",
    "IngestSummary",
    "ingest_documents",
    "ingest_paths",
]

GROUP_DOCS = 64  # documents looked up together
BATCH_CHUNKS = 256  # chunks embedded and COPYed together
QUEUE_DEPTH = 2  # batches between the embedding thread and the loading thread

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
    """

    chunker: str = "tokens"
    chunk_size: int | None = None
    overlap: int | None = None
    force: bool = False
    language: str = "english"
    switch_model: bool = False


@dataclass
class IngestSummary:
    documents_new: int = 0
    documents_changed: int = 0
    documents_unchanged: int = 0
    documents_failed: int = 0
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


def _act_as(conn: psycopg.Connection[Any], tenant: str) -> psycopg.Connection[Any]:
    """Set the tenant claim for the whole session (as PostgREST would per request), so
    row-level security, when the role is subject to it, shows this tenant's rows."""
    conn.execute(
        "select pg_catalog.set_config('request.jwt.claims', %s, false)",
        (json.dumps({"tenant_id": tenant}),),
    )
    return conn


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
                if kind == "stop":
                    return
                if not self.cancelled:
                    self.handle(kind, payload)
        except BaseException as exc:
            self.error = exc
            with contextlib.suppress(Exception):
                while self.inbox.get()[0] != "stop":  # drain until told to stop
                    pass


class _Loader(_Worker):
    """Owns the loading connection: COPYs batches to staging and swaps documents in."""

    def __init__(self, dsn: str, tenant: str, model: str, provider: str) -> None:
        super().__init__("pgrag-loader")
        self.tenant = tenant
        self.model = model
        self.provider = provider
        self.conn = _act_as(connect(dsn, autocommit=True), tenant)
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

    def _do_commit(self, docs: list[tuple[Any, ...]]) -> None:
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
        progress: bool,
        total: int | None,
    ) -> None:
        self.dsn = dsn
        self.tenant = tenant
        self.options = replace(options)  # --switch-model turns force on for this run only
        self.summary = IngestSummary()
        self.conn = _act_as(connect(dsn, autocommit=True), tenant)
        try:
            self._setup(embedder, progress, total)
        except BaseException:
            self.conn.close()
            raise

    def _setup(self, embedder: Embedder | None, progress: bool, total: int | None) -> None:
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
        self.progress = _Progress(progress, total)
        if switch:
            self._switch_model(self.embedder)

    # -- configuration checks ------------------------------------------------------------------

    def _check_embedder(self, embedder: Embedder | None) -> tuple[Embedder, bool]:
        """The embedder to use, and whether it replaces the recorded model (--switch-model)."""
        dims, model, provider = read_embedding_config(self.conn)
        try:
            self.conn.execute("select %s::regconfig", (self.options.language,))
        except psycopg.Error as exc:
            raise ConfigError(
                f"unknown text-search language {self.options.language!r}: choose one of "
                "select cfgname from pg_ts_config (e.g. english, simple, german)."
            ) from exc
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
        started = time.perf_counter()
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
        except BaseException as exc:
            self._abort(exc)
            raise
        finally:
            self.conn.close()
        self.summary.seconds = time.perf_counter() - started
        return self.summary

    def _abort(self, exc: BaseException) -> None:
        """Mark in-flight documents as failed (best effort) and stop the loader."""
        for worker in (self.embedding, self.loader):
            if worker is not None:
                worker.stop(cancel=True)
                worker.join(timeout=60)
                with contextlib.suppress(Exception):
                    worker.close()
        self.embedding = self.loader = None
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        ids = list(self.in_flight)
        if ids and not self.conn.closed:
            with contextlib.suppress(Exception), self.conn.transaction():
                set_request_tenant(self.conn, self.tenant)
                self.conn.execute(
                    "update pgrag.documents set status = 'error', error = %s "
                    "where tenant_id = %s and id = any(%s) and status = 'processing'",
                    (f"ingest aborted: {message}", self.tenant, ids),
                )

    def _ensure_workers(self) -> _Embedding:
        if self.embedding is None:
            loader = _Loader(
                self.dsn, self.tenant, self.embedder.model_name, self.embedder.provider
            )
            loader.start()
            self.loader = loader
            self.embedding = _Embedding(self, loader)
            self.embedding.start()
        return self.embedding

    def _group(self, group: list[ExtractedDocument | _Failed]) -> None:
        uris = [g.uri for g in group]
        rows = self.conn.execute(
            "select source_uri, id, content_sha256, status, metadata -> 'ingest' "
            "from pgrag.documents where tenant_id = %s and source_uri = any(%s)",
            (self.tenant, uris),
        ).fetchall()
        existing = {r[0]: r[1:] for r in rows}
        todo: list[ExtractedDocument] = []
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
                and old[3] == self.settings
            ):
                self.summary.documents_unchanged += 1
                self.progress.advance(item.uri)
                continue
            todo.append(item)
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
            for doc_id, sha in self.conn.execute(
                "select distinct document_id, content_sha256 from pgrag.chunks "
                "where tenant_id = %s and document_id = any(%s) and embedding is not null",
                (self.tenant, reuse_ids),
            ):
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
        self.progress.advance(uri, failed=True)
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
        self.progress.advance(doc.source.uri, failed=True)

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
        vectors = self.r.embedder.embed(texts) if texts else None
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
        summary.chunks_embedded += len(texts)
        self.loader.put("stage", rows)

    def _do_commit(self, done: list[_Doc]) -> None:
        settings = self.r.settings
        self.loader.put(
            "commit",
            [
                (
                    d.doc_id,
                    d.source.title,
                    d.source.source_type,
                    d.source.content_sha256,
                    {**d.source.metadata, "ingest": settings},
                    d.n_chunks,
                )
                for d in done
            ],
        )
        summary = self.r.summary
        for d in done:
            self.r.in_flight.pop(d.doc_id, None)
            if d.is_new:
                summary.documents_new += 1
            else:
                summary.documents_changed += 1
            summary.chunks_written += d.n_chunks
            self.r.progress.advance(d.source.uri)


class _Progress:
    """A rich progress bar on a terminal; nothing otherwise."""

    def __init__(self, enabled: bool, total: int | None) -> None:
        self.bar: Any = None
        self.task: Any = None
        if enabled and sys.stderr.isatty():
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
            )

            self.bar = Progress(
                TextColumn("[bold]ingest"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("{task.description}", style="dim"),
                transient=True,
            )
            self.task = self.bar.add_task("", total=total)

    def __enter__(self) -> _Progress:
        if self.bar is not None:
            self.bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()

    def advance(self, uri: str, failed: bool = False) -> None:
        if self.bar is not None:
            self.bar.update(self.task, advance=1, description=uri[-60:])


# -- public entry points ------------------------------------------------------------------------


def ingest_documents(
    dsn: str,
    documents: Iterable[ExtractedDocument],
    *,
    tenant: str = DEFAULT_TENANT,
    embedder: Embedder | None = None,
    options: IngestOptions | None = None,
    progress: bool = False,
) -> IngestSummary:
    """Chunk, embed and load ``documents`` (keyed by ``uri`` within ``tenant``).

    Raises :class:`EmbeddingConfigError` (model or dimension mismatch) before writing anything,
    and :class:`EmbeddingError` when the embedding backend fails for good; per-document
    problems are reported in the summary's ``failures`` and the run goes on.
    """
    options = options or IngestOptions()
    total = len(documents) if isinstance(documents, Sequence) else None
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
    progress: bool = False,
) -> IngestSummary:
    """Ingest files, folders (walked recursively, ``glob`` to filter) and http(s) URLs."""
    sources = list(discover_paths(paths, glob))
    for p in paths:
        if not p.startswith(("http://", "https://")):
            from pathlib import Path

            if not Path(p).exists():
                raise ConfigError(f"{p}: no such file or folder")
    options = options or IngestOptions()
    run = _Run(dsn, tenant, embedder, options, progress, len(sources))
    return run.run(_open_sources(sources))
