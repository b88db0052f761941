-- Removal: deleting a tenant's documents with their chunks.
-- Contract. Provides: pgrag.delete_documents (authenticated and service_role: pgrag delete,
--   both --prune) and pgrag.delete_document_chunks (the chunks of a batch of documents, which
--   pgrag.replace_document_chunks, 004-loading.sql, also removes with it). Relies on: the BM25
--   triggers (002-bm25-maintenance.sql), which fire on the chunks they delete;
--   pgrag.current_tenant_id and pgrag.check_length (001-helpers.sql).

create or replace function pgrag.delete_document_chunks(tenant text, document_ids bigint[])
returns bigint
language plpgsql
volatile
security invoker
set search_path = pg_catalog, pg_temp
-- One generic plan (sql/idempotent/README.md, "Plans"): planned with the tenant's value, a
-- tenant new to the statistics looks like one row, every index on the tenant as good as the one
-- on its documents, and the delete read all the tenant's chunks to find a batch's few.
set plan_cache_mode = force_generic_plan
as $$
declare
    v_rows bigint;
begin
    delete /* pgrag:delete_document_chunks */ from pgrag.chunks as c
    where c.tenant_id = tenant and c.document_id = any (document_ids);
    get diagnostics v_rows = row_count;
    return v_rows;
end
$$;
comment on function pgrag.delete_document_chunks(text, bigint[]) is
'Deletes the chunks of tenant''s documents document_ids (the BM25 triggers remove their postings) and returns how many; read by the documents'' key whatever the statistics know of the tenant. Runs as the caller (RLS applies).';

-- Removal: documents and their chunks, in one statement each, inside the caller's transaction.
-- Deleting chunks fires the BM25 triggers (002-bm25-maintenance.sql), so postings, document
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
-- Custom plans: a criterion left null drops out of the lookup (sql/idempotent/README.md, "Plans").
set plan_cache_mode = force_custom_plan
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
    perform pgrag.check_length('document_ids', pg_catalog.cardinality(document_ids), 10000);
    perform pgrag.check_length('source_uris', pg_catalog.cardinality(source_uris), 10000);
    perform pgrag.check_length('source_uri_patterns', pg_catalog.cardinality(source_uri_patterns), 100);
    -- The matching documents, each criterion its own lookup (by key for ids and URIs; patterns
    -- scan the tenant's URIs): one condition ORing the three read every document of the
    -- tenant, whatever was asked. Then locked (in id order, as the loader does) so no ingest
    -- swaps them in while they are being removed.
    select pg_catalog.array_agg(u.id) into v_ids
    from (select x.id from pgrag.documents as x
          where x.tenant_id = v_tenant and x.id = any (document_ids)
          union
          select x.id from pgrag.documents as x
          where x.tenant_id = v_tenant and x.source_uri = any (source_uris)
          union
          select x.id from pgrag.documents as x
          where source_uri_patterns is not null  -- (a null list drops out only so)
            and x.tenant_id = v_tenant and x.source_uri like any (source_uri_patterns)) as u;
    select pg_catalog.array_agg(m.id order by m.id) into v_ids
    from (
        select d.id
        from pgrag.documents as d
        where d.tenant_id = v_tenant and d.id = any (v_ids)
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
    perform pgrag.delete_document_chunks(v_tenant, v_ids);
    delete from pgrag.saved_embeddings as o where o.tenant_id = v_tenant and o.document_id = any (v_ids);
    delete from pgrag.documents as d where d.tenant_id = v_tenant and d.id = any (v_ids);
end
$$;
comment on function pgrag.delete_documents(bigint[], text[], text[], boolean) is
'Removes the current tenant''s documents matching any of document_ids, source_uris or source_uri_patterns (LIKE patterns) with their chunks, atomically; the BM25 statistics follow through the chunk triggers. Returns (document_id, source_uri, chunk_count) of each; dry_run only lists them. Runs as the caller (RLS applies); raises 22023 without a tenant claim, without any criterion, or with more than 10,000 document_ids or source_uris or 100 source_uri_patterns.';
