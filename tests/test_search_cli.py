"""`pgrag search` end to end: a small corpus in a real database, the real model, the SQL API."""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner
from plugins.search_corpus import seed_corpus

from pgrag.cli import main


@pytest.fixture
def corpus(db: str, local_embedder: Any, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.delenv("PGRAG_TENANT", raising=False)
    seed_corpus(db, local_embedder)
    return db


def run(dsn: str, *args: str) -> Any:
    return CliRunner().invoke(main, ["--dsn", dsn, "search", *args])


def search_json(dsn: str, *args: str) -> list[dict[str, Any]]:
    result = run(dsn, *args, "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert isinstance(data, list)
    return data


def test_readable_output(corpus: str) -> None:
    result = run(corpus, "Which port does the widget service listen on?", "-k", "3")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith("1. Widget service  (score ")
    assert "docs/widgets.md · Widgets > Networking · chunk 0" in lines[1]
    assert "listens on port 8443" in result.output
    assert "2. " in result.output and "4. " not in result.output
    assert "Other tenant secret" not in result.output


def test_json_shape(corpus: str) -> None:
    hits = search_json(corpus, "widget service port", "-k", "4")
    assert 1 <= len(hits) <= 4
    assert [h["rank"] for h in hits] == list(range(1, len(hits) + 1))
    expected = {
        "rank", "score", "chunk_id", "document_id", "chunk_index", "title", "source_uri",
        "source_type", "page", "heading_path", "content", "vector_rank", "vector_score",
        "keyword_rank", "keyword_score", "first_chunk_index", "last_chunk_index",
    }  # fmt: skip
    assert all(set(h) == expected for h in hits)
    top = hits[0]
    assert top["title"] == "Widget service" and top["heading_path"] == ["Widgets", "Networking"]
    assert top["vector_rank"] is not None and top["keyword_rank"] is not None
    scores = [h["score"] for h in hits]
    assert scores == sorted(scores, reverse=True)


def test_modes_and_explain(corpus: str) -> None:
    # The identifier is found by the keyword arm; a paraphrase by the vector arm.
    keyword = search_json(corpus, "ERR-4471", "--mode", "keyword", "-k", "3")
    assert keyword[0]["title"] == "Error codes"
    assert keyword[0]["keyword_score"] > 0 and keyword[0]["vector_rank"] is None
    vector = search_json(corpus, "how much sun do tomatoes want", "--mode", "vector", "-k", "1")
    assert vector[0]["title"] == "Gardening handbook" and vector[0]["page"] == 12
    assert 0 < vector[0]["score"] <= 1 and vector[0]["keyword_rank"] is None

    result = run(corpus, "ERR-4471 upload quota", "--explain", "-k", "2")
    assert result.exit_code == 0, result.output
    why = [line for line in result.output.splitlines() if line.strip().startswith("why:")]
    assert len(why) == 2
    assert "vector #" in why[0] and "keyword #" in why[0] and "weighted score" in why[0]

    result = run(corpus, "ERR-4471", "--mode", "keyword", "--explain", "-k", "1")
    assert "why: keyword #1 (BM25 " in result.output


def test_filters(corpus: str) -> None:
    hits = search_json(corpus, "service", "--source-type", "pdf", "-k", "5")
    assert hits and {h["source_type"] for h in hits} == {"pdf"}
    hits = search_json(corpus, "image", "--metadata", '{"team": "ops"}', "-k", "10")
    assert hits and {h["title"] for h in hits} <= {"Widget service", "Deployment guide"}
    # k rows come back when k exist (filters inside the search, not after it)
    hits = search_json(corpus, "unrelated words", "--metadata", '{"team": "ops"}', "-k", "4")
    assert len(hits) == 4
    one = search_json(corpus, "image", "--document-id", str(hits[0]["document_id"]))
    assert {h["document_id"] for h in one} == {hits[0]["document_id"]}
    none = search_json(corpus, "widget", "--after", "2999-01-01")
    assert none == []
    assert search_json(corpus, "widget", "--before", "2999-01-01")


def test_tenant_scoping(corpus: str, monkeypatch: pytest.MonkeyPatch) -> None:
    mine = search_json(corpus, "widget service port", "-k", "10")
    assert "Other tenant secret" not in {h["title"] for h in mine}
    theirs = search_json(corpus, "widget service port", "--tenant", "other")
    assert {h["title"] for h in theirs} == {"Other tenant secret"}
    monkeypatch.setenv("PGRAG_TENANT", "other")
    assert {h["title"] for h in search_json(corpus, "widget")} == {"Other tenant secret"}
    result = run(corpus, "widget", "--tenant", "nobody")  # an unknown tenant is said so
    assert result.exit_code == 3 and "tenant 'nobody' has no documents" in result.output


def test_nothing_found(corpus: str) -> None:
    result = run(corpus, "quantum chromodynamics of gluons", "--min-score", "1e9")
    assert result.exit_code == 0
    assert result.output.strip() == "No relevant information found."
    assert search_json(corpus, "quantum chromodynamics", "--min-score", "1e9") == []
    result = run(corpus, "gluon", "--mode", "vector", "--min-score", "0.99")
    assert result.exit_code == 0 and result.output.strip() == "No relevant information found."


def test_a_window_shows_the_chunks_its_text_spans(corpus: str) -> None:
    query = "push the image to the registry"
    (hit,) = search_json(corpus, query, "--window", "1", "-k", "1")
    assert hit["title"] == "Deployment guide" and hit["chunk_index"] == 1  # the best hit
    assert (hit["first_chunk_index"], hit["last_chunk_index"]) == (0, 2)
    assert hit["content"].startswith("Build the release image")  # chunk 0's text first
    result = run(corpus, query, "--window", "1", "-k", "1")
    assert "docs/deploy.md · Deploy · chunks 0–2" in result.output
    (plain,) = search_json(corpus, query, "-k", "1")
    assert (plain["first_chunk_index"], plain["last_chunk_index"]) == (1, 1)
    assert "· chunk 1\n" in run(corpus, query, "-k", "1").output


def test_window_and_mmr_options(corpus: str) -> None:
    hits = search_json(corpus, "push the image to the registry", "--window", "1", "-k", "1")
    assert hits and hits[0]["title"] == "Deployment guide"
    # the neighbours of the hit are merged into its content, each sentence once
    content = hits[0]["content"]
    for sentence in ("make image", "Push the image", "kubectl apply"):
        assert content.count(sentence) == 1, content
    assert search_json(corpus, "deploy the image", "--mmr", "0.5", "-k", "3")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--mode", "vector", "--window", "1"], "--window only applies to hybrid search"),
        (["--mode", "keyword", "--mmr", "0.5", "--fusion", "rrf"], "--mmr, --fusion only apply"),
        (["--metadata", "{not json"], "Invalid value for '--metadata': not valid JSON"),
        (["--metadata", "[1]"], "Invalid value for '--metadata': takes a JSON object"),
        (["--mode", "keyword", "--min-score", "1"], "BM25 scores have no fixed scale"),
        (["--min-score", "nan"], "Invalid value for '--min-score': must be a number"),
        (["--mode", "telepathic"], "Invalid value for '--mode'"),
    ],
)
def test_a_bad_option_value_or_combination_is_a_usage_error(args: list[str], message: str) -> None:
    # Exit 2 like every usage error, before the database is touched (it is unreachable here).
    result = run("postgresql://nobody@127.0.0.1:1/none", "x", *args)
    assert result.exit_code == 2, result.output
    assert message in result.output and "search --help')" in result.output


@pytest.mark.parametrize("command", [["search", "x"], ["ask", "x?"], ["ingest", "."]])
def test_invalid_metadata_json_exits_2_from_every_command_taking_it(command: list[str]) -> None:
    result = CliRunner().invoke(
        main, ["--dsn", "postgresql://nobody@127.0.0.1:1/none", *command, "--metadata", "{"]
    )
    assert result.exit_code == 2, result.output
    assert "Invalid value for '--metadata': not valid JSON" in result.output


@pytest.mark.parametrize("command", ["search", "ask"])
def test_blank_query_is_refused_before_touching_the_database(command: str) -> None:
    result = CliRunner().invoke(
        main, ["--dsn", "postgresql://nobody@127.0.0.1:1/none", command, "  "]
    )

    assert result.exit_code == 2
    assert "must not be empty" in result.output


def test_click_strings_become_the_literal_types_at_the_boundary() -> None:
    import click

    from pgrag.cli.common import literal
    from pgrag.search import FUSIONS, MODES

    assert [literal(m, MODES) for m in ("hybrid", "vector", "keyword")] == list(MODES)
    assert literal("rrf", FUSIONS) == "rrf"
    with pytest.raises(click.BadParameter, match="'fuzzy' is not one of rrf, weighted"):
        literal("fuzzy", FUSIONS)
