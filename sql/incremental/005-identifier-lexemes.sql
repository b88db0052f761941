-- pgrag identifier lexemes: part numbers, error codes and versions found by any of their parts.
-- Incremental migration: applied once, in one transaction, never edited after release.
--
-- The default text-search parser splits a token like V-ZQX41-7 one way in a chunk (v-zqx41, v,
-- zqx41, 7) and ZQX41-7 another way in a query (zqx41, -7), so the query found nothing. chunks.fts
-- becomes pgrag.chunk_fts(language, content): to_tsvector plus every run of parts of such tokens
-- (sql/idempotent/002-search.sql keeps both functions; pgrag.keyword_query adds the query's
-- identifiers whole). Every stored fts is recomputed here, and the BM25 postings, document
-- frequencies and corpus statistics rebuilt from it: the triggers that keep them do not fire on
-- a table rewrite. No chunk may be written meanwhile (docs/install.md: stop ingests while
-- upgrading); the rewrite holds an exclusive lock on pgrag.chunks until commit.

set local lock_timeout = '10s';
set local search_path = pg_catalog, pg_temp;

-- The functions the generated column calls (the functions tier, applied after this file, keeps
-- them current with the same bodies).
create or replace function pgrag.identifier_terms(content text, whole_only boolean default false)
returns text[]
language sql
immutable
strict
parallel safe
security invoker
set search_path = pg_catalog, pg_temp
as $$
    -- Identifier-like tokens: runs of letters and digits joined by - . _ that hold a digit
    -- and either a separator or a letter (ERR-4471, v2.3.1, V-ZQX41-7, ZQX41; not 2026, T-cell).
    with tok as (
        select pg_catalog.lower(m[1]) as t, o
        from pg_catalog.regexp_matches(content, '([[:alnum:]]+(?:[-._][[:alnum:]]+)*)', 'g')
             with ordinality as x(m, o)
        where m[1] operator(pg_catalog.~) '[[:digit:]]'
          and m[1] operator(pg_catalog.~) '[-._]|[[:alpha:]]'
          and pg_catalog.length(m[1]) <= 64
    ),
    atom as (
        -- Parts: letter runs and digit runs, each with the separator that follows it.
        select tok.o, a.n, a.m[1] as part, a.m[2] as sep
        from tok
        cross join lateral pg_catalog.regexp_matches(tok.t, '([[:alpha:]]+|[[:digit:]]+)([-._]*)', 'g')
             with ordinality as a(m, n)
        where not whole_only
    ),
    runs as (
        -- Every run of up to 6 consecutive parts, written as in the text.
        select s.o,
               pg_catalog.string_agg(e.part operator(pg_catalog.||)
                                     case when e.n < s.n + w.len - 1 then e.sep else '' end,
                                     '' order by e.n) as term
        from atom as s
        cross join pg_catalog.generate_series(1, 6) as w(len)
        join atom as e on e.o = s.o and e.n between s.n and s.n + w.len - 1
        group by s.o, s.n, w.len
        having pg_catalog.count(*) = w.len
    )
    select coalesce(pg_catalog.array_agg(q.term order by q.o, q.term), '{}')
    from (select tok.t as term, tok.o from tok
          union
          select runs.term, runs.o from runs) as q
$$;

create or replace function pgrag.chunk_fts(config regconfig, content text)
returns tsvector
language sql
immutable
strict
parallel safe
security invoker
set search_path = pg_catalog, pg_temp
as $$
    -- The identifier parts the parser did not produce, appended (positions after the text's,
    -- one per occurrence) with weight A: BM25 counts their occurrences (tf) but leaves them out
    -- of the chunk's length, which stays that of its words. Terms hold letters, digits, - . _
    -- only: quoting needs no escapes.
    select v.base operator(pg_catalog.||) coalesce((
        select pg_catalog.string_agg(
                   pg_catalog.format('''%s'':%sA', e.term, least(e.n, 16383)), ' ')::tsvector
        from pg_catalog.unnest(pgrag.identifier_terms(content)) with ordinality as e(term, n)
        where e.term operator(pg_catalog.<>) all (pg_catalog.tsvector_to_array(v.base))
    ), ''::tsvector)
    from (select pg_catalog.to_tsvector(config, content) as base) as v
$$;

alter table pgrag.chunks alter column fts set expression as (pgrag.chunk_fts(language, content));
comment on column pgrag.chunks.fts is 'pgrag.chunk_fts(language, content): to_tsvector plus identifier parts, kept by Postgres as a generated column, never stale.';

truncate pgrag.bm25_postings, pgrag.bm25_lexicon, pgrag.corpus_stats;

insert into pgrag.bm25_postings (tenant_id, lexeme, chunk_id, tf, doc_len)
select c.tenant_id, t.lexeme, c.id, pg_catalog.cardinality(t.positions), l.len
from pgrag.chunks as c
cross join lateral (
    select coalesce(pg_catalog.sum(pg_catalog.cardinality(u.positions)) filter (where u.weights[1] <> 'A'), 0)::integer as len
    from pg_catalog.unnest(c.fts) as u
) as l
cross join lateral pg_catalog.unnest(c.fts) as t;

insert into pgrag.bm25_lexicon (tenant_id, lexeme, shard, df)
select p.tenant_id, p.lexeme, 0, pg_catalog.count(*)
from pgrag.bm25_postings as p
group by p.tenant_id, p.lexeme;

insert into pgrag.corpus_stats (tenant_id, language, shard, chunk_count, token_count)
select c.tenant_id, c.language::text, 0, pg_catalog.count(*),
       coalesce(pg_catalog.sum(l.len), 0)
from pgrag.chunks as c
cross join lateral (
    select coalesce(pg_catalog.sum(pg_catalog.cardinality(u.positions)) filter (where u.weights[1] <> 'A'), 0) as len
    from pg_catalog.unnest(c.fts) as u
) as l
group by c.tenant_id, c.language;
