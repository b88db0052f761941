-- The vector arm's walks: every walk of an HNSW graph, each shape written once (the exact
-- scans are in 029-vector-exact.sql).
-- Contract. Provides: pgrag.hnsw_key_sql and pgrag.hnsw_order_sql (a graph's key and order),
--   pgrag.vector_walk_sql (the walk of one graph, as text), pgrag.make_vector_walk (a walk
--   function made from it), the walk functions pgrag.vector_walk_public,
--   pgrag.vector_walk_shared, pgrag.vector_walk_tenant_shared and pgrag.vector_walk_own (made on
--   every migrate by pgrag.make_vector_walks; each isolated tenant's own is made by
--   pgrag.make_own_graph_walk, 006), pgrag.own_graph_walk_sql and pgrag.vector_walk_general (any
--   graphs, with filters). Relies on: pgrag.searchable (020-search-rows.sql), pgrag.tenant_index_name and
--   pgrag.make_own_graph_walk (006-vector-isolation.sql). Callers: pgrag.vector_candidates
--   (022-vector-arm.sql), as the calling role.
--
-- How each is planned, and why the settings a walk runs with are SET clauses of its function:
-- sql/idempotent/README.md ("README" below), "Plans", "The vector arm". Each statement carries a
-- marker, /* pgrag:<name> */, by which plan tests and auto_explain output find it.

-- The key of an HNSW graph on an embedding column of dims dimensions, and the expression a walk
-- orders by to walk it (README, "The vector arm"). Up to 2,000 dimensions (pgvector's HNSW limit
-- for vector) the column itself; above (to 4,000), its half-precision copy, column::halfvec(dims),
-- an expression index the walk names identically. The mode is the dimension pgrag.embedding_config
-- records, read when a walk's statement is made (on every migrate and model switch), never
-- inferred from the indexes present. Distances returned stay those of the full vectors.
create or replace function pgrag.hnsw_key_sql(column_name text, dims integer)
returns text
language sql
immutable
security invoker
parallel safe
set search_path = pg_catalog, pg_temp
as $$
    select case when dims operator(pg_catalog.<=) 2000
                then pg_catalog.format('%I @extschema:vector@.vector_cosine_ops', column_name)
                else pg_catalog.format('(%I::@extschema:vector@.halfvec(%s)) @extschema:vector@.halfvec_cosine_ops',
                                       column_name, dims) end
$$;
comment on function pgrag.hnsw_key_sql(text, integer) is
'The key of an HNSW index on the embedding column column_name of dims dimensions: the column with vector_cosine_ops up to 2000 dimensions, (column::halfvec(dims)) with halfvec_cosine_ops above (pgvector indexes halfvec up to 4000).';

create or replace function pgrag.hnsw_order_sql(embedding text, query text, dims integer)
returns text
language sql
immutable
security invoker
parallel safe
set search_path = pg_catalog, pg_temp
as $$
    select case when dims operator(pg_catalog.<=) 2000
                then pg_catalog.format('%s operator(@extschema:vector@.<=>) %s', embedding, query)
                else pg_catalog.format('(%1$s)::@extschema:vector@.halfvec(%3$s) operator(@extschema:vector@.<=>) (%2$s)::@extschema:vector@.halfvec(%3$s)',
                                       embedding, query, dims) end
$$;
comment on function pgrag.hnsw_order_sql(text, text, integer) is
'The ORDER BY expression (cosine distance of the SQL expressions embedding and query) a walk needs to use an HNSW index keyed by pgrag.hnsw_key_sql for dims dimensions: on halfvec copies above 2000 dimensions.';

-- The walk of one graph without filters: the walk_count nearest chunks of the graph, returned
-- (the nearest match_count) when the walk found match_count rows and none of their documents is
-- not ready, no row otherwise (the caller then runs the general walk or an exact scan). graph is
-- the condition on c that matches the predicate of the partial HNSW index to walk; tenant, an
-- SQL expression of the caller's tenant (null without one), filters the documents probed.
-- Parameters: $1 the query embedding, $2 walk_count, $3 match_count, $4 whether a document not
-- ready may be among the rows (then their documents are probed), $5 the tenant. The walk orders
-- by pgrag.hnsw_order_sql for the installed dimension (half precision above 2,000); the rows it
-- returns are ordered by their full-precision distance.
create or replace function pgrag.vector_walk_sql(marker text, graph text, tenant text)
returns text
language sql
stable
security invoker
parallel safe
set search_path = pg_catalog, pg_temp
as $$
    select pg_catalog.format($q$
        with /* pgrag:%1$s */ w as materialized (
            select c.tenant_id, c.id as chunk_id, c.document_id,
                   c.embedding operator(@extschema:vector@.<=>) $1 as distance
            from pgrag.chunks as c
            where c.embedding is not null
              and %2$s
            order by %4$s
            limit $2
        )
        select w.tenant_id, w.chunk_id, w.distance
        from w
        where (select pg_catalog.count(*) from w) operator(pg_catalog.>=) $3
          and not ($4 and exists (
                       select 1
                       from w as r
                       join pgrag.documents as d
                         on d.tenant_id operator(pg_catalog.=) r.tenant_id
                        and d.id operator(pg_catalog.=) r.document_id
                       where d.status operator(pg_catalog.<>) 'ready'%3$s))
        order by w.distance, w.chunk_id
        limit $3$q$,
        marker, graph,
        case when tenant is not null
             then ' and d.tenant_id operator(pg_catalog.=) ' operator(pg_catalog.||) tenant end,
        pgrag.hnsw_order_sql('c.embedding', '$1', (select e.dims from pgrag.embedding_config as e)))
$$;
comment on function pgrag.vector_walk_sql(text, text, text) is
'The statement walking one HNSW graph without filters (graph: the condition matching its index''s predicate; tenant: an SQL expression of the caller''s tenant, or null), marked /* pgrag:<marker> */; parameters: query embedding, rows to walk, match_count, whether a document not ready may be reached, the tenant. Returns match_count rows, or none when the walk came back short or reached a document not ready.';

-- A walk function: the statement (a query, or EXECUTE ... USING) with the settings every walk
-- runs with as SET clauses, restored on exit (README, "The vector arm"): hnsw.iterative_scan as
-- given, enable_sort off, hnsw.ef_search from the argument, its plan kept for the session. Its
-- arguments are checked as those of vector_candidates (an API role may call it directly).
create or replace function pgrag.make_vector_walk(name text, iterative_scan text, statement text)
returns regprocedure
language plpgsql
volatile
security invoker
set search_path = pg_catalog, pg_temp
as $$
begin
    execute pg_catalog.format($f$
        create or replace function pgrag.%I(
            query_embedding @extschema:vector@.vector,
            walk_count integer,
            match_count integer,
            any_not_ready boolean,
            tenant text,
            ef_search integer)
        returns table (tenant_id text, chunk_id bigint, distance double precision)
        language plpgsql
        stable
        rows 10
        security invoker
        set search_path = pg_catalog, pg_temp
        set plan_cache_mode = force_generic_plan
        set enable_sort = off
        set hnsw.iterative_scan = %L
        set hnsw.ef_search = 40
        as %L$f$,
        name, iterative_scan,
        pg_catalog.concat_ws(E'\n', '#variable_conflict use_column', 'begin',
            'perform pgrag.check_query_embedding(''query_embedding'', query_embedding);',
            'if not coalesce(walk_count between 0 and 8000 and match_count between 0 and 2000',
            '                and ef_search between 1 and 1000, false) then',
            '    raise exception ''walk_count must be 0 to 8000, match_count 0 to 2000 and ef_search 1 to 1000 (got %, %, %)'',',
            '        walk_count, match_count, ef_search using errcode = ''22023'';',
            'end if;',
            'perform pg_catalog.set_config(''hnsw.ef_search'', ef_search::text, true);',
            'return query ' operator(pg_catalog.||) statement operator(pg_catalog.||) ';', 'end'));
    return pg_catalog.format('pgrag.%I(@extschema:vector@.vector, integer, integer, boolean, text, integer)',
                             name)::regprocedure;
end
$$;
comment on function pgrag.make_vector_walk(text, text, text) is
'Creates (or replaces) pgrag.<name>(query_embedding, walk_count, match_count, any_not_ready, tenant, ef_search), a walk function running statement (pgrag.vector_walk_sql, or an EXECUTE of it) with hnsw.iterative_scan = iterative_scan, enable_sort off, hnsw.ef_search = ef_search and its plan kept for the session, all restored on exit; returns it. Run on every migrate and by pgrag.make_own_graph_walk.';

-- The walk of a tenant's own graph: the tenant's key as a constant (its index's predicate,
-- pgrag.isolate_tenant) and its id ($5, or with name_tenant the literal, which also matches the
-- predicate of a graph made by an earlier version): a tenant whose key collides stays out.
create or replace function pgrag.own_graph_walk_sql(tenant text, name_tenant boolean)
returns text
language sql
stable
security invoker
parallel safe
set search_path = pg_catalog, pg_temp
as $$
    select pgrag.vector_walk_sql('walk_own',
        pg_catalog.format('pg_catalog.hashtextextended(c.tenant_id, 0) operator(pg_catalog.=) %L::pg_catalog.int8 '
                          'and c.tenant_id operator(pg_catalog.=) %s',
                          pg_catalog.hashtextextended(t.tenant, 0), t.expr),
        t.expr)
    from (select own_graph_walk_sql.tenant,
                 case when name_tenant then pg_catalog.quote_literal(own_graph_walk_sql.tenant)
                      else '$5' end) as t(tenant, expr)
$$;
comment on function pgrag.own_graph_walk_sql(text, boolean) is
'The statement walking a tenant''s own HNSW graph (pgrag.vector_walk_sql, marker walk_own) with the tenant''s key written in, and its id as well when name_tenant. Run by the tenant''s walk function (pgrag.make_own_graph_walk), or planned at the call by pgrag.vector_walk_own.';

-- The walks without filters of the graphs whose index's predicate holds no variable, with plans
-- kept for the session (one for anon, one for the other callers: README, "The vector arm"), and
-- the walk of a tenant's own graph planned at each call (Citus; a graph without its function).
-- Made on every migrate, and by a model switch (pgrag.reembed_switch: the dimension, hence the
-- expression the walks order by, may change), with each isolated tenant's walk function.
create or replace function pgrag.make_vector_walks()
returns void
language plpgsql
volatile
security invoker
set search_path = pg_catalog, pg_temp
as $$
declare
    r record;
begin
    perform pgrag.make_vector_walk('vector_walk_public', 'relaxed_order',
        pgrag.vector_walk_sql('walk_public', 'c.is_public', null));
    perform pgrag.make_vector_walk('vector_walk_shared', 'off',
        pgrag.vector_walk_sql('walk_shared', 'c.in_shared_graph', null));
    perform pgrag.make_vector_walk('vector_walk_tenant_shared', 'relaxed_order',
        pgrag.vector_walk_sql('walk_tenant_shared',
                              'c.in_shared_graph and c.tenant_id operator(pg_catalog.=) $5', '$5'));
    perform pgrag.make_vector_walk('vector_walk_own', 'relaxed_order',
        'execute pgrag.own_graph_walk_sql(tenant, true) using $1, $2, $3, $4, $5');
    for r in
        select t.tenant_id
        -- (a tenant without chunks is searched exactly: it needs no walk)
        from (select distinct s.tenant_id from pgrag.corpus_stats as s) as t
        where pg_catalog.to_regclass(pg_catalog.format('pgrag.%I', pgrag.tenant_index_name(t.tenant_id))) is not null
        order by t.tenant_id
    loop
        perform pgrag.make_own_graph_walk(r.tenant_id);
    end loop;
end
$$;
comment on function pgrag.make_vector_walks() is
'Creates (or replaces) the walk functions of the vector arm (pgrag.make_vector_walk) and each isolated tenant''s (pgrag.make_own_graph_walk), their statements ordering by the expression the installed dimension''s HNSW graphs are keyed by (pgrag.hnsw_order_sql). Run on every migrate and by pgrag.reembed_switch.';

do $$
begin
    perform pgrag.make_vector_walks();
end
$$;
comment on function pgrag.vector_walk_public(@extschema:vector@.vector, integer, integer, boolean, text, integer) is
'Walk of the public chunks'' HNSW graph (chunks.is_public) for anon, without filters (pgrag.vector_walk_sql): match_count rows or none. Made by pgrag.make_vector_walk.';
comment on function pgrag.vector_walk_shared(@extschema:vector@.vector, integer, integer, boolean, text, integer) is
'Walk of the shared HNSW graph for a caller without a tenant when every chunk is in it, without filters (pgrag.vector_walk_sql): match_count rows or none. Made by pgrag.make_vector_walk.';
comment on function pgrag.vector_walk_tenant_shared(@extschema:vector@.vector, integer, integer, boolean, text, integer) is
'Walk of the shared HNSW graph for a tenant without a graph of its own, without filters (pgrag.vector_walk_sql): match_count of its rows or none. Made by pgrag.make_vector_walk.';
comment on function pgrag.vector_walk_own(@extschema:vector@.vector, integer, integer, boolean, text, integer) is
'Walk of a tenant''s own HNSW graph planned at this call with its key and id written in (pgrag.own_graph_walk_sql), where the tenant has no walk function (Citus, a graph made by hand): match_count rows or none. Made by pgrag.make_vector_walk.';

-- Each isolated tenant's walk function is made again on every migrate (above, after the
-- template it is made from): tenants isolated before the functions existed get theirs, and every
-- body is this release's statement. Graphs made by earlier versions name the tenant id in their predicate:
-- building them again by key would cost a migrate an HNSW build per isolated tenant, so they
-- keep a walk naming the tenant (as fast) and the migrate says how to build them again
-- (docs/scaling.md).
do $$
declare
    r record;
    v_old bigint := 0;
begin
    for r in
        select t.tenant_id
        -- (a tenant without chunks is searched exactly: it needs no walk)
        from (select distinct s.tenant_id from pgrag.corpus_stats as s) as t
        where pg_catalog.to_regclass(pg_catalog.format('pgrag.%I', pgrag.tenant_index_name(t.tenant_id))) is not null
        order by t.tenant_id
    loop
        -- (Earlier versions named the tenant in the index's comment.)
        execute pg_catalog.format('comment on index pgrag.%I is %L',
            pgrag.tenant_index_name(r.tenant_id),
            'HNSW graph of the chunks of one tenant alone (pgrag.isolate_tenant).');
        if not pgrag.own_graph_keyed(r.tenant_id) then
            v_old := v_old operator(pg_catalog.+) 1;
        end if;
    end loop;
    if v_old operator(pg_catalog.>) 0 then
        raise notice 'pgrag: % isolated tenants'' graphs name their tenant id in their predicate, which every role can read; select * from pgrag.isolate_tenants() builds them again by key',
            v_old;
    end if;
end
$$;

-- The general walk: any search the walks without filters do not answer (filters; rows outside
-- the shared graph; a walk that came back short), built as text and planned at each call. One
-- subquery per graph to walk, each joined to the documents with the filters inside, its
-- condition matching the predicate of the partial index it walks: the tenant's own (its key and
-- id as literals, so the planner can prove the predicate of a graph by key, pgrag.isolate_tenant,
-- or of one an earlier version made by id), the public one, or the shared one. Without a tenant
-- (service_role, the owner: every tenant), the rows outside the shared graph too: each such
-- tenant's own graph, or an exact scan of those rows while it has none (a bulk load not
-- finished), found by a loose scan of chunks_outside_shared_graph, one probe per such tenant (a
-- loop of min() queries, not a recursive CTE: a Citus coordinator plans neither a recursive CTE
-- over a distributed table nor a DISTINCT as cheaply). A row two walks find (a tenant's row from
-- before it was isolated is in both graphs) counts once. Returns the nearest match_count rows;
-- when scoped (the caller may not see every row walked) and fewer came back (a filter too
-- selective for the scan budget, hnsw.max_scan_tuples), none: the exact scan answers.
-- Settings as pgrag.make_vector_walk gives the other walks, iterative scans when scoped.
create or replace function pgrag.vector_walk_general(
    query_embedding @extschema:vector@.vector,
    walk_count integer,
    match_count integer,
    ef_search integer,
    scoped boolean,
    tenant text,
    public_only boolean,
    own_graph boolean,
    metadata_filter jsonb,
    source_types text[],
    created_after timestamptz,
    created_before timestamptz
)
returns table (tenant_id text, chunk_id bigint, distance double precision)
language plpgsql
stable
rows 10
security invoker
set search_path = pg_catalog, pg_temp
set plan_cache_mode = force_generic_plan
set enable_sort = off
set hnsw.iterative_scan = off
set hnsw.ef_search = 40
as $$
#variable_conflict use_column
declare
    v_walks text[] := array[case when own_graph
                                 then pg_catalog.format('pg_catalog.hashtextextended(c.tenant_id, 0) operator(pg_catalog.=) %L::pg_catalog.int8 '
                                                        'and c.tenant_id operator(pg_catalog.=) %L',
                                                        pg_catalog.hashtextextended(tenant, 0), tenant)
                                 when tenant is not null
                                 then pg_catalog.format('c.tenant_id operator(pg_catalog.=) %L and c.in_shared_graph', tenant)
                                 when public_only then 'c.is_public'
                                 else 'c.in_shared_graph' end];
    v_other text;
    v_order text;
    v_sql text;
    v_tenants text[];
    v_ids bigint[];
    v_dists double precision[];
begin
    -- (the checks of pgrag.make_vector_walk's walks)
    perform pgrag.check_query_embedding('query_embedding', query_embedding);
    if not coalesce(walk_count between 0 and 8000 and match_count between 0 and 2000
                    and ef_search between 1 and 1000, false) then
        raise exception 'walk_count must be 0 to 8000, match_count 0 to 2000 and ef_search 1 to 1000 (got %, %, %)',
            walk_count, match_count, ef_search using errcode = '22023';
    end if;
    if source_types is not null or metadata_filter is not null then
        perform pgrag.check_filters(null, source_types, metadata_filter);
    end if;
    perform pg_catalog.set_config('hnsw.ef_search', ef_search::text, true),
            pg_catalog.set_config('hnsw.iterative_scan',
                                  case when scoped then 'relaxed_order' else 'off' end, true);
    -- What the graphs are keyed by: the query's dimension is the one pgrag.embedding_config
    -- records (checked above), which is read only for a null query.
    v_order := pgrag.hnsw_order_sql('c.embedding', '$2',
        coalesce(@extschema:vector@.vector_dims(query_embedding),
                 (select e.dims from pgrag.embedding_config as e)));
    if tenant is null and not public_only then
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
    select pg_catalog.format($q$
        select /* pgrag:%1$s */
               (pg_catalog.array_agg(h.tenant_id order by h.distance, h.chunk_id))[1 : $1],
               (pg_catalog.array_agg(h.chunk_id order by h.distance, h.chunk_id))[1 : $1],
               (pg_catalog.array_agg(h.distance order by h.distance, h.chunk_id))[1 : $1]
        from (
            select u.tenant_id, u.chunk_id, pg_catalog.min(u.distance) as distance
            from (%2$s) as u
            group by u.tenant_id, u.chunk_id
        ) as h$q$,
        'walk_general',
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
            order by %s
            limit $7)$q$, w.cond, v_order), ' union all ' order by w.ord))
    into v_sql
    from pg_catalog.unnest(v_walks) with ordinality as w(cond, ord);
    execute v_sql
    into v_tenants, v_ids, v_dists
    using match_count, query_embedding, metadata_filter, source_types, created_after,
          created_before, walk_count;
    if scoped and coalesce(pg_catalog.cardinality(v_ids), 0) < match_count then
        return;
    end if;
    return query
    select u.t, u.id, u.dist
    from rows from (pg_catalog.unnest(v_tenants), pg_catalog.unnest(v_ids), pg_catalog.unnest(v_dists))
         with ordinality as u(t, id, dist, ord)
    order by u.ord;
end
$$;
comment on function pgrag.vector_walk_general(@extschema:vector@.vector, integer, integer, integer, boolean, text, boolean, boolean, jsonb, text[], timestamptz, timestamptz) is
'The general walk of the vector arm (marker walk_general), planned at each call: the graphs the caller''s rows are in (its own, the public one, the shared one, and without a tenant every graph or exact scan of rows outside the shared graph), filters applied inside each walk; the nearest match_count rows, or none when scoped and fewer came back. Runs with hnsw.ef_search = ef_search, hnsw.iterative_scan relaxed_order when scoped, enable_sort off, restored on exit.';
