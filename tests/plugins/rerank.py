"""Re-rankers for the tests: a tiny cross-encoder built and saved here, and a local re-rank API.

``tiny_cross_encoder`` (session): a 2-layer BERT with one output (hidden size 32, seeded
random weights) saved with ``save_pretrained`` beside the bundled all-MiniLM-L6-v2's tokenizer
files: a real cross-encoder folder, loaded offline like any other. Its scores mean nothing,
but they are deterministic, so ordering and batching can be checked against them.

``rerank_api``: a local server speaking the common re-rank protocol (``POST /v1/rerank``
``{query, documents, top_n}`` -> ``{results: [{index, relevance_score}]}``), scoring with a
function the test gives (by default the number of query words a document contains), with
scripted failures (a status with headers, a delay, a raw body) before its good answers. Only
the paid API is faked.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

RERANK_PATH = "/v1/rerank"
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.txt",
    "special_tokens_map.json",
)


def build_cross_encoder(folder: Path, num_labels: int = 1, seed: int = 0) -> Path:
    """A tiny BERT cross-encoder with seeded random weights, saved in ``folder``."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification
    from transformers.utils import logging

    from pgrag.pipeline.embedders import local_model_path

    logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=30522,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=512,
        num_labels=num_labels,
        initializer_range=0.5,  # scores spread wide enough to order by
    )
    BertForSequenceClassification(config).save_pretrained(folder)
    source = local_model_path()
    for name in TOKENIZER_FILES:
        shutil.copy(source / name, folder / name)
    return folder


@pytest.fixture(scope="session")
def tiny_cross_encoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_cross_encoder(tmp_path_factory.mktemp("tiny-cross-encoder"))


def word_overlap(query: str, document: str) -> float:
    """The default scoring: how many of the query's words the document contains."""
    words = set(document.lower().split())
    return float(sum(word in words for word in query.lower().split()))


@dataclass
class Failure:
    """One scripted answer before the good ones: a status, headers, a delay or a raw body."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    body: str | None = None


@dataclass
class RerankApi:
    """The running fake: its URL, what it was asked, its scoring and scripted answers."""

    server: HTTPServer
    scoring: Callable[[str, str], float] = word_overlap
    shape: str = "results"  # "results" (Cohere, Jina), "tei" (a bare list of {index, score})
    failures: list[Failure] = field(default_factory=list)
    bodies: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        return self.server.url_for(RERANK_PATH)

    def handle(self, request: Request) -> Response:
        body = json.loads(request.data)
        with self.lock:
            self.bodies.append(body)
            self.headers.append(dict(request.headers))
            failure = self.failures.pop(0) if self.failures else None
        if failure is not None:
            time.sleep(failure.delay)
            return Response(
                failure.body if failure.body is not None else '{"message": "scripted"}',
                status=failure.status,
                headers=failure.headers,
                content_type="application/json",
            )
        scores = [self.scoring(body["query"], d) for d in body["documents"]]
        order = sorted(range(len(scores)), key=lambda i: -scores[i])[: body.get("top_n")]
        if self.shape == "tei":
            payload: Any = [{"index": i, "score": scores[i]} for i in order]
        else:
            payload = {"results": [{"index": i, "relevance_score": scores[i]} for i in order]}
        return Response(json.dumps(payload), content_type="application/json")


@pytest.fixture
def rerank_api(httpserver: HTTPServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[RerankApi]:
    """The local re-rank API, with no re-rank environment of the caller's leaking in."""
    for name in (
        "PGRAG_RERANK",
        "PGRAG_RERANK_API_KEY",
        "PGRAG_RERANK_MODEL",
        "PGRAG_RERANK_MODEL_PATH",
    ):
        monkeypatch.delenv(name, raising=False)
    api = RerankApi(httpserver)
    httpserver.expect_request(RERANK_PATH, method="POST").respond_with_handler(api.handle)
    yield api
