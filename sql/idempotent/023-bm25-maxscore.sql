-- The keyword arm's pruned evaluation, its steps: exact BM25 that reads fewer postings (MaxScore).
-- Contract. Provides: the steps pgrag.bm25_maxscore_floor, pgrag.bm25_maxscore_essential,
--   pgrag.bm25_maxscore_candidates and pgrag.bm25_maxscore_complete, which pgrag.bm25_maxscore
--   (024-bm25-evaluation.sql) runs in turn to return the ranking pgrag.bm25_scan_tenant would
--   start with. Relies on: pgrag.bm25_postings (002-bm25-maintenance.sql keeps it), the query's
--   statistics from pgrag.bm25_terms. Callers: pgrag.bm25_maxscore, as the calling role
--   (row-level security applies; the tenant argument only narrows what the caller may see).
--   Scores, saturation and saturation_per_token are those of 024-bm25-evaluation.sql's header.
--
-- Plans (sql/idempotent/README.md, "Plans"): planned at every call (each function's SET clause),
-- a tenant's postings read by one index scan per lexeme; each statement on a table carries a
-- /* pgrag:name */ marker.
--
-- Arguments (docs/security.md, "Argument limits"): an API role may call each step directly, so
-- each checks its own at its top (22023), with the bounds its callers' values always keep:
-- match_count 1 to 2,000; the lexemes and the arrays of their statistics (idf, df, max_tf,
-- min_doc_len, bounds, other_order) at most 64 elements (keyword_query's limit); idf, bounds,
-- partial scores, theta and the bounds' sums within +-1,000,000 and df 0 to 1e15, without
-- nulls (theta and the sums may be null); max_tf at least 1 and min_doc_len at least 0 (nulls:
-- unknown); k1 0 to 10, saturation 0 to 10 and saturation_per_token 0 to 1e12 (k1 (1 - b) and
-- k1 b / avgdl, avgdl at least 1e-9): no division by zero, no overflow. The tests are inline;
-- a checker is called only to raise.
--
-- The pruned evaluation (MaxScore; docs/benchmarks.md, "Exact BM25 that reads fewer postings"):
-- the same top k as an exact scan, reading the postings of the frequent lexemes only for chunks
-- that can still reach it. A floor theta under the k-th best score (step 1) and each lexeme's
-- bound (step 2) split the lexemes into essential ones, whose chunks are the only candidates,
-- and the others, added to the candidates one lexeme at a time (steps 3 to 5). The steps pass
-- ids for "chunk_id = any (...)" sorted: an index scan sorts the array itself, which takes far
-- longer when it is not (tens of milliseconds for 44,000 ids at 100k chunks).

create or replace function pgrag.bm25_maxscore_floor(
    tenant text,
    lexemes text[],
    idf double precision[],
    df double precision[],
    saturation double precision,
    saturation_per_token double precision,
    match_count integer
)
returns double precision
language plpgsql
stable
security invoker
set search_path = pg_catalog, pg_temp
set plan_cache_mode = force_custom_plan
as $$
declare
    v_postings double precision;
    v_rare integer := 1;
    v_rare_postings double precision := df[1];
    v_candidates bigint[];
begin
    -- Arguments (this file's header).
    if pg_catalog.cardinality(lexemes) > 64 or pg_catalog.cardinality(idf) > 64
       or pg_catalog.cardinality(df) > 64 then
        perform pgrag.check_length('lexemes', pg_catalog.cardinality(lexemes), 64),
                pgrag.check_length('idf', pg_catalog.cardinality(idf), 64),
                pgrag.check_length('df', pg_catalog.cardinality(df), 64);
    end if;
    if not coalesce(-1e6 <= all (idf) and 1e6 >= all (idf), idf is null)
       or not coalesce(0 <= all (df) and 1e15 >= all (df), df is null) then
        raise exception 'idf must hold numbers from -1000000 to 1000000 and df from 0 to 1e15, without nulls'
            using errcode = '22023';
    end if;
    if not coalesce(saturation between 0 and 10 and saturation_per_token between 0 and 1e12
                    and match_count between 1 and 2000, false) then
        raise exception 'saturation must be 0 to 10, saturation_per_token 0 to 1e12 and match_count 1 to 2000 (got %, %, %)',
            saturation, saturation_per_token, match_count using errcode = '22023';
    end if;
    v_postings := (select pg_catalog.sum(x) from pg_catalog.unnest(df) as x);
    -- The rarest lexemes whose postings stay within 5,000 and a quarter of all (at least one).
    while v_rare < pg_catalog.cardinality(lexemes)
          and v_rare_postings + df[v_rare + 1] <= least(5000, 0.25 * v_postings) loop
        v_rare := v_rare + 1;
        v_rare_postings := v_rare_postings + df[v_rare];
    end loop;
    if v_rare >= pg_catalog.cardinality(lexemes) then
        return null;
    end if;
    -- The 2 k best chunks by those lexemes, scored in full: the k-th best of any real scores
    -- bounds the k-th best of all from below.
    select /* pgrag:maxscore_floor_candidates */ pg_catalog.array_agg(r.chunk_id order by r.chunk_id)
    into v_candidates
    from (
        select p.chunk_id
        from rows from (pg_catalog.unnest(lexemes[1 : v_rare]), pg_catalog.unnest(idf[1 : v_rare])) as t(lexeme, idf)
        cross join lateral (
            select p.chunk_id, p.tf, p.doc_len
            from pgrag.bm25_postings as p
            where p.tenant_id = tenant and p.lexeme = t.lexeme
            offset 0
        ) as p
        group by p.chunk_id
        order by pg_catalog.sum(t.idf * p.tf / (p.tf + saturation + saturation_per_token * p.doc_len)) desc, p.chunk_id
        limit 2 * match_count
    ) as r;
    if coalesce(pg_catalog.cardinality(v_candidates), 0) < match_count then
        return null;
    end if;
    return (
        select /* pgrag:maxscore_floor */ pg_catalog.min(r.score)
        from (
            select pg_catalog.sum(t.idf * p.tf / (p.tf + saturation + saturation_per_token * p.doc_len)) as score
            from rows from (pg_catalog.unnest(lexemes), pg_catalog.unnest(idf)) as t(lexeme, idf)
            cross join lateral (
                select p.chunk_id, p.tf, p.doc_len
                from pgrag.bm25_postings as p
                where p.tenant_id = tenant and p.lexeme = t.lexeme
                  and p.chunk_id = any (v_candidates)
                offset 0
            ) as p
            group by p.chunk_id
            order by 1 desc
            limit match_count
        ) as r);
end
$$;
comment on function pgrag.bm25_maxscore_floor(text, text[], double precision[], double precision[], double precision, double precision, integer) is
'MaxScore, step 1: a floor theta under the match_count-th best BM25 score of the tenant''s chunks (lexemes rarest first, as pgrag.bm25_terms gives them): the 2 match_count best chunks by the rarest lexemes (their postings within 5,000 and a quarter of all, at least one), scored in full, their match_count-th best score. Null when the rare lexemes are all of them or find fewer than match_count chunks. Planned at every call.';

create or replace function pgrag.bm25_maxscore_essential(
    lexemes text[],
    idf double precision[],
    df double precision[],
    max_tf integer[],
    min_doc_len integer[],
    k1 double precision,
    saturation double precision,
    saturation_per_token double precision,
    theta double precision,
    out bounds double precision[],
    out other_order integer[],
    out other_bound double precision,
    out essential_lexemes text[],
    out essential_idf double precision[],
    out other_lexemes text[],
    out other_idf double precision[],
    out pays boolean
)
language plpgsql
immutable
security invoker
parallel safe
set search_path = pg_catalog, pg_temp
as $$
declare
    v_others bigint[];
begin
    -- Arguments (this file's header).
    if pg_catalog.cardinality(lexemes) > 64 or pg_catalog.cardinality(idf) > 64
       or pg_catalog.cardinality(df) > 64 or pg_catalog.cardinality(max_tf) > 64
       or pg_catalog.cardinality(min_doc_len) > 64 then
        perform pgrag.check_length('lexemes', pg_catalog.cardinality(lexemes), 64),
                pgrag.check_length('idf', pg_catalog.cardinality(idf), 64),
                pgrag.check_length('df', pg_catalog.cardinality(df), 64),
                pgrag.check_length('max_tf', pg_catalog.cardinality(max_tf), 64),
                pgrag.check_length('min_doc_len', pg_catalog.cardinality(min_doc_len), 64);
    end if;
    if not coalesce(-1e6 <= all (idf) and 1e6 >= all (idf), idf is null)
       or not coalesce(0 <= all (df) and 1e15 >= all (df), df is null) then
        raise exception 'idf must hold numbers from -1000000 to 1000000 and df from 0 to 1e15, without nulls'
            using errcode = '22023';
    end if;
    if not coalesce(1 <= all (max_tf), true) or not coalesce(0 <= all (min_doc_len), true) then
        raise exception 'max_tf must hold numbers of at least 1 and min_doc_len of at least 0 (or nulls)'
            using errcode = '22023';
    end if;
    if not coalesce(k1 between 0 and 10 and saturation between 0 and 10
                    and saturation_per_token between 0 and 1e12
                    and (theta is null or theta between -1e6 and 1e6), false) then
        raise exception 'k1 must be 0 to 10, saturation 0 to 10, saturation_per_token 0 to 1e12 and theta -1000000 to 1000000 or null (got %, %, %, %)',
            k1, saturation, saturation_per_token, theta using errcode = '22023';
    end if;
    -- A lexeme adds at most its bound to a chunk's score: idf times the term part of its
    -- largest tf in its shortest chunk (the part grows with tf and shrinks with length), or idf
    -- alone when the bounds are unknown (the part is below 1).
    select pg_catalog.array_agg(u.idf * coalesce(u.tf::double precision / (u.tf + saturation + saturation_per_token * u.dl), 1)
                                order by u.i)
    into bounds
    from rows from (pg_catalog.unnest(idf), pg_catalog.unnest(max_tf), pg_catalog.unnest(min_doc_len))
         with ordinality as u(idf, tf, dl, i);
    -- The lexemes of smallest bound whose bounds sum below theta cannot lift a chunk holding
    -- none of the others to theta: only chunks holding an essential lexeme (one of the others)
    -- can be in the top k.
    if theta is not null then
        select pg_catalog.array_agg(r.i), pg_catalog.max(r.run)
        into v_others, other_bound
        from (
            select u.i, pg_catalog.sum(u.ub) over (order by u.ub, u.i) as run
            from pg_catalog.unnest(bounds) with ordinality as u(ub, i)
        ) as r
        where r.run * (1 + 1e-9) < theta;
    end if;
    -- Worth it only when the essential lexemes hold at most half the postings, and when few of
    -- their chunks stay candidates (step 3): a chunk holding an essential lexeme once, at the
    -- average length, has the partial score idf / (1 + k1); where that reaches the gap theta -
    -- other_bound, most of that lexeme's chunks stay, and when those hold more than a quarter of
    -- the postings the candidates are too many: steps 4 and 5 would cost about what the full
    -- scan does (measured on both corpora of benchmarks/latency.py, a tenth to a half: a quarter
    -- did best; docs/benchmarks.md).
    select pg_catalog.array_agg(u.lexeme order by u.i) filter (where not u.other),
           pg_catalog.array_agg(u.idf order by u.i) filter (where not u.other),
           pg_catalog.array_agg(u.lexeme order by u.i) filter (where u.other),
           pg_catalog.array_agg(u.idf order by u.i) filter (where u.other),
           pg_catalog.sum(u.df) filter (where not u.other) <= 0.5 * pg_catalog.sum(u.df)
           and coalesce(pg_catalog.sum(u.df) filter (where not u.other and u.idf / (1 + k1) >= theta - other_bound), 0)
               <= 0.25 * pg_catalog.sum(u.df)
    into essential_lexemes, essential_idf, other_lexemes, other_idf, pays
    from (
        select l.lexeme, l.idf, l.df, l.i, coalesce(l.i = any (v_others), false) as other
        from rows from (pg_catalog.unnest(lexemes), pg_catalog.unnest(idf), pg_catalog.unnest(df))
             with ordinality as l(lexeme, idf, df, i)
    ) as u;
    -- The other lexemes' order in steps 4 and 5: largest bound first.
    select pg_catalog.array_agg(u.i::integer order by bounds[u.i::integer] desc, u.i) into other_order
    from pg_catalog.unnest(v_others) as u(i);
end
$$;
comment on function pgrag.bm25_maxscore_essential(text[], double precision[], double precision[], integer[], integer[], double precision, double precision, double precision, double precision) is
'MaxScore, step 2, from the lexemes'' statistics (rarest first) and the floor theta: bounds (each lexeme''s largest possible addition to a score), the other (non-essential) lexemes, those of smallest bound whose bounds sum (other_bound) stays below theta, as other_lexemes and other_idf (rarest first) and other_order (their positions, largest bound first), the essential ones as essential_lexemes and essential_idf, and pays: whether pruning should read fewer postings than the exact scan. No other lexemes when theta is null. Reads no table.';

create or replace function pgrag.bm25_maxscore_candidates(
    tenant text,
    essential_lexemes text[],
    essential_idf double precision[],
    other_lexemes text[],
    other_idf double precision[],
    first_lexeme text,
    first_idf double precision,
    first_rest double precision,
    other_bound double precision,
    theta double precision,
    saturation double precision,
    saturation_per_token double precision,
    match_count integer,
    out chunk_ids bigint[],
    out partial_scores double precision[],
    out raised_theta double precision
)
language plpgsql
stable
security invoker
set search_path = pg_catalog, pg_temp
set plan_cache_mode = force_custom_plan
as $$
begin
    -- Arguments (this file's header).
    if pg_catalog.cardinality(essential_lexemes) > 64 or pg_catalog.cardinality(essential_idf) > 64
       or pg_catalog.cardinality(other_lexemes) > 64 or pg_catalog.cardinality(other_idf) > 64 then
        perform pgrag.check_length('essential_lexemes', pg_catalog.cardinality(essential_lexemes), 64),
                pgrag.check_length('essential_idf', pg_catalog.cardinality(essential_idf), 64),
                pgrag.check_length('other_lexemes', pg_catalog.cardinality(other_lexemes), 64),
                pgrag.check_length('other_idf', pg_catalog.cardinality(other_idf), 64);
    end if;
    if not coalesce(-1e6 <= all (essential_idf) and 1e6 >= all (essential_idf), essential_idf is null)
       or not coalesce(-1e6 <= all (other_idf) and 1e6 >= all (other_idf), other_idf is null) then
        raise exception 'essential_idf and other_idf must hold numbers from -1000000 to 1000000, without nulls'
            using errcode = '22023';
    end if;
    perform pgrag.check_argument('first_idf', first_idf, -1e6, 1e6),
            pgrag.check_argument('first_rest', first_rest, -1e6, 1e6),
            pgrag.check_argument('other_bound', other_bound, -1e6, 1e6),
            pgrag.check_argument('theta', theta, -1e6, 1e6);
    if not coalesce(saturation between 0 and 10 and saturation_per_token between 0 and 1e12
                    and match_count between 1 and 2000, false) then
        raise exception 'saturation must be 0 to 10, saturation_per_token 0 to 1e12 and match_count 1 to 2000 (got %, %, %)',
            saturation, saturation_per_token, match_count using errcode = '22023';
    end if;
    -- One statement, the candidates passed between the steps as rows, not arrays:
    -- 3. chunks holding an essential lexeme, their partial score, kept when it plus the other
    --    lexemes' bound can reach theta (c);
    -- 4. a higher theta: when they are more than 4 k, the 4 k best of them by partial score,
    --    scored in full (one index scan per other lexeme), their k-th best score (the other
    --    lexemes often add much to a chunk's partial score: more than the k best partial scores
    --    come closer to the real k-th best) (h); then only the candidates that can still reach
    --    it (f);
    -- 5, first lexeme: the other lexeme of largest bound added (first_rest: the bounds of those
    --    after it).
    with /* pgrag:maxscore_candidates */ c as materialized (
        select p.chunk_id, pg_catalog.sum(t.idf * p.tf / (p.tf + saturation + saturation_per_token * p.doc_len)) as part
        from rows from (pg_catalog.unnest(essential_lexemes), pg_catalog.unnest(essential_idf)) as t(lexeme, idf)
        cross join lateral (
            select p.chunk_id, p.tf, p.doc_len
            from pgrag.bm25_postings as p
            where p.tenant_id = tenant and p.lexeme = t.lexeme
            offset 0
        ) as p
        group by p.chunk_id
        having (pg_catalog.sum(t.idf * p.tf / (p.tf + saturation + saturation_per_token * p.doc_len)) + other_bound) * (1 + 1e-9) >= theta
    ), b as materialized (
        select c.chunk_id, c.part
        from c
        where (select pg_catalog.count(*) from (select from c limit 4 * match_count + 1) as x) > 4 * match_count
        order by c.part desc, c.chunk_id
        limit 4 * match_count
    ), h as materialized (
        select coalesce(pg_catalog.max(greatest(theta, r.score)), theta) as theta
        from (
            select b.part + coalesce(o.s, 0) as score
            from b
            left join (
                select p.chunk_id, pg_catalog.sum(t.idf * p.tf / (p.tf + saturation + saturation_per_token * p.doc_len)) as s
                from rows from (pg_catalog.unnest(other_lexemes), pg_catalog.unnest(other_idf)) as t(lexeme, idf)
                cross join lateral (
                    select p.chunk_id, p.tf, p.doc_len
                    from pgrag.bm25_postings as p
                    where p.tenant_id = tenant and p.lexeme = t.lexeme
                      and p.chunk_id = any (array(select b.chunk_id from b order by b.chunk_id))
                    offset 0
                ) as p
                group by p.chunk_id
            ) as o on o.chunk_id = b.chunk_id
            order by 1 desc
            offset match_count - 1
            limit 1
        ) as r
    ), f as materialized (
        select c.chunk_id, c.part
        from c
        where (c.part + other_bound) * (1 + 1e-9) >= (select h.theta from h)
    )
    select pg_catalog.array_agg(f.chunk_id order by f.chunk_id),
           pg_catalog.array_agg(f.part + coalesce(o.s, 0) order by f.chunk_id),
           (select h.theta from h)
    into chunk_ids, partial_scores, raised_theta
    from f
    left join (
        select p.chunk_id, first_idf * p.tf / (p.tf + saturation + saturation_per_token * p.doc_len) as s
        from pgrag.bm25_postings as p
        where p.tenant_id = tenant and p.lexeme = first_lexeme
          and p.chunk_id = any (array(select f.chunk_id from f order by f.chunk_id))
    ) as o on o.chunk_id = f.chunk_id
    where (f.part + coalesce(o.s, 0) + first_rest) * (1 + 1e-9) >= (select h.theta from h);
end
$$;
comment on function pgrag.bm25_maxscore_candidates(text, text[], double precision[], text[], double precision[], text, double precision, double precision, double precision, double precision, double precision, double precision, integer) is
'MaxScore, steps 3, 4 and the first lexeme of step 5: the tenant''s chunks holding an essential lexeme whose partial score plus other_bound can reach theta; theta raised to the match_count-th best full score of the 4 match_count best of them (raised_theta); the candidates that can still reach it with first_lexeme''s score added (first_rest: the bounds of the other lexemes after it) as chunk_ids (ascending) and partial_scores. Planned at every call.';

create or replace function pgrag.bm25_maxscore_complete(
    tenant text,
    lexemes text[],
    idf double precision[],
    bounds double precision[],
    other_order integer[],
    candidates bigint[],
    partial_scores double precision[],
    theta double precision,
    saturation double precision,
    saturation_per_token double precision,
    match_count integer,
    walk_may_drop boolean,
    out tenant_ids text[],
    out chunk_ids bigint[],
    out scores double precision[]
)
language plpgsql
stable
security invoker
set search_path = pg_catalog, pg_temp
set plan_cache_mode = force_custom_plan
as $$
declare
    v_ids bigint[] := candidates;
    v_parts double precision[] := partial_scores;
    v_rest double precision;
    -- With phrases or exclusions, whose check in the walk may drop some of the top k, every
    -- candidate scoring v_cut or more: every chunk left out scores below theta / (1 + 1e-9),
    -- rounded below v_cut, so these are the start of the full ranking, whatever the walk drops.
    v_cut double precision := case when walk_may_drop then theta / (1 + 1e-9) + 1e-9 end;
begin
    -- Arguments (this file's header); candidates and partial_scores as many as step 3 keeps.
    if pg_catalog.cardinality(lexemes) > 64 or pg_catalog.cardinality(idf) > 64
       or pg_catalog.cardinality(bounds) > 64 or pg_catalog.cardinality(other_order) > 64 then
        perform pgrag.check_length('lexemes', pg_catalog.cardinality(lexemes), 64),
                pgrag.check_length('idf', pg_catalog.cardinality(idf), 64),
                pgrag.check_length('bounds', pg_catalog.cardinality(bounds), 64),
                pgrag.check_length('other_order', pg_catalog.cardinality(other_order), 64);
    end if;
    -- (each message starts with the argument it names: one failing check, one argument)
    if not coalesce(-1e6 <= all (idf) and 1e6 >= all (idf), idf is null) then
        raise exception 'idf must hold numbers from -1000000 to 1000000, without nulls'
            using errcode = '22023';
    elsif not coalesce(-1e6 <= all (bounds) and 1e6 >= all (bounds), bounds is null) then
        raise exception 'bounds must hold numbers from -1000000 to 1000000, without nulls'
            using errcode = '22023';
    elsif not coalesce(-1e6 <= all (partial_scores) and 1e6 >= all (partial_scores), partial_scores is null) then
        raise exception 'partial_scores must hold numbers from -1000000 to 1000000, without nulls'
            using errcode = '22023';
    end if;
    if not coalesce(coalesce(theta between -1e6 and 1e6, theta is null)
                    and saturation between 0 and 10 and saturation_per_token between 0 and 1e12
                    and match_count between 1 and 2000, false) then
        raise exception 'theta must be -1000000 to 1000000 or null, saturation 0 to 10, saturation_per_token 0 to 1e12 and match_count 1 to 2000 (got %, %, %, %)',
            theta, saturation, saturation_per_token, match_count using errcode = '22023';
    end if;
    -- 5. The other lexemes after the first one at a time, largest bound first, each by one index
    --    scan over the candidates left (primary-key probes in chunk_id order); after each, only
    --    the candidates whose score so far plus the bounds of the lexemes still to add can reach
    --    theta stay (a chunk lacking a lexeme of large bound seldom does).
    for v_i in 2 .. coalesce(pg_catalog.cardinality(other_order), 0) loop
        exit when coalesce(pg_catalog.cardinality(v_ids), 0) = 0;
        select coalesce(pg_catalog.sum(bounds[x.i]), 0) into v_rest
        from pg_catalog.unnest(other_order[v_i + 1 :]) as x(i);
        select /* pgrag:maxscore_add_lexeme */ pg_catalog.array_agg(c.chunk_id order by c.chunk_id),
               pg_catalog.array_agg(c.part + coalesce(o.s, 0) order by c.chunk_id)
        into v_ids, v_parts
        from rows from (pg_catalog.unnest(v_ids), pg_catalog.unnest(v_parts)) as c(chunk_id, part)
        left join (
            select p.chunk_id, idf[other_order[v_i]] * p.tf / (p.tf + saturation + saturation_per_token * p.doc_len) as s
            from pgrag.bm25_postings as p
            where p.tenant_id = tenant and p.lexeme = lexemes[other_order[v_i]] and p.chunk_id = any (v_ids)
        ) as o on o.chunk_id = c.chunk_id
        where (c.part + coalesce(o.s, 0) + v_rest) * (1 + 1e-9) >= theta;
    end loop;
    -- Then the exact top k: every chunk left out scores below theta, at most the k-th best.
    select pg_catalog.array_agg(tenant order by r.score desc, r.chunk_id),
           pg_catalog.array_agg(r.chunk_id order by r.score desc, r.chunk_id),
           pg_catalog.array_agg(r.score order by r.score desc, r.chunk_id)
    into tenant_ids, chunk_ids, scores
    from (
        select c.chunk_id, pg_catalog.round(c.part * 1e9::double precision) / 1e9::double precision as score
        from rows from (pg_catalog.unnest(v_ids), pg_catalog.unnest(v_parts)) as c(chunk_id, part)
        order by 2 desc, 1
        limit case when v_cut is null then match_count else greatest(4 * match_count, 200) end
    ) as r
    where v_cut is null or r.score >= v_cut;
end
$$;
comment on function pgrag.bm25_maxscore_complete(text, text[], double precision[], double precision[], integer[], bigint[], double precision[], double precision, double precision, double precision, integer, boolean) is
'MaxScore, step 5: the candidates'' full scores, adding the other lexemes after the first (other_order: positions in lexemes, largest bound first) one at a time and keeping only candidates that can still reach theta; then the ranking (tenant_ids, chunk_ids, scores rounded to 1e-9, best first): the top match_count, or with walk_may_drop (phrases or exclusions, which the walk checks) every candidate proved to rank above every chunk left out, at most greatest(4 match_count, 200). Planned at every call.';
