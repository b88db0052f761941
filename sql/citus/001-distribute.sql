-- pgrag on Citus: tables distributed by tenant, configuration tables on every node.
-- Citus tier: applied by `pgrag migrate --citus` only, after the incremental and idempotent
-- tiers, with the other files of sql/citus/ in one transaction; re-applied whenever they change
-- or the other tiers applied anything. Every statement here is idempotent. docs/scaling.md.
--
-- Citus 13 forwards some commands (CREATE TRIGGER, DROP POLICY, SET LOCAL) to the workers as the
-- text of the whole query string, and this file reaches the server as one string of many
-- statements: such commands run here inside DO blocks, through EXECUTE, whose query string is
-- the statement alone.

set local search_path = pg_catalog, pg_temp;

do $$
begin
    if not exists (select 1 from pg_catalog.pg_extension where extname = 'citus') then
        raise exception 'pgrag migrate --citus needs the citus extension in this database'
            using errcode = '0A000',
                  hint = 'run it on the coordinator, after create extension citus and citus_add_node for each worker (docs/scaling.md).';
    end if;
    if (select pg_catalog.count(*) from pg_catalog.citus_get_active_worker_nodes()) = 0 then
        raise exception 'pgrag migrate --citus: this Citus coordinator has no active worker'
            using errcode = '0A000',
                  hint = 'add the workers first: select citus_add_node(host, port) (docs/scaling.md).';
    end if;
end
$$;

-- Settings of this transaction (set_config, not SET: with citus.propagate_set_commands = local
-- Citus would send the workers the whole query string holding a SET, i.e. this tier):
--   * DDL reaches the workers (pgrag migrate --citus turns it off for the other tiers of an
--     upgrade; this tier re-makes the policies and carries the rest to the workers);
--   * distributing tables with triggers, and creating triggers on distributed tables, needs
--     citus.enable_unsafe_triggers: pgrag's triggers on pgrag.chunks and pgrag.documents touch
--     only rows of the same tenant in tables co-located with it (the BM25 postings, lexicon and
--     statistics; the document's chunks), so they run on the worker holding the shard;
--   * one connection per worker: Citus refuses schema DDL after a parallel operation
--     (distributing a table) in the same transaction.
select pg_catalog.set_config('citus.enable_ddl_propagation', 'on', true),
       pg_catalog.set_config('citus.enable_unsafe_triggers', 'on', true),
       pg_catalog.set_config('citus.multi_shard_modify_mode', 'sequential', true);

-- The API roles open the coordinator's connections to the workers: Citus connects as the
-- current role (after SET ROLE authenticated, as authenticated), so each must be able to log in.
-- pg_hba.conf on every node then decides who may: these roles only from the cluster's own
-- nodes, with a password or certificate Citus holds (docs/scaling.md, "Roles and pg_hba").
do $$
declare
    r text;
begin
    foreach r in array array['anon', 'authenticated', 'service_role'] loop
        if not (select rolcanlogin from pg_catalog.pg_roles where rolname = r) then
            execute pg_catalog.format('alter role %I login', r);
            raise warning 'pgrag: role % may now log in (Citus connects to the workers as the current role)', r
                using hint = 'allow it in pg_hba.conf from the cluster''s nodes only (docs/scaling.md, "Roles and pg_hba").';
        end if;
    end loop;
end
$$;

-- Row-level security as the shards can hold it. Citus refuses policies with subqueries on a
-- distributed table, so the policies of sql/idempotent/900-row-security.sql are re-made here,
-- on the same tables, for the same commands and roles, with two expressions changed:
--   tenant:  (tenant_id = (select pgrag.current_tenant_id()))  ->  (tenant_id = pgrag.current_tenant_id())
--            (the same test; the function is stable, so it is still an index condition; on one
--            server the subquery form stays: evaluated once per statement, never per row)
--   anon:    exists (a public document of the row)  ->  (is_public)
--            (pgrag.chunks.is_public is the copy of its document's flag that the triggers of
--            sql/idempotent/003-publishing.sql keep, the predicate of anon's HNSW index; on one
--            server anon's policy keeps asking the document itself)
-- A pgrag_ policy this file does not know (a later version's) stops the migration: it must be
-- translated here first.
do $$
declare
    t record;
    p record;
    tenant_cond text := '(tenant_id = pgrag.current_tenant_id())';
    v_known text[] := array[
        'pgrag_authenticated_select', 'pgrag_authenticated_insert', 'pgrag_authenticated_update',
        'pgrag_authenticated_delete', 'pgrag_service_role_select', 'pgrag_service_role_insert',
        'pgrag_service_role_update', 'pgrag_service_role_delete', 'pgrag_anon_select'];
begin
    for t in
        select c.oid, c.relname,
               exists (select 1 from pg_catalog.pg_attribute as a
                       where a.attrelid = c.oid and a.attname = 'is_public' and not a.attisdropped)
                   as has_is_public
        from pg_catalog.pg_class as c
        where c.relnamespace = 'pgrag'::regnamespace
          and c.relkind in ('r', 'p')
          and exists (select 1 from pg_catalog.pg_attribute as a
                      where a.attrelid = c.oid and a.attname = 'tenant_id' and not a.attisdropped)
        order by c.relname
    loop
        for p in
            select pol.polname
            from pg_catalog.pg_policy as pol
            where pol.polrelid = t.oid and pol.polname like 'pgrag\_%'
        loop
            if not (p.polname = any (v_known)) then
                raise exception 'pgrag --citus: policy % on pgrag.% has no Citus form', p.polname, t.relname
                    using hint = 'add it to sql/citus/001-distribute.sql';
            end if;
        end loop;
        if exists (select 1 from pg_catalog.pg_policy as pol
                   where pol.polrelid = t.oid and pol.polname = 'pgrag_anon_select')
           and not t.has_is_public then
            raise exception 'pgrag --citus: pgrag.% has an anon policy but no is_public column', t.relname
                using hint = 'its anon policy needs a Citus form in sql/citus/001-distribute.sql';
        end if;
        for p in
            select pol.polname, pol.polname = 'pgrag_anon_select' as anon
            from pg_catalog.pg_policy as pol
            where pol.polrelid = t.oid and pol.polname like 'pgrag\_%'
            order by pol.polname
        loop
            execute pg_catalog.format('drop policy %I on pgrag.%I', p.polname, t.relname);
            if p.anon then
                execute pg_catalog.format(
                    'create policy pgrag_anon_select on pgrag.%I for select to anon using (is_public)',
                    t.relname);
            end if;
        end loop;
        execute pg_catalog.format('create policy pgrag_authenticated_select on pgrag.%I for select to authenticated using %s', t.relname, tenant_cond);
        execute pg_catalog.format('create policy pgrag_authenticated_insert on pgrag.%I for insert to authenticated with check %s', t.relname, tenant_cond);
        execute pg_catalog.format('create policy pgrag_authenticated_update on pgrag.%I for update to authenticated using %s with check %s', t.relname, tenant_cond, tenant_cond);
        execute pg_catalog.format('create policy pgrag_authenticated_delete on pgrag.%I for delete to authenticated using %s', t.relname, tenant_cond);
        execute pg_catalog.format('create policy pgrag_service_role_select on pgrag.%I for select to service_role using (true)', t.relname);
        execute pg_catalog.format('create policy pgrag_service_role_insert on pgrag.%I for insert to service_role with check (true)', t.relname);
        execute pg_catalog.format('create policy pgrag_service_role_update on pgrag.%I for update to service_role using (true) with check (true)', t.relname);
        execute pg_catalog.format('create policy pgrag_service_role_delete on pgrag.%I for delete to service_role using (true)', t.relname);
    end loop;
end
$$;

-- Distribution: every table of schema pgrag with a tenant_id column is hash-distributed by it,
-- all co-located with pgrag.documents (a tenant's documents, chunks, postings, lexicon and
-- statistics live in shards of one group, on one worker: joins on the tenant and the triggers
-- stay on that worker); the configuration the workers read (embedding_config,
-- text_search_configs) becomes a reference table, copied to every node. schema_migrations stays
-- a plain table of the coordinator: only the migrator reads it, and its upsert (applied_at =
-- now() on conflict) is refused on any Citus table. Tables already distributed are left as they
-- are; a table a later version adds is distributed by the next pgrag migrate --citus.
do $$
declare
    t record;
begin
    for t in
        select c.oid::regclass as rel,
               exists (select 1 from pg_catalog.pg_attribute as a
                       where a.attrelid = c.oid and a.attname = 'tenant_id' and not a.attisdropped)
                   as tenant_scoped
        from pg_catalog.pg_class as c
        where c.relnamespace = 'pgrag'::regnamespace
          and c.relkind in ('r', 'p')
          and c.relname <> 'schema_migrations'
          and not exists (select 1 from pg_catalog.pg_dist_partition as d where d.logicalrelid = c.oid)
        -- documents first (the others are co-located with it, and chunks references it), then
        -- the tenant tables, then the reference tables
        order by c.relname <> 'documents', 2 desc, c.relname
    loop
        if not t.tenant_scoped then
            perform pg_catalog.create_reference_table(t.rel);
        elsif t.rel = 'pgrag.documents'::regclass then
            perform pg_catalog.create_distributed_table(t.rel, 'tenant_id', colocate_with => 'none');
        else
            perform pg_catalog.create_distributed_table(t.rel, 'tenant_id',
                                                        colocate_with => 'pgrag.documents');
        end if;
    end loop;
end
$$;
