-- The keyword arm: Okapi BM25 over the tenant's postings, filters applied inside.
-- Contract. Provides: pgrag.keyword_candidates, returning (tenant_id, chunk_id, score) best
--   first. Relies on: argument checks and pgrag.current_tenant_id (001-helpers.sql),
--   pgrag.keyword_query (005-text-search.sql), the BM25 tables (002-bm25-maintenance.sql keeps
--   them), pgrag.searchable and pgrag.distributed (020-search-rows.sql). Callers: the fusion
--   (025-fusion.sql) and the public API (026-api.sql), as the calling role.

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
-- Generic plans, made once per session (sql/idempotent/README.md, "Plans"), but for the
-- statements on the BM25 tables, planned at every call with the values (the body says so): the
-- postings of the query's lexemes are found by an index scan per lexeme only when the planner
-- sees the lexemes and the tenant (a generic plan scanned every posting of the tenant, hundreds
-- of times slower). For a caller without a tenant the walk over the ranking is custom too. The
-- walk of a caller with a tenant keeps its generic plan: its form fixes the plan (the body says
-- how), and planning it at every call cost more with every isolated tenant's index on
-- pgrag.chunks. On Citus, sql/citus/002-function-settings.sql sets force_custom_plan instead
-- (and pgrag.distributed() is true): every statement custom, the walk in its other form.
set plan_cache_mode = force_generic_plan
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
    v_scored text;
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
    v_df double precision[];
    v_max_tf integer[];
    v_min_dl integer[];
    v_ub double precision[];
    v_nidx bigint[];
    v_elex text[];
    v_eidf double precision[];
    v_nlex text[];
    v_nidf double precision[];
    v_c1 double precision;
    v_c2 double precision;
    v_prune boolean;
    v_m integer;
    v_rare integer;
    v_sum double precision;
    v_theta double precision;
    v_bound double precision;
    v_cand bigint[];
    v_part double precision[];
    v_seen bigint[];
    v_cut double precision;
    v_mode text := coalesce(nullif(pg_catalog.current_setting('pgrag.keyword_pruning', true), ''), 'auto');
    v_order integer[];
    v_i integer;
    v_rest double precision;
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
        -- (Tenants whose chunks were all deleted keep their statistics' rows, at zero.)
        select pg_catalog.array_agg(t.tenant_id) into v_tenants
        from (select s.tenant_id
              from pgrag.corpus_stats as s
              group by s.tenant_id
              having pg_catalog.sum(s.chunk_count) > 0) as t;
    end if;
    -- The tenant whose postings the pruned evaluation reads (its term bounds are per tenant):
    -- the caller's, or, without a tenant, the only one the caller sees (a single-tenant
    -- installation searched from psql, as its owner).
    v_scored := coalesce(v_tenant,
                         case when pg_catalog.cardinality(v_tenants) = 1 then v_tenants[1] end);
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

    -- Custom plans from here to the walk, for the statements on the BM25 tables (the function's
    -- setting restores the caller's on exit). Those above read by key and keep generic plans.
    perform pg_catalog.set_config('plan_cache_mode', 'force_custom_plan', true);
    -- Document frequency of each query lexeme: the sum of its sharded counters; and the term
    -- bounds of its postings (largest tf, shortest chunk; null when unknown).
    -- (Grouped, not an aggregate per lexeme in a lateral subquery, which Citus cannot push
    -- down to the shards of several tenants.)
    with d as materialized (
        select y.lexeme, pg_catalog.sum(y.df)::double precision as df,
               pg_catalog.max(y.max_tf) as max_tf, pg_catalog.min(y.min_doc_len) as min_doc_len
        from pgrag.bm25_lexicon as y
        where y.tenant_id = any (v_tenants) and y.lexeme = any (v_q.lexemes)
        group by y.lexeme
    )
    -- Rarest first: the order the pruned evaluation below takes the lexemes in.
    select pg_catalog.array_agg(d.lexeme order by d.df, d.lexeme),
           pg_catalog.array_agg(pg_catalog.ln(1 + (v_n - d.df + 0.5) / (d.df + 0.5)) order by d.df, d.lexeme),
           pg_catalog.array_agg(d.df order by d.df, d.lexeme),
           pg_catalog.array_agg(d.max_tf order by d.df, d.lexeme),
           pg_catalog.array_agg(d.min_doc_len order by d.df, d.lexeme)
    into v_lex, v_idf, v_df, v_max_tf, v_min_dl
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
    -- The term part tf / (tf + k1 (1 - b + b dl / avgdl)) as tf / (tf + c1 + c2 dl).
    v_c1 := v_k1 * (1 - v_b);
    v_c2 := v_k1 * v_b / v_avgdl;
    v_m := pg_catalog.cardinality(v_lex);
    -- Pruned evaluation (exact; docs/benchmarks.md "Exact BM25 that reads fewer postings"): for
    -- a search of one tenant's rows (v_scored) without filters, over enough postings to be
    -- worth it. Phrases and
    -- exclusions drop ranked chunks in the walk: for them the pruned evaluation hands the walk
    -- every candidate it has proved in rank order (step 5), not only the top k. The setting
    -- pgrag.keyword_pruning: auto (default: 20,000 postings or more, and step 2's estimate of
    -- its cost), on (whenever the bounds leave a lexeme out), off (never). Same results either
    -- way.
    v_prune := v_scored is not null and v_m >= 2
        and document_ids is null and metadata_filter is null and source_types is null
        and created_after is null and created_before is null
        and case v_mode
                 when 'off' then false
                 when 'on' then true
                 else (select pg_catalog.sum(x) from pg_catalog.unnest(v_df) as x) >= 20000 end;
    if v_prune then
        -- 1. A floor theta under the k-th best score: the 2 v_k best chunks by the rarest
        --    lexemes (their postings within 5,000 and a quarter of all, at least one lexeme),
        --    scored in full; the
        --    k-th best of any real scores bounds the k-th best of all from below.
        v_rare := 1;
        v_sum := v_df[1];
        while v_rare < v_m and v_sum + v_df[v_rare + 1]
              <= least(5000, 0.25 * (select pg_catalog.sum(x) from pg_catalog.unnest(v_df) as x)) loop
            v_rare := v_rare + 1;
            v_sum := v_sum + v_df[v_rare];
        end loop;
        if v_rare < v_m then
            select pg_catalog.array_agg(r.chunk_id order by r.chunk_id) into v_cand
            from (
                select p.chunk_id
                from rows from (pg_catalog.unnest(v_lex[1 : v_rare]), pg_catalog.unnest(v_idf[1 : v_rare])) as t(lexeme, idf)
                cross join lateral (
                    select p.chunk_id, p.tf, p.doc_len
                    from pgrag.bm25_postings as p
                    where p.tenant_id = v_scored and p.lexeme = t.lexeme
                    offset 0
                ) as p
                group by p.chunk_id
                order by pg_catalog.sum(t.idf * p.tf / (p.tf + v_c1 + v_c2 * p.doc_len)) desc, p.chunk_id
                limit 2 * v_k
            ) as r;
            if coalesce(pg_catalog.cardinality(v_cand), 0) >= v_k then
                select pg_catalog.min(r.score) into v_theta
                from (
                    select pg_catalog.sum(t.idf * p.tf / (p.tf + v_c1 + v_c2 * p.doc_len)) as score
                    from rows from (pg_catalog.unnest(v_lex), pg_catalog.unnest(v_idf)) as t(lexeme, idf)
                    cross join lateral (
                        select p.chunk_id, p.tf, p.doc_len
                        from pgrag.bm25_postings as p
                        where p.tenant_id = v_scored and p.lexeme = t.lexeme
                          and p.chunk_id = any (v_cand)
                        offset 0
                    ) as p
                    group by p.chunk_id
                    order by 1 desc
                    limit v_k
                ) as r;
            end if;
        end if;
        -- 2. Essential lexemes. A lexeme adds at most its bound to a chunk's score: idf times
        --    the term part of its largest tf in its shortest chunk (the part grows with tf and
        --    shrinks with length), or idf alone when the bounds are unknown (the part is below
        --    1). The lexemes of smallest bound whose bounds sum below theta cannot lift a chunk
        --    holding none of the others to theta: only chunks holding an essential lexeme (one
        --    of the others) can be in the top v_k.
        select pg_catalog.array_agg(u.idf * coalesce(u.tf::double precision / (u.tf + v_c1 + v_c2 * u.dl), 1)
                                    order by u.i)
        into v_ub
        from rows from (pg_catalog.unnest(v_idf), pg_catalog.unnest(v_max_tf), pg_catalog.unnest(v_min_dl))
             with ordinality as u(idf, tf, dl, i);
        if v_theta is not null then
            select pg_catalog.array_agg(r.i), pg_catalog.max(r.run)
            into v_nidx, v_bound
            from (
                select u.i, pg_catalog.sum(u.ub) over (order by u.ub, u.i) as run
                from pg_catalog.unnest(v_ub) with ordinality as u(ub, i)
            ) as r
            where r.run * (1 + 1e-9) < v_theta;
        end if;
        select pg_catalog.array_agg(u.lexeme order by u.i) filter (where not u.skip),
               pg_catalog.array_agg(u.idf order by u.i) filter (where not u.skip),
               pg_catalog.array_agg(u.lexeme order by u.i) filter (where u.skip),
               pg_catalog.array_agg(u.idf order by u.i) filter (where u.skip),
               pg_catalog.sum(u.df) filter (where not u.skip) <= 0.5 * pg_catalog.sum(u.df)
               and coalesce(pg_catalog.sum(u.df) filter (where not u.skip and u.idf / (1 + v_k1) >= v_theta - v_bound), 0)
                   <= 0.25 * pg_catalog.sum(u.df)
        into v_elex, v_eidf, v_nlex, v_nidf, v_prune
        from (
            select l.lexeme, l.idf, l.df, l.i, coalesce(l.i = any (v_nidx), false) as skip
            from rows from (pg_catalog.unnest(v_lex), pg_catalog.unnest(v_idf), pg_catalog.unnest(v_df))
                 with ordinality as l(lexeme, idf, df, i)
        ) as u;
        -- Worth it only when the essential lexemes hold at most half the postings, and when few
        -- of their chunks stay candidates (step 3): a chunk holding an essential lexeme once, at
        -- the average length, has the partial score idf / (1 + k1); where that reaches the gap
        -- theta - v_bound, most of that lexeme's chunks stay, and when those hold more than a
        -- quarter of the postings the candidates are too many: steps 4 and 5 would cost about
        -- what the full scan does (measured on both corpora of benchmarks/latency.py, a tenth to
        -- a half: a quarter did best; docs/benchmarks.md). Setting on skips both checks (tests
        -- compare the pruned and full rankings on small corpora).
        v_prune := (coalesce(v_prune, false) or v_mode = 'on') and v_nlex is not null;
        if v_prune then
            raise debug 'pgrag.keyword_candidates: pruned evaluation, % of % lexemes essential',
                pg_catalog.cardinality(v_elex), v_m;
        end if;
    end if;
    if v_prune then
        -- The other lexemes, largest bound first (step 5's order), and the sum of their bounds
        -- after the first.
        select pg_catalog.array_agg(u.i::integer order by v_ub[u.i::integer] desc, u.i) into v_order
        from pg_catalog.unnest(v_nidx) as u(i);
        select coalesce(pg_catalog.sum(v_ub[x.i]), 0) into v_rest
        from pg_catalog.unnest(v_order[2 :]) as x(i);
        -- Steps 3, 4 and the first lexeme of step 5 in one statement, the candidates passed
        -- between them as rows, not arrays. Ids for "chunk_id = any (...)" are given sorted:
        -- the index scan sorts the array itself, which takes far longer when it is not
        -- (tens of milliseconds for 44,000 ids at 100k chunks, under EXPLAIN ANALYZE).
        -- 3. Chunks holding an essential lexeme, their partial score, kept when it plus the
        --    bound of the rest can reach theta (c).
        -- 4. A higher theta: when they are more than 4 v_k, the 4 v_k best of them by partial
        --    score, scored in full (probes, one index scan per other lexeme), their v_k-th best
        --    score (the other lexemes often add much to a chunk's partial score: more than the
        --    v_k best partial scores come closer to the real k-th best) (h). Then only
        --    candidates that can still reach it (f).
        -- 5, first: the other lexeme of largest bound added to those (below).
        with c as materialized (
            select p.chunk_id, pg_catalog.sum(t.idf * p.tf / (p.tf + v_c1 + v_c2 * p.doc_len)) as part
            from rows from (pg_catalog.unnest(v_elex), pg_catalog.unnest(v_eidf)) as t(lexeme, idf)
            cross join lateral (
                select p.chunk_id, p.tf, p.doc_len
                from pgrag.bm25_postings as p
                where p.tenant_id = v_scored and p.lexeme = t.lexeme
                offset 0
            ) as p
            group by p.chunk_id
            having (pg_catalog.sum(t.idf * p.tf / (p.tf + v_c1 + v_c2 * p.doc_len)) + v_bound) * (1 + 1e-9) >= v_theta
        ), b as materialized (
            select c.chunk_id, c.part
            from c
            where (select pg_catalog.count(*) from (select from c limit 4 * v_k + 1) as x) > 4 * v_k
            order by c.part desc, c.chunk_id
            limit 4 * v_k
        ), h as materialized (
            select coalesce(pg_catalog.max(greatest(v_theta, r.score)), v_theta) as theta
            from (
                select b.part + coalesce(o.s, 0) as score
                from b
                left join (
                    select p.chunk_id, pg_catalog.sum(t.idf * p.tf / (p.tf + v_c1 + v_c2 * p.doc_len)) as s
                    from rows from (pg_catalog.unnest(v_nlex), pg_catalog.unnest(v_nidf)) as t(lexeme, idf)
                    cross join lateral (
                        select p.chunk_id, p.tf, p.doc_len
                        from pgrag.bm25_postings as p
                        where p.tenant_id = v_scored and p.lexeme = t.lexeme
                          and p.chunk_id = any (array(select b.chunk_id from b order by b.chunk_id))
                        offset 0
                    ) as p
                    group by p.chunk_id
                ) as o on o.chunk_id = b.chunk_id
                order by 1 desc
                offset v_k - 1
                limit 1
            ) as r
        ), f as materialized (
            select c.chunk_id, c.part
            from c
            where (c.part + v_bound) * (1 + 1e-9) >= (select h.theta from h)
        )
        select pg_catalog.array_agg(f.chunk_id order by f.chunk_id),
               pg_catalog.array_agg(f.part + coalesce(o.s, 0) order by f.chunk_id),
               (select h.theta from h)
        into v_cand, v_part, v_theta
        from f
        left join (
            select p.chunk_id, v_idf[v_order[1]] * p.tf / (p.tf + v_c1 + v_c2 * p.doc_len) as s
            from pgrag.bm25_postings as p
            where p.tenant_id = v_scored and p.lexeme = v_lex[v_order[1]]
              and p.chunk_id = any (array(select f.chunk_id from f order by f.chunk_id))
        ) as o on o.chunk_id = f.chunk_id
        where (f.part + coalesce(o.s, 0) + v_rest) * (1 + 1e-9) >= (select h.theta from h);
        -- 5. Their full scores, MaxScore's way: the other lexemes one at a time, largest bound
        --    first, each by one index scan over the candidates left (primary-key probes in
        --    chunk_id order); after each, only the candidates whose score so far plus the bounds
        --    of the lexemes still to add can reach theta stay (a chunk lacking a lexeme of large
        --    bound seldom does). Then the exact top v_k: every chunk left out scores below theta,
        --    at most the k-th best. With phrases or exclusions, whose check in the walk may drop
        --    some of these, every candidate scoring v_cut or more instead (at most v_limit):
        --    every chunk left out scores below theta / (1 + 1e-9), rounded below v_cut, so these
        --    are the start of the full ranking, whatever the walk drops.
        v_cut := case when v_pos is not null or v_neg is not null then v_theta / (1 + 1e-9) + 1e-9 end;
        for v_i in 2 .. pg_catalog.cardinality(v_order) loop
            exit when coalesce(pg_catalog.cardinality(v_cand), 0) = 0;
            select coalesce(pg_catalog.sum(v_ub[x.i]), 0) into v_rest
            from pg_catalog.unnest(v_order[v_i + 1 :]) as x(i);
            select pg_catalog.array_agg(c.chunk_id order by c.chunk_id),
                   pg_catalog.array_agg(c.part + coalesce(o.s, 0) order by c.chunk_id)
            into v_cand, v_part
            from rows from (pg_catalog.unnest(v_cand), pg_catalog.unnest(v_part)) as c(chunk_id, part)
            left join (
                select p.chunk_id, v_idf[v_order[v_i]] * p.tf / (p.tf + v_c1 + v_c2 * p.doc_len) as s
                from pgrag.bm25_postings as p
                where p.tenant_id = v_scored and p.lexeme = v_lex[v_order[v_i]] and p.chunk_id = any (v_cand)
            ) as o on o.chunk_id = c.chunk_id
            where (c.part + coalesce(o.s, 0) + v_rest) * (1 + 1e-9) >= v_theta;
        end loop;
        select pg_catalog.array_agg(v_scored order by r.score desc, r.chunk_id),
               pg_catalog.array_agg(r.chunk_id order by r.score desc, r.chunk_id),
               pg_catalog.array_agg(r.score order by r.score desc, r.chunk_id)
        into v_tids, v_ids, v_scores
        from (
            select c.chunk_id, pg_catalog.round(c.part * 1e9::double precision) / 1e9::double precision as score
            from rows from (pg_catalog.unnest(v_cand), pg_catalog.unnest(v_part)) as c(chunk_id, part)
            order by 2 desc, 1
            limit case when v_cut is null then v_k else v_limit end
        ) as r
        where v_cut is null or r.score >= v_cut;
        -- The walk below takes these; should it need more (rows of documents not ready,
        -- exclusions), the full ranking follows, without the chunks already walked.
        v_limit := coalesce(pg_catalog.cardinality(v_ids), 0);
        v_more := true;
    end if;
    loop
        if not v_prune and v_scored is not null then
        -- Okapi BM25 of every chunk holding a query lexeme (one index-only range scan per
        -- lexeme), best v_limit first (then all of them if the walk below needs more).
        -- Scores are rounded to 1e-9: a sum of floats depends on the order of its terms, which
        -- plans (and the pruned evaluation above) do not fix; rounded, equal scores stay equal
        -- and ties keep one order (chunk_id) whichever way a chunk was scored.
        -- Each lexeme's postings in a fenced subquery: row-level security adds a condition on
        -- the tenant whose value the planner cannot know, so it takes the tenant's postings for
        -- a few hundredth of what they are, and a plain join read all of a tenant's postings
        -- and kept the query's. Over several tenants (a caller without one) the plain join
        -- below: Citus cannot run the fenced form for several tenants.
        select pg_catalog.array_agg(s.tenant_id order by s.score desc, s.chunk_id),
               pg_catalog.array_agg(s.chunk_id order by s.score desc, s.chunk_id),
               pg_catalog.array_agg(s.score order by s.score desc, s.chunk_id)
        into v_tids, v_ids, v_scores
        from (
            select v_scored as tenant_id, p.chunk_id,
                   pg_catalog.round(pg_catalog.sum(t.idf * p.tf / (p.tf + v_c1 + v_c2 * p.doc_len)) * 1e9::double precision) / 1e9::double precision as score
            from rows from (pg_catalog.unnest(v_lex), pg_catalog.unnest(v_idf)) as t(lexeme, idf)
            cross join lateral (
                select p.chunk_id, p.tf, p.doc_len
                from pgrag.bm25_postings as p
                where p.tenant_id = v_scored and p.lexeme = t.lexeme
                offset 0
            ) as p
            group by p.chunk_id
            order by 3 desc, p.chunk_id
            limit v_limit + 1
        ) as s;
        elsif not v_prune then
        select pg_catalog.array_agg(s.tenant_id order by s.score desc, s.chunk_id),
               pg_catalog.array_agg(s.chunk_id order by s.score desc, s.chunk_id),
               pg_catalog.array_agg(s.score order by s.score desc, s.chunk_id)
        into v_tids, v_ids, v_scores
        from (
            select p.tenant_id, p.chunk_id,
                   pg_catalog.round(pg_catalog.sum(t.idf * p.tf / (p.tf + v_c1 + v_c2 * p.doc_len)) * 1e9::double precision) / 1e9::double precision as score
            from rows from (pg_catalog.unnest(v_lex), pg_catalog.unnest(v_idf)) as t(lexeme, idf)
            join pgrag.bm25_postings as p on p.tenant_id = any (v_tenants) and p.lexeme = t.lexeme
            group by p.tenant_id, p.chunk_id
            order by 3 desc, p.chunk_id
            limit v_limit + 1
        ) as s;
        end if;
        if not v_prune then
        v_more := coalesce(pg_catalog.cardinality(v_ids), 0) > v_limit;
        end if;
        -- Walk the ranking in growing batches until match_count chunks pass the checks:
        -- document ready, filters, phrases and exclusions (filters inside the arm).
        v_batch := greatest(2 * v_k, 50);
        while v_found < v_k and v_off < least(coalesce(pg_catalog.cardinality(v_ids), 0), v_limit) loop
            if v_tenant is not null and not pgrag.distributed() then
                -- A caller with a tenant: a generic plan, made once per session. Each candidate's
                -- chunk, then its document, read by key in rank order: the subqueries are fenced
                -- (offset 0), so no plan joins them another way (a generic plan knows neither the
                -- tenant's size nor how many candidates come, and one that read the tenant's
                -- documents before the candidates' chunks was hundreds of times slower). Citus
                -- cannot run fenced subqueries for a caller without a tenant: the form below.
                perform pg_catalog.set_config('plan_cache_mode', 'force_generic_plan', true);
                return query
                select u.t, u.id, u.s
                from rows from (
                    pg_catalog.unnest(v_tids[v_off + 1 : least(v_off + v_batch, v_limit)]),
                    pg_catalog.unnest(v_ids[v_off + 1 : least(v_off + v_batch, v_limit)]),
                    pg_catalog.unnest(v_scores[v_off + 1 : least(v_off + v_batch, v_limit)])
                ) with ordinality as u(t, id, s, ord)
                cross join lateral (
                    select c.document_id, c.metadata, c.fts
                    from pgrag.chunks as c
                    where c.tenant_id = v_tenant and c.id = u.id
                    offset 0
                ) as c
                -- (the filters in the documents' scan, as in the form below)
                cross join lateral (
                    select
                    from pgrag.documents as d
                    where d.tenant_id = v_tenant and d.id = c.document_id
                      and pgrag.searchable(d.status, c.document_id, d.metadata, c.metadata,
                                           d.source_type, d.created_at, document_ids,
                                           metadata_filter, source_types, created_after,
                                           created_before)
                    offset 0
                ) as d
                where (v_neg is null or not c.fts operator(pg_catalog.@@) v_neg)
                  and (v_pos is null or c.fts operator(pg_catalog.@@) v_pos)
                  and (v_seen is null or u.id operator(pg_catalog.<>) all (v_seen))
                order by u.ord
                limit v_k - v_found;
                get diagnostics v_rows = row_count;
                perform pg_catalog.set_config('plan_cache_mode', 'force_custom_plan', true);
            else
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
                  and (v_seen is null or u.id operator(pg_catalog.<>) all (v_seen))
                order by u.ord
                limit v_k - v_found;
                get diagnostics v_rows = row_count;
            end if;
            v_found := v_found + v_rows;
            v_off := least(v_off + v_batch, v_limit);
            v_batch := v_batch * 4;
        end loop;
        exit when v_found >= v_k or not v_more;
        -- More of the full ranking: all of it, or after the pruned evaluation its start again
        -- (v_limit more rows than the walk has seen).
        if v_prune then
            v_limit := v_limit + greatest(4 * v_k, 200);
            v_seen := v_ids;
            v_prune := false;
            v_off := 0;
        else
            v_limit := 2147483646;
        end if;
    end loop;
end
$$;

comment on function pgrag.keyword_candidates(text, integer, text, double precision, double precision, bigint[], jsonb, text[], timestamptz, timestamptz) is
'Keyword arm: (tenant_id, chunk_id, Okapi BM25 score rounded to 1e-9) best first. Lucene IDF ln(1 + (N - df + 0.5)/(df + 0.5)), term part tf/(tf + k1(1 - b + b dl/avgdl)), N and avgdl from pgrag.corpus_stats and df from pgrag.bm25_lexicon of the caller''s tenant. Exact: for one tenant without filters it skips the postings of frequent lexemes that provably cannot lift a chunk into the top match_count (term bounds in pgrag.bm25_lexicon); the setting pgrag.keyword_pruning (auto, on, off) chooses when, never what is returned.';
