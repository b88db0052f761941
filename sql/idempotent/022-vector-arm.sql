-- The vector arm: the nearest ready chunks of a query embedding, filters applied inside.
-- Contract. Provides: pgrag.vector_sizing (what a caller's search needs) and
--   pgrag.vector_candidates, returning (tenant_id, chunk_id, distance) best first. Relies on:
--   argument checks and pgrag.current_tenant_id (001-helpers.sql), pgrag.tenant_index_name and
--   pgrag.own_graph_walk_name (006-vector-isolation.sql), the walks and exact scans
--   (021-vector-walks.sql), and pgrag.distributed (020-search-rows.sql). Callers: the fusion
--   (026-fusion.sql) and the public API (027-api.sql), as the calling role.
--
-- How each statement is planned, and why: sql/idempotent/README.md, "Plans" (the vector arm).

-- What the arm needs to know about the caller and how it sizes the search, read in one statement
-- (each statement is a search's fixed cost; the function is stable, so it sees the snapshot
-- the walks see, and these facts hold for them):
--   * anon (no tenant, sees public rows only) searches public chunks alone (public_only): the
--     public graph, or an exact scan of them. Walking the graph of every chunk and letting RLS
--     drop private rows would make its results depend on private data;
--   * a tenant's size: exact search when the rows the caller may see are few (a document-id
--     filter, or a tenant small enough that scanning it costs less than an HNSW walk that
--     filters most rows away); read from the corpus statistics (as pgrag.tenant_chunk_count,
--     but within this statement: a call of that function cost more than the rest of it);
--   * whether pgrag.isolate_tenant gave it a graph of its own (and a walk function the caller
--     may execute), and whether a bulk load kept rows of it out of the shared graph: in its own
--     graph once pgrag.finish_bulk_load built it, until then in none (an exact scan);
--   * whether a document of the caller is not ready (documents_not_ready, usually empty): when
--     none is, every row a walk reaches is searchable, and a walk without filters answers alone;
--   * the tenant's share of all chunks (planner statistics): a tenant holding most rows loses
--     few to the filter and needs no wider candidate list.
-- The walk: 'public' (anon), 'shared' (no tenant, every chunk in the shared graph), 'own',
-- 'tenant_shared', each without filters; null for the general walk alone.
create or replace function pgrag.vector_sizing(
    tenant text,
    match_count integer,
    ef_search integer,
    by_document_ids boolean,
    filtered boolean,
    out public_only boolean,
    out chunk_count bigint,
    out own_graph boolean,
    out outside_rows boolean,
    out any_not_ready boolean,
    out share double precision,
    out exact boolean,
    out scoped boolean,
    out walk text,
    out own_walk text,
    out walk_count integer,
    out walk_ef_search integer
)
language plpgsql
stable
security invoker
set search_path = pg_catalog, pg_temp
set plan_cache_mode = force_generic_plan
as $$
declare
    v_exact_max bigint := coalesce(
        nullif(pg_catalog.current_setting('pgrag.exact_search_max_rows', true), '')::bigint, 2000);
    v_ef integer := nullif(pg_catalog.current_setting('hnsw.ef_search', true), '')::integer;
    v_rows real;
    v_clean boolean;
begin
    -- (an API role may call it directly: the bounds of vector_candidates)
    if not coalesce(match_count between 0 and 2000, false) or ef_search not between 1 and 1000 then
        raise exception 'match_count must be 0 to 2000 and ef_search 1 to 1000 (got %, %)',
            match_count, ef_search using errcode = '22023';
    end if;
    public_only := false;
    own_graph := false;
    outside_rows := false;
    any_not_ready := true;
    if tenant is null and pg_catalog.to_regrole('anon') is not null then
        public_only := case when pg_catalog.pg_has_role('anon', 'USAGE')
                            then not exists (select 1 from pg_catalog.pg_roles as r
                                             where r.rolname = current_user
                                               and (r.rolsuper or r.rolbypassrls))
                            else false end;
    end if;
    if not by_document_ids and tenant is not null then
        select (select coalesce(pg_catalog.sum(s.chunk_count), 0)::bigint
                from pgrag.corpus_stats as s
                where s.tenant_id = tenant),
               pg_catalog.to_regclass(pg_catalog.format('pgrag.%I', pgrag.tenant_index_name(tenant))) is not null,
               exists (select 1 from pgrag.chunks as c
                       where c.tenant_id = tenant and not c.in_shared_graph),
               exists (select 1 from pgrag.documents as d
                       where d.tenant_id = tenant and d.status <> 'ready'),
               (select c.reltuples from pg_catalog.pg_class as c
                where c.oid = 'pgrag.chunks'::regclass)
        into chunk_count, own_graph, outside_rows, any_not_ready, v_rows;
    end if;
    exact := by_document_ids or coalesce(chunk_count <= v_exact_max, false)
        or (outside_rows and not own_graph);
    own_graph := own_graph and not exact;
    scoped := tenant is not null or filtered or public_only;
    if exact then
        return;
    end if;
    -- A graph holding only rows the caller may see (its own, the public one, or the shared one
    -- when the tenant holds 95 % of it or more), walked without filters, loses no row to a
    -- filter (clean): match_count rows are taken from the walk, not 4 x (the relaxed order of
    -- a filtered walk is re-sorted), and a tenant alone in the shared graph needs no wider
    -- candidate list than a plain HNSW query (twice match_count at least); own and public
    -- graphs keep 100 (their recall is measured with it: docs/benchmarks.md, noisy neighbours).
    -- A filtered walk, or a tenant under a quarter of the rows, takes 800 (recall@10 0.971 for
    -- a tenant with 10 % of 100k rows, against 0.928 with 400; see docs).
    share := case when own_graph or public_only then 1
                  when tenant is not null then chunk_count / greatest(v_rows, 1) end;
    v_clean := not filtered and coalesce(share, 0) >= 0.95;
    walk_ef_search := least(greatest(coalesce(vector_sizing.ef_search,
        case when v_clean and not own_graph and not public_only then greatest(v_ef, 2 * match_count)
             when filtered or (tenant is not null and coalesce(share, 0) < 0.25) then greatest(v_ef, 800)
             when tenant is not null or public_only then greatest(v_ef, 100)
             else v_ef end,
        40), match_count), 1000);
    walk_count := case when scoped and not v_clean then greatest(4 * match_count, 40) else match_count end;
    -- Without a tenant and without filters, a walk whose plan is kept too: anon's, of the
    -- public graph; any other caller's, of the shared graph when every chunk is in it (no bulk
    -- load unfinished: one probe of chunks_outside_shared_graph). Not on Citus (every statement
    -- is planned there at each call, routed by tenant: the general walk).
    if tenant is null and not filtered and not pgrag.distributed() then
        if public_only then
            walk := 'public';
            any_not_ready := exists (select 1 from pgrag.documents as d where d.status <> 'ready');
        else
            select case when not exists (select 1 from pgrag.chunks as c where not c.in_shared_graph)
                        then 'shared' end,
                   exists (select 1 from pgrag.documents as d where d.status <> 'ready')
            into walk, any_not_ready;
        end if;
    elsif tenant is not null and not filtered then
        walk := case when own_graph then 'own' else 'tenant_shared' end;
        -- The tenant's walk function, when it has one the caller may execute (looked up only
        -- here: the other paths pay nothing for it).
        if own_graph and not pgrag.distributed()
           and pg_catalog.has_function_privilege(pg_catalog.to_regproc(pg_catalog.format(
                   'pgrag.%I', pgrag.own_graph_walk_name(tenant))), 'EXECUTE') then
            own_walk := pgrag.own_graph_walk_name(tenant);
        end if;
    end if;
end
$$;
comment on function pgrag.vector_sizing(text, integer, integer, boolean, boolean) is
'What the vector arm needs to know about a caller (tenant, or null) and how it sizes its search: whether it sees public chunks alone, the tenant''s chunk count, own graph, rows outside the shared graph and documents not ready, its share of all chunks; then whether to scan exactly, whether the walk is scoped (rows it may not see are walked), which walk without filters answers first (public, shared, own, tenant_shared, or none) and the tenant''s walk function, how many rows to walk and hnsw.ef_search.';

create or replace function pgrag.vector_candidates(
    query_embedding @extschema:vector@.vector,
    match_count integer default 10,
    ef_search integer default null,
    document_ids bigint[] default null,
    metadata_filter jsonb default null,
    source_types text[] default null,
    created_after timestamptz default null,
    created_before timestamptz default null
)
returns table (tenant_id text, chunk_id bigint, distance double precision)
language plpgsql
stable
rows 10
security invoker
set search_path = pg_catalog, pg_temp
set plan_cache_mode = force_generic_plan
as $$
#variable_conflict use_column
declare
    v_tenant text := pgrag.current_tenant_id();
    v_k integer := coalesce(pgrag.check_argument('match_count', match_count, 0, 2000, true), 10);
    v_filtered boolean := metadata_filter is not null or source_types is not null
        or created_after is not null or created_before is not null;
    p record;
begin
    -- 1. Argument checks. Each is a call of a function with its own search_path (a few
    -- microseconds); a null argument passes every check, so checks of nulls are not called.
    perform pgrag.check_query_embedding('query_embedding', query_embedding);
    if ef_search is not null then
        perform pgrag.check_argument('ef_search', ef_search, 1, 1000, true);
    end if;
    if document_ids is not null or source_types is not null or metadata_filter is not null then
        perform pgrag.check_filters(document_ids, source_types, metadata_filter);
    end if;
    if query_embedding is null or v_k = 0 then
        return;
    end if;
    -- 2. The caller's facts and the search's size.
    p := pgrag.vector_sizing(v_tenant, v_k, ef_search, document_ids is not null, v_filtered);
    if not p.exact then
        -- 3. The walk of the one graph holding the caller's rows, without filters: match_count
        -- rows, or none (a short walk, a document not ready reached).
        if p.walk is not null then
            if p.walk = 'public' then
                return query select w.* from pgrag.vector_walk_public(
                    query_embedding, p.walk_count, v_k, p.any_not_ready, null, p.walk_ef_search) as w;
            elsif p.walk = 'shared' then
                return query select w.* from pgrag.vector_walk_shared(
                    query_embedding, p.walk_count, v_k, p.any_not_ready, null, p.walk_ef_search) as w;
            elsif p.walk = 'tenant_shared' then
                return query select w.* from pgrag.vector_walk_tenant_shared(
                    query_embedding, p.walk_count, v_k, p.any_not_ready, v_tenant, p.walk_ef_search) as w;
            elsif p.own_walk is not null then
                return query execute pg_catalog.format(
                    'select w.tenant_id, w.chunk_id, w.distance from pgrag.%I($1, $2, $3, $4, $5, $6) as w',
                    p.own_walk)
                using query_embedding, p.walk_count, v_k, p.any_not_ready, v_tenant, p.walk_ef_search;
            else
                return query select w.* from pgrag.vector_walk_own(
                    query_embedding, p.walk_count, v_k, p.any_not_ready, v_tenant, p.walk_ef_search) as w;
            end if;
            if found then
                return;
            end if;
        end if;
        -- 4. The general walk: filters inside, every graph the caller's rows are in; none when
        -- it came back short for a scoped caller.
        return query select w.* from pgrag.vector_walk_general(
            query_embedding, p.walk_count, v_k, p.walk_ef_search, p.scoped, v_tenant,
            p.public_only, p.own_graph, metadata_filter, source_types, created_after,
            created_before) as w;
        if found or not p.scoped then
            return;
        end if;
    end if;
    -- 5. The exact scan (few visible rows, or a walk that came back short).
    if v_tenant is not null and document_ids is null and not pgrag.distributed() then
        return query select e.* from pgrag.vector_exact_tenant(
            query_embedding, v_k, v_tenant, false, null, metadata_filter, source_types,
            created_after, created_before) as e;
    else
        return query select e.* from pgrag.vector_exact(
            query_embedding, v_k, v_tenant, p.public_only, document_ids, metadata_filter,
            source_types, created_after, created_before) as e;
    end if;
end
$$;
comment on function pgrag.vector_candidates(@extschema:vector@.vector, integer, integer, bigint[], jsonb, text[], timestamptz, timestamptz) is
'Vector arm: (tenant_id, chunk_id, cosine distance) of the nearest ready chunks, filters applied inside the search. HNSW with iterative scans, or an exact scan for small visible sets (pgrag.exact_search_max_rows, default 2000) and as a fallback when the index walk returns too few rows. The graph walked holds only rows the caller may see where one exists: anon walks the public chunks'' index (chunks.is_public), a tenant isolated by pgrag.isolate_tenant its own; other tenants above the threshold walk the shared graph.';
