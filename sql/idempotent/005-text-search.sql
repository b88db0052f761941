-- Text search: identifiers searchable by any of their parts, and query parsing.
-- Contract. Provides: pgrag.identifier_terms and pgrag.chunk_fts (the expression of the generated
--   column pgrag.chunks.fts), and pgrag.keyword_query (websearch syntax relaxed to OR semantics,
--   the lexemes BM25 scores). Relies on: pgrag.check_length (001-helpers.sql). Callers: the
--   keyword arm (007-candidates.sql); every role that searches holds EXECUTE.

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
