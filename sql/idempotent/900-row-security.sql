-- Row-level security and table privileges: the policies of every pgrag table and what each API
-- role may do with its rows.
-- Contract. Provides: policies named pgrag_* on every table of schema pgrag with a tenant_id
--   column (re-made on each migrate, so tables added later get them) and on the global tables;
--   USAGE on schema pgrag; table, column and sequence privileges for anon, authenticated and
--   service_role. Relies on: pgrag.current_tenant_id (001-helpers.sql); row level security
--   enabled on every tenant table by the incremental file that creates it (else this file
--   stops the migration). Runs in the late band (9NN): after every file that adds objects.
--
-- Trust model (docs/security.md): PostgREST verifies the JWT, switches to the role it names
-- (anon, authenticated or service_role) and puts the claims into request.jwt.claims;
-- pgrag.current_tenant_id() reads the tenant from there. The roles:
--   authenticated  reads and writes only the rows of its tenant; INSERT and UPDATE are checked
--                  (WITH CHECK), so no row can be written into, or moved to, another tenant.
--                  It writes every column except ids (identity), generated columns,
--                  is_public and in_shared_graph: no borrowed ids, no publishing to anon;
--                  of documents only what describes one, not its status or other
--                  bookkeeping.
--                  Except: its usage
--                  (token_usage) and the BM25 index (bm25_postings, bm25_lexicon,
--                  corpus_stats, bm25_backlog: the chunks triggers write them) it only reads,
--                  its search log (search_log) it adds to, reads
--                  and deletes but never changes, the re-embed queue (chunk_embeddings_next) it
--                  cannot reach at all.
--   anon           reads only documents marked is_public and the rows of tables with a
--                  document_id (chunks) that belong to such a document; no rows of other tenant
--                  tables (BM25 postings and statistics), nothing of the document queue;
--                  writes nothing.
--   service_role   full access (BYPASSRLS on Supabase; explicit policies here as well, so it
--                  also holds where the role was created without BYPASSRLS), but reads only
--                  the BM25 index, as authenticated.
-- Global tables: embedding_config and settings are readable by the three roles (search checks
-- the model and dimension; the search log reads the operator's settings), writable by none;
-- queue_settings readable by authenticated and service_role, fetch_allowlist by service_role
-- (the worker), both writable by none; queue_rotation (where the next claim starts) read and
-- written by service_role; schema_migrations, reembeds and model_prices are
-- neither. No role gets TRUNCATE, REFERENCES
-- or TRIGGER (TRUNCATE ignores RLS). pgrag has one SECURITY DEFINER function, the BM25 trigger
-- function (002-bm25-maintenance.sql).
--
-- Policy names start with pgrag_: those are (re)created here; policies an administrator adds
-- under other names are left alone (they are permissive, so they can only widen access).

-- The migrator already resolves names in pg_catalog only; said again for psql and for pgspot.
set local search_path = pg_catalog, pg_temp;

-- Schema: reachable by the API roles (search functions run as the caller, security invoker),
-- nothing for PUBLIC, no CREATE for anyone but the owner.
revoke all on schema pgrag from public;
grant usage on schema pgrag to anon, authenticated, service_role;

do $$
declare
    t record;
    cond text;
    anon_cond text;
    cols text;
begin
    -- Drop the policies of earlier versions first: renamed or removed ones must not linger.
    for t in
        select p.schemaname, p.tablename, p.policyname
        from pg_catalog.pg_policies as p
        where p.schemaname = 'pgrag' and p.policyname like 'pgrag\_%'
    loop
        execute pg_catalog.format('drop policy %I on %I.%I', t.policyname, t.schemaname, t.tablename);
    end loop;

    -- Start every table from no privileges for PUBLIC and the API roles.
    execute 'revoke all on all tables in schema pgrag from public, anon, authenticated, service_role';
    execute 'revoke all on all sequences in schema pgrag from public, anon, authenticated, service_role';

    -- Tenant tables: every table of schema pgrag with a tenant_id column.
    for t in
        select c.oid, c.relname, c.relrowsecurity,
               exists (select 1 from pg_catalog.pg_attribute as a
                       where a.attrelid = c.oid and a.attname = 'document_id' and not a.attisdropped)
                   as has_document
        from pg_catalog.pg_class as c
        where c.relnamespace = 'pgrag'::regnamespace
          and c.relkind in ('r', 'p')
          and exists (select 1 from pg_catalog.pg_attribute as a
                      where a.attrelid = c.oid and a.attname = 'tenant_id' and not a.attisdropped)
        order by c.relname
    loop
        if not t.relrowsecurity then
            raise exception 'pgrag.% has a tenant_id column but row level security is off', t.relname
                using hint = 'enable row level security in the migration that creates the table';
        end if;
        cond := '(tenant_id = (select pgrag.current_tenant_id()))';
        execute pg_catalog.format('create policy pgrag_authenticated_select on pgrag.%I for select to authenticated using %s', t.relname, cond);
        execute pg_catalog.format('create policy pgrag_authenticated_insert on pgrag.%I for insert to authenticated with check %s', t.relname, cond);
        execute pg_catalog.format('create policy pgrag_authenticated_update on pgrag.%I for update to authenticated using %s with check %s', t.relname, cond, cond);
        execute pg_catalog.format('create policy pgrag_authenticated_delete on pgrag.%I for delete to authenticated using %s', t.relname, cond);
        execute pg_catalog.format('create policy pgrag_service_role_select on pgrag.%I for select to service_role using (true)', t.relname);
        execute pg_catalog.format('create policy pgrag_service_role_insert on pgrag.%I for insert to service_role with check (true)', t.relname);
        execute pg_catalog.format('create policy pgrag_service_role_update on pgrag.%I for update to service_role using (true) with check (true)', t.relname);
        execute pg_catalog.format('create policy pgrag_service_role_delete on pgrag.%I for delete to service_role using (true)', t.relname);
        execute pg_catalog.format('grant select, insert, update, delete on pgrag.%I to service_role', t.relname);
        -- authenticated writes its rows column by column: never an identity (ids come from the
        -- sequences, so no tenant can create a row under another tenant's id, even with
        -- OVERRIDING SYSTEM VALUE), a generated column, is_public (publishing to anon is for
        -- service_role and the owner; docs/security.md, "Writes") or in_shared_graph (kept by
        -- a trigger; only the owner's bulk load leaves rows out of the shared graph).
        -- The document queue: a tenant writes what it submits (public.submit_document runs as
        -- the caller), never the state a worker keeps (state, attempts, lease, errors: the
        -- trigger queue_new_version sets them on every submission), and withdraws a document
        -- with delete_documents rather than by deleting its queue row.
        -- Documents: a tenant writes what describes a document (tenant_id, title, source_type,
        -- source_uri, metadata; bounded by the trigger documents_tenant_writes,
        -- 011-document-writes.sql), never the bookkeeping of the loader and the worker
        -- (status, error, chunk_count, content_sha256, embedding_model, created_at,
        -- updated_at): UPDATE of status is the bookkeeping privilege that trigger tests.
        -- Three tables a tenant may not write freely: its usage (pgrag.token_usage, written
        -- by pgrag.record_usage for the owner's loaders and commands: a tenant reads it and
        -- can neither lower nor inflate it), its search log (pgrag.search_log: rows are added,
        -- through public.log_search and the trigger that applies the operator's settings, read
        -- and deleted, never changed) and the re-embed queue (pgrag.chunk_embeddings_next: the
        -- owner's, no access at all).
        select pg_catalog.string_agg(pg_catalog.quote_ident(a.attname), ', ' order by a.attnum)
          into cols
          from pg_catalog.pg_attribute as a
         where a.attrelid = t.oid and a.attnum > 0 and not a.attisdropped
           and a.attidentity = '' and a.attgenerated = ''
           and a.attname not in ('is_public', 'in_shared_graph')
           and (t.relname <> 'document_queue'
                or a.attname = any (array['tenant_id', 'document_id', 'source_type', 'content',
                                          'title', 'metadata']))
           and (t.relname <> 'documents'
                or a.attname = any (array['tenant_id', 'title', 'source_type', 'source_uri',
                                          'metadata']));
        continue when t.relname = 'chunk_embeddings_next';
        -- The BM25 index (postings, document frequencies, corpus statistics, a bulk load's
        -- backlog): statistics every search reads, across tenants for service_role. Written
        -- only by the chunks triggers, as the owner (002-bm25-maintenance.sql): no API role
        -- writes them, so no tenant can skew or slow another's search through them.
        if t.relname in ('bm25_postings', 'bm25_lexicon', 'corpus_stats', 'bm25_backlog') then
            execute pg_catalog.format('revoke insert, update, delete on pgrag.%I from service_role',
                                      t.relname);
            execute pg_catalog.format('grant select on pgrag.%I to authenticated', t.relname);
        elsif t.relname = 'saved_embeddings' then
            -- The saved embeddings of a long document being loaded (pgrag.save_embeddings, the
            -- owner's): a tenant's loads read and delete its own (replace_document_chunks,
            -- delete_documents run as the caller) but never add any, so it cannot grow them.
            execute pg_catalog.format('grant select, delete on pgrag.%I to authenticated', t.relname);
        elsif t.relname = 'token_usage' then
            execute pg_catalog.format('grant select on pgrag.%I to authenticated', t.relname);
        elsif t.relname = 'search_log' then
            execute pg_catalog.format('grant select, delete on pgrag.%I to authenticated', t.relname);
            execute pg_catalog.format('grant insert (%2$s) on pgrag.%1$I to authenticated',
                                      t.relname, cols);
        elsif t.relname = 'document_queue' then
            execute pg_catalog.format('grant select on pgrag.%I to authenticated', t.relname);
            execute pg_catalog.format('grant insert (%2$s), update (%2$s) on pgrag.%1$I to authenticated',
                                      t.relname, cols);
        else
            execute pg_catalog.format('grant select, delete on pgrag.%I to authenticated', t.relname);
            execute pg_catalog.format('grant insert (%2$s), update (%2$s) on pgrag.%1$I to authenticated',
                                      t.relname, cols);
        end if;

        -- anon: public documents, and rows that belong to a public document. SELECT is granted
        -- on every tenant table so that search functions run for anon without a permission
        -- error; a table without an anon policy (postings, statistics) shows anon no rows.
        -- (Not the document queue: submissions are no one's public content yet; nor the saved
        -- embeddings of a document being loaded, which no search reads; nor the answer cache
        -- and its counters, which only a tenant's own lookups read.)
        continue when t.relname in ('document_queue', 'saved_embeddings', 'answer_cache',
                                    'answer_cache_counters');
        execute pg_catalog.format('grant select on pgrag.%I to anon', t.relname);
        anon_cond := case
            when t.relname = 'documents' then '(is_public)'
            when t.has_document then pg_catalog.format(
                '(exists (select 1 from pgrag.documents as d where d.tenant_id = %1$I.tenant_id '
                'and d.id = %1$I.document_id and d.is_public))', t.relname)
        end;
        if anon_cond is not null then
            execute pg_catalog.format('create policy pgrag_anon_select on pgrag.%I for select to anon using %s', t.relname, anon_cond);
        end if;
    end loop;
end
$$;

-- Global configuration: readable by the API roles (one policy per role), written by none.
create policy pgrag_anon_select on pgrag.embedding_config for select to anon using (true);
create policy pgrag_authenticated_select on pgrag.embedding_config for select to authenticated using (true);
create policy pgrag_service_role_select on pgrag.embedding_config for select to service_role using (true);
grant select on pgrag.embedding_config to anon, authenticated, service_role;
-- Allowed text-search configurations: read by the check on chunks (it runs as the writer).
create policy pgrag_anon_select on pgrag.text_search_configs for select to anon using (true);
create policy pgrag_authenticated_select on pgrag.text_search_configs for select to authenticated using (true);
create policy pgrag_service_role_select on pgrag.text_search_configs for select to service_role using (true);
grant select on pgrag.text_search_configs to anon, authenticated, service_role;
-- Queue settings: read by public.submit_document (as the caller) and by workers; written by
-- the owner only. What the worker may fetch: read by workers (service_role), written by the
-- owner only; no tenant reads or changes it (docs/ingest.md, "What the worker may fetch").
create policy pgrag_authenticated_select on pgrag.queue_settings for select to authenticated using (true);
create policy pgrag_service_role_select on pgrag.queue_settings for select to service_role using (true);
grant select on pgrag.queue_settings to authenticated, service_role;
create policy pgrag_service_role_select on pgrag.fetch_allowlist for select to service_role using (true);
grant select on pgrag.fetch_allowlist to service_role;
-- Where the next claim starts (pgrag.claim_documents): read and written by workers only.
create policy pgrag_service_role_select on pgrag.queue_rotation for select to service_role using (true);
create policy pgrag_service_role_update on pgrag.queue_rotation for update to service_role using (true) with check (true);
grant select, update on pgrag.queue_rotation to service_role;
-- The queue per tenant: a security_invoker view, so the queue's policies decide what each
-- caller sees (its own tenant's row; service_role every tenant's).
grant select on pgrag.queue_status to authenticated, service_role;
-- Operator settings: readable by the API roles (public.log_search and the search log's trigger
-- read them as the caller), written by none: a tenant cannot turn the search log on or off.
create policy pgrag_anon_select on pgrag.settings for select to anon using (true);
create policy pgrag_authenticated_select on pgrag.settings for select to authenticated using (true);
create policy pgrag_service_role_select on pgrag.settings for select to service_role using (true);
grant select on pgrag.settings to anon, authenticated, service_role;
-- pgrag.schema_migrations, pgrag.reembeds, pgrag.model_prices: no grant, no policy (the owner
-- alone: the migrator, model switches, the operator's price list).

-- Identity sequences of tenant tables: inserting a row draws an id. (Not those of global
-- tables such as pgrag.reembeds: no API role inserts there.)
do $$
declare
    s record;
begin
    for s in
        select c.relname
        from pg_catalog.pg_class as c
        join pg_catalog.pg_depend as d
          on d.classid = 'pg_catalog.pg_class'::regclass and d.objid = c.oid
         and d.refclassid = 'pg_catalog.pg_class'::regclass and d.deptype in ('a', 'i')
        where c.relnamespace = 'pgrag'::regnamespace and c.relkind = 'S'
          and exists (select 1 from pg_catalog.pg_attribute as a
                      where a.attrelid = d.refobjid and a.attname = 'tenant_id'
                        and not a.attisdropped)
        order by c.relname
    loop
        execute pg_catalog.format('grant usage on sequence pgrag.%I to authenticated, service_role', s.relname);
    end loop;
end
$$;
