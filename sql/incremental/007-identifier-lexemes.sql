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
language plpgsql
immutable
strict
parallel safe
security invoker
set search_path = pg_catalog, pg_temp
as $$
declare
    v_out text[] := '{}';
    v_tok text;
    v_marked text;
    v_parts text[];
    v_seps text[];
    v_n integer;
    v_term text;
begin
    -- Identifier-like tokens: runs of letters and digits joined by - . _ that hold a digit and
    -- either a separator or a letter (ERR-4471, v2.3.1, V-ZQX41-7, ZQX41; not 2026, T-cell).
    if content operator(pg_catalog.!~) '[[:digit:]]' then
        return v_out;
    end if;
    for v_tok in
        select pg_catalog.lower(m[1])
        from pg_catalog.regexp_matches(content,
            '((?:[[:alnum:]]+[-._])*[[:alnum:]]*[[:digit:]][[:alnum:]]*(?:[-._][[:alnum:]]+)*)', 'g') as m
    loop
        continue when pg_catalog.length(v_tok) > 64 or v_tok operator(pg_catalog.!~) '[-._]|[[:alpha:]]';
        v_out := v_out operator(pg_catalog.||) v_tok;
        continue when whole_only;
        -- Parts: letter runs and digit runs; v_seps[i] joins part i to part i + 1 ('' between a
        -- letter run and a digit run, marked by chr(1) to split there).
        v_marked := pg_catalog.regexp_replace(
            pg_catalog.regexp_replace(v_tok, '([[:alpha:]])(?=[[:digit:]])', '\1' operator(pg_catalog.||) pg_catalog.chr(1), 'g'),
            '([[:digit:]])(?=[[:alpha:]])', '\1' operator(pg_catalog.||) pg_catalog.chr(1), 'g');
        v_parts := pg_catalog.regexp_split_to_array(v_marked, '[-._' operator(pg_catalog.||) pg_catalog.chr(1) operator(pg_catalog.||) ']');
        v_seps := pg_catalog.regexp_split_to_array(v_marked, '[[:alnum:]]+');
        v_seps := v_seps[2:];  -- (the text before the first part is empty)
        v_n := pg_catalog.cardinality(v_parts);
        -- Every run of up to 6 consecutive parts, written as in the text (the whole token once).
        for i in 1 .. v_n loop
            v_term := '';
            for j in i .. least(v_n, i + 5) loop
                v_term := v_term operator(pg_catalog.||) v_parts[j];
                if i > 1 or j < v_n then
                    v_out := v_out operator(pg_catalog.||) v_term;
                end if;
                v_term := v_term operator(pg_catalog.||) pg_catalog.replace(coalesce(v_seps[j], ''), pg_catalog.chr(1), '');
            end loop;
        end loop;
    end loop;
    return v_out;
end
$$;

create or replace function pgrag.chunk_fts(config regconfig, content text)
returns tsvector
language plpgsql
immutable
strict
parallel safe
security invoker
set search_path = pg_catalog, pg_temp
as $$
declare
    v_base tsvector := pg_catalog.to_tsvector(config, content);
    v_terms text[] := pgrag.identifier_terms(content);
    v_extra text := '';
begin
    if pg_catalog.cardinality(v_terms) = 0 then
        return v_base;
    end if;
    -- The identifier parts the parser did not produce, appended (positions after the text's,
    -- one per occurrence) with weight A: BM25 counts their occurrences (tf) but leaves them out
    -- of the chunk's length, which stays that of its words. Terms hold letters, digits, - . _
    -- only: quoting needs no escapes.
    for i in 1 .. least(pg_catalog.cardinality(v_terms), 16383) loop
        v_extra := v_extra operator(pg_catalog.||) pg_catalog.format(' ''%s'':%sA', v_terms[i], i);
    end loop;
    return v_base operator(pg_catalog.||)
        pg_catalog.ts_delete(v_extra::tsvector, pg_catalog.tsvector_to_array(v_base));
end
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
