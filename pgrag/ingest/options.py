"""What a caller of the ingester chooses (:class:`IngestOptions`) and gets back
(:class:`IngestSummary`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


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
    breakpoint: str | None = None  # semantic chunker: pN or a distance (semantic_chunking)
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
    bulk_load: bool = False
    # Every chunk written is one of: embedded (its text embedded for it), repeated (the same
    # text as an earlier chunk of its batch, embedded once for both) or reused (the stored
    # embedding of the same text in the same document kept): written = embedded + repeated +
    # reused. Chunks of documents that failed or were rolled back are in none of them.
    chunks_written: int = 0
    chunks_embedded: int = 0
    chunks_reused: int = 0
    chunks_repeated: int = 0
    seconds: float = 0.0
    failures: list[tuple[str, str]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["seconds"] = round(self.seconds, 3)
        data["failures"] = [{"uri": u, "reason": r} for u, r in self.failures]
        return data
