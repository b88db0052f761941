-- Text search: identifiers searchable by any of their parts, and query parsing.
-- Contract. Provides: pgrag.keyword_query (websearch syntax relaxed to OR semantics, the lexemes
--   BM25 scores), pgrag.keyword_flags (the text it parses) and pgrag.keyword_required (what quoted
--   phrases require), and the comments of pgrag.identifier_terms and pgrag.chunk_fts. Relies on:
--   pgrag.check_length (001-helpers.sql); identifier_terms and chunk_fts as
--   incremental/007-identifier-lexemes.sql defines them. Callers: the keyword arm
--   (025-keyword-arm.sql); every role that searches holds EXECUTE.

-- ---------------------------------------------------------------------------------------------
-- Text-search vectors: identifiers (part numbers, error codes, versions) searchable by any part.
-- The default parser splits V-ZQX41-7 into v-zqx41, v, zqx41, 7 but a query ZQX41-7 into zqx41,
-- -7; ERR-4471 into err, -4471; v2.3.1 stays one lexeme. Chunks therefore also index every run
-- of parts of such a token (pgrag.chunk_fts), and keyword_query adds each identifier of the query
-- whole, so a query for any part of an identifier finds it.
--
-- pgrag.identifier_terms and pgrag.chunk_fts are defined by
-- sql/incremental/007-identifier-lexemes.sql, not here: chunks.fts is a generated column of
-- pgrag.chunk_fts, so the stored data depends on their exact bodies, and changing either needs a
-- new incremental migration that replaces them and recomputes chunks.fts and the BM25 tables (as
-- 007 does). This tier only documents them.
-- ---------------------------------------------------------------------------------------------

comment on function pgrag.identifier_terms(text, boolean) is
'Identifier-like tokens of content (letters and digits joined by - . _, holding a digit and a separator or a letter: ERR-4471, v2.3.1, V-ZQX41-7), lower-cased, one entry per occurrence; unless whole_only, also every run of up to 6 consecutive parts (letter runs, digit runs) written as in the text: V-ZQX41-7 gives v-zqx41-7, v, zqx, zqx41, zqx41-7, 41-7, 7, ...';

comment on function pgrag.chunk_fts(regconfig, text) is
'Text-search vector of a chunk (the generated column pgrag.chunks.fts): to_tsvector(config, content) plus the identifier parts of pgrag.identifier_terms(content) it lacks, so that ZQX41-7, ERR, 4471 or 2.3.1 find V-ZQX41-7, ERR-4471 and v2.3.1.';

-- ---------------------------------------------------------------------------------------------
-- Query parsing: websearch syntax with OR semantics, --flags searched for (docs/sql-api.md,
-- "Query syntax", the one description of the syntax).
-- ---------------------------------------------------------------------------------------------

create or replace function pgrag.keyword_flags(query_text text)
returns text
language sql
immutable
security invoker
parallel safe
set search_path = pg_catalog, pg_temp
as $$
    -- Flags (docs/sql-api.md, "Query syntax"): websearch_to_tsquery negates a word after each
    -- dash at its start, and a dash followed by blank space negates the next word. A run of two
    -- or more dashes starting a word (--exclude, --no-recursion) is dropped, leaving the word,
    -- which is what a chunk's vector holds for the flag; so is a dash attached to no word
    -- (x - y). A single dash before a word (-delete, -"a phrase") still excludes it.
    select pg_catalog.regexp_replace(coalesce(query_text, ''),
                                     '(^|[^[:alnum:]_-])(-{2,}|-(?=[[:space:]]|$))', '\1', 'g')
$$;
comment on function pgrag.keyword_flags(text) is
'query_text as pgrag.keyword_query and pgrag.keyword_required parse it: a run of two or more dashes starting a word (--exclude) and a dash attached to no word dropped, so that flags are searched for, never excluded (docs/sql-api.md, "Query syntax"). Null gives ''''.';

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
    qt text;
    bangs text;
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
    -- Flags searched for, never excluded (pgrag.keyword_flags).
    qt := pgrag.keyword_flags(query_text);
    q := pg_catalog.websearch_to_tsquery(config, qt)::text;
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

    -- A clause is negated by an odd number of leading ! (-(-x) is x).
    foreach c in array clauses loop
        bangs := pg_catalog.substring(c, '^[! ]*');
        c := pg_catalog.btrim(pg_catalog.substr(c, pg_catalog.length(bangs) + 1));
        continue when c = '';
        if pg_catalog.length(pg_catalog.replace(bangs, ' ', '')) % 2 = 1 then
            neg := neg operator(pg_catalog.||) ('(' operator(pg_catalog.||) c operator(pg_catalog.||) ')');
        else
            pos := pos operator(pg_catalog.||) ('(' operator(pg_catalog.||) c operator(pg_catalog.||) ')');
        end if;
    end loop;

    -- Identifiers of the query (outside quoted phrases), each also a clause of its own as one
    -- lexeme, as pgrag.chunk_fts indexes every part of an identifier; a leading - excludes it.
    -- Terms hold letters, digits, - . _ only: quoting needs no escapes.
    for tok in
        select (case when m[2] = '-' then '!' else '' end) operator(pg_catalog.||) t.term
        from pg_catalog.regexp_matches(
                 pg_catalog.regexp_replace(qt, '"[^"]*("|$)', ' ', 'g'),
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
'Parses query_text (docs/sql-api.md, "Query syntax") with websearch_to_tsquery(config), a term starting with two or more dashes (--exclude) searched for rather than excluded and a dash attached to no word dropped, and relaxes it to OR semantics: positive = any positive clause (a word, a quoted phrase, or an identifier such as ERR-4471 as one lexeme, see pgrag.chunk_fts), negative = any excluded clause, lexemes = the distinct lexemes BM25 scores. query_text: at most 10,000 characters and 64 distinct search terms; config: an existing text search configuration (else SQLSTATE 22023).';

-- ---------------------------------------------------------------------------------------------
-- Quoted phrases are required (docs/sql-api.md, "Query syntax"): words stay optional (OR
-- semantics, BM25 ranks), but a chunk the keyword arm returns holds every quoted phrase, or one
-- of the alternatives an OR joins to it. Only a query holding a double quote calls this.
-- ---------------------------------------------------------------------------------------------

create or replace function pgrag.keyword_required(query_text text, config regconfig)
returns tsquery
language plpgsql
stable
security invoker
parallel safe
set search_path = pg_catalog, pg_temp
as $$
declare
    m text[];
    item tsquery;
    items tsquery;            -- the current group: items an OR joins, each a positive clause
    quoted boolean := false;  -- the current group holds a quoted phrase
    joined boolean := false;  -- the previous item was OR: the next joins the group
    required tsquery;
begin
    perform pgrag.check_length('query_text', pg_catalog.length(query_text), 10000, 'characters');
    if config is null or not exists (select 1 from pg_catalog.pg_ts_config as t where t.oid = config) then
        raise exception 'config must name a text search configuration, such as english or simple (got %)',
            coalesce(config::text, 'null')
            using errcode = '22023';
    end if;
    -- Items: a quoted phrase (an unclosed quote runs to the end), or a blank-separated word; a
    -- leading dash excludes it (pgrag.keyword_query's negative part, nothing required here).
    -- A trailing null item closes the last group.
    for m in
        select x.m
        from pg_catalog.regexp_matches(pgrag.keyword_flags(query_text),
                                       '(-?)"([^"]*)(?:"|$)|(-?)([^[:space:]"]+)', 'g') as x(m)
        union all select null::text[]
    loop
        if m is not null and m[4] is not null and pg_catalog.lower(m[4]) = 'or' and m[3] = '' then
            joined := items is not null;
            continue;
        end if;
        if m is null or not joined then
            -- The group is complete: required when it holds a phrase.
            if quoted and items is not null then
                required := case when required is null then items else required operator(pg_catalog.&&) items end;
            end if;
            items := null;
            quoted := false;
        end if;
        joined := false;
        continue when m is null or coalesce(m[1], m[3]) = '-';
        item := pg_catalog.websearch_to_tsquery(config, case when m[2] is not null
            then '"' operator(pg_catalog.||) m[2] operator(pg_catalog.||) '"' else m[4] end);
        continue when pg_catalog.numnode(item) = 0;
        quoted := quoted or m[2] is not null;
        items := case when items is null then item else items operator(pg_catalog.||) item end;
    end loop;
    return required;
end
$$;
comment on function pgrag.keyword_required(text, regconfig) is
'What the quoted phrases of query_text require of a chunk (docs/sql-api.md, "Query syntax"): the AND of each group of items joined by OR that holds a quoted phrase, as a tsquery on chunks.fts (words outside such groups and excluded items require nothing); null when nothing is required (no quote, or phrases of stop words only). query_text: at most 10,000 characters; config: an existing text search configuration (else SQLSTATE 22023).';

-- ---------------------------------------------------------------------------------------------
-- What a matching chunk must satisfy besides holding a scored lexeme, for every reader of
-- keyword matches (the keyword arm, facets): the positive clause when it holds a phrase (an
-- identifier or a hyphenated word: its lexemes adjacent), and what quoted phrases require.
-- ---------------------------------------------------------------------------------------------

create or replace function pgrag.keyword_phrases(query_text text, positive tsquery, config regconfig)
returns tsquery
language sql
stable
security invoker
parallel safe
set search_path = pg_catalog, pg_temp
as $$
    select case when x.p is null then x.r
                else coalesce(x.p operator(pg_catalog.&&) x.r, x.p) end
    from (select case when positive::text operator(pg_catalog.~) '<[-0-9]' then positive end as p,
                 -- a query without a double quote does not parse its phrases
                 case when pg_catalog.strpos(query_text, '"') > 0
                      then pgrag.keyword_required(query_text, config) end as r) as x
$$;
comment on function pgrag.keyword_phrases(text, tsquery, regconfig) is
'What a chunk matching query_text must satisfy besides holding a lexeme BM25 scores (docs/sql-api.md, "Query syntax"): positive (pgrag.keyword_query''s) when it holds a phrase, AND what the quoted phrases require (pgrag.keyword_required, called only when query_text holds a double quote); null when nothing is. Arguments as pgrag.keyword_required (query_text at most 10,000 characters, config an existing configuration; else SQLSTATE 22023).';
