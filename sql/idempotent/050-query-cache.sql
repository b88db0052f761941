-- Query-embedding cache: reading it (read-only, for the search functions), and writing it.
-- Contract. Provides: pgrag.cached_query_embedding (read-only: the search functions and the
--   text functions of 051-text-search.sql use it, so they still run on a read replica);
--   pgrag.query_cache_get and pgrag.query_cache_put (the writers: clients that embed queries
--   themselves, on the primary), pgrag.prune_query_cache and pgrag.query_cache_max_entries (the
--   size bound). Relies on: pgrag.query_embeddings, pgrag.normalize_query and
--   pgrag.query_cache_key (incremental/008), pgrag.current_tenant_id and the argument checks
--   (001-helpers.sql). Callers: anon, authenticated and service_role read;
--   authenticated and service_role write (910-function-privileges.sql), each as its tenant:
--   row level security keeps a tenant to its own entries, and a request without a tenant
--   neither reads nor writes the cache.
--
-- Size bound: at most pgrag.query_cache_max_entries() entries (10,000) per tenant and model.
-- pgrag.query_cache_put enforces it on every store (the tenant's least recently used entries of
-- that model beyond the bound go, in the same transaction); pgrag.prune_query_cache applies a
-- bound to every tenant the caller sees (an operator's job, e.g. from cron, or after lowering
-- the bound).

create or replace function pgrag.query_cache_max_entries()
returns integer
language sql
immutable
parallel safe
security invoker
set search_path = pg_catalog, pg_temp
as $$
    select 10000
$$;
comment on function pgrag.query_cache_max_entries() is
'Most entries the query-embedding cache keeps per tenant and model (10,000): pgrag.query_cache_put drops the least recently used beyond it.';

create or replace function pgrag.cached_query_embedding(query_text text)
returns @extschema:vector@.vector
language plpgsql
stable
parallel safe
security invoker
set search_path = pg_catalog, pg_temp
as $$
declare
    v_tenant text := pgrag.current_tenant_id();
    v_model text;
begin
    perform pgrag.check_length('query_text', pg_catalog.length(query_text), 10000, 'characters');
    if v_tenant is null or query_text is null then
        return null;
    end if;
    select c.model into v_model from pgrag.embedding_config as c;
    if v_model is null then
        return null;
    end if;
    return (select q.embedding
            from pgrag.query_embeddings as q
            where q.tenant_id = v_tenant and q.model = v_model
              and q.query_sha256 = pgrag.query_cache_key(query_text));
end
$$;
comment on function pgrag.cached_query_embedding(text) is
'The cached embedding of query_text (normalised with pgrag.normalize_query) by the model pgrag.embedding_config records, for the current tenant; null when there is none, without a tenant, or before the first ingest recorded a model. Read-only (counts no hit), so it runs on a read replica. query_text: at most 10,000 characters (22023).';

create or replace function pgrag.query_cache_get(model text, query_text text)
returns @extschema:vector@.vector
language plpgsql
volatile
security invoker
set search_path = pg_catalog, pg_temp
as $$
declare
    v_tenant text := pgrag.current_tenant_id();
    v_embedding @extschema:vector@.vector;
begin
    perform pgrag.check_length('query_text', pg_catalog.length(query_text), 10000, 'characters');
    perform pgrag.check_length('model', pg_catalog.length(model), 200, 'characters');
    if v_tenant is null or model is null or query_text is null then
        return null;
    end if;
    update pgrag.query_embeddings as q
       set hit_count = q.hit_count + 1, last_used_at = pg_catalog.now()
     where q.tenant_id = v_tenant and q.model = query_cache_get.model
       and q.query_sha256 = pgrag.query_cache_key(query_text)
    returning q.embedding into v_embedding;
    return v_embedding;
end
$$;
comment on function pgrag.query_cache_get(text, text) is
'For clients that embed queries themselves (on the primary): the cached embedding of query_text (normalised) by model for the current tenant, or null (also without a tenant); a hit counts in hit_count and last_used_at (the eviction order). Limits: query_text 10,000 characters, model 200; else SQLSTATE 22023.';

create or replace function pgrag.query_cache_put(
    model text,
    query_text text,
    embedding @extschema:vector@.vector
)
returns boolean
language plpgsql
volatile
security invoker
set search_path = pg_catalog, pg_temp
as $$
declare
    v_tenant text := pgrag.current_tenant_id();
    v_max integer := pgrag.query_cache_max_entries();
    v_count bigint;
begin
    perform pgrag.check_length('query_text', pg_catalog.length(query_text), 10000, 'characters');
    if model is null or pg_catalog.length(model) not between 1 and 200 then
        raise exception 'model must be a model name of 1 to 200 characters'
            using errcode = '22023';
    end if;
    if embedding is null
       or @extschema:vector@.vector_dims(embedding) > 16000
       or (embedding operator(@extschema:vector@.<=>) embedding) = 'NaN'::double precision then
        raise exception 'embedding must be a non-zero vector of finite length and at most 16,000 dimensions'
            using errcode = '22023';
    end if;
    if v_tenant is null or query_text is null then
        return false;
    end if;
    -- (now() in VALUES, not in DO UPDATE SET: a Citus coordinator refuses functions there that
    -- are not immutable; the same time either way, the transaction's start)
    insert into pgrag.query_embeddings as q (tenant_id, model, query_sha256, embedding,
                                             last_used_at)
    values (v_tenant, query_cache_put.model, pgrag.query_cache_key(query_text),
            query_cache_put.embedding, pg_catalog.now())
    on conflict on constraint query_embeddings_pkey do update
        set embedding = excluded.embedding, last_used_at = excluded.last_used_at;
    -- The bound: the tenant's least recently used entries of this model beyond it go.
    select pg_catalog.count(*) into v_count
    from pgrag.query_embeddings as q
    where q.tenant_id = v_tenant and q.model = query_cache_put.model;
    if v_count > v_max then
        delete from pgrag.query_embeddings as q
         where (q.tenant_id, q.model, q.query_sha256) in (
                   select o.tenant_id, o.model, o.query_sha256
                   from pgrag.query_embeddings as o
                   where o.tenant_id = v_tenant and o.model = query_cache_put.model
                   order by o.last_used_at, o.query_sha256
                   limit v_count - v_max);
    end if;
    return true;
end
$$;
comment on function pgrag.query_cache_put(text, text, @extschema:vector@.vector) is
'For clients that embed queries themselves (on the primary): caches embedding as the embedding of query_text (normalised) by model for the current tenant, replacing an earlier one, then drops the tenant''s least recently used entries of that model beyond pgrag.query_cache_max_entries(). Returns false (stores nothing) without a tenant. Limits: query_text 10,000 characters, model 1-200 characters, embedding non-zero, finite, at most 16,000 dimensions; else SQLSTATE 22023.';

create or replace function pgrag.prune_query_cache(max_entries integer default null)
returns bigint
language plpgsql
volatile
security invoker
set search_path = pg_catalog, pg_temp
as $$
declare
    v_max integer := coalesce(
        pgrag.check_argument('max_entries', max_entries, 0, 10000000),
        pgrag.query_cache_max_entries());
    v_deleted bigint;
begin
    with ranked as (
        select q.tenant_id, q.model, q.query_sha256,
               pg_catalog.row_number() over (partition by q.tenant_id, q.model
                                             order by q.last_used_at desc, q.query_sha256 desc) as n
        from pgrag.query_embeddings as q
    )
    delete from pgrag.query_embeddings as q
     using ranked as r
     where r.n > v_max
       and q.tenant_id = r.tenant_id and q.model = r.model and q.query_sha256 = r.query_sha256;
    get diagnostics v_deleted = row_count;
    return v_deleted;
end
$$;
comment on function pgrag.prune_query_cache(integer) is
'Keeps at most max_entries (default pgrag.query_cache_max_entries()) entries per tenant and model in the query-embedding cache, dropping the least recently used; only rows the caller sees (a tenant prunes its own, the owner or service_role every tenant). Returns the number of entries removed. max_entries: 0-10,000,000 (22023).';
