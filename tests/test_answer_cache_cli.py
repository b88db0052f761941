"""`pgrag ask --cache` end to end: real ingest, real model, real database; only the chat
endpoint is a local OpenAI-compatible server, whose requests show when the cache skipped it."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from pgrag.cli import main
from pgrag.db import connect

Chat = Callable[..., Any]

QUESTION = "Which port does the widget service listen on?"
PARAPHRASE = "What port is the widget service listening on?"
OTHER = "How do I roll out a release?"
ANSWER = "The widget service listens on port 8443 [Source 1]."

WIDGETS = "# Widgets\n\nThe widget service listens on port {port} and terminates TLS itself.\n"
DEPLOY = "# Deploy\n\nRoll out a release with kubectl apply and watch the pods become ready.\n"


def ingest(db: str, folder: Path) -> None:
    result = CliRunner().invoke(main, ["--dsn", db, "ingest", str(folder)])
    assert result.exit_code == 0, result.output


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "widgets.md").write_text(WIDGETS.format(port=8443))
    (folder / "deploy.md").write_text(DEPLOY)
    return folder


@pytest.fixture
def corpus(db: str, docs: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    for name in ("PGRAG_ANSWER_CACHE", "PGRAG_ANSWER_CACHE_SIMILARITY", "PGRAG_TENANT"):
        monkeypatch.delenv(name, raising=False)
    ingest(db, docs)
    return db


def ask(db: str, *args: str) -> Result:
    return CliRunner().invoke(main, ["--dsn", db, "ask", *args])


def ask_json(db: str, *args: str) -> dict[str, Any]:
    result = ask(db, *args, "--json")
    assert result.exit_code == 0, result.output
    return dict(json.loads(result.stdout))


def cached_entries(db: str) -> int:
    with connect(db) as conn:
        (n,) = conn.execute("select count(*) from pgrag.answer_cache").fetchone()  # type: ignore[misc]
    return int(n)


def test_the_cache_is_off_by_default_and_stores_nothing(corpus: str, openai_chat: Chat) -> None:
    chat = openai_chat(ANSWER)
    for _ in range(2):
        assert "cached" not in ask_json(corpus, QUESTION)
    assert len(chat.bodies) == 2
    assert cached_entries(corpus) == 0
    with connect(corpus) as conn:
        assert conn.execute("select count(*) from pgrag.answer_cache_counters").fetchone() == (0,)


def test_a_paraphrase_is_answered_from_the_cache_without_a_chat_call(
    corpus: str, openai_chat: Chat
) -> None:
    chat = openai_chat(ANSWER)
    first = ask_json(corpus, QUESTION, "--cache")
    assert first["cached"] is False and first["answer"] == ANSWER
    assert len(chat.bodies) == 1 and cached_entries(corpus) == 1

    again = ask_json(corpus, PARAPHRASE, "--cache")

    assert len(chat.bodies) == 1  # the chat server got no request
    assert again["cached"] is True and again["answer"] == ANSWER
    assert again["cached_question"] == QUESTION and 0.9 <= again["similarity"] < 1
    assert again["sources"] == first["sources"]


def test_the_environment_variable_turns_the_cache_on_and_the_text_says_so(
    corpus: str, openai_chat: Chat, monkeypatch: pytest.MonkeyPatch
) -> None:
    chat = openai_chat(ANSWER)
    monkeypatch.setenv("PGRAG_ANSWER_CACHE", "on")
    assert ask(corpus, QUESTION).exit_code == 0
    result = ask(corpus, PARAPHRASE)
    assert result.exit_code == 0, result.output
    assert result.output.startswith(ANSWER + "\n\n(Cached answer to ")
    assert "no retrieval or chat call was made" in result.output
    assert "[Source 1]" in result.output.split("Sources:")[1]
    assert len(chat.bodies) == 1


def test_a_different_question_misses_and_is_answered(corpus: str, openai_chat: Chat) -> None:
    chat = openai_chat(ANSWER, "Roll out with kubectl apply [Source 1].")
    ask_json(corpus, QUESTION, "--cache")
    other = ask_json(corpus, OTHER, "--cache")
    assert other["cached"] is False and "kubectl" in other["answer"]
    assert len(chat.bodies) == 2 and cached_entries(corpus) == 2


def test_other_retrieval_settings_do_not_reuse_the_answer(corpus: str, openai_chat: Chat) -> None:
    chat = openai_chat(ANSWER)
    ask_json(corpus, QUESTION, "--cache")
    assert ask_json(corpus, QUESTION, "--cache", "-k", "1")["cached"] is False
    assert ask_json(corpus, QUESTION, "--cache", "--chat-model", "other")["cached"] is False
    assert ask_json(corpus, QUESTION, "--cache", "-k", "1")["cached"] is True
    assert len(chat.bodies) == 3


def test_reingesting_the_source_with_changed_text_invalidates_the_answer(
    corpus: str, docs: Path, openai_chat: Chat
) -> None:
    chat = openai_chat(ANSWER, "The widget service listens on port 9443 [Source 1].")
    ask_json(corpus, QUESTION, "--cache")
    (docs / "widgets.md").write_text(WIDGETS.format(port=9443))
    ingest(corpus, docs)

    again = ask_json(corpus, QUESTION, "--cache")

    assert again["cached"] is False and "9443" in again["answer"]
    assert len(chat.bodies) == 2
    assert ask_json(corpus, PARAPHRASE, "--cache")["answer"] == again["answer"]


def test_reingesting_unchanged_text_keeps_the_answer(
    corpus: str, docs: Path, openai_chat: Chat
) -> None:
    chat = openai_chat(ANSWER)
    ask_json(corpus, QUESTION, "--cache")
    ingest(corpus, docs)
    assert ask_json(corpus, QUESTION, "--cache")["cached"] is True
    assert len(chat.bodies) == 1


def test_a_deleted_document_invalidates_the_answer(corpus: str, openai_chat: Chat) -> None:
    chat = openai_chat(ANSWER, "The sources do not say.")
    ask_json(corpus, QUESTION, "--cache")
    with connect(corpus) as conn:
        conn.execute("delete from pgrag.documents where source_uri like '%widgets.md'")
        conn.commit()
    assert ask_json(corpus, QUESTION, "--cache", "--min-score", "-1")["cached"] is False
    assert len(chat.bodies) == 2


def test_a_withheld_answer_is_not_cached(corpus: str, openai_chat: Chat) -> None:
    judged = '{"faithful": true, "unsupported_claims": [], "confidence": 1}'
    openai_chat("It listens on port 8443.", judged)  # no citation: withheld
    result = ask(corpus, QUESTION, "--cache", "--check", "llm")
    assert result.exit_code == 4, result.output
    assert cached_entries(corpus) == 0


def test_stats_show_the_answer_caches_hit_rate(corpus: str, openai_chat: Chat) -> None:
    openai_chat(ANSWER, "Roll out with kubectl apply [Source 1].")
    ask_json(corpus, QUESTION, "--cache")
    ask_json(corpus, PARAPHRASE, "--cache")
    ask_json(corpus, OTHER, "--cache")
    ask_json(corpus, QUESTION, "--cache")

    data = json.loads(CliRunner().invoke(main, ["--dsn", corpus, "stats", "--json"]).stdout)
    text = CliRunner().invoke(main, ["--dsn", corpus, "stats"]).output

    (tenant,) = data["tenants"]
    cache = tenant["answer_cache"]
    assert (cache["entries"], cache["lookups"], cache["hits"], cache["stale"]) == (2, 4, 2, 0)
    assert cache["hit_rate"] == 0.5
    assert "  answers    2 cached; 4 lookups, 2 hits (50 % hit rate)" in text


def test_the_same_question_of_another_tenant_is_never_answered_from_the_cache(
    corpus: str, tmp_path: Path, openai_chat: Chat
) -> None:
    other = tmp_path / "globex"
    other.mkdir()
    (other / "widgets.md").write_text(WIDGETS.format(port=9999))
    result = CliRunner().invoke(main, ["--dsn", corpus, "ingest", str(other), "--tenant", "globex"])
    assert result.exit_code == 0, result.output
    chat = openai_chat(ANSWER, "The widget service listens on port 9999 [Source 1].")

    ask_json(corpus, QUESTION, "--cache")
    globex = ask_json(corpus, QUESTION, "--cache", "--tenant", "globex")
    again = ask_json(corpus, QUESTION, "--cache", "--tenant", "globex")
    default = ask_json(corpus, QUESTION, "--cache")

    assert globex["cached"] is False and "9999" in globex["answer"]
    assert again["cached"] is True and "9999" in again["answer"]
    assert default["cached"] is True and default["answer"] == ANSWER
    assert len(chat.bodies) == 2
