-- pgrag on Citus: the workers' copies of functions, triggers and privileges brought up to date.
-- Citus tier: applied by `pgrag migrate --citus` only, after the other files of sql/citus/.
--
-- On an installation whose tables are distributed already, pgrag migrate --citus applies a new
-- version's idempotent tier on the coordinator alone (citus.enable_ddl_propagation = off: that
-- tier re-creates triggers, subquery policies and the tenant column's default, which Citus
-- refuses on distributed tables or forwards as the text of the whole file). Its effects are
-- carried to the workers here, with propagation on, each statement alone through EXECUTE:
--   * every pgrag function (schema pgrag, and the API functions in public):
--     its definition executed again (Citus forwards CREATE OR REPLACE of a distributed
--     function) or, when new, made a distributed function; then its EXECUTE grants;
--   * every trigger on pgrag's Citus tables: CREATE OR REPLACE TRIGGER (to each shard; a
--     constraint trigger, which has no OR REPLACE, dropped and created);
--   * the privileges on pgrag's Citus tables, table and column grants (to each shard), and the
--     columns the coordinator fills with their defaults, for roles that insert the others
--     (shards only);
--   * the API roles' settings (statement_timeout, temp_file_limit).
-- The policies were re-made by 001-distribute.sql with propagation on. On a first install all
-- of this is there already (distributing a table copies it) and re-doing it changes nothing.
-- Not covered: a trigger or grant a new version drops stays on the shards (drop it there by
-- hand), and a new version's incremental files are refused on distributed tables.

set local search_path = pg_catalog, pg_temp;

do $$
declare
    f record;
    v_grants text[];
    v_grant text;
begin
    for f in
        select p.oid, p.oid::regprocedure as sig,
               exists (select 1 from pg_catalog.pg_dist_object as o
                       where o.classid = 'pg_catalog.pg_proc'::regclass and o.objid = p.oid)
                   as distributed
        from pg_catalog.pg_proc as p
        where (p.pronamespace = 'pgrag'::regnamespace
               or (p.pronamespace = 'public'::regnamespace
                   and p.proname in ('vector_search', 'keyword_search', 'hybrid_search',
                                     'chunk_windows', 'build_context', 'build_context_for',
                                     'rerank')))
          and p.prokind = 'f'
          and not exists (select 1 from pg_catalog.pg_depend as d
                          where d.classid = 'pg_catalog.pg_proc'::regclass
                            and d.objid = p.oid and d.deptype = 'e')
        order by p.oid
    loop
        if f.distributed then
            execute pg_catalog.pg_get_functiondef(f.oid);
        else
            perform pg_catalog.create_distributed_function(f.sig);
        end if;
        -- EXECUTE as the coordinator has it: revoke what the API roles and PUBLIC hold, grant
        -- back what the coordinator's ACL lists (read first: the revoke changes it).
        select pg_catalog.array_agg(pg_catalog.format('grant %s on function %s to %s',
                   a.privilege_type, f.sig,
                   case when a.grantee = 0 then 'public'
                        else pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(a.grantee)) end))
          into v_grants
          from pg_catalog.pg_proc as p
          cross join lateral pg_catalog.aclexplode(
              coalesce(p.proacl, pg_catalog.acldefault('f', p.proowner))) as a
         where p.oid = f.oid and a.grantee <> p.proowner;
        execute pg_catalog.format(
            'revoke all on function %s from public, anon, authenticated, service_role', f.sig);
        foreach v_grant in array coalesce(v_grants, '{}') loop
            execute v_grant;
        end loop;
    end loop;
end
$$;

do $$
declare
    t record;
    v_grants text[];
    v_grant text;
begin
    for t in
        select tr.oid, tr.tgrelid::regclass as rel, tr.tgname, tr.tgconstraint <> 0 as is_constraint,
               pg_catalog.pg_get_triggerdef(tr.oid) as def
        from pg_catalog.pg_trigger as tr
        join pg_catalog.pg_class as cl on cl.oid = tr.tgrelid
        where cl.relnamespace = 'pgrag'::regnamespace
          and not tr.tgisinternal
          and exists (select 1 from pg_catalog.pg_dist_partition as d where d.logicalrelid = tr.tgrelid)
        order by tr.oid
    loop
        if t.is_constraint then
            -- (CREATE OR REPLACE does not exist for constraint triggers: dropped and created,
            -- in this transaction, as sql/idempotent does)
            execute pg_catalog.format('drop trigger %I on %s', t.tgname, t.rel);
            execute t.def;
        else
            execute pg_catalog.regexp_replace(t.def, '^CREATE TRIGGER', 'CREATE OR REPLACE TRIGGER');
        end if;
    end loop;

    for t in
        select cl.oid, cl.oid::regclass as rel, cl.relowner
        from pg_catalog.pg_class as cl
        where cl.relnamespace = 'pgrag'::regnamespace
          and exists (select 1 from pg_catalog.pg_dist_partition as d where d.logicalrelid = cl.oid)
        order by cl.oid
    loop
        -- table and column grants as the coordinator has them (read first: the revoke below
        -- takes the column grants too)
        select pg_catalog.array_agg(x.stmt order by x.ord)
          into v_grants
          from (
              select 1 as ord, pg_catalog.format('grant %s on table %s to %s',
                         pg_catalog.string_agg(a.privilege_type, ', '), t.rel,
                         case when a.grantee = 0 then 'public'
                              else pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(a.grantee)) end) as stmt
              from pg_catalog.aclexplode(
                       (select cl.relacl from pg_catalog.pg_class as cl where cl.oid = t.oid)) as a
              where a.grantee <> t.relowner
              group by a.grantee
              union all
              select 2, pg_catalog.format('grant %s (%I) on table %s to %s', a.privilege_type,
                         at.attname, t.rel,
                         case when a.grantee = 0 then 'public'
                              else pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(a.grantee)) end)
              from pg_catalog.pg_attribute as at
              cross join lateral pg_catalog.aclexplode(at.attacl) as a
              where at.attrelid = t.oid and at.attnum > 0 and not at.attisdropped
                and at.attacl is not null
          ) as x;
        execute pg_catalog.format(
            'revoke all on table %s from public, anon, authenticated, service_role', t.rel);
        foreach v_grant in array coalesce(v_grants, '{}') loop
            execute v_grant;
        end loop;
    end loop;
end
$$;

-- Values the coordinator fills in. A role that may insert some columns of a table but not all
-- (authenticated: sql/idempotent/900-row-security.sql grants it no identity or serial column,
-- so no tenant chooses an id, and not is_public) still inserts rows whose other columns take
-- their defaults: on one server the defaults fill them; on Citus the coordinator evaluates every
-- default (ids from the sequences, now(), is_public false) and sends the shard an INSERT naming
-- those columns, which the shard's column grants refuse ("permission denied for table
-- search_log_102234": public.log_search and a tenant's own inserts failed). So each such role
-- gets INSERT on the columns with a default on the shards only: granted with propagation on,
-- revoked again on the coordinator alone, which still checks the columns a client names (and
-- the workers accept logins from the cluster's nodes only: docs/scaling.md, "Roles and
-- pg_hba").
do $$
declare
    c record;
begin
    for c in
        select a.attrelid::regclass as rel, a.attname,
               pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(g.grantee)) as role
        from pg_catalog.pg_attribute as a
        join pg_catalog.pg_class as cl on cl.oid = a.attrelid
        cross join lateral (
            select distinct x.grantee
            from pg_catalog.pg_attribute as o
            cross join lateral pg_catalog.aclexplode(o.attacl) as x
            where o.attrelid = a.attrelid and o.attacl is not null
              and x.privilege_type = 'INSERT' and x.grantee <> 0 and x.grantee <> cl.relowner
        ) as g
        where cl.relnamespace = 'pgrag'::regnamespace
          and exists (select 1 from pg_catalog.pg_dist_partition as d where d.logicalrelid = cl.oid)
          and a.attnum > 0 and not a.attisdropped
          and (a.attidentity <> '' or (a.atthasdef and a.attgenerated = ''))
          and not pg_catalog.has_column_privilege(g.grantee, a.attrelid, a.attnum, 'INSERT')
        order by 1, 2, 3
    loop
        perform pg_catalog.set_config('citus.enable_ddl_propagation', 'on', true);
        execute pg_catalog.format('grant insert (%I) on table %s to %s', c.attname, c.rel, c.role);
        perform pg_catalog.set_config('citus.enable_ddl_propagation', 'off', true);
        execute pg_catalog.format('revoke insert (%I) on table %s from %s', c.attname, c.rel, c.role);
    end loop;
    perform pg_catalog.set_config('citus.enable_ddl_propagation', 'on', true);
end
$$;

-- The API roles' settings (sql/idempotent/920-role-limits.sql sets them on the role, for every
-- database): Citus forwards ALTER ROLE ... SET to the workers.
do $$
declare
    r record;
begin
    for r in
        select ro.rolname, pg_catalog.split_part(c.item, '=', 1) as name,
               pg_catalog.substr(c.item, pg_catalog.strpos(c.item, '=') + 1) as value
        from pg_catalog.pg_roles as ro
        cross join lateral pg_catalog.unnest(ro.rolconfig) as c (item)
        where ro.rolname in ('anon', 'authenticated', 'service_role')
    loop
        begin
            execute pg_catalog.format('alter role %I set %I = %L', r.rolname, r.name, r.value);
        exception when insufficient_privilege then
            raise warning 'pgrag: cannot copy % of role % to the workers (%)', r.name, r.rolname, sqlerrm
                using hint = 'set it on the workers as an administrator';
        end;
    end loop;
end
$$;
