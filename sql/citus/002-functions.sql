-- pgrag on Citus: the functions that need another form on a Citus coordinator.
-- Citus tier: applied by `pgrag migrate --citus` only, after sql/idempotent/ (which re-creates
-- the released forms on every migrate; this file replaces them again right after). Single
-- servers never see this file. docs/scaling.md, "What runs differently on Citus".
--
-- 1. SQL-language functions that read distributed tables. PostgreSQL 15-17 plan each statement
--    of an SQL function once, with its arguments as unbound parameters, and Citus cannot plan a
--    join of distributed tables around unbound parameters ("could not create distributed
--    plan ... parameters in SQL functions"): vector_search, keyword_search, chunk_windows and
--    pgrag.windows (called by hybrid_search with window_size, chunk_windows and build_context)
--    all fail. PL/pgSQL plans with the values (plan_cache_mode = force_custom_plan). So each gets
--    a twin in schema pgrag_citus: the same name, arguments and defaults, its released body
--    verbatim (the argument checks as PERFORM, the query as RETURN QUERY, column names before
--    parameter names as in SQL functions: #variable_conflict use_column), result columns
--    renamed r_* (chunk_windows and windows have an argument and a result column both named
--    chunk_ids, which PL/pgSQL refuses). The released function keeps its signature, grants and
--    comment and becomes one statement that calls its twin (a statement without tables, which
--    Citus leaves to PostgreSQL). tests/test_citus.py checks that each twin holds the body of
--    the released function, so a change there fails until it is made here too.
-- 2. pgrag.set_request_tenant also sets request.jwt.claims with SET LOCAL: Citus replays a SET
--    LOCAL on the workers of the transaction (with citus.propagate_set_commands = local, which
--    pgrag.propagate_request_claims switches on for that statement), where the shards' RLS
--    policies read the tenant; a value from set_config() stays on the coordinator, and the
--    workers see no tenant (no rows).
-- 3. pgrag.propagate_request_claims(): the same for PostgREST, which sets the claims with
--    set_config(): its db-pre-request function (docs/scaling.md, "PostgREST"). It re-sets the
--    values the transaction has and takes no argument.

set local search_path = pg_catalog, pg_temp;

do $$
begin
    if pg_catalog.to_regnamespace('pgrag_citus') is null then
        execute 'create schema pgrag_citus';
    elsif (select n.nspowner from pg_catalog.pg_namespace as n where n.nspname = 'pgrag_citus')
          operator(pg_catalog.<>) (select r.oid from pg_catalog.pg_roles as r where r.rolname = current_user) then
        -- a schema someone else created first must not be trusted (as for schema pgrag)
        raise exception 'schema pgrag_citus exists and belongs to another role'
            using errcode = '42501';
    end if;
end
$$;
comment on schema pgrag_citus is 'pgrag on Citus: PL/pgSQL twins of SQL functions (sql/citus/002-functions.sql).';

create or replace function pgrag_citus.windows(
    tenant_ids text[],
    chunk_ids bigint[],
    window_size integer default 1,
    scores double precision[] default null,
    decay double precision default 0.5
)
returns table (
    r_tenant_id text, r_document_id bigint, r_first_chunk_index integer, r_last_chunk_index
    integer, r_chunk_ids bigint[], r_content text, r_page integer, r_heading_path text[],
    r_score double precision, r_title text, r_source_uri text, r_source_type text,
    r_hit_chunk_ids bigint[], r_best_chunk_id bigint, r_first_hit bigint, r_token_count integer
)
language plpgsql
stable
rows 10
security invoker
set search_path = pg_catalog, pg_temp
set plan_cache_mode = force_custom_plan
as $$
#variable_conflict use_column
begin
    -- Argument limits (docs/security.md): SQLSTATE 22023 before any work.
    perform pgrag.check_length('tenant_ids', pg_catalog.cardinality(windows.tenant_ids), 2000),
           pgrag.check_length('chunk_ids', pg_catalog.cardinality(windows.chunk_ids), 2000),
           pgrag.check_length('scores', pg_catalog.cardinality(windows.scores), 2000),
           pgrag.check_argument('window_size', windows.window_size, 0, 10),
           pgrag.check_argument('decay', windows.decay, 0, 1),
           (select pg_catalog.count(pgrag.check_argument('scores', u.s, -1e6, 1e6))
            from pg_catalog.unnest(windows.scores) as u(s));

    return query
    with hits as (
        select u.t, u.id, u.ord, coalesce(u.s, 1.0) as s
        from rows from (pg_catalog.unnest(tenant_ids), pg_catalog.unnest(chunk_ids), pg_catalog.unnest(scores))
             with ordinality as u(t, id, s, ord)
        where u.id is not null
    ),
    hc as (
        select h.t, h.id, h.ord, h.s, c.document_id, c.chunk_index
        from hits as h
        join pgrag.chunks as c on c.tenant_id = h.t and c.id = h.id
        join pgrag.documents as d on d.tenant_id = c.tenant_id and d.id = c.document_id
        where d.status = 'ready'
          and (pgrag.current_tenant_id() is null or c.tenant_id = pgrag.current_tenant_id())
    ),
    -- The neighbours that exist: a range on the (tenant_id, document_id, chunk_index) key.
    expanded as (
        select hc.t, hc.document_id, n.chunk_index as idx,
               pg_catalog.max(hc.s * pg_catalog.power(coalesce(windows.decay, 0.5),
                                                       pg_catalog.abs(n.chunk_index - hc.chunk_index))) as score,
               pg_catalog.min(hc.ord) filter (where n.chunk_index = hc.chunk_index) as hit_ord
        from hc
        join pgrag.chunks as n
          on n.tenant_id = hc.t and n.document_id = hc.document_id
         and n.chunk_index >= hc.chunk_index - coalesce(windows.window_size, 0)
         and n.chunk_index <= hc.chunk_index + coalesce(windows.window_size, 0)
        group by hc.t, hc.document_id, n.chunk_index
    ),
    present as (
        select e.t, e.document_id, e.idx, e.score, e.hit_ord, c.id, c.content, c.overlap_chars,
               c.page, c.heading_path, c.token_count,
               case when coalesce(windows.window_size, 0) > 0
                    then e.idx - pg_catalog.row_number() over (
                             partition by e.t, e.document_id order by e.idx)
                    else e.idx end as grp
        from expanded as e
        join pgrag.chunks as c
          on c.tenant_id = e.t and c.document_id = e.document_id and c.chunk_index = e.idx
    ),
    marked as (
        select p.*,
               pg_catalog.min(p.idx) over win as first_idx,
               pg_catalog.first_value(p.page) over best as best_page,
               pg_catalog.first_value(p.heading_path) over best as best_heading,
               pg_catalog.first_value(p.id) over best as best_id
        from present as p
        window win as (partition by p.t, p.document_id, p.grp),
               best as (partition by p.t, p.document_id, p.grp order by p.hit_ord nulls last, p.idx)
    ),
    w as (
        select m.t, m.document_id, pg_catalog.min(m.idx) as first_idx, pg_catalog.max(m.idx) as last_idx,
               pg_catalog.array_agg(m.id order by m.idx) as ids,
               pg_catalog.string_agg(
                   case when m.idx = m.first_idx then m.content
                        when m.overlap_chars > 0 then pg_catalog.substr(m.content, m.overlap_chars + 1)
                        else E'\n' operator(pg_catalog.||) m.content end,
                   '' order by m.idx) as content,
               m.best_page as page,
               m.best_heading as heading_path,
               pg_catalog.max(m.score) as score,
               pg_catalog.array_agg(m.id order by m.idx) filter (where m.hit_ord is not null) as hit_ids,
               m.best_id,
               pg_catalog.min(m.hit_ord) as first_hit,
               pg_catalog.sum(m.token_count)::integer as token_count
        from marked as m
        group by m.t, m.document_id, m.grp, m.best_page, m.best_heading, m.best_id
    )
    select w.t, w.document_id, w.first_idx, w.last_idx, w.ids, w.content, w.page, w.heading_path,
           w.score, d.title, d.source_uri, d.source_type, w.hit_ids, w.best_id, w.first_hit,
           w.token_count
    from w
    join pgrag.documents as d on d.tenant_id = w.t and d.id = w.document_id
    order by w.first_hit;
end
$$;
comment on function pgrag_citus.windows is
'Citus twin of pgrag.windows: its released SQL body run by PL/pgSQL (sql/citus/002-functions.sql).';

create or replace function pgrag.windows(
    tenant_ids text[],
    chunk_ids bigint[],
    window_size integer default 1,
    scores double precision[] default null,
    decay double precision default 0.5
)
returns table (
    tenant_id text, document_id bigint, first_chunk_index integer, last_chunk_index integer,
    chunk_ids bigint[], content text, page integer, heading_path text[], score double precision,
    title text, source_uri text, source_type text, hit_chunk_ids bigint[], best_chunk_id bigint,
    first_hit bigint, token_count integer
)
language sql
stable
rows 10
security invoker
set search_path = pg_catalog, pg_temp
as $$
    select * from pgrag_citus.windows(windows.tenant_ids, windows.chunk_ids, windows.window_size, windows.scores, windows.decay)
$$;

create or replace function pgrag_citus.vector_search(
    query_embedding @extschema:vector@.vector,
    match_count integer default 10,
    min_similarity double precision default null,
    ef_search integer default null,
    document_ids bigint[] default null,
    metadata_filter jsonb default null,
    source_types text[] default null,
    created_after timestamptz default null,
    created_before timestamptz default null
)
returns table (
    r_chunk_id bigint, r_document_id bigint, r_chunk_index integer, r_title text, r_source_uri
    text, r_source_type text, r_page integer, r_heading_path text[], r_content text,
    r_similarity double precision, r_rank bigint, r_tenant_id text
)
language plpgsql
stable
security invoker
set search_path = pg_catalog, pg_temp
set plan_cache_mode = force_custom_plan
as $$
#variable_conflict use_column
begin
    -- Argument limits (docs/security.md): SQLSTATE 22023 before any work.
    perform pgrag.check_query_embedding('query_embedding', vector_search.query_embedding),
           pgrag.check_argument('match_count', vector_search.match_count, 0, 1000, true),
           pgrag.check_argument('min_similarity', vector_search.min_similarity, '-Infinity', 'Infinity'),
           pgrag.check_argument('ef_search', vector_search.ef_search, 1, 1000, true),
           pgrag.check_length('document_ids', pg_catalog.cardinality(vector_search.document_ids), 1000),
           pgrag.check_length('source_types', pg_catalog.cardinality(vector_search.source_types), 100),
           pgrag.check_length('metadata_filter',
                              pg_catalog.octet_length(vector_search.metadata_filter::text), 10000, 'bytes');

    return query
    select c.id, c.document_id, c.chunk_index, d.title, d.source_uri, d.source_type, c.page,
           c.heading_path, c.content, 1 - v.distance,
           pg_catalog.row_number() over (order by v.distance, v.chunk_id), c.tenant_id
    from pgrag.vector_candidates(vector_search.query_embedding,
                                 least(vector_search.match_count, 1000),
                                 vector_search.ef_search, vector_search.document_ids,
                                 vector_search.metadata_filter, vector_search.source_types,
                                 vector_search.created_after, vector_search.created_before) as v
    join pgrag.chunks as c on c.tenant_id = v.tenant_id and c.id = v.chunk_id
    join pgrag.documents as d on d.tenant_id = c.tenant_id and d.id = c.document_id
    where vector_search.min_similarity is null or 1 - v.distance >= vector_search.min_similarity
    order by v.distance, v.chunk_id;
end
$$;
comment on function pgrag_citus.vector_search is
'Citus twin of public.vector_search: its released SQL body run by PL/pgSQL (sql/citus/002-functions.sql).';

create or replace function public.vector_search(
    query_embedding @extschema:vector@.vector,
    match_count integer default 10,
    min_similarity double precision default null,
    ef_search integer default null,
    document_ids bigint[] default null,
    metadata_filter jsonb default null,
    source_types text[] default null,
    created_after timestamptz default null,
    created_before timestamptz default null
)
returns table (
    chunk_id bigint, document_id bigint, chunk_index integer, title text, source_uri text,
    source_type text, page integer, heading_path text[], content text,
    similarity double precision, rank bigint, tenant_id text
)
language sql
stable
security invoker
set search_path = pg_catalog, pg_temp
as $$
    select * from pgrag_citus.vector_search(vector_search.query_embedding, vector_search.match_count, vector_search.min_similarity, vector_search.ef_search, vector_search.document_ids, vector_search.metadata_filter, vector_search.source_types, vector_search.created_after, vector_search.created_before)
$$;

create or replace function pgrag_citus.keyword_search(
    query_text text,
    match_count integer default 10,
    language text default null,
    k1 double precision default 1.5,
    b double precision default 0.75,
    document_ids bigint[] default null,
    metadata_filter jsonb default null,
    source_types text[] default null,
    created_after timestamptz default null,
    created_before timestamptz default null
)
returns table (
    r_chunk_id bigint, r_document_id bigint, r_chunk_index integer, r_title text, r_source_uri
    text, r_source_type text, r_page integer, r_heading_path text[], r_content text, r_score
    double precision, r_rank bigint, r_tenant_id text
)
language plpgsql
stable
security invoker
set search_path = pg_catalog, pg_temp
set plan_cache_mode = force_custom_plan
as $$
#variable_conflict use_column
begin
    -- Argument limits (docs/security.md): SQLSTATE 22023 before any work (keyword_candidates
    -- checks the others).
    perform pgrag.check_argument('match_count', keyword_search.match_count, 0, 1000, true);

    return query
    select c.id, c.document_id, c.chunk_index, d.title, d.source_uri, d.source_type, c.page,
           c.heading_path, c.content, k.score,
           pg_catalog.row_number() over (order by k.score desc, k.chunk_id), c.tenant_id
    from pgrag.keyword_candidates(keyword_search.query_text, least(keyword_search.match_count, 1000),
                                  keyword_search.language, keyword_search.k1, keyword_search.b,
                                  keyword_search.document_ids, keyword_search.metadata_filter,
                                  keyword_search.source_types, keyword_search.created_after,
                                  keyword_search.created_before) as k
    join pgrag.chunks as c on c.tenant_id = k.tenant_id and c.id = k.chunk_id
    join pgrag.documents as d on d.tenant_id = c.tenant_id and d.id = c.document_id
    order by k.score desc, k.chunk_id;
end
$$;
comment on function pgrag_citus.keyword_search is
'Citus twin of public.keyword_search: its released SQL body run by PL/pgSQL (sql/citus/002-functions.sql).';

create or replace function public.keyword_search(
    query_text text,
    match_count integer default 10,
    language text default null,
    k1 double precision default 1.5,
    b double precision default 0.75,
    document_ids bigint[] default null,
    metadata_filter jsonb default null,
    source_types text[] default null,
    created_after timestamptz default null,
    created_before timestamptz default null
)
returns table (
    chunk_id bigint, document_id bigint, chunk_index integer, title text, source_uri text,
    source_type text, page integer, heading_path text[], content text,
    score double precision, rank bigint, tenant_id text
)
language sql
stable
security invoker
set search_path = pg_catalog, pg_temp
as $$
    select * from pgrag_citus.keyword_search(keyword_search.query_text, keyword_search.match_count, keyword_search.language, keyword_search.k1, keyword_search.b, keyword_search.document_ids, keyword_search.metadata_filter, keyword_search.source_types, keyword_search.created_after, keyword_search.created_before)
$$;

create or replace function pgrag_citus.chunk_windows(
    chunk_ids bigint[],
    window_size integer default 1,
    scores double precision[] default null,
    decay double precision default 0.5
)
returns table (
    r_document_id bigint, r_first_chunk_index integer, r_last_chunk_index integer, r_chunk_ids
    bigint[], r_content text, r_page integer, r_heading_path text[], r_score double precision,
    r_title text, r_source_uri text, r_hit_chunk_ids bigint[], r_token_count integer, r_rank
    bigint, r_tenant_id text
)
language plpgsql
stable
security invoker
set search_path = pg_catalog, pg_temp
set plan_cache_mode = force_custom_plan
as $$
#variable_conflict use_column
begin
    -- Argument limits (docs/security.md): SQLSTATE 22023 before any work.
    perform pgrag.check_length('chunk_ids', pg_catalog.cardinality(chunk_windows.chunk_ids), 1000),
           pgrag.check_length('scores', pg_catalog.cardinality(chunk_windows.scores), 1000),
           pgrag.check_argument('window_size', chunk_windows.window_size, 0, 10),
           pgrag.check_argument('decay', chunk_windows.decay, 0, 1),
           (select pg_catalog.count(pgrag.check_argument('scores', u.s, -1e6, 1e6))
            from pg_catalog.unnest(chunk_windows.scores) as u(s));

    return query
    with ids as (
        select c.tenant_id, u.id, u.ord
        from pg_catalog.unnest(chunk_windows.chunk_ids) with ordinality as u(id, ord)
        join pgrag.chunks as c on c.id = u.id
        where pgrag.current_tenant_id() is null or c.tenant_id = pgrag.current_tenant_id()
    )
    select w.document_id, w.first_chunk_index, w.last_chunk_index, w.chunk_ids, w.content, w.page,
           w.heading_path, w.score, w.title, w.source_uri, w.hit_chunk_ids, w.token_count,
           pg_catalog.row_number() over (order by w.score desc, w.first_hit), w.tenant_id
    from pgrag.windows(
        (select pg_catalog.array_agg(ids.tenant_id order by ids.ord) from ids),
        (select pg_catalog.array_agg(ids.id order by ids.ord) from ids),
        chunk_windows.window_size,
        (select pg_catalog.array_agg(chunk_windows.scores[ids.ord] order by ids.ord) from ids),
        chunk_windows.decay) as w
    order by w.score desc, w.first_hit;
end
$$;
comment on function pgrag_citus.chunk_windows is
'Citus twin of public.chunk_windows: its released SQL body run by PL/pgSQL (sql/citus/002-functions.sql).';

create or replace function public.chunk_windows(
    chunk_ids bigint[],
    window_size integer default 1,
    scores double precision[] default null,
    decay double precision default 0.5
)
returns table (
    document_id bigint, first_chunk_index integer, last_chunk_index integer, chunk_ids bigint[],
    content text, page integer, heading_path text[], score double precision,
    title text, source_uri text, hit_chunk_ids bigint[], token_count integer, rank bigint,
    tenant_id text
)
language sql
stable
security invoker
set search_path = pg_catalog, pg_temp
as $$
    select * from pgrag_citus.chunk_windows(chunk_windows.chunk_ids, chunk_windows.window_size, chunk_windows.scores, chunk_windows.decay)
$$;

create or replace function pgrag.set_request_tenant(tenant text)
returns void
language plpgsql
volatile
security invoker
set search_path = pg_catalog, pg_temp
as $$
declare
    v_path text[] := pg_catalog.string_to_array(
        coalesce(nullif(pg_catalog.current_setting('pgrag.tenant_claim', true), ''), 'tenant_id'),
        '.');
    v_claims jsonb := pg_catalog.to_jsonb(tenant);
begin
    if tenant is null or tenant operator(pg_catalog.~) '^[[:space:]]*$' then
        raise exception 'a tenant id must be a non-blank string'
            using errcode = '22023';
    end if;
    -- {"a": {"b": tenant}} for the path a.b, innermost first.
    for i in reverse pg_catalog.array_upper(v_path, 1) .. 1 loop
        v_claims := pg_catalog.jsonb_build_object(v_path[i], v_claims);
    end loop;
    -- Local to the transaction: it ends with the transaction, so a pooled server connection
    -- never carries it to the next client. On Citus set again with SET LOCAL, which Citus
    -- replays on the workers the transaction uses (sql/citus/002-functions.sql, 2).
    perform pg_catalog.set_config('request.jwt.claims', v_claims::text, true);
    perform pgrag.propagate_request_claims();
end
$$;
comment on function pgrag.set_request_tenant(text) is
'Acts as tenant for the rest of the current transaction: sets request.jwt.claims (transaction-local, as PostgREST does) with tenant at the claim path pgrag.tenant_claim names (default tenant_id). For trusted direct sessions (the pgrag CLI and ingester call only this); raises 22023 for a null or blank tenant. On Citus the claims are set with SET LOCAL, so the workers see them too.';

create or replace function pgrag.propagate_request_claims()
returns void
language plpgsql
volatile
security invoker
set search_path = pg_catalog, pg_temp
as $$
declare
    v_claims text := pg_catalog.current_setting('request.jwt.claims', true);
    v_path text := pg_catalog.current_setting('pgrag.tenant_claim', true);
    v_propagate text := pg_catalog.current_setting('citus.propagate_set_commands');
begin
    -- The values this transaction already has, set again with SET LOCAL (not set_config), which
    -- Citus replays on the workers; the claim path too, so that pgrag.current_tenant_id() reads
    -- the same claim there as here. It takes no argument: it cannot make anyone another tenant.
    -- Propagation is switched on for these two statements only: with it on, Citus would send
    -- the workers the whole query string of any later SET LOCAL a client sends (with every
    -- statement that string holds).
    perform pg_catalog.set_config('citus.propagate_set_commands', 'local', true);
    if v_claims is not null then
        execute pg_catalog.format('set local request.jwt.claims = %L', v_claims);
    end if;
    if nullif(v_path, '') is not null then
        execute pg_catalog.format('set local pgrag.tenant_claim = %L', v_path);
    end if;
    perform pg_catalog.set_config('citus.propagate_set_commands', v_propagate, true);
end
$$;
comment on function pgrag.propagate_request_claims() is
'Citus only: sets the current request.jwt.claims and pgrag.tenant_claim again with SET LOCAL, which Citus replays on the workers, where the shards'' RLS policies read the tenant. PostgREST''s db-pre-request on a Citus coordinator (docs/scaling.md); pgrag.set_request_tenant calls it.';

-- Privileges, as sql/idempotent/003-policies.sql gives them to the functions they replace:
-- the API roles reach the twins through the released functions (security invoker: the caller
-- needs EXECUTE on each function of the chain); the claims hook is for the API roles and the
-- CLI's direct sessions; acting as a tenant is not for the API roles.
revoke all on schema pgrag_citus from public;
grant usage on schema pgrag_citus to anon, authenticated, service_role;
revoke all on all functions in schema pgrag_citus from public;
grant execute on all functions in schema pgrag_citus to anon, authenticated, service_role;
revoke all on function pgrag.propagate_request_claims() from public;
grant execute on function pgrag.propagate_request_claims() to anon, authenticated, service_role;
revoke all on function pgrag.set_request_tenant(text) from public, anon, authenticated, service_role;
