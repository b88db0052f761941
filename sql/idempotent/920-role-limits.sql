-- API role limits: statement_timeout, temp_file_limit and work_mem for anon and authenticated.
-- Contract. Provides: the role settings PostgREST applies to each request of these roles
--   (configurable per migrate, see below). Relies on: the roles anon and authenticated
--   (incremental/003-tenancy.sql). Cluster-wide: the roles are shared by every database.

-- The migrator already resolves names in pg_catalog only; said again for psql and for pgspot.
set local search_path = pg_catalog, pg_temp;

-- Limits for the API roles, set on the role for every database (pg_roles.rolconfig): that is
-- the only place PostgREST reads them from (its role-settings query reads rolconfig, lower-cases
-- every value, and then applies each setting with set_config(name, value, true) on every
-- request, because SET LOCAL ROLE does not apply role settings; "ALTER ROLE ... IN DATABASE"
-- settings are never applied). Values are written without units (ms, kB), because the lower-cased
-- '256MB' ('256mb') is not a value PostgreSQL accepts: every request of the role would fail.
--   statement_timeout  anon 3000 (ms), authenticated 8000 (as Supabase)
--   temp_file_limit    anon 262144 (kB, 256 MB), authenticated 1048576 (kB, 1 GB) (per backend
--                      process); a superuser-context setting: setting it needs a superuser (or
--                      GRANT SET ON PARAMETER), and PostgREST applies it only when its login
--                      role holds GRANT SET ON PARAMETER temp_file_limit (docs/security.md).
--   work_mem           anon and authenticated 32768 (kB, 32 MB): the widest call (1,000 hits with
--                      windows of 10 chunks each side, 1,000 candidates per arm) sorts and stores
--                      tens of thousands of chunk rows; at PostgreSQL's default 4 MB it wrote
--                      about 11 MB of temporary files. Memory is taken only as a statement needs
--                      it. An existing value (an administrator's, higher or lower) is kept.
-- Roles are cluster-wide, so these hold for the roles in every database of the cluster.
-- Configure when migrating with the settings pgrag.<role>_<setting>, e.g.
--   PGOPTIONS='-c pgrag.authenticated_statement_timeout=15s' pgrag migrate
-- (units are accepted there and converted; an explicit value always wins; '0' disables a
-- timeout, '-1' lifts temp_file_limit, 'reset' removes the setting). Without one, an existing
-- setting at least as strict as the default (Supabase's own, or an administrator's) is kept
-- (written again without units when it has some); a missing or laxer one becomes the default.
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
            ('anon', 'statement_timeout', '3000'),
            ('authenticated', 'statement_timeout', '8000'),
            ('anon', 'temp_file_limit', '262144'),
            ('authenticated', 'temp_file_limit', '1048576'),
            ('anon', 'work_mem', '32768'),
            ('authenticated', 'work_mem', '32768')
        ) as v (role_name, setting, fallback)
    loop
        wanted := nullif(pg_catalog.current_setting(
            pg_catalog.format('pgrag.%s_%s', r.role_name, r.setting), true), '');
        select pg_catalog.substr(c.item, pg_catalog.length(r.setting) + 2) into existing
        from pg_catalog.pg_roles as ro, pg_catalog.unnest(ro.rolconfig) as c (item)
        where ro.rolname = r.role_name
          and pg_catalog.starts_with(c.item, r.setting operator(pg_catalog.||) '=');
        -- In base units (ms, kB), as an integer: [existing, default, wanted]. 0
        -- (statement_timeout) and -1 (temp_file_limit) mean no limit at all.
        select pg_catalog.array_agg(pg_catalog.round(m[1]::numeric * case pg_catalog.lower(m[2])
                   when '' then 1 when 'ms' then 1 when 's' then 1000 when 'min' then 60000
                   when 'h' then 3600000 when 'd' then 86400000 when 'kb' then 1
                   when 'mb' then 1024 when 'gb' then 1048576 when 'tb' then 1073741824 end)
                   order by x.ord)
          into v_units
          from pg_catalog.unnest(array[existing, r.fallback, wanted]) with ordinality as x (txt, ord)
          left join lateral pg_catalog.regexp_match(
              x.txt, '^\s*(-?[0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*$') as m on true;
        if wanted is not null and wanted <> 'reset' then
            if v_units[3] is null then
                raise exception 'pgrag.%_%: % is not a number with an optional unit', r.role_name,
                    r.setting, wanted
                    using errcode = '22023';
            end if;
            wanted := v_units[3]::bigint::text;
        elsif wanted is null then
            if (v_units[1] >= 0 and (r.setting = 'temp_file_limit' or v_units[1] > 0)
                and v_units[1] <= v_units[2])
               or (r.setting = 'work_mem' and v_units[1] > 0) then
                -- Kept; written again without its unit when it has one.
                continue when existing = v_units[1]::bigint::text;
                wanted := v_units[1]::bigint::text;
            else
                wanted := r.fallback;
            end if;
        end if;
        continue when wanted = existing;
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
