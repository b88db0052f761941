-- pgrag document queue: documents any client submits (public.submit_document, PostgREST
-- included) wait here until a worker (pgrag worker) claims, processes and completes them.
-- Incremental migration: applied once, in one transaction, never edited after release.
--
-- One row per document with work to do: the submitted content (inline text, or none when the
-- worker fetches documents.source_uri), its version (bumped by every submission, so a worker
-- that processed an older version never swaps it in), the lease of the worker processing it,
-- and the retry state (attempts, next_attempt_at, the last error). A completed document's row
-- is deleted (its chunks are the result); a document that failed for good keeps its row in
-- state 'failed' with the reason. The functions that move a row between states live in
-- sql/idempotent/010-queue.sql; the operator's settings (retries, limits) and the list of what
-- the worker may fetch (SSRF) are one-row and operator-only tables below.

set local lock_timeout = '10s';
set local search_path = pg_catalog, pg_temp;

create table pgrag.document_queue (
    tenant_id text not null,
    document_id bigint not null,
    version integer not null default 1 check (version > 0),
    source_type text not null check (source_type in ('markdown', 'html', 'text', 'url')),
    content text,
    title text,
    metadata jsonb not null default '{}'::jsonb,
    state text not null default 'queued' check (state in ('queued', 'processing', 'failed')),
    attempts integer not null default 0 check (attempts >= 0),
    next_attempt_at timestamptz not null default now(),
    lease_owner text,
    lease_expires_at timestamptz,
    last_error text,
    last_error_at timestamptz,
    submitted_at timestamptz not null default now(),
    started_at timestamptz,
    primary key (tenant_id, document_id),
    foreign key (tenant_id, document_id) references pgrag.documents (tenant_id, id) on delete cascade,
    check ((state = 'processing') = (lease_owner is not null and lease_expires_at is not null)),
    check ((content is null) = (source_type = 'url'))
);
alter table pgrag.document_queue enable row level security;
comment on table pgrag.document_queue is
'Documents waiting for, or in, processing by a worker: one row per document with work to do (deleted when the document is completed; kept in state failed with the reason when it failed for good). Written through the queue functions (public.submit_document, pgrag.claim_documents, ...).';
comment on column pgrag.document_queue.version is 'Content version: every submission bumps it; a worker swaps in only the version it claimed, if it is still the latest.';
comment on column pgrag.document_queue.source_type is 'markdown, html or text for inline content; url when the worker fetches documents.source_uri.';
comment on column pgrag.document_queue.content is 'The submitted text (inline documents); null for url documents.';
comment on column pgrag.document_queue.state is 'queued (waiting, possibly for a retry at next_attempt_at), processing (leased by lease_owner until lease_expires_at), failed (gave up: last_error says why).';
comment on column pgrag.document_queue.attempts is 'Attempts at the current version so far (a claim counts one; a graceful release gives it back).';
comment on column pgrag.document_queue.next_attempt_at is 'When the document may be claimed (later than now while it waits for a retry).';
comment on column pgrag.document_queue.lease_owner is 'Worker holding the document (state processing); its lease ends at lease_expires_at unless renewed.';
comment on column pgrag.document_queue.last_error is 'Why the last attempt failed.';

-- Claims read due rows tenant by tenant (fair share between tenants), and expired leases.
create index document_queue_due on pgrag.document_queue (tenant_id, next_attempt_at)
    where state = 'queued';
create index document_queue_oldest on pgrag.document_queue (next_attempt_at)
    where state = 'queued';
create index document_queue_leases on pgrag.document_queue (lease_expires_at)
    where state = 'processing';
create index document_queue_owner on pgrag.document_queue (lease_owner)
    where state = 'processing';

-- Operator settings of the queue (one row). Not tenant-scoped; written by the owner only.
create table pgrag.queue_settings (
    singleton boolean primary key default true check (singleton),
    max_attempts integer not null default 5 check (max_attempts between 1 and 100),
    retry_delay interval not null default '30 seconds' check (retry_delay >= interval '0'),
    retry_delay_max interval not null default '1 hour' check (retry_delay_max >= interval '0'),
    max_content_bytes integer not null default 10485760
        check (max_content_bytes between 1 and 104857600),
    max_queued_per_tenant integer not null default 10000 check (max_queued_per_tenant >= 0)
);
alter table pgrag.queue_settings enable row level security;
insert into pgrag.queue_settings default values;
comment on table pgrag.queue_settings is
'Operator settings of the document queue (one row, changed with UPDATE by the owner): retries and the limits of public.submit_document.';
comment on column pgrag.queue_settings.max_attempts is 'Attempts per document version before it ends in error (each claim counts one; an expired lease too).';
comment on column pgrag.queue_settings.retry_delay is 'Delay before the first retry; each later retry waits twice as long (with +-25 % jitter), up to retry_delay_max.';
comment on column pgrag.queue_settings.max_content_bytes is 'Largest inline content public.submit_document accepts (bytes, UTF-8).';
comment on column pgrag.queue_settings.max_queued_per_tenant is 'Documents a tenant may have queued or processing at once; further submissions are refused (PR010).';

-- What the worker may fetch when a tenant submits a URL (SSRF guard): nothing by default.
create table pgrag.fetch_allowlist (
    url_prefix text primary key
        check (url_prefix ~ '^https?://[^/?#@[:space:]]+/[^[:space:]]*$' and length(url_prefix) <= 2048),
    allow_private_addresses boolean not null default false,
    note text,
    created_at timestamptz not null default now()
);
alter table pgrag.fetch_allowlist enable row level security;
comment on table pgrag.fetch_allowlist is
'URL prefixes the worker may fetch for submitted documents (scheme://host[:port]/path..., matched after normalisation); nothing is fetched unless listed. Written by the owner only (docs/ingest.md, "What the worker may fetch").';
comment on column pgrag.fetch_allowlist.url_prefix is 'http:// or https://, a host (and port), then a path prefix ending the match at a slash or longer.';
comment on column pgrag.fetch_allowlist.allow_private_addresses is 'Also allow this prefix''s host to resolve to a private, loopback, link-local or other non-global address (refused otherwise, on every connection and redirect).';
