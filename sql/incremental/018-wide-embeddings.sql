-- pgrag wide embeddings: dimensions above 2,000 (to 4,000), HNSW graphs over halfvec.
-- Incremental migration: applied once, in one transaction, never edited after release.
--
-- pgvector's HNSW indexes vector up to 2,000 dimensions and halfvec (half precision) up to
-- 4,000. A wider database keeps pgrag.chunks.embedding vector(N), and every function's
-- signature: its graphs index the expression embedding::halfvec(N) (halfvec_cosine_ops) and
-- the walks order by the same expression, while every distance they return is computed from
-- the full-precision column (sql/idempotent/README.md, "The vector arm").
--
-- 1. The dimension checks of embedding_config and reembeds allow 1 to 4,000 (a model switch
--    may go to a wide model).
-- 2. A new database installed with a dimension above 2,000: 001-core.sql (whose check allowed
--    no more) was applied with 2,000 by the installer, so here, the table still empty, the
--    dimension asked for (the setting pgrag.embedding_dims) is recorded, the column takes it,
--    and the graphs 001, 005 and 012 built are built again over embedding::halfvec(N).
--    Any other database (its dimension at most 2,000, or chosen earlier) is left as it is.
--
-- Cost of this file: two checks of one-row tables; for a new wide database, two empty graphs.

set local lock_timeout = '10s';
set local search_path = pg_catalog, pg_temp;

-- Each check is replaced by a wider one in the same statement (nothing it allowed is refused),
-- on tables of one row and of a few rows, which the new check scans in no time.
-- squawk-ignore ban-drop-constraint,constraint-missing-not-valid
alter table pgrag.embedding_config drop constraint embedding_config_dims_check, add constraint embedding_config_dims_check check (dims between 1 and 4000);
-- squawk-ignore ban-drop-constraint,constraint-missing-not-valid
alter table pgrag.reembeds drop constraint reembeds_dims_check, add constraint reembeds_dims_check check (dims between 1 and 4000);

do $$
declare
    v_wanted integer := nullif(pg_catalog.current_setting('pgrag.embedding_dims', true), '')::integer;
    v_dims integer := (select c.dims from pgrag.embedding_config as c);
begin
    if v_wanted is null or v_wanted <= 2000 or v_wanted = v_dims then
        return;
    end if;
    if v_wanted > 4000 then
        raise exception 'pgrag: % dimensions is more than pgvector indexes (4000 with halfvec)', v_wanted
            using errcode = '22023';
    end if;
    if v_dims <> 2000 or exists (select from pgrag.chunks) then
        raise exception 'pgrag: this database holds %-dimension embeddings, not %', v_dims, v_wanted
            using errcode = '22023',
                  hint = 'a wider model needs a new database, or pgrag reembed to switch this one';
    end if;
    drop index pgrag.chunks_embedding_hnsw, pgrag.chunks_public_embedding_hnsw;
    update pgrag.embedding_config set dims = v_wanted;
    execute pg_catalog.format(
        'alter table pgrag.chunks alter column embedding type @extschema:vector@.vector(%s)', v_wanted);
    -- (as 015-vector-arm-reads.sql set it, and pgrag.reembed_start sets the columns it adds)
    alter table pgrag.chunks alter column embedding set storage main;
    execute pg_catalog.format(
        'create index chunks_embedding_hnsw on pgrag.chunks using hnsw '
        '((embedding::@extschema:vector@.halfvec(%s)) @extschema:vector@.halfvec_cosine_ops) '
        'where embedding is not null and in_shared_graph', v_wanted);
    execute pg_catalog.format(
        'create index chunks_public_embedding_hnsw on pgrag.chunks using hnsw '
        '((embedding::@extschema:vector@.halfvec(%s)) @extschema:vector@.halfvec_cosine_ops) '
        'where is_public and embedding is not null', v_wanted);
end
$$;
