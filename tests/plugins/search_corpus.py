"""A small corpus of ready documents with real embeddings, for the search and ask tests."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pgrag.db import connect

# (tenant, title, source_type, source_uri, metadata, heading_path, page, chunks)
CORPUS: list[tuple[str, str, str, str, dict[str, Any], list[str], int | None, list[str]]] = [
    (
        "default",
        "Widget service",
        "markdown",
        "docs/widgets.md",
        {"team": "ops"},
        ["Widgets", "Networking"],
        None,
        ["The widget service listens on port 8443 and terminates TLS itself."],
    ),
    (
        "default",
        "Error codes",
        "text",
        "docs/errors.txt",
        {"team": "support"},
        [],
        None,
        ["ERR-4471 is returned when an upload exceeds the account quota."],
    ),
    (
        "default",
        "Gardening handbook",
        "pdf",
        "books/garden.pdf",
        {"team": "home"},
        [],
        12,
        ["Tomato plants need at least six hours of direct sunlight every day."],
    ),
    (
        "default",
        "Deployment guide",
        "markdown",
        "docs/deploy.md",
        {"team": "ops"},
        ["Deploy"],
        None,
        [
            "Build the release image with make image.",
            "Push the image to the registry before rolling out.",
            "Roll out with kubectl apply and watch the pods become ready.",
        ],
    ),
    (
        "other",
        "Other tenant secret",
        "text",
        "secret.txt",
        {},
        [],
        None,
        ["The widget service of the other tenant listens on port 9999."],
    ),
]


def seed_corpus(dsn: str, embedder: Any) -> dict[str, int]:
    """Insert CORPUS as ready documents with real embeddings; return {title: document id}."""
    ids: dict[str, int] = {}
    with connect(dsn) as conn:
        for tenant, title, source_type, uri, metadata, headings, page, chunks in CORPUS:
            row = conn.execute(
                "insert into pgrag.documents (tenant_id, title, source_type, source_uri,"
                " content_sha256, metadata, status, chunk_count, embedding_model)"
                " values (%s, %s, %s, %s, %s, %s, 'ready', %s, %s) returning id",
                (
                    tenant,
                    title,
                    source_type,
                    uri,
                    hashlib.sha256("\n".join(chunks).encode()).hexdigest(),
                    json.dumps(metadata),
                    len(chunks),
                    embedder.model_name,
                ),
            ).fetchone()
            assert row is not None
            ids[title] = row[0]
            vectors = embedder.embed(chunks)
            for index, (content, vector) in enumerate(zip(chunks, vectors, strict=True)):
                conn.execute(
                    "insert into pgrag.chunks (tenant_id, document_id, chunk_index, content,"
                    " embedding, page, heading_path, token_count, content_sha256)"
                    " values (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
                    (
                        tenant,
                        row[0],
                        index,
                        content,
                        vector,
                        page,
                        headings,
                        embedder.count_tokens(content),
                        hashlib.sha256(content.encode()).hexdigest(),
                    ),
                )
        conn.execute(
            "update pgrag.embedding_config set model = %s, provider = 'local'",
            (embedder.model_name,),
        )
        conn.commit()
    return ids
