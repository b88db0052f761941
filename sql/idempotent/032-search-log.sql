-- The optional search log: written after a search, by a function of its own.
-- Contract. Provides: public.log_search (the API: authenticated and service_role call it after
--   a search, as the CLI does when pgrag.settings.search_log is on) and the trigger
--   search_log_settings, which applies the operator's settings to every row however it is
--   inserted. Relies on: pgrag.search_log and pgrag.settings (incremental/010),
--   pgrag.current_tenant_id, pgrag.check_argument and pgrag.check_length (001-helpers.sql).
--
-- Why a separate call: the search functions are read-only (stable) so that they run on a hot
-- standby; a log written inside them could not. A client searches (on a replica or not), then
-- calls log_search on the primary; a failed or skipped log never fails the search.

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
    end if;
    new.logged_at := pg_catalog.now();
    return new;
end
$$;
comment on function pgrag.search_log_settings() is
'Trigger function (before insert on pgrag.search_log, per row): stores nothing unless pgrag.settings.search_log is on, drops the query text unless settings.search_log_query_text is on, and sets logged_at.';

create or replace trigger search_log_settings
    before insert on pgrag.search_log
    for each row execute function pgrag.search_log_settings();

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
'Records a search of the current tenant in pgrag.search_log, when the operator turned the log on (pgrag.settings.search_log): mode (hybrid, vector, keyword, context), the latency the client measured in ms (0-3,600,000), rows returned (0-1,000), the top score (finite, within +-1,000,000) and the query text (at most 10,000 characters; stored only when settings.search_log_query_text is on). Returns true when stored, false when logging is off or there is no tenant. Call it after searching, on the primary: the search functions stay read-only. 22023 for a value out of range.';
