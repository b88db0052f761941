-- Bulk loading: a tenant's large (first) load without per-row maintenance of the shared HNSW graph
-- or of the BM25 postings.
-- Contract. Provides: pgrag.bulk_load_applies (may this load take the bulk path),
--   pgrag.bulk_replace_document_chunks (the swap of 004-loading.sql, with the chunks it writes
--   kept out of the shared graph and listed in pgrag.bm25_backlog rather than indexed for BM25)
--   and pgrag.finish_bulk_load (writes their BM25 index in one pass, then builds the tenant's
--   own graph over them, or puts a small load's rows into the shared graph; its first half,
--   the BM25 pass, is pgrag.index_bulk_load_backlog, which an interrupted load runs alone, made
--   of pgrag.index_bulk_load_lexemes and pgrag.close_bulk_load_backlog, which a loader may run
--   on several connections over the word ranges pgrag.bulk_load_lexeme_bounds gives); the
--   trigger chunks_in_shared_graph and its function, which keep chunks.in_shared_graph
--   (incremental/012-bulk-loading.sql). Relies on: pgrag.replace_document_chunks
--   (004-loading.sql), the BM25 tables and the backlog the BM25 triggers keep
--   (002-bm25-maintenance.sql, whose pgrag.bm25_write_sql is the statement that writes the
--   postings here too, over pgrag.bulk_load_backlog_sql's chunks;
--   incremental/014-bm25-backlog.sql), pgrag.isolate_tenant and pgrag.tenant_index_name
--   (006-vector-isolation.sql). Callers: the owner of pgrag.chunks
--   (pgrag ingest and pgrag import for a large first load, or any SQL loader connected as the
--   owner); the trigger fires for every writer.
--
-- How a bulk load runs (docs/ingest.md, "Large first loads"):
--   1. any number of transactions, each: stage chunks (e.g. COPY into a temp table), then
--      pgrag.bulk_replace_document_chunks(stage, tenant, ...), like
--      pgrag.replace_document_chunks: documents become ready at commit, and vector-searchable;
--   2. pgrag.finish_bulk_load(tenant): one sorted pass writes the BM25 postings, document
--      frequencies and corpus statistics of every chunk of steps 1 (each page of the postings
--      index written once, where a batch at a time rewrote most of them per batch), then one
--      CREATE INDEX builds the tenant's own HNSW graph over all its rows (pgrag.isolate_tenant).
-- Between 1 and 2 (or if a load dies before 2) the tenant's keyword search does not see the
-- loaded chunks yet, and its vector search scans its rows exactly (pgrag.vector_candidates
-- finds them through chunks_outside_shared_graph): the same results, slower. The next pgrag
-- ingest of the tenant by the owner (or select pgrag.finish_bulk_load(tenant)) finishes it.

create or replace function pgrag.chunk_in_shared_graph()
returns trigger
language plpgsql
security invoker
set search_path = pg_catalog, pg_temp
as $$
begin
    -- Out of the shared graph only when the owner's bulk load of this tenant writes the row
    -- (pgrag.bulk_replace_document_chunks sets pgrag.bulk_load_tenant for its transaction): no
    -- other writer can leave a row out of the graphs its tenant's searches walk.
    -- (coalesce: the setting is null in a session that never set it.)
    new.in_shared_graph := not (
        coalesce(pg_catalog.current_setting('pgrag.bulk_load_tenant', true)
                 operator(pg_catalog.=) new.tenant_id, false)
        and pg_catalog.pg_has_role(
            (select c.relowner from pg_catalog.pg_class as c
             where c.oid operator(pg_catalog.=) 'pgrag.chunks'::pg_catalog.regclass), 'USAGE'));
    return new;
end
$$;
comment on function pgrag.chunk_in_shared_graph() is
'Trigger function (before insert or update of tenant_id, in_shared_graph on pgrag.chunks, per row): in_shared_graph is false only for rows the owner''s bulk load of their tenant writes (pgrag.bulk_replace_document_chunks), true for every other write, whatever the writer gave.';

create or replace trigger chunks_in_shared_graph
    before insert or update of tenant_id, in_shared_graph on pgrag.chunks
    for each row execute function pgrag.chunk_in_shared_graph();

create or replace function pgrag.bulk_replace_document_chunks(
    stage regclass,
    tenant text,
    document_ids bigint[],
    titles text[],
    source_types text[],
    content_sha256s text[],
    metadatas jsonb[],
    chunk_counts integer[],
    embedding_model text
)
returns void
language plpgsql
volatile
security invoker
set search_path = pg_catalog, pg_temp
as $$
begin
    if tenant is null or tenant operator(pg_catalog.~) '^[[:space:]]*$' then
        raise exception 'tenant must be a non-blank tenant id'
            using errcode = '22023';
    end if;
    -- The rows it writes are in no graph until pgrag.finish_bulk_load builds the tenant's own
    -- (CREATE INDEX): only the owner of pgrag.chunks may build it.
    if not pg_catalog.pg_has_role(
            (select c.relowner from pg_catalog.pg_class as c
             where c.oid = 'pgrag.chunks'::pg_catalog.regclass), 'USAGE') then
        raise exception 'pgrag.bulk_replace_document_chunks: only the owner of pgrag.chunks may bulk load'
            using errcode = '42501',
                  hint = 'load with pgrag.replace_document_chunks, or connect as the role that ran pgrag migrate.';
    end if;
    perform pg_catalog.set_config('pgrag.bulk_load_tenant', tenant, true);
    perform pgrag.replace_document_chunks(stage, tenant, document_ids, titles, source_types,
                                          content_sha256s, metadatas, chunk_counts, embedding_model);
    perform pg_catalog.set_config('pgrag.bulk_load_tenant', '', true);
end
$$;
comment on function pgrag.bulk_replace_document_chunks(regclass, text, bigint[], text[], text[], text[], jsonb[], integer[], text) is
'pgrag.replace_document_chunks (same arguments, same checks and errors) for a tenant''s large load: the chunks it writes stay out of the shared HNSW graph (chunks.in_shared_graph false) and out of the BM25 index (listed in pgrag.bm25_backlog), so neither is maintained row by row; pgrag.finish_bulk_load then indexes them for BM25 in one pass and builds the tenant''s own graph over them. Until then the tenant''s keyword search does not see them and its vector search scans its rows exactly (same results). Owner of pgrag.chunks only (42501 otherwise); 22023 for a blank tenant.';

create or replace function pgrag.bulk_load_backlog_sql(tenant text)
returns text
language sql
immutable
parallel safe
security invoker
set search_path = pg_catalog, pg_temp
as $$
    -- The tenant as a literal (a Citus coordinator routes the statement by it), said of both
    -- tables. Its callers plan it without nested loops: a tenant new to the statistics of
    -- these tables looks like one row of each, and a nested loop then read the tenant's whole
    -- backlog (or every chunk of it) for each of its chunks (quadratic: 5,000 chunks beside 27
    -- other tenants read 12.5 million rows in each of the bulk load's passes).
    select pg_catalog.format(
        'select c.tenant_id, c.id, c.language::text, c.fts from pgrag.chunks as c '
        'join pgrag.bm25_backlog as b on b.tenant_id operator(pg_catalog.=) c.tenant_id '
        'and b.chunk_id operator(pg_catalog.=) c.id '
        'where c.tenant_id operator(pg_catalog.=) %1$L and b.tenant_id operator(pg_catalog.=) %1$L',
        tenant)
$$;
comment on function pgrag.bulk_load_backlog_sql(text) is
'The query of the chunks of tenant listed in pgrag.bm25_backlog (tenant_id, id, language, fts): the chunks a bulk load''s pass indexes (pgrag.bm25_write_sql''s chunk slot) and samples for its word ranges (pgrag.bulk_load_lexeme_bounds).';

create or replace function pgrag.bulk_load_lexeme_bounds(tenant text, parts integer)
returns text[]
language plpgsql
stable
security invoker
set search_path = pg_catalog, pg_temp
-- Hash or merge joins only (sql/idempotent/README.md, "Plans"): the backlog's chunks are a
-- join of pgrag.chunks and pgrag.bm25_backlog by the tenant, whom the statistics may not know.
set enable_nestloop = off
as $$
declare
    v_bounds text[];
begin
    -- The parts - 1 lexemes that cut the postings of (a sample of) the backlog's chunks into
    -- parts of about equal size, in the postings index's order: index_bulk_load_lexemes over
    -- [null, b1), [b1, b2) ... [b(parts-1), null) writes each part on its own connection, each
    -- into its own key range of the postings index (no two writers on one leaf page).
    -- (PL/pgSQL, the tenant as a literal: a Citus coordinator routes the statement by it and
    -- cannot plan an SQL function's parameter against a distributed table.)
    if parts is null or parts operator(pg_catalog.<) 2 then
        return null;
    end if;
    execute pg_catalog.format($q$
        select /* pgrag:bulk_load_lexeme_bounds */ pg_catalog.percentile_disc(
                   (select pg_catalog.array_agg(g::float8 operator(pg_catalog./) %2$s)
                    from pg_catalog.generate_series(1, %2$s operator(pg_catalog.-) 1) as g))
               within group (order by u.lexeme)
        from (%1$s limit 2000) as s
        cross join lateral pg_catalog.unnest(s.fts) as u$q$, pgrag.bulk_load_backlog_sql(tenant), parts)
    into v_bounds;
    return v_bounds;
end
$$;
comment on function pgrag.bulk_load_lexeme_bounds(text, integer) is
'The parts - 1 lexemes (in the postings index''s order) that cut the BM25 postings of the chunks of tenant listed in pgrag.bm25_backlog into parts of about equal size (from a sample of 2,000 of them); null when nothing is listed or parts < 2. For writing a bulk load''s postings on several connections (pgrag.index_bulk_load_lexemes).';

create or replace function pgrag.index_bulk_load_lexemes(tenant text, lexeme_from text, lexeme_to text)
returns bigint
language plpgsql
volatile
security invoker
set search_path = pg_catalog, pg_temp
-- Hash or merge joins only (sql/idempotent/README.md, "Plans"): the backlog's chunks are a
-- join of pgrag.chunks and pgrag.bm25_backlog by the tenant, whom the statistics may not know.
set enable_nestloop = off
as $$
declare
    v_rows bigint;
    v_resume boolean;
begin
    if tenant is null or tenant operator(pg_catalog.~) '^[[:space:]]*$' then
        raise exception 'tenant must be a non-blank tenant id'
            using errcode = '22023';
    end if;
    -- A pass over part of the words commits before the backlog is closed: it leaves a mark in
    -- the backlog (chunk_id -1 - its backend's pid: no chunk's id, distinct among concurrent
    -- passes), removed when the backlog is closed. A mark left by a pass that committed (the
    -- load was stopped before closing): postings of these words may exist, skip them.
    v_resume := exists (select 1 from pgrag.bm25_backlog as b
                        where b.tenant_id = tenant and b.chunk_id operator(pg_catalog.<) 0);
    if lexeme_from is not null or lexeme_to is not null then
        insert into pgrag.bm25_backlog (tenant_id, chunk_id)
        values (tenant, -1 - pg_catalog.pg_backend_pid())
        on conflict do nothing;
    end if;
    perform pg_catalog.set_config('work_mem', greatest(
        pg_catalog.pg_size_bytes(pg_catalog.current_setting('work_mem')),
        least(pg_catalog.pg_size_bytes(pg_catalog.current_setting('maintenance_work_mem')),
              1073741824)) / 1024 || 'kB', true);
    -- The postings of the listed chunks' words in [lexeme_from, lexeme_to) (null: unbounded),
    -- and their document frequencies with the term bounds: the triggers' statement
    -- (pgrag.bm25_write_sql) over the backlog's chunks, without the corpus statistics
    -- (pgrag.close_bulk_load_backlog adds them once for all ranges). When resuming, a posting
    -- already written is skipped and not counted again, so a rerun after an interruption
    -- completes the index exactly (a plain insert otherwise: the check costs about 15 percent).
    -- (The tenant as a literal: a Citus coordinator routes the statement by it.)
    execute pg_catalog.format(
        pgrag.bm25_write_sql(adding => true, statistics => false, resuming => v_resume),
        pgrag.bulk_load_backlog_sql(tenant),
        '($4::text is null or t.lexeme operator(pg_catalog.>=) $4) '
        'and ($5::text is null or t.lexeme operator(pg_catalog.<) $5)')
    using (pg_catalog.pg_backend_pid() % 16) * 8, null::integer, array[tenant],
          lexeme_from, lexeme_to;
    get diagnostics v_rows = row_count;
    return v_rows;
end
$$;
comment on function pgrag.index_bulk_load_lexemes(text, text, text) is
'Writes the BM25 postings and document frequencies (with term bounds) of the words in [lexeme_from, lexeme_to) (null: unbounded) of the chunks of tenant listed in pgrag.bm25_backlog, in key order, skipping postings already written when an earlier partial pass committed (a rerun completes, never doubles, them: such a pass leaves a mark in the backlog, a row with a negative chunk_id, until it is closed); returns how many words it counted. Leaves the backlog and the corpus statistics to pgrag.close_bulk_load_backlog. Takes no lock: the caller holds pgrag.chunks in share mode for the whole load''s index (pgrag.index_bulk_load_backlog does; pgrag ingest and pgrag import take it on a first connection, then write disjoint ranges, pgrag.bulk_load_lexeme_bounds, on several). Owner of pgrag.chunks only.';

create or replace function pgrag.close_bulk_load_backlog(tenant text)
returns bigint
language plpgsql
volatile
security invoker
set search_path = pg_catalog, pg_temp
-- Hash or merge joins only (sql/idempotent/README.md, "Plans"): the backlog's chunks are a
-- join of pgrag.chunks and pgrag.bm25_backlog by the tenant, whom the statistics may not know.
set enable_nestloop = off
as $$
declare
    v_rows bigint;
begin
    -- The corpus statistics of the listed chunks (the triggers' statement, pgrag.bm25_write_sql,
    -- over no word of theirs), then they leave the backlog: their postings are all written.
    execute pg_catalog.format(
        pgrag.bm25_write_sql(adding => true, statistics => true, resuming => false),
        pgrag.bulk_load_backlog_sql(tenant), 'false')
    using (pg_catalog.pg_backend_pid() % 16) * 8, pg_catalog.pg_backend_pid() % 16, array[tenant];
    -- (and the marks of the passes that wrote their postings: index_bulk_load_lexemes)
    with gone as (delete from pgrag.bm25_backlog as b where b.tenant_id = tenant returning b.chunk_id)
    select pg_catalog.count(*) filter (where g.chunk_id operator(pg_catalog.>) 0) into v_rows
    from gone as g;
    return v_rows;
end
$$;
comment on function pgrag.close_bulk_load_backlog(text) is
'Ends the BM25 indexing of a bulk load of tenant once every posting of the chunks listed in pgrag.bm25_backlog is written (pgrag.index_bulk_load_lexemes over all words, in this transaction or committed): adds their corpus statistics and empties the tenant''s backlog; returns how many chunks left it. The caller holds pgrag.chunks in share mode. Owner of pgrag.chunks only.';

create or replace function pgrag.index_bulk_load_backlog(tenant text)
returns bigint
language plpgsql
volatile
security invoker
set search_path = pg_catalog, pg_temp
as $$
begin
    if tenant is null or tenant operator(pg_catalog.~) '^[[:space:]]*$' then
        raise exception 'tenant must be a non-blank tenant id'
            using errcode = '22023';
    end if;
    -- The BM25 index of the load's chunks (pgrag.bm25_backlog), written in one pass: every
    -- posting of the tenant's words in key order, so each leaf page of the postings index is
    -- written once rather than once per batch. No chunk of the tenant changes meanwhile.
    if not exists (select 1 from pgrag.bm25_backlog as b where b.tenant_id = tenant) then
        return 0;
    end if;
    lock table pgrag.chunks in share mode;
    perform pgrag.index_bulk_load_lexemes(tenant, null, null);
    return pgrag.close_bulk_load_backlog(tenant);
end
$$;
comment on function pgrag.index_bulk_load_backlog(text) is
'The first half of pgrag.finish_bulk_load: writes the BM25 index (postings, document frequencies, corpus statistics) of the chunks a bulk load of tenant listed in pgrag.bm25_backlog, in one pass (pgrag.chunks locked against writes meanwhile; work_mem raised to maintenance_work_mem, at most 1 GB, for its sort): pgrag.index_bulk_load_lexemes over every word (postings some earlier interrupted pass wrote are kept, not doubled), then pgrag.close_bulk_load_backlog. Returns how many chunks it indexed (0: none was waiting). Keyword search and pgrag.tenant_stats see those chunks once it commits. pgrag ingest calls it alone when a first load is interrupted (the graph build can wait: vector search scans rows outside every graph exactly). Owner of pgrag.chunks only (no API role may execute it: 42501).';

create or replace function pgrag.finish_bulk_load(tenant text)
returns regclass
language plpgsql
volatile
security invoker
set search_path = pg_catalog, pg_temp
as $$
declare
    v_index regclass;
    v_rows bigint;
begin
    -- The BM25 index of the load's chunks first (22023 for a blank tenant).
    perform pgrag.index_bulk_load_backlog(tenant);
    v_index := pg_catalog.to_regclass(pg_catalog.format('pgrag.%I', pgrag.tenant_index_name(tenant)));
    -- Nothing more to do: a graph of its own already holds every row, or every row is in the
    -- shared one.
    if v_index is not null
       or not exists (select 1 from pgrag.chunks as c
                      where c.tenant_id = tenant and not c.in_shared_graph) then
        return null;
    end if;
    v_rows := pgrag.tenant_chunk_count(tenant);
    -- A small load (the exact path serves it: pgrag.exact_search_max_rows) needs no graph of
    -- its own: its rows join the shared graph (row by row, as an ordinary load would have).
    if v_rows <= coalesce(
            nullif(pg_catalog.current_setting('pgrag.exact_search_max_rows', true), '')::bigint, 2000) then
        update pgrag.chunks as c
           set in_shared_graph = true
         where c.tenant_id = tenant and not c.in_shared_graph;
        return null;
    end if;
    -- One graph build over the tenant's rows (pgrag.isolate_tenant gives it the memory to fit).
    return pgrag.isolate_tenant(tenant);
end
$$;
comment on function pgrag.finish_bulk_load(text) is
'Ends a bulk load of tenant: first writes the BM25 index (postings, document frequencies, corpus statistics) of the chunks the load listed in pgrag.bm25_backlog, in one pass (pgrag.chunks locked against writes meanwhile; work_mem raised to maintenance_work_mem, at most 1 GB, for its sort); then, when some of its chunks are outside the shared graph and it has no graph of its own, builds that graph (pgrag.isolate_tenant, which raises maintenance_work_mem for the build, at most 1 GB) or, when the tenant has no more than pgrag.exact_search_max_rows chunks (default 2000), puts them into the shared graph instead; returns the index it built (null when it built none). Safe to call at any time (no-op when nothing is left to do). Owner of pgrag.chunks only (no API role may execute it: 42501); blocks writes to pgrag.chunks while it runs.';

create or replace function pgrag.bulk_load_applies(tenant text)
returns boolean
language plpgsql
stable
security invoker
set search_path = pg_catalog, pg_temp
as $$
begin
    -- The caller owns pgrag.chunks (it may build the index that ends the load) and the tenant
    -- has no chunk yet: its first load, which pgrag.finish_bulk_load ends. (PL/pgSQL: Citus
    -- cannot plan an SQL function's parameter against a distributed table on PostgreSQL 15.)
    return pg_catalog.pg_has_role(
               (select c.relowner from pg_catalog.pg_class as c
                where c.oid operator(pg_catalog.=) 'pgrag.chunks'::pg_catalog.regclass), 'USAGE')
       and not exists (select 1 from pgrag.chunks as c
                       where c.tenant_id operator(pg_catalog.=) bulk_load_applies.tenant);
end
$$;
comment on function pgrag.bulk_load_applies(text) is
'True when a load of tenant may take the bulk path (pgrag.bulk_replace_document_chunks, then pgrag.finish_bulk_load): the caller owns pgrag.chunks and the tenant has no chunk yet (a first load). pgrag ingest asks it before loading.';
