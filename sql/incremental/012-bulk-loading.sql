-- pgrag bulk loading: chunks a bulk load writes stay out of the shared HNSW graph.
-- Incremental migration: applied once, in one transaction, never edited after release.
--
-- Every chunk with an embedding used to enter the shared HNSW graph (chunks_embedding_hnsw) as
-- it was inserted: at 10,000 rows about two thirds of the cost of loading a tenant, and more as
-- the graph grows (benchmarks/first_load.py). A tenant's large first load does not need it: it
-- ends with a graph of the tenant's own (pgrag.isolate_tenant), built once over all its rows,
-- which is how that tenant's vector search then runs anyway. So a chunk now says whether it is
-- in the shared graph, and the shared index holds only those that are:
--
--   * chunks.in_shared_graph, true unless the owner's bulk load wrote the row
--     (pgrag.bulk_replace_document_chunks; kept by a trigger, sql/idempotent/060-bulk-loading.sql:
--     a value another role writes is replaced by true);
--   * chunks_embedding_hnsw is rebuilt with the predicate `embedding is not null and
--     in_shared_graph` (every existing row is in it: same graph as before);
--   * chunks_outside_shared_graph, a btree of the tenants of the other rows, lets the vector
--     arm find in one probe that a tenant has rows outside the shared graph (then it walks the
--     tenant's own graph, or scans its rows exactly until that graph exists).
--
-- Cost of this file: the shared HNSW index is built again from every chunk (about as long as
-- the first build; writes to pgrag.chunks wait meanwhile, searches keep using the old index
-- until the transaction commits). docs/install.md: stop ingests while upgrading.

set local lock_timeout = '10s';
set local search_path = pg_catalog, pg_temp;

-- A constant default: no table rewrite.
alter table pgrag.chunks add column in_shared_graph boolean not null default true;
comment on column pgrag.chunks.in_shared_graph is
'True when the chunk is in the shared HNSW graph (chunks_embedding_hnsw); false for rows a bulk load of its tenant wrote (pgrag.bulk_replace_document_chunks), which its own graph holds (pgrag.finish_bulk_load). Kept by a trigger: a value a client writes is replaced.';

-- The shared graph, now of the rows in it (all of them at this point).
-- squawk-ignore require-concurrent-index-creation
create index chunks_embedding_hnsw_shared on pgrag.chunks
    using hnsw (embedding @extschema:vector@.vector_cosine_ops)
    where embedding is not null and in_shared_graph;
-- In the migration's transaction (no CONCURRENTLY there): writes already wait for the build
-- above; the drop's lock lasts until commit, a moment after it.
-- squawk-ignore require-concurrent-index-deletion
drop index pgrag.chunks_embedding_hnsw;
-- The shared graph keeps its name (pgrag.vector_candidates, the re-embed switch and the
-- benchmarks name it); no client sees the temporary one.
-- squawk-ignore renaming-object
alter index pgrag.chunks_embedding_hnsw_shared rename to chunks_embedding_hnsw;

-- The tenants of rows outside the shared graph (none yet).
-- squawk-ignore require-concurrent-index-creation
create index chunks_outside_shared_graph on pgrag.chunks (tenant_id) where not in_shared_graph;
