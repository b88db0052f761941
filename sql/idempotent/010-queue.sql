-- The document queue: any client submits, a worker claims, processes and completes.
-- Contract. Provides: public.submit_document, public.document_status and public.queue_status
--   (the tenant's RPCs: authenticated and service_role), the view pgrag.queue_status (one row
--   per tenant, security_invoker: a tenant reads its own row), and the worker's transitions
--   pgrag.claim_documents, renew_leases, release_documents, complete_documents,
--   skip_documents, fail_attempts and next_claim_at (the owner and service_role: pgrag worker);
--   the trigger that versions a submission, the one that holds every writer to the
--   submission limits (sizes, the tenant's share of the queue under a per-tenant lock), the
--   one that drops a failed row's content, and the one that wakes workers (NOTIFY pgrag_queue).
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

-- ---------------------------------------------------------------------------------------------
-- The worker's transitions (the owner and service_role). Arguments are checked too: a worker
-- is trusted, but a mistake must fail loudly rather than claim a million rows.
-- ---------------------------------------------------------------------------------------------

create or replace function pgrag.check_worker(worker_id text, lease interval default null)
returns void
language plpgsql
immutable
security invoker
parallel safe
set search_path = pg_catalog, pg_temp
as $$
begin
    if worker_id is null or worker_id operator(pg_catalog.~) '^[[:space:]]*$' then
        raise exception 'worker_id must be a non-blank string' using errcode = '22023';
    end if;
    perform pgrag.check_length('worker_id', pg_catalog.length(worker_id), 200, 'characters');
    if lease is not null
       and (lease operator(pg_catalog.<) interval '1 second' or lease operator(pg_catalog.>) interval '1 day') then
        raise exception 'lease must be between 1 second and 1 day (got %)', lease
            using errcode = '22023';
    end if;
end
$$;
comment on function pgrag.check_worker(text, interval) is
'Argument check of the worker functions: worker_id non-blank, at most 200 characters; lease (when given) between 1 second and 1 day (22023).';

create or replace function pgrag.claim_documents(worker_id text, n integer, lease interval)
returns table (
    tenant_id text, document_id bigint, version integer, source_uri text, source_type text,
    content text, title text, metadata jsonb, attempts integer
)
language plpgsql
volatile
security invoker
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    v_now timestamptz := pg_catalog.clock_timestamp();
    v_max integer;
    v_budget bigint;
    v_last text;
    v_turn boolean;
    v_tenants text[] := '{}';
    v_first text;
    v_next text;
    v_prev text;
    v_wrapped boolean := false;
begin
    perform pgrag.check_worker(claim_documents.worker_id, claim_documents.lease);
    if claim_documents.n is null or claim_documents.n < 1 or claim_documents.n > 1000 then
        raise exception 'n must be between 1 and 1000 (got %)', claim_documents.n using errcode = '22023';
    end if;
    select s.max_attempts, s.claim_bytes_per_tenant into v_max, v_budget from pgrag.queue_settings as s;

    -- A lease that expired once too often ends the document in error: a document that kills
    -- its worker (memory, a crash) is never retried forever.
    with gone as (
        select q.tenant_id, q.document_id, q.attempts
        from pgrag.document_queue as q
        join pgrag.documents as d on d.tenant_id = q.tenant_id and d.id = q.document_id
        where q.state = 'processing' and q.lease_expires_at < v_now and q.attempts >= v_max
        order by q.tenant_id, q.document_id
        for update of d, q skip locked
    ), failed as (
        update pgrag.document_queue as q
           set state = 'failed', lease_owner = null, lease_expires_at = null,
               last_error = pg_catalog.format('gave up after %s attempts: the worker processing it '
                                              'stopped without finishing (its lease expired)', g.attempts),
               last_error_at = v_now
          from gone as g
         where q.tenant_id = g.tenant_id and q.document_id = g.document_id
        returning q.tenant_id, q.document_id, q.last_error
    )
    update pgrag.documents as d set status = 'error', error = f.last_error
      from failed as f
     where d.tenant_id = f.tenant_id and d.id = f.document_id;

    -- Tenants take turns: start after the tenant the previous claim served last (the rotation
    -- row; a concurrent claim holding it leaves it to that one), then the next tenants with
    -- due documents in key order, wrapping around, up to n tenants. Each step is one probe of
    -- document_queue_due.
    select r.last_tenant into v_last from pgrag.queue_rotation as r for update skip locked;
    v_turn := found;
    if not v_turn then
        select r.last_tenant into v_last from pgrag.queue_rotation as r;
    end if;
    if v_last is not null then
        v_first := (select q.tenant_id from pgrag.document_queue as q
                    where q.state = 'queued' and q.next_attempt_at <= v_now and q.tenant_id > v_last
                    order by q.tenant_id limit 1);
    end if;
    if v_first is null then
        v_first := (select q.tenant_id from pgrag.document_queue as q
                    where q.state = 'queued' and q.next_attempt_at <= v_now
                    order by q.tenant_id limit 1);
    end if;
    v_next := v_first;
    while v_next is not null and pg_catalog.cardinality(v_tenants) < claim_documents.n loop
        v_tenants := v_tenants operator(pg_catalog.||) v_next;
        v_prev := v_next;
        v_next := (select q.tenant_id from pgrag.document_queue as q
                   where q.state = 'queued' and q.next_attempt_at <= v_now and q.tenant_id > v_prev
                     and (not v_wrapped or q.tenant_id < v_first)
                   order by q.tenant_id limit 1);
        if v_next is null and not v_wrapped then
            v_wrapped := true;
            v_next := (select q.tenant_id from pgrag.document_queue as q
                       where q.state = 'queued' and q.next_attempt_at <= v_now and q.tenant_id < v_first
                       order by q.tenant_id limit 1);
        end if;
    end loop;

    return query
    -- Each tenant's oldest due documents, locked (SKIP LOCKED: those another claim holds are
    -- passed over, so concurrent claims take the next ones), at most n - (tenants - 1) each
    -- (what one tenant can get when each other one gets a document), then ranked within the
    -- tenant: its first document always, the next ones while their content stays within
    -- claim_bytes_per_tenant.
    with expired as (
        select e.tenant_id, e.document_id, e.lease_expires_at as since
        from pgrag.document_queue as e
        where e.state = 'processing' and e.lease_expires_at < v_now and e.attempts < v_max
        order by e.lease_expires_at
        limit claim_documents.n
        for update of e skip locked
    ), due as (
        select c.tenant_id, c.document_id, c.since, t.ord,
               pg_catalog.row_number() over w as turn,
               pg_catalog.sum(c.bytes) over w as bytes_through
        from pg_catalog.unnest(v_tenants) with ordinality as t (tenant_id, ord)
        cross join lateral (
            select q.tenant_id, q.document_id, q.next_attempt_at as since,
                   coalesce(pg_catalog.octet_length(q.content), 0) as bytes
            from pgrag.document_queue as q
            where q.tenant_id = t.tenant_id and q.state = 'queued' and q.next_attempt_at <= v_now
            order by q.next_attempt_at, q.document_id
            limit claim_documents.n - pg_catalog.cardinality(v_tenants) + 1
            for update of q skip locked
        ) as c
        window w as (partition by c.tenant_id order by c.since, c.document_id)
    ), candidates as (
        -- expired leases first (their worker is gone), then due documents turn by turn, each
        -- turn in the rotation's order
        select x.tenant_id, x.document_id, 0::bigint as turn, 0::bigint as ord, x.since from expired as x
        union all
        select y.tenant_id, y.document_id, y.turn, y.ord, y.since from due as y
        where y.turn = 1 or y.bytes_through <= v_budget
    ), picked as (
        select q.tenant_id, q.document_id, c.ord
        from candidates as c
        join pgrag.document_queue as q on q.tenant_id = c.tenant_id and q.document_id = c.document_id
        join pgrag.documents as d on d.tenant_id = q.tenant_id and d.id = q.document_id
        where (q.state = 'queued' and q.next_attempt_at <= v_now)
           or (q.state = 'processing' and q.lease_expires_at < v_now and q.attempts < v_max)
        order by c.turn, c.ord, c.since, q.tenant_id, q.document_id
        limit claim_documents.n
        for update of q, d skip locked
    ), claimed as (
        update pgrag.document_queue as q
           set state = 'processing', lease_owner = claim_documents.worker_id,
               lease_expires_at = v_now + claim_documents.lease,
               attempts = q.attempts + 1, started_at = v_now
          from picked as p
         where q.tenant_id = p.tenant_id and q.document_id = p.document_id
        returning q.tenant_id, q.document_id, q.version, q.source_type, q.content, q.title,
                  q.metadata, q.attempts, q.next_attempt_at
    ), started as (
        update pgrag.documents as d set status = 'processing'
          from claimed as c
         where d.tenant_id = c.tenant_id and d.id = c.document_id and d.status <> 'ready'
        returning d.id
    ), turned as (
        -- the next claim starts after the last tenant in this one's rotation
        update pgrag.queue_rotation as r
           set last_tenant = l.tenant_id, served_at = v_now
          from (select p.tenant_id from picked as p where p.ord > 0
                order by p.ord desc limit 1) as l
         where v_turn
        returning r.last_tenant
    )
    -- The worker runs a batch's tenants in this order: the least content first, so a tenant's
    -- one small document does not wait for another's many or heavy ones in the same batch.
    select c.tenant_id, c.document_id, c.version, d.source_uri, c.source_type, c.content,
           c.title, c.metadata, c.attempts
    from claimed as c
    join pgrag.documents as d on d.tenant_id = c.tenant_id and d.id = c.document_id
    order by pg_catalog.sum(coalesce(pg_catalog.octet_length(c.content), 0)) over (partition by c.tenant_id),
             pg_catalog.count(*) over (partition by c.tenant_id), c.tenant_id,
             c.next_attempt_at, c.document_id;
end
$$;
comment on function pgrag.claim_documents(text, integer, interval) is
'Worker transition to processing: claims up to n (1-1,000) documents for worker_id with FOR UPDATE SKIP LOCKED (concurrent workers never get the same one), each leased for lease (1 second to 1 day) and counted as an attempt: first those whose lease expired (their worker stopped), then due queued ones, shared between tenants in turns (starting after the tenant the previous claim served last, pgrag.queue_rotation; one document per tenant per turn, oldest first; a tenant''s documents after its first only while their content stays within queue_settings.claim_bytes_per_tenant). Pending documents become processing (ready ones stay ready). An expired lease at queue_settings.max_attempts ends the document in error instead. Returns what to process, each tenant''s documents together, the tenant with the least content first: tenant_id, document_id, version, source_uri, source_type, content (null: fetch source_uri), title, metadata, attempts.';

create or replace function pgrag.renew_leases(worker_id text, lease interval)
returns integer
language plpgsql
volatile
security invoker
set search_path = pg_catalog, pg_temp
as $$
declare
    v_count integer;
begin
    perform pgrag.check_worker(renew_leases.worker_id, renew_leases.lease);
    with mine as (
        select q.tenant_id, q.document_id
        from pgrag.document_queue as q
        where q.state = 'processing' and q.lease_owner = renew_leases.worker_id
        order by q.tenant_id, q.document_id
        for update of q skip locked
    )
    update pgrag.document_queue as q
       set lease_expires_at = pg_catalog.clock_timestamp() + renew_leases.lease
      from mine as m
     where q.tenant_id = m.tenant_id and q.document_id = m.document_id;
    get diagnostics v_count = row_count;
    return v_count;
end
$$;
comment on function pgrag.renew_leases(text, interval) is
'Worker: extends every lease worker_id holds to now + lease (1 second to 1 day); returns how many. A document resubmitted or reclaimed meanwhile is no longer held and is not renewed.';

create or replace function pgrag.release_documents(
    worker_id text,
    tenant_ids text[] default null,
    document_ids bigint[] default null
)
returns integer
language plpgsql
volatile
security invoker
set search_path = pg_catalog, pg_temp
as $$
declare
    v_count integer;
begin
    perform pgrag.check_worker(release_documents.worker_id);
    with mine as (
        select q.tenant_id, q.document_id
        from pgrag.document_queue as q
        join pgrag.documents as d on d.tenant_id = q.tenant_id and d.id = q.document_id
        where q.state = 'processing' and q.lease_owner = release_documents.worker_id
          and (release_documents.document_ids is null
               or (q.tenant_id, q.document_id) in (
                   select v.t, v.i from rows from (pg_catalog.unnest(release_documents.tenant_ids),
                                                   pg_catalog.unnest(release_documents.document_ids)) as v (t, i)))
        order by q.tenant_id, q.document_id
        for update of d, q
    ), released as (
        update pgrag.document_queue as q
           set state = 'queued', lease_owner = null, lease_expires_at = null,
               attempts = greatest(q.attempts - 1, 0), next_attempt_at = pg_catalog.now()
          from mine as m
         where q.tenant_id = m.tenant_id and q.document_id = m.document_id
        returning q.tenant_id, q.document_id
    ), waiting as (
        update pgrag.documents as d set status = 'pending'
          from released as r
         where d.tenant_id = r.tenant_id and d.id = r.document_id and d.status = 'processing'
        returning d.id
    )
    select pg_catalog.count(*) into v_count from released;
    return v_count;
end
$$;
comment on function pgrag.release_documents(text, text[], bigint[]) is
'Worker transition back to queued (a graceful stop): the documents worker_id holds (all, or the (tenant_ids[i], document_ids[i]) pairs given) are queued again at once and their attempt is given back; processing documents become pending. Returns how many.';

create or replace function pgrag.complete_documents(
    worker_id text,
    stage regclass,
    document_ids bigint[],
    versions integer[],
    titles text[],
    source_types text[],
    content_sha256s text[],
    metadatas jsonb[],
    chunk_counts integer[],
    embedding_model text
)
returns table (document_id bigint, completed boolean)
language plpgsql
volatile
security invoker
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    v_tenant text := pgrag.loader_tenant('pgrag.complete_documents');
    v_keep bigint[];
    v_drop bigint[];
begin
    perform pgrag.check_worker(complete_documents.worker_id);
    -- Documents first, then queue rows, in id order (as every transition).
    perform 1 from pgrag.documents as d
    where d.tenant_id = v_tenant and d.id = any (complete_documents.document_ids)
    order by d.id
    for update;
    -- The documents this worker still holds at the version it processed (a resubmission, a
    -- reclaim after its lease expired, or a deletion meanwhile: not swapped in).
    select pg_catalog.array_agg(v.ord order by v.ord) into v_keep
    from rows from (pg_catalog.unnest(complete_documents.document_ids),
                    pg_catalog.unnest(complete_documents.versions)) with ordinality as v (id, ver, ord)
    where exists (select 1 from pgrag.document_queue as q
                  where q.tenant_id = v_tenant and q.document_id = v.id and q.version = v.ver
                    and q.state = 'processing' and q.lease_owner = complete_documents.worker_id);
    perform 1 from pgrag.document_queue as q
    where q.tenant_id = v_tenant and q.document_id = any (complete_documents.document_ids)
    order by q.document_id
    for update;
    select pg_catalog.array_agg(v.id) into v_drop
    from pg_catalog.unnest(complete_documents.document_ids) with ordinality as v (id, ord)
    where not (v.ord = any (coalesce(v_keep, '{}')));
    if v_keep is not null then
        -- A version submitted without the publishing privilege is a tenant's change: swapped
        -- into a document published meanwhile, it is not public until published again (the
        -- rule 003-publishing.sql gives tenants). Unpublished first, so its chunks never are.
        update pgrag.documents as d set is_public = false
          from pgrag.document_queue as q
         where d.tenant_id = v_tenant and q.tenant_id = v_tenant and q.document_id = d.id
           and d.is_public and not q.publisher
           and d.id = any (array(select complete_documents.document_ids[i]
                                 from pg_catalog.unnest(v_keep) as i));
        perform pgrag.replace_document_chunks(
            complete_documents.stage, v_tenant,
            array(select complete_documents.document_ids[i] from pg_catalog.unnest(v_keep) as i order by i),
            array(select complete_documents.titles[i] from pg_catalog.unnest(v_keep) as i order by i),
            array(select complete_documents.source_types[i] from pg_catalog.unnest(v_keep) as i order by i),
            array(select complete_documents.content_sha256s[i] from pg_catalog.unnest(v_keep) as i order by i),
            array(select complete_documents.metadatas[i] from pg_catalog.unnest(v_keep) as i order by i),
            array(select complete_documents.chunk_counts[i] from pg_catalog.unnest(v_keep) as i order by i),
            complete_documents.embedding_model);
        delete from pgrag.document_queue as q
        where q.tenant_id = v_tenant
          and q.document_id = any (array(select complete_documents.document_ids[i]
                                         from pg_catalog.unnest(v_keep) as i));
    end if;
    if v_drop is not null then
        execute pg_catalog.format('delete from %s where document_id operator(pg_catalog.=) any ($1)',
                                  complete_documents.stage)
        using v_drop;
    end if;
    return query
    select v.id, v.ord = any (coalesce(v_keep, '{}'))
    from pg_catalog.unnest(complete_documents.document_ids) with ordinality as v (id, ord)
    order by v.ord;
end
$$;
comment on function pgrag.complete_documents(text, regclass, bigint[], integer[], text[], text[], text[], jsonb[], integer[], text) is
'Worker transition to ready, for the request''s tenant: the documents worker_id still holds at the given versions are swapped in from the staging table (pgrag.replace_document_chunks, same arrays) and leave the queue (a published document whose version was submitted without the publishing privilege, document_queue.publisher, is unpublished: not public until published again); the others (resubmitted, reclaimed or deleted meanwhile) are not, and their staged rows are dropped. Returns (document_id, completed) per document.';

create or replace function pgrag.skip_documents(
    worker_id text,
    document_ids bigint[],
    versions integer[],
    metadatas jsonb[] default null
)
returns table (document_id bigint, completed boolean)
language plpgsql
volatile
security invoker
set search_path = pg_catalog, pg_temp
-- Custom plans: a batch's documents by key (sql/idempotent/README.md, "Plans", write paths).
set plan_cache_mode = force_custom_plan
as $$
#variable_conflict use_column
declare
    v_tenant text := pgrag.loader_tenant('pgrag.skip_documents');
    v_done bigint[];
    v_private bigint[];
begin
    perform pgrag.check_worker(skip_documents.worker_id);
    perform 1 from pgrag.documents as d
    where d.tenant_id = v_tenant and d.id = any (skip_documents.document_ids)
    order by d.id
    for update;
    with mine as (
        select q.document_id
        from pgrag.document_queue as q
        join rows from (pg_catalog.unnest(skip_documents.document_ids),
                        pg_catalog.unnest(skip_documents.versions)) as v (id, ver)
          on q.document_id = v.id and q.version = v.ver
        where q.tenant_id = v_tenant and q.state = 'processing'
          and q.lease_owner = skip_documents.worker_id
        order by q.document_id
        for update of q
    ), gone as (
        delete from pgrag.document_queue as q
        using mine as m
        where q.tenant_id = v_tenant and q.document_id = m.document_id
        returning q.document_id, q.publisher
    )
    select pg_catalog.array_agg(g.document_id),
           pg_catalog.array_agg(g.document_id) filter (where not g.publisher)
      into v_done, v_private
      from gone as g;
    if skip_documents.metadatas is not null and v_done is not null then
        -- New metadata submitted without the publishing privilege unpublishes a published
        -- document, as new content does (complete_documents).
        update pgrag.documents as d
           set metadata = v.m,
               is_public = d.is_public and not (v.id = any (coalesce(v_private, '{}'))
                                                and d.metadata is distinct from v.m)
        from rows from (pg_catalog.unnest(skip_documents.document_ids),
                        pg_catalog.unnest(skip_documents.metadatas)) as v (id, m)
        where d.tenant_id = v_tenant and d.id = v.id and v.id = any (v_done);
    end if;
    return query
    select v.id, v.id = any (coalesce(v_done, '{}'))
    from pg_catalog.unnest(skip_documents.document_ids) as v (id);
end
$$;
comment on function pgrag.skip_documents(text, bigint[], integer[], jsonb[]) is
'Worker transition for documents whose content did not change (still ready, nothing to embed), for the request''s tenant: those worker_id still holds at the given versions leave the queue, with their metadata replaced by metadatas when given (changed metadata submitted without the publishing privilege unpublishes a published document). Returns (document_id, completed) per document.';

create or replace function pgrag.fail_attempts(
    worker_id text,
    document_ids bigint[],
    versions integer[],
    errors text[],
    retryable boolean[]
)
returns table (document_id bigint, state text, attempts integer, next_attempt_at timestamptz)
language plpgsql
volatile
security invoker
set search_path = pg_catalog, pg_temp
-- Custom plans: a batch's documents by key (sql/idempotent/README.md, "Plans", write paths).
set plan_cache_mode = force_custom_plan
as $$
#variable_conflict use_column
declare
    v_tenant text := pgrag.loader_tenant('pgrag.fail_attempts');
    v_settings pgrag.queue_settings;
begin
    perform pgrag.check_worker(fail_attempts.worker_id);
    select s.* into v_settings from pgrag.queue_settings as s;
    perform 1 from pgrag.documents as d
    where d.tenant_id = v_tenant and d.id = any (fail_attempts.document_ids)
    order by d.id
    for update;
    return query
    with mine as (
        select q.document_id, q.attempts, v.e, coalesce(v.r, false) as r
        from pgrag.document_queue as q
        join rows from (pg_catalog.unnest(fail_attempts.document_ids),
                        pg_catalog.unnest(fail_attempts.versions),
                        pg_catalog.unnest(fail_attempts.errors),
                        pg_catalog.unnest(fail_attempts.retryable)) as v (id, ver, e, r)
          on q.document_id = v.id and q.version = v.ver
        where q.tenant_id = v_tenant and q.state = 'processing'
          and q.lease_owner = fail_attempts.worker_id
        order by q.document_id
        for update of q
    ), failed as (
        update pgrag.document_queue as q
           set state = case when m.r and m.attempts < v_settings.max_attempts then 'queued' else 'failed' end,
               next_attempt_at = case
                   when m.r and m.attempts < v_settings.max_attempts then
                       pg_catalog.now() + least(
                           v_settings.retry_delay * pg_catalog.power(2, least(m.attempts - 1, 30)),
                           v_settings.retry_delay_max) * (0.75 + 0.5 * pg_catalog.random())
                   else q.next_attempt_at end,
               lease_owner = null, lease_expires_at = null,
               last_error = pg_catalog.left(coalesce(m.e, 'unknown error'), 2000),
               last_error_at = pg_catalog.now()
          from mine as m
         where q.tenant_id = v_tenant and q.document_id = m.document_id
        returning q.document_id, q.state, q.attempts, q.next_attempt_at, q.last_error
    ), statuses as (
        update pgrag.documents as d
           set status = case when f.state = 'failed' then 'error'
                             when d.status = 'ready' then 'ready' else 'pending' end,
               error = case when f.state = 'failed' then f.last_error else d.error end
          from failed as f
         where d.tenant_id = v_tenant and d.id = f.document_id
        returning d.id
    )
    select f.document_id, f.state, f.attempts, f.next_attempt_at from failed as f;
end
$$;
comment on function pgrag.fail_attempts(text, bigint[], integer[], text[], boolean[]) is
'Worker transition after a failed attempt, for the request''s tenant: each document worker_id still holds at the given version is queued again after a growing delay (queue_settings.retry_delay doubled per attempt, up to retry_delay_max, +-25 % jitter) when retryable and attempts remain, else it fails for good (queue row failed, document error with the reason). The reason (its first 2,000 characters) is kept as last_error. Returns (document_id, state, attempts, next_attempt_at) of the documents it changed.';

create or replace function pgrag.next_claim_at()
returns timestamptz
language sql
stable
security invoker
set search_path = pg_catalog, pg_temp
as $$
    select least(
        (select pg_catalog.min(q.next_attempt_at) from pgrag.document_queue as q where q.state = 'queued'),
        (select pg_catalog.min(q.lease_expires_at) from pgrag.document_queue as q where q.state = 'processing'))
$$;
comment on function pgrag.next_claim_at() is
'Worker: the earliest time a claim can find work (a queued document''s next_attempt_at or a lease''s end), null when the queue is empty. Workers sleep until then (or a NOTIFY pgrag_queue).';
