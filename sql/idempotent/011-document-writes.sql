-- A tenant's direct writes of pgrag.documents and pgrag.chunks: the limits of
-- public.submit_document, and the status that follows the queue.
-- Contract. Provides: the triggers documents_tenant_writes on pgrag.documents and
--   chunks_tenant_writes on pgrag.chunks, and their trigger functions
--   pgrag.document_tenant_write and pgrag.chunk_tenant_write. Relies on: pgrag.check_length
--   (001-helpers.sql), pgrag.document_queue and queue_settings
--   (incremental/011-document-queue.sql); the column privilege UPDATE
--   (status) on pgrag.documents as the bookkeeping privilege (900-row-security.sql: the owner
--   and service_role hold it, authenticated does not). Callers: the triggers only (trigger
--   functions need no EXECUTE grant); public.submit_document (010-queue.sql) relies on it.
--
-- A tenant writes the columns of a document it describes (title, source_type, source_uri,
-- metadata), never the bookkeeping of the loader and the worker (status, error, chunk_count,
-- content_sha256, embedding_model, the timestamps: no column privilege, 42501), so it can
-- neither make a document searchable (ready) nor hide one from the worker (processing). What it
-- writes has the bounds submit_document checks, whatever the client (docs/security.md,
-- "Argument limits"). The chunks a tenant writes itself (its own content, next to what the
-- worker makes of its submissions) are bounded as a submission is: no chunk holds more than the
-- queue accepts for a whole document. The owner's loaders and the worker hold the bookkeeping
-- privilege and skip these triggers.

create or replace function pgrag.document_tenant_write()
returns trigger
language plpgsql
security invoker
set search_path = pg_catalog, pg_temp
as $$
begin
    if new.source_uri operator(pg_catalog.~) '^[[:space:]]*$' then
        raise exception 'source_uri must be a non-blank string (the document''s identity)'
            using errcode = '22023';
    end if;
    perform pgrag.check_length('source_uri', pg_catalog.length(new.source_uri), 2048, 'characters');
    perform pgrag.check_length('source_uri', pg_catalog.octet_length(new.source_uri), 2048, 'bytes');
    perform pgrag.check_document_fields(new.title, new.metadata);
    -- A document with a version waiting in the queue is pending (a ready one stays searchable
    -- with its previous version until the worker swaps the new one in), without the error of
    -- an earlier version: public.submit_document writes the document once more after its queue
    -- row, and this is where its status changes.
    if tg_op operator(pg_catalog.=) 'UPDATE'
       and exists (select 1 from pgrag.document_queue as q
                   where q.tenant_id operator(pg_catalog.=) new.tenant_id
                     and q.document_id operator(pg_catalog.=) new.id
                     and q.state operator(pg_catalog.=) 'queued') then
        new.status := case when old.status operator(pg_catalog.=) 'ready' then 'ready' else 'pending' end;
        new.error := null;
    end if;
    return new;
end
$$;
comment on function pgrag.document_tenant_write() is
'Trigger function (before insert or update on pgrag.documents, per row, for a writer without UPDATE on documents.status: a tenant): the limits of public.submit_document for a direct write (source_uri non-blank, at most 2,048 characters and 2,048 bytes; title 1,000 characters; metadata a JSON object of 10,000 bytes; 22023), and, on an update of a document with a queued version, status pending (ready stays ready) and no error.';

create or replace trigger documents_tenant_writes
    before insert or update on pgrag.documents
    for each row
    when (not pg_catalog.has_column_privilege('pgrag.documents', 'status', 'UPDATE'))
    execute function pgrag.document_tenant_write();

create or replace function pgrag.chunk_tenant_write()
returns trigger
language plpgsql
security invoker
set search_path = pg_catalog, pg_temp
as $$
begin
    perform pgrag.check_length('content', pg_catalog.octet_length(new.content),
                               (select s.max_content_bytes from pgrag.queue_settings as s), 'bytes');
    perform pgrag.check_length('heading_path', pg_catalog.octet_length(new.heading_path::text), 10000, 'bytes');
    perform pgrag.check_document_fields(null, new.metadata);
    return new;
end
$$;
comment on function pgrag.chunk_tenant_write() is
'Trigger function (before insert or update on pgrag.chunks, per row, for a writer without UPDATE on documents.status: a tenant): a chunk a tenant writes directly holds at most what the queue accepts for a document (content at most queue_settings.max_content_bytes bytes), heading_path at most 10,000 bytes as text, metadata a JSON object of 10,000 bytes (22023).';

create or replace trigger chunks_tenant_writes
    before insert or update on pgrag.chunks
    for each row
    when (not pg_catalog.has_column_privilege('pgrag.documents', 'status', 'UPDATE'))
    execute function pgrag.chunk_tenant_write();
