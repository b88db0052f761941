-- The document queue, the tenant's side: any client submits and follows its documents.
-- Contract. Provides: public.submit_document, public.document_status and public.queue_status
--   (the tenant's RPCs: authenticated and service_role), the view pgrag.queue_status (one row
--   per tenant, security_invoker: a tenant reads its own row); the trigger that versions a
--   submission, the one that holds every writer to the submission limits (sizes, the tenant's
--   share of the queue under a per-tenant lock), the one that drops a failed row's content, and
--   the one that wakes workers (NOTIFY pgrag_queue). The worker's side: 012-queue-claims.sql and
--   013-queue-outcomes.sql.
--   Relies on: pgrag.document_queue, queue_settings (incremental/011-document-queue.sql),
--   document_queue.publisher, queue_settings.claim_bytes_per_tenant, queue_rotation
--   (incremental/016-queue-limits.sql);
--   the loader's transitions (004-loading.sql); the argument checks (001-helpers.sql).
--
-- States (docs/ingest.md, "Lifecycle"): a submission makes the document pending (a ready one
-- stays ready and searchable with its previous version) and its queue row queued; a claim
-- makes the row processing under a lease (and a pending document processing); completion
-- swaps the chunks in (ready) and deletes the row; a failed attempt re-queues the row after a
-- growing delay, or, after queue_settings.max_attempts (or for a failure no retry can fix),
-- marks the row failed (its content dropped) and the document error with the reason. A lease
-- that expires returns the row to the queue (counted as an attempt).
--
-- Locks: every transition that touches both tables locks the document rows first, then the
-- queue rows, each in (tenant_id, document_id) order; claims skip rows locked by anyone.

-- ---------------------------------------------------------------------------------------------
-- Versioning and wake-up: a submission (an insert, or an update of what was submitted) starts
-- a new version, whoever writes it; the worker's own updates touch only the state columns.
-- ---------------------------------------------------------------------------------------------

create or replace function pgrag.queue_new_version()
returns trigger
language plpgsql
security invoker
set search_path = pg_catalog, pg_temp
as $$
begin
    new.version := case when tg_op = 'INSERT' then 1 else old.version + 1 end;
    new.state := 'queued';
    new.attempts := 0;
    new.next_attempt_at := pg_catalog.now();
    new.lease_owner := null;
    new.lease_expires_at := null;
    new.last_error := null;
    new.last_error_at := null;
    new.submitted_at := pg_catalog.now();
    new.started_at := null;
    -- Whether the writer may publish (003-publishing.sql): completing this version keeps a
    -- published document public only then.
    new.publisher := pg_catalog.has_column_privilege('pgrag.documents', 'is_public', 'UPDATE');
    return new;
end
$$;
comment on function pgrag.queue_new_version() is
'Trigger function (before insert, and before update of source_type, content, title or metadata, on pgrag.document_queue): a submission is a new version, queued now with no attempts, lease or error, and publisher says whether the writer holds the publishing privilege; the writer cannot set those columns.';

create or replace trigger document_queue_insert_version
    before insert on pgrag.document_queue
    for each row execute function pgrag.queue_new_version();

create or replace trigger document_queue_update_version
    before update of source_type, content, title, metadata on pgrag.document_queue
    for each row execute function pgrag.queue_new_version();

-- ---------------------------------------------------------------------------------------------
-- Limits of every submission, whoever writes it (public.submit_document, or an INSERT or UPDATE
-- of the table by a tenant holding the column privileges): sizes, and the tenant's share of the
-- queue counted under a per-tenant lock, so concurrent submissions cannot pass it together.
-- ---------------------------------------------------------------------------------------------

create or replace function pgrag.queue_check_submission()
returns trigger
language plpgsql
security invoker
set search_path = pg_catalog, pg_temp
as $$
declare
    v_settings pgrag.queue_settings;
    v_busy bigint;
begin
    select s.* into v_settings from pgrag.queue_settings as s;
    perform pgrag.check_length('content', pg_catalog.octet_length(new.content), v_settings.max_content_bytes, 'bytes');
    perform pgrag.check_document_fields(new.title, new.metadata);
    -- A row already waiting or in progress is counted already (a resubmission); an insert
    -- that meets an existing row becomes an update (ON CONFLICT), which decides.
    if tg_op operator(pg_catalog.=) 'UPDATE' and old.state operator(pg_catalog.<>) 'failed'
       and old.tenant_id operator(pg_catalog.=) new.tenant_id then
        return new;
    end if;
    -- Another tenant's row is refused by the row policies after this trigger: no lock for it.
    if pg_catalog.row_security_active('pgrag.document_queue')
       and new.tenant_id is distinct from pgrag.current_tenant_id()
       and not pg_catalog.has_table_privilege('pgrag.document_queue', 'DELETE') then
        return new;
    end if;
    -- One submission of a tenant at a time from here to its commit (the same key as
    -- public.submit_document takes first); the count below sees the ones committed before.
    perform pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext(new.tenant_id), 1903520117);
    if tg_op operator(pg_catalog.=) 'INSERT'
       and exists (select 1 from pgrag.document_queue as q
                   where q.tenant_id operator(pg_catalog.=) new.tenant_id
                     and q.document_id operator(pg_catalog.=) new.document_id) then
        return new;
    end if;
    select pg_catalog.count(*) into v_busy
    from (select 1 from pgrag.document_queue as q
          where q.tenant_id operator(pg_catalog.=) new.tenant_id
            and q.state operator(pg_catalog.=) any (array['queued', 'processing'])
          limit v_settings.max_queued_per_tenant) as b;
    if v_busy >= v_settings.max_queued_per_tenant then
        raise exception 'the queue holds % documents of this tenant, its limit: wait until some are processed',
            v_settings.max_queued_per_tenant
            using errcode = 'PR010',
                  hint = 'public.queue_status() shows the queue; the operator sets the limit (pgrag.queue_settings).';
    end if;
    return new;
end
$$;
comment on function pgrag.queue_check_submission() is
'Trigger function (before insert, and before update of tenant_id, document_id, source_type, content, title or metadata, on pgrag.document_queue): the limits of public.submit_document for every writer: content at most queue_settings.max_content_bytes bytes, title 1,000 characters, metadata a JSON object of 10,000 bytes (22023); a new row, or a failed one submitted again, only while the tenant has fewer than max_queued_per_tenant documents queued or processing (PR010), counted under a transaction advisory lock per tenant (hashtext(tenant_id), 1903520117).';

create or replace trigger document_queue_limits
    before insert or update of tenant_id, document_id, source_type, content, title, metadata
    on pgrag.document_queue
    for each row execute function pgrag.queue_check_submission();

create or replace function pgrag.queue_free_failed()
returns trigger
language plpgsql
security invoker
set search_path = pg_catalog, pg_temp
as $$
begin
    new.content := null;
    return new;
end
$$;
comment on function pgrag.queue_free_failed() is
'Trigger function (before update of state on pgrag.document_queue, when the row fails for good with content): drops the submitted content, which no retry reads any more (a resubmission brings it again), so failed documents keep no text.';

create or replace trigger document_queue_free_failed
    before update of state on pgrag.document_queue
    for each row when (new.state operator(pg_catalog.=) 'failed' and new.content is not null)
    execute function pgrag.queue_free_failed();

create or replace function pgrag.queue_notify()
returns trigger
language plpgsql
security invoker
set search_path = pg_catalog, pg_temp
as $$
begin
    -- No payload: listeners learn that work arrived, not whose (any role may LISTEN).
    perform pg_catalog.pg_notify('pgrag_queue', '');
    return null;
end
$$;
comment on function pgrag.queue_notify() is
'Trigger function (after insert or update on pgrag.document_queue, per row, when the row is queued): NOTIFY pgrag_queue with an empty payload, on commit, so waiting workers claim at once.';

create or replace trigger document_queue_notify
    after insert or update on pgrag.document_queue
    for each row when (new.state operator(pg_catalog.=) 'queued')
    execute function pgrag.queue_notify();

-- ---------------------------------------------------------------------------------------------
-- The tenant's RPCs (schema public, as PostgREST exposes it).
-- ---------------------------------------------------------------------------------------------

create or replace function public.submit_document(
    source_uri text,
    content text default null,
    source_type text default null,
    title text default null,
    metadata jsonb default null
)
returns table (document_id bigint, version integer, status text)
language plpgsql
volatile
security invoker
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    v_tenant text := pgrag.current_tenant_id();
    v_settings pgrag.queue_settings;
    v_type text;
    v_document bigint;
    v_status text;
    v_version integer;
begin
    if v_tenant is null then
        raise exception 'submit_document needs a tenant: no tenant claim in request.jwt.claims'
            using errcode = '22023',
                  hint = 'sign in as a tenant (a JWT with the tenant claim).';
    end if;
    select s.* into v_settings from pgrag.queue_settings as s;
    -- Argument limits (docs/security.md): SQLSTATE 22023 before any write.
    if submit_document.source_uri is null
       or submit_document.source_uri operator(pg_catalog.~) '^[[:space:]]*$' then
        raise exception 'source_uri must be a non-blank string (the document''s identity)'
            using errcode = '22023';
    end if;
    -- (in bytes: the unique index on (tenant_id, source_uri) holds at most about 2.7 kB a row)
    perform pgrag.check_length('source_uri', pg_catalog.octet_length(submit_document.source_uri), 2048, 'bytes');
    perform pgrag.check_length('content', pg_catalog.octet_length(submit_document.content),
                               v_settings.max_content_bytes, 'bytes');
    perform pgrag.check_document_fields(submit_document.title, submit_document.metadata);
    v_type := pg_catalog.lower(coalesce(submit_document.source_type,
                                        case when submit_document.content is null then 'url' else 'text' end));
    if submit_document.content is null then
        if v_type operator(pg_catalog.<>) 'url' then
            raise exception 'source_type must be url (or null) when no content is given (got %)',
                pg_catalog.quote_literal(pg_catalog.left(submit_document.source_type, 100))
                using errcode = '22023';
        end if;
        if submit_document.source_uri operator(pg_catalog.!~*) '^https?://[^/?#[:space:]]+' then
            raise exception 'source_uri must be an http:// or https:// URL when no content is given (the worker fetches it)'
                using errcode = '22023';
        end if;
    elsif v_type operator(pg_catalog.<>) all (array['text', 'markdown', 'html']) then
        raise exception 'source_type must be text, markdown or html for inline content (got %)',
            pg_catalog.quote_literal(pg_catalog.left(submit_document.source_type, 100))
            using errcode = '22023';
    end if;
    -- One submission of this tenant at a time until commit: the trigger queue_check_submission
    -- counts the tenant's share of the queue under this lock (PR010 when full).
    perform pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext(v_tenant), 1903520117);
    -- The document, new (pending) or locked (changing a published one needs the publishing
    -- privilege: 42501). A tenant names only the columns it may write (011-document-writes.sql).
    insert into pgrag.documents as d (tenant_id, title, source_type, source_uri)
    values (v_tenant, coalesce(submit_document.title, ''), v_type, submit_document.source_uri)
    on conflict (tenant_id, source_uri)
    do update set source_uri = excluded.source_uri
    returning d.id, d.status into v_document, v_status;
    -- The queue row: a new version of what was submitted (trigger queue_new_version).
    insert into pgrag.document_queue as q (tenant_id, document_id, source_type, content, title, metadata)
    values (v_tenant, v_document, v_type, submit_document.content, submit_document.title,
            coalesce(submit_document.metadata, '{}'::jsonb))
    on conflict (tenant_id, document_id)
    do update set source_type = excluded.source_type, content = excluded.content,
                  title = excluded.title, metadata = excluded.metadata
    returning q.version into v_version;
    -- A document in progress or in error is pending again, without the error (a ready one stays
    -- ready, searchable with its previous version, until the worker swaps the new one in). A
    -- tenant may not write the status: for it the trigger documents_tenant_writes sets both,
    -- as for any write of a document with a queued version.
    if v_status operator(pg_catalog.=) any (array['processing', 'error']) then
        if pg_catalog.has_column_privilege('pgrag.documents', 'status', 'UPDATE') then
            update pgrag.documents as d set status = 'pending', error = null
             where d.tenant_id operator(pg_catalog.=) v_tenant and d.id operator(pg_catalog.=) v_document
            returning d.status into v_status;
        else
            update pgrag.documents as d set source_uri = d.source_uri
             where d.tenant_id operator(pg_catalog.=) v_tenant and d.id operator(pg_catalog.=) v_document
            returning d.status into v_status;
        end if;
    end if;
    return query select v_document, v_version, v_status;
end
$$;
comment on function public.submit_document(text, text, text, text, jsonb) is
'Submits a document for the current tenant (from the JWT claims): inline content (source_type text, markdown or html; at most pgrag.queue_settings.max_content_bytes, 10 MB by default) identified by source_uri, or, without content, an http(s) source_uri the worker fetches (if the operator allowed it: pgrag.fetch_allowlist). Resubmitting a source_uri makes a new version: the worker processes the latest one. Returns (document_id, version, status): status pending, or ready when a previous version stays searchable meanwhile. Limits: source_uri 1-2,048 bytes (UTF-8), title 1,000, metadata a JSON object of 10,000 bytes (22023); queued documents per tenant (PR010; concurrent submissions of a tenant are serialised, and the limits hold for direct writes of the table too: trigger queue_check_submission). Runs as the caller (RLS applies); a published document can only be resubmitted with the publishing privilege (42501).';

-- Re-made on every migrate (nothing depends on it; 900-row-security.sql grants it again).
drop view if exists pgrag.queue_status;
create view pgrag.queue_status with (security_invoker = true) as
select q.tenant_id,
       pg_catalog.count(*) filter (where q.state operator(pg_catalog.=) 'queued') as queued,
       pg_catalog.count(*) filter (where q.state operator(pg_catalog.=) 'queued'
                                     and q.attempts operator(pg_catalog.>) 0) as retrying,
       pg_catalog.count(*) filter (where q.state operator(pg_catalog.=) 'processing') as processing,
       pg_catalog.count(*) filter (where q.state operator(pg_catalog.=) 'failed') as failed,
       pg_catalog.count(*) filter (where q.last_error_at operator(pg_catalog.>)
                                         (pg_catalog.now() operator(pg_catalog.-) interval '1 hour'))
           as failed_last_hour,
       pg_catalog.min(q.submitted_at) filter (where q.state operator(pg_catalog.=) 'queued')
           as oldest_queued_at,
       coalesce(pg_catalog.date_part('epoch', pg_catalog.now() operator(pg_catalog.-)
                    pg_catalog.min(q.submitted_at) filter (where q.state operator(pg_catalog.=) 'queued')),
                0)::double precision as oldest_queued_seconds
from pgrag.document_queue as q
group by q.tenant_id;
comment on view pgrag.queue_status is
'The queue per tenant (one row per tenant with documents in the queue; security_invoker: a tenant sees its own row): queued (waiting, retries included), retrying (waiting after a failed attempt), processing, failed (gave up), failed_last_hour (documents whose latest failed attempt, retried or final, was in the last hour), oldest_queued_at and oldest_queued_seconds (age of the oldest waiting submission, 0 when none).';

create or replace function public.queue_status()
returns table (
    queued bigint, retrying bigint, processing bigint, failed bigint, failed_last_hour bigint,
    oldest_queued_at timestamptz, oldest_queued_seconds double precision
)
language sql
stable
security invoker
set search_path = pg_catalog, pg_temp
as $$
    select coalesce(s.queued, 0), coalesce(s.retrying, 0), coalesce(s.processing, 0),
           coalesce(s.failed, 0), coalesce(s.failed_last_hour, 0), s.oldest_queued_at,
           coalesce(s.oldest_queued_seconds, 0)
    from (select pgrag.current_tenant_id() as tenant_id) as t
    left join pgrag.queue_status as s on s.tenant_id operator(pg_catalog.=) t.tenant_id
    where t.tenant_id is not null
$$;
comment on function public.queue_status() is
'The current tenant''s queue, one row (none without a tenant claim): queued, retrying, processing, failed, failed_last_hour, oldest_queued_at, oldest_queued_seconds (pgrag.queue_status). Runs as the caller (RLS applies).';

create or replace function public.document_status(
    document_ids bigint[] default null,
    source_uris text[] default null
)
returns table (
    document_id bigint, source_uri text, status text, error text, chunk_count integer,
    queue_state text, version integer, attempts integer, next_attempt_at timestamptz,
    last_error text, submitted_at timestamptz, updated_at timestamptz
)
language plpgsql
stable
security invoker
set search_path = pg_catalog, pg_temp
-- Custom plans: a batch's documents by key (sql/idempotent/README.md, "Plans", write paths).
set plan_cache_mode = force_custom_plan
as $$
#variable_conflict use_column
declare
    v_tenant text := pgrag.current_tenant_id();
begin
    perform pgrag.check_length('document_ids', pg_catalog.cardinality(document_status.document_ids), 1000);
    perform pgrag.check_length('source_uris', pg_catalog.cardinality(document_status.source_uris), 1000);
    perform pgrag.check_length('source_uris',
        (select pg_catalog.max(pg_catalog.octet_length(u)) from pg_catalog.unnest(document_status.source_uris) as u),
        2048, 'bytes per element');
    if v_tenant is null then
        return;
    end if;
    if document_status.document_ids is null and document_status.source_uris is null then
        -- The tenant's documents in the queue (waiting, in progress or failed), oldest first.
        return query
        select d.id, d.source_uri, d.status, d.error, d.chunk_count, q.state, q.version, q.attempts,
               q.next_attempt_at, q.last_error, q.submitted_at, d.updated_at
        from pgrag.document_queue as q
        join pgrag.documents as d on d.tenant_id operator(pg_catalog.=) q.tenant_id
                                 and d.id operator(pg_catalog.=) q.document_id
        where q.tenant_id operator(pg_catalog.=) v_tenant
        order by q.submitted_at, q.document_id
        limit 1000;
        return;
    end if;
    return query
    select d.id, d.source_uri, d.status, d.error, d.chunk_count, q.state, q.version, q.attempts,
           q.next_attempt_at, q.last_error, q.submitted_at, d.updated_at
    from pgrag.documents as d
    left join pgrag.document_queue as q on q.tenant_id operator(pg_catalog.=) d.tenant_id
                                       and q.document_id operator(pg_catalog.=) d.id
    where d.tenant_id operator(pg_catalog.=) v_tenant
      and (d.id operator(pg_catalog.=) any (document_status.document_ids)
           or d.source_uri operator(pg_catalog.=) any (document_status.source_uris))
    order by d.id;
end
$$;
comment on function public.document_status(bigint[], text[]) is
'The current tenant''s documents by document_ids or source_uris (at most 1,000 each, source_uris of at most 2,048 bytes; 22023), or, with neither, its documents in the queue (oldest first, at most 1,000): status (pending, processing, ready, error) and error, chunk_count, and the queue row when there is one (queue_state queued, processing or failed; version, attempts, next_attempt_at, last_error, submitted_at). Runs as the caller (RLS applies).';
