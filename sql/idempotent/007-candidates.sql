-- Candidate generation: the rows a search may return, the vector arm and the keyword arm.
-- Contract. Provides: pgrag.searchable (ready documents and the filters, for every search);
--   pgrag.vector_candidates and pgrag.keyword_candidates, each returning (tenant_id, chunk_id,
--   distance or score) best first with every filter applied inside the arm; and
--   pgrag.tenant_chunk_count. Relies on: argument checks and pgrag.current_tenant_id
--   (001-helpers.sql), pgrag.keyword_query (005-text-search.sql), pgrag.tenant_index_name,
--   pgrag.own_graph_walk_name, pgrag.own_graph_walk_sql and each isolated tenant's walk
--   function (006-vector-isolation.sql), the BM25 tables (002-bm25-maintenance.sql keeps them).
--   Callers: the fusion (008-fusion.sql) and the public API (009-api.sql), as the calling role.

-- What a search may return, written once: a chunk of a ready document that passes the five
-- filters. Every search statement (both arms, windows, the public API) joins pgrag.chunks c to
-- pgrag.documents d on (tenant_id, document_id) and calls this in its WHERE clause with their
-- columns; the planner inlines it, so the filters reach the scans (index conditions, filters in
-- the documents scan) as if written there; tests/test_retrieval.py checks the plans. Inlining
-- needs language sql, one expression, not strict, no security definer and no SET clause: so this
-- is the one pgrag function that does not pin search_path. Every name and operator in its body
-- is schema-qualified instead (pgspot checks it; the Makefile exempts this function from PS005).
-- The tables are named in each statement, not read inside a set-returning function (as the
-- earlier pgrag.ready_chunks did): a Citus coordinator decides whether a statement is
-- distributed before PostgreSQL inlines functions, and refuses a statement whose distributed
-- tables only appear once a function is inlined.
create or replace function pgrag.searchable(
    status text,
    document_id bigint,
    document_metadata jsonb,
    chunk_metadata jsonb,
    source_type text,
    created_at timestamptz,
    document_ids bigint[] default null,
    metadata_filter jsonb default null,
    source_types text[] default null,
    created_after timestamptz default null,
    created_before timestamptz default null
)
returns boolean
language sql
immutable
parallel safe
security invoker
as $$
    select searchable.status operator(pg_catalog.=) 'ready'
       and (searchable.document_ids is null
            or searchable.document_id operator(pg_catalog.=) any (searchable.document_ids))
       and (searchable.metadata_filter is null
            or (searchable.document_metadata operator(pg_catalog.||) searchable.chunk_metadata)
               operator(pg_catalog.@>) searchable.metadata_filter)
       and (searchable.source_types is null
            or searchable.source_type operator(pg_catalog.=) any (searchable.source_types))
       and (searchable.created_after is null
            or searchable.created_at operator(pg_catalog.>=) searchable.created_after)
       and (searchable.created_before is null
            or searchable.created_at operator(pg_catalog.<) searchable.created_before)
$$;
comment on function pgrag.searchable(text, bigint, jsonb, jsonb, text, timestamptz, bigint[], jsonb, text[], timestamptz, timestamptz) is
'Whether a search may return a chunk, from its document''s status, document_id, metadata, source_type and created_at and its own metadata: the document is ready and the filters pass (document_ids; metadata_filter: jsonb containment over document || chunk metadata; source_types; created_after/before: the document''s created_at). Null filters pass everything. Inlined by the planner into the calling query (no SET clause, every name qualified), so the filters reach the scans. Reads no table.';

-- Earlier versions read the chunks of ready documents through a set-returning function, which a
-- Citus coordinator cannot plan (above); pgrag.searchable replaces it.
drop function if exists pgrag.ready_chunks(bigint[], jsonb, text[], timestamptz, timestamptz, boolean);

create or replace function pgrag.tenant_chunk_count(tenant text)
returns bigint
language sql
stable
security invoker
parallel safe
set search_path = pg_catalog, pg_temp
as $$
    select coalesce(pg_catalog.sum(s.chunk_count), 0)::bigint
    from pgrag.corpus_stats as s
    where s.tenant_id = tenant
$$;
comment on function pgrag.tenant_chunk_count(text) is
'Number of chunks of a tenant, from the sharded corpus statistics (used to pick exact or HNSW search).';
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
    -- The function's plan_cache_mode (see the body).
    v_plans text := pg_catalog.current_setting('plan_cache_mode');
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
    -- every shard); v_plans holds the function's setting.
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
        if v_tenant is null and not v_filtered and v_plans = 'force_generic_plan' then
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
            if v_own_index and v_plans = 'force_generic_plan' then
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
       and v_plans = 'force_generic_plan' then
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
-- Generic plans, made once per session (sql/idempotent/README.md, "Plans"), but for the
-- statements on the BM25 tables, planned at every call with the values (the body says so): the
-- postings of the query's lexemes are found by an index scan per lexeme only when the planner
-- sees the lexemes and the tenant (a generic plan scanned every posting of the tenant, hundreds
-- of times slower). For a caller without a tenant the walk over the ranking is custom too. The
-- walk of a caller with a tenant keeps its generic plan: its form fixes the plan (the body says
-- how), and planning it at every call cost more with every isolated tenant's index on
-- pgrag.chunks. On Citus, sql/citus/002-function-settings.sql sets force_custom_plan instead
-- (v_plans holds the function's setting): every statement custom, the walk in its other form.
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
    v_n double precision;
    v_total double precision;
    v_avgdl double precision;
    v_q record;
    v_tenants text[];
    v_scored text;
    v_lex text[];
    v_idf double precision[];
    v_pos tsquery;
    v_neg tsquery;
    v_tids text[];
    v_ids bigint[];
    v_scores double precision[];
    v_limit integer;
    v_more boolean;
    v_batch integer;
    v_off integer := 0;
    v_found integer := 0;
    v_rows integer;
    v_df double precision[];
    v_max_tf integer[];
    v_min_dl integer[];
    v_ub double precision[];
    v_nidx bigint[];
    v_elex text[];
    v_eidf double precision[];
    v_nlex text[];
    v_nidf double precision[];
    v_c1 double precision;
    v_c2 double precision;
    v_prune boolean;
    v_m integer;
    v_rare integer;
    v_sum double precision;
    v_theta double precision;
    v_bound double precision;
    v_cand bigint[];
    v_part double precision[];
    v_seen bigint[];
    v_cut double precision;
    v_mode text := coalesce(nullif(pg_catalog.current_setting('pgrag.keyword_pruning', true), ''), 'auto');
    v_plans text := pg_catalog.current_setting('plan_cache_mode');
    v_order integer[];
    v_i integer;
    v_rest double precision;
begin
    perform pgrag.check_length('query_text', pg_catalog.length(query_text), 10000, 'characters');
    perform pgrag.check_filters(document_ids, source_types, metadata_filter);
    if coalesce(query_text, '') = '' or v_k = 0 then
        return;
    end if;
    -- Text-search configuration: the one asked for (v_config), else the tenant's most common
    -- chunk language.
    -- The tenants searched: the caller's, or every tenant the caller may see (RLS applies to
    -- corpus_stats too); an array keeps one plan shape for both, with index conditions.
    if v_tenant is not null then
        v_tenants := array[v_tenant];
    else
        -- (Tenants whose chunks were all deleted keep their statistics' rows, at zero.)
        select pg_catalog.array_agg(t.tenant_id) into v_tenants
        from (select s.tenant_id
              from pgrag.corpus_stats as s
              group by s.tenant_id
              having pg_catalog.sum(s.chunk_count) > 0) as t;
    end if;
    -- The tenant whose postings the pruned evaluation reads (its term bounds are per tenant):
    -- the caller's, or, without a tenant, the only one the caller sees (a single-tenant
    -- installation searched from psql, as its owner).
    v_scored := coalesce(v_tenant,
                         case when pg_catalog.cardinality(v_tenants) = 1 then v_tenants[1] end);
    select pg_catalog.sum(s.chunk_count), pg_catalog.sum(s.token_count)
    into v_n, v_total
    from pgrag.corpus_stats as s
    where s.tenant_id = any (v_tenants);
    if coalesce(v_n, 0) <= 0 then
        return;
    end if;
    if v_config is null then
        select s.language::regconfig into v_config
        from pgrag.corpus_stats as s
        where s.tenant_id = any (v_tenants)
        group by s.language
        order by pg_catalog.sum(s.chunk_count) desc, s.language
        limit 1;
    end if;
    v_avgdl := greatest(v_total / v_n, 1e-9);
    select * into v_q from pgrag.keyword_query(query_text, coalesce(v_config, 'english'::regconfig));
    if pg_catalog.cardinality(v_q.lexemes) = 0 then
        return;
    end if;

    -- Custom plans from here to the walk, for the statements on the BM25 tables (the function's
    -- setting restores the caller's on exit). Those above read by key and keep generic plans.
    perform pg_catalog.set_config('plan_cache_mode', 'force_custom_plan', true);
    -- Document frequency of each query lexeme: the sum of its sharded counters; and the term
    -- bounds of its postings (largest tf, shortest chunk; null when unknown).
    -- (Grouped, not an aggregate per lexeme in a lateral subquery, which Citus cannot push
    -- down to the shards of several tenants.)
    with d as materialized (
        select y.lexeme, pg_catalog.sum(y.df)::double precision as df,
               pg_catalog.max(y.max_tf) as max_tf, pg_catalog.min(y.min_doc_len) as min_doc_len
        from pgrag.bm25_lexicon as y
        where y.tenant_id = any (v_tenants) and y.lexeme = any (v_q.lexemes)
        group by y.lexeme
    )
    -- Rarest first: the order the pruned evaluation below takes the lexemes in.
    select pg_catalog.array_agg(d.lexeme order by d.df, d.lexeme),
           pg_catalog.array_agg(pg_catalog.ln(1 + (v_n - d.df + 0.5) / (d.df + 0.5)) order by d.df, d.lexeme),
           pg_catalog.array_agg(d.df order by d.df, d.lexeme),
           pg_catalog.array_agg(d.max_tf order by d.df, d.lexeme),
           pg_catalog.array_agg(d.min_doc_len order by d.df, d.lexeme)
    into v_lex, v_idf, v_df, v_max_tf, v_min_dl
    from d
    where d.df > 0;
    if v_lex is null then
        return;
    end if;
    -- Single-word clauses are satisfied by every chunk holding a scored lexeme: the tsquery
    -- check is needed only for phrases (<->, <N>) and exclusions.
    if v_q.positive::text operator(pg_catalog.~) '<[-0-9]' then
        v_pos := v_q.positive;
    end if;
    v_neg := v_q.negative;

    v_limit := greatest(4 * v_k, 200);
    -- The term part tf / (tf + k1 (1 - b + b dl / avgdl)) as tf / (tf + c1 + c2 dl).
    v_c1 := v_k1 * (1 - v_b);
    v_c2 := v_k1 * v_b / v_avgdl;
    v_m := pg_catalog.cardinality(v_lex);
    -- Pruned evaluation (exact; docs/benchmarks.md "Exact BM25 that reads fewer postings"): for
    -- a search of one tenant's rows (v_scored) without filters, over enough postings to be
    -- worth it. Phrases and
    -- exclusions drop ranked chunks in the walk: for them the pruned evaluation hands the walk
    -- every candidate it has proved in rank order (step 5), not only the top k. The setting
    -- pgrag.keyword_pruning: auto (default: 20,000 postings or more, and step 2's estimate of
    -- its cost), on (whenever the bounds leave a lexeme out), off (never). Same results either
    -- way.
    v_prune := v_scored is not null and v_m >= 2
        and document_ids is null and metadata_filter is null and source_types is null
        and created_after is null and created_before is null
        and case v_mode
                 when 'off' then false
                 when 'on' then true
                 else (select pg_catalog.sum(x) from pg_catalog.unnest(v_df) as x) >= 20000 end;
    if v_prune then
        -- 1. A floor theta under the k-th best score: the 2 v_k best chunks by the rarest
        --    lexemes (their postings within 5,000 and a quarter of all, at least one lexeme),
        --    scored in full; the
        --    k-th best of any real scores bounds the k-th best of all from below.
        v_rare := 1;
        v_sum := v_df[1];
        while v_rare < v_m and v_sum + v_df[v_rare + 1]
              <= least(5000, 0.25 * (select pg_catalog.sum(x) from pg_catalog.unnest(v_df) as x)) loop
            v_rare := v_rare + 1;
            v_sum := v_sum + v_df[v_rare];
        end loop;
        if v_rare < v_m then
            select pg_catalog.array_agg(r.chunk_id order by r.chunk_id) into v_cand
            from (
                select p.chunk_id
                from rows from (pg_catalog.unnest(v_lex[1 : v_rare]), pg_catalog.unnest(v_idf[1 : v_rare])) as t(lexeme, idf)
                cross join lateral (
                    select p.chunk_id, p.tf, p.doc_len
                    from pgrag.bm25_postings as p
                    where p.tenant_id = v_scored and p.lexeme = t.lexeme
                    offset 0
                ) as p
                group by p.chunk_id
                order by pg_catalog.sum(t.idf * p.tf / (p.tf + v_c1 + v_c2 * p.doc_len)) desc, p.chunk_id
                limit 2 * v_k
            ) as r;
            if coalesce(pg_catalog.cardinality(v_cand), 0) >= v_k then
                select pg_catalog.min(r.score) into v_theta
                from (
                    select pg_catalog.sum(t.idf * p.tf / (p.tf + v_c1 + v_c2 * p.doc_len)) as score
                    from rows from (pg_catalog.unnest(v_lex), pg_catalog.unnest(v_idf)) as t(lexeme, idf)
                    cross join lateral (
                        select p.chunk_id, p.tf, p.doc_len
                        from pgrag.bm25_postings as p
                        where p.tenant_id = v_scored and p.lexeme = t.lexeme
                          and p.chunk_id = any (v_cand)
                        offset 0
                    ) as p
                    group by p.chunk_id
                    order by 1 desc
                    limit v_k
                ) as r;
            end if;
        end if;
        -- 2. Essential lexemes. A lexeme adds at most its bound to a chunk's score: idf times
        --    the term part of its largest tf in its shortest chunk (the part grows with tf and
        --    shrinks with length), or idf alone when the bounds are unknown (the part is below
        --    1). The lexemes of smallest bound whose bounds sum below theta cannot lift a chunk
        --    holding none of the others to theta: only chunks holding an essential lexeme (one
        --    of the others) can be in the top v_k.
        select pg_catalog.array_agg(u.idf * coalesce(u.tf::double precision / (u.tf + v_c1 + v_c2 * u.dl), 1)
                                    order by u.i)
        into v_ub
        from rows from (pg_catalog.unnest(v_idf), pg_catalog.unnest(v_max_tf), pg_catalog.unnest(v_min_dl))
             with ordinality as u(idf, tf, dl, i);
        if v_theta is not null then
            select pg_catalog.array_agg(r.i), pg_catalog.max(r.run)
            into v_nidx, v_bound
            from (
                select u.i, pg_catalog.sum(u.ub) over (order by u.ub, u.i) as run
                from pg_catalog.unnest(v_ub) with ordinality as u(ub, i)
            ) as r
            where r.run * (1 + 1e-9) < v_theta;
        end if;
        select pg_catalog.array_agg(u.lexeme order by u.i) filter (where not u.skip),
               pg_catalog.array_agg(u.idf order by u.i) filter (where not u.skip),
               pg_catalog.array_agg(u.lexeme order by u.i) filter (where u.skip),
               pg_catalog.array_agg(u.idf order by u.i) filter (where u.skip),
               pg_catalog.sum(u.df) filter (where not u.skip) <= 0.5 * pg_catalog.sum(u.df)
               and coalesce(pg_catalog.sum(u.df) filter (where not u.skip and u.idf / (1 + v_k1) >= v_theta - v_bound), 0)
                   <= 0.25 * pg_catalog.sum(u.df)
        into v_elex, v_eidf, v_nlex, v_nidf, v_prune
        from (
            select l.lexeme, l.idf, l.df, l.i, coalesce(l.i = any (v_nidx), false) as skip
            from rows from (pg_catalog.unnest(v_lex), pg_catalog.unnest(v_idf), pg_catalog.unnest(v_df))
                 with ordinality as l(lexeme, idf, df, i)
        ) as u;
        -- Worth it only when the essential lexemes hold at most half the postings, and when few
        -- of their chunks stay candidates (step 3): a chunk holding an essential lexeme once, at
        -- the average length, has the partial score idf / (1 + k1); where that reaches the gap
        -- theta - v_bound, most of that lexeme's chunks stay, and when those hold more than a
        -- quarter of the postings the candidates are too many: steps 4 and 5 would cost about
        -- what the full scan does (measured on both corpora of benchmarks/latency.py, a tenth to
        -- a half: a quarter did best; docs/benchmarks.md). Setting on skips both checks (tests
        -- compare the pruned and full rankings on small corpora).
        v_prune := (coalesce(v_prune, false) or v_mode = 'on') and v_nlex is not null;
        if v_prune then
            raise debug 'pgrag.keyword_candidates: pruned evaluation, % of % lexemes essential',
                pg_catalog.cardinality(v_elex), v_m;
        end if;
    end if;
    if v_prune then
        -- The other lexemes, largest bound first (step 5's order), and the sum of their bounds
        -- after the first.
        select pg_catalog.array_agg(u.i::integer order by v_ub[u.i::integer] desc, u.i) into v_order
        from pg_catalog.unnest(v_nidx) as u(i);
        select coalesce(pg_catalog.sum(v_ub[x.i]), 0) into v_rest
        from pg_catalog.unnest(v_order[2 :]) as x(i);
        -- Steps 3, 4 and the first lexeme of step 5 in one statement, the candidates passed
        -- between them as rows, not arrays. Ids for "chunk_id = any (...)" are given sorted:
        -- the index scan sorts the array itself, which takes far longer when it is not
        -- (tens of milliseconds for 44,000 ids at 100k chunks, under EXPLAIN ANALYZE).
        -- 3. Chunks holding an essential lexeme, their partial score, kept when it plus the
        --    bound of the rest can reach theta (c).
        -- 4. A higher theta: when they are more than 4 v_k, the 4 v_k best of them by partial
        --    score, scored in full (probes, one index scan per other lexeme), their v_k-th best
        --    score (the other lexemes often add much to a chunk's partial score: more than the
        --    v_k best partial scores come closer to the real k-th best) (h). Then only
        --    candidates that can still reach it (f).
        -- 5, first: the other lexeme of largest bound added to those (below).
        with c as materialized (
            select p.chunk_id, pg_catalog.sum(t.idf * p.tf / (p.tf + v_c1 + v_c2 * p.doc_len)) as part
            from rows from (pg_catalog.unnest(v_elex), pg_catalog.unnest(v_eidf)) as t(lexeme, idf)
            cross join lateral (
                select p.chunk_id, p.tf, p.doc_len
                from pgrag.bm25_postings as p
                where p.tenant_id = v_scored and p.lexeme = t.lexeme
                offset 0
            ) as p
            group by p.chunk_id
            having (pg_catalog.sum(t.idf * p.tf / (p.tf + v_c1 + v_c2 * p.doc_len)) + v_bound) * (1 + 1e-9) >= v_theta
        ), b as materialized (
            select c.chunk_id, c.part
            from c
            where (select pg_catalog.count(*) from (select from c limit 4 * v_k + 1) as x) > 4 * v_k
            order by c.part desc, c.chunk_id
            limit 4 * v_k
        ), h as materialized (
            select coalesce(pg_catalog.max(greatest(v_theta, r.score)), v_theta) as theta
            from (
                select b.part + coalesce(o.s, 0) as score
                from b
                left join (
                    select p.chunk_id, pg_catalog.sum(t.idf * p.tf / (p.tf + v_c1 + v_c2 * p.doc_len)) as s
                    from rows from (pg_catalog.unnest(v_nlex), pg_catalog.unnest(v_nidf)) as t(lexeme, idf)
                    cross join lateral (
                        select p.chunk_id, p.tf, p.doc_len
                        from pgrag.bm25_postings as p
                        where p.tenant_id = v_scored and p.lexeme = t.lexeme
                          and p.chunk_id = any (array(select b.chunk_id from b order by b.chunk_id))
                        offset 0
                    ) as p
                    group by p.chunk_id
                ) as o on o.chunk_id = b.chunk_id
                order by 1 desc
                offset v_k - 1
                limit 1
            ) as r
        ), f as materialized (
            select c.chunk_id, c.part
            from c
            where (c.part + v_bound) * (1 + 1e-9) >= (select h.theta from h)
        )
        select pg_catalog.array_agg(f.chunk_id order by f.chunk_id),
               pg_catalog.array_agg(f.part + coalesce(o.s, 0) order by f.chunk_id),
               (select h.theta from h)
        into v_cand, v_part, v_theta
        from f
        left join (
            select p.chunk_id, v_idf[v_order[1]] * p.tf / (p.tf + v_c1 + v_c2 * p.doc_len) as s
            from pgrag.bm25_postings as p
            where p.tenant_id = v_scored and p.lexeme = v_lex[v_order[1]]
              and p.chunk_id = any (array(select f.chunk_id from f order by f.chunk_id))
        ) as o on o.chunk_id = f.chunk_id
        where (f.part + coalesce(o.s, 0) + v_rest) * (1 + 1e-9) >= (select h.theta from h);
        -- 5. Their full scores, MaxScore's way: the other lexemes one at a time, largest bound
        --    first, each by one index scan over the candidates left (primary-key probes in
        --    chunk_id order); after each, only the candidates whose score so far plus the bounds
        --    of the lexemes still to add can reach theta stay (a chunk lacking a lexeme of large
        --    bound seldom does). Then the exact top v_k: every chunk left out scores below theta,
        --    at most the k-th best. With phrases or exclusions, whose check in the walk may drop
        --    some of these, every candidate scoring v_cut or more instead (at most v_limit):
        --    every chunk left out scores below theta / (1 + 1e-9), rounded below v_cut, so these
        --    are the start of the full ranking, whatever the walk drops.
        v_cut := case when v_pos is not null or v_neg is not null then v_theta / (1 + 1e-9) + 1e-9 end;
        for v_i in 2 .. pg_catalog.cardinality(v_order) loop
            exit when coalesce(pg_catalog.cardinality(v_cand), 0) = 0;
            select coalesce(pg_catalog.sum(v_ub[x.i]), 0) into v_rest
            from pg_catalog.unnest(v_order[v_i + 1 :]) as x(i);
            select pg_catalog.array_agg(c.chunk_id order by c.chunk_id),
                   pg_catalog.array_agg(c.part + coalesce(o.s, 0) order by c.chunk_id)
            into v_cand, v_part
            from rows from (pg_catalog.unnest(v_cand), pg_catalog.unnest(v_part)) as c(chunk_id, part)
            left join (
                select p.chunk_id, v_idf[v_order[v_i]] * p.tf / (p.tf + v_c1 + v_c2 * p.doc_len) as s
                from pgrag.bm25_postings as p
                where p.tenant_id = v_scored and p.lexeme = v_lex[v_order[v_i]] and p.chunk_id = any (v_cand)
            ) as o on o.chunk_id = c.chunk_id
            where (c.part + coalesce(o.s, 0) + v_rest) * (1 + 1e-9) >= v_theta;
        end loop;
        select pg_catalog.array_agg(v_scored order by r.score desc, r.chunk_id),
               pg_catalog.array_agg(r.chunk_id order by r.score desc, r.chunk_id),
               pg_catalog.array_agg(r.score order by r.score desc, r.chunk_id)
        into v_tids, v_ids, v_scores
        from (
            select c.chunk_id, pg_catalog.round(c.part * 1e9::double precision) / 1e9::double precision as score
            from rows from (pg_catalog.unnest(v_cand), pg_catalog.unnest(v_part)) as c(chunk_id, part)
            order by 2 desc, 1
            limit case when v_cut is null then v_k else v_limit end
        ) as r
        where v_cut is null or r.score >= v_cut;
        -- The walk below takes these; should it need more (rows of documents not ready,
        -- exclusions), the full ranking follows, without the chunks already walked.
        v_limit := coalesce(pg_catalog.cardinality(v_ids), 0);
        v_more := true;
    end if;
    loop
        if not v_prune and v_scored is not null then
        -- Okapi BM25 of every chunk holding a query lexeme (one index-only range scan per
        -- lexeme), best v_limit first (then all of them if the walk below needs more).
        -- Scores are rounded to 1e-9: a sum of floats depends on the order of its terms, which
        -- plans (and the pruned evaluation above) do not fix; rounded, equal scores stay equal
        -- and ties keep one order (chunk_id) whichever way a chunk was scored.
        -- Each lexeme's postings in a fenced subquery: row-level security adds a condition on
        -- the tenant whose value the planner cannot know, so it takes the tenant's postings for
        -- a few hundredth of what they are, and a plain join read all of a tenant's postings
        -- and kept the query's. Over several tenants (a caller without one) the plain join
        -- below: Citus cannot run the fenced form for several tenants.
        select pg_catalog.array_agg(s.tenant_id order by s.score desc, s.chunk_id),
               pg_catalog.array_agg(s.chunk_id order by s.score desc, s.chunk_id),
               pg_catalog.array_agg(s.score order by s.score desc, s.chunk_id)
        into v_tids, v_ids, v_scores
        from (
            select v_scored as tenant_id, p.chunk_id,
                   pg_catalog.round(pg_catalog.sum(t.idf * p.tf / (p.tf + v_c1 + v_c2 * p.doc_len)) * 1e9::double precision) / 1e9::double precision as score
            from rows from (pg_catalog.unnest(v_lex), pg_catalog.unnest(v_idf)) as t(lexeme, idf)
            cross join lateral (
                select p.chunk_id, p.tf, p.doc_len
                from pgrag.bm25_postings as p
                where p.tenant_id = v_scored and p.lexeme = t.lexeme
                offset 0
            ) as p
            group by p.chunk_id
            order by 3 desc, p.chunk_id
            limit v_limit + 1
        ) as s;
        elsif not v_prune then
        select pg_catalog.array_agg(s.tenant_id order by s.score desc, s.chunk_id),
               pg_catalog.array_agg(s.chunk_id order by s.score desc, s.chunk_id),
               pg_catalog.array_agg(s.score order by s.score desc, s.chunk_id)
        into v_tids, v_ids, v_scores
        from (
            select p.tenant_id, p.chunk_id,
                   pg_catalog.round(pg_catalog.sum(t.idf * p.tf / (p.tf + v_c1 + v_c2 * p.doc_len)) * 1e9::double precision) / 1e9::double precision as score
            from rows from (pg_catalog.unnest(v_lex), pg_catalog.unnest(v_idf)) as t(lexeme, idf)
            join pgrag.bm25_postings as p on p.tenant_id = any (v_tenants) and p.lexeme = t.lexeme
            group by p.tenant_id, p.chunk_id
            order by 3 desc, p.chunk_id
            limit v_limit + 1
        ) as s;
        end if;
        if not v_prune then
        v_more := coalesce(pg_catalog.cardinality(v_ids), 0) > v_limit;
        end if;
        -- Walk the ranking in growing batches until match_count chunks pass the checks:
        -- document ready, filters, phrases and exclusions (filters inside the arm).
        v_batch := greatest(2 * v_k, 50);
        while v_found < v_k and v_off < least(coalesce(pg_catalog.cardinality(v_ids), 0), v_limit) loop
            if v_tenant is not null and v_plans = 'force_generic_plan' then
                -- A caller with a tenant: a generic plan, made once per session. Each candidate's
                -- chunk, then its document, read by key in rank order: the subqueries are fenced
                -- (offset 0), so no plan joins them another way (a generic plan knows neither the
                -- tenant's size nor how many candidates come, and one that read the tenant's
                -- documents before the candidates' chunks was hundreds of times slower). Citus
                -- cannot run fenced subqueries for a caller without a tenant: the form below.
                perform pg_catalog.set_config('plan_cache_mode', 'force_generic_plan', true);
                return query
                select u.t, u.id, u.s
                from rows from (
                    pg_catalog.unnest(v_tids[v_off + 1 : least(v_off + v_batch, v_limit)]),
                    pg_catalog.unnest(v_ids[v_off + 1 : least(v_off + v_batch, v_limit)]),
                    pg_catalog.unnest(v_scores[v_off + 1 : least(v_off + v_batch, v_limit)])
                ) with ordinality as u(t, id, s, ord)
                cross join lateral (
                    select c.document_id, c.metadata, c.fts
                    from pgrag.chunks as c
                    where c.tenant_id = v_tenant and c.id = u.id
                    offset 0
                ) as c
                -- (the filters in the documents' scan, as in the form below)
                cross join lateral (
                    select
                    from pgrag.documents as d
                    where d.tenant_id = v_tenant and d.id = c.document_id
                      and pgrag.searchable(d.status, c.document_id, d.metadata, c.metadata,
                                           d.source_type, d.created_at, document_ids,
                                           metadata_filter, source_types, created_after,
                                           created_before)
                    offset 0
                ) as d
                where (v_neg is null or not c.fts operator(pg_catalog.@@) v_neg)
                  and (v_pos is null or c.fts operator(pg_catalog.@@) v_pos)
                  and (v_seen is null or u.id operator(pg_catalog.<>) all (v_seen))
                order by u.ord
                limit v_k - v_found;
                get diagnostics v_rows = row_count;
                perform pg_catalog.set_config('plan_cache_mode', 'force_custom_plan', true);
            else
                return query
                select u.t, u.id, u.s
                from rows from (
                    pg_catalog.unnest(v_tids[v_off + 1 : least(v_off + v_batch, v_limit)]),
                    pg_catalog.unnest(v_ids[v_off + 1 : least(v_off + v_batch, v_limit)]),
                    pg_catalog.unnest(v_scores[v_off + 1 : least(v_off + v_batch, v_limit)])
                ) with ordinality as u(t, id, s, ord)
                join pgrag.chunks as c on c.tenant_id = u.t and c.id = u.id
                join pgrag.documents as d on d.tenant_id = c.tenant_id and d.id = c.document_id
                where pgrag.searchable(d.status, c.document_id, d.metadata, c.metadata, d.source_type,
                                       d.created_at, document_ids, metadata_filter, source_types,
                                       created_after, created_before)
                  -- Every candidate is the caller's tenant's when there is one: said of c as well,
                  -- so that a sharded cluster (Citus) sends this to that tenant's shards alone.
                  and (v_tenant is null or c.tenant_id = v_tenant)
                  and (v_neg is null or not c.fts operator(pg_catalog.@@) v_neg)
                  and (v_pos is null or c.fts operator(pg_catalog.@@) v_pos)
                  and (v_seen is null or u.id operator(pg_catalog.<>) all (v_seen))
                order by u.ord
                limit v_k - v_found;
                get diagnostics v_rows = row_count;
            end if;
            v_found := v_found + v_rows;
            v_off := least(v_off + v_batch, v_limit);
            v_batch := v_batch * 4;
        end loop;
        exit when v_found >= v_k or not v_more;
        -- More of the full ranking: all of it, or after the pruned evaluation its start again
        -- (v_limit more rows than the walk has seen).
        if v_prune then
            v_limit := v_limit + greatest(4 * v_k, 200);
            v_seen := v_ids;
            v_prune := false;
            v_off := 0;
        else
            v_limit := 2147483646;
        end if;
    end loop;
end
$$;

comment on function pgrag.keyword_candidates(text, integer, text, double precision, double precision, bigint[], jsonb, text[], timestamptz, timestamptz) is
'Keyword arm: (tenant_id, chunk_id, Okapi BM25 score rounded to 1e-9) best first. Lucene IDF ln(1 + (N - df + 0.5)/(df + 0.5)), term part tf/(tf + k1(1 - b + b dl/avgdl)), N and avgdl from pgrag.corpus_stats and df from pgrag.bm25_lexicon of the caller''s tenant. Exact: for one tenant without filters it skips the postings of frequent lexemes that provably cannot lift a chunk into the top match_count (term bounds in pgrag.bm25_lexicon); the setting pgrag.keyword_pruning (auto, on, off) chooses when, never what is returned.';
