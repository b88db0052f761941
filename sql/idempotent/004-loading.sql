-- Loading: the document lifecycle of a loader, the staging table and the atomic per-document
-- swap every loader shares (deleting documents: 007-removal.sql).
-- Contract. Provides: pgrag.create_stage (the one definition of the staging table's columns),
--   the loader's transitions pgrag.begin_documents (-> processing), pgrag.relabel_documents,
--   pgrag.fail_documents / fail_sources / abort_documents (-> error),
--   pgrag.replace_document_chunks (-> ready: the atomic swap, whose insert is
--   pgrag.insert_staged_chunks), pgrag.record_embedding_model,
--   pgrag.save_embeddings (a long document's embeddings kept while it loads);
--   all for the worker roles (the owner and service_role: pgrag ingest and pgrag worker, through
--   pgrag/ingest/lifecycle.py).
--   Relies on: the BM25 triggers (002-bm25-maintenance.sql) and the publishing triggers
--   (003-publishing.sql), which fire on the chunks these functions write;
--   pgrag.current_tenant_id (001-helpers.sql); pgrag.delete_document_chunks (007-removal.sql).
--   The queue's transitions (013-queue-outcomes.sql) call these.
--
-- Lifecycle of a document (docs/ingest.md, "Lifecycle"): a loader begins it (new: processing,
-- no chunks; ready: stays ready and searchable with its previous chunks until the swap), then
-- swaps its chunks in (ready) or records why it failed (error). Every transition is one of
-- these functions; the loader's tenant is the request's (pgrag.set_request_tenant), never an
-- argument, except in replace_document_chunks (whose signature predates this rule and checks
-- it against the request's).

create or replace function pgrag.loader_tenant(caller text)
returns text
language plpgsql
stable
security invoker
set search_path = pg_catalog, pg_temp
as $$
declare
    v_tenant text := pgrag.current_tenant_id();
begin
    if v_tenant is null then
        raise exception '%: no tenant claim in request.jwt.claims', caller
            using errcode = '22023',
                  hint = 'act as a tenant first (select pgrag.set_request_tenant(...)).';
    end if;
    return v_tenant;
end
$$;
comment on function pgrag.loader_tenant(text) is
'The request''s tenant for a loader function named caller; raises 22023 when there is none.';

-- The staging table: defined here once. Every loader fills it (COPY) and the swap reads it by
-- column name: replace_document_chunks copies each of its columns that pgrag.chunks also has.
create or replace function pgrag.create_stage()
returns regclass
language plpgsql
volatile
security invoker
set search_path = pg_catalog, pg_temp
as $$
begin
    -- Session-local: staged rows die with the connection (a killed loader leaves nothing).
    -- Once per session: a second call returns the table made by the first.
    if pg_catalog.to_regclass('pg_temp.pgrag_stage') is not null then
        return 'pg_temp.pgrag_stage'::pg_catalog.regclass;
    end if;
    create temporary table pgrag_stage (
        document_id bigint not null,
        chunk_index integer not null,
        content text not null,
        embedding @extschema:vector@.vector,
        page integer,
        heading_path text[] not null,
        language text not null,
        token_count integer not null,
        content_sha256 text not null,
        overlap_chars integer not null,
        metadata jsonb not null
    );
    return 'pg_temp.pgrag_stage'::pg_catalog.regclass;
end
$$;
comment on function pgrag.create_stage() is
'Creates (if missing) this session''s staging table pg_temp.pgrag_stage and returns it: columns document_id, chunk_index, content, embedding (null: reuse the stored embedding of the same text), page, heading_path, language, token_count, content_sha256, overlap_chars, metadata, in that order (COPY fills them). The one definition every loader uses; pgrag.replace_document_chunks reads it by column name.';

create or replace function pgrag.begin_documents(
    source_uris text[],
    titles text[],
    source_types text[]
)
returns table (source_uri text, document_id bigint)
language plpgsql
volatile
security invoker
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    v_tenant text := pgrag.loader_tenant('pgrag.begin_documents');
begin
    -- New documents appear as processing, with no chunks yet; documents being refreshed stay
    -- ready and searchable (their previous version) until their swap commits.
    return query
    insert into pgrag.documents as d (tenant_id, title, source_type, source_uri, status)
    select v_tenant, v.t, v.s, v.u, 'processing'
    from rows from (pg_catalog.unnest(begin_documents.source_uris),
                    pg_catalog.unnest(begin_documents.titles),
                    pg_catalog.unnest(begin_documents.source_types)) as v (u, t, s)
    on conflict (tenant_id, source_uri)
    do update set error = null,
                  status = case when d.status = 'ready' then 'ready' else 'processing' end
    returning d.source_uri, d.id;
end
$$;
comment on function pgrag.begin_documents(text[], text[], text[]) is
'Loader transition to processing for the request''s tenant: inserts new documents (source_uris with their titles and source_types) as processing, clears the error of existing ones and sets them processing unless ready (a ready document stays searchable with its previous chunks until its swap). Returns (source_uri, document_id) of each.';

create or replace function pgrag.relabel_documents(document_ids bigint[], metadatas jsonb[])
returns void
language plpgsql
volatile
security invoker
set search_path = pg_catalog, pg_temp
-- Custom plans: a batch's documents by key (sql/idempotent/README.md, "Plans", write paths).
set plan_cache_mode = force_custom_plan
as $$
declare
    v_tenant text := pgrag.loader_tenant('pgrag.relabel_documents');
begin
    update pgrag.documents as d set metadata = v.m
    from rows from (pg_catalog.unnest(document_ids), pg_catalog.unnest(metadatas)) as v (id, m)
    where d.tenant_id = v_tenant and d.id = v.id;
end
$$;
comment on function pgrag.relabel_documents(bigint[], jsonb[]) is
'Stores new metadata for documents of the request''s tenant whose content did not change (no re-embedding).';

create or replace function pgrag.fail_documents(document_ids bigint[], errors text[])
returns void
language plpgsql
volatile
security invoker
set search_path = pg_catalog, pg_temp
-- Custom plans: a batch's documents by key (sql/idempotent/README.md, "Plans", write paths).
set plan_cache_mode = force_custom_plan
as $$
declare
    v_tenant text := pgrag.loader_tenant('pgrag.fail_documents');
begin
    update pgrag.documents as d set status = 'error', error = pg_catalog.left(v.e, 2000)
    from rows from (pg_catalog.unnest(document_ids), pg_catalog.unnest(errors)) as v (id, e)
    where d.tenant_id = v_tenant and d.id = v.id;
end
$$;
comment on function pgrag.fail_documents(bigint[], text[]) is
'Loader transition to error: documents of the request''s tenant that failed while being loaded, with the reason (its first 2,000 characters); their chunks are left as they were.';

create or replace function pgrag.fail_sources(source_uris text[], source_types text[], errors text[])
returns void
language plpgsql
volatile
security invoker
set search_path = pg_catalog, pg_temp
as $$
declare
    v_tenant text := pgrag.loader_tenant('pgrag.fail_sources');
begin
    insert into pgrag.documents (tenant_id, source_type, source_uri, status, error)
    select v_tenant,
           case when v.s in ('pdf', 'markdown', 'html', 'text', 'url') then v.s else 'text' end,
           v.u, 'error', pg_catalog.left(v.e, 2000)
    from rows from (pg_catalog.unnest(source_uris), pg_catalog.unnest(source_types),
                    pg_catalog.unnest(errors)) as v (u, s, e)
    on conflict (tenant_id, source_uri)
    do update set status = 'error', error = excluded.error;
end
$$;
comment on function pgrag.fail_sources(text[], text[], text[]) is
'Loader transition to error for sources that failed before they had a row (unreadable, unsupported): inserts or updates the request''s tenant''s documents by source_uri as error with the reason.';

create or replace function pgrag.abort_documents(document_ids bigint[], source_uris text[], error text)
returns void
language plpgsql
volatile
security invoker
set search_path = pg_catalog, pg_temp
as $$
declare
    v_tenant text := pgrag.loader_tenant('pgrag.abort_documents');
begin
    update pgrag.documents as d set status = 'error', error = pg_catalog.left(abort_documents.error, 2000)
    where d.tenant_id = v_tenant
      and (d.id = any (document_ids) or d.source_uri = any (source_uris))
      and d.status = 'processing';
end
$$;
comment on function pgrag.abort_documents(bigint[], text[], text) is
'Loader transition to error after an interrupted run: the request''s tenant''s documents (by id or source_uri) still processing, i.e. new ones whose swap never committed; refreshed documents stay ready with their previous chunks.';

create or replace function pgrag.record_embedding_model(provider text, model text)
returns void
language plpgsql
volatile
security invoker
set search_path = pg_catalog, pg_temp
as $$
declare
    v_provider text;
    v_model text;
begin
    update pgrag.embedding_config as c
       set model = record_embedding_model.model, provider = record_embedding_model.provider
     where c.model is null;
    select c.provider, c.model into v_provider, v_model from pgrag.embedding_config as c;
    if (v_provider, v_model) is distinct from (provider, model) then
        raise exception 'this database holds embeddings of %:%; %:% would mix models',
            v_provider, v_model, provider, model
            using errcode = 'PR002',
                  hint = 'embed with the recorded model.';
    end if;
end
$$;
comment on function pgrag.record_embedding_model(text, text) is
'Records provider and model as the database''s embedding model when none is recorded yet (the first load); raises PR002 when another one is recorded.';

-- A long document (several batches) is swapped in by one transaction at its end: what was
-- embedded for it is saved durably with each batch, so an interrupted load loses none of it.
create or replace function pgrag.save_embeddings(
    stage regclass,
    embedding_model text,
    document_ids bigint[],
    first_chunks integer[],
    last_chunks integer[]
)
returns void
language plpgsql
volatile
security invoker
set search_path = pg_catalog, pg_temp
as $$
declare
    v_tenant text := pgrag.loader_tenant('pgrag.save_embeddings');
begin
    -- The staged rows of each document from first_chunks to last_chunks (chunk_index), those
    -- with an embedding: one statement per batch, whatever its size.
    execute pg_catalog.format(
        'insert into pgrag.saved_embeddings (tenant_id, document_id, content_sha256, model, embedding) '
        'select $1, s.document_id, s.content_sha256, $2, s.embedding from %s as s '
        'join rows from (pg_catalog.unnest($3), pg_catalog.unnest($4), pg_catalog.unnest($5)) as r (id, lo, hi) '
        'on s.document_id operator(pg_catalog.=) r.id and s.chunk_index operator(pg_catalog.>=) r.lo '
        'and s.chunk_index operator(pg_catalog.<=) r.hi '
        'where s.embedding is not null '
        'on conflict (tenant_id, document_id, content_sha256, model) do nothing', stage)
    using v_tenant, embedding_model, document_ids, first_chunks, last_chunks;
end
$$;
comment on function pgrag.save_embeddings(regclass, text, bigint[], integer[], integer[]) is
'Saves in pgrag.saved_embeddings, for the request''s tenant, the embeddings (by content_sha256, with embedding_model) of the rows of a staging table (pgrag.create_stage''s) of document_ids[i] with chunk_index from first_chunks[i] to last_chunks[i]: a loader calls it with each batch of a document spanning several, so a load interrupted before the document''s swap keeps them; pgrag.replace_document_chunks reuses and deletes them.';

-- The swap's insert of a batch's staged chunks.
create or replace function pgrag.insert_staged_chunks(stage regclass, tenant text, document_ids bigint[])
returns void
language plpgsql
volatile
security invoker
set search_path = pg_catalog, pg_temp
-- Generic plans (sql/idempotent/README.md, "Plans") for the checks each inserted row fires, the
-- foreign key's lookup of its document among them (it has no function of its own to say so):
-- planned with the tenant's value, a tenant new to the statistics looks like one row, every
-- index on the tenant as good as the key, and each row's check read all the tenant's documents.
set plan_cache_mode = force_generic_plan
as $$
declare
    v_columns text;
    v_values text;
begin
    -- The stage's columns (pgrag.create_stage defines them) that pgrag.chunks also has, each
    -- cast to the chunk column's type: the column list is written nowhere else.
    select pg_catalog.string_agg(pg_catalog.quote_ident(s.attname::text), ', ' order by s.attnum),
           pg_catalog.string_agg(pg_catalog.format('s.%I::%s', s.attname,
                                     pg_catalog.format_type(c.atttypid, c.atttypmod)),
                                 ', ' order by s.attnum)
      into v_columns, v_values
      from pg_catalog.pg_attribute as s
      join pg_catalog.pg_attribute as c
        on c.attrelid = 'pgrag.chunks'::pg_catalog.regclass and c.attname = s.attname
       and c.attnum > 0 and not c.attisdropped
     where s.attrelid = stage and s.attnum > 0 and not s.attisdropped
       and s.attname <> 'tenant_id';
    execute pg_catalog.format(
        'insert /* pgrag:insert_staged_chunks */ into pgrag.chunks (tenant_id, %s) '
        'select $1, %s from %s as s '
        'where s.document_id operator(pg_catalog.=) any ($2) order by s.document_id, s.chunk_index',
        v_columns, v_values, stage)
    using tenant, document_ids;
end
$$;
comment on function pgrag.insert_staged_chunks(regclass, text, bigint[]) is
'Inserts into pgrag.chunks, for tenant, the rows of a staging table (pgrag.create_stage''s) of document_ids, copying each of its columns pgrag.chunks also has, in document and chunk order; the per-row checks they fire read their document by key whatever the statistics know of the tenant. pgrag.replace_document_chunks''s insert, after it removed the documents'' previous chunks.';

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
-- Custom plans: a batch's documents by key (sql/idempotent/README.md, "Plans", write paths).
set plan_cache_mode = force_custom_plan
as $$
declare
    v_missing bigint;
    v_recorded text;
    v_empty boolean;
    v_count_missing text;
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
    -- document (an unchanged chunk is never embedded twice), or the one saved for it while an
    -- earlier load of the document was under way (pgrag.save_embeddings), with this model;
    -- those saved rows are done with. Looked up only when some staged chunk of the batch lacks
    -- its embedding: a first load brings them all, and a tenant new to the statistics looks like
    -- a few rows, for whom a plan read every chunk the load had written so far, scanning the
    -- stage for each (quadratic: 10 s a batch of 1,000 beside 22 other tenants).
    v_count_missing := pg_catalog.format(
        'select pg_catalog.count(*) from %s where document_id operator(pg_catalog.=) any ($1) '
        'and embedding is null', stage);
    execute v_count_missing into v_missing using document_ids;
    if v_missing > 0 then
        execute pg_catalog.format(
            'update %s as s /* pgrag:reuse_stored_embeddings */ set embedding = o.embedding '
            'from pgrag.chunks as o '
            'where s.embedding is null and s.document_id operator(pg_catalog.=) any ($1) '
            'and o.tenant_id operator(pg_catalog.=) $2 and o.document_id operator(pg_catalog.=) any ($1) '
            'and o.document_id operator(pg_catalog.=) s.document_id '
            'and o.content_sha256 operator(pg_catalog.=) s.content_sha256 and o.embedding is not null',
            stage)
        using document_ids, tenant;
        execute pg_catalog.format(
            'update %s as s /* pgrag:reuse_saved_embeddings */ set embedding = o.embedding '
            'from pgrag.saved_embeddings as o '
            'where s.embedding is null and s.document_id operator(pg_catalog.=) any ($1) '
            'and o.tenant_id operator(pg_catalog.=) $2 and o.document_id operator(pg_catalog.=) any ($1) '
            'and o.document_id operator(pg_catalog.=) s.document_id '
            'and o.content_sha256 operator(pg_catalog.=) s.content_sha256 and o.model operator(pg_catalog.=) $3',
            stage)
        using document_ids, tenant, embedding_model;
        execute v_count_missing into v_missing using document_ids;
    end if;
    delete from pgrag.saved_embeddings as o
    where o.tenant_id = tenant and o.document_id = any (document_ids);
    if v_missing > 0 then
        raise exception 'a document changed in the database while it was being ingested'
            using errcode = 'PR001',
                  hint = 'another ingest of the same source? run pgrag ingest again.';
    end if;
    perform pgrag.delete_document_chunks(tenant, document_ids);
    perform pgrag.insert_staged_chunks(stage, tenant, document_ids);
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
    -- A temporary table is never vacuumed: emptied by deletes, the stage would keep every page
    -- a session ever staged, and each statement above scans them all. Empty, a temporary stage
    -- (pgrag.create_stage's) is truncated; a table others may read is left as it is.
    execute pg_catalog.format('select not exists (select from %s)', stage) into v_empty;
    if v_empty and exists (select from pg_catalog.pg_class as c
                           where c.oid = stage and c.relpersistence = 't') then
        execute pg_catalog.format('truncate %s', stage);
    end if;
end
$$;
comment on function pgrag.replace_document_chunks(regclass, text, bigint[], text[], text[], text[], jsonb[], integer[], text) is
'Loader transition to ready: atomic swap of documents'' chunks from a staging table (pgrag.create_stage''s, filled by COPY; each of its columns pgrag.chunks also has is copied): locks the documents, reuses stored embeddings of unchanged chunk texts (of the document''s chunks, or saved for it by pgrag.save_embeddings with this model, which it then deletes), replaces the chunks, marks the documents ready with their metadata, empties their staged rows (truncating a temporary stage left empty: never vacuumed, it would keep every page it held). Raises PR001 when a staged chunk has no embedding to reuse, PR002 when embedding_model is not the model pgrag.embedding_config records.';
