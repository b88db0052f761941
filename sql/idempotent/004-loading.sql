-- Loading and removal: the atomic per-document swap every loader shares, and deleting documents.
-- Contract. Provides: pgrag.replace_document_chunks (the owner's loader: pgrag ingest and the
--   worker) and pgrag.delete_documents (authenticated and service_role). Relies on: the
--   BM25 triggers (002-bm25-maintenance.sql) and the publishing triggers (003-publishing.sql),
--   which fire on the chunks these functions write; pgrag.current_tenant_id (001-helpers.sql).

create or replace function pgrag.replace_document_chunks(
    stage regclass,
    tenant text,
    document_ids bigint[],
    titles text[],
    source_types text[],
    content_sha256s text[],
    metadatas jsonb[],
    chunk_counts integer[],
    embedding_model text
)
returns void
language plpgsql
volatile
security invoker
set search_path = pg_catalog, pg_temp
as $$
declare
    v_missing bigint;
    v_recorded text;
begin
    -- Another tenant's documents are refused before any lock (as in bm25_apply).
    if pg_catalog.row_security_active('pgrag.documents'::pg_catalog.regclass)
       and not pg_catalog.pg_has_role('service_role', 'usage')
       and tenant is distinct from pgrag.current_tenant_id() then
        raise exception 'pgrag.replace_document_chunks: tenant % is not the caller''s', tenant
            using errcode = '42501';
    end if;
    -- Never mix models: the embeddings must come from the model the database records.
    select c.model into v_recorded from pgrag.embedding_config as c;
    if v_recorded is not null and v_recorded <> embedding_model then
        raise exception 'this database holds embeddings of %; % would mix models', v_recorded, embedding_model
            using errcode = 'PR002',
                  hint = 'embed with the recorded model, or switch models for every document (pgrag ingest --switch-model).';
    end if;
    -- One loader at a time per document, in id order (no deadlock between two loaders).
    perform 1 from pgrag.documents as d
    where d.tenant_id = tenant and d.id = any (document_ids)
    order by d.id
    for update;
    -- Staged chunks without an embedding reuse the one stored for the same text of the same
    -- document (an unchanged chunk is never embedded twice).
    execute pg_catalog.format(
        'update %s as s set embedding = o.embedding from pgrag.chunks as o '
        'where s.embedding is null and s.document_id operator(pg_catalog.=) any ($1) '
        'and o.tenant_id operator(pg_catalog.=) $2 and o.document_id operator(pg_catalog.=) s.document_id '
        'and o.content_sha256 operator(pg_catalog.=) s.content_sha256 and o.embedding is not null',
        stage)
    using document_ids, tenant;
    execute pg_catalog.format(
        'select pg_catalog.count(*) from %s where document_id operator(pg_catalog.=) any ($1) '
        'and embedding is null', stage)
    into v_missing
    using document_ids;
    if v_missing > 0 then
        raise exception 'a document changed in the database while it was being ingested'
            using errcode = 'PR001',
                  hint = 'another ingest of the same source? run pgrag ingest again.';
    end if;
    delete from pgrag.chunks as c where c.tenant_id = tenant and c.document_id = any (document_ids);
    execute pg_catalog.format(
        'insert into pgrag.chunks (tenant_id, document_id, chunk_index, content, embedding, page, '
        'heading_path, language, token_count, content_sha256, overlap_chars, metadata) '
        'select $1, document_id, chunk_index, content, embedding, page, heading_path, '
        'language::regconfig, token_count, content_sha256, overlap_chars, metadata '
        'from %s where document_id operator(pg_catalog.=) any ($2) order by document_id, chunk_index',
        stage)
    using tenant, document_ids;
    update pgrag.documents as d
       set title = v.title, source_type = v.source_type, content_sha256 = v.sha,
           metadata = v.metadata, status = 'ready', error = null, chunk_count = v.n,
           embedding_model = replace_document_chunks.embedding_model
      from rows from (pg_catalog.unnest(document_ids), pg_catalog.unnest(titles),
                      pg_catalog.unnest(source_types), pg_catalog.unnest(content_sha256s),
                      pg_catalog.unnest(metadatas), pg_catalog.unnest(chunk_counts))
           as v(id, title, source_type, sha, metadata, n)
     where d.tenant_id = tenant and d.id = v.id;
    execute pg_catalog.format('delete from %s where document_id operator(pg_catalog.=) any ($1)', stage)
    using document_ids;
end
$$;
comment on function pgrag.replace_document_chunks(regclass, text, bigint[], text[], text[], text[], jsonb[], integer[], text) is
'Atomic swap of documents'' chunks from a staging table (columns document_id, chunk_index, content, embedding, page, heading_path, language, token_count, content_sha256, overlap_chars, metadata; e.g. a temp table filled by COPY): locks the documents, reuses stored embeddings of unchanged chunk texts, replaces the chunks, marks the documents ready with their metadata, empties their staged rows. Raises PR001 when a staged chunk has no embedding to reuse, PR002 when embedding_model is not the model pgrag.embedding_config records.';

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
'Removes the current tenant''s documents matching any of document_ids, source_uris or source_uri_patterns (LIKE patterns) with their chunks, atomically; the BM25 statistics follow through the chunk triggers. Returns (document_id, source_uri, chunk_count) of each; dry_run only lists them. Runs as the caller (RLS applies); raises 22023 without a tenant claim, without any criterion, or with more than 10,000 document_ids or source_uris or 100 source_uri_patterns.';
