-- The context builder: ranked chunks turned into the numbered [Source N] block an LLM reads.
-- Contract. Provides: public.build_context (hybrid_search's hits as a context) and
--   public.build_context_for (chunks in an order the caller chose, e.g. re-ranked: what
--   pgrag ask --rerank sends), documented in docs/sql-api.md; their names, parameter names and
--   result columns are stable across versions (PostgREST calls them by name). Both assemble the
--   context with one internal step, pgrag.context_from_hits (windows, page range, header, token
--   cost, the fall-back to a window's best hit, the budget, the sources array). Relies on:
--   pgrag.fused_candidates (026-fusion.sql) and pgrag.windows (019-windows.sql), the argument checks
--   (001-helpers.sql), pgrag.chunks under row level security. Callers: anon, authenticated and
--   service_role (910-function-privileges.sql); every function runs as its caller, so
--   row-level security applies, and scopes rows to pgrag.current_tenant_id() when a tenant claim
--   is present. Read-only: runs on a read replica too.
--
-- Plannable by a Citus coordinator as the other search functions are (027-api.sql): PL/pgSQL,
-- and every read of pgrag.chunks says the tenant of the window it reads.

set local search_path = pg_catalog, pg_temp;

create or replace function pgrag.context_from_hits(
    tenant_ids text[],
    chunk_ids bigint[],
    scores double precision[],
    window_size integer,
    token_budget integer,
    match_count integer
)
returns table (context text, sources jsonb)
language plpgsql
stable
security invoker
set search_path = pg_catalog, pg_temp
-- A generic plan (sql/idempotent/README.md, "Plans"): chunks read by key. pgrag.windows sets
-- its own mode.
set plan_cache_mode = force_generic_plan
as $$
#variable_conflict use_column
declare
    -- Argument limits (docs/security.md), those of the API functions calling it (an API role
    -- may call it directly): SQLSTATE 22023 before any work; pgrag.windows checks the hits,
    -- scores and window_size. Null counts as the API's default.
    v_k integer := coalesce(pgrag.check_argument('match_count', match_count, 0, 1000, true), 8);
    v_budget integer := coalesce(pgrag.check_argument('token_budget', token_budget, 0, 1000000), 2000);
    v_used integer := 0;
    v_n integer := 0;
    v_parts text[] := '{}';
    v_sources jsonb := '[]';
    v_header text;
    v_cost integer;
    v_content text;
    v_tokens integer;
    v_index integer;
    v_page_end integer;
    r record;
begin
    for r in
        select w.*
        from pgrag.windows(context_from_hits.tenant_ids, context_from_hits.chunk_ids,
                           context_from_hits.window_size, context_from_hits.scores, 0.5) as w
        order by w.first_hit
    loop
        exit when v_n >= v_k;
        -- Last page of the source: chunks spanning pages record it in metadata.page_end.
        select pg_catalog.max(coalesce(
                   case when c.metadata operator(pg_catalog.->>) 'page_end' operator(pg_catalog.~) '^[0-9]{1,9}$'
                        then (c.metadata operator(pg_catalog.->>) 'page_end')::integer end, c.page))
        into v_page_end
        from pgrag.chunks as c
        where c.tenant_id = r.tenant_id and c.id = any (r.chunk_ids);
        if v_page_end <= r.page then
            v_page_end := null;
        end if;
        v_header := pg_catalog.format('[Source %s] %s', v_n + 1, coalesce(nullif(r.title, ''), '(untitled)'))
            operator(pg_catalog.||) pg_catalog.format(' (%s%s%s)', r.source_uri,
                case when v_page_end is not null then pg_catalog.format(', pages %s-%s', r.page, v_page_end)
                     when r.page is not null then pg_catalog.format(', page %s', r.page) else '' end,
                case when pg_catalog.cardinality(r.heading_path) > 0
                     then ', ' operator(pg_catalog.||) pg_catalog.array_to_string(r.heading_path, ' > ')
                     else '' end);
        -- Tokens: the chunks' own token counts (model tokens, an upper bound when windows strip
        -- overlap), but never less than length/4: token_count is written by whoever inserts the
        -- chunk, and a wrong count must not let a huge text through. The header (paths and
        -- punctuation, about a token per 2 characters) is estimated at length/2.
        v_cost := greatest(coalesce(r.token_count, 0), pg_catalog.ceil(pg_catalog.length(r.content) / 4.0)::integer)
            + pg_catalog.ceil(pg_catalog.length(v_header) / 2.0)::integer + 2;
        if v_used + v_cost > v_budget and r.first_chunk_index < r.last_chunk_index then
            -- The window does not fit: fall back to its best hit alone.
            select c.content, c.token_count, c.chunk_index into v_content, v_tokens, v_index
            from pgrag.chunks as c
            where c.tenant_id = r.tenant_id and c.id = r.best_chunk_id;
            r.content := v_content;
            r.chunk_ids := array[r.best_chunk_id];
            r.first_chunk_index := v_index;
            r.last_chunk_index := v_index;
            v_cost := greatest(coalesce(v_tokens, 0), pg_catalog.ceil(pg_catalog.length(v_content) / 4.0)::integer)
                + pg_catalog.ceil(pg_catalog.length(v_header) / 2.0)::integer + 2;
        end if;
        -- A source that does not fit what is left of the budget is skipped (a later, smaller
        -- one may fit): the context never exceeds token_budget.
        continue when v_used + v_cost > v_budget;
        v_used := v_used + v_cost;
        v_n := v_n + 1;
        v_parts := v_parts operator(pg_catalog.||) (v_header operator(pg_catalog.||) E'\n' operator(pg_catalog.||) r.content);
        v_sources := v_sources operator(pg_catalog.||) pg_catalog.jsonb_build_array(pg_catalog.jsonb_build_object(
            'source', v_n,
            'label', pg_catalog.format('[Source %s]', v_n),
            'document_id', r.document_id,
            'tenant_id', r.tenant_id,
            'title', r.title,
            'source_uri', r.source_uri,
            'source_type', r.source_type,
            'page', r.page,
            'page_end', v_page_end,
            'heading_path', pg_catalog.to_jsonb(r.heading_path),
            'chunk_ids', pg_catalog.to_jsonb(r.chunk_ids),
            'first_chunk_index', r.first_chunk_index,
            'last_chunk_index', r.last_chunk_index,
            'score', r.score,
            'token_count', v_cost));
    end loop;
    context := pg_catalog.array_to_string(v_parts, E'\n\n');
    sources := v_sources;
    return next;
end
$$;
comment on function pgrag.context_from_hits(text[], bigint[], double precision[], integer, integer, integer) is
'The context of build_context and build_context_for: the hits (tenant_ids, chunk_ids in rank order, scores; tenant_ids null: the tenant of each among the chunks the caller may see) windowed by +/- window_size neighbours (pgrag.windows, decay 0.5), in the order of their best hit, as numbered "[Source N] title (uri, page or pages, headings)" blocks within token_budget (a source costs the token_count of its chunks, never less than length/4, plus its header at length/2; a window that does not fit falls back to its best hit alone, a source that still does not fit is skipped), at most match_count; plus sources, a jsonb array of {source, label, document_id, tenant_id, title, source_uri, source_type, page, page_end, heading_path, chunk_ids, first_chunk_index, last_chunk_index, score, token_count}. One row; context '''' and sources ''[]'' without a hit. Limits: token_budget 0-1,000,000 (null: 2000), match_count 0-1000 (more counts as 1000; null: 8), and those of pgrag.windows (at most 2,000 hits, window_size 0-10, scores finite within +/- 1e6); else SQLSTATE 22023.';

create or replace function public.build_context(
    query_text text,
    query_embedding @extschema:vector@.vector,
    token_budget integer default 2000,
    match_count integer default 8,
    min_score double precision default 0.3,
    window_size integer default 0,
    mmr_lambda double precision default null,
    document_ids bigint[] default null,
    metadata_filter jsonb default null,
    source_types text[] default null,
    created_after timestamptz default null,
    created_before timestamptz default null
)
returns table (context text, sources jsonb)
language plpgsql
stable
security invoker
set search_path = pg_catalog, pg_temp
-- A generic plan (sql/idempotent/README.md, "Plans"). The functions it calls set their own modes.
set plan_cache_mode = force_generic_plan
as $$
#variable_conflict use_column
declare
    -- Argument limits (docs/security.md): SQLSTATE 22023 before any work; fused_candidates
    -- checks the other arguments.
    v_k integer := coalesce(pgrag.check_argument('match_count', match_count, 0, 1000, true), 8);
    v_w integer := coalesce(pgrag.check_argument('window_size', window_size, 0, 10), 0);
    v_budget integer := coalesce(pgrag.check_argument('token_budget', token_budget, 0, 1000000), 2000);
    v_tenants text[];
    v_ids bigint[];
    v_scores double precision[];
begin
    perform pgrag.check_query_embedding('query_embedding', query_embedding);
    perform pgrag.check_length('query_text', pg_catalog.length(query_text), 10000, 'characters');
    -- The fused hits, enough for match_count windows, as arrays in rank order.
    select pg_catalog.array_agg(f.tenant_id order by f.ord), pg_catalog.array_agg(f.chunk_id order by f.ord),
           pg_catalog.array_agg(f.score order by f.ord)
    into v_tenants, v_ids, v_scores
    from pgrag.fused_candidates(
        query_text, query_embedding, least(v_k * (1 + 2 * v_w) * 2, 2000),
        least(greatest(v_k * 4, 40), 1000),
        null, null, null, null, min_score, mmr_lambda, null, null, document_ids,
        metadata_filter, source_types, created_after, created_before) as f;
    return query
        select c.context, c.sources
        from pgrag.context_from_hits(v_tenants, v_ids, v_scores, v_w, v_budget, v_k) as c;
end
$$;
comment on function public.build_context(text, @extschema:vector@.vector, integer, integer, double precision, integer, double precision, bigint[], jsonb, text[], timestamptz, timestamptz) is
'Context for an LLM: hybrid_search results with its default fusion (weighted: keyword 1, vector 0.8), optionally windowed and MMR-diversified, as numbered "[Source N] title (uri, page, headings)" blocks within token_budget (a source costs the token_count of its chunks, never less than length/4, plus its header at length/2; sources that do not fit are skipped), plus sources: a jsonb array of {source, label, document_id, tenant_id, title, source_uri, page, page_end, heading_path, chunk_ids, score, ...}. One row; context '''' and sources ''[]'' when nothing passes min_score (cosine similarity floor; default 0.3, null for none). Limits: token_budget 0-1,000,000, match_count 0-1000 (more counts as 1000), window_size 0-10, min_score any number but NaN, mmr_lambda 0-1, query_text and filters as hybrid_search; else SQLSTATE 22023.';

create or replace function public.build_context_for(
    chunk_ids bigint[],
    scores double precision[] default null,
    token_budget integer default 2000,
    match_count integer default 8,
    window_size integer default 0
)
returns table (context text, sources jsonb)
language plpgsql
stable
security invoker
set search_path = pg_catalog, pg_temp
set plan_cache_mode = force_generic_plan
as $$
#variable_conflict use_column
declare
    -- Argument limits (docs/security.md): SQLSTATE 22023 before any work; pgrag.windows checks
    -- chunk_ids and scores (at most 2,000, scores finite).
    v_k integer := coalesce(pgrag.check_argument('match_count', match_count, 0, 1000, true), 8);
    v_w integer := coalesce(pgrag.check_argument('window_size', window_size, 0, 10), 0);
    v_budget integer := coalesce(pgrag.check_argument('token_budget', token_budget, 0, 1000000), 2000);
begin
    if chunk_ids is null then
        raise exception 'chunk_ids must not be null'
            using errcode = '22023',
                  hint = 'pgrag''s argument limits are listed in docs/security.md.';
    end if;
    -- The chunks in the order given (e.g. re-ranked); pgrag.windows leaves out those the caller
    -- cannot see (row level security; a tenant: its own chunks, as chunk_windows).
    return query
        select c.context, c.sources
        from pgrag.context_from_hits(null, build_context_for.chunk_ids, build_context_for.scores,
                                     v_w, v_budget, v_k) as c;
end
$$;
comment on function public.build_context_for(bigint[], double precision[], integer, integer, integer) is
'build_context''s [Source N] block and sources for chunks chosen by the caller, in the order given (e.g. hybrid_search''s candidates re-ordered by public.rerank or a re-rank API): each chunk windowed by +/- window_size neighbours (pgrag.windows), sources kept in that order within token_budget as build_context keeps them (a source that does not fit is skipped; a window that does not fit falls back to its chunk), at most match_count; score is the one given for the chunk (scores, e.g. the re-ranker''s), else null. Ids the caller cannot see are left out (row level security; with a tenant, only its own chunks, as chunk_windows). Limits: chunk_ids not null, at most 2,000, scores finite within +/- 1,000,000, token_budget 0-1,000,000, match_count 0-1000 (more counts as 1000), window_size 0-10; else SQLSTATE 22023.';
