-- pgrag BM25 backlog: chunks a bulk load wrote whose postings are not written yet.
-- Incremental migration: applied once, in one transaction, never edited after release.
--
-- A tenant's bulk load (pgrag.bulk_replace_document_chunks) used to write each batch's BM25
-- postings as it swapped the batch in. Each batch holds most of the tenant's words, so each
-- one inserted into nearly every leaf page of the tenant's part of the postings index: at 100k
-- chunks (10M postings) more than half of the load's time (benchmarks/first_load.py). The
-- bulk load now records its chunks here instead, and pgrag.finish_bulk_load writes their
-- postings, document frequencies and corpus statistics in one pass, in key order
-- (sql/idempotent/002-bm25-maintenance.sql, 060-bulk-loading.sql). A chunk listed here has no
-- postings: removing or re-indexing it removes it from here instead of from the postings.
--
-- Cost of this file: a new, empty table.

set local lock_timeout = '10s';
set local search_path = pg_catalog, pg_temp;

create table pgrag.bm25_backlog (
    tenant_id text not null,
    chunk_id bigint not null,
    primary key (tenant_id, chunk_id)
);
alter table pgrag.bm25_backlog enable row level security;
comment on table pgrag.bm25_backlog is
'Chunks a bulk load wrote (pgrag.bulk_replace_document_chunks) whose BM25 postings pgrag.finish_bulk_load has not written yet; kept by the BM25 triggers on pgrag.chunks.';
