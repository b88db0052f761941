-- pgrag tenancy: the API roles PostgREST switches to, and the indexes the RLS policies read.
-- Incremental migration: applied once, in one transaction, never edited after release.
-- The policies and grants themselves live in sql/idempotent/003-policies.sql (re-applied on
-- every migrate, so a table added later gets them too).
--
-- Roles are cluster-wide, so each is created only when missing. On Supabase all three exist
-- already (anon and authenticated NOLOGIN NOINHERIT, service_role NOLOGIN NOINHERIT BYPASSRLS)
-- and nothing here touches them. Elsewhere they are created with the same attributes; a login
-- role such as PostgREST's "authenticator" is granted them by the administrator (see
-- docs/supabase.md and docs/install.md). pgrag never creates a login role.

set local lock_timeout = '10s';
-- The migrator already resolves names in pg_catalog only; said again for psql and for pgspot.
set local search_path = pg_catalog, pg_temp;

do $$
begin
    if not exists (select 1 from pg_catalog.pg_roles where rolname = 'anon') then
        create role anon nologin noinherit;
    end if;
    if not exists (select 1 from pg_catalog.pg_roles where rolname = 'authenticated') then
        create role authenticated nologin noinherit;
    end if;
    if not exists (select 1 from pg_catalog.pg_roles where rolname = 'service_role') then
        -- BYPASSRLS as on Supabase. Only a superuser (or a role holding BYPASSRLS) may hand it
        -- out; otherwise the role is created without it and the explicit service_role policies
        -- of 003-policies.sql give it the same full access to pgrag's tables.
        if (select rolsuper or rolbypassrls from pg_catalog.pg_roles where rolname = current_user) then
            create role service_role nologin noinherit bypassrls;
        else
            create role service_role nologin noinherit;
            raise notice 'pgrag: created service_role without BYPASSRLS (needs a superuser); '
                'its RLS policies grant it full access to pgrag tables instead';
        end if;
    end if;
end
$$;

-- The anon policies read documents.is_public: public documents of a tenant, found by index.
-- (tenant_id, id) also serves the chunks policy's lookup of its document.
-- squawk-ignore require-concurrent-index-creation
create index documents_public on pgrag.documents (tenant_id, id) where is_public;
