-- pgrag on Citus: a tenant's search reaches one worker.
-- Citus tier: applied by `pgrag migrate --citus` only, after sql/citus/002-functions.sql.
--
-- Citus sends a statement to the one shard group of a tenant ("Task Count: 1") when it can read
-- the tenant from the statement: tenant_id = a constant or a parameter (a PL/pgSQL variable),
-- or = any (an array parameter).
-- Most statements of the search functions filter that way already. The others join the chunks
-- of a candidate list on (tenant_id, id), with the tenant coming from the list: Citus cannot
-- prune those and runs them on every shard (32 tasks by default over the workers, each reading
-- an index for nothing), which took a single tenant's hybrid_search from ~20 ms to ~400 ms on the
-- test cluster (with the edits below: ~16 ms). Here each of those joins gets the condition
--     and (v_citus_tenant is null or <alias>.tenant_id = v_citus_tenant)
-- where v_citus_tenant is pgrag.current_tenant_id() (the caller's tenant, as every arm already
-- uses): for a tenant the rows are the same (every candidate is the tenant's: the arms and RLS
-- return no others), and Citus routes the statement; without a tenant (anon, the owner) nothing
-- changes. The edits are made to the installed functions (released bodies, and the twins of
-- 002-functions.sql) as text replacements of exact lines of their bodies: an anchor that is not
-- found exactly as often as listed stops the migration (the released body changed: update the
-- anchor here), and a function that already holds the edits is left alone.

set local search_path = pg_catalog, pg_temp;

do $$
declare
    e record;
    v_src text;
    v_def text;
    v_fn regprocedure;
    v_found integer;
    v_marker constant text := '-- (pgrag citus)';
    v_declare constant text := E'    v_citus_tenant text := pgrag.current_tenant_id();  -- (pgrag citus)\n';
    v_edits text[][];
begin
    for v_fn, v_edits in
        select f.fn::regprocedure, f.edits
        from (values
            -- released PL/pgSQL functions
            -- (the BM25 trigger's delete of postings runs on a worker, inside the delete of a
            -- shard's chunks: only a statement routed to that shard group may run there)
            ('pgrag.bm25_apply(integer, text[], bigint[], text[], tsvector[])',
             array[
                 array[E'        where p.tenant_id = o.tenant_id and p.lexeme = o.lexeme and p.chunk_id = o.id;\n',
                       E'        where p.tenant_id = o.tenant_id and p.lexeme = o.lexeme and p.chunk_id = o.id\n'
                       || E'          and p.tenant_id = any (tenant_ids);  -- (pgrag citus)\n', '1']]),
            ('pgrag.keyword_candidates(text, integer, text, double precision, double precision, bigint[], jsonb, text[], timestamptz, timestamptz)',
             array[
                 array[E'            join pgrag.chunks as c on c.tenant_id = u.t and c.id = u.id\n',
                       E'            join pgrag.chunks as c on c.tenant_id = u.t and c.id = u.id\n'
                       || E'                and (v_tenant is null or c.tenant_id = v_tenant)  -- (pgrag citus)\n', '1']]),
            ('pgrag.fused_candidates(text, @extschema:vector@.vector, integer, integer, text, integer, double precision, double precision, double precision, double precision, text, integer, bigint[], jsonb, text[], timestamptz, timestamptz)',
             array[
                 array[E'#variable_conflict use_column\ndeclare\n', E'#variable_conflict use_column\ndeclare\n' || v_declare, '1'],
                 array[E'        join pgrag.chunks as c on c.tenant_id = f.t and c.id = f.id\n',
                       E'        join pgrag.chunks as c on c.tenant_id = f.t and c.id = f.id\n'
                       || E'            and (v_citus_tenant is null or c.tenant_id = v_citus_tenant)  -- (pgrag citus)\n', '1']]),
            ('public.hybrid_search(text, @extschema:vector@.vector, integer, text, integer, double precision, double precision, integer, integer, double precision, double precision, text, integer, bigint[], jsonb, text[], timestamptz, timestamptz)',
             array[
                 array[E'#variable_conflict use_column\ndeclare\n', E'#variable_conflict use_column\ndeclare\n' || v_declare, '1'],
                 array[E'join pgrag.chunks as c on c.tenant_id = f.tenant_id and c.id = f.chunk_id\n',
                       E'join pgrag.chunks as c on c.tenant_id = f.tenant_id and c.id = f.chunk_id\n'
                       || E'        and (v_citus_tenant is null or c.tenant_id = v_citus_tenant)  -- (pgrag citus)\n', '2']]),
            -- the twins of sql/citus/002-functions.sql
            ('pgrag_citus.vector_search(@extschema:vector@.vector, integer, double precision, integer, bigint[], jsonb, text[], timestamptz, timestamptz)',
             array[
                 array[E'#variable_conflict use_column\nbegin\n', E'#variable_conflict use_column\ndeclare\n' || v_declare || E'begin\n', '1'],
                 array[E'    join pgrag.chunks as c on c.tenant_id = v.tenant_id and c.id = v.chunk_id\n',
                       E'    join pgrag.chunks as c on c.tenant_id = v.tenant_id and c.id = v.chunk_id\n'
                       || E'        and (v_citus_tenant is null or c.tenant_id = v_citus_tenant)  -- (pgrag citus)\n', '1']]),
            ('pgrag_citus.keyword_search(text, integer, text, double precision, double precision, bigint[], jsonb, text[], timestamptz, timestamptz)',
             array[
                 array[E'#variable_conflict use_column\nbegin\n', E'#variable_conflict use_column\ndeclare\n' || v_declare || E'begin\n', '1'],
                 array[E'    join pgrag.chunks as c on c.tenant_id = k.tenant_id and c.id = k.chunk_id\n',
                       E'    join pgrag.chunks as c on c.tenant_id = k.tenant_id and c.id = k.chunk_id\n'
                       || E'        and (v_citus_tenant is null or c.tenant_id = v_citus_tenant)  -- (pgrag citus)\n', '1']]),
            ('pgrag_citus.chunk_windows(bigint[], integer, double precision[], double precision)',
             array[
                 array[E'#variable_conflict use_column\nbegin\n', E'#variable_conflict use_column\ndeclare\n' || v_declare || E'begin\n', '1'],
                 array[E'        join pgrag.chunks as c on c.id = u.id\n',
                       E'        join pgrag.chunks as c on c.id = u.id\n'
                       || E'            and (v_citus_tenant is null or c.tenant_id = v_citus_tenant)  -- (pgrag citus)\n', '1']]),
            ('pgrag_citus.windows(text[], bigint[], integer, double precision[], double precision)',
             array[
                 array[E'#variable_conflict use_column\nbegin\n', E'#variable_conflict use_column\ndeclare\n' || v_declare || E'begin\n', '1'],
                 array[E'        join pgrag.chunks as c on c.tenant_id = h.t and c.id = h.id\n',
                       E'        join pgrag.chunks as c on c.tenant_id = h.t and c.id = h.id\n'
                       || E'            and (v_citus_tenant is null or c.tenant_id = v_citus_tenant)  -- (pgrag citus)\n', '1'],
                 array[E'          on n.tenant_id = hc.t and n.document_id = hc.document_id\n',
                       E'          on n.tenant_id = hc.t and n.document_id = hc.document_id\n'
                       || E'         and (v_citus_tenant is null or n.tenant_id = v_citus_tenant)  -- (pgrag citus)\n', '1'],
                 array[E'          on c.tenant_id = e.t and c.document_id = e.document_id and c.chunk_index = e.idx\n',
                       E'          on c.tenant_id = e.t and c.document_id = e.document_id and c.chunk_index = e.idx\n'
                       || E'         and (v_citus_tenant is null or c.tenant_id = v_citus_tenant)  -- (pgrag citus)\n', '1'],
                 array[E'    join pgrag.documents as d on d.tenant_id = w.t and d.id = w.document_id\n',
                       E'    join pgrag.documents as d on d.tenant_id = w.t and d.id = w.document_id\n'
                       || E'        and (v_citus_tenant is null or d.tenant_id = v_citus_tenant)  -- (pgrag citus)\n', '1']])
        ) as f (fn, edits)
    loop
        select p.prosrc into v_src from pg_catalog.pg_proc as p where p.oid = v_fn;
        continue when pg_catalog.strpos(v_src, v_marker) > 0;  -- edited already
        v_def := pg_catalog.pg_get_functiondef(v_fn);
        for i in 1 .. pg_catalog.array_length(v_edits, 1) loop
            v_found := (pg_catalog.length(v_src) - pg_catalog.length(pg_catalog.replace(v_src, v_edits[i][1], '')))
                       / pg_catalog.length(v_edits[i][1]);
            if v_found <> v_edits[i][3]::integer then
                raise exception 'pgrag --citus: the body of % holds % times (not %) the line it edits: %',
                    v_fn, v_found, v_edits[i][3], pg_catalog.left(pg_catalog.btrim(v_edits[i][1], E' \n'), 120)
                    using hint = 'the released function changed: update its anchors in sql/citus/003-routing.sql';
            end if;
            v_src := pg_catalog.replace(v_src, v_edits[i][1], v_edits[i][2]);
            v_def := pg_catalog.replace(v_def, v_edits[i][1], v_edits[i][2]);
        end loop;
        execute v_def;
    end loop;
end
$$;

-- A routed statement runs whole on the worker, the search functions called in its FROM clause
-- included (fused_candidates in hybrid_search, vector_candidates in vector_search, windows in
-- a windowed hybrid_search, ...): Citus then runs the whole search next to the tenant's shards,
-- as it would run a function delegated to the worker. The statements of such a function read
-- the tenant's rows of the same shard group (local to that worker, executed in the same
-- transaction) and the reference tables (a copy on every node); Citus refuses that unless
-- citus.allow_nested_distributed_execution is on, because a nested query that needed other
-- nodes could read outside the transaction. It is on for these functions only (a setting of
-- each, in force while it runs): every statement they run on a worker is pushed there by a
-- tenant condition, so it reads that tenant's shards, which are all on that worker. Without a
-- tenant (anon, the owner) nothing is pushed down and the setting has no effect. (The
-- idempotent tier's CREATE OR REPLACE removes the setting; this file, re-applied after it, sets
-- it again.)
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
           or p.pronamespace = 'pgrag_citus'::regnamespace
        order by 1
    loop
        execute pg_catalog.format('alter function %s set citus.allow_nested_distributed_execution = on', f);
    end loop;
end
$$;
