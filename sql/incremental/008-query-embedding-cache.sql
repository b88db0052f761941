-- pgrag query-embedding cache: the embedding of a query text, per tenant and model, so that a
-- query asked before needs no model (a SQL client without PL/Python can then search with text
-- alone, and the CLI skips its model).
-- Incremental migration: applied once, in one transaction, never edited after release.
--
-- Keyed by (tenant_id, model, query_sha256): the SHA-256 of the query text normalised by
-- pgrag.normalize_query (defined here: the stored keys depend on it, so changing it needs a new
-- migration that recomputes them). The tenant is part of the key and row level security keeps
-- a tenant to its own rows: a cache shared across tenants would tell one tenant which queries
-- another asked. The embedding column has no fixed dimension: the model is part of the key,
-- and a model switch may change the dimension. Reading (pgrag.cached_query_embedding) never
-- writes, so searches stay read-only (a read replica serves them); hit_count and last_used_at
-- are kept by the writers' functions, which also bound the size (sql/idempotent/050-*.sql).

set local lock_timeout = '10s';
set local search_path = pg_catalog, pg_temp;

create function pgrag.normalize_query(query_text text)
returns text
language sql
immutable
strict
parallel safe
security invoker
set search_path = pg_catalog, pg_temp
as $$
    -- Trim, then collapse every run of white space into one space. The class is spelled out
    -- (ASCII white space and the Unicode space separators) rather than [[:space:]], whose
    -- meaning depends on the database's locale: a key must not change with it.
    select pg_catalog.regexp_replace(
               pg_catalog.regexp_replace(
                   query_text,
                   '^[\t\n\v\f\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+|[\t\n\v\f\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+$',
                   '', 'g'),
               '[\t\n\v\f\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+',
               ' ', 'g')
$$;
comment on function pgrag.normalize_query(text) is
'A query text as the query-embedding cache keys it: leading and trailing white space removed, every run of white space (ASCII and Unicode space separators) made one space. Case and punctuation are kept.';

create function pgrag.query_cache_key(query_text text)
returns text
language sql
immutable
strict
parallel safe
security invoker
set search_path = pg_catalog, pg_temp
as $$
    select pg_catalog.encode(
               pg_catalog.sha256(pg_catalog.convert_to(pgrag.normalize_query(query_text), 'UTF8')),
               'hex')
$$;
comment on function pgrag.query_cache_key(text) is
'Key of a query in the query-embedding cache: the SHA-256 (hex) of pgrag.normalize_query(query_text) in UTF-8.';

create table pgrag.query_embeddings (
    tenant_id text not null,
    model text not null check (pg_catalog.length(model) between 1 and 200),
    query_sha256 text not null check (query_sha256 operator(pg_catalog.~) '^[0-9a-f]{64}$'),
    embedding @extschema:vector@.vector not null,
    created_at timestamptz not null default pg_catalog.now(),
    last_used_at timestamptz not null default pg_catalog.now(),
    hit_count bigint not null default 0 check (hit_count >= 0),
    primary key (tenant_id, model, query_sha256)
);
alter table pgrag.query_embeddings enable row level security;
comment on table pgrag.query_embeddings is
'Query-embedding cache: the embedding of a normalised query text (pgrag.normalize_query) by a model, per tenant (row level security: a tenant reads only its own). Size-bounded per tenant and model by pgrag.query_cache_put and pgrag.prune_query_cache (least recently used first).';
comment on column pgrag.query_embeddings.model is 'Model that made the embedding, as pgrag.embedding_config.model names it.';
comment on column pgrag.query_embeddings.query_sha256 is 'pgrag.query_cache_key(query text): SHA-256 (hex) of the normalised text; the text itself is not stored.';
comment on column pgrag.query_embeddings.last_used_at is 'When the entry was stored or last reused by a writer (pgrag.query_cache_get); the eviction order.';
comment on column pgrag.query_embeddings.hit_count is 'Times pgrag.query_cache_get returned the entry (reads by the read-only search functions are not counted).';
