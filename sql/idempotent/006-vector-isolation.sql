-- Tenant isolation in the vector index: a tenant's own HNSW graph.
-- Contract. Provides: pgrag.tenant_index_name (the name of a tenant's partial HNSW index, read by
--   the vector arm), pgrag.isolate_tenant, pgrag.share_tenant and pgrag.isolate_tenants (the
--   owner of pgrag.chunks runs them: pgrag ingest, or an operator). Relies on: pgrag.chunks and
--   pgrag.corpus_stats (for tenant sizes).
--
-- Tenant isolation in the vector index (docs/security.md): a tenant above
-- pgrag.exact_search_max_rows searches the HNSW graph of every chunk unless it has a graph of
-- its own, a partial HNSW index over its chunks made by pgrag.isolate_tenant.

create or replace function pgrag.tenant_index_name(tenant text)
returns text
language sql
immutable
security invoker
parallel safe
set search_path = pg_catalog, pg_temp
as $$
    select 'chunks_embedding_hnsw_t_' operator(pg_catalog.||)
           pg_catalog.left(pg_catalog.md5(tenant), 24)
$$;
comment on function pgrag.tenant_index_name(text) is
'Name (in schema pgrag) of the partial HNSW index pgrag.isolate_tenant makes for a tenant.';

create or replace function pgrag.isolate_tenant(tenant text)
returns regclass
language plpgsql
volatile
security invoker
set search_path = pg_catalog, pg_temp
as $$
declare
    v_name text;
    v_old_mem text := pg_catalog.current_setting('maintenance_work_mem');
begin
    if tenant is null or pg_catalog.btrim(tenant) = '' then
        raise exception 'tenant must be a non-blank tenant id'
            using errcode = '22023';
    end if;
    v_name := pgrag.tenant_index_name(tenant);
    if pg_catalog.to_regclass(pg_catalog.format('pgrag.%I', v_name)) is null then
        -- A limit high enough for pgvector to build the whole graph in memory: never below the
        -- session's, at most 1 GB; per row twice its vector's size and 2 kB (an element takes
        -- about 2.7 kB at 384 dimensions, allocator rounding included; the limit is not
        -- allocated up front). With PostgreSQL's default 64 MB a graph of 100k such chunks
        -- stops fitting after about 28,000 rows, and its build takes 3 times as long (48.5 s
        -- against 16.0 s here).
        perform pg_catalog.set_config('maintenance_work_mem', (least(greatest(
            pg_catalog.pg_size_bytes(v_old_mem),
            pgrag.tenant_chunk_count(tenant) * ((select e.dims from pgrag.embedding_config as e) * 8 + 2048)),
            1073741824) / 1024)::text || 'kB', true);
        -- The tenant as a literal in the predicate: a query naming the same literal (as
        -- vector_candidates does) is proven to match this index by the planner.
        execute pg_catalog.format(
            'create index %I on pgrag.chunks using hnsw '
            '(embedding @extschema:vector@.vector_cosine_ops) '
            'where tenant_id operator(pg_catalog.=) %L and embedding is not null',
            v_name, tenant);
        execute pg_catalog.format('comment on index pgrag.%I is %L', v_name,
            pg_catalog.format('HNSW graph of the chunks of tenant %s alone (pgrag.isolate_tenant).', tenant));
        perform pg_catalog.set_config('maintenance_work_mem', v_old_mem, true);
    end if;
    return pg_catalog.format('pgrag.%I', v_name)::regclass;
end
$$;
comment on function pgrag.isolate_tenant(text) is
'Gives a tenant an HNSW graph of its own chunks (a partial index on pgrag.chunks; no-op when it exists; built with maintenance_work_mem raised for the graph to fit, at most 1 GB) and returns it: its vector searches no longer walk the graph shared with other tenants, so other tenants'' rows can change neither their results nor their speed. Run by the owner of pgrag.chunks; blocks writes to pgrag.chunks while the index builds.';

create or replace function pgrag.share_tenant(tenant text)
returns boolean
language plpgsql
volatile
security invoker
set search_path = pg_catalog, pg_temp
as $$
declare
    v_index regclass := pg_catalog.to_regclass(
        pg_catalog.format('pgrag.%I', pgrag.tenant_index_name(tenant)));
begin
    if v_index is null then
        return false;
    end if;
    execute pg_catalog.format('drop index %s', v_index);
    -- Rows a bulk load kept out of the shared graph (incremental/012-bulk-loading.sql) go into
    -- it now (row by row): the shared graph must hold every row of a tenant without its own.
    update pgrag.chunks as c
       set in_shared_graph = true
     where c.tenant_id = tenant and not c.in_shared_graph;
    return true;
end
$$;
comment on function pgrag.share_tenant(text) is
'Drops the tenant''s own HNSW graph made by pgrag.isolate_tenant (true when there was one) and puts its rows a bulk load kept out of the shared graph into it: its searches go back to the shared graph.';

-- (unreleased one-argument form, replaced by the form with a tenant list)
drop function if exists pgrag.isolate_tenants(bigint);
create or replace function pgrag.isolate_tenants(
    min_rows bigint default null,
    tenants text[] default null
)
returns table (tenant_id text, index_name regclass, chunk_count bigint)
language plpgsql
volatile
security invoker
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    v_min bigint := coalesce(min_rows,
        nullif(pg_catalog.current_setting('pgrag.exact_search_max_rows', true), '')::bigint, 2000);
    r record;
begin
    for r in
        select s.tenant_id, pg_catalog.sum(s.chunk_count)::bigint as n
        from pgrag.corpus_stats as s
        where tenants is null or s.tenant_id operator(pg_catalog.=) any (tenants)
        group by s.tenant_id
        having pg_catalog.sum(s.chunk_count) > v_min
        order by s.tenant_id
    loop
        continue when pg_catalog.to_regclass(
            pg_catalog.format('pgrag.%I', pgrag.tenant_index_name(r.tenant_id))) is not null;
        tenant_id := r.tenant_id;
        index_name := pgrag.isolate_tenant(r.tenant_id);
        chunk_count := r.n;
        return next;
    end loop;
end
$$;
comment on function pgrag.isolate_tenants(bigint, text[]) is
'Isolates (pgrag.isolate_tenant) every tenant (or every one of tenants, when given) with more than min_rows chunks (default pgrag.exact_search_max_rows, 2000) that has no graph of its own yet; returns those it isolated. pgrag ingest runs it for its tenant after loading when it owns pgrag.chunks; for other loaders, the operator runs it after loads (e.g. from cron).';
