"""From source rows to pgrag documents: each row checked, rows grouped into documents.

A row is refused, with its reason, when a value of it cannot be stored (:mod:`.checks`): its
content is empty, not text or longer than a chunk; its embedding is missing, not a list of
numbers, holds NaN, infinity or only zeros, or has another dimension than the installation's;
its metadata is not an object or is too large; a text holds a NUL or a lone surrogate. A
refused row refuses its document (an import is atomic per document: a document is never
loaded without some of its chunks); the previous version of that document, if any, stays.

A row without a source is a document of its own, named after its id (``<source>#<id>``) or,
when it has none, after its text (``<source>#sha256:<first 16 hex digits>``, ``-2``, ``-3``
for repeats), so that adding or removing other rows of a file leaves its name unchanged (a
row refused for its content, which is then not read, after its place: ``<source>#line N``).

A document is held whole until it is written (it is loaded in one transaction), its rows read
one at a time: a source of more than ``MAX_DOCUMENT_ROWS`` rows, or whose chunks would hold
more than about ``MAX_DOCUMENT_BYTES``, is refused, its rows counted but not kept, so that no
source, however it is made, costs the import more memory than that (and a batch of documents
waiting to be written, ``run.BATCH_BYTES``). A document's metadata is the keys all its chunks
share; when those outgrow a document's bound, it keeps only where it was imported from.

A document's ``content_sha256`` hashes its chunks in order (text, page, embedding and
metadata), so a re-import skips it exactly when nothing of it changed, as ``pgrag ingest`` skips
an unchanged file.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pgrag.importer.checks import content_problem, embedding_vector, metadata_size_problem
from pgrag.importer.sources import Source, SourceRow

TITLE_CHARS = 120
# One document at most: its chunks are held until it is written, about 3.5 KB each with 384
# dimensions and little metadata.
MAX_DOCUMENT_ROWS = 100_000
MAX_DOCUMENT_BYTES = 256 * 2**20  # what its chunks hold in memory, as ImportChunk.held counts
METADATA_IN_MEMORY = 30  # a metadata object of small values takes 20 to 30 times its JSON
MAX_URI_CHARS = 2048  # pgrag.documents.source_uri's bound (sql/idempotent/011-document-writes.sql)


@dataclass
class ImportChunk:
    content: str
    embedding: np.ndarray
    page: int | None
    metadata: dict[str, Any]
    held: int = 0  # about the bytes it holds in memory

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.content.encode("utf-8")).hexdigest()


@dataclass
class ImportDoc:
    """One pgrag document made of source rows (``refused``: rows that refuse it)."""

    uri: str
    title: str
    metadata: dict[str, Any]
    chunks: list[ImportChunk] = field(default_factory=list)
    refused: list[tuple[str, str]] = field(default_factory=list)  # (row id, reason)
    unknown: bool = False  # a row read without telling its document (e.g. a line not JSON)
    rows_read: int = 0  # its rows in the source, kept or not

    @property
    def content_sha256(self) -> str:
        digest = hashlib.sha256()
        for chunk in self.chunks:
            digest.update(chunk.sha256.encode())
            digest.update(str(chunk.page).encode())
            digest.update(chunk.embedding.astype("<f4").tobytes())
            digest.update(json.dumps(chunk.metadata, sort_keys=True, default=str).encode())
        return digest.hexdigest()


def check_row(row: SourceRow, dims: int) -> tuple[ImportChunk | None, str | None, int | None]:
    """The row as a chunk, or why it is refused; and its embedding's dimension when it has one."""
    problem = row.problem or content_problem(row.content)
    if problem is not None:
        return None, problem, None
    metadata_bytes, problem = metadata_size_problem(row.metadata)
    if problem is not None:
        return None, problem, None
    vector, problem = embedding_vector(row.embedding)
    if vector is None:
        return None, problem, None
    if vector.size != dims:
        return (
            None,
            f"embedding has {vector.size} dimensions, the installation holds {dims}",
            int(vector.size),
        )
    held = 200 + sys.getsizeof(row.content) + vector.nbytes + METADATA_IN_MEMORY * metadata_bytes
    return ImportChunk(row.content, vector, row.page, row.metadata, held), None, dims


def _common_metadata(chunks: list[ImportChunk]) -> dict[str, Any]:
    """The metadata keys every chunk of a document shares with one value."""
    if not chunks:
        return {}
    first = chunks[0].metadata
    return {k: v for k, v in first.items() if all(c.metadata.get(k) == v for c in chunks[1:])}


def _title(row: SourceRow, uri: str, grouped: bool) -> str:
    if row.title:
        return row.title[:TITLE_CHARS]
    if grouped:
        return uri.rstrip("/").rsplit("/", 1)[-1][:TITLE_CHARS] or uri[:TITLE_CHARS]
    text = row.content if isinstance(row.content, str) else ""
    line = text.strip().split("\n", 1)[0]
    return line[:TITLE_CHARS] or uri[:TITLE_CHARS]


def storable_source(uri: str) -> bool:
    """Whether ``uri`` fits pgrag.documents.source_uri (``MAX_URI_CHARS`` characters and bytes)."""
    return len(uri) <= MAX_URI_CHARS and len(uri.encode("utf-8", "replace")) <= MAX_URI_CHARS


def _group_key(row: SourceRow) -> object:
    """Consecutive rows of one source are one document; a row without a source is one alone."""
    return row.source if row.source is not None else object()


@dataclass
class DimensionTally:
    """The embedding dimensions seen, to tell a wrong source from a few wrong rows."""

    right: int = 0
    wrong: dict[int, int] = field(default_factory=dict)


class LoneRowNames:
    """Names of the documents of rows without a source: by id, else by text (see above)."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.seen: dict[str, int] = {}

    def name(self, row: SourceRow) -> tuple[str, bool]:
        """The row's document name, and whether it is known (else the row is named after its
        place, its content unread: it could belong to any document)."""
        if row.row_id:
            return f"{self.prefix}#{row.row_id}", True
        if not isinstance(row.content, str):
            return f"{self.prefix}#{row.position}", False
        key = hashlib.sha256(row.content.encode("utf-8", "surrogatepass")).hexdigest()[:16]
        self.seen[key] = self.seen.get(key, 0) + 1
        repeat = self.seen[key]
        return f"{self.prefix}#sha256:{key}" + (f"-{repeat}" if repeat > 1 else ""), True


def documents(
    source: Source, dims: int, import_meta: dict[str, Any], tally: DimensionTally
) -> Iterator[ImportDoc]:
    """The source's documents, in source order; ``tally`` counts the dimensions seen."""
    lone = LoneRowNames(source.uri_prefix)
    for _, rows in itertools.groupby(source.rows, key=_group_key):
        yield _document(rows, lone, dims, import_meta, tally)


def _document(
    rows: Iterator[SourceRow],
    lone: LoneRowNames,
    dims: int,
    import_meta: dict[str, Any],
    tally: DimensionTally,
) -> ImportDoc:
    """The document of ``rows`` (one source's, or one row without a source), read one at a
    time."""
    first = next(rows)
    uri, known = (first.source, True) if first.source is not None else lone.name(first)
    doc = ImportDoc(uri, _title(first, uri, first.source is not None), {}, unknown=not known)
    if not storable_source(uri):
        why = f"source longer than {MAX_URI_CHARS} characters or {MAX_URI_CHARS} bytes"
        doc.refused.append((first.position, why))
    _read_rows(doc, itertools.chain((first,), rows), dims, tally)
    shared = {k: v for k, v in _common_metadata(doc.chunks).items() if k != "source_id"}
    doc.metadata = {**shared, "import": import_meta}
    # Shared keys within a chunk's bound may, with the import's, outgrow a document's: then
    # the document keeps only the import's, and its chunks their own.
    if metadata_size_problem(doc.metadata)[1] is not None:
        doc.metadata = {"import": import_meta}
    return doc


def _read_rows(doc: ImportDoc, rows: Iterable[SourceRow], dims: int, tally: DimensionTally) -> None:
    """Check ``rows`` (all of one document) into ``doc``'s chunks or refusals; when they are
    more than ``MAX_DOCUMENT_ROWS`` or their chunks hold more than ``MAX_DOCUMENT_BYTES``, the
    document is refused for it and the rest are only counted."""
    held, too_big = 0, ""
    for row in rows:
        doc.rows_read += 1
        if too_big:  # refused for its size: counted, not kept
            continue
        chunk, reason, seen = check_row(row, dims)
        if seen == dims:
            tally.right += 1
        elif seen is not None and reason is not None and "dimensions" in reason:
            tally.wrong[seen] = tally.wrong.get(seen, 0) + 1
        if chunk is None:
            doc.refused.append((row.position, reason or "refused"))
        else:
            if row.row_id:
                chunk.metadata = {**chunk.metadata, "source_id": row.row_id}
            doc.chunks.append(chunk)
            held += chunk.held
        if doc.rows_read > MAX_DOCUMENT_ROWS:
            too_big = f"more than {MAX_DOCUMENT_ROWS:,}"
        elif held > MAX_DOCUMENT_BYTES:
            too_big = f"whose chunks hold more than about {MAX_DOCUMENT_BYTES / 2**20:g} MB"
        if too_big:
            doc.chunks, doc.refused = [], []
    if too_big:
        doc.refused = [
            (
                "",
                f"{doc.rows_read:,} rows under one source, {too_big}: a document is loaded "
                "whole, in one transaction; give its parts sources of their own",
            )
        ]
