-- pgrag query suggestions: a trigram index over each tenant's BM25 vocabulary.
-- Incremental migration: applied once, in one transaction, never edited after release.
--
-- public.suggest_query (sql/idempotent/042-suggestions.sql) proposes, for a query word without
-- postings in the caller's tenant, the closest lexeme of that tenant's own vocabulary
-- (pgrag.bm25_lexicon, which row-level security scopes to the tenant) by trigram similarity,
-- then maps it back to a word a chunk holding it uses. Trigrams come from pg_trgm, a contrib
-- extension of every PostgreSQL (trusted: a database owner may create it, as on Supabase). An
-- installed pg_trgm is used in whatever schema holds it; a missing one is created beside
-- pgvector. The functions find its schema in the catalog at each call, so no name of it is
-- written into them. On Citus, CREATE EXTENSION and the index reach every worker (Citus
-- propagates both).
--
-- Cost of this file: one pass over pgrag.bm25_lexicon to build the index (seconds per million
-- rows); writes to the lexicon wait meanwhile, searches go on. Afterwards each new lexicon row
-- (a tenant's new word, a new shard of it) adds its trigrams to the index; updates of its
-- counters change no indexed column.

set local lock_timeout = '10s';
set local search_path = pg_catalog, pg_temp;

create extension if not exists pg_trgm schema @extschema:vector@;

do $$
declare
    v_schema name;
begin
    select n.nspname into v_schema
    from pg_catalog.pg_extension as e
    join pg_catalog.pg_namespace as n on n.oid operator(pg_catalog.=) e.extnamespace
    where e.extname operator(pg_catalog.=) 'pg_trgm';
    execute pg_catalog.format(
        'create index bm25_lexicon_lexeme_trgm on pgrag.bm25_lexicon using gin (lexeme %I.gin_trgm_ops)',
        v_schema);
end
$$;
comment on index pgrag.bm25_lexicon_lexeme_trgm is
'Trigrams of the BM25 lexemes (pg_trgm): the closest words of a tenant''s vocabulary to a query word (public.suggest_query).';
