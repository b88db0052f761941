-- pgrag usage, cost and the optional search log.
-- Incremental migration: applied once, in one transaction, never edited after release.
--
-- token_usage: tokens spent per tenant, day, operation and model, written through
--   pgrag.record_usage (sql/idempotent/031-usage.sql) by the ingester, the worker, pgrag reembed
--   and the search commands (query embeddings and query-cache hits, chat tokens of pgrag ask).
--   Sharded counters, like corpus_stats: each backend adds to its own shard (pid % 16), so
--   concurrent searches of one tenant never queue on one row; figures are sums over shards.
-- model_prices: optional, written by the operator: price per million input and output tokens
--   of a model from a date on; pgrag.usage_costs turns usage into cost with it.
-- settings: operator settings (one row), not a GUC a tenant could set for its session.
-- search_log: latency, rows, top score and mode of searches, written after a search through
--   public.log_search when settings.search_log is on (the search functions stay read-only).

set local lock_timeout = '10s';
set local search_path = pg_catalog, pg_temp;

create table pgrag.token_usage (
    tenant_id text not null,
    day date not null,
    operation text not null check (operation in ('ingest', 'worker', 'reembed', 'query', 'chat')),
    provider text not null,
    model text not null,
    shard integer not null check (shard between 0 and 15),
    requests bigint not null default 0 check (requests >= 0),
    input_tokens bigint not null default 0 check (input_tokens >= 0),
    output_tokens bigint not null default 0 check (output_tokens >= 0),
    cache_hits bigint not null default 0 check (cache_hits >= 0),
    primary key (tenant_id, day, operation, provider, model, shard)
);
alter table pgrag.token_usage enable row level security;
comment on table pgrag.token_usage is
'Tokens spent per tenant, day (UTC), operation and model, as sharded counters (sum over shard). Written by pgrag.record_usage only; a tenant reads its own rows.';
comment on column pgrag.token_usage.operation is
'ingest, worker or reembed (document embeddings), query (query embeddings; cache_hits counts queries answered by the query-embedding cache) or chat (pgrag ask).';
comment on column pgrag.token_usage.requests is 'Calls to the model (a cache hit is not one).';
comment on column pgrag.token_usage.input_tokens is 'Input tokens: for embeddings the tokens embedded (as the endpoint reports them, or the local model''s tokenizer counts them).';
comment on column pgrag.token_usage.output_tokens is 'Output tokens (chat completions).';
comment on column pgrag.token_usage.cache_hits is 'Query embeddings answered by the query-embedding cache, without calling the model.';

create table pgrag.model_prices (
    provider text not null,
    model text not null,
    valid_from date not null default '-infinity',
    input_per_million numeric not null check (input_per_million >= 0),
    output_per_million numeric not null default 0 check (output_per_million >= 0),
    primary key (provider, model, valid_from)
);
alter table pgrag.model_prices enable row level security;
comment on table pgrag.model_prices is
'Optional price list written by the operator: price per million input and output tokens of a provider''s model (one currency of your choice), from valid_from on. Usage of a day is priced by the latest row valid on that day; local models cost 0 unless listed.';

create table pgrag.settings (
    singleton boolean primary key default true check (singleton),
    search_log boolean not null default false,
    search_log_query_text boolean not null default false,
    updated_at timestamptz not null default now()
);
alter table pgrag.settings enable row level security;
comment on table pgrag.settings is
'Operator settings (one row), changed with UPDATE by the owner; readable, never writable, by the API roles.';
comment on column pgrag.settings.search_log is 'Record searches in pgrag.search_log (public.log_search); off by default.';
comment on column pgrag.settings.search_log_query_text is 'Also record the query text in pgrag.search_log; off by default (without it no query text is stored).';
insert into pgrag.settings default values;

create table pgrag.search_log (
    tenant_id text not null,
    id bigint generated always as identity,
    logged_at timestamptz not null default now(),
    mode text not null check (mode in ('hybrid', 'vector', 'keyword', 'context')),
    latency_ms double precision not null check (latency_ms between 0 and 3600000),
    row_count integer not null check (row_count between 0 and 1000),
    top_score double precision check (top_score between -1000000 and 1000000),
    query_text text check (pg_catalog.length(query_text) <= 10000),
    primary key (tenant_id, id)
);
alter table pgrag.search_log enable row level security;
comment on table pgrag.search_log is
'Searches, when pgrag.settings.search_log is on: when, mode, client-measured latency, rows returned, top score, and the query text only when settings.search_log_query_text is on. Written through public.log_search; a tenant reads its own rows.';
comment on column pgrag.search_log.latency_ms is 'Latency the client measured for the search call, in milliseconds.';
comment on column pgrag.search_log.top_score is 'Score of the first result (null when there was none).';

-- squawk-ignore require-concurrent-index-creation
create index search_log_logged_at on pgrag.search_log (tenant_id, logged_at);
