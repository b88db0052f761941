-- Windows: each hit expanded to its neighbouring chunks, overlapping windows merged.
-- Contract. Provides: pgrag.windows (hits expanded to neighbouring chunks, merged, with a
--   decayed score) and its lookup of the hits' tenants for a caller without one,
--   pgrag.window_hits_unfenced. Relies on: pgrag.searchable (020-search-rows.sql, called at
--   run time: both functions are PL/pgSQL), the argument checks and pgrag.current_tenant_id
--   (001-helpers.sql). Callers: pgrag.fused_candidates' users, the public API
--   (027-api.sql: hybrid_search, chunk_windows) and the context builder (028-context.sql), as
--   the calling role. (Numbered before 027-api.sql, whose SQL-language chunk_windows needs
--   pgrag.windows to exist when it is created.)

-- The hits' tenants for a caller without one: pgrag.windows' lookup, by chunk id among every
-- tenant's chunks the caller may see, planned at every call so that the condition left out for
-- this caller costs nothing (and in the form Citus runs without a tenant: a join).
create or replace function pgrag.window_hits_unfenced(
    chunk_ids bigint[],
    chunk_scores double precision[],
    out tenant_ids text[],
    out hit_ids bigint[],
    out scores double precision[]
)
language plpgsql
stable
security invoker
set search_path = pg_catalog, pg_temp
set plan_cache_mode = force_custom_plan
as $$
begin
    -- Argument limits (docs/security.md): those of pgrag.windows' hit_ids and scores (an API
    -- role may call it directly); inline tests, a checker called only to raise.
    if pg_catalog.cardinality(chunk_ids) > 2000 or pg_catalog.cardinality(chunk_scores) > 2000 then
        perform pgrag.check_length('chunk_ids', pg_catalog.cardinality(chunk_ids), 2000),
                pgrag.check_length('chunk_scores', pg_catalog.cardinality(chunk_scores), 2000);
    end if;
    if not coalesce(-1e6 <= all (chunk_scores) and 1e6 >= all (chunk_scores), true) then
        perform pgrag.check_argument('chunk_scores', u.s, -1e6, 1e6)
        from pg_catalog.unnest(chunk_scores) as u(s);
    end if;
    select /* pgrag:window_hits_unfenced */ pg_catalog.array_agg(c.tenant_id order by u.ord),
           pg_catalog.array_agg(u.id order by u.ord),
           pg_catalog.array_agg(chunk_scores[u.ord] order by u.ord)
    into tenant_ids, hit_ids, scores
    from pg_catalog.unnest(chunk_ids) with ordinality as u(id, ord)
    join pgrag.chunks as c on c.id = u.id;
end
$$;
comment on function pgrag.window_hits_unfenced(bigint[], double precision[]) is
'The hits of pgrag.windows given by chunk id alone, for a caller without a tenant: the tenant of each among the chunks the caller may see, as tenant_ids, hit_ids and scores (chunk_scores in the same order; ids of chunks the caller cannot see are dropped, with their score). Planned at every call.';

-- PL/pgSQL (a Citus coordinator cannot plan SQL-language functions that join its tables around
-- unbound parameters). The hits are hit_ids, not chunk_ids: a PL/pgSQL argument cannot share the
-- name of a result column. Earlier versions (language sql, argument chunk_ids) are dropped
-- first: CREATE OR REPLACE cannot rename an argument (grants: 910-function-privileges.sql).
do $$
begin
    if exists (select from pg_catalog.pg_proc as p
               where p.oid operator(pg_catalog.=) pg_catalog.to_regprocedure(
                         'pgrag.windows(text[], bigint[], integer, double precision[], double precision)')
                 and p.proargnames[2] operator(pg_catalog.<>) 'hit_ids') then
        drop function pgrag.windows(text[], bigint[], integer, double precision[], double precision);
    end if;
end
$$;

create or replace function pgrag.windows(
    tenant_ids text[],
    hit_ids bigint[],
    window_size integer default 1,
    scores double precision[] default null,
    decay double precision default 0.5
)
returns table (
    tenant_id text, document_id bigint, first_chunk_index integer, last_chunk_index integer,
    chunk_ids bigint[], content text, page integer, heading_path text[], score double precision,
    title text, source_uri text, source_type text, hit_chunk_ids bigint[], best_chunk_id bigint,
    first_hit bigint, token_count integer
)
language plpgsql
stable
rows 10
security invoker
set search_path = pg_catalog, pg_temp
-- Generic plans, made once per session (sql/idempotent/README.md, "Plans"); the lookup of the
-- hits' tenant for a caller without one is pgrag.window_hits_unfenced, planned at every call.
set plan_cache_mode = force_generic_plan
as $$
#variable_conflict use_column
declare
    v_tenant text := pgrag.current_tenant_id();
    v_tenants text[] := windows.tenant_ids;
    v_ids bigint[] := windows.hit_ids;
    v_scores double precision[] := windows.scores;
begin
    -- Argument limits (docs/security.md): SQLSTATE 22023 before any work.
    perform pgrag.check_length('tenant_ids', pg_catalog.cardinality(windows.tenant_ids), 2000),
            pgrag.check_length('hit_ids', pg_catalog.cardinality(windows.hit_ids), 2000),
            pgrag.check_length('scores', pg_catalog.cardinality(windows.scores), 2000),
            pgrag.check_argument('window_size', windows.window_size, 0, 10),
            pgrag.check_argument('decay', windows.decay, 0, 1),
            (select pg_catalog.count(pgrag.check_argument('scores', u.s, -1e6, 1e6))
             from pg_catalog.unnest(windows.scores) as u(s));

    -- Hits given by chunk id alone (public.chunk_windows): the tenant of each, among the chunks
    -- the caller may see (ids of other tenants' or unknown chunks are dropped, with their score).
    -- A caller with a tenant finds them by key, one probe per hit in a fenced subquery, with a
    -- plan made once per session ("Plans").
    if windows.tenant_ids is null and v_tenant is not null then
        select /* pgrag:window_hits */ pg_catalog.array_agg(c.tenant_id order by u.ord),
               pg_catalog.array_agg(u.id order by u.ord),
               pg_catalog.array_agg(windows.scores[u.ord] order by u.ord)
        into v_tenants, v_ids, v_scores
        from pg_catalog.unnest(windows.hit_ids) with ordinality as u(id, ord)
        cross join lateral (
            select c.tenant_id
            from pgrag.chunks as c
            where c.tenant_id = v_tenant and c.id = u.id
            offset 0
        ) as c;
    elsif windows.tenant_ids is null then
        select h.tenant_ids, h.hit_ids, h.scores into v_tenants, v_ids, v_scores
        from pgrag.window_hits_unfenced(windows.hit_ids, windows.scores) as h;
    end if;

    -- Every statement below says the caller's tenant (when there is one) of each table it
    -- reads: the same rows (the hits are the tenant's: the arms and RLS return no others), and
    -- a sharded cluster (Citus) sends it to that tenant's shards alone.
    return query
    with /* pgrag:windows */ hits as (
        select u.t, u.id, u.ord, coalesce(u.s, 1.0) as s
        from rows from (pg_catalog.unnest(v_tenants), pg_catalog.unnest(v_ids), pg_catalog.unnest(v_scores))
             with ordinality as u(t, id, s, ord)
        where u.id is not null
    ),
    hc as materialized (
        select h.t, h.id, h.ord, h.s, c.document_id, c.chunk_index, d.title, d.source_uri,
               d.source_type
        from hits as h
        join pgrag.chunks as c on c.tenant_id = h.t and c.id = h.id
        join pgrag.documents as d on d.tenant_id = c.tenant_id and d.id = c.document_id
        where pgrag.searchable(d.status, c.document_id, d.metadata, c.metadata, d.source_type,
                               d.created_at)
          and (v_tenant is null or c.tenant_id = v_tenant)
    ),
    -- The neighbours that exist: a range on the (tenant_id, document_id, chunk_index) key.
    expanded as materialized (
        select hc.t, hc.document_id, n.chunk_index as idx, hc.title, hc.source_uri, hc.source_type,
               pg_catalog.max(hc.s * pg_catalog.power(coalesce(windows.decay, 0.5),
                                                       pg_catalog.abs(n.chunk_index - hc.chunk_index))) as score,
               pg_catalog.min(hc.ord) filter (where n.chunk_index = hc.chunk_index) as hit_ord
        from hc
        join pgrag.chunks as n
          on n.tenant_id = hc.t and n.document_id = hc.document_id
         and n.chunk_index >= hc.chunk_index - coalesce(windows.window_size, 0)
         and n.chunk_index <= hc.chunk_index + coalesce(windows.window_size, 0)
         and (v_tenant is null or n.tenant_id = v_tenant)
        group by hc.t, hc.document_id, n.chunk_index, hc.title, hc.source_uri, hc.source_type
    ),
    present as materialized (
        select e.t, e.document_id, e.idx, e.score, e.hit_ord, e.title, e.source_uri,
               e.source_type, c.id, c.content, c.overlap_chars, c.page, c.heading_path,
               c.token_count,
               case when coalesce(windows.window_size, 0) > 0
                    then e.idx - pg_catalog.row_number() over (
                             partition by e.t, e.document_id order by e.idx)
                    else e.idx end as grp
        from expanded as e
        join pgrag.chunks as c
          on c.tenant_id = e.t and c.document_id = e.document_id and c.chunk_index = e.idx
         and (v_tenant is null or c.tenant_id = v_tenant)
    ),
    marked as (
        select p.*,
               pg_catalog.min(p.idx) over win as first_idx,
               pg_catalog.first_value(p.page) over best as best_page,
               pg_catalog.first_value(p.heading_path) over best as best_heading,
               pg_catalog.first_value(p.id) over best as best_id
        from present as p
        window win as (partition by p.t, p.document_id, p.grp),
               best as (partition by p.t, p.document_id, p.grp order by p.hit_ord nulls last, p.idx)
    ),
    w as materialized (
        select m.t, m.document_id, pg_catalog.min(m.idx) as first_idx, pg_catalog.max(m.idx) as last_idx,
               pg_catalog.array_agg(m.id order by m.idx) as ids,
               pg_catalog.string_agg(
                   case when m.idx = m.first_idx then m.content
                        when m.overlap_chars > 0 then pg_catalog.substr(m.content, m.overlap_chars + 1)
                        else E'\n' operator(pg_catalog.||) m.content end,
                   '' order by m.idx) as content,
               m.best_page as page,
               m.best_heading as heading_path,
               pg_catalog.max(m.score) as score,
               pg_catalog.array_agg(m.id order by m.idx) filter (where m.hit_ord is not null) as hit_ids,
               m.best_id,
               pg_catalog.min(m.hit_ord) as first_hit,
               pg_catalog.sum(m.token_count)::integer as token_count,
               m.title, m.source_uri, m.source_type
        from marked as m
        group by m.t, m.document_id, m.grp, m.best_page, m.best_heading, m.best_id, m.title,
                 m.source_uri, m.source_type
    )
    -- The documents' columns came with the hits (hc): no join to the documents here, which a
    -- generic plan would make by scanning the tenant's documents for each window.
    select w.t, w.document_id, w.first_idx, w.last_idx, w.ids, w.content, w.page, w.heading_path,
           w.score, w.title, w.source_uri, w.source_type, w.hit_ids, w.best_id, w.first_hit,
           w.token_count
    from w
    order by w.first_hit;
end
$$;
comment on function pgrag.windows(text[], bigint[], integer, double precision[], double precision) is
'Windows of +/- window_size neighbouring chunks around hits (tenant_ids, hit_ids in rank order; tenant_ids null: the tenant of each hit among the chunks the caller may see), overlapping or adjacent windows of a document merged, each neighbour''s overlap_chars prefix stripped; chunk score = best hit score * decay^distance; ordered by the best hit they contain. Neighbours are read by a range on chunk_index (only rows that exist). Limits: at most 2,000 hits, window_size 0-10, decay 0-1, scores finite within +/- 1e6; else SQLSTATE 22023.';
