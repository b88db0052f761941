-- pgrag on Citus: a tenant's search runs whole on the worker holding the tenant.
-- Citus tier: applied by `pgrag migrate --citus` only, after sql/citus/001-distribute.sql.
--
-- The search functions (sql/idempotent/007-candidates.sql to 009-api.sql) say the caller's
-- tenant of every table they read, so Citus sends each of their statements to the one shard
-- group of that tenant ("Task Count: 1"). Such a routed statement runs whole on the worker,
-- the search functions called in its FROM clause included (fused_candidates in hybrid_search,
-- vector_candidates in vector_search, windows in a windowed hybrid_search, ...): the whole
-- search then runs next to the tenant's shards, as a function delegated to the worker would.
-- The statements of such a function read that tenant's rows of the same shard group (local to
-- the worker, in the same transaction) and the reference tables (a copy on every node); Citus
-- refuses that unless citus.allow_nested_distributed_execution is on, because a nested query
-- that needed other nodes could read outside the transaction. It is on for these functions
-- only (a setting of each, in force while it runs): every statement they run on a worker is
-- routed there by a tenant condition, so it reads that tenant's shards, which are all on that
-- worker. Without a tenant (anon, the owner without claims) nothing is routed and the setting
-- has no effect. The idempotent tier's CREATE OR REPLACE removes the setting; this file,
-- re-applied after it, sets it again.

set local search_path = pg_catalog, pg_temp;

do $$
declare
    f regprocedure;
begin
    for f in
        select p.oid::regprocedure
        from pg_catalog.pg_proc as p
        where (p.pronamespace = 'pgrag'::regnamespace
               and p.proname in ('vector_candidates', 'keyword_candidates', 'fused_candidates',
                                 'windows', 'tenant_chunk_count', 'keyword_query', 'mmr_order'))
           or (p.pronamespace = 'public'::regnamespace
               and p.proname in ('vector_search', 'keyword_search', 'hybrid_search',
                                 'chunk_windows', 'build_context')
               and not exists (select 1 from pg_catalog.pg_depend as d
                               where d.classid = 'pg_catalog.pg_proc'::regclass
                                 and d.objid = p.oid and d.deptype = 'e'))
        order by 1
    loop
        execute pg_catalog.format('alter function %s set citus.allow_nested_distributed_execution = on', f);
    end loop;
end
$$;
