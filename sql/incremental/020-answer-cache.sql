-- pgrag semantic answer cache: answers to earlier questions, reused for a question that means the
-- same (its embedding close enough to a cached question's), as long as the sources the answer
-- was made from have not changed.
-- Incremental migration: applied once, in one transaction, never edited after release.
--
-- answer_cache: one row per cached answer, per tenant (row level security keeps a tenant to its
--   own rows: a cache shared across tenants would hand one tenant's answer, made from its own
--   documents, to another). The question's embedding has no fixed dimension, as the
--   query-embedding cache's (008): the embedding model is part of every match, and a model
--   switch may change the dimension; a lookup reads at most the tenant's bounded number of
--   entries (settings.answer_cache_max_entries), so it needs no vector index. settings_key
--   is the SHA-256 of the settings that made the answer (chat model, retrieval mode, filters,
--   re-ranker, check...): an answer is reused only under the same settings. sources_fingerprint
--   is what a lookup recomputes to tell that every source is unchanged
--   (pgrag.answer_sources_fingerprint, sql/idempotent/053-answer-cache.sql).
-- answer_cache_counters: per tenant, the lookups made, the hits among them and the entries
--   found stale (one row per tenant, so it cannot grow).
-- settings.answer_cache_max_entries: the operator's bound per tenant (1,000 by default).

set local lock_timeout = '10s';
set local search_path = pg_catalog, pg_temp;

alter table pgrag.settings
    add column answer_cache_max_entries integer not null default 1000
        check (answer_cache_max_entries between 0 and 100000);
comment on column pgrag.settings.answer_cache_max_entries is
'Most entries the semantic answer cache (pgrag.answer_cache) keeps per tenant (default 1,000; 0 stores none); the least recently used go first.';

create table pgrag.answer_cache (
    tenant_id text not null,
    id bigint generated always as identity,
    model text not null check (pg_catalog.length(model) between 1 and 200),
    settings_key text not null check (settings_key operator(pg_catalog.~) '^[0-9a-f]{64}$'),
    settings jsonb not null default '{}'::jsonb
        check (pg_catalog.octet_length(settings::text) <= 10000),
    question text not null check (pg_catalog.length(question) between 1 and 10000),
    question_embedding @extschema:vector@.vector not null,
    answer text not null check (pg_catalog.length(answer) between 1 and 100000),
    sources jsonb not null check (pg_catalog.octet_length(sources::text) <= 1000000),
    chunk_ids bigint[] not null check (pg_catalog.cardinality(chunk_ids) between 1 and 2000),
    sources_fingerprint text not null
        check (sources_fingerprint operator(pg_catalog.~) '^[0-9a-f]{64}$'),
    created_at timestamptz not null default pg_catalog.now(),
    last_hit_at timestamptz not null default pg_catalog.now(),
    hit_count bigint not null default 0 check (hit_count >= 0),
    primary key (tenant_id, id)
);
alter table pgrag.answer_cache enable row level security;
create index answer_cache_lru on pgrag.answer_cache (tenant_id, last_hit_at);
comment on table pgrag.answer_cache is
'Semantic answer cache: answers of the chat model to a tenant''s questions, with the question''s embedding, the settings that made the answer and the fingerprint of its sources (row level security: a tenant reads only its own). Read by public.answer_cache_lookup, written by public.answer_cache_store; at most pgrag.settings.answer_cache_max_entries per tenant (least recently used first).';
comment on column pgrag.answer_cache.model is 'Embedding model of question_embedding, as pgrag.embedding_config named it when stored; a lookup matches only the current model.';
comment on column pgrag.answer_cache.settings_key is 'SHA-256 (hex) of settings as jsonb text: a lookup matches only entries made under the same settings.';
comment on column pgrag.answer_cache.settings is 'What made the answer besides the question (chat model, retrieval options, filters, re-ranker, check), as the client described it.';
comment on column pgrag.answer_cache.sources is 'The sources of the answer as build_context returned them (label, title, source_uri, document_id, chunk_ids, ...).';
comment on column pgrag.answer_cache.chunk_ids is 'Every chunk the answer''s context held (the sources'' chunk_ids): what the fingerprint covers.';
comment on column pgrag.answer_cache.sources_fingerprint is 'pgrag.answer_sources_fingerprint(tenant_id, chunk_ids) when stored: SHA-256 over each chunk''s id, content and document (id, content_sha256); a lookup recomputes it, and an entry whose sources changed or went is removed.';
comment on column pgrag.answer_cache.last_hit_at is 'When the entry was stored or last returned by a lookup: the eviction order.';
comment on column pgrag.answer_cache.hit_count is 'Times public.answer_cache_lookup returned the entry.';

create table pgrag.answer_cache_counters (
    tenant_id text not null primary key,
    lookups bigint not null default 0 check (lookups >= 0),
    hits bigint not null default 0 check (hits >= 0),
    stale bigint not null default 0 check (stale >= 0),
    since timestamptz not null default pg_catalog.now()
);
alter table pgrag.answer_cache_counters enable row level security;
comment on table pgrag.answer_cache_counters is
'Per tenant, since its first lookup: lookups of the semantic answer cache (public.answer_cache_lookup), hits among them, and entries found stale (a source changed or deleted) and removed. pgrag stats shows them.';
