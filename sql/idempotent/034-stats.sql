-- Figures per tenant for operators: pgrag stats.
-- Contract. Provides: pgrag.tenant_stats (pgrag stats reads it; the owner's, like every
--   operator function). Relies on: pgrag.documents, pgrag.corpus_stats, pgrag.search_log,
--   pgrag.usage_costs (031-usage.sql); reads the view pgrag.queue_status when it exists (the
--   document queue), by name and defensively, so this file does not depend on it.

create or replace function pgrag.tenant_stats(tenant text default null, since date default null)
returns table (
    tenant_id text,
    documents jsonb,
    document_count bigint,
    chunk_count bigint,
    queue jsonb,
    embedding_tokens bigint,
    query_embeddings bigint,
    cache_hits bigint,
    cache_hit_rate double precision,
    chat_input_tokens bigint,
    chat_output_tokens bigint,
    cost numeric,
    unpriced_models text[],
    searches_logged bigint
)
language plpgsql
stable
security invoker
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    v_queues jsonb;
begin
    -- The queue's per-tenant view, when the queue is installed (one row per tenant, with a
    -- tenant_id column): each tenant's row as JSON. Any other shape: no queue figures.
    if pg_catalog.to_regclass('pgrag.queue_status') is not null then
        begin
            execute 'select pg_catalog.jsonb_object_agg(q.tenant_id, pg_catalog.to_jsonb(q) operator(pg_catalog.-) ''tenant_id'') '
                    'from pgrag.queue_status as q '
                    'where $1 is null or q.tenant_id operator(pg_catalog.=) $1'
            into v_queues
            using tenant;
        exception when undefined_column or undefined_function or datatype_mismatch then
            v_queues := null;
        end;
    end if;
    return query
    with docs as (
        select s.tenant_id, pg_catalog.jsonb_object_agg(s.status, s.n order by s.status) as documents,
               pg_catalog.sum(s.n)::bigint as document_count
        from (select d.tenant_id, d.status, pg_catalog.count(*) as n
              from pgrag.documents as d
              where tenant_stats.tenant is null or d.tenant_id = tenant_stats.tenant
              group by d.tenant_id, d.status) as s
        group by s.tenant_id
    ), chunks as (
        select c.tenant_id, pg_catalog.sum(c.chunk_count)::bigint as chunk_count
        from pgrag.corpus_stats as c
        where tenant_stats.tenant is null or c.tenant_id = tenant_stats.tenant
        group by c.tenant_id
    ), usage as (
        select u.tenant_id,
               pg_catalog.sum(u.input_tokens) filter (where u.operation <> 'chat')::bigint as embedding_tokens,
               pg_catalog.sum(u.requests) filter (where u.operation = 'query')::bigint as query_embeddings,
               pg_catalog.sum(u.cache_hits) filter (where u.operation = 'query')::bigint as cache_hits,
               pg_catalog.sum(u.input_tokens) filter (where u.operation = 'chat')::bigint as chat_input_tokens,
               pg_catalog.sum(u.output_tokens) filter (where u.operation = 'chat')::bigint as chat_output_tokens,
               pg_catalog.sum(u.cost) as cost,
               pg_catalog.array_agg(distinct u.provider operator(pg_catalog.||) ':' operator(pg_catalog.||) u.model)
                   filter (where not u.priced) as unpriced_models
        from pgrag.usage_costs(tenant_stats.since, null, tenant_stats.tenant) as u
        group by u.tenant_id
    ), logged as (
        select l.tenant_id, pg_catalog.count(*) as searches_logged
        from pgrag.search_log as l
        where (tenant_stats.tenant is null or l.tenant_id = tenant_stats.tenant)
          and (tenant_stats.since is null or l.logged_at >= tenant_stats.since)
        group by l.tenant_id
    ), tenants as (
        select docs.tenant_id from docs
        union select chunks.tenant_id from chunks where chunks.chunk_count > 0
        union select usage.tenant_id from usage
        union select logged.tenant_id from logged
        union select k from pg_catalog.jsonb_object_keys(coalesce(v_queues, '{}'::jsonb)) as k
    )
    select t.tenant_id,
           coalesce(docs.documents, '{}'::jsonb),
           coalesce(docs.document_count, 0),
           coalesce(chunks.chunk_count, 0),
           v_queues operator(pg_catalog.->) t.tenant_id,
           coalesce(usage.embedding_tokens, 0),
           coalesce(usage.query_embeddings, 0),
           coalesce(usage.cache_hits, 0),
           case when coalesce(usage.query_embeddings, 0) + coalesce(usage.cache_hits, 0) > 0
                then usage.cache_hits::double precision
                     / (coalesce(usage.query_embeddings, 0) + usage.cache_hits) end,
           coalesce(usage.chat_input_tokens, 0),
           coalesce(usage.chat_output_tokens, 0),
           coalesce(usage.cost, 0),
           coalesce(usage.unpriced_models, '{}'),
           coalesce(logged.searches_logged, 0)
    from tenants as t
    left join docs on docs.tenant_id = t.tenant_id
    left join chunks on chunks.tenant_id = t.tenant_id
    left join usage on usage.tenant_id = t.tenant_id
    left join logged on logged.tenant_id = t.tenant_id
    where tenant_stats.tenant is null or t.tenant_id = tenant_stats.tenant
    order by t.tenant_id;
end
$$;
comment on function pgrag.tenant_stats(text, date) is
'One row per tenant (or for tenant alone): documents by state (JSON, state -> count) and in all, chunks, the queue (the tenant''s row of pgrag.queue_status as JSON, when that view exists), embedding tokens (documents and queries), query embeddings computed and answered by the cache with the hit rate, chat tokens, cost of the priced models (pgrag.usage_costs; unpriced_models names the models without a price, left out of cost) and searches logged. Usage, cost and the log count from since (a UTC day) on when given. Runs as the caller: row-level security applies.';
