-- Function privileges: who may execute what.
-- Contract. Provides: EXECUTE on pgrag's internal functions for exactly the roles whose calls
--   reach them, EXECUTE on the public API for the API roles, none for PUBLIC; default
--   privileges that keep later functions from PUBLIC; EXECUTE for PUBLIC back on pgvector's
--   functions. Relies on: every function of the other idempotent files existing (it runs in the
--   late band, after them). A function added to the call chain of an API function must be
--   added to a list here (tests/test_security_privileges.py checks the lists against the call
--   graph and docs/security.md, "Functions each role can execute").

-- The migrator already resolves names in pg_catalog only; said again for psql and for pgspot.
set local search_path = pg_catalog, pg_temp;

-- Functions in pgrag: none for PUBLIC, and for each API role only the internal helpers its
-- calls reach. Every pgrag function but one trigger function is SECURITY INVOKER, and an
-- invoker function needs the
-- caller to hold EXECUTE on each function it calls: the search functions of the API reach
-- the helpers of the first list (and every policy calls current_tenant_id; PostgREST calls
-- propagate_request_claims as its db-pre-request on Citus); a write to
-- pgrag.chunks fires triggers that call text_search_config_allowed as the writer (and
-- bm25_apply as the owner: the BM25 trigger function is the one SECURITY DEFINER function,
-- 002-bm25-maintenance.sql, so bm25_apply and bm25_write_sql are the owner's alone). Trigger
-- functions need no grant; the loader's and worker's functions are for the owner and service_role (below). A helper added to the call
-- chain of an API function must be added here (tests/test_security_privileges.py checks the
-- lists against the call graph and docs/security.md). A SECURITY DEFINER function gets no
-- grant here (tests/test_security.py lists the one there is).
do $$
declare
    f record;
begin
    execute 'revoke all on all functions in schema pgrag from public, anon, authenticated, service_role';
    for f in
        select p.oid::regprocedure as sig, p.proname
        from pg_catalog.pg_proc as p
        where p.pronamespace = 'pgrag'::regnamespace
          and p.prokind = 'f'
          and not p.prosecdef
          and (p.proname = any (array[
              'current_tenant_id', 'propagate_request_claims', 'tenant_chunk_count',
              'keyword_query', 'searchable', 'distributed',
              'vector_candidates', 'keyword_candidates', 'fused_candidates', 'mmr_order', 'windows',
              'context_from_hits',
              'tenant_index_name', 'own_graph_walk_name', 'own_graph_walk_sql', 'chunk_fts',
              'identifier_terms', 'check_argument', 'check_length', 'check_filters',
              'check_query_embedding', 'text_search_config',
              'delete_documents', 'delete_document_chunks', 'check_document_fields',
              'text_search_config_allowed',
              -- text search (051-text-search.sql) and the query-embedding cache (050-*.sql)
              'embed_query', 'compute_query_embedding', 'cached_query_embedding',
              'check_query_text', 'normalize_query', 'query_cache_key', 'chunk_text',
              'check_chunk_arguments', 'query_cache_get', 'query_cache_put', 'prune_query_cache',
              'query_cache_max_entries', 'check_cache_entry',
              -- the semantic answer cache's helpers (053-answer-cache.sql)
              'answer_cache_max_entries', 'answer_settings_key', 'answer_sources_fingerprint',
              -- re-ranking in the database (052-rerank.sql)
              'rerank_scores', 'check_rerank_arguments',
              -- the search log's bound (032-search-log.sql: its trigger runs as the writer)
              'search_log_max_rows',
              -- the keyword arm's steps (023-bm25-maxscore.sql to 025-keyword-arm.sql) and the
              -- windows' lookup without a tenant (019-windows.sql)
              'bm25_corpus', 'bm25_terms', 'bm25_scan_tenant', 'bm25_scan_tenants',
              'bm25_maxscore', 'bm25_maxscore_floor', 'bm25_maxscore_essential',
              'bm25_maxscore_candidates', 'bm25_maxscore_complete', 'keyword_walk',
              'keyword_walk_unfenced', 'window_hits_unfenced',
              -- query parsing (005-text-search.sql) and highlights (040-highlights.sql)
              'keyword_flags', 'keyword_required', 'keyword_phrases', 'html_escape',
              'highlight_matches', 'highlight_snippet',
              -- the vector arm's steps, walks and exact scans (021, 022, 029-vector-exact.sql)
              'vector_sizing', 'vector_walk_sql', 'vector_walk_public', 'vector_walk_shared',
              'vector_walk_tenant_shared', 'vector_walk_own', 'vector_walk_general',
              'vector_exact_tenant', 'vector_exact', 'hnsw_order_sql',
              -- facets (041-facets.sql) and suggestions (042-suggestions.sql)
              'facet_counts', 'trgm_schema', 'closest_lexemes', 'surface_word', 'edit_distance'
          ])
          -- each isolated tenant's walk function (pgrag.make_own_graph_walk, made after this
          -- file by pgrag.isolate_tenant, which grants it the same way)
          or p.proname operator(pg_catalog.~) '^own_graph_walk_t_[0-9a-f]{24}$')
        order by 1
    loop
        if f.proname in ('delete_documents', 'delete_document_chunks', 'check_document_fields',
                         'text_search_config_allowed',
                         'chunk_text', 'check_chunk_arguments', 'query_cache_get',
                         'query_cache_put', 'prune_query_cache', 'query_cache_max_entries',
                         'search_log_max_rows', 'answer_cache_max_entries',
                         'answer_settings_key', 'answer_sources_fingerprint',
                         'check_cache_entry')
           or f.proname operator(pg_catalog.~) '^own_graph_walk_t_' then
            -- writers only (the chunks triggers call text_search_config_allowed as the writer;
            -- the caches' writers, chunking): anon writes nothing; and the walk functions, for
            -- callers with a tenant (anon has none and never walks a tenant's graph)
            execute pg_catalog.format('grant execute on function %s to authenticated, service_role', f.sig);
        else
            execute pg_catalog.format('grant execute on function %s to anon, authenticated, service_role', f.sig);
        end if;
    end loop;
end
$$;

-- Functions created later (by the role that migrates, in any schema of this database, pgrag
-- and public included) are not executable by PUBLIC until granted: PostgreSQL's built-in
-- default would let every role run them until the next migrate. Only the global form can
-- take away PUBLIC's default EXECUTE (IN SCHEMA can only add privileges).
alter default privileges revoke execute on functions from public;

-- That default also reaches extension scripts the same role runs later: functions a pgvector
-- upgrade (ALTER EXTENSION vector UPDATE) adds would not be executable by the API roles. Give
-- pgvector's functions back the EXECUTE for PUBLIC its scripts expect, and pg_trgm's (the
-- suggestions' trigrams, created by incremental/019-query-suggestions.sql when missing): only
-- those of this role; other extensions: docs/security.md, "Functions and privileges".
do $$
declare
    f record;
begin
    for f in
        select p.oid::regprocedure as sig
        from pg_catalog.pg_proc as p
        join pg_catalog.pg_depend as d
          on d.classid = 'pg_catalog.pg_proc'::regclass and d.objid = p.oid and d.deptype = 'e'
        join pg_catalog.pg_extension as e on e.oid = d.refobjid
        where e.extname in ('vector', 'pg_trgm')
          and p.proowner = (select r.oid from pg_catalog.pg_roles as r where r.rolname = current_user)
          and not exists (select 1 from pg_catalog.aclexplode(
                              coalesce(p.proacl, pg_catalog.acldefault('f', p.proowner))) as a
                          where a.grantee = 0 and a.privilege_type = 'EXECUTE')
        order by 1
    loop
        execute pg_catalog.format('grant execute on function %s to public', f.sig);
    end loop;
end
$$;
-- The loader's and the worker's functions (004-loading.sql, 012-queue-claims.sql,
-- 013-queue-outcomes.sql): the document lifecycle of pgrag ingest and pgrag worker, for the
-- owner and service_role (a worker may connect as a role that inherits service_role), never for
-- anon or authenticated. Acting as a
-- tenant (set_request_tenant) is for these trusted sessions too: service_role reads and writes
-- every tenant's rows anyway.
do $$
declare
    f record;
begin
    for f in
        select p.oid::regprocedure as sig
        from pg_catalog.pg_proc as p
        where p.pronamespace = 'pgrag'::regnamespace
          and p.prokind = 'f'
          and not p.prosecdef
          and p.proname = any (array[
              'set_request_tenant', 'loader_tenant', 'create_stage', 'begin_documents',
              'relabel_documents', 'fail_documents', 'fail_sources', 'abort_documents',
              'record_embedding_model', 'replace_document_chunks', 'insert_staged_chunks', 'check_worker',
              'claim_documents', 'fail_exhausted_leases', 'due_tenants_after', 'renew_leases', 'release_documents', 'complete_documents',
              'skip_documents', 'fail_attempts', 'next_claim_at'
          ])
        order by 1
    loop
        execute pg_catalog.format('revoke all on function %s from anon, authenticated', f.sig);
        execute pg_catalog.format('grant execute on function %s to service_role', f.sig);
    end loop;
end
$$;

-- The RPC API in the exposed schema (public): executable by the API roles, not by PUBLIC.
-- The lists name every function pgrag creates there; tests/test_security.py checks that each
-- "create function public.*" in sql/ is listed. The queue's RPCs and the answer cache's need a
-- tenant (anon has none and writes nothing): authenticated and service_role only.
do $$
declare
    f record;
begin
    for f in
        select p.oid::regprocedure as sig,
               p.proname = any (array['submit_document', 'document_status', 'queue_status',
                                      'answer_cache_lookup', 'answer_cache_store'])
                   as tenant_only
        from pg_catalog.pg_proc as p
        where p.pronamespace = 'public'::regnamespace
          and p.proname = any (array[
              'vector_search', 'keyword_search', 'hybrid_search', 'chunk_windows',
              'build_context', 'hybrid_search_text', 'rerank', 'build_context_for', 'log_search',
              'submit_document', 'document_status', 'queue_status', 'search_facets', 'suggest_query',
              'highlight', 'answer_cache_lookup', 'answer_cache_store'
          ])
          -- never an extension's function of the same name
          and not exists (select 1 from pg_catalog.pg_depend as d
                          where d.classid = 'pg_catalog.pg_proc'::regclass and d.objid = p.oid
                            and d.deptype = 'e')
        order by 1
    loop
        execute pg_catalog.format('revoke all on function %s from public', f.sig);
        if f.tenant_only then
            execute pg_catalog.format('revoke all on function %s from anon', f.sig);
            execute pg_catalog.format('grant execute on function %s to authenticated, service_role', f.sig);
        else
            execute pg_catalog.format('grant execute on function %s to anon, authenticated, service_role', f.sig);
        end if;
    end loop;
end
$$;
