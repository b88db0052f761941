"""The document queue in SQL: submitting as a tenant (the PostgREST replay of plugins.tenancy),
and the worker's transitions (claim, renew, release, complete, fail) as the owner.

No model is needed here: completion is fed a hand-made staging row. The worker itself, end to
end, is tests/test_worker.py.
"""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from plugins.tenancy import claims_for, request

from pgrag.db import connect, set_request_tenant
from pgrag.ingest import create_stage_table

ROOT = Path(__file__).resolve().parents[1]
DIMS = 384


def submit(db: str, tenant: str, uri: str, content: str | None = "Some text.", **more: Any) -> Any:
    """``public.submit_document`` as the tenant's signed-in user: (document_id, version, status)."""
    args = {"source_uri": uri, "content": content, **more}
    named = ", ".join(f"{k} => %({k})s" for k in args)
    with request(db, "authenticated", claims_for(tenant)) as conn:
        return conn.execute(f"select * from public.submit_document({named})", args).fetchone()


def claim(conn: psycopg.Connection[Any], worker: str, n: int = 10, lease: str = "30 s") -> list:
    return conn.execute(
        "select tenant_id, document_id, version, source_uri, content, attempts "
        "from pgrag.claim_documents(%s, %s, %s::interval)",
        (worker, n, lease),
    ).fetchall()


def queue_row(conn: psycopg.Connection[Any], document_id: int) -> Any:
    return conn.execute(
        "select q.state, q.version, q.attempts, q.lease_owner, q.last_error, d.status, d.error "
        "from pgrag.documents d left join pgrag.document_queue q "
        "on q.tenant_id = d.tenant_id and q.document_id = d.id where d.id = %s",
        (document_id,),
    ).fetchone()


def fail(conn: psycopg.Connection[Any], tenant: str, worker: str, doc: int, version: int,
         retryable: bool = True) -> Any:  # fmt: skip
    with conn.transaction():
        set_request_tenant(conn, tenant)
        return conn.execute(
            "select state, attempts, next_attempt_at - now() from pgrag.fail_attempts("
            "%s, array[%s]::int8[], array[%s]::int4[], array['boom'], array[%s])",
            (worker, doc, version, retryable),
        ).fetchone()


@pytest.fixture
def owner(db: str, authenticator: str) -> Any:
    """The owner's connection (the worker's role), autocommit."""
    with connect(db, autocommit=True) as conn:
        yield conn


# -- submitting ------------------------------------------------------------------------------------


def test_a_tenant_submits_inline_content_and_it_is_queued_as_a_pending_document(
    db: str, owner: psycopg.Connection[Any]
) -> None:
    doc, version, status = submit(db, "acme", "notes/a.md", "# A\n\nText.", source_type="markdown")

    assert (version, status) == (1, "pending")
    assert queue_row(owner, doc) == ("queued", 1, 0, None, None, "pending", None)
    assert owner.execute(
        "select tenant_id, source_type, content, metadata from pgrag.document_queue"
    ).fetchall() == [("acme", "markdown", "# A\n\nText.", {})]


def test_resubmitting_makes_a_new_version_of_the_same_queue_row(
    db: str, owner: psycopg.Connection[Any]
) -> None:
    first = submit(db, "acme", "notes/a.md", "first")
    second = submit(db, "acme", "notes/a.md", "second", metadata='{"team": "ops"}')

    assert first[0] == second[0] and (first[1], second[1]) == (1, 2)
    assert owner.execute("select content, metadata from pgrag.document_queue").fetchall() == [
        ("second", {"team": "ops"})
    ]


def test_a_ready_document_resubmitted_stays_ready_meanwhile(
    db: str, owner: psycopg.Connection[Any]
) -> None:
    doc = submit(db, "acme", "notes/a.md")[0]
    owner.execute("update pgrag.documents set status = 'ready' where id = %s", (doc,))
    owner.execute("delete from pgrag.document_queue")

    assert submit(db, "acme", "notes/a.md", "new text")[2] == "ready"
    assert queue_row(owner, doc)[:2] == ("queued", 1) and queue_row(owner, doc)[5] == "ready"


def test_a_url_without_content_is_queued_for_the_worker_to_fetch(
    db: str, owner: psycopg.Connection[Any]
) -> None:
    doc = submit(db, "acme", "https://example.com/guide.html", None)[0]

    assert owner.execute(
        "select q.source_type, q.content, d.source_type from pgrag.document_queue q "
        "join pgrag.documents d on d.id = q.document_id where d.id = %s",
        (doc,),
    ).fetchone() == ("url", None, "url")


@pytest.mark.parametrize(
    ("args", "argument"),
    [
        ({"source_uri": "  "}, "source_uri"),
        ({"source_uri": "x" * 2049}, "source_uri"),
        ({"source_uri": "file:///etc/passwd", "content": None}, "source_uri"),
        ({"source_uri": "a", "content": None, "source_type": "text"}, "source_type"),
        ({"source_uri": "a", "source_type": "pdf"}, "source_type"),
        ({"source_uri": "a", "title": "t" * 1001}, "title"),
        ({"source_uri": "a", "metadata": '["not", "an", "object"]'}, "metadata"),
        ({"source_uri": "a", "metadata": '{"k": "' + "v" * 10_000 + '"}'}, "metadata"),
    ],
    ids=[
        "blank-uri",
        "long-uri",
        "file-url",
        "text-without-content",
        "pdf-inline",
        "long-title",
        "metadata-array",
        "big-metadata",
    ],
)
def test_submit_refuses_arguments_out_of_range_naming_them(
    db: str, authenticator: str, args: dict[str, Any], argument: str
) -> None:
    args = {"content": "Some text.", **args}
    uri = args.pop("source_uri")
    with pytest.raises(psycopg.errors.InvalidParameterValue) as raised:
        submit(db, "acme", uri, **args)
    assert raised.value.diag.message_primary.startswith(argument)


def test_inline_content_above_the_operators_limit_is_refused(
    db: str, owner: psycopg.Connection[Any]
) -> None:
    owner.execute("update pgrag.queue_settings set max_content_bytes = 100")
    submit(db, "acme", "small", "x" * 100)
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="content must have at most 100"):
        submit(db, "acme", "big", "é" * 51)  # 102 bytes in UTF-8


def test_submit_without_a_tenant_claim_is_refused(db: str, authenticator: str) -> None:
    with (
        pytest.raises(psycopg.errors.InvalidParameterValue, match="needs a tenant"),
        request(db, "authenticated", {"role": "authenticated"}) as conn,
    ):
        conn.execute("select public.submit_document('a', 'text')")


def test_anon_cannot_submit(db: str, authenticator: str) -> None:
    with (
        pytest.raises(psycopg.errors.InsufficientPrivilege),
        request(db, "anon", claims_for("acme")) as conn,
    ):
        conn.execute("select public.submit_document('a', 'text')")


def test_a_full_queue_refuses_new_documents_but_not_a_resubmission(
    db: str, owner: psycopg.Connection[Any]
) -> None:
    owner.execute("update pgrag.queue_settings set max_queued_per_tenant = 2")
    submit(db, "acme", "a")
    submit(db, "acme", "b")

    with pytest.raises(psycopg.Error) as raised:
        submit(db, "acme", "c")
    assert raised.value.sqlstate == "PR010"
    assert submit(db, "acme", "b", "newer")[1] == 2  # the same document again: allowed
    assert submit(db, "globex", "c")[1] == 1  # another tenant's queue is its own


# -- what a tenant may not do ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "statement",
    [
        "update pgrag.document_queue set state = 'processing', lease_owner = 'me', "
        "lease_expires_at = now() + interval '1 day'",
        "update pgrag.document_queue set attempts = 0",
        "update pgrag.document_queue set next_attempt_at = now()",
        "delete from pgrag.document_queue",
        "select * from pgrag.claim_documents('me', 10, '1 minute')",
        "select pgrag.release_documents('someone')",
        "select pgrag.renew_leases('someone', '1 minute')",
    ],
    ids=["lease", "attempts", "retry-time", "delete", "claim", "release", "renew"],
)
def test_a_tenant_cannot_change_the_workers_state_of_its_queue(
    db: str, authenticator: str, statement: str
) -> None:
    submit(db, "acme", "a")
    with (
        pytest.raises(psycopg.errors.InsufficientPrivilege),
        request(db, "authenticated", claims_for("acme")) as conn,
    ):
        conn.execute(statement)


def test_a_direct_write_of_the_content_is_a_resubmission(
    db: str, owner: psycopg.Connection[Any]
) -> None:
    doc = submit(db, "acme", "a")[0]
    claim(owner, "w1")
    with request(db, "authenticated", claims_for("acme")) as conn:
        conn.execute("update pgrag.document_queue set content = 'edited'")

    assert queue_row(owner, doc)[:4] == ("queued", 2, 0, None)


def test_a_tenant_reads_only_its_own_queue(db: str, owner: psycopg.Connection[Any]) -> None:
    acme = submit(db, "acme", "a")[0]
    submit(db, "globex", "g1")
    submit(db, "globex", "g2")

    with request(db, "authenticated", claims_for("acme")) as conn:
        assert conn.execute("select tenant_id, queued from pgrag.queue_status").fetchall() == [
            ("acme", 1)
        ]
        assert conn.execute("select queued, processing from public.queue_status()").fetchall() == [
            (1, 0)
        ]
        assert [r[0] for r in conn.execute("select * from public.document_status()")] == [acme]
        assert conn.execute("select count(*) from pgrag.document_queue").fetchone() == (1,)
    assert dict(owner.execute("select tenant_id, queued from pgrag.queue_status")) == {
        "acme": 1,
        "globex": 2,
    }


def test_document_status_reports_the_queue_and_the_document(
    db: str, owner: psycopg.Connection[Any]
) -> None:
    doc = submit(db, "acme", "a")[0]
    claim(owner, "w1")
    fail(owner, "acme", "w1", doc, 1)

    with request(db, "authenticated", claims_for("acme")) as conn:
        row = conn.execute(
            "select document_id, status, queue_state, attempts, last_error "
            "from public.document_status(source_uris => array['a'])"
        ).fetchone()
    assert row == (doc, "pending", "queued", 1, "boom")


# -- claiming --------------------------------------------------------------------------------------


def test_concurrent_claims_never_share_a_document(db: str, owner: psycopg.Connection[Any]) -> None:
    for i in range(6):
        submit(db, "acme", f"doc-{i}")
    with connect(db) as first, connect(db) as second:
        mine = claim(first, "w1", 4)  # its transaction stays open: the rows stay locked
        theirs = claim(second, "w2", 4)
        first.commit()
        second.commit()

    assert len(mine) == 4 and len(theirs) == 2
    assert not {r[1] for r in mine} & {r[1] for r in theirs}


def test_claims_share_the_queue_between_tenants(db: str, owner: psycopg.Connection[Any]) -> None:
    for i in range(20):
        submit(db, "big", f"doc-{i}")
    submit(db, "small", "only")

    tenants = [r[0] for r in claim(owner, "w1", 4)]

    assert tenants.count("small") == 1 and tenants.count("big") == 3


def test_a_claim_makes_pending_documents_processing_and_counts_an_attempt(
    db: str, owner: psycopg.Connection[Any]
) -> None:
    doc = submit(db, "acme", "a", "the text")[0]

    assert claim(owner, "w1") == [("acme", doc, 1, "a", "the text", 1)]
    assert queue_row(owner, doc)[:4] == ("processing", 1, 1, "w1")
    assert queue_row(owner, doc)[5] == "processing"
    assert claim(owner, "w2") == []


def test_claim_arguments_are_checked(owner: psycopg.Connection[Any]) -> None:
    for args, argument in (
        (("w", 0, "1 minute"), "n must be"),
        (("w", 1001, "1 minute"), "n must be"),
        (("w", 1, "2 days"), "lease must be"),
        (("", 1, "1 minute"), "worker_id must be"),
    ):
        with pytest.raises(psycopg.errors.InvalidParameterValue, match=argument):
            owner.execute("select * from pgrag.claim_documents(%s, %s, %s::interval)", args)


# -- retries, leases, release ----------------------------------------------------------------------


def test_a_failed_attempt_is_retried_later_with_a_growing_delay_then_fails_for_good(
    db: str, owner: psycopg.Connection[Any]
) -> None:
    owner.execute(
        "update pgrag.queue_settings set max_attempts = 3, retry_delay = '1 s', "
        "retry_delay_max = '10 s'"
    )
    doc = submit(db, "acme", "a")[0]
    delays = []
    for _ in range(2):
        owner.execute("update pgrag.document_queue set next_attempt_at = now()")
        claim(owner, "w1")
        state, _, delay = fail(owner, "acme", "w1", doc, 1)
        assert state == "queued"
        delays.append(delay.total_seconds())
        assert queue_row(owner, doc)[5] == "pending"  # waits, not searchable yet
    owner.execute("update pgrag.document_queue set next_attempt_at = now()")
    claim(owner, "w1")
    final = fail(owner, "acme", "w1", doc, 1)

    assert 0.7 <= delays[0] <= 1.3 and 1.4 <= delays[1] <= 2.6  # 1 s, then 2 s (+-25 %)
    assert final[:2] == ("failed", 3)
    assert queue_row(owner, doc) == ("failed", 1, 3, None, "boom", "error", "boom")
    assert claim(owner, "w1") == []  # never retried again


def test_a_failure_no_retry_can_fix_ends_in_error_at_once(
    db: str, owner: psycopg.Connection[Any]
) -> None:
    doc = submit(db, "acme", "a")[0]
    claim(owner, "w1")

    assert fail(owner, "acme", "w1", doc, 1, retryable=False)[:2] == ("failed", 1)
    assert queue_row(owner, doc)[5:] == ("error", "boom")


def test_an_expired_lease_returns_the_document_to_the_queue_as_an_attempt(
    db: str, owner: psycopg.Connection[Any]
) -> None:
    doc = submit(db, "acme", "a")[0]
    claim(owner, "killed-worker", lease="1 s")
    assert claim(owner, "w2") == []
    time.sleep(1.1)

    assert [r[1:] for r in claim(owner, "w2")] == [(doc, 1, "a", "Some text.", 2)]
    assert queue_row(owner, doc)[3] == "w2"


def test_a_lease_that_keeps_expiring_ends_the_document_in_error(
    db: str, owner: psycopg.Connection[Any]
) -> None:
    owner.execute("update pgrag.queue_settings set max_attempts = 2")
    doc = submit(db, "acme", "a")[0]
    for worker in ("w1", "w2"):
        assert claim(owner, worker, lease="1 s")
        time.sleep(1.1)

    assert claim(owner, "w3") == []
    state, _, attempts, _, error, status, _ = queue_row(owner, doc)
    assert (state, attempts, status) == ("failed", 2, "error")
    assert error and error.startswith("gave up after 2 attempts")


def test_renewing_extends_only_this_workers_leases(db: str, owner: psycopg.Connection[Any]) -> None:
    submit(db, "acme", "a")
    submit(db, "acme", "b")
    claim(owner, "w1", 1, "2 s")
    claim(owner, "w2", 1, "2 s")

    assert owner.execute("select pgrag.renew_leases('w1', '1 hour')").fetchone() == (1,)
    leases = dict(
        owner.execute(
            "select lease_owner, lease_expires_at > now() + interval '1 minute' "
            "from pgrag.document_queue"
        ).fetchall()
    )
    assert leases == {"w1": True, "w2": False}


def test_releasing_requeues_at_once_and_gives_the_attempt_back(
    db: str, owner: psycopg.Connection[Any]
) -> None:
    doc = submit(db, "acme", "a")[0]
    claim(owner, "w1")

    assert owner.execute("select pgrag.release_documents('w1')").fetchone() == (1,)
    assert queue_row(owner, doc)[:4] == ("queued", 1, 0, None)
    assert queue_row(owner, doc)[5] == "pending"
    assert claim(owner, "w2")[0][1] == doc


# -- completing ------------------------------------------------------------------------------------


def stage_one_chunk(conn: psycopg.Connection[Any], doc: int, text: str) -> None:
    create_stage_table(conn)
    conn.execute(
        "insert into pg_temp.pgrag_stage (document_id, chunk_index, content, embedding, "
        "heading_path, language, token_count, content_sha256, overlap_chars, metadata) "
        "values (%s, 0, %s, %s::vector, '{}', 'english', 3, md5(%s), 0, '{}')",
        (doc, text, "[" + ",".join(["0.1"] * DIMS) + "]", text),
    )


def complete(conn: psycopg.Connection[Any], worker: str, doc: int, version: int) -> Any:
    with conn.transaction():
        set_request_tenant(conn, "acme")
        return conn.execute(
            "select document_id, completed from pgrag.complete_documents(%s, "
            "'pg_temp.pgrag_stage', array[%s]::int8[], array[%s]::int4[], array['T'], "
            "array['text'], array['sha'], array['{}'::jsonb], array[1], 'm')",
            (worker, doc, version),
        ).fetchall()


def test_completion_swaps_the_chunks_in_and_the_document_leaves_the_queue(
    db: str, owner: psycopg.Connection[Any]
) -> None:
    doc = submit(db, "acme", "a", "the text")[0]
    claim(owner, "w1")
    stage_one_chunk(owner, doc, "the text")

    assert complete(owner, "w1", doc, 1) == [(doc, True)]
    assert queue_row(owner, doc)[0] is None  # no queue row left
    assert owner.execute(
        "select d.status, d.chunk_count, c.content from pgrag.documents d "
        "join pgrag.chunks c on c.document_id = d.id where d.id = %s",
        (doc,),
    ).fetchall() == [("ready", 1, "the text")]


def test_completion_of_an_older_version_swaps_nothing(
    db: str, owner: psycopg.Connection[Any]
) -> None:
    doc = submit(db, "acme", "a", "old text")[0]
    claim(owner, "w1")
    submit(db, "acme", "a", "new text")  # while w1 works on version 1
    stage_one_chunk(owner, doc, "old text")

    assert complete(owner, "w1", doc, 1) == [(doc, False)]
    assert owner.execute("select count(*) from pgrag.chunks").fetchone() == (0,)
    assert owner.execute("select count(*) from pg_temp.pgrag_stage").fetchone() == (0,)
    assert queue_row(owner, doc)[:3] == ("queued", 2, 0)
    assert claim(owner, "w2")[0][4] == "new text"


def test_completion_by_a_worker_whose_lease_was_taken_over_swaps_nothing(
    db: str, owner: psycopg.Connection[Any]
) -> None:
    doc = submit(db, "acme", "a", "the text")[0]
    claim(owner, "slow", lease="1 s")
    time.sleep(1.1)
    claim(owner, "w2")
    stage_one_chunk(owner, doc, "the text")

    assert complete(owner, "slow", doc, 1) == [(doc, False)]
    assert queue_row(owner, doc)[:4] == ("processing", 1, 2, "w2")


def test_deleting_a_queued_document_removes_its_queue_row(
    db: str, owner: psycopg.Connection[Any]
) -> None:
    submit(db, "acme", "a")
    with request(db, "authenticated", claims_for("acme")) as conn:
        conn.execute("select * from pgrag.delete_documents(source_uris => array['a'])")

    assert owner.execute("select count(*) from pgrag.document_queue").fetchone() == (0,)


# -- waking workers --------------------------------------------------------------------------------


def test_a_submission_notifies_waiting_workers_with_an_empty_payload(
    db: str, owner: psycopg.Connection[Any]
) -> None:
    owner.execute("listen pgrag_queue")
    thread = threading.Thread(target=submit, args=(db, "acme", "a"))
    thread.start()

    got = list(owner.notifies(timeout=10, stop_after=1))
    thread.join()
    assert [(n.channel, n.payload) for n in got] == [("pgrag_queue", "")]


def test_next_claim_at_says_when_a_retry_comes_due(db: str, owner: psycopg.Connection[Any]) -> None:
    assert owner.execute("select pgrag.next_claim_at()").fetchone() == (None,)
    doc = submit(db, "acme", "a")[0]
    claim(owner, "w1")
    fail(owner, "acme", "w1", doc, 1)

    row = owner.execute(
        "select pgrag.next_claim_at() = next_attempt_at, next_attempt_at > now() "
        "from pgrag.document_queue"
    ).fetchone()
    assert row == (True, True)


# -- the lifecycle is SQL --------------------------------------------------------------------------


def test_no_python_code_writes_documents_or_the_queue_but_through_sql_functions() -> None:
    writes = re.compile(
        r"(insert\s+into|update|delete\s+from)\s+pgrag\.(documents|document_queue)\b", re.I
    )
    offenders = {
        str(path.relative_to(ROOT))
        for path in (ROOT / "pgrag").rglob("*.py")
        if writes.search(path.read_text())
    }
    # --switch-model's "every document pending" is the model switch (made
    # a SQL function by the re-embedding work); nothing else.
    assert offenders <= {"pgrag/ingest/run.py"}
    run = (ROOT / "pgrag" / "ingest" / "run.py").read_text()
    assert len(writes.findall(run)) == 1 and "def _switch_model" in run
