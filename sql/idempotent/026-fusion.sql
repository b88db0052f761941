-- Fusion and MMR: from the two arms' candidates to one ranking.
-- Contract. Provides: pgrag.fused_candidates (weighted min-max, z-score or RRF fusion,
--   min_score, MMR) and pgrag.mmr_order. (The windows around the ranked hits:
--   019-windows.sql.) Relies on:
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
