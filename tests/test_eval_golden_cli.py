"""`pgrag eval --golden` end to end: the sample documents ingested for real, searched by the SQL
functions with the real model; the chat endpoint that answers and judges is the local
OpenAI-compatible server (fixture ``openai_chat``) replying what each test scripts."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from plugins.openai_server import FakeChat
from plugins.rerank import RerankApi
from pytest_httpserver import HTTPServer

from pgrag.answer import SYSTEM_PROMPT
from pgrag.cli import main
from pgrag.db import connect
from pgrag.eval.judges import PROMPTS
from pgrag.ingest import ExtractedDocument, ingest_documents
from pgrag.pipeline.extract import extract_path

REPO = Path(__file__).resolve().parents[1]
Chat = Callable[..., FakeChat]

PORT_QUESTION = "Which port does the widget service listen on?"
PORT_ANSWER = "The widget service listens on port 8443 [Source 1]. It terminates TLS [Source 1]."
SUPPORTED = json.dumps(
    {
        "claims": [
            {"claim": "The widget service listens on port 8443.", "supported": True},
            {"claim": "The widget service terminates TLS.", "supported": True},
        ]
    }
)
RELEVANT = json.dumps({"questions": [PORT_QUESTION] * 3, "noncommittal": False})
USEFUL = json.dumps({"useful": [True]})


@pytest.fixture
def corpus(db: str, local_embedder: Any, monkeypatch: pytest.MonkeyPatch) -> str:
    """The sample Markdown and HTML files in tenant ``t``; one widget document in ``solo``."""
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "PGRAG_CHAT_MODEL", "PGRAG_TENANT"):
        monkeypatch.delenv(name, raising=False)
    samples = REPO / "samples"
    docs = [extract_path(p) for p in sorted(samples.iterdir()) if p.suffix in (".md", ".html")]
    assert not ingest_documents(db, docs, tenant="t", embedder=local_embedder).failures
    widget = ExtractedDocument.from_text(
        uri="docs/widgets.md",
        title="Widget service",
        text="The widget service listens on port 8443 and terminates TLS itself.",
    )
    assert not ingest_documents(db, [widget], tenant="solo", embedder=local_embedder).failures
    return db


def golden(tmp_path: Path, *rows: dict[str, Any]) -> Path:
    path = tmp_path / "golden.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def run(dsn: str, path: Path, *args: str) -> Result:
    return CliRunner().invoke(main, ["--dsn", dsn, "eval", "--golden", str(path), *args])


def report(result: Result) -> Any:
    return json.loads(result.stdout)


PYMUPDF = [  # keyword search: only samples/ingestion.md has the word (hand-checked with grep)
    {"id": "found", "question": "PyMuPDF", "expected_sources": ["samples/ingestion.md"]},
    {
        "id": "half",
        "question": "PyMuPDF",
        "expected_sources": ["samples/ingestion.md", "samples/release-process.md"],
    },
    {"id": "missed", "question": "PyMuPDF", "expected_sources": ["samples/release-process.md"]},
]


# -- retrieval --------------------------------------------------------------------------------


def test_retrieval_metrics_on_the_samples_match_hand_checked_ranks(
    corpus: str, tmp_path: Path
) -> None:
    result = run(corpus, golden(tmp_path, *PYMUPDF), "--tenant", "t", "--mode", "keyword", "--json")
    assert result.exit_code == 0, result.output
    data = report(result)
    keyword = data["summary"]["retrieval"]["keyword"]
    assert keyword == {"hit_rate": 0.6667, "mrr": 0.6667, "recall": 0.5, "questions": 3}
    rows = {q["id"]: q["retrieval"]["keyword"] for q in data["questions"]}
    assert [Path(uri).name for uri in rows["found"]["retrieved"]] == ["ingestion.md"]
    assert rows["half"]["expected_ranks"] == {
        "samples/ingestion.md": 1,
        "samples/release-process.md": None,
    }
    assert (rows["half"]["recall"], rows["missed"]["mrr"]) == (0.5, 0.0)


def test_the_sample_golden_file_finds_its_sources_first(corpus: str) -> None:
    path = REPO / "samples" / "golden.jsonl"
    result = run(corpus, path, "--tenant", "t", "--mode", "hybrid", "-k", "3", "--json")
    assert result.exit_code == 0, result.output
    hybrid = report(result)["summary"]["retrieval"]["hybrid"]
    assert hybrid["questions"] == 20  # the off-topic question has no expected source
    assert hybrid["hit_rate"] == 1.0 and hybrid["mrr"] >= 0.9


def test_a_question_sees_only_its_own_tenants_documents(corpus: str, tmp_path: Path) -> None:
    question = "How do I roll back a deploy when the error rate rises?"
    expected = ["samples/release-process.md"]
    path = golden(
        tmp_path,
        {"id": "own", "question": question, "expected_sources": expected, "tenant": "t"},
        {"id": "other", "question": question, "expected_sources": expected, "tenant": "solo"},
    )
    result = run(corpus, path, "--mode", "hybrid", "--json")
    assert result.exit_code == 0, result.output
    rows = {q["id"]: q["retrieval"]["hybrid"] for q in report(result)["questions"]}
    assert rows["own"]["hit_rate"] == 1.0
    assert rows["other"]["hit_rate"] == 0.0
    assert rows["other"]["retrieved"] == ["docs/widgets.md"]


def test_a_retrieval_threshold_gates_the_exit_status_naming_the_metric(
    corpus: str, tmp_path: Path
) -> None:
    path = golden(tmp_path, *PYMUPDF)
    passed = run(corpus, path, "--tenant", "t", "--mode", "keyword", "--min", "mrr=0.6")
    assert passed.exit_code == 0, passed.output
    assert "gates: 1 of 1 met" in passed.stdout
    failed = run(
        corpus, path, "--tenant", "t", "--mode", "keyword", "--min", "hit_rate=0.9",
        "--min", "recall=0.5",
    )  # fmt: skip
    assert failed.exit_code == 5
    assert failed.stderr.strip() == (
        "Error: golden set below threshold: hit_rate 0.6667 < 0.9 (keyword)."
    )
    assert "hit_rate@10" in failed.stdout  # the table comes first


def test_invalid_golden_lines_are_rejected_with_their_line_numbers(
    corpus: str, tmp_path: Path
) -> None:
    path = tmp_path / "golden.jsonl"
    path.write_text('{"question": "fine"}\n{"expected_sources": ["a.md"]}\n\n[1]\n')
    result = run(corpus, path)
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    assert lines == [
        f"pgrag: {path}:4: expected a JSON object, found list.",
        f"Error: {path}:2: 'question' is missing. (and 1 more invalid lines)",
    ]


def test_an_answer_threshold_without_a_chat_endpoint_is_a_usage_error(
    corpus: str, tmp_path: Path
) -> None:
    result = run(corpus, golden(tmp_path, *PYMUPDF), "--min", "faithfulness=0.7")
    assert result.exit_code == 2
    assert "--min faithfulness needs answer metrics" in result.stderr


# -- answers ----------------------------------------------------------------------------------


def port_file(tmp_path: Path) -> Path:
    return golden(
        tmp_path,
        {
            "id": "port",
            "question": PORT_QUESTION,
            "tenant": "solo",
            "expected_sources": ["docs/widgets.md"],
            "reference_answer": "The widget service listens on port 8443.",
        },
    )


def test_a_faithful_answer_scores_one_on_every_answer_metric(
    corpus: str, tmp_path: Path, openai_chat: Chat
) -> None:
    recall = json.dumps({"claims": [{"claim": "Port 8443.", "supported": True}]})
    chat = openai_chat(PORT_ANSWER, SUPPORTED, RELEVANT, USEFUL, recall)
    gates = ["--min", "faithfulness=1", "--min", "answer_relevance=0.99"]
    gates += ["--min", "context_precision=1", "--min", "context_recall=1"]
    result = run(corpus, port_file(tmp_path), "--mode", "hybrid", "--json", *gates)
    assert result.exit_code == 0, result.output
    data = report(result)
    answers = data["summary"]["answers"]
    assert answers == {
        "faithfulness": 1.0,
        "answer_relevance": 1.0,
        "context_precision": 1.0,
        "context_recall": 1.0,
        "chat_model": "gpt-4o-mini",
        "judge_model": "gpt-4o-mini",
        "judged": 1,
        "failed": 0,
    }
    answer = data["questions"][0]["answer"]
    assert (answer["answer"], answer["sources"], answer["error"]) == (
        PORT_ANSWER,
        ["docs/widgets.md"],
        None,
    )
    # the answer is asked as pgrag ask asks it; each judge with its prompt, in JSON mode
    systems = [body["messages"][0]["content"] for body in chat.bodies]
    assert systems == [SYSTEM_PROMPT, *PROMPTS.values()]
    assert "response_format" not in chat.bodies[0]
    assert all(b["response_format"] == {"type": "json_object"} for b in chat.bodies[1:])
    assert "listens on port 8443 and terminates TLS" in chat.bodies[0]["messages"][1]["content"]


def test_the_answer_and_judge_tokens_count_as_the_tenants_chat_usage(
    corpus: str, tmp_path: Path, openai_chat: Chat
) -> None:
    openai_chat(PORT_ANSWER, SUPPORTED, RELEVANT, USEFUL, SUPPORTED)
    result = run(corpus, port_file(tmp_path), "--mode", "hybrid")
    assert result.exit_code == 0, result.output
    with connect(corpus) as conn:
        rows = conn.execute(
            "select tenant_id, model, sum(requests)::int, sum(input_tokens)::int "
            "from pgrag.token_usage where operation = 'chat' group by 1, 2"
        ).fetchall()
    assert rows == [("solo", "gpt-4o-mini", 5, 100 + 200 + 300 + 400 + 500)]


def test_an_unfaithful_answer_scores_low_and_fails_its_threshold(
    corpus: str, tmp_path: Path, openai_chat: Chat
) -> None:
    unfaithful = "It listens on port 80 [Source 1]. It runs on Cassandra [Source 1]."
    verdicts = json.dumps(
        {
            "claims": [
                {"claim": "It listens on port 80.", "supported": False},
                {"claim": "It runs on Cassandra.", "supported": False},
                {"claim": "It is the widget service.", "supported": True},
            ]
        }
    )
    openai_chat(unfaithful, verdicts, RELEVANT, USEFUL, SUPPORTED)
    result = run(
        corpus, port_file(tmp_path), "--mode", "hybrid", "--min", "faithfulness=0.7", "--json"
    )
    assert result.exit_code == 5
    answer = report(result)["questions"][0]["answer"]
    assert answer["faithfulness"] == pytest.approx(0.3333)
    assert answer["judged"]["unsupported_claims"] == [
        "It listens on port 80.",
        "It runs on Cassandra.",
    ]
    assert "faithfulness 0.3333 < 0.7." in result.stderr


def test_a_malformed_judge_reply_is_an_error_entry_and_fails_the_run(
    corpus: str, tmp_path: Path, openai_chat: Chat
) -> None:
    openai_chat(PORT_ANSWER, "The answer is faithful.")
    path = port_file(tmp_path)
    result = run(corpus, path, "--mode", "hybrid", "--json")
    assert result.exit_code == 5
    data = report(result)
    assert data["summary"]["answers"]["judged"] == 0
    assert data["summary"]["answers"]["failed"] == 1
    assert data["summary"]["answers"]["faithfulness"] is None
    error = data["questions"][0]["answer"]["error"]
    assert error.startswith("the faithfulness judge replied with no JSON object")
    stderr = result.stderr.strip().splitlines()
    assert stderr[0] == f"pgrag: {path}:1 (port): not judged: {error}"
    assert (
        stderr[1] == "Error: golden set below threshold: 1 questions not judged > --max-errors 0."
    )
    tolerated = run(corpus, path, "--mode", "hybrid", "--max-errors", "1")
    assert tolerated.exit_code == 0, tolerated.output
    assert "answers: 0 judged, 1 failed" in tolerated.stdout


def test_the_json_report_holds_the_summary_thresholds_and_each_question(
    corpus: str, tmp_path: Path, openai_chat: Chat
) -> None:
    openai_chat(PORT_ANSWER, SUPPORTED, RELEVANT, USEFUL, SUPPORTED)
    result = run(corpus, port_file(tmp_path), "--min", "hit_rate=0.5", "--json")
    assert result.exit_code == 0, result.output
    data = report(result)
    assert set(data) == {"golden", "summary", "thresholds", "passed", "questions"}
    assert set(data["summary"]) == {"questions", "k", "retrieval", "answers"}
    assert list(data["summary"]["retrieval"]) == ["keyword", "vector", "hybrid", "hybrid-rrf"]
    assert len(data["thresholds"]) == 4 + 1  # hit_rate in each mode, and the errors gate
    assert data["thresholds"][0] == {
        "metric": "hit_rate", "mode": "keyword", "min": 0.5, "value": 1.0, "passed": True,
    }  # fmt: skip
    (question,) = data["questions"]
    assert set(question) == {
        "id", "line", "tenant", "question", "expected", "retrieval", "answer",
    }  # fmt: skip
    assert set(question["retrieval"]["hybrid"]) == {
        "hit_rate", "mrr", "recall", "expected_ranks", "retrieved",
    }  # fmt: skip
    assert set(question["answer"]) == {
        "answer", "sources", "faithfulness", "answer_relevance", "context_precision",
        "context_recall", "judged", "error",
    }  # fmt: skip


def test_a_question_without_context_is_not_sent_to_the_endpoint(
    corpus: str, tmp_path: Path, openai_chat: Chat
) -> None:
    chat = openai_chat(PORT_ANSWER)
    path = golden(tmp_path, {"question": "What is the capital of France?", "tenant": "solo"})
    result = run(corpus, path, "--mode", "hybrid", "--json")
    assert result.exit_code == 0, result.output
    answer = report(result)["questions"][0]["answer"]
    assert (answer["answer"], answer["sources"]) == ("No relevant information found.", [])
    assert (answer["faithfulness"], answer["answer_relevance"]) == (None, 0.0)
    assert chat.bodies == []


def test_an_endpoint_error_fails_the_question_not_the_run(
    corpus: str, tmp_path: Path, httpserver: HTTPServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    refusal = {"error": {"message": "model not found", "type": "invalid_request_error"}}
    httpserver.expect_request("/v1/chat/completions").respond_with_json(refusal, status=404)
    monkeypatch.setenv("OPENAI_BASE_URL", httpserver.url_for("/v1"))
    result = run(corpus, port_file(tmp_path), "--mode", "hybrid", "--max-errors", "1", "--json")
    assert result.exit_code == 0, result.output
    data = report(result)
    assert data["summary"]["answers"]["failed"] == 1
    assert "answered 404" in data["questions"][0]["answer"]["error"]
    assert data["questions"][0]["retrieval"]["hybrid"]["hit_rate"] == 1.0


def test_a_re_ranker_reorders_every_search_before_the_metrics(
    corpus: str, tmp_path: Path, rerank_api: RerankApi
) -> None:
    rerank_api.scoring = lambda query, text: float("widget" in text)  # release-process.md only
    path = golden(
        tmp_path, {"question": "PyMuPDF", "expected_sources": ["samples/release-process.md"]}
    )
    args = ["--tenant", "t", "--mode", "vector", "-k", "1", "--no-answers", "--json"]
    result = run(corpus, path, *args, "--rerank", rerank_api.url)
    assert result.exit_code == 0, result.output
    assert report(result)["summary"]["retrieval"] == {
        "vector+rerank": {"hit_rate": 1.0, "mrr": 1.0, "recall": 1.0, "questions": 1}
    }
    assert rerank_api.bodies[0]["query"] == "PyMuPDF"
