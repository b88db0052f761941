-- pgrag vector arm reads: embeddings kept in the row, and an index of documents not ready.
-- Incremental migration: applied once, in one transaction, never edited after release.
--
-- The vector arm (pgrag.vector_candidates) computes each candidate's distance from its stored
-- embedding, and then checks that the documents it reached are ready.
--
-- 1. pgvector declares its types with EXTERNAL storage: a row longer than about 2 kB (a chunk's
--    text, its tsvector and a 384-dimension embedding together) had its embedding moved to
--    the TOAST table, so every candidate's distance cost a TOAST index probe and another page
--    (95 % of the rows of benchmarks/latency.py's 100k corpus). MAIN keeps the embedding in the
--    row and moves the text and the tsvector out instead, which searches read only for the
--    rows they return. A row that cannot fit a page even so still goes out of line. Rows
--    written from now on are stored this way; existing rows keep their layout until they are
--    rewritten (VACUUM FULL pgrag.chunks, or pg_repack: docs/scaling.md).
-- 2. The readiness check of the arm's walk asks whether any document it reached is not ready;
--    this index holds only those documents (while an ingest runs, or after one failed), so
--    the answer is a few probes of an index that is usually empty.
--
-- Cost of this file: a catalog change, and an index over the documents that are not ready.

set local lock_timeout = '10s';
set local search_path = pg_catalog, pg_temp;

alter table pgrag.chunks alter column embedding set storage main;

-- squawk-ignore require-concurrent-index-creation
create index documents_not_ready on pgrag.documents (tenant_id, id) where status <> 'ready';
comment on index pgrag.documents_not_ready is
'Documents whose status is not ready (pending, processing, error): the vector arm''s readiness check (pgrag.vector_candidates) probes it.';
