-- Fusion, MMR and windows: from the two arms' candidates to ranked results and merged windows.
-- Contract. Provides: pgrag.fused_candidates (weighted min-max, z-score or RRF fusion,
--   min_score, MMR), pgrag.mmr_order and pgrag.windows (hits expanded to neighbouring chunks,
--   merged) with its lookup of the hits' tenants for a caller without one,
--   pgrag.window_hits_unfenced. Relies on:
--   the arms (022-vector-arm.sql, 025-keyword-arm.sql), argument checks and
--   pgrag.current_tenant_id (001-helpers.sql). Callers: the public API (027-api.sql), as the
--   calling role.

create or replace function pgrag.mmr_order(
    embeddings @extschema:vector@.vector[],
    relevance double precision[],
    lambda double precision,
    select_count integer
)
returns integer[]
language plpgsql
immutable
security invoker
parallel safe
set search_path = pg_catalog, pg_temp
as $$
declare
    n integer := coalesce(pg_catalog.cardinality(embeddings), 0);
    rmin double precision;
    rmax double precision;
    rel double precision[];
    maxsim double precision[];
    chosen boolean[];
    picked integer[] := '{}';
    best integer;
    best_val double precision;
    val double precision;
    sim double precision;
    i integer;
begin
    -- Quadratic work (picks x candidates distances): at most 1,000 candidates and 500 picks.
    perform pgrag.check_length('embeddings', n, 1000);
    perform pgrag.check_length('relevance', pg_catalog.cardinality(relevance), 1000);
    if lambda is null then
        raise exception 'lambda must be between 0 and 1 (got null)' using errcode = '22023';
    end if;
    perform pgrag.check_argument('lambda', lambda, 0, 1);
    perform pgrag.check_argument('select_count', select_count, 0, 500, true);
    if exists (select 1 from pg_catalog.unnest(relevance) as r
               where r in ('NaN'::double precision, 'Infinity'::double precision,
                           '-Infinity'::double precision)) then
        raise exception 'relevance must hold finite numbers' using errcode = '22023';
    end if;
    if (select pg_catalog.count(distinct @extschema:vector@.vector_dims(e))
        from pg_catalog.unnest(embeddings) as e) > 1 then
        raise exception 'embeddings must all have the same dimension' using errcode = '22023';
    end if;
    if n = 0 then
        return picked;
    end if;
    select pg_catalog.min(r), pg_catalog.max(r) into rmin, rmax
    from pg_catalog.unnest(relevance) as r;
    rel := pg_catalog.array_fill(1.0::double precision, array[n]);
    maxsim := pg_catalog.array_fill(null::double precision, array[n]);
    chosen := pg_catalog.array_fill(false, array[n]);
    for i in 1 .. n loop
        if rmax > rmin then
            rel[i] := (coalesce(relevance[i], rmin) - rmin) / (rmax - rmin);
        end if;
    end loop;
    for step in 1 .. least(coalesce(select_count, n), n) loop
        best := null;
        best_val := null;
        for i in 1 .. n loop
            if not chosen[i] then
                val := lambda * rel[i] - (1 - lambda) * coalesce(maxsim[i], 0);
                if best_val is null or val > best_val then
                    best := i;
                    best_val := val;
                end if;
            end if;
        end loop;
        chosen[best] := true;
        picked := picked operator(pg_catalog.||) best;
        if embeddings[best] is not null then
            for i in 1 .. n loop
                if not chosen[i] and embeddings[i] is not null then
                    sim := 1 - (embeddings[i] operator(@extschema:vector@.<=>) embeddings[best]);
                    if maxsim[i] is null or sim > maxsim[i] then
                        maxsim[i] := sim;
                    end if;
                end if;
            end loop;
        end if;
    end loop;
    return picked;
end
$$;
comment on function pgrag.mmr_order(@extschema:vector@.vector[], double precision[], double precision, integer) is
'Maximal marginal relevance: picks select_count of the candidates, each maximising lambda * relevance (min-max normalised) - (1 - lambda) * its highest cosine similarity to those already picked; returns their 1-based positions in pick order. At most 1,000 embeddings and relevance values (finite), lambda in [0, 1], select_count >= 0 (null: all; more than 500 counts as 500); else SQLSTATE 22023.';

create or replace function pgrag.fused_candidates(
    query_text text,
    query_embedding @extschema:vector@.vector,
    select_count integer,
    candidate_count integer,
    fusion text default 'weighted',
    rrf_k integer default 60,
    vector_weight double precision default 0.8,
    keyword_weight double precision default 1,
    min_score double precision default null,
    mmr_lambda double precision default null,
    language text default null,
    ef_search integer default null,
    document_ids bigint[] default null,
    metadata_filter jsonb default null,
    source_types text[] default null,
    created_after timestamptz default null,
    created_before timestamptz default null
)
returns table (
    ord bigint, tenant_id text, chunk_id bigint,
    vector_rank bigint, vector_score double precision,
    keyword_rank bigint, keyword_score double precision, score double precision
)
language plpgsql
stable
rows 10
security invoker
set search_path = pg_catalog, pg_temp
-- A generic plan, made once per session (sql/idempotent/README.md, "Plans"): the fusion joins
-- the two arms' candidates to their chunks by key, the same plan whatever the values. The arms
-- set their own mode.
set plan_cache_mode = force_generic_plan
as $$
#variable_conflict use_column
declare
    v_tenant text := pgrag.current_tenant_id();
    v_fusion text := pg_catalog.lower(coalesce(fusion, 'weighted'));
    -- Argument limits (docs/security.md): each arm fetches at most 2,000 candidates.
    v_rrf_k double precision := coalesce(pgrag.check_argument('rrf_k', rrf_k, 0, 10000), 60);
    v_vw double precision := coalesce(pgrag.check_argument('vector_weight', vector_weight, 0, 100), 0.8);
    v_kw double precision := coalesce(pgrag.check_argument('keyword_weight', keyword_weight, 0, 100), 1);
    v_select integer := coalesce(pgrag.check_argument('select_count', select_count, 0, 2000, true), 10);
    v_cand integer := greatest(
        coalesce(pgrag.check_argument('candidate_count', candidate_count, 1, 1000, true), 40),
        v_select, 1);
    v_required tsquery;  -- what quoted phrases require (pgrag.keyword_required), or null
begin
    if v_fusion not in ('rrf', 'weighted', 'zscore') then
        raise exception 'unknown fusion %: use ''weighted'', ''zscore'' or ''rrf''',
            pg_catalog.left(fusion, 100) using errcode = '22023';
    end if;
    -- A similarity floor: any number but NaN (above 1 nothing passes, below -1 everything).
    perform pgrag.check_argument('min_score', min_score, '-Infinity', 'Infinity');
    perform pgrag.check_argument('mmr_lambda', mmr_lambda, 0, 1);
    perform pgrag.check_argument('ef_search', ef_search, 1, 1000, true);
    perform pgrag.check_query_embedding('query_embedding', query_embedding);
    perform pgrag.check_length('query_text', pg_catalog.length(query_text), 10000, 'characters');
    perform pgrag.check_filters(document_ids, source_types, metadata_filter);
    -- Quoted phrases (docs/sql-api.md, "Query syntax"): the chunks holding them rank first; a
    -- query without a double quote does not look.
    if pg_catalog.strpos(query_text, '"') > 0 then
        v_required := pgrag.keyword_required(query_text, coalesce(
            pgrag.text_search_config('language', language),
            (pgrag.bm25_corpus(v_tenant, null)).search_config, 'english'));
    else
        perform pgrag.text_search_config('language', language);
    end if;
    return query
    with v as (
        select vc.tenant_id, vc.chunk_id, 1 - vc.distance as s,
               pg_catalog.row_number() over (order by vc.distance, vc.chunk_id) as r
        from pgrag.vector_candidates(query_embedding, v_cand, ef_search, document_ids,
                                     metadata_filter, source_types, created_after,
                                     created_before) as vc
    ),
    k as (
        select kc.tenant_id, kc.chunk_id, kc.score as s,
               pg_catalog.row_number() over (order by kc.score desc, kc.chunk_id) as r
        from pgrag.keyword_candidates(query_text, v_cand, language, null, null, document_ids,
                                      metadata_filter, source_types, created_after,
                                      created_before) as kc
    ),
    f as (
        select coalesce(v.tenant_id, k.tenant_id) as t, coalesce(v.chunk_id, k.chunk_id) as id,
               v.r as vr, v.s as vs, k.r as kr, k.s as ks
        from v full join k on k.tenant_id = v.tenant_id and k.chunk_id = v.chunk_id
    ),
    -- Each arm's score statistics over its own candidates (a null score is a chunk the arm did
    -- not return). Materialised: computed once, never re-run for each candidate by a nested
    -- loop (quadratic).
    mm as materialized (
        select pg_catalog.min(f.vs) as vmin, pg_catalog.max(f.vs) as vmax,
               pg_catalog.avg(f.vs) as vmean, pg_catalog.stddev_pop(f.vs) as vsd,
               pg_catalog.min(f.ks) as kmin, pg_catalog.max(f.ks) as kmax,
               pg_catalog.avg(f.ks) as kmean, pg_catalog.stddev_pop(f.ks) as ksd
        from f
    ),
    scored as (
        select f.t, f.id, f.vr,
               coalesce(f.vs, 1 - (c.embedding operator(@extschema:vector@.<=>) query_embedding)) as vs,
               f.kr, f.ks,
               case when v_fusion = 'rrf' then
                   coalesce(v_vw / (v_rrf_k + f.vr), 0) + coalesce(v_kw / (v_rrf_k + f.kr), 0)
               -- z-scores: an arm adds nothing for a chunk it did not return, nor when all its
               -- candidates score alike (no spread to standardise by).
               when v_fusion = 'zscore' then
                   case when mm.vsd > 0 then coalesce(v_vw * (f.vs - mm.vmean) / mm.vsd, 0)
                        else 0 end
                   + case when mm.ksd > 0 then coalesce(v_kw * (f.ks - mm.kmean) / mm.ksd, 0)
                          else 0 end
               else
                   case when f.vs is null then 0
                        when mm.vmax > mm.vmin then v_vw * (f.vs - mm.vmin) / (mm.vmax - mm.vmin)
                        else v_vw end
                   + case when f.ks is null then 0
                          when mm.kmax > mm.kmin then v_kw * (f.ks - mm.kmin) / (mm.kmax - mm.kmin)
                          else v_kw end
               end as fused,
               (v_required is null or c.fts operator(pg_catalog.@@) v_required) as phrased,
               c.embedding
        from f
        cross join mm
        -- (the caller's tenant said of c too: a sharded cluster then reads that tenant's shards)
        join pgrag.chunks as c on c.tenant_id = f.t and c.id = f.id
                              and (v_tenant is null or c.tenant_id = v_tenant)
    ),
    ranked as (
        select pg_catalog.row_number() over (
                   order by s.phrased desc, s.fused desc, s.vr nulls last, s.kr nulls last,
                            s.id) as pos,
               s.t, s.id, s.vr, s.vs, s.kr, s.ks, s.fused, s.embedding
        from scored as s
        where min_score is null or query_embedding is null or s.vs >= min_score
    ),
    picked as (
        select case
                   when mmr_lambda is null then
                       (select pg_catalog.array_agg(r.pos::integer order by r.pos)
                        from ranked as r where r.pos <= v_select)
                   -- MMR is quadratic: it picks at most 500 of the best 1,000 fused candidates.
                   else pgrag.mmr_order(
                       (select pg_catalog.array_agg(r.embedding order by r.pos) from ranked as r
                        where r.pos <= 1000),
                       (select pg_catalog.array_agg(r.fused order by r.pos) from ranked as r
                        where r.pos <= 1000),
                       mmr_lambda, least(v_select, 500))
               end as a
    )
    select o.n, r.t, r.id, r.vr, r.vs, r.kr, r.ks, r.fused
    from picked
    cross join lateral pg_catalog.unnest(picked.a) with ordinality as o(pos, n)
    join ranked as r on r.pos = o.pos
    order by o.n;
end
$$;
comment on function pgrag.fused_candidates(text, @extschema:vector@.vector, integer, integer, text, integer, double precision, double precision, double precision, double precision, text, integer, bigint[], jsonb, text[], timestamptz, timestamptz) is
'Hybrid candidates: both arms (greatest(candidate_count, select_count) each, at most 2,000; filters inside), fused by weighted min-max scores (weighted), weighted z-scores (zscore: each arm standardised by the mean and population standard deviation of its candidates'' scores) or RRF (rrf), chunks holding the query''s quoted phrases first, min_score as a cosine-similarity floor, optionally re-ordered by MMR (at most 500 picks from the best 1,000); select_count rows, best first. Arguments outside their limits (docs/security.md) raise SQLSTATE 22023.';

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
