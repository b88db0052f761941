"""``pgrag import``: chunks that arrive with their embeddings, loaded without re-embedding.

:mod:`.sources` reads a source (a table of a known shape in the same database, a JSONL or a
Parquet file) into :class:`~.sources.SourceRow` values; :mod:`.mapping` checks each row and
groups rows into documents; :mod:`.run` writes them through the loader's SQL functions
(``pgrag.begin_documents``, ``pgrag.replace_document_chunks``,
``pgrag.record_embedding_model``), so an import is atomic per document and incremental exactly
like ``pgrag ingest``.
"""

from pgrag.importer.run import ImportOptions, ImportSummary, import_source

__all__ = ["ImportOptions", "ImportSummary", "import_source"]
