-- Helpers every other file relies on: the request's tenant, argument checks, housekeeping triggers.
-- Contract. Provides: pgrag.current_tenant_id (every policy and search function),
--   pgrag.set_request_tenant (trusted direct sessions: the CLI and the ingester) and
--   pgrag.propagate_request_claims (the claims for a Citus cluster's workers); the tenant_id
--   defaults of documents and chunks; the argument checks pgrag.check_argument, check_length,
--   check_filters, check_query_embedding and text_search_config (SQLSTATE 22023, docs/security.md "Argument
--   limits"); updated_at and chunk-language triggers. Relies on: the tables of the incremental
--   tier only. Callers: every role that searches or writes (910-function-privileges.sql).

create or replace function pgrag.current_tenant_id()
returns text
language plpgsql
stable
security invoker
parallel safe
set search_path = pg_catalog, pg_temp
as $$
-- PL/pgSQL, not SQL: every policy and search calls it (a hybrid_search 26 times), and a SQL
-- function with a SET clause is never inlined but sets up and runs its query at each call:
-- 27 microseconds with a Supabase Auth token's claims, against 6 here, which parses them once
-- (docs/benchmarks.md, "Fixed costs, fourth round").
declare
    claim jsonb := nullif(current_setting('request.jwt.claims', true), '')::jsonb
                   #> string_to_array(
                          coalesce(nullif(current_setting('pgrag.tenant_claim', true), ''),
                                   'tenant_id'),
                          '.');
begin
    -- A tenant is a JSON string with a non-blank character; anything else (a number, a boolean,
    -- null, an array, an object, "" or "  ") is no tenant. The value is returned as it is:
    -- compared byte for byte (case-sensitive, not trimmed, not normalised).
    if jsonb_typeof(claim) = 'string' and (claim #>> '{}') !~ '^[[:space:]]*$' then
        return claim #>> '{}';
    end if;
    return null;
end
$$;
comment on function pgrag.current_tenant_id() is
'Tenant of the current request: the claim named by the setting pgrag.tenant_claim (default tenant_id; a dotted path such as app_metadata.tenant_id reaches a nested claim) in request.jwt.claims, as PostgREST sets it. Only a JSON string that is not blank is a tenant; it is returned unchanged and compared exactly (case-sensitive). Null otherwise. Every RLS policy compares tenant_id with it.';

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
    -- never carries it to the next client.
    perform pg_catalog.set_config('request.jwt.claims', v_claims::text, true);
    -- On a Citus coordinator, the same for the workers the transaction uses (no-op elsewhere).
    perform pgrag.propagate_request_claims();
end
$$;
comment on function pgrag.set_request_tenant(text) is
'Acts as tenant for the rest of the current transaction: sets request.jwt.claims (transaction-local, as PostgREST does) with tenant at the claim path pgrag.tenant_claim names (default tenant_id), on a Citus coordinator for its workers too (pgrag.propagate_request_claims). For trusted direct sessions (the pgrag CLI and ingester call only this); raises 22023 for a null or blank tenant.';

-- On a Citus coordinator the RLS policies run on the workers, whose pgrag.current_tenant_id()
-- reads request.jwt.claims there. Citus replays SET LOCAL (not set_config(), which PostgREST and
-- pgrag.set_request_tenant use) on the workers of the transaction while
-- citus.propagate_set_commands = local: this sets the values the transaction already has again
-- that way. Without Citus (that setting does not exist) it does nothing. PostgREST's
-- db-pre-request on Citus (docs/scaling.md); pgrag.set_request_tenant calls it.
create or replace function pgrag.propagate_request_claims()
returns void
language plpgsql
volatile
security invoker
set search_path = pg_catalog, pg_temp
as $$
declare
    v_propagate text := pg_catalog.current_setting('citus.propagate_set_commands', true);
    v_claims text;
    v_path text;
begin
    if v_propagate is null then
        return;
    end if;
    v_claims := pg_catalog.current_setting('request.jwt.claims', true);
    v_path := pg_catalog.current_setting('pgrag.tenant_claim', true);
    -- Only the values this transaction has: no argument, so it cannot make anyone another
    -- tenant. The claim path too, so that current_tenant_id() reads the same claim there.
    -- Propagation is on for these two statements only: left on, Citus would send the workers
    -- the whole query string of any later SET LOCAL a client sends.
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
'Citus: sets the current request.jwt.claims and pgrag.tenant_claim again with SET LOCAL, which a Citus coordinator replays on its workers, where the shards'' RLS policies read the tenant. Takes no argument (only the values the transaction has). PostgREST''s db-pre-request on a Citus coordinator (docs/scaling.md); pgrag.set_request_tenant calls it. Does nothing on a server without Citus.';

create or replace function pgrag.touch_updated_at()
returns trigger
language plpgsql
security invoker
set search_path = pg_catalog, pg_temp
as $$
begin
    new.updated_at := pg_catalog.now();
    return new;
end
$$;
comment on function pgrag.touch_updated_at() is 'Trigger function: sets updated_at on every update.';

create or replace trigger documents_touch_updated_at
    before update on pgrag.documents
    for each row execute function pgrag.touch_updated_at();

create or replace trigger embedding_config_touch_updated_at
    before update on pgrag.embedding_config
    for each row execute function pgrag.touch_updated_at();

-- Text-search configurations a chunk may be stored with (see sql/incremental/005-*.sql).
create or replace function pgrag.text_search_config_allowed(config regconfig)
returns boolean
language sql
stable
security invoker
parallel safe
set search_path = pg_catalog, pg_temp
as $$
    select exists (
        select 1
        from pg_catalog.pg_ts_config as t
        join pg_catalog.pg_namespace as n on n.oid = t.cfgnamespace
        where t.oid = config
          and n.nspname::text operator(pg_catalog.!~) '^pg_(toast_)?temp'
          and (n.nspname = 'pg_catalog'
               or exists (select 1 from pgrag.text_search_configs as a
                          where a.schema_name = n.nspname and a.config_name = t.cfgname))
    )
$$;
comment on function pgrag.text_search_config_allowed(regconfig) is
'True when chunks may be stored with this text-search configuration: one of pg_catalog''s, or one listed in pgrag.text_search_configs; never a temporary one (its OID would dangle and break pg_restore and keyword search).';

create or replace function pgrag.check_chunk_languages()
returns trigger
language plpgsql
security invoker
set search_path = pg_catalog, pg_temp
as $$
declare
    v_language oid;
begin
    -- Each configuration once: the distinct languages first, then the check (a filter on the
    -- rows themselves would run the check once per row).
    for v_language in select distinct c.language::oid from new_chunks as c loop
        continue when pgrag.text_search_config_allowed(v_language::regconfig);
        raise exception 'text-search configuration % is not allowed for pgrag.chunks.language',
                v_language::regconfig::text
            using errcode = 'check_violation',
                  hint = 'use one of pg_catalog''s (select cfgname from pg_ts_config where '
                         'cfgnamespace = ''pg_catalog''::regnamespace); an operator may allow a '
                         'permanent one by inserting it into pgrag.text_search_configs.';
    end loop;
    return null;
end
$$;
comment on function pgrag.check_chunk_languages() is
'Trigger function (after insert or update, per statement): refuses chunks whose language is not allowed by pgrag.text_search_config_allowed.';

create or replace trigger chunks_language_insert
    after insert on pgrag.chunks
    referencing new table as new_chunks
    for each statement execute function pgrag.check_chunk_languages();

create or replace trigger chunks_language_update
    after update on pgrag.chunks
    referencing new table as new_chunks
    for each statement execute function pgrag.check_chunk_languages();

alter table pgrag.documents alter column tenant_id set default pgrag.current_tenant_id();
alter table pgrag.chunks alter column tenant_id set default pgrag.current_tenant_id();

-- ---------------------------------------------------------------------------------------------
-- Argument checks shared by every function a client can call (docs/security.md, "Argument
-- limits"). A value outside its range fails fast with SQLSTATE 22023 (invalid_parameter_value)
-- and a message naming the argument and its range; counts above their maximum are clamped
-- where the caller passes clamp => true (documented per argument).
-- ---------------------------------------------------------------------------------------------

create or replace function pgrag.check_argument(
    argument text,
    value double precision,
    low double precision,
    high double precision,
    clamp boolean default false
)
returns double precision
language plpgsql
immutable
security invoker
parallel safe
set search_path = pg_catalog, pg_temp
as $$
begin
    if value is null then
        return null;
    end if;
    if value = 'NaN'::double precision and low = '-Infinity'::double precision
       and high = 'Infinity'::double precision then
        raise exception '% must be a number, not NaN', argument
            using errcode = '22023',
                  hint = 'pgrag''s argument limits are listed in docs/security.md.';
    end if;
    if value = 'NaN'::double precision or value < low or (value > high and not clamp) then
        if clamp then
            raise exception '% must be at least % (got %); values above % count as %',
                argument, low, value, high, high
                using errcode = '22023',
                      hint = 'pgrag''s argument limits are listed in docs/security.md.';
        end if;
        raise exception '% must be between % and % (got %)', argument, low, high, value
            using errcode = '22023',
                  hint = 'pgrag''s argument limits are listed in docs/security.md.';
    end if;
    return least(value, high);
end
$$;
comment on function pgrag.check_argument(text, double precision, double precision, double precision, boolean) is
'Argument check: raises 22023 naming argument when value is NaN, below low or above high; with clamp, values above high are returned as high instead. Null passes (the caller applies its default). Returns the (clamped) value.';

create or replace function pgrag.check_length(
    argument text,
    length bigint,
    high bigint,
    unit text default 'elements'
)
returns void
language plpgsql
immutable
security invoker
parallel safe
set search_path = pg_catalog, pg_temp
as $$
begin
    if length > high then
        raise exception '% must have at most % % (got %)', argument, high, unit, length
            using errcode = '22023',
                  hint = 'pgrag''s argument limits are listed in docs/security.md.';
    end if;
end
$$;
comment on function pgrag.check_length(text, bigint, bigint, text) is
'Argument check: raises 22023 naming argument when its length (array elements, characters or bytes, as unit says) exceeds high. A null length passes.';

create or replace function pgrag.check_document_fields(title text, metadata jsonb)
returns void
language plpgsql
immutable
security invoker
parallel safe
set search_path = pg_catalog, pg_temp
as $$
begin
    perform pgrag.check_length('title', pg_catalog.length(title), 1000, 'characters');
    perform pgrag.check_length('metadata', pg_catalog.octet_length(metadata::text), 10000, 'bytes');
    if metadata is not null and pg_catalog.jsonb_typeof(metadata) operator(pg_catalog.<>) 'object' then
        raise exception 'metadata must be a JSON object (got %)', pg_catalog.jsonb_typeof(metadata)
            using errcode = '22023';
    end if;
end
$$;
comment on function pgrag.check_document_fields(text, jsonb) is
'Argument check of what describes a document, wherever a tenant writes it (public.submit_document, the queue''s and the documents'' triggers): title at most 1,000 characters, metadata a JSON object of at most 10,000 bytes; else 22023. Nulls pass.';

create or replace function pgrag.check_filters(
    document_ids bigint[],
    source_types text[],
    metadata_filter jsonb
)
returns void
language plpgsql
immutable
security invoker
parallel safe
set search_path = pg_catalog, pg_temp
as $$
begin
    perform pgrag.check_length('document_ids', pg_catalog.cardinality(document_ids), 1000);
    perform pgrag.check_length('source_types', pg_catalog.cardinality(source_types), 100);
    perform pgrag.check_length('metadata_filter', pg_catalog.octet_length(metadata_filter::text), 10000, 'bytes');
end
$$;
comment on function pgrag.check_filters(bigint[], text[], jsonb) is
'Argument check of the filters every search takes: raises 22023 when document_ids has more than 1,000 elements, source_types more than 100, or metadata_filter more than 10,000 bytes (as text). Nulls pass; created_after and created_before take any value.';

create or replace function pgrag.check_query_embedding(
    argument text,
    value @extschema:vector@.vector
)
returns void
language plpgsql
stable
security invoker
parallel safe
set search_path = pg_catalog, pg_temp
as $$
declare
    v_dims integer;
begin
    if value is null then
        return;
    end if;
    select c.dims into v_dims from pgrag.embedding_config as c;
    if v_dims is not null and @extschema:vector@.vector_dims(value) <> v_dims then
        raise exception '% must have % dimensions, as the stored embeddings (got %)',
            argument, v_dims, @extschema:vector@.vector_dims(value)
            using errcode = '22023';
    end if;
    -- A zero vector, or one whose squared norm under- or overflows single precision, has no
    -- cosine similarity: every score would be NaN (and NaN passes any min_score).
    if (value operator(@extschema:vector@.<=>) value) = 'NaN'::double precision then
        raise exception '% must be a non-zero vector of finite length (its cosine similarity is undefined)',
            argument
            using errcode = '22023';
    end if;
end
$$;
comment on function pgrag.check_query_embedding(text, @extschema:vector@.vector) is
'Argument check: raises 22023 naming argument unless the query vector has the dimension of pgrag.embedding_config and a defined cosine similarity (non-zero, no single-precision overflow). Null passes.';

create or replace function pgrag.text_search_config(argument text, value text)
returns regconfig
language plpgsql
stable
security invoker
set search_path = pg_catalog, pg_temp
as $$
declare
    v_config regconfig;
begin
    if value is null then
        return null;
    end if;
    if pg_catalog.length(value) <= 200 then
        begin
            v_config := value::regconfig;
        exception when others then
            v_config := null;
        end;
    end if;
    -- regconfig input accepts any number as an OID without looking it up: check it exists.
    -- The message names the choices: pg_catalog's configurations (any other existing one works
    -- too, but only an operator creates those).
    if v_config is null
       or not exists (select 1 from pg_catalog.pg_ts_config as c where c.oid = v_config) then
        raise exception '% must name a text search configuration (got %): one of %, or one the operator created',
            argument, pg_catalog.quote_literal(pg_catalog.left(value, 100)),
            (select pg_catalog.string_agg(c.cfgname::text, ', ' order by c.cfgname)
             from pg_catalog.pg_ts_config as c
             where c.cfgnamespace = 'pg_catalog'::regnamespace)
            using errcode = '22023';
    end if;
    return v_config;
end
$$;
comment on function pgrag.text_search_config(text, text) is
'The text search configuration value names (e.g. english, simple, pg_catalog.german); raises 22023 naming argument and listing pg_catalog''s configurations when there is none. Null passes.';
