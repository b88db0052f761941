-- BM25 maintenance: the postings, document frequencies and corpus statistics of pgrag.chunks,
-- kept by statement-level triggers with transition tables.
-- Contract. Provides: pgrag.bm25_apply (adds or removes chunks in pgrag.bm25_postings,
--   pgrag.bm25_lexicon and pgrag.corpus_stats) and the triggers chunks_bm25_* that call it for
--   every insert, delete and update of pgrag.chunks. Relies on: the BM25 tables
--   (incremental/002-bm25.sql, 004-bm25-lexicon.sql); pgrag.current_tenant_id (001-helpers.sql).
--   Callers: the triggers, as the writing role (authenticated and service_role hold EXECUTE on
--   bm25_apply; 910-function-privileges.sql); nothing else should call bm25_apply.

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
    v_slot := coalesce(nullif(pg_catalog.current_setting('pgrag.lexicon_slot', true), '')::integer, -1) + 1;
    perform pg_catalog.set_config('pgrag.lexicon_slot', (v_slot % 8)::text, true);
    -- One writer per (tenant, shard) until commit: a transaction that replaces chunks adds
    -- to the lexicon twice (deleted, then inserted), and two such transactions on one shard
    -- could otherwise lock the rows of common words in opposite orders. Writers on other
    -- shards (other backends, pid % 16) never wait.
    perform pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext(t.tenant_id), v_shard)
    from (select distinct u.tenant_id from pg_catalog.unnest(tenant_ids) as u(tenant_id)
          order by u.tenant_id) as t;

    if sign > 0 then
        -- In key order: consecutive inserts land on the same leaf pages of the primary key
        -- (a bulk load's postings of one word are adjacent), 10-15 % less work than chunk order.
        insert into pgrag.bm25_postings (tenant_id, lexeme, chunk_id, tf, doc_len)
        select c.tenant_id, t.lexeme, c.id, pg_catalog.cardinality(t.positions), l.len
        from rows from (pg_catalog.unnest(tenant_ids), pg_catalog.unnest(chunk_ids),
                        pg_catalog.unnest(ftss)) as c(tenant_id, id, fts)
        cross join lateral (
            select coalesce(pg_catalog.sum(pg_catalog.cardinality(u.positions)) filter (where u.weights[1] <> 'A'), 0)::integer as len
            from pg_catalog.unnest(c.fts) as u
        ) as l
        cross join lateral pg_catalog.unnest(c.fts) as t
        order by c.tenant_id, t.lexeme, c.id;
    else
        delete from pgrag.bm25_postings as p
        using (
            select c.tenant_id, c.id, pg_catalog.unnest(pg_catalog.tsvector_to_array(c.fts)) as lexeme
            from rows from (pg_catalog.unnest(tenant_ids), pg_catalog.unnest(chunk_ids),
                            pg_catalog.unnest(ftss)) as c(tenant_id, id, fts)
        ) as o
        where p.tenant_id = o.tenant_id and p.lexeme = o.lexeme and p.chunk_id = o.id
          -- The same rows; said of p itself, so that a Citus cluster routes the delete to the
          -- shards of these tenants (it runs inside the delete of a shard's chunks).
          and p.tenant_id = any (tenant_ids);
    end if;

    -- Document frequencies, in key order (one lock order for every writer of a shard), and of
    -- added postings the term bounds (largest tf, shortest chunk: incremental/013): removals
    -- leave them, an upper bound still.
    insert into pgrag.bm25_lexicon as x (tenant_id, lexeme, shard, df, max_tf, min_doc_len)
    select c.tenant_id, t.lexeme, v_shard * 8 + v_slot % 8, sign * pg_catalog.count(*),
           case when sign > 0 then pg_catalog.max(pg_catalog.cardinality(t.positions)) end,
           case when sign > 0 then pg_catalog.min(l.len) end
    from rows from (pg_catalog.unnest(tenant_ids), pg_catalog.unnest(ftss)) as c(tenant_id, fts)
    cross join lateral (
        select coalesce(pg_catalog.sum(pg_catalog.cardinality(u.positions)) filter (where u.weights[1] <> 'A'), 0)::integer as len
        from pg_catalog.unnest(c.fts) as u
    ) as l
    cross join lateral pg_catalog.unnest(c.fts) as t
    group by c.tenant_id, t.lexeme
    order by c.tenant_id, t.lexeme
    on conflict (tenant_id, lexeme, shard) do update
        set df = x.df operator(pg_catalog.+) excluded.df,
            max_tf = greatest(x.max_tf, excluded.max_tf),
            min_doc_len = least(x.min_doc_len, excluded.min_doc_len);

    insert into pgrag.corpus_stats as s (tenant_id, language, shard, chunk_count, token_count)
    select c.tenant_id, c.language, v_shard, sign * pg_catalog.count(*),
           sign * coalesce(pg_catalog.sum(l.len), 0)
    from rows from (pg_catalog.unnest(tenant_ids), pg_catalog.unnest(languages),
                    pg_catalog.unnest(ftss)) as c(tenant_id, language, fts)
    cross join lateral (
        select coalesce(pg_catalog.sum(pg_catalog.cardinality(u.positions)) filter (where u.weights[1] <> 'A'), 0) as len
        from pg_catalog.unnest(c.fts) as u
    ) as l
    group by c.tenant_id, c.language
    order by c.tenant_id, c.language
    on conflict (tenant_id, language, shard) do update
        set chunk_count = s.chunk_count operator(pg_catalog.+) excluded.chunk_count,
            token_count = s.token_count operator(pg_catalog.+) excluded.token_count;
end
$$;
comment on function pgrag.bm25_apply(integer, text[], bigint[], text[], tsvector[]) is
'Adds (sign 1) or removes (sign -1) chunks in the BM25 index: postings, document frequencies (pgrag.bm25_lexicon, shard (pid % 16) * 8 + a slot rotating per statement) and corpus statistics (shard pid % 16). Called by the triggers on pgrag.chunks with their transition rows, at most 10,000 at a time; raises 22023 for a sign other than 1/-1, arrays of unequal length or with nulls, and 23505 when a chunk is added twice.';

-- One trigger function for the three events. The batching statement is written once and names
-- the event's transition tables in dynamic SQL: PL/pgSQL cannot pass a transition table to a
-- function, and a static statement that names old_chunks cannot even be prepared in an INSERT
-- trigger, which has no such table (nor a DELETE trigger new_chunks). Dynamic SQL is also planned
-- for the rows of this statement: a plan PL/pgSQL cached for a one-row update, reused for a bulk
-- update, compared every old row with every new one.
create or replace function pgrag.bm25_chunks_changed()
returns trigger
language plpgsql
security invoker
set search_path = pg_catalog, pg_temp
as $$
declare
    v_side record;
begin
    -- Removed rows (old_chunks: delete, update) leave the index, then added rows (new_chunks:
    -- insert, update) enter it. Of an update, only rows whose indexed text (or identity) changed
    -- touch the index: each side without the rows the other side holds unchanged.
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
                  where %3$s) as x
            group by x.batch$sql$,
            v_side.sign, v_side.rows,
            case when tg_op = 'UPDATE' then pg_catalog.format(
                'not exists (select from %I as o where o.tenant_id operator(pg_catalog.=) c.tenant_id '
                'and o.id operator(pg_catalog.=) c.id and o.language operator(pg_catalog.=) c.language '
                'and o.fts operator(pg_catalog.=) c.fts)', v_side.other)
                 else 'true' end);
    end loop;
    return null;
end
$$;
comment on function pgrag.bm25_chunks_changed() is
'Trigger function (after insert, update or delete on pgrag.chunks, per statement, with transition tables old_chunks and new_chunks): removes deleted chunks from the BM25 index and adds inserted ones; of updated chunks, re-indexes those whose fts, language, tenant or id changed.';

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
