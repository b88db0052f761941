"""The worker threads of a run: a pipeline stage with a bounded inbox, and the embedding stage.

The main thread chunks documents into batches; the embedding stage embeds each batch (only the
chunks whose text is new) while the main thread chunks the next one, and hands it to the
loading stage (:mod:`pgrag.ingest.load`). Bounded inboxes keep at most ``QUEUE_DEPTH`` batches
between two stages. Ctrl-C cancels the stages: the local model embeds a batch in slices of
``LOCAL_EMBED_SLICE`` chunks and checks between them, so a run stops within about a second.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from pgrag import tracing
from pgrag.errors import Cancelled, PgragError
from pgrag.ingest.lifecycle import SwapRow
from pgrag.ingest.options import IngestOptions, IngestSummary
from pgrag.ingest.plan import Doc, one_line_error
from pgrag.pipeline.chunking import Chunk
from pgrag.pipeline.embedders import Embedder
from pgrag.pipeline.extract import ExtractedDocument
from pgrag.progress import Progress

QUEUE_DEPTH = 2  # batches between the embedding thread and the loading thread
LOCAL_EMBED_SLICE = 8  # chunks the local model embeds between two checks for Ctrl-C


class Worker(threading.Thread):
    """A pipeline stage: a bounded inbox, handled in order on its own thread.

    An error stops the stage's work (it keeps draining so producers never block) and is
    raised to whoever puts into it next or waits for it to finish. ``abort`` (an event set
    from outside, e.g. by a worker that is stopping) makes a producer waiting in ``put`` or
    ``finish`` raise :class:`~pgrag.errors.Cancelled` within 0.2 s.

    Tracing: the stage works in the trace context current where it was made; a message whose
    kind ``spans`` names is handled in a span of that name (``pgrag.step``: the kind).
    """

    spans: ClassVar[dict[str, str]] = {}

    def __init__(self, name: str, abort: threading.Event | None = None) -> None:
        super().__init__(name=name, daemon=True)
        self.inbox: queue.Queue[tuple[str, Any]] = queue.Queue(maxsize=QUEUE_DEPTH)
        self.error: BaseException | None = None
        self.cancelled = False
        self.abort = abort
        self.trace_context = tracing.capture()
        # Called on the stage's thread after each message it handled (e.g. to count writes).
        self.handled: Callable[[str, Any], None] | None = None

    def _check_abort(self) -> None:
        if self.abort is not None and self.abort.is_set():
            raise Cancelled("cancelled: the worker is stopping")

    def put(self, kind: str, payload: Any) -> None:
        while True:
            if self.error is not None:
                raise self.error
            self._check_abort()
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
        while self.is_alive():
            self._check_abort()
            self.join(timeout=0.2)
        self.close()
        if self.error is not None:
            raise self.error

    def close(self) -> None:
        pass

    def handle(self, kind: str, payload: Any) -> None:
        name = self.spans.get(kind)
        if name is None:
            getattr(self, f"_do_{kind}")(payload)
            return
        attributes = {"pgrag.step": kind, "pgrag.tenant": getattr(self, "tenant", None)}
        with tracing.span(name, attributes):
            getattr(self, f"_do_{kind}")(payload)

    def run(self) -> None:
        try:
            with tracing.attached(self.trace_context):
                while True:
                    kind, payload = self.inbox.get()
                    if kind == "stop" or self.cancelled:
                        return
                    self.handle(kind, payload)
                    if self.handled is not None:
                        self.handled(kind, payload)
        except BaseException as exc:
            self.error = exc
            while True:  # drain (so producers never block) until told to stop, or cancelled
                try:
                    if self.inbox.get(timeout=0.2)[0] == "stop":
                        return
                except queue.Empty:
                    if self.cancelled:
                        return


class _EmbedderFailed(Exception):
    """The embedder raised (not one of pgrag's errors) on some text of a batch."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


class EmbeddingStage(Worker):
    """Embeds batches (only chunks whose text is new) and forwards them to the loader.

    Running it beside the chunker (main thread) and the loader overlaps CPU-bound embedding
    with extraction, chunking and database work.
    """

    spans: ClassVar[dict[str, str]] = {"stage": "embed"}

    def __init__(
        self,
        loader: Worker,
        embedder: Embedder,
        options: IngestOptions,
        summary: IngestSummary,
        progress: Progress,
        stored_metadata: Callable[[ExtractedDocument], dict[str, Any]],
        abort: threading.Event | None = None,
        on_fail: Callable[[Doc, str], None] | None = None,
    ) -> None:
        super().__init__("pgrag-embedding", abort)
        self.on_fail = on_fail
        self.loader = loader
        self.embedder = embedder
        self.options = options
        self.summary = summary
        self.progress = progress
        self.stored_metadata = stored_metadata

    def _do_fail(self, payload: tuple[int, str]) -> None:
        self.loader.put("fail", payload)

    def _do_stage(self, batch: list[tuple[Doc, Chunk]]) -> None:
        """Embed a batch and hand it to the loader. An error the embedder raises on one
        document's text (not pgrag's own errors, e.g. of the backend, which stop the run)
        fails that document alone: each document of the batch is then embedded by itself to
        find which."""
        batch = [(d, c) for d, c in batch if d.failed is None]
        try:
            self._stage(batch)
        except _EmbedderFailed as failed:
            self._stage(self._without_failing(batch, failed.error))

    def _without_failing(
        self, batch: list[tuple[Doc, Chunk]], error: Exception
    ) -> list[tuple[Doc, Chunk]]:
        """``batch`` without the documents whose texts the embedder fails on alone (each
        failed through ``on_fail``); ``error`` again when none does."""
        texts: dict[int, list[str]] = {}
        docs: dict[int, Doc] = {}
        for doc, chunk in batch:
            docs[doc.doc_id] = doc
            if self.options.force or chunk.sha256 not in doc.old_shas:
                texts.setdefault(doc.doc_id, []).append(chunk.content)
        failed = False
        for doc_id, doc_texts in texts.items():
            try:
                self.embedder.embed(doc_texts)
            except PgragError:
                raise
            except Exception as exc:
                failed = True
                self._fail(docs[doc_id], one_line_error(exc))
        if not failed:
            raise error
        return [(d, c) for d, c in batch if d.failed is None]

    def _fail(self, doc: Doc, reason: str) -> None:
        doc.failed = reason
        self.loader.put("fail", (doc.doc_id, reason))
        if self.on_fail is not None:
            self.on_fail(doc, reason)

    def _stage(self, batch: list[tuple[Doc, Chunk]]) -> None:
        force = self.options.force
        need: dict[str, int] = {}  # text -> row in the embedding matrix
        texts: list[str] = []
        kinds: list[str] = []  # per chunk: embedded, repeated or reused
        for doc, chunk in batch:
            if not force and chunk.sha256 in doc.old_shas:
                kinds.append("reused")
            elif chunk.content in need:
                kinds.append("repeated")
            else:
                need[chunk.content] = len(texts)
                texts.append(chunk.content)
                kinds.append("embedded")
        before = self.embedder.tokens_used
        try:
            vectors = self._embed(texts) if texts else None
        except PgragError:
            raise
        except Exception as exc:  # on some text of the batch: find whose (_without_failing)
            raise _EmbedderFailed(exc) from exc
        tokens = self.embedder.tokens_used - before
        tracing.annotate(
            {
                "pgrag.tenant": getattr(self.loader, "tenant", None),
                "gen_ai.operation.name": "embeddings",
                "gen_ai.provider.name": self.embedder.provider,
                "gen_ai.request.model": self.embedder.model_name,
                "gen_ai.usage.input_tokens": tokens,
                "pgrag.batch.size": len(batch),
                "pgrag.embedded": len(texts),
                "pgrag.document.ids": sorted({doc.doc_id for doc, _ in batch}),
            }
        )
        rows: list[dict[str, Any]] = []  # keyed by the staging table's columns
        for (doc, chunk), kind in zip(batch, kinds, strict=True):
            if kind == "reused" or vectors is None:
                vector = None
                doc.reused += 1
            else:
                vector = vectors[need[chunk.content]]
                if kind == "embedded":
                    doc.embedded += 1
                else:
                    doc.repeated += 1
            rows.append(
                {
                    "document_id": doc.doc_id,
                    "chunk_index": chunk.index,
                    "content": chunk.content,
                    "embedding": vector,
                    "page": chunk.page,
                    "heading_path": list(chunk.heading_path),
                    "language": chunk.language,
                    "token_count": chunk.token_count,
                    "content_sha256": chunk.sha256,
                    "overlap_chars": chunk.overlap_chars,
                    "metadata": chunk.metadata,
                }
            )
        self.progress.chunks_done(len(batch) - len(texts))  # those needing no embedding
        # The chunk range of each long document in the batch: its embeddings are saved.
        saved: dict[int, list[int]] = {}
        for doc, chunk in batch:
            if doc.long:
                span = saved.setdefault(doc.doc_id, [chunk.index, chunk.index])
                span[0], span[1] = min(span[0], chunk.index), max(span[1], chunk.index)
        self.loader.put("stage", (rows, tokens, 1 if texts else 0, saved))

    def _embed(self, texts: list[str]) -> np.ndarray:
        """Embed ``texts``; the local model works in slices so Ctrl-C stops it within ~1 s."""
        embedder = self.embedder
        step = LOCAL_EMBED_SLICE if embedder.provider == "local" else max(len(texts), 1)
        parts = []
        for start in range(0, len(texts), step):
            if self.cancelled or (self.abort is not None and self.abort.is_set()):
                raise Cancelled("ingest cancelled")
            part = texts[start : start + step]
            parts.append(embedder.embed(part))
            self.progress.chunks_done(len(part))
        return np.concatenate(parts) if len(parts) > 1 else parts[0]

    def _do_commit(self, done: list[Doc]) -> None:
        rows = [
            SwapRow(
                d.doc_id,
                d.source.title,
                d.source.source_type,
                d.source.content_sha256,
                self.stored_metadata(d.source),
                d.n_chunks,
            )
            for d in done
            if d.failed is None
        ]
        done = [d for d in done if d.failed is None]
        if done:
            self.loader.put("commit", (rows, done))
