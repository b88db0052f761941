-- The optional search log: written after a search, by a function of its own.
-- Contract. Provides: public.log_search (the API: authenticated and service_role call it after
--   a search, as the CLI does when pgrag.settings.search_log is on) and the trigger
--   search_log_settings, which applies the operator's settings to every row however it is
--   inserted and keeps its first 1,000 characters of query text; pgrag.search_log_max_rows and
--   the trigger search_log_bounded, which keep each tenant's log to that many rows. Relies on: pgrag.search_log and pgrag.settings (incremental/010),
--   pgrag.current_tenant_id, pgrag.check_argument and pgrag.check_length (001-helpers.sql).
--
-- Why a separate call: the search functions are read-only (stable) so that they run on a hot
-- standby; a log written inside them could not. A client searches (on a replica or not), then
-- calls log_search on the primary; a failed or skipped log never fails the search.
--
-- Bounds: a tenant writes its log (log_search, or an INSERT from a direct session), so what it
-- may store is bounded per tenant: at most 1,000 characters of query text a row (the rest is
-- cut) and at most pgrag.search_log_max_rows() rows (100,000), the oldest going first. Counting
-- a tenant's rows reads its index entries, so the trigger trims after one insert in 64 on
-- average (chosen by a random draw the session cannot seed), and after every statement that
-- inserted 64 rows or more: a tenant holds at most the bound plus the few rows since its last
-- trim (hundreds with a probability below one in a million).

create or replace function pgrag.search_log_settings()
returns trigger
language plpgsql
security invoker
set search_path = pg_catalog, pg_temp
as $$
declare
    v_log boolean;
    v_text boolean;
begin
    select s.search_log, s.search_log_query_text into v_log, v_text from pgrag.settings as s;
    if not coalesce(v_log, false) then
        return null;  -- logging is off: nothing is stored
    end if;
    if not coalesce(v_text, false) then
        new.query_text := null;  -- no query text unless the operator turned it on
    else
        new.query_text := pg_catalog.left(new.query_text, 1000);
    end if;
    new.logged_at := pg_catalog.now();
    return new;
end
$$;
comment on function pgrag.search_log_settings() is
'Trigger function (before insert on pgrag.search_log, per row): stores nothing unless pgrag.settings.search_log is on, drops the query text unless settings.search_log_query_text is on (else keeps its first 1,000 characters), and sets logged_at.';

create or replace trigger search_log_settings
    before insert on pgrag.search_log
    for each row execute function pgrag.search_log_settings();

create or replace function pgrag.search_log_max_rows()
returns integer
language sql
immutable
parallel safe
security invoker
set search_path = pg_catalog, pg_temp
as $$
    select 100000
$$;
comment on function pgrag.search_log_max_rows() is
'Most rows pgrag.search_log keeps per tenant (100,000): the trigger search_log_bounded drops the oldest beyond it.';

create or replace function pgrag.search_log_bounded()
returns trigger
language plpgsql
security invoker
set search_path = pg_catalog, pg_temp
as $$
declare
    v_max integer := pgrag.search_log_max_rows();
    r record;
    v_edge record;
begin
    for r in
        select n.tenant_id, pg_catalog.count(*) as added
        from new_rows as n
        group by n.tenant_id
        order by n.tenant_id
    loop
        -- One insert in 64 on average (every statement of 64 rows or more): a random byte of
        -- gen_random_uuid, which no setseed can predict.
        continue when r.added < 64
            and pg_catalog.get_byte(pg_catalog.uuid_send(pg_catalog.gen_random_uuid()), 0)
                >= 4 * r.added;
        -- The tenant's newest row past the bound (in (logged_at, id) order: one statement's rows
        -- share their logged_at), and every older one, go.
        select l.logged_at, l.id into v_edge
        from pgrag.search_log as l
        where l.tenant_id = r.tenant_id
        order by l.logged_at desc, l.id desc
        offset v_max limit 1;
        continue when v_edge is null;
        delete from pgrag.search_log as l
         where l.tenant_id = r.tenant_id
           and (l.logged_at, l.id) <= (v_edge.logged_at, v_edge.id);
    end loop;
    return null;
end
$$;
comment on function pgrag.search_log_bounded() is
'Trigger function (after insert on pgrag.search_log, per statement): after one insert in 64 on average, and after every statement of 64 rows or more, drops the oldest rows of each tenant the statement wrote to beyond pgrag.search_log_max_rows(). Runs as the writer (a tenant deletes its own rows).';

create or replace trigger search_log_bounded
    after insert on pgrag.search_log
    referencing new table as new_rows
    for each statement execute function pgrag.search_log_bounded();

create or replace function public.log_search(
    mode text,
    latency_ms double precision,
    row_count integer,
    top_score double precision default null,
    query_text text default null
)
returns boolean
language plpgsql
volatile
security invoker
set search_path = pg_catalog, pg_temp
as $$
declare
    v_tenant text := pgrag.current_tenant_id();
    v_stored integer;
begin
    if mode is null or not (pg_catalog.lower(mode) = any (array['hybrid', 'vector', 'keyword', 'context'])) then
        raise exception 'mode must be one of hybrid, vector, keyword, context (got %)',
            pg_catalog.quote_nullable(pg_catalog.left(mode, 100))
            using errcode = '22023';
    end if;
    if latency_ms is null or row_count is null then
        raise exception 'latency_ms and row_count must be given'
            using errcode = '22023';
    end if;
    perform pgrag.check_argument('latency_ms', latency_ms, 0, 3600000);
    perform pgrag.check_argument('row_count', row_count, 0, 1000);
    perform pgrag.check_argument('top_score', top_score, -1000000, 1000000);
    perform pgrag.check_length('query_text', pg_catalog.length(query_text), 10000, 'characters');
    if v_tenant is null then
        return false;  -- no tenant (anon): nothing to log under
    end if;
    insert into pgrag.search_log (tenant_id, mode, latency_ms, row_count, top_score, query_text)
    values (v_tenant, pg_catalog.lower(mode), latency_ms, row_count, top_score, query_text);
    get diagnostics v_stored = row_count;
    return v_stored > 0;
end
$$;
comment on function public.log_search(text, double precision, integer, double precision, text) is
'Records a search of the current tenant in pgrag.search_log, when the operator turned the log on (pgrag.settings.search_log): mode (hybrid, vector, keyword, context), the latency the client measured in ms (0-3,600,000), rows returned (0-1,000), the top score (finite, within +-1,000,000) and the query text (at most 10,000 characters; stored only when settings.search_log_query_text is on, its first 1,000 characters). Each tenant keeps at most pgrag.search_log_max_rows() rows, the oldest going first. Returns true when stored, false when logging is off or there is no tenant. Call it after searching, on the primary: the search functions stay read-only. 22023 for a value out of range.';
