-- pgrag BM25 index: postings and corpus statistics, per tenant.
-- Incremental migration: applied once, in one transaction, never edited after release.
--
-- Kept by statement-level triggers on pgrag.chunks (sql/idempotent/002-search.sql):
--   * bm25_postings: one row per (chunk, lexeme) of chunks.fts with the term frequency and the
--     chunk length (both in lexeme occurrences, i.e. tokens left after stop-word removal).
--     Document frequency is derived at query time by counting a lexeme's postings
--     (an index-only range count), so no hot df counter exists.
--   * corpus_stats: chunk count and total length, as sharded counters: each backend adds its
--     deltas to shard (pid % 16) of its tenant and language, so concurrent ingests do not
--     serialize on one row. N and avgdl are the sums over the shards.

set local lock_timeout = '10s';

create table pgrag.bm25_postings (
    tenant_id text not null,
    lexeme text not null,
    chunk_id bigint not null,
    tf integer not null,
    doc_len integer not null,
    -- Covering key: per query term, an index-only range scan yields every posting with the
    -- values the BM25 formula needs; deletes find their rows by the same key.
    -- No foreign key to chunks: the triggers that write postings also remove them, and a
    -- per-row key check would double the cost of loading.
    primary key (tenant_id, lexeme, chunk_id) include (tf, doc_len)
);
alter table pgrag.bm25_postings enable row level security;
comment on table pgrag.bm25_postings is
'BM25 postings: one row per chunk and lexeme of pgrag.chunks.fts, kept by triggers on pgrag.chunks.';
comment on column pgrag.bm25_postings.tf is 'Occurrences of the lexeme in the chunk (positions in fts).';
comment on column pgrag.bm25_postings.doc_len is 'Length of the chunk: occurrences of all its lexemes.';

create table pgrag.corpus_stats (
    tenant_id text not null,
    language text not null,
    shard integer not null check (shard between 0 and 15),
    chunk_count bigint not null default 0,
    token_count bigint not null default 0,
    primary key (tenant_id, language, shard)
);
alter table pgrag.corpus_stats enable row level security;
comment on table pgrag.corpus_stats is
'Sharded counters of chunks and their BM25 lengths per tenant and text-search language; sum over shards.';
