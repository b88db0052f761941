"""Ingestion: documents in, chunks with embeddings out (``pgrag ingest``)."""

from pgrag.ingest.run import (
    Block,
    ExtractedDocument,
    IngestOptions,
    IngestSummary,
    create_stage_table,
    ingest_documents,
    ingest_paths,
    isolate_large_tenant,
)

__all__ = [
    "Block",
    "ExtractedDocument",
    "IngestOptions",
    "IngestSummary",
    "create_stage_table",
    "ingest_documents",
    "ingest_paths",
    "isolate_large_tenant",
]
