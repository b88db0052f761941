-- The rows a search may return, and how the search functions are planned on this server.
-- Contract. Provides: pgrag.searchable (ready documents and the filters, for every search),
--   pgrag.tenant_chunk_count, and pgrag.distributed() (the execution mode: false here; the Citus
--   tier, sql/citus/002-function-settings.sql, makes it true). Relies on: pg_catalog
--   only. Callers: the arms (022-vector-arm.sql, 025-keyword-arm.sql), the fusion
--   (026-fusion.sql), the windows (019-windows.sql) and the public API (027-api.sql), as the calling role.

-- The execution mode, chosen when pgrag is installed and visible in one place: on one server
-- (false) the search functions keep generic plans made once per session and run the walks whose
-- plans depend on that; on a Citus coordinator (true, set by the Citus tier) every statement is
-- planned at each call with the caller's tenant, so that Citus routes it to that tenant's shards
-- (sql/idempotent/README.md, "Plans" and "Citus"). Inlined by the planner (immutable, no SET
-- clause, no name to resolve), so a call is a constant in the plans of its callers.
create or replace function pgrag.distributed()
returns boolean
language sql
immutable
parallel safe
security invoker
as $$
    select false
$$;
comment on function pgrag.distributed() is
'The execution mode of the search functions: false on one server (generic plans kept per session, static walks), true on a Citus coordinator (every statement planned per call and routed by tenant). Set at install: the Citus tier replaces this function.';

-- What a search may return, written once: a chunk of a ready document that passes the five
-- filters. Every search statement (both arms, windows, the public API) joins pgrag.chunks c to
-- pgrag.documents d on (tenant_id, document_id) and calls this in its WHERE clause with their
-- columns; the planner inlines it, so the filters reach the scans (index conditions, filters in
-- the documents scan) as if written there; tests/test_retrieval.py checks the plans. Inlining
-- needs language sql, one expression, not strict, no security definer and no SET clause: so this
-- is the one pgrag function that does not pin search_path. Every name and operator in its body
-- is schema-qualified instead (pgspot checks it; the Makefile exempts this function from PS005).
-- The tables are named in each statement, not read inside a set-returning function (as the
-- earlier pgrag.ready_chunks did): a Citus coordinator decides whether a statement is
-- distributed before PostgreSQL inlines functions, and refuses a statement whose distributed
-- tables only appear once a function is inlined.
create or replace function pgrag.searchable(
    status text,
    document_id bigint,
    document_metadata jsonb,
    chunk_metadata jsonb,
    source_type text,
    created_at timestamptz,
    document_ids bigint[] default null,
    metadata_filter jsonb default null,
    source_types text[] default null,
    created_after timestamptz default null,
    created_before timestamptz default null
)
returns boolean
language sql
immutable
parallel safe
security invoker
as $$
    select searchable.status operator(pg_catalog.=) 'ready'
       and (searchable.document_ids is null
            or searchable.document_id operator(pg_catalog.=) any (searchable.document_ids))
       and (searchable.metadata_filter is null
            or (searchable.document_metadata operator(pg_catalog.||) searchable.chunk_metadata)
               operator(pg_catalog.@>) searchable.metadata_filter)
       and (searchable.source_types is null
            or searchable.source_type operator(pg_catalog.=) any (searchable.source_types))
       and (searchable.created_after is null
            or searchable.created_at operator(pg_catalog.>=) searchable.created_after)
       and (searchable.created_before is null
            or searchable.created_at operator(pg_catalog.<) searchable.created_before)
$$;
comment on function pgrag.searchable(text, bigint, jsonb, jsonb, text, timestamptz, bigint[], jsonb, text[], timestamptz, timestamptz) is
'Whether a search may return a chunk, from its document''s status, document_id, metadata, source_type and created_at and its own metadata: the document is ready and the filters pass (document_ids; metadata_filter: jsonb containment over document || chunk metadata; source_types; created_after/before: the document''s created_at). Null filters pass everything. Inlined by the planner into the calling query (no SET clause, every name qualified), so the filters reach the scans. Reads no table.';

-- Earlier versions read the chunks of ready documents through a set-returning function, which a
-- Citus coordinator cannot plan (above); pgrag.searchable replaces it.
drop function if exists pgrag.ready_chunks(bigint[], jsonb, text[], timestamptz, timestamptz, boolean);

create or replace function pgrag.tenant_chunk_count(tenant text)
returns bigint
language sql
stable
security invoker
parallel safe
set search_path = pg_catalog, pg_temp
as $$
    select coalesce(pg_catalog.sum(s.chunk_count), 0)::bigint
    from pgrag.corpus_stats as s
    where s.tenant_id = tenant
$$;
comment on function pgrag.tenant_chunk_count(text) is
'Number of chunks of a tenant, from the sharded corpus statistics (used to pick exact or HNSW search).';
