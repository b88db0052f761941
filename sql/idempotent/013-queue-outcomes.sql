-- The document queue, the outcome of a claimed document: completed, skipped, or an attempt
-- that failed.
-- Contract. Provides: pgrag.complete_documents (the chunks swapped in, the queue row gone),
--   pgrag.skip_documents (unchanged content) and pgrag.fail_attempts (a retry after a growing
--   delay, or the document's error), for the owner and service_role (pgrag worker). Relies on:
--   the loader's transitions (004-loading.sql), pgrag.check_worker (012-queue-claims.sql), the
--   queue tables and the states and locks 010-queue.sql describes. Callers: pgrag worker.

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
