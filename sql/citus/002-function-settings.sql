-- pgrag on Citus: settings of the search functions, so that a tenant's search runs on the one
-- worker holding the tenant, and of the write paths' statements one server plans generically.
-- Citus tier: applied by `pgrag migrate --citus` only, after sql/citus/001-distribute.sql. The
-- idempotent tier's CREATE OR REPLACE removes function settings; this tier, re-applied after
-- it, sets them again.
--
-- The search functions (sql/idempotent/020-search-rows.sql to 028-context.sql) say the caller's
-- tenant of every table they read, as a PL/pgSQL variable, so that Citus can send each
-- statement to the one shard group of that tenant ("Task Count: 1"). Two settings make sure it
-- does (public.rerank, 052-rerank.sql, reads its candidates by id on every shard: it gets them
-- so that it too plans each call with the values):
--
-- plan_cache_mode = force_custom_plan: the statements are planned at every call with the
--   variables' values, the tenant among them. A generic plan (which PL/pgSQL's plan cache may
--   choose after five calls) has the tenant as a parameter inside an OR, which Citus cannot
--   prune: it would go to every shard, and Citus prices its plans at zero, so the plan cache
--   would keep it. On one server each function sets the mode its statements need
--   (sql/idempotent/README.md, "Plans"): the setting made here replaces theirs.
--
-- citus.allow_nested_distributed_execution = on: a routed statement runs whole on the worker,
--   the search functions called in its FROM clause included (fused_candidates in hybrid_search,
--   vector_candidates in vector_search, windows in a windowed hybrid_search, ...): the whole
--   search then runs next to the tenant's shards, as a function delegated to the worker would.
--   The statements of such a function read that tenant's rows of the same shard group (local to
--   the worker, in the same transaction) and the reference tables (a copy on every node); Citus
--   refuses that unless this setting is on, because a nested query that needed other nodes
--   could read outside the transaction. It is on for these functions only (a setting of each,
--   in force while it runs): every statement they run on a worker is routed there by a tenant
--   condition, so it reads that tenant's shards, which are all on that worker. Without a tenant
--   (anon, the owner without claims) nothing is routed and the setting has no effect.

set local search_path = pg_catalog, pg_temp;

do $$
declare
    f record;
begin
    for f in
        select p.oid::regprocedure as sig,
               l.lanname = 'plpgsql'
               and p.proname in ('vector_candidates', 'keyword_candidates', 'fused_candidates',
                                 'windows', 'vector_search', 'keyword_search', 'hybrid_search',
                                 'build_context', 'build_context_for', 'context_from_hits', 'rerank',
                                 'vector_sizing', 'vector_walk_public', 'vector_walk_shared',
                                 'vector_walk_tenant_shared', 'vector_walk_own', 'vector_walk_general',
                                 'vector_exact_tenant', 'vector_exact',
                                 'bm25_corpus', 'bm25_terms', 'bm25_scan_tenant', 'bm25_scan_tenants',
                                 'bm25_maxscore', 'bm25_maxscore_floor', 'bm25_maxscore_essential',
                                 'bm25_maxscore_candidates', 'bm25_maxscore_complete', 'keyword_walk',
                                 'keyword_walk_unfenced', 'window_hits_unfenced', 'highlight') as custom_plans
        from pg_catalog.pg_proc as p
        join pg_catalog.pg_language as l on l.oid = p.prolang
        where (p.pronamespace = 'pgrag'::regnamespace
               and p.proname in ('vector_candidates', 'keyword_candidates', 'fused_candidates',
                                 'windows', 'context_from_hits', 'tenant_chunk_count', 'keyword_query',
                                 'mmr_order',
                                 'vector_sizing', 'vector_walk_public', 'vector_walk_shared',
                                 'vector_walk_tenant_shared', 'vector_walk_own', 'vector_walk_general',
                                 'vector_exact_tenant', 'vector_exact',
                                 'bm25_corpus', 'bm25_terms', 'bm25_scan_tenant', 'bm25_scan_tenants',
                                 'bm25_maxscore', 'bm25_maxscore_floor', 'bm25_maxscore_essential',
                                 'bm25_maxscore_candidates', 'bm25_maxscore_complete', 'keyword_walk',
                                 'keyword_walk_unfenced', 'window_hits_unfenced'))
           or (p.pronamespace = 'public'::regnamespace
               and p.proname in ('vector_search', 'keyword_search', 'hybrid_search',
                                 'chunk_windows', 'build_context', 'build_context_for', 'rerank',
                                 'highlight')
               and not exists (select 1 from pg_catalog.pg_depend as d
                               where d.classid = 'pg_catalog.pg_proc'::regclass
                                 and d.objid = p.oid and d.deptype = 'e'))
        order by 1
    loop
        execute pg_catalog.format('alter function %s set citus.allow_nested_distributed_execution = on', f.sig);
        if f.custom_plans then
            execute pg_catalog.format('alter function %s set plan_cache_mode = force_custom_plan', f.sig);
        end if;
    end loop;
end
$$;

-- The write paths' statements that one server plans generically (a batch's rows by key for a
-- tenant the statistics may not know: sql/idempotent/README.md, "Plans") plan every call with
-- the values here too: Citus cannot plan an insert or delete of a distributed table around
-- unbound parameters ("could not create distributed plan"). On the workers the tenant is then
-- a literal, and a tenant new to the workers' statistics still looks like one row there.
do $$
declare
    f record;
begin
    for f in
        select p.oid::regprocedure as sig
        from pg_catalog.pg_proc as p
        where p.pronamespace = 'pgrag'::regnamespace
          and p.proname in ('delete_document_chunks', 'insert_staged_chunks', 'chunk_is_public',
                            'document_is_public_changed')
        order by 1
    loop
        execute pg_catalog.format('alter function %s set plan_cache_mode = force_custom_plan', f.sig);
    end loop;
end
$$;

-- The execution mode the search functions read (sql/idempotent/020-search-rows.sql): on a Citus
-- coordinator every statement is planned at each call, so the forms that rely on a plan kept
-- for the session (the static walks) are not used.
create or replace function pgrag.distributed()
returns boolean
language sql
immutable
parallel safe
security invoker
as $$
    select true
$$;
comment on function pgrag.distributed() is
'The execution mode of the search functions: true on this Citus coordinator (every statement planned per call and routed by tenant). Set by the Citus tier; one server''s idempotent tier defines it false.';
