"""The answer step against a local OpenAI-compatible chat server, and `pgrag ask` end to end.

Only the remote chat endpoint is faked (pytest-httpserver speaking the chat-completions
protocol); the database, the SQL functions and the embedding model are real.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner
from plugins.search_corpus import seed_corpus
from pytest_httpserver import HTTPServer
from werkzeug import Request

from pgrag.answer import SYSTEM_PROMPT, ChatConfig, ChatError, answer
from pgrag.cli import main

CONTEXT = "[Source 1] Widgets\nThe widget service listens on port 8443.\n"


def completion(text: str, model: str = "test-model") -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
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
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


def config(server: HTTPServer, **kwargs: Any) -> ChatConfig:
    return ChatConfig(
        model="test-model", base_url=server.url_for("/v1"), api_key="sk-test", **kwargs
    )


def test_answer_sends_a_grounded_prompt(httpserver: HTTPServer) -> None:
    httpserver.expect_request("/v1/chat/completions", method="POST").respond_with_json(
        completion("It listens on port 8443 [Source 1].")
    )
    text = answer("Which port?", CONTEXT, config(httpserver))
    assert text == "It listens on port 8443 [Source 1]."
    (request, _), *_ = httpserver.log
    body = json.loads(request.get_data())
    assert request.headers["Authorization"] == "Bearer sk-test"
    assert body["model"] == "test-model"
    assert body["messages"][0] == {"role": "system", "content": SYSTEM_PROMPT}
    assert "[Source N]" not in SYSTEM_PROMPT and "[Source 1]" in SYSTEM_PROMPT
    assert "only" in SYSTEM_PROMPT and "do not contain" in SYSTEM_PROMPT
    assert CONTEXT in body["messages"][1]["content"]
    assert "Question: Which port?" in body["messages"][1]["content"]


def test_answer_retries_429_and_500_then_succeeds(httpserver: HTTPServer) -> None:
    # retry-after-ms keeps the client's own backoff short in the test.
    fast = {"retry-after-ms": "10"}
    httpserver.expect_ordered_request("/v1/chat/completions").respond_with_json(
        {"error": {"message": "slow down", "type": "rate_limit"}}, status=429, headers=fast
    )
    httpserver.expect_ordered_request("/v1/chat/completions").respond_with_json(
        {"error": {"message": "boom", "type": "server_error"}}, status=500, headers=fast
    )
    httpserver.expect_ordered_request("/v1/chat/completions").respond_with_json(
        completion("Port 8443 [Source 1].")
    )
    assert answer("Which port?", CONTEXT, config(httpserver)) == "Port 8443 [Source 1]."
    assert len(httpserver.log) == 3
    httpserver.check_assertions()


def test_answer_gives_up_after_the_clients_retries(httpserver: HTTPServer) -> None:
    httpserver.expect_request("/v1/chat/completions").respond_with_json(
        {"error": {"message": "busy"}}, status=503, headers={"retry-after-ms": "5"}
    )
    with pytest.raises(ChatError, match="HTTP 503 after 2 retries"):
        answer("Which port?", CONTEXT, config(httpserver, max_retries=2))
    assert len(httpserver.log) == 3  # the first try and two retries


def test_refused_key_is_one_clear_line(httpserver: HTTPServer) -> None:
    httpserver.expect_request("/v1/chat/completions").respond_with_json(
        {"error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}},
        status=401,
    )
    with pytest.raises(ChatError) as info:
        answer("Which port?", CONTEXT, config(httpserver))
    message = str(info.value)
    assert "\n" not in message
    assert "refused the API key" in message and "OPENAI_API_KEY" in message
    assert len(httpserver.log) == 1  # 401 is not retried


def test_unreachable_endpoint(unused_port_url: str) -> None:
    cfg = ChatConfig(model="m", base_url=unused_port_url, api_key="k", max_retries=0, timeout=2)
    with pytest.raises(ChatError, match="cannot reach the chat endpoint"):
        answer("q", CONTEXT, cfg)


@pytest.fixture
def unused_port_url() -> str:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def test_chat_config_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "PGRAG_CHAT_MODEL"):
        monkeypatch.delenv(name, raising=False)
    assert ChatConfig.from_env() is None
    monkeypatch.setenv("OPENAI_BASE_URL", "http://localhost:11434/v1")
    cfg = ChatConfig.from_env()
    assert cfg is not None and cfg.model == "gpt-4o-mini" and cfg.api_key is None
    monkeypatch.setenv("PGRAG_CHAT_MODEL", "llama3")
    assert ChatConfig.from_env().model == "llama3"  # type: ignore[union-attr]
    assert ChatConfig.from_env("qwen").model == "qwen"  # type: ignore[union-attr]


# -- pgrag ask end to end ------------------------------------------------------------------------


@pytest.fixture
def corpus(db: str, local_embedder: Any) -> str:
    seed_corpus(db, local_embedder)
    return db


@pytest.fixture
def no_chat_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "PGRAG_CHAT_MODEL", "PGRAG_TENANT"):
        monkeypatch.delenv(name, raising=False)


def run(dsn: str, *args: str) -> Any:
    return CliRunner().invoke(main, ["--dsn", dsn, "ask", *args], catch_exceptions=False)


def test_ask_without_a_chat_endpoint_prints_context_and_sources(
    corpus: str, no_chat_env: None
) -> None:
    result = run(corpus, "Which port does the widget service listen on?")
    assert result.exit_code == 0, result.output
    assert "No chat endpoint is configured" in result.output
    assert "[Source 1]" in result.output
    assert "8443" in result.output
    assert "Sources:" in result.output


def test_ask_with_a_chat_endpoint_answers_and_lists_sources(
    corpus: str, no_chat_env: None, httpserver: HTTPServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", httpserver.url_for("/v1"))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    httpserver.expect_request("/v1/chat/completions").respond_with_json(
        completion("The widget service listens on port 8443 [Source 1].")
    )
    result = run(corpus, "Which port does the widget service listen on?", "--chat-model", "tiny")
    assert result.exit_code == 0, result.output
    assert result.output.startswith("The widget service listens on port 8443 [Source 1].")
    assert "Sources:" in result.output and "[Source 1]" in result.output
    body = json.loads(httpserver.log[0][0].get_data())
    assert body["model"] == "tiny"
    assert "8443" in body["messages"][1]["content"]

    result = run(corpus, "Which port does the widget service listen on?", "--json")
    data = json.loads(result.output)
    assert data["found"] is True and data["answer"].endswith("[Source 1].")
    assert data["sources"] and data["context"]


def test_ask_refused_key_exits_1_with_one_line(
    corpus: str, no_chat_env: None, httpserver: HTTPServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", httpserver.url_for("/v1"))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-wrong")
    httpserver.expect_request("/v1/chat/completions").respond_with_json(
        {"error": {"message": "Incorrect API key provided"}}, status=401
    )
    result = CliRunner().invoke(main, ["--dsn", corpus, "ask", "Which port for widgets?"])
    assert result.exit_code == 1
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: the chat endpoint")
    assert "refused the API key" in lines[0]


def test_ask_below_min_score_never_calls_the_llm(
    corpus: str, no_chat_env: None, httpserver: HTTPServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", httpserver.url_for("/v1"))

    def fail(request: Request) -> Any:  # pragma: no cover - must not be reached
        raise AssertionError("the LLM was called")

    httpserver.expect_request("/v1/chat/completions").respond_with_handler(fail)
    result = run(corpus, "Which port does the widget service listen on?", "--min-score", "1e9")
    assert result.exit_code == 0
    assert result.output.strip() == "No relevant information found."
    assert len(httpserver.log) == 0
    data = json.loads(run(corpus, "widgets", "--min-score", "1e9", "--json").output)
    assert data == {"answer": None, "found": False, "context": "", "sources": []}
