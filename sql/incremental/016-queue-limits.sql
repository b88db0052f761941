-- pgrag queue limits: what a failed submission keeps, who may publish through the queue, and
-- the state of the claims' rotation between tenants.
-- Incremental migration: applied once, in one transaction, never edited after release.
--
-- 1. A document that failed for good kept its submitted content (up to max_content_bytes, 10 MB
--    by default) in its queue row, and failed rows do not count toward max_queued_per_tenant:
--    a tenant could fill the table without bound. A failed row now drops its content (the
--    trigger document_queue_free_failed, sql/idempotent/010-queue.sql); a resubmission brings
--    the content again. The check that ties content to source_type allows it, and the failed
--    rows of earlier versions lose theirs here.
-- 2. document_queue.publisher: whether the submission was made with the publishing privilege
--    (UPDATE of documents.is_public), set by the trigger queue_new_version from the writer's
--    privileges. The worker (which holds the privilege itself) completes a version submitted
--    without it as a tenant's write: a published document whose new version nobody with the
--    privilege submitted is unpublished when that version is swapped in.
-- 3. queue_settings.claim_bytes_per_tenant: the inline content one claim takes from one tenant
--    (at least one document), so that a tenant's heavy documents fill a batch only one at a
--    time and another tenant's document waits at most about one of them.
-- 4. queue_rotation: the tenant the last claim served last (one row, the workers' own), where
--    the next claim starts, so that tenants take turns whatever their queue's age.
--
-- Cost of this file: two columns with constant defaults and a constraint swap (catalog changes,
-- the constraint checked under a SHARE UPDATE EXCLUSIVE lock); an update of the failed rows.

set local lock_timeout = '10s';
set local search_path = pg_catalog, pg_temp;

alter table pgrag.document_queue
    add column publisher boolean not null default false;
comment on column pgrag.document_queue.publisher is
'The submission was made with the publishing privilege (UPDATE of documents.is_public); set by the trigger queue_new_version. Without it, completing this version unpublishes a published document.';

alter table pgrag.document_queue
    add constraint document_queue_content_by_type check (
        case when source_type = 'url' then content is null
             else content is not null or state = 'failed' end) not valid;
-- The queue holds only work not done yet (completed rows leave it): validating in this file's
-- transaction holds its writers for one scan of those rows.
-- squawk-ignore constraint-missing-not-valid
alter table pgrag.document_queue validate constraint document_queue_content_by_type;
-- The check above replaces it (a failed row's content may be null now); it guaranteed no more.
-- squawk-ignore ban-drop-constraint
alter table pgrag.document_queue drop constraint document_queue_check1;
comment on column pgrag.document_queue.content is
'The submitted text (inline documents); null for url documents, and once the document failed for good (a resubmission brings it again).';

-- The failed rows of earlier versions drop their content. The versioning trigger (installed
-- with them by sql/idempotent/010-queue.sql) would take the write for a resubmission and queue
-- them again: it is off for this statement. Nothing to do on a new install.
do $$
begin
    if exists (select 1 from pgrag.document_queue as q
               where q.state = 'failed' and q.content is not null) then
        alter table pgrag.document_queue disable trigger document_queue_update_version;
        update pgrag.document_queue set content = null where state = 'failed' and content is not null;
        alter table pgrag.document_queue enable trigger document_queue_update_version;
    end if;
end
$$;

alter table pgrag.queue_settings
    add column claim_bytes_per_tenant integer not null default 1048576
        check (claim_bytes_per_tenant between 1 and 104857600);
comment on column pgrag.queue_settings.claim_bytes_per_tenant is
'Inline content (bytes) one claim takes from one tenant: its documents oldest first while their total stays within it, and always at least one.';

create table pgrag.queue_rotation (
    singleton boolean primary key default true check (singleton),
    last_tenant text,
    served_at timestamptz
);
alter table pgrag.queue_rotation enable row level security;
insert into pgrag.queue_rotation default values;
comment on table pgrag.queue_rotation is
'Where the next claim of the document queue starts (one row, written by pgrag.claim_documents): the tenant after last_tenant in key order, wrapping around. Read and written by the workers (service_role and the owner) only.';
