"""Running an import: check the installation, plan each document, write through the loader.

Checks first, before any row is written: the text-search language
(``pgrag.text_search_config``), the model (``pgrag.record_embedding_model`` in a transaction
that is rolled back: it refuses a model other than the recorded one, PR002) and, as rows are
read, the dimension (``pgrag.embedding_config.dims``; a source none of whose embeddings has it
stops the run with one line naming both).

Then, a batch of documents at a time, as ``pgrag ingest`` does (:mod:`pgrag.ingest.plan`):
a document whose ``content_sha256`` and status (ready) are those stored is **unchanged**
(skipped) or, if only its metadata differs, **relabelled** (``pgrag.relabel_documents``);
any other is loaded: ``pgrag.begin_documents``, its chunks COPYed into the session's staging
table (``pgrag.create_stage``) and ``pgrag.replace_document_chunks`` swaps them in, all in one
transaction per batch, so each document is replaced whole or not at all; the BM25 triggers
keep the keyword index. The first swap records the model (``pgrag.record_embedding_model``).

A tenant's first import by the owner of ``pgrag.chunks`` takes the bulk path, as a first
ingest does (``pgrag.bulk_load_applies``, the swap of
:func:`pgrag.ingest.load.swap_documents`): its chunks stay out of the shared HNSW graph and of
the BM25 index until the end, when ``pgrag.finish_bulk_load`` writes their postings in one
pass and builds the tenant's own graph (docs/ingest.md, "Large first loads"). At the end a
tenant that outgrew the exact vector path gets its own graph, as after an ingest
(:func:`pgrag.ingest.load.isolate_large_tenant`, which also finishes a bulk load an earlier,
interrupted run left).

A batch the database refuses for what a document holds (a data exception, an integrity or a
program-limit error: SQLSTATE classes 22, 23, 54) is written again one document at a time, and
the document it refuses is refused alone with the database's reason; any other error stops the
run, and, as after Ctrl-C, the keyword index of what a bulk import committed is written first.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import psycopg

from pgrag.db import connect, tenant_transaction
from pgrag.errors import ConfigError, EmbeddingConfigError, Interrupted, NothingToDo, PgragError
from pgrag.importer.mapping import DimensionTally, ImportDoc, documents, storable_source
from pgrag.importer.sources import Source
from pgrag.ingest.lifecycle import IngestLifecycle, SwapRow, call, record_embedding_model
from pgrag.ingest.load import (
    bulk_load_applies,
    create_stage_table,
    index_bulk_backlog,
    isolate_large_tenant,
    stage_copy_sql,
    swap_documents,
)
from pgrag.pipeline.chunking import token_counter
from pgrag.pipeline.embedders import (
    LOCAL_MODEL_ALIASES,
    LOCAL_MODEL_NAME,
    get_embedder,
    provider_for_model,
    read_embedding_config,
)
from pgrag.progress import Progress, ProgressMode

BATCH_DOCUMENTS = 200
# Refusals (of a row, or of a whole document) listed one by one in the summary and on stderr;
# the others are counted: a source of millions of bad rows costs neither memory nor a screen
# per row.
REFUSALS_LISTED = 100
BATCH_CHUNKS = 2000
BATCH_BYTES = 64 * 2**20  # what a batch's chunks hold in memory at most, about (ImportChunk.held)
SOURCE_TYPE = "text"
TokenCounter = Callable[[Sequence[str]], list[int]]
# SQLSTATE classes of a statement refused for the values it wrote: data exception, integrity
# constraint violation, program limit exceeded (e.g. an index row too large).
REFUSED_FOR_DATA = ("22", "23", "54")
# An example of --model for the dimensions an installation holds (the most used model of each).
MODEL_EXAMPLES = {
    384: LOCAL_MODEL_NAME,
    1536: "text-embedding-3-small",
    3072: "text-embedding-3-large",
}


@dataclass
class ImportOptions:
    tenant: str
    model: str | None = None
    provider: str | None = None
    language: str = "english"
    dry_run: bool = False
    progress: ProgressMode = "off"
    prune: bool = False  # also remove the documents this source no longer has


@dataclass
class ImportSummary:
    source: str
    shape: str
    model: str = ""
    dry_run: bool = False
    documents_new: int = 0
    documents_changed: int = 0
    documents_unchanged: int = 0
    documents_relabelled: int = 0
    documents_refused: int = 0
    documents_removed: int = 0
    prune_skipped: str | None = None  # why --prune removed nothing
    chunks_imported: int = 0
    rows_read: int = 0
    refused: list[dict[str, str]] = field(default_factory=list)  # row, document, reason
    refusals_not_listed: int = 0  # refusals beyond the first REFUSALS_LISTED
    unmapped_columns: list[str] = field(default_factory=list)
    ignored_columns: dict[str, str] = field(default_factory=dict)
    token_counts: str = "tokenizer"
    tenant_isolated: bool = False
    bulk_load: bool = False
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def estimate_tokens(texts: Sequence[str]) -> list[int]:
    """Documented estimate when the model's tokenizer is not at hand: 4 characters a token."""
    return [max(1, len(t) // 4) for t in texts]


def choose_counter(provider: str, model: str, dims: int) -> tuple[TokenCounter, str]:
    """The model's own token counter as ``pgrag ingest`` uses it (the bundled tokenizer for
    the local model, tiktoken for OpenAI's), else :func:`estimate_tokens`."""
    try:
        counter = token_counter(get_embedder(provider, model, dims))
        counter(["probe"])
    except Exception:  # any model pgrag cannot count tokens for: the estimate
        return estimate_tokens, "estimate (characters / 4)"
    return counter, "the model's tokenizer" if provider == "local" else "cl100k_base (OpenAI)"


def missing_model(dims: int) -> str:
    """The message of an installation without a model when none is named."""
    example = MODEL_EXAMPLES.get(dims)
    hint = f" (e.g. --model {example}, if it made these {dims}-dimension ones)" if example else ""
    return (
        "this installation has no embedding model recorded yet: name the model that made "
        f"these embeddings with --model NAME{hint}."
    )


def refused_for_data(exc: BaseException) -> str | None:
    """The database's reason when ``exc`` is a statement refused for the values it wrote
    (``REFUSED_FOR_DATA``; also when pgrag's SQLSTATE table made it a pgrag error), else None."""
    cause = exc if isinstance(exc, psycopg.Error) else exc.__cause__
    if not isinstance(cause, psycopg.Error) or (cause.sqlstate or "")[:2] not in REFUSED_FOR_DATA:
        return None
    return " ".join((cause.diag.message_primary or str(cause)).split())[:300]


def check_model(conn: psycopg.Connection[Any], provider: str, model: str) -> None:
    """``pgrag.record_embedding_model`` in a transaction rolled back: PR002 if mixing models."""
    try:
        with conn.transaction(force_rollback=True):
            conn.execute("select pgrag.record_embedding_model(%s, %s)", (provider, model))
    except psycopg.Error as exc:
        if exc.sqlstate != "PR002":
            raise
        raise EmbeddingConfigError(
            f"{exc.diag.message_primary}: import embeddings made by the recorded model, or "
            "switch models first (pgrag ingest --switch-model)."
        ) from exc


def check_language(conn: psycopg.Connection[Any], language: str) -> None:
    try:
        row = conn.execute(
            "select pgrag.text_search_config_allowed(pgrag.text_search_config('--language', %s))",
            (language,),
        ).fetchone()
    except psycopg.Error as exc:
        raise ConfigError(" ".join((exc.diag.message_primary or str(exc)).split())) from exc
    if not (row and row[0]):
        raise ConfigError(f"text-search language {language!r} is not allowed for stored chunks.")


class Importer:
    """One import run: ``conn`` plans and writes (autocommit; one transaction per batch)."""

    def __init__(self, dsn: str, source: Source, options: ImportOptions) -> None:
        self.dsn = dsn
        self.options = options
        self.source = source
        self.conn = connect(dsn, autocommit=True)
        self.dims, recorded, recorded_provider = read_embedding_config(self.conn)
        model = options.model or source.model or recorded
        if model is None:
            raise ConfigError(missing_model(self.dims))
        self.model = LOCAL_MODEL_NAME if model in LOCAL_MODEL_ALIASES else model
        same = self.model == recorded and recorded_provider is not None
        self.provider: str = options.provider or (
            recorded_provider if same and recorded_provider else provider_for_model(self.model)
        )
        check_language(self.conn, options.language)
        check_model(self.conn, self.provider, self.model)
        self.counter, how = choose_counter(self.provider, self.model, self.dims)
        self.summary = ImportSummary(
            source.label,
            source.shape,
            model=self.model,
            dry_run=options.dry_run,
            unmapped_columns=list(source.unmapped),
            ignored_columns=dict(source.ignored),
            token_counts=how,
        )
        self.lifecycle = IngestLifecycle()
        self.stage: list[tuple[str, int]] = []
        self.model_recorded = False
        self.seen: set[str] = set()
        self.unknown = 0  # rows refused before their document was known
        self.unknown_first: list[str] = []  # the first three of them (where they are)
        self.bulk: bool | None = None  # decided before the first swap (pgrag.bulk_load_applies)

    def close(self) -> None:
        self.conn.close()

    def run(self) -> ImportSummary:
        try:
            return self._run()
        except Exception:
            self._searchable()  # whatever stopped the run, what it committed stays searchable
            raise
        except KeyboardInterrupt as exc:
            done = self.summary.documents_new + self.summary.documents_changed
            raise Interrupted(
                f"import interrupted: documents committed so far are kept (about {done}), "
                f"{self._searchable()}; the batch under way was rolled back whole. Run the same "
                "command again: unchanged documents are skipped, and it finishes the rest."
            ) from exc

    def _searchable(self) -> str:
        """After an interrupted bulk import, what searches find of the documents kept: their
        keyword index is written now (``pgrag.index_bulk_load_backlog``, as ``pgrag ingest``
        does); the tenant's graph waits for the next run (vector search scans them exactly)."""
        if not self.bulk or not self.model_recorded:
            return "all searchable"
        try:
            index_bulk_backlog(self.dsn, self.options.tenant)
        except (KeyboardInterrupt, psycopg.Error, PgragError):
            return (
                "searchable by vector search but not yet by keyword search: the next import "
                f"(or select pgrag.finish_bulk_load('{self.options.tenant}')) indexes them"
            )
        return "all searchable"

    def _run(self) -> ImportSummary:
        started = time.monotonic()
        tally = DimensionTally()
        meta = {"from": self.source.label}
        batch: list[ImportDoc] = []
        rows = held = 0  # of the batch
        with Progress(
            "import", None, self.options.progress, chunks_done_as="rows read", writes_trail=False
        ) as progress:
            progress.expect_chunks(self.source.rows_total, self.source.rows_estimated)
            for doc in documents(self.source, self.dims, meta, tally):
                self.summary.rows_read += doc.rows_read
                batch.append(doc)
                # rows read, not chunks: refused documents hold their reasons until reported
                rows += doc.rows_read
                held += sum(c.held for c in doc.chunks)
                if len(batch) >= BATCH_DOCUMENTS or rows >= BATCH_CHUNKS or held >= BATCH_BYTES:
                    self._batch(batch, progress)
                    batch, rows, held = [], 0, 0
            if batch:
                self._batch(batch, progress)
        if not tally.right and tally.wrong:  # then nothing was written: every row refused
            seen = max(tally.wrong, key=lambda d: tally.wrong[d])
            raise EmbeddingConfigError(
                f"{self.source.label} holds {seen}-dimension embeddings, this installation "
                f"{self.dims} (pgrag.embedding_config): import into a database installed "
                f"with pgrag migrate --dims {seen}."
            )
        if self.options.prune:  # as ingest --prune: also when the source has no rows left
            self._prune(meta["from"])
        if self.summary.rows_read == 0 and not self.summary.documents_removed:
            raise NothingToDo(f"{self.source.label} holds no rows: nothing imported.")
        # As after an ingest, also when nothing changed: it finishes a bulk load an interrupted
        # run left (its keyword index, its graph), a no-op otherwise.
        if not self.options.dry_run:
            self.summary.tenant_isolated = isolate_large_tenant(self.dsn, self.options.tenant)
        self.summary.seconds = round(time.monotonic() - started, 3)
        return self.summary

    def _prune(self, label: str) -> None:
        """Remove (with ``dry_run`` count) the tenant's documents imported from this source
        (``metadata.import.from``) that this run did not read, in one transaction. A document
        the run read but refused is kept, as its previous version is."""
        from pgrag.documents import delete_documents

        if self.unknown:  # a row of any document may be among them: removing none is safe
            shown = ", ".join(self.unknown_first) + (", ..." if self.unknown > 3 else "")
            self.summary.prune_skipped = (
                f"{self.unknown} rows could not be read far enough to tell their document "
                f"({shown}): nothing removed; fix them and run again"
            )
            return
        tenant = self.options.tenant
        with tenant_transaction(self.conn, tenant):
            rows = self.conn.execute(
                "select id, source_uri from pgrag.documents where tenant_id = %s "
                "and metadata -> 'import' ->> 'from' = %s",
                (tenant, label),
            ).fetchall()
        gone = sorted(int(i) for i, uri in rows if uri not in self.seen)
        if gone:
            removed = delete_documents(
                self.conn, tenant, document_ids=gone, dry_run=self.options.dry_run
            )
            self.summary.documents_removed = len(removed)

    # -- one batch of documents ---------------------------------------------------------------

    def _refuse(self, doc: ImportDoc, row: str, reason: str) -> None:
        """Report a refusal of a row (``row`` empty: of the whole document): listed while fewer
        than ``REFUSALS_LISTED`` are, counted after."""
        if len(self.summary.refused) >= REFUSALS_LISTED:
            self.summary.refusals_not_listed += 1
            return
        name = doc.uri if len(doc.uri) <= 200 else f"{doc.uri[:200]}..."  # one line, not 8 KB
        self.summary.refused.append({"row": row, "document": name, "reason": reason})

    def _batch(self, batch: list[ImportDoc], progress: Progress) -> None:
        """Write one batch of documents: refused ones reported, unchanged ones skipped,
        relabelled ones relabelled, the rest loaded (one transaction; see :meth:`_write`)."""
        load, changed, relabel = self._plan(self._ready(batch))
        if self.options.dry_run:
            if load and self.bulk is None:
                self.bulk = self.summary.bulk_load = bulk_load_applies(
                    self.conn, self.options.tenant
                )
        else:
            if relabel:
                self.lifecycle.relabel(self.conn, self.options.tenant, relabel)
            load = self._write(load) if load else []
            progress.chunks_written(sum(len(d.chunks) for d in load))
        for doc in load:
            if doc.uri in changed:
                self.summary.documents_changed += 1
            else:
                self.summary.documents_new += 1
            self.summary.chunks_imported += len(doc.chunks)
        progress.chunks_done(sum(d.rows_read for d in batch))
        progress.advance(len(batch), batch[-1].uri[-60:])

    def _ready(self, batch: list[ImportDoc]) -> list[ImportDoc]:
        """The batch's documents none of whose rows was refused, each source once; the others
        reported as refused."""
        ready: list[ImportDoc] = []
        for doc in batch:
            if doc.refused:
                for row, reason in doc.refused:
                    self._refuse(doc, row, reason)
                self.summary.documents_refused += 1
                if doc.unknown:  # named after its place: no source to remember
                    self.unknown += 1
                    if len(self.unknown_first) < 3:
                        self.unknown_first.append(doc.refused[0][0])
                    continue
            elif doc.uri in self.seen:
                self._refuse(doc, "", "its source is listed twice in this import")
                self.summary.documents_refused += 1
            else:
                ready.append(doc)
            if storable_source(doc.uri):  # another is in no database: nothing to prune
                self.seen.add(doc.uri)
        return ready

    def _plan(
        self, ready: list[ImportDoc]
    ) -> tuple[list[ImportDoc], set[str], list[tuple[int, dict[str, Any], str]]]:
        """What to do with each document against the stored one of its source: the documents to
        load, the sources of those that replace one, and (id, metadata, source) to relabel; the
        unchanged and relabelled ones counted."""
        with tenant_transaction(self.conn, self.options.tenant):
            stored = {
                str(r[0]): r[1:]
                for r in self.conn.execute(
                    "select source_uri, id, content_sha256, status, metadata "
                    "from pgrag.documents where tenant_id = %s and source_uri = any(%s)",
                    (self.options.tenant, [d.uri for d in ready]),
                ).fetchall()
            }
        load: list[ImportDoc] = []
        changed: set[str] = set()
        relabel: list[tuple[int, dict[str, Any], str]] = []
        for doc in ready:
            old = stored.get(doc.uri)
            if old is not None and old[1] == doc.content_sha256 and old[2] == "ready":
                if old[3] == doc.metadata:
                    self.summary.documents_unchanged += 1
                else:
                    relabel.append((int(old[0]), doc.metadata, doc.uri))
                    self.summary.documents_relabelled += 1
                continue
            load.append(doc)
            if old is not None and old[1] is not None:
                changed.add(doc.uri)
        return load, changed, relabel

    def _write(self, docs: list[ImportDoc]) -> list[ImportDoc]:
        """Load ``docs`` in one transaction; if the database refuses it for what a document
        holds, each document in a transaction of its own, refusing those it refuses alone.
        The documents written."""
        try:
            self._load(docs)
            return docs
        except (PgragError, psycopg.Error) as exc:
            reason = refused_for_data(exc)
            if reason is None:
                raise
            if len(docs) == 1:
                self._refuse(docs[0], "", f"the database refused it: {reason}")
                self.summary.documents_refused += 1
                return []
        return [doc for one in docs for doc in self._write([one])]

    def _load(self, docs: list[ImportDoc]) -> None:
        tenant = self.options.tenant
        if not self.stage:
            self.stage = create_stage_table(self.conn)
        if self.bulk is None:
            self.bulk = self.summary.bulk_load = bulk_load_applies(self.conn, tenant)
        names = [name for name, _ in self.stage]
        with tenant_transaction(self.conn, tenant):
            begun = call(
                self.conn,
                "select source_uri, document_id from pgrag.begin_documents(%s, %s, %s)",
                ([d.uri for d in docs], [d.title for d in docs], [SOURCE_TYPE] * len(docs)),
            )
            ids = {str(u): int(i) for u, i in begun}
            with self.conn.cursor() as cur, cur.copy(stage_copy_sql(self.stage)) as copy:
                copy.set_types([oid for _, oid in self.stage])
                for doc in docs:
                    counts = self.counter([c.content for c in doc.chunks])
                    for index, (chunk, tokens) in enumerate(zip(doc.chunks, counts, strict=True)):
                        row = {
                            "document_id": ids[doc.uri],
                            "chunk_index": index,
                            "content": chunk.content,
                            "embedding": chunk.embedding,
                            "page": chunk.page,
                            "heading_path": [],
                            "language": self.options.language,
                            "token_count": int(tokens),
                            "content_sha256": chunk.sha256,
                            "overlap_chars": 0,
                            "metadata": chunk.metadata,
                        }
                        copy.write_row([row[name] for name in names])
            rows = [
                SwapRow(
                    ids[d.uri], d.title, SOURCE_TYPE, d.content_sha256, d.metadata, len(d.chunks)
                )
                for d in docs
            ]
            swap_documents(self.conn, tenant, rows, self.model, self.lifecycle, self.bulk)
            if not self.model_recorded:
                record_embedding_model(self.conn, self.provider, self.model)
        self.model_recorded = True  # committed


def import_source(dsn: str, source: Source, options: ImportOptions) -> ImportSummary:
    """Import ``source`` into the database at ``dsn`` (see the module docstring)."""
    try:
        importer = Importer(dsn, source, options)
        try:
            return importer.run()
        finally:
            importer.close()
    finally:
        source.close()
