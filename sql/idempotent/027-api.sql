-- The public API: the search functions clients call (schema public, what PostgREST exposes);
-- the context builders (build_context, build_context_for) are in 028-context.sql.
-- Contract. Provides: public.vector_search, public.keyword_search, public.hybrid_search and
--   public.chunk_windows, documented in docs/sql-api.md; their names,
--   parameter names and result columns are stable across versions (PostgREST calls them by
--   name). Relies on: 019-windows.sql, 020-search-rows.sql to 026-fusion.sql and the argument checks
--   (001-helpers.sql). Callers: anon, authenticated and service_role
--   (910-function-privileges.sql); every function runs as its caller, so row-level security
--   applies, and scopes rows to pgrag.current_tenant_id() when a tenant claim is present.
--
-- Also plannable by a Citus coordinator (docs/scaling.md, sql/idempotent/README.md "Citus"):
-- the functions that read tables are PL/pgSQL (Citus cannot plan a SQL-language function's
-- joins around unbound parameters) and name the tables they read, and each join of a candidate
-- list to the chunks says the caller's tenant of the chunks too, which changes no row (every
-- candidate is the tenant's) and lets Citus send the statement to that tenant's shards.

-- Every row names the tenant that owns it (tenant_id, the last column), so a client can tell
-- sources of different tenants apart (anon sees the public documents of every tenant); a
-- hybrid_search row also names the chunks its content spans (first_chunk_index and
-- last_chunk_index, before tenant_id: a window). Earlier versions returned neither;
-- CREATE OR REPLACE cannot add a result column, so those are dropped first (their grants are
-- re-made by 910-function-privileges.sql). The searches' last parameter, match_offset (pages),
-- is new too: a signature without it is dropped the same way.
do $$
declare
    f record;
begin
    for f in
        select p.oid::pg_catalog.regprocedure as sig
        from pg_catalog.pg_proc as p
        where p.pronamespace operator(pg_catalog.=) 'public'::pg_catalog.regnamespace
          and p.proname operator(pg_catalog.=) any (array['vector_search', 'keyword_search',
                                                          'hybrid_search', 'chunk_windows'])
          and (not ('tenant_id' operator(pg_catalog.=) any (coalesce(p.proargnames, '{}')))
               or (p.proname operator(pg_catalog.=) 'hybrid_search'
                   and not ('last_chunk_index' operator(pg_catalog.=) any (coalesce(p.proargnames, '{}'))))
               or (p.proname operator(pg_catalog.<>) 'chunk_windows'
                   and not ('match_offset' operator(pg_catalog.=) any (coalesce(p.proargnames, '{}')))))
          and not exists (select from pg_catalog.pg_depend as d
                          where d.classid operator(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
                            and d.objid operator(pg_catalog.=) p.oid
                            and d.deptype operator(pg_catalog.=) 'e')
    loop
        execute pg_catalog.format('drop function %s', f.sig);
    end loop;
end
$$;

create or replace function public.vector_search(
    query_embedding @extschema:vector@.vector,
    match_count integer default 10,
    min_similarity double precision default null,
    ef_search integer default null,
    document_ids bigint[] default null,
    metadata_filter jsonb default null,
    source_types text[] default null,
    created_after timestamptz default null,
    created_before timestamptz default null,
    match_offset integer default 0
)
returns table (
    chunk_id bigint, document_id bigint, chunk_index integer, title text, source_uri text,
    source_type text, page integer, heading_path text[], content text,
    similarity double precision, rank bigint, tenant_id text
)
language plpgsql
stable
security invoker
set search_path = pg_catalog, pg_temp
-- A generic plan, made once per session: the join of the candidates to their chunks and
-- documents by key plans the same whatever the values, and PL/pgSQL's plan cache otherwise
-- kept planning it at every call (about a quarter of the function's time at 100k chunks). On Citus,
-- sql/citus/002-function-settings.sql sets force_custom_plan instead.
set plan_cache_mode = force_generic_plan
as $$
#variable_conflict use_column
declare
    v_tenant text := pgrag.current_tenant_id();
    -- Pages (docs/sql-api.md, "Pages"): rows match_offset + 1 to match_offset + match_count of
    -- one ranking of match_offset + match_count rows.
    v_offset integer := coalesce(pgrag.check_argument('match_offset', match_offset, 0, 1000), 0);
begin
    -- Argument limits (docs/security.md): SQLSTATE 22023 before any work.
    perform pgrag.check_query_embedding('query_embedding', vector_search.query_embedding),
            pgrag.check_argument('match_count', vector_search.match_count, 0, 1000, true),
            pgrag.check_argument('min_similarity', vector_search.min_similarity, '-Infinity', 'Infinity'),
            pgrag.check_argument('ef_search', vector_search.ef_search, 1, 1000, true),
            pgrag.check_filters(vector_search.document_ids, vector_search.source_types,
                                vector_search.metadata_filter);

    return query
    select c.id, c.document_id, c.chunk_index, d.title, d.source_uri, d.source_type, c.page,
           c.heading_path, c.content, 1 - v.distance,
           pg_catalog.row_number() over (order by v.distance, v.chunk_id), c.tenant_id
    from pgrag.vector_candidates(vector_search.query_embedding,
                                 coalesce(least(vector_search.match_count, 1000), 10) + v_offset,
                                 vector_search.ef_search, vector_search.document_ids,
                                 vector_search.metadata_filter, vector_search.source_types,
                                 vector_search.created_after, vector_search.created_before) as v
    join pgrag.chunks as c on c.tenant_id = v.tenant_id and c.id = v.chunk_id
                          and (v_tenant is null or c.tenant_id = v_tenant)
    join pgrag.documents as d on d.tenant_id = c.tenant_id and d.id = c.document_id
    where pgrag.searchable(d.status, c.document_id, d.metadata, c.metadata, d.source_type,
                           d.created_at)
      and (vector_search.min_similarity is null or 1 - v.distance >= vector_search.min_similarity)
    order by v.distance, v.chunk_id
    offset v_offset;
end
$$;
comment on function public.vector_search(@extschema:vector@.vector, integer, double precision, integer, bigint[], jsonb, text[], timestamptz, timestamptz, integer) is
'Semantic search: the match_count ready chunks nearest to query_embedding by cosine distance (HNSW; iterative scans under tenant/filters; exact scan for small visible sets), with similarity = 1 - cosine distance >= min_similarity. Filters: document_ids, metadata_filter (jsonb containment over document || chunk metadata), source_types, created_after/before (document created_at). Tenant from request.jwt.claims; RLS applies. Limits: match_count 0-1000 (more counts as 1000), min_similarity any number but NaN, ef_search 1-1000 (more counts as 1000), query_embedding of the stored dimension and non-zero, document_ids at most 1,000, source_types 100, metadata_filter 10,000 bytes, match_offset 0-1000; else SQLSTATE 22023. Pages: match_offset skips the first rows of the ranking of match_offset + match_count rows (rank counts from the first row of that ranking; docs/sql-api.md, Pages).';

create or replace function public.keyword_search(
    query_text text,
    match_count integer default 10,
    language text default null,
    k1 double precision default 1.5,
    b double precision default 0.75,
    document_ids bigint[] default null,
    metadata_filter jsonb default null,
    source_types text[] default null,
    created_after timestamptz default null,
    created_before timestamptz default null,
    match_offset integer default 0
)
returns table (
    chunk_id bigint, document_id bigint, chunk_index integer, title text, source_uri text,
    source_type text, page integer, heading_path text[], content text,
    score double precision, rank bigint, tenant_id text
)
language plpgsql
stable
security invoker
set search_path = pg_catalog, pg_temp
-- A generic plan (sql/idempotent/README.md, "Plans"): the candidates joined to their chunks and
-- documents by key. The keyword arm sets its own mode.
set plan_cache_mode = force_generic_plan
as $$
#variable_conflict use_column
declare
    v_tenant text := pgrag.current_tenant_id();
    -- Pages (docs/sql-api.md, "Pages"), as vector_search's.
    v_offset integer := coalesce(pgrag.check_argument('match_offset', match_offset, 0, 1000), 0);
begin
    -- Argument limits (docs/security.md): SQLSTATE 22023 before any work (keyword_candidates
    -- checks the others).
    perform pgrag.check_argument('match_count', keyword_search.match_count, 0, 1000, true);

    return query
    select c.id, c.document_id, c.chunk_index, d.title, d.source_uri, d.source_type, c.page,
           c.heading_path, c.content, k.score,
           pg_catalog.row_number() over (order by k.score desc, k.chunk_id), c.tenant_id
    from pgrag.keyword_candidates(keyword_search.query_text,
                                  coalesce(least(keyword_search.match_count, 1000), 10) + v_offset,
                                  keyword_search.language, keyword_search.k1, keyword_search.b,
                                  keyword_search.document_ids, keyword_search.metadata_filter,
                                  keyword_search.source_types, keyword_search.created_after,
                                  keyword_search.created_before) as k
    join pgrag.chunks as c on c.tenant_id = k.tenant_id and c.id = k.chunk_id
                          and (v_tenant is null or c.tenant_id = v_tenant)
    join pgrag.documents as d on d.tenant_id = c.tenant_id and d.id = c.document_id
    where pgrag.searchable(d.status, c.document_id, d.metadata, c.metadata, d.source_type,
                           d.created_at)
    order by k.score desc, k.chunk_id
    offset v_offset;
end
$$;
comment on function public.keyword_search(text, integer, text, double precision, double precision, bigint[], jsonb, text[], timestamptz, timestamptz, integer) is
'Okapi BM25 search over websearch_to_tsquery syntax ("phrase", -exclude, or; a --flag is searched for, never excluded: docs/sql-api.md, Query syntax) with OR semantics across words: a chunk matches when it contains any word or quoted phrase and no excluded one. Lucene IDF ln(1 + (N - df + 0.5)/(df + 0.5)); N, avgdl and df per tenant. language: text-search configuration of the query (default: the most common chunk language). Same filters as vector_search. Limits: match_count 0-1000 (more counts as 1000), query_text at most 10,000 characters and 64 distinct terms, language an existing configuration, k1 0-10, b 0-1, filters as vector_search, match_offset 0-1000; else SQLSTATE 22023. Ties in score are ordered by chunk_id, so pages (match_offset, as vector_search''s) never skip or repeat a row.';

create or replace function public.hybrid_search(
    query_text text,
    query_embedding @extschema:vector@.vector,
    match_count integer default 10,
    fusion text default 'weighted',
    rrf_k integer default 60,
    vector_weight double precision default 0.8,
    keyword_weight double precision default 1,
    candidate_count integer default null,
    window_size integer default 0,
    mmr_lambda double precision default null,
    min_score double precision default null,
    language text default null,
    ef_search integer default null,
    document_ids bigint[] default null,
    metadata_filter jsonb default null,
    source_types text[] default null,
    created_after timestamptz default null,
    created_before timestamptz default null,
    match_offset integer default 0
)
returns table (
    chunk_id bigint, document_id bigint, chunk_index integer, title text, source_uri text,
    source_type text, page integer, heading_path text[], content text,
    vector_rank bigint, vector_score double precision, keyword_rank bigint,
    keyword_score double precision, score double precision, rank bigint,
    first_chunk_index integer, last_chunk_index integer, tenant_id text
)
language plpgsql
stable
security invoker
set search_path = pg_catalog, pg_temp
-- A generic plan (sql/idempotent/README.md, "Plans"): the fused candidates (and their windows)
-- joined to their chunks and documents by key. The functions it calls set their own modes.
set plan_cache_mode = force_generic_plan
as $$
#variable_conflict use_column
declare
    v_tenant text := pgrag.current_tenant_id();
    -- Argument limits (docs/security.md): SQLSTATE 22023 before any work; fused_candidates
    -- checks the arguments it receives as they are.
    v_k integer := coalesce(pgrag.check_argument('match_count', match_count, 0, 1000, true), 10);
    v_w integer := coalesce(pgrag.check_argument('window_size', window_size, 0, 10), 0);
    v_cand integer := coalesce(pgrag.check_argument('candidate_count', candidate_count, 1, 1000, true),
                               least(greatest(v_k * 4, 40), 1000));
    -- Pages (docs/sql-api.md, "Pages"): rows of one ranking of the fused candidates, whose
    -- number depends on match_count and candidate_count alone, never on the page; a page
    -- reaches at most greatest(candidate_count, match_count) rows deep (more rows would mean
    -- more candidates, another ranking).
    v_offset integer := coalesce(pgrag.check_argument('match_offset', match_offset, 0, 1000), 0);
    v_select integer := case when v_offset = 0 then v_k
                             else least(v_k + v_offset, greatest(v_cand, v_k)) end;
begin
    perform pgrag.check_query_embedding('query_embedding', query_embedding);
    perform pgrag.check_length('query_text', pg_catalog.length(query_text), 10000, 'characters');
    if v_k = 0 then
        return;
    end if;
    if v_w = 0 then
        return query
        select c.id, c.document_id, c.chunk_index, d.title, d.source_uri, d.source_type, c.page,
               c.heading_path, c.content, f.vector_rank, f.vector_score, f.keyword_rank,
               f.keyword_score, f.score, f.ord, c.chunk_index, c.chunk_index, c.tenant_id
        from pgrag.fused_candidates(query_text, query_embedding, v_select, v_cand, fusion, rrf_k,
                                    vector_weight, keyword_weight, min_score, mmr_lambda,
                                    language, ef_search, document_ids, metadata_filter,
                                    source_types, created_after, created_before) as f
        join pgrag.chunks as c on c.tenant_id = f.tenant_id and c.id = f.chunk_id
                              and (v_tenant is null or c.tenant_id = v_tenant)
        join pgrag.documents as d on d.tenant_id = c.tenant_id and d.id = c.document_id
        where pgrag.searchable(d.status, c.document_id, d.metadata, c.metadata, d.source_type,
                               d.created_at)
        order by f.ord
        offset v_offset;
        return;
    end if;
    -- Windowed: every fused candidate becomes a hit; hits whose windows touch are merged, so
    -- more hits than match_count are expanded to still fill match_count windows.
    return query
    with f as materialized (
        select * from pgrag.fused_candidates(
            query_text, query_embedding,
            case when mmr_lambda is null then 2 * v_cand
                 else least((v_k + v_offset) * (1 + 2 * v_w), 2000) end,
            v_cand, fusion, rrf_k, vector_weight, keyword_weight, min_score, mmr_lambda,
            language, ef_search, document_ids, metadata_filter, source_types, created_after,
            created_before)
    ),
    w as (
        select * from pgrag.windows(
            (select pg_catalog.array_agg(f.tenant_id order by f.ord) from f),
            (select pg_catalog.array_agg(f.chunk_id order by f.ord) from f),
            v_w,
            (select pg_catalog.array_agg(f.score order by f.ord) from f),
            0.5)
        order by first_hit
        limit v_k + v_offset
    )
    select f.chunk_id, w.document_id, c.chunk_index, w.title, w.source_uri, w.source_type,
           w.page, w.heading_path, w.content, f.vector_rank, f.vector_score, f.keyword_rank,
           f.keyword_score, f.score, pg_catalog.row_number() over (order by w.first_hit),
           w.first_chunk_index, w.last_chunk_index, c.tenant_id
    from w
    join f on f.tenant_id = w.tenant_id and f.chunk_id = w.best_chunk_id
    join pgrag.chunks as c on c.tenant_id = f.tenant_id and c.id = f.chunk_id
                          and (v_tenant is null or c.tenant_id = v_tenant)
    order by w.first_hit
    offset v_offset;
end
$$;
comment on function public.hybrid_search(text, @extschema:vector@.vector, integer, text, integer, double precision, double precision, integer, integer, double precision, double precision, text, integer, bigint[], jsonb, text[], timestamptz, timestamptz, integer) is
'Hybrid search: vector and BM25 arms (candidate_count each, default least(greatest(4 * match_count, 40), 1000); filters inside each arm) fused by weighted min-max normalised scores (fusion => ''weighted'', the default: vector_weight 0.8, keyword_weight 1; docs/benchmarks.md compares the fusions), weighted z-scores (fusion => ''zscore'': each arm''s score minus the mean of its candidates'' scores, divided by their population standard deviation; an arm adds 0 for a chunk it did not return) or reciprocal rank fusion (fusion => ''rrf'', score = sum weight/(rrf_k + rank), rrf_k default 60). Each row carries both arms'' rank and score: vector_score is the cosine similarity (also for rows only the keyword arm found, then vector_rank is null), keyword_score the BM25 score. min_score: minimum cosine similarity to the query. mmr_lambda: MMR re-ranking (null = off). window_size > 0: content becomes the merged +/- window_size neighbours of each hit (see chunk_windows); the row describes the best hit of its window (chunk_id, chunk_index), and first_chunk_index and last_chunk_index the chunks the content spans (without a window both are chunk_index). Limits: match_count 0-1000 and candidate_count 1-1000 (more counts as 1000), window_size 0-10, rrf_k 0-10000, weights 0-100, min_score any number but NaN, mmr_lambda 0-1 (MMR picks at most 500 rows from the best 1,000 candidates), ef_search 1-1000, query_text 10,000 characters and 64 distinct terms, language an existing configuration, query_embedding of the stored dimension and non-zero, filters as vector_search, match_offset 0-1000; else SQLSTATE 22023. Quoted phrases: chunks holding them rank first (docs/sql-api.md, Query syntax). Pages: match_offset skips the first rows of one ranking of the fused candidates, the same for every page of the same match_count and candidate_count, reaching greatest(candidate_count, match_count) rows deep (windows: match_count + match_offset windows; with mmr_lambda the candidates grow with the page); rank counts from its first row.';

create or replace function public.chunk_windows(
    chunk_ids bigint[],
    window_size integer default 1,
    scores double precision[] default null,
    decay double precision default 0.5
)
returns table (
    document_id bigint, first_chunk_index integer, last_chunk_index integer, chunk_ids bigint[],
    content text, page integer, heading_path text[], score double precision,
    title text, source_uri text, hit_chunk_ids bigint[], token_count integer, rank bigint,
    tenant_id text
)
language sql
stable
security invoker
set search_path = pg_catalog, pg_temp
as $$
    -- Argument limits (docs/security.md): SQLSTATE 22023 before any work.
    select pgrag.check_length('chunk_ids', pg_catalog.cardinality(chunk_windows.chunk_ids), 1000),
           pgrag.check_length('scores', pg_catalog.cardinality(chunk_windows.scores), 1000),
           pgrag.check_argument('window_size', chunk_windows.window_size, 0, 10),
           pgrag.check_argument('decay', chunk_windows.decay, 0, 1),
           (select pg_catalog.count(pgrag.check_argument('scores', u.s, -1e6, 1e6))
            from pg_catalog.unnest(chunk_windows.scores) as u(s));

    -- pgrag.windows finds the tenant of each chunk id among the rows the caller may see (this
    -- SQL function reads no table itself: a Citus coordinator could not plan it).
    select w.document_id, w.first_chunk_index, w.last_chunk_index, w.chunk_ids, w.content, w.page,
           w.heading_path, w.score, w.title, w.source_uri, w.hit_chunk_ids, w.token_count,
           pg_catalog.row_number() over (order by w.score desc, w.first_hit), w.tenant_id
    from pgrag.windows(null, chunk_windows.chunk_ids, chunk_windows.window_size,
                       chunk_windows.scores, chunk_windows.decay) as w
    order by w.score desc, w.first_hit
$$;
comment on function public.chunk_windows(bigint[], integer, double precision[], double precision) is
'Expands hits (chunk_ids, best first; scores default 1) with +/- window_size neighbouring chunks of the same document. Overlapping or adjacent windows merge into one row, so no text repeats; each chunk after the first in a window loses its overlap_chars prefix (text the chunker repeated from the previous chunk). score: best hit score * decay^distance over the window. page and heading_path: those of the best hit; token_count: sum of chunks.token_count (an upper bound). Limits: at most 1,000 chunk_ids and scores (finite, within +/- 1e6), window_size 0-10, decay 0-1; else SQLSTATE 22023. Neighbours are read from the rows that exist.';
