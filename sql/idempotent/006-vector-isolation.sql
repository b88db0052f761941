-- Tenant isolation in the vector index: a tenant's own HNSW graph.
-- Contract. Provides: pgrag.tenant_index_name (the name of a tenant's partial HNSW index, read by
--   the vector arm), pgrag.own_graph_walk_name, pgrag.own_graph_keyed, pgrag.make_own_graph_walk
--   (the function walking a tenant's own graph, run by the vector arm), pgrag.graph_memory_needed
--   and pgrag.graph_build_memory (the memory a graph build needs, and the one it is given),
--   pgrag.build_graph (a graph's CREATE INDEX run with that memory),
--   pgrag.isolate_tenant, pgrag.share_tenant and pgrag.isolate_tenants (the owner of
--   pgrag.chunks runs them: pgrag ingest, or an operator). Relies on: pgrag.chunks,
--   pgrag.documents and pgrag.corpus_stats (for tenant sizes); when run, pgrag.own_graph_walk_sql
--   and pgrag.make_vector_walk (021-vector-walks.sql, which also makes every isolated tenant's
--   walk function again on each migrate). The tenant's key,
--   pg_catalog.hashtextextended(tenant_id, 0), is written the same way in the walks of
--   021-vector-walks.sql.
--
-- Tenant isolation in the vector index (docs/security.md): a tenant above
-- pgrag.exact_search_max_rows searches the HNSW graph of every chunk unless it has a graph of
-- its own, a partial HNSW index over its chunks made by pgrag.isolate_tenant.
--
-- The catalog, which every role reads (docs/security.md, "Catalog metadata an API role can
-- read"), shows the index's predicate and the body of its walk function: both name the tenant by
-- its key, pg_catalog.hashtextextended(tenant_id, 0), a 64-bit hash (built in, immutable: hash
-- partitioning relies on it staying the same), never by its id. The planner uses a partial index
-- for a query that states its predicate's condition, so the walks state the key as a constant;
-- they also filter on the tenant id (a parameter or a literal outside the catalog), so two
-- tenants whose keys collide share a graph but never each other's rows. Graphs made by earlier
-- versions name the tenant in their predicate (tenant_id = '<id>'): they keep working (their walk
-- names the tenant too) until pgrag.isolate_tenants builds them again by key.

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

-- The walk of a tenant's own graph needs the tenant's key as a constant (its index's predicate):
-- each isolated tenant has a function of its own holding it, whose plan is kept for the session
-- (pgrag.make_own_graph_walk; sql/idempotent/README.md, "Plans").
create or replace function pgrag.own_graph_walk_name(tenant text)
returns text
language sql
immutable
security invoker
parallel safe
set search_path = pg_catalog, pg_temp
as $$
    select 'own_graph_walk_t_' operator(pg_catalog.||) pg_catalog.left(pg_catalog.md5(tenant), 24)
$$;
comment on function pgrag.own_graph_walk_name(text) is
'Name (in schema pgrag) of the function holding the walk of a tenant''s own HNSW graph (pgrag.make_own_graph_walk).';

-- (the form before the tenant's key: its body named the tenant; own_graph_walk_sql(text, boolean)
-- is in 021-vector-walks.sql)
drop function if exists pgrag.own_graph_walk_sql(text);

create or replace function pgrag.own_graph_keyed(tenant text)
returns boolean
language sql
stable
security invoker
parallel safe
set search_path = pg_catalog, pg_temp
as $$
    -- (deparsed as ((hashtextextended(tenant_id, ...) = '<key>'::bigint) AND ...))
    -- (an index of that name made otherwise, without a predicate, counts as made by id)
    select coalesce(pg_catalog.strpos(p.pred, 'hashtextextended(tenant_id, ') operator(pg_catalog.>) 0
                    and pg_catalog.strpos(p.pred, pg_catalog.format(') = %L::bigint',
                                                                    pg_catalog.hashtextextended(tenant, 0))) operator(pg_catalog.>) 0,
                    false)
    from pg_catalog.pg_index as i,
         pg_catalog.pg_get_expr(i.indpred, i.indrelid) as p(pred)
    where i.indexrelid operator(pg_catalog.=)
          pg_catalog.to_regclass(pg_catalog.format('pgrag.%I', pgrag.tenant_index_name(tenant)))
$$;
comment on function pgrag.own_graph_keyed(text) is
'Whether the tenant''s own HNSW graph (pgrag.isolate_tenant) names the tenant by its key in its predicate, as this version makes it: false for a graph made by an earlier version (its predicate names the tenant id), null when the tenant has none.';

create or replace function pgrag.make_own_graph_walk(tenant text)
returns void
language plpgsql
volatile
security invoker
set search_path = pg_catalog, pg_temp
as $$
declare
    v_name text := pgrag.own_graph_walk_name(tenant);
    v_signature regprocedure;
begin
    -- (the forms before the tenant's key and before the walk's settings were its own)
    execute pg_catalog.format(
        'drop function if exists pgrag.%1$I(@extschema:vector@.vector, integer, integer, boolean), '
        'pgrag.%1$I(@extschema:vector@.vector, integer, integer, boolean, text)', v_name);
    -- Not on Citus: there the search functions plan every statement with its values
    -- (sql/citus/002-function-settings.sql), so the arm runs pgrag.vector_walk_own.
    if exists (select 1 from pg_catalog.pg_extension as e where e.extname = 'citus') then
        return;
    end if;
    -- The tenant's key is a constant of the body. A graph made by an earlier version gets the
    -- walk naming the tenant its predicate needs (the predicate already shows it;
    -- pgrag.isolate_tenants builds the graph again).
    v_signature := pgrag.make_vector_walk(v_name, 'relaxed_order',
        pgrag.own_graph_walk_sql(tenant, not coalesce(pgrag.own_graph_keyed(tenant), true)));
    -- (The comment names no tenant: comments are readable by every role, docs/security.md.)
    execute pg_catalog.format('comment on function %s is %L', v_signature,
        'Walk of the HNSW graph of one tenant alone (pgrag.own_graph_walk_sql), called by pgrag.vector_candidates; made by pgrag.isolate_tenant, dropped by pgrag.share_tenant.');
    -- The callers of the vector arm that have a tenant (anon has none: it never walks a
    -- tenant's graph); 910-function-privileges.sql grants the same on every migrate.
    execute pg_catalog.format('revoke all on function %s from public', v_signature);
    if pg_catalog.to_regrole('authenticated') is not null and pg_catalog.to_regrole('service_role') is not null then
        execute pg_catalog.format('grant execute on function %s to authenticated, service_role', v_signature);
    end if;
end
$$;
comment on function pgrag.make_own_graph_walk(text) is
'Creates (or replaces) the function holding the walk of the tenant''s own HNSW graph, pgrag.own_graph_walk_name(tenant) (pgrag.make_vector_walk): the vector arm calls it so that the walk is planned once per session rather than at every call. Its body names the tenant by its key (by its id too for a graph an earlier version made). Not on Citus. Run by pgrag.isolate_tenant and on every migrate for the tenants that have a graph (021-vector-walks.sql).';

-- (the forms before their dimension argument)
drop function if exists pgrag.graph_memory_needed(bigint);
drop function if exists pgrag.graph_build_memory(bigint);

create or replace function pgrag.graph_memory_needed(row_count bigint, dimensions integer default null)
returns bigint
language sql
stable
parallel safe
security invoker
set search_path = pg_catalog, pg_temp
as $$
    -- Bytes of maintenance_work_mem pgvector needs to build an HNSW graph of row_count rows of
    -- the given dimension (null: the installed one) in memory: per row its key (4 bytes a
    -- dimension, 2 above 2,000 dimensions, where pgrag keys graphs by a halfvec copy) and 768
    -- bytes, a tenth more, and 1 MB. An element takes its key and 716 to 738 bytes at pgvector's
    -- default m = 16, in a build on one process as in a parallel one, at 384 to 3,072
    -- dimensions (benchmarks/graph_element.py; 1 GB held 482,211 rows of 384 in a parallel
    -- build of 1M, benchmarks/graph_memory.py); a larger m takes more (1,226 at m = 32). A
    -- build on one process allocates as it goes; a parallel one reserves the whole setting in
    -- shared memory up front. Past it, pgvector goes on building on disk, several times slower
    -- (its notice: "hnsw graph no longer fits into maintenance_work_mem"). The 1 MB: a parallel
    -- build keeps 1 MB of its setting spare (and one on one process holds only the setting's
    -- whole MB, so pgrag.graph_build_memory rounds up to them).
    select 1048576 operator(pg_catalog.+) (greatest(row_count, 0) operator(pg_catalog.*)
           ((case when coalesce(dimensions, e.dims) operator(pg_catalog.<=) 2000
                  then coalesce(dimensions, e.dims) operator(pg_catalog.*) 4
                  else coalesce(dimensions, e.dims) operator(pg_catalog.*) 2 end
             operator(pg_catalog.+) 768) operator(pg_catalog.*) 11 operator(pg_catalog./) 10))
    from pgrag.embedding_config as e
$$;
comment on function pgrag.graph_memory_needed(bigint, integer) is
'Bytes of maintenance_work_mem pgvector needs to build an HNSW graph of row_count chunks of the given dimension (null, the default: the installed one) in memory (per row its key, a vector or above 2,000 dimensions a halfvec, and 768 bytes, a tenth more: what an element takes at pgvector''s default m = 16, with a margin; and the 1 MB a parallel build keeps spare); beyond it the build goes on on disk, several times slower. pgrag.graph_build_memory gives a build at most 1 GB of it on its own: a larger graph builds in memory only when the session gives more (docs/ingest.md, "Graphs larger than 1 GB").';

create or replace function pgrag.graph_build_memory(row_count bigint, dimensions integer default null)
returns text
language sql
stable
parallel safe
security invoker
set search_path = pg_catalog, pg_temp
as $$
    -- The maintenance_work_mem a graph build of row_count rows runs with (a setting, in kB):
    -- what the graph needs (pgrag.graph_memory_needed), at most 1 GB, but never below the
    -- session's own: an operator who gives builds more (a role's or the server's setting,
    -- PGOPTIONS) gets it, and no server is given more than 1 GB unasked. With PostgreSQL's
    -- default 64 MB a graph of 100k chunks of 384 dimensions stops fitting after about 28,000
    -- rows, and its build takes 3 times as long (48.5 s against 16.0 s here).
    -- (rounded up to whole MB, written in kB: a build on one process counts its memory in
    -- 1 MB blocks and holds only the setting's whole MB, 4 MB of 4,950kB)
    select ((greatest(
                pg_catalog.pg_size_bytes(pg_catalog.current_setting('maintenance_work_mem')),
                least(pgrag.graph_memory_needed(row_count, dimensions), 1073741824))
            operator(pg_catalog.+) 1048575) operator(pg_catalog./) 1048576
            operator(pg_catalog.*) 1024)::text operator(pg_catalog.||) 'kB'
$$;
comment on function pgrag.graph_build_memory(bigint, integer) is
'The maintenance_work_mem (a setting, in kB) a graph of row_count chunks of the given dimension (null, the default: the installed one) is built with, by pgrag.isolate_tenant and pgrag.reembed_switch: pgrag.graph_memory_needed rounded up to whole MB (a build on one process holds only the setting''s whole MB), at most 1 GB, and never below the session''s own setting, so an operator who gives index builds more (ALTER ROLE ... SET maintenance_work_mem, PGOPTIONS) builds a larger graph in memory.';

create or replace function pgrag.build_graph(statement text, row_count bigint, dimensions integer default null)
returns void
language plpgsql
volatile
security invoker
set search_path = pg_catalog, pg_temp
as $$
declare
    v_session_memory text := pg_catalog.current_setting('maintenance_work_mem');
    v_session_workers text := pg_catalog.current_setting('max_parallel_maintenance_workers');
begin
    -- statement: one CREATE INDEX of an HNSW graph over row_count rows of the given dimension,
    -- run with the memory they need (pgrag.graph_build_memory), then the session's own again.
    perform pg_catalog.set_config('maintenance_work_mem',
        pgrag.graph_build_memory(row_count, dimensions), true);
    begin
        execute statement;
    exception when disk_full or out_of_memory then
        -- A parallel build reserves the whole setting in the server's shared memory (/dev/shm)
        -- when it starts: a container's is often smaller (Docker's default is 64 MB), and the
        -- build fails at once ("could not resize shared memory segment"). On one process it
        -- allocates as it goes, in the backend's own memory: build it so.
        if v_session_workers operator(pg_catalog.=) '0' then
            raise;
        end if;
        raise warning 'pgrag: a parallel graph build could not reserve % of shared memory (%); building it on one process instead, more slowly',
            pg_catalog.current_setting('maintenance_work_mem'), sqlerrm
            using hint = 'give the server''s /dev/shm more than maintenance_work_mem: docker run --shm-size, docs/ingest.md "Graphs larger than 1 GB"';
        perform pg_catalog.set_config('max_parallel_maintenance_workers', '0', true);
        execute statement;
    end;
    perform pg_catalog.set_config('maintenance_work_mem', v_session_memory, true);
    perform pg_catalog.set_config('max_parallel_maintenance_workers', v_session_workers, true);
end
$$;
comment on function pgrag.build_graph(text, bigint, integer) is
'Runs statement, one CREATE INDEX of an HNSW graph over row_count rows of the given dimension (null: the installed one), with maintenance_work_mem at pgrag.graph_build_memory (what the graph needs, up to 1 GB unless the session gives more), then the session''s setting again. When a parallel build cannot reserve that memory in the server''s shared memory (disk_full or out_of_memory, e.g. a container''s small /dev/shm), warns and builds it on one process instead (a failure there is raised). Used by pgrag.isolate_tenant and pgrag.reembed_switch; the owner''s.';

create or replace function pgrag.isolate_tenant(tenant text)
returns regclass
language plpgsql
volatile
security invoker
set search_path = pg_catalog, pg_temp
as $$
declare
    v_name text;
    v_keyed boolean;
    v_build text;
    v_options text[];
begin
    if tenant is null or pg_catalog.btrim(tenant) = '' then
        raise exception 'tenant must be a non-blank tenant id'
            using errcode = '22023';
    end if;
    v_name := pgrag.tenant_index_name(tenant);
    -- null: no graph; false: a graph made by an earlier version, whose predicate names the
    -- tenant id (it is built again by key beside the old one, which searches walk meanwhile,
    -- then replaces it, with its storage parameters).
    v_keyed := pgrag.own_graph_keyed(tenant);
    if not coalesce(v_keyed, false) then
        v_build := case when v_keyed is null then v_name else v_name operator(pg_catalog.||) '_keyed' end;
        v_options := (select c.reloptions from pg_catalog.pg_class as c
                      where c.oid = pg_catalog.to_regclass(pg_catalog.format('pgrag.%I', v_name)));
        -- Built with the memory the whole graph needs (pgrag.build_graph).
        -- The tenant's key as a constant in the predicate (the catalog shows it to every role,
        -- the id it must not): a query stating the same constant (the walks of the vector arm)
        -- is proven to match this index by the planner.
        -- (keyed as the installed dimension's graphs are: halfvec above 2,000, 021-vector-walks.sql)
        perform pgrag.build_graph(pg_catalog.format(
            'create index %I on pgrag.chunks using hnsw '
            '(%s)%s '
            'where pg_catalog.hashtextextended(tenant_id, 0) operator(pg_catalog.=) %L::pg_catalog.int8 '
            'and embedding is not null',
            v_build,
            pgrag.hnsw_key_sql('embedding', (select e.dims from pgrag.embedding_config as e)),
            case when v_options is null then ''
                 else ' with (' operator(pg_catalog.||) pg_catalog.array_to_string(v_options, ', ')
                      operator(pg_catalog.||) ')' end,
            pg_catalog.hashtextextended(tenant, 0)), pgrag.tenant_chunk_count(tenant));
        if v_keyed is not null then
            execute pg_catalog.format('drop index pgrag.%I', v_name);
            execute pg_catalog.format('alter index pgrag.%I rename to %I', v_build, v_name);
        end if;
        execute pg_catalog.format('comment on index pgrag.%I is %L', v_name,
            'HNSW graph of the chunks of one tenant alone (pgrag.isolate_tenant).');
    end if;
    perform pgrag.make_own_graph_walk(tenant);
    return pg_catalog.format('pgrag.%I', v_name)::regclass;
end
$$;
comment on function pgrag.isolate_tenant(text) is
'Gives a tenant an HNSW graph of its own chunks (a partial index on pgrag.chunks whose predicate names the tenant by its key, pg_catalog.hashtextextended(tenant_id, 0), and the function walking it, pgrag.make_own_graph_walk; no-op when they exist; built by pgrag.build_graph: maintenance_work_mem raised for the graph to fit, up to 1 GB unless the session gives more, and on one process when a parallel build cannot get that much shared memory) and returns it: its vector searches no longer walk the graph shared with other tenants, so other tenants'' rows can change neither their results nor their speed. A graph made by an earlier version (its predicate names the tenant id) is built again by key and replaces it. Run by the owner of pgrag.chunks; blocks writes to pgrag.chunks while the index builds.';

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
    -- (and the forms of earlier versions)
    execute pg_catalog.format(
        'drop function if exists pgrag.%1$I(@extschema:vector@.vector, integer, integer, boolean, text, integer), '
        'pgrag.%1$I(@extschema:vector@.vector, integer, integer, boolean, text), '
        'pgrag.%1$I(@extschema:vector@.vector, integer, integer, boolean)',
        pgrag.own_graph_walk_name(tenant));
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
'Drops the tenant''s own HNSW graph made by pgrag.isolate_tenant and its walk function (true when there was a graph) and puts its rows a bulk load kept out of the shared graph into it: its searches go back to the shared graph.';

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
        -- (and those with a graph made by an earlier version: it is built again by key)
        having pg_catalog.sum(s.chunk_count) > v_min
            or pg_catalog.to_regclass(pg_catalog.format('pgrag.%I', pgrag.tenant_index_name(s.tenant_id))) is not null
        order by s.tenant_id
    loop
        continue when coalesce(pgrag.own_graph_keyed(r.tenant_id), false);
        tenant_id := r.tenant_id;
        index_name := pgrag.isolate_tenant(r.tenant_id);
        chunk_count := r.n;
        return next;
    end loop;
end
$$;
comment on function pgrag.isolate_tenants(bigint, text[]) is
'Isolates (pgrag.isolate_tenant) every tenant (or every one of tenants, when given) with more than min_rows chunks (default pgrag.exact_search_max_rows, 2000) that has no graph of its own yet, and builds again by key every graph an earlier version made (its predicate names the tenant id); returns those it built. pgrag ingest runs it for its tenant after loading when it owns pgrag.chunks; for other loaders, the operator runs it after loads (e.g. from cron).';

-- Each isolated tenant's walk function is made again on every migrate by 021-vector-walks.sql,
-- after the statement it is made from.
