-- Query suggestions ("did you mean"): the closest words of the caller's own vocabulary.
-- Contract. Provides: public.suggest_query, documented in docs/sql-api.md ("Suggestions"), and
--   its steps pgrag.closest_lexemes and pgrag.surface_word. Relies on: the argument checks and
--   pgrag.current_tenant_id (001-helpers.sql), pgrag.bm25_corpus (024-bm25-evaluation.sql), the
--   BM25 tables and pg_trgm with the trigram index of incremental/019-query-suggestions.sql.
--   Callers: anon, authenticated and service_role (910-function-privileges.sql), as the calling
--   role: row-level security scopes the vocabulary (pgrag.bm25_lexicon, pgrag.bm25_postings) to
--   the caller's tenant, and anon, who reads no BM25 row (as the keyword arm serves it nothing),
--   gets no suggestion.
--
-- Vocabulary: the BM25 lexemes of the tenant, i.e. stemmed words (english: "policies" is
-- "polici"). A query word without postings is stemmed the same way and compared with them by
-- trigram similarity (the stem's or the typed word's, the closer), which finds candidates
-- fast through the index; of the 20 most similar, the one fewest edits away (letters
-- inserted, deleted, replaced or swapped: trigrams judge a swap poorly) is kept, within a few
-- edits of the word's length; that lexeme is then written back as a real word: the word of one
-- chunk holding the lexeme (its first posting) that stems to it, the most similar to what was
-- typed ("serch" -> lexeme "search" -> "search"; "polcy" -> "polici" -> "policy"). So the
-- suggestion is always a word of the tenant's own text, and searching it finds that lexeme.
--
-- Work: at most 16 words of a query are looked up (letters only, 3 to 64 of them: identifiers,
-- numbers and short words are left alone); each costs one lexicon lookup, then for an unknown
-- word one trigram index scan of the lexemes sharing enough trigrams (candidates with
-- similarity at least 0.2, the 20 closest ranked by edits) and one chunk read.

create or replace function pgrag.trgm_schema()
returns name
language sql
stable
security invoker
parallel safe
set search_path = pg_catalog, pg_temp
as $$
    select n.nspname
    from pg_catalog.pg_extension as e
    join pg_catalog.pg_namespace as n on n.oid operator(pg_catalog.=) e.extnamespace
    where e.extname operator(pg_catalog.=) 'pg_trgm'
$$;
comment on function pgrag.trgm_schema() is
'The schema holding the pg_trgm extension (incremental/019-query-suggestions.sql creates it beside pgvector when missing); null when it is not installed.';

create or replace function pgrag.closest_lexemes(
    tenants text[],
    word text,
    typed text,
    max_rows integer
)
returns table (lexeme text, similarity double precision, df double precision)
language plpgsql
stable
security invoker
set search_path = pg_catalog, pg_temp
-- Trigram candidates: lexemes sharing at least a fifth of their trigrams (the closest kept).
set pg_trgm.similarity_threshold = 0.2
as $$
declare
    v_schema name := pgrag.trgm_schema();
begin
    -- Arguments (an API role may call this step directly): tenants only compared.
    if not coalesce(max_rows between 0 and 100 and pg_catalog.length(word) <= 200
                    and pg_catalog.length(coalesce(typed, '')) <= 200, false) then
        raise exception 'max_rows must be 0 to 100, word and typed at most 200 characters (got %, %, %)',
            max_rows, pg_catalog.length(word), pg_catalog.length(typed)
            using errcode = '22023';
    end if;
    if v_schema is null then
        -- An installation invariant (docs/errors.md, P0001): pgrag migrate creates it.
        raise exception 'suggestions need the pg_trgm extension, which is not installed'
            using hint = 'run pgrag migrate (it creates pg_trgm beside pgvector).';
    end if;
    -- Compared with the stemmed word and with the word as typed (a stem may be cut short:
    -- "deploymnt" is closer to the lexeme "deploy" as typed), the closer of the two counts.
    return query execute pg_catalog.format(
        'select /* pgrag:closest_lexemes */ y.lexeme,
                greatest(%1$I.similarity(y.lexeme, $2),
                         %1$I.similarity(y.lexeme, coalesce($3, $2)))::double precision,
                pg_catalog.sum(y.df)::double precision
         from pgrag.bm25_lexicon as y
         where y.tenant_id operator(pg_catalog.=) any ($1)
           and (y.lexeme operator(%1$I.%%) $2 or y.lexeme operator(%1$I.%%) coalesce($3, $2))
           and y.lexeme operator(pg_catalog.~) ''^[[:alpha:]]+$''
         group by y.lexeme
         having pg_catalog.sum(y.df) > 0
         order by 2 desc, 3 desc, 1
         limit $4', v_schema)
    using tenants, word, pg_catalog.lower(typed), max_rows;
end
$$;
comment on function pgrag.closest_lexemes(text[], text, text, integer) is
'The max_rows lexemes (letters only) of the tenants'' BM25 vocabulary (pgrag.bm25_lexicon, df > 0) closest by pg_trgm similarity (at least 0.2) to word (a stemmed query word) or to typed (the word as typed; null: word), the closer of the two counting: closest first, then most frequent: lexeme, similarity, df. Limits: max_rows 0-100, word and typed at most 200 characters; else SQLSTATE 22023.';

create or replace function pgrag.surface_word(
    tenants text[],
    lexeme text,
    typed text
)
returns text
language plpgsql
stable
security invoker
set search_path = pg_catalog, pg_temp
as $$
declare
    v_schema name := pgrag.trgm_schema();
    v_word text;
begin
    -- Arguments (an API role may call this step directly): tenants only compared.
    if not coalesce(pg_catalog.length(lexeme) <= 200 and pg_catalog.length(typed) <= 200, true) then
        raise exception 'lexeme and typed must have at most 200 characters (got %, %)',
            pg_catalog.length(lexeme), pg_catalog.length(typed)
            using errcode = '22023';
    end if;
    if v_schema is null or lexeme is null then
        return lexeme;
    end if;
    -- The first chunk holding the lexeme (one posting, by key), then its words that stem to it
    -- in the chunk's own configuration.
    execute pg_catalog.format(
        'select /* pgrag:surface_word */ w.word
         from (select p.tenant_id, p.chunk_id
               from pgrag.bm25_postings as p
               where p.tenant_id operator(pg_catalog.=) any ($1)
                 and p.lexeme operator(pg_catalog.=) $2
               order by p.chunk_id
               limit 1) as p
         join pgrag.chunks as c on c.tenant_id operator(pg_catalog.=) p.tenant_id
                               and c.id operator(pg_catalog.=) p.chunk_id
         cross join lateral (
             select distinct pg_catalog.lower(m[1]) as word
             from pg_catalog.regexp_matches(c.content, ''[[:alpha:]]+'', ''g'') as m
         ) as w
         where pg_catalog.tsvector_to_array(pg_catalog.to_tsvector(c.language, w.word))
               operator(pg_catalog.=) array[$2]
         order by %1$I.similarity(w.word, $3) desc, w.word
         limit 1', v_schema)
    into v_word
    using tenants, lexeme, pg_catalog.lower(typed);
    return coalesce(v_word, lexeme);
end
$$;
comment on function pgrag.surface_word(text[], text, text) is
'A word of the tenants'' text for a BM25 lexeme: among the words of the first chunk holding it (its first posting) that stem to it in the chunk''s configuration, the one closest to typed (pg_trgm similarity), lower-cased; the lexeme itself when none. Limits: lexeme and typed at most 200 characters; else SQLSTATE 22023.';

create or replace function pgrag.edit_distance(a text, b text)
returns integer
language plpgsql
immutable
strict
parallel safe
security invoker
set search_path = pg_catalog, pg_temp
as $$
declare
    x text[] := pg_catalog.string_to_array(a, null);
    y text[] := pg_catalog.string_to_array(b, null);
    n integer := coalesce(pg_catalog.cardinality(x), 0);
    m integer := coalesce(pg_catalog.cardinality(y), 0);
    before integer[];   -- row i - 2 (element j + 1: the distance to the first j letters of b)
    above integer[];    -- row i - 1
    row_ integer[];     -- row i
    v integer;
begin
    -- Arguments (an API role may call this directly): words, at most 64 letters each.
    if n > 64 or m > 64 then
        perform pgrag.check_length('a', n, 64, 'characters'), pgrag.check_length('b', m, 64, 'characters');
    end if;
    if n = 0 or m = 0 then
        return n + m;
    end if;
    above := array(select g from pg_catalog.generate_series(0, m) as g);
    for i in 1 .. n loop
        row_ := array[i];
        for j in 1 .. m loop
            v := least(above[j + 1] + 1, row_[j] + 1,
                       above[j] + case when x[i] = y[j] then 0 else 1 end);
            if i > 1 and j > 1 and x[i] = y[j - 1] and x[i - 1] = y[j] then
                v := least(v, before[j - 1] + 1);
            end if;
            row_ := row_ operator(pg_catalog.||) v;
        end loop;
        before := above;
        above := row_;
    end loop;
    return above[m + 1];
end
$$;
comment on function pgrag.edit_distance(text, text) is
'Edit distance of two words: insertions, deletions, substitutions and transpositions of adjacent letters, one each (optimal string alignment). Ranks the trigram candidates of public.suggest_query (trigrams find words sharing letters; a swap of two letters costs many trigrams but one edit). Limits: a and b at most 64 characters; else SQLSTATE 22023. Null in, null out.';

create or replace function public.suggest_query(
    query_text text,
    language text default null,
    min_similarity double precision default 0.2
)
returns table (suggested_query text, corrections jsonb)
rows 1
language plpgsql
stable
security invoker
set search_path = pg_catalog, pg_temp
as $$
declare
    v_tenant text := pgrag.current_tenant_id();
    -- Argument limits (docs/security.md): SQLSTATE 22023 before any work.
    v_min double precision := coalesce(pgrag.check_argument('min_similarity', min_similarity, 0.2, 1), 0.2);
    v_config regconfig := pgrag.text_search_config('language', suggest_query.language);
    v_corpus record;
    v_piece text;
    v_prev text := '';
    v_lexeme text;
    v_closest text;
    v_similarity double precision;
    v_distance integer;
    v_word text;
    v_looked integer := 0;
begin
    perform pgrag.check_length('query_text', pg_catalog.length(query_text), 10000, 'characters');
    suggested_query := query_text;
    corrections := '[]';
    if coalesce(query_text, '') = '' then
        return next;
        return;
    end if;
    v_corpus := pgrag.bm25_corpus(v_tenant, v_config);
    if coalesce(v_corpus.chunk_count, 0) <= 0 then
        return next;
        return;
    end if;
    suggested_query := '';
    -- The query as runs of word characters and of the rest, written back piece by piece: its
    -- quotes, exclusions and OR stay as typed.
    for v_piece in
        select m[1] from pg_catalog.regexp_matches(query_text, '([[:alnum:]_]+|[^[:alnum:]_]+)', 'g') as m
    loop
        if v_looked < 16 and v_piece operator(pg_catalog.~) '^[[:alpha:]]{3,64}$'
           and pg_catalog.right(v_prev, 1) <> '-' then
            v_lexeme := (pg_catalog.tsvector_to_array(pg_catalog.to_tsvector(v_corpus.search_config, v_piece)))[1];
            if v_lexeme is not null then
                v_looked := v_looked + 1;
                if not exists (select /* pgrag:suggest_query_known */
                               from pgrag.bm25_lexicon as y
                               where y.tenant_id = any (v_corpus.tenants) and y.lexeme = v_lexeme
                               having pg_catalog.sum(y.df) > 0) then
                    -- The 20 trigram candidates, ranked by edits (from the stem or the word as
                    -- typed, the fewer); at most 1 edit for a word of 4 letters, 2 up to 8, 3
                    -- beyond.
                    select l.lexeme, l.similarity, l.distance
                    into v_closest, v_similarity, v_distance
                    from (select c.lexeme, c.similarity, c.df,
                                 least(pgrag.edit_distance(v_lexeme, pg_catalog.left(c.lexeme, 64)),
                                       pgrag.edit_distance(pg_catalog.lower(v_piece),
                                                           pg_catalog.left(c.lexeme, 64))) as distance
                          from pgrag.closest_lexemes(v_corpus.tenants, v_lexeme, v_piece, 20) as c
                          where c.similarity >= v_min) as l
                    where l.distance <= case when pg_catalog.length(v_piece) <= 4 then 1
                                             when pg_catalog.length(v_piece) <= 8 then 2 else 3 end
                    order by l.distance, l.similarity desc, l.df desc, l.lexeme
                    limit 1;
                    if found then
                        v_word := pgrag.surface_word(v_corpus.tenants, v_closest, v_piece);
                        corrections := corrections operator(pg_catalog.||) pg_catalog.jsonb_build_object(
                            'word', v_piece, 'suggestion', v_word,
                            'similarity', pg_catalog.round(v_similarity::numeric, 3),
                            'edits', v_distance);
                        v_piece := v_word;
                    end if;
                end if;
            end if;
        end if;
        suggested_query := suggested_query operator(pg_catalog.||) v_piece;
        v_prev := v_piece;
    end loop;
    return next;
end
$$;
comment on function public.suggest_query(text, text, double precision) is
'Did you mean: for each word of query_text (letters only, 3-64 of them, not excluded with -, the first 16 such words) without postings in the caller''s tenant, the closest word of that tenant''s own vocabulary (of its 20 BM25 lexemes most similar by pg_trgm to the word as typed or stemmed, at least min_similarity, the one fewest edits away: at most 1 for a word of up to 4 letters, 2 up to 8, 3 beyond; written back as a word of its text). One row: suggested_query (query_text with those words replaced; query_text itself when none is) and corrections (a JSON array of {word, suggestion, similarity, edits}). Tenant from request.jwt.claims; RLS applies (anon reads no vocabulary: no suggestions). language: as keyword_search. Limits: query_text at most 10,000 characters, min_similarity 0.2-1, language an existing configuration; else SQLSTATE 22023.';
