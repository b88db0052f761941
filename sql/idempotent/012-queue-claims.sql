-- The document queue, the worker's claims: which documents a worker takes, and for how long.
-- Contract. Provides: pgrag.check_worker (a worker's arguments), pgrag.claim_documents (fair
--   turns between tenants, bounded bytes per tenant; its steps pgrag.fail_exhausted_leases and
--   pgrag.due_tenants_after), renew_leases, release_documents and next_claim_at, for the owner
--   and service_role (pgrag worker). Relies on: the queue tables
--   (incremental/011-document-queue.sql, 016-queue-limits.sql) and the states, locks and
--   versions 010-queue.sql describes. Callers: pgrag worker (pgrag/worker/jobs.py).

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

create or replace function pgrag.fail_exhausted_leases(due_by timestamptz, max_attempts integer)
returns void
language sql
volatile
security invoker
set search_path = pg_catalog, pg_temp
as $$
    -- A lease that expired once too often ends the document in error: a document that kills
    -- its worker (memory, a crash) is never retried forever. Rows another claim holds are
    -- left to it (SKIP LOCKED).
    with gone as (
        select q.tenant_id, q.document_id, q.attempts
        from pgrag.document_queue as q
        join pgrag.documents as d on d.tenant_id = q.tenant_id and d.id = q.document_id
        where q.state = 'processing' and q.lease_expires_at < due_by and q.attempts >= max_attempts
        order by q.tenant_id, q.document_id
        for update of d, q skip locked
    ), failed as (
        update pgrag.document_queue as q
           set state = 'failed', lease_owner = null, lease_expires_at = null,
               last_error = pg_catalog.format('gave up after %s attempts: the worker processing it '
                                              'stopped without finishing (its lease expired)', g.attempts),
               last_error_at = due_by
          from gone as g
         where q.tenant_id = g.tenant_id and q.document_id = g.document_id
        returning q.tenant_id, q.document_id, q.last_error
    )
    update pgrag.documents as d set status = 'error', error = f.last_error
      from failed as f
     where d.tenant_id = f.tenant_id and d.id = f.document_id
$$;
comment on function pgrag.fail_exhausted_leases(timestamptz, integer) is
'The queue rows whose lease expired before due_by after max_attempts attempts become failed, and their documents error, with the reason; rows another transaction holds are skipped. Part of pgrag.claim_documents.';

create or replace function pgrag.due_tenants_after(
    after_tenant text,
    through_tenant text,
    max_count integer,
    due_by timestamptz
)
returns text[]
language sql
stable
security invoker
set search_path = pg_catalog, pg_temp
as $$
    -- One probe of document_queue_due per tenant (the next tenant id with a due row, an index
    -- range from the last one found), so a claim reads as many index entries as tenants it
    -- serves, however many documents each has waiting.
    with recursive walk (tenant_id, k) as (
        select after_tenant, 0
        union all
        select nxt.tenant_id, w.k + 1
        from walk as w
        cross join lateral (
            select q.tenant_id
            from pgrag.document_queue as q
            where q.state = 'queued' and q.next_attempt_at <= due_by and q.tenant_id > w.tenant_id
            order by q.tenant_id
            limit 1
        ) as nxt
        where w.k < max_count and (through_tenant is null or w.tenant_id < through_tenant)
    )
    select coalesce(pg_catalog.array_agg(w.tenant_id order by w.k), '{}')
    from walk as w
    where w.k > 0 and (through_tenant is null or w.tenant_id <= through_tenant)
$$;
comment on function pgrag.due_tenants_after(text, text, integer, timestamptz) is
'The tenants with queued documents due by due_by whose ids sort after after_tenant and not after through_tenant (null: no bound), in id order, at most max_count: one turn of pgrag.claim_documents'' rotation (called twice when it wraps around).';

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
    v_tenants text[];
begin
    perform pgrag.check_worker(claim_documents.worker_id, claim_documents.lease);
    if claim_documents.n is null or claim_documents.n < 1 or claim_documents.n > 1000 then
        raise exception 'n must be between 1 and 1000 (got %)', claim_documents.n using errcode = '22023';
    end if;
    select s.max_attempts, s.claim_bytes_per_tenant into v_max, v_budget from pgrag.queue_settings as s;

    perform pgrag.fail_exhausted_leases(v_now, v_max);

    -- Tenants take turns: start after the tenant the previous claim served last (the rotation
    -- row; a concurrent claim holding it leaves it to that one), then the next tenants with
    -- due documents in key order, wrapping around, up to n tenants.
    select r.last_tenant into v_last from pgrag.queue_rotation as r for update skip locked;
    v_turn := found;
    if not v_turn then
        select r.last_tenant into v_last from pgrag.queue_rotation as r;
    end if;
    v_tenants := pgrag.due_tenants_after(coalesce(v_last, ''), null, claim_documents.n, v_now);
    if v_last is not null and pg_catalog.cardinality(v_tenants) < claim_documents.n then
        v_tenants := v_tenants operator(pg_catalog.||) pgrag.due_tenants_after(
            '', v_last, claim_documents.n - pg_catalog.cardinality(v_tenants), v_now);
    end if;

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
