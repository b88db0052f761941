-- The keyword arm: Okapi BM25 over the tenant's postings, filters applied inside.
-- Contract. Provides: pgrag.keyword_candidates, returning (tenant_id, chunk_id, score) best
--   first, and its steps: the BM25 statistics (pgrag.bm25_corpus, pgrag.bm25_terms), the exact
--   evaluations (pgrag.bm25_scan_tenant, pgrag.bm25_scan_tenants), each returning a ranking
--   (tenant_ids, chunk_ids, scores: best first), and the walk over a ranking that applies the
--   filters (pgrag.keyword_walk, pgrag.keyword_walk_unfenced). Relies on: argument checks and pgrag.current_tenant_id (001-helpers.sql),
--   pgrag.keyword_query (005-text-search.sql), the BM25 tables (002-bm25-maintenance.sql keeps
--   them), pgrag.searchable and pgrag.distributed (020-search-rows.sql), the pruned evaluation
--   pgrag.bm25_maxscore (023-bm25-maxscore.sql). Callers: the fusion (025-fusion.sql) and the
--   public API (026-api.sql), as the calling role: row-level security applies, and a tenant
--   argument of a step only narrows what the caller may see.
--
-- Scores: the sum over the query lexemes a chunk holds of idf * tf / (tf + saturation +
-- saturation_per_token * doc_len), i.e. tf / (tf + k1 (1 - b + b doc_len / avgdl)); rounded to
-- 1e-9, as a sum of floats depends on the order of its terms, which plans do not fix: rounded,
-- equal scores stay equal and ties keep one order (chunk_id) however a chunk was scored.
--
-- Plans (sql/idempotent/README.md, "Plans"): each function's SET clause gives the plan cache
-- mode its statements need; each statement on a table carries a /* pgrag:name */ marker.
--
-- Arguments (docs/security.md, "Argument limits"): an API role may call each step directly, so
-- each checks its own at its top (22023; inline tests, a checker called only to raise), with
-- the bounds keyword_candidates' values keep: the query's lexemes (and idf) at most 64, idf
-- within +-1,000,000 without nulls, saturation 0 to 10 and saturation_per_token 0 to 1e12 (as in
-- 023-bm25-maxscore.sql), max_rows and walks' counts at least 0, filters as the API's.

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

create or replace function pgrag.keyword_walk_unfenced(
    tenant text,
    tenant_ids text[],
    chunk_ids bigint[],
    scores double precision[],
    max_rows integer,
    skip_ids bigint[],
    phrases tsquery,
    exclusions tsquery,
    document_ids bigint[],
    metadata_filter jsonb,
    source_types text[],
    created_after timestamptz,
    created_before timestamptz
)
returns table (tenant_id text, chunk_id bigint, score double precision)
language plpgsql
stable
rows 10
security invoker
set search_path = pg_catalog, pg_temp
set plan_cache_mode = force_custom_plan
as $$
#variable_conflict use_column
begin
    -- Arguments (this file's header): the ranking any length (one read by key per row), skip_ids
    -- at most 8,000 (the pruned ranking's rows), tsqueries and tenants only evaluated or compared.
    if not coalesce(max_rows between 0 and 2000, false) then
        raise exception 'max_rows must be 0 to 2000 (got %)', max_rows using errcode = '22023';
    end if;
    if pg_catalog.cardinality(skip_ids) > 8000 then
        perform pgrag.check_length('skip_ids', pg_catalog.cardinality(skip_ids), 8000);
    end if;
    if document_ids is not null or source_types is not null or metadata_filter is not null then
        perform pgrag.check_filters(document_ids, source_types, metadata_filter);
    end if;
    return query
    select /* pgrag:keyword_walk_unfenced */ u.t, u.id, u.s
    from rows from (pg_catalog.unnest(tenant_ids), pg_catalog.unnest(chunk_ids), pg_catalog.unnest(scores))
         with ordinality as u(t, id, s, ord)
    join pgrag.chunks as c on c.tenant_id = u.t and c.id = u.id
    join pgrag.documents as d on d.tenant_id = c.tenant_id and d.id = c.document_id
    where pgrag.searchable(d.status, c.document_id, d.metadata, c.metadata, d.source_type,
                           d.created_at, document_ids, metadata_filter, source_types,
                           created_after, created_before)
      -- Every candidate is the caller's tenant's when there is one: said of c as well, so that
      -- a sharded cluster (Citus) sends this to that tenant's shards alone.
      and (tenant is null or c.tenant_id = tenant)
      and (exclusions is null or not c.fts operator(pg_catalog.@@) exclusions)
      and (phrases is null or c.fts operator(pg_catalog.@@) phrases)
      and (skip_ids is null or u.id operator(pg_catalog.<>) all (skip_ids))
    order by u.ord
    limit max_rows;
end
$$;
comment on function pgrag.keyword_walk_unfenced(text, text[], bigint[], double precision[], integer, bigint[], tsquery, tsquery, bigint[], jsonb, text[], timestamptz, timestamptz) is
'One batch of pgrag.keyword_walk in the form Citus can run without a tenant (chunks and documents joined): the first max_rows of the ranked chunks (tenant_ids, chunk_ids, scores) that pass the checks, in rank order. Planned at every call.';

create or replace function pgrag.keyword_walk(
    tenant text,
    tenant_ids text[],
    chunk_ids bigint[],
    scores double precision[],
    first_row integer,
    last_row integer,
    max_rows integer,
    skip_ids bigint[],
    phrases tsquery,
    exclusions tsquery,
    document_ids bigint[],
    metadata_filter jsonb,
    source_types text[],
    created_after timestamptz,
    created_before timestamptz
)
returns table (tenant_id text, chunk_id bigint, score double precision)
language plpgsql
stable
rows 10
security invoker
set search_path = pg_catalog, pg_temp
set plan_cache_mode = force_generic_plan
as $$
#variable_conflict use_column
declare
    v_batch integer;
    v_from integer := first_row;
    v_to integer;
    v_found integer := 0;
    v_rows integer;
begin
    -- Arguments (this file's header): as pgrag.keyword_walk_unfenced's, and rows within the
    -- ranking (its batches grow fourfold up to last_row).
    if not coalesce(max_rows between 0 and 2000 and first_row >= 0
                    and last_row <= coalesce(pg_catalog.cardinality(chunk_ids), 0), false) then
        raise exception 'max_rows must be 0 to 2000, first_row at least 0 and last_row at most the ranking''s % rows (got %, %, %)',
            coalesce(pg_catalog.cardinality(chunk_ids), 0), max_rows, first_row, last_row
            using errcode = '22023';
    end if;
    if pg_catalog.cardinality(skip_ids) > 8000 then
        perform pgrag.check_length('skip_ids', pg_catalog.cardinality(skip_ids), 8000);
    end if;
    if document_ids is not null or source_types is not null or metadata_filter is not null then
        perform pgrag.check_filters(document_ids, source_types, metadata_filter);
    end if;
    v_batch := greatest(2 * max_rows, 50);
    -- Growing batches (the rows of a good ranking mostly pass): 2 max_rows (at least 50), then
    -- four times more each time.
    while v_found < max_rows and v_from < last_row loop
        v_to := least(v_from + v_batch, last_row);
        if tenant is not null and not pgrag.distributed() then
            -- Each candidate's chunk, then its document, read by key in rank order in fenced
            -- subqueries, with a plan kept for the session ("Plans").
            return query
            select /* pgrag:keyword_walk */ u.t, u.id, u.s
            from rows from (
                pg_catalog.unnest(tenant_ids[v_from + 1 : v_to]),
                pg_catalog.unnest(chunk_ids[v_from + 1 : v_to]),
                pg_catalog.unnest(scores[v_from + 1 : v_to])
            ) with ordinality as u(t, id, s, ord)
            cross join lateral (
                select c.document_id, c.metadata, c.fts
                from pgrag.chunks as c
                where c.tenant_id = tenant and c.id = u.id
                offset 0
            ) as c
            cross join lateral (
                select
                from pgrag.documents as d
                where d.tenant_id = tenant and d.id = c.document_id
                  and pgrag.searchable(d.status, c.document_id, d.metadata, c.metadata,
                                       d.source_type, d.created_at, document_ids,
                                       metadata_filter, source_types, created_after,
                                       created_before)
                offset 0
            ) as d
            where (exclusions is null or not c.fts operator(pg_catalog.@@) exclusions)
              and (phrases is null or c.fts operator(pg_catalog.@@) phrases)
              and (skip_ids is null or u.id operator(pg_catalog.<>) all (skip_ids))
            order by u.ord
            limit max_rows - v_found;
        else
            -- A caller without a tenant, or Citus (which cannot run fenced subqueries without
            -- one): joins, planned at every call.
            return query
            select w.tenant_id, w.chunk_id, w.score
            from pgrag.keyword_walk_unfenced(
                tenant, tenant_ids[v_from + 1 : v_to], chunk_ids[v_from + 1 : v_to],
                scores[v_from + 1 : v_to], max_rows - v_found, skip_ids, phrases, exclusions,
                document_ids, metadata_filter, source_types, created_after, created_before) as w;
        end if;
        get diagnostics v_rows = row_count;
        v_found := v_found + v_rows;
        v_from := v_to;
        v_batch := v_batch * 4;
    end loop;
end
$$;
comment on function pgrag.keyword_walk(text, text[], bigint[], double precision[], integer, integer, integer, bigint[], tsquery, tsquery, bigint[], jsonb, text[], timestamptz, timestamptz) is
'The first max_rows chunks of rows first_row + 1 to last_row of a ranking (tenant_ids, chunk_ids, scores, best first) that pass the checks, in rank order: document ready, the filters (pgrag.searchable), phrases and exclusions (tsqueries on the chunk''s fts; null: none), not in skip_ids. Read in growing batches; tenant is the caller''s (null: none). Fewer than max_rows rows: every row up to last_row was walked.';

create or replace function pgrag.keyword_candidates(
    query_text text,
    match_count integer default 10,
    language text default null,
    k1 double precision default 1.5,
    b double precision default 0.75,
    document_ids bigint[] default null,
    metadata_filter jsonb default null,
    source_types text[] default null,
    created_after timestamptz default null,
    created_before timestamptz default null
)
returns table (tenant_id text, chunk_id bigint, score double precision)
language plpgsql
stable
rows 10
security invoker
set search_path = pg_catalog, pg_temp
-- Its own statements read no table; its steps set their own modes ("Plans").
set plan_cache_mode = force_generic_plan
as $$
#variable_conflict use_column
declare
    v_tenant text := pgrag.current_tenant_id();
    -- Argument limits (docs/security.md): an arm fetches at most 2,000 rows.
    v_k integer := coalesce(pgrag.check_argument('match_count', match_count, 0, 2000, true), 10);
    v_k1 double precision := coalesce(pgrag.check_argument('k1', k1, 0, 10), 1.5);
    v_b double precision := coalesce(pgrag.check_argument('b', b, 0, 1), 0.75);
    v_config regconfig := pgrag.text_search_config('language', keyword_candidates.language);
    v_corpus record;          -- pgrag.bm25_corpus: tenants, scored_tenant, chunk_count, avgdl
    v_query record;           -- pgrag.keyword_query: positive, negative, lexemes
    v_terms record;           -- pgrag.bm25_terms: lexemes (rarest first), idf, df, term bounds
    v_phrases tsquery;        -- checked in the walk: phrases (<->, <N>) and exclusions
    v_exclusions tsquery;
    v_saturation double precision;            -- k1 (1 - b), this file's header
    v_saturation_per_token double precision;  -- k1 b / avgdl
    v_ranking record;         -- an evaluation's tenant_ids, chunk_ids, scores, best first
    v_pruned boolean := false;
    v_size integer := greatest(4 * v_k, 200);  -- rows of the ranking the walk may take
    v_walked integer := 0;    -- rows of the ranking walked
    v_last integer;
    v_found integer := 0;
    v_rows integer;
    v_skip bigint[];          -- the pruned ranking's rows, walked before the full ranking
begin
    -- 1. Arguments and query parsing, against the tenants' BM25 statistics.
    perform pgrag.check_length('query_text', pg_catalog.length(query_text), 10000, 'characters');
    perform pgrag.check_filters(document_ids, source_types, metadata_filter);
    if coalesce(query_text, '') = '' or v_k = 0 then
        return;
    end if;
    v_corpus := pgrag.bm25_corpus(v_tenant, v_config);
    if coalesce(v_corpus.chunk_count, 0) <= 0 then
        return;
    end if;
    v_query := pgrag.keyword_query(query_text, v_corpus.search_config);
    if pg_catalog.cardinality(v_query.lexemes) = 0 then
        return;
    end if;
    v_terms := pgrag.bm25_terms(v_corpus.tenants, v_query.lexemes, v_corpus.chunk_count);
    if v_terms.lexemes is null then
        return;
    end if;
    -- Single-word clauses are satisfied by every chunk holding a scored lexeme: the tsquery
    -- check is needed only for phrases and exclusions.
    if v_query.positive::text operator(pg_catalog.~) '<[-0-9]' then
        v_phrases := v_query.positive;
    end if;
    v_exclusions := v_query.negative;
    v_saturation := v_k1 * (1 - v_b);
    v_saturation_per_token := v_k1 * v_b / v_corpus.avgdl;
    -- 2. The evaluation: pruned (MaxScore) for one tenant's rows without filters when it pays;
    --    else (and should the walk need more rows than it proved) the exact scan of that tenant,
    --    or of every tenant the caller sees.
    if v_corpus.scored_tenant is not null and document_ids is null and metadata_filter is null
       and source_types is null and created_after is null and created_before is null then
        v_ranking := pgrag.bm25_maxscore(
            v_corpus.scored_tenant, v_terms.lexemes, v_terms.idf, v_terms.df, v_terms.max_tf,
            v_terms.min_doc_len, v_k1, v_saturation, v_saturation_per_token, v_k,
            v_phrases is not null or v_exclusions is not null);
        v_pruned := v_ranking.chunk_ids is not null;
        if v_pruned then
            v_size := pg_catalog.cardinality(v_ranking.chunk_ids);
        end if;
    end if;
    loop
        if not v_pruned and v_corpus.scored_tenant is not null then
            v_ranking := pgrag.bm25_scan_tenant(v_corpus.scored_tenant, v_terms.lexemes, v_terms.idf,
                                                v_saturation, v_saturation_per_token, v_size + 1);
        elsif not v_pruned then
            v_ranking := pgrag.bm25_scan_tenants(v_corpus.tenants, v_terms.lexemes, v_terms.idf,
                                                 v_saturation, v_saturation_per_token, v_size + 1);
        end if;
        -- 3. The walk over the ranking: documents ready, filters, phrases and exclusions
        --    (filters inside the arm), until match_count chunks pass.
        v_last := least(coalesce(pg_catalog.cardinality(v_ranking.chunk_ids), 0), v_size);
        return query
        select w.tenant_id, w.chunk_id, w.score
        from pgrag.keyword_walk(v_tenant, v_ranking.tenant_ids, v_ranking.chunk_ids,
                                v_ranking.scores, v_walked, v_last, v_k - v_found, v_skip,
                                v_phrases, v_exclusions, document_ids, metadata_filter,
                                source_types, created_after, created_before) as w;
        get diagnostics v_rows = row_count;
        v_found := v_found + v_rows;
        v_walked := v_last;
        exit when v_found >= v_k
            or not (v_pruned or coalesce(pg_catalog.cardinality(v_ranking.chunk_ids), 0) > v_size);
        -- More of the exact ranking: after the pruned one, its start again without the chunks
        -- walked (v_size more rows than those); after its start, all of it.
        if v_pruned then
            v_skip := v_ranking.chunk_ids;
            v_size := v_size + greatest(4 * v_k, 200);
            v_pruned := false;
            v_walked := 0;
        else
            v_size := 2147483646;
        end if;
    end loop;
end
$$;

comment on function pgrag.keyword_candidates(text, integer, text, double precision, double precision, bigint[], jsonb, text[], timestamptz, timestamptz) is
'Keyword arm: (tenant_id, chunk_id, Okapi BM25 score rounded to 1e-9) best first. Lucene IDF ln(1 + (N - df + 0.5)/(df + 0.5)), term part tf/(tf + k1(1 - b + b dl/avgdl)), N and avgdl from pgrag.corpus_stats and df from pgrag.bm25_lexicon of the caller''s tenant. Exact: for one tenant without filters it skips the postings of frequent lexemes that provably cannot lift a chunk into the top match_count (term bounds in pgrag.bm25_lexicon); the setting pgrag.keyword_pruning (auto, on, off) chooses when, never what is returned.';
