"""Ingestion end to end: real database, real local model."""

from __future__ import annotations

from typing import Any

import numpy as np
import psycopg
import pytest

from pgrag.db import connect
from pgrag.errors import DocumentChanged, EmbeddingConfigError, from_database_error
from pgrag.ingest import ExtractedDocument, IngestOptions, create_stage_table, ingest_documents
from pgrag.pipeline.embedders import LocalEmbedder, embedder_for_database

ABSTRACTS = [
    (
        "Aspirin and heart attacks",
        "Low-dose aspirin reduces the risk of a first heart attack in men. "
        "The effect was smaller in women. Bleeding risk rose with age.",
    ),
    (
        "Sleep and memory",
        "Sleep after learning consolidates declarative memory. Subjects deprived of sleep "
        "recalled fewer word pairs. The effect persisted after recovery sleep.",
    ),
    (
        "Vitamin D and fractures",
        "Vitamin D supplements alone did not prevent hip fractures in older adults. "
        "Combined with calcium, fracture rates fell slightly.",
    ),
]


def corpus_docs() -> list[ExtractedDocument]:
    return [
        ExtractedDocument.from_text(
            uri=f"scifact:{i}", title=title, text=title + "\n\n" + body, metadata={"doc_id": i}
        )
        for i, (title, body) in enumerate(ABSTRACTS)
    ]


def chunk_rows(dsn: str, tenant: str = "default") -> list[tuple[Any, ...]]:
    with connect(dsn) as conn:
        return conn.execute(
            "select d.source_uri, c.chunk_index, c.content_sha256, c.embedding is not null "
            "from pgrag.chunks c join pgrag.documents d on d.tenant_id = c.tenant_id "
            "and d.id = c.document_id where c.tenant_id = %s order by 1, 2",
            (tenant,),
        ).fetchall()


def test_text_documents_load_ready_with_embeddings_and_record_the_model(
    db: str, local_embedder: LocalEmbedder
) -> None:
    summary = ingest_documents(db, corpus_docs(), tenant="beir-scifact", embedder=local_embedder)

    assert (summary.documents_new, summary.documents_failed) == (3, 0)
    assert summary.chunks_written == summary.chunks_embedded == 3
    with connect(db) as conn:
        docs = conn.execute(
            "select title, status, chunk_count, metadata ->> 'doc_id', embedding_model "
            "from pgrag.documents where tenant_id = 'beir-scifact' order by source_uri"
        ).fetchall()
        assert docs == [
            (t, "ready", 1, str(i), local_embedder.model_name) for i, (t, _) in enumerate(ABSTRACTS)
        ]
        content, tokens, language, embedding = conn.execute(
            "select content, token_count, language::text, embedding from pgrag.chunks "
            "where tenant_id = 'beir-scifact' order by document_id limit 1"
        ).fetchone()
        assert content.startswith("Aspirin and heart attacks\n\nLow-dose aspirin")
        assert tokens == local_embedder.count_tokens(content)
        assert language == "english"
        assert np.allclose(embedding.to_numpy(), local_embedder.embed([content])[0], atol=1e-5)
        assert conn.execute("select provider, model from pgrag.embedding_config").fetchone() == (
            "local",
            local_embedder.model_name,
        )
        query = embedder_for_database(conn).embed(["does aspirin prevent heart attacks?"])
    assert query.shape == (1, 384)


def test_unchanged_rerun_embeds_nothing_and_never_loads_the_model(
    db: str, local_embedder: LocalEmbedder
) -> None:
    ingest_documents(db, corpus_docs(), embedder=local_embedder)
    before = chunk_rows(db)
    fresh = LocalEmbedder()  # a new embedder whose model was never loaded

    summary = ingest_documents(db, corpus_docs(), embedder=fresh)

    assert summary.documents_unchanged == 3
    assert summary.chunks_embedded == summary.chunks_written == 0
    assert fresh.calls == 0 and not fresh.model_loaded
    assert chunk_rows(db) == before


def test_force_reembeds_everything(db: str, local_embedder: LocalEmbedder) -> None:
    ingest_documents(db, corpus_docs(), embedder=local_embedder)
    calls = local_embedder.texts_embedded

    summary = ingest_documents(
        db, corpus_docs(), embedder=local_embedder, options=IngestOptions(force=True)
    )

    assert summary.documents_changed == 3
    assert summary.chunks_embedded == 3 and local_embedder.texts_embedded - calls == 3


def test_wrong_dimension_is_refused_before_anything_is_written(db: str) -> None:
    class Wide(LocalEmbedder):
        @property
        def dims(self) -> int:
            return 768

    with pytest.raises(EmbeddingConfigError, match=r"768-dimension.*holds 384"):
        ingest_documents(db, corpus_docs(), embedder=Wide())
    assert chunk_rows(db) == []
    with connect(db) as conn:
        assert conn.execute("select count(*) from pgrag.documents").fetchone() == (0,)


def test_swap_refuses_a_staged_chunk_with_no_embedding_to_reuse_and_changes_nothing(
    db: str, local_embedder: LocalEmbedder
) -> None:
    ingest_documents(db, corpus_docs()[:1], tenant="t", embedder=local_embedder)
    with connect(db) as conn:
        doc_id, before = conn.execute(
            "select id, (select array_agg(content_sha256 order by chunk_index) from pgrag.chunks c"
            " where c.tenant_id = d.tenant_id and c.document_id = d.id)"
            " from pgrag.documents d where tenant_id = 't'"
        ).fetchone() or (None, None)
        create_stage_table(conn)
        # A new text whose embedding nobody computed (as when another ingest swapped the
        # document meanwhile): the swap must not write a chunk without an embedding.
        conn.execute(
            "insert into pgrag_stage values (%s, 0, 'new text', null, null, '{}', 'english', 2,"
            " 'sha-of-new-text', 0, '{}')",
            (doc_id,),
        )
        with pytest.raises(psycopg.Error) as raised:
            conn.execute(
                "select pgrag.replace_document_chunks('pgrag_stage', 't', %s, '{T}', '{text}',"
                " '{x}', '{}', '{1}', (select model from pgrag.embedding_config))",
                ([doc_id],),
            )
        conn.rollback()
        after = conn.execute(
            "select array_agg(content_sha256 order by chunk_index) from pgrag.chunks"
            " where tenant_id = 't' and document_id = %s",
            (doc_id,),
        ).fetchone()
    assert raised.value.sqlstate == "PR001"
    assert isinstance(from_database_error(raised.value), DocumentChanged)
    assert after and after[0] == before


def test_swap_refuses_embeddings_of_another_model_than_the_recorded_one(
    db: str, local_embedder: LocalEmbedder
) -> None:
    # Any loader calling the SQL swap, not only pgrag's, is held to the recorded model.
    ingest_documents(db, corpus_docs()[:1], tenant="t", embedder=local_embedder)
    with connect(db) as conn:
        doc_id, model = conn.execute(
            "select d.id, c.model from pgrag.documents d, pgrag.embedding_config c"
            " where d.tenant_id = 't'"
        ).fetchone() or (None, None)
        create_stage_table(conn)
        conn.execute(
            "insert into pgrag_stage values (%s, 0, 'new text', %s::vector, null, '{}',"
            " 'english', 2, 'sha-of-new-text', 0, '{}')",
            (doc_id, "[" + ",".join(["0.1"] * 384) + "]"),
        )
        with pytest.raises(psycopg.Error) as raised:
            conn.execute(
                "select pgrag.replace_document_chunks('pgrag_stage', 't', %s, '{T}', '{text}',"
                " '{x}', '{}', '{1}', 'another-model')",
                ([doc_id],),
            )
        conn.rollback()
        chunks = conn.execute(
            "select content from pgrag.chunks where tenant_id = 't' and document_id = %s",
            (doc_id,),
        ).fetchall()
    assert model is not None
    assert raised.value.sqlstate == "PR002"
    assert isinstance(from_database_error(raised.value), EmbeddingConfigError)
    assert ("new text",) not in chunks and chunks
