-- Candidate generation: the rows a search may return, the vector arm and the keyword arm.
-- Contract. Provides: pgrag.searchable (ready documents and the filters, for every search);
--   pgrag.vector_candidates and pgrag.keyword_candidates, each returning (tenant_id, chunk_id,
--   distance or score) best first with every filter applied inside the arm; and
--   pgrag.tenant_chunk_count. Relies on: argument checks and pgrag.current_tenant_id
--   (001-helpers.sql), pgrag.keyword_query (005-text-search.sql), pgrag.tenant_index_name
--   (006-vector-isolation.sql), the BM25 tables (002-bm25-maintenance.sql keeps them). Callers:
--   the fusion (008-fusion.sql) and the public API (009-api.sql), as the calling role.

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
create or replace function pgrag.vector_candidates(
    query_embedding @extschema:vector@.vector,
    match_count integer default 10,
    ef_search integer default null,
    document_ids bigint[] default null,
    metadata_filter jsonb default null,
    source_types text[] default null,
    created_after timestamptz default null,
    created_before timestamptz default null
)
returns table (tenant_id text, chunk_id bigint, distance double precision)
language plpgsql
stable
rows 10
security invoker
set search_path = pg_catalog, pg_temp
set plan_cache_mode = force_custom_plan
as $$
#variable_conflict use_column
declare
    v_tenant text := pgrag.current_tenant_id();
    v_k integer := coalesce(pgrag.check_argument('match_count', match_count, 0, 2000, true), 10);
    v_exact_max bigint := coalesce(
        nullif(pg_catalog.current_setting('pgrag.exact_search_max_rows', true), '')::bigint, 2000);
    v_filtered boolean := metadata_filter is not null or source_types is not null
        or created_after is not null or created_before is not null;
    v_tenants text[];
    v_ids bigint[];
    v_dists double precision[];
    v_exact boolean;
    v_old_ef text := pg_catalog.current_setting('hnsw.ef_search', true);
    v_old_iter text := pg_catalog.current_setting('hnsw.iterative_scan', true);
    v_old_sort text := pg_catalog.current_setting('enable_sort');
    v_share double precision;
    v_public boolean := false;
    v_own_index boolean := false;
    v_scoped boolean;
    v_sql text;
begin
    perform pgrag.check_argument('ef_search', ef_search, 1, 1000, true);
    perform pgrag.check_query_embedding('query_embedding', query_embedding);
    perform pgrag.check_filters(document_ids, source_types, metadata_filter);
    if query_embedding is null or v_k = 0 then
        return;
    end if;
    -- anon (no tenant, sees public rows only) searches public chunks alone: the partial HNSW
    -- index of public chunks, or an exact scan of them. Walking the graph of every chunk and
    -- letting RLS drop private rows afterwards would make anon's results (how many rows come
    -- back near a private cluster) depend on private data.
    if v_tenant is null and pg_catalog.to_regrole('anon') is not null then
        v_public := case when pg_catalog.pg_has_role('anon', 'USAGE')
                         then not exists (select 1 from pg_catalog.pg_roles as r
                                          where r.rolname = current_user
                                            and (r.rolsuper or r.rolbypassrls))
                         else false end;
    end if;
    -- Exact search when the rows the caller may see are few: a document-id filter, or a tenant
    -- small enough that scanning it costs less than an HNSW walk that filters most rows away.
    v_exact := document_ids is not null
        or (v_tenant is not null and pgrag.tenant_chunk_count(v_tenant) <= v_exact_max);
    -- A tenant isolated by pgrag.isolate_tenant has an HNSW graph of its own chunks alone.
    v_own_index := not v_exact and v_tenant is not null
        and pg_catalog.to_regclass(pg_catalog.format('pgrag.%I', pgrag.tenant_index_name(v_tenant))) is not null;
    v_scoped := v_tenant is not null or v_filtered or v_public;

    if not v_exact then
        -- Iterative index scans keep walking the graph until match_count rows pass the tenant
        -- and filter conditions (pgvector 0.8); the relaxed order is re-sorted below.
        perform pg_catalog.set_config('hnsw.iterative_scan',
            case when v_scoped then 'relaxed_order' else 'off' end, true);
        -- Without sorts the HNSW index scan is the only ordered plan: the planner would
        -- otherwise prefer the tenant btree plus a sort of every row of a big tenant (it does not
        -- price reading each out-of-line embedding), which the exact path already covers.
        perform pg_catalog.set_config('enable_sort', 'off', true);
        -- A wider candidate list when rows are filtered after the index walk (800: recall@10
        -- 0.971 for a tenant with 10 % of 100k rows, against 0.928 with 400; see docs).
        -- The tenant's share of all chunks (planner statistics): a tenant holding most rows
        -- loses few to the filter and needs no wider list.
        -- An isolated tenant's own graph, like the public one, holds no other rows.
        if v_own_index or v_public then
            v_share := 1;
        elsif v_tenant is not null then
            select pgrag.tenant_chunk_count(v_tenant) / greatest(c.reltuples, 1)
            into v_share
            from pg_catalog.pg_class as c
            where c.oid = 'pgrag.chunks'::regclass;
        end if;
        perform pg_catalog.set_config('hnsw.ef_search',
            least(greatest(coalesce(vector_candidates.ef_search,
                                    case when v_filtered or (v_tenant is not null and coalesce(v_share, 0) < 0.25)
                                         then greatest(nullif(v_old_ef, '')::integer, 800)
                                         when v_tenant is not null or v_public
                                         then greatest(nullif(v_old_ef, '')::integer, 100)
                                         else nullif(v_old_ef, '')::integer end,
                                    40), v_k), 1000)::text, true);
        -- Under a filter the relaxed order is only roughly by distance: take 4 x match_count
        -- rows (at least 40), re-sort them by exact distance, keep match_count.
        -- The tenant (or is_public) condition matches the predicate of the partial index to
        -- walk: the tenant's own (as a literal, so the planner can prove it), the public one.
        v_sql := pg_catalog.format($q$
        select (pg_catalog.array_agg(h.tenant_id order by h.distance, h.chunk_id))[1 : $1],
               (pg_catalog.array_agg(h.chunk_id order by h.distance, h.chunk_id))[1 : $1],
               (pg_catalog.array_agg(h.distance order by h.distance, h.chunk_id))[1 : $1]
        from (
            select c.tenant_id, c.id as chunk_id,
                   c.embedding operator(@extschema:vector@.<=>) $2 as distance
            from pgrag.chunks as c
            join pgrag.documents as d on d.tenant_id = c.tenant_id and d.id = c.document_id
            where c.embedding is not null
              and pgrag.searchable(d.status, c.document_id, d.metadata, c.metadata,
                                   d.source_type, d.created_at, metadata_filter => $3,
                                   source_types => $4, created_after => $5, created_before => $6)
              and %s
            order by c.embedding operator(@extschema:vector@.<=>) $2
            limit $7
        ) as h$q$,
            case when v_tenant is not null
                 then pg_catalog.format('c.tenant_id operator(pg_catalog.=) %L', v_tenant)
                 when v_public then 'c.is_public'
                 else 'true' end);
        execute v_sql
        into v_tenants, v_ids, v_dists
        using v_k, query_embedding, metadata_filter, source_types, created_after,
              created_before, case when v_scoped then greatest(4 * v_k, 40) else v_k end;
        perform pg_catalog.set_config('enable_sort', v_old_sort, true);
        perform pg_catalog.set_config('hnsw.ef_search', coalesce(v_old_ef, '40'), true);
        perform pg_catalog.set_config('hnsw.iterative_scan', coalesce(v_old_iter, 'off'), true);
        -- Never fewer than match_count rows when that many exist: a filter too selective for
        -- the scan budget (hnsw.max_scan_tuples) falls back to the exact path.
        v_exact := coalesce(pg_catalog.cardinality(v_ids), 0) < v_k and v_scoped;
    end if;

    if v_exact then
        select pg_catalog.array_agg(h.tenant_id order by h.distance, h.chunk_id),
               pg_catalog.array_agg(h.chunk_id order by h.distance, h.chunk_id),
               pg_catalog.array_agg(h.distance order by h.distance, h.chunk_id)
        into v_tenants, v_ids, v_dists
        from (
            -- A subquery fenced by OFFSET 0 (not a materialized CTE): the distances stream into a
            -- bounded top-N sort, so no visible set, however large, is stored or spilled to temp
            -- files, and the fence keeps the planner from turning the exact scan into an HNSW walk.
            select v.tenant_id, v.chunk_id, v.distance
            from (
                select c.tenant_id, c.id as chunk_id,
                       c.embedding operator(@extschema:vector@.<=>) query_embedding as distance
                from pgrag.chunks as c
                join pgrag.documents as d on d.tenant_id = c.tenant_id and d.id = c.document_id
                where c.embedding is not null
                  and pgrag.searchable(d.status, c.document_id, d.metadata, c.metadata,
                                       d.source_type, d.created_at, document_ids, metadata_filter,
                                       source_types, created_after, created_before)
                  and (v_tenant is null or c.tenant_id = v_tenant)
                  and (not v_public or (c.is_public and d.is_public))
                offset 0
            ) as v
            order by v.distance, v.chunk_id
            limit v_k
        ) as h;
    end if;

    return query
    select u.t, u.id, u.dist
    from rows from (pg_catalog.unnest(v_tenants), pg_catalog.unnest(v_ids), pg_catalog.unnest(v_dists))
         with ordinality as u(t, id, dist, ord)
    order by u.ord;
end
$$;
comment on function pgrag.vector_candidates(@extschema:vector@.vector, integer, integer, bigint[], jsonb, text[], timestamptz, timestamptz) is
'Vector arm: (tenant_id, chunk_id, cosine distance) of the nearest ready chunks, filters applied inside the search. HNSW with iterative scans, or an exact scan for small visible sets (pgrag.exact_search_max_rows, default 2000) and as a fallback when the index walk returns too few rows. The graph walked holds only rows the caller may see where one exists: anon walks the public chunks'' index (chunks.is_public), a tenant isolated by pgrag.isolate_tenant its own; other tenants above the threshold walk the shared graph.';

create or replace function pgrag.keyword_candidates(
    query_text text,
    match_count integer default 10,
    language text default null,
    k1 double precision default 1.5,
    b double precision default 0.75,
    document_ids bigint[] default null,
    metadata_filter jsonb default null,
    source_types text[] default null,
    created_after timestamptz default null,
    created_before timestamptz default null
)
returns table (tenant_id text, chunk_id bigint, score double precision)
language plpgsql
stable
rows 10
security invoker
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    v_tenant text := pgrag.current_tenant_id();
    -- Argument limits (docs/security.md): an arm fetches at most 2,000 rows.
    v_k integer := coalesce(pgrag.check_argument('match_count', match_count, 0, 2000, true), 10);
    v_k1 double precision := coalesce(pgrag.check_argument('k1', k1, 0, 10), 1.5);
    v_b double precision := coalesce(pgrag.check_argument('b', b, 0, 1), 0.75);
    v_config regconfig := pgrag.text_search_config('language', keyword_candidates.language);
    v_n double precision;
    v_total double precision;
    v_avgdl double precision;
    v_q record;
    v_tenants text[];
    v_lex text[];
    v_idf double precision[];
    v_pos tsquery;
    v_neg tsquery;
    v_tids text[];
    v_ids bigint[];
    v_scores double precision[];
    v_limit integer;
    v_more boolean;
    v_batch integer;
    v_off integer := 0;
    v_found integer := 0;
    v_rows integer;
begin
    perform pgrag.check_length('query_text', pg_catalog.length(query_text), 10000, 'characters');
    perform pgrag.check_filters(document_ids, source_types, metadata_filter);
    if coalesce(query_text, '') = '' or v_k = 0 then
        return;
    end if;
    -- Text-search configuration: the one asked for (v_config), else the tenant's most common
    -- chunk language.
    -- The tenants searched: the caller's, or every tenant the caller may see (RLS applies to
    -- corpus_stats too); an array keeps one plan shape for both, with index conditions.
    if v_tenant is not null then
        v_tenants := array[v_tenant];
    else
        select pg_catalog.array_agg(distinct s.tenant_id) into v_tenants from pgrag.corpus_stats as s;
    end if;
    select pg_catalog.sum(s.chunk_count), pg_catalog.sum(s.token_count)
    into v_n, v_total
    from pgrag.corpus_stats as s
    where s.tenant_id = any (v_tenants);
    if coalesce(v_n, 0) <= 0 then
        return;
    end if;
    if v_config is null then
        select s.language::regconfig into v_config
        from pgrag.corpus_stats as s
        where s.tenant_id = any (v_tenants)
        group by s.language
        order by pg_catalog.sum(s.chunk_count) desc, s.language
        limit 1;
    end if;
    v_avgdl := greatest(v_total / v_n, 1e-9);
    select * into v_q from pgrag.keyword_query(query_text, coalesce(v_config, 'english'::regconfig));
    if pg_catalog.cardinality(v_q.lexemes) = 0 then
        return;
    end if;

    -- Document frequency of each query lexeme: the sum of its sharded counters.
    with d as materialized (
        select l.lexeme,
               (select pg_catalog.sum(x.df) from pgrag.bm25_lexicon as x
                where x.tenant_id = any (v_tenants) and x.lexeme = l.lexeme)::double precision as df
        from pg_catalog.unnest(v_q.lexemes) as l(lexeme)
    )
    select pg_catalog.array_agg(d.lexeme), pg_catalog.array_agg(pg_catalog.ln(1 + (v_n - d.df + 0.5) / (d.df + 0.5)))
    into v_lex, v_idf
    from d
    where d.df > 0;
    if v_lex is null then
        return;
    end if;
    -- Single-word clauses are satisfied by every chunk holding a scored lexeme: the tsquery
    -- check is needed only for phrases (<->, <N>) and exclusions.
    if v_q.positive::text operator(pg_catalog.~) '<[-0-9]' then
        v_pos := v_q.positive;
    end if;
    v_neg := v_q.negative;

    v_limit := greatest(4 * v_k, 200);
    loop
        -- Okapi BM25 of every chunk holding a query lexeme (one index-only range scan per
        -- lexeme), best v_limit first (then all of them if the walk below needs more).
        select pg_catalog.array_agg(s.tenant_id order by s.score desc, s.chunk_id),
               pg_catalog.array_agg(s.chunk_id order by s.score desc, s.chunk_id),
               pg_catalog.array_agg(s.score order by s.score desc, s.chunk_id)
        into v_tids, v_ids, v_scores
        from (
            select p.tenant_id, p.chunk_id,
                   pg_catalog.sum(t.idf * p.tf / (p.tf + v_k1 * (1 - v_b + v_b * p.doc_len / v_avgdl))) as score
            from rows from (pg_catalog.unnest(v_lex), pg_catalog.unnest(v_idf)) as t(lexeme, idf)
            join pgrag.bm25_postings as p on p.tenant_id = any (v_tenants) and p.lexeme = t.lexeme
            group by p.tenant_id, p.chunk_id
            order by 3 desc, p.chunk_id
            limit v_limit + 1
        ) as s;
        v_more := coalesce(pg_catalog.cardinality(v_ids), 0) > v_limit;
        -- Walk the ranking in growing batches until match_count chunks pass the checks:
        -- document ready, filters, phrases and exclusions (filters inside the arm).
        v_batch := greatest(2 * v_k, 50);
        while v_found < v_k and v_off < least(coalesce(pg_catalog.cardinality(v_ids), 0), v_limit) loop
            return query
            select u.t, u.id, u.s
            from rows from (
                pg_catalog.unnest(v_tids[v_off + 1 : least(v_off + v_batch, v_limit)]),
                pg_catalog.unnest(v_ids[v_off + 1 : least(v_off + v_batch, v_limit)]),
                pg_catalog.unnest(v_scores[v_off + 1 : least(v_off + v_batch, v_limit)])
            ) with ordinality as u(t, id, s, ord)
            join pgrag.chunks as c on c.tenant_id = u.t and c.id = u.id
            join pgrag.documents as d on d.tenant_id = c.tenant_id and d.id = c.document_id
            where pgrag.searchable(d.status, c.document_id, d.metadata, c.metadata, d.source_type,
                                   d.created_at, document_ids, metadata_filter, source_types,
                                   created_after, created_before)
              -- Every candidate is the caller's tenant's when there is one: said of c as well,
              -- so that a sharded cluster (Citus) sends this to that tenant's shards alone.
              and (v_tenant is null or c.tenant_id = v_tenant)
              and (v_neg is null or not c.fts operator(pg_catalog.@@) v_neg)
              and (v_pos is null or c.fts operator(pg_catalog.@@) v_pos)
            order by u.ord
            limit v_k - v_found;
            get diagnostics v_rows = row_count;
            v_found := v_found + v_rows;
            v_off := least(v_off + v_batch, v_limit);
            v_batch := v_batch * 4;
        end loop;
        exit when v_found >= v_k or not v_more;
        v_limit := 2147483646;
    end loop;
end
$$;

comment on function pgrag.keyword_candidates(text, integer, text, double precision, double precision, bigint[], jsonb, text[], timestamptz, timestamptz) is
'Keyword arm: (tenant_id, chunk_id, Okapi BM25 score) best first. Lucene IDF ln(1 + (N - df + 0.5)/(df + 0.5)), term part tf/(tf + k1(1 - b + b dl/avgdl)), N and avgdl from pgrag.corpus_stats and df from pgrag.bm25_postings of the caller''s tenant.';
