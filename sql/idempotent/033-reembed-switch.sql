-- Switching the embedding model without downtime: the switch itself, cancelling, the status.
-- Contract. Provides: pgrag.reembed_switch (with pgrag.reembed_build_graphs, the graphs of the
--   new column), reembed_cancel, reembed_status (the owner's: pgrag reembed), and the deferred
--   check that no transaction stores embeddings of a model the database no longer records
--   (trigger documents_embedding_model, PR201). Relies on: the re-embed's start, claims and
--   stored vectors (030-reembed.sql, whose header says how a switch stays online),
--   pgrag.lock_chunks_exclusively, pgrag.tenant_index_name, pgrag.tenant_chunk_count and
--   pgrag.build_graph (006-vector-isolation.sql).

create or replace function pgrag.reembed_build_graphs(dims integer)
returns text[]
language plpgsql
volatile
security invoker
set search_path = pg_catalog, pg_temp
as $$
declare
    v_index record;
    v_built text[] := '{}';
    v_shared_rows bigint;
    v_public_rows bigint;
begin
    -- The rows of the two graphs every tenant shares, for the memory their builds get.
    select pg_catalog.count(*) filter (where c.in_shared_graph), pg_catalog.count(*) filter (where c.is_public)
      into v_shared_rows, v_public_rows
      from pgrag.chunks as c
     where c.embedding_next is not null;
    -- The shared graph, anon's public-only one and each isolated tenant's own
    -- (pgrag.isolate_tenant), with their storage parameters, each built with the memory its
    -- rows need (pgrag.build_graph).
    for v_index in
        select i.name, i.predicate, i.row_count, o.reloptions
        from (
            -- (the shared graph holds the rows in it: incremental/012-bulk-loading.sql)
            select 'chunks_embedding_hnsw' as name, 'embedding_next is not null and in_shared_graph' as predicate,
                   v_shared_rows as row_count
            union all
            select 'chunks_public_embedding_hnsw', 'is_public and embedding_next is not null', v_public_rows
            union all
            select pgrag.tenant_index_name(t.tenant_id),
                   pg_catalog.format('pg_catalog.hashtextextended(tenant_id, 0) operator(pg_catalog.=) %L::pg_catalog.int8 and embedding_next is not null',
                                     pg_catalog.hashtextextended(t.tenant_id, 0)),
                   pgrag.tenant_chunk_count(t.tenant_id)
            from (select s.tenant_id from pgrag.corpus_stats as s
                  union
                  select d.tenant_id from pgrag.documents as d) as t
        ) as i
        join pg_catalog.pg_class as o
          on o.oid = pg_catalog.to_regclass(pg_catalog.format('pgrag.%I', i.name))
        order by i.name
    loop
        perform pgrag.build_graph(pg_catalog.format(
            'create index %I on pgrag.chunks using hnsw (%s)%s where %s',
            v_index.name operator(pg_catalog.||) '_next',
            -- (halfvec copies above 2,000 dimensions: 021-vector-walks.sql)
            pgrag.hnsw_key_sql('embedding_next', reembed_build_graphs.dims),
            case when v_index.reloptions is null then ''
                 else ' with (' operator(pg_catalog.||) pg_catalog.array_to_string(v_index.reloptions, ', ')
                      operator(pg_catalog.||) ')' end,
            v_index.predicate), v_index.row_count, reembed_build_graphs.dims);
        v_built := v_built operator(pg_catalog.||) v_index.name::text;
    end loop;
    return v_built;
end
$$;
comment on function pgrag.reembed_build_graphs(integer) is
'Part of pgrag.reembed_switch: builds on pgrag.chunks.embedding_next (vectors of dims dimensions) a graph named <name>_next for each HNSW graph the old column has (the shared one, anon''s public-only one, each isolated tenant''s own), with the same storage parameters and each with the memory its rows need (pgrag.build_graph: up to 1 GB unless the session gives more); returns the names of the old graphs, in the order built. For the owner of pgrag.chunks, inside the switch''s transaction.';

create or replace function pgrag.reembed_switch()
returns table (switched boolean, waiting bigint, chunk_count bigint, model text, provider text, dims integer)
language plpgsql
volatile
security invoker
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    v_job pgrag.reembeds;
    v_waiting bigint;
    v_count bigint;
    v_index record;
    v_acl record;
    v_built text[] := '{}';
    v_comments text[] := '{}';
    v_name text;
begin
    perform pg_catalog.pg_advisory_xact_lock(123589602928386);  -- one of start, switch, cancel
    select r.* into v_job from pgrag.reembeds as r where r.status = 'running' for update;
    if not found then
        raise exception 'no re-embed is running'
            using errcode = 'PR202',
                  hint = 'start one with pgrag reembed --model ...; it may have been switched or cancelled meanwhile.';
    end if;
    -- Writers of pgrag.chunks wait from here to commit (readers do not): the chunks and their
    -- contents stay those the check below sees. (Before the configuration row: the order in
    -- which a loader takes them.)
    lock table pgrag.chunks in share row exclusive mode;
    perform 1 from pgrag.embedding_config as c for update;
    v_waiting := pgrag.reembed_sync();
    if v_waiting > 0 then
        return query select false, v_waiting, null::bigint, v_job.model, v_job.provider, v_job.dims;
        return;
    end if;

    -- New row versions carry the new vector in embedding_next and none in embedding: the old
    -- graphs (partial indexes, embedding is not null) get no entries for them, and searches
    -- running meanwhile read the old versions.
    update pgrag.chunks as c
       set embedding_next = s.embedding, embedding = null
      from pgrag.chunk_embeddings_next as s
     where s.tenant_id = c.tenant_id and s.chunk_id = c.id;
    get diagnostics v_count = row_count;
    delete from pgrag.chunk_embeddings_next;

    -- The graphs of the new column, as the old column has them.
    v_built := pgrag.reembed_build_graphs(v_job.dims);
    v_comments := array(select pg_catalog.obj_description(
                                   pg_catalog.format('pgrag.%I', b.name)::pg_catalog.regclass, 'pg_class')
                        from pg_catalog.unnest(v_built) with ordinality as b(name, n)
                        order by b.n);
    -- Any other index on the old column goes with it.
    for v_index in
        select o.relname::text as name
        from pg_catalog.pg_depend as dep
        join pg_catalog.pg_class as o on o.oid = dep.objid and o.relkind = 'i'
        join pg_catalog.pg_attribute as a
          on a.attrelid = dep.refobjid and a.attnum = dep.refobjsubid
        where dep.classid = 'pg_catalog.pg_class'::pg_catalog.regclass
          and dep.refobjid = 'pgrag.chunks'::pg_catalog.regclass
          and a.attname = 'embedding'
          and not (o.relname::text = any (v_built))
    loop
        raise notice 'pgrag: index pgrag.% on the old embeddings is dropped by the switch; create it again on the new ones',
            v_index.name;
    end loop;

    -- Column privileges of the old column (authenticated writes it), for the new one.
    for v_acl in
        select a.privilege_type, a.grantee
        from pg_catalog.pg_attribute as at,
             pg_catalog.aclexplode(at.attacl) as a
        where at.attrelid = 'pgrag.chunks'::pg_catalog.regclass and at.attname = 'embedding'
          and not at.attisdropped
    loop
        execute pg_catalog.format('grant %s (embedding_next) on pgrag.chunks to %s', v_acl.privilege_type,
            case when v_acl.grantee = 0 then 'public' else v_acl.grantee::pg_catalog.regrole::text end);
    end loop;

    update pgrag.documents as d
       set embedding_model = v_job.model
     where d.embedding_model is not null and d.embedding_model is distinct from v_job.model;
    update pgrag.embedding_config
       set model = v_job.model, provider = v_job.provider, dims = v_job.dims;
    update pgrag.reembeds as r
       set status = 'switched', chunk_count = v_count, finished_at = pg_catalog.clock_timestamp()
     where r.id = v_job.id;

    -- The swap, metadata only: readers wait for this step alone.
    perform pgrag.lock_chunks_exclusively();
    foreach v_name in array v_built loop
        execute pg_catalog.format('drop index pgrag.%I', v_name);
    end loop;
    alter table pgrag.chunks drop column embedding;
    alter table pgrag.chunks rename column embedding_next to embedding;
    for i in 1 .. coalesce(pg_catalog.cardinality(v_built), 0) loop
        execute pg_catalog.format('alter index pgrag.%I rename to %I',
                                  v_built[i] operator(pg_catalog.||) '_next', v_built[i]);
        if v_comments[i] is not null then
            execute pg_catalog.format('comment on index pgrag.%I is %L', v_built[i], v_comments[i]);
        end if;
    end loop;
    comment on column pgrag.chunks.embedding is
    'Embedding of content by the model pgrag.embedding_config records, of its dimension (chosen at install, changed by pgrag reembed).';
    -- The walks order by the expression the new graphs are keyed by (it changes across 2,000
    -- dimensions).
    perform pgrag.make_vector_walks();
    return query select true, 0::bigint, v_count, v_job.model, v_job.provider, v_job.dims;
end
$$;
comment on function pgrag.reembed_switch() is
'Switches the database to the running re-embed''s model in one transaction: writers of pgrag.chunks wait meanwhile, readers keep searching the old embeddings. When some chunk has no embedding of the new model for its current content, queues it (pgrag.reembed_sync) and returns switched = false with the count waiting: embed them (reembed_claim/reembed_store) and call it again. Otherwise moves the new embeddings into pgrag.chunks, builds the HNSW graphs on them (shared, public-only, isolated tenants''), records model, provider and dimension in pgrag.embedding_config (and each document''s embedding_model), then under a brief exclusive lock drops the old embeddings and graphs and renames the new ones. PR202 when no re-embed is running. For the owner of pgrag.chunks.';

create or replace function pgrag.reembed_cancel()
returns boolean
language plpgsql
volatile
security invoker
set search_path = pg_catalog, pg_temp
as $$
begin
    perform pg_catalog.pg_advisory_xact_lock(123589602928386);  -- one of start, switch, cancel
    update pgrag.reembeds as r
       set status = 'cancelled', finished_at = pg_catalog.clock_timestamp()
     where r.status = 'running';
    if not found then
        return false;
    end if;
    delete from pgrag.chunk_embeddings_next;
    perform pgrag.lock_chunks_exclusively();
    if exists (select 1 from pg_catalog.pg_attribute as a
               where a.attrelid = 'pgrag.chunks'::pg_catalog.regclass
                 and a.attname = 'embedding_next' and not a.attisdropped) then
        alter table pgrag.chunks drop column embedding_next;
    end if;
    return true;
end
$$;
comment on function pgrag.reembed_cancel() is
'Cancels the running re-embed (false when none runs): its new embeddings and pgrag.chunks.embedding_next are dropped; the database keeps its model. For the owner of pgrag.chunks.';

create or replace function pgrag.reembed_status()
returns table (
    reembed_id bigint,
    status text,
    model text,
    provider text,
    dims integer,
    from_model text,
    from_provider text,
    from_dims integer,
    started_at timestamptz,
    finished_at timestamptz,
    chunk_count bigint,
    embedded bigint,
    waiting bigint
)
language sql
stable
security invoker
set search_path = pg_catalog, pg_temp
as $$
    select r.id, r.status, r.model, r.provider, r.dims, r.from_model, r.from_provider, r.from_dims,
           r.started_at, r.finished_at,
           case when r.status = 'running'
                then (select coalesce(pg_catalog.sum(s.chunk_count), 0)::bigint from pgrag.corpus_stats as s)
                else r.chunk_count end,
           case when r.status = 'running'
                then (select pg_catalog.count(*) from pgrag.chunk_embeddings_next as e
                      where e.embedding is not null) end,
           case when r.status = 'running'
                then (select pg_catalog.count(*) from pgrag.chunk_embeddings_next as e
                      where e.embedding is null) end
    from pgrag.reembeds as r
    order by r.id desc
    limit 1
$$;
comment on function pgrag.reembed_status() is
'The latest re-embed: target and previous model, status, times; while running, chunk_count (all chunks, from the corpus statistics), embedded (new embeddings stored) and waiting (queued, not yet embedded); once switched, the chunks switched. No row when none ever ran.';

-- A write blocked by a switch commits after it: a loader that checked the model before the
-- switch would store embeddings of the previous model beside the new ones. Every loader records
-- the model it embedded with in documents.embedding_model (pgrag.replace_document_chunks does),
-- so the check runs at commit, after any wait, against the model recorded then.
create or replace function pgrag.check_document_embedding_model()
returns trigger
language plpgsql
security invoker
set search_path = pg_catalog, pg_temp
as $$
declare
    v_model text;
begin
    select c.model into v_model from pgrag.embedding_config as c;
    if v_model is not null and new.embedding_model is distinct from v_model then
        raise exception 'the embedding model of this database is now % (a re-embed switched models) but this transaction stored embeddings of % (document %)',
            v_model, new.embedding_model, new.id
            using errcode = 'PR201',
                  hint = 'nothing of the transaction was saved; run it again: pgrag ingest embeds with the model the database records.';
    end if;
    return null;
end
$$;
comment on function pgrag.check_document_embedding_model() is
'Constraint trigger function (deferred, after insert or update of embedding_model on pgrag.documents): at commit, refuses (PR201) a document whose embedding_model is not the model pgrag.embedding_config records, e.g. embeddings of the previous model stored by a write that waited for a re-embed''s switch.';

drop trigger if exists documents_embedding_model on pgrag.documents;
create constraint trigger documents_embedding_model
    after insert or update of embedding_model on pgrag.documents
    deferrable initially deferred
    for each row when (new.embedding_model is not null)
    execute function pgrag.check_document_embedding_model();
