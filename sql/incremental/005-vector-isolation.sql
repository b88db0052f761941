-- pgrag vector isolation: anon searches a graph of public chunks only.
-- Incremental migration: applied once, in one transaction, never edited after release.
--
-- Until now anon's vector search walked the one HNSW graph of every chunk and row-level
-- security dropped the private rows afterwards: near a private cluster anon got fewer rows
-- than near empty space, which told it where private data lies. Here each chunk carries its
-- document's is_public (kept by triggers in sql/idempotent/002-search.sql, never by clients)
-- and a partial HNSW index holds the public chunks alone: anon's search walks it, so what anon
-- gets, and how long it takes, depends on public rows only. Large tenants get their own
-- partial HNSW index through pgrag.isolate_tenant (docs/security.md).

set local lock_timeout = '10s';
set local search_path = pg_catalog, pg_temp;

-- A constant default: no table rewrite.
alter table pgrag.chunks add column is_public boolean not null default false;
comment on column pgrag.chunks.is_public is
'Copy of the document''s is_public, kept by triggers (a value a client writes is replaced): the predicate of the public-only HNSW index anon searches.';

update pgrag.chunks as c
   set is_public = true
  from pgrag.documents as d
 where d.tenant_id = c.tenant_id and d.id = c.document_id and d.is_public;

-- squawk-ignore require-concurrent-index-creation
create index chunks_public_embedding_hnsw on pgrag.chunks
    using hnsw (embedding @extschema:vector@.vector_cosine_ops)
    where is_public and embedding is not null;
