-- pgrag BM25 lexicon: document frequency of every lexeme, per tenant, as sharded counters.
-- Incremental migration: applied once, in one transaction, never edited after release.
--
-- Until now keyword_search counted a query lexeme's postings to get its document frequency:
-- an index-only range count as long as the posting list, read a second time to score. At 100k
-- chunks that count was about a fifth of the query (benchmarks/latency.py). Here df is kept
-- by the BM25 triggers on pgrag.chunks (sql/idempotent/002-search.sql), like corpus_stats:
-- each backend adds its deltas to its own shards of a (tenant, lexeme), so concurrent ingests
-- of one tenant do not queue on the rows of common words; df is the sum over shards. A backend
-- owns 8 shards (16 groups by pid % 16, 8 slots each) and moves to the next slot with every
-- write statement of a transaction: a transaction of many small statements would otherwise
-- update the same rows again and again, and each update walks the versions it left behind.

set local lock_timeout = '10s';
set local search_path = pg_catalog, pg_temp;

create table pgrag.bm25_lexicon (
    tenant_id text not null,
    lexeme text not null,
    shard integer not null check (shard between 0 and 127),
    df bigint not null default 0,
    primary key (tenant_id, lexeme, shard)
);
alter table pgrag.bm25_lexicon enable row level security;
comment on table pgrag.bm25_lexicon is
'BM25 document frequency per tenant and lexeme (chunks holding it), as sharded counters kept by triggers on pgrag.chunks; sum over shards.';
comment on column pgrag.bm25_lexicon.df is 'This shard''s share of the document frequency (may be negative; the sum is not).';

-- Existing postings: one shard per (tenant, lexeme). No chunk may be written meanwhile: the
-- triggers that keep the lexicon arrive with the functions tier, applied right after this file
-- (docs/install.md: stop ingests while upgrading).
lock table pgrag.chunks in share mode;
insert into pgrag.bm25_lexicon (tenant_id, lexeme, shard, df)
select p.tenant_id, p.lexeme, 0, pg_catalog.count(*)
from pgrag.bm25_postings as p
group by p.tenant_id, p.lexeme;
