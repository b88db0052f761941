"""Token usage, cost and pgrag stats: recorded through pgrag.record_usage, priced in SQL.

The database and the local model are real; the chat endpoint of pgrag ask is a local
OpenAI-compatible server (pytest-httpserver).
"""

from __future__ import annotations

import json
from datetime import date
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner
from plugins.queue import submit_texts
from plugins.search_corpus import seed_corpus
from plugins.tenancy import Loaded, claims_for, request
from pytest_httpserver import HTTPServer

from pgrag.cli import main
from pgrag.db import connect
from pgrag.ingest import ingest_documents
from pgrag.pipeline.embedders import LocalEmbedder
from pgrag.pipeline.extract import ExtractedDocument
from pgrag.stats import tenant_stats, usage_costs
from pgrag.usage import Usage, record_usage
from pgrag.worker import QueueWorker, WorkerOptions


def invoke(dsn: str, *args: str) -> Any:
    return CliRunner().invoke(main, ["--dsn", dsn, *args])


def usage_rows(dsn: str, operation: str) -> list[tuple[Any, ...]]:
    with connect(dsn) as conn:
        return conn.execute(
            "select tenant_id, provider, model, sum(requests)::int, sum(input_tokens)::int, "
            "sum(output_tokens)::int, sum(cache_hits)::int from pgrag.token_usage "
            "where operation = %s group by 1, 2, 3 order by 1",
            (operation,),
        ).fetchall()


# -- recording ----------------------------------------------------------------------------------


def test_record_usage_adds_up_per_tenant_operation_and_model(db: str) -> None:
    with connect(db, autocommit=True) as conn:
        record_usage(conn, "acme", Usage("query", "openai", "m", 10, 0, 1, 0))
        record_usage(conn, "acme", Usage("query", "openai", "m", 5, 0, 0, 2))
        record_usage(conn, "globex", Usage("query", "openai", "m", 7))
    assert usage_rows(db, "query") == [
        ("acme", "openai", "m", 1, 15, 0, 2),
        ("globex", "openai", "m", 1, 7, 0, 0),
    ]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        ("select pgrag.record_usage('query', 'openai', 'm', 1)", "needs a tenant"),
        (
            "select pgrag.set_request_tenant('t'), pgrag.record_usage('bill', 'openai', 'm')",
            "operation must be one of",
        ),
        (
            "select pgrag.set_request_tenant('t'), pgrag.record_usage('chat', ' ', 'm')",
            "provider must be",
        ),
        (
            "select pgrag.set_request_tenant('t'), pgrag.record_usage('chat', 'openai', 'm', -1)",
            "input_tokens must be between 0 and",
        ),
        (
            "select pgrag.set_request_tenant('t'), pgrag.record_usage('chat', 'openai', 'm', 0, 0, "
            "2000000000)",
            "requests must be between 0 and",
        ),
    ],
    ids=["no-tenant", "operation", "provider", "negative-tokens", "requests"],
)
def test_record_usage_refuses_what_is_out_of_range(db: str, call: str, message: str) -> None:
    with connect(db) as conn, pytest.raises(psycopg.errors.InvalidParameterValue, match=message):
        conn.execute(call)


def test_a_tenant_reads_its_own_usage_and_can_neither_write_nor_record_it(
    two_tenants: Loaded,
) -> None:
    with connect(two_tenants.db, autocommit=True) as conn:
        record_usage(conn, "acme", Usage("chat", "openai", "gpt", 100, 20))
        record_usage(conn, "globex", Usage("chat", "openai", "gpt", 900, 90))
    with request(two_tenants.db, "authenticated", claims_for("acme")) as conn:
        rows = conn.execute("select tenant_id, input_tokens from pgrag.token_usage").fetchall()
    assert rows == [("acme", 100)]
    with request(two_tenants.db, "anon") as conn:
        assert conn.execute("select count(*) from pgrag.token_usage").fetchone() == (0,)
    for statement in (
        "update pgrag.token_usage set input_tokens = 0",
        "delete from pgrag.token_usage",
        "insert into pgrag.token_usage (tenant_id, day, operation, provider, model, shard) "
        "values ('acme', current_date, 'chat', 'x', 'y', 0)",
        "select pgrag.record_usage('chat', 'openai', 'gpt', 1)",
    ):
        with (
            pytest.raises(psycopg.errors.InsufficientPrivilege),
            request(two_tenants.db, "authenticated", claims_for("acme")) as conn,
        ):
            conn.execute(statement)


def test_ingest_records_the_tokens_the_model_read_once(
    db: str, local_embedder: LocalEmbedder
) -> None:
    docs = [
        ExtractedDocument.from_text(f"doc{i}.md", f"Document {i} explains widget {i}.")
        for i in range(3)
    ]
    summary = ingest_documents(db, docs, tenant="acme", embedder=local_embedder)
    again = ingest_documents(db, docs, tenant="acme", embedder=local_embedder)

    assert summary.chunks_embedded == 3 and again.chunks_embedded == 0
    with connect(db) as conn:
        (expected,) = conn.execute(
            "select sum(token_count + 2)::int from pgrag.chunks"  # + [CLS] and [SEP]
        ).fetchone()
    assert usage_rows(db, "ingest") == [
        ("acme", "local", local_embedder.model_name, 1, expected, 0, 0)
    ]


def test_the_worker_records_the_tokens_of_each_tenant_as_worker(
    db: str, local_embedder: LocalEmbedder
) -> None:
    submit_texts(db, "acme", [("a.txt", "Acme's note about widgets.")])
    submit_texts(db, "globex", [("b.txt", "Globex's note about gadgets."), ("c.txt", "More.")])

    QueueWorker(db, WorkerOptions(once=True), embedder=local_embedder).run()

    with connect(db) as conn:
        expected = dict(
            conn.execute(  # + [CLS] and [SEP]
                "select tenant_id, sum(token_count + 2)::int from pgrag.chunks group by 1"
            ).fetchall()
        )
    rows = usage_rows(db, "worker")
    assert [(r[0], r[1], r[2], r[4]) for r in rows] == [
        ("acme", "local", local_embedder.model_name, expected["acme"]),
        ("globex", "local", local_embedder.model_name, expected["globex"]),
    ]
    assert usage_rows(db, "ingest") == []


# -- cost ---------------------------------------------------------------------------------------


def test_cost_uses_the_price_valid_each_day_and_local_models_are_free(db: str) -> None:
    with connect(db) as conn:
        for day, operation, provider, model, tokens_in, tokens_out in [
            (date(2026, 1, 10), "chat", "openai", "gpt", 1_000_000, 500_000),
            (date(2026, 2, 10), "chat", "openai", "gpt", 1_000_000, 0),
            (date(2026, 2, 10), "ingest", "local", "mini", 3_000_000, 0),
            (date(2026, 2, 10), "query", "openai", "unlisted", 1000, 0),
        ]:
            conn.execute(
                "insert into pgrag.token_usage (tenant_id, day, operation, provider, model, "
                "shard, requests, input_tokens, output_tokens) values ('acme', %s, %s, %s, %s, "
                "0, 1, %s, %s)",
                (day, operation, provider, model, tokens_in, tokens_out),
            )
        conn.execute(
            "insert into pgrag.model_prices (provider, model, valid_from, input_per_million, "
            "output_per_million) values ('openai', 'gpt', '-infinity', 0.15, 0.60), "
            "('openai', 'gpt', '2026-02-01', 0.10, 0.40)"
        )
        costs = {(u.operation, u.model): (u.cost, u.priced) for u in usage_costs(conn)}
        since_feb = {u.model: u.cost for u in usage_costs(conn, since=date(2026, 2, 1))}
        (stats,) = tenant_stats(conn)

    # January at 0.15 + 0.5 x 0.60, February at 0.10.
    assert costs[("chat", "gpt")] == (Decimal("0.55"), True)
    assert costs[("ingest", "mini")] == (Decimal("0"), True)
    assert costs[("query", "unlisted")] == (None, False)
    assert since_feb["gpt"] == Decimal("0.10")
    assert stats.cost == Decimal("0.55") and stats.unpriced_models == ["openai:unlisted"]


# -- pgrag stats and pgrag ask ------------------------------------------------------------------


def chat_completion(text: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "test-chat",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 321, "completion_tokens": 12, "total_tokens": 333},
    }


def test_ask_records_the_chat_tokens_the_endpoint_reports(
    db: str,
    local_embedder: LocalEmbedder,
    httpserver: HTTPServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seed_corpus(db, local_embedder)
    httpserver.expect_request("/v1/chat/completions", method="POST").respond_with_json(
        chat_completion("Port 8443 [Source 1].")
    )
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("OPENAI_BASE_URL", httpserver.url_for("/v1"))

    result = invoke(
        db, "ask", "which port does the widget service use?", "--chat-model", "test-chat"
    )

    assert result.exit_code == 0, result.output
    assert usage_rows(db, "chat") == [("default", "openai", "test-chat", 1, 321, 12, 0)]
    ((_, provider, model, requests, tokens, _, hits),) = usage_rows(db, "query")
    assert (provider, model, requests, hits) == ("local", local_embedder.model_name, 1, 0)
    assert tokens > 2


def test_stats_shows_documents_chunks_tokens_cost_and_hit_rate_per_tenant(
    db: str, local_embedder: LocalEmbedder
) -> None:
    seed_corpus(db, local_embedder)
    with connect(db) as conn:
        conn.execute(
            "update pgrag.documents set status = 'error' where title = 'Gardening handbook'"
        )
        conn.commit()
    for _ in range(3):  # one model call, then two cache hits
        assert invoke(db, "search", "which port does the widget service use?").exit_code == 0
    with connect(db, autocommit=True) as conn:
        record_usage(conn, "default", Usage("chat", "openai", "gpt-4o-mini", 2_000_000, 100_000))
        conn.execute(
            "insert into pgrag.model_prices (provider, model, input_per_million, "
            "output_per_million) values ('openai', 'gpt-4o-mini', 0.15, 0.60)"
        )

    result = invoke(db, "stats", "--json")
    text = invoke(db, "stats", "--tenant", "default")

    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    tenants = {t["tenant_id"]: t for t in data["tenants"]}
    assert set(tenants) == {"default", "other"}
    default = tenants["default"]
    assert default["documents"] == {"error": 1, "ready": 3} and default["document_count"] == 4
    assert default["chunk_count"] == 6 and tenants["other"]["chunk_count"] == 1
    assert default["queue"] is None  # no document queue in this installation
    assert (default["query_embeddings"], default["cache_hits"]) == (1, 2)
    assert default["cache_hit_rate"] == pytest.approx(2 / 3)
    assert (default["chat_input_tokens"], default["chat_output_tokens"]) == (2_000_000, 100_000)
    assert default["cost"] == pytest.approx(0.36)  # 2 x 0.15 + 0.1 x 0.60; local queries free
    assert {u["operation"] for u in data["usage"] if u["tenant_id"] == "default"} == {
        "chat",
        "query",
    }
    assert text.exit_code == 0, text.output
    assert "tenant default" in text.output and "tenant other" not in text.output
    assert "2 from the cache, 1 by the model (67 % hit rate)" in text.output
    assert "cost       0.36" in text.output


def test_stats_shows_the_document_queue_of_each_tenant(db: str) -> None:
    submit_texts(db, "acme", [("a.txt", "First queued note."), ("b.txt", "Second queued note.")])

    result = invoke(db, "stats", "--json")

    assert result.exit_code == 0, result.output
    (acme,) = json.loads(result.output)["tenants"]
    assert acme["tenant_id"] == "acme"
    queue = acme["queue"]
    assert (queue["queued"], queue["processing"], queue["failed"]) == (2, 0, 0)
    assert queue["oldest_queued_seconds"] >= 0


def test_stats_of_an_empty_database_says_there_is_nothing(db: str) -> None:
    result = invoke(db, "stats")
    assert result.exit_code == 3
    assert "no documents, usage or logged searches yet" in result.output
