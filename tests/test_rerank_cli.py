"""Re-ranking through the commands: `pgrag search --rerank` and `pgrag eval --rerank`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from plugins.rerank import Failure, RerankApi
from plugins.search_corpus import seed_corpus

from pgrag.cli import main


@pytest.fixture
def corpus(db: str, local_embedder: Any, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.delenv("PGRAG_TENANT", raising=False)
    seed_corpus(db, local_embedder)
    return db


def run(dsn: str, *args: str) -> Any:
    return CliRunner().invoke(main, ["--dsn", dsn, "search", *args])


def by_length(query: str, document: str) -> float:
    """A re-ranker that prefers short documents: an order unlike the search's."""
    return -float(len(document))


def test_search_json_carries_the_rerankers_score_and_rank(
    corpus: str, rerank_api: RerankApi
) -> None:
    rerank_api.scoring = by_length
    query = "widget service port"
    plain = json.loads(run(corpus, query, "-k", "20", "--json").output)
    result = run(corpus, query, "-k", "3", "--rerank", rerank_api.url, "--json")
    assert result.exit_code == 0, result.output
    hits = json.loads(result.output)
    assert len(hits) == 3 and [h["rank"] for h in hits] == [1, 2, 3]
    assert [h["rerank_rank"] for h in hits] == [1, 2, 3]
    shortest = sorted(plain, key=lambda h: (len(h["content"]), h["rank"]))[:3]
    assert [h["chunk_id"] for h in hits] == [h["chunk_id"] for h in shortest]
    fused = {h["chunk_id"]: h for h in plain}
    for h in hits:
        assert h["rerank_score"] == -float(len(h["content"]))
        before = fused[h["chunk_id"]]
        assert h["fused_rank"] == before["rank"] and h["score"] == before["score"]
        assert (h["vector_rank"], h["keyword_rank"]) == (
            before["vector_rank"],
            before["keyword_rank"],
        )
    (body,) = rerank_api.bodies
    assert body["query"] == query and len(body["documents"]) == len(plain)  # <= 50 candidates


def test_rerank_top_bounds_the_candidates_sent(corpus: str, rerank_api: RerankApi) -> None:
    result = run(corpus, "widget", "-k", "1", "--rerank", rerank_api.url, "--rerank-top", "2")
    assert result.exit_code == 0, result.output
    assert len(rerank_api.bodies[0]["documents"]) == 2


def test_explain_shows_the_rerank_beside_each_arm(corpus: str, rerank_api: RerankApi) -> None:
    result = run(
        corpus, "ERR-4471 upload quota", "--explain", "-k", "2", "--rerank", rerank_api.url
    )
    assert result.exit_code == 0, result.output
    why = [line for line in result.output.splitlines() if line.strip().startswith("why:")]
    assert len(why) == 2
    assert "vector #" in why[0] and "keyword #" in why[0] and "weighted score" in why[0]
    assert "-> re-ranked #1 from #" in why[0] and "re-ranked #2 from #" in why[1]


def test_the_rerank_environment_variable_turns_it_on(
    corpus: str, rerank_api: RerankApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PGRAG_RERANK", rerank_api.url)
    hits = json.loads(run(corpus, "widget", "-k", "1", "--json").output)
    assert hits[0]["rerank_rank"] == 1 and len(rerank_api.bodies) == 1


def test_a_bad_rerank_spec_is_one_line_and_exit_2(corpus: str) -> None:
    result = run(corpus, "widget", "--rerank", "cohere")
    assert result.exit_code == 2
    assert "--rerank 'cohere' names no re-ranker: use local:MODEL" in result.output


def test_a_failing_rerank_api_is_one_line_and_exit_1(corpus: str, rerank_api: RerankApi) -> None:
    rerank_api.failures = [Failure(400, body='{"message": "top_n too large"}')]
    result = run(corpus, "widget", "--rerank", rerank_api.url)
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "answered HTTP 400" in lines[0] and "top_n too large" in lines[0]


def test_search_with_a_local_cross_encoder(corpus: str, tiny_cross_encoder: Path) -> None:
    result = run(
        corpus, "widget port", "-k", "2", "--rerank", f"local:{tiny_cross_encoder}", "--json"
    )
    assert result.exit_code == 0, result.output
    hits = json.loads(result.output)
    scores = [h["rerank_score"] for h in hits]
    assert len(hits) == 2 and scores == sorted(scores, reverse=True)


# -- eval --------------------------------------------------------------------------------------

CORPUS = [
    {"_id": "err", "title": "Error codes", "text": "ERR-4471 means the upload quota was hit."},
    {"_id": "garden", "title": "Tomatoes", "text": "Tomato plants need six hours of sunlight."},
    {
        "_id": "brew",
        "title": "Brewing log",
        "text": "Zymurgy notes: zymurgy is the study of fermentation; zymurgy zymurgy.",
    },
    {
        "_id": "b",
        "title": "Library catalogue",
        "text": "The library holds one old book on zymurgy among its many volumes on history.",
    },
    {"_id": "pasta", "title": "Pasta", "text": "Boil pasta in salted water for nine minutes."},
    {"_id": "quota", "title": "Quotas", "text": "Upload quota: each account has an upload quota."},
]
QUERIES = {"q1": "ERR-4471 upload quota", "q2": "zymurgy", "q3": "tomato sunlight"}
QRELS = [("q1", "err", 2), ("q1", "quota", 1), ("q2", "b", 1), ("q3", "garden", 1)]


@pytest.fixture
def judged(tmp_path: Path) -> Path:
    root = tmp_path / "judged"
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text("\n".join(json.dumps(d) for d in CORPUS) + "\n")
    queries = [{"_id": q, "text": t} for q, t in QUERIES.items()]
    (root / "queries.jsonl").write_text("\n".join(json.dumps(q) for q in queries) + "\n")
    lines = ["query-id\tcorpus-id\tscore", *(f"{q}\t{d}\t{s}" for q, d, s in QRELS)]
    (root / "qrels" / "test.tsv").write_text("\n".join(lines) + "\n")
    return root


def judged_relevance(query: str, document: str) -> float:
    """The re-ranker that knows the judgements: a chunk scores its document's judged grade."""
    qid = next(q for q, text in QUERIES.items() if text == query)
    texts = {d["_id"]: d["text"] for d in CORPUS}
    return float(sum(grade for q, d, grade in QRELS if q == qid and texts[d] in document))


def test_eval_rerank_with_the_judgements_reaches_the_judged_maximum(
    db: str, judged: Path, local_embedder: Any, rerank_api: RerankApi
) -> None:
    rerank_api.scoring = judged_relevance
    args = ["--dsn", db, "eval", str(judged), "--mode", "keyword", "--mode", "hybrid"]
    result = CliRunner().invoke(main, [*args, "--rerank", rerank_api.url, "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert list(report) == ["keyword", "hybrid", "keyword+rerank", "hybrid+rerank"]
    assert report["keyword"]["ndcg@10"] < 1.0  # the brewing log outranks the catalogue
    assert report["keyword+rerank"]["ndcg@10"] == pytest.approx(1.0)
    assert report["hybrid+rerank"]["ndcg@10"] == pytest.approx(1.0)
    assert report["keyword+rerank"]["mrr@10"] == pytest.approx(1.0)
    # every query was re-ranked (for the metrics, then timed), each mode after a warm-up
    assert len(rerank_api.bodies) == 2 * (2 * len(QUERIES) + 1)
    assert {b["query"] for b in rerank_api.bodies} == set(QUERIES.values())


# -- ask ---------------------------------------------------------------------------------------


def test_ask_rerank_builds_the_context_in_the_rerankers_order(
    corpus: str, rerank_api: RerankApi
) -> None:
    rerank_api.scoring = by_length
    question = "Which port does the widget service listen on?"
    args = ["--dsn", corpus, "ask", question, "--context-only", "--json", "--min-score", "-1"]
    result = CliRunner().invoke(main, [*args, "--rerank", rerank_api.url, "-k", "3"])
    assert result.exit_code == 0, result.output
    sources = json.loads(result.output)["sources"]
    assert len(sources) == 3
    scores = [s["score"] for s in sources]
    assert scores == sorted(scores, reverse=True) and all(s < 0 for s in scores)  # -length
    (body,) = rerank_api.bodies
    assert sorted(len(d) for d in body["documents"])[:3] == [-s for s in scores]


def test_ask_rerank_below_the_floor_finds_nothing(corpus: str, rerank_api: RerankApi) -> None:
    args = ["--dsn", corpus, "ask", "zzqx vlorp frabjous", "--context-only", "--json"]
    result = CliRunner().invoke(main, [*args, "--rerank", rerank_api.url])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["found"] is False and rerank_api.bodies == []


def test_ask_check_local_scores_support_with_the_reranker(
    corpus: str, rerank_api: RerankApi
) -> None:
    rerank_api.scoring = lambda query, document: 0.0  # the re-ranker supports nothing
    question = "Which port does the widget service listen on?"
    answer = "The widget service listens on port 8443 [Source 1]."
    args = ["--dsn", corpus, "ask", question, "--answer", answer, "--check", "local"]
    result = CliRunner().invoke(main, [*args, "--rerank", rerank_api.url, "--min-score", "-1"])
    assert result.exit_code == 4, result.output  # withheld: no sentence supported
    checked = [b for b in rerank_api.bodies if b["query"].startswith("The widget service")]
    assert checked, "the check's sentence was never sent to the re-ranker"
