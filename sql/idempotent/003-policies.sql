-- pgrag row-level security policies, grants and API-role statement timeouts.
-- Idempotent: re-applied on every migrate, after every other file (privileges last), so a table
-- or function another file adds gets its policies and grants on the next migrate.
--
-- Trust model (docs/security.md): PostgREST verifies the JWT, switches to the role it names
-- (anon, authenticated or service_role) and puts the claims into request.jwt.claims;
-- pgrag.current_tenant_id() reads the tenant from there. The roles:
--   authenticated  reads and writes only the rows of its tenant; INSERT and UPDATE are checked
--                  (WITH CHECK), so no row can be written into, or moved to, another tenant.
--   anon           reads only documents marked is_public and the rows of tables with a
--                  document_id (chunks) that belong to such a document; no rows of other tenant
--                  tables (BM25 postings and statistics); writes nothing.
--   service_role   full access (BYPASSRLS on Supabase; explicit policies here as well, so it
--                  also holds where the role was created without BYPASSRLS).
-- Global tables: embedding_config is readable by the three roles (search checks the model and
-- dimension), writable by none; schema_migrations is neither. No role gets TRUNCATE, REFERENCES
-- or TRIGGER (TRUNCATE ignores RLS). pgrag has no SECURITY DEFINER function.
--
-- Policy names start with pgrag_: those are (re)created here; policies an administrator adds
-- under other names are left alone (they are permissive, so they can only widen access).

-- The migrator already resolves names in pg_catalog only; said again for psql and for pgspot.
set local search_path = pg_catalog, pg_temp;

-- Schema: reachable by the API roles (search functions run as the caller, security invoker),
-- nothing for PUBLIC, no CREATE for anyone but the owner.
revoke all on schema pgrag from public;
grant usage on schema pgrag to anon, authenticated, service_role;

do $$
declare
    t record;
    cond text;
    anon_cond text;
begin
    -- Drop the policies of earlier versions first: renamed or removed ones must not linger.
    for t in
        select p.schemaname, p.tablename, p.policyname
        from pg_catalog.pg_policies as p
        where p.schemaname = 'pgrag' and p.policyname like 'pgrag\_%'
    loop
        execute pg_catalog.format('drop policy %I on %I.%I', t.policyname, t.schemaname, t.tablename);
    end loop;

    -- Start every table from no privileges for PUBLIC and the API roles.
    execute 'revoke all on all tables in schema pgrag from public, anon, authenticated, service_role';
    execute 'revoke all on all sequences in schema pgrag from public, anon, authenticated, service_role';

    -- Tenant tables: every table of schema pgrag with a tenant_id column.
    for t in
        select c.oid, c.relname, c.relrowsecurity,
               exists (select 1 from pg_catalog.pg_attribute as a
                       where a.attrelid = c.oid and a.attname = 'document_id' and not a.attisdropped)
                   as has_document
        from pg_catalog.pg_class as c
        where c.relnamespace = 'pgrag'::regnamespace
          and c.relkind in ('r', 'p')
          and exists (select 1 from pg_catalog.pg_attribute as a
                      where a.attrelid = c.oid and a.attname = 'tenant_id' and not a.attisdropped)
        order by c.relname
    loop
        if not t.relrowsecurity then
            raise exception 'pgrag.% has a tenant_id column but row level security is off', t.relname
                using hint = 'enable row level security in the migration that creates the table';
        end if;
        cond := '(tenant_id = (select pgrag.current_tenant_id()))';
        execute pg_catalog.format('create policy pgrag_authenticated_select on pgrag.%I for select to authenticated using %s', t.relname, cond);
        execute pg_catalog.format('create policy pgrag_authenticated_insert on pgrag.%I for insert to authenticated with check %s', t.relname, cond);
        execute pg_catalog.format('create policy pgrag_authenticated_update on pgrag.%I for update to authenticated using %s with check %s', t.relname, cond, cond);
        execute pg_catalog.format('create policy pgrag_authenticated_delete on pgrag.%I for delete to authenticated using %s', t.relname, cond);
        execute pg_catalog.format('create policy pgrag_service_role_select on pgrag.%I for select to service_role using (true)', t.relname);
        execute pg_catalog.format('create policy pgrag_service_role_insert on pgrag.%I for insert to service_role with check (true)', t.relname);
        execute pg_catalog.format('create policy pgrag_service_role_update on pgrag.%I for update to service_role using (true) with check (true)', t.relname);
        execute pg_catalog.format('create policy pgrag_service_role_delete on pgrag.%I for delete to service_role using (true)', t.relname);
        execute pg_catalog.format('grant select, insert, update, delete on pgrag.%I to authenticated, service_role', t.relname);

        -- anon: public documents, and rows that belong to a public document. SELECT is granted
        -- on every tenant table so that search functions run for anon without a permission
        -- error; a table without an anon policy (postings, statistics) shows anon no rows.
        execute pg_catalog.format('grant select on pgrag.%I to anon', t.relname);
        anon_cond := case
            when t.relname = 'documents' then '(is_public)'
            when t.has_document then pg_catalog.format(
                '(exists (select 1 from pgrag.documents as d where d.tenant_id = %1$I.tenant_id '
                'and d.id = %1$I.document_id and d.is_public))', t.relname)
        end;
        if anon_cond is not null then
            execute pg_catalog.format('create policy pgrag_anon_select on pgrag.%I for select to anon using %s', t.relname, anon_cond);
        end if;
    end loop;
end
$$;

-- Global configuration: readable by the API roles (one policy per role), written by none.
create policy pgrag_anon_select on pgrag.embedding_config for select to anon using (true);
create policy pgrag_authenticated_select on pgrag.embedding_config for select to authenticated using (true);
create policy pgrag_service_role_select on pgrag.embedding_config for select to service_role using (true);
grant select on pgrag.embedding_config to anon, authenticated, service_role;
-- Allowed text-search configurations: read by the check on chunks (it runs as the writer).
create policy pgrag_anon_select on pgrag.text_search_configs for select to anon using (true);
create policy pgrag_authenticated_select on pgrag.text_search_configs for select to authenticated using (true);
create policy pgrag_service_role_select on pgrag.text_search_configs for select to service_role using (true);
grant select on pgrag.text_search_configs to anon, authenticated, service_role;
-- pgrag.schema_migrations: no grant, no policy (the owner, i.e. the migrator, alone).

-- Identity sequences of tenant tables: inserting a row draws an id.
do $$
declare
    s record;
begin
    for s in
        select c.relname
        from pg_catalog.pg_class as c
        where c.relnamespace = 'pgrag'::regnamespace and c.relkind = 'S'
        order by c.relname
    loop
        execute pg_catalog.format('grant usage on sequence pgrag.%I to authenticated, service_role', s.relname);
    end loop;
end
$$;

-- Functions in pgrag: none for PUBLIC. The API roles may execute the SECURITY INVOKER ones
-- (current_tenant_id, which every policy calls, and the helpers the search functions call):
-- they run with the caller's rights under RLS, so they reach nothing the caller could not
-- read directly. Trigger functions need no grant. A SECURITY DEFINER function would get no
-- grant here (and fails the audit test in tests/test_security.py).
do $$
declare
    f record;
begin
    execute 'revoke all on all functions in schema pgrag from public, anon, authenticated, service_role';
    for f in
        select p.oid::regprocedure as sig
        from pg_catalog.pg_proc as p
        where p.pronamespace = 'pgrag'::regnamespace
          and p.prokind = 'f'
          and not p.prosecdef
          and p.prorettype <> 'pg_catalog.trigger'::pg_catalog.regtype
        order by 1
    loop
        execute pg_catalog.format('grant execute on function %s to anon, authenticated, service_role', f.sig);
    end loop;
end
$$;
-- Acting as a tenant is for trusted direct sessions (CLI, ingester), not for the API roles.
revoke all on function pgrag.set_request_tenant(text) from anon, authenticated, service_role;

-- The RPC API in the exposed schema (public): executable by the API roles, not by PUBLIC.
-- The list names every function pgrag creates there; tests/test_security.py checks that each
-- "create function public.*" in sql/ is listed.
do $$
declare
    f record;
begin
    for f in
        select p.oid::regprocedure as sig
        from pg_catalog.pg_proc as p
        where p.pronamespace = 'public'::regnamespace
          and p.proname = any (array[
              'vector_search', 'keyword_search', 'hybrid_search', 'chunk_windows',
              'build_context'
          ])
          -- never an extension's function of the same name
          and not exists (select 1 from pg_catalog.pg_depend as d
                          where d.classid = 'pg_catalog.pg_proc'::regclass and d.objid = p.oid
                            and d.deptype = 'e')
        order by 1
    loop
        execute pg_catalog.format('revoke all on function %s from public', f.sig);
        execute pg_catalog.format('grant execute on function %s to anon, authenticated, service_role', f.sig);
    end loop;
end
$$;

-- Statement timeouts for the API roles in this database (as Supabase: anon 3s,
-- authenticated 8s). Configure with the settings pgrag.anon_statement_timeout and
-- pgrag.authenticated_statement_timeout when migrating, e.g.
--   PGOPTIONS='-c pgrag.authenticated_statement_timeout=15s' pgrag migrate
-- ('0' disables, 'reset' removes pgrag's setting). Without them, a role that already has a
-- statement_timeout (Supabase sets one for the whole cluster) keeps it; otherwise the default
-- is set for this database only.
do $$
declare
    r record;
    wanted text;
    configured boolean;
begin
    for r in select * from (values ('anon', '3s'), ('authenticated', '8s')) as v (role_name, fallback)
    loop
        wanted := nullif(pg_catalog.current_setting('pgrag.' || r.role_name || '_statement_timeout', true), '');
        if wanted is null then
            select exists (
                select 1
                from pg_catalog.pg_db_role_setting as s
                join pg_catalog.pg_roles as ro on ro.oid = s.setrole
                where ro.rolname = r.role_name
                  and s.setdatabase in (0, (select oid from pg_catalog.pg_database
                                            where datname = pg_catalog.current_database()))
                  and exists (select 1 from pg_catalog.unnest(s.setconfig) as c (item)
                              where c.item like 'statement\_timeout=%')
            ) into configured;
            if configured then
                continue;
            end if;
            wanted := r.fallback;
        end if;
        begin
            if wanted = 'reset' then
                execute pg_catalog.format('alter role %I in database %I reset statement_timeout',
                    r.role_name, pg_catalog.current_database());
            else
                execute pg_catalog.format('alter role %I in database %I set statement_timeout = %L',
                    r.role_name, pg_catalog.current_database(), wanted);
            end if;
        exception when insufficient_privilege then
            raise warning 'pgrag: cannot set statement_timeout for role % (%); set it as an administrator',
                r.role_name, sqlerrm;
        end;
    end loop;
end
$$;
