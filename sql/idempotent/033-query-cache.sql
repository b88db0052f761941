-- Query-embedding cache: what the clients (pgrag search, ask, eval) read and write.
-- Contract. Provides: pgrag.query_cache_get and pgrag.query_cache_put, called by the CLI as the
--   tenant on the primary; the cache keeps at most pgrag.settings.query_cache_max_entries
--   entries per tenant and model (least recently used go first). Relies on: the cache table
--   pgrag.query_embeddings and pgrag.normalize_query (issue 14, incremental/008), pgrag.settings
--   (incremental/012), pgrag.current_tenant_id and the argument checks (001-helpers.sql).

-- PL/pgSQL, so that this file installs before the cache itself exists (its names are resolved
-- when called): the client functions then fail with undefined_table or undefined_function,
-- which the CLI takes as "no cache installed".
create or replace function pgrag.query_cache_key(query_text text)
returns text
language plpgsql
immutable
strict
parallel safe
security invoker
set search_path = pg_catalog, pg_temp
as $$
begin
    return pg_catalog.encode(pg_catalog.sha256(pg_catalog.convert_to(
        pgrag.normalize_query(query_text), 'UTF8')), 'hex');
end
$$;
comment on function pgrag.query_cache_key(text) is
'Key of a query in the query-embedding cache: the SHA-256 (hex) of pgrag.normalize_query(query_text).';

create or replace function pgrag.query_cache_get(model text, query_text text)
returns @extschema:vector@.vector
language plpgsql
volatile
security invoker
set search_path = pg_catalog, pg_temp
as $$
declare
    v_tenant text := pgrag.current_tenant_id();
    v_key text;
    v_embedding @extschema:vector@.vector;
    v_used timestamptz;
begin
    perform pgrag.check_length('query_text', pg_catalog.length(query_text), 10000, 'characters');
    if v_tenant is null or model is null or query_text is null then
        return null;
    end if;
    v_key := pgrag.query_cache_key(query_text);
    select q.embedding, q.last_used_at into v_embedding, v_used
    from pgrag.query_embeddings as q
    where q.tenant_id = v_tenant and q.model = query_cache_get.model and q.query_sha256 = v_key;
    -- Recency for the eviction order, at most once a minute per entry (a hot query does not
    -- rewrite its row on every hit).
    if v_embedding is not null and v_used < pg_catalog.now() - interval '1 minute' then
        update pgrag.query_embeddings as q
           set last_used_at = pg_catalog.now()
         where q.tenant_id = v_tenant and q.model = query_cache_get.model and q.query_sha256 = v_key;
    end if;
    return v_embedding;
end
$$;
comment on function pgrag.query_cache_get(text, text) is
'The cached embedding of query_text (normalised with pgrag.normalize_query) by model for the current tenant, or null (also without a tenant). Marks the entry used (at most once a minute). query_text: at most 10,000 characters (22023).';

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
    v_max integer;
    v_count bigint;
begin
    perform pgrag.check_length('query_text', pg_catalog.length(query_text), 10000, 'characters');
    if model is null or pg_catalog.length(model) > 200 then
        raise exception 'model must be a model name of at most 200 characters'
            using errcode = '22023';
    end if;
    if embedding is null or (embedding operator(@extschema:vector@.<=>) embedding) = 'NaN'::double precision then
        raise exception 'embedding must be a non-zero vector'
            using errcode = '22023';
    end if;
    select s.query_cache_max_entries into v_max from pgrag.settings as s;
    if v_tenant is null or query_text is null or coalesce(v_max, 0) = 0 then
        return false;
    end if;
    insert into pgrag.query_embeddings as q (tenant_id, model, query_sha256, embedding)
    values (v_tenant, query_cache_put.model, pgrag.query_cache_key(query_text), query_cache_put.embedding)
    on conflict on constraint query_embeddings_pkey do update
        set embedding = excluded.embedding, last_used_at = pg_catalog.now();
    -- Size bound: the tenant's least recently used entries of this model beyond the maximum.
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
'Caches embedding as the embedding of query_text (normalised) by model for the current tenant; keeps at most pgrag.settings.query_cache_max_entries entries per tenant and model, dropping the least recently used. Returns false (stores nothing) without a tenant or when the maximum is 0. 22023 for a query_text over 10,000 characters or a null or zero embedding.';
