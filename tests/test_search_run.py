"""pgrag.search.run_search and run_context: what `pgrag search` and `pgrag ask` run, called as a
library (the commands only parse options and render what these return)."""

from __future__ import annotations

from typing import Any

import pytest
from plugins.search_corpus import seed_corpus

from pgrag.db import connect
from pgrag.search import ContextOptions, SearchOptions, run_context, run_search

QUESTION = "which port does the widget service use?"


@pytest.fixture
def corpus(db: str, local_embedder: Any) -> str:
    seed_corpus(db, local_embedder)
    with connect(db) as conn:
        conn.execute("update pgrag.settings set search_log = true")
        conn.commit()
    return db


def test_run_search_records_the_query_usage_and_logs_the_search(corpus: str) -> None:
    with connect(corpus) as conn:
        first = run_search(conn, QUESTION, SearchOptions(limit=2), tenant="default")
        again = run_search(conn, QUESTION, SearchOptions(limit=2), tenant="default")

        assert first.hits[0].title == "Widget service" and len(first.hits) == 2
        assert [h.chunk_id for h in again.hits] == [h.chunk_id for h in first.hits]
        assert first.tenant_empty is None and first.latency_ms > 0
        logged = conn.execute(
            "select tenant_id, mode, row_count from pgrag.search_log order by id"
        ).fetchall()
        assert logged == [("default", "hybrid", 2)] * 2
        model_calls = conn.execute(
            "select sum(requests)::int from pgrag.token_usage "
            "where tenant_id = 'default' and operation = 'query'"
        ).fetchone()
        assert model_calls == (1,)  # the model once, then the query-embedding cache


def test_run_context_says_why_a_tenant_without_documents_cannot_answer(corpus: str) -> None:
    with connect(corpus) as conn:
        found = run_context(conn, QUESTION, ContextOptions(), tenant="default")
        nothing = run_context(conn, QUESTION, ContextOptions(), tenant="nobody")

        assert "[Source 1]" in found.context.context and found.tenant_empty is None
        assert nothing.context.empty
        assert nothing.tenant_empty is not None and "'nobody'" in nothing.tenant_empty
        logged = conn.execute("select tenant_id, mode from pgrag.search_log order by id")
        assert logged.fetchall() == [("default", "context"), ("nobody", "context")]
