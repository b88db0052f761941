"""Local OpenAI-compatible servers (pytest-httpserver): embeddings, for tests that switch models,
and chat completions with scripted replies (fixture ``openai_chat``), for the answer check.

Fixture ``openai_embeddings``: the server answering ``POST /v1/embeddings`` with deterministic
vectors (:func:`fake_vector`: seeded by the text, of the requested ``dimensions``, else the
size the fixture was given), ``OPENAI_API_KEY`` and ``OPENAI_BASE_URL`` set for the test, and
the request bodies it saw. ``delay`` slows every answer down (a test that kills a client in the
middle of its work). Only the paid API is faked: the database and the local model are real.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

EMBEDDINGS_PATH = "/v1/embeddings"


def fake_vector(text: str, dims: int) -> np.ndarray:
    """The server's (unnormalised) vector for ``text``."""
    seed = int(hashlib.sha256(text.encode()).hexdigest()[:8], 16)
    return np.random.default_rng(seed).standard_normal(dims).astype(np.float32)


def expected_embedding(text: str, dims: int) -> np.ndarray:
    """What pgrag stores for ``text`` (the embedder normalises vectors)."""
    v = fake_vector(text, dims)
    return v / np.linalg.norm(v)


@dataclass
class FakeEmbeddings:
    """The running fake: where it listens, what it was asked, how slowly it answers."""

    server: HTTPServer
    dims: int
    delay: float = 0.0
    bodies: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def base_url(self) -> str:
        return self.server.url_for("/v1")

    def texts(self, model: str | None = None) -> list[str]:
        """The texts embedded (of requests for ``model`` only, when given: the server is the
        session's, so a request a killed client of an earlier test left behind may arrive)."""
        with self.lock:
            return [
                t
                for body in self.bodies
                if model is None or body.get("model") == model
                for t in body["input"]
            ]

    def handle(self, request: Request) -> Response:
        body = json.loads(request.data)
        with self.lock:
            self.bodies.append(body)
        if self.delay:
            time.sleep(self.delay)
        dims = int(body.get("dimensions") or self.dims)
        data = [
            {"object": "embedding", "index": i, "embedding": fake_vector(t, dims).tolist()}
            for i, t in enumerate(body["input"])
        ]
        tokens = sum(len(t.split()) for t in body["input"])
        payload = {
            "object": "list",
            "data": data,
            "model": body["model"],
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }
        return Response(json.dumps(payload), content_type="application/json")


@pytest.fixture
def openai_embeddings(
    httpserver: HTTPServer, monkeypatch: pytest.MonkeyPatch
) -> Callable[..., FakeEmbeddings]:
    """``openai_embeddings(dims=256, delay=0.0)`` starts answering embeddings requests."""

    def start(dims: int = 256, delay: float = 0.0) -> FakeEmbeddings:
        fake = FakeEmbeddings(httpserver, dims, delay)
        httpserver.expect_request(EMBEDDINGS_PATH, method="POST").respond_with_handler(fake.handle)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
        return fake

    return start


# -- chat completions ------------------------------------------------------------------------

CHAT_PATH = "/v1/chat/completions"


def chat_completion(text: str, model: str, prompt_tokens: int, completion_tokens: int) -> str:
    """A chat-completions response body whose message is ``text``."""
    return json.dumps(
        {
            "id": "chatcmpl-test",
            "object": "chat.completion",
            "created": 1700000000,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }
    )


@dataclass
class FakeChat:
    """A chat endpoint answering with the replies a test scripted, in order (the last one
    again once they run out). Each request's prompt tokens are 100 times its position (1, 2,
    ...) and its completion tokens the reply's word count, so a test can tell which call's
    tokens were recorded. ``refuse_json_mode``: answer HTTP 400 to a request asking for
    ``response_format`` (an endpoint without JSON mode)."""

    server: HTTPServer
    replies: list[str]
    refuse_json_mode: bool = False
    bodies: list[dict[str, Any]] = field(default_factory=list)
    answered: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def base_url(self) -> str:
        return self.server.url_for("/v1")

    def handle(self, request: Request) -> Response:
        body = json.loads(request.data)
        with self.lock:
            self.bodies.append(body)
            if self.refuse_json_mode and "response_format" in body:
                error = {"error": {"message": "response_format is not supported"}}
                return Response(json.dumps(error), status=400, content_type="application/json")
            self.answered += 1
            n = self.answered
        text = self.replies[min(n, len(self.replies)) - 1]
        payload = chat_completion(text, body["model"], 100 * n, len(text.split()))
        return Response(payload, content_type="application/json")


@pytest.fixture
def openai_chat(httpserver: HTTPServer, monkeypatch: pytest.MonkeyPatch) -> Callable[..., FakeChat]:
    """``openai_chat(*replies, refuse_json_mode=False)`` starts answering chat completions
    with ``replies`` (``OPENAI_BASE_URL`` and ``OPENAI_API_KEY`` set for the test)."""

    def start(*replies: str, refuse_json_mode: bool = False) -> FakeChat:
        fake = FakeChat(httpserver, list(replies), refuse_json_mode)
        httpserver.expect_request(CHAT_PATH, method="POST").respond_with_handler(fake.handle)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
        monkeypatch.delenv("PGRAG_CHAT_MODEL", raising=False)
        monkeypatch.delenv("PGRAG_CHECK_MODEL", raising=False)
        return fake

    return start
