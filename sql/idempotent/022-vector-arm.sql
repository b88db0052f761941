-- The vector arm: the nearest ready chunks of a query embedding, filters applied inside.
-- Contract. Provides: pgrag.vector_candidates, returning (tenant_id, chunk_id, distance) best
--   first. Relies on: argument checks and pgrag.current_tenant_id (001-helpers.sql),
--   pgrag.tenant_index_name, pgrag.own_graph_walk_name, pgrag.own_graph_walk_sql and each
--   isolated tenant's walk function (006-vector-isolation.sql), pgrag.searchable and
--   pgrag.distributed (020-search-rows.sql). Callers: the fusion (025-fusion.sql) and the public
--   API (026-api.sql), as the calling role.

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
    v_exact_max bigint := coalesce(
        nullif(pg_catalog.current_setting('pgrag.exact_search_max_rows', true), '')::bigint, 2000);
    v_filtered boolean := metadata_filter is not null or source_types is not null
        or created_after is not null or created_before is not null;
    v_tenants text[];
    v_ids bigint[];
    v_dists double precision[];
    v_exact boolean;
    v_count bigint;
    v_fetch integer;
    v_returned bigint;
    v_outside boolean := false;
    v_unready boolean := true;
    v_rows real;
    v_old_ef text := pg_catalog.current_setting('hnsw.ef_search', true);
    v_old_iter text := pg_catalog.current_setting('hnsw.iterative_scan', true);
    v_old_sort text := pg_catalog.current_setting('enable_sort');
    v_old_seqscan text := pg_catalog.current_setting('enable_seqscan');
    v_share double precision;
    v_clean boolean := false;
    v_public boolean := false;
    v_own_index boolean := false;
    v_own_walk boolean := false;
    v_one_graph boolean := false;
    v_walk text;
    v_scoped boolean;
    v_walks text[];
    v_other text;
    v_sql text;
begin
    -- Plans. The statements here plan to the same scans whatever the variables' values, so
    -- they keep a generic plan, made once per session (the function's setting
    -- force_generic_plan): planning them at every call cost more than running them. The exact
    -- scan needs a custom plan (only the conditions that hold for this caller), planned at every
    -- call with the values, and says so locally (the function's setting restores it on exit).
    -- The walk of a tenant's own graph needs the tenant's key as a constant (its index's
    -- predicate): it runs in the tenant's walk function (pgrag.make_own_graph_walk), whose plan
    -- is kept, or through EXECUTE, planned at the call. On Citus, sql/citus/002-function-settings.sql sets
    -- force_custom_plan instead (a generic plan with the tenant as a parameter would go to
    -- every shard); pgrag.distributed() says which.
    -- Argument checks. Each is a call of a function with its own search_path (a few
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
    -- anon (no tenant, sees public rows only) searches public chunks alone: the partial HNSW
    -- index of public chunks, or an exact scan of them. Walking the graph of every chunk and
    -- letting RLS drop private rows afterwards would make anon's results (how many rows come
    -- back near a private cluster) depend on private data.
    if v_tenant is null and pg_catalog.to_regrole('anon') is not null then
        v_public := case when pg_catalog.pg_has_role('anon', 'USAGE')
                         then not exists (select 1 from pg_catalog.pg_roles as r
                                          where r.rolname = current_user
                                            and (r.rolsuper or r.rolbypassrls))
                         else false end;
    end if;
    -- What the choice of path needs to know about a tenant, read in one statement (each
    -- statement is a search's fixed cost); the function is stable, so every statement here sees
    -- the same snapshot, and these facts hold for the walk below:
    --   * its size: exact search when the rows the caller may see are few (a document-id filter,
    --     or a tenant small enough that scanning it costs less than an HNSW walk that filters
    --     most rows away); the share below uses it too. Read from the corpus statistics as
    --     pgrag.tenant_chunk_count reads them, but in this statement: a call of that SQL function
    --     sets up and runs its own query each time, and cost more than the rest of the statement;
    --   * whether pgrag.isolate_tenant gave it an HNSW graph of its own chunks alone;
    --   * whether it has rows a bulk load kept out of the shared graph
    --     (pgrag.bulk_replace_document_chunks): in its own graph once pgrag.finish_bulk_load
    --     built it; until then, in no graph, so the tenant is scanned exactly (one probe of
    --     chunks_outside_shared_graph tells);
    --   * whether any of its documents is not ready (one probe of documents_not_ready, usually
    --     empty): when none is, every row a walk reaches is searchable;
    --   * the number of chunks of all tenants (planner statistics), for the tenant's share.
    if document_ids is null and v_tenant is not null then
        select (select coalesce(pg_catalog.sum(s.chunk_count), 0)::bigint
                from pgrag.corpus_stats as s
                where s.tenant_id = v_tenant),
               pg_catalog.to_regclass(pg_catalog.format('pgrag.%I', pgrag.tenant_index_name(v_tenant))) is not null,
               exists (select 1 from pgrag.chunks as c
                       where c.tenant_id = v_tenant and not c.in_shared_graph),
               exists (select 1 from pgrag.documents as d
                       where d.tenant_id = v_tenant and d.status <> 'ready'),
               (select c.reltuples from pg_catalog.pg_class as c
                where c.oid = 'pgrag.chunks'::regclass)
        into v_count, v_own_index, v_outside, v_unready, v_rows;
    end if;
    v_exact := document_ids is not null or coalesce(v_count <= v_exact_max, false)
        or (v_outside and not v_own_index);
    v_own_index := v_own_index and not v_exact;
    v_scoped := v_tenant is not null or v_filtered or v_public;

    if not v_exact then
        -- Iterative index scans keep walking the graph until match_count rows pass the tenant
        -- and filter conditions (pgvector 0.8); the relaxed order is re-sorted below.
        perform pg_catalog.set_config('hnsw.iterative_scan',
            case when v_scoped then 'relaxed_order' else 'off' end, true);
        -- Without sorts the HNSW index scan is the only ordered plan: the planner would
        -- otherwise prefer the tenant btree plus a sort of every row of a big tenant (it does not
        -- price reading each out-of-line embedding), which the exact path already covers.
        perform pg_catalog.set_config('enable_sort', 'off', true);
        -- A wider candidate list when rows are filtered after the index walk (800: recall@10
        -- 0.971 for a tenant with 10 % of 100k rows, against 0.928 with 400; see docs).
        -- The tenant's share of all chunks (planner statistics): a tenant holding most rows
        -- loses few to the filter and needs no wider list.
        -- An isolated tenant's own graph, like the public one, holds no other rows.
        if v_own_index or v_public then
            v_share := 1;
        elsif v_tenant is not null then
            v_share := v_count / greatest(v_rows, 1);
        end if;
        -- A graph that holds only rows the caller may see (the tenant's own, the public one, or
        -- the shared one when the tenant holds 95 % of it or more), searched without filters,
        -- loses no rows to a filter: match_count rows are taken from the walk, not 4 x (the
        -- first ef_search rows come in exact order; iterative scans still go on past rows of
        -- documents that are not ready).
        -- A tenant alone in the shared graph also needs no wider candidate list than a plain
        -- HNSW query (twice match_count at least); own and public graphs keep 100 (their
        -- recall is measured with it: docs/benchmarks.md, noisy neighbours).
        v_clean := not v_filtered and coalesce(v_share, 0) >= 0.95;
        perform pg_catalog.set_config('hnsw.ef_search',
            least(greatest(coalesce(vector_candidates.ef_search,
                                    case when v_clean and not v_own_index and not v_public
                                         then greatest(nullif(v_old_ef, '')::integer, 2 * v_k)
                                         when v_filtered or (v_tenant is not null and coalesce(v_share, 0) < 0.25)
                                         then greatest(nullif(v_old_ef, '')::integer, 800)
                                         when v_tenant is not null or v_public
                                         then greatest(nullif(v_old_ef, '')::integer, 100)
                                         else nullif(v_old_ef, '')::integer end,
                                    40), v_k), 1000)::text, true);
        -- Under a filter the relaxed order is only roughly by distance: take 4 x match_count
        -- rows (at least 40), re-sort them by exact distance, keep match_count.
        v_fetch := case when v_scoped and not v_clean then greatest(4 * v_k, 40) else v_k end;
        -- A tenant's walk without filters, returned by one statement (as cheap to plan and run
        -- as a plain HNSW query, plus counting its rows) when it found match_count rows and no
        -- document it reached is not ready: then the walk with the documents joined (below)
        -- would return the very same rows (the same index scan, no row dropped before the
        -- limit). Without filters a document is searchable when it is ready (pgrag.searchable)
        -- and every chunk's document exists, so a probe of documents_not_ready (incremental
        -- 015: only the documents being ingested or failed) tells, and none runs when the
        -- tenant has no such document (read above, same snapshot). Otherwise (a walk that came
        -- back short, the scan budget hnsw.max_scan_tuples spent among other tenants' rows, or
        -- one that reached a document not ready) the statement returns no row, and the general
        -- walk below and the exact fallback answer.
        -- Without a tenant and without filters, the same over a graph whose predicate holds no
        -- variable, so that its plan too is made once per session: anon's, the public graph
        -- (chunks.is_public); any other caller's (service_role, the owner, a session without
        -- claims), the shared graph, when every chunk is in it (no bulk load unfinished: one
        -- probe of chunks_outside_shared_graph; otherwise the general walk below adds the walks
        -- of the rows outside it). These went through the general walk (EXECUTE), planned at
        -- every call: that cost more than the walk, and grew with every index on pgrag.chunks
        -- (each isolated tenant's graph). A statement each for anon and the others, not one
        -- with a branch per graph: a kept plan is made again whenever another role runs it
        -- (row-level security), and a pooled connection serves anon and service_role in turn.
        if v_tenant is null and not v_filtered and not pgrag.distributed() then
            if v_public then
                v_one_graph := true;
                v_unready := exists (select 1 from pgrag.documents as d where d.status <> 'ready');
            else
                select not exists (select 1 from pgrag.chunks as c where not c.in_shared_graph),
                       exists (select 1 from pgrag.documents as d where d.status <> 'ready')
                into v_one_graph, v_unready;
            end if;
        end if;
        if v_one_graph and v_public then
            return query
            with w as materialized (
                select c.tenant_id, c.id as chunk_id, c.document_id,
                       c.embedding operator(@extschema:vector@.<=>) query_embedding as distance
                from pgrag.chunks as c
                where c.embedding is not null
                  and c.is_public
                order by c.embedding operator(@extschema:vector@.<=>) query_embedding
                limit v_fetch
            )
            select w.tenant_id, w.chunk_id, w.distance
            from w
            where (select pg_catalog.count(*) from w) >= v_k
              and not (v_unready and exists (
                           select 1
                           from w as r
                           join pgrag.documents as d
                             on d.tenant_id = r.tenant_id and d.id = r.document_id
                           where d.status <> 'ready'))
            order by w.distance, w.chunk_id
            limit v_k;
        elsif v_one_graph then
            return query
            with w as materialized (
                select c.tenant_id, c.id as chunk_id, c.document_id,
                       c.embedding operator(@extschema:vector@.<=>) query_embedding as distance
                from pgrag.chunks as c
                where c.embedding is not null
                  and c.in_shared_graph
                order by c.embedding operator(@extschema:vector@.<=>) query_embedding
                limit v_fetch
            )
            select w.tenant_id, w.chunk_id, w.distance
            from w
            where (select pg_catalog.count(*) from w) >= v_k
              and not (v_unready and exists (
                           select 1
                           from w as r
                           join pgrag.documents as d
                             on d.tenant_id = r.tenant_id and d.id = r.document_id
                           where d.status <> 'ready'))
            order by w.distance, w.chunk_id
            limit v_k;
        elsif v_tenant is not null and not v_filtered then
            if v_own_index and not pgrag.distributed() then
                -- The tenant's walk function (pgrag.make_own_graph_walk), when it has one the
                -- caller may execute (looked up only here: the other paths pay nothing for it).
                v_walk := pgrag.own_graph_walk_name(v_tenant);
                v_own_walk := coalesce(pg_catalog.has_function_privilege(pg_catalog.to_regproc(
                    pg_catalog.format('pgrag.%I', v_walk)), 'EXECUTE'), false);
            end if;
            if v_own_walk then
                -- Its plan, with the tenant's key written in, is kept for the session; EXECUTE
                -- plans only this call.
                return query execute pg_catalog.format(
                    'select w.tenant_id, w.chunk_id, w.distance from pgrag.%I($1, $2, $3, $4, $5) as w',
                    v_walk)
                using query_embedding, v_fetch, v_k, v_unready, v_tenant;
            elsif v_own_index then
                -- The same statement planned at this call, with the tenant's key and id written
                -- in (Citus, or a graph without its function): it walks a graph whose predicate
                -- names either (one made by an earlier version names the id).
                return query execute pgrag.own_graph_walk_sql(v_tenant, true)
                using query_embedding, v_fetch, v_k, v_unready, v_tenant;
            else
                -- The shared graph's predicate holds no variable: a generic plan walks it too.
                return query
                with w as materialized (
                    select c.tenant_id, c.id as chunk_id, c.document_id,
                           c.embedding operator(@extschema:vector@.<=>) query_embedding as distance
                    from pgrag.chunks as c
                    where c.embedding is not null
                      and c.in_shared_graph
                      and c.tenant_id = v_tenant
                    order by c.embedding operator(@extschema:vector@.<=>) query_embedding
                    limit v_fetch
                )
                select w.tenant_id, w.chunk_id, w.distance
                from w
                where (select pg_catalog.count(*) from w) >= v_k
                  and not (v_unready and exists (
                               select 1
                               from pgrag.documents as d
                               where d.tenant_id = v_tenant
                                 and d.id = any (array(select w.document_id from w))
                                 and d.status <> 'ready'))
                order by w.distance, w.chunk_id
                limit v_k;
            end if;
        end if;
        if v_one_graph or (v_tenant is not null and not v_filtered) then
            -- (Before any other statement: each sets the row count.)
            get diagnostics v_returned = row_count;
            if v_returned > 0 then
                perform pg_catalog.set_config('enable_sort', v_old_sort, true),
                        pg_catalog.set_config('hnsw.ef_search', coalesce(v_old_ef, '40'), true),
                        pg_catalog.set_config('hnsw.iterative_scan', coalesce(v_old_iter, 'off'), true);
                return;
            end if;
        end if;
        -- Each walk's condition matches the predicate of the partial index to walk: the
        -- tenant's own (its key and id as literals, so the planner can prove the predicate
        -- of a graph by key, pgrag.isolate_tenant, or of one an earlier version made by id),
        -- the public one, or the shared one (in_shared_graph).
        v_walks := array[case when v_own_index
                              then pg_catalog.format('pg_catalog.hashtextextended(c.tenant_id, 0) operator(pg_catalog.=) %L::pg_catalog.int8 '
                                                     'and c.tenant_id operator(pg_catalog.=) %L',
                                                     pg_catalog.hashtextextended(v_tenant, 0), v_tenant)
                              when v_tenant is not null
                              then pg_catalog.format('c.tenant_id operator(pg_catalog.=) %L and c.in_shared_graph', v_tenant)
                              when v_public then 'c.is_public'
                              else 'c.in_shared_graph' end];
        -- Without a tenant (service_role, the owner: every tenant), the rows outside the shared
        -- graph too: each such tenant's own graph, or an exact scan of those rows while it has
        -- none (a bulk load not finished). Found by a loose scan of chunks_outside_shared_graph,
        -- one probe per such tenant (a loop of min() queries, not a recursive CTE: a Citus
        -- coordinator plans neither a recursive CTE over a distributed table nor a DISTINCT as
        -- cheaply).
        if v_tenant is null and not v_public then
            v_other := (select pg_catalog.min(c.tenant_id) from pgrag.chunks as c
                        where not c.in_shared_graph);
            while v_other is not null loop
                v_walks := v_walks operator(pg_catalog.||) pg_catalog.format(
                    case when pg_catalog.to_regclass(pg_catalog.format('pgrag.%I', pgrag.tenant_index_name(v_other))) is not null
                         then 'pg_catalog.hashtextextended(c.tenant_id, 0) operator(pg_catalog.=) %2$L::pg_catalog.int8 '
                              'and c.tenant_id operator(pg_catalog.=) %1$L'
                         else 'c.tenant_id operator(pg_catalog.=) %1$L and not c.in_shared_graph' end,
                    v_other, pg_catalog.hashtextextended(v_other, 0));
                v_other := (select pg_catalog.min(c.tenant_id) from pgrag.chunks as c
                            where not c.in_shared_graph and c.tenant_id > v_other);
            end loop;
        end if;
        -- One subquery per walk; a row two walks find (a tenant's row from before it was
        -- isolated is in both graphs) counts once.
        select pg_catalog.format($q$
        select (pg_catalog.array_agg(h.tenant_id order by h.distance, h.chunk_id))[1 : $1],
               (pg_catalog.array_agg(h.chunk_id order by h.distance, h.chunk_id))[1 : $1],
               (pg_catalog.array_agg(h.distance order by h.distance, h.chunk_id))[1 : $1]
        from (
            select u.tenant_id, u.chunk_id, pg_catalog.min(u.distance) as distance
            from (%s) as u
            group by u.tenant_id, u.chunk_id
        ) as h$q$,
            pg_catalog.string_agg(pg_catalog.format($q$(
            select c.tenant_id, c.id as chunk_id,
                   c.embedding operator(@extschema:vector@.<=>) $2 as distance
            from pgrag.chunks as c
            join pgrag.documents as d on d.tenant_id = c.tenant_id and d.id = c.document_id
            where c.embedding is not null
              and pgrag.searchable(d.status, c.document_id, d.metadata, c.metadata,
                                   d.source_type, d.created_at, metadata_filter => $3,
                                   source_types => $4, created_after => $5, created_before => $6)
              and %s
            order by c.embedding operator(@extschema:vector@.<=>) $2
            limit $7)$q$, w.cond), ' union all ' order by w.ord))
        into v_sql
        from pg_catalog.unnest(v_walks) with ordinality as w(cond, ord);
        execute v_sql
        into v_tenants, v_ids, v_dists
        using v_k, query_embedding, metadata_filter, source_types, created_after,
              created_before, v_fetch;
        perform pg_catalog.set_config('enable_sort', v_old_sort, true);
        perform pg_catalog.set_config('hnsw.ef_search', coalesce(v_old_ef, '40'), true);
        perform pg_catalog.set_config('hnsw.iterative_scan', coalesce(v_old_iter, 'off'), true);
        -- Never fewer than match_count rows when that many exist: a filter too selective for
        -- the scan budget (hnsw.max_scan_tuples) falls back to the exact path.
        v_exact := coalesce(pg_catalog.cardinality(v_ids), 0) < v_k and v_scoped;
    end if;

    if v_exact and v_tenant is not null and not v_public and document_ids is null
       and not pgrag.distributed() then
        -- The exact scan of a tenant's rows (a small tenant, or a walk that came back short),
        -- in a plan kept for the session: planned at every call, the scan cost more than it
        -- read (about 3 µs per index of pgrag.chunks, one per isolated tenant: 1.5 ms with 307
        -- indexes, against 0.1 ms of scanning a small tenant). The plan takes the tenant for an
        -- average one, so sequential scans are off while it is made: both tables are then read
        -- through their indexes on the tenant, in proportion to this tenant's rows whatever
        -- the plan. A document-id filter keeps the custom plan below, which reads those
        -- documents' chunks by key.
        perform pg_catalog.set_config('enable_seqscan', 'off', true);
        select pg_catalog.array_agg(h.tenant_id order by h.distance, h.chunk_id),
               pg_catalog.array_agg(h.chunk_id order by h.distance, h.chunk_id),
               pg_catalog.array_agg(h.distance order by h.distance, h.chunk_id)
        into v_tenants, v_ids, v_dists
        from (
            select v.tenant_id, v.chunk_id, v.distance
            from (
                select c.tenant_id, c.id as chunk_id,
                       c.embedding operator(@extschema:vector@.<=>) query_embedding as distance
                from pgrag.chunks as c
                join pgrag.documents as d on d.tenant_id = c.tenant_id and d.id = c.document_id
                where c.embedding is not null
                  and pgrag.searchable(d.status, c.document_id, d.metadata, c.metadata,
                                       d.source_type, d.created_at, null, metadata_filter,
                                       source_types, created_after, created_before)
                  and c.tenant_id = v_tenant
                  and d.tenant_id = v_tenant
                offset 0
            ) as v
            order by v.distance, v.chunk_id
            limit v_k
        ) as h;
        perform pg_catalog.set_config('enable_seqscan', v_old_seqscan, true);
    elsif v_exact then
        perform pg_catalog.set_config('plan_cache_mode', 'force_custom_plan', true);
        select pg_catalog.array_agg(h.tenant_id order by h.distance, h.chunk_id),
               pg_catalog.array_agg(h.chunk_id order by h.distance, h.chunk_id),
               pg_catalog.array_agg(h.distance order by h.distance, h.chunk_id)
        into v_tenants, v_ids, v_dists
        from (
            -- A subquery fenced by OFFSET 0 (not a materialized CTE): the distances stream into a
            -- bounded top-N sort, so no visible set, however large, is stored or spilled to temp
            -- files, and the fence keeps the planner from turning the exact scan into an HNSW walk.
            select v.tenant_id, v.chunk_id, v.distance
            from (
                select c.tenant_id, c.id as chunk_id,
                       c.embedding operator(@extschema:vector@.<=>) query_embedding as distance
                from pgrag.chunks as c
                join pgrag.documents as d on d.tenant_id = c.tenant_id and d.id = c.document_id
                where c.embedding is not null
                  and pgrag.searchable(d.status, c.document_id, d.metadata, c.metadata,
                                       d.source_type, d.created_at, document_ids, metadata_filter,
                                       source_types, created_after, created_before)
                  and (v_tenant is null or c.tenant_id = v_tenant)
                  and (not v_public or (c.is_public and d.is_public))
                offset 0
            ) as v
            order by v.distance, v.chunk_id
            limit v_k
        ) as h;
    end if;

    return query
    select u.t, u.id, u.dist
    from rows from (pg_catalog.unnest(v_tenants), pg_catalog.unnest(v_ids), pg_catalog.unnest(v_dists))
         with ordinality as u(t, id, dist, ord)
    order by u.ord;
end
$$;
comment on function pgrag.vector_candidates(@extschema:vector@.vector, integer, integer, bigint[], jsonb, text[], timestamptz, timestamptz) is
'Vector arm: (tenant_id, chunk_id, cosine distance) of the nearest ready chunks, filters applied inside the search. HNSW with iterative scans, or an exact scan for small visible sets (pgrag.exact_search_max_rows, default 2000) and as a fallback when the index walk returns too few rows. The graph walked holds only rows the caller may see where one exists: anon walks the public chunks'' index (chunks.is_public), a tenant isolated by pgrag.isolate_tenant its own; other tenants above the threshold walk the shared graph.';

