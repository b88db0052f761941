-- pgrag saved embeddings: a long document's embeddings kept while it is being loaded.
-- Incremental migration: applied once, in one transaction, never edited after release.
--
-- A document is swapped in by one transaction (pgrag.replace_document_chunks), so everything
-- computed for a document still in progress was lost with the run: a 50 MB file (about 59,000
-- chunks, an hour of local embedding) interrupted near its end was embedded again from its
-- first chunk. pgrag ingest now saves the embeddings of a document that spans several batches
-- here, with each batch it stages (pgrag.save_embeddings); a later run reuses those of the same
-- text of the same document (as it reuses the embeddings of its stored chunks), and the swap
-- that loads the document deletes them (sql/idempotent/004-loading.sql).
--
-- Cost of this file: a new, empty table.

set local lock_timeout = '10s';
set local search_path = pg_catalog, pg_temp;

create table pgrag.saved_embeddings (
    tenant_id text not null,
    document_id bigint not null,
    content_sha256 text not null,
    model text not null,
    embedding @extschema:vector@.vector not null,
    saved_at timestamptz not null default pg_catalog.now(),
    primary key (tenant_id, document_id, content_sha256, model)
);
alter table pgrag.saved_embeddings enable row level security;
comment on table pgrag.saved_embeddings is
'Embeddings computed for a document still being loaded (pgrag.save_embeddings: a document spanning several batches of pgrag ingest), by content_sha256 and model; a later load of the same document reuses them (pgrag.replace_document_chunks), and its swap deletes them. Never read by searches.';
