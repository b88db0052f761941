-- Switching the embedding model without downtime: start, claim, store (033-reembed-switch.sql
-- switches, cancels and reports).
-- Contract. Provides: pgrag.reembed_start, reembed_claim, reembed_store (the owner's: pgrag
--   reembed, later pgrag worker), the helpers reembed_sync and lock_chunks_exclusively.
--   Relies on: pgrag.reembeds and pgrag.chunk_embeddings_next (incremental/009),
--   pgrag.tenant_index_name (the isolated tenants' graphs), pgrag.check_argument.
--
-- How a switch stays online:
--   1. reembed_start records the target and adds pgrag.chunks.embedding_next (metadata only,
--      under a brief exclusive lock taken in 200 ms attempts, so readers never queue for long).
--   2. Any number of processes loop: in one transaction, reembed_claim (FOR UPDATE SKIP LOCKED
--      on the queue rows; the locks die with a killed process, so its batch is claimed again;
--      the advisory lock of start, switch and cancel shared, so they wait for the batches
--      claimed), embed the texts with the new model, reembed_store, commit. Searches read
--      chunks.embedding with the old model all along. A claim that finds the queue empty first
--      queues chunks written since (reembed_sync): new chunks, and chunks whose content_sha256
--      changed since their embedding was computed.
--   3. reembed_switch, one transaction: writers of pgrag.chunks wait (SHARE ROW EXCLUSIVE),
--      readers do not. Unless every chunk has an embedding of the new model for its current
--      content it queues the rest and returns switched = false (the caller embeds them and
--      calls it again). Otherwise it copies the vectors into chunks.embedding_next, clearing
--      the old column in the new row versions (so the old graphs get no entries for them),
--      builds the HNSW graphs on the new column (shared, public-only, each isolated tenant's),
--      records the model in pgrag.embedding_config, and only then takes the exclusive lock to
--      drop the old column and graphs and rename the new ones: readers wait for that step only.
--   A write that was blocked by the switch and commits after it would store embeddings of the
--   old model: the deferred trigger documents_embedding_model refuses it (PR201) at commit.

create or replace function pgrag.lock_chunks_exclusively(max_wait interval default '5 minutes')
returns void
language plpgsql
volatile
security invoker
set search_path = pg_catalog, pg_temp
as $$
declare
    v_deadline timestamptz := pg_catalog.clock_timestamp() operator(pg_catalog.+) max_wait;
    v_lock_timeout text := pg_catalog.current_setting('lock_timeout');
begin
    loop
        begin
            -- A short attempt: readers queued behind a waiting exclusive lock wait at most this.
            perform pg_catalog.set_config('lock_timeout', '200ms', true);
            lock table pgrag.chunks in access exclusive mode;
            perform pg_catalog.set_config('lock_timeout', v_lock_timeout, true);
            return;
        exception when lock_not_available or deadlock_detected then
            if pg_catalog.clock_timestamp() > v_deadline then
                raise exception 'could not lock pgrag.chunks within %: other transactions kept using it', max_wait
                    using errcode = 'PR203',
                          hint = 'look for long transactions on pgrag.chunks (pg_stat_activity) and run the command again.';
            end if;
            perform pg_catalog.pg_sleep(0.05);
        end;
    end loop;
end
$$;
comment on function pgrag.lock_chunks_exclusively(interval) is
'Takes an ACCESS EXCLUSIVE lock on pgrag.chunks for the rest of the transaction, in attempts of 200 ms with short pauses (readers queued behind a waiting attempt never wait longer), for at most max_wait (then PR203). Used by the re-embed functions for their metadata-only DDL.';

create or replace function pgrag.reembed_start(model text, provider text, dims integer)
returns table (reembed_id bigint, started boolean, from_model text, from_provider text, from_dims integer)
language plpgsql
volatile
security invoker
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    v_job pgrag.reembeds;
    v_config pgrag.embedding_config;
begin
    if reembed_start.model is null or reembed_start.model operator(pg_catalog.!~) '[^[:space:]]'
       or pg_catalog.length(reembed_start.model) > 200 then
        raise exception 'model must be a non-blank model name of at most 200 characters'
            using errcode = '22023';
    end if;
    if reembed_start.provider is null or reembed_start.provider operator(pg_catalog.!~) '[^[:space:]]'
       or pg_catalog.length(reembed_start.provider) > 100 then
        raise exception 'provider must be a non-blank provider name (local, openai) of at most 100 characters'
            using errcode = '22023';
    end if;
    if reembed_start.dims is null then
        raise exception 'dims must be given: the dimension of the new model''s embeddings'
            using errcode = '22023';
    end if;
    -- (above 2,000 dimensions the graphs index halfvec copies: pgrag.hnsw_key_sql)
    perform pgrag.check_argument('dims', reembed_start.dims, 1, 4000);
    if reembed_start.dims > 2000 and pgrag.distributed() then
        raise exception 'embeddings of more than 2000 dimensions are not supported on Citus'
            using errcode = '0A000',
                  hint = 'choose a model (or --dims) of at most 2000 dimensions for a distributed database.';
    end if;
    -- Start, switch and cancel run one at a time (a transaction-level advisory lock, taken
    -- first by each: they lock the same rows in different orders; reembed_claim holds it
    -- shared, so they wait for the batches being embedded). A second process starting the same
    -- re-embed waits for the first and joins it.
    perform pg_catalog.pg_advisory_xact_lock(123589602928386);  -- 0x7067726167_02: "pgrag", 2
    select c.* into v_config from pgrag.embedding_config as c for update;
    select r.* into v_job from pgrag.reembeds as r where r.status = 'running' for update;
    if found then
        if v_job.model = reembed_start.model and v_job.provider = reembed_start.provider
           and v_job.dims = reembed_start.dims then
            -- Another process started this one: join it.
            return query select v_job.id, false, v_job.from_model, v_job.from_provider, v_job.from_dims;
            return;
        end if;
        raise exception 'a re-embed to %:% (% dimensions) is running', v_job.provider, v_job.model, v_job.dims
            using errcode = 'PR202',
                  hint = 'let it finish (pgrag reembed with the same --model joins it), or cancel it (pgrag reembed --cancel).';
    end if;
    if v_config.model = reembed_start.model and v_config.provider = reembed_start.provider
       and v_config.dims = reembed_start.dims then
        raise exception 'this database already holds embeddings of %:% (% dimensions): nothing to re-embed',
            reembed_start.provider, reembed_start.model, reembed_start.dims
            using errcode = '22023';
    end if;
    insert into pgrag.reembeds (model, provider, dims, from_model, from_provider, from_dims)
    values (reembed_start.model, reembed_start.provider, reembed_start.dims,
            v_config.model, v_config.provider, v_config.dims)
    returning * into v_job;
    -- The new column, beside the old one: no rewrite, a brief exclusive lock.
    perform pgrag.lock_chunks_exclusively();
    if exists (select 1 from pg_catalog.pg_attribute as a
               where a.attrelid = 'pgrag.chunks'::pg_catalog.regclass
                 and a.attname = 'embedding_next' and not a.attisdropped) then
        alter table pgrag.chunks drop column embedding_next;
    end if;
    execute pg_catalog.format(
        'alter table pgrag.chunks add column embedding_next @extschema:vector@.vector(%s)',
        reembed_start.dims);
    -- Kept in the row, as the column it replaces (incremental 015: the vector arm reads each
    -- candidate's embedding; pgvector's own default would move it to the TOAST table). Citus
    -- refuses SET STORAGE on a distributed table: there the column keeps pgvector's default.
    begin
        alter table pgrag.chunks alter column embedding_next set storage main;
    exception when feature_not_supported then
        null;
    end;
    comment on column pgrag.chunks.embedding_next is
    'Embedding of the running re-embed''s model (pgrag.reembeds), filled by its switch; not read by searches.';
    delete from pgrag.chunk_embeddings_next;
    return query select v_job.id, true, v_job.from_model, v_job.from_provider, v_job.from_dims;
end
$$;
comment on function pgrag.reembed_start(text, text, integer) is
'Starts re-embedding every tenant''s chunks with model (of provider, dims dimensions) beside the stored embeddings, which searches keep using until pgrag.reembed_switch: records the target in pgrag.reembeds and adds the column pgrag.chunks.embedding_next (a brief exclusive lock, no rewrite). Returns the re-embed and started = false when the same re-embed is already running (the caller joins it). Raises PR202 when another one is running, 22023 for a bad argument or when the database already holds that model. For the owner of pgrag.chunks.';

create or replace function pgrag.reembed_sync()
returns bigint
language plpgsql
volatile
security invoker
set search_path = pg_catalog, pg_temp
as $$
declare
    v_waiting bigint;
begin
    -- Rows of chunks deleted since they were queued.
    delete from pgrag.chunk_embeddings_next as s
     where not exists (select 1 from pgrag.chunks as c
                       where c.tenant_id = s.tenant_id and c.id = s.chunk_id);
    -- Embeddings computed for content the chunk no longer has.
    update pgrag.chunk_embeddings_next as s
       set embedding = null, content_sha256 = null, embedded_at = null
      from pgrag.chunks as c
     where c.tenant_id = s.tenant_id and c.id = s.chunk_id
       and s.embedding is not null
       and s.content_sha256 is distinct from c.content_sha256;
    -- Chunks written since the queue was filled (all of them the first time).
    insert into pgrag.chunk_embeddings_next (tenant_id, chunk_id)
    select c.tenant_id, c.id
    from pgrag.chunks as c
    where not exists (select 1 from pgrag.chunk_embeddings_next as s
                      where s.tenant_id = c.tenant_id and s.chunk_id = c.id)
    on conflict do nothing;
    select pg_catalog.count(*) into v_waiting
    from pgrag.chunk_embeddings_next as s
    where s.embedding is null;
    return v_waiting;
end
$$;
comment on function pgrag.reembed_sync() is
'Brings the running re-embed''s queue (pgrag.chunk_embeddings_next) up to date with pgrag.chunks: drops rows of deleted chunks, queues again chunks whose content_sha256 changed since their new embedding was computed, queues chunks not there yet. Returns the chunks waiting for their new embedding.';

create or replace function pgrag.reembed_claim(batch_size integer default 64)
returns table (tenant_id text, chunk_id bigint, content text, content_sha256 text)
language plpgsql
volatile
security invoker
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    v_n integer := coalesce(pgrag.check_argument('batch_size', batch_size, 1, 10000), 64);
begin
    -- The lock of start, switch and cancel, shared until the caller's transaction ends: they
    -- wait for the batches claimed, and a claim that waited for one of them sees how it ended.
    -- (Without it, a claim that found the re-embed running could read the queue after a switch
    -- committed: emptied, it queued every chunk again and handed out a batch that was embedded
    -- for nothing, reembed_store refusing it with PR202. A heavyweight lock, not FOR SHARE on
    -- the row: a waiting switch or cancel holds back the claims that come after it.)
    perform pg_catalog.pg_advisory_xact_lock_shared(123589602928386);
    if not exists (select 1 from pgrag.reembeds as r where r.status = 'running') then
        raise exception 'no re-embed is running'
            using errcode = 'PR202',
                  hint = 'start one with pgrag reembed --model ... (pgrag.reembed_start); it may have been switched or cancelled meanwhile.';
    end if;
    for attempt in 1 .. 2 loop
        return query
        select s.tenant_id, s.chunk_id, c.content, c.content_sha256
        from pgrag.chunk_embeddings_next as s
        join pgrag.chunks as c on c.tenant_id = s.tenant_id and c.id = s.chunk_id
        where s.embedding is null
        order by s.tenant_id, s.chunk_id
        limit v_n
        for update of s skip locked;
        exit when found or attempt = 2;
        -- Nothing queued: queue what was written since (the first claim fills the queue).
        perform pgrag.reembed_sync();
    end loop;
end
$$;
comment on function pgrag.reembed_claim(integer) is
'Claims up to batch_size (1-10,000, default 64) chunks waiting for their embedding of the running re-embed''s model: (tenant_id, chunk_id, content, content_sha256), locked FOR UPDATE SKIP LOCKED until the caller''s transaction ends, so concurrent workers never get the same chunk and a killed worker''s batch is claimed again; it holds the advisory lock of pgrag.reembed_start, reembed_switch and reembed_cancel shared as long, so they wait for the batches claimed (a claim that waited for a switch or cancel raises PR202 before anything is embedded). Embed the contents with the new model and call pgrag.reembed_store in the same transaction. When nothing is queued it first queues chunks written since (pgrag.reembed_sync); no row means every chunk is done, or claimed by another worker. PR202 when no re-embed is running.';

create or replace function pgrag.reembed_store(
    model text,
    tenant_ids text[],
    chunk_ids bigint[],
    content_sha256s text[],
    embeddings @extschema:vector@.vector[]
)
returns bigint
language plpgsql
volatile
security invoker
set search_path = pg_catalog, pg_temp
as $$
declare
    v_job pgrag.reembeds;
    v_n bigint;
begin
    select r.* into v_job from pgrag.reembeds as r where r.status = 'running';
    if not found then
        raise exception 'no re-embed is running: it was switched or cancelled meanwhile'
            using errcode = 'PR202';
    end if;
    if reembed_store.model is distinct from v_job.model then
        raise exception 'the running re-embed is to %; embeddings of % would mix models', v_job.model, reembed_store.model
            using errcode = 'PR202';
    end if;
    if pg_catalog.cardinality(tenant_ids) is distinct from pg_catalog.cardinality(chunk_ids)
       or pg_catalog.cardinality(chunk_ids) is distinct from pg_catalog.cardinality(content_sha256s)
       or pg_catalog.cardinality(chunk_ids) is distinct from pg_catalog.cardinality(embeddings) then
        raise exception 'chunk_ids must have as many elements as tenant_ids, content_sha256s and embeddings (one per chunk)'
            using errcode = '22023';
    end if;
    if exists (select 1 from pg_catalog.unnest(embeddings) as e(v)
               where e.v is null or @extschema:vector@.vector_dims(e.v) <> v_job.dims
                  or (e.v operator(@extschema:vector@.<=>) e.v) = 'NaN'::double precision) then
        raise exception 'embeddings must be non-zero vectors of % dimensions, the re-embed''s', v_job.dims
            using errcode = '22023';
    end if;
    update pgrag.chunk_embeddings_next as s
       set embedding = v.embedding, content_sha256 = v.sha, embedded_at = pg_catalog.now()
      from rows from (pg_catalog.unnest(tenant_ids), pg_catalog.unnest(chunk_ids),
                      pg_catalog.unnest(content_sha256s), pg_catalog.unnest(embeddings))
           as v(tenant_id, chunk_id, sha, embedding)
     where s.tenant_id = v.tenant_id and s.chunk_id = v.chunk_id;
    get diagnostics v_n = row_count;
    return v_n;
end
$$;
comment on function pgrag.reembed_store(text, text[], bigint[], text[], @extschema:vector@.vector[]) is
'Stores embeddings of the running re-embed''s model for chunks claimed with pgrag.reembed_claim (one array element per chunk; content_sha256 as the claim returned it). Returns the rows stored (rows of chunks deleted meanwhile are skipped). PR202 when no re-embed is running or model is not its model; 22023 when an embedding is null, zero or not of its dimension.';
