-- pgrag row-level security policies, grants and API-role statement timeouts.
-- Idempotent: re-applied on every migrate, after every other file (privileges last), so a table
-- or function another file adds gets its policies and grants on the next migrate.
--
-- Trust model (docs/security.md): PostgREST verifies the JWT, switches to the role it names
-- (anon, authenticated or service_role) and puts the claims into request.jwt.claims;
-- pgrag.current_tenant_id() reads the tenant from there. The roles:
--   authenticated  reads and writes only the rows of its tenant; INSERT and UPDATE are checked
--                  (WITH CHECK), so no row can be written into, or moved to, another tenant.
--                  It writes every column except ids (identity), generated columns and
--                  is_public: no borrowed ids, no publishing to anon.
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
    cols text;
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
        execute pg_catalog.format('grant select, insert, update, delete on pgrag.%I to service_role', t.relname);
        -- authenticated writes its rows column by column: never an identity (ids come from the
        -- sequences, so no tenant can create a row under another tenant's id, even with
        -- OVERRIDING SYSTEM VALUE), a generated column, or is_public (publishing to anon is for
        -- service_role and the owner; docs/security.md, "Writes").
        select pg_catalog.string_agg(pg_catalog.quote_ident(a.attname), ', ' order by a.attnum)
          into cols
          from pg_catalog.pg_attribute as a
         where a.attrelid = t.oid and a.attnum > 0 and not a.attisdropped
           and a.attidentity = '' and a.attgenerated = '' and a.attname <> 'is_public';
        execute pg_catalog.format('grant select, delete on pgrag.%I to authenticated', t.relname);
        execute pg_catalog.format('grant insert (%2$s), update (%2$s) on pgrag.%1$I to authenticated',
                                  t.relname, cols);

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

-- Functions in pgrag: none for PUBLIC, and for each API role only the internal helpers its
-- calls reach. Every pgrag function is SECURITY INVOKER, and an invoker function needs the
-- caller to hold EXECUTE on each function it calls: the search functions of the API reach
-- the helpers of the first list (and every policy calls current_tenant_id); a write to
-- pgrag.chunks fires triggers that call bm25_apply as the writer. Trigger functions need no
-- grant; the loader (replace_document_chunks) is for the owner. A helper added to the call
-- chain of an API function must be added here (tests/test_security_privileges.py checks the
-- lists against the call graph and docs/security.md). A SECURITY DEFINER function would get
-- no grant here (and fails the audit test in tests/test_security.py).
do $$
declare
    f record;
begin
    execute 'revoke all on all functions in schema pgrag from public, anon, authenticated, service_role';
    for f in
        select p.oid::regprocedure as sig, p.proname
        from pg_catalog.pg_proc as p
        where p.pronamespace = 'pgrag'::regnamespace
          and p.prokind = 'f'
          and not p.prosecdef
          and p.proname = any (array[
              'current_tenant_id', 'tenant_chunk_count', 'keyword_query', 'vector_candidates',
              'keyword_candidates', 'fused_candidates', 'mmr_order', 'windows',
              'tenant_index_name', 'chunk_fts', 'identifier_terms', 'check_argument', 'check_length', 'check_query_embedding',
              'text_search_config', 'bm25_apply', 'delete_documents', 'text_search_config_allowed'
          ])
        order by 1
    loop
        if f.proname in ('bm25_apply', 'delete_documents', 'text_search_config_allowed') then
            -- writers only (the chunks triggers call bm25_apply and text_search_config_allowed
            -- as the writer): anon writes nothing
            execute pg_catalog.format('grant execute on function %s to authenticated, service_role', f.sig);
        else
            execute pg_catalog.format('grant execute on function %s to anon, authenticated, service_role', f.sig);
        end if;
    end loop;
end
$$;

-- Functions created later (by the role that migrates, in any schema of this database, pgrag
-- and public included) are not executable by PUBLIC until granted: PostgreSQL's built-in
-- default would let every role run them until the next migrate. Only the global form can
-- take away PUBLIC's default EXECUTE (IN SCHEMA can only add privileges).
alter default privileges revoke execute on functions from public;

-- That default also reaches extension scripts the same role runs later: functions a pgvector
-- upgrade (ALTER EXTENSION vector UPDATE) adds would not be executable by the API roles. Give
-- pgvector's functions back the EXECUTE for PUBLIC its scripts expect (only those of this
-- role; other extensions: docs/security.md, "Functions and privileges").
do $$
declare
    f record;
begin
    for f in
        select p.oid::regprocedure as sig
        from pg_catalog.pg_proc as p
        join pg_catalog.pg_depend as d
          on d.classid = 'pg_catalog.pg_proc'::regclass and d.objid = p.oid and d.deptype = 'e'
        join pg_catalog.pg_extension as e on e.oid = d.refobjid
        where e.extname = 'vector'
          and p.proowner = (select r.oid from pg_catalog.pg_roles as r where r.rolname = current_user)
          and not exists (select 1 from pg_catalog.aclexplode(
                              coalesce(p.proacl, pg_catalog.acldefault('f', p.proowner))) as a
                          where a.grantee = 0 and a.privilege_type = 'EXECUTE')
        order by 1
    loop
        execute pg_catalog.format('grant execute on function %s to public', f.sig);
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

-- Limits for the API roles, set on the role for every database (pg_roles.rolconfig): that is
-- the only place PostgREST reads them from (its role-settings query reads rolconfig and then
-- applies each setting with set_config(name, value, true) on every request, because SET LOCAL
-- ROLE does not apply role settings; "ALTER ROLE ... IN DATABASE" settings are never applied).
--   statement_timeout  anon 3s, authenticated 8s (as Supabase)
--   temp_file_limit    anon 256MB, authenticated 1GB (per backend process); a superuser-context
--                      setting: setting it needs a superuser (or GRANT SET ON PARAMETER), and
--                      PostgREST applies it only when its login role holds
--                      GRANT SET ON PARAMETER temp_file_limit (docs/security.md).
-- Roles are cluster-wide, so these hold for the roles in every database of the cluster.
-- Configure when migrating with the settings pgrag.<role>_<setting>, e.g.
--   PGOPTIONS='-c pgrag.authenticated_statement_timeout=15s' pgrag migrate
-- (an explicit value always wins; '0' disables a timeout, '-1' lifts temp_file_limit, 'reset'
-- removes the setting). Without one, an existing setting at least as strict as the default
-- (Supabase's own, or an administrator's) is kept; a missing or laxer one becomes the default.
do $$
declare
    r record;
    wanted text;
    existing text;
    v_units numeric[];
    v_changed boolean := false;
    v_db text := pg_catalog.current_database();
begin
    for r in
        select * from (values
            ('anon', 'statement_timeout', '3s'),
            ('authenticated', 'statement_timeout', '8s'),
            ('anon', 'temp_file_limit', '256MB'),
            ('authenticated', 'temp_file_limit', '1GB')
        ) as v (role_name, setting, fallback)
    loop
        wanted := nullif(pg_catalog.current_setting(
            pg_catalog.format('pgrag.%s_%s', r.role_name, r.setting), true), '');
        if wanted is null then
            select pg_catalog.substr(c.item, pg_catalog.length(r.setting) + 2) into existing
            from pg_catalog.pg_roles as ro, pg_catalog.unnest(ro.rolconfig) as c (item)
            where ro.rolname = r.role_name
              and pg_catalog.starts_with(c.item, r.setting operator(pg_catalog.||) '=');
            -- Compare in base units (ms, kB); 0 (statement_timeout) and -1 (temp_file_limit)
            -- mean no limit at all.
            select pg_catalog.array_agg(m[1]::numeric * case pg_catalog.lower(m[2])
                       when '' then 1 when 'ms' then 1 when 's' then 1000 when 'min' then 60000
                       when 'h' then 3600000 when 'd' then 86400000 when 'kb' then 1
                       when 'mb' then 1024 when 'gb' then 1048576 when 'tb' then 1073741824 end
                       order by x.ord)
              into v_units
              from pg_catalog.unnest(array[existing, r.fallback]) with ordinality as x (txt, ord)
              left join lateral pg_catalog.regexp_match(
                  x.txt, '^\s*(-?[0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*$') as m on true;
            if v_units[1] >= 0 and (r.setting = 'temp_file_limit' or v_units[1] > 0)
               and v_units[1] <= v_units[2] then
                continue;
            end if;
            wanted := r.fallback;
        end if;
        begin
            if wanted = 'reset' then
                execute pg_catalog.format('alter role %I reset %I', r.role_name, r.setting);
            else
                execute pg_catalog.format('alter role %I set %I = %L', r.role_name, r.setting, wanted);
            end if;
            v_changed := true;
        exception when insufficient_privilege then
            raise warning 'pgrag: cannot set % for role % (%); set it as an administrator',
                r.setting, r.role_name, sqlerrm
                using hint = pg_catalog.format('alter role %I set %I = %L', r.role_name, r.setting, wanted);
        end;
    end loop;
    -- Earlier pgrag versions set statement_timeout for this database only, which PostgREST
    -- never applies: remove it, so the catalog shows only the settings that take effect.
    for r in
        select ro.rolname
        from pg_catalog.pg_db_role_setting as s
        join pg_catalog.pg_roles as ro on ro.oid = s.setrole
        where ro.rolname in ('anon', 'authenticated')
          and s.setdatabase = (select d.oid from pg_catalog.pg_database as d where d.datname = v_db)
          and exists (select 1 from pg_catalog.unnest(s.setconfig) as c (item)
                      where pg_catalog.starts_with(c.item, 'statement_timeout='))
    loop
        begin
            execute pg_catalog.format('alter role %I in database %I reset statement_timeout',
                r.rolname, v_db);
        exception when insufficient_privilege then
            null;
        end;
    end loop;
    -- PostgREST reads role settings at start-up and on 'reload config' only (with db-config
    -- on, its default): tell it, on commit, when they changed.
    if v_changed then
        perform pg_catalog.pg_notify('pgrst', 'reload config');
    end if;
end
$$;
