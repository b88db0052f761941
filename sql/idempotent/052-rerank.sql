-- Re-ranking inside the database: a candidate list re-ordered by a cross-encoder.
-- Contract. Provides: public.rerank (chunk ids in, the best top_n of them with the re-ranker's
--   scores out), pgrag.rerank_scores (one score per document text) and the argument check
--   pgrag.check_rerank_arguments; documented in docs/sql-api.md, "Re-ranking". The context of
--   re-ordered chunks, public.build_context_for, is the context builder's (028-context.sql).
--   pgrag.rerank_scores comes in one of two variants with the same signature, chosen as the
--   text functions' variant is (051-text-search.sql, setting pgrag.text_search_variant):
--     plpython  PL/Python (plpython3u) importing pgrag.plpython.server, which scores with the
--               package's own local re-ranker (pgrag.rerank.local: sentence-transformers'
--               CrossEncoder on the CPU, offline), the model named by PGRAG_RERANK_MODEL_PATH in the
--               server's environment and loaded once per backend (GD);
--     stub      PL/pgSQL raising SQLSTATE PR301 naming the alternative (re-rank on the client:
--               pgrag search --rerank, or any re-rank API).
-- Relies on: the argument checks (001-helpers.sql), pgrag.check_query_text and
--   pgrag.plpython_function_sql (051-text-search.sql),
--   pgrag.chunks and pgrag.documents under row level security. Callers: anon, authenticated and
--   service_role (910-function-privileges.sql). Read-only: runs on a read replica too.
--
-- Security: public.rerank is security invoker, so row level security decides which chunk ids
-- the caller may re-rank; an id the caller cannot see (another tenant's, a document not ready)
-- is left out as if it did not exist. The model comes from the server's environment, never from
-- an argument or a setting (a client can SET any custom setting).

set local search_path = pg_catalog, pg_temp;

create or replace function pgrag.check_rerank_arguments(
    query_text text,
    candidates integer,
    top_n integer
)
returns void
language plpgsql
immutable
parallel safe
security invoker
set search_path = pg_catalog, pg_temp
as $$
begin
    perform pgrag.check_query_text(query_text);
    if candidates is null then
        raise exception 'chunk_ids must not be null'
            using errcode = '22023',
                  hint = 'pgrag''s argument limits are listed in docs/security.md.';
    end if;
    perform pgrag.check_length('chunk_ids', candidates, 200);
    perform pgrag.check_argument('top_n', top_n, 1, 200);
end
$$;
comment on function pgrag.check_rerank_arguments(text, integer, integer) is
'Argument check of public.rerank and pgrag.rerank_scores: raises 22023 when query_text is null or longer than 10,000 characters, when there is no candidate list or more than 200 candidates (chunk_ids, or documents), or when top_n is outside 1-200.';

do $do$
declare
    v_variant text := coalesce(nullif(pg_catalog.current_setting('pgrag.text_search_variant', true), ''),
                               'stub');
begin
    if v_variant = 'plpython' and not exists (
        select from pg_catalog.pg_language as l where l.lanname operator(pg_catalog.=) 'plpython3u'
    ) then
        v_variant := 'stub';  -- 051-text-search.sql could not create it: stubs there too
    end if;
    if v_variant = 'plpython' then
        execute pgrag.plpython_function_sql(
            $sig$pgrag.rerank_scores(query_text text, documents text[])
returns double precision[]
stable$sig$,
            'rerank_scores(plpy, GD, query_text, documents)');
    else
        execute $stub$
create or replace function pgrag.rerank_scores(query_text text, documents text[])
returns double precision[]
language plpgsql
stable
security invoker
set search_path = pg_catalog, pg_temp
as $body$
begin
    raise exception 're-ranking in the database needs PL/Python, which this server does not have'
        using errcode = 'PR301',
              hint = 're-rank on the client: pgrag search --rerank local:MODEL (or a re-rank API URL) '
                     'takes hybrid_search''s candidates and re-orders them; docs/sql-api.md, "Re-ranking"';
end
$body$
$stub$;
    end if;
end
$do$;

comment on function pgrag.rerank_scores(text, text[]) is
'One relevance score per element of documents for query_text (same order; higher is more relevant), by the local cross-encoder named by PGRAG_RERANK_MODEL_PATH in the database server''s environment (pgrag.rerank.local, loaded once per backend). Arguments checked by pgrag.check_rerank_arguments first (22023); each document is cut to 20,000 characters (the model reads far less). SQLSTATE PR303 when no model is configured or it or its runtime is missing for the server''s Python, PR302 when the server''s Python cannot import pgrag. Stub variant (no PL/Python): raises PR301 naming the alternative.';

create or replace function public.rerank(
    query_text text,
    chunk_ids bigint[],
    top_n integer default 10
)
returns table (chunk_id bigint, rerank_score double precision, rerank_rank bigint, input_rank bigint)
language plpgsql
stable
security invoker
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    v_ids bigint[];
    v_texts text[];
    v_scores double precision[];
begin
    perform pgrag.check_rerank_arguments(query_text, pg_catalog.cardinality(chunk_ids), top_n);
    -- The candidates the caller may see (row level security), in the order given, each once.
    select pg_catalog.array_agg(v.id order by v.ord), pg_catalog.array_agg(v.content order by v.ord)
    into v_ids, v_texts
    from (
        select c.id, c.content, pg_catalog.min(u.ord) as ord
        from pg_catalog.unnest(chunk_ids) with ordinality as u(id, ord)
        join pgrag.chunks as c on c.id operator(pg_catalog.=) u.id
        join pgrag.documents as d on d.tenant_id operator(pg_catalog.=) c.tenant_id
                                 and d.id operator(pg_catalog.=) c.document_id
        where d.status operator(pg_catalog.=) 'ready'
        group by c.id, c.content
    ) as v;
    -- Called even without a candidate: a server that cannot re-rank says so every time.
    v_scores := pgrag.rerank_scores(query_text, coalesce(v_texts, '{}'));
    if v_ids is null then
        return;
    end if;
    return query
        select s.id, s.score, pg_catalog.row_number() over (order by s.score desc, s.ord),
               s.ord
        from rows from (pg_catalog.unnest(v_ids), pg_catalog.unnest(v_scores))
             with ordinality as s(id, score, ord)
        order by s.score desc, s.ord
        limit coalesce(top_n, 10);
end
$$;
comment on function public.rerank(text, bigint[], integer) is
'The best top_n of chunk_ids (e.g. the chunk_id column of hybrid_search''s top 50) re-ordered by a cross-encoder''s relevance to query_text: chunk_id, rerank_score (higher is more relevant), rerank_rank (1 = best; ties keep the order given) and input_rank (its position among the candidates the caller may see). Security invoker: ids the caller cannot see (row level security) or of documents not ready are left out. Needs PL/Python and a model in the server''s environment (pgrag.rerank_scores: PR301 on a server without PL/Python, PR303 without a model). Limits: query_text not null, at most 10,000 characters; chunk_ids not null, at most 200; top_n 1-200 (default 10); else SQLSTATE 22023.';
