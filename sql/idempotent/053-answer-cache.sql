-- Semantic answer cache: an earlier answer reused for a question that means the same.
-- Contract. Provides: public.answer_cache_lookup and public.answer_cache_store (the API:
--   authenticated and service_role, each as its tenant, on the primary: a lookup counts and
--   removes stale entries), pgrag.answer_settings_key, pgrag.answer_sources_fingerprint and
--   pgrag.answer_cache_max_entries (their helpers); the triggers answer_cache_checked and
--   answer_cache_bounded, which hold every write (however it is made) to the installation's
--   model and dimension and to the bound. Relies on: pgrag.check_cache_entry and
--   pgrag.cache_bounded (050-query-cache.sql), pgrag.answer_cache,
--   pgrag.answer_cache_counters and settings.answer_cache_max_entries (incremental/020),
--   pgrag.chunks and pgrag.documents under row level security, pgrag.current_tenant_id and the
--   argument checks (001-helpers.sql). Callers: authenticated and service_role
--   (910-function-privileges.sql); anon has no tenant and neither reads nor writes the cache.
--
-- A cached answer is returned only when (1) it is the caller's tenant's (row level security,
-- and every statement names the tenant), (2) it was made under the same settings (the
-- SHA-256 of the settings jsonb the client passes: chat model, retrieval options, filters,
-- re-ranker, check), (3) its question's embedding is of the model pgrag.embedding_config
-- records and within min_similarity (cosine) of the new question's, and (4) every chunk its
-- context held still exists, in a ready document, with the same content, and each of those
-- documents still has the content_sha256 it had (pgrag.answer_sources_fingerprint, computed
-- again at each lookup): a re-ingest with changed text, a deleted document or a deleted chunk
-- makes the entry stale, and a stale entry is removed when a lookup meets it.
--
-- Size: at most settings.answer_cache_max_entries entries per tenant (1,000 by default, at most
-- 100,000), each with a question of at most 10,000 characters, an answer of at most 100,000, at
-- most 2,000 chunk ids and 1 MB of sources. A lookup compares the new question with the
-- tenant's entries of the same settings and model (no vector index: the bound keeps the scan
-- small, about a millisecond for 1,000 entries of 384 dimensions) and checks at most 20 of the
-- nearest.

set local search_path = pg_catalog, pg_temp;

create or replace function pgrag.answer_cache_max_entries()
returns integer
language sql
stable
parallel safe
security invoker
set search_path = pg_catalog, pg_temp
as $$
    select coalesce((select s.answer_cache_max_entries from pgrag.settings as s), 1000)
$$;
comment on function pgrag.answer_cache_max_entries() is
'Most entries the semantic answer cache keeps per tenant: pgrag.settings.answer_cache_max_entries (the operator''s, default 1,000; 0 stores none).';

create or replace function pgrag.answer_settings_key(settings jsonb)
returns text
language sql
immutable
parallel safe
security invoker
set search_path = pg_catalog, pg_temp
as $$
    select pg_catalog.encode(pg_catalog.sha256(pg_catalog.convert_to(
               coalesce(settings, '{}'::jsonb)::text, 'UTF8')), 'hex')
$$;
comment on function pgrag.answer_settings_key(jsonb) is
'Key of the settings an answer was made under: the SHA-256 (hex) of settings as jsonb text (keys in jsonb''s own order, so key order and white space do not matter); null counts as {}.';

create or replace function pgrag.answer_sources_fingerprint(tenant text, chunk_ids bigint[])
returns text
language sql
stable
parallel safe
security invoker
set search_path = pg_catalog, pg_temp
as $$
    select case
               when pg_catalog.count(*) > 0
                    and pg_catalog.count(*) = (select pg_catalog.count(distinct i)
                                               from pg_catalog.unnest(answer_sources_fingerprint.chunk_ids) as i)
               then pg_catalog.encode(pg_catalog.sha256(pg_catalog.convert_to(
                        pg_catalog.string_agg(
                            pg_catalog.format('%s/%s/%s/%s', c.id, c.document_id,
                                              coalesce(d.content_sha256, ''),
                                              pg_catalog.encode(pg_catalog.sha256(
                                                  pg_catalog.convert_to(c.content, 'UTF8')), 'hex')),
                            ';' order by c.id),
                        'UTF8')), 'hex')
           end
    from pgrag.chunks as c
    join pgrag.documents as d on d.tenant_id = c.tenant_id and d.id = c.document_id
    where c.tenant_id = answer_sources_fingerprint.tenant
      and c.id = any (answer_sources_fingerprint.chunk_ids)
      and d.status = 'ready'
$$;
comment on function pgrag.answer_sources_fingerprint(text, bigint[]) is
'Fingerprint of the sources of a cached answer: SHA-256 (hex) over each chunk of chunk_ids (its id, document id, the SHA-256 of its content) and its document''s content_sha256; null when any of them is gone, not visible to the caller, or in a document that is not ready. Runs as the caller (row level security).';

create or replace function pgrag.answer_cache_checked()
returns trigger
language plpgsql
security invoker
set search_path = pg_catalog, pg_temp
as $$
begin
    perform pgrag.check_cache_entry(tg_relid::pg_catalog.regclass, new.model,
                                    new.question_embedding, 'question_embedding');
    return new;
end
$$;
comment on function pgrag.answer_cache_checked() is
'Trigger function (before insert or update of model, question_embedding on pgrag.answer_cache, per row): pgrag.check_cache_entry, so an entry written by any role but the table''s owner is of the model pgrag.embedding_config records, its embedding non-zero and of its dimension (22023 otherwise).';

create or replace trigger answer_cache_checked
    before insert or update of model, question_embedding on pgrag.answer_cache
    for each row execute function pgrag.answer_cache_checked();

create or replace trigger answer_cache_bounded
    after insert on pgrag.answer_cache
    referencing new table as new_entries
    for each statement execute function pgrag.cache_bounded(
        'pgrag.answer_cache', 'id', 'last_hit_at', 'pgrag.answer_cache_max_entries');
-- (its own trigger function until pgrag.cache_bounded served both caches)
drop function if exists pgrag.answer_cache_bounded();

create or replace function public.answer_cache_lookup(
    question_embedding @extschema:vector@.vector,
    settings jsonb default '{}'::jsonb,
    min_similarity double precision default 0.95
)
returns table (
    entry_id bigint,
    cached_question text,
    answer text,
    similarity double precision,
    sources jsonb,
    created_at timestamptz,
    hit_count bigint
)
language plpgsql
volatile
security invoker
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    v_tenant text := pgrag.current_tenant_id();
    v_min double precision := coalesce(
        pgrag.check_argument('min_similarity', min_similarity, 0, 1), 0.95);
    v_model text;
    v_dims integer;
    v_key text;
    v_stale integer := 0;
    v_hit integer := 0;
    r record;
begin
    if question_embedding is null then
        raise exception 'question_embedding must not be null'
            using errcode = '22023',
                  hint = 'pgrag''s argument limits are listed in docs/security.md.';
    end if;
    perform pgrag.check_query_embedding('question_embedding', question_embedding);
    perform pgrag.check_length('settings', pg_catalog.octet_length(settings::text), 10000, 'bytes');
    select c.model, c.dims into v_model, v_dims from pgrag.embedding_config as c;
    if v_tenant is null or v_model is null then
        return;  -- no tenant (anon), or nothing ingested yet: no cache, nothing counted
    end if;
    v_key := pgrag.answer_settings_key(settings);
    for r in
        select n.id, n.question, n.answer, n.sources, n.created_at, n.hit_count, n.chunk_ids,
               n.sources_fingerprint, 1 - n.distance as similarity
        from (select a.*,
                     -- (an entry of another dimension, which only the owner can write, is
                     -- never compared: the operator would fail)
                     case when @extschema:vector@.vector_dims(a.question_embedding) = v_dims
                          then a.question_embedding operator(@extschema:vector@.<=>)
                               answer_cache_lookup.question_embedding end as distance
              from pgrag.answer_cache as a
              where a.tenant_id = v_tenant and a.model = v_model and a.settings_key = v_key) as n
        where n.distance <= 1 - v_min
        order by n.distance, n.id
        limit 20
    loop
        if pgrag.answer_sources_fingerprint(v_tenant, r.chunk_ids) is not distinct from r.sources_fingerprint then
            update pgrag.answer_cache as a
               set hit_count = a.hit_count + 1, last_hit_at = pg_catalog.now()
             where a.tenant_id = v_tenant and a.id = r.id;
            v_hit := 1;
            entry_id := r.id;
            cached_question := r.question;
            answer := r.answer;
            similarity := r.similarity;
            sources := r.sources;
            created_at := r.created_at;
            hit_count := r.hit_count + 1;
            return next;
            exit;
        end if;
        -- A source changed or went: the entry is stale.
        delete from pgrag.answer_cache as a where a.tenant_id = v_tenant and a.id = r.id;
        v_stale := v_stale + 1;
    end loop;
    insert into pgrag.answer_cache_counters as k (tenant_id, lookups, hits, stale)
    values (v_tenant, 1, v_hit, v_stale)
    on conflict (tenant_id) do update
        set lookups = k.lookups + 1, hits = k.hits + excluded.hits,
            stale = k.stale + excluded.stale;
end
$$;
comment on function public.answer_cache_lookup(@extschema:vector@.vector, jsonb, double precision) is
'Semantic answer cache, for the current tenant: the cached answer whose question is nearest to question_embedding (cosine similarity at least min_similarity, default 0.95), made under the same settings (pgrag.answer_settings_key) and the model pgrag.embedding_config records, and whose sources are unchanged (pgrag.answer_sources_fingerprint); at most one row (entry_id, cached_question, answer, similarity, sources, created_at, hit_count). Entries met whose sources changed or went are removed; the lookup, the hit and the stale entries are counted in pgrag.answer_cache_counters. No row and nothing counted without a tenant or before the first ingest. Writes: call it on the primary. Limits: question_embedding not null, of the stored dimension and non-zero, settings at most 10,000 bytes, min_similarity 0-1; else SQLSTATE 22023.';

create or replace function public.answer_cache_store(
    question text,
    question_embedding @extschema:vector@.vector,
    answer text,
    sources jsonb,
    settings jsonb default '{}'::jsonb
)
returns bigint
language plpgsql
volatile
security invoker
set search_path = pg_catalog, pg_temp
as $$
declare
    v_tenant text := pgrag.current_tenant_id();
    v_model text;
    v_ids bigint[];
    v_fingerprint text;
    v_id bigint;
begin
    if question is null or pg_catalog.length(question) < 1 then
        raise exception 'question must be given and not empty'
            using errcode = '22023',
                  hint = 'pgrag''s argument limits are listed in docs/security.md.';
    end if;
    if answer is null or pg_catalog.length(answer) < 1 then
        raise exception 'answer must be given and not empty'
            using errcode = '22023',
                  hint = 'pgrag''s argument limits are listed in docs/security.md.';
    end if;
    if question_embedding is null then
        raise exception 'question_embedding must not be null'
            using errcode = '22023',
                  hint = 'pgrag''s argument limits are listed in docs/security.md.';
    end if;
    perform pgrag.check_length('question', pg_catalog.length(question), 10000, 'characters');
    perform pgrag.check_length('answer', pg_catalog.length(answer), 100000, 'characters');
    perform pgrag.check_length('settings', pg_catalog.octet_length(settings::text), 10000, 'bytes');
    perform pgrag.check_length('sources', pg_catalog.octet_length(sources::text), 1000000, 'bytes');
    perform pgrag.check_query_embedding('question_embedding', question_embedding);
    if pg_catalog.jsonb_typeof(sources) is distinct from 'array' then
        raise exception 'sources must be a JSON array of sources, each with its chunk_ids (as build_context returns them)'
            using errcode = '22023',
                  hint = 'pgrag''s argument limits are listed in docs/security.md.';
    end if;
    -- Each source's chunk_ids: the numbers among them that can be chunk ids (bigint).
    select pg_catalog.array_agg(distinct n.id::bigint) into v_ids
    from pg_catalog.jsonb_array_elements(sources) as s (value)
    cross join lateral pg_catalog.jsonb_array_elements(
        case when pg_catalog.jsonb_typeof(s.value operator(pg_catalog.->) 'chunk_ids') = 'array'
             then s.value operator(pg_catalog.->) 'chunk_ids' else '[]'::jsonb end) as x (value)
    cross join lateral (
        select case when pg_catalog.jsonb_typeof(x.value) = 'number'
                    then pg_catalog.round((x.value operator(pg_catalog.#>>) '{}')::numeric) end
    ) as n (id)
    where n.id between 1 and 9223372036854775807;
    perform pgrag.check_length('chunk_ids of sources', pg_catalog.cardinality(v_ids), 2000);
    select c.model into v_model from pgrag.embedding_config as c;
    if v_tenant is null or v_model is null or v_ids is null
       or pgrag.answer_cache_max_entries() = 0 then
        return null;  -- no tenant, nothing ingested yet, no source, or the cache turned off
    end if;
    v_fingerprint := pgrag.answer_sources_fingerprint(v_tenant, v_ids);
    if v_fingerprint is null then
        return null;  -- a source is gone already (or not the caller's): nothing to vouch for
    end if;
    -- The same question under the same settings replaces its earlier answer.
    delete from pgrag.answer_cache as a
     where a.tenant_id = v_tenant and a.model = v_model
       and a.settings_key = pgrag.answer_settings_key(answer_cache_store.settings)
       and a.question = answer_cache_store.question;
    -- The model and dimension must be the installation's, and the tenant's least recently
    -- used entries beyond the bound go: the triggers answer_cache_checked and
    -- answer_cache_bounded, which hold for any insert.
    insert into pgrag.answer_cache (tenant_id, model, settings_key, settings, question,
                                    question_embedding, answer, sources, chunk_ids,
                                    sources_fingerprint)
    values (v_tenant, v_model, pgrag.answer_settings_key(answer_cache_store.settings),
            coalesce(answer_cache_store.settings, '{}'::jsonb), answer_cache_store.question,
            answer_cache_store.question_embedding, answer_cache_store.answer,
            answer_cache_store.sources, v_ids, v_fingerprint)
    returning id into v_id;
    return v_id;
end
$$;
comment on function public.answer_cache_store(text, @extschema:vector@.vector, text, jsonb, jsonb) is
'Semantic answer cache, for the current tenant: stores answer to question (its embedding question_embedding, by the model pgrag.embedding_config records) made under settings, from sources (build_context''s sources: the chunk_ids of each are fingerprinted, pgrag.answer_sources_fingerprint), replacing an earlier answer to the same question under the same settings; then drops the tenant''s least recently used entries beyond pgrag.answer_cache_max_entries(). Returns the entry''s id, or null (nothing stored) without a tenant, before the first ingest, without a chunk id in sources, when a source is gone or not visible, or when the operator set the bound to 0. Limits: question 1-10,000 characters, answer 1-100,000 (both given), question_embedding not null, of the stored dimension and non-zero, sources a JSON array of at most 1,000,000 bytes naming at most 2,000 chunk ids, settings at most 10,000 bytes; else SQLSTATE 22023.';

create or replace function pgrag.answer_cache_stats(tenant text default null)
returns table (
    tenant_id text,
    entries bigint,
    lookups bigint,
    hits bigint,
    stale bigint,
    hit_rate double precision,
    since timestamptz
)
language sql
stable
security invoker
set search_path = pg_catalog, pg_temp
as $$
    with entries as (
        select a.tenant_id, pg_catalog.count(*) as entries
        from pgrag.answer_cache as a
        where answer_cache_stats.tenant is null or a.tenant_id = answer_cache_stats.tenant
        group by a.tenant_id
    ), counted as (
        select k.tenant_id, k.lookups, k.hits, k.stale, k.since
        from pgrag.answer_cache_counters as k
        where answer_cache_stats.tenant is null or k.tenant_id = answer_cache_stats.tenant
    )
    select coalesce(e.tenant_id, c.tenant_id), coalesce(e.entries, 0), coalesce(c.lookups, 0),
           coalesce(c.hits, 0), coalesce(c.stale, 0),
           case when c.lookups > 0 then c.hits::double precision / c.lookups end, c.since
    from entries as e
    full join counted as c on c.tenant_id = e.tenant_id
    order by 1
$$;
comment on function pgrag.answer_cache_stats(text) is
'The semantic answer cache per tenant (or for tenant alone): entries held, and since the first lookup (since) the lookups, hits, hit rate (hits / lookups; null before any lookup) and entries found stale and removed. pgrag stats shows them. Runs as the caller: row level security applies.';
