"""Planning: what a run does with each source, decided a group of sources at a time.

One query per group fetches what the database holds for its sources. A source is then

- **failed** before it had a row: it could not be opened, or it is listed twice in this run;
- **unchanged**: same content hash, same chunking settings, status ``ready`` and the same
  metadata: skipped, never chunked, and the model is never loaded for it;
- **relabelled**: unchanged but for its metadata, which is updated without re-embedding;
- **loaded**: new, changed, not ``ready`` or ``--force``. The run's lifecycle
  (:mod:`.lifecycle`) marks them: for ``pgrag ingest`` new documents become ``processing``
  (committed, so operators see the work in progress) while documents being refreshed stay
  ``ready`` with their previous chunks, so search never loses them. The hashes of the chunks
  they already hold are read, so only chunks whose text is new are embedded.

The planner reads; every write is a lifecycle function in SQL.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import psycopg

from pgrag.db import tenant_transaction
from pgrag.errors import PgragError
from pgrag.ingest.lifecycle import FailedSource, Lifecycle
from pgrag.ingest.options import IngestOptions
from pgrag.pipeline.extract import ExtractedDocument

LISTED_TWICE = "listed twice in this run"


@dataclass
class Doc:
    """A document being loaded: its source, its row, and the chunk hashes it already holds."""

    source: ExtractedDocument
    doc_id: int
    is_new: bool
    old_shas: set[str]
    n_chunks: int = 0
    # What became of its chunks (embedded + repeated + reused = n_chunks once it is staged):
    embedded: int = 0  # embedded for it
    repeated: int = 0  # the same text as an earlier chunk of its batch: embedded once, for that one
    reused: int = 0  # its stored embedding of the same text kept (unchanged chunks)
    failed: str | None = None  # why it failed in the embedding stage (its rows are dropped)
    long: bool = False  # spans several batches: its embeddings are saved as they are staged


@dataclass
class GroupPlan:
    """What to do with each source of a group (see the module docstring)."""

    failed: list[FailedSource] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)  # uris
    relabel: list[tuple[int, dict[str, Any], str]] = field(default_factory=list)  # id, meta, uri
    load: list[ExtractedDocument] = field(default_factory=list)
    stored: dict[str, tuple[Any, ...]] = field(default_factory=dict)  # uri -> stored row


def one_line_error(exc: BaseException, limit: int = 500) -> str:
    """``exc`` as a one-line reason: pgrag's own message as written; any other exception (a
    parser's ValueError, RecursionError, MemoryError...) its type and message."""
    text = " ".join(str(exc).split())
    if not isinstance(exc, PgragError):
        text = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return text[:limit]


def failure_reason(uri: str, message: str) -> str:
    """The reason part of ``uri: reason`` messages."""
    prefix = f"{uri}: "
    return message[len(prefix) :] if message.startswith(prefix) else message


class Planner:
    """Decides what a run does with each source; ``lifecycle`` writes what that means.

    ``options`` is the run's own copy: ``--switch-model`` turns its ``force`` on during set-up.
    ``seen`` holds every source uri of the run so far (a run marks them if it is aborted).
    """

    def __init__(
        self,
        conn: psycopg.Connection[Any],
        tenant: str,
        options: IngestOptions,
        settings: dict[str, Any],
        lifecycle: Lifecycle,
    ) -> None:
        self.conn = conn
        self.lifecycle = lifecycle
        self.tenant = tenant
        self.options = options
        self.settings = settings
        self.seen: set[str] = set()
        # The model whose saved embeddings (pgrag.saved_embeddings) a load may reuse; None:
        # none (the queue's worker, whose swap does not read them, or --force).
        self.saved_model: str | None = None

    def stored_metadata(self, source: ExtractedDocument) -> dict[str, Any]:
        """The metadata a document is stored with: the extractor's, ``--metadata``, settings."""
        merged = {**source.metadata, **self.options.metadata, "ingest": self.settings}
        normalised: dict[str, Any] = json.loads(json.dumps(merged, default=str))
        return normalised

    def plan(self, group: list[ExtractedDocument | FailedSource]) -> GroupPlan:
        """Sort ``group`` into failed, unchanged, relabelled and to-load sources."""
        uris = [g.uri for g in group]
        with tenant_transaction(self.conn, self.tenant):
            rows = self.conn.execute(
                "select source_uri, id, content_sha256, status, metadata "
                "from pgrag.documents where tenant_id = %s and source_uri = any(%s)",
                (self.tenant, uris),
            ).fetchall()
        plan = GroupPlan(stored={r[0]: r[1:] for r in rows})
        for item in group:
            if item.uri in self.seen:
                plan.failed.append(FailedSource(item.uri, item.source_type, LISTED_TWICE))
                continue
            self.seen.add(item.uri)
            if isinstance(item, FailedSource):
                plan.failed.append(item)
                continue
            old = plan.stored.get(item.uri)
            if (
                old is not None
                and not self.options.force
                and old[1] == item.content_sha256
                and old[2] == "ready"
                and (old[3] or {}).get("ingest") == self.settings
            ):
                metadata = self.stored_metadata(item)
                if old[3] == metadata:
                    plan.unchanged.append(item.uri)
                else:  # same content and chunking, other metadata: no need to re-embed
                    plan.relabel.append((old[0], metadata, item.uri))
                continue
            plan.load.append(item)
        return plan

    def relabel(self, relabel: list[tuple[int, dict[str, Any], str]]) -> None:
        """Store the new metadata of unchanged documents (one statement)."""
        self.lifecycle.relabel(self.conn, self.tenant, relabel)

    def start_loading(self, plan: GroupPlan) -> list[Doc]:
        """Mark the plan's documents to load (the lifecycle's ``begin``) and read the chunk
        hashes the refreshed ones already hold."""
        todo = plan.load
        ids = self.lifecycle.begin(self.conn, self.tenant, todo)
        old_shas: dict[int, set[str]] = {}
        reuse_ids = [ids[d.uri] for d in todo if d.uri in plan.stored and not self.options.force]
        if reuse_ids:
            with tenant_transaction(self.conn, self.tenant):
                # Its stored chunks' texts, and those saved while an earlier load of it was
                # under way (the swap takes their embeddings: pgrag.replace_document_chunks).
                for doc_id, sha in self.conn.execute(
                    "select distinct document_id, content_sha256 from pgrag.chunks "
                    "where tenant_id = %(t)s and document_id = any(%(ids)s) "
                    "and embedding is not null "
                    "union select document_id, content_sha256 from pgrag.saved_embeddings "
                    "where %(model)s::text is not null and tenant_id = %(t)s "
                    "and document_id = any(%(ids)s) and model = %(model)s",
                    {"t": self.tenant, "ids": reuse_ids, "model": self.saved_model},
                ).fetchall():
                    old_shas.setdefault(doc_id, set()).add(sha)
        docs = []
        for source in todo:
            doc_id = ids[source.uri]
            old = plan.stored.get(source.uri)
            is_new = old is None or old[1] is None
            docs.append(Doc(source, doc_id, is_new, old_shas.get(doc_id, set())))
        return docs

    def record_failure(self, failed: FailedSource) -> None:
        """Record a source that failed before it was loaded (the lifecycle's ``fail_sources``)."""
        self.lifecycle.fail_sources(self.conn, self.tenant, [failed])
