"""`pgrag stats` in words: counts with their noun in the right number, the queue without
``None``; ``--json`` keeps the raw figures (numbers, ISO timestamps, null)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from click.testing import CliRunner
from plugins.queue import submit_texts

from pgrag.cli import main
from pgrag.db import connect
from pgrag.usage import Usage, record_usage


def invoke(dsn: str, *args: str) -> Any:
    return CliRunner().invoke(main, ["--dsn", dsn, "stats", *args])


def test_one_call_is_one_call_and_two_are_two_calls(db: str) -> None:
    with connect(db, autocommit=True) as conn:
        record_usage(conn, "acme", Usage("chat", "openai", "one-model", 10, 1))
        for _ in range(2):
            record_usage(conn, "acme", Usage("chat", "openai", "two-model", 10, 1))

    result = invoke(db)

    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    (one,) = [line for line in lines if "openai:one-model " in line]
    (two,) = [line for line in lines if "openai:two-model " in line]
    assert "1 call," in one and "calls" not in one
    assert "2 calls," in two


def test_the_queue_reads_as_words_and_names_no_missing_age(db: str) -> None:
    submit_texts(db, "acme", [("a.txt", "First queued note."), ("b.txt", "Second one.")])

    text = invoke(db)
    data = json.loads(invoke(db, "--json").output)

    assert text.exit_code == 0, text.output
    (queue,) = [line.strip() for line in text.output.splitlines() if "queue" in line]
    assert queue.startswith("queue      2 queued, 0 processing, 0 failed, oldest waiting ")
    assert queue.endswith(" s")
    assert "None" not in text.output and "_" not in queue
    raw = data["tenants"][0]["queue"]
    assert (raw["queued"], raw["failed"]) == (2, 0)
    assert isinstance(raw["oldest_queued_seconds"], float)
    datetime.fromisoformat(raw["oldest_queued_at"])


def test_an_empty_queue_has_no_oldest_entry(db: str) -> None:
    submit_texts(db, "acme", [("a.txt", "Queued, then failed.")])
    with connect(db) as conn:
        conn.execute("update pgrag.document_queue set state = 'failed'")
        conn.commit()

    result = invoke(db)

    (queue,) = [line.strip() for line in result.output.splitlines() if "queue" in line]
    assert queue == "queue      0 queued, 0 processing, 1 failed"
    assert (
        json.loads(invoke(db, "--json").output)["tenants"][0]["queue"]["oldest_queued_at"] is None
    )
