"""Checked answers (``pgrag ask --check``): every sentence must cite a [Source N] that supports it.

The database, the SQL context and the embedding model are real; the chat endpoint (which both
answers and, for ``--check llm``, judges) is a local server replying what each test scripts.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from click.testing import CliRunner
from plugins.openai_server import FakeChat
from plugins.search_corpus import seed_corpus

from pgrag.check import CheckOptions, check_answer
from pgrag.check.judge import JUDGE_PROMPT, parse_judgement
from pgrag.check.sentences import answer_sentences, context_sources
from pgrag.cli import main
from pgrag.db import connect
from pgrag.errors import CheckFailed

QUESTION = "Which port does the widget service listen on?"
FAITHFUL = (
    "The widget service listens on port 8443 [Source 1]. It terminates TLS itself [Source 1]."
)
OFF_SOURCE = (
    "The widget service listens on port 8443 [Source 1]. "
    "It stores its data in a Cassandra cluster in Frankfurt [Source 1]."
)
UNCITED = "The widget service listens on port 8443."
JUDGED_FAITHFUL = '{"faithful": true, "unsupported_claims": [], "confidence": 0.95}'
CONTEXT = (
    "[Source 1] Widget service (docs/widgets.md)\n"
    "The widget service listens on port 8443 and terminates TLS itself.\n\n"
    "[Source 2] Gardening handbook (books/garden.pdf, page 12)\n"
    "Tomato plants need at least six hours of direct sunlight every day."
)

Chat = Callable[..., FakeChat]


@pytest.fixture
def corpus(db: str, local_embedder: Any, monkeypatch: pytest.MonkeyPatch) -> str:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "PGRAG_CHAT_MODEL", "PGRAG_TENANT"):
        monkeypatch.delenv(name, raising=False)
    seed_corpus(db, local_embedder)
    return db


def ask(dsn: str, *args: str, answer: str | None = None) -> Any:
    """``pgrag ask QUESTION -k 1 ARGS`` (one source: the widget service's)."""
    extra = ["--answer", answer] if answer is not None else []
    return CliRunner().invoke(main, ["--dsn", dsn, "ask", QUESTION, "-k", "1", *args, *extra])


def one_error_line(result: Any) -> str:
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    assert lines[0].startswith("Error: ")
    return lines[0]


def usage(dsn: str, operation: str) -> list[tuple[Any, ...]]:
    with connect(dsn) as conn:
        return conn.execute(
            "select model, sum(requests)::int, sum(input_tokens)::int, sum(output_tokens)::int "
            "from pgrag.token_usage where operation = %s group by 1 order by 1",
            (operation,),
        ).fetchall()


# -- sentences and citations -----------------------------------------------------------------


def test_sentences_carry_their_citations_and_lead_ins_are_exempt() -> None:
    answer = (
        "In summary:\n"
        "- Port 8443, e.g. for clients [Source 1].\n"
        "- TLS is terminated by the service. [Source 1][Source 2]\n"
        "Tomatoes need sun [Sources 2, 3]. The sources do not contain the release date."
    )
    found = [(s.text, s.sources, s.exempt) for s in answer_sentences(answer)]
    assert found == [
        ("In summary:", (), True),
        ("Port 8443, e.g. for clients [Source 1].", (1,), False),
        ("TLS is terminated by the service. [Source 1][Source 2]", (1, 2), False),
        ("Tomatoes need sun [Sources 2, 3].", (2, 3), False),
        ("The sources do not contain the release date.", (), True),
    ]
    assert answer_sentences("Port 8443 [Source 1].")[0].claim == "Port 8443."


def test_sources_are_read_from_the_context_by_their_numbered_headers() -> None:
    texts = context_sources(CONTEXT + "\nAs [Source 1] says: quoted, not a header.")
    assert texts[1] == "The widget service listens on port 8443 and terminates TLS itself."
    assert texts[2].startswith("Tomato plants") and texts[2].endswith("quoted, not a header.")


# -- the judge's reply ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "says"),
    [
        ("The answer looks fine to me.", "replied with no JSON object"),
        ('["faithful", true]', "replied with JSON list, not an object"),
        ('{"faithful": true, "confidence": 0.9}', "left out unsupported_claims"),
        ('{"faithful": "yes", "unsupported_claims": [], "confidence": 1}', "gave faithful"),
        ('{"faithful": true, "unsupported_claims": "none", "confidence": 1}', "not a list"),
        ('{"faithful": true, "unsupported_claims": [], "confidence": 7}', "gave confidence 7"),
        ('{"faithful": true, "unsupported_claims": [], "confidence": true}', "confidence True"),
    ],
)
def test_a_malformed_judgement_is_one_line_saying_what_is_wrong(reply: str, says: str) -> None:
    with pytest.raises(CheckFailed) as info:
        parse_judgement(reply, "http://judge/v1 (model m)")
    message = str(info.value)
    assert says in message and "\n" not in message
    assert message.startswith("the answer check's judge http://judge/v1 (model m) ")


def test_a_judgement_in_a_code_fence_is_read() -> None:
    judgement = parse_judgement(f"```json\n{JUDGED_FAITHFUL}\n```", "judge")
    assert (judgement.faithful, judgement.unsupported_claims, judgement.confidence) == (
        True,
        [],
        0.95,
    )


# -- pgrag ask --check llm ----------------------------------------------------------------------


def test_llm_check_shows_a_faithful_answer_with_its_verdict(corpus: str, openai_chat: Chat) -> None:
    chat = openai_chat(FAITHFUL, JUDGED_FAITHFUL)
    result = ask(corpus, "--check", "llm")
    assert result.exit_code == 0, result.output
    assert result.output.startswith(FAITHFUL + "\n\n")
    assert "Check: 2 of 2 sentences supported, confidence 0.95 (llm, gpt-4o-mini)." in result.output
    assert "Sources:" in result.output
    judge = chat.bodies[1]
    assert judge["response_format"] == {"type": "json_object"}
    assert judge["messages"][0] == {"role": "system", "content": JUDGE_PROMPT}
    prompt = judge["messages"][1]["content"]
    assert "8443 and terminates TLS itself" in prompt and f"Question: {QUESTION}" in prompt
    assert "1. The widget service listens on port 8443 [Source 1]." in prompt
    assert "2. It terminates TLS itself [Source 1]." in prompt


def test_llm_check_withholds_an_answer_the_judge_finds_unfaithful(
    corpus: str, openai_chat: Chat
) -> None:
    claim = "It stores its data in a Cassandra cluster in Frankfurt [Source 1]."
    judged = json.dumps({"faithful": False, "unsupported_claims": [claim], "confidence": 0.9})
    openai_chat(OFF_SOURCE, judged)
    result = ask(corpus, "--check")  # llm: a chat endpoint is configured
    assert result.exit_code == 4
    line = one_error_line(result)
    assert line.startswith("Error: answer withheld: confidence 0.00 is below --min-confidence 0.8")
    assert "(1 of 2 sentences supported, llm check)" in line and "Cassandra" in line
    assert "8443" not in line.split(";")[0]  # the answer itself is not shown


def test_llm_check_fails_an_uncited_sentence_the_judge_accepts(
    corpus: str, openai_chat: Chat
) -> None:
    openai_chat(UNCITED, '{"faithful": true, "unsupported_claims": [], "confidence": 1}')
    result = ask(corpus, "--check", "llm")
    assert result.exit_code == 4
    assert "no [Source N] citation" in one_error_line(result)


@pytest.mark.parametrize(
    ("reply", "says"),
    [
        ("Looks faithful.", "replied with no JSON object"),
        ('{"faithful": true}', "left out unsupported_claims, confidence"),
        ('{"faithful": true, "unsupported_claims": [], "confidence": 7}', "gave confidence 7"),
    ],
)
def test_llm_check_with_a_malformed_reply_exits_1_with_one_line(
    corpus: str, openai_chat: Chat, reply: str, says: str
) -> None:
    openai_chat(FAITHFUL, reply)
    result = ask(corpus, "--check", "llm")
    assert result.exit_code == 1
    line = one_error_line(result)
    assert line.startswith("Error: the answer check's judge ") and says in line
    assert "--check local" in line


def test_llm_check_asks_again_without_json_mode_when_the_endpoint_refuses_it(
    corpus: str, openai_chat: Chat
) -> None:
    chat = openai_chat(FAITHFUL, JUDGED_FAITHFUL, refuse_json_mode=True)
    result = ask(corpus, "--check", "llm")
    assert result.exit_code == 0, result.output
    assert ["response_format" in body for body in chat.bodies] == [False, True, False]


def test_llm_check_records_the_judges_tokens_as_chat_usage(corpus: str, openai_chat: Chat) -> None:
    openai_chat(FAITHFUL, JUDGED_FAITHFUL)
    result = ask(corpus, "--chat-model", "writer", "--check", "llm", "--check-model", "judge")
    assert result.exit_code == 0, result.output
    # (model, requests, input, output): the answer was the server's first reply, the judgement
    # its second (prompt tokens 100 per position, completion tokens the reply's words).
    assert usage(corpus, "chat") == [
        ("judge", 1, 200, len(JUDGED_FAITHFUL.split())),
        ("writer", 1, 100, len(FAITHFUL.split())),
    ]


def test_llm_check_records_the_tokens_of_a_malformed_reply_too(
    corpus: str, openai_chat: Chat
) -> None:
    openai_chat(FAITHFUL, "not JSON at all")
    assert ask(corpus, "--check", "llm", "--check-model", "judge").exit_code == 1
    assert ("judge", 1, 200, 4) in usage(corpus, "chat")  # "not JSON at all": 4 words


def test_check_json_carries_the_verdict_of_every_sentence(corpus: str, openai_chat: Chat) -> None:
    openai_chat(FAITHFUL + "\nIn summary:", JUDGED_FAITHFUL)
    result = ask(corpus, "--check", "llm", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["answer"] == FAITHFUL + "\nIn summary:"
    check = data["check"]
    assert {k: check[k] for k in ("checker", "model", "confidence", "withheld", "reason")} == {
        "checker": "llm",
        "model": "gpt-4o-mini",
        "confidence": 0.95,
        "withheld": False,
        "reason": None,
    }
    assert (check["min_confidence"], check["faithful"], check["unsupported_claims"]) == (
        0.8,
        True,
        [],
    )
    assert check["sentences"] == [
        {
            "sentence": "The widget service listens on port 8443 [Source 1].",
            "sources": [1],
            "supported": True,
            "exempt": False,
            "score": None,
            "reason": "not flagged",
        },
        {
            "sentence": "It terminates TLS itself [Source 1].",
            "sources": [1],
            "supported": True,
            "exempt": False,
            "score": None,
            "reason": "not flagged",
        },
        {
            "sentence": "In summary:",
            "sources": [],
            "supported": True,
            "exempt": True,
            "score": None,
            "reason": "exempt",
        },
    ]


def test_check_json_of_a_withheld_answer_has_no_answer_and_exits_4(
    corpus: str, openai_chat: Chat
) -> None:
    openai_chat(UNCITED, JUDGED_FAITHFUL)
    result = CliRunner().invoke(
        main, ["--dsn", corpus, "ask", QUESTION, "-k", "1", "--check", "llm", "--json"]
    )
    assert result.exit_code == 4
    data = json.loads(result.stdout)
    assert data["answer"] is None and data["check"]["withheld"] is True
    assert data["check"]["reason"].startswith("confidence 0.00 is below --min-confidence 0.8")
    assert data["check"]["sentences"][0]["reason"] == "no [Source N] citation"
    assert result.stderr.startswith("Error: answer withheld: ")


# -- pgrag ask --check local ------------------------------------------------------------------


def test_local_check_shows_a_faithful_answer(corpus: str, openai_chat: Chat) -> None:
    openai_chat(FAITHFUL)
    result = ask(corpus, "--check", "local", "--json")
    assert result.exit_code == 0, result.output
    check = json.loads(result.output)["check"]
    assert (check["checker"], check["confidence"]) == ("local", 1.0)
    assert check["model"] == "sentence-transformers/all-MiniLM-L6-v2"
    scores = [s["score"] for s in check["sentences"]]
    assert scores[0] > 0.8 and scores[1] > 0.55  # "It terminates TLS itself": 0.57
    assert all(s["supported"] for s in check["sentences"])


def test_local_check_withholds_a_sentence_its_source_does_not_discuss(
    corpus: str, openai_chat: Chat
) -> None:
    openai_chat(OFF_SOURCE)
    result = ask(corpus, "--check", "local")
    assert result.exit_code == 4
    line = one_error_line(result)
    assert "(1 of 2 sentences supported, local check)" in line
    assert "Cassandra" in line and "best match in [Source 1] scores 0.11, below 0.55" in line


def test_local_check_fails_a_sentence_citing_the_wrong_source(
    corpus: str, openai_chat: Chat
) -> None:
    openai_chat("Tomato plants need six hours of direct sunlight a day [Source 1].")
    result = ask(corpus, "--check", "local", "--json")
    assert result.exit_code == 4
    (sentence,) = json.loads(result.stdout)["check"]["sentences"]
    assert sentence["supported"] is False and sentence["score"] < 0.3


def test_local_check_fails_an_uncited_sentence(corpus: str, openai_chat: Chat) -> None:
    openai_chat(UNCITED)
    result = ask(corpus, "--check", "local")
    assert result.exit_code == 4
    assert "no [Source N] citation" in one_error_line(result)


def test_local_check_of_a_given_answer_needs_no_endpoint(corpus: str) -> None:
    result = ask(corpus, answer=FAITHFUL)  # --answer alone: --check, local without an endpoint
    assert result.exit_code == 0, result.output
    assert result.output.startswith(FAITHFUL + "\n\nCheck: 2 of 2 sentences supported")
    # The question's embedding, then the check's sentences and passages.
    ((model, requests, tokens, _),) = usage(corpus, "query")
    assert (model, requests) == ("sentence-transformers/all-MiniLM-L6-v2", 2) and tokens > 20


def test_a_lower_min_confidence_shows_the_answer_with_its_unsupported_sentences(
    corpus: str,
) -> None:
    result = ask(corpus, "--min-confidence", "0.5", answer=OFF_SOURCE)
    assert result.exit_code == 0, result.output
    assert "Check: 1 of 2 sentences supported, confidence 0.50 (local," in result.output
    assert "  unsupported: 'It stores its data in a Cassandra cluster" in result.output


def test_check_without_an_answer_to_check_is_one_line(corpus: str) -> None:
    result = ask(corpus, "--check")
    assert result.exit_code == 1
    assert "no chat endpoint is configured" in one_error_line(result)


def test_check_with_context_only_is_a_usage_error(corpus: str) -> None:
    result = ask(corpus, "--check", "--context-only")
    assert result.exit_code == 2
    assert "--context-only has none" in result.output


# -- a cross-encoder instead of cosine similarity -----------------------------------------------


class SharedWords:
    """A cross-encoder stand-in whose scores are known: the share of the query's words that
    the passage holds."""

    name = "shared-words"

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[str]]] = []

    def score(self, query: str, documents: Sequence[str]) -> list[float]:
        self.calls.append((query, list(documents)))
        words = set(query.lower().rstrip(".").split())
        return [len(words & set(d.lower().rstrip(".").split())) / len(words) for d in documents]


def test_local_check_uses_a_cross_encoder_when_one_is_given(local_embedder: Any) -> None:
    scorer = SharedWords()
    answer = (
        "The widget service listens on port 8443 [Source 1]. "
        "Tomatoes grow best in shade [Source 2]."
    )
    options = CheckOptions("local", min_support=0.6)
    result = check_answer(
        QUESTION, answer, CONTEXT, options, embedder=local_embedder, scorer=scorer
    )
    assert result.model == "shared-words"
    assert [(v.supported, v.score) for v in result.verdicts] == [(True, 1.0), (False, 0.0)]
    assert scorer.calls[0] == (
        "The widget service listens on port 8443.",
        ["The widget service listens on port 8443 and terminates TLS itself."],
    )


def test_a_cross_encoder_returning_too_few_scores_is_one_line(local_embedder: Any) -> None:
    class Short(SharedWords):
        def score(self, query: str, documents: Sequence[str]) -> list[float]:
            return []

    with pytest.raises(CheckFailed, match="returned 0 scores for 1 passages"):
        check_answer(
            QUESTION,
            FAITHFUL,
            CONTEXT,
            CheckOptions("local"),
            embedder=local_embedder,
            scorer=Short(),
        )


def test_a_refusal_needs_no_citation(corpus: str) -> None:
    refusal = "The sources do not contain enough information to answer."
    result = ask(corpus, answer=refusal)
    assert result.exit_code == 0, result.output
    assert "Check: 0 of 0 sentences supported, confidence 1.00 (local," in result.output


def test_an_empty_answer_is_a_usage_error(corpus: str) -> None:
    result = ask(corpus, answer="  ")
    assert result.exit_code == 2
    assert "must not be empty" in result.output


def test_a_nan_min_support_is_a_usage_error(corpus: str) -> None:
    result = ask(corpus, "--min-support", "nan", answer=FAITHFUL)
    assert result.exit_code == 2
    assert "not NaN" in result.output


def test_a_judge_finding_an_unmatched_claim_is_shown_below_min_confidence_0(
    corpus: str, openai_chat: Chat
) -> None:
    judged = json.dumps(
        {"faithful": False, "unsupported_claims": ["Widgets are blue."], "confidence": 0.7}
    )
    openai_chat(FAITHFUL, judged)
    result = ask(corpus, "--check", "llm", "--min-confidence", "0")
    assert result.exit_code == 0, result.output
    assert "Check: 2 of 2 sentences supported, confidence 0.00 (llm," in result.output
    assert "  the judge found the answer unfaithful: 'Widgets are blue.'" in result.output


def test_a_cross_encoder_returning_nan_is_one_line(local_embedder: Any) -> None:
    class Broken(SharedWords):
        def score(self, query: str, documents: Sequence[str]) -> list[float]:
            return [float("nan")] * len(documents)

    with pytest.raises(CheckFailed, match="returned a score that is not a number"):
        check_answer(
            QUESTION,
            FAITHFUL,
            CONTEXT,
            CheckOptions("local"),
            embedder=local_embedder,
            scorer=Broken(),
        )
