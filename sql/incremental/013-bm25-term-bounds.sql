-- pgrag BM25 term bounds: the largest term frequency and the shortest chunk per lexeme.
-- Incremental migration: applied once, in one transaction, never edited after release.
--
-- An exact keyword search may skip the postings of a query's most frequent lexemes when it can
-- prove that they cannot lift a chunk into the top k (pgrag.keyword_candidates,
-- sql/idempotent/007-candidates.sql). The proof needs an upper bound on what a lexeme adds to a
-- chunk's score: idf * tf / (tf + k1 (1 - b + b dl / avgdl)) grows with tf and shrinks with the
-- chunk length dl, so the largest tf and the smallest dl of the lexeme's postings bound it for
-- every k1, b and avgdl a search uses. pgrag.bm25_apply keeps both per lexicon row from now on;
-- removing postings leaves them (still a bound, only a looser one). Null: not known, and the
-- search then bounds the term part by 1.
--
-- Cost of this file: one pass over pgrag.bm25_postings, grouped by tenant and lexeme (seconds per
-- million postings); writes to pgrag.chunks wait meanwhile, searches go on.

set local lock_timeout = '10s';
set local search_path = pg_catalog, pg_temp;

alter table pgrag.bm25_lexicon
    add column max_tf integer,
    add column min_doc_len integer;
comment on column pgrag.bm25_lexicon.max_tf is
'Largest term frequency (tf) among the postings of this lexeme this row has counted (never lowered by removals: an upper bound); null when unknown.';
comment on column pgrag.bm25_lexicon.min_doc_len is
'Smallest chunk length (doc_len) among the postings of this lexeme this row has counted (never raised by removals: a lower bound); null when unknown.';

-- No new postings while their bounds are computed.
lock table pgrag.chunks in share mode;
update pgrag.bm25_lexicon as x
set max_tf = b.max_tf, min_doc_len = b.min_doc_len
from (
    select p.tenant_id, p.lexeme, pg_catalog.max(p.tf) as max_tf, pg_catalog.min(p.doc_len) as min_doc_len
    from pgrag.bm25_postings as p
    group by p.tenant_id, p.lexeme
) as b
where x.tenant_id operator(pg_catalog.=) b.tenant_id
  and x.lexeme operator(pg_catalog.=) b.lexeme;
