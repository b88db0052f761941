-- Facets: how many matching documents each value of a field has, for a search page's filters.
-- Contract. Provides: public.search_facets, documented in docs/sql-api.md ("Facets"); its name,
--   parameter names and result columns are stable across versions. Relies on: the argument
--   checks and pgrag.current_tenant_id (001-helpers.sql), pgrag.keyword_query
--   (005-text-search.sql), pgrag.searchable (020-search-rows.sql), pgrag.bm25_corpus
--   (024-bm25-evaluation.sql). Callers: anon, authenticated and service_role
--   (910-function-privileges.sql); it runs as its caller, so row-level security applies, and
--   scopes rows to pgrag.current_tenant_id() when a tenant claim is present.
--
-- Matching documents: the documents keyword_search can return for query_text under the same
-- filters, i.e. ready documents with at least one chunk that passes the filters (pgrag.searchable),
-- holds a BM25 posting of one of the query's lexemes and satisfies its phrases and exclusions
-- (the keyword arm's test, 025-keyword-arm.sql); for a blank query_text, every document with a
-- chunk that passes the filters (a search page before a query). A document counts under a value
-- when one of those chunks has it, so each row's filter (the column filter, the arguments to
-- add) returns exactly its count of documents. The vector arm ranks every chunk (nothing a
-- vector "matches" has an edge), so facets count keyword matches only.
--
-- Work: one pass over the matching chunks (those of the query's postings, or every chunk of the
-- tenant that passes the filters for a blank query), hashed per document and value: rows that
-- exist, as the exact BM25 scan reads; at most 10 metadata keys and 100 values per facet.

create or replace function public.search_facets(
    query_text text default null,
    metadata_keys text[] default null,
    max_values integer default 20,
    language text default null,
    document_ids bigint[] default null,
    metadata_filter jsonb default null,
    source_types text[] default null,
    created_after timestamptz default null,
    created_before timestamptz default null
)
returns table (facet text, value text, documents bigint, filter jsonb)
language plpgsql
stable
security invoker
set search_path = pg_catalog, pg_temp
-- Planned at every call: the query's arrays and the blank-query branch are then constants.
set plan_cache_mode = force_custom_plan
as $$
#variable_conflict use_column
declare
    v_tenant text := pgrag.current_tenant_id();
    -- Argument limits (docs/security.md): SQLSTATE 22023 before any work.
    v_max integer := coalesce(pgrag.check_argument('max_values', max_values, 1, 100, true), 20);
    v_config regconfig := pgrag.text_search_config('language', search_facets.language);
    v_browse boolean := coalesce(pg_catalog.btrim(query_text), '') = '';
    v_corpus record;
    v_query record;
    v_tenants text[];
    v_lexemes text[];         -- null: a blank query (every document passing the filters)
    v_phrases tsquery;
    v_exclusions tsquery;
begin
    perform pgrag.check_length('query_text', pg_catalog.length(query_text), 10000, 'characters'),
            pgrag.check_length('metadata_keys', pg_catalog.cardinality(metadata_keys), 10),
            pgrag.check_filters(document_ids, source_types, metadata_filter);
    if exists (select from pg_catalog.unnest(metadata_keys) as k(key)
               where k.key is null or pg_catalog.length(k.key) not between 1 and 200) then
        raise exception 'metadata_keys must hold keys of 1 to 200 characters'
            using errcode = '22023';
    end if;
    if not v_browse then
        v_corpus := pgrag.bm25_corpus(v_tenant, v_config);
        if coalesce(v_corpus.chunk_count, 0) <= 0 then
            return;
        end if;
        v_query := pgrag.keyword_query(query_text, v_corpus.search_config);
        if pg_catalog.cardinality(v_query.lexemes) = 0 then
            return;
        end if;
        v_tenants := v_corpus.tenants;
        v_lexemes := v_query.lexemes;
        v_exclusions := v_query.negative;
        v_phrases := pgrag.keyword_phrases(query_text, v_query.positive, v_corpus.search_config);
    end if;
    return query
    select f.facet, f.value, f.documents, f.filter
    from pgrag.facet_counts(v_tenant, v_tenants, v_lexemes, v_phrases, v_exclusions,
                            metadata_keys, v_max, document_ids, metadata_filter, source_types,
                            created_after, created_before) as f;
end
$$;
comment on function public.search_facets(text, text[], integer, text, bigint[], jsonb, text[], timestamptz, timestamptz) is
'Facets of a search: for the documents matching query_text (those keyword_search can return under the same filters; blank query_text: every document with a chunk passing the filters), rows (facet, value, documents, filter): facet source_type, month (of created_at, UTC, YYYY-MM) and metadata.<key> for each of metadata_keys (document || chunk metadata; strings, numbers and booleans, and each element of an array), documents = matching documents with that value, filter = the arguments that narrow a search to it (source_types, created_after/before or metadata_filter), which return exactly that many documents. Per facet the max_values values with most documents (months: the latest). Tenant from request.jwt.claims; RLS applies. Limits: query_text at most 10,000 characters and 64 distinct terms, metadata_keys at most 10 keys of 1-200 characters, max_values 1-100 (more counts as 100), language and filters as keyword_search; else SQLSTATE 22023.';

create or replace function pgrag.facet_counts(
    tenant text,
    tenants text[],
    lexemes text[],
    phrases tsquery,
    exclusions tsquery,
    metadata_keys text[],
    max_values integer,
    document_ids bigint[],
    metadata_filter jsonb,
    source_types text[],
    created_after timestamptz,
    created_before timestamptz
)
returns table (facet text, value text, documents bigint, filter jsonb)
language plpgsql
stable
security invoker
set search_path = pg_catalog, pg_temp
set plan_cache_mode = force_custom_plan
as $$
#variable_conflict use_column
begin
    -- Arguments (an API role may call this step directly): as public.search_facets checks them.
    if not coalesce(max_values between 1 and 100, false)
       or pg_catalog.cardinality(metadata_keys) > 10 or pg_catalog.cardinality(lexemes) > 64
       or exists (select from pg_catalog.unnest(metadata_keys) as k(key)
                  where k.key is null or pg_catalog.length(k.key) not between 1 and 200) then
        raise exception 'max_values must be 1 to 100, metadata_keys at most 10 keys of 1 to 200 characters and lexemes at most 64 (got %, %, %)',
            max_values, pg_catalog.cardinality(metadata_keys), pg_catalog.cardinality(lexemes)
            using errcode = '22023';
    end if;
    perform pgrag.check_filters(document_ids, source_types, metadata_filter);
    return query
    with /* pgrag:facet_counts */ m as (
        -- The matching chunks' documents, each once per distinct chunk metadata (only when
        -- keys are counted): the values below are computed per document, not per chunk.
        select c.tenant_id, c.document_id,
               case when metadata_keys is not null then c.metadata end as chunk_metadata
        from pgrag.chunks as c
        join pgrag.documents as d on d.tenant_id = c.tenant_id and d.id = c.document_id
        where (tenant is null or c.tenant_id = tenant)
          and pgrag.searchable(d.status, c.document_id, d.metadata, c.metadata, d.source_type,
                               d.created_at, document_ids, metadata_filter, source_types,
                               created_after, created_before)
          and (lexemes is null
               or exists (select from pgrag.bm25_postings as p
                          where p.tenant_id = c.tenant_id and p.tenant_id = any (tenants)
                            and p.lexeme = any (lexemes) and p.chunk_id = c.id))
          and (phrases is null or c.fts operator(pg_catalog.@@) phrases)
          and (exclusions is null or not c.fts operator(pg_catalog.@@) exclusions)
        group by c.tenant_id, c.document_id, 3
    ),
    v as (
        -- One row per document and value (a value as the search arguments take it).
        select x.facet, x.val
        from m
        join pgrag.documents as d on d.tenant_id = m.tenant_id and d.id = m.document_id
                                 and (tenant is null or d.tenant_id = tenant)
        cross join lateral (
            select 'source_type' as facet, pg_catalog.to_jsonb(d.source_type) as val
            union all
            select 'month', pg_catalog.to_jsonb(pg_catalog.to_char(d.created_at at time zone 'UTC', 'YYYY-MM'))
            union all
            select 'metadata.' operator(pg_catalog.||) k.key,
                   case when pg_catalog.jsonb_typeof(j.v) = 'array' then pg_catalog.jsonb_build_array(e.v) else j.v end
            from pg_catalog.unnest(metadata_keys) as k(key)
            cross join lateral (
                select (d.metadata operator(pg_catalog.||) coalesce(m.chunk_metadata, '{}'))
                       operator(pg_catalog.->) k.key) as j(v)
            cross join lateral pg_catalog.jsonb_array_elements(
                case when pg_catalog.jsonb_typeof(j.v) = 'array' then j.v else pg_catalog.jsonb_build_array(j.v) end) as e(v)
            where pg_catalog.jsonb_typeof(e.v) in ('string', 'number', 'boolean')
        ) as x
        group by m.tenant_id, m.document_id, x.facet, x.val
    ),
    n as (
        select v.facet, v.val, pg_catalog.count(*) as documents,
               pg_catalog.row_number() over (
                   partition by v.facet
                   order by case when v.facet = 'month' then 0 else pg_catalog.count(*) end desc,
                            case when v.facet = 'month' then v.val #>> '{}' end desc,
                            v.val #>> '{}', v.val::text) as ord
        from v
        group by v.facet, v.val
    )
    select n.facet,
           case when pg_catalog.jsonb_typeof(n.val) = 'array' then n.val operator(pg_catalog.->>) 0
                else n.val #>> '{}' end,
           n.documents,
           case n.facet
               when 'source_type' then pg_catalog.jsonb_build_object('source_types', pg_catalog.jsonb_build_array(n.val))
               -- (month arithmetic on a timestamp: UTC whatever the session's time zone)
               when 'month' then pg_catalog.jsonb_build_object(
                   'created_after', ((n.val #>> '{}') operator(pg_catalog.||) '-01')::timestamp
                                    at time zone 'UTC',
                   'created_before', (((n.val #>> '{}') operator(pg_catalog.||) '-01')::timestamp
                                      operator(pg_catalog.+) interval '1 month') at time zone 'UTC')
               else pg_catalog.jsonb_build_object('metadata_filter',
                        pg_catalog.jsonb_build_object(pg_catalog.substr(n.facet, 10), n.val))
           end
    from n
    where n.ord <= max_values
    order by case n.facet when 'source_type' then 0 when 'month' then 1 else 2 end, n.facet, n.ord;
end
$$;
comment on function pgrag.facet_counts(text, text[], text[], tsquery, tsquery, text[], integer, bigint[], jsonb, text[], timestamptz, timestamptz) is
'The rows of public.search_facets: over the chunks of tenant (null: every tenant the caller sees) that pass pgrag.searchable with the filters and, unless lexemes is null, hold a BM25 posting of one of lexemes (in tenants) and satisfy phrases and not exclusions, the documents per facet value, the max_values values with most documents per facet (months: the latest), with the filter that selects each.';
