-- Experimental BM25 top-k strategies measured by benchmarks/bm25_pruning.py (not installed by
-- pgrag). Both read less than every posting of every query lexeme, then compute exact BM25
-- scores (the same formula as pgrag.keyword_candidates) for a bounded set of candidates, so the
-- rows they return carry exact scores but may miss some of the true top k.
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

-- One query with pgrag's statistics (tenant, k1 1.5, b 0.75, English): strategy 'impact' (param
-- m) or 'rare' (param budget; 200 chunks completed). Two floors of any exact evaluation, which
-- must visit every posting of every query lexeme: 'read' only counts those postings (one row:
-- chunk_id 0, score = the count); 'group' also groups them by chunk (the count per chunk as
-- score, best top_n), without the BM25 formula.
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
    elsif strategy = 'impact' then
        return query select * from pgrag_bench.top_by_impact(tenant, v_lex, v_idf, v_df, 1.5, 0.75, v_total / v_n, top_n, param);
    else
        return query select * from pgrag_bench.top_by_rare_terms(tenant, v_lex, v_idf, v_df, 1.5, 0.75, v_total / v_n, top_n, param, 200);
    end if;
end
$$;
