-- The keyword arm: the BM25 ranking of a query, filters applied inside.
-- Contract. Provides: pgrag.keyword_candidates, returning (tenant_id, chunk_id, score) best
--   first, and the walk over a ranking that applies the filters, phrases and exclusions
--   (pgrag.keyword_walk, with a tenant on one server, and pgrag.keyword_walk_unfenced).
--   Relies on: argument checks and pgrag.current_tenant_id (001-helpers.sql),
--   pgrag.keyword_query (005-text-search.sql), pgrag.searchable and pgrag.distributed
--   (020-search-rows.sql), the statistics and rankings of 024-bm25-evaluation.sql (scores as its
--   header defines them). Callers: the fusion (026-fusion.sql) and the public API (027-api.sql),
--   as the calling role: row-level security applies, and a tenant argument of a step only
--   narrows what the caller may see.
--
-- Plans (sql/idempotent/README.md, "Plans"): each function's SET clause gives the plan cache
-- mode its statements need; each statement on a table carries a /* pgrag:name */ marker.
--
-- Arguments (docs/security.md, "Argument limits"): an API role may call each step directly, so
-- each checks its own at its top (22023; inline tests, a checker called only to raise): walks'
-- counts at least 0, filters as the API's.

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
    -- check is needed only for phrases (quoted phrases are required) and exclusions.
    v_phrases := pgrag.keyword_phrases(query_text, v_query.positive, v_corpus.search_config);
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
