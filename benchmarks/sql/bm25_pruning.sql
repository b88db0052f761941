-- Experimental BM25 top-k strategies measured by benchmarks/bm25_pruning.py (not installed by
-- pgrag). They read less than every posting of every query lexeme, then compute exact BM25
-- scores (the same formula as pgrag.keyword_candidates) for a bounded set of candidates. The
-- impact and rare strategies may miss some of the true top k; maxscore proves it found them
-- (or falls back to the exact scan).
--
-- impact: an expression index orders each posting list by a per-posting impact, the BM25 term
-- part with k1 1.5, b 0.75 and a reference length of 100 tokens.

create schema if not exists pgrag_bench;

create index if not exists bm25_postings_impact on pgrag.bm25_postings (
    tenant_id, lexeme,
    ((tf::float8 / (tf::float8 + 0.375::float8 + 0.01125::float8 * doc_len::float8))::real) desc
) include (chunk_id, tf, doc_len);

-- Exact BM25 scores (summed in lexeme order, as the exact arm) of the given chunks, best top_n.
create or replace function pgrag_bench.exact_top(
    tenant text, lexemes text[], idfs double precision[],
    k1 double precision, b double precision, avgdl double precision,
    chunk_ids bigint[], top_n integer
)
returns table (chunk_id bigint, score double precision)
language sql stable
as $$
    select c.chunk_id,
           (select sum(t.idf * p.tf / (p.tf + k1 * (1 - b + b * p.doc_len / avgdl)) order by t.ord)
            from rows from (unnest(lexemes), unnest(idfs)) with ordinality as t(lexeme, idf, ord)
            cross join lateral (
                select p.tf, p.doc_len from pgrag.bm25_postings as p
                where p.tenant_id = tenant and p.lexeme = t.lexeme and p.chunk_id = c.chunk_id) as p) as score
    from unnest(chunk_ids) as c(chunk_id)
    order by 2 desc, 1 limit top_n
$$;

-- Score-at-a-time: the m highest-impact postings of each lexeme; the 4 x top_n chunks with the
-- best partial sums are completed by primary-key probes and ranked by their exact scores.
create or replace function pgrag_bench.top_by_impact(
    tenant text, lexemes text[], idfs double precision[], dfs double precision[],
    k1 double precision, b double precision, avgdl double precision, top_n integer, m integer
)
returns table (chunk_id bigint, score double precision)
language sql stable
as $$
    with terms as materialized (
        select t.ord::integer as ord, t.lexeme, t.idf
        from rows from (unnest(lexemes), unnest(idfs)) with ordinality as t(lexeme, idf, ord)
    ),
    lists as materialized (
        select t.ord, p.chunk_id, t.idf * p.tf / (p.tf + k1 * (1 - b + b * p.doc_len / avgdl)) as contrib
        from terms as t
        cross join lateral (
            select p.chunk_id, p.tf, p.doc_len from pgrag.bm25_postings as p
            where p.tenant_id = tenant and p.lexeme = t.lexeme
            order by (p.tf::float8 / (p.tf::float8 + 0.375::float8 + 0.01125::float8 * p.doc_len::float8))::real desc
            limit m
        ) as p
    ),
    seeds as materialized (
        select l.chunk_id from lists as l group by l.chunk_id
        order by sum(l.contrib) desc, l.chunk_id limit 4 * top_n
    )
    select e.* from pgrag_bench.exact_top(
        tenant, lexemes, idfs, k1, b, avgdl, (select array_agg(s.chunk_id) from seeds as s), top_n) as e
$$;

-- Rare terms first (MaxScore-like, with a budget): every posting of the rarest lexemes while
-- their postings fit the budget (at least one lexeme); the complete_n chunks with the best
-- partial sums are completed by probes for the other lexemes and ranked by exact scores.
create or replace function pgrag_bench.top_by_rare_terms(
    tenant text, lexemes text[], idfs double precision[], dfs double precision[],
    k1 double precision, b double precision, avgdl double precision, top_n integer,
    budget integer, complete_n integer
)
returns table (chunk_id bigint, score double precision)
language sql stable
as $$
    with terms as materialized (
        select t.ord::integer as ord, t.lexeme, t.idf,
               (sum(t.df) over (order by t.df, t.ord) <= budget
                or row_number() over (order by t.df, t.ord) = 1) as essential
        from rows from (unnest(lexemes), unnest(idfs), unnest(dfs)) with ordinality as t(lexeme, idf, df, ord)
    ),
    cand as materialized (
        select p.chunk_id
        from terms as e
        cross join lateral (
            select p.chunk_id, p.tf, p.doc_len from pgrag.bm25_postings as p
            where p.tenant_id = tenant and p.lexeme = e.lexeme) as p
        where e.essential
        group by p.chunk_id
        order by sum(e.idf * p.tf / (p.tf + k1 * (1 - b + b * p.doc_len / avgdl))) desc, p.chunk_id
        limit greatest(complete_n, top_n)
    )
    select e.* from pgrag_bench.exact_top(
        tenant, lexemes, idfs, k1, b, avgdl, (select array_agg(c.chunk_id) from cand as c), top_n) as e
$$;

-- Each lexeme's largest term part (k1 1.5, b 0.75, the tenant's average length when this file
-- runs): the bound MaxScore needs. A real implementation would keep it with the lexicon.
create table if not exists pgrag_bench.max_impact as
select p.tenant_id, p.lexeme,
       max(p.tf / (p.tf + 1.5 * (1 - 0.75 + 0.75 * p.doc_len / s.avgdl))) as impact
from pgrag.bm25_postings as p
join (select c.tenant_id, sum(c.token_count)::float8 / sum(c.chunk_count) as avgdl
      from pgrag.corpus_stats as c group by c.tenant_id) as s on s.tenant_id = p.tenant_id
group by p.tenant_id, p.lexeme;
create unique index if not exists max_impact_key on pgrag_bench.max_impact (tenant_id, lexeme);

-- Exact MaxScore: partial sums over the rarest lexemes (postings within the budget, at least one
-- lexeme), then the other lexemes one at a time, largest bound first, each probed (primary key,
-- chunk_id = any(...)) only for the chunks whose partial sum plus the bounds still to come can
-- reach the k-th best partial sum. The result is exact when at least top_n chunks were
-- completed and the k-th score exceeds the sum of the skipped lexemes' bounds (a chunk without
-- any rare lexeme cannot score more); otherwise the exact scan answers. With max_candidates,
-- the exact scan answers at once when the first lexeme to probe has more candidates than that.
drop function if exists pgrag_bench.top_by_maxscore(
    text, text[], double precision[], double precision[], double precision, double precision,
    double precision, integer, integer);
create or replace function pgrag_bench.top_by_maxscore(
    tenant text, lexemes text[], idfs double precision[], dfs double precision[],
    k1 double precision, b double precision, avgdl double precision, top_n integer, budget integer,
    max_candidates integer default null
)
returns table (chunk_id bigint, score double precision)
language plpgsql stable
set plan_cache_mode = force_custom_plan
as $$
declare
    v_ess text[];
    v_ess_idf double precision[];
    v_non text[];
    v_non_idf double precision[];
    v_non_ub double precision[];
    v_ids bigint[];
    v_part double precision[];
    v_rest double precision;
    v_kth double precision;
begin
    select array_agg(t.lexeme order by t.df, t.ord) filter (where t.essential),
           array_agg(t.idf order by t.df, t.ord) filter (where t.essential),
           array_agg(t.lexeme order by t.ub desc, t.ord) filter (where not t.essential),
           array_agg(t.idf order by t.ub desc, t.ord) filter (where not t.essential),
           array_agg(t.ub order by t.ub desc, t.ord) filter (where not t.essential)
    into v_ess, v_ess_idf, v_non, v_non_idf, v_non_ub
    from (
        select t.*,
               (sum(t.df) over (order by t.df, t.ord) <= budget
                or row_number() over (order by t.df, t.ord) = 1) as essential,
               t.idf * coalesce((select m.impact from pgrag_bench.max_impact as m
                                 where m.tenant_id = tenant and m.lexeme = t.lexeme), 1) + 1e-9 as ub
        from rows from (unnest(lexemes), unnest(idfs), unnest(dfs)) with ordinality as t(lexeme, idf, df, ord)
    ) as t;

    select array_agg(x.chunk_id order by x.s desc, x.chunk_id), array_agg(x.s order by x.s desc, x.chunk_id)
    into v_ids, v_part
    from (
        select p.chunk_id, sum(e.idf * p.tf / (p.tf + k1 * (1 - b + b * p.doc_len / avgdl))) as s
        from rows from (unnest(v_ess), unnest(v_ess_idf)) as e(lexeme, idf)
        join pgrag.bm25_postings as p on p.tenant_id = tenant and p.lexeme = e.lexeme
        group by p.chunk_id
    ) as x;

    for j in 1 .. coalesce(cardinality(v_non), 0) loop
        select sum(u) into v_rest from unnest(v_non_ub[j:]) as u;
        v_kth := v_part[least(top_n, cardinality(v_part))];
        if j = 1 and max_candidates is not null
           and (select count(*) from unnest(v_part) as u(s) where u.s + v_rest >= v_kth) > max_candidates then
            v_ids := null;
            exit;
        end if;
        with c as materialized (
            select u.id, u.s from unnest(v_ids, v_part) as u(id, s) where u.s + v_rest >= v_kth
        ),
        h as (
            select p.chunk_id, v_non_idf[j] * p.tf / (p.tf + k1 * (1 - b + b * p.doc_len / avgdl)) as s
            from pgrag.bm25_postings as p
            where p.tenant_id = tenant and p.lexeme = v_non[j]
              and p.chunk_id = any (array(select c.id from c))
        )
        select array_agg(c.id order by c.s + coalesce(h.s, 0) desc, c.id),
               array_agg(c.s + coalesce(h.s, 0) order by c.s + coalesce(h.s, 0) desc, c.id)
        into v_ids, v_part
        from c left join h on h.chunk_id = c.id;
    end loop;

    select coalesce(sum(u), 0) into v_rest from unnest(v_non_ub) as u;
    if coalesce(cardinality(v_ids), 0) >= top_n and v_part[top_n] > v_rest
       or coalesce(cardinality(v_non), 0) = 0 then
        return query select u.id, u.s from unnest(v_ids[1:top_n], v_part[1:top_n]) as u(id, s);
        return;
    end if;
    return query
    select p.chunk_id, sum(t.idf * p.tf / (p.tf + k1 * (1 - b + b * p.doc_len / avgdl)))
    from rows from (unnest(lexemes), unnest(idfs)) as t(lexeme, idf)
    join pgrag.bm25_postings as p on p.tenant_id = tenant and p.lexeme = t.lexeme
    group by p.chunk_id
    order by 2 desc, 1
    limit top_n;
end
$$;

-- One query with pgrag's statistics (tenant, k1 1.5, b 0.75, English): strategy 'impact' (param
-- m), 'rare' (param budget; 200 chunks completed), 'maxscore' (param budget) or 'maxscore-bail'
-- (param budget; exact scan when more than 2,000 chunks would be probed first). Two floors of
-- any evaluation that visits every posting of every query lexeme: 'read' only counts those
-- postings (one row: chunk_id 0, score = the count); 'group' also groups them by chunk (the
-- count per chunk as score, best top_n), without the BM25 formula.
create or replace function pgrag_bench.keyword(
    query_text text, top_n integer, strategy text, param integer, tenant text default 't0'
)
returns table (chunk_id bigint, score double precision)
language plpgsql stable
as $$
declare
    v_n double precision;
    v_total double precision;
    v_lex text[];
    v_idf double precision[];
    v_df double precision[];
begin
    select sum(s.chunk_count), sum(s.token_count) into v_n, v_total
    from pgrag.corpus_stats as s where s.tenant_id = tenant;
    select array_agg(d.lexeme), array_agg(ln(1 + (v_n - d.df + 0.5) / (d.df + 0.5))), array_agg(d.df)
    into v_lex, v_idf, v_df
    from (select l.lexeme,
                 (select sum(x.df) from pgrag.bm25_lexicon as x
                  where x.tenant_id = tenant and x.lexeme = l.lexeme)::float8 as df
          from unnest((select q.lexemes from pgrag.keyword_query(query_text, 'english') as q)) as l(lexeme)) as d
    where d.df > 0;
    if strategy = 'read' then
        return query
        select 0::bigint, count(*)::float8
        from unnest(v_lex) as l(lexeme)
        join pgrag.bm25_postings as p on p.tenant_id = tenant and p.lexeme = l.lexeme;
    elsif strategy = 'group' then
        return query
        select p.chunk_id, count(*)::float8
        from unnest(v_lex) as l(lexeme)
        join pgrag.bm25_postings as p on p.tenant_id = tenant and p.lexeme = l.lexeme
        group by p.chunk_id
        order by 2 desc, 1
        limit top_n;
    elsif strategy = 'maxscore' then
        return query select * from pgrag_bench.top_by_maxscore(tenant, v_lex, v_idf, v_df, 1.5, 0.75, v_total / v_n, top_n, param);
    elsif strategy = 'maxscore-bail' then
        return query select * from pgrag_bench.top_by_maxscore(tenant, v_lex, v_idf, v_df, 1.5, 0.75, v_total / v_n, top_n, param, 2000);
    elsif strategy = 'impact' then
        return query select * from pgrag_bench.top_by_impact(tenant, v_lex, v_idf, v_df, 1.5, 0.75, v_total / v_n, top_n, param);
    else
        return query select * from pgrag_bench.top_by_rare_terms(tenant, v_lex, v_idf, v_df, 1.5, 0.75, v_total / v_n, top_n, param, 200);
    end if;
end
$$;
