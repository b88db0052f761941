-- BM25 maintenance: the postings, document frequencies and corpus statistics of pgrag.chunks,
-- kept by statement-level triggers with transition tables.
-- Contract. Provides: pgrag.bm25_write_sql (the one statement that writes postings, lexicon and
--   corpus statistics for a set of chunks, for the triggers and a bulk load alike),
--   pgrag.bm25_apply (runs it for arrays of chunks) and the triggers chunks_bm25_* that call
--   it for every insert, delete and update of pgrag.chunks, and that list a bulk load's chunks
--   in pgrag.bm25_backlog instead.
--   Relies on: the BM25 tables (incremental/002-bm25.sql, 004-bm25-lexicon.sql,
--   013-bm25-term-bounds.sql, 014-bm25-backlog.sql); chunks.in_shared_graph as the trigger
--   chunks_in_shared_graph sets it (060-bulk-loading.sql). Callers: the triggers, and a
--   bulk load's pass over its backlog (060-bulk-loading.sql), through the same statement. No
--   API role may execute bm25_apply or bm25_write_sql, nor write the BM25 tables.
--
-- Why the trigger function is SECURITY DEFINER (the one definer function of pgrag): the BM25
-- tables (postings, lexicon, corpus statistics, backlog) are statistics every search reads,
-- across tenants for a caller without one (service_role): a tenant that could write its own
-- rows there (a huge negative df, thousands of fake postings) changed, and slowed, every such
-- search. So no API role may write them (900-row-security.sql grants SELECT alone), and they
-- are written only by the trigger function below, as the owner of pgrag.chunks. What it
-- writes comes from the transition tables of the statement that fired it: exactly the chunk
-- rows the writer could write (row level security and its WITH CHECK kept them to the
-- writer's tenant), so a tenant still indexes only its own rows, and only as they are. It
-- reads no argument, no setting of the session that decides what it writes (the bulk path is
-- read from chunks.in_shared_graph, set as the writer by the trigger chunks_in_shared_graph),
-- and it pins its search_path.

create or replace function pgrag.bm25_write_sql(adding boolean, statistics boolean, resuming boolean)
returns text
language sql
immutable
parallel safe
security invoker
set search_path = pg_catalog, pg_temp
as $sql$
    -- The one statement that writes the BM25 index of a set of chunks, for each of its three
    -- callers: the triggers (pgrag.bm25_apply: adding or removing every word, with the corpus
    -- statistics), a bulk load's pass over a range of words (pgrag.index_bulk_load_lexemes: no
    -- statistics; resuming skips postings an interrupted pass wrote) and the end of that load
    -- (pgrag.close_bulk_load_backlog: no word, the corpus statistics alone).
    -- In the text: %1$s a query of the chunks (tenant_id, id, language, fts), %2$s a condition
    -- on their words (t.lexeme). Parameters: $1 the lexicon shard, $2 the corpus statistics
    -- shard (used only with statistics), $3 the tenants of the chunks (routes a removal on
    -- Citus); the chunk query and the condition may use $3 on.
    -- Each chunk's BM25 length (positions of its words; identifier parts, weight A, are not
    -- counted) and its postings are computed once; the postings, the document frequencies
    -- with the term bounds (largest tf, shortest chunk: incremental/013; removals leave them,
    -- an upper bound still) and the corpus statistics are written from them. Document
    -- frequencies count the postings an insert wrote (when resuming, a posting already there
    -- is neither written nor counted again) or those a removal was given.
    select pg_catalog.format($q$
    with chunk as materialized (
        select c.tenant_id, c.id, c.language, c.fts,
               (select coalesce(pg_catalog.sum(pg_catalog.cardinality(u.positions))
                                    filter (where u.weights[1] operator(pg_catalog.<>) 'A'), 0)::integer
                from pg_catalog.unnest(c.fts) as u) as len
        from (%%1$s) as c (tenant_id, id, language, fts)
    ), posting as %4$s(
        select c.tenant_id, t.lexeme, c.id as chunk_id,
               pg_catalog.cardinality(t.positions) as tf, c.len
        from chunk as c cross join lateral pg_catalog.unnest(c.fts) as t
        where %%2$s
    ), written as (%1$s
    )%2$s
    -- Document frequencies in key order: one lock order for every writer of a shard.
    insert into pgrag.bm25_lexicon as x (tenant_id, lexeme, shard, df, max_tf, min_doc_len)
    select w.tenant_id, w.lexeme, $1, %3$s pg_catalog.count(*), %5$s
    group by w.tenant_id, w.lexeme
    order by w.tenant_id, w.lexeme
    on conflict (tenant_id, lexeme, shard) do update
        set df = x.df operator(pg_catalog.+) excluded.df,
            max_tf = greatest(x.max_tf, excluded.max_tf),
            min_doc_len = least(x.min_doc_len, excluded.min_doc_len)
    $q$,
    case when adding then pg_catalog.format($a$
        -- Word by word: consecutive inserts land on the same leaf pages of the primary key
        -- (a load's postings of one word are adjacent): 10 to 15 percent less work than chunk
        -- order. The word first, compared bytewise (collation "C"): the sort then compares
        -- abbreviated keys, 4 times faster than with the tenant first (one value in a load:
        -- abbreviation gives up) or the database's collation (not abbreviated), and a bulk
        -- load's postings pass 1.4 times faster (benchmarks/first_load.py). Bytewise is the
        -- key order of UTF-8 text in C and C.UTF-8 databases, and nearly it in others.
        insert into pgrag.bm25_postings (tenant_id, lexeme, chunk_id, tf, doc_len)
        select p.tenant_id, p.lexeme, p.chunk_id, p.tf, p.len
        from posting as p
        order by p.lexeme collate pg_catalog."C", p.tenant_id, p.chunk_id
        %s
        returning tenant_id, lexeme, tf, doc_len$a$,
        case when resuming then 'on conflict do nothing' else '' end)
    else $r$
        -- (The removed postings' term bounds are left as they are.)
        delete from pgrag.bm25_postings as x
        using posting as p
        where x.tenant_id operator(pg_catalog.=) p.tenant_id
          and x.lexeme operator(pg_catalog.=) p.lexeme
          and x.chunk_id operator(pg_catalog.=) p.chunk_id
          -- The same rows; said of x itself, so that a Citus cluster routes the delete to the
          -- shards of these tenants (it runs inside the delete of a shard's chunks).
          and x.tenant_id operator(pg_catalog.=) any ($3)
        $r$ end,
    case when statistics then pg_catalog.format($s$, counted as (
        insert into pgrag.corpus_stats as s (tenant_id, language, shard, chunk_count, token_count)
        select c.tenant_id, c.language, $2, %1$s pg_catalog.count(*),
               %1$s coalesce(pg_catalog.sum(c.len), 0)
        from chunk as c
        group by c.tenant_id, c.language
        order by c.tenant_id, c.language
        on conflict (tenant_id, language, shard) do update
            set chunk_count = s.chunk_count operator(pg_catalog.+) excluded.chunk_count,
                token_count = s.token_count operator(pg_catalog.+) excluded.token_count
    )$s$, case when adding then '' else 'operator(pg_catalog.-)' end) else '' end,
    case when adding then '' else 'operator(pg_catalog.-)' end,
    -- A removal reads the list twice (the delete, the counts), so it is materialised, and it
    -- counts the postings it was given, as every version did (a RETURNING of every deleted
    -- row cost about 1.2 times the statement: 2,500 chunks deleted). An insert reads the list
    -- once, in key order, and counts what it wrote: resuming may skip some.
    case when adding then '' else 'materialized ' end,
    case when adding then 'pg_catalog.max(w.tf), pg_catalog.min(w.doc_len) from written as w'
         else 'null::integer, null::integer from posting as w' end)
$sql$;
comment on function pgrag.bm25_write_sql(boolean, boolean, boolean) is
'The one statement that adds chunks to the BM25 index (adding) or removes them: postings, document frequencies with term bounds, and with statistics the corpus statistics; resuming (adding) skips postings already written and does not count them. In its text, %1$s stands for a query of the chunks (tenant_id, id, language, fts) and %2$s for a condition on their words (t.lexeme); parameters $1 lexicon shard, $2 statistics shard, $3 tenants. For pgrag.bm25_apply (the triggers), pgrag.index_bulk_load_lexemes and pgrag.close_bulk_load_backlog (a bulk load).';
-- Earlier versions wrote the triggers' statement alone, with the sign as a parameter.
drop function if exists pgrag.bm25_write_sql();

create or replace function pgrag.bm25_apply(
    sign integer,
    tenant_ids text[],
    chunk_ids bigint[],
    languages text[],
    ftss tsvector[]
)
returns void
language plpgsql
volatile
security invoker
set search_path = pg_catalog, pg_temp
as $$
declare
    v_shard integer := pg_catalog.pg_backend_pid() % 16;
    v_slot integer;
begin
    if coalesce(pg_catalog.cardinality(chunk_ids), 0) = 0 then
        return;
    end if;
    -- The triggers always pass well-formed batches; a direct caller gets 22023 instead of a
    -- constraint error or statistics multiplied by an arbitrary sign.
    if sign is null or sign not in (-1, 1) then
        raise exception 'sign must be 1 (add) or -1 (remove) (got %)', sign
            using errcode = '22023',
                  hint = 'pgrag''s argument limits are listed in docs/security.md.';
    end if;
    perform pgrag.check_length('chunk_ids', pg_catalog.cardinality(chunk_ids), 10000);
    if pg_catalog.cardinality(tenant_ids) is distinct from pg_catalog.cardinality(chunk_ids)
       or pg_catalog.cardinality(languages) is distinct from pg_catalog.cardinality(chunk_ids)
       or pg_catalog.cardinality(ftss) is distinct from pg_catalog.cardinality(chunk_ids) then
        raise exception 'chunk_ids must have as many elements as tenant_ids, languages and ftss'
            using errcode = '22023',
                  hint = 'pgrag''s argument limits are listed in docs/security.md.';
    end if;
    if pg_catalog.array_position(tenant_ids, null) is not null
       or pg_catalog.array_position(chunk_ids, null) is not null
       or pg_catalog.array_position(languages, null) is not null
       or pg_catalog.array_position(ftss, null) is not null then
        raise exception 'chunk_ids and the other arrays (tenant_ids, languages, ftss) may not contain nulls'
            using errcode = '22023',
                  hint = 'pgrag''s argument limits are listed in docs/security.md.';
    end if;
    -- Other tenants are refused before any lock is taken: a caller under row-level security
    -- (authenticated) indexes only rows of its own tenant (the triggers hand it its own rows),
    -- so it can never hold another tenant's writer lock while RLS refuses its rows.
    -- (Only the owner executes it, through the triggers: kept for a direct caller.)
    if pg_catalog.row_security_active('pgrag.bm25_postings'::pg_catalog.regclass)
       and not pg_catalog.pg_has_role('service_role', 'usage')
       and exists (select 1 from pg_catalog.unnest(tenant_ids) as u(tenant_id)
                   where u.tenant_id is distinct from pgrag.current_tenant_id()) then
        raise exception 'pgrag.bm25_apply: rows of another tenant than the caller''s'
            using errcode = '42501';
    end if;
    -- The lexicon row of a word is updated by every statement that writes it: rotate over 8
    -- slots of this backend's shard, statement after statement within a transaction, so that
    -- thousands of single-row inserts in one transaction do not pile versions on one row.
    -- (A session may set the setting itself: anything but a slot counts as none.)
    v_slot := coalesce(pg_catalog.substring(pg_catalog.current_setting('pgrag.lexicon_slot', true),
                                            '^[0-7]$')::integer, -1) + 1;
    perform pg_catalog.set_config('pgrag.lexicon_slot', (v_slot % 8)::text, true);
    -- One writer per (tenant, shard) until commit: a transaction that replaces chunks adds
    -- to the lexicon twice (deleted, then inserted), and two such transactions on one shard
    -- could otherwise lock the rows of common words in opposite orders. Writers on other
    -- shards (other backends, pid % 16) never wait.
    perform pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext(t.tenant_id), v_shard)
    from (select distinct u.tenant_id from pg_catalog.unnest(tenant_ids) as u(tenant_id)
          order by u.tenant_id) as t;

    execute pg_catalog.format(
        pgrag.bm25_write_sql(adding => sign > 0, statistics => true, resuming => false),
        'select * from rows from (pg_catalog.unnest($3), pg_catalog.unnest($4), '
        'pg_catalog.unnest($5), pg_catalog.unnest($6))', 'true')
    using v_shard * 8 + v_slot % 8, v_shard, tenant_ids, chunk_ids, languages, ftss;
end
$$;
comment on function pgrag.bm25_apply(integer, text[], bigint[], text[], tsvector[]) is
'Adds (sign 1) or removes (sign -1) chunks in the BM25 index: postings, document frequencies (pgrag.bm25_lexicon, shard (pid % 16) * 8 + a slot rotating per statement) and corpus statistics (shard pid % 16). Called by the triggers on pgrag.chunks with their transition rows (as the owner: no API role may execute it), at most 10,000 at a time; raises 22023 for a sign other than 1/-1, arrays of unequal length or with nulls, and 23505 when a chunk is added twice.';

-- One trigger function for the three events. The batching statement is written once and names
-- the event's transition tables in dynamic SQL: PL/pgSQL cannot pass a transition table to a
-- function, and a static statement that names old_chunks cannot even be prepared in an INSERT
-- trigger, which has no such table (nor a DELETE trigger new_chunks). Dynamic SQL is also planned
-- for the rows of this statement: a plan PL/pgSQL cached for a one-row update, reused for a bulk
-- update, compared every old row with every new one.
--
-- The backlog (incremental/014-bm25-backlog.sql): rows the owner's bulk load of a tenant inserts
-- (pgrag.bulk_replace_document_chunks sets pgrag.bulk_load_tenant for its transaction) are listed
-- in pgrag.bm25_backlog instead of indexed; pgrag.finish_bulk_load indexes them all at once. A
-- listed row has no postings: when it is deleted, or its indexed text changes, it leaves the
-- backlog instead of the postings (and a changed one is indexed as a new row). The backlog is
-- read and written through arrays, never joined to a transition table: on a Citus worker a
-- statement may touch distributed tables only where it can be routed. A row is the bulk load's
-- when chunks_in_shared_graph (060-bulk-loading.sql, before insert, as the writer) left it out
-- of the shared graph: it does so exactly for the owner's bulk load of the row's tenant. (This
-- function runs as the owner: a role check here would always pass.)
create or replace function pgrag.bm25_chunks_changed()
returns trigger
language plpgsql
security definer
set search_path = pg_catalog, pg_temp
as $$
declare
    v_side record;
    v_bulk text;
    v_changed text := 'true';
    v_listed_tenants text[];
    v_listed_ids bigint[];
    v_tenants text[];
    v_ids bigint[];
begin
    if tg_op = 'UPDATE' then
        -- Of an update, only rows whose indexed text (or identity) changed touch the index:
        -- each side without the rows the other side holds unchanged.
        v_changed := 'not exists (select from %I as o where o.tenant_id operator(pg_catalog.=) c.tenant_id '
            'and o.id operator(pg_catalog.=) c.id and o.language operator(pg_catalog.=) c.language '
            'and o.fts operator(pg_catalog.=) c.fts)';
    end if;
    if tg_op = 'INSERT' then
        v_bulk := nullif(pg_catalog.current_setting('pgrag.bulk_load_tenant', true), '');
        if v_bulk is not null then
            execute 'select pg_catalog.array_agg(c.id) from new_chunks as c '
                    'where c.tenant_id operator(pg_catalog.=) $1 and not c.in_shared_graph'
            into v_ids
            using v_bulk;
            insert into pgrag.bm25_backlog (tenant_id, chunk_id)
            select v_bulk, u.id from pg_catalog.unnest(v_ids) as u(id);
        end if;
    else
        -- Removed or changed rows still listed in the backlog (a bulk load not finished). Said
        -- of their tenants: on Citus this runs on the shard group of these rows.
        execute 'select pg_catalog.array_agg(distinct c.tenant_id) from old_chunks as c'
        into v_tenants;
        if v_tenants is not null
           and exists (select 1 from pgrag.bm25_backlog as b where b.tenant_id = any (v_tenants)) then
            execute pg_catalog.format(
                'select pg_catalog.array_agg(c.id) from old_chunks as c where ' || v_changed,
                'new_chunks')
            into v_ids;
            select pg_catalog.array_agg(b.tenant_id), pg_catalog.array_agg(b.chunk_id)
              into v_listed_tenants, v_listed_ids
              from pgrag.bm25_backlog as b
             where b.tenant_id = any (v_tenants) and b.chunk_id = any (v_ids);
        end if;
    end if;
    -- Removed rows (old_chunks: delete, update) leave the index, then added rows (new_chunks:
    -- insert, update) enter it.
    for v_side in
        select s.sign, s.rows, s.other
        from (values (-1, 'old_chunks', 'new_chunks'), (1, 'new_chunks', 'old_chunks'))
             as s (sign, rows, other)
        where (s.sign < 0 and tg_op in ('DELETE', 'UPDATE'))
           or (s.sign > 0 and tg_op in ('INSERT', 'UPDATE'))
        order by s.sign
    loop
        -- In batches of 10,000 rows: one array may not exceed 1 GB, a bulk load may.
        execute pg_catalog.format($sql$
            select pgrag.bm25_apply(%1$s, pg_catalog.array_agg(x.tenant_id), pg_catalog.array_agg(x.id),
                                    pg_catalog.array_agg(x.language::text), pg_catalog.array_agg(x.fts))
            from (select c.*, (pg_catalog.row_number() over () - 1) / 10000 as batch
                  from %2$I as c
                  where %3$s
                    and (c.tenant_id is distinct from $1 or c.in_shared_graph)
                    and ($2::text[] is null or (c.tenant_id, c.id) not in (
                        select u.t, u.i from rows from (pg_catalog.unnest($2::text[]), pg_catalog.unnest($3::bigint[])) as u(t, i)))) as x
            group by x.batch$sql$,
            v_side.sign, v_side.rows, pg_catalog.format(v_changed, v_side.other))
        using v_bulk, case when v_side.sign < 0 then v_listed_tenants end,
              case when v_side.sign < 0 then v_listed_ids end;
        if v_side.sign < 0 and v_listed_ids is not null then
            delete from pgrag.bm25_backlog as b
             where b.tenant_id = any (v_listed_tenants)
               and (b.tenant_id, b.chunk_id) in (
                   select u.t, u.i from rows from (pg_catalog.unnest(v_listed_tenants),
                                                  pg_catalog.unnest(v_listed_ids)) as u(t, i));
        end if;
    end loop;
    return null;
end
$$;
comment on function pgrag.bm25_chunks_changed() is
'Trigger function (after insert, update or delete on pgrag.chunks, per statement, with transition tables old_chunks and new_chunks): removes deleted chunks from the BM25 index and adds inserted ones; of updated chunks, re-indexes those whose fts, language, tenant or id changed. SECURITY DEFINER: the only writer of the BM25 tables, which no API role may write; it indexes the rows of the firing statement alone. Rows the owner''s bulk load of a tenant inserts (pgrag.bulk_replace_document_chunks) are listed in pgrag.bm25_backlog instead, for pgrag.finish_bulk_load; a listed row that is deleted or changed leaves the backlog instead of the postings.';

create or replace trigger chunks_bm25_insert
    after insert on pgrag.chunks
    referencing new table as new_chunks
    for each statement execute function pgrag.bm25_chunks_changed();

create or replace trigger chunks_bm25_delete
    after delete on pgrag.chunks
    referencing old table as old_chunks
    for each statement execute function pgrag.bm25_chunks_changed();

create or replace trigger chunks_bm25_update
    after update on pgrag.chunks
    referencing old table as old_chunks new table as new_chunks
    for each statement execute function pgrag.bm25_chunks_changed();

-- Earlier versions had a trigger function per event; the triggers above no longer use them.
drop function if exists pgrag.bm25_chunks_inserted();
drop function if exists pgrag.bm25_chunks_deleted();
drop function if exists pgrag.bm25_chunks_updated();
