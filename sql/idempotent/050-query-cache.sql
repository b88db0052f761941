-- Query-embedding cache: reading it (read-only, for the search functions), and writing it.
-- Contract. Provides: pgrag.cached_query_embedding (read-only: the search functions and the
--   text functions of 051-text-search.sql use it, so they still run on a read replica);
--   pgrag.query_cache_get and pgrag.query_cache_put (the writers: clients that embed queries
--   themselves, on the primary), pgrag.prune_query_cache and pgrag.query_cache_max_entries (the
--   size bound), pgrag.check_cache_entry and pgrag.cache_bounded (shared with the answer cache);
--   the triggers query_embeddings_checked and query_embeddings_bounded, which hold
--   every write to the cache to the installation's model and dimension and to the bound.
--   Relies on: pgrag.query_embeddings, pgrag.normalize_query and
--   pgrag.query_cache_key (incremental/008), pgrag.current_tenant_id and the argument checks
--   (001-helpers.sql). Callers: anon, authenticated and service_role read;
--   authenticated and service_role write (910-function-privileges.sql), each as its tenant:
--   row level security keeps a tenant to its own entries, and a request without a tenant
--   neither reads nor writes the cache.
--
-- Size bound: at most pgrag.query_cache_max_entries() entries (10,000) per tenant, whatever
-- the models, each of the installation's model and dimension (pgrag.embedding_config): at most
-- 10,000 vectors of embedding_config.dims (at most 4,000) floats per tenant. The triggers below
-- enforce both on every write, however it is made (pgrag.query_cache_put, or an INSERT a
-- tenant's direct session makes): a tenant storing a new model name each call, or vectors of
-- 16,000 dimensions, once grew the cache without bound. The tenant's least recently used
-- entries beyond the bound go in the same statement; pgrag.prune_query_cache applies a bound to
-- every tenant the caller sees (an operator's job, e.g. after lowering the bound).

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
'Most entries the query-embedding cache keeps per tenant, all models together (10,000): every insert drops the tenant''s least recently used beyond it (trigger query_embeddings_bounded).';

-- The two checks every cache write meets (this cache's and the answer cache's,
-- 053-answer-cache.sql), written once: pgrag.check_cache_entry (the model and the vector) and
-- the trigger function pgrag.cache_bounded (the bound per tenant), which each cache's triggers
-- call with their own table, columns and bound.

create or replace function pgrag.check_cache_entry(
    relation regclass, entry_model text, entry_embedding @extschema:vector@.vector, argument text)
returns void
language plpgsql
stable
security invoker
set search_path = pg_catalog, pg_temp
as $$
declare
    v_model text;
    v_dims integer;
begin
    -- The owner of the table (the migrator, the test fixtures) may store anything.
    if pg_catalog.pg_has_role((select c.relowner from pg_catalog.pg_class as c
                               where c.oid operator(pg_catalog.=) relation), 'USAGE') then
        return;
    end if;
    select c.model, c.dims into v_model, v_dims from pgrag.embedding_config as c;
    if v_model is null or entry_model is distinct from v_model then
        raise exception 'model must be the model of this database''s embeddings (%), got %',
            coalesce(v_model, 'none recorded yet'), pg_catalog.left(entry_model, 200)
            using errcode = '22023',
                  hint = 'pgrag''s argument limits are listed in docs/security.md.';
    end if;
    if @extschema:vector@.vector_dims(entry_embedding) operator(pg_catalog.<>) v_dims
       or (entry_embedding operator(@extschema:vector@.<=>) entry_embedding)
          = 'NaN'::double precision then
        raise exception '% must be a non-zero vector of % dimensions, as the model''s (got %)',
            argument, v_dims, @extschema:vector@.vector_dims(entry_embedding)
            using errcode = '22023',
                  hint = 'pgrag''s argument limits are listed in docs/security.md.';
    end if;
end
$$;
comment on function pgrag.check_cache_entry(regclass, text, @extschema:vector@.vector, text) is
'The check of a cache entry written by any role but the owner of its table (relation): of the model pgrag.embedding_config records, its vector (named argument in the message) non-zero and of its dimension; 22023 otherwise. The caches'' before-row triggers call it.';

create or replace function pgrag.cache_bounded()
returns trigger
language plpgsql
security invoker
set search_path = pg_catalog, pg_temp
as $$
-- tg_argv: [0] the cache table, [1] its key columns, [2] its last-use column, [3] the
-- function that gives its bound per tenant (constants of the trigger's definition).
declare
    v_max integer;
    v_tenants text[];
    v_tenant text;
    v_count bigint;
begin
    execute pg_catalog.format('select %s()', tg_argv[3]) into v_max;
    select pg_catalog.array_agg(distinct n.tenant_id) into v_tenants from new_entries as n;
    foreach v_tenant in array coalesce(v_tenants, '{}') loop
        execute pg_catalog.format(
            'select pg_catalog.count(*) from %s where tenant_id operator(pg_catalog.=) $1',
            tg_argv[0]) into v_count using v_tenant;
        continue when v_count <= v_max;
        execute pg_catalog.format(
            'delete from %1$s where tenant_id operator(pg_catalog.=) $1 and (%2$s) in '
            '(select %2$s from %1$s where tenant_id operator(pg_catalog.=) $1 '
            'order by %3$s, %2$s limit $2)', tg_argv[0], tg_argv[1], tg_argv[2])
        using v_tenant, v_count - v_max;
    end loop;
    return null;
end
$$;
comment on function pgrag.cache_bounded() is
'Trigger function (after insert, per statement, transition table new_entries) of a cache table: for each tenant the statement wrote to, drops its least recently used entries beyond the bound. Arguments: the table, its key columns, its last-use column, the function giving the bound. Runs as the writer (a tenant deletes its own entries).';

create or replace function pgrag.query_embeddings_checked()
returns trigger
language plpgsql
security invoker
set search_path = pg_catalog, pg_temp
as $$
begin
    perform pgrag.check_cache_entry(tg_relid::pg_catalog.regclass, new.model, new.embedding,
                                    'embedding');
    return new;
end
$$;
comment on function pgrag.query_embeddings_checked() is
'Trigger function (before insert or update of model, embedding on pgrag.query_embeddings, per row): pgrag.check_cache_entry, so an entry written by any role but the table''s owner is of the model pgrag.embedding_config records, its embedding non-zero and of its dimension (22023 otherwise).';

create or replace trigger query_embeddings_checked
    before insert or update of model, embedding on pgrag.query_embeddings
    for each row execute function pgrag.query_embeddings_checked();

create or replace trigger query_embeddings_bounded
    after insert on pgrag.query_embeddings
    referencing new table as new_entries
    for each statement execute function pgrag.cache_bounded(
        'pgrag.query_embeddings', 'model, query_sha256', 'last_used_at',
        'pgrag.query_cache_max_entries');
-- (its own trigger function until pgrag.cache_bounded served both caches)
drop function if exists pgrag.query_embeddings_bounded();

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
    if v_tenant is null or query_text is null
       or (select c.model from pgrag.embedding_config as c) is null then
        return false;
    end if;
    -- The model and dimension must be the installation's, and the tenant's least recently
    -- used entries beyond the bound go: the triggers query_embeddings_checked and
    -- query_embeddings_bounded, which hold for any insert.
    -- (now() in VALUES, not in DO UPDATE SET: a Citus coordinator refuses functions there that
    -- are not immutable; the same time either way, the transaction's start)
    insert into pgrag.query_embeddings as q (tenant_id, model, query_sha256, embedding,
                                             last_used_at)
    values (v_tenant, query_cache_put.model, pgrag.query_cache_key(query_text),
            query_cache_put.embedding, pg_catalog.now())
    on conflict on constraint query_embeddings_pkey do update
        set embedding = excluded.embedding, last_used_at = excluded.last_used_at;
    return true;
end
$$;
comment on function pgrag.query_cache_put(text, text, @extschema:vector@.vector) is
'For clients that embed queries themselves (on the primary): caches embedding as the embedding of query_text (normalised) by model for the current tenant, replacing an earlier one, then drops the tenant''s least recently used entries (all models together) beyond pgrag.query_cache_max_entries(). Returns false (stores nothing) without a tenant or before the first ingest recorded a model. Limits: query_text 10,000 characters, model 1-200 characters and the model pgrag.embedding_config records, embedding non-zero, finite, of embedding_config.dims dimensions; else SQLSTATE 22023.';

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
               pg_catalog.row_number() over (partition by q.tenant_id
                                             order by q.last_used_at desc, q.model desc,
                                                      q.query_sha256 desc) as n
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
'Keeps at most max_entries (default pgrag.query_cache_max_entries()) entries per tenant (all models together) in the query-embedding cache, dropping the least recently used; only rows the caller sees (a tenant prunes its own, the owner or service_role every tenant). Returns the number of entries removed. max_entries: 0-10,000,000 (22023).';
