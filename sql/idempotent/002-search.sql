-- pgrag retrieval: BM25 maintenance triggers and the search functions clients call.
-- Idempotent: re-applied on every migrate. Every function pins search_path to pg_catalog, pg_temp,
-- qualifies every name, runs with the caller's rights (security invoker) so row-level security
-- applies, and scopes rows to pgrag.current_tenant_id() when a tenant claim is present.
--
-- Client-facing functions live in schema public (what PostgREST exposes):
--   vector_search, keyword_search, hybrid_search, chunk_windows, build_context.
-- Internals live in schema pgrag. See docs/sql-api.md.

-- ---------------------------------------------------------------------------------------------
-- BM25 maintenance: statement-level triggers with transition tables on pgrag.chunks.
-- ---------------------------------------------------------------------------------------------

create or replace function pgrag.bm25_apply(
    sign integer,
    tenant_ids text[],
    chunk_ids bigint[],
    languages text[],
    ftss tsvector[]
)
returns void
language plpgsql
volatile
security invoker
set search_path = pg_catalog, pg_temp
as $$
declare
    v_shard integer := pg_catalog.pg_backend_pid() % 16;
    v_slot integer;
begin
    if coalesce(pg_catalog.cardinality(chunk_ids), 0) = 0 then
        return;
    end if;
    -- Other tenants are refused before any lock is taken: a caller under row-level security
    -- (authenticated) indexes only rows of its own tenant (the triggers hand it its own rows),
    -- so it can never hold another tenant's writer lock while RLS refuses its rows.
    if pg_catalog.row_security_active('pgrag.bm25_postings'::pg_catalog.regclass)
       and not pg_catalog.pg_has_role('service_role', 'usage')
       and exists (select 1 from pg_catalog.unnest(tenant_ids) as u(tenant_id)
                   where u.tenant_id is distinct from pgrag.current_tenant_id()) then
        raise exception 'pgrag.bm25_apply: rows of another tenant than the caller''s'
            using errcode = '42501';
    end if;
    -- The lexicon row of a word is updated by every statement that writes it: rotate over 8
    -- slots of this backend's shard, statement after statement within a transaction, so that
    -- thousands of single-row inserts in one transaction do not pile versions on one row.
    v_slot := coalesce(nullif(pg_catalog.current_setting('pgrag.lexicon_slot', true), '')::integer, -1) + 1;
    perform pg_catalog.set_config('pgrag.lexicon_slot', (v_slot % 8)::text, true);
    -- One writer per (tenant, shard) until commit: a transaction that replaces chunks adds
    -- to the lexicon twice (deleted, then inserted), and two such transactions on one shard
    -- could otherwise lock the rows of common words in opposite orders. Writers on other
    -- shards (other backends, pid % 16) never wait.
    perform pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext(t.tenant_id), v_shard)
    from (select distinct u.tenant_id from pg_catalog.unnest(tenant_ids) as u(tenant_id)
          order by u.tenant_id) as t;

    if sign > 0 then
        insert into pgrag.bm25_postings (tenant_id, lexeme, chunk_id, tf, doc_len)
        select c.tenant_id, t.lexeme, c.id, pg_catalog.cardinality(t.positions), l.len
        from rows from (pg_catalog.unnest(tenant_ids), pg_catalog.unnest(chunk_ids),
                        pg_catalog.unnest(ftss)) as c(tenant_id, id, fts)
        cross join lateral (
            select coalesce(pg_catalog.sum(pg_catalog.cardinality(u.positions)) filter (where u.weights[1] <> 'A'), 0)::integer as len
            from pg_catalog.unnest(c.fts) as u
        ) as l
        cross join lateral pg_catalog.unnest(c.fts) as t;
    else
        delete from pgrag.bm25_postings as p
        using (
            select c.tenant_id, c.id, pg_catalog.unnest(pg_catalog.tsvector_to_array(c.fts)) as lexeme
            from rows from (pg_catalog.unnest(tenant_ids), pg_catalog.unnest(chunk_ids),
                            pg_catalog.unnest(ftss)) as c(tenant_id, id, fts)
        ) as o
        where p.tenant_id = o.tenant_id and p.lexeme = o.lexeme and p.chunk_id = o.id;
    end if;

    -- Document frequencies, in key order (one lock order for every writer of a shard).
    insert into pgrag.bm25_lexicon as x (tenant_id, lexeme, shard, df)
    select c.tenant_id, l.lexeme, v_shard * 8 + v_slot % 8, sign * pg_catalog.count(*)
    from rows from (pg_catalog.unnest(tenant_ids), pg_catalog.unnest(ftss)) as c(tenant_id, fts)
    cross join lateral pg_catalog.unnest(pg_catalog.tsvector_to_array(c.fts)) as l(lexeme)
    group by c.tenant_id, l.lexeme
    order by c.tenant_id, l.lexeme
    on conflict (tenant_id, lexeme, shard) do update
        set df = x.df operator(pg_catalog.+) excluded.df;

    insert into pgrag.corpus_stats as s (tenant_id, language, shard, chunk_count, token_count)
    select c.tenant_id, c.language, v_shard, sign * pg_catalog.count(*),
           sign * coalesce(pg_catalog.sum(l.len), 0)
    from rows from (pg_catalog.unnest(tenant_ids), pg_catalog.unnest(languages),
                    pg_catalog.unnest(ftss)) as c(tenant_id, language, fts)
    cross join lateral (
        select coalesce(pg_catalog.sum(pg_catalog.cardinality(u.positions)) filter (where u.weights[1] <> 'A'), 0) as len
        from pg_catalog.unnest(c.fts) as u
    ) as l
    group by c.tenant_id, c.language
    order by c.tenant_id, c.language
    on conflict (tenant_id, language, shard) do update
        set chunk_count = s.chunk_count operator(pg_catalog.+) excluded.chunk_count,
            token_count = s.token_count operator(pg_catalog.+) excluded.token_count;
end
$$;
comment on function pgrag.bm25_apply(integer, text[], bigint[], text[], tsvector[]) is
'Adds (sign 1) or removes (sign -1) chunks in the BM25 index: postings, document frequencies (pgrag.bm25_lexicon, shard (pid % 16) * 8 + a slot rotating per statement) and corpus statistics (shard pid % 16). Called by the triggers on pgrag.chunks with their transition rows.';

create or replace function pgrag.bm25_chunks_inserted()
returns trigger
language plpgsql
security invoker
set search_path = pg_catalog, pg_temp
as $$
begin
    -- In batches of 10,000 rows: one array may not exceed 1 GB, a bulk load may.
    perform pgrag.bm25_apply(1, pg_catalog.array_agg(n.tenant_id), pg_catalog.array_agg(n.id),
                             pg_catalog.array_agg(n.language::text), pg_catalog.array_agg(n.fts))
    from (select c.*, (pg_catalog.row_number() over () - 1) / 10000 as batch
          from new_chunks as c) as n
    group by n.batch;
    return null;
end
$$;
comment on function pgrag.bm25_chunks_inserted() is
'Trigger function (after insert, per statement): adds the new chunks to the BM25 index.';

create or replace function pgrag.bm25_chunks_deleted()
returns trigger
language plpgsql
security invoker
set search_path = pg_catalog, pg_temp
as $$
begin
    perform pgrag.bm25_apply(-1, pg_catalog.array_agg(o.tenant_id), pg_catalog.array_agg(o.id),
                             pg_catalog.array_agg(o.language::text), pg_catalog.array_agg(o.fts))
    from (select c.*, (pg_catalog.row_number() over () - 1) / 10000 as batch
          from old_chunks as c) as o
    group by o.batch;
    return null;
end
$$;
comment on function pgrag.bm25_chunks_deleted() is
'Trigger function (after delete, per statement): removes the deleted chunks from the BM25 index.';

create or replace function pgrag.bm25_chunks_updated()
returns trigger
language plpgsql
security invoker
set search_path = pg_catalog, pg_temp
as $$
begin
    -- Only rows whose indexed text (or identity) changed touch the BM25 index: such a row is
    -- removed as its old version and added as its new one.
    perform pgrag.bm25_apply(-1, pg_catalog.array_agg(o.tenant_id), pg_catalog.array_agg(o.id),
                             pg_catalog.array_agg(o.language::text), pg_catalog.array_agg(o.fts))
    from (select c.*, (pg_catalog.row_number() over () - 1) / 10000 as batch
          from old_chunks as c
          where not exists (
              select from new_chunks as n
              where n.tenant_id = c.tenant_id and n.id = c.id
                and n.language = c.language and n.fts = c.fts
          )) as o
    group by o.batch;
    perform pgrag.bm25_apply(1, pg_catalog.array_agg(n.tenant_id), pg_catalog.array_agg(n.id),
                             pg_catalog.array_agg(n.language::text), pg_catalog.array_agg(n.fts))
    from (select c.*, (pg_catalog.row_number() over () - 1) / 10000 as batch
          from new_chunks as c
          where not exists (
              select from old_chunks as o
              where c.tenant_id = o.tenant_id and c.id = o.id
                and c.language = o.language and c.fts = o.fts
          )) as n
    group by n.batch;
    return null;
end
$$;
comment on function pgrag.bm25_chunks_updated() is
'Trigger function (after update, per statement): re-indexes for BM25 the chunks whose fts, language, tenant or id changed.';

create or replace trigger chunks_bm25_insert
    after insert on pgrag.chunks
    referencing new table as new_chunks
    for each statement execute function pgrag.bm25_chunks_inserted();

create or replace trigger chunks_bm25_delete
    after delete on pgrag.chunks
    referencing old table as old_chunks
    for each statement execute function pgrag.bm25_chunks_deleted();

create or replace trigger chunks_bm25_update
    after update on pgrag.chunks
    referencing old table as old_chunks new table as new_chunks
    for each statement execute function pgrag.bm25_chunks_updated();

-- ---------------------------------------------------------------------------------------------
-- chunks.is_public: a copy of the document's flag, the predicate of the public-only HNSW index
-- that anon searches (sql/incremental/005-vector-isolation.sql). Written by these triggers only.
-- ---------------------------------------------------------------------------------------------

create or replace function pgrag.chunk_is_public()
returns trigger
language plpgsql
security invoker
set search_path = pg_catalog, pg_temp
as $$
begin
    new.is_public := coalesce((select d.is_public from pgrag.documents as d
                               where d.tenant_id = new.tenant_id and d.id = new.document_id), false);
    return new;
end
$$;
comment on function pgrag.chunk_is_public() is
'Trigger function (before insert or update of tenant_id, document_id, is_public on pgrag.chunks, per row): sets is_public from the chunk''s document, whatever the writer gave.';

create or replace function pgrag.document_is_public_changed()
returns trigger
language plpgsql
security invoker
set search_path = pg_catalog, pg_temp
as $$
begin
    -- Each chunk's own trigger reads the flag back from this (already updated) document.
    update pgrag.chunks as c
       set is_public = new.is_public
     where c.tenant_id = new.tenant_id and c.document_id = new.id
       and c.is_public is distinct from new.is_public;
    return null;
end
$$;
comment on function pgrag.document_is_public_changed() is
'Trigger function (after update of is_public on pgrag.documents, per row): copies the new flag to the document''s chunks.';

create or replace trigger chunks_is_public
    before insert or update of tenant_id, document_id, is_public on pgrag.chunks
    for each row execute function pgrag.chunk_is_public();

-- Publishing is a privilege (UPDATE of documents.is_public: service_role and the owner), and so
-- is changing what is published: without it, a tenant may not add to, edit, or move chunks into
-- or out of a public document, nor edit the document. Deleting stays allowed (a tenant may
-- withdraw its content). docs/security.md, "Writes: ids and publishing".
create or replace function pgrag.guard_published_writes()
returns trigger
language plpgsql
security invoker
set search_path = pg_catalog, pg_temp
as $$
begin
    if pg_catalog.has_column_privilege('pgrag.documents', 'is_public', 'UPDATE') then
        return new;
    end if;
    if tg_table_name = 'documents' then
        if old.is_public then
            raise exception 'document % is published: changing it needs the publishing privilege', old.id
                using errcode = '42501',
                      hint = 'publishing and editing published documents is for service_role (docs/security.md).';
        end if;
        return new;
    end if;
    if exists (select 1 from pgrag.documents as d
               where (d.tenant_id = new.tenant_id and d.id = new.document_id)
                  or (tg_op = 'UPDATE' and d.tenant_id = old.tenant_id and d.id = old.document_id)
               having pg_catalog.bool_or(d.is_public)) then
        raise exception 'chunk % belongs to a published document: changing it needs the publishing privilege',
            coalesce(new.id, old.id)
            using errcode = '42501',
                  hint = 'publishing and editing published documents is for service_role (docs/security.md).';
    end if;
    return new;
end
$$;
comment on function pgrag.guard_published_writes() is
'Trigger function (before insert or update on pgrag.chunks, before update on pgrag.documents, per row): a role without UPDATE on documents.is_public (the publishing privilege) may not change a published document or its chunks (SQLSTATE 42501); deleting stays allowed.';

create or replace trigger chunks_guard_published
    before insert or update on pgrag.chunks
    for each row execute function pgrag.guard_published_writes();

create or replace trigger documents_guard_published
    before update on pgrag.documents
    for each row execute function pgrag.guard_published_writes();

create or replace trigger documents_is_public
    after update of is_public on pgrag.documents
    for each row when (old.is_public operator(pg_catalog.<>) new.is_public)
    execute function pgrag.document_is_public_changed();

-- ---------------------------------------------------------------------------------------------
-- Loading: the atomic per-document swap every loader shares.
-- ---------------------------------------------------------------------------------------------

create or replace function pgrag.replace_document_chunks(
    stage regclass,
    tenant text,
    document_ids bigint[],
    titles text[],
    source_types text[],
    content_sha256s text[],
    metadatas jsonb[],
    chunk_counts integer[],
    embedding_model text
)
returns void
language plpgsql
volatile
security invoker
set search_path = pg_catalog, pg_temp
as $$
declare
    v_missing bigint;
    v_recorded text;
begin
    -- Another tenant's documents are refused before any lock (as in bm25_apply).
    if pg_catalog.row_security_active('pgrag.documents'::pg_catalog.regclass)
       and not pg_catalog.pg_has_role('service_role', 'usage')
       and tenant is distinct from pgrag.current_tenant_id() then
        raise exception 'pgrag.replace_document_chunks: tenant % is not the caller''s', tenant
            using errcode = '42501';
    end if;
    -- Never mix models: the embeddings must come from the model the database records.
    select c.model into v_recorded from pgrag.embedding_config as c;
    if v_recorded is not null and v_recorded <> embedding_model then
        raise exception 'this database holds embeddings of %; % would mix models', v_recorded, embedding_model
            using errcode = 'PR002',
                  hint = 'embed with the recorded model, or switch models for every document (pgrag ingest --switch-model).';
    end if;
    -- One loader at a time per document, in id order (no deadlock between two loaders).
    perform 1 from pgrag.documents as d
    where d.tenant_id = tenant and d.id = any (document_ids)
    order by d.id
    for update;
    -- Staged chunks without an embedding reuse the one stored for the same text of the same
    -- document (an unchanged chunk is never embedded twice).
    execute pg_catalog.format(
        'update %s as s set embedding = o.embedding from pgrag.chunks as o '
        'where s.embedding is null and s.document_id operator(pg_catalog.=) any ($1) '
        'and o.tenant_id operator(pg_catalog.=) $2 and o.document_id operator(pg_catalog.=) s.document_id '
        'and o.content_sha256 operator(pg_catalog.=) s.content_sha256 and o.embedding is not null',
        stage)
    using document_ids, tenant;
    execute pg_catalog.format(
        'select pg_catalog.count(*) from %s where document_id operator(pg_catalog.=) any ($1) '
        'and embedding is null', stage)
    into v_missing
    using document_ids;
    if v_missing > 0 then
        raise exception 'a document changed in the database while it was being ingested'
            using errcode = 'PR001',
                  hint = 'another ingest of the same source? run pgrag ingest again.';
    end if;
    delete from pgrag.chunks as c where c.tenant_id = tenant and c.document_id = any (document_ids);
    execute pg_catalog.format(
        'insert into pgrag.chunks (tenant_id, document_id, chunk_index, content, embedding, page, '
        'heading_path, language, token_count, content_sha256, overlap_chars, metadata) '
        'select $1, document_id, chunk_index, content, embedding, page, heading_path, '
        'language::regconfig, token_count, content_sha256, overlap_chars, metadata '
        'from %s where document_id operator(pg_catalog.=) any ($2) order by document_id, chunk_index',
        stage)
    using tenant, document_ids;
    update pgrag.documents as d
       set title = v.title, source_type = v.source_type, content_sha256 = v.sha,
           metadata = v.metadata, status = 'ready', error = null, chunk_count = v.n,
           embedding_model = replace_document_chunks.embedding_model
      from rows from (pg_catalog.unnest(document_ids), pg_catalog.unnest(titles),
                      pg_catalog.unnest(source_types), pg_catalog.unnest(content_sha256s),
                      pg_catalog.unnest(metadatas), pg_catalog.unnest(chunk_counts))
           as v(id, title, source_type, sha, metadata, n)
     where d.tenant_id = tenant and d.id = v.id;
    execute pg_catalog.format('delete from %s where document_id operator(pg_catalog.=) any ($1)', stage)
    using document_ids;
end
$$;
comment on function pgrag.replace_document_chunks(regclass, text, bigint[], text[], text[], text[], jsonb[], integer[], text) is
'Atomic swap of documents'' chunks from a staging table (columns document_id, chunk_index, content, embedding, page, heading_path, language, token_count, content_sha256, overlap_chars, metadata; e.g. a temp table filled by COPY): locks the documents, reuses stored embeddings of unchanged chunk texts, replaces the chunks, marks the documents ready with their metadata, empties their staged rows. Raises PR001 when a staged chunk has no embedding to reuse, PR002 when embedding_model is not the model pgrag.embedding_config records.';

-- ---------------------------------------------------------------------------------------------
-- Text-search vectors: identifiers (part numbers, error codes, versions) searchable by any part.
-- The default parser splits V-ZQX41-7 into v-zqx41, v, zqx41, 7 but a query ZQX41-7 into zqx41,
-- -7; ERR-4471 into err, -4471; v2.3.1 stays one lexeme. Chunks therefore also index every run
-- of parts of such a token (pgrag.chunk_fts), and keyword_query adds each identifier of the query
-- whole, so a query for any part of an identifier finds it. chunks.fts is a generated column of
-- pgrag.chunk_fts: changing either function below needs an incremental migration that
-- recomputes chunks.fts and the BM25 tables (as the identifier-lexemes migration does).
-- ---------------------------------------------------------------------------------------------

create or replace function pgrag.identifier_terms(content text, whole_only boolean default false)
returns text[]
language plpgsql
immutable
strict
parallel safe
security invoker
set search_path = pg_catalog, pg_temp
as $$
declare
    v_out text[] := '{}';
    v_tok text;
    v_marked text;
    v_parts text[];
    v_seps text[];
    v_n integer;
    v_term text;
begin
    -- Identifier-like tokens: runs of letters and digits joined by - . _ that hold a digit and
    -- either a separator or a letter (ERR-4471, v2.3.1, V-ZQX41-7, ZQX41; not 2026, T-cell).
    if content operator(pg_catalog.!~) '[[:digit:]]' then
        return v_out;
    end if;
    for v_tok in
        select pg_catalog.lower(m[1])
        from pg_catalog.regexp_matches(content,
            '((?:[[:alnum:]]+[-._])*[[:alnum:]]*[[:digit:]][[:alnum:]]*(?:[-._][[:alnum:]]+)*)', 'g') as m
    loop
        continue when pg_catalog.length(v_tok) > 64 or v_tok operator(pg_catalog.!~) '[-._]|[[:alpha:]]';
        v_out := v_out operator(pg_catalog.||) v_tok;
        continue when whole_only;
        -- Parts: letter runs and digit runs; v_seps[i] joins part i to part i + 1 ('' between a
        -- letter run and a digit run, marked by chr(1) to split there).
        v_marked := pg_catalog.regexp_replace(
            pg_catalog.regexp_replace(v_tok, '([[:alpha:]])(?=[[:digit:]])', '\1' operator(pg_catalog.||) pg_catalog.chr(1), 'g'),
            '([[:digit:]])(?=[[:alpha:]])', '\1' operator(pg_catalog.||) pg_catalog.chr(1), 'g');
        v_parts := pg_catalog.regexp_split_to_array(v_marked, '[-._' operator(pg_catalog.||) pg_catalog.chr(1) operator(pg_catalog.||) ']');
        v_seps := pg_catalog.regexp_split_to_array(v_marked, '[[:alnum:]]+');
        v_seps := v_seps[2:];  -- (the text before the first part is empty)
        v_n := pg_catalog.cardinality(v_parts);
        -- Every run of up to 6 consecutive parts, written as in the text (the whole token once).
        for i in 1 .. v_n loop
            v_term := '';
            for j in i .. least(v_n, i + 5) loop
                v_term := v_term operator(pg_catalog.||) v_parts[j];
                if i > 1 or j < v_n then
                    v_out := v_out operator(pg_catalog.||) v_term;
                end if;
                v_term := v_term operator(pg_catalog.||) pg_catalog.replace(coalesce(v_seps[j], ''), pg_catalog.chr(1), '');
            end loop;
        end loop;
    end loop;
    return v_out;
end
$$;
comment on function pgrag.identifier_terms(text, boolean) is
'Identifier-like tokens of content (letters and digits joined by - . _, holding a digit and a separator or a letter: ERR-4471, v2.3.1, V-ZQX41-7), lower-cased, one entry per occurrence; unless whole_only, also every run of up to 6 consecutive parts (letter runs, digit runs) written as in the text: V-ZQX41-7 gives v-zqx41-7, v, zqx, zqx41, zqx41-7, 41-7, 7, ...';

create or replace function pgrag.chunk_fts(config regconfig, content text)
returns tsvector
language plpgsql
immutable
strict
parallel safe
security invoker
set search_path = pg_catalog, pg_temp
as $$
declare
    v_base tsvector := pg_catalog.to_tsvector(config, content);
    v_terms text[] := pgrag.identifier_terms(content);
    v_extra text := '';
begin
    if pg_catalog.cardinality(v_terms) = 0 then
        return v_base;
    end if;
    -- The identifier parts the parser did not produce, appended (positions after the text's,
    -- one per occurrence) with weight A: BM25 counts their occurrences (tf) but leaves them out
    -- of the chunk's length, which stays that of its words. Terms hold letters, digits, - . _
    -- only: quoting needs no escapes.
    for i in 1 .. least(pg_catalog.cardinality(v_terms), 16383) loop
        v_extra := v_extra operator(pg_catalog.||) pg_catalog.format(' ''%s'':%sA', v_terms[i], i);
    end loop;
    return v_base operator(pg_catalog.||)
        pg_catalog.ts_delete(v_extra::tsvector, pg_catalog.tsvector_to_array(v_base));
end
$$;
comment on function pgrag.chunk_fts(regconfig, text) is
'Text-search vector of a chunk (the generated column pgrag.chunks.fts): to_tsvector(config, content) plus the identifier parts of pgrag.identifier_terms(content) it lacks, so that ZQX41-7, ERR, 4471 or 2.3.1 find V-ZQX41-7, ERR-4471 and v2.3.1.';

-- ---------------------------------------------------------------------------------------------
-- Query parsing: websearch syntax with OR semantics.
-- ---------------------------------------------------------------------------------------------

create or replace function pgrag.keyword_query(
    query_text text,
    config regconfig,
    out positive tsquery,
    out negative tsquery,
    out lexemes text[]
)
language plpgsql
stable
security invoker
parallel safe
set search_path = pg_catalog, pg_temp
as $$
declare
    q text;
    depth integer := 0;
    tok text;
    clause text := '';
    clauses text[] := '{}';
    pos text[] := '{}';
    neg text[] := '{}';
    c text;
begin
    -- Bounded work (docs/security.md, "Argument limits"): the parser recurses per term, so an
    -- unbounded text exhausts the stack; a configuration OID that does not exist is no error
    -- for regconfig input but an internal one for the parser.
    perform pgrag.check_length('query_text', pg_catalog.length(query_text), 10000, 'characters');
    if config is null or not exists (select 1 from pg_catalog.pg_ts_config as t where t.oid = config) then
        raise exception 'config must name a text search configuration, such as english or simple (got %)',
            coalesce(config::text, 'null')
            using errcode = '22023';
    end if;
    q := pg_catalog.websearch_to_tsquery(config, coalesce(query_text, ''))::text;
    -- Split the tsquery text at top-level & and | (outside parentheses): each piece is a clause
    -- (a lexeme, a phrase, or a negated lexeme or phrase). Tokens: quoted lexemes (with ''
    -- escapes and an optional :* or weight suffix), <N> and <-> phrase operators, ( ) ! & |.
    for tok in
        select m[1]
        from pg_catalog.regexp_matches(
            q, '(''(?:[^'']|'''')*''(?::[*A-Da-d]+)?|<[0-9]+>|<->|[()!&|])', 'g') as m
    loop
        if tok = '(' then
            depth := depth + 1;
        elsif tok = ')' then
            depth := depth - 1;
        end if;
        if depth = 0 and tok in ('&', '|') then
            clauses := clauses operator(pg_catalog.||) pg_catalog.btrim(clause);
            clause := '';
        else
            clause := clause operator(pg_catalog.||) ' ' operator(pg_catalog.||) tok;
        end if;
    end loop;
    if pg_catalog.btrim(clause) <> '' then
        clauses := clauses operator(pg_catalog.||) pg_catalog.btrim(clause);
    end if;

    foreach c in array clauses loop
        if pg_catalog.left(c, 1) = '!' then
            neg := neg operator(pg_catalog.||) ('(' operator(pg_catalog.||) pg_catalog.btrim(pg_catalog.substr(c, 2)) operator(pg_catalog.||) ')');
        elsif c <> '' then
            pos := pos operator(pg_catalog.||) ('(' operator(pg_catalog.||) c operator(pg_catalog.||) ')');
        end if;
    end loop;

    -- Identifiers of the query (outside quoted phrases), each also a clause of its own as one
    -- lexeme, as pgrag.chunk_fts indexes every part of an identifier; a leading - excludes it.
    -- Terms hold letters, digits, - . _ only: quoting needs no escapes.
    for tok in
        select (case when m[2] = '-' then '!' else '' end) operator(pg_catalog.||) t.term
        from pg_catalog.regexp_matches(
                 pg_catalog.regexp_replace(coalesce(query_text, ''), '"[^"]*("|$)', ' ', 'g'),
                 '(^|[^[:alnum:]._-])(-?)([[:alnum:]]+(?:[-._][[:alnum:]]+)*)', 'g') as m
        cross join lateral pg_catalog.unnest(pgrag.identifier_terms(m[3], true)) as t(term)
    loop
        c := pg_catalog.format('(''%s'')', pg_catalog.ltrim(tok, '!'));
        if pg_catalog.left(tok, 1) = '!' then
            neg := neg operator(pg_catalog.||) c;
        else
            pos := pos operator(pg_catalog.||) c;
        end if;
    end loop;

    if pg_catalog.cardinality(pos) > 0 then
        positive := pg_catalog.array_to_string(pos, ' | ')::tsquery;
        select pg_catalog.array_agg(distinct pg_catalog.replace(m[1], '''''', ''''))
        into lexemes
        from pg_catalog.regexp_matches(pg_catalog.array_to_string(pos, ' '),
                                       '''((?:[^'']|'''')*)''', 'g') as m;
    else
        lexemes := '{}';
    end if;
    perform pgrag.check_length('query_text', pg_catalog.cardinality(lexemes), 64, 'distinct search terms');
    if pg_catalog.cardinality(neg) > 0 then
        negative := pg_catalog.array_to_string(neg, ' | ')::tsquery;
    end if;
end
$$;
comment on function pgrag.keyword_query(text, regconfig) is
'Parses query_text with websearch_to_tsquery(config) and relaxes it to OR semantics: positive = any positive clause (a word, a quoted phrase, or an identifier such as ERR-4471 as one lexeme, see pgrag.chunk_fts), negative = any excluded clause, lexemes = the distinct lexemes BM25 scores. query_text: at most 10,000 characters and 64 distinct search terms; config: an existing text search configuration (else SQLSTATE 22023).';

-- ---------------------------------------------------------------------------------------------
-- Candidate generation (internal): each arm returns (tenant_id, chunk_id, score) best first,
-- with every filter applied inside the arm.
-- ---------------------------------------------------------------------------------------------

create or replace function pgrag.tenant_chunk_count(tenant text)
returns bigint
language sql
stable
security invoker
parallel safe
set search_path = pg_catalog, pg_temp
as $$
    select coalesce(pg_catalog.sum(s.chunk_count), 0)::bigint
    from pgrag.corpus_stats as s
    where s.tenant_id = tenant
$$;
comment on function pgrag.tenant_chunk_count(text) is
'Number of chunks of a tenant, from the sharded corpus statistics (used to pick exact or HNSW search).';

-- Tenant isolation in the vector index (docs/security.md): a tenant above
-- pgrag.exact_search_max_rows searches the HNSW graph of every chunk unless it has a graph of
-- its own, a partial HNSW index over its chunks made by pgrag.isolate_tenant.

create or replace function pgrag.tenant_index_name(tenant text)
returns text
language sql
immutable
security invoker
parallel safe
set search_path = pg_catalog, pg_temp
as $$
    select 'chunks_embedding_hnsw_t_' operator(pg_catalog.||)
           pg_catalog.left(pg_catalog.md5(tenant), 24)
$$;
comment on function pgrag.tenant_index_name(text) is
'Name (in schema pgrag) of the partial HNSW index pgrag.isolate_tenant makes for a tenant.';

create or replace function pgrag.isolate_tenant(tenant text)
returns regclass
language plpgsql
volatile
security invoker
set search_path = pg_catalog, pg_temp
as $$
declare
    v_name text;
begin
    if tenant is null or pg_catalog.btrim(tenant) = '' then
        raise exception 'tenant must be a non-blank tenant id'
            using errcode = '22023';
    end if;
    v_name := pgrag.tenant_index_name(tenant);
    if pg_catalog.to_regclass(pg_catalog.format('pgrag.%I', v_name)) is null then
        -- The tenant as a literal in the predicate: a query naming the same literal (as
        -- vector_candidates does) is proven to match this index by the planner.
        execute pg_catalog.format(
            'create index %I on pgrag.chunks using hnsw '
            '(embedding @extschema:vector@.vector_cosine_ops) '
            'where tenant_id operator(pg_catalog.=) %L and embedding is not null',
            v_name, tenant);
        execute pg_catalog.format('comment on index pgrag.%I is %L', v_name,
            pg_catalog.format('HNSW graph of the chunks of tenant %s alone (pgrag.isolate_tenant).', tenant));
    end if;
    return pg_catalog.format('pgrag.%I', v_name)::regclass;
end
$$;
comment on function pgrag.isolate_tenant(text) is
'Gives a tenant an HNSW graph of its own chunks (a partial index on pgrag.chunks; no-op when it exists) and returns it: its vector searches no longer walk the graph shared with other tenants, so other tenants'' rows can change neither their results nor their speed. Run by the owner of pgrag.chunks; blocks writes to pgrag.chunks while the index builds.';

create or replace function pgrag.share_tenant(tenant text)
returns boolean
language plpgsql
volatile
security invoker
set search_path = pg_catalog, pg_temp
as $$
declare
    v_index regclass := pg_catalog.to_regclass(
        pg_catalog.format('pgrag.%I', pgrag.tenant_index_name(tenant)));
begin
    if v_index is null then
        return false;
    end if;
    execute pg_catalog.format('drop index %s', v_index);
    return true;
end
$$;
comment on function pgrag.share_tenant(text) is
'Drops the tenant''s own HNSW graph made by pgrag.isolate_tenant (true when there was one): its searches go back to the shared graph.';

-- (unreleased one-argument form, replaced by the form with a tenant list)
drop function if exists pgrag.isolate_tenants(bigint);
create or replace function pgrag.isolate_tenants(
    min_rows bigint default null,
    tenants text[] default null
)
returns table (tenant_id text, index_name regclass, chunk_count bigint)
language plpgsql
volatile
security invoker
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    v_min bigint := coalesce(min_rows,
        nullif(pg_catalog.current_setting('pgrag.exact_search_max_rows', true), '')::bigint, 2000);
    r record;
begin
    for r in
        select s.tenant_id, pg_catalog.sum(s.chunk_count)::bigint as n
        from pgrag.corpus_stats as s
        where tenants is null or s.tenant_id operator(pg_catalog.=) any (tenants)
        group by s.tenant_id
        having pg_catalog.sum(s.chunk_count) > v_min
        order by s.tenant_id
    loop
        continue when pg_catalog.to_regclass(
            pg_catalog.format('pgrag.%I', pgrag.tenant_index_name(r.tenant_id))) is not null;
        tenant_id := r.tenant_id;
        index_name := pgrag.isolate_tenant(r.tenant_id);
        chunk_count := r.n;
        return next;
    end loop;
end
$$;
comment on function pgrag.isolate_tenants(bigint, text[]) is
'Isolates (pgrag.isolate_tenant) every tenant (or every one of tenants, when given) with more than min_rows chunks (default pgrag.exact_search_max_rows, 2000) that has no graph of its own yet; returns those it isolated. pgrag ingest runs it for its tenant after loading when it owns pgrag.chunks; for other loaders, the operator runs it after loads (e.g. from cron).';

create or replace function pgrag.vector_candidates(
    query_embedding @extschema:vector@.vector,
    match_count integer default 10,
    ef_search integer default null,
    document_ids bigint[] default null,
    metadata_filter jsonb default null,
    source_types text[] default null,
    created_after timestamptz default null,
    created_before timestamptz default null
)
returns table (tenant_id text, chunk_id bigint, distance double precision)
language plpgsql
stable
rows 10
security invoker
set search_path = pg_catalog, pg_temp
set plan_cache_mode = force_custom_plan
as $$
#variable_conflict use_column
declare
    v_tenant text := pgrag.current_tenant_id();
    v_k integer := coalesce(pgrag.check_argument('match_count', match_count, 0, 2000, true), 10);
    v_exact_max bigint := coalesce(
        nullif(pg_catalog.current_setting('pgrag.exact_search_max_rows', true), '')::bigint, 2000);
    v_filtered boolean := metadata_filter is not null or source_types is not null
        or created_after is not null or created_before is not null;
    v_tenants text[];
    v_ids bigint[];
    v_dists double precision[];
    v_exact boolean;
    v_old_ef text := pg_catalog.current_setting('hnsw.ef_search', true);
    v_old_iter text := pg_catalog.current_setting('hnsw.iterative_scan', true);
    v_old_sort text := pg_catalog.current_setting('enable_sort');
    v_share double precision;
    v_public boolean := false;
    v_own_index boolean := false;
    v_scoped boolean;
    v_sql text;
begin
    perform pgrag.check_argument('ef_search', ef_search, 1, 1000, true);
    perform pgrag.check_query_embedding('query_embedding', query_embedding);
    perform pgrag.check_length('document_ids', pg_catalog.cardinality(document_ids), 1000);
    perform pgrag.check_length('source_types', pg_catalog.cardinality(source_types), 100);
    perform pgrag.check_length('metadata_filter', pg_catalog.octet_length(metadata_filter::text), 10000, 'bytes');
    if query_embedding is null or v_k = 0 then
        return;
    end if;
    -- anon (no tenant, sees public rows only) searches public chunks alone: the partial HNSW
    -- index of public chunks, or an exact scan of them. Walking the graph of every chunk and
    -- letting RLS drop private rows afterwards would make anon's results (how many rows come
    -- back near a private cluster) depend on private data.
    if v_tenant is null and pg_catalog.to_regrole('anon') is not null then
        v_public := case when pg_catalog.pg_has_role('anon', 'USAGE')
                         then not exists (select 1 from pg_catalog.pg_roles as r
                                          where r.rolname = current_user
                                            and (r.rolsuper or r.rolbypassrls))
                         else false end;
    end if;
    -- Exact search when the rows the caller may see are few: a document-id filter, or a tenant
    -- small enough that scanning it costs less than an HNSW walk that filters most rows away.
    v_exact := document_ids is not null
        or (v_tenant is not null and pgrag.tenant_chunk_count(v_tenant) <= v_exact_max);
    -- A tenant isolated by pgrag.isolate_tenant has an HNSW graph of its own chunks alone.
    v_own_index := not v_exact and v_tenant is not null
        and pg_catalog.to_regclass(pg_catalog.format('pgrag.%I', pgrag.tenant_index_name(v_tenant))) is not null;
    v_scoped := v_tenant is not null or v_filtered or v_public;

    if not v_exact then
        -- Iterative index scans keep walking the graph until match_count rows pass the tenant
        -- and filter conditions (pgvector 0.8); the relaxed order is re-sorted below.
        perform pg_catalog.set_config('hnsw.iterative_scan',
            case when v_scoped then 'relaxed_order' else 'off' end, true);
        -- Without sorts the HNSW index scan is the only ordered plan: the planner would
        -- otherwise prefer the tenant btree plus a sort of every row of a big tenant (it does not
        -- price reading each out-of-line embedding), which the exact path already covers.
        perform pg_catalog.set_config('enable_sort', 'off', true);
        -- A wider candidate list when rows are filtered after the index walk (800: recall@10
        -- 0.971 for a tenant with 10 % of 100k rows, against 0.928 with 400; see docs).
        -- The tenant's share of all chunks (planner statistics): a tenant holding most rows
        -- loses few to the filter and needs no wider list.
        -- An isolated tenant's own graph, like the public one, holds no other rows.
        if v_own_index or v_public then
            v_share := 1;
        elsif v_tenant is not null then
            select pgrag.tenant_chunk_count(v_tenant) / greatest(c.reltuples, 1)
            into v_share
            from pg_catalog.pg_class as c
            where c.oid = 'pgrag.chunks'::regclass;
        end if;
        perform pg_catalog.set_config('hnsw.ef_search',
            least(greatest(coalesce(vector_candidates.ef_search,
                                    case when v_filtered or (v_tenant is not null and coalesce(v_share, 0) < 0.25)
                                         then greatest(nullif(v_old_ef, '')::integer, 800)
                                         when v_tenant is not null or v_public
                                         then greatest(nullif(v_old_ef, '')::integer, 100)
                                         else nullif(v_old_ef, '')::integer end,
                                    40), v_k), 1000)::text, true);
        -- Under a filter the relaxed order is only roughly by distance: take 4 x match_count
        -- rows (at least 40), re-sort them by exact distance, keep match_count.
        -- The tenant (or is_public) condition matches the predicate of the partial index to
        -- walk: the tenant's own (as a literal, so the planner can prove it), the public one.
        v_sql := pg_catalog.format($q$
        select (pg_catalog.array_agg(h.tenant_id order by h.distance, h.chunk_id))[1 : $1],
               (pg_catalog.array_agg(h.chunk_id order by h.distance, h.chunk_id))[1 : $1],
               (pg_catalog.array_agg(h.distance order by h.distance, h.chunk_id))[1 : $1]
        from (
            select c.tenant_id, c.id as chunk_id,
                   c.embedding operator(@extschema:vector@.<=>) $2 as distance
            from pgrag.chunks as c
            join pgrag.documents as d on d.tenant_id operator(pg_catalog.=) c.tenant_id
                                     and d.id operator(pg_catalog.=) c.document_id
            where c.embedding is not null
              and d.status operator(pg_catalog.=) 'ready'
              and %s
              and ($3 is null
                   or (d.metadata operator(pg_catalog.||) c.metadata) operator(pg_catalog.@>) $3)
              and ($4 is null or d.source_type operator(pg_catalog.=) any ($4))
              and ($5 is null or d.created_at operator(pg_catalog.>=) $5)
              and ($6 is null or d.created_at operator(pg_catalog.<) $6)
            order by c.embedding operator(@extschema:vector@.<=>) $2
            limit $7
        ) as h$q$,
            case when v_tenant is not null
                 then pg_catalog.format('c.tenant_id operator(pg_catalog.=) %L', v_tenant)
                 when v_public then 'c.is_public'
                 else 'true' end);
        execute v_sql
        into v_tenants, v_ids, v_dists
        using v_k, query_embedding, metadata_filter, source_types, created_after,
              created_before, case when v_scoped then greatest(4 * v_k, 40) else v_k end;
        perform pg_catalog.set_config('enable_sort', v_old_sort, true);
        perform pg_catalog.set_config('hnsw.ef_search', coalesce(v_old_ef, '40'), true);
        perform pg_catalog.set_config('hnsw.iterative_scan', coalesce(v_old_iter, 'off'), true);
        -- Never fewer than match_count rows when that many exist: a filter too selective for
        -- the scan budget (hnsw.max_scan_tuples) falls back to the exact path.
        v_exact := coalesce(pg_catalog.cardinality(v_ids), 0) < v_k and v_scoped;
    end if;

    if v_exact then
        select pg_catalog.array_agg(h.tenant_id order by h.distance, h.chunk_id),
               pg_catalog.array_agg(h.chunk_id order by h.distance, h.chunk_id),
               pg_catalog.array_agg(h.distance order by h.distance, h.chunk_id)
        into v_tenants, v_ids, v_dists
        from (
            -- A subquery fenced by OFFSET 0 (not a materialized CTE): the distances stream into a
            -- bounded top-N sort, so no visible set, however large, is stored or spilled to temp
            -- files, and the fence keeps the planner from turning the exact scan into an HNSW walk.
            select v.tenant_id, v.chunk_id, v.distance
            from (
                select c.tenant_id, c.id as chunk_id,
                       c.embedding operator(@extschema:vector@.<=>) query_embedding as distance
                from pgrag.chunks as c
                join pgrag.documents as d on d.tenant_id = c.tenant_id and d.id = c.document_id
                where c.embedding is not null
                  and d.status = 'ready'
                  and (v_tenant is null or c.tenant_id = v_tenant)
                  and (not v_public or (c.is_public and d.is_public))
                  and (document_ids is null or c.document_id = any (document_ids))
                  and (metadata_filter is null
                       or (d.metadata operator(pg_catalog.||) c.metadata) operator(pg_catalog.@>) metadata_filter)
                  and (source_types is null or d.source_type = any (source_types))
                  and (created_after is null or d.created_at >= created_after)
                  and (created_before is null or d.created_at < created_before)
                offset 0
            ) as v
            order by v.distance, v.chunk_id
            limit v_k
        ) as h;
    end if;

    return query
    select u.t, u.id, u.dist
    from rows from (pg_catalog.unnest(v_tenants), pg_catalog.unnest(v_ids), pg_catalog.unnest(v_dists))
         with ordinality as u(t, id, dist, ord)
    order by u.ord;
end
$$;
comment on function pgrag.vector_candidates(@extschema:vector@.vector, integer, integer, bigint[], jsonb, text[], timestamptz, timestamptz) is
'Vector arm: (tenant_id, chunk_id, cosine distance) of the nearest ready chunks, filters applied inside the search. HNSW with iterative scans, or an exact scan for small visible sets (pgrag.exact_search_max_rows, default 2000) and as a fallback when the index walk returns too few rows. The graph walked holds only rows the caller may see where one exists: anon walks the public chunks'' index (chunks.is_public), a tenant isolated by pgrag.isolate_tenant its own; other tenants above the threshold walk the shared graph.';

create or replace function pgrag.keyword_candidates(
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
returns table (tenant_id text, chunk_id bigint, score double precision)
language plpgsql
stable
rows 10
security invoker
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    v_tenant text := pgrag.current_tenant_id();
    -- Argument limits (docs/security.md): an arm fetches at most 2,000 rows.
    v_k integer := coalesce(pgrag.check_argument('match_count', match_count, 0, 2000, true), 10);
    v_k1 double precision := coalesce(pgrag.check_argument('k1', k1, 0, 10), 1.5);
    v_b double precision := coalesce(pgrag.check_argument('b', b, 0, 1), 0.75);
    v_config regconfig := pgrag.text_search_config('language', keyword_candidates.language);
    v_n double precision;
    v_total double precision;
    v_avgdl double precision;
    v_q record;
    v_tenants text[];
    v_lex text[];
    v_idf double precision[];
    v_pos tsquery;
    v_neg tsquery;
    v_tids text[];
    v_ids bigint[];
    v_scores double precision[];
    v_limit integer;
    v_more boolean;
    v_batch integer;
    v_off integer := 0;
    v_found integer := 0;
    v_rows integer;
begin
    perform pgrag.check_length('query_text', pg_catalog.length(query_text), 10000, 'characters');
    perform pgrag.check_length('document_ids', pg_catalog.cardinality(document_ids), 1000);
    perform pgrag.check_length('source_types', pg_catalog.cardinality(source_types), 100);
    perform pgrag.check_length('metadata_filter', pg_catalog.octet_length(metadata_filter::text), 10000, 'bytes');
    if coalesce(query_text, '') = '' or v_k = 0 then
        return;
    end if;
    -- Text-search configuration: the one asked for (v_config), else the tenant's most common
    -- chunk language.
    -- The tenants searched: the caller's, or every tenant the caller may see (RLS applies to
    -- corpus_stats too); an array keeps one plan shape for both, with index conditions.
    if v_tenant is not null then
        v_tenants := array[v_tenant];
    else
        select pg_catalog.array_agg(distinct s.tenant_id) into v_tenants from pgrag.corpus_stats as s;
    end if;
    select pg_catalog.sum(s.chunk_count), pg_catalog.sum(s.token_count)
    into v_n, v_total
    from pgrag.corpus_stats as s
    where s.tenant_id = any (v_tenants);
    if coalesce(v_n, 0) <= 0 then
        return;
    end if;
    if v_config is null then
        select s.language::regconfig into v_config
        from pgrag.corpus_stats as s
        where s.tenant_id = any (v_tenants)
        group by s.language
        order by pg_catalog.sum(s.chunk_count) desc, s.language
        limit 1;
    end if;
    v_avgdl := greatest(v_total / v_n, 1e-9);
    select * into v_q from pgrag.keyword_query(query_text, coalesce(v_config, 'english'::regconfig));
    if pg_catalog.cardinality(v_q.lexemes) = 0 then
        return;
    end if;

    -- Document frequency of each query lexeme: the sum of its sharded counters.
    with d as materialized (
        select l.lexeme,
               (select pg_catalog.sum(x.df) from pgrag.bm25_lexicon as x
                where x.tenant_id = any (v_tenants) and x.lexeme = l.lexeme)::double precision as df
        from pg_catalog.unnest(v_q.lexemes) as l(lexeme)
    )
    select pg_catalog.array_agg(d.lexeme), pg_catalog.array_agg(pg_catalog.ln(1 + (v_n - d.df + 0.5) / (d.df + 0.5)))
    into v_lex, v_idf
    from d
    where d.df > 0;
    if v_lex is null then
        return;
    end if;
    -- Single-word clauses are satisfied by every chunk holding a scored lexeme: the tsquery
    -- check is needed only for phrases (<->, <N>) and exclusions.
    if v_q.positive::text operator(pg_catalog.~) '<[-0-9]' then
        v_pos := v_q.positive;
    end if;
    v_neg := v_q.negative;

    v_limit := greatest(4 * v_k, 200);
    loop
        -- Okapi BM25 of every chunk holding a query lexeme (one index-only range scan per
        -- lexeme), best v_limit first (then all of them if the walk below needs more).
        select pg_catalog.array_agg(s.tenant_id order by s.score desc, s.chunk_id),
               pg_catalog.array_agg(s.chunk_id order by s.score desc, s.chunk_id),
               pg_catalog.array_agg(s.score order by s.score desc, s.chunk_id)
        into v_tids, v_ids, v_scores
        from (
            select p.tenant_id, p.chunk_id,
                   pg_catalog.sum(t.idf * p.tf / (p.tf + v_k1 * (1 - v_b + v_b * p.doc_len / v_avgdl))) as score
            from rows from (pg_catalog.unnest(v_lex), pg_catalog.unnest(v_idf)) as t(lexeme, idf)
            join pgrag.bm25_postings as p on p.tenant_id = any (v_tenants) and p.lexeme = t.lexeme
            group by p.tenant_id, p.chunk_id
            order by 3 desc, p.chunk_id
            limit v_limit + 1
        ) as s;
        v_more := coalesce(pg_catalog.cardinality(v_ids), 0) > v_limit;
        -- Walk the ranking in growing batches until match_count chunks pass the checks:
        -- document ready, filters, phrases and exclusions (filters inside the arm).
        v_batch := greatest(2 * v_k, 50);
        while v_found < v_k and v_off < least(coalesce(pg_catalog.cardinality(v_ids), 0), v_limit) loop
            return query
            select u.t, u.id, u.s
            from rows from (
                pg_catalog.unnest(v_tids[v_off + 1 : least(v_off + v_batch, v_limit)]),
                pg_catalog.unnest(v_ids[v_off + 1 : least(v_off + v_batch, v_limit)]),
                pg_catalog.unnest(v_scores[v_off + 1 : least(v_off + v_batch, v_limit)])
            ) with ordinality as u(t, id, s, ord)
            join pgrag.chunks as c on c.tenant_id = u.t and c.id = u.id
            join pgrag.documents as d on d.tenant_id = c.tenant_id and d.id = c.document_id
            where d.status = 'ready'
              and (v_neg is null or not c.fts operator(pg_catalog.@@) v_neg)
              and (v_pos is null or c.fts operator(pg_catalog.@@) v_pos)
              and (document_ids is null or c.document_id = any (document_ids))
              and (metadata_filter is null
                   or (d.metadata operator(pg_catalog.||) c.metadata) operator(pg_catalog.@>) metadata_filter)
              and (source_types is null or d.source_type = any (source_types))
              and (created_after is null or d.created_at >= created_after)
              and (created_before is null or d.created_at < created_before)
            order by u.ord
            limit v_k - v_found;
            get diagnostics v_rows = row_count;
            v_found := v_found + v_rows;
            v_off := least(v_off + v_batch, v_limit);
            v_batch := v_batch * 4;
        end loop;
        exit when v_found >= v_k or not v_more;
        v_limit := 2147483646;
    end loop;
end
$$;

comment on function pgrag.keyword_candidates(text, integer, text, double precision, double precision, bigint[], jsonb, text[], timestamptz, timestamptz) is
'Keyword arm: (tenant_id, chunk_id, Okapi BM25 score) best first. Lucene IDF ln(1 + (N - df + 0.5)/(df + 0.5)), term part tf/(tf + k1(1 - b + b dl/avgdl)), N and avgdl from pgrag.corpus_stats and df from pgrag.bm25_postings of the caller''s tenant.';

-- ---------------------------------------------------------------------------------------------
-- Fusion, MMR and windows (internal).
-- ---------------------------------------------------------------------------------------------

create or replace function pgrag.mmr_order(
    embeddings @extschema:vector@.vector[],
    relevance double precision[],
    lambda double precision,
    select_count integer
)
returns integer[]
language plpgsql
immutable
security invoker
parallel safe
set search_path = pg_catalog, pg_temp
as $$
declare
    n integer := coalesce(pg_catalog.cardinality(embeddings), 0);
    rmin double precision;
    rmax double precision;
    rel double precision[];
    maxsim double precision[];
    chosen boolean[];
    picked integer[] := '{}';
    best integer;
    best_val double precision;
    val double precision;
    sim double precision;
    i integer;
begin
    -- Quadratic work (picks x candidates distances): at most 1,000 candidates and 500 picks.
    perform pgrag.check_length('embeddings', n, 1000);
    perform pgrag.check_length('relevance', pg_catalog.cardinality(relevance), 1000);
    if lambda is null then
        raise exception 'lambda must be between 0 and 1 (got null)' using errcode = '22023';
    end if;
    perform pgrag.check_argument('lambda', lambda, 0, 1);
    perform pgrag.check_argument('select_count', select_count, 0, 500, true);
    if exists (select 1 from pg_catalog.unnest(relevance) as r
               where r in ('NaN'::double precision, 'Infinity'::double precision,
                           '-Infinity'::double precision)) then
        raise exception 'relevance must hold finite numbers' using errcode = '22023';
    end if;
    if (select pg_catalog.count(distinct @extschema:vector@.vector_dims(e))
        from pg_catalog.unnest(embeddings) as e) > 1 then
        raise exception 'embeddings must all have the same dimension' using errcode = '22023';
    end if;
    if n = 0 then
        return picked;
    end if;
    select pg_catalog.min(r), pg_catalog.max(r) into rmin, rmax
    from pg_catalog.unnest(relevance) as r;
    rel := pg_catalog.array_fill(1.0::double precision, array[n]);
    maxsim := pg_catalog.array_fill(null::double precision, array[n]);
    chosen := pg_catalog.array_fill(false, array[n]);
    for i in 1 .. n loop
        if rmax > rmin then
            rel[i] := (coalesce(relevance[i], rmin) - rmin) / (rmax - rmin);
        end if;
    end loop;
    for step in 1 .. least(coalesce(select_count, n), n) loop
        best := null;
        best_val := null;
        for i in 1 .. n loop
            if not chosen[i] then
                val := lambda * rel[i] - (1 - lambda) * coalesce(maxsim[i], 0);
                if best_val is null or val > best_val then
                    best := i;
                    best_val := val;
                end if;
            end if;
        end loop;
        chosen[best] := true;
        picked := picked operator(pg_catalog.||) best;
        if embeddings[best] is not null then
            for i in 1 .. n loop
                if not chosen[i] and embeddings[i] is not null then
                    sim := 1 - (embeddings[i] operator(@extschema:vector@.<=>) embeddings[best]);
                    if maxsim[i] is null or sim > maxsim[i] then
                        maxsim[i] := sim;
                    end if;
                end if;
            end loop;
        end if;
    end loop;
    return picked;
end
$$;
comment on function pgrag.mmr_order(@extschema:vector@.vector[], double precision[], double precision, integer) is
'Maximal marginal relevance: picks select_count of the candidates, each maximising lambda * relevance (min-max normalised) - (1 - lambda) * its highest cosine similarity to those already picked; returns their 1-based positions in pick order. At most 1,000 embeddings and relevance values (finite), lambda in [0, 1], select_count >= 0 (null: all; more than 500 counts as 500); else SQLSTATE 22023.';

create or replace function pgrag.fused_candidates(
    query_text text,
    query_embedding @extschema:vector@.vector,
    select_count integer,
    candidate_count integer,
    fusion text default 'weighted',
    rrf_k integer default 60,
    vector_weight double precision default 0.8,
    keyword_weight double precision default 1,
    min_score double precision default null,
    mmr_lambda double precision default null,
    language text default null,
    ef_search integer default null,
    document_ids bigint[] default null,
    metadata_filter jsonb default null,
    source_types text[] default null,
    created_after timestamptz default null,
    created_before timestamptz default null
)
returns table (
    ord bigint, tenant_id text, chunk_id bigint,
    vector_rank bigint, vector_score double precision,
    keyword_rank bigint, keyword_score double precision, score double precision
)
language plpgsql
stable
rows 10
security invoker
set search_path = pg_catalog, pg_temp
set plan_cache_mode = force_custom_plan
as $$
#variable_conflict use_column
declare
    v_fusion text := pg_catalog.lower(coalesce(fusion, 'weighted'));
    -- Argument limits (docs/security.md): each arm fetches at most 2,000 candidates.
    v_rrf_k double precision := coalesce(pgrag.check_argument('rrf_k', rrf_k, 0, 10000), 60);
    v_vw double precision := coalesce(pgrag.check_argument('vector_weight', vector_weight, 0, 100), 0.8);
    v_kw double precision := coalesce(pgrag.check_argument('keyword_weight', keyword_weight, 0, 100), 1);
    v_select integer := coalesce(pgrag.check_argument('select_count', select_count, 0, 2000, true), 10);
    v_cand integer := greatest(
        coalesce(pgrag.check_argument('candidate_count', candidate_count, 1, 1000, true), 40),
        v_select, 1);
begin
    if v_fusion not in ('rrf', 'weighted') then
        raise exception 'unknown fusion %: use ''rrf'' or ''weighted''', pg_catalog.left(fusion, 100)
            using errcode = '22023';
    end if;
    -- A similarity floor: any number but NaN (above 1 nothing passes, below -1 everything).
    perform pgrag.check_argument('min_score', min_score, '-Infinity', 'Infinity');
    perform pgrag.check_argument('mmr_lambda', mmr_lambda, 0, 1);
    perform pgrag.check_argument('ef_search', ef_search, 1, 1000, true);
    perform pgrag.check_query_embedding('query_embedding', query_embedding);
    perform pgrag.check_length('query_text', pg_catalog.length(query_text), 10000, 'characters');
    perform pgrag.check_length('document_ids', pg_catalog.cardinality(document_ids), 1000);
    perform pgrag.check_length('source_types', pg_catalog.cardinality(source_types), 100);
    perform pgrag.check_length('metadata_filter', pg_catalog.octet_length(metadata_filter::text), 10000, 'bytes');
    perform pgrag.text_search_config('language', language);
    return query
    with v as (
        select vc.tenant_id, vc.chunk_id, 1 - vc.distance as s,
               pg_catalog.row_number() over (order by vc.distance, vc.chunk_id) as r
        from pgrag.vector_candidates(query_embedding, v_cand, ef_search, document_ids,
                                     metadata_filter, source_types, created_after,
                                     created_before) as vc
    ),
    k as (
        select kc.tenant_id, kc.chunk_id, kc.score as s,
               pg_catalog.row_number() over (order by kc.score desc, kc.chunk_id) as r
        from pgrag.keyword_candidates(query_text, v_cand, language, null, null, document_ids,
                                      metadata_filter, source_types, created_after,
                                      created_before) as kc
    ),
    f as (
        select coalesce(v.tenant_id, k.tenant_id) as t, coalesce(v.chunk_id, k.chunk_id) as id,
               v.r as vr, v.s as vs, k.r as kr, k.s as ks
        from v full join k on k.tenant_id = v.tenant_id and k.chunk_id = v.chunk_id
    ),
    -- Materialised: computed once, never re-run for each candidate by a nested loop (quadratic).
    mm as materialized (
        select pg_catalog.min(f.vs) as vmin, pg_catalog.max(f.vs) as vmax,
               pg_catalog.min(f.ks) as kmin, pg_catalog.max(f.ks) as kmax
        from f
    ),
    scored as (
        select f.t, f.id, f.vr,
               coalesce(f.vs, 1 - (c.embedding operator(@extschema:vector@.<=>) query_embedding)) as vs,
               f.kr, f.ks,
               case when v_fusion = 'rrf' then
                   coalesce(v_vw / (v_rrf_k + f.vr), 0) + coalesce(v_kw / (v_rrf_k + f.kr), 0)
               else
                   case when f.vs is null then 0
                        when mm.vmax > mm.vmin then v_vw * (f.vs - mm.vmin) / (mm.vmax - mm.vmin)
                        else v_vw end
                   + case when f.ks is null then 0
                          when mm.kmax > mm.kmin then v_kw * (f.ks - mm.kmin) / (mm.kmax - mm.kmin)
                          else v_kw end
               end as fused,
               c.embedding
        from f
        cross join mm
        join pgrag.chunks as c on c.tenant_id = f.t and c.id = f.id
    ),
    ranked as (
        select pg_catalog.row_number() over (
                   order by s.fused desc, s.vr nulls last, s.kr nulls last, s.id) as pos,
               s.t, s.id, s.vr, s.vs, s.kr, s.ks, s.fused, s.embedding
        from scored as s
        where min_score is null or query_embedding is null or s.vs >= min_score
    ),
    picked as (
        select case
                   when mmr_lambda is null then
                       (select pg_catalog.array_agg(r.pos::integer order by r.pos)
                        from ranked as r where r.pos <= v_select)
                   -- MMR is quadratic: it picks at most 500 of the best 1,000 fused candidates.
                   else pgrag.mmr_order(
                       (select pg_catalog.array_agg(r.embedding order by r.pos) from ranked as r
                        where r.pos <= 1000),
                       (select pg_catalog.array_agg(r.fused order by r.pos) from ranked as r
                        where r.pos <= 1000),
                       mmr_lambda, least(v_select, 500))
               end as a
    )
    select o.n, r.t, r.id, r.vr, r.vs, r.kr, r.ks, r.fused
    from picked
    cross join lateral pg_catalog.unnest(picked.a) with ordinality as o(pos, n)
    join ranked as r on r.pos = o.pos
    order by o.n;
end
$$;
comment on function pgrag.fused_candidates(text, @extschema:vector@.vector, integer, integer, text, integer, double precision, double precision, double precision, double precision, text, integer, bigint[], jsonb, text[], timestamptz, timestamptz) is
'Hybrid candidates: both arms (greatest(candidate_count, select_count) each, at most 2,000; filters inside), fused by RRF or weighted min-max scores, min_score as a cosine-similarity floor, optionally re-ordered by MMR (at most 500 picks from the best 1,000); select_count rows, best first. Arguments outside their limits (docs/security.md) raise SQLSTATE 22023.';

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
    -- Argument limits (docs/security.md): SQLSTATE 22023 before any work.
    select pgrag.check_length('tenant_ids', pg_catalog.cardinality(windows.tenant_ids), 2000),
           pgrag.check_length('chunk_ids', pg_catalog.cardinality(windows.chunk_ids), 2000),
           pgrag.check_length('scores', pg_catalog.cardinality(windows.scores), 2000),
           pgrag.check_argument('window_size', windows.window_size, 0, 10),
           pgrag.check_argument('decay', windows.decay, 0, 1),
           (select pg_catalog.count(pgrag.check_argument('scores', u.s, -1e6, 1e6))
            from pg_catalog.unnest(windows.scores) as u(s));

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
    order by w.first_hit
$$;
comment on function pgrag.windows(text[], bigint[], integer, double precision[], double precision) is
'Windows of +/- window_size neighbouring chunks around hits (tenant_ids, chunk_ids in rank order), overlapping or adjacent windows of a document merged, each neighbour''s overlap_chars prefix stripped; chunk score = best hit score * decay^distance; ordered by the best hit they contain. Neighbours are read by a range on chunk_index (only rows that exist). Limits: at most 2,000 hits, window_size 0-10, decay 0-1, scores finite within +/- 1e6; else SQLSTATE 22023.';

-- ---------------------------------------------------------------------------------------------
-- Client-facing functions (schema public).
-- ---------------------------------------------------------------------------------------------

-- Every row names the tenant that owns it (tenant_id, the last column), so a client can tell
-- sources of different tenants apart (anon sees the public documents of every tenant). Earlier
-- versions returned no tenant_id; CREATE OR REPLACE cannot add a result column, so those are
-- dropped first (their grants are re-made by 003-policies.sql).
do $$
declare
    f record;
begin
    for f in
        select p.oid::pg_catalog.regprocedure as sig
        from pg_catalog.pg_proc as p
        where p.pronamespace operator(pg_catalog.=) 'public'::pg_catalog.regnamespace
          and p.proname operator(pg_catalog.=) any (array['vector_search', 'keyword_search',
                                                          'hybrid_search', 'chunk_windows'])
          and not ('tenant_id' operator(pg_catalog.=) any (coalesce(p.proargnames, '{}')))
          and not exists (select from pg_catalog.pg_depend as d
                          where d.classid operator(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
                            and d.objid operator(pg_catalog.=) p.oid
                            and d.deptype operator(pg_catalog.=) 'e')
    loop
        execute pg_catalog.format('drop function %s', f.sig);
    end loop;
end
$$;

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
    -- Argument limits (docs/security.md): SQLSTATE 22023 before any work.
    select pgrag.check_query_embedding('query_embedding', vector_search.query_embedding),
           pgrag.check_argument('match_count', vector_search.match_count, 0, 1000, true),
           pgrag.check_argument('min_similarity', vector_search.min_similarity, '-Infinity', 'Infinity'),
           pgrag.check_argument('ef_search', vector_search.ef_search, 1, 1000, true),
           pgrag.check_length('document_ids', pg_catalog.cardinality(vector_search.document_ids), 1000),
           pgrag.check_length('source_types', pg_catalog.cardinality(vector_search.source_types), 100),
           pgrag.check_length('metadata_filter',
                              pg_catalog.octet_length(vector_search.metadata_filter::text), 10000, 'bytes');

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
    order by v.distance, v.chunk_id
$$;
comment on function public.vector_search(@extschema:vector@.vector, integer, double precision, integer, bigint[], jsonb, text[], timestamptz, timestamptz) is
'Semantic search: the match_count ready chunks nearest to query_embedding by cosine distance (HNSW; iterative scans under tenant/filters; exact scan for small visible sets), with similarity = 1 - cosine distance >= min_similarity. Filters: document_ids, metadata_filter (jsonb containment over document || chunk metadata), source_types, created_after/before (document created_at). Tenant from request.jwt.claims; RLS applies. Limits: match_count 0-1000 (more counts as 1000), min_similarity any number but NaN, ef_search 1-1000 (more counts as 1000), query_embedding of the stored dimension and non-zero, document_ids at most 1,000, source_types 100, metadata_filter 10,000 bytes; else SQLSTATE 22023.';

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
    -- Argument limits (docs/security.md): SQLSTATE 22023 before any work (keyword_candidates
    -- checks the others).
    select pgrag.check_argument('match_count', keyword_search.match_count, 0, 1000, true);

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
    order by k.score desc, k.chunk_id
$$;
comment on function public.keyword_search(text, integer, text, double precision, double precision, bigint[], jsonb, text[], timestamptz, timestamptz) is
'Okapi BM25 search over websearch_to_tsquery syntax ("phrase", -exclude, or) with OR semantics across words: a chunk matches when it contains any word or quoted phrase and no excluded one. Lucene IDF ln(1 + (N - df + 0.5)/(df + 0.5)); N, avgdl and df per tenant. language: text-search configuration of the query (default: the most common chunk language). Same filters as vector_search. Limits: match_count 0-1000 (more counts as 1000), query_text at most 10,000 characters and 64 distinct terms, language an existing configuration, k1 0-10, b 0-1, filters as vector_search; else SQLSTATE 22023.';

create or replace function public.hybrid_search(
    query_text text,
    query_embedding @extschema:vector@.vector,
    match_count integer default 10,
    fusion text default 'weighted',
    rrf_k integer default 60,
    vector_weight double precision default 0.8,
    keyword_weight double precision default 1,
    candidate_count integer default null,
    window_size integer default 0,
    mmr_lambda double precision default null,
    min_score double precision default null,
    language text default null,
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
    vector_rank bigint, vector_score double precision, keyword_rank bigint,
    keyword_score double precision, score double precision, rank bigint, tenant_id text
)
language plpgsql
stable
security invoker
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    -- Argument limits (docs/security.md): SQLSTATE 22023 before any work; fused_candidates
    -- checks the arguments it receives as they are.
    v_k integer := coalesce(pgrag.check_argument('match_count', match_count, 0, 1000, true), 10);
    v_w integer := coalesce(pgrag.check_argument('window_size', window_size, 0, 10), 0);
    v_cand integer := coalesce(pgrag.check_argument('candidate_count', candidate_count, 1, 1000, true),
                               least(greatest(v_k * 4, 40), 1000));
begin
    perform pgrag.check_query_embedding('query_embedding', query_embedding);
    perform pgrag.check_length('query_text', pg_catalog.length(query_text), 10000, 'characters');
    if v_k = 0 then
        return;
    end if;
    if v_w = 0 then
        return query
        select c.id, c.document_id, c.chunk_index, d.title, d.source_uri, d.source_type, c.page,
               c.heading_path, c.content, f.vector_rank, f.vector_score, f.keyword_rank,
               f.keyword_score, f.score, f.ord, c.tenant_id
        from pgrag.fused_candidates(query_text, query_embedding, v_k, v_cand, fusion, rrf_k,
                                    vector_weight, keyword_weight, min_score, mmr_lambda,
                                    language, ef_search, document_ids, metadata_filter,
                                    source_types, created_after, created_before) as f
        join pgrag.chunks as c on c.tenant_id = f.tenant_id and c.id = f.chunk_id
        join pgrag.documents as d on d.tenant_id = c.tenant_id and d.id = c.document_id
        order by f.ord;
        return;
    end if;
    -- Windowed: every fused candidate becomes a hit; hits whose windows touch are merged, so
    -- more hits than match_count are expanded to still fill match_count windows.
    return query
    with f as materialized (
        select * from pgrag.fused_candidates(
            query_text, query_embedding,
            case when mmr_lambda is null then 2 * v_cand else least(v_k * (1 + 2 * v_w), 2000) end,
            v_cand, fusion, rrf_k, vector_weight, keyword_weight, min_score, mmr_lambda,
            language, ef_search, document_ids, metadata_filter, source_types, created_after,
            created_before)
    ),
    w as (
        select * from pgrag.windows(
            (select pg_catalog.array_agg(f.tenant_id order by f.ord) from f),
            (select pg_catalog.array_agg(f.chunk_id order by f.ord) from f),
            v_w,
            (select pg_catalog.array_agg(f.score order by f.ord) from f),
            0.5)
        order by first_hit
        limit v_k
    )
    select f.chunk_id, w.document_id, c.chunk_index, w.title, w.source_uri, w.source_type,
           w.page, w.heading_path, w.content, f.vector_rank, f.vector_score, f.keyword_rank,
           f.keyword_score, f.score, pg_catalog.row_number() over (order by w.first_hit),
           c.tenant_id
    from w
    join f on f.tenant_id = w.tenant_id and f.chunk_id = w.best_chunk_id
    join pgrag.chunks as c on c.tenant_id = f.tenant_id and c.id = f.chunk_id
    order by w.first_hit;
end
$$;
comment on function public.hybrid_search(text, @extschema:vector@.vector, integer, text, integer, double precision, double precision, integer, integer, double precision, double precision, text, integer, bigint[], jsonb, text[], timestamptz, timestamptz) is
'Hybrid search: vector and BM25 arms (candidate_count each, default least(greatest(4 * match_count, 40), 1000); filters inside each arm) fused by weighted min-max normalised scores (fusion => ''weighted'', the default: vector_weight 0.8, keyword_weight 1, nDCG@10 0.729 on BEIR SciFact against 0.70 for RRF) or reciprocal rank fusion (fusion => ''rrf'', score = sum weight/(rrf_k + rank), rrf_k default 60). Each row carries both arms'' rank and score: vector_score is the cosine similarity (also for rows only the keyword arm found, then vector_rank is null), keyword_score the BM25 score. min_score: minimum cosine similarity to the query. mmr_lambda: MMR re-ranking (null = off). window_size > 0: content becomes the merged +/- window_size neighbours of each hit (see chunk_windows); the row describes the best hit of its window. Limits: match_count 0-1000 and candidate_count 1-1000 (more counts as 1000), window_size 0-10, rrf_k 0-10000, weights 0-100, min_score any number but NaN, mmr_lambda 0-1 (MMR picks at most 500 rows from the best 1,000 candidates), ef_search 1-1000, query_text 10,000 characters and 64 distinct terms, language an existing configuration, query_embedding of the stored dimension and non-zero, filters as vector_search; else SQLSTATE 22023.';

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
    -- Argument limits (docs/security.md): SQLSTATE 22023 before any work.
    select pgrag.check_length('chunk_ids', pg_catalog.cardinality(chunk_windows.chunk_ids), 1000),
           pgrag.check_length('scores', pg_catalog.cardinality(chunk_windows.scores), 1000),
           pgrag.check_argument('window_size', chunk_windows.window_size, 0, 10),
           pgrag.check_argument('decay', chunk_windows.decay, 0, 1),
           (select pg_catalog.count(pgrag.check_argument('scores', u.s, -1e6, 1e6))
            from pg_catalog.unnest(chunk_windows.scores) as u(s));

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
    order by w.score desc, w.first_hit
$$;
comment on function public.chunk_windows(bigint[], integer, double precision[], double precision) is
'Expands hits (chunk_ids, best first; scores default 1) with +/- window_size neighbouring chunks of the same document. Overlapping or adjacent windows merge into one row, so no text repeats; each chunk after the first in a window loses its overlap_chars prefix (text the chunker repeated from the previous chunk). score: best hit score * decay^distance over the window. page and heading_path: those of the best hit; token_count: sum of chunks.token_count (an upper bound). Limits: at most 1,000 chunk_ids and scores (finite, within +/- 1e6), window_size 0-10, decay 0-1; else SQLSTATE 22023. Neighbours are read from the rows that exist.';

create or replace function public.build_context(
    query_text text,
    query_embedding @extschema:vector@.vector,
    token_budget integer default 2000,
    match_count integer default 8,
    min_score double precision default 0.3,
    window_size integer default 0,
    mmr_lambda double precision default null,
    document_ids bigint[] default null,
    metadata_filter jsonb default null,
    source_types text[] default null,
    created_after timestamptz default null,
    created_before timestamptz default null
)
returns table (context text, sources jsonb)
language plpgsql
stable
security invoker
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    -- Argument limits (docs/security.md): SQLSTATE 22023 before any work; fused_candidates
    -- checks the other arguments.
    v_k integer := coalesce(pgrag.check_argument('match_count', match_count, 0, 1000, true), 8);
    v_w integer := coalesce(pgrag.check_argument('window_size', window_size, 0, 10), 0);
    v_budget integer := coalesce(pgrag.check_argument('token_budget', token_budget, 0, 1000000), 2000);
    v_used integer := 0;
    v_n integer := 0;
    v_parts text[] := '{}';
    v_sources jsonb := '[]';
    v_header text;
    v_cost integer;
    v_content text;
    v_tokens integer;
    v_index integer;
    v_page_end integer;
    r record;
begin
    perform pgrag.check_query_embedding('query_embedding', query_embedding);
    perform pgrag.check_length('query_text', pg_catalog.length(query_text), 10000, 'characters');
    for r in
        with f as materialized (
            select * from pgrag.fused_candidates(
                query_text, query_embedding, least(v_k * (1 + 2 * v_w) * 2, 2000),
                least(greatest(v_k * 4, 40), 1000),
                null, null, null, null, min_score, mmr_lambda, null, null, document_ids,
                metadata_filter, source_types, created_after, created_before)
        )
        select w.*
        from pgrag.windows(
            (select pg_catalog.array_agg(f.tenant_id order by f.ord) from f),
            (select pg_catalog.array_agg(f.chunk_id order by f.ord) from f),
            v_w,
            (select pg_catalog.array_agg(f.score order by f.ord) from f),
            0.5) as w
        order by w.first_hit
    loop
        exit when v_n >= v_k;
        -- Last page of the source: chunks spanning pages record it in metadata.page_end.
        select pg_catalog.max(coalesce(
                   case when c.metadata operator(pg_catalog.->>) 'page_end' operator(pg_catalog.~) '^[0-9]{1,9}$'
                        then (c.metadata operator(pg_catalog.->>) 'page_end')::integer end, c.page))
        into v_page_end
        from pgrag.chunks as c
        where c.tenant_id = r.tenant_id and c.id = any (r.chunk_ids);
        if v_page_end <= r.page then
            v_page_end := null;
        end if;
        v_header := pg_catalog.format('[Source %s] %s', v_n + 1, coalesce(nullif(r.title, ''), '(untitled)'))
            operator(pg_catalog.||) pg_catalog.format(' (%s%s%s)', r.source_uri,
                case when v_page_end is not null then pg_catalog.format(', pages %s-%s', r.page, v_page_end)
                     when r.page is not null then pg_catalog.format(', page %s', r.page) else '' end,
                case when pg_catalog.cardinality(r.heading_path) > 0
                     then ', ' operator(pg_catalog.||) pg_catalog.array_to_string(r.heading_path, ' > ')
                     else '' end);
        -- Tokens: the chunks' own token counts (model tokens, an upper bound when windows strip
        -- overlap), but never less than length/4: token_count is written by whoever inserts the
        -- chunk, and a wrong count must not let a huge text through. The header (paths and
        -- punctuation, about a token per 2 characters) is estimated at length/2.
        v_cost := greatest(coalesce(r.token_count, 0), pg_catalog.ceil(pg_catalog.length(r.content) / 4.0)::integer)
            + pg_catalog.ceil(pg_catalog.length(v_header) / 2.0)::integer + 2;
        if v_used + v_cost > v_budget and r.first_chunk_index < r.last_chunk_index then
            -- The window does not fit: fall back to its best hit alone.
            select c.content, c.token_count, c.chunk_index into v_content, v_tokens, v_index
            from pgrag.chunks as c
            where c.tenant_id = r.tenant_id and c.id = r.best_chunk_id;
            r.content := v_content;
            r.chunk_ids := array[r.best_chunk_id];
            r.first_chunk_index := v_index;
            r.last_chunk_index := v_index;
            v_cost := greatest(coalesce(v_tokens, 0), pg_catalog.ceil(pg_catalog.length(v_content) / 4.0)::integer)
                + pg_catalog.ceil(pg_catalog.length(v_header) / 2.0)::integer + 2;
        end if;
        -- A source that does not fit what is left of the budget is skipped (a later, smaller
        -- one may fit): the context never exceeds token_budget.
        continue when v_used + v_cost > v_budget;
        v_used := v_used + v_cost;
        v_n := v_n + 1;
        v_parts := v_parts operator(pg_catalog.||) (v_header operator(pg_catalog.||) E'\n' operator(pg_catalog.||) r.content);
        v_sources := v_sources operator(pg_catalog.||) pg_catalog.jsonb_build_array(pg_catalog.jsonb_build_object(
            'source', v_n,
            'label', pg_catalog.format('[Source %s]', v_n),
            'document_id', r.document_id,
            'tenant_id', r.tenant_id,
            'title', r.title,
            'source_uri', r.source_uri,
            'source_type', r.source_type,
            'page', r.page,
            'page_end', v_page_end,
            'heading_path', pg_catalog.to_jsonb(r.heading_path),
            'chunk_ids', pg_catalog.to_jsonb(r.chunk_ids),
            'first_chunk_index', r.first_chunk_index,
            'last_chunk_index', r.last_chunk_index,
            'score', r.score,
            'token_count', v_cost));
    end loop;
    context := pg_catalog.array_to_string(v_parts, E'\n\n');
    sources := v_sources;
    return next;
end
$$;
comment on function public.build_context(text, @extschema:vector@.vector, integer, integer, double precision, integer, double precision, bigint[], jsonb, text[], timestamptz, timestamptz) is
'Context for an LLM: hybrid_search results with its default fusion (weighted: keyword 1, vector 0.8), optionally windowed and MMR-diversified, as numbered "[Source N] title (uri, page, headings)" blocks within token_budget (a source costs the token_count of its chunks, never less than length/4, plus its header at length/2; sources that do not fit are skipped), plus sources: a jsonb array of {source, label, document_id, tenant_id, title, source_uri, page, page_end, heading_path, chunk_ids, score, ...}. One row; context '''' and sources ''[]'' when nothing passes min_score (cosine similarity floor; default 0.3, null for none). Limits: token_budget 0-1,000,000, match_count 0-1000 (more counts as 1000), window_size 0-10, min_score any number but NaN, mmr_lambda 0-1, query_text and filters as hybrid_search; else SQLSTATE 22023.';
