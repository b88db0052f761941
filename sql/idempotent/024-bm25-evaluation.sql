-- The keyword arm's evaluations: Okapi BM25 statistics and rankings of the tenant's postings.
-- Contract. Provides: the BM25 statistics (pgrag.bm25_corpus: the tenants searched, their chunk
--   count and average length; pgrag.bm25_terms: the query's lexemes with their idf and bounds)
--   and the rankings (tenant_ids, chunk_ids, scores: best first) of the exact evaluations
--   (pgrag.bm25_scan_tenant, pgrag.bm25_scan_tenants) and of the pruned one (pgrag.bm25_maxscore,
--   which runs the steps of 023-bm25-maxscore.sql and returns nothing when pruning does not
--   apply or would not pay). Relies on: argument checks (001-helpers.sql), the BM25 tables
--   (002-bm25-maintenance.sql keeps them), 023-bm25-maxscore.sql. Callers:
--   pgrag.keyword_candidates (025-keyword-arm.sql), as the calling role: row-level security
--   applies, and a tenant argument only narrows what the caller may see.
--
-- Scores: the sum over the query lexemes a chunk holds of idf * tf / (tf + saturation +
-- saturation_per_token * doc_len), i.e. tf / (tf + k1 (1 - b + b doc_len / avgdl)); rounded to
-- 1e-9, as a sum of floats depends on the order of its terms, which plans do not fix: rounded,
-- equal scores stay equal and ties keep one order (chunk_id) however a chunk was scored.
--
-- Plans (sql/idempotent/README.md, "Plans"): each function's SET clause gives the plan cache
-- mode its statements need; each statement on a table carries a /* pgrag:name */ marker.
--
-- Arguments (docs/security.md, "Argument limits"): an API role may call each function
-- directly, so each checks its own at its top (22023; inline tests, a checker called only to
-- raise), with the bounds keyword_candidates' values keep: the query's lexemes (and idf) at most
-- 64, idf within +-1,000,000 without nulls, saturation 0 to 10 and saturation_per_token 0 to
-- 1e12 (as in 023-bm25-maxscore.sql), max_rows at least 0.

create or replace function pgrag.bm25_corpus(
    tenant text,
    config regconfig,
    out tenants text[],
    out scored_tenant text,
    out chunk_count double precision,
    out avgdl double precision,
    out search_config regconfig
)
language plpgsql
stable
security invoker
set search_path = pg_catalog, pg_temp
set plan_cache_mode = force_generic_plan
as $$
declare
    v_tokens double precision;
begin
    -- The tenants searched: the caller's, or every tenant the caller may see with chunks; an
    -- array keeps one plan shape for both, with index conditions.
    if tenant is not null then
        tenants := array[tenant];
    else
        select /* pgrag:bm25_corpus_tenants */ pg_catalog.array_agg(t.tenant_id) into tenants
        from (select s.tenant_id
              from pgrag.corpus_stats as s
              group by s.tenant_id
              having pg_catalog.sum(s.chunk_count) > 0) as t;
    end if;
    -- Its own postings scored alone: the caller's tenant, or the only one a caller without a
    -- tenant sees (a single-tenant installation searched from psql, as its owner).
    scored_tenant := coalesce(tenant, case when pg_catalog.cardinality(tenants) = 1 then tenants[1] end);
    select /* pgrag:bm25_corpus_size */ pg_catalog.sum(s.chunk_count), pg_catalog.sum(s.token_count)
    into chunk_count, v_tokens
    from pgrag.corpus_stats as s
    where s.tenant_id = any (tenants);
    if coalesce(chunk_count, 0) <= 0 then
        return;
    end if;
    avgdl := greatest(v_tokens / chunk_count, 1e-9);
    if config is null then
        select /* pgrag:bm25_corpus_language */ s.language::regconfig into search_config
        from pgrag.corpus_stats as s
        where s.tenant_id = any (tenants)
        group by s.language
        order by pg_catalog.sum(s.chunk_count) desc, s.language
        limit 1;
    end if;
    search_config := coalesce(config, search_config, 'english'::regconfig);
end
$$;
comment on function pgrag.bm25_corpus(text, regconfig) is
'The corpus a BM25 search reads, from pgrag.corpus_stats: tenants (tenant: the caller''s; null: every tenant the caller may see that has chunks), scored_tenant (the one tenant whose postings are scored alone, or null), chunk_count (N; null or 0: nothing to search, the other columns are then not set), avgdl (average chunk length in lexemes, at least 1e-9) and search_config (config, else the most common chunk language of the tenants, else english).';

create or replace function pgrag.bm25_terms(
    tenants text[],
    query_lexemes text[],
    chunk_count double precision,
    out lexemes text[],
    out idf double precision[],
    out df double precision[],
    out max_tf integer[],
    out min_doc_len integer[]
)
language plpgsql
stable
security invoker
set search_path = pg_catalog, pg_temp
set plan_cache_mode = force_custom_plan
as $$
begin
    -- Arguments (this file's header): tenants only compared (all a caller without a tenant sees).
    if pg_catalog.cardinality(query_lexemes) > 64 then
        perform pgrag.check_length('query_lexemes', pg_catalog.cardinality(query_lexemes), 64);
    end if;
    if not coalesce(chunk_count between 0 and 1e15, true) then
        perform pgrag.check_argument('chunk_count', chunk_count, 0, 1e15);
    end if;
    -- Each lexeme's sharded counters summed, grouped (Citus cannot push an aggregate per lexeme
    -- in a lateral subquery down to the shards of several tenants).
    with /* pgrag:bm25_terms */ d as materialized (
        select y.lexeme, pg_catalog.sum(y.df)::double precision as df,
               pg_catalog.max(y.max_tf) as max_tf, pg_catalog.min(y.min_doc_len) as min_doc_len
        from pgrag.bm25_lexicon as y
        where y.tenant_id = any (tenants) and y.lexeme = any (query_lexemes)
        group by y.lexeme
    )
    select pg_catalog.array_agg(d.lexeme order by d.df, d.lexeme),
           pg_catalog.array_agg(pg_catalog.ln(1 + (chunk_count - d.df + 0.5) / (d.df + 0.5)) order by d.df, d.lexeme),
           pg_catalog.array_agg(d.df order by d.df, d.lexeme),
           pg_catalog.array_agg(d.max_tf order by d.df, d.lexeme),
           pg_catalog.array_agg(d.min_doc_len order by d.df, d.lexeme)
    into lexemes, idf, df, max_tf, min_doc_len
    from d
    where d.df > 0;
end
$$;
comment on function pgrag.bm25_terms(text[], text[], double precision) is
'The query lexemes that occur in the tenants'' chunks, rarest first (ties by lexeme), from pgrag.bm25_lexicon: lexemes, idf (Lucene: ln(1 + (chunk_count - df + 0.5)/(df + 0.5))), df (document frequency) and the term bounds max_tf (largest tf) and min_doc_len (shortest chunk holding it; both null when unknown). All null when no query lexeme occurs. Planned at every call.';

create or replace function pgrag.bm25_scan_tenant(
    tenant text,
    lexemes text[],
    idf double precision[],
    saturation double precision,
    saturation_per_token double precision,
    max_rows integer,
    out tenant_ids text[],
    out chunk_ids bigint[],
    out scores double precision[]
)
language plpgsql
stable
security invoker
set search_path = pg_catalog, pg_temp
set plan_cache_mode = force_custom_plan
as $$
begin
    -- Arguments (this file's header).
    if pg_catalog.cardinality(lexemes) > 64 or pg_catalog.cardinality(idf) > 64 then
        perform pgrag.check_length('lexemes', pg_catalog.cardinality(lexemes), 64),
                pgrag.check_length('idf', pg_catalog.cardinality(idf), 64);
    end if;
    if not coalesce(-1e6 <= all (idf) and 1e6 >= all (idf), idf is null) then
        raise exception 'idf must hold numbers from -1000000 to 1000000, without nulls'
            using errcode = '22023';
    end if;
    if not coalesce(saturation between 0 and 10 and saturation_per_token between 0 and 1e12
                    and max_rows >= 0, false) then
        raise exception 'saturation must be 0 to 10, saturation_per_token 0 to 1e12 and max_rows at least 0 (got %, %, %)',
            saturation, saturation_per_token, max_rows using errcode = '22023';
    end if;
    select /* pgrag:bm25_scan_tenant */ pg_catalog.array_agg(s.tenant_id order by s.score desc, s.chunk_id),
           pg_catalog.array_agg(s.chunk_id order by s.score desc, s.chunk_id),
           pg_catalog.array_agg(s.score order by s.score desc, s.chunk_id)
    into tenant_ids, chunk_ids, scores
    from (
        select tenant as tenant_id, p.chunk_id,
               pg_catalog.round(pg_catalog.sum(t.idf * p.tf / (p.tf + saturation + saturation_per_token * p.doc_len)) * 1e9::double precision) / 1e9::double precision as score
        from rows from (pg_catalog.unnest(lexemes), pg_catalog.unnest(idf)) as t(lexeme, idf)
        cross join lateral (
            select p.chunk_id, p.tf, p.doc_len
            from pgrag.bm25_postings as p
            where p.tenant_id = tenant and p.lexeme = t.lexeme
            offset 0
        ) as p
        group by p.chunk_id
        order by 3 desc, p.chunk_id
        limit max_rows
    ) as s;
end
$$;
comment on function pgrag.bm25_scan_tenant(text, text[], double precision[], double precision, double precision, integer) is
'Exact BM25 over one tenant: every chunk holding one of the lexemes (idf their weights), scored from its postings (one index scan per lexeme), the best max_rows as a ranking (tenant_ids, chunk_ids, scores: best first, rounded to 1e-9, ties by chunk_id; null when none). Planned at every call.';

create or replace function pgrag.bm25_scan_tenants(
    tenants text[],
    lexemes text[],
    idf double precision[],
    saturation double precision,
    saturation_per_token double precision,
    max_rows integer,
    out tenant_ids text[],
    out chunk_ids bigint[],
    out scores double precision[]
)
language plpgsql
stable
security invoker
set search_path = pg_catalog, pg_temp
set plan_cache_mode = force_custom_plan
as $$
begin
    -- Arguments (this file's header); tenants only compared.
    if pg_catalog.cardinality(lexemes) > 64 or pg_catalog.cardinality(idf) > 64 then
        perform pgrag.check_length('lexemes', pg_catalog.cardinality(lexemes), 64),
                pgrag.check_length('idf', pg_catalog.cardinality(idf), 64);
    end if;
    if not coalesce(-1e6 <= all (idf) and 1e6 >= all (idf), idf is null) then
        raise exception 'idf must hold numbers from -1000000 to 1000000, without nulls'
            using errcode = '22023';
    end if;
    if not coalesce(saturation between 0 and 10 and saturation_per_token between 0 and 1e12
                    and max_rows >= 0, false) then
        raise exception 'saturation must be 0 to 10, saturation_per_token 0 to 1e12 and max_rows at least 0 (got %, %, %)',
            saturation, saturation_per_token, max_rows using errcode = '22023';
    end if;
    -- A plain join, not pgrag.bm25_scan_tenant's fenced subqueries: Citus cannot run those for
    -- several tenants.
    select /* pgrag:bm25_scan_tenants */ pg_catalog.array_agg(s.tenant_id order by s.score desc, s.chunk_id),
           pg_catalog.array_agg(s.chunk_id order by s.score desc, s.chunk_id),
           pg_catalog.array_agg(s.score order by s.score desc, s.chunk_id)
    into tenant_ids, chunk_ids, scores
    from (
        select p.tenant_id, p.chunk_id,
               pg_catalog.round(pg_catalog.sum(t.idf * p.tf / (p.tf + saturation + saturation_per_token * p.doc_len)) * 1e9::double precision) / 1e9::double precision as score
        from rows from (pg_catalog.unnest(lexemes), pg_catalog.unnest(idf)) as t(lexeme, idf)
        join pgrag.bm25_postings as p on p.tenant_id = any (tenants) and p.lexeme = t.lexeme
        group by p.tenant_id, p.chunk_id
        order by 3 desc, p.chunk_id
        limit max_rows
    ) as s;
end
$$;
comment on function pgrag.bm25_scan_tenants(text[], text[], double precision[], double precision, double precision, integer) is
'Exact BM25 over several tenants (a caller without a tenant): as pgrag.bm25_scan_tenant, each tenant''s chunks scored with the statistics given, the best max_rows of all as one ranking. Planned at every call.';

create or replace function pgrag.bm25_maxscore(
    tenant text,
    lexemes text[],
    idf double precision[],
    df double precision[],
    max_tf integer[],
    min_doc_len integer[],
    k1 double precision,
    saturation double precision,
    saturation_per_token double precision,
    match_count integer,
    walk_may_drop boolean,
    out tenant_ids text[],
    out chunk_ids bigint[],
    out scores double precision[]
)
language plpgsql
stable
security invoker
set search_path = pg_catalog, pg_temp
as $$
declare
    v_mode text := coalesce(nullif(pg_catalog.current_setting('pgrag.keyword_pruning', true), ''), 'auto');
    v_theta double precision;
    v_split record;
    v_candidates record;
begin
    -- Arguments (this file's header): those of steps 1 and 2, checked before any is used.
    if pg_catalog.cardinality(lexemes) > 64 or pg_catalog.cardinality(idf) > 64
       or pg_catalog.cardinality(df) > 64 or pg_catalog.cardinality(max_tf) > 64
       or pg_catalog.cardinality(min_doc_len) > 64 then
        perform pgrag.check_length('lexemes', pg_catalog.cardinality(lexemes), 64),
                pgrag.check_length('idf', pg_catalog.cardinality(idf), 64),
                pgrag.check_length('df', pg_catalog.cardinality(df), 64),
                pgrag.check_length('max_tf', pg_catalog.cardinality(max_tf), 64),
                pgrag.check_length('min_doc_len', pg_catalog.cardinality(min_doc_len), 64);
    end if;
    if not coalesce(-1e6 <= all (idf) and 1e6 >= all (idf), idf is null)
       or not coalesce(0 <= all (df) and 1e15 >= all (df), df is null) then
        raise exception 'idf must hold numbers from -1000000 to 1000000 and df from 0 to 1e15, without nulls'
            using errcode = '22023';
    end if;
    if not coalesce(1 <= all (max_tf), true) or not coalesce(0 <= all (min_doc_len), true) then
        raise exception 'max_tf must hold numbers of at least 1 and min_doc_len of at least 0 (or nulls)'
            using errcode = '22023';
    end if;
    if not coalesce(k1 between 0 and 10 and saturation between 0 and 10
                    and saturation_per_token between 0 and 1e12 and match_count between 1 and 2000,
                    false) then
        raise exception 'k1 must be 0 to 10, saturation 0 to 10, saturation_per_token 0 to 1e12 and match_count 1 to 2000 (got %, %, %, %)',
            k1, saturation, saturation_per_token, match_count using errcode = '22023';
    end if;
    -- pgrag.keyword_pruning: auto (20,000 postings or more, and step 2's estimate of its cost),
    -- on (whenever the bounds leave a lexeme out: tests compare the rankings on small corpora),
    -- off (never).
    if pg_catalog.cardinality(lexemes) < 2 or v_mode = 'off'
       or (v_mode <> 'on' and (select pg_catalog.sum(x) from pg_catalog.unnest(df) as x) < 20000) then
        return;
    end if;
    v_theta := pgrag.bm25_maxscore_floor(tenant, lexemes, idf, df, saturation, saturation_per_token,
                                         match_count);
    v_split := pgrag.bm25_maxscore_essential(lexemes, idf, df, max_tf, min_doc_len, k1, saturation,
                                             saturation_per_token, v_theta);
    if not (coalesce(v_split.pays, false) or v_mode = 'on') or v_split.other_lexemes is null then
        return;
    end if;
    raise debug 'pgrag.keyword_candidates: pruned evaluation, % of % lexemes essential',
        pg_catalog.cardinality(v_split.essential_lexemes), pg_catalog.cardinality(lexemes);
    v_candidates := pgrag.bm25_maxscore_candidates(
        tenant, v_split.essential_lexemes, v_split.essential_idf, v_split.other_lexemes,
        v_split.other_idf, lexemes[v_split.other_order[1]], idf[v_split.other_order[1]],
        (select coalesce(pg_catalog.sum(v_split.bounds[x.i]), 0)
         from pg_catalog.unnest(v_split.other_order[2 :]) as x(i)),
        v_split.other_bound, v_theta, saturation, saturation_per_token, match_count);
    select r.tenant_ids, r.chunk_ids, r.scores into tenant_ids, chunk_ids, scores
    from pgrag.bm25_maxscore_complete(
        tenant, lexemes, idf, v_split.bounds, v_split.other_order, v_candidates.chunk_ids,
        v_candidates.partial_scores, v_candidates.raised_theta, saturation, saturation_per_token,
        match_count, walk_may_drop) as r;
end
$$;
comment on function pgrag.bm25_maxscore(text, text[], double precision[], double precision[], integer[], integer[], double precision, double precision, double precision, integer, boolean) is
'Exact BM25 over one tenant, pruned (MaxScore: steps pgrag.bm25_maxscore_floor, _essential, _candidates, _complete): the ranking pgrag.bm25_scan_tenant would start with (the top match_count, or with walk_may_drop every chunk proved to rank above the rest), reading the postings of frequent lexemes only for chunks that can still reach the top. Null when pruning does not apply or would not pay: fewer than two lexemes, pgrag.keyword_pruning off, or (auto, the default) fewer than 20,000 postings or step 2''s estimate against it; on prunes whenever the bounds leave a lexeme out.';
