-- pgrag model switch without downtime: new embeddings computed beside the old ones.
-- Incremental migration: applied once, in one transaction, never edited after release.
--
-- A re-embed (pgrag.reembed_start, sql/idempotent/030-reembed.sql) records its target model and
-- dimension in pgrag.reembeds and adds the column pgrag.chunks.embedding_next of that dimension
-- (metadata only, no rewrite). Workers (pgrag reembed, later pgrag worker) claim the chunks
-- waiting in pgrag.chunk_embeddings_next with FOR UPDATE SKIP LOCKED, embed them with the new
-- model and store the vectors there, while every search keeps reading chunks.embedding. The
-- switch (pgrag.reembed_switch) copies them into chunks.embedding_next in one transaction that
-- blocks writers only, builds the HNSW graphs on it, then swaps the columns and records the
-- model, dimension and provider in pgrag.embedding_config; the side table is emptied.

set local lock_timeout = '10s';
set local search_path = pg_catalog, pg_temp;

-- Global, like pgrag.embedding_config: one re-embed of every tenant's chunks at a time.
create table pgrag.reembeds (
    id bigint generated always as identity primary key,
    model text not null check (model operator(pg_catalog.~) '[^[:space:]]'),
    provider text not null check (provider operator(pg_catalog.~) '[^[:space:]]'),
    dims integer not null check (dims between 1 and 2000),
    from_model text,
    from_provider text,
    from_dims integer not null,
    status text not null default 'running' check (status in ('running', 'switched', 'cancelled')),
    chunk_count bigint,
    started_at timestamptz not null default now(),
    finished_at timestamptz
);
alter table pgrag.reembeds enable row level security;
comment on table pgrag.reembeds is
'Model switches (pgrag reembed): the target model, provider and dimension, the model they replace, and how each ended. At most one is running.';
comment on column pgrag.reembeds.status is 'running (new embeddings being computed), switched (the database now holds the new model) or cancelled.';
comment on column pgrag.reembeds.chunk_count is 'Chunks switched to the new model (set by the switch).';

-- squawk-ignore require-concurrent-index-creation
create unique index reembeds_one_running on pgrag.reembeds ((true)) where status = 'running';

-- The work queue and the results of the running re-embed: one row per chunk. A row with a null
-- embedding waits to be claimed; content_sha256 is the chunk's content_sha256 the embedding was
-- computed from, so a chunk whose content changed later is queued again. No foreign key to
-- pgrag.chunks: rows of deleted chunks are removed by pgrag.reembed_sync, and a key check would
-- lock every chunk row as the queue is filled.
create table pgrag.chunk_embeddings_next (
    tenant_id text not null,
    chunk_id bigint not null,
    content_sha256 text,
    embedding @extschema:vector@.vector,
    embedded_at timestamptz,
    primary key (tenant_id, chunk_id)
);
alter table pgrag.chunk_embeddings_next enable row level security;
comment on table pgrag.chunk_embeddings_next is
'Embeddings of the running re-embed''s model, computed beside pgrag.chunks.embedding (one row per chunk; a null embedding waits to be claimed). Written by pgrag.reembed_claim/reembed_store only; emptied by the switch or a cancel.';
comment on column pgrag.chunk_embeddings_next.content_sha256 is
'The chunk''s content_sha256 when it was claimed: an embedding whose chunk changed since is computed again.';

-- squawk-ignore require-concurrent-index-creation
create index chunk_embeddings_next_waiting on pgrag.chunk_embeddings_next (tenant_id, chunk_id)
    where embedding is null;
