-- The vector arm's exact scans: every distance the caller may see, the statement written once.
-- Contract. Provides: pgrag.vector_exact_sql (the statement, as text) and the scans made from it,
--   pgrag.vector_exact_tenant and pgrag.vector_exact. Relies on: pgrag.searchable
--   (020-search-rows.sql) and the argument checks (001-helpers.sql). Callers:
--   pgrag.vector_candidates (022-vector-arm.sql), as the calling role; it calls them at run time,
--   so this file may follow it. How each is planned: sql/idempotent/README.md, "The vector arm".

-- The exact scan: every distance the caller may see, the nearest match_count kept. A subquery
-- fenced by OFFSET 0 (not a materialized CTE): the distances stream into a bounded top-N sort,
-- so no visible set, however large, is stored or spilled to temp files, and the fence keeps the
-- planner from turning the scan into an HNSW walk. document_ids is the SQL expression passed
-- to pgrag.searchable for it, rows the condition on the tenant's rows.
create or replace function pgrag.vector_exact_sql(marker text, document_ids text, rows_condition text)
returns text
language sql
immutable
security invoker
parallel safe
set search_path = pg_catalog, pg_temp
as $$
    select pg_catalog.format($q$
        select /* pgrag:%1$s */ v.tenant_id, v.chunk_id, v.distance
        from (
            select c.tenant_id, c.id as chunk_id,
                   c.embedding operator(@extschema:vector@.<=>) query_embedding as distance
            from pgrag.chunks as c
            join pgrag.documents as d on d.tenant_id = c.tenant_id and d.id = c.document_id
            where c.embedding is not null
              and pgrag.searchable(d.status, c.document_id, d.metadata, c.metadata,
                                   d.source_type, d.created_at, %2$s, metadata_filter,
                                   source_types, created_after, created_before)
              and %3$s
            offset 0
        ) as v
        order by v.distance, v.chunk_id
        limit match_count$q$,
        marker, document_ids, rows_condition)
$$;
comment on function pgrag.vector_exact_sql(text, text, text) is
'The statement of the vector arm''s exact scan (marker /* pgrag:<marker> */): the nearest match_count chunks the filters and rows_condition let through, every distance computed; document_ids: the expression of the document-id filter.';

-- The two exact scans (README, "The vector arm"): a tenant's on one server without a document-id
-- filter, in a plan kept for the session made with sequential scans off; the other (a
-- document-id filter, a caller without a tenant, Citus) planned at each call with the values.
do $$
declare
    v_exact record;
begin
    for v_exact in
        select * from (values
            ('vector_exact_tenant', 'set enable_seqscan = off set plan_cache_mode = force_generic_plan',
             pgrag.vector_exact_sql('exact_tenant', 'null',
                                    'c.tenant_id = tenant and d.tenant_id = tenant')),
            ('vector_exact', 'set plan_cache_mode = force_custom_plan',
             pgrag.vector_exact_sql('exact', 'document_ids',
                                    '(tenant is null or c.tenant_id = tenant) '
                                    'and (not public_only or (c.is_public and d.is_public))'))
        ) as e(name, settings, statement)
    loop
        execute pg_catalog.format($f$
            create or replace function pgrag.%I(
                query_embedding @extschema:vector@.vector,
                match_count integer,
                tenant text,
                public_only boolean,
                document_ids bigint[],
                metadata_filter jsonb,
                source_types text[],
                created_after timestamptz,
                created_before timestamptz)
            returns table (tenant_id text, chunk_id bigint, distance double precision)
            language plpgsql
            stable
            rows 10
            security invoker
            set search_path = pg_catalog, pg_temp
            %s
            as %L$f$,
            v_exact.name, v_exact.settings,
            pg_catalog.concat_ws(E'\n', '#variable_conflict use_column', 'begin',
                'perform pgrag.check_query_embedding(''query_embedding'', query_embedding);',
                'if not coalesce(match_count between 0 and 2000, false) then',
                '    raise exception ''match_count must be 0 to 2000 (got %)'', match_count using errcode = ''22023'';',
                'end if;',
                'if document_ids is not null or source_types is not null or metadata_filter is not null then',
                '    perform pgrag.check_filters(document_ids, source_types, metadata_filter);',
                'end if;',
                'return query ' operator(pg_catalog.||) v_exact.statement operator(pg_catalog.||) ';',
                'end'));
    end loop;
end
$$;
comment on function pgrag.vector_exact_tenant(@extschema:vector@.vector, integer, text, boolean, bigint[], jsonb, text[], timestamptz, timestamptz) is
'Exact scan of one tenant''s chunks (pgrag.vector_exact_sql, marker exact_tenant; public_only and document_ids are not read): the nearest match_count, filters applied, in a plan kept for the session made with sequential scans off.';
comment on function pgrag.vector_exact(@extschema:vector@.vector, integer, text, boolean, bigint[], jsonb, text[], timestamptz, timestamptz) is
'Exact scan of the chunks the caller may see (pgrag.vector_exact_sql, marker exact): the tenant''s (every tenant''s when null; public ones alone when public_only), filters and document ids applied; the nearest match_count, planned at each call with the values.';
