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

-- Removal: documents and their chunks, in one statement each, inside the caller's transaction.
-- Deleting chunks fires the BM25 triggers (sql/idempotent/002-search.sql), so postings, document
-- frequencies and corpus statistics stay those of the remaining chunks.
create or replace function pgrag.delete_documents(
    document_ids bigint[] default null,
    source_uris text[] default null,
    source_uri_patterns text[] default null,
    dry_run boolean default false
)
returns table (document_id bigint, source_uri text, chunk_count bigint)
language plpgsql
volatile
security invoker
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    v_tenant text := pgrag.current_tenant_id();
    v_ids bigint[];
begin
    if v_tenant is null then
        raise exception 'delete_documents needs a tenant: no tenant claim in request.jwt.claims'
            using errcode = '22023',
                  hint = 'act as a tenant (pgrag --tenant, or a JWT with the tenant claim).';
    end if;
    if document_ids is null and source_uris is null and source_uri_patterns is null then
        raise exception 'delete_documents needs document_ids, source_uris or source_uri_patterns'
            using errcode = '22023';
    end if;
    -- Lock the matching documents (in id order, as the loader does) so no ingest swaps them in
    -- while they are being removed.
    select pg_catalog.array_agg(m.id order by m.id) into v_ids
    from (
        select d.id
        from pgrag.documents as d
        where d.tenant_id = v_tenant
          and (d.id = any (document_ids)
               or d.source_uri = any (source_uris)
               or d.source_uri like any (source_uri_patterns))
        order by d.id
        for update
    ) as m;
    if v_ids is null then
        return;
    end if;
    return query
    select d.id, d.source_uri,
           (select pg_catalog.count(*) from pgrag.chunks as c
            where c.tenant_id = v_tenant and c.document_id = d.id)
    from pgrag.documents as d
    where d.tenant_id = v_tenant and d.id = any (v_ids)
    order by d.source_uri;
    if dry_run then
        return;
    end if;
    delete from pgrag.chunks as c where c.tenant_id = v_tenant and c.document_id = any (v_ids);
    delete from pgrag.documents as d where d.tenant_id = v_tenant and d.id = any (v_ids);
end
$$;
comment on function pgrag.delete_documents(bigint[], text[], text[], boolean) is
'Removes the current tenant''s documents matching any of document_ids, source_uris or source_uri_patterns (LIKE patterns) with their chunks, atomically; the BM25 statistics follow through the chunk triggers. Returns (document_id, source_uri, chunk_count) of each; dry_run only lists them. Runs as the caller (RLS applies); raises 22023 without a tenant claim or without any criterion.';
