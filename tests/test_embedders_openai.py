"""The OpenAI embedder against a local OpenAI-compatible server (pytest-httpserver).

Only the OpenAI API is faked; the database is real.
"""

from __future__ import annotations

import base64
import hashlib
import json
import time

import numpy as np
import pytest
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from pgrag.db import connect
from pgrag.errors import EmbeddingConfigError, EmbeddingError
from pgrag.ingest import ExtractedDocument, ingest_documents
from pgrag.pipeline.embedders import OpenAIEmbedder, embedder_for_database, get_embedder

PATH = "/v1/embeddings"


def fake_vector(text: str, dims: int) -> np.ndarray:
    seed = int(hashlib.sha256(text.encode()).hexdigest()[:8], 16)
    return np.random.default_rng(seed).standard_normal(dims).astype(np.float32)


def embeddings_handler(seen: list[dict]) -> object:  # type: ignore[type-arg]
    """Answers like OpenAI: one vector per input, float lists or base64 as asked."""

    def handle(request: Request) -> Response:
        body = json.loads(request.data)
        seen.append(body)
        dims = body.get("dimensions", 1536)
        data = []
        for i, text in enumerate(body["input"]):
            v = fake_vector(text, dims)
            if body.get("encoding_format") == "base64":
                emb: object = base64.b64encode(v.tobytes()).decode()
            else:
                emb = v.tolist()
            data.append({"object": "embedding", "index": i, "embedding": emb})
        payload = {
            "object": "list",
            "data": data,
            "model": body["model"],
            "usage": {"prompt_tokens": 1, "total_tokens": 1},
        }
        return Response(json.dumps(payload), content_type="application/json")

    return handle


def statuses(server: HTTPServer) -> list[int]:
    """Status codes the fake API answered (a slow request of an earlier test may be logged)."""
    return [response.status_code for request, response in server.log if request.path == PATH]


@pytest.fixture
def api(httpserver: HTTPServer, monkeypatch: pytest.MonkeyPatch) -> HTTPServer:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("OPENAI_BASE_URL", httpserver.url_for("/v1"))
    return httpserver


def test_retries_429_with_retry_after_then_500_then_succeeds(api: HTTPServer) -> None:
    seen: list[dict] = []  # type: ignore[type-arg]
    api.expect_ordered_request(PATH, method="POST").respond_with_response(
        Response('{"error": {"message": "slow down"}}', status=429, headers={"Retry-After": "0.05"})
    )
    api.expect_ordered_request(PATH, method="POST").respond_with_response(
        Response('{"error": {"message": "boom"}}', status=500, headers={"retry-after-ms": "20"})
    )
    api.expect_ordered_request(PATH, method="POST").respond_with_handler(
        embeddings_handler(seen)  # type: ignore[arg-type]
    )
    embedder = OpenAIEmbedder(dims=384)
    started = time.monotonic()

    vectors = embedder.embed(["first text", "second text"])

    assert time.monotonic() - started >= 0.05  # Retry-After was honoured
    assert statuses(api) == [429, 500, 200]
    assert vectors.shape == (2, 384)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0)
    expected = fake_vector("second text", 384)
    assert np.allclose(vectors[1], expected / np.linalg.norm(expected), atol=1e-6)
    # text-embedding-3-small is 1536-d natively: the table's 384 is asked for explicitly.
    assert seen[0]["model"] == "text-embedding-3-small" and seen[0]["dimensions"] == 384


def test_after_the_last_retry_the_error_is_one_clear_line(api: HTTPServer) -> None:
    api.expect_request(PATH, method="POST").respond_with_response(
        Response(
            '{"error": {"message": "overloaded"}}', status=503, headers={"retry-after-ms": "1"}
        )
    )
    with pytest.raises(EmbeddingError, match="failed with HTTP 503 after 2 retries") as info:
        OpenAIEmbedder(dims=384, max_retries=2).embed(["x"])
    assert "\n" not in str(info.value)
    assert statuses(api) == [503, 503, 503]


def test_timeouts_are_retried_then_reported(api: HTTPServer) -> None:
    api.expect_request(PATH, method="POST").respond_with_handler(
        lambda request: time.sleep(0.6) or Response("{}")  # type: ignore[func-returns-value]
    )
    with pytest.raises(EmbeddingError, match=r"timed out \(0.2 s\) after 1 retries"):
        OpenAIEmbedder(dims=384, max_retries=1, timeout=0.2).embed(["x"])


def test_missing_or_refused_key_is_a_clear_error(
    api: HTTPServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    api.expect_request(PATH, method="POST").respond_with_response(
        Response('{"error": {"message": "Incorrect API key"}}', status=401)
    )
    with pytest.raises(EmbeddingError, match=r"refused the API key \(HTTP 401\)"):
        OpenAIEmbedder(dims=384).embed(["x"])
    monkeypatch.delenv("OPENAI_API_KEY")
    with pytest.raises(EmbeddingError, match="OPENAI_API_KEY is not set"):
        get_embedder("openai")


def test_batches_stay_within_input_and_token_limits(api: HTTPServer) -> None:
    seen: list[dict] = []  # type: ignore[type-arg]
    api.expect_request(PATH, method="POST").respond_with_handler(embeddings_handler(seen))  # type: ignore[arg-type]
    embedder = OpenAIEmbedder(dims=384, max_batch_inputs=3, max_batch_tokens=40)
    texts = [f"text number {i} " * (1 + i % 4) for i in range(10)]

    vectors = embedder.embed(texts)

    assert vectors.shape == (10, 384)
    assert [t for body in seen for t in body["input"]] == texts
    for body in seen:
        assert len(body["input"]) <= 3
        assert sum(embedder.count_tokens(t) for t in body["input"]) <= 40
    assert embedder.count_tokens("hello world") == 2  # cl100k_base, offline


def test_ingest_with_openai_records_the_model_and_refuses_mixing_with_local(
    db: str, api: HTTPServer, local_embedder: object
) -> None:
    api.expect_request(PATH, method="POST").respond_with_handler(embeddings_handler([]))  # type: ignore[arg-type]
    docs = [ExtractedDocument.from_text(f"doc:{i}", f"Document {i} text.") for i in range(3)]

    summary = ingest_documents(db, docs, embedder=get_embedder("openai", dims=384))

    assert summary.documents_new == 3 and summary.chunks_embedded == 3
    with connect(db) as conn:
        assert conn.execute("select provider, model from pgrag.embedding_config").fetchone() == (
            "openai",
            "text-embedding-3-small",
        )
        assert isinstance(embedder_for_database(conn), OpenAIEmbedder)
    with pytest.raises(EmbeddingConfigError, match="holds embeddings of openai:text-embedding"):
        ingest_documents(db, docs, embedder=local_embedder)  # type: ignore[arg-type]


def test_a_server_returning_the_wrong_dimension_is_refused_before_writing(
    db: str, api: HTTPServer
) -> None:
    def wrong(request: Request) -> Response:
        body = json.loads(request.data)
        data = [
            {"index": i, "embedding": [0.1] * 768, "object": "embedding"}
            for i, _ in enumerate(body["input"])
        ]
        return Response(
            json.dumps(
                {
                    "data": data,
                    "model": "m",
                    "object": "list",
                    "usage": {"prompt_tokens": 1, "total_tokens": 1},
                }
            ),
            content_type="application/json",
        )

    api.expect_request(PATH, method="POST").respond_with_handler(wrong)
    embedder = OpenAIEmbedder("local-compatible-model", dims=384)
    with pytest.raises(EmbeddingConfigError, match="holds 384-dimension"):
        ingest_documents(db, [ExtractedDocument.from_text("a", "Some text.")], embedder=embedder)
    with connect(db) as conn:
        assert conn.execute("select count(*) from pgrag.chunks").fetchone() == (0,)
        assert conn.execute("select status from pgrag.documents").fetchall() == [("error",)]
