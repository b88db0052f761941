-- pgrag helper functions and triggers. Idempotent: re-applied on every migrate.
-- Every function pins search_path to pg_catalog, pg_temp and qualifies every name.

create or replace function pgrag.current_tenant_id()
returns text
language sql
stable
security invoker
parallel safe
set search_path = pg_catalog, pg_temp
as $$
    select nullif(
        nullif(pg_catalog.current_setting('request.jwt.claims', true), '')::jsonb
            #>> pg_catalog.string_to_array(
                    coalesce(
                        nullif(pg_catalog.current_setting('pgrag.tenant_claim', true), ''),
                        'tenant_id'),
                    '.'),
        '')
$$;
comment on function pgrag.current_tenant_id() is
'Tenant of the current request: the claim named by the setting pgrag.tenant_claim (default tenant_id; a dotted path such as app_metadata.tenant_id reaches a nested claim) in request.jwt.claims, as PostgREST sets it; null when absent. Every RLS policy compares tenant_id with it.';

create or replace function pgrag.touch_updated_at()
returns trigger
language plpgsql
security invoker
set search_path = pg_catalog, pg_temp
as $$
begin
    new.updated_at := pg_catalog.now();
    return new;
end
$$;
comment on function pgrag.touch_updated_at() is 'Trigger function: sets updated_at on every update.';

create or replace trigger documents_touch_updated_at
    before update on pgrag.documents
    for each row execute function pgrag.touch_updated_at();

create or replace trigger embedding_config_touch_updated_at
    before update on pgrag.embedding_config
    for each row execute function pgrag.touch_updated_at();

alter table pgrag.documents alter column tenant_id set default pgrag.current_tenant_id();
alter table pgrag.chunks alter column tenant_id set default pgrag.current_tenant_id();
