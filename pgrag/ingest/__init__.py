"""Ingestion: documents in, chunks with embeddings out, incrementally, atomically, with COPY.

How a run works (one main thread, an embedding thread, a loading thread, two connections):

1. ``plan``: documents are read in groups. One query per group fetches what the database holds
   for them; a document whose content hash and chunking settings are unchanged (and status
   ``ready``) is skipped: it is never chunked, and the model is never loaded for it. New
   documents are inserted as ``processing`` (committed, so operators see the work in progress);
   documents being refreshed stay ``ready`` with their previous chunks, so search never loses
   them.
2. ``run``: the documents to load are chunked as a stream (main thread), in batches.
3. ``workers``: the embedding stage embeds each batch, only chunks whose sha256 is not already
   stored for the same document (the others are staged without an embedding and take the
   stored one at commit; ``--force`` embeds everything), while the main thread chunks the next.
4. ``load``: the loading stage COPYs each batch (binary, pgvector's binary format) into a
   session-local staging table. When a document's last chunk is staged, one transaction
   replaces its chunks, sets it ``ready`` and clears its staging rows; several small documents
   share one such transaction. Readers never see half a document.

Every state change of a document is a SQL function, called through the run's lifecycle
(``lifecycle``: ``pgrag.begin_documents``, ``pgrag.replace_document_chunks``, ...; the document
queue's worker, :mod:`pgrag.worker`, runs the same pipeline with the queue's functions).
``sources`` opens files, folders and URLs for a run (``ingest_paths``); ``options`` holds what
a caller chooses and gets back. Progress (:mod:`pgrag.progress`) counts documents as their swap
commits and chunks embedded of chunks planned. Ctrl-C sets the run's cancel event, checked
between chunks and between the slices the local model embeds, so a run stops within about a
second, never half way through a commit, and raises :class:`~pgrag.errors.Interrupted`,
saying what was kept (an interrupted first load writes its keyword index first).

A run killed at any point leaves committed documents whole, new in-flight ones ``processing``
with no chunks and refreshed ones ``ready`` with their previous chunks; their stored hash is
the previous one (or none), so the next run picks them up again. Staged rows live in a
temporary table that dies with the connection; the embeddings of a document spanning several
batches are also saved with each batch (``pgrag.save_embeddings``), so the next run reuses them
rather than embedding the document again from its start.
"""

from pgrag.ingest.load import create_stage_table, isolate_large_tenant
from pgrag.ingest.options import IngestOptions, IngestSummary
from pgrag.ingest.run import ingest_documents
from pgrag.ingest.sources import ingest_paths
from pgrag.pipeline.extract import Block, ExtractedDocument

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
