"""`pgrag facets` and `pgrag suggest` end to end: a small corpus in a real database, the SQL API."""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner
from plugins.search_corpus import seed_corpus

from pgrag.browse import suggest
from pgrag.cli import main
from pgrag.db import connect
from pgrag.search import SearchOptions, search


@pytest.fixture
def corpus(db: str, local_embedder: Any, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.delenv("PGRAG_TENANT", raising=False)
    seed_corpus(db, local_embedder)
    return db


def run(dsn: str, *args: str) -> Any:
    return CliRunner().invoke(main, ["--dsn", dsn, *args])


def test_facets_json_counts_documents_per_value(corpus: str) -> None:
    result = run(corpus, "facets", "widget image registry", "--key", "team", "--json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    got = {(r["facet"], r["value"]): r["documents"] for r in rows}
    assert got[("source_type", "markdown")] == 2
    assert got[("metadata.team", "ops")] == 2
    assert ("metadata.team", "home") not in got  # the garden book does not match
    assert {r["facet"] for r in rows} == {"source_type", "month", "metadata.team"}
    assert rows[0]["filter"] == {"source_types": ["markdown"]}


def test_facets_without_a_query_count_every_document_of_the_tenant(corpus: str) -> None:
    result = run(corpus, "facets", "--key", "team")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == "source_type"
    assert any(line.split() == ["markdown", "2"] for line in lines)
    assert "metadata.team" in lines
    # The other tenant's document (a text file without a team) is never counted.
    assert any(line.split() == ["text", "1"] for line in lines)


def test_facets_with_filters_narrow_the_counts(corpus: str) -> None:
    result = run(corpus, "facets", "--source-type", "pdf", "--key", "team", "--json")
    rows = json.loads(result.output)
    assert {(r["facet"], r["value"], r["documents"]) for r in rows if r["facet"] != "month"} == {
        ("source_type", "pdf", 1),
        ("metadata.team", "home", 1),
    }


def test_facets_of_a_query_nothing_matches_exit_3(corpus: str) -> None:
    result = run(corpus, "facets", "zzzqqq")
    assert result.exit_code == 3
    assert result.output.strip() == "Error: no document of tenant 'default' matches 'zzzqqq'."


def test_facets_refuse_eleven_keys_in_one_line(corpus: str) -> None:
    keys = [arg for i in range(11) for arg in ("--key", f"k{i}")]
    result = run(corpus, "facets", "widget", *keys)
    assert result.exit_code == 1
    assert len(result.output.strip().splitlines()) == 1
    assert "metadata_keys must have at most 10" in result.output


def test_suggest_prints_the_corrected_query(corpus: str) -> None:
    result = CliRunner().invoke(main, ["--dsn", corpus, "suggest", "widgit servise"])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0] == "widget service"
    assert "widgit -> widget" in result.stderr


def test_suggest_json_carries_the_corrections(corpus: str) -> None:
    # "tomatos" stems as "tomatoes" does: a known word, searched as it is.
    result = run(corpus, "suggest", "tomatos sunlihgt", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["query"] == "tomatos sunlihgt"
    assert data["suggested_query"] == "tomatos sunlight"
    assert [(c["word"], c["suggestion"]) for c in data["corrections"]] == [("sunlihgt", "sunlight")]
    assert 0.2 <= data["corrections"][0]["similarity"] <= 1
    assert data["corrections"][0]["edits"] == 1


def test_suggest_never_proposes_another_tenants_word(corpus: str) -> None:
    # "tenant" is a word of the other tenant's text only.
    result = run(corpus, "suggest", "tenent", "--json")
    assert "tenant" not in result.output
    other = run(corpus, "suggest", "tenent", "--tenant", "other", "--json")
    assert json.loads(other.output)["suggested_query"] == "tenant"


def test_suggest_refuses_a_blank_query(corpus: str) -> None:
    result = run(corpus, "suggest", "  ")
    assert result.exit_code == 2
    assert "must not be empty" in result.output


def test_a_corrected_query_searches_like_the_right_one(corpus: str, local_embedder: Any) -> None:
    # The library call pgrag search can make before searching ("did you mean").
    options = SearchOptions(mode="keyword", limit=5)
    with connect(corpus) as conn:
        fixed = suggest(conn, "rollng registy", tenant="default")
        assert fixed.changed and fixed.suggested_query == "rolling registry"
        found = search(conn, fixed.suggested_query, options, tenant="default")
        right = search(conn, "rolling registry", options, tenant="default")
    assert [h.chunk_id for h in found] == [h.chunk_id for h in right] != []


def search_json(dsn: str, *args: str) -> Any:
    result = run(dsn, "search", *args, "--mode", "keyword", "-k", "5", "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_search_typos_fix_finds_what_the_right_words_find(corpus: str) -> None:
    fixed = search_json(corpus, "rollng registy", "--typos", "fix")
    right = search_json(corpus, "rolling registry")
    assert fixed["searched_query"] == "rolling registry"
    assert [c["suggestion"] for c in fixed["corrections"]] == ["rolling", "registry"]
    assert [h["chunk_id"] for h in fixed["hits"]] == [h["chunk_id"] for h in right] != []


def test_search_typos_suggest_searches_the_words_as_typed(corpus: str) -> None:
    typed = search_json(corpus, "rollng registy", "--typos", "suggest")
    assert typed["searched_query"] == "rollng registy"
    assert typed["suggested_query"] == "rolling registry"
    result = run(corpus, "search", "rollng registy", "--typos", "suggest", "--mode", "keyword")
    assert result.stdout.splitlines()[0] == "Did you mean: rolling registry"


def test_search_typos_fix_says_what_it_searched(corpus: str) -> None:
    result = run(corpus, "search", "rollng registy", "--typos", "fix", "--mode", "keyword")
    assert result.exit_code == 0, result.output
    first = result.stdout.splitlines()[0]
    assert first == "Searched for: rolling registry (corrected from: rollng registy)"


def test_search_typos_never_correct_with_another_tenants_word(corpus: str) -> None:
    data = search_json(corpus, "tenent", "--typos", "fix")
    assert data["searched_query"] == "tenent" and data["corrections"] == []
