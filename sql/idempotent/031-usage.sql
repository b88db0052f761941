-- Token usage and its cost.
-- Contract. Provides: pgrag.record_usage (the one way usage is written: the ingester, the
--   worker, pgrag reembed, the search commands and pgrag ask call it as the tenant) and
--   pgrag.usage_costs (usage priced with pgrag.model_prices, for pgrag stats and operators).
--   Relies on: pgrag.token_usage and pgrag.model_prices (incremental/010),
--   pgrag.current_tenant_id and pgrag.check_argument (001-helpers.sql).

create or replace function pgrag.record_usage(
    operation text,
    provider text,
    model text,
    input_tokens bigint default 0,
    output_tokens bigint default 0,
    requests bigint default 1,
    cache_hits bigint default 0
)
returns void
language plpgsql
volatile
security invoker
set search_path = pg_catalog, pg_temp
as $$
declare
    v_tenant text := pgrag.current_tenant_id();
begin
    if v_tenant is null then
        raise exception 'record_usage needs a tenant: no tenant claim in request.jwt.claims'
            using errcode = '22023',
                  hint = 'act as the tenant first (pgrag.set_request_tenant, or a JWT with the tenant claim).';
    end if;
    if operation is null or not (operation = any (array['ingest', 'worker', 'reembed', 'query', 'chat'])) then
        raise exception 'operation must be one of ingest, worker, reembed, query, chat (got %)',
            pg_catalog.quote_nullable(pg_catalog.left(operation, 100))
            using errcode = '22023';
    end if;
    if provider is null or provider operator(pg_catalog.!~) '[^[:space:]]' or pg_catalog.length(provider) > 100 then
        raise exception 'provider must be a non-blank name of at most 100 characters'
            using errcode = '22023';
    end if;
    if model is null or model operator(pg_catalog.!~) '[^[:space:]]' or pg_catalog.length(model) > 200 then
        raise exception 'model must be a non-blank name of at most 200 characters'
            using errcode = '22023';
    end if;
    perform pgrag.check_argument('input_tokens', input_tokens, 0, 1e12);
    perform pgrag.check_argument('output_tokens', output_tokens, 0, 1e12);
    perform pgrag.check_argument('requests', requests, 0, 1e9);
    perform pgrag.check_argument('cache_hits', cache_hits, 0, 1e9);
    -- Each backend adds to its own shard: concurrent searches of a tenant never queue on a row.
    insert into pgrag.token_usage as u (tenant_id, day, operation, provider, model, shard,
                                        requests, input_tokens, output_tokens, cache_hits)
    values (v_tenant, (pg_catalog.now() at time zone 'UTC')::date, record_usage.operation,
            record_usage.provider, record_usage.model, pg_catalog.pg_backend_pid() % 16,
            coalesce(record_usage.requests, 0), coalesce(record_usage.input_tokens, 0),
            coalesce(record_usage.output_tokens, 0), coalesce(record_usage.cache_hits, 0))
    on conflict on constraint token_usage_pkey do update
        set requests = u.requests + excluded.requests,
            input_tokens = u.input_tokens + excluded.input_tokens,
            output_tokens = u.output_tokens + excluded.output_tokens,
            cache_hits = u.cache_hits + excluded.cache_hits;
end
$$;
comment on function pgrag.record_usage(text, text, text, bigint, bigint, bigint, bigint) is
'Adds usage of the current tenant (from the claims) for today (UTC) to pgrag.token_usage: operation (ingest, worker, reembed, query, chat), provider and model, input and output tokens, model calls (requests) and query-embedding cache hits. The only writer of usage: the ingester, the worker, pgrag reembed, pgrag search/ask/eval. Raises 22023 without a tenant or for a value out of range (tokens 0-1e12, requests and cache_hits 0-1e9).';

create or replace function pgrag.usage_costs(
    since date default null,
    until date default null,
    tenant text default null
)
returns table (
    tenant_id text,
    operation text,
    provider text,
    model text,
    requests bigint,
    input_tokens bigint,
    output_tokens bigint,
    cache_hits bigint,
    cost numeric,
    priced boolean
)
language sql
stable
security invoker
set search_path = pg_catalog, pg_temp
as $$
    -- Each day's usage at the price valid that day (the latest valid_from on or before it);
    -- a local model without a price costs 0, any other model without one is unpriced (null).
    select u.tenant_id, u.operation, u.provider, u.model,
           pg_catalog.sum(u.requests)::bigint, pg_catalog.sum(u.input_tokens)::bigint,
           pg_catalog.sum(u.output_tokens)::bigint, pg_catalog.sum(u.cache_hits)::bigint,
           case when pg_catalog.bool_and(p.priced) then
               pg_catalog.round(pg_catalog.sum(u.input_tokens * p.input_per_million / 1000000
                                               + u.output_tokens * p.output_per_million / 1000000), 8)
           end,
           pg_catalog.bool_and(p.priced)
    from pgrag.token_usage as u
    cross join lateral (
        select coalesce(m.input_per_million, case when u.provider = 'local' then 0 end) as input_per_million,
               coalesce(m.output_per_million, case when u.provider = 'local' then 0 end) as output_per_million,
               m.model is not null or u.provider = 'local' as priced
        from (select 1) as one
        left join lateral (
            select x.model, x.input_per_million, x.output_per_million
            from pgrag.model_prices as x
            where x.provider = u.provider and x.model = u.model and x.valid_from <= u.day
            order by x.valid_from desc
            limit 1
        ) as m on true
    ) as p
    where (usage_costs.since is null or u.day >= usage_costs.since)
      and (usage_costs.until is null or u.day < usage_costs.until)
      and (usage_costs.tenant is null or u.tenant_id = usage_costs.tenant)
    group by u.tenant_id, u.operation, u.provider, u.model
    order by u.tenant_id, u.operation, u.provider, u.model
$$;
comment on function pgrag.usage_costs(date, date, text) is
'Usage per tenant, operation, provider and model from since (inclusive) to until (exclusive, days in UTC), optionally of one tenant, with its cost: each day''s tokens at the price pgrag.model_prices lists for that day (per million input and output tokens). A local model without a listed price costs 0; for any other unlisted model cost is null and priced false. Runs as the caller: row-level security applies to pgrag.token_usage.';
