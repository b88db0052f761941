-- Publishing: the chunks' copy of their document's is_public, and the guard that makes changing
-- published content a privilege.
-- Contract. Provides: triggers on pgrag.chunks and pgrag.documents (chunks_is_public,
--   documents_is_public, chunks_guard_published, documents_guard_published) and their trigger
--   functions. Relies on: chunks.is_public and its partial HNSW index
--   (incremental/005-vector-isolation.sql); the column privilege UPDATE (is_public) on
--   pgrag.documents as the publishing privilege (900-row-security.sql). Callers: the triggers
--   only (trigger functions need no EXECUTE grant).

-- ---------------------------------------------------------------------------------------------
-- chunks.is_public: a copy of the document's flag, the predicate of the public-only HNSW index
-- that anon searches (sql/incremental/005-vector-isolation.sql). Written by these triggers only.
-- ---------------------------------------------------------------------------------------------

create or replace function pgrag.chunk_is_public()
returns trigger
language plpgsql
security invoker
set search_path = pg_catalog, pg_temp
-- One generic plan (sql/idempotent/README.md, "Plans"): the row's document by key. Planned with
-- the values, a tenant new to the statistics looks like one row, and each row's lookup read
-- every document of the tenant by another index on it.
set plan_cache_mode = force_generic_plan
as $$
begin
    new.is_public := coalesce((select d.is_public from pgrag.documents as d
                               where d.tenant_id = new.tenant_id and d.id = new.document_id), false);
    return new;
end
$$;
comment on function pgrag.chunk_is_public() is
'Trigger function (before insert or update of tenant_id, document_id, is_public on pgrag.chunks, per row): sets is_public from the chunk''s document, whatever the writer gave.';

create or replace function pgrag.document_is_public_changed()
returns trigger
language plpgsql
security invoker
set search_path = pg_catalog, pg_temp
-- One generic plan (as chunk_is_public's): the document's chunks by their key.
set plan_cache_mode = force_generic_plan
as $$
begin
    -- Each chunk's own trigger reads the flag back from this (already updated) document.
    update pgrag.chunks as c
       set is_public = new.is_public
     where c.tenant_id = new.tenant_id and c.document_id = new.id
       and c.is_public is distinct from new.is_public;
    return null;
end
$$;
comment on function pgrag.document_is_public_changed() is
'Trigger function (after update of is_public on pgrag.documents, per row): copies the new flag to the document''s chunks.';

create or replace trigger chunks_is_public
    before insert or update of tenant_id, document_id, is_public on pgrag.chunks
    for each row execute function pgrag.chunk_is_public();

-- Publishing is a privilege (UPDATE of documents.is_public: service_role and the owner), and so
-- is changing what is published: without it, a tenant may not add to, edit, or move chunks into
-- or out of a public document, nor edit the document. Deleting stays allowed (a tenant may
-- withdraw its content). docs/security.md, "Writes: ids and publishing".
create or replace function pgrag.guard_published_writes()
returns trigger
language plpgsql
security invoker
set search_path = pg_catalog, pg_temp
as $$
begin
    if pg_catalog.has_column_privilege('pgrag.documents', 'is_public', 'UPDATE') then
        return new;
    end if;
    if tg_table_name = 'documents' then
        if old.is_public then
            raise exception 'document % is published: changing it needs the publishing privilege', old.id
                using errcode = '42501',
                      hint = 'publishing and editing published documents is for service_role (docs/security.md).';
        end if;
        return new;
    end if;
    if exists (select 1 from pgrag.documents as d
               where (d.tenant_id = new.tenant_id and d.id = new.document_id)
                  or (tg_op = 'UPDATE' and d.tenant_id = old.tenant_id and d.id = old.document_id)
               having pg_catalog.bool_or(d.is_public)) then
        raise exception 'chunk % belongs to a published document: changing it needs the publishing privilege',
            coalesce(new.id, old.id)
            using errcode = '42501',
                  hint = 'publishing and editing published documents is for service_role (docs/security.md).';
    end if;
    return new;
end
$$;
comment on function pgrag.guard_published_writes() is
'Trigger function (before insert or update on pgrag.chunks, before update on pgrag.documents, per row): a role without UPDATE on documents.is_public (the publishing privilege) may not change a published document or its chunks (SQLSTATE 42501); deleting stays allowed.';

create or replace trigger chunks_guard_published
    before insert or update on pgrag.chunks
    for each row execute function pgrag.guard_published_writes();

create or replace trigger documents_guard_published
    before update on pgrag.documents
    for each row execute function pgrag.guard_published_writes();

create or replace trigger documents_is_public
    after update of is_public on pgrag.documents
    for each row when (old.is_public operator(pg_catalog.<>) new.is_public)
    execute function pgrag.document_is_public_changed();
