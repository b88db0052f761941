-- Text in, results out: search and chunk with plain text from any SQL client.
-- Contract. Provides: pgrag.embed_query (a query's embedding: the query-embedding cache, else
--   pgrag.compute_query_embedding), public.hybrid_search_text (hybrid_search with the embedding
--   computed in the database), pgrag.chunk_text (pgrag's chunker), and their argument checks
--   pgrag.check_query_text and pgrag.check_chunk_arguments; documented in docs/sql-api.md.
--   Also pgrag.plpython_function_sql, the one statement every PL/Python function of the package
--   is created by (here and in 052-rerank.sql).
--   pgrag.compute_query_embedding and pgrag.chunk_text come in one of two variants with the
--   same signatures:
--     plpython  PL/Python (plpython3u) bodies that import the package's own code
--               (pgrag.plpython.server: the embedder and the chunker of
--               pgrag.pipeline.embedders and pgrag.pipeline.chunking), the model loaded once
--               per backend (GD);
--     stub      PL/pgSQL that raises SQLSTATE PR301 naming the alternatives (embedding on the
--               client with hybrid_search, or keyword_search): a server without PL/Python
--               (the embedded PostgreSQL, Supabase, most managed services) still answers a
--               query the cache holds, through pgrag.embed_query.
--   The install engine chooses (pgrag/install/migrator.py, TEXT_SEARCH_WANTED_SQL): plpython
--   when the server offers plpython3u and the installing role is a superuser (only a superuser may
--   create functions in an untrusted language), else stub; it passes the choice in the setting
--   pgrag.text_search_variant and re-applies this tier when the installed variant (the language
--   of pgrag.compute_query_embedding, read from the catalog) differs from the one the server
--   would get now, so a server that gains PL/Python switches on the next migrate.
-- Relies on: public.hybrid_search (027-api.sql), pgrag.cached_query_embedding
--   (050-query-cache.sql), the argument checks (001-helpers.sql). Callers: anon,
--   authenticated and service_role search (910-function-privileges.sql); chunk_text is for the
--   writers (authenticated, service_role). Everything here is read-only (pgrag.embed_query
--   reads the cache, nothing here writes it), so text search runs on a read replica too.
--
-- Security: PL/Python is untrusted (it runs as the server's OS user). The bodies import only
-- pgrag.plpython.server, found on the server's own sys.path (PYTHONPATH or site-packages of
-- the server's Python, set by the DBA, docs/install.md); no module path, file name or model
-- name comes from an argument or a setting (a client can SET any custom setting).

-- The migrator already resolves names in pg_catalog only; said again for psql and for pgspot.
set local search_path = pg_catalog, pg_temp;

create or replace function pgrag.plpython_function_sql(signature text, server_call text)
returns text
language sql
immutable
parallel safe
security invoker
set search_path = pg_catalog, pg_temp
as $template$
    -- Every PL/Python function of the package has this shape: hardened as the others, and a
    -- body that only imports pgrag.plpython.server and calls it (or, when the server's Python
    -- cannot import pgrag, raises PR302 saying how to install it).
    select pg_catalog.format($f$create or replace function %s
language plpython3u
security invoker
set search_path = pg_catalog, pg_temp
as $body$
try:
    from pgrag.plpython import server
except ImportError as exc:
    import sys
    plpy.error(
        "pgrag is not importable by PostgreSQL's Python %%s (%%s)" %% (sys.version.split()[0], exc),
        hint="ask the database operator to install pgrag for the server's Python %%d.%%d and put "
        "its site-packages on the server's PYTHONPATH (docs/install.md, \"Text search inside "
        "the database\")" %% (sys.version_info[0], sys.version_info[1]),
        sqlstate="PR302",
    )
return server.%s
$body$$f$, signature, server_call)
$template$;
comment on function pgrag.plpython_function_sql(text, text) is
'The CREATE FUNCTION statement of one of pgrag''s PL/Python functions (run at migrate time by 051-text-search.sql and 052-rerank.sql): signature (name, arguments, result and attributes such as stable or strict), language plpython3u, security invoker, search_path pg_catalog, pg_temp, and a body that imports pgrag.plpython.server (SQLSTATE PR302 with how to install it when the server''s Python cannot) and returns server.<server_call>.';

do $do$
declare
    v_variant text := coalesce(nullif(pg_catalog.current_setting('pgrag.text_search_variant', true), ''),
                               'stub');
begin
    if v_variant = 'plpython' then
        begin
            create extension if not exists plpython3u;
        exception when others then
            raise warning 'pgrag: PL/Python (plpython3u) could not be created (%): text search gets its stubs',
                sqlerrm;
            v_variant := 'stub';
        end;
    end if;

    if v_variant = 'plpython' then
        execute pgrag.plpython_function_sql(
            $sig$pgrag.compute_query_embedding(query_text text)
returns @extschema:vector@.vector
stable
strict$sig$,
            'compute_query_embedding(plpy, GD, query_text)');
        execute pgrag.plpython_function_sql(
            $sig$pgrag.chunk_text(
    document_text text,
    source_type text default 'text',
    chunker text default 'tokens',
    chunk_size integer default null,
    overlap integer default null
)
returns table (
    chunk_index integer, content text, token_count integer, heading_path text[],
    overlap_chars integer
)
stable$sig$,
            'chunk_text(plpy, GD, document_text, source_type, chunker, chunk_size, overlap)');
    else
        execute $stub$
create or replace function pgrag.compute_query_embedding(query_text text)
returns @extschema:vector@.vector
language plpgsql
stable
strict
security invoker
set search_path = pg_catalog, pg_temp
as $body$
begin
    raise exception 'text search needs the query''s embedding: this server has no PL/Python to compute it, and the query-embedding cache holds none for this query'
        using errcode = 'PR301',
              hint = 'embed the query on the client and call hybrid_search(query_text, query_embedding, ...) '
                     '(e.g. with pgrag embed ''your query''), or search by keywords alone with '
                     'keyword_search(query_text, ...); docs/sql-api.md, "Text-only search"';
end
$body$
$stub$;
        execute $stub$
create or replace function pgrag.chunk_text(
    document_text text,
    source_type text default 'text',
    chunker text default 'tokens',
    chunk_size integer default null,
    overlap integer default null
)
returns table (
    chunk_index integer, content text, token_count integer, heading_path text[],
    overlap_chars integer
)
language plpgsql
stable
security invoker
set search_path = pg_catalog, pg_temp
as $body$
begin
    raise exception 'pgrag.chunk_text needs PL/Python, which this server does not have'
        using errcode = 'PR301',
              hint = 'chunk on the client: pgrag ingest (or the pgrag.pipeline.chunking module) cuts '
                     'documents with the same chunker; docs/sql-api.md, "Text-only search"';
end
$body$
$stub$;
    end if;
end
$do$;

comment on function pgrag.compute_query_embedding(text) is
'The embedding of query_text by the model the server runs (pgrag.embed_query calls it when the cache has none). PL/Python variant: the bundled all-MiniLM-L6-v2 through pgrag.plpython.server, loaded once per backend, query_text checked by pgrag.check_query_text first; SQLSTATE PR302 when the server''s Python cannot import pgrag, PR303 when the model or its runtime is missing there, PR304 when the database holds another model or dimension. Stub variant (no PL/Python): raises PR301 naming the alternatives. Which one is installed: pgrag status.';
comment on function pgrag.chunk_text(text, text, text, integer, integer) is
'Chunks of document_text as pgrag ingest cuts them (pgrag.pipeline.chunking, sized in the model''s tokens): source_type text (paragraphs) or markdown (headings give heading_path); chunker tokens (structure-aware; default 250 tokens with 31 overlap for the local model) or words (fixed word windows); chunk_size and overlap default as pgrag ingest''s. No rows for a null document_text. Needs PL/Python: the stub variant raises SQLSTATE PR301; PL/Python errors as pgrag.compute_query_embedding (PR302, PR303, PR304). Limits (pgrag.check_chunk_arguments): document_text 1,000,000 characters, chunk_size 2-10000 (tokens: at most what the model reads), overlap 0-10000 (tokens: less than half of chunk_size; words: less than chunk_size); else SQLSTATE 22023.';

create or replace function pgrag.check_query_text(query_text text)
returns void
language plpgsql
immutable
parallel safe
security invoker
set search_path = pg_catalog, pg_temp
as $$
begin
    if query_text is null then
        raise exception 'query_text must not be null'
            using errcode = '22023',
                  hint = 'pgrag''s argument limits are listed in docs/security.md.';
    end if;
    perform pgrag.check_length('query_text', pg_catalog.length(query_text), 10000, 'characters');
end
$$;
comment on function pgrag.check_query_text(text) is
'Argument check of a query text to embed: raises 22023 when it is null or longer than 10,000 characters (pgrag.embed_query, and the PL/Python pgrag.compute_query_embedding before any work).';

create or replace function pgrag.check_chunk_arguments(
    document_text text,
    source_type text,
    chunker text,
    chunk_size integer,
    overlap integer
)
returns void
language plpgsql
immutable
parallel safe
security invoker
set search_path = pg_catalog, pg_temp
as $$
begin
    perform pgrag.check_length('document_text', pg_catalog.length(document_text), 1000000, 'characters');
    if source_type is null or source_type not in ('text', 'markdown') then
        raise exception 'source_type must be text or markdown (got %)',
            coalesce(pg_catalog.quote_literal(pg_catalog.left(source_type, 100)), 'null')
            using errcode = '22023';
    end if;
    if chunker is null or chunker not in ('tokens', 'words') then
        raise exception 'chunker must be tokens or words (got %)',
            coalesce(pg_catalog.quote_literal(pg_catalog.left(chunker, 100)), 'null')
            using errcode = '22023';
    end if;
    perform pgrag.check_argument('chunk_size', chunk_size, 2, 10000);
    perform pgrag.check_argument('overlap', overlap, 0, 10000);
end
$$;
comment on function pgrag.check_chunk_arguments(text, text, text, integer, integer) is
'Argument check of pgrag.chunk_text (its PL/Python body runs it before any work): raises 22023 for a document_text over 1,000,000 characters, a source_type other than text or markdown, a chunker other than tokens or words, a chunk_size outside 2-10000 or an overlap outside 0-10000. The limits that depend on the model (what it reads) are checked by the chunker, also with 22023.';

create or replace function pgrag.embed_query(query_text text)
returns @extschema:vector@.vector
language plpgsql
stable
security invoker
set search_path = pg_catalog, pg_temp
as $$
begin
    perform pgrag.check_query_text(query_text);
    return coalesce(pgrag.cached_query_embedding(query_text),
                    pgrag.compute_query_embedding(query_text));
end
$$;
comment on function pgrag.embed_query(text) is
'The embedding of query_text with the model the database records: from the query-embedding cache when the current tenant''s cache holds it (pgrag.cached_query_embedding), else computed in the database by pgrag.compute_query_embedding (PL/Python; on a server without it, SQLSTATE PR301 names the alternatives). Read-only. Limits: query_text not null, at most 10,000 characters; else SQLSTATE 22023.';

-- The result columns of hybrid_search: first_chunk_index and last_chunk_index came later, and
-- CREATE OR REPLACE cannot add a result column, so an earlier version is dropped first (its
-- grants are re-made by 910-function-privileges.sql); so is one without hybrid_search's last
-- parameter, match_offset.
do $$
declare
    f record;
begin
    for f in
        select p.oid::pg_catalog.regprocedure as sig
        from pg_catalog.pg_proc as p
        where p.pronamespace operator(pg_catalog.=) 'public'::pg_catalog.regnamespace
          and p.proname operator(pg_catalog.=) 'hybrid_search_text'
          and (not ('last_chunk_index' operator(pg_catalog.=) any (coalesce(p.proargnames, '{}')))
               or not ('match_offset' operator(pg_catalog.=) any (coalesce(p.proargnames, '{}'))))
    loop
        execute pg_catalog.format('drop function %s', f.sig);
    end loop;
end
$$;

create or replace function public.hybrid_search_text(
    query_text text,
    match_count integer default 10,
    fusion text default 'weighted',
    rrf_k integer default 60,
    vector_weight double precision default 0.8,
    keyword_weight double precision default 1,
    candidate_count integer default null,
    window_size integer default 0,
    mmr_lambda double precision default null,
    min_score double precision default null,
    language text default null,
    ef_search integer default null,
    document_ids bigint[] default null,
    metadata_filter jsonb default null,
    source_types text[] default null,
    created_after timestamptz default null,
    created_before timestamptz default null,
    match_offset integer default 0
)
returns table (
    chunk_id bigint, document_id bigint, chunk_index integer, title text, source_uri text,
    source_type text, page integer, heading_path text[], content text,
    vector_rank bigint, vector_score double precision, keyword_rank bigint,
    keyword_score double precision, score double precision, rank bigint,
    first_chunk_index integer, last_chunk_index integer, tenant_id text
)
language sql
stable
security invoker
set search_path = pg_catalog, pg_temp
as $$
    select h.chunk_id, h.document_id, h.chunk_index, h.title, h.source_uri, h.source_type,
           h.page, h.heading_path, h.content, h.vector_rank, h.vector_score, h.keyword_rank,
           h.keyword_score, h.score, h.rank, h.first_chunk_index, h.last_chunk_index, h.tenant_id
    from public.hybrid_search(
        query_text => hybrid_search_text.query_text,
        query_embedding => pgrag.embed_query(hybrid_search_text.query_text),
        match_count => hybrid_search_text.match_count,
        fusion => hybrid_search_text.fusion,
        rrf_k => hybrid_search_text.rrf_k,
        vector_weight => hybrid_search_text.vector_weight,
        keyword_weight => hybrid_search_text.keyword_weight,
        candidate_count => hybrid_search_text.candidate_count,
        window_size => hybrid_search_text.window_size,
        mmr_lambda => hybrid_search_text.mmr_lambda,
        min_score => hybrid_search_text.min_score,
        language => hybrid_search_text.language,
        ef_search => hybrid_search_text.ef_search,
        document_ids => hybrid_search_text.document_ids,
        metadata_filter => hybrid_search_text.metadata_filter,
        source_types => hybrid_search_text.source_types,
        created_after => hybrid_search_text.created_after,
        created_before => hybrid_search_text.created_before,
        match_offset => hybrid_search_text.match_offset) as h
    order by h.rank
$$;
comment on function public.hybrid_search_text(text, integer, text, integer, double precision, double precision, integer, integer, double precision, double precision, text, integer, bigint[], jsonb, text[], timestamptz, timestamptz, integer) is
'hybrid_search with the query embedding computed in the database (pgrag.embed_query: the query-embedding cache, else PL/Python): the same arguments except query_embedding, the same defaults, limits, tenant rules (row level security, tenant from request.jwt.claims) and result rows. Read-only. On a server without PL/Python only a cached query is answered; otherwise SQLSTATE PR301 names the alternatives (hybrid_search with a client-side embedding, or keyword_search). Limits: as hybrid_search, and query_text not null; else SQLSTATE 22023.';
