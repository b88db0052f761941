-- Highlights: the words of a query marked in the chunks a search returned.
-- Contract. Provides: public.highlight (documented in docs/sql-api.md, "Highlights") and its
--   steps pgrag.html_escape, pgrag.highlight_matches (where the query's words are in a text)
--   and pgrag.highlight_snippet (a window of a text around them, marked and HTML-escaped).
--   Relies on: the argument checks and pgrag.current_tenant_id (001-helpers.sql),
--   pgrag.keyword_query (005-text-search.sql, the lexemes the keyword arm scores) and
--   pgrag.chunk_fts and pgrag.identifier_terms (incremental/007, what a chunk indexes for a
--   word). Callers: anon, authenticated and service_role (910-function-privileges.sql), after a
--   search, with the ids of the rows they show: the cost is bounded by those (at most 100), never
--   by the corpus. Runs as its caller: row-level security applies.
--
-- A word matches when what the keyword arm indexes for it (pgrag.chunk_fts: the stemmed word,
-- and every run of parts of an identifier) holds a lexeme the query scores: stemmed forms
-- ("running" for "run") and identifiers by part (ERR-4471 for "4471") are marked as the keyword
-- arm finds them; stop words and excluded words are not. Offsets count characters (code points)
-- from 0, the end excluded.

create or replace function pgrag.html_escape(value text)
returns text
language sql
immutable
strict
security invoker
parallel safe
set search_path = pg_catalog, pg_temp
as $$
    select pg_catalog.replace(pg_catalog.replace(pg_catalog.replace(pg_catalog.replace(
           pg_catalog.replace(value, '&', '&amp;'), '<', '&lt;'), '>', '&gt;'), '"', '&quot;'),
           '''', '&#39;')
$$;
comment on function pgrag.html_escape(text) is
'value with & < > " and '' written as HTML character references, safe inside an HTML element or a quoted attribute.';

create or replace function pgrag.highlight_matches(content text, config regconfig, lexemes text[])
returns table (start_at integer, end_at integer)
language plpgsql
stable
security invoker
parallel safe
set search_path = pg_catalog, pg_temp
as $$
begin
    -- Bounded (docs/security.md): 64 lexemes, keyword_query's limit; content is a chunk's.
    perform pgrag.check_length('lexemes', pg_catalog.cardinality(lexemes), 64);
    if config is null or not exists (select 1 from pg_catalog.pg_ts_config as t where t.oid = config) then
        raise exception 'config must name a text search configuration (got %)', coalesce(config::text, 'null')
            using errcode = '22023';
    end if;
    if coalesce(pg_catalog.cardinality(lexemes), 0) = 0 then
        return;
    end if;
    -- Words (letters and digits, joined by - . _ ' as identifiers and contractions are) and the
    -- text before each: their lengths give each word's offset. Each distinct word is looked up
    -- once; pgrag.chunk_fts only for a word with a separator (an identifier's parts).
    return query
    with t as (
        select x.m[1] as gap, x.m[2] as word, x.ord
        from pg_catalog.regexp_matches(content, '([^[:alnum:]]*)([[:alnum:]]+(?:[-._''][[:alnum:]]+)*)', 'g')
             with ordinality as x(m, ord)
    ),
    o as (
        select t.word, t.ord,
               (pg_catalog.sum(pg_catalog.length(t.gap) + pg_catalog.length(t.word)) over (order by t.ord)
                - pg_catalog.length(t.word))::integer as s
        from t
    ),
    hit as (
        select d.word
        from (select distinct o.word from o) as d
        where pg_catalog.tsvector_to_array(
                  case when d.word operator(pg_catalog.~) '[-._'']'
                       then pgrag.chunk_fts(config, d.word)
                       else pg_catalog.to_tsvector(config, d.word) end)
              operator(pg_catalog.&&) lexemes
    )
    select o.s, o.s + pg_catalog.length(o.word)
    from o
    join hit on hit.word = o.word
    order by o.ord;
end
$$;
comment on function pgrag.highlight_matches(text, regconfig, text[]) is
'Where the words of content whose indexed lexemes (pgrag.chunk_fts under config: stemmed words, identifier parts) meet lexemes are: (start_at, end_at) character offsets from 0, end excluded, in text order. At most 64 lexemes, config an existing configuration; else SQLSTATE 22023.';

create or replace function pgrag.highlight_snippet(
    content text,
    starts integer[],
    ends integer[],
    start_mark text,
    stop_mark text,
    max_chars integer
)
returns text
language plpgsql
immutable
security invoker
parallel safe
set search_path = pg_catalog, pg_temp
as $$
declare
    n integer := coalesce(pg_catalog.length(content), 0);
    m integer := coalesce(pg_catalog.cardinality(starts), 0);
    best integer := 0;     -- the window's first match (1-based), 0: none
    best_count integer := 0;
    j integer := 1;
    w_start integer := 0;
    w_end integer;
    pos integer;
    out text := '';
    i integer;
begin
    perform pgrag.check_argument('max_chars', max_chars, 20, 2000),
            pgrag.check_length('start_mark', pg_catalog.length(start_mark), 64, 'characters'),
            pgrag.check_length('stop_mark', pg_catalog.length(stop_mark), 64, 'characters');
    if max_chars is null or m <> coalesce(pg_catalog.cardinality(ends), 0) then
        raise exception 'max_chars must be given and starts and ends must have the same length'
            using errcode = '22023';
    end if;
    -- Matches as pgrag.highlight_matches gives them: words of content in text order.
    if m > 0 and exists (
        select 1
        from (select u.s, u.e, pg_catalog.lag(u.e) over (order by u.i) as prev
              from rows from (pg_catalog.unnest(starts), pg_catalog.unnest(ends))
                   with ordinality as u(s, e, i)) as x
        where x.s is null or x.e is null or x.s < 0 or x.e <= x.s or x.e > n or x.s < x.prev
    ) then
        raise exception 'starts and ends must be offsets of non-overlapping words of content, in order'
            using errcode = '22023';
    end if;
    -- The window of max_chars holding the most matches (the earliest of equals): two pointers
    -- over the matches in text order, linear in their number.
    for i in 1 .. m loop
        while j <= m and ends[j] <= starts[i] + max_chars loop
            j := j + 1;
        end loop;
        if j - i > best_count then
            best := i;
            best_count := j - i;
        end if;
    end loop;
    if n > max_chars and best > 0 then
        -- Some context before the first match, starting at a word.
        w_start := greatest(0, starts[best] - max_chars / 5);
        if w_start > 0 then
            pos := pg_catalog.strpos(pg_catalog.substr(content, w_start + 1, starts[best] - w_start), ' ');
            w_start := case when pos > 0 then w_start + pos else starts[best] end;
        end if;
    end if;
    w_end := least(n, w_start + max_chars);
    if w_end < n then
        -- End at a word: the last blank of the window after its first match, if any.
        pos := pg_catalog.length(pg_catalog.substr(content, w_start + 1, w_end - w_start))
               - pg_catalog.strpos(pg_catalog.reverse(pg_catalog.substr(content, w_start + 1, w_end - w_start)), ' ');
        if pos < pg_catalog.length(pg_catalog.substr(content, w_start + 1, w_end - w_start))
           and w_start + pos > coalesce(ends[best], w_start) then
            w_end := w_start + pos;
        end if;
    end if;
    pos := w_start;
    for i in 1 .. m loop
        continue when starts[i] < w_start or ends[i] > w_end;
        out := out operator(pg_catalog.||) pgrag.html_escape(pg_catalog.substr(content, pos + 1, starts[i] - pos))
               operator(pg_catalog.||) start_mark
               operator(pg_catalog.||) pgrag.html_escape(pg_catalog.substr(content, starts[i] + 1, ends[i] - starts[i]))
               operator(pg_catalog.||) stop_mark;
        pos := ends[i];
    end loop;
    out := out operator(pg_catalog.||) pgrag.html_escape(pg_catalog.substr(content, pos + 1, w_end - pos));
    return case when w_start > 0 then '…' else '' end operator(pg_catalog.||) pg_catalog.btrim(out)
           operator(pg_catalog.||) case when w_end < n then '…' else '' end;
end
$$;
comment on function pgrag.highlight_snippet(text, integer[], integer[], text, text, integer) is
'At most max_chars characters of content (… where cut, at blanks where it can), the window holding the most of the matches (starts, ends: character offsets from 0, end excluded, in text order) or the opening without any, HTML-escaped (pgrag.html_escape), each match inside the window between start_mark and stop_mark as given. Limits: max_chars 20-2000, marks at most 64 characters, starts and ends of one length, within content, in order and not overlapping; else SQLSTATE 22023.';

create or replace function public.highlight(
    chunk_ids bigint[],
    query_text text,
    start_mark text default '<mark>',
    stop_mark text default '</mark>',
    max_chars integer default 200,
    language text default null
)
returns table (chunk_id bigint, snippet text, matches jsonb)
language plpgsql
stable
security invoker
set search_path = pg_catalog, pg_temp
-- A handful of chunks read by key, planned with the values ("Plans" in sql/idempotent/README.md).
set plan_cache_mode = force_custom_plan
as $$
#variable_conflict use_column
declare
    v_tenant text := pgrag.current_tenant_id();
    v_config regconfig := pgrag.text_search_config('language', language);
    v_language regconfig;
    v_lexemes text[];
    v_starts integer[];
    v_ends integer[];
    r record;
begin
    -- Argument limits (docs/security.md): SQLSTATE 22023 before any work.
    perform pgrag.check_length('chunk_ids', pg_catalog.cardinality(chunk_ids), 100),
            pgrag.check_length('query_text', pg_catalog.length(query_text), 10000, 'characters'),
            pgrag.check_argument('max_chars', max_chars, 20, 2000),
            pgrag.check_length('start_mark', pg_catalog.length(start_mark), 64, 'characters'),
            pgrag.check_length('stop_mark', pg_catalog.length(stop_mark), 64, 'characters');
    for r in
        select /* pgrag:highlight_chunks */ c.id, c.content, c.language
        from pg_catalog.unnest(chunk_ids) with ordinality as u(id, ord)
        join pgrag.chunks as c on c.id = u.id and (v_tenant is null or c.tenant_id = v_tenant)
        order by u.ord
    loop
        -- The query's lexemes under each chunk's configuration (or language), parsed once per
        -- configuration met.
        if v_language is distinct from coalesce(v_config, r.language) then
            v_language := coalesce(v_config, r.language);
            v_lexemes := (pgrag.keyword_query(query_text, v_language)).lexemes;
        end if;
        select pg_catalog.array_agg(h.start_at order by h.start_at),
               pg_catalog.array_agg(h.end_at order by h.start_at),
               coalesce(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_array(h.start_at, h.end_at)
                                             order by h.start_at), '[]')
        into v_starts, v_ends, matches
        from pgrag.highlight_matches(r.content, v_language, v_lexemes) as h;
        chunk_id := r.id;
        snippet := pgrag.highlight_snippet(r.content, v_starts, v_ends, coalesce(start_mark, ''),
                                           coalesce(stop_mark, ''), coalesce(max_chars, 200));
        return next;
    end loop;
end
$$;
comment on function public.highlight(bigint[], text, text, text, integer, text) is
'Highlights for the rows a search returned (call it with the chunk ids of the rows shown, in their order): per chunk the caller may see, snippet, at most max_chars characters of its content around the most matches of query_text''s words (or its opening when none matches, e.g. a vector-only hit), HTML-escaped, each match between start_mark and stop_mark (given verbatim); matches, every match in content as [start, end] character offsets (from 0, end excluded). A word matches as the keyword arm finds it: stemmed forms, identifiers by part; not stop words, nor excluded words. language: the configuration of the query (default: each chunk''s). Limits: at most 100 chunk_ids, query_text 10,000 characters and 64 distinct terms, max_chars 20-2000, marks 64 characters, language an existing configuration; else SQLSTATE 22023.';
